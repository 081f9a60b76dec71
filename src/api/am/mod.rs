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
//! The state (handler table, credits, tokens) is in [`table`]; this file is the
//! engine: registration, sending, replying, dispatch.

pub mod hsl;
pub mod table;

pub use table::*;

use super::ctx::CtxInner;
use super::stats::Stats;
use super::wait::Source;
use super::wire::{self, Category, Control, Frame, Head, Role};
use crate::conduit::{LongIn, LongSrc, SendId};
use crate::runtime::error::{Error, Result, Status};
use crate::runtime::os;
use crate::{bail, err};
use std::os::raw::c_void;
use std::sync::atomic::Ordering;

impl Token {
    /// The context dispatching this token's frame.
    pub fn ctx(&self) -> &CtxInner {
        // SAFETY: a token only exists on the dispatcher's stack while the context
        // that dispatches it is alive (it borrows it for the handler's duration),
        // and `dispatch` erased exactly a `&CtxInner` into it.
        unsafe { &*(self.ctx as *const CtxInner) }
    }
}

/// Who an application handler call is for.
struct UserCall {
    src: usize,
    is_request: bool,
    index: u8,
    f: HandlerFn,
    user: usize,
}

/// A frame's head without credits yet (`CtxInner::send_frame` adds what it owes).
fn frame_head(category: Category, role: Role, handler: u8, long_dst: u64) -> Head {
    Head {
        category,
        role,
        handler,
        credits: 0,
        long_dst,
    }
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
        self.am_request_unchecked(dest, cat, handler, args, medium, long)
    }

    /// [`Self::am_request`] without the check that the context is live: for a
    /// library protocol whose caller checked the state itself (firehose moves and
    /// their answers still travel while fh_finalize completes transfers).
    pub(crate) fn am_request_unchecked(
        &self,
        dest: usize,
        cat: Category,
        handler: u8,
        args: &[u64],
        medium: &[u8],
        long: Option<LongOut<'_>>,
    ) -> Result<()> {
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
        // Acquire a credit (back-pressure: serve others meanwhile). Out of credits:
        // wait by the library's policy (`api::wait`). Credits come back in frames
        // only our own poll takes in, so it polls every round, and sleeps last on our
        // bell, which every frame sent to us rings.
        let peer = &self.am.peers[dest];
        if !peer.try_acquire(self.concurrent) {
            Stats::add(&self.stats.credit_stalls, 1);
            let what = crate::api::stall::Wait::new(
                "fh_am_request_*",
                Some(dest),
                "a flow-control credit (it has not handled our earlier requests)",
            );
            let own = self.bells.own(self.rank);
            self.wait_on(
                what,
                Source::Polled,
                || own,
                || Ok(peer.try_acquire(self.concurrent)),
            )?;
        }
        let long_dst = long.as_ref().map_or(0, |l| l.dst as u64);
        let head = frame_head(cat, Role::Request, handler, long_dst);
        let src = long.as_ref().map(|l| LongSrc::Borrowed {
            ptr: l.data.as_ptr(),
            len: l.data.len(),
        });
        match self.send_frame(dest, head, args, medium, src) {
            Ok(id) => {
                self.count(&self.stats.am_requests_sent, 1);
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
                peer.returned(1, self.concurrent);
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
        let long_dst = long.as_ref().map_or(0, |l| l.dst as u64);
        let head = frame_head(cat, Role::Reply, handler, long_dst);
        // Owned copy: a handler must not wait for the payload to drain.
        let src = long.map(|l| LongSrc::Owned(l.data.to_vec()));
        self.send_frame(tok.src, head, args, medium, src)?;
        tok.replied.set(true);
        self.count(&self.stats.am_replies_sent, 1);
        Ok(())
    }

    /// Send a frame to `dest` carrying the credits this rank owes it (given back if
    /// the send fails), and ring `dest`'s bell. A small frame without a long payload
    /// is encoded on the stack and goes straight into a node peer's ring when the
    /// conduit has one with room; anything else is encoded into a frame buffer.
    fn send_frame(
        &self,
        dest: usize,
        mut h: Head,
        args: &[u64],
        payload: &[u8],
        long: Option<LongSrc>,
    ) -> Result<Option<SendId>> {
        /// Frames up to this size are encoded straight into the conduit's memory
        /// when it has a direct path (every short frame fits).
        const SMALL: usize = 256;
        h.credits = self.am.peers[dest].take_owed(self.concurrent);
        let len = wire::frame_len(args.len(), payload.len());
        if long.is_none()
            && len <= SMALL
            && self.conduit.am_send_small(dest, len, &mut |dst| {
                wire::encode_into(dst, &h, args, payload)
            })
        {
            self.count(&self.hot.shard().frames_out, 1);
            self.bells.ring(dest);
            return Ok(None);
        }
        let headroom = self.conduit.caps().frame_headroom;
        let frame = wire::encode(self.conduit.frame_buffer(), headroom, &h, args, payload);
        let sent = self.conduit.am_send(dest, frame, long);
        self.bells.ring(dest);
        match &sent {
            Ok(_) => self.count(&self.hot.shard().frames_out, 1),
            Err(_) => self.am.peers[dest].give_back(h.credits, self.concurrent),
        }
        sent
    }

    fn send_control(&self, dest: usize, c: Control, args: &[u64]) {
        let head = frame_head(Category::Short, Role::Control(c), 0, 0);
        if let Err(e) = self.send_frame(dest, head, args, &[], None) {
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

    /// `fh_finalize`'s last step for AMs: rounds of a job-wide sum of the frames each
    /// rank sent and took in, serving meanwhile, until two rounds in a row give the
    /// same sums and they are equal (Mattern's four-counter method): then no frame
    /// is in flight and no handler will send one, so nothing sent before or during
    /// the finalize is lost when the transport closes. Conduits without a
    /// non-blocking sum skip it.
    pub(crate) fn am_quiesce(&self, watch: &mut super::stall::Watch<'_>) -> Result<()> {
        use crate::conduit::Reduce3;
        let mut last = None;
        loop {
            let v = [
                self.hot.sum(|s| &s.frames_out),
                self.hot.sum(|s| &s.frames_in),
                0,
            ];
            match self.conduit.reduce3_start(Reduce3::Sum, v) {
                Err(e) if e.status == Status::Unsupported => return Ok(()),
                r => r?,
            }
            let got = loop {
                let _ = self.progress_once();
                if let Some(g) = self.conduit.reduce3_test(Reduce3::Sum)? {
                    break g;
                }
                self.conduit.idle();
                watch.round()?;
            };
            if got[0] == got[1] && last == Some(got) {
                return Ok(());
            }
            last = Some(got);
        }
    }

    /// Entry point for every arrived frame (called by the conduit's poll).
    pub(crate) fn dispatch(&self, src: usize, bytes: &mut [u8], long: Option<&mut dyn LongIn>) {
        self.count(&self.hot.shard().frames_in, 1);
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
            let before = self.am.peers[src].returned(f.credits as usize, self.concurrent);
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
            self.am.peers[src].owe_one(self.concurrent);
        }
        let handler = if self.concurrent {
            self.am.handlers.read()[f.handler as usize]
        } else {
            // SAFETY: one thread at a time is inside the library (`concurrent` is
            // false), so no `am_register` writes the table during this read; the
            // entry is copied out at once.
            unsafe { (&*self.am.handlers.data_ptr())[f.handler as usize] }
        };
        let outcome = self.place_and_run(src, is_request, &f, handler, long);
        if let Err(e) = outcome {
            self.refuse(src, e.status, f.handler, e.msg.clone());
        }
        self.count(&self.stats.am_handled, 1);
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
        handler: Option<Handler<super::ctx::LibHandlerFn>>,
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
        if let Handler::User { f: func, user } = handler {
            let call = UserCall {
                src,
                is_request,
                index: f.handler,
                f: func,
                user,
            };
            if hsl::interrupts_held() {
                self.postpone(call, f.args(), buf, nbytes, f.category == Category::Long);
            } else {
                self.run_postponed();
                self.run_user(&call, buf, nbytes, f.args());
            }
            return Ok(());
        }
        let Handler::Internal(func) = handler else {
            unreachable!("user handlers returned above")
        };
        let tok = Token::new(self as *const CtxInner as *const (), src, is_request);
        let _h = HandlerScope::enter(self.concurrent);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| func(self, &tok, f)))
            .map_err(|_| err!(Internal, "library handler {} panicked", f.handler))
    }

    /// Run an application handler, now or postponed; a handler that returns holding
    /// a handler-safe lock or a no-interrupt section is reported, and what it held
    /// released (`hsl`).
    fn run_user(&self, c: &UserCall, buf: *mut c_void, nbytes: usize, args: &[u64]) {
        let tok = Token::new(self as *const CtxInner as *const (), c.src, c.is_request);
        // Nobody holding anything (the common case): this thread's marks are zero,
        // and the thread-locals need no look (`hsl::anyone_holds`).
        let (locks, holds) = if hsl::anyone_holds() {
            (hsl::held_mark(), hsl::holds())
        } else {
            (0, 0)
        };
        let scope = HandlerScope::enter(self.concurrent);
        // SAFETY: calling the application's handler with the documented arguments: a
        // token valid for this call, the payload (valid for this call), and the args
        // array of nargs entries.
        unsafe {
            (c.f)(
                &tok as *const Token as *mut Token,
                buf,
                nbytes,
                args.as_ptr(),
                args.len(),
                c.user as *mut c_void,
            )
        };
        drop(scope);
        let (left, sections) = if hsl::anyone_holds() {
            (hsl::release_since(locks), hsl::reset_holds(holds))
        } else {
            (0, 0)
        };
        if left + sections > 0 {
            self.record_async_error(err!(
                State,
                "the AM handler at index {} returned holding {} handler-safe lock(s) and {} no-interrupt section(s); the library released them (a handler must release what it takes before it returns)",
                c.index,
                left,
                sections
            ));
        }
    }

    /// Keep an application handler call received in a no-interrupt section.
    fn postpone(&self, c: UserCall, args: &[u64], buf: *mut c_void, nbytes: usize, long: bool) {
        let payload = if long || nbytes == 0 {
            Vec::new()
        } else {
            // SAFETY: a medium's payload: `nbytes` readable bytes of the frame.
            unsafe { std::slice::from_raw_parts(buf as *const u8, nbytes) }.to_vec()
        };
        let p = Postponed {
            src: c.src,
            is_request: c.is_request,
            handler: c.index,
            f: c.f,
            user: c.user,
            args: args.to_vec(),
            payload,
            long: long.then_some((buf as usize, nbytes)),
        };
        let mut q = self.am.postponed.lock();
        q.push_back(p);
        self.am.postponed_n.store(q.len(), Ordering::Release);
    }

    /// Run the application handler calls postponed by no-interrupt sections, oldest
    /// first, unless this thread is in a section or a handler itself. It runs on
    /// every poll: one load when nothing is postponed.
    #[inline]
    pub(crate) fn run_postponed(&self) {
        if self.am.postponed_n.load(Ordering::Acquire) != 0 {
            self.run_postponed_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn run_postponed_now(&self) {
        if hsl::interrupts_held() || in_handler() {
            return;
        }
        loop {
            let p = {
                let mut q = self.am.postponed.lock();
                let p = q.pop_front();
                self.am.postponed_n.store(q.len(), Ordering::Release);
                p
            };
            let Some(mut p) = p else { return };
            let (buf, n) = match p.long {
                Some((dst, len)) => (dst as *mut c_void, len),
                None if p.payload.is_empty() => (std::ptr::null_mut(), 0),
                None => (p.payload.as_mut_ptr() as *mut c_void, p.payload.len()),
            };
            let call = UserCall {
                src: p.src,
                is_request: p.is_request,
                index: p.handler,
                f: p.f,
                user: p.user,
            };
            self.run_user(&call, buf, n, &p.args);
        }
    }

    /// Largest medium payload.
    pub fn am_max_medium(&self) -> usize {
        self.cfg.am_max_medium
    }
    pub fn am_max_long(&self) -> usize {
        self.cfg.am_max_long
    }
}
