//! Header section: lock, barrier, collectives (seed 004).

use super::{ctx_ref, fh_ctx_t, out, OK};
use crate::api::sync::{barrier, coll, lock::Lock};
use crate::api::Context;
use crate::runtime::error::Result;
use crate::runtime::error::Status;
use std::os::raw::{c_int, c_void};

/// `flags` for the split-phase barrier: this rank matches any id.
pub const FH_BARRIER_ANONYMOUS: c_int = 1;

/// Element type of a reduction (an int; the FH_INT32 ... FH_CDOUBLE values). FH_CFLOAT
/// and FH_CDOUBLE are complex numbers (real, imaginary) of two floats or doubles:
/// Fortran's complex(4) and complex(8).
pub type fh_dtype_t = c_int;
pub const FH_INT32: fh_dtype_t = 0;
pub const FH_INT64: fh_dtype_t = 1;
pub const FH_UINT32: fh_dtype_t = 2;
pub const FH_UINT64: fh_dtype_t = 3;
pub const FH_FLOAT: fh_dtype_t = 4;
pub const FH_DOUBLE: fh_dtype_t = 5;
pub const FH_INT8: fh_dtype_t = 6;
pub const FH_INT16: fh_dtype_t = 7;
pub const FH_UINT8: fh_dtype_t = 8;
pub const FH_UINT16: fh_dtype_t = 9;
pub const FH_CFLOAT: fh_dtype_t = 10;
pub const FH_CDOUBLE: fh_dtype_t = 11;

/// Reduction operation (an int; FH_SUM ... FH_LOR). Bitwise (FH_BAND, FH_BOR,
/// FH_BXOR) and logical (FH_LAND, FH_LOR: nonzero is true, the result 1 or 0, as
/// Fortran's logicals) ones on integers only; complex types take FH_SUM and FH_PROD.
/// Operands combine in rank order (lower ranks on the left, grouped along the
/// tree), so a result depends only on the number of ranks: the same on every run.
pub type fh_op_t = c_int;
pub const FH_SUM: fh_op_t = 0;
pub const FH_PROD: fh_op_t = 1;
pub const FH_MIN: fh_op_t = 2;
pub const FH_MAX: fh_op_t = 3;
pub const FH_BAND: fh_op_t = 4;
pub const FH_BOR: fh_op_t = 5;
pub const FH_BXOR: fh_op_t = 6;
pub const FH_LAND: fh_op_t = 7;
pub const FH_LOR: fh_op_t = 8;

// Literals above (cbindgen prints literals only); they must equal the internal values.
const _: () = assert!(
    FH_BARRIER_ANONYMOUS == barrier::ANONYMOUS
        && FH_INT32 == coll::INT32
        && FH_INT64 == coll::INT64
        && FH_UINT32 == coll::UINT32
        && FH_UINT64 == coll::UINT64
        && FH_FLOAT == coll::FLOAT
        && FH_DOUBLE == coll::DOUBLE
        && FH_INT8 == coll::INT8
        && FH_INT16 == coll::INT16
        && FH_UINT8 == coll::UINT8
        && FH_UINT16 == coll::UINT16
        && FH_CFLOAT == coll::CFLOAT
        && FH_CDOUBLE == coll::CDOUBLE
        && FH_SUM == coll::SUM
        && FH_PROD == coll::PROD
        && FH_MIN == coll::MIN
        && FH_MAX == coll::MAX
        && FH_BAND == coll::BAND
        && FH_BOR == coll::BOR
        && FH_BXOR == coll::BXOR
        && FH_LAND == coll::LAND
        && FH_LOR == coll::LOR
);

/// Opaque distributed lock (`fh_lock_t *`): a generation-checked table entry
/// (`super::handle`); after `fh_lock_destroy` the handle is stale (FH_ERR_STATE).
pub struct fh_lock_t {
    _opaque: [u8; 0],
}

/// A lock and the context it was created on.
struct LockObj {
    ctx: *mut fh_ctx_t,
    lock: Lock,
}

// SAFETY: `ctx` is a handle value (an integer), not dereferenced; Lock is Sync.
unsafe impl Send for LockObj {}
// SAFETY: as above.
unsafe impl Sync for LockObj {}

static LOCKS: super::handle::Table<LockObj> =
    super::handle::Table::new("fh_lock_t", 2, "fh_lock_destroy");

/// # Safety
/// As `ctx_ref`: no destroy of the lock or finalize of its context concurrently.
unsafe fn lock_ref<'a>(p: *const fh_lock_t) -> Result<(&'a Context, &'a Lock)> {
    if p.is_null() {
        crate::bail!(InvalidArg, "lock is NULL (create one with fh_lock_create)");
    }
    let l = LOCKS.get(p as usize)?;
    // SAFETY: forwarded contract; ctx_ref validates the context handle.
    let c = unsafe { ctx_ref(l.ctx)? };
    Ok((c, &l.lock))
}

/// Collective over `ctx`: create a distributed MCS queue lock (seed 004 §5.3) whose
/// tail word lives at `home_rank` (every rank must pass the same home and create
/// locks in the same order; a disagreement is FH_ERR_INVALID_ARG on every rank). At
/// most 128 locks per context at once (FH_ERR_NO_RESOURCE beyond).
/// Acquiring costs one fetch&write at the home plus, when queued, one remote write to
/// the predecessor; a waiter then polls a word in its *own* memory, and the releaser
/// writes it: the home's CPU does no work. Grants are FIFO.
/// Threads: any thread; collective, so one thread per rank. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_lock_create(
    ctx: *mut fh_ctx_t,
    home_rank: c_int,
    lock_out: *mut *mut fh_lock_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if lock_out.is_null() {
            crate::bail!(InvalidArg, "lock_out is NULL");
        }
        let l = c.lock_create(home_rank as i64)?;
        let p = LOCKS.insert(Box::new(LockObj { ctx, lock: l }))? as *mut fh_lock_t;
        // SAFETY: checked non-null above.
        unsafe { out(lock_out, p, "lock_out")? };
        OK
    })
}

/// Block until this rank holds the lock (progressing the library meanwhile).
/// One thread of a rank holds the lock at a time; other threads of the same rank
/// wait for it before joining the queue. The lock is not recursive: a thread that
/// already holds it (or waits for it) gets FH_ERR_STATE.
/// Threads: any thread, concurrently with other calls. Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_lock_acquire(lock: *mut fh_lock_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, l) = unsafe { lock_ref(lock)? };
        c.lock_acquire(l)?;
        OK
    })
}

/// Take the lock if it is free right now (one compare&swap at the home): FH_OK, or
/// FH_NOT_READY if it is held or queued for (by this thread too).
/// Threads: any thread, concurrently with other calls. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_lock_try(lock: *mut fh_lock_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, l) = unsafe { lock_ref(lock)? };
        Ok(if c.lock_try(l)? { Status::Ok } else { Status::NotReady } as c_int)
    })
}

/// Release the lock this rank holds (FH_ERR_STATE if it does not); hands it to the
/// next waiter in FIFO order.
/// Threads: the rank's holding thread or another thread of the same rank. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_lock_release(lock: *mut fh_lock_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, l) = unsafe { lock_ref(lock)? };
        c.lock_release(l)?;
        OK
    })
}

/// Collective: destroy the lock once every rank has called this. FH_ERR_STATE if this
/// rank holds it (the handle stays valid then: release, then destroy). Other ranks
/// may still hold the lock while one calls this, as long as they release it before
/// their own call (as with MPI_Win_unlock before MPI_Win_free). At the home,
/// FH_ERR_STATE also if some rank still held or wanted the lock when every rank had
/// arrived, which only another thread's acquire can cause (the lock is destroyed all
/// the same: every later call on the handle, a holder's release included, is
/// FH_ERR_STATE).
/// Threads: one thread per rank; not concurrently with other calls on this lock. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_lock_destroy(lock: *mut fh_lock_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, l) = unsafe { lock_ref(lock)? };
        let (gone, r) = c.lock_destroy(l);
        if gone {
            // Every later use of the handle is FH_ERR_STATE.
            drop(LOCKS.remove(lock as usize)?);
        }
        r?;
        OK
    })
}

/// Collective: return when every rank of the context has entered, serving active
/// messages while waiting. MPI_Barrier serves the library too (FH_MPI_PROGRESS), so
/// either may be used between phases; this one is split-phase capable and, on one
/// node, needs no MPI at all.
/// Algorithm: FH_BARRIER (node by default, dissemination, tree or mpi); same as
/// fh_barrier_notify + fh_barrier_wait with FH_BARRIER_ANONYMOUS.
/// Threads: one thread per rank at a time. Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_barrier(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.barrier()?;
        OK
    })
}

/// Split-phase barrier, first half: announce arrival with `id` (or with `flags` =
/// FH_BARRIER_ANONYMOUS, matching any id) and return at once. Do other work, then
/// fh_barrier_wait or fh_barrier_try with the same id and flags. Flags are one-sided
/// writes into the peers' memory; the library (or its progress thread,
/// FH_PROGRESS=thread) forwards them, so a rank computing between notify and wait
/// delays the others only until it arrived.
/// FH_ERR_STATE if the previous barrier was not waited for.
/// Threads: one thread per rank at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_barrier_notify(ctx: *mut fh_ctx_t, id: i64, flags: c_int) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.barrier_notify(id, flags)?;
        OK
    })
}

/// Split-phase barrier, second half: block until every rank notified. Returns
/// FH_ERR_BARRIER_MISMATCH on *every* rank if two ranks notified different ids (the
/// barrier still synchronised; the next one works), or on this rank if `id`/`flags`
/// differ from its notify's.
/// Threads: one thread per rank at a time. Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_barrier_wait(ctx: *mut fh_ctx_t, id: i64, flags: c_int) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.barrier_wait(id, flags)?;
        OK
    })
}

/// Split-phase barrier, non-blocking second half: FH_OK (complete, as fh_barrier_wait
/// would return), FH_NOT_READY (call again), or an error as for fh_barrier_wait.
/// Threads: one thread per rank at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_barrier_try(ctx: *mut fh_ctx_t, id: i64, flags: c_int) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        crate::api::am::check_not_in_handler("fh_barrier_try")?;
        let done = c.barrier_try(id, flags)?;
        if !done {
            // Every 32nd call only: an idle poll yields the CPU when ranks outnumber
            // cores, which would eat the computation this call overlaps.
            c.maybe_poll_idle();
            c.run_idle_hooks();
        }
        Ok(if done { Status::Ok } else { Status::NotReady } as c_int)
    })
}

/// Collective: copy `nbytes` of `buf` at `root` into `buf` on every rank (0 to any
/// size). On a job whose ranks all share one node (FH_SHM=1), up to 4 KiB move
/// through the node-shared mapping: the root copies buf once and returns (it may run
/// up to 64 broadcasts ahead of the slowest rank), the others copy from there.
/// Larger messages, or other jobs, are pipelined in chunks down seed 004's
/// postal-model optimal tree (FH_BCAST_LAMBDA). All ranks pass the same root and
/// nbytes, and call the collectives of a context in the same order.
/// Mismatched arguments: every chunk carries the call's number and arguments. A rank
/// that receives data (every rank but the root) checks them and returns
/// FH_ERR_INVALID_ARG naming both argument sets, and so do the ranks below it in the
/// tree; nobody hangs, and the next collective works. The root only sends: it
/// returns FH_ERR_INVALID_ARG if another rank's chunks of this call are already in
/// its inbox when it ends (two ranks that both took themselves for the root, with more
/// than a few chunks), otherwise FH_OK, and the mismatch is reported on stderr and
/// by fh_poll once its next collective meets the leftover chunks.
/// Errors: FH_ERR_BAD_RANK (root out of range: this rank still takes part, with rank 0
/// standing in for the root, so the call fails as for mismatched arguments and nobody
/// waits for it), FH_ERR_INVALID_ARG (NULL buf with nbytes > 0: the ranks that would
/// receive the data through this one return FH_ERR_INVALID_ARG too; others may return
/// FH_OK), FH_ERR_NO_RESOURCE (no sync area: FH_HEAP_SIZE too small).
/// Threads: one thread per context at a time (FH_ERR_STATE otherwise). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_broadcast(
    ctx: *mut fh_ctx_t,
    root: c_int,
    buf: *mut c_void,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.broadcast(root as i64, buf as usize, nbytes)?;
        OK
    })
}

/// Collective: combine `count` elements of `src` from every rank with `op` into `dst`
/// at `root` (`dst` is not touched elsewhere and may be NULL there). Floating-point
/// results are combined in rank order ((r0 op r1) op (r2 op r3) ...), so they depend
/// only on the number of ranks, never on the root or on timing. `src` and `dst` may
/// be the same buffer (in place). On a job whose ranks all share one node
/// (FH_SHM=1), reductions go through the node-shared mapping: up to 4 KiB every rank
/// writes its operand once and the ranks that need the result combine in the same
/// order; larger ones move in 256 KiB windows, rank i combining the i-th slice of
/// each window (when FH_HEAP_SIZE is at least 4 times the synchronisation area,
/// about 1.5 MiB; otherwise the trees). There every rank, not only those the data
/// reaches, returns FH_ERR_INVALID_ARG for mismatched arguments.
/// Mismatched arguments (count, dt, op, root) and invalid ones on some ranks: the
/// data of every rank travels to rank 0 and on to the root, and a rank that finds a
/// mismatch sends an error on instead, so the root and every rank on the way return
/// FH_ERR_INVALID_ARG; a rank whose data only leaves it may return FH_OK. Nobody
/// hangs; the next collective works. A root out of range is FH_ERR_BAD_RANK on that
/// rank, which still takes part (rank 0 standing in for the root, moving no data), so
/// the others fail as for mismatched arguments instead of waiting for it.
/// Threads: one thread per context at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_reduce(
    ctx: *mut fh_ctx_t,
    root: c_int,
    src: *const c_void,
    dst: *mut c_void,
    count: usize,
    dt: fh_dtype_t,
    op: fh_op_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.reduce(root as i64, src as usize, dst as usize, count, dt, op)?;
        OK
    })
}

/// Collective: as fh_reduce, with the result in `dst` on every rank (through the
/// node-shared mapping on one node, else by recursive doubling in the same rank
/// order, with the part past one collective chunk reduced to rank 0 and broadcast),
/// bit-identical on all ranks; `src` and `dst` may be the same buffer. Mismatched
/// arguments (count, dt, op) or invalid ones on any rank: every rank returns
/// FH_ERR_INVALID_ARG (the finding reaches everyone), and the next collective works.
/// Threads: one thread per context at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_allreduce(
    ctx: *mut fh_ctx_t,
    src: *const c_void,
    dst: *mut c_void,
    count: usize,
    dt: fh_dtype_t,
    op: fh_op_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.allreduce(src as usize, dst as usize, count, dt, op)?;
        OK
    })
}

/// A user-defined reduction for fh_reduce_fn / fh_allreduce_fn: combine `count`
/// elements, `inout[i] = inout[i] op in[i]`, where `inout` holds the lower ranks'
/// partial result (the left operand) and `in` the higher ranks'. `user` is the
/// pointer given to the call. It runs inside the collective on any rank, on chunks of
/// the arrays (`count` may be less than the call's); it must not call firehose.
pub type fh_reduce_fn_t = Option<
    unsafe extern "C" fn(inout: *mut c_void, input: *const c_void, count: usize, user: *mut c_void),
>;

/// Collective: as fh_reduce, for elements of `elem_size` bytes (1 up to the size of
/// a collective chunk, which is 1 KiB to 64 KiB, at least 1 KiB) combined by the caller's `fn_` instead of a built-in
/// operation: Fortran's CO_REDUCE, character MIN/MAX, reductions on structures. The
/// operands combine along the same rank-ordered tree as fh_reduce's ((r0 op r1) op
/// (r2 op r3) ...), so with an associative `fn_` the result depends only on the number
/// of ranks: the same on every run and every root. Every rank passes the same count,
/// elem_size and an equivalent function (a different total size is detected like a
/// count mismatch of fh_reduce; the function itself cannot be compared).
/// Errors: as fh_reduce (on every rank); FH_ERR_INVALID_ARG also for a NULL fn_, or
/// elem_size 0 or larger than a chunk, on any rank.
/// Threads: one thread per context at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_reduce_fn(
    ctx: *mut fh_ctx_t,
    root: c_int,
    src: *const c_void,
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    fn_: fh_reduce_fn_t,
    user: *mut c_void,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let comb = coll::Comb::User { f: fn_, user: user as usize, esz: elem_size };
        c.reduce_with(root as i64, src as usize, dst as usize, count, comb)?;
        OK
    })
}

/// Collective: as fh_allreduce, with the caller's `fn_` on elements of `elem_size`
/// bytes (see fh_reduce_fn); the result is bit-identical on every rank.
/// Threads: one thread per context at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_allreduce_fn(
    ctx: *mut fh_ctx_t,
    src: *const c_void,
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    fn_: fh_reduce_fn_t,
    user: *mut c_void,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let comb = coll::Comb::User { f: fn_, user: user as usize, esz: elem_size };
        c.allreduce_with(src as usize, dst as usize, count, comb)?;
        OK
    })
}

/// Collective: every rank contributes `nbytes` from `src`; rank i's bytes land at
/// `dst + i * nbytes` on every rank (`dst` holds nbytes * size bytes). Different
/// nbytes on some ranks, or invalid arguments on any: every rank returns
/// FH_ERR_INVALID_ARG, and the next collective works.
/// Threads: one thread per context at a time. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_allgather(
    ctx: *mut fh_ctx_t,
    src: *const c_void,
    nbytes: usize,
    dst: *mut c_void,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.allgather(src as usize, nbytes, dst as usize)?;
        OK
    })
}

/// `sig_op` of fh_put_signal: the signal word takes the value.
pub const FH_SIGNAL_SET: c_int = 0;
/// `sig_op` of fh_put_signal: the value is added to the signal word.
pub const FH_SIGNAL_ADD: c_int = 1;
/// `cmp` of fh_signal_wait_until: word == value.
pub const FH_CMP_EQ: c_int = 0;
/// word != value.
pub const FH_CMP_NE: c_int = 1;
/// word > value.
pub const FH_CMP_GT: c_int = 2;
/// word >= value.
pub const FH_CMP_GE: c_int = 3;
/// word < value.
pub const FH_CMP_LT: c_int = 4;
/// word <= value.
pub const FH_CMP_LE: c_int = 5;

/// Put with signal (notify counters; OpenSHMEM 1.5's shmem_put_signal): copy `nbytes`
/// from `src` to `dst` in `rank`'s address space as fh_put does, then update the
/// 64-bit word `sig_addr` at `rank`: FH_SIGNAL_SET stores `signal`, FH_SIGNAL_ADD adds
/// it. The signal is applied after the data is visible there, so a rank that sees the
/// signal (fh_signal_wait_until, fh_atomic_fetch_u64) sees the data. Signals of many
/// ranks to one word combine atomically (the word follows the atomics' rules: 8-byte
/// aligned, in fh_malloc or registered memory of `rank`, or any memory of another
/// rank). Returns when data and signal are visible; the target's CPU does no work for
/// heap and registered memory. EVENT POST, SYNC IMAGES and producer/consumer
/// hand-offs need no barrier with it.
/// Errors: as fh_put for the data; FH_ERR_INVALID_ARG (unaligned or NULL sig_addr,
/// unknown sig_op), FH_ERR_ACCESS (a signal word the atomics refuse); a bad signal
/// word is found before any data moves.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_put_signal(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    sig_addr: *mut u64,
    signal: u64,
    sig_op: c_int,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let op = crate::api::sync::signal::signal_op_of(sig_op)?;
        c.put_signal(rank as i64, dst as usize, src as usize, nbytes, sig_addr as usize, signal, op)?;
        OK
    })
}

/// Wait until this rank's 64-bit word `sig_addr` compares to `value` as `cmp` says
/// (FH_CMP_EQ, _NE, _GT, _GE, _LT, _LE; unsigned), progressing the library and
/// yielding the CPU meanwhile; the value that satisfied it goes to `*value_out`
/// (which may be NULL). The word is read atomically, as fh_atomic_fetch_u64 with this
/// rank would: it must be in this rank's fh_malloc memory or a registered region.
/// Pairs with fh_put_signal and the atomics of other ranks. A wait that cannot finish
/// reports a stall (FH_STALL_WARN) and gives up with FH_ERR_TRANSPORT at FH_STALL_ABORT
/// (or when every other rank finalized or exited).
/// Errors: FH_ERR_INVALID_ARG (unknown cmp, unaligned or NULL sig_addr), FH_ERR_ACCESS
/// (not heap or registered memory), FH_ERR_STATE (from an AM handler).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_signal_wait_until(
    ctx: *mut fh_ctx_t,
    sig_addr: *const u64,
    cmp: c_int,
    value: u64,
    value_out: *mut u64,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let cmp = crate::api::sync::signal::cmp_of(cmp)?;
        let v = c.signal_wait_until(sig_addr as usize, cmp, value)?;
        if !value_out.is_null() {
            // SAFETY: non-null caller-provided out-pointer.
            unsafe { out(value_out, v, "value_out")? };
        }
        OK
    })
}

/// `flags` of fh_word_lock: do not wait; FH_NOT_READY if another rank holds the lock.
pub const FH_WORD_LOCK_TRY: c_int = 1;

/// Take a word lock: the 64-bit word `word` of `rank` is the lock (0 when free, else
/// its holder's rank + 1), so it needs no creation, costs one word (lock arrays: one
/// per element), and knows its holder. The word must be one the atomics accept: 8-byte
/// aligned, in fh_malloc or registered memory of `rank`, or any memory of another
/// rank; initialise it to 0 before anyone locks it. Taking it is one remote
/// compare-and-swap; a waiter retries in the library's wait loop (not FIFO; the MCS
/// lock of fh_lock_create is, for a collective creation). `*holder_out` (may be NULL)
/// gets the holder's rank when the call does not acquire.
/// Returns FH_OK (acquired), FH_NOT_READY (FH_WORD_LOCK_TRY and another rank holds
/// it), FH_ERR_STATE (this rank holds it already: not recursive).
/// Errors: FH_ERR_INVALID_ARG (unaligned or NULL word, unknown flags), FH_ERR_ACCESS.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_word_lock(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    word: *mut u64,
    flags: c_int,
    holder_out: *mut c_int,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if flags & !FH_WORD_LOCK_TRY != 0 {
            crate::bail!(InvalidArg, "flags {:#x}: only FH_WORD_LOCK_TRY is defined", flags);
        }
        let put_holder = |h: usize| {
            if !holder_out.is_null() {
                // SAFETY: non-null caller-provided out-pointer.
                unsafe { holder_out.write(h as c_int) };
            }
        };
        use crate::api::sync::wordlock::Taken;
        match c.word_lock(rank as i64, word as usize, flags & FH_WORD_LOCK_TRY != 0)? {
            Taken::Acquired => OK,
            Taken::HeldBy(h) => {
                put_holder(h);
                Ok(Status::NotReady.code())
            }
            Taken::Already => {
                put_holder(c.rank);
                crate::bail!(State, "fh_word_lock: this rank holds the lock at {:#x} of rank {} already", word as usize, rank)
            }
        }
    })
}

/// Release a word lock this rank holds (one remote compare-and-swap). FH_ERR_STATE,
/// and the word unchanged, if it is not held (`*holder_out` = -1) or another rank
/// holds it (`*holder_out` = that rank); holder_out may be NULL.
/// Errors: as fh_word_lock.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_word_unlock(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    word: *mut u64,
    holder_out: *mut c_int,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        use crate::api::sync::wordlock::Freed;
        let holder = match c.word_unlock(rank as i64, word as usize)? {
            Freed::Released => return OK,
            Freed::NotHeld => -1,
            Freed::HeldBy(h) => h as c_int,
        };
        if !holder_out.is_null() {
            // SAFETY: non-null caller-provided out-pointer.
            unsafe { holder_out.write(holder) };
        }
        if holder < 0 {
            crate::bail!(State, "fh_word_unlock: the lock at {:#x} of rank {} is not locked", word as usize, rank);
        }
        crate::bail!(State, "fh_word_unlock: rank {} holds the lock at {:#x} of rank {}, not this rank", holder, word as usize, rank)
    })
}
