//! The C ABI. The only place with `#[no_mangle] extern "C"`; one file per header
//! section. Every exported body runs inside [`ffi_boundary!`]: panics are caught and
//! become `FH_ERR_INTERNAL`, errors become their status code with the detailed
//! message stored for `fh_last_error`. Pointers are checked before use.

#![allow(non_camel_case_types)]
// C callers pass raw pointers to safe-looking `extern "C"` functions by design (as in
// rustls-ffi); each dereference is validated and commented where it happens.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::api::Context;
use crate::runtime::error::{set_last_error, Error, Result, Status};
use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

pub mod am;
pub mod atomic;
pub mod firehose;
pub mod init;
pub mod mem;
/// cbindgen:ignore
pub mod pmpi;
/// cbindgen:ignore
pub mod pmpi_fortran;
pub mod rma;
pub mod rpipe;
pub mod status;
pub mod sync;

/// Run `f`, turning errors and panics into a status code.
pub fn guard_status(f: impl FnOnce() -> Result<c_int>) -> c_int {
    let _in = crate::api::progress::Inside::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => fail(&e),
        Err(p) => panic_status(p),
    }
}

/// Run `f`, returning `fallback` (and recording the error) on error or panic.
pub fn guard_value<T>(fallback: T, f: impl FnOnce() -> Result<T>) -> T {
    let _in = crate::api::progress::Inside::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            fail(&e);
            fallback
        }
        Err(p) => {
            panic_status(p);
            fallback
        }
    }
}

fn fail(e: &Error) -> c_int {
    set_last_error(&e.to_string());
    e.status.code()
}

fn panic_status(p: Box<dyn std::any::Any + Send>) -> c_int {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    set_last_error(&format!(
        "FH_ERR_INTERNAL: internal panic caught at the C boundary: {}",
        what
    ));
    Status::Internal.code()
}

/// The panic boundary every exported function body goes through.
/// `ffi_boundary!(status { ... })` — body yields `Result<c_int>` (FH_OK/FH_NOT_READY);
/// `ffi_boundary!(value FALLBACK, { ... })` — body yields `Result<T>`.
#[macro_export]
macro_rules! ffi_boundary {
    (status $body:block) => {
        $crate::ffi::guard_status(move || -> $crate::Result<::std::os::raw::c_int> { $body })
    };
    (value $fallback:expr, $body:block) => {
        $crate::ffi::guard_value($fallback, move || $body)
    };
}

pub const OK: Result<c_int> = Ok(Status::Ok as c_int);

const CTX_LIVE: u64 = 0x6669_7265_686f_7365; // "firehose"
const CTX_DEAD: u64 = 0x6465_6164_6465_6164; // "deaddead"
/// Finalized by `MPI_Finalize` (the program called it first): `fh_finalize` is then
/// a no-op that succeeds, every other call `FH_ERR_STATE`.
const CTX_MPI_DONE: u64 = 0x6d70_6964_6f6e_6521; // "mpidone!"

/// Live handles, in creation order (addresses of `fh_ctx_t`s).
static HANDLES: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());

/// Opaque context handle (`fh_ctx_t *`).
///
/// After `fh_finalize` the handle's memory is kept (a few bytes) with a "finalized"
/// mark so later calls return `FH_ERR_STATE` instead of touching freed memory.
pub struct fh_ctx_t {
    magic: AtomicU64,
    ctx: UnsafeCell<Option<Context>>,
}

impl fh_ctx_t {
    pub(crate) fn new(ctx: Context) -> *mut fh_ctx_t {
        let p = Box::into_raw(Box::new(fh_ctx_t {
            magic: AtomicU64::new(CTX_LIVE),
            ctx: UnsafeCell::new(Some(ctx)),
        }));
        HANDLES.lock().push(p as usize);
        p
    }
}

/// Before any context exists: have `MPI_Finalize` finalize the contexts still live
/// (newest first is not required: every rank finalizes them in creation order), and
/// a process that exits without finalizing tell its peers.
pub(crate) fn install_hooks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        crate::api::on_transport_shutdown(finalize_for_mpi);
        extern "C" fn at_exit() {
            crate::api::sync::mark_all_exited();
        }
        // SAFETY: registering a plain function that never unwinds.
        unsafe { libc::atexit(at_exit) };
    });
}

/// `MPI_Finalize` is under way with contexts still live: finalize them (collective:
/// every rank is in `MPI_Finalize`, and runs this for the same contexts in the same
/// order). Their handles stay valid memory; `fh_finalize` on them then succeeds.
fn finalize_for_mpi() {
    let _in = crate::api::progress::Inside::enter();
    let list: Vec<usize> = std::mem::take(&mut *HANDLES.lock());
    for p in list {
        // SAFETY: the address came from fh_ctx_t::new and handles are never freed;
        // MPI_Finalize is called when no other thread uses the library.
        let h = unsafe { &*(p as *const fh_ctx_t) };
        if h.magic.load(Ordering::Acquire) != CTX_LIVE {
            continue;
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { (*h.ctx.get()).as_ref() } {
            if let Err(e) = c.finalize() {
                eprintln!(
                    "firehose[{}]: finalizing a context inside MPI_Finalize: {}",
                    c.rank, e
                );
            }
        }
        h.magic.store(CTX_MPI_DONE, Ordering::Release);
        // SAFETY: as above; nobody else holds a reference into it now.
        drop(unsafe { (*h.ctx.get()).take() });
    }
}

/// Borrow the context behind a C handle, or say what is wrong with the handle.
///
/// # Safety
/// `p` must be null or a pointer returned by `fh_init*` (finalized handles are fine).
pub(crate) unsafe fn ctx_ref<'a>(p: *const fh_ctx_t) -> Result<&'a Context> {
    if p.is_null() {
        return Err(crate::err!(
            InvalidArg,
            "ctx is NULL (create one with fh_init)"
        ));
    }
    // SAFETY: non-null handles come from fh_init* and are never freed.
    let h = unsafe { &*p };
    match h.magic.load(Ordering::Acquire) {
        CTX_LIVE => {}
        CTX_DEAD => return Err(crate::err!(State, "ctx was finalized")),
        CTX_MPI_DONE => {
            return Err(crate::err!(
                State,
                "ctx was finalized by MPI_Finalize (call fh_finalize before MPI_Finalize)"
            ))
        }
        _ => {
            return Err(crate::err!(
                InvalidArg,
                "ctx is not a firehose context (uninitialised or corrupted pointer)"
            ))
        }
    }
    // SAFETY: the Option is only taken by fh_finalize, which the header forbids to
    // run concurrently with other calls on the same context.
    match unsafe { &*h.ctx.get() } {
        Some(c) => Ok(c),
        None => Err(crate::err!(State, "ctx was finalized")),
    }
}

/// Finalize and retire a handle.
///
/// # Safety
/// As `ctx_ref`; no other thread may use the context concurrently.
pub(crate) unsafe fn ctx_finalize(p: *mut fh_ctx_t) -> Result<()> {
    // SAFETY: non-null handles come from fh_init* and are never freed.
    if !p.is_null() && unsafe { &*p }.magic.load(Ordering::Acquire) == CTX_MPI_DONE {
        return Ok(()); // MPI_Finalize did it
    }
    // SAFETY: forwarded contract.
    let c = unsafe { ctx_ref(p)? };
    let r = c.finalize();
    if c.state() == crate::api::ctx::State::Live {
        // Refused before any teardown (e.g. called from a handler): still usable.
        return r;
    }
    // SAFETY: p was validated above.
    let h = unsafe { &*p };
    h.magic.store(CTX_DEAD, Ordering::Release);
    HANDLES.lock().retain(|&x| x != p as usize);
    // SAFETY: no concurrent users (caller contract); dropping the context here.
    drop(unsafe { (*h.ctx.get()).take() });
    r
}

/// Build a slice from a C pointer + count, refusing NULL with a non-zero count.
///
/// # Safety
/// If non-null, `p` must be valid for `n` elements for the returned lifetime.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(crate::err!(
            InvalidArg,
            "{} is NULL but its count is {}",
            what,
            n
        ));
    }
    // SAFETY: caller contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// As `slice`, mutable.
///
/// # Safety
/// As `slice`, and no aliasing for the lifetime.
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(crate::err!(
            InvalidArg,
            "{} is NULL but its count is {}",
            what,
            n
        ));
    }
    // SAFETY: caller contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Write an out-parameter, refusing NULL.
///
/// # Safety
/// If non-null, `p` must be valid for a write of `T`.
pub(crate) unsafe fn out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(crate::err!(InvalidArg, "{} is NULL", what));
    }
    // SAFETY: caller contract.
    unsafe { p.write(v) };
    Ok(())
}
