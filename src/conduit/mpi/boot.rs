//! MPI bootstrap: who owns MPI, which MPI we run under, thread level.
//!
//! Guarantees: the library calls `MPI_Init_thread` only from `fh_init_world` when MPI
//! is not initialised yet, and then (and only then) calls `MPI_Finalize` when the last
//! context is finalized. Before any other MPI call it checks that the MPI library the
//! program runs under is the one libfirehose was built against (two MPIs in one
//! process crash on the first real call), and refuses with a clear message otherwise.

use crate::runtime::config::ThreadLevel;
use crate::runtime::error::Result;
use crate::{bail, err};
use mpi::ffi;
use parking_lot::Mutex;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Which MPI family this library was compiled against, read from the compiled-in
/// ABI itself (so it can never disagree with what is linked): Open MPI's handles are
/// pointers, the MPICH family's (MPICH, Intel MPI, MVAPICH) are `int`s.
pub const BUILT_FOR: &str = if std::mem::size_of::<ffi::MPI_Comm>() == std::mem::size_of::<c_int>()
{
    "mpich"
} else {
    "openmpi"
};

static OWNED: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static BOOT: Mutex<()> = Mutex::new(());
/// Run at the start of `MPI_Finalize` (see [`on_mpi_finalize`]).
static FINALIZE_HOOK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();
/// The hook is registered with this MPI (an attribute on `MPI_COMM_SELF`).
static HOOKED: AtomicBool = AtomicBool::new(false);
/// Inside `MPI_Finalize`'s hook: [`close`] must not finalize MPI itself.
static IN_MPI_FINALIZE: AtomicBool = AtomicBool::new(false);
/// The keyval of the hook's attribute (valid while `HOOKED`).
static HOOK_KEY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// The attribute is being removed on purpose: its callback must do nothing.
static UNHOOKING: AtomicBool = AtomicBool::new(false);

/// The runtime MPI's `MPI_Get_library_version` string. Safe before `MPI_Init`
/// and ABI-identical in every MPI, so it can be called even under the wrong MPI.
pub fn library_version() -> String {
    let mut buf = vec![0 as c_char; 8192];
    let mut len: c_int = 0;
    // SAFETY: buf holds 8192 bytes, more than any MPI_MAX_LIBRARY_VERSION_STRING;
    // MPI writes at most that many bytes and sets len.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = buf[..(len.max(0) as usize).min(buf.len())]
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Refuse to run under a different MPI than the one we were built for.
pub fn check_library() -> Result<()> {
    let v = library_version();
    let first = v.lines().next().unwrap_or("").to_string();
    let runs = if v.contains("Open MPI") {
        "openmpi"
    } else if v.contains("MPICH") {
        "mpich"
    } else {
        "unknown"
    };
    if runs != "unknown" && runs != BUILT_FOR {
        bail!(
            Mpi,
            "libfirehose was built against {} but this program runs under {} ({}); \
             rebuild firehose with MPICC pointing at the program's MPI, or link the \
             program with the MPI in `pkg-config --variable=mpi firehose`",
            BUILT_FOR,
            runs,
            first
        );
    }
    Ok(())
}

pub fn is_initialized() -> bool {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Initialized may be called at any time and writes one int.
    unsafe { ffi::MPI_Initialized(&mut flag) };
    flag != 0
}

pub fn is_finalized() -> bool {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time and writes one int.
    unsafe { ffi::MPI_Finalized(&mut flag) };
    flag != 0
}

/// The thread level MPI provides (MPI must be initialised).
pub fn query_thread() -> ThreadLevel {
    let mut p: c_int = 0;
    // SAFETY: writes one int; MPI is initialised (caller's precondition).
    unsafe { ffi::MPI_Query_thread(&mut p) };
    level_from_mpi(p)
}

fn level_from_mpi(p: c_int) -> ThreadLevel {
    // SAFETY: reading extern constants exported by rsmpi's C shim.
    unsafe {
        if p == ffi::RSMPI_THREAD_MULTIPLE {
            ThreadLevel::Multiple
        } else if p == ffi::RSMPI_THREAD_SERIALIZED {
            ThreadLevel::Serialized
        } else if p == ffi::RSMPI_THREAD_FUNNELED {
            ThreadLevel::Funneled
        } else {
            ThreadLevel::Single
        }
    }
}

fn level_to_mpi(l: ThreadLevel) -> c_int {
    // SAFETY: reading extern constants exported by rsmpi's C shim.
    unsafe {
        match l {
            ThreadLevel::Single => ffi::RSMPI_THREAD_SINGLE,
            ThreadLevel::Funneled => ffi::RSMPI_THREAD_FUNNELED,
            ThreadLevel::Serialized => ffi::RSMPI_THREAD_SERIALIZED,
            ThreadLevel::Multiple => ffi::RSMPI_THREAD_MULTIPLE,
        }
    }
}

/// Make sure MPI can be used by a new context. With `init_if_needed`, initialise MPI
/// (requesting `level`) when nobody has; the library then owns MPI.
pub fn open(init_if_needed: Option<ThreadLevel>) -> Result<()> {
    let _g = BOOT.lock();
    check_library()?;
    if is_finalized() {
        bail!(State, "MPI is already finalized");
    }
    if !is_initialized() {
        let Some(level) = init_if_needed else {
            bail!(
                State,
                "MPI is not initialized: call MPI_Init/MPI_Init_thread before fh_init, or use fh_init_world"
            );
        };
        let mut provided: c_int = 0;
        // SAFETY: MPI is neither initialised nor finalized (checked above under the
        // boot lock); null argc/argv are allowed by MPI-2 and later.
        let rc = unsafe {
            ffi::MPI_Init_thread(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                level_to_mpi(level),
                &mut provided,
            )
        };
        if rc != 0 {
            bail!(Mpi, "MPI_Init_thread failed with code {}", rc);
        }
        OWNED.store(true, Ordering::Release);
    }
    hook_mpi_finalize();
    LIVE.fetch_add(1, Ordering::AcqRel);
    Ok(())
}

/// Have `hook` run when the program calls `MPI_Finalize` while contexts are live
/// (the layer above finalizes them there, so a program that calls `MPI_Finalize`
/// before `fh_finalize` neither aborts nor leaks). Set once per process.
pub fn on_mpi_finalize(hook: fn()) {
    let _ = FINALIZE_HOOK.set(hook);
}

/// MPI runs the delete callbacks of `MPI_COMM_SELF`'s attributes first thing in
/// `MPI_Finalize`, with MPI still fully usable (MPI-3.1 §8.7.1).
unsafe extern "C" fn self_attr_delete(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _val: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    if UNHOOKING.load(Ordering::Acquire) {
        return 0;
    }
    IN_MPI_FINALIZE.store(true, Ordering::Release);
    if let Some(h) = FINALIZE_HOOK.get() {
        // A panic must not unwind into MPI.
        let _ = std::panic::catch_unwind(h);
    }
    HOOKED.store(false, Ordering::Release);
    0
}

/// The attribute is never copied (`MPI_COMM_SELF` is not duplicated by us).
unsafe extern "C" fn self_attr_copy(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _in: *mut c_void,
    _out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer.
    unsafe { *flag = 0 };
    0
}

/// Register the `MPI_Finalize` hook with MPI (once per MPI lifetime; MPI is
/// initialised). Best effort: without it, `MPI_Finalize` before `fh_finalize` is the
/// program's mistake as before.
fn hook_mpi_finalize() {
    if HOOKED.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut key: c_int = 0;
    // SAFETY: both callbacks have the signatures MPI expects and never unwind; the
    // attribute value is unused (null).
    unsafe {
        if ffi::MPI_Comm_create_keyval(
            Some(self_attr_copy),
            Some(self_attr_delete),
            &mut key,
            std::ptr::null_mut(),
        ) == 0
        {
            HOOK_KEY.store(key, Ordering::Release);
            ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, key, std::ptr::null_mut());
        }
    }
}

/// The last context is gone: remove the attribute, so MPI holds no pointer into this
/// library (a program may `dlclose` it before `MPI_Finalize`). The next context
/// registers it again.
fn unhook_mpi_finalize() {
    if in_mpi_finalize() || is_finalized() || !HOOKED.swap(false, Ordering::AcqRel) {
        return;
    }
    let mut key = HOOK_KEY.load(Ordering::Acquire);
    UNHOOKING.store(true, Ordering::Release);
    // SAFETY: the keyval and attribute were created by hook_mpi_finalize; deleting
    // the attribute runs our callback, which UNHOOKING makes a no-op.
    unsafe {
        ffi::MPI_Comm_delete_attr(ffi::RSMPI_COMM_SELF, key);
        ffi::MPI_Comm_free_keyval(&mut key);
    }
    UNHOOKING.store(false, Ordering::Release);
}

/// True while `MPI_Finalize` runs the library's hook.
pub fn in_mpi_finalize() -> bool {
    IN_MPI_FINALIZE.load(Ordering::Acquire)
}

/// A context is gone. Finalizes MPI if we own it and this was the last context.
pub fn close() -> Result<()> {
    let _g = BOOT.lock();
    let before = LIVE.fetch_sub(1, Ordering::AcqRel);
    debug_assert!(before > 0, "close without open");
    if before == 1 {
        unhook_mpi_finalize();
    }
    if before == 1 && !in_mpi_finalize() && OWNED.swap(false, Ordering::AcqRel) && !is_finalized() {
        // SAFETY: we initialised MPI ourselves and no context of ours is alive.
        let rc = unsafe { ffi::PMPI_Finalize() };
        if rc != 0 {
            bail!(Mpi, "MPI_Finalize failed with code {}", rc);
        }
    }
    Ok(())
}

/// True if the library initialised MPI (and will finalize it).
pub fn owns_mpi() -> bool {
    OWNED.load(Ordering::Acquire)
}

/// `MPI_Error_string` for a return code.
pub fn error_string(rc: c_int) -> String {
    let mut buf = vec![0 as c_char; 1024];
    let mut len: c_int = 0;
    // SAFETY: buf is larger than MPI_MAX_ERROR_STRING in every MPI.
    let r = unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr(), &mut len) };
    if r != 0 {
        return format!("MPI error code {}", rc);
    }
    let bytes: Vec<u8> = buf[..(len.max(0) as usize).min(buf.len())]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).to_string()
}

/// Turn an MPI return code into a `Result`, naming the call.
#[inline]
pub fn check(rc: c_int, what: impl FnOnce() -> String) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(mpi_error(rc, what()))
    }
}

#[cold]
#[inline(never)]
fn mpi_error(rc: c_int, what: String) -> crate::runtime::error::Error {
    err!(Mpi, "{} failed: {}", what, error_string(rc))
}

/// Open MPI's `osc_rdma_max_attach` (attachments one dynamic window holds), read
/// through the MPI tool interface once per process; `None` when this MPI has no
/// such variable (MPICH: no limit) or the read fails. Works before `MPI_Init` too.
///
/// Read once: the variable is fixed when the process starts, and each read
/// (`MPI_T_init_thread` .. `MPI_T_finalize`) makes Open MPI register and open every
/// component again, about half a second, which every `fh_split` (every coarray FORM
/// TEAM) paid.
pub fn ompi_max_attach() -> Option<usize> {
    static READ: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *READ.get_or_init(read_max_attach)
}

fn read_max_attach() -> Option<usize> {
    let mut provided: c_int = 0;
    // Ask for the level MPI already provides: Open MPI 4.1's MPI_T_init_thread sets
    // the process's thread level to what it grants, so asking for SINGLE made an
    // MPI_THREAD_MULTIPLE program single-threaded from then on (MPI_Query_thread said
    // SINGLE, to the program and to the next context's fh_init, which then took
    // the fast paths without locks under real threads). Before MPI_Init (the tool
    // interface works then; firehose_info reads it so), MPI_Query_thread may not be
    // called, and MPI_Init_thread sets the level later anyway.
    let level = if is_initialized() && !is_finalized() {
        level_to_mpi(query_thread())
    } else {
        level_to_mpi(ThreadLevel::Single)
    };
    // SAFETY: MPI_T may be initialised any number of times (paired with
    // MPI_T_finalize below); every out-pointer is a local of the right type, and the
    // variable is an MPI_UNSIGNED (4 bytes) read into an 8-byte zeroed buffer.
    unsafe {
        if ffi::MPI_T_init_thread(level, &mut provided) != 0 {
            return None;
        }
        let mut idx: c_int = 0;
        let mut value: u64 = 0;
        let mut ok = false;
        if ffi::MPI_T_cvar_get_index(b"osc_rdma_max_attach\0".as_ptr() as *const c_char, &mut idx)
            == 0
        {
            let mut h: ffi::MPI_T_cvar_handle = std::mem::zeroed();
            let mut count: c_int = 0;
            if ffi::MPI_T_cvar_handle_alloc(idx, std::ptr::null_mut(), &mut h, &mut count) == 0 {
                ok = count == 1
                    && ffi::MPI_T_cvar_read(h, &mut value as *mut u64 as *mut c_void) == 0;
                ffi::MPI_T_cvar_handle_free(&mut h);
            }
        }
        ffi::MPI_T_finalize();
        // MPI_UNSIGNED: the low 4 bytes on this little-endian target.
        (ok && value as u32 > 0).then_some(value as u32 as usize)
    }
}
