//! The active-message engine's state, independent of the context that owns it: the
//! handler table, per-peer flow-control credits, tokens, and whether this thread runs
//! a handler.
//!
//! Handler indices: 0..=2 are unused (control frames carry no index), 3..=127 the
//! library's ([`LibHandler`], each registered by its subsystem), 128..=255 the
//! application's (`FH_AM_INDEX_USER_MIN`..`FH_AM_INDEX_USER_MAX`).
//!
//! Invariant (per peer): `0 <= avail <= FH_AM_CREDITS`.

pub use crate::api::wire::LibHandler;
use crate::runtime::error::Result;
use crate::{bail, err};
use parking_lot::{Mutex, RwLock};
use std::cell::Cell;
use std::collections::VecDeque;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const INDEX_USER_MIN: usize = 128;
pub const INDEX_USER_MAX: usize = 255;

/// The C handler signature (see `fh_am_handler_t`).
pub type HandlerFn =
    unsafe extern "C" fn(*mut Token, *mut c_void, usize, *const u64, usize, *mut c_void);

/// What runs for a handler index: an application's C handler, or one of the
/// library's (`F`: the context's internal handler type).
#[derive(Clone, Copy)]
pub enum Handler<F> {
    User { f: HandlerFn, user: usize },
    Internal(F),
}

const TOKEN_MAGIC: u64 = 0x746f_6b65_6e5f_6668;

/// Opaque token passed to an AM handler: names the message's source and is the
/// only way to reply. Valid only during that handler call.
pub struct Token {
    magic: u64,
    /// The dispatching context (erased here; `Token::ctx` gives it back typed).
    pub(crate) ctx: *const (),
    pub src: usize,
    pub is_request: bool,
    pub(crate) replied: Cell<bool>,
}

impl Token {
    /// Validate a token pointer handed back by C.
    ///
    /// # Safety
    /// `p` must be null or point to readable memory of `Token` size (a token the
    /// library passed to a handler that is still running).
    pub unsafe fn from_ptr<'a>(p: *const Token) -> Result<&'a Token> {
        if p.is_null() {
            bail!(InvalidArg, "token is NULL");
        }
        // SAFETY: non-null and, by the caller's contract, a live token.
        let t = unsafe { &*p };
        if t.magic != TOKEN_MAGIC {
            bail!(InvalidArg, "not a firehose AM token (tokens are only valid inside the handler they were passed to)");
        }
        Ok(t)
    }

    /// A token for a frame from `src` that `ctx` dispatches.
    pub(crate) fn new(ctx: *const (), src: usize, is_request: bool) -> Token {
        Token {
            magic: TOKEN_MAGIC,
            ctx,
            src,
            is_request,
            replied: Cell::new(false),
        }
    }
}

pub(crate) struct Peer {
    /// Credits we may still spend on requests to this peer.
    /// Invariant: 0 <= avail <= FH_AM_CREDITS.
    pub(crate) avail: AtomicUsize,
    /// Credits we owe this peer (its requests we received and did not yet credit).
    pub(crate) owed: AtomicUsize,
}

/// Add `n` to `c` and return what it held: a locked add when threads may race, else a
/// plain load and store (`CtxInner::concurrent`; a locked instruction costs several
/// nanoseconds, and more right after a message left).
fn add(c: &AtomicUsize, n: usize, concurrent: bool) -> usize {
    if concurrent {
        c.fetch_add(n, Ordering::AcqRel)
    } else {
        let v = c.load(Ordering::Relaxed);
        c.store(v + n, Ordering::Relaxed);
        v
    }
}

/// The counterpart of [`add`]: subtract `n` (no more than `c` holds).
fn sub(c: &AtomicUsize, n: usize, concurrent: bool) {
    if concurrent {
        c.fetch_sub(n, Ordering::AcqRel);
    } else {
        let v = c.load(Ordering::Relaxed);
        debug_assert!(v >= n, "subtracting {n} from {v}");
        c.store(v - n, Ordering::Relaxed);
    }
}

impl Peer {
    /// Take one credit if there is one.
    pub(crate) fn try_acquire(&self, concurrent: bool) -> bool {
        if !concurrent {
            let a = self.avail.load(Ordering::Relaxed);
            if a == 0 {
                return false;
            }
            self.avail.store(a - 1, Ordering::Relaxed);
            return true;
        }
        self.avail
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_sub(1))
            .is_ok()
    }

    /// Credits came back from the peer; returns how many we had before.
    pub(crate) fn returned(&self, credits: usize, concurrent: bool) -> usize {
        add(&self.avail, credits, concurrent)
    }

    /// We received a request from this peer: we owe it a credit.
    pub(crate) fn owe_one(&self, concurrent: bool) {
        add(&self.owed, 1, concurrent);
    }

    /// Take what we owe, for a frame going to this peer (at most u16::MAX).
    pub(crate) fn take_owed(&self, concurrent: bool) -> u16 {
        let n = if concurrent {
            self.owed.swap(0, Ordering::AcqRel)
        } else {
            let n = self.owed.load(Ordering::Relaxed);
            if n != 0 {
                self.owed.store(0, Ordering::Relaxed);
            }
            n
        };
        if n > u16::MAX as usize {
            add(&self.owed, n - u16::MAX as usize, concurrent);
            return u16::MAX;
        }
        n as u16
    }

    pub(crate) fn give_back(&self, credits: u16, concurrent: bool) {
        add(&self.owed, credits as usize, concurrent);
    }
}

pub struct AmState<F> {
    pub(crate) handlers: RwLock<Vec<Option<Handler<F>>>>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) credits: usize,
    pub(crate) threshold: usize,
    /// Application handler calls received by a thread in a no-interrupt section
    /// (`super::hsl`), in arrival order, run by the next thread outside one.
    pub(crate) postponed: Mutex<VecDeque<Postponed>>,
    /// `postponed.len()`, readable without the lock.
    pub(crate) postponed_n: AtomicUsize,
}

/// An application handler call kept for later (see `AmState::postponed`).
pub(crate) struct Postponed {
    pub(crate) src: usize,
    pub(crate) is_request: bool,
    pub(crate) handler: u8,
    pub(crate) f: HandlerFn,
    pub(crate) user: usize,
    pub(crate) args: Vec<u64>,
    /// A medium's payload (copied: the conduit's buffer is reused).
    pub(crate) payload: Vec<u8>,
    /// A long's payload, already in place at the destination.
    pub(crate) long: Option<(usize, usize)>,
}

thread_local! {
    pub(crate) static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread runs an AM handler.
/// Handlers running right now in this process (any context, any thread). Lets the
/// fast paths skip the thread-local lookup (a call into the dynamic loader's TLS code
/// in a shared library) when no handler runs anywhere.
pub(crate) static HANDLERS_RUNNING: AtomicUsize = AtomicUsize::new(0);

#[inline]
pub fn in_handler() -> bool {
    HANDLERS_RUNNING.load(Ordering::Acquire) != 0 && in_handler_here()
}

/// The thread-local half of [`in_handler`], out of line: inlined, the compiler
/// computes the thread-local's address (a call into the dynamic loader) before the
/// count's test, on every call.
#[inline(never)]
fn in_handler_here() -> bool {
    IN_HANDLER.with(|h| h.get())
}

/// While it lives, this thread runs a handler: [`in_handler`] says so, and the calls
/// a handler may not make refuse. The process-wide count moves with a plain load and
/// store when no threads race (`concurrent` false, as in [`add`]): a handler's entry
/// and exit are on an AM round trip's path.
pub(crate) struct HandlerScope {
    prev: bool,
    concurrent: bool,
}

impl HandlerScope {
    #[inline]
    pub(crate) fn enter(concurrent: bool) -> HandlerScope {
        add(&HANDLERS_RUNNING, 1, concurrent);
        HandlerScope {
            prev: IN_HANDLER.with(|h| h.replace(true)),
            concurrent,
        }
    }
}

impl Drop for HandlerScope {
    #[inline]
    fn drop(&mut self) {
        IN_HANDLER.with(|h| h.set(self.prev));
        sub(&HANDLERS_RUNNING, 1, self.concurrent);
    }
}

/// Run `f` as if it were a handler (library callbacks: blocking calls refuse).
pub fn run_as_handler<R>(f: impl FnOnce() -> R) -> R {
    let _h = HandlerScope::enter(true);
    f()
}

/// Calls that block or send requests are not allowed in handlers.
#[inline]
pub fn check_not_in_handler(what: &str) -> Result<()> {
    if in_handler() {
        return Err(in_handler_error(what));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn in_handler_error(what: &str) -> crate::runtime::error::Error {
    err!(
        State,
        "{} may not be called from inside an AM handler (handlers must not block; only replies are allowed)",
        what
    )
}

impl<F: Copy> AmState<F> {
    /// Flow-control state for `size` peers; `internal` are the library's handlers
    /// (their subsystems register them: `api::context`).
    pub fn new(size: usize, credits: usize, internal: &[(LibHandler, F)]) -> AmState<F> {
        let mut h: Vec<Option<Handler<F>>> = vec![None; 256];
        for &(id, f) in internal {
            debug_assert!(
                h[id as usize].is_none(),
                "handler {:?} registered twice",
                id
            );
            h[id as usize] = Some(Handler::Internal(f));
        }
        AmState {
            handlers: RwLock::new(h),
            peers: (0..size)
                .map(|_| Peer {
                    avail: AtomicUsize::new(credits),
                    owed: AtomicUsize::new(0),
                })
                .collect(),
            credits,
            threshold: (credits / 2).max(1),
            postponed: Mutex::new(VecDeque::new()),
            postponed_n: AtomicUsize::new(0),
        }
    }
}

/// A long payload to send.
pub struct LongOut<'a> {
    pub dst: usize,
    pub data: &'a [u8],
}
