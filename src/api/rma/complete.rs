//! Completion of non-blocking transfers: `fh_test`/`fh_wait` and their `_all` and
//! `_some` forms on explicit handles, `fh_wait_nbi`/`fh_test_nbi` on the implicit
//! set, and the flushes behind them.
//!
//! Guarantees: a handle is retired by the call that reports its completion or its
//! failure, so a second sync of it is `FH_ERR_INVALID_ARG`; an operation counts as
//! complete only after a conduit flush of its rank that started after it was issued
//! (puts visible at the target, gets in local memory).

use super::handles::{self, DState, DeferredRef, Op};
use super::{Handle, HANDLE_NULL, NBI_ALL, NBI_GETS, NBI_PUTS};
use crate::api::ctx::CtxInner;
use crate::bail;
use crate::firehose::initiator;
use crate::runtime::error::Result;
use std::sync::Arc;

impl CtxInner {
    /// Complete `h` if it can be completed now. On this design a flush never waits for
    /// the application on the target, so `test` completes the operation; `NOT_READY`
    /// is reserved for conduits where it would.
    pub fn test(&self, h: Handle) -> Result<bool> {
        self.check_live()?;
        if h == HANDLE_NULL {
            return Ok(true);
        }
        let (rank, seq) = match self.rma.lookup(h)? {
            Op::Issued { rank, seq } => (rank, seq),
            Op::Deferred(d) => match self.deferred_seq(&d) {
                Ok(Some((rank, seq))) => {
                    self.rma.set_issued(h, rank, seq);
                    (rank, seq)
                }
                Ok(None) => return Ok(false),
                Err(e) => {
                    self.rma.retire(h);
                    return Err(e);
                }
            },
            Op::Group {
                seqs,
                deferred,
                packs,
            } => return self.test_group(h, &seqs, &deferred, &packs),
        };
        self.complete_op(h, rank, seq)?;
        self.rma.retire(h);
        self.maybe_poll();
        Ok(true)
    }

    /// Complete operation `seq` to `rank`, which handle `h` covers: flush `rank`
    /// unless an earlier flush did. A failed flush retires `h` (its error is the
    /// handle's).
    fn complete_op(&self, h: Handle, rank: usize, seq: u64) -> Result<()> {
        if self.rma.is_complete(rank, seq) {
            return Ok(());
        }
        crate::api::am::check_not_in_handler("fh_test")?;
        if let Err(e) = self.rma.flush_rank(self, rank) {
            self.rma.retire(h);
            return Err(e);
        }
        debug_assert!(self.rma.is_complete(rank, seq));
        Ok(())
    }

    /// `test` of a group handle: every deferred piece issued, then every rank it
    /// touched flushed past the piece's operation.
    fn test_group(
        &self,
        h: Handle,
        seqs: &[(usize, u64)],
        deferred: &[DeferredRef],
        packs: &[Arc<handles::PackOp>],
    ) -> Result<bool> {
        if !packs.iter().all(|p| p.done()) {
            if !crate::api::am::in_handler() {
                self.progress_once()?;
            }
            if !packs.iter().all(|p| p.done()) {
                return Ok(false);
            }
        }
        let mut upto: Vec<(usize, u64)> = seqs.to_vec();
        for d in deferred {
            match self.deferred_seq(d) {
                Ok(Some(rs)) => upto.push(rs),
                Ok(None) => return Ok(false),
                Err(e) => {
                    self.rma.retire(h);
                    return Err(e);
                }
            }
        }
        for p in packs {
            if let Err(e) = p.take_error() {
                self.rma.retire(h);
                return Err(e);
            }
        }
        for (rank, seq) in upto {
            self.complete_op(h, rank, seq)?;
        }
        self.rma.retire(h);
        self.maybe_poll();
        Ok(true)
    }

    /// Where a deferred transfer stands: `Some((rank, seq))` once issued, `None`
    /// while its move is in flight (after letting the answer in), its error once
    /// refused.
    fn deferred_seq(&self, d: &DeferredRef) -> Result<Option<(usize, u64)>> {
        if matches!(d.lock().state, DState::Waiting | DState::Ready(_)) {
            // Let the answer in (progress issues it when it is there).
            if !crate::api::am::in_handler() {
                self.progress_once()?;
                let r = d.lock().rank;
                if self.fh.starved[r].swap(false, std::sync::atomic::Ordering::AcqRel) {
                    // Its move needs firehoses our operations in flight hold.
                    initiator::recover(self, r)?;
                }
            }
            self.rma_progress();
        }
        let mut g = d.lock();
        let rank = g.rank;
        match &mut g.state {
            DState::Issued(seq) => Ok(Some((rank, *seq))),
            DState::Failed(e) => Err(e
                .take()
                .unwrap_or_else(|| crate::err!(Internal, "non-blocking transfer failed earlier"))),
            DState::Waiting | DState::Ready(_) => Ok(None),
        }
    }

    pub fn wait(&self, h: Handle) -> Result<()> {
        let mut watch = crate::api::stall::Watch::new(
            self,
            crate::api::stall::Wait::new(
                "fh_wait",
                None,
                "the answer to the firehose move of a non-blocking put/get",
            ),
        );
        while !self.test(h)? {
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
            watch.round()?;
        }
        Ok(())
    }

    /// Complete all; completed entries become `HANDLE_NULL`. Returns the first error
    /// (after still completing the others).
    pub fn wait_all(&self, hs: &mut [Handle]) -> Result<()> {
        self.check_live()?;
        let mut first = Ok(());
        for h in hs.iter_mut() {
            if *h != HANDLE_NULL {
                let r = self.wait(*h);
                *h = HANDLE_NULL;
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }

    /// True if all completed (those become `HANDLE_NULL`).
    pub fn test_all(&self, hs: &mut [Handle]) -> Result<bool> {
        self.check_live()?;
        let mut all = true;
        for h in hs.iter_mut() {
            if *h != HANDLE_NULL {
                if self.test(*h)? {
                    *h = HANDLE_NULL;
                } else {
                    all = false;
                }
            }
        }
        Ok(all)
    }

    /// Complete at least one (unless all are already `HANDLE_NULL`).
    pub fn wait_some(&self, hs: &mut [Handle]) -> Result<()> {
        self.check_live()?;
        loop {
            let mut any_left = false;
            let mut done_one = false;
            for h in hs.iter_mut() {
                if *h != HANDLE_NULL {
                    any_left = true;
                    if self.test(*h)? {
                        *h = HANDLE_NULL;
                        done_one = true;
                    }
                }
            }
            if done_one || !any_left {
                return Ok(());
            }
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
        }
    }

    /// Complete what can be completed now without waiting: true if at least one
    /// handle completed (those become `HANDLE_NULL`) or all already were.
    /// A handle whose operation failed becomes `HANDLE_NULL` and its error is
    /// returned.
    pub fn test_some(&self, hs: &mut [Handle]) -> Result<bool> {
        self.check_live()?;
        let mut any_left = false;
        let mut done_one = false;
        for h in hs.iter_mut() {
            if *h == HANDLE_NULL {
                continue;
            }
            any_left = true;
            match self.test(*h) {
                Ok(true) => {
                    *h = HANDLE_NULL;
                    done_one = true;
                }
                Ok(false) => {}
                Err(e) if e.status == crate::runtime::error::Status::InvalidArg => return Err(e),
                Err(e) => {
                    // `test` retired it: the slot no longer names this operation.
                    *h = HANDLE_NULL;
                    return Err(e);
                }
            }
        }
        Ok(done_one || !any_left)
    }

    fn check_which(which: i32) -> Result<()> {
        if which & !NBI_ALL != 0 || which == 0 {
            bail!(
                InvalidArg,
                "which = {} must be FH_NBI_PUTS, FH_NBI_GETS or FH_NBI_ALL",
                which
            );
        }
        Ok(())
    }

    pub fn wait_nbi(&self, which: i32) -> Result<()> {
        self.check_live()?;
        Self::check_which(which)?;
        crate::api::am::check_not_in_handler("fh_wait_nbi")?;
        let what = crate::api::stall::Wait::new(
            "fh_wait_nbi",
            None,
            "the answer to the firehose move of an implicit-handle put/get",
        );
        self.wait_for(what, || {
            self.rma_advance()?;
            let g = self.rma.inner.lock();
            Ok(g.nbi_waiting == 0 && g.nbi_packs.iter().all(|p| p.done()))
        })?;
        let packs = std::mem::take(&mut self.rma.inner.lock().nbi_packs);
        let mut first = self.rma.inner.lock().nbi_error.take();
        for p in packs {
            if let (None, Err(e)) = (&first, p.take_error()) {
                first = Some(e);
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        let pending = {
            let g = self.rma.inner.lock();
            (which & NBI_PUTS != 0 && g.nbi_puts) || (which & NBI_GETS != 0 && g.nbi_gets)
        };
        if pending {
            self.rma.flush_all(self)?;
            let mut g = self.rma.inner.lock();
            // A full flush completes both kinds.
            g.nbi_puts = false;
            g.nbi_gets = false;
        }
        self.maybe_poll();
        Ok(())
    }

    /// Move waiting transfers along: a peer whose firehoses were all held by
    /// operations in flight is recovered, and transfers whose moves were answered
    /// are issued.
    fn rma_advance(&self) -> Result<()> {
        for r in 0..self.size {
            if self.fh.starved[r].swap(false, std::sync::atomic::Ordering::AcqRel) {
                initiator::recover(self, r)?;
            }
        }
        self.rma_progress();
        Ok(())
    }

    /// Finalize: wait until every transfer of this context has been issued (those
    /// waiting for their firehose moves, explicit and implicit handles alike) and
    /// every packed transfer's messages were acknowledged; the flush that follows
    /// completes them. Left to the finalize barrier's progress, a move answered just
    /// before the last rank arrived was never read, and its put never issued.
    pub(crate) fn rma_issue_everything(&self) -> Result<()> {
        let what = crate::api::stall::Wait::new(
            "fh_finalize",
            None,
            "the answer to the firehose move of a put or get not issued yet, or the acknowledgement of a packed transfer",
        );
        self.wait_for(what, || {
            self.rma_advance()?;
            let issued = self.rma.inner.lock().deferred.is_empty();
            Ok(issued && self.rma.packs.lock().msgs.is_empty())
        })
    }

    pub fn test_nbi(&self, which: i32) -> Result<bool> {
        self.check_live()?;
        Self::check_which(which)?;
        if !crate::api::am::in_handler() {
            self.progress_once()?;
        }
        self.rma_progress();
        {
            let g = self.rma.inner.lock();
            if g.nbi_waiting > 0 || !g.nbi_packs.iter().all(|p| p.done()) {
                return Ok(false);
            }
        }
        self.wait_nbi(which)?;
        Ok(true)
    }

    /// Flush `rank` (firehose replacement: complete operations, release firehoses).
    pub fn rma_flush_rank(&self, rank: usize) -> Result<()> {
        self.rma.flush_rank(self, rank)
    }

    pub fn rma_flush_all(&self) -> Result<()> {
        self.rma.flush_all(self)
    }

    /// Number of explicit handles not yet synced (for tests and leak checks).
    pub fn outstanding_handles(&self) -> usize {
        let g = self.rma.inner.lock();
        g.slots.iter().filter(|s| s.op.is_some()).count()
    }
}
