//! One collective call as a rank runs it: entering (one call at a time per
//! context, numbered alike on every rank), the description every chunk carries,
//! sending and receiving the call's streams, and ending them.
//!
//! Guarantees:
//! - a chunk is used only by the call of its number; chunks of earlier calls are
//!   consumed and reported (their call's arguments did not match), so their writers
//!   are not left waiting for room;
//! - a chunk of this call whose description differs from ours, or that comes from a
//!   rank that should not send to us, fails the call with a message naming both
//!   calls;
//! - a failed call still ends every stream it started, with an error chunk, so its
//!   receivers fail too instead of waiting for a chunk that will not come.

use super::super::chan::{Chans, Chunk, Desc, ERR, LAST};
use super::ops::{dt_name, op_name};
use super::{dtype_size, CollState};
use crate::api::ctx::CtxInner;
use crate::err;
use crate::runtime::error::{Error, Result};

/// Collective kinds, as chunks describe them.
pub(super) const K_BCAST: u8 = 1;
pub(super) const K_REDUCE: u8 = 2;
pub(super) const K_ALLREDUCE: u8 = 3;
pub(super) const K_ALLGATHER: u8 = 4;
/// The broadcast of λ at a context's first collective.
pub(super) const K_LAMBDA: u8 = 5;

/// A chunk met on the way, and its sender.
type Met = Option<(usize, Chunk)>;

/// Wait rounds between scans of every inbox for chunks of earlier calls.
const STALE_SCAN_EVERY: u32 = 64;

/// One collective call as this rank sees it: its description (what every chunk it
/// sends carries), the first failure, and which streams of the call have ended.
pub(super) struct Call {
    pub(super) name: &'static str,
    pub(super) d: Desc,
    /// First failure and the rank that found it.
    pub(super) err: Option<(Error, usize)>,
    /// Ranks we sent the last chunk of our stream to (in this call).
    pub(super) ended: Vec<usize>,
    /// Ranks whose stream to us we consumed to its last chunk.
    pub(super) closed: Vec<usize>,
    /// Ranks that send to us in this call (the flows add theirs as they start).
    pub(super) expect: Vec<usize>,
}

impl Call {
    pub(super) fn fail(&mut self, e: Error, by: usize) {
        if self.err.is_none() {
            self.err = Some((e, by));
        }
    }
    pub(super) fn failed(&self) -> bool {
        self.err.is_some()
    }
}

/// A call as its arguments show it, for messages.
pub(super) fn describe(d: &Desc) -> String {
    let count = |d: &Desc| match dtype_size(d.dt as i32) {
        Ok(e) => format!("count {} of {}", d.nbytes / e as u64, dt_name(d.dt)),
        Err(_) => format!("{} bytes of {}", d.nbytes, dt_name(d.dt)),
    };
    match d.kind {
        K_BCAST => format!("fh_broadcast(root {}, {} bytes)", d.root, d.nbytes),
        K_REDUCE => format!(
            "fh_reduce(root {}, {}, {})",
            d.root,
            count(d),
            op_name(d.op)
        ),
        K_ALLREDUCE => format!("fh_allreduce({}, {})", count(d), op_name(d.op)),
        K_ALLGATHER => format!("fh_allgather({} bytes per rank)", d.nbytes),
        K_LAMBDA => "the broadcast tree's set-up".into(),
        k => format!("collective kind {}", k),
    }
}

impl CtxInner {
    /// Enter a collective: one at a time per context; every call (even one that
    /// fails at once) takes the next call number, so ranks agree on numbers.
    pub(super) fn coll_enter(
        &self,
        what: &'static str,
    ) -> Result<crate::runtime::solo::SoloGuard<'_, CollState>> {
        self.check_live()?;
        crate::api::am::check_not_in_handler(what)?;
        self.area()?;
        let mut st = self.sync.coll.try_lock().ok_or_else(|| {
            err!(
                State,
                "{}: another collective is running on this context in another thread",
                what
            )
        })?;
        if self.size > 1 {
            self.ensure_tree(&mut st)?;
        }
        st.seq += 1;
        self.node_entered(st.seq);
        Ok(st)
    }

    pub(super) fn call(
        &self,
        st: &mut CollState,
        name: &'static str,
        kind: u8,
        root: usize,
        nbytes: usize,
        (dt, op): (i32, i32),
    ) -> Call {
        let call = Call {
            name,
            d: Desc {
                seq: st.seq,
                kind,
                dt: dt as u8,
                op: op as u8,
                root: root as u32,
                nbytes: nbytes as u64,
            },
            err: None,
            ended: std::mem::take(&mut st.spare[0]),
            closed: std::mem::take(&mut st.spare[1]),
            expect: std::mem::take(&mut st.spare[2]),
        };
        // A call on the tree path says so to ranks on the node path (`node`).
        self.node_enter(&call);
        call
    }

    /// Send one chunk of our stream to `dst` (the last one if `last`). Once the call
    /// failed, the stream ends with an error chunk instead; nothing is sent on a
    /// stream that ended.
    pub(super) fn c_send(
        &self,
        st: &mut CollState,
        call: &mut Call,
        dst: usize,
        src: *const u8,
        len: usize,
        last: bool,
    ) -> Result<()> {
        if call.ended.contains(&dst) {
            return Ok(());
        }
        let (flags, len, by) = match &call.err {
            Some((_, by)) => (LAST | ERR, 0, Some(*by)),
            None => (if last { LAST } else { 0 }, len, None),
        };
        let mine = call.d;
        let (mut seen, mut stale): (Met, Met) = (None, None);
        self.chan_send(
            &mut st.chans,
            dst,
            src,
            len,
            &call.d,
            flags,
            by,
            &call.expect,
            &mut |r, c| {
                let keep = if c.desc.seq == mine.seq {
                    &mut seen
                } else {
                    &mut stale
                };
                keep.get_or_insert((r, *c));
            },
        )?;
        if let Some((r, c)) = stale {
            self.note_stale(call, r, &c);
        }
        if let Some((r, c)) = seen {
            call.fail(self.mismatch(call.name, r, &c, &mine), self.rank);
        }
        if flags & LAST != 0 {
            call.ended.push(dst);
        }
        Ok(())
    }

    /// The next chunk of this call from `src`, not consumed. Chunks of earlier calls
    /// are consumed and reported on the way. `None`: `src` is already in a later call,
    /// or broadcasts this call through the node slots (the call fails; nothing more
    /// can come from it in this one).
    pub(super) fn c_recv(
        &self,
        st: &mut CollState,
        call: &mut Call,
        src: usize,
    ) -> Result<Option<Chunk>> {
        let seq = call.d.seq;
        let mut rounds = 0u32;
        let mut stale: Vec<(usize, Chunk)> = Vec::new();
        loop {
            let got = self.chan_recv(&mut st.chans, src, &mut |ctx, ch| {
                rounds += 1;
                if rounds % STALE_SCAN_EVERY == 0 {
                    ctx.drop_stale(ch, seq, &mut stale)?;
                }
                Ok(ctx.node_bcast_left(src, seq))
            })?;
            for (r, c) in stale.drain(..) {
                self.note_stale(call, r, &c);
            }
            let Some(c) = got else {
                // `src` broadcast through the node slots: it sends no chunk.
                let e = err!(
                    InvalidArg,
                    "{}: rank {} took this call for a broadcast of at most {} bytes through \
                     the node slots (the ranks passed different arguments); this rank called {}",
                    call.name,
                    src,
                    crate::api::sync::area::NSLOT,
                    describe(&call.d)
                );
                call.fail(e, self.rank);
                call.closed.push(src);
                return Ok(None);
            };
            if c.desc.seq < seq {
                self.note_stale(call, src, &c);
                self.chan_done(&mut st.chans, src)?;
                continue;
            }
            if c.desc.seq > seq {
                call.fail(
                    err!(
                        InvalidArg,
                        "{}: rank {} is already in a later collective ({}): the ranks did not \
                         call the same collectives in the same order",
                        call.name,
                        src,
                        describe(&c.desc)
                    ),
                    self.rank,
                );
                call.closed.push(src);
                return Ok(None);
            }
            return Ok(Some(c));
        }
    }

    /// Consume every chunk of earlier calls waiting in any inbox (their writers may be
    /// waiting for the room).
    fn drop_stale(&self, ch: &mut Chans, seq: u64, out: &mut Vec<(usize, Chunk)>) -> Result<()> {
        for r in (0..self.size).filter(|&r| r != self.rank) {
            while let Some(c) = self.chan_peek(ch, r)? {
                if c.desc.seq >= seq {
                    break;
                }
                out.push((r, c));
                self.chan_done(ch, r)?;
            }
        }
        Ok(())
    }

    /// A chunk of an earlier call nobody took: that call's arguments did not match.
    /// Reported once per call, on stderr and by the next `fh_poll`.
    pub(super) fn note_stale(&self, call: &mut Call, src: usize, c: &Chunk) {
        if call.closed.contains(&usize::MAX) {
            return;
        }
        call.closed.push(usize::MAX);
        self.report_stale(src, c);
    }

    fn report_stale(&self, src: usize, c: &Chunk) {
        let e = err!(
            InvalidArg,
            "an earlier collective did not match on every rank: rank {} sent this rank data of \
             {} (collective number {}) that this rank did not expect in its own call of that \
             number; that call returned without it",
            src,
            describe(&c.desc),
            c.desc.seq
        );
        eprintln!("firehose[{}]: {}", self.rank, e.msg);
        self.record_async_error(e);
    }

    pub(super) fn mismatch(&self, name: &str, src: usize, c: &Chunk, mine: &Desc) -> Error {
        let what = if c.desc.seq == mine.seq {
            "the ranks passed different arguments"
        } else {
            "the ranks did not call the same collectives in the same order"
        };
        err!(
            InvalidArg,
            "{}: {}: rank {} called {} where this rank called {}",
            name,
            what,
            src,
            describe(&c.desc),
            describe(mine)
        )
    }

    /// Whether chunk `c` from `src` may be used: not an error chunk, described as
    /// this call (checked on a stream's first chunk), and of the expected length.
    /// Otherwise the call fails (the chunk stays for [`Self::end_recv`] to drain).
    pub(super) fn c_accept(
        &self,
        call: &mut Call,
        src: usize,
        c: &Chunk,
        first: bool,
        len: usize,
    ) -> bool {
        if c.err {
            let by = c.err_rank.unwrap_or(src);
            call.fail(
                err!(
                    InvalidArg,
                    "{}: rank {} found that the ranks' arguments did not match or were wrong \
                     (its own call returned the details); this rank called {}",
                    call.name,
                    by,
                    describe(&call.d)
                ),
                by,
            );
            return false;
        }
        if first && c.desc != call.d {
            let e = self.mismatch(call.name, src, c, &call.d);
            call.fail(e, self.rank);
            return false;
        }
        if c.len != len {
            let e = err!(
                InvalidArg,
                "{}: rank {} sent a chunk of {} bytes where {} were expected",
                call.name,
                src,
                c.len,
                len
            );
            call.fail(e, self.rank);
            return false;
        }
        true
    }

    /// Consume chunk `c` from `src`.
    pub(super) fn c_done(
        &self,
        st: &mut CollState,
        call: &mut Call,
        src: usize,
        c: &Chunk,
    ) -> Result<()> {
        self.chan_done(&mut st.chans, src)?;
        if c.last {
            call.closed.push(src);
        }
        Ok(())
    }

    /// End our stream to `dst` if the flow did not (it failed): an error chunk.
    pub(super) fn end_send(&self, st: &mut CollState, call: &mut Call, dst: usize) -> Result<()> {
        if call.ended.contains(&dst) {
            return Ok(());
        }
        debug_assert!(call.failed(), "a stream of a successful call ended early");
        if !call.failed() {
            call.fail(
                err!(Internal, "{}: stream to rank {} not ended", call.name, dst),
                self.rank,
            );
        }
        self.c_send(st, call, dst, std::ptr::null(), 0, true)
    }

    /// The end of a call: chunks of this call from ranks that do not send to us in
    /// it are a mismatch (another rank made a different call, e.g. took itself for
    /// the root); consume them, so their writer is not left waiting for room.
    pub(super) fn finish(&self, st: &mut CollState, mut call: Call) -> Result<()> {
        if self.size > 1 {
            for r in 0..self.size {
                if r == self.rank || call.expect.contains(&r) {
                    continue;
                }
                while let Some(c) = self.chan_peek(&st.chans, r)? {
                    if c.desc.seq > call.d.seq {
                        break;
                    }
                    if c.desc.seq == call.d.seq {
                        let e = self.mismatch(call.name, r, &c, &call.d);
                        call.fail(e, self.rank);
                    } else {
                        self.note_stale(&mut call, r, &c);
                    }
                    self.chan_done(&mut st.chans, r)?;
                }
            }
        }
        for (k, mut v) in [call.ended, call.closed, call.expect]
            .into_iter()
            .enumerate()
        {
            v.clear();
            st.spare[k] = v;
        }
        match call.err {
            Some((e, _)) => Err(e),
            None => Ok(()),
        }
    }

    /// Consume what is left of `src`'s stream to us in this call.
    pub(super) fn end_recv(&self, st: &mut CollState, call: &mut Call, src: usize) -> Result<()> {
        while !call.closed.contains(&src) {
            let Some(c) = self.c_recv(st, call, src)? else {
                break;
            };
            self.c_done(st, call, src, &c)?;
        }
        Ok(())
    }
}
