//! Small collectives of a one-node job through the node-shared mapping (issue 19
//! part 3).
//! - **Reductions:** every rank writes its description and its operand once into its
//!   own node slot, and every rank that needs the result combines the operands
//!   straight from the others' slots, in the binomial tree's rank order, as the tree
//!   path does (the same bits on every rank, from run to run, and on either path).
//! - **Broadcasts:** the root writes its payload once into its slot and returns; every
//!   other rank waits for the root's header only (not for every rank, as a
//!   reduction must), checks it against its own arguments and copies the payload.
//!   Each rank has [`NDEPTH`] slots used in turn, so a root runs up to that many
//!   calls ahead of its slowest reader: on oversubscribed cores a batch of
//!   broadcasts then costs a context switch per reader every few dozen calls, not
//!   every call. (Measured before: every rank waiting for every rank's header, 5.0
//!   us at 4 ranks against 2.0 on the tree; the root's header only but two slots,
//!   4.6-5.2 us against 3.1-3.4; with 64 slots 0.5-1.1 us, docs/PERFORMANCE.md.)
//!
//! Which calls: broadcasts, reductions and allreduces of at most [`NSLOT`] bytes
//! when every rank of the context is on this node ([`CtxInner::node_fast`]); larger
//! reductions check their arguments here, then move their operands in `node_big`.
//! Every other call stores a tree mark (its number and description) at its start
//! (`Self::node_enter`), so a rank that took the node path because of mismatched
//! arguments finds out and runs the tree flow in failed mode with the others
//! instead of waiting. A broadcast writes its header on every rank, so a rank that
//! took the tree path with mismatched arguments stops waiting for chunks from a
//! rank that will send none (`node_bcast_left`, in `c_recv`).
//!
//! Slot `seq % NDEPTH` of each rank: a header line — `seq` (stored last), the
//! call's description, its payload size, the mode — then the payload.
//! Invariants: a rank writes its slot for call `s` only after every rank's `done`
//! word (`Area::node_val` + 16) reached `s - NDEPTH`: every reader of the slot's
//! previous contents (call `s - NDEPTH`) has finished. A rank stores `done = s - 1`
//! when it enters call `s`, for every `s - 1` that is a multiple of [`DONE_EVERY`]
//! (even a call that then fails at once, so calls refused on every rank keep the
//! count): everything it read for earlier calls it has read. The word only grows.
//! So a slot that says `seq` keeps saying it until every rank has left call `seq`,
//! and a rank's tree mark at `seq` or later means it took the tree for `seq` unless
//! its slot says `seq`.

use super::{binomial_kids, describe, span, Call, Comb, K_ALLREDUCE, K_BCAST, K_REDUCE};
use crate::api::ctx::CtxInner;
use crate::api::sync::area::{NDEPTH, NSLOT};
use crate::api::sync::chan::Desc;
use crate::api::sync::state::CollState;
use crate::err;
use crate::runtime::error::Result;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, Release, SeqCst},
};

/// Header modes.
const TREE: u64 = 0;
const FAST: u64 = 1;
/// A fast-path call whose own arguments were refused (no payload).
const REFUSED: u64 = 2;

fn w(addr: usize) -> &'static AtomicU64 {
    // SAFETY: header and `done` words of sync areas of this node, 8-byte aligned,
    // mapped for the context's life, touched only through atomics.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }
}

/// A rank stores its `done` word on entering every this many calls (the word then
/// lags by up to this many calls: a root runs `NDEPTH - DONE_EVERY` to `NDEPTH` calls
/// ahead of its slowest reader).
const DONE_EVERY: u64 = 16;

/// The slot of call `seq` (each rank has [`NDEPTH`], used in turn).
fn slot_of(seq: u64) -> usize {
    const _: () = assert!(
        NDEPTH as u64 >= 2 * DONE_EVERY,
        "readers must be able to run ahead"
    );
    (seq % NDEPTH as u64) as usize
}

fn desc_word(d: &Desc) -> u64 {
    (d.kind as u64) << 48 | (d.dt as u64) << 40 | (d.op as u64) << 32 | d.root as u64
}

/// What one rank's header says about call `seq`.
struct Head {
    mode: u64,
    d: Desc,
    /// `d` is the rank's description of this call: false when it took the tree
    /// path and has since marked a later tree call (its arguments for this one are
    /// gone; `d` then holds the later call's).
    exact: bool,
}

impl CtxInner {
    /// This call takes the node path: one-node job, a small broadcast or reduction.
    pub(super) fn node_fast(&self, kind: u8, nbytes: u64) -> bool {
        let nd = &self.sync.node;
        nd.ok
            && nd.alone()
            && nd.members.len() == self.size
            && match kind {
                K_REDUCE | K_ALLREDUCE => nbytes <= NSLOT as u64 || self.node_big_ok(nbytes),
                K_BCAST => nbytes <= NSLOT as u64,
                _ => false,
            }
    }

    /// A call on the tree path on a one-node job: say so in our slot.
    pub(super) fn node_enter(&self, call: &Call) {
        let nd = &self.sync.node;
        if !(nd.ok && nd.alone()) || self.node_fast(call.d.kind, call.d.nbytes) {
            return;
        }
        // The tree mark (`node_val` + 24: seq, description, payload size), seq last;
        // no wait: nothing but a later tree call of this rank rewrites it.
        let m = nd.val_at[nd.idx] + 24;
        w(m + 8).store(desc_word(&call.d), SeqCst);
        w(m + 16).store(call.d.nbytes, SeqCst);
        w(m).store(call.d.seq, SeqCst);
        self.ring_node();
    }

    /// Entering call `seq`: every call before it is finished here, its slots read.
    /// Said in the `done` word every [`DONE_EVERY`] calls only: the word's line then
    /// crosses to the writers once per so many calls, not on every call.
    pub(super) fn node_entered(&self, seq: u64) {
        let nd = &self.sync.node;
        if nd.ok && nd.alone() && (seq - 1) % DONE_EVERY == 0 {
            // Release: our reads of the earlier slots come before it.
            w(nd.val_at[nd.idx] + 16).store(seq - 1, Release);
            self.ring_node();
        }
    }

    /// Wait until every rank finished call `seq - NDEPTH`, then write our slot for
    /// `seq`: the payload, then the header, `seq` last. The lowest `done` word seen
    /// is kept (`CollState::node_seen`), so the words are read again only when the
    /// writer has caught up with it.
    fn node_publish(
        &self,
        st: &mut CollState,
        call: &mut Call,
        mode: u64,
        payload: Option<(usize, usize)>,
    ) -> Result<()> {
        debug_assert!(mode != TREE);
        let nd = &self.sync.node;
        let d = call.d;
        let s = d.seq;
        let depth = NDEPTH as u64;
        if s > depth && st.node_seen < s - depth {
            let what = crate::api::stall::Wait::call(
                "fh_broadcast/fh_reduce/fh_allreduce",
                None,
                "the end of a collective 64 calls back (its node slot is in use)",
            );
            let mut seen = 0;
            self.wait_rung(what, || {
                seen = nd
                    .val_at
                    .iter()
                    .map(|&v| w(v + 16).load(SeqCst))
                    .min()
                    .unwrap_or(0);
                if seen >= s - depth {
                    return Ok(true);
                }
                self.node_drain(st, call)?;
                Ok(false)
            })?;
            debug_assert!(seen >= st.node_seen, "a done word went back");
            st.node_seen = seen;
        }
        let slot = nd.slot_at[nd.idx][slot_of(s)];
        if let Some((src, len)) = payload {
            debug_assert!(len <= NSLOT);
            // SAFETY: src is valid for len bytes (caller); the slot's payload has
            // NSLOT bytes that no rank reads before the header below says `s`.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, (slot + 64) as *mut u8, len) };
        }
        // The header's fields, then `seq` with release: a reader that loads `seq`
        // sees them (message passing; no rank reads another location of ours in
        // between, and the bells order the sleeper's side). Plain stores let the
        // whole line commit at once, while the peers spin on `seq` in that line;
        // sequentially consistent ones would drain it store by store, and each
        // spinning read in between takes the line away again.
        w(slot + 8).store(desc_word(&d), Relaxed);
        w(slot + 16).store(d.nbytes, Relaxed);
        w(slot + 24).store(mode, Relaxed);
        w(slot).store(s, Release);
        self.ring_node();
        Ok(())
    }

    /// Consume the chunks of earlier calls in our inboxes: a tree-path root of an
    /// earlier, mismatched call may still be sending, and waits for our credits.
    fn node_drain(&self, st: &mut CollState, call: &mut Call) -> Result<()> {
        for r in (0..self.size).filter(|&r| r != self.rank) {
            while let Some(c) = self.chan_peek(&st.chans, r)? {
                if c.desc.seq >= call.d.seq {
                    break;
                }
                self.note_stale(call, r, &c);
                self.chan_done(&mut st.chans, r)?;
            }
        }
        Ok(())
    }

    /// Rank `i` answered call `seq`: its slot says `seq`, or its tree mark says `seq`
    /// or later (it took the tree path for this call: a fast call would have written
    /// its slot first, and no later call rewrites that slot before this rank left
    /// call `seq`).
    fn node_answered(&self, i: usize, seq: u64) -> bool {
        let nd = &self.sync.node;
        w(nd.slot_at[i][slot_of(seq)]).load(SeqCst) == seq
            || w(nd.val_at[i] + 24).load(SeqCst) >= seq
    }

    /// Rank `i`'s header of call `seq` (it answered).
    fn node_head(&self, i: usize, seq: u64) -> Head {
        let nd = &self.sync.node;
        let slot = nd.slot_at[i][slot_of(seq)];
        let fast = w(slot).load(SeqCst) == seq;
        let at = if fast { slot } else { nd.val_at[i] + 24 };
        let (dw, nbytes) = (w(at + 8).load(SeqCst), w(at + 16).load(SeqCst));
        // A tree mark is rewritten by the rank's next tree call, which may come before
        // we are done reading it: the fields are this call's only if the mark said
        // `seq` after they were read (its stores: fields, then `seq`).
        let exact = fast || w(at).load(SeqCst) == seq;
        Head {
            exact,
            mode: if fast { w(at + 24).load(SeqCst) } else { TREE },
            d: Desc {
                seq,
                kind: (dw >> 48) as u8,
                dt: (dw >> 40) as u8,
                op: (dw >> 32) as u8,
                root: dw as u32,
                nbytes,
            },
        }
    }

    /// Wait until every rank in `who` answered the call (`whom`: what a stalled
    /// wait reports it waits for).
    fn node_wait_answers(
        &self,
        st: &mut CollState,
        call: &mut Call,
        who: std::ops::Range<usize>,
        whom: &'static str,
    ) -> Result<()> {
        let seq = call.d.seq;
        let what = crate::api::stall::Wait::call("fh_broadcast/fh_reduce/fh_allreduce", None, whom);
        self.wait_rung(what, || {
            if who.clone().all(|i| self.node_answered(i, seq)) {
                return Ok(true);
            }
            self.node_drain(st, call)?;
            Ok(false)
        })
    }

    /// Wait for every rank's header of the call.
    fn node_heads(&self, st: &mut CollState, call: &mut Call) -> Result<Vec<Head>> {
        let n = self.sync.node.slot_at.len();
        self.node_wait_answers(
            st,
            call,
            0..n,
            "the arrival of every rank in the collective",
        )?;
        Ok((0..n).map(|i| self.node_head(i, call.d.seq)).collect())
    }

    /// Rank `src` broadcasts call `seq` through the node slots, so it sends no
    /// chunk in it (a tree-path rank waiting for it stops: `c_recv`).
    pub(super) fn node_bcast_left(&self, src: usize, seq: u64) -> bool {
        let nd = &self.sync.node;
        if !(nd.ok && nd.alone()) || src >= nd.slot_at.len() {
            return false;
        }
        let slot = nd.slot_at[src][slot_of(seq)];
        w(slot).load(SeqCst) == seq && (w(slot + 8).load(SeqCst) >> 48) as u8 == K_BCAST
    }

    /// A broadcast of at most [`NSLOT`] bytes through the node slots: the root writes
    /// its payload once; every other rank waits for the root's header only, checks
    /// it against its own arguments and copies the payload. Every rank also writes
    /// its header (no payload), so a rank that took the tree path with different
    /// arguments finds out instead of waiting for chunks (`node_bcast_left`).
    /// Returns false when the root is on the tree path: the caller then runs the
    /// tree flow with the (failed) call.
    pub(super) fn node_bcast(
        &self,
        st: &mut CollState,
        call: &mut Call,
        root: usize,
        buf: usize,
        nbytes: usize,
    ) -> Result<bool> {
        let mode = if call.failed() { REFUSED } else { FAST };
        let at_root = self.rank == root;
        let payload = (at_root && mode == FAST).then_some((buf, nbytes));
        self.node_publish(st, call, mode, payload)?;
        if at_root {
            return Ok(true);
        }
        let whom = "the root's arrival in the broadcast";
        self.node_wait_answers(st, call, root..root + 1, whom)?;
        let h = self.node_head(root, call.d.seq);
        if !call.failed() {
            self.node_check(call, [(root, &h)]);
        }
        if !call.failed() && nbytes > 0 {
            let p = slot_of(call.d.seq);
            let from = self.sync.node.slot_at[root][p] + 64;
            // SAFETY: the root's payload of this call (its header said so and matches
            // ours: nbytes <= NSLOT), not rewritten before our `done` says this call;
            // buf is valid for nbytes (checked non-null; the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(from as *const u8, buf as *mut u8, nbytes) };
        }
        Ok(h.mode != TREE)
    }

    /// The first rank whose header disagrees with ours, as the call's error.
    fn node_check<'h>(&self, call: &mut Call, heads: impl IntoIterator<Item = (usize, &'h Head)>) {
        for (r, h) in heads {
            if h.mode == REFUSED {
                call.fail(
                    err!(
                        InvalidArg,
                        "{}: rank {} refused its own arguments (its call returned the \
                         details); this rank called {}",
                        call.name,
                        r,
                        describe(&call.d)
                    ),
                    r,
                );
                return;
            }
            if h.mode == TREE || h.d != call.d {
                let theirs = if h.exact {
                    format!("called {}", describe(&h.d))
                } else {
                    "took the collectives' tree path for this call (its arguments are no \
                     longer readable: it has gone on to later calls)"
                        .to_string()
                };
                call.fail(
                    err!(
                        InvalidArg,
                        "{}: the ranks passed different arguments: rank {} {} where this \
                         rank called {}",
                        call.name,
                        r,
                        theirs,
                        describe(&call.d)
                    ),
                    self.rank,
                );
                return;
            }
        }
    }

    /// Run call `call` (a reduction of `src` into `dst` with `comb`) through the
    /// node slots. Returns false when some rank is on the
    /// tree path: the caller then runs the tree flow with the (failed) call.
    pub(super) fn node_coll(
        &self,
        st: &mut CollState,
        call: &mut Call,
        buf: (usize, usize),
        nbytes: usize,
        comb: Option<Comb>,
    ) -> Result<bool> {
        let (src, dst) = buf;
        let d = call.d;
        let mode = if call.failed() { REFUSED } else { FAST };
        let carries = mode == FAST;
        // A large call publishes its header only; its operands move in `node_big`.
        let big = d.nbytes > NSLOT as u64;
        let payload = (carries && !big).then_some((src, nbytes));
        self.node_publish(st, call, mode, payload)?;
        let heads = self.node_heads(st, call)?;
        if !call.failed() {
            self.node_check(call, heads.iter().enumerate());
        }
        let tree = heads.iter().any(|h| h.mode == TREE);
        match comb {
            Some(c) if big && !call.failed() => self.node_big(st, call, buf, nbytes, c)?,
            _ if !call.failed() => self.node_read(&d, dst, nbytes, comb),
            _ => {}
        }
        Ok(!tree)
    }

    /// Read the slots of call `d` (all agreed): the root's payload, or every rank's
    /// operand combined in rank order.
    fn node_read(&self, d: &Desc, dst: usize, nbytes: usize, comb: Option<Comb>) {
        let nd = &self.sync.node;
        let p = slot_of(d.seq);
        let data = |r: usize| {
            // SAFETY: rank r's payload of call d (its header said so), NSLOT bytes
            // mapped here, not rewritten before our `done` says d.seq.
            unsafe { std::slice::from_raw_parts((nd.slot_at[r][p] + 64) as *const u8, nbytes) }
        };
        // SAFETY: dst is valid for nbytes where this rank receives (the caller checked).
        let out = || unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, nbytes) };
        match (d.kind, comb) {
            (K_REDUCE, Some(c)) if d.root as usize == self.rank => {
                self.node_fold(c, 0, out(), &data)
            }
            (K_ALLREDUCE, Some(c)) => self.node_fold(c, 0, out(), &data),
            _ => {}
        }
    }

    /// The reduction of rank `r`'s binomial subtree into `out`: its operand, then
    /// each child's subtree in turn — the order of the tree path (documented as
    /// "rank order"), so both paths give the same bits.
    /// A leaf child's operand is combined straight from its slot; a scratch buffer is
    /// made only for a child with a subtree of its own (none at 2 ranks).
    fn node_fold<'a>(&self, c: Comb, r: usize, out: &mut [u8], data: &dyn Fn(usize) -> &'a [u8]) {
        out.copy_from_slice(data(r));
        let mut sub: Option<Vec<u8>> = None;
        for k in binomial_kids(r, self.size) {
            if span(k, self.size) == 1 {
                c.apply(out, data(k));
            } else {
                let s = sub.get_or_insert_with(|| vec![0u8; out.len()]);
                self.node_fold(c, k, s, data);
                c.apply(out, s);
            }
        }
    }
}
