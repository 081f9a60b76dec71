//! Active messages: handler table, tokens, flow control, dispatch (seed 002, GASNet
//! core API: short / medium / long requests and replies).
//!
//! Flow control: each rank may have at most `FH_AM_CREDITS` requests outstanding
//! (sent but not yet handled) at each peer. A request takes a credit; the target
//! returns credits piggybacked on any frame it sends back, or in a credit-only control
//! frame once it owes at least half the window. Replies and control frames take no
//! credit: a handler may reply at most once, so replies in flight are bounded by
//! requests in flight. A sender out of credits polls (serving others) until credits
//! return: back-pressure, never loss.
//!
//! Safety of the target: every frame is decoded defensively; an unknown handler, a
//! long destination the target has not registered, or a malformed frame is refused
//! (counted, and the sender told with a `Refused` control frame) — never a fault.
//!
//! Handler indices: 0..=127 are the library's (`FH_AM_INDEX_LIB_MAX`), 128..=255 the
//! application's (`FH_AM_INDEX_USER_MIN`..`FH_AM_INDEX_USER_MAX`).

use super::ctx::CtxInner;
use super::stats::Stats;
use super::wire::{self, Category, Control, Frame, Role};
use crate::conduit::{LongIn, LongSrc};
use crate::runtime::error::{Error, Result, Status};
use crate::runtime::os;
use crate::{bail, err};
use parking_lot::RwLock;
use std::cell::Cell;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const INDEX_USER_MIN: usize = 128;
pub const INDEX_USER_MAX: usize = 255;

/// Library handler indices.
pub const H_INVALIDATE: u8 = 3;
pub const H_INVAL_ACK: u8 = 4;

/// The C handler signature (see `fh_am_handler_t`).
pub type HandlerFn =
    unsafe extern "C" fn(*mut Token, *mut c_void, usize, *const u64, usize, *mut c_void);
/// A library-internal handler.
pub type InternalFn = fn(&CtxInner, &Token, &Frame<'_>);

#[derive(Clone, Copy)]
pub enum Handler {
    User { f: HandlerFn, user: usize },
    Internal(InternalFn),
}

const TOKEN_MAGIC: u64 = 0x746f_6b65_6e5f_6668;

/// Opaque token passed to an AM handler: names the message's source and is the
/// only way to reply. Valid only during that handler call.
pub struct Token {
    magic: u64,
    ctx: *const CtxInner,
    pub src: usize,
    pub is_request: bool,
    replied: Cell<bool>,
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

    pub fn ctx(&self) -> &CtxInner {
        // SAFETY: a token only exists on the dispatcher's stack while the context
        // that dispatches it is alive (it borrows it for the handler's duration).
        unsafe { &*self.ctx }
    }
}

struct Peer {
    /// Credits we may still spend on requests to this peer.
    /// Invariant: 0 <= avail <= FH_AM_CREDITS.
    avail: AtomicUsize,
    /// Credits we owe this peer (its requests we received and did not yet credit).
    owed: AtomicUsize,
}

impl Peer {
    /// Take one credit if there is one.
    fn try_acquire(&self) -> bool {
        self.avail
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_sub(1))
            .is_ok()
    }

    /// Take what we owe, for a frame going to this peer (at most u16::MAX).
    fn take_owed(&self) -> u16 {
        let n = self.owed.swap(0, Ordering::AcqRel);
        if n > u16::MAX as usize {
            self.owed.fetch_add(n - u16::MAX as usize, Ordering::AcqRel);
            return u16::MAX;
        }
        n as u16
    }

    fn give_back(&self, credits: u16) {
        self.owed.fetch_add(credits as usize, Ordering::AcqRel);
    }
}

pub struct AmState {
    handlers: RwLock<Vec<Option<Handler>>>,
    peers: Vec<Peer>,
    credits: usize,
    threshold: usize,
}

thread_local! {
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread runs an AM handler.
/// Handlers running right now in this process (any context, any thread). Lets the
/// fast paths skip the thread-local lookup (a call into the dynamic loader's TLS code
/// in a shared library) when no handler runs anywhere.
static HANDLERS_RUNNING: AtomicUsize = AtomicUsize::new(0);

#[inline]
pub fn in_handler() -> bool {
    HANDLERS_RUNNING.load(Ordering::Acquire) != 0 && IN_HANDLER.with(|h| h.get())
}

/// Run `f` as if it were a handler (library callbacks: blocking calls refuse).
pub fn run_as_handler<R>(f: impl FnOnce() -> R) -> R {
    HANDLERS_RUNNING.fetch_add(1, Ordering::AcqRel);
    let prev = IN_HANDLER.with(|h| h.replace(true));
    let r = f();
    IN_HANDLER.with(|h| h.set(prev));
    HANDLERS_RUNNING.fetch_sub(1, Ordering::AcqRel);
    r
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

impl AmState {
    pub fn new(size: usize, credits: usize) -> AmState {
        let mut h: Vec<Option<Handler>> = vec![None; 256];
        h[H_INVALIDATE as usize] = Some(Handler::Internal(super::mem::handle_invalidate));
        h[H_INVAL_ACK as usize] = Some(Handler::Internal(super::mem::handle_inval_ack));
        h[super::fh::H_FH_MOVE as usize] = Some(Handler::Internal(super::fh::handle_move));
        h[super::fh::H_FH_ANSWER as usize] = Some(Handler::Internal(super::fh::handle_answer));
        h[super::rpipe::open::H_RPIPE_HELLO as usize] =
            Some(Handler::Internal(super::rpipe::open::handle_hello));
        h[super::rpipe::open::H_RPIPE_BYE as usize] =
            Some(Handler::Internal(super::rpipe::open::handle_bye));
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
        }
    }
}

/// A long payload to send.
pub struct LongOut<'a> {
    pub dst: usize,
    pub data: &'a [u8],
}

impl CtxInner {
    pub fn am_register(&self, index: usize, f: HandlerFn, user: usize) -> Result<()> {
        self.check_live()?;
        if !(INDEX_USER_MIN..=INDEX_USER_MAX).contains(&index) {
            bail!(
                InvalidArg,
                "handler index {} is not in the application range {}..={} (0..=127 are reserved for the library)",
                index,
                INDEX_USER_MIN,
                INDEX_USER_MAX
            );
        }
        self.am.handlers.write()[index] = Some(Handler::User { f, user });
        Ok(())
    }

    fn check_am_args(&self, args: &[u64], payload_len: usize, cat: Category) -> Result<()> {
        if args.len() > wire::MAX_ARGS {
            bail!(
                InvalidArg,
                "nargs {} exceeds fh_am_max_args() = {}",
                args.len(),
                wire::MAX_ARGS
            );
        }
        match cat {
            Category::Medium if payload_len > self.cfg.am_max_medium => bail!(
                InvalidArg,
                "medium payload of {} bytes exceeds fh_am_max_medium() = {}",
                payload_len,
                self.cfg.am_max_medium
            ),
            Category::Long if payload_len > self.cfg.am_max_long => bail!(
                InvalidArg,
                "long payload of {} bytes exceeds fh_am_max_long() = {}",
                payload_len,
                self.cfg.am_max_long
            ),
            _ => Ok(()),
        }
    }

    /// Send an AM request. Blocks (progressing) while out of credits and, for long
    /// payloads, until the payload buffer may be reused.
    pub fn am_request(
        &self,
        dest: usize,
        cat: Category,
        handler: u8,
        args: &[u64],
        medium: &[u8],
        long: Option<LongOut<'_>>,
    ) -> Result<()> {
        self.check_live()?;
        check_not_in_handler("fh_am_request_*")?;
        let plen = long.as_ref().map(|l| l.data.len()).unwrap_or(medium.len());
        self.check_am_args(args, plen, cat)?;
        if cat == Category::Long {
            let l = long
                .as_ref()
                .ok_or_else(|| err!(Internal, "long request without payload"))?;
            if l.dst == 0 {
                bail!(InvalidArg, "long AM destination address is NULL");
            }
        }
        // Acquire a credit (back-pressure: serve others meanwhile).
        let peer = &self.am.peers[dest];
        let mut stalled = false;
        let mut watch = None;
        while !peer.try_acquire() {
            if !stalled {
                stalled = true;
                Stats::add(&self.stats.credit_stalls, 1);
                watch = Some(crate::api::stall::Watch::new(
                    self,
                    crate::api::stall::Wait::new(
                        "fh_am_request_*",
                        Some(dest),
                        "a flow-control credit (it has not handled our earlier requests)",
                    ),
                ));
            }
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
            if let Some(w) = watch.as_mut() {
                w.round()?;
            }
        }
        let credits = peer.take_owed();
        let long_dst = long.as_ref().map(|l| l.dst as u64).unwrap_or(0);
        let frame = wire::encode(
            self.conduit.frame_buffer(),
            self.conduit.caps().frame_headroom,
            cat,
            Role::Request,
            handler,
            credits,
            long_dst,
            args,
            medium,
        );
        let src = long.as_ref().map(|l| LongSrc::Borrowed {
            ptr: l.data.as_ptr(),
            len: l.data.len(),
        });
        match self.conduit.am_send(dest, frame, src) {
            Ok(id) => {
                Stats::add(&self.stats.am_requests_sent, 1);
                if let Some(id) = id {
                    self.wait_for(
                        crate::api::stall::Wait::new(
                            "fh_am_request_long",
                            Some(dest),
                            "the receiver taking the long payload",
                        ),
                        || self.conduit.send_done(id),
                    )?;
                }
                Ok(())
            }
            Err(e) => {
                peer.avail.fetch_add(1, Ordering::AcqRel);
                peer.give_back(credits);
                Err(e)
            }
        }
    }

    /// Reply from inside a request handler. Never blocks.
    pub fn am_reply(
        &self,
        tok: &Token,
        cat: Category,
        handler: u8,
        args: &[u64],
        medium: &[u8],
        long: Option<LongOut<'_>>,
    ) -> Result<()> {
        if !tok.is_request {
            bail!(
                State,
                "replies may only be sent from request handlers, not from reply handlers"
            );
        }
        if tok.replied.get() {
            bail!(State, "a request handler may reply at most once");
        }
        let plen = long.as_ref().map(|l| l.data.len()).unwrap_or(medium.len());
        self.check_am_args(args, plen, cat)?;
        if let Some(l) = &long {
            if l.dst == 0 {
                bail!(InvalidArg, "long AM destination address is NULL");
            }
        }
        let credits = self.am.peers[tok.src].take_owed();
        let long_dst = long.as_ref().map(|l| l.dst as u64).unwrap_or(0);
        let frame = wire::encode(
            self.conduit.frame_buffer(),
            self.conduit.caps().frame_headroom,
            cat,
            Role::Reply,
            handler,
            credits,
            long_dst,
            args,
            medium,
        );
        // Owned copy: a handler must not wait for the payload to drain.
        let src = long.map(|l| LongSrc::Owned(l.data.to_vec()));
        match self.conduit.am_send(tok.src, frame, src) {
            Ok(_) => {
                tok.replied.set(true);
                Stats::add(&self.stats.am_replies_sent, 1);
                Ok(())
            }
            Err(e) => {
                self.am.peers[tok.src].give_back(credits);
                Err(e)
            }
        }
    }

    fn send_control(&self, dest: usize, c: Control, args: &[u64]) {
        let credits = self.am.peers[dest].take_owed();
        let frame = wire::encode(
            self.conduit.frame_buffer(),
            self.conduit.caps().frame_headroom,
            Category::Short,
            Role::Control(c),
            0,
            credits,
            0,
            args,
            &[],
        );
        if let Err(e) = self.conduit.am_send(dest, frame, None) {
            self.am.peers[dest].give_back(credits);
            self.record_async_error(err!(
                Transport,
                "could not send a control frame to rank {}: {}",
                dest,
                e.msg
            ));
        }
    }

    fn refuse(&self, src: usize, status: Status, handler: u8, why: String) {
        Stats::add(&self.stats.am_refused_by_us, 1);
        if self.cfg.verbose {
            eprintln!(
                "firehose[{}]: refused an AM from rank {} (handler {}): {}",
                self.rank, src, handler, why
            );
        }
        self.send_control(
            src,
            Control::Refused,
            &[status.code() as i64 as u64, handler as u64],
        );
    }

    /// Is `[addr, addr+len)` memory a peer may deposit into (heap or registered)?
    pub fn local_accessible(&self, addr: usize, len: usize) -> bool {
        if self.heap.contains(addr, len) {
            return true;
        }
        self.local_regs.lookup(addr, len, None).is_some() && os::is_mapped(addr, len)
    }

    /// Entry point for every arrived frame (called by the conduit's poll).
    pub(crate) fn dispatch(&self, src: usize, bytes: &mut [u8], long: Option<&mut dyn LongIn>) {
        let f = match wire::decode(bytes) {
            Ok(f) => f,
            Err(why) => {
                Stats::add(&self.stats.am_malformed, 1);
                if self.cfg.verbose {
                    eprintln!(
                        "firehose[{}]: dropped a malformed AM frame from rank {}: {}",
                        self.rank, src, why
                    );
                }
                return;
            }
        };
        if f.credits > 0 {
            let before = self.am.peers[src]
                .avail
                .fetch_add(f.credits as usize, Ordering::AcqRel);
            debug_assert!(
                before + f.credits as usize <= self.am.credits,
                "peer returned more credits than it was given"
            );
        }
        let is_request = match f.role {
            Role::Control(Control::Credit) => return,
            Role::Control(Control::Refused) => {
                Stats::add(&self.stats.am_refused_by_peer, 1);
                let status = Status::from_code(f.args.first().copied().unwrap_or(0) as i64 as i32)
                    .unwrap_or(Status::Transport);
                let status = if status.code() < 0 {
                    status
                } else {
                    Status::Transport
                };
                self.record_async_error(Error::new(
                    status,
                    format!(
                        "rank {} refused an active message to handler {}: {}",
                        src,
                        f.args.get(1).copied().unwrap_or(0),
                        status.describe().trim_end_matches('\0')
                    ),
                ));
                return;
            }
            Role::Request => true,
            Role::Reply => false,
        };
        if is_request {
            self.am.peers[src].owed.fetch_add(1, Ordering::AcqRel);
        }
        let handler = self.am.handlers.read()[f.handler as usize];
        let outcome = self.place_and_run(src, is_request, &f, handler, long);
        if let Err(e) = outcome {
            self.refuse(src, e.status, f.handler, e.msg.clone());
        }
        Stats::add(&self.stats.am_handled, 1);
        if is_request {
            let owed = self.am.peers[src].owed.load(Ordering::Acquire);
            if owed >= self.am.threshold {
                self.send_control(src, Control::Credit, &[]);
            }
        }
    }

    fn place_and_run(
        &self,
        src: usize,
        is_request: bool,
        f: &Frame<'_>,
        handler: Option<Handler>,
        long: Option<&mut dyn LongIn>,
    ) -> Result<()> {
        let Some(handler) = handler else {
            bail!(
                InvalidArg,
                "no handler is registered at index {}",
                f.handler
            );
        };
        let (buf, nbytes) = match f.category {
            Category::Short => (std::ptr::null_mut(), 0usize),
            Category::Medium => (f.payload.as_ptr() as *mut c_void, f.payload.len()),
            Category::Long => {
                let Some(l) = long else {
                    bail!(Transport, "long frame arrived without its payload");
                };
                let (dst, len) = (f.long_dst as usize, l.len());
                if len > 0 {
                    if !self.local_accessible(dst, len) {
                        bail!(
                            Access,
                            "long AM destination [{:#x}, +{}) is not registered memory of rank {}",
                            dst,
                            len,
                            self.rank
                        );
                    }
                    // SAFETY: [dst, dst+len) is inside our heap or a registered,
                    // currently mapped region, checked just above.
                    unsafe { l.deliver_to(dst as *mut u8)? };
                }
                (dst as *mut c_void, len)
            }
        };
        let tok = Token {
            magic: TOKEN_MAGIC,
            ctx: self as *const CtxInner,
            src,
            is_request,
            replied: Cell::new(false),
        };
        HANDLERS_RUNNING.fetch_add(1, Ordering::AcqRel);
        let prev = IN_HANDLER.with(|h| h.replace(true));
        let r = match handler {
            Handler::User { f: func, user } => {
                let args = f.args();
                // SAFETY: calling the application's handler with the documented
                // arguments: a token valid for this call, the payload (valid for this
                // call), and the args array of nargs entries.
                unsafe {
                    func(
                        &tok as *const Token as *mut Token,
                        buf,
                        nbytes,
                        args.as_ptr(),
                        args.len(),
                        user as *mut c_void,
                    )
                };
                Ok(())
            }
            Handler::Internal(func) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| func(self, &tok, f)))
                    .map_err(|_| err!(Internal, "library handler {} panicked", f.handler))
            }
        };
        IN_HANDLER.with(|h| h.set(prev));
        HANDLERS_RUNNING.fetch_sub(1, Ordering::AcqRel);
        let _ = src;
        r
    }

    /// Largest medium payload.
    pub fn am_max_medium(&self) -> usize {
        self.cfg.am_max_medium
    }
    pub fn am_max_long(&self) -> usize {
        self.cfg.am_max_long
    }
}
