//! Header section: value forms, memset, access regions, handler-safe locks.
//!
//! The rest of seed 002's extended API: puts and gets of a value, a remote memset,
//! access regions (one handle for every implicit-handle operation of an interval),
//! and the atomicity controls for data shared with AM handlers: handler-safe locks
//! and no-interrupt sections (rules in the header's "Active message handlers" notes).

use super::rma::fh_handle_t;
use super::{ctx_ref, fh_ctx_t, out, OK};
use crate::api::am::hsl::Hsl;
use crate::api::rma::vis::Completion;
use crate::api::Context;
use crate::runtime::error::{Result, Status};
use std::os::raw::{c_int, c_void};

/// Write the low `8 * nbytes` bits of `value` (nbytes 1, 2, 4 or 8; else
/// FH_ERR_INVALID_ARG) as an integer of that size at `dst` on `rank` (any address
/// fh_put accepts); returns when it is visible there.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_put_val(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    value: u64,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.put_val(rank as i64, dst as usize, value, nbytes)?;
        OK
    })
}

/// Read the integer of `nbytes` bytes (1, 2, 4 or 8) at `src` on `rank` into
/// `*value_out`, zero-extended.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_get_val(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    src: *const c_void,
    nbytes: usize,
    value_out: *mut u64,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if value_out.is_null() {
            crate::bail!(InvalidArg, "value_out is NULL");
        }
        let v = c.get_val(rank as i64, src as usize, nbytes)?;
        // SAFETY: checked non-null above.
        unsafe { out(value_out, v, "value_out")? };
        OK
    })
}

/// Set `nbytes` bytes at `dst` on `rank` (any address fh_put accepts) to `value`
/// (converted to unsigned char, as memset does); returns when they are visible there.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_memset(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    value: c_int,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.memset(rank as i64, dst as usize, value, nbytes, Completion::Blocking)?;
        OK
    })
}

/// Non-blocking fh_memset: writes `*h_out` (FH_HANDLE_NULL if nbytes is 0); sync it
/// with fh_wait / fh_test. A part that needs a firehose move does not make the call
/// wait.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_memset_nb(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    value: c_int,
    nbytes: usize,
    h_out: *mut fh_handle_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if h_out.is_null() {
            crate::bail!(InvalidArg, "h_out is NULL");
        }
        let h = c.memset(rank as i64, dst as usize, value, nbytes, Completion::Explicit)?;
        // SAFETY: checked non-null above.
        unsafe { out(h_out, h, "h_out")? };
        OK
    })
}

/// Implicit-handle fh_memset: completed by fh_wait_nbi(FH_NBI_PUTS) / fh_test_nbi,
/// or by the handle of the access region it was issued in.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_memset_nbi(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    dst: *mut c_void,
    value: c_int,
    nbytes: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.memset(rank as i64, dst as usize, value, nbytes, Completion::Implicit)?;
        OK
    })
}

/// Open an access region: every implicit-handle operation (fh_*_nbi) this thread
/// initiates on `ctx` until fh_end_nbi_accessregion is completed by the one handle
/// the end returns, not by fh_wait_nbi. One region per context at a time; regions do
/// not nest (FH_ERR_STATE).
/// Threads: any thread; the region belongs to it (other threads' operations are not in
/// it). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_begin_nbi_accessregion(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.begin_region()?;
        OK
    })
}

/// Close this thread's access region and write the handle of everything it initiated
/// to `*h_out` (FH_HANDLE_NULL if nothing): sync it with fh_wait, fh_test or the
/// _all/_some forms; it reports the first error of its operations. FH_ERR_STATE if
/// no region is open or another thread opened it.
/// Threads: the thread that opened the region. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_end_nbi_accessregion(ctx: *mut fh_ctx_t, h_out: *mut fh_handle_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if h_out.is_null() {
            crate::bail!(InvalidArg, "h_out is NULL");
        }
        let h = c.end_region()?;
        // SAFETY: checked non-null above.
        unsafe { out(h_out, h, "h_out")? };
        OK
    })
}

/// Opaque handler-safe lock (`fh_hsl_t *`): a generation-checked table entry
/// (`super::handle`); after `fh_hsl_destroy` the handle is stale (FH_ERR_STATE).
pub struct fh_hsl_t {
    _opaque: [u8; 0],
}

/// A handler-safe lock and the context it was created on.
struct HslObj {
    ctx: *mut fh_ctx_t,
    hsl: Hsl,
}

// SAFETY: `ctx` is a handle value (an integer), not dereferenced; Hsl is Sync.
unsafe impl Send for HslObj {}
// SAFETY: as above.
unsafe impl Sync for HslObj {}

static HSLS: super::handle::Table<HslObj> =
    super::handle::Table::new("fh_hsl_t", 5, "fh_hsl_destroy");

/// # Safety
/// As `ctx_ref`: no destroy of the lock or finalize of its context concurrently.
unsafe fn hsl_ref<'a>(p: *const fh_hsl_t) -> Result<(&'a Context, &'a Hsl)> {
    if p.is_null() {
        crate::bail!(InvalidArg, "hsl is NULL (create one with fh_hsl_init)");
    }
    let l = HSLS.get(p as usize)?;
    // SAFETY: forwarded contract; ctx_ref validates the context handle.
    let c = unsafe { ctx_ref(l.ctx)? };
    Ok((c, &l.hsl))
}

/// Create a handler-safe lock (local to this process; not collective): a mutex that
/// application code and AM handlers may share. While a thread holds one, AM handlers
/// do not run on that thread (see the header's handler notes).
/// Threads: any thread, concurrently with other calls. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_hsl_init(ctx: *mut fh_ctx_t, hsl_out: *mut *mut fh_hsl_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.check_live()?;
        if hsl_out.is_null() {
            crate::bail!(InvalidArg, "hsl_out is NULL");
        }
        let obj = Box::new(HslObj {
            ctx,
            hsl: Hsl::default(),
        });
        let p = HSLS.insert(obj)? as *mut fh_hsl_t;
        // SAFETY: checked non-null above.
        unsafe { out(hsl_out, p, "hsl_out")? };
        OK
    })
}

/// Block until this thread holds the lock. FH_ERR_STATE if it already does (not
/// recursive). A handler may take one, and must release it before it returns.
/// Threads: any thread. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_hsl_lock(hsl: *mut fh_hsl_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, h) = unsafe { hsl_ref(hsl)? };
        c.hsl_lock(h)?;
        OK
    })
}

/// Take the lock if it is free: FH_OK, or FH_NOT_READY if another thread holds it.
/// Threads: any thread. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_hsl_trylock(hsl: *mut fh_hsl_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, h) = unsafe { hsl_ref(hsl)? };
        Ok(if c.hsl_trylock(h)? { Status::Ok } else { Status::NotReady } as c_int)
    })
}

/// Release the lock (FH_ERR_STATE unless this thread holds it). Handlers postponed
/// while it was held run now, unless the thread still holds another hold.
/// Threads: the thread that took it. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_hsl_unlock(hsl: *mut fh_hsl_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (c, h) = unsafe { hsl_ref(hsl)? };
        c.hsl_unlock(h)?;
        OK
    })
}

/// Destroy the lock: FH_ERR_STATE if it is held (the handle stays valid then).
/// Threads: any thread; not concurrently with other calls on this lock. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_hsl_destroy(hsl: *mut fh_hsl_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let (_c, h) = unsafe { hsl_ref(hsl)? };
        if h.is_held() {
            crate::bail!(State, "the handler-safe lock is held: release it first");
        }
        drop(HSLS.remove(hsl as usize)?);
        OK
    })
}

/// Begin a no-interrupt section on this thread (nestable): until the matching
/// fh_resume_interrupts, AM handlers that this thread's progress receives are kept
/// and run later, so data they share with this code needs no lock. The library's
/// own protocol keeps running, so blocking calls still complete.
/// Threads: any thread (the section is the calling thread's). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_hold_interrupts(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.hold_interrupts()?;
        OK
    })
}

/// End the innermost no-interrupt section of this thread (FH_ERR_STATE without
/// one); at the outermost, the handlers kept meanwhile run now, in arrival order.
/// Threads: the thread that held them. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_resume_interrupts(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.resume_interrupts()?;
        OK
    })
}
