//! Header section: rmalloc / rpipe (seed 003).
//!
//! `rpipe_t *` handles are entries of the generation-checked handle table
//! (`super::handle`): a handle used after `rpipe_close` is `FH_ERR_STATE`, without
//! touching freed memory.

use super::{ctx_ref, fh_ctx_t, OK};
use crate::api::rpipe::{self, Pipe, Policy, Role, Spec, Transfer};
use crate::bail;
use crate::runtime::error::{Result, Status};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// Opaque pipe handle (`rpipe_t *`).
pub struct rpipe_t {
    _opaque: [u8; 0],
}

/// Offset of a message in a pipe's heap, tagged with the heap it belongs to (never 0).
pub type rpipe_addr_t = u64;

/// Role of this end: it only writes.
pub const RPIPE_WRITER: c_int = 1;
/// Role of this end: it only reads.
pub const RPIPE_READER: c_int = 2;
/// Role of this end: it writes and reads (full duplex).
pub const RPIPE_BOTH: c_int = 3;
/// Mode: one direction (one RPIPE_WRITER end, one RPIPE_READER end).
pub const RPIPE_HALF_DUPLEX: c_int = 0;
/// Mode: both directions, both ends RPIPE_BOTH; each direction has its own heap.
pub const RPIPE_FULL_DUPLEX: c_int = 1;
/// Mode flag (OR it in): pull transfer. rpipe_rwrite only posts the notice and
/// rpipe_rread fetches the bytes with an RDMA get from the writer's memory (seed
/// 003's rread); without it rpipe_rwrite pushes the bytes (seed 003's rwrite).
pub const RPIPE_PULL: c_int = 2;
/// Policy: next fit (deferred free synchronisation; the fastest).
pub const RPIPE_NEXT_FIT: c_int = 0;
/// Policy: first fit (deferred free synchronisation).
pub const RPIPE_FIRST_FIT: c_int = 1;
/// Policy: best fit (immediate free synchronisation at every rmalloc).
pub const RPIPE_BEST_FIT: c_int = 2;
/// Policy: worst fit (immediate free synchronisation at every rmalloc).
pub const RPIPE_WORST_FIT: c_int = 3;

/// Counters and heap state of one end of a pipe (rpipe_stats). The heap fields are
/// this end's view of the heap it writes into (zero on a reader-only end).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rpipe_stats_t {
    pub messages_written: u64,
    pub messages_read: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// rmalloc/try_rmalloc calls that found the heap full (flow control).
    pub rmalloc_waits: u64,
    /// RDMA syncs of the reader's frees into the writer's view.
    pub free_syncs: u64,
    /// Frees of the peer this end has taken back into its allocator.
    pub frees_seen: u64,
    /// Notices or frees from the peer that named no valid message (refused).
    pub refused: u64,
    /// Messages unread or unfreed when the pipe was closed.
    pub discarded: u64,
    /// Largest message the pipe carries (its width).
    pub max_message: u64,
    pub heap_free_bytes: u64,
    pub heap_largest_free: u64,
    pub heap_allocations: u64,
    /// External fragmentation of the heap: 1 - largest free block / free bytes.
    pub heap_fragmentation: f64,
}

/// Every open pipe, behind its handle.
static PIPES: super::handle::Table<Arc<Pipe>> =
    super::handle::Table::new("rpipe_t", 4, "rpipe_close");

fn insert(p: Arc<Pipe>) -> Result<*mut rpipe_t> {
    Ok(PIPES.insert(Box::new(p))? as *mut rpipe_t)
}

/// The pipe behind a handle (valid until `rpipe_close`: the header's rule is that no
/// call on a pipe runs concurrently with its close).
fn lookup(h: *mut rpipe_t) -> Result<&'static Pipe> {
    Ok(PIPES.get(h as usize)?)
}

fn remove(h: *mut rpipe_t) {
    let _ = PIPES.remove(h as usize);
}

fn spec(role: c_int, width: usize, mode: c_int, policy: c_int) -> Result<Spec> {
    let role = match role {
        RPIPE_WRITER => Role::Writer,
        RPIPE_READER => Role::Reader,
        RPIPE_BOTH => Role::Both,
        _ => bail!(
            InvalidArg,
            "role {} is not RPIPE_WRITER, RPIPE_READER or RPIPE_BOTH",
            role
        ),
    };
    if mode & !(RPIPE_FULL_DUPLEX | RPIPE_PULL) != 0 {
        bail!(
            InvalidArg,
            "mode {:#x} is not RPIPE_HALF_DUPLEX or RPIPE_FULL_DUPLEX, optionally | RPIPE_PULL",
            mode
        );
    }
    let policy = match policy {
        RPIPE_NEXT_FIT => Policy::NextFit,
        RPIPE_FIRST_FIT => Policy::FirstFit,
        RPIPE_BEST_FIT => Policy::BestFit,
        RPIPE_WORST_FIT => Policy::WorstFit,
        _ => bail!(InvalidArg, "policy {} is not one of RPIPE_*_FIT", policy),
    };
    Ok(Spec {
        role,
        width,
        duplex: mode & RPIPE_FULL_DUPLEX != 0,
        transfer: if mode & RPIPE_PULL != 0 {
            Transfer::Pull
        } else {
            Transfer::Push
        },
        policy,
    })
}

fn out<T>(p: *mut T, what: &str) -> Result<()> {
    if p.is_null() {
        bail!(InvalidArg, "{} is NULL", what);
    }
    Ok(())
}

/// Open a pipe with `peer`. Both ends call it, in the same order relative to their
/// other opens with each other (the k-th open on one rank pairs with the k-th on the
/// peer); it blocks until the peer's call arrives. Both ends must pass the same
/// `width_bytes` (the size of each direction's heap, the largest message), `mode`
/// and `policy`, and complementary roles: RPIPE_WRITER with RPIPE_READER
/// (RPIPE_HALF_DUPLEX), or RPIPE_BOTH on both ends (RPIPE_FULL_DUPLEX). OR
/// RPIPE_PULL into `mode` for pull transfer. Costs, per direction on each end, of
/// library heap (FH_HEAP_SIZE): `width_bytes`, plus a notice ring of 128 bytes per
/// 64 bytes of width rounded up to a power of two (at most 128 KiB, reached at 64
/// KiB), plus a free bitmap of one bit per 64 bytes.
/// Errors: FH_ERR_INVALID_ARG (bad or disagreeing arguments: both ends fail, except a
/// NULL pipe_out, refused before the handshake),
/// FH_ERR_BAD_RANK, FH_ERR_NO_MEMORY (the first FH_HEAP_SIZE bytes of library heap
/// are full: pipes do not take the segments fh_malloc grows by).
/// Threads: any thread; opens of pipes to the same peer from several threads pair
/// in arrival order, so serialise them. Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn rpipe_open(
    ctx: *mut fh_ctx_t,
    peer: c_int,
    role: c_int,
    width_bytes: usize,
    mode: c_int,
    policy: c_int,
    pipe_out: *mut *mut rpipe_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        // A NULL pipe_out is refused at once (nothing could be returned anyway).
        // Bad values take part in the handshake (marked failed), so the peer fails
        // too instead of waiting for an open that never comes.
        out(pipe_out, "pipe_out")?;
        let s = spec(role, width_bytes, mode, policy);
        let p = rpipe::open_checked(&c.inner, peer as i64, s)?;
        // SAFETY: checked non-null; written only on success.
        unsafe { *pipe_out = insert(p)? };
        OK
    })
}

fn rmalloc(
    p: *mut rpipe_t,
    nbytes: usize,
    addr_out: *mut rpipe_addr_t,
    wait: bool,
) -> Result<c_int> {
    let pipe = lookup(p)?;
    out(addr_out, "addr_out")?;
    match pipe.rmalloc(nbytes, wait)? {
        Some(a) => {
            // SAFETY: checked non-null.
            unsafe { *addr_out = a };
            OK
        }
        None => Ok(Status::NotReady.code()),
    }
}

/// Allocate `nbytes` (0 allowed) in the peer's heap; `*addr_out` names it on both
/// ends. Blocks, progressing, while the heap is full of messages the reader has not
/// freed yet (flow control). Errors: FH_ERR_INVALID_ARG (nbytes > the pipe's width:
/// it can never fit), FH_ERR_STATE (reader-only end, closed pipe, or the peer's close
/// has arrived: nothing written now would be read, even where room is left).
/// Threads: any thread, concurrently with other calls on the pipe (they serialise
/// on it; MPI_THREAD_MULTIPLE, below it one thread at a time per the MPI thread
/// level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn rpipe_rmalloc(
    p: *mut rpipe_t,
    nbytes: usize,
    addr_out: *mut rpipe_addr_t,
) -> c_int {
    crate::ffi_boundary!(status { rmalloc(p, nbytes, addr_out, true) })
}

/// As rpipe_rmalloc, but returns FH_NOT_READY at once when the heap has no room.
/// Threads: any thread, concurrently with other calls on the pipe (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers
/// (it never blocks).
#[no_mangle]
pub extern "C" fn rpipe_try_rmalloc(
    p: *mut rpipe_t,
    nbytes: usize,
    addr_out: *mut rpipe_addr_t,
) -> c_int {
    crate::ffi_boundary!(status { rmalloc(p, nbytes, addr_out, false) })
}

/// Local memory behind `addr`: on the writer, where to put the message before
/// rpipe_rwrite (valid from rpipe_rmalloc until rpipe_rwrite); on the reader, the
/// message itself (valid from rpipe_rread until rpipe_rfree). NULL (see
/// fh_last_error) for any other address, e.g. one already written or freed.
/// Threads: any thread. Also from AM handlers (it never blocks).
#[no_mangle]
pub extern "C" fn rpipe_rmem(p: *mut rpipe_t, addr: rpipe_addr_t) -> *mut c_void {
    crate::ffi_boundary!(value std::ptr::null_mut(), {
        Ok(lookup(p)?.rmem(addr)? as *mut c_void)
    })
}

/// Send the allocation `addr` (all the bytes asked of rpipe_rmalloc) to the reader:
/// zero-copy RDMA of the data, completed, then the notice the reader polls for
/// (pull mode: the notice only). Returns when both are complete at the reader; the
/// space belongs to the reader until it frees it. Errors: FH_ERR_INVALID_ARG (not an
/// address from rpipe_rmalloc on this end, already written, or freed), FH_ERR_STATE
/// (the peer's close has arrived: the message is not sent, nobody would read it).
/// Threads: any thread, concurrently with other calls on the pipe (messages are
/// ordered by when their rpipe_rwrite took the pipe; MPI_THREAD_MULTIPLE, below it
/// one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn rpipe_rwrite(p: *mut rpipe_t, addr: rpipe_addr_t) -> c_int {
    crate::ffi_boundary!(status {
        lookup(p)?.rwrite(addr)?;
        OK
    })
}

fn rread(
    p: *mut rpipe_t,
    addr_out: *mut rpipe_addr_t,
    len_out: *mut usize,
    wait: bool,
) -> Result<c_int> {
    let pipe = lookup(p)?;
    out(addr_out, "addr_out")?;
    out(len_out, "len_out")?;
    match pipe.rread(wait)? {
        Some((a, l)) => {
            // SAFETY: both checked non-null.
            unsafe {
                *addr_out = a;
                *len_out = l;
            }
            OK
        }
        None => Ok(Status::NotReady.code()),
    }
}

/// Take the next message, in the order they were written: its address (use
/// rpipe_rmem) and length. Blocks, progressing, until one arrives. Pull mode: the
/// bytes are fetched now. Errors: FH_ERR_STATE (writer-only end, or the peer closed
/// its end and every message was read), FH_ERR_TRANSPORT (the peer sent a notice
/// naming memory outside the heap or over a held message: refused, counted).
/// Threads: any thread, concurrently with other calls on the pipe (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn rpipe_rread(
    p: *mut rpipe_t,
    addr_out: *mut rpipe_addr_t,
    len_out: *mut usize,
) -> c_int {
    crate::ffi_boundary!(status { rread(p, addr_out, len_out, true) })
}

/// As rpipe_rread, but FH_NOT_READY at once when no message has arrived.
/// Threads: any thread, concurrently with other calls on the pipe (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers
/// (it never blocks).
#[no_mangle]
pub extern "C" fn rpipe_try_rread(
    p: *mut rpipe_t,
    addr_out: *mut rpipe_addr_t,
    len_out: *mut usize,
) -> c_int {
    crate::ffi_boundary!(status { rread(p, addr_out, len_out, false) })
}

/// Reader: give message `addr` back to the writer (no message is sent: the writer
/// collects frees by RDMA when it needs space). Writer: drop an allocation it never
/// wrote. Errors: FH_ERR_INVALID_ARG (not held: never read, or freed already).
/// Threads: any thread, concurrently with other calls on the pipe (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers
/// (it never blocks).
#[no_mangle]
pub extern "C" fn rpipe_rfree(p: *mut rpipe_t, addr: rpipe_addr_t) -> c_int {
    crate::ffi_boundary!(status {
        lookup(p)?.rfree(addr)?;
        OK
    })
}

/// Counters and heap state of this end of the pipe.
/// Threads: any thread. Also from AM handlers (it never blocks).
#[no_mangle]
pub extern "C" fn rpipe_stats(p: *mut rpipe_t, stats_out: *mut rpipe_stats_t) -> c_int {
    crate::ffi_boundary!(status {
        let pipe = lookup(p)?;
        out(stats_out, "stats_out")?;
        let (s, h) = pipe.stats();
        let v = rpipe_stats_t {
            messages_written: s.written,
            messages_read: s.read,
            bytes_written: s.bytes_written,
            bytes_read: s.bytes_read,
            rmalloc_waits: s.rmalloc_waits,
            free_syncs: s.syncs,
            frees_seen: s.frees_seen,
            refused: s.refused,
            discarded: s.discarded,
            max_message: pipe.max_message() as u64,
            heap_free_bytes: h.free_bytes as u64,
            heap_largest_free: h.largest_free as u64,
            heap_allocations: h.allocations as u64,
            heap_fragmentation: h.fragmentation,
        };
        // SAFETY: checked non-null.
        unsafe { *stats_out = v };
        OK
    })
}

/// Close this end. Both ends call it, in any order: it does not wait for the peer.
/// This end's library heap goes back when the peer's close has arrived (seen at a
/// later rpipe_open or rpipe_close, or at fh_finalize), so no RDMA lands in memory
/// given back. Messages still unread or unfreed are discarded (reported on stderr
/// with FH_VERBOSE=1). The handle is dead afterwards: using it gives FH_ERR_STATE.
/// Threads: one thread, with no other call on the pipe in progress. Not from AM handlers.
#[no_mangle]
pub extern "C" fn rpipe_close(p: *mut rpipe_t) -> c_int {
    crate::ffi_boundary!(status {
        let pipe = lookup(p)?;
        crate::api::am::check_not_in_handler("rpipe_close")?;
        let r = pipe.close();
        remove(p);
        r?;
        OK
    })
}
