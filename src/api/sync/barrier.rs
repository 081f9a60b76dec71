//! Split-phase barriers (seed 004 ch. 3) by one-sided flag writes.
//!
//! - **Dissemination** (pairwise exchange generalised to any N): in round k a rank
//!   writes its flag at rank `me + 2^k` and waits for the one of rank `me - 2^k`;
//!   after ceil(log2 N) rounds every rank has heard, transitively, from every rank.
//! - **Gather-and-broadcast tree** (fan-in [`TREE_DEGREE`]): arrivals flow up to rank
//!   0, the release flows down.
//! - **mpi**: `MPI_Iallreduce` (the baseline, and for conduits without the area).
//!
//! A flag is two words, the barrier id first, then the tag `epoch << 2 | kind`,
//! written with CPU atomics through the node mapping, or by the reader's own handler
//! of a short AM from a rank outside it ([`handle_flag`]). A reader that sees its
//! epoch in the tag reads the id.
//! Epochs count this context's barriers; early arrivals of the *next* barrier are
//! never confused with this one because flags are double-buffered by epoch parity: a
//! rank can be at most one barrier ahead of any rank it hears from (it cannot finish
//! barrier e+1 before that rank notified it), so the slot of parity e is not reused
//! before epoch e is consumed (seed 004 §3's unexpected messages, without a queue).
//!
//! Named ids (seed 002/GASNet semantics): the values of all ranks are combined with
//! [`Val::combine`] (anonymous matches anything; two different names are a mismatch),
//! which is associative, commutative and idempotent, so the overlapping coverage of
//! dissemination with N not a power of two is harmless. A mismatch is reported as
//! `FH_ERR_BARRIER_MISMATCH` on every rank, and the barrier still synchronised, so
//! the next one works.

use super::area::TREE_DEGREE;
use crate::api::am::table::Token;
use crate::api::ctx::CtxInner;
use crate::api::wire::{Category, Frame, LibHandler};
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::atomic::{AtomicU64, Ordering};

pub use super::settings::Algo;
pub use super::state::{Barrier, Val, ANONYMOUS};
use super::state::{Phase, Step};

fn ceil_log2(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

impl CtxInner {
    fn barrier_algo(&self) -> Algo {
        // The transport's reduction when it has one (the MPI conduit), else the
        // default.
        match self.cfg.sync.barrier {
            Algo::Transport if !self.conduit.caps().reduction => Algo::Dissemination,
            Algo::Node if !self.sync.node.ok => Algo::Dissemination,
            a => a,
        }
    }

    /// The dissemination ring this rank runs in: every rank, or (node barrier) the
    /// nodes' leaders. Returns (ranks, this rank's position); None: all ranks.
    fn diss_ring(&self, algo: Algo) -> Option<(&[usize], usize)> {
        if algo != Algo::Node {
            return None;
        }
        let l = &self.sync.node.leaders;
        Some((l, l.iter().position(|&r| r == self.rank).unwrap_or(0)))
    }

    /// Round `k`'s peer to write to, and the ring's size.
    fn diss_to(&self, algo: Algo, k: u32) -> (usize, usize) {
        match self.diss_ring(algo) {
            Some((ring, pos)) => (ring[(pos + (1usize << k)) % ring.len()], ring.len()),
            None => ((self.rank + (1usize << k)) % self.size, self.size),
        }
    }

    /// Write a flag (id, then tag) at `addr` of `rank`: CPU atomics through the node
    /// mapping, else one short AM whose handler stores both words there
    /// ([`handle_flag`]; a transport atomic would wait for the target's MPI calls).
    fn flag_write(&self, rank: usize, addr: usize, epoch: u64, v: Val) -> Result<()> {
        let (id, kind) = v.encode();
        let tag = epoch << 2 | kind;
        if !self.chan_native(rank) {
            let off = (addr - self.area_base(rank)) as u64;
            let h = LibHandler::BarrierFlag as u8;
            return self.am_request(rank, Category::Short, h, &[off, id, tag], &[], None);
        }
        self.word(rank, addr, AtomicOp::Set(id))?;
        self.word(rank, addr + 8, AtomicOp::Set(tag))?;
        Ok(())
    }

    /// Read our flag at `addr` if it carries `epoch`. Every writer of our flags uses
    /// CPU atomics (node peers) or our own handler, so plain atomic loads.
    fn flag_read(&self, addr: usize, epoch: u64) -> Result<Option<Val>> {
        // SAFETY: a flag of our own sync area (mapped for the context's life,
        // 16-byte aligned), touched only through atomics.
        let w = |at: usize| unsafe { AtomicU64::from_ptr(at as *mut u64) }.load(Ordering::Acquire);
        let tag = w(addr + 8);
        if tag >> 2 != epoch {
            return Ok(None);
        }
        Ok(Some(Val::decode(w(addr), tag & 3)))
    }

    /// `fh_barrier_notify`.
    pub fn barrier_notify(&self, id: i64, flags: i32) -> Result<()> {
        self.check_live()?;
        check_flags(flags)?;
        let algo = self.barrier_algo();
        if algo != Algo::Transport {
            self.area()?;
        }
        let mut b = self.sync.barrier.lock();
        if b.phase != Phase::Idle {
            bail!(
                State,
                "fh_barrier_notify: the previous barrier (notify id {}) has not been waited for",
                b.id
            );
        }
        b.algo = algo;
        b.epoch += 1;
        b.id = id;
        b.flags = flags;
        b.acc = Val::of(id, flags);
        let n = self.size;
        let step = match algo {
            _ if n == 1 => {
                b.phase = Phase::Done { result: b.acc };
                return Ok(());
            }
            Algo::Dissemination => self.diss_start(&b)?,
            Algo::Node => match self.node_notify(&mut b)? {
                Step::NodeDone => {
                    b.phase = Phase::Done { result: b.acc };
                    return Ok(());
                }
                s => s,
            },
            Algo::Tree => Step::Gather { got: 0 },
            Algo::Transport => {
                let (v0, v1, v2) = match b.acc {
                    Val::Named(x) => (1, x, !x),
                    _ => (0, 0, 0),
                };
                self.conduit
                    .reduce3_start(crate::conduit::Reduce3::Max, [v0, v1, v2])?;
                Step::Transport
            }
        };
        b.phase = Phase::Running { step };
        self.barrier_advance(&mut b)?;
        self.sync.barrier_active.store(true, Ordering::Release);
        Ok(())
    }

    /// Dissemination's round 0: write our flag at the next rank of the ring.
    fn diss_start(&self, b: &Barrier) -> Result<Step> {
        let a = self.area()?;
        let (to, _) = self.diss_to(b.algo, 0);
        let slot = a.diss(self.area_base(to), 0, (b.epoch & 1) as usize);
        self.flag_write(to, slot, b.epoch, b.acc)?;
        Ok(Step::Diss { round: 0 })
    }

    /// Move the barrier as far as the flags that arrived allow; never blocks.
    ///
    /// Long because it is one loop over the barrier's `Step` state machine
    /// (dissemination rounds, tree gather then release, MPI): each arm either advances
    /// the local `step` and continues or breaks with the result stored back into
    /// `b.phase`, so the arms share `step`, the epoch and its parity.
    pub(crate) fn barrier_advance(&self, b: &mut Barrier) -> Result<()> {
        let Phase::Running { mut step } = b.phase else {
            return Ok(());
        };
        let (me, n, e) = (self.rank, self.size, b.epoch);
        let par = (e & 1) as usize;
        let result = loop {
            match step {
                Step::Diss { round } => {
                    let a = self.area()?;
                    let Some(v) =
                        self.flag_read(a.diss(self.area_base(me), round as usize, par), e)?
                    else {
                        break None;
                    };
                    b.acc = b.acc.combine(v);
                    let next = round + 1;
                    let (to, ring) = self.diss_to(b.algo, next);
                    if next == ceil_log2(ring) {
                        if b.algo == Algo::Node {
                            self.node_release(b.acc, e);
                        }
                        break Some(b.acc);
                    }
                    self.flag_write(to, a.diss(self.area_base(to), next as usize, par), e, b.acc)?;
                    step = Step::Diss { round: next };
                }
                Step::NodeGather => match self.node_gathered(b) {
                    Some(v) => {
                        b.acc = v;
                        step = self.diss_start(b)?;
                    }
                    None => break None,
                },
                Step::NodeWait => match self.node_released(e) {
                    Some(v) => break Some(v),
                    None => break None,
                },
                Step::NodeDone => break Some(b.acc),
                Step::Gather { mut got } => {
                    let a = self.area()?;
                    let base = self.area_base(me);
                    let mut all = true;
                    for c in 0..TREE_DEGREE {
                        let child = TREE_DEGREE * me + 1 + c;
                        if child >= n || got & (1 << c) != 0 {
                            continue;
                        }
                        match self.flag_read(a.tree_arr(base, c, par), e)? {
                            Some(v) => {
                                b.acc = b.acc.combine(v);
                                got |= 1 << c;
                            }
                            None => all = false,
                        }
                    }
                    if !all {
                        step = Step::Gather { got };
                        break None;
                    }
                    if me == 0 {
                        self.tree_release(b.acc, e)?;
                        break Some(b.acc);
                    }
                    let parent = (me - 1) / TREE_DEGREE;
                    let slot = a.tree_arr(self.area_base(parent), (me - 1) % TREE_DEGREE, par);
                    self.flag_write(parent, slot, e, b.acc)?;
                    step = Step::Release;
                }
                Step::Release => {
                    let a = self.area()?;
                    match self.flag_read(a.tree_rel(self.area_base(me), par), e)? {
                        Some(v) => {
                            self.tree_release(v, e)?;
                            break Some(v);
                        }
                        None => break None,
                    }
                }
                Step::Transport => match self.conduit.reduce3_test(crate::conduit::Reduce3::Max)? {
                    Some([named, hi, nlo]) => {
                        break Some(if named == 0 {
                            Val::Anon
                        } else if hi == !nlo {
                            Val::Named(hi)
                        } else {
                            Val::Mismatch
                        })
                    }
                    None => break None,
                },
            }
        };
        b.phase = match result {
            Some(r) => Phase::Done { result: r },
            None => Phase::Running { step },
        };
        Ok(())
    }

    /// Tree: pass the release (with the combined value) to our children.
    fn tree_release(&self, v: Val, e: u64) -> Result<()> {
        let a = self.area()?;
        for c in 0..TREE_DEGREE {
            let child = TREE_DEGREE * self.rank + 1 + c;
            if child < self.size {
                let slot = a.tree_rel(self.area_base(child), (e & 1) as usize);
                self.flag_write(child, slot, e, v)?;
            }
        }
        Ok(())
    }

    /// `fh_barrier_try`: `Ok(true)` when the barrier completed (then the state is
    /// idle again), `Ok(false)` for FH_NOT_READY.
    pub fn barrier_try(&self, id: i64, flags: i32) -> Result<bool> {
        self.check_live()?;
        check_flags(flags)?;
        let mut b = self.sync.barrier.lock();
        if b.phase == Phase::Idle {
            bail!(
                State,
                "fh_barrier_wait/try without a matching fh_barrier_notify"
            );
        }
        self.barrier_advance(&mut b)?;
        let Phase::Done { result } = b.phase else {
            return Ok(false);
        };
        b.phase = Phase::Idle;
        self.sync.barrier_active.store(false, Ordering::Release);
        let mine = Val::of(b.id, b.flags);
        if mine != Val::of(id, flags) {
            bail!(
                BarrierMismatch,
                "barrier {}: wait/try was given {} but notify was given {}",
                b.epoch,
                describe(Val::of(id, flags)),
                describe(mine)
            );
        }
        if result == Val::Mismatch {
            bail!(
                BarrierMismatch,
                "barrier {}: ranks notified different ids (this rank: {})",
                b.epoch,
                describe(mine)
            );
        }
        Ok(true)
    }

    /// `fh_barrier_wait`.
    pub fn barrier_wait(&self, id: i64, flags: i32) -> Result<()> {
        crate::api::am::check_not_in_handler("fh_barrier_wait")?;
        let mut r = Ok(());
        let epoch = self.sync.barrier.lock().epoch;
        let what = crate::api::stall::Wait::call(
            "fh_barrier/fh_barrier_wait",
            None,
            "the barrier flag of a rank that has not notified",
        )
        .in_barrier(epoch);
        // Flags from outside the node mapping arrive in our own progress (AMs).
        let src = if self.conduit.needs_progress() {
            crate::api::wait::Source::Polled
        } else {
            crate::api::wait::Source::Written
        };
        self.wait_on(
            what,
            src,
            || self.barrier_bell(),
            || match self.barrier_try(id, flags) {
                Ok(done) => Ok(done),
                Err(e) => {
                    r = Err(e);
                    Ok(true)
                }
            },
        )?;
        r
    }

    /// `fh_barrier`: anonymous notify + wait.
    pub fn barrier(&self) -> Result<()> {
        crate::api::am::check_not_in_handler("fh_barrier")?;
        if self.sync.area.is_none() && self.barrier_algo() != Algo::Transport {
            // No sync area (tiny heaps): the conduit's barrier, still serving AMs.
            self.check_live()?;
            self.conduit.barrier_start()?;
            let what =
                crate::api::stall::Wait::call("fh_barrier", None, "the arrival of every rank");
            return self.wait_for(what, || self.conduit.barrier_test());
        }
        self.barrier_notify(0, ANONYMOUS)?;
        self.barrier_wait(0, ANONYMOUS)
    }

    /// A named barrier for the library's own collective calls; a mismatch means the
    /// ranks disagreed about `what`.
    pub(crate) fn barrier_named(&self, id: i64, what: &str) -> Result<()> {
        self.barrier_notify(id, 0)?;
        match self.barrier_wait(id, 0) {
            Err(e) if e.status == crate::runtime::error::Status::BarrierMismatch => {
                Err(err!(InvalidArg, "{}: the ranks disagree ({})", what, e.msg))
            }
            r => r,
        }
    }
}

fn check_flags(flags: i32) -> Result<()> {
    if flags & !ANONYMOUS != 0 {
        bail!(
            InvalidArg,
            "barrier flags {:#x}: only FH_BARRIER_ANONYMOUS ({}) is defined",
            flags,
            ANONYMOUS
        );
    }
    Ok(())
}

fn describe(v: Val) -> String {
    match v {
        Val::Anon => "anonymous".into(),
        Val::Named(x) => format!("id {}", x as i64),
        Val::Mismatch => "mismatch".into(),
    }
}

/// A flag from rank `tok.src` outside the node mapping: args `[offset in our sync
/// area, id, tag]`. Only the barrier flags' region of the area is written (id, then
/// the tag with release order); anything else is refused and reported.
pub(super) fn handle_flag(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let refuse = |what: &str| {
        ctx.record_async_error(err!(
            Transport,
            "barrier: refused a {} from rank {}",
            what,
            tok.src
        ))
    };
    let Ok(a) = ctx.area() else {
        return refuse("flag before the sync area exists");
    };
    let &[off, id, tag] = f.args() else {
        return refuse("malformed flag");
    };
    let base = ctx.area_base(ctx.rank);
    let (lo, hi) = a.flags_range(base);
    let at = base.checked_add(off as usize).filter(|&at| {
        at >= lo && at.checked_add(16).is_some_and(|e| e <= hi) && (at - lo) % 16 == 0
    });
    let Some(at) = at else {
        return refuse("flag outside the barrier flags");
    };
    // SAFETY: a flag pair inside our own area's barrier region (checked above),
    // 16-byte aligned, touched only through atomics.
    unsafe {
        AtomicU64::from_ptr(at as *mut u64).store(id, Ordering::Release);
        AtomicU64::from_ptr((at + 8) as *mut u64).store(tag, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn combine_is_a_semilattice() {
        let vals = [Val::Anon, Val::Named(1), Val::Named(2), Val::Mismatch];
        for a in vals {
            assert_eq!(a.combine(a), a);
            for b in vals {
                assert_eq!(a.combine(b), b.combine(a));
                for c in vals {
                    assert_eq!(a.combine(b).combine(c), a.combine(b.combine(c)));
                }
            }
        }
        assert_eq!(Val::Named(1).combine(Val::Named(2)), Val::Mismatch);
        assert_eq!(Val::Anon.combine(Val::Named(7)), Val::Named(7));
    }
    #[test]
    fn rounds() {
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(3), 2);
        assert_eq!(ceil_log2(8), 3);
        assert_eq!(ceil_log2(9), 4);
    }
}
