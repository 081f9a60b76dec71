//! Header section: memory (library heap and explicit registration).

use super::{ctx_ref, fh_ctx_t, OK};
use std::os::raw::{c_int, c_void};

/// Allocate `nbytes` of RMA-ready memory from this rank's library heap (always
/// registered; 64-byte aligned). The heap grows: when its first region
/// (FH_HEAP_SIZE, node-shared) has no room, a new segment of at least that size is
/// mapped and registered as fh_mem_register does, and peers find it in this rank's
/// registration table without this rank's CPU (heap words stay CPU atomics between
/// node peers; segment words go through the transport's atomics; both follow the
/// atomics' rules). Segments count against the registrations the conduit holds
/// (Open MPI: osc_rdma_max_attach, 64 by default) and stay until fh_finalize.
/// Returns NULL on error (see fh_last_error): nbytes 0, or no memory for a segment
/// (mmap, or mlock with FH_PIN=mlock) or no room to register one.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_malloc(ctx: *mut fh_ctx_t, nbytes: usize) -> *mut c_void {
    crate::ffi_boundary!(value std::ptr::null_mut(), {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        Ok(c.malloc(nbytes)? as *mut c_void)
    })
}

/// Free memory from fh_malloc. NULL is ignored; anything else that is not a live
/// allocation of this context is refused (reported by fh_last_error) without effect.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_free(ctx: *mut fh_ctx_t, ptr: *mut c_void) {
    crate::ffi_boundary!(value(), {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.free(ptr as usize)
    })
}

/// Make `[addr, addr+len)` of this rank remotely accessible (registered with the
/// conduit and, with FH_PIN=mlock, locked in RAM) until fh_mem_unregister. The range
/// must be mapped readable and writable and must not overlap another registration or
/// the library heap (its first region or a segment it grew by). Peers find the registration in this rank's registration table
/// with one-sided reads: their first access sends no message. If mlock fails
/// (RLIMIT_MEMLOCK) the range is registered without locking. Firehose pins other
/// ranks hold in the range are dropped first (they are told and answer inside any
/// library call or blocking MPI call; one round trip per such rank).
/// Errors: FH_ERR_INVALID_ARG, FH_ERR_ACCESS (not mapped, PROT_NONE or read-only),
/// FH_ERR_NO_RESOURCE (64 registrations per rank already), FH_ERR_MPI (attach
/// failed).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_mem_register(ctx: *mut fh_ctx_t, addr: *mut c_void, len: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.mem_register(addr as usize, len)?;
        OK
    })
}

/// Undo fh_mem_register of exactly this range. Every rank that cached the
/// registration is told to drop it and complete its operations first, so no peer
/// accesses the range afterwards (one AM round trip per such peer). Errors:
/// FH_ERR_NOT_PINNED if no registration matches, FH_ERR_INVALID_ARG for library heap
/// memory (it stays registered until fh_finalize).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_mem_unregister(ctx: *mut fh_ctx_t, addr: *mut c_void, len: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.mem_unregister(addr as usize, len)?;
        OK
    })
}

/// The range was freed or remapped: drop every registration and every firehose pin
/// overlapping it, here and in every peer that holds one (each is told to forget it
/// and complete its operations, and acknowledges, before this returns; they must be
/// polling). Call it after munmap/free and before the memory is reused, so no rank
/// keeps writing through a stale pin. FH_OK even if nothing overlapped.
/// FH_ERR_INVALID_ARG for a range overlapping the library heap, its first region or a
/// segment it grew by (fh_malloc memory stays registered until fh_finalize; give it
/// back with fh_free).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_mem_invalidate(ctx: *mut fh_ctx_t, addr: *mut c_void, len: usize) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.mem_invalidate(addr as usize, len)?;
        OK
    })
}
