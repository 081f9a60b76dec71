//! Progress while the application is not in the library.
//!
//! Target-side work (firehose moves, invalidations and their acks, AM requests and
//! replies, rpipe and lock hand-offs over MPI) needs the target's CPU to run the
//! library's poll. A rank that waits inside a blocking MPI call (`MPI_Barrier`,
//! `MPI_Wait`, `MPI_Recv`, a collective, `MPI_Finalize`, ...) is not in the library,
//! so without help a peer that needs its answer waits for ever, and if that peer is
//! itself on its way to the same `MPI_Barrier`, the job hangs.
//!
//! The mechanism (chosen in README "Progress and MPI interoperability"): the C and
//! Fortran blocking MPI calls are interposed (`ffi::pmpi`); the wrapper starts the
//! non-blocking form of the call and, until it completes, alternates `PMPI_Test`
//! with [`serve`], which polls every context registered here.
//!
//! Guarantees:
//! - [`serve`] runs only from threads that are not already inside the library
//!   ([`inside`] is false): the library's own MPI calls, AM handlers that call MPI,
//!   and the progress thread never re-enter it.
//! - A context is served from `register` until `unregister` (at the start of its
//!   finalize); `serve` never touches a context after `unregister` returned.
//! - With no registered context (or `FH_MPI_PROGRESS=0` everywhere) the wrappers cost
//!   one relaxed load and go straight to MPI.

use super::ctx::CtxInner;
/// The transport's side of the loop (the conduit knows its requests); re-exported so
/// the C boundary names only this layer.
pub use crate::conduit::interop::{drive, drive_request, same_ranks_as};
use parking_lot::RwLock;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Contexts served inside blocking MPI calls, in creation order.
static SERVED: RwLock<Vec<Arc<CtxInner>>> = RwLock::new(Vec::new());
/// `SERVED.len()`, readable without the lock.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How deep this thread is inside the library (C boundary, progress thread,
    /// a wrapper's own serve). Invariant: > 0 exactly while such a scope is open.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// A scope inside the library: while it lives, interposed MPI calls on this thread
/// go straight to MPI.
pub struct Inside(());

impl Inside {
    #[inline]
    pub fn enter() -> Inside {
        DEPTH.with(|d| d.set(d.get() + 1));
        Inside(())
    }
}

impl Drop for Inside {
    #[inline]
    fn drop(&mut self) {
        DEPTH.with(|d| {
            debug_assert!(d.get() > 0, "unbalanced library scope");
            d.set(d.get() - 1)
        });
    }
}

/// True while this thread is inside the library.
#[inline]
pub fn inside() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// True when a blocking MPI call on this thread should serve the library.
#[inline]
pub fn wanted() -> bool {
    ACTIVE.load(Ordering::Relaxed) > 0 && !inside()
}

/// Serve `ctx` inside blocking MPI calls from now on (when its settings ask for it).
pub fn register(ctx: &Arc<CtxInner>) {
    if !ctx.cfg.serve_blocking || !ctx.conduit.caps().interop {
        return;
    }
    let mut g = SERVED.write();
    g.push(ctx.clone());
    ACTIVE.store(g.len(), Ordering::Relaxed);
}

/// True when `ctx` is served inside blocking MPI calls.
pub fn wanted_for(ctx: &CtxInner) -> bool {
    SERVED
        .read()
        .iter()
        .any(|c| std::ptr::eq(Arc::as_ptr(c), ctx))
}

/// Stop serving `ctx` (idempotent).
pub fn unregister(ctx: &CtxInner) {
    let mut g = SERVED.write();
    g.retain(|c| !std::ptr::eq(Arc::as_ptr(c), ctx));
    ACTIVE.store(g.len(), Ordering::Relaxed);
}

/// Poll every served context once; returns how many frames were handled. Never
/// panics out (a panic in a handler is recorded as the context's asynchronous error).
pub fn serve() -> usize {
    let _in = Inside::enter();
    let Some(g) = SERVED.try_read() else {
        return 0; // a context is being created or finalized: try again next round
    };
    let mut n = 0;
    for c in g.iter() {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.progress_once())) {
            Ok(Ok(k)) => n += k,
            Ok(Err(e)) => c.record_async_error(e),
            Err(_) => c.record_async_error(crate::err!(
                Internal,
                "panic while serving the library inside a blocking MPI call"
            )),
        }
    }
    n
}

/// Poll every served context but `me` once: a blocking wait of one context keeps
/// the others answering (as a blocking MPI call progresses every communicator), so
/// a rank waiting in one context never starves a peer waiting in another (an
/// `fh_mem_unregister` in one while the peer already finalizes the next; a
/// finalizing context is no longer in the list, so "others" is then all of it).
/// Costs one relaxed load when no context is served.
pub fn serve_others(me: &CtxInner) -> usize {
    if ACTIVE.load(Ordering::Relaxed) == 0 || super::am::table::in_handler() {
        return 0;
    }
    let Some(g) = SERVED.try_read() else {
        return 0;
    };
    let mut n = 0;
    for c in g.iter().filter(|c| !std::ptr::eq(Arc::as_ptr(c), me)) {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.progress_once())) {
            Ok(Ok(k)) => n += k,
            Ok(Err(e)) => c.record_async_error(e),
            Err(_) => c.record_async_error(crate::err!(
                Internal,
                "panic while serving the library from another context's wait"
            )),
        }
    }
    n
}

/// Every served context's ranks meet in a barrier that serves the library while it
/// waits (`MPI_Finalize`), in creation order.
pub fn serving_barriers(serve: &mut dyn FnMut() -> usize) {
    let list: Vec<Arc<CtxInner>> = SERVED.read().clone();
    for c in &list {
        crate::conduit::interop::serving_barrier(&*c.conduit, serve);
    }
}

/// The first served context for which `same_ranks` holds (its ranks are the
/// window's: `MPI_Win_fence`) meets in a serving barrier; its status (0 when none
/// matched).
pub fn first_serving_barrier(
    same_ranks: &mut dyn FnMut(&dyn crate::conduit::Conduit) -> bool,
    serve: &mut dyn FnMut() -> usize,
) -> i32 {
    let list: Vec<Arc<CtxInner>> = SERVED.read().clone();
    match list.iter().find(|c| same_ranks(&*c.conduit)) {
        Some(c) => crate::conduit::interop::serving_barrier(&*c.conduit, serve),
        None => 0,
    }
}
