//! Header section: RMA (put/get, handles, implicit-handle sync).

use super::{ctx_ref, fh_ctx_t, out, slice_mut, OK};
use crate::api::rma::{NBI_ALL, NBI_GETS, NBI_PUTS};
use std::os::raw::{c_int, c_void};

/// An explicit handle for a non-blocking operation; 0 (FH_HANDLE_NULL) means
/// "already complete".
pub type fh_handle_t = u64;
pub const FH_HANDLE_NULL: fh_handle_t = 0;
/// `which` for fh_wait_nbi / fh_test_nbi.
pub const FH_NBI_PUTS: c_int = 1;
pub const FH_NBI_GETS: c_int = 2;
pub const FH_NBI_ALL: c_int = 3;
const _: () = assert!(FH_NBI_PUTS == NBI_PUTS && FH_NBI_GETS == NBI_GETS && FH_NBI_ALL == NBI_ALL);

/// Copy `nbytes` from local `src` to `dst` in `rank`'s address space; returns when the
/// data is visible at the target. `dst` may be any address of the target that is
/// mapped writable there: fh_malloc'd or fh_mem_register'ed memory, or stack, static
/// and plain malloc memory (node peers: the kernel's single copy; others: firehose
/// pins it on demand). Memory that is not writable there (unmapped, PROT_NONE,
/// read-only, partly outside a mapping, the library's own structures) gives
/// FH_ERR_ACCESS and nothing is written. nbytes 0 is a no-op.
///
/// Progress: heap and registered memory, and node peers' memory, are reached without
/// the target's CPU. The first access to an unregistered unit of an off-node peer (or
/// any peer with FH_SHM=0) sends one firehose move the target answers inside any
/// library call, any blocking MPI call (FH_MPI_PROGRESS) or its progress thread.
///
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_put(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.put(rank as i64, dst as usize, src as usize, nbytes)?;
        OK
    })
}

/// Where `nbytes` at `raddr` in `rank`'s address space can be read and written by
/// this process with plain loads and stores (as OpenSHMEM's shmem_ptr, or a UPC cast
/// to a local pointer). `*local_out` is that address, or NULL when the range is not
/// reachable from here (a peer on another node, FH_SHM=0, memory that is not
/// fh_malloc'd there, or a range that leaves it): use fh_put and fh_get then. Both
/// are FH_OK. For this rank, `raddr` itself. nbytes 0 asks about `raddr` alone.
///
/// A non-NULL address stays valid until `rank` frees that memory or the context is
/// finalized. Loads and stores through it are plain memory accesses: order them with
/// the peer as any shared-memory program does (a barrier, a flag stored with release
/// and loaded with acquire), and do not mix CPU atomics through it with fh_atomic_*
/// calls on the same word.
///
/// Errors (`*local_out` NULL): FH_ERR_BAD_RANK, FH_ERR_INVALID_ARG (raddr NULL, a
/// range that wraps, local_out NULL), FH_ERR_ACCESS (the library's own structures at
/// the start of the heap).
/// Threads: any thread, concurrently with other calls on the same context. Allowed
/// in AM handlers (it never waits).
#[no_mangle]
pub extern "C" fn fh_local_addr(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    raddr: *const c_void,
    nbytes: usize,
    local_out: *mut *mut c_void,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        // NULL until an answer (also after an error).
        // SAFETY: the caller's contract: local_out is NULL or writable.
        unsafe { out(local_out, std::ptr::null_mut(), "fh_local_addr: local_out")? };
        let at = c.local_addr(rank as i64, raddr as usize, nbytes)?;
        // SAFETY: as above (checked non-NULL).
        unsafe { out(local_out, at as *mut c_void, "fh_local_addr: local_out")? };
        OK
    })
}

/// Copy `nbytes` from `src` in `rank`'s address space to local `dst`; returns when
/// the data has arrived. Same rules as fh_put.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_get(
    ctx: *mut fh_ctx_t,
    dst: *mut c_void,
    rank: c_int,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.get(dst as usize, rank as i64, src as usize, nbytes)?;
        OK
    })
}

/// Non-blocking put: `src` must not change until the handle is synced (fh_wait,
/// fh_test, ...). Writes `*h_out` (FH_HANDLE_NULL for nbytes 0). Errors as fh_put,
/// except that a refusal only the target can make (memory of an off-node peer, or of
/// any peer with FH_SHM=0, that is not yet pinned) is FH_OK here and FH_ERR_ACCESS
/// from the handle's completion; nothing is written either way.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_put_nb(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    h_out: *mut fh_handle_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if h_out.is_null() {
            crate::bail!(InvalidArg, "h_out is NULL");
        }
        let h = c.put_nb(rank as i64, dst as usize, src as usize, nbytes)?;
        // SAFETY: checked non-null above.
        unsafe { out(h_out, h, "h_out")? };
        OK
    })
}

/// Non-blocking get: `dst` is valid once the handle is synced. Errors as
/// fh_put_nb.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_get_nb(
    ctx: *mut fh_ctx_t,
    dst: *mut c_void,
    rank: c_int,
    src: *const c_void,
    nbytes: usize,
    h_out: *mut fh_handle_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if h_out.is_null() {
            crate::bail!(InvalidArg, "h_out is NULL");
        }
        let h = c.get_nb(dst as usize, rank as i64, src as usize, nbytes)?;
        // SAFETY: checked non-null above.
        unsafe { out(h_out, h, "h_out")? };
        OK
    })
}

/// Implicit-handle put, completed by fh_wait_nbi(FH_NBI_PUTS) / fh_test_nbi, or by the
/// handle of the access region it was issued in. A refusal only the target can make
/// (see fh_put_nb) is reported by that completion.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_put_nbi(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.put_nbi(rank as i64, dst as usize, src as usize, nbytes)?;
        OK
    })
}

/// Implicit-handle get, completed by fh_wait_nbi(FH_NBI_GETS) / fh_test_nbi, or by the
/// handle of the access region it was issued in. A refusal only the target can make
/// (see fh_put_nb) is reported by that completion.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_get_nbi(
    ctx: *mut fh_ctx_t,
    dst: *mut c_void,
    rank: c_int,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.get_nbi(dst as usize, rank as i64, src as usize, nbytes)?;
        OK
    })
}

/// FH_OK if `h` is complete (the handle is then retired), FH_NOT_READY if not.
/// FH_HANDLE_NULL is complete. A retired or unknown handle is FH_ERR_INVALID_ARG.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_test(ctx: *mut fh_ctx_t, h: fh_handle_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        Ok(if c.test(h)? { 0 } else { 1 })
    })
}

/// Wait until `h` completes (progressing AMs meanwhile); retires it.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_wait(ctx: *mut fh_ctx_t, h: fh_handle_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.wait(h)?;
        OK
    })
}

/// Wait for all `n` handles; each becomes FH_HANDLE_NULL. FH_HANDLE_NULL entries are
/// skipped. Returns the first error after completing the rest.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_wait_all(ctx: *mut fh_ctx_t, hs: *mut fh_handle_t, n: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        // SAFETY: hs points to n writable handles, not accessed elsewhere during this
        // call (caller contract); slice_mut refuses NULL with a non-zero count.
        let hs = unsafe { slice_mut(hs, n, "hs")? };
        c.wait_all(hs)?;
        OK
    })
}

/// FH_OK if all `n` handles are complete (completed ones become FH_HANDLE_NULL), else
/// FH_NOT_READY.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_test_all(ctx: *mut fh_ctx_t, hs: *mut fh_handle_t, n: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        // SAFETY: hs points to n writable handles, not accessed elsewhere during this
        // call (caller contract); slice_mut refuses NULL with a non-zero count.
        let hs = unsafe { slice_mut(hs, n, "hs")? };
        Ok(if c.test_all(hs)? { 0 } else { 1 })
    })
}

/// Wait until at least one of the `n` handles completes (those become
/// FH_HANDLE_NULL). Returns at once if all are FH_HANDLE_NULL.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_wait_some(ctx: *mut fh_ctx_t, hs: *mut fh_handle_t, n: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        // SAFETY: hs points to n writable handles, not accessed elsewhere during this
        // call (caller contract); slice_mut refuses NULL with a non-zero count.
        let hs = unsafe { slice_mut(hs, n, "hs")? };
        c.wait_some(hs)?;
        OK
    })
}

/// The try form of fh_wait_some: complete what can be completed now without waiting.
/// FH_OK if at least one of the `n` handles completed (those become
/// FH_HANDLE_NULL) or all already were FH_HANDLE_NULL, else FH_NOT_READY. A handle
/// whose operation failed becomes FH_HANDLE_NULL and its error is returned.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_test_some(ctx: *mut fh_ctx_t, hs: *mut fh_handle_t, n: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        // SAFETY: hs points to n writable handles, not accessed elsewhere during this
        // call (caller contract); slice_mut refuses NULL with a non-zero count.
        let hs = unsafe { slice_mut(hs, n, "hs")? };
        Ok(if c.test_some(hs)? { 0 } else { 1 })
    })
}

/// Complete every implicit-handle operation of kind `which` (FH_NBI_PUTS,
/// FH_NBI_GETS, FH_NBI_ALL) issued by this context.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_wait_nbi(ctx: *mut fh_ctx_t, which: c_int) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.wait_nbi(which)?;
        OK
    })
}

/// FH_OK if every implicit-handle operation of kind `which` is complete, else
/// FH_NOT_READY.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_test_nbi(ctx: *mut fh_ctx_t, which: c_int) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        Ok(if c.test_nbi(which)? { 0 } else { 1 })
    })
}
