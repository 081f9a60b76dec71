//! Header section: configuration and lifecycle.

use super::{ctx_finalize, ctx_ref, fh_ctx_t, OK};
use crate::api::settings::Settings;
use crate::api::{Context, Launch};
use crate::runtime::config::{Config, Pin, Progress, ThreadLevel};
use crate::runtime::error::{set_last_error, Result};
use std::io::Write;
use std::os::raw::{c_int, c_uint};

/// `fh_config_t.progress`: progress only inside library calls.
pub const FH_PROGRESS_POLL: c_int = 0;
/// `fh_config_t.progress`: also a progress thread (needs MPI_THREAD_MULTIPLE).
pub const FH_PROGRESS_THREAD: c_int = 1;
/// `fh_config_t.pin`: registered memory is also mlocked.
pub const FH_PIN_MLOCK: c_int = 0;
/// `fh_config_t.pin`: conduit registration only.
pub const FH_PIN_NONE: c_int = 1;
/// `fh_config_t.mpi_thread` (thread level fh_init_world requests).
pub const FH_THREAD_SINGLE: c_int = 0;
pub const FH_THREAD_FUNNELED: c_int = 1;
pub const FH_THREAD_SERIALIZED: c_int = 2;
pub const FH_THREAD_MULTIPLE: c_int = 3;

/// Settings. Initialise with `fh_config_init` (defaults, then FH_* environment), change
/// fields, pass to `fh_init`. The environment still wins over fields at init.
/// `struct_size` must be `sizeof(fh_config_t)` (fh_config_init sets it).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fh_config_t {
    pub struct_size: usize,
    /// FH_PROGRESS: FH_PROGRESS_POLL or FH_PROGRESS_THREAD.
    pub progress: c_int,
    /// FH_PROGRESS_INTERVAL: microseconds the progress thread sleeps when idle.
    pub progress_interval_us: c_uint,
    /// FH_HEAP_SIZE: bytes of library heap (fh_malloc) per rank.
    pub heap_size: usize,
    /// FH_AM_MAX_MEDIUM: largest medium AM payload.
    pub am_max_medium: usize,
    /// FH_AM_MAX_LONG: largest long AM payload.
    pub am_max_long: usize,
    /// FH_AM_CREDITS: requests outstanding per peer (0 = auto).
    pub am_credits: c_uint,
    /// FH_AM_RECV_BUFFERS: pre-posted AM receive buffers.
    pub am_recv_buffers: c_uint,
    /// FH_PIN: FH_PIN_MLOCK or FH_PIN_NONE.
    pub pin: c_int,
    /// FH_MPI_THREAD: FH_THREAD_* level fh_init_world requests.
    pub mpi_thread: c_int,
    /// FH_VERBOSE: non-zero prints warnings to stderr.
    pub verbose: c_int,
}

fn to_struct(c: &Config) -> fh_config_t {
    fh_config_t {
        struct_size: std::mem::size_of::<fh_config_t>(),
        progress: match c.progress {
            Progress::Poll => FH_PROGRESS_POLL,
            Progress::Thread => FH_PROGRESS_THREAD,
        },
        progress_interval_us: c.progress_interval_us as c_uint,
        heap_size: c.heap_size,
        am_max_medium: c.am_max_medium,
        am_max_long: c.am_max_long,
        am_credits: c.am_credits as c_uint,
        am_recv_buffers: c.am_recv_buffers as c_uint,
        pin: match c.pin {
            Pin::Mlock => FH_PIN_MLOCK,
            Pin::None => FH_PIN_NONE,
        },
        mpi_thread: c.mpi_thread as c_int,
        verbose: c.verbose as c_int,
    }
}

/// The caller's struct as (setting, value) overrides of the fields that differ from
/// the defaults.
///
/// # Safety
/// `cfg` must be null or point to at least `struct_size` readable bytes.
///
/// Long because it compares each field of `fh_config_t` with the default, one
/// `if` per field mirroring the struct; the `struct_size` checks before them are the
/// SAFETY argument for copying a caller's possibly shorter (older-header) struct.
unsafe fn overrides(cfg: *const fh_config_t) -> Result<Vec<(&'static str, String)>> {
    if cfg.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: struct_size is the first field, always present.
    let size = unsafe { std::ptr::read_unaligned(cfg as *const usize) };
    let full = std::mem::size_of::<fh_config_t>();
    if size > full {
        crate::bail!(
            Version,
            "cfg->struct_size is {} but this library's fh_config_t is {} bytes (newer header?)",
            size,
            full
        );
    }
    if size < std::mem::size_of::<usize>() {
        crate::bail!(
            InvalidArg,
            "cfg->struct_size is {}: initialise cfg with fh_config_init",
            size
        );
    }
    let d = Settings::defaults();
    let mut c = to_struct(&d);
    // SAFETY: copy the prefix the caller has (older headers have fewer fields).
    unsafe {
        std::ptr::copy_nonoverlapping(
            cfg as *const u8,
            &mut c as *mut fh_config_t as *mut u8,
            size,
        )
    };
    let dd = to_struct(&d);
    let mut o: Vec<(&'static str, String)> = Vec::new();
    let word = |v: c_int, names: &[&str]| {
        names
            .get(v as usize)
            .filter(|_| v >= 0)
            .map(|s| s.to_string())
            .unwrap_or_else(|| format!("<invalid value {}>", v))
    };
    if c.progress != dd.progress {
        o.push(("FH_PROGRESS", word(c.progress, &["poll", "thread"])));
    }
    if c.progress_interval_us != dd.progress_interval_us {
        o.push(("FH_PROGRESS_INTERVAL", c.progress_interval_us.to_string()));
    }
    if c.heap_size != dd.heap_size {
        o.push(("FH_HEAP_SIZE", c.heap_size.to_string()));
    }
    if c.am_max_medium != dd.am_max_medium {
        o.push(("FH_AM_MAX_MEDIUM", c.am_max_medium.to_string()));
    }
    if c.am_max_long != dd.am_max_long {
        o.push(("FH_AM_MAX_LONG", c.am_max_long.to_string()));
    }
    if c.am_credits != dd.am_credits {
        o.push(("FH_AM_CREDITS", c.am_credits.to_string()));
    }
    if c.am_recv_buffers != dd.am_recv_buffers {
        o.push(("FH_AM_RECV_BUFFERS", c.am_recv_buffers.to_string()));
    }
    if c.pin != dd.pin {
        o.push(("FH_PIN", word(c.pin, &["mlock", "none"])));
    }
    if c.mpi_thread != dd.mpi_thread {
        o.push((
            "FH_MPI_THREAD",
            word(
                c.mpi_thread,
                &["single", "funneled", "serialized", "multiple"],
            ),
        ));
    }
    if c.verbose != dd.verbose {
        o.push((
            "FH_VERBOSE",
            if c.verbose != 0 { "1" } else { "0" }.to_string(),
        ));
    }
    Ok(o)
}

/// Fill `cfg` with the defaults, then the FH_* environment. A malformed environment
/// value is left at its default and reported by `fh_last_error` (and by `fh_init`,
/// which fails with FH_ERR_INVALID_ARG naming the variable).
/// Threads: any thread, at any time, no context needed.
#[no_mangle]
pub extern "C" fn fh_config_init(cfg: *mut fh_config_t) {
    crate::ffi_boundary!(value(), {
        if cfg.is_null() {
            crate::bail!(InvalidArg, "cfg is NULL");
        }
        let c = match Settings::from_env(&[]) {
            Ok(c) => c,
            Err(e) => {
                set_last_error(&e.to_string());
                Settings::defaults()
            }
        };
        // SAFETY: cfg is non-null and points to an fh_config_t (caller contract).
        unsafe { cfg.write(to_struct(&c)) };
        Ok(())
    })
}

fn finish_init(ctx: Result<Context>, ctx_out: *mut *mut fh_ctx_t) -> Result<c_int> {
    let ctx = ctx?;
    let h = fh_ctx_t::new(ctx)?;
    // SAFETY: ctx_out was checked non-null by the caller before any work.
    unsafe { *ctx_out = h };
    OK
}

/// Create a context on the communicator whose Fortran handle is `comm_f`
/// (`MPI_Comm_c2f(comm)` in C; the integer itself in Fortran). MPI must already be
/// initialised by the program (else FH_ERR_STATE); the library then never finalizes
/// MPI. `cfg` may be NULL (defaults + environment). Fails with FH_ERR_MPI if the
/// program runs a different MPI than the library was built for.
/// Settings are checked together, before anything is created: if some rank's settings
/// do not parse, or a setting that must be the same on every rank (fh_config_print
/// marks them) differs, fh_init fails on every rank with FH_ERR_INVALID_ARG naming the
/// setting and two ranks' values (or the rank and its error).
/// Errors: FH_ERR_INVALID_ARG (also: an intercommunicator; merge it with
/// MPI_Intercomm_merge), FH_ERR_STATE (MPI not initialised or finalized), FH_ERR_MPI.
/// Threads: collective over the communicator; call from one thread per rank. The new context may
/// then be used from several threads (see fh_init_world's thread level).
#[no_mangle]
pub extern "C" fn fh_init_comm_f(
    comm_f: c_int,
    cfg: *const fh_config_t,
    ctx_out: *mut *mut fh_ctx_t,
) -> c_int {
    crate::ffi_boundary!(status {
        if ctx_out.is_null() {
            crate::bail!(InvalidArg, "ctx_out is NULL");
        }
        // SAFETY: cfg is null or a caller-provided fh_config_t.
        let c = unsafe { overrides(cfg) }.and_then(|o| Settings::from_env(&o));
        super::install_hooks();
        finish_init(Context::new(Launch::Comm(comm_f), c), ctx_out)
    })
}

/// Collective over `ctx`: split its ranks into parts by `color` (the ranks with one
/// color form a part, ordered by `key`, then by their rank in `ctx`, as
/// MPI_Comm_split orders them) and create a context on this rank's part, with the
/// settings `cfg` (NULL: defaults + environment). Every rank must pass a color >= 0.
/// The parts set up in turn, in increasing color, one barrier of `ctx` apart: with
/// Open MPI 4.1, contexts created at the same time (fh_init_comm_f) on the parts of
/// one MPI_Comm_split can fail with FH_ERR_MPI, because two parts on one node collide
/// in MPI's one-sided component; fh_split never does. Splits of different contexts
/// at the same time (every part splitting again: nested teams) take turns too when
/// a part lies on one node (a lock of the mpirun job on that machine; without
/// Open MPI's session directory, of the user); parts spread over several nodes
/// do not, so there nested splits should be separated by a barrier of a context
/// they share. The new context is independent
/// of `ctx` (finalize each); its collectives and barriers involve only the part.
/// Errors: FH_ERR_INVALID_ARG (ctx_out NULL; a negative color on any rank: every rank
/// fails), FH_ERR_STATE (ctx finalized), FH_ERR_UNSUPPORTED (a context of the sim
/// conduit), FH_ERR_MPI.
/// Threads: collective over `ctx`; call from one thread per rank. Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_split(
    ctx: *mut fh_ctx_t,
    color: c_int,
    key: c_int,
    cfg: *const fh_config_t,
    ctx_out: *mut *mut fh_ctx_t,
) -> c_int {
    crate::ffi_boundary!(status {
        if ctx_out.is_null() {
            crate::bail!(InvalidArg, "ctx_out is NULL");
        }
        // SAFETY: validated handle.
        let parent = unsafe { ctx_ref(ctx)? };
        parent.check_live()?;
        let Some(comm) = parent.conduit.split_parent() else {
            crate::bail!(Unsupported, "fh_split: this context's transport cannot be split");
        };
        // SAFETY: cfg is null or a caller-provided fh_config_t.
        let c = unsafe { overrides(cfg) }.and_then(|o| Settings::from_env(&o));
        let how = Launch::Split { parent: comm, colour: color, key };
        finish_init(Context::new(how, c), ctx_out)
    })
}

/// End the job now: standard output and error are flushed, then every process of
/// the job (MPI_Abort on MPI_COMM_WORLD, whatever `ctx`'s communicator; this process
/// alone when MPI is not running) ends with exit status `code` (0 becomes 1: an abort
/// is a failure). For fatal errors, and Fortran's ERROR STOP. Does not return.
/// Threads: any thread, at any time, also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_abort(ctx: *mut fh_ctx_t, code: c_int) -> c_int {
    crate::ffi_boundary!(status {
        let code = if code == 0 { 1 } else { code };
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: C's stdio buffers of the program, flushed like exit() would.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        // SAFETY: validated handle (an invalid one falls back to the world).
        match unsafe { ctx_ref(ctx) } {
            Ok(c) if c.check_live().is_ok() => c.conduit.abort(code),
            _ => crate::conduit::abort_job(code),
        }
    })
}

/// Create a context on MPI_COMM_WORLD, initialising MPI first (with the thread level
/// of FH_MPI_THREAD, default MPI_THREAD_MULTIPLE) if the program has not. If the
/// library initialised MPI, finalizing its last context finalizes MPI.
/// Threads: collective over the communicator; call from one thread per rank. The new context may
/// then be used from several threads (see fh_init_world's thread level).
#[no_mangle]
pub extern "C" fn fh_init_world(cfg: *const fh_config_t, ctx_out: *mut *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        if ctx_out.is_null() {
            crate::bail!(InvalidArg, "ctx_out is NULL");
        }
        // SAFETY: cfg is null or a caller-provided fh_config_t.
        let c = unsafe { overrides(cfg) }.and_then(|o| Settings::from_env(&o));
        super::install_hooks();
        let level = c.as_ref().map_or(ThreadLevel::Multiple, |c| c.mpi_thread);
        finish_init(Context::new(Launch::World(level), c), ctx_out)
    })
}

/// Collective: complete all operations, serve AMs until every rank arrives, release
/// everything. Finalizes MPI only if fh_init_world initialised it and this was the
/// last context. The handle stays valid memory: later calls return FH_ERR_STATE.
/// Threads: collective; no other call on this context may run concurrently, and the context must
/// not be used by any thread afterwards.
#[no_mangle]
pub extern "C" fn fh_finalize(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: handle validated inside; caller guarantees exclusive use.
        unsafe { ctx_finalize(ctx)? };
        OK
    })
}

/// This rank in the context's communicator, or a negative FH_ERR_*.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_rank(ctx: *const fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.check_live()?;
        Ok(c.rank as c_int)
    })
}

/// Number of ranks in the context's communicator, or a negative FH_ERR_*.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_size(ctx: *const fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.check_live()?;
        Ok(c.size as c_int)
    })
}

/// Run pending AM handlers and progress. Returns FH_OK, or the first asynchronous
/// error since the last poll (e.g. a peer refused one of our AMs).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_poll(ctx: *mut fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        c.poll()?;
        OK
    })
}

/// Print every setting, its value and where it came from (default, fh_config_t,
/// environment), plus conduit facts (MPI library, thread level, progress thread), to
/// stdout. With `ctx` NULL, prints what defaults + environment give.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_config_print(ctx: *const fh_ctx_t) -> c_int {
    crate::ffi_boundary!(status {
        let text = if ctx.is_null() {
            let c = Settings::from_env(&[])?;
            format!("firehose {} configuration (no context):\n{}", env!("CARGO_PKG_VERSION"), c.render())
        } else {
            // SAFETY: validated handle.
            let c = unsafe { ctx_ref(ctx)? };
            c.check_live()?;
            c.render_config()
        };
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
        OK
    })
}
