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
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub mod am;
pub mod atomic;
pub mod extended;
pub mod firehose;
pub mod handle;
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
pub mod vis;

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

/// Every live context, behind its handle (`handle`).
static CTXS: handle::Table<Context> = handle::Table::new("fh_ctx_t", 1, "fh_finalize");

/// Handles of contexts `MPI_Finalize` finalized (the program called it first):
/// `fh_finalize` on them then succeeds, every other call is `FH_ERR_STATE`.
static MPI_DONE: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());

/// Opaque context handle (`fh_ctx_t *`): a generation-checked table entry, never a
/// pointer to memory (`handle`).
pub struct fh_ctx_t {
    _opaque: [u8; 0],
}

impl fh_ctx_t {
    pub(crate) fn new(ctx: Context) -> Result<*mut fh_ctx_t> {
        Ok(CTXS.insert(Box::new(ctx))? as *mut fh_ctx_t)
    }
}

/// Before any context exists: have `MPI_Finalize` finalize the contexts still live,
/// and a process that exits without finalizing tell its peers.
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
/// order: the table's slots were filled in creation order on every rank).
fn finalize_for_mpi() {
    let _in = crate::api::progress::Inside::enter();
    for h in CTXS.handles() {
        if let Ok(c) = CTXS.get(h) {
            if let Err(e) = c.finalize() {
                eprintln!(
                    "firehose[{}]: finalizing a context inside MPI_Finalize: {}",
                    c.rank, e
                );
            }
        }
        if CTXS.remove(h).is_ok() {
            MPI_DONE.lock().push(h);
        }
    }
}

/// Borrow the context behind a C handle, or say what is wrong with the handle.
///
/// # Safety
/// The reference is valid until the context is finalized, which the header forbids
/// to happen concurrently with any other call on it.
#[inline]
pub(crate) unsafe fn ctx_ref<'a>(p: *const fh_ctx_t) -> Result<&'a Context> {
    CTXS.get(p as usize).map_err(|e| ctx_ref_failed(p, e))
}

/// What [`ctx_ref`] says about a handle it could not resolve.
#[cold]
fn ctx_ref_failed(p: *const fh_ctx_t, e: Error) -> Error {
    if p.is_null() {
        crate::err!(InvalidArg, "ctx is NULL (create one with fh_init)")
    } else if MPI_DONE.lock().contains(&(p as usize)) {
        crate::err!(
            State,
            "ctx was finalized by MPI_Finalize (call fh_finalize before MPI_Finalize): {}",
            e.msg
        )
    } else {
        e
    }
}

/// Finalize and retire a handle.
///
/// # Safety
/// As `ctx_ref`; no other thread may use the context concurrently.
pub(crate) unsafe fn ctx_finalize(p: *mut fh_ctx_t) -> Result<()> {
    if MPI_DONE.lock().contains(&(p as usize)) {
        return Ok(()); // MPI_Finalize did it
    }
    // SAFETY: forwarded contract.
    let c = unsafe { ctx_ref(p)? };
    let r = c.finalize();
    if c.state() == crate::api::ctx::State::Live {
        // Refused before any teardown (e.g. called from a handler): still usable.
        return r;
    }
    drop(CTXS.remove(p as usize)?);
    r
}

/// Refuse a count no array of `T` can have (its bytes exceed `isize::MAX`, as a
/// count that wrapped around does), before anything reads the list.
fn check_count<T>(n: usize, what: &str) -> Result<()> {
    match n.checked_mul(std::mem::size_of::<T>().max(1)) {
        Some(b) if b <= isize::MAX as usize => Ok(()),
        _ => Err(crate::err!(
            InvalidArg,
            "{}: count {} is larger than any list can be",
            what,
            n
        )),
    }
}

/// Build a slice from a C pointer + count, refusing NULL with a non-zero count.
///
/// # Safety
/// If non-null, `p` must be valid for `n` elements for the returned lifetime.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    check_count::<T>(n, what)?;
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
    check_count::<T>(n, what)?;
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
