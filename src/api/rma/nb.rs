//! Non-blocking put and get: explicit-handle (`_nb`) and implicit-handle (`_nbi`),
//! and the deferred path of a transfer whose target memory first needs a firehose
//! move (sent at once, the transfer issued by the progress hook when the answer is
//! in, so a non-blocking call never waits for the target's CPU).
//!
//! Guarantees: a call either issues its transfer, defers it with its move sent, or
//! fails with nothing issued (and `h_out` untouched); a deferred transfer's failure
//! (the target refused the memory) is kept for its completion call to report.

use super::handles::{DState, Deferred, DeferredRef, Dir, Started};
use super::{Handle, HANDLE_NULL};
use crate::api::ctx::CtxInner;
use crate::api::moves::OpPins;
use crate::firehose::initiator;
use crate::runtime::error::Result;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl CtxInner {
    pub(super) fn nb(
        &self,
        dir: Dir,
        rank: i64,
        remote: usize,
        local: usize,
        nbytes: usize,
    ) -> Result<Handle> {
        let r = self.rma_checks(rank, local, remote, nbytes)?;
        if nbytes == 0 {
            return Ok(HANDLE_NULL);
        }
        if let Some(d) = self.start_deferred(dir, r, remote, local, nbytes, false)? {
            self.count_rma(dir, nbytes);
            return Ok(match d {
                Started::Issued => self.rma.new_handle(r),
                Started::Waiting(d) => self.rma.new_deferred(d),
            });
        }
        self.transfer(dir, r, remote, local, nbytes, false)?;
        self.count_rma(dir, nbytes);
        let h = self.rma.new_handle(r);
        self.maybe_poll();
        Ok(h)
    }

    /// The non-blocking miss path: when `[remote, +nbytes)` of `rank` needs a firehose
    /// move (not heap, registered, node peer or a hit), send the move and return at
    /// once; the transfer is issued when the answer is in (see [`Deferred`]).
    /// `None`: take the ordinary path (which does not wait for the target there).
    ///
    /// Kept in one piece: each early `Ok(None)` hands the transfer back to
    /// `transfer`'s ordinary path (a case it serves without a move: plain, kernel
    /// copy, hit, registration table; or one where deferring is not allowed: several
    /// threads, firehose-local side, the per-peer cap), and only past all of them is
    /// the `Deferred` record made and its move sent.
    pub(super) fn start_deferred(
        &self,
        dir: Dir,
        rank: usize,
        remote: usize,
        local: usize,
        nbytes: usize,
        implicit: bool,
    ) -> Result<Option<Started>> {
        let write = dir == Dir::Put;
        // Several threads in the library (MPI_THREAD_MULTIPLE, the progress thread):
        // their acquisitions compete through the deadlock-avoidance protocol, which
        // this path does not take part in, so misses stay synchronous there.
        if self.concurrent
            || rank == self.rank
            || self.fh.local_side
            || !self.fh_hits_one_sided()
            || self.plain_access(rank, remote, nbytes).is_some()
            || self.conduit.reaches_any_address(rank)
        {
            return Ok(None);
        }
        if let Some(h) = self.with_peer(rank, |t| t.hit_one(remote, remote + nbytes, write)) {
            self.with_peer(rank, |t| t.release(h));
            return Ok(None); // a hit: the ordinary path takes it again
        }
        if self.regtab_lookup(rank, remote, nbytes)? {
            return Ok(None); // registered: plain from now on
        }
        let waiting = self
            .rma
            .inner
            .lock()
            .deferred
            .iter()
            .filter(|d| {
                let g = d.lock();
                g.rank == rank && matches!(g.state, DState::Waiting)
            })
            .count();
        if waiting >= (self.fh.params.f / 2).max(1) {
            // Deferred moves compete for the peer's firehoses outside the deadlock
            // avoidance: at most half of them may be spoken for this way (more thrash
            // when f is small). This one waits, like any miss, for its move.
            return Ok(None);
        }
        let d: DeferredRef = Arc::new(Mutex::new(Deferred {
            dir,
            rank,
            remote,
            local,
            nbytes,
            state: DState::Waiting,
            implicit,
        }));
        let d2 = d.clone();
        let done = Box::new(move |r: Result<OpPins>| {
            d2.lock().state = match r {
                Ok(p) => DState::Ready(p),
                Err(e) => DState::Failed(Some(e)),
            }
        });
        match crate::firehose::pins::acquire_async(self, rank, remote, nbytes, write, done) {
            Err(e) if e.status == crate::runtime::error::Status::NoResource => Ok(None),
            Err(e) => Err(e),
            Ok(Some(pins)) => {
                d.lock().state = DState::Ready(pins);
                self.issue_deferred(&d);
                match std::mem::replace(&mut d.lock().state, DState::Failed(None)) {
                    DState::Failed(Some(e)) => Err(e),
                    _ => Ok(Some(Started::Issued)),
                }
            }
            Ok(None) => {
                let mut g = self.rma.inner.lock();
                g.deferred.push(d.clone());
                self.rma.has_deferred.store(true, Ordering::Release);
                g.nbi_waiting += implicit as usize;
                Ok(Some(Started::Waiting(d)))
            }
        }
    }

    /// Issue a deferred transfer whose references arrived (`Ready` becomes `Issued`
    /// or `Failed`). True when it is no longer waiting.
    fn issue_deferred(&self, d: &DeferredRef) -> bool {
        let mut g = d.lock();
        let pins = match std::mem::replace(&mut g.state, DState::Waiting) {
            DState::Ready(p) => p,
            DState::Waiting => return false,
            other => {
                g.state = other;
                return true;
            }
        };
        let (dir, rank, remote, local, n) = (g.dir, g.rank, g.remote, g.local, g.nbytes);
        // SAFETY: the caller of fh_*_nb(i) keeps `local` valid until the operation
        // completes (header contract); the references keep the target pinned and
        // registered until they are released after completion.
        let r = unsafe { self.issue_units(dir, rank, remote, local, n, false, &pins) };
        g.state = match r {
            Ok(()) => {
                let seq = self.rma.bump(rank);
                initiator::hold(&self.fh, rank, seq, pins);
                DState::Issued(seq)
            }
            Err(e) => {
                initiator::release(self, pins);
                DState::Failed(Some(e))
            }
        };
        true
    }

    /// The progress hook, run by every poll: issue the deferred non-blocking
    /// transfers whose moves were answered (so their references do the work they
    /// were taken for at once). One load when nothing is deferred.
    #[inline]
    pub(crate) fn rma_progress(&self) {
        if self.rma.has_deferred.load(Ordering::Acquire) {
            self.rma_progress_deferred();
        }
    }

    #[cold]
    #[inline(never)]
    fn rma_progress_deferred(&self) {
        let list = {
            let g = self.rma.inner.lock();
            if g.deferred.is_empty() {
                self.rma.has_deferred.store(false, Ordering::Release);
                return;
            }
            g.deferred.clone()
        };
        let mut finished = Vec::new();
        for d in &list {
            if self.issue_deferred(d) {
                finished.push(d.clone());
            }
        }
        if finished.is_empty() {
            return;
        }
        let mut g = self.rma.inner.lock();
        for d in finished {
            g.deferred.retain(|x| !Arc::ptr_eq(x, &d));
            let mut dg = d.lock();
            if !dg.implicit {
                continue;
            }
            g.nbi_waiting -= 1;
            match &mut dg.state {
                DState::Issued(_) => match dg.dir {
                    Dir::Put => g.nbi_puts = true,
                    Dir::Get => g.nbi_gets = true,
                },
                DState::Failed(e) if g.nbi_error.is_none() => g.nbi_error = e.take(),
                _ => {}
            }
        }
    }

    pub fn put_nb(&self, rank: i64, dst: usize, src: usize, nbytes: usize) -> Result<Handle> {
        self.nb(Dir::Put, rank, dst, src, nbytes)
    }

    pub fn get_nb(&self, dst: usize, rank: i64, src: usize, nbytes: usize) -> Result<Handle> {
        self.nb(Dir::Get, rank, src, dst, nbytes)
    }

    pub(super) fn nbi(
        &self,
        dir: Dir,
        rank: i64,
        remote: usize,
        local: usize,
        nbytes: usize,
    ) -> Result<()> {
        let r = self.rma_checks(rank, local, remote, nbytes)?;
        if nbytes == 0 {
            return Ok(());
        }
        // Inside this thread's access region the operation belongs to the region's
        // handle, not to the implicit set.
        let region = self.rma.in_region();
        match self.start_deferred(dir, r, remote, local, nbytes, !region)? {
            Some(Started::Waiting(d)) => {
                if region {
                    self.rma.region_add(r, Some(d));
                }
                self.count_rma(dir, nbytes);
                self.maybe_poll();
                return Ok(());
            }
            Some(Started::Issued) => {}
            None => self.transfer(dir, r, remote, local, nbytes, false)?,
        }
        self.count_rma(dir, nbytes);
        self.nbi_issued(dir, r, region);
        self.maybe_poll();
        Ok(())
    }

    /// An implicit-handle operation to `r` was issued (it completes with a flush of
    /// `r`): into this thread's access region (`region`), else into the implicit set.
    pub(crate) fn nbi_issued(&self, dir: Dir, r: usize, region: bool) {
        if region {
            self.rma.region_add(r, None);
            return;
        }
        let mut g = self.rma.inner.lock();
        match dir {
            Dir::Put => g.nbi_puts = true,
            Dir::Get => g.nbi_gets = true,
        }
    }

    pub fn put_nbi(&self, rank: i64, dst: usize, src: usize, nbytes: usize) -> Result<()> {
        self.nbi(Dir::Put, rank, dst, src, nbytes)
    }

    pub fn get_nbi(&self, dst: usize, rank: i64, src: usize, nbytes: usize) -> Result<()> {
        self.nbi(Dir::Get, rank, src, dst, nbytes)
    }
}
