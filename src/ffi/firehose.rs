//! Header section: firehose — the explicit pin interface (seed 000 §3.3, Fig. 4)
//! and statistics. Put/get use firehose on their own; these calls are for runtimes
//! that manage pins themselves.

use super::{ctx_ref, fh_ctx_t, out, OK};
use crate::api::moves::{FhSnapshot, PinHow, PinObj, ThreadStats};
use crate::runtime::error::{Result, Status};
use std::os::raw::{c_int, c_void};

/// Opaque pin (`fh_pin_t *`): a range kept pinned (locally, or remotely through this
/// rank's firehoses) until fh_release; a generation-checked table entry
/// (`super::handle`), so a released pin's handle is FH_ERR_STATE.
pub struct fh_pin_t {
    _opaque: [u8; 0],
}

static PINS: super::handle::Table<PinObj> = super::handle::Table::new("fh_pin_t", 3, "fh_release");

/// Completion callback of a non-blocking fh_remote_pin: `pin` is the new pin (the
/// callback owns it and must fh_release it eventually) or NULL when `status` is an
/// error. Runs inside a later library call on the same context (fh_poll or any call
/// that polls), with handler rules: it must not block (no blocking fh_* call).
pub type fh_pin_cb_t =
    Option<unsafe extern "C" fn(pin: *mut fh_pin_t, status: c_int, arg: *mut c_void)>;

/// A handle for a new pin (the table's capacity of a million pins is the limit).
fn wrap(p: Box<PinObj>) -> *mut fh_pin_t {
    match PINS.insert(p) {
        Ok(h) => h as *mut fh_pin_t,
        Err(e) => {
            crate::runtime::error::set_last_error(&e.to_string());
            std::ptr::null_mut()
        }
    }
}

fn check_out(pin_out: *mut *mut fh_pin_t) -> Result<()> {
    if pin_out.is_null() {
        crate::bail!(InvalidArg, "pin_out is NULL");
    }
    Ok(())
}

fn local(
    ctx: *mut fh_ctx_t,
    addr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
    how: PinHow,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        check_out(pin_out)?;
        let p = c.local_pin(addr as usize, len, how)?;
        // SAFETY: checked non-null; the caller provides a writable pointer.
        unsafe { out(pin_out, wrap(p), "pin_out")? };
        OK
    })
}

/// Pin local `[addr, addr+len)` (for conduits that need the local side of a transfer
/// registered; on the MPI conduit it also locks the pages). Blocks while the local
/// share (MAXVICTIM) is used by operations in flight. Errors: FH_ERR_INVALID_ARG
/// (NULL, len 0), FH_ERR_ACCESS (not mapped), FH_ERR_NO_RESOURCE (longer than the
/// local share).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_local_pin(
    ctx: *mut fh_ctx_t,
    addr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
) -> c_int {
    local(ctx, addr, len, pin_out, PinHow::Blocking)
}

/// As fh_local_pin, but only if the whole range is pinned already (the references
/// are taken); FH_ERR_NOT_PINNED otherwise. Never blocks.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_try_local_pin(
    ctx: *mut fh_ctx_t,
    addr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
) -> c_int {
    local(ctx, addr, len, pin_out, PinHow::Try)
}

/// A pin of the largest part of `[addr, addr+len)` that is pinned already (see
/// fh_pin_bounds); FH_ERR_NOT_PINNED if no part is. Never blocks.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_partial_local_pin(
    ctx: *mut fh_ctx_t,
    addr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
) -> c_int {
    local(ctx, addr, len, pin_out, PinHow::Partial)
}

struct Callback {
    cb: unsafe extern "C" fn(*mut fh_pin_t, c_int, *mut c_void),
    arg: *mut c_void,
}
// SAFETY: the callback and its argument are the application's; the header tells it
// the callback may run on the thread that polls (possibly the progress thread).
unsafe impl Send for Callback {}

/// Pin `[raddr, raddr+len)` of `rank` through this rank's firehoses so puts and gets
/// there are one-sided until fh_release. `flags` must be 0.
/// - `cb == NULL`: blocks until pinned; FH_OK and `*pin_out`.
/// - `cb != NULL`: on a hit FH_OK and `*pin_out` (cb is not called); on a miss
///   FH_NOT_READY, `*pin_out = NULL`, and cb(pin, FH_OK, arg) or cb(NULL, FH_ERR_*,
///   arg) runs later inside a library call on this context.
///
/// A pin may use at most f firehoses (FH_ERR_NO_RESOURCE beyond: pin in parts).
/// The peer's fh_malloc memory and regions it registered are prepinned: their pins
/// hold nothing. `*pin_out` is left unchanged on error.
/// Errors: FH_ERR_INVALID_ARG (also for this rank: use fh_local_pin), FH_ERR_BAD_RANK,
/// FH_ERR_ACCESS (the target refused: not mapped writable there; explicit pins are
/// for puts as well as gets, so read-only memory is refused).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn fh_remote_pin(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    raddr: *const c_void,
    len: usize,
    flags: c_int,
    cb: fh_pin_cb_t,
    arg: *mut c_void,
    pin_out: *mut *mut fh_pin_t,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let r = c.check_rank(rank as i64)?;
        check_out(pin_out)?;
        if flags != 0 {
            crate::bail!(InvalidArg, "flags = {} (no flags are defined; pass 0)", flags);
        }
        match cb {
            None => {
                let p = c.remote_pin(r, raddr as usize, len)?;
                // SAFETY: checked non-null.
                unsafe { out(pin_out, wrap(p), "pin_out")? };
                OK
            }
            Some(f) => {
                let call = Callback { cb: f, arg };
                let done = Box::new(move |res: Result<Box<PinObj>>| {
                    let call = call;
                    let (pin, st) = match res {
                        Ok(p) => (wrap(p), Status::Ok.code()),
                        Err(e) => {
                            crate::runtime::error::set_last_error(&e.to_string());
                            (std::ptr::null_mut(), e.status.code())
                        }
                    };
                    // SAFETY: the application's callback with the documented arguments.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (call.cb)(pin, st, call.arg) }));
                    let _ = r;
                });
                match c.remote_pin_async(r, raddr as usize, len, done)? {
                    Some(p) => {
                        // SAFETY: checked non-null.
                        unsafe { out(pin_out, wrap(p), "pin_out")? };
                        OK
                    }
                    None => {
                        // SAFETY: checked non-null.
                        unsafe { out(pin_out, std::ptr::null_mut(), "pin_out")? };
                        Ok(Status::NotReady.code())
                    }
                }
            }
        }
    })
}

fn remote_try(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    raddr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
    partial: bool,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let r = c.check_rank(rank as i64)?;
        check_out(pin_out)?;
        let p = c.remote_pin_try(r, raddr as usize, len, partial)?;
        // SAFETY: checked non-null.
        unsafe { out(pin_out, wrap(p), "pin_out")? };
        OK
    })
}

/// As fh_remote_pin, but only on a hit (references taken); FH_ERR_NOT_PINNED on a
/// miss, with no message sent. Never blocks.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_try_remote_pin(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    raddr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
) -> c_int {
    remote_try(ctx, rank, raddr, len, pin_out, false)
}

/// A pin of the largest part of the remote range already covered by this rank's
/// firehoses (see fh_pin_bounds); FH_ERR_NOT_PINNED if none. Never blocks.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_partial_remote_pin(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    raddr: *const c_void,
    len: usize,
    pin_out: *mut *mut fh_pin_t,
) -> c_int {
    remote_try(ctx, rank, raddr, len, pin_out, true)
}

/// The range a pin covers (for partial pins, the part that was pinned).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_pin_bounds(
    pin: *const fh_pin_t,
    addr_out: *mut *const c_void,
    len_out: *mut usize,
) -> c_int {
    crate::ffi_boundary!(status {
        let p = PINS.get(pin as usize)?;
        if addr_out.is_null() || len_out.is_null() {
            crate::bail!(InvalidArg, "addr_out or len_out is NULL");
        }
        // SAFETY: checked non-null.
        unsafe {
            addr_out.write(p.start as *const c_void);
            len_out.write(p.len);
        }
        OK
    })
}

/// Release a pin (its references; the memory may later be unpinned) and retire the
/// fh_pin_t: using it afterwards is FH_ERR_STATE. After fh_mem_invalidate of its
/// range a pin's release is accepted and has no effect. Also from pin callbacks.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_release(ctx: *mut fh_ctx_t, pin: *mut fh_pin_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        if PINS.get(pin as usize)?.owner != c.id() {
            crate::bail!(
                InvalidArg,
                "the pin belongs to another context: release it with the context that made it"
            );
        }
        let b = PINS.remove(pin as usize)?;
        c.release_pin(*b)?;
        OK
    })
}

/// Fill `*out` with this context's statistics.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_stats_get(ctx: *const fh_ctx_t, out_stats: *mut FhSnapshot) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.check_live()?;
        let s = c.fh_stats();
        // SAFETY: out() refuses NULL; the caller provides writable storage.
        unsafe { out(out_stats, s, "out")? };
        OK
    })
}

/// Zero the counters of fh_stats_t (levels and parameters stay).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_stats_reset(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.check_live()?;
        c.fh_stats_reset();
        OK
    })
}

/// Copy the calling thread's firehose-SMP counters (summed over every context this
/// thread used) into `*out_stats`: acquisitions beyond a one-entry hit, how many
/// entered deadlock avoidance, posted the DA flag, rolled back, slept, and the time
/// spent there. Seed 000 §5's fairness is read by comparing these across threads.
/// Threads: any thread, at any time, no context needed. Acts on the calling thread's own counters.
#[no_mangle]
pub extern "C" fn fh_stats_thread_get(out_stats: *mut ThreadStats) -> c_int {
    crate::ffi_boundary!(status {
        let s = crate::api::moves::thread_stats();
        // SAFETY: out() refuses NULL; the caller provides writable storage.
        unsafe { out(out_stats, s, "out")? };
        OK
    })
}

/// Zero the calling thread's counters of fh_thread_stats_t.
/// Threads: any thread, at any time, no context needed. Acts on the calling thread's own counters.
#[no_mangle]
pub extern "C" fn fh_stats_thread_reset() -> c_int {
    crate::ffi_boundary!(status {
        crate::api::moves::thread_stats_reset();
        OK
    })
}
