//! Access regions (seed 002's extended API: "sync on the operations initiated in a
//! given interval"): every implicit-handle operation a thread initiates between
//! `fh_begin_nbi_accessregion` and `fh_end_nbi_accessregion` is completed by the one
//! handle the end returns, instead of by `fh_wait_nbi`.
//!
//! Guarantees:
//! - one region per context at a time, owned by the thread that began it; regions do
//!   not nest (a second begin, or an end without a begin or from another thread, is
//!   `FH_ERR_STATE` and changes nothing);
//! - inside the region, that thread's `_nbi` operations (contiguous, non-contiguous,
//!   memset) are not in the implicit set: `fh_wait_nbi` need not complete them, and
//!   their errors are reported by the region's handle. Other threads' `_nbi`
//!   operations are not in the region;
//! - the handle completes when every operation of the region has, including those
//!   still waiting for a firehose move at the end; an empty region gives
//!   `FH_HANDLE_NULL`.
//!
//! The region's record ([`Region`]) is with the rest of the RMA state in
//! `handles`.

use super::handles::{DeferredRef, Handle, Op, PackOp, Region, RmaState, HANDLE_NULL};
use crate::api::ctx::CtxInner;
use crate::bail;
use crate::runtime::error::Result;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl RmaState {
    /// Does the calling thread have a region open (its `_nbi` operations go there)?
    #[inline]
    pub(crate) fn in_region(&self) -> bool {
        if !self.region_open.load(Ordering::Acquire) {
            return false;
        }
        let me = std::thread::current().id();
        matches!(&self.inner.lock().region, Some(r) if r.owner == me)
    }

    /// Record an operation of the open region issued to `rank` (`deferred`: still
    /// waiting for its move).
    pub(crate) fn region_add(&self, rank: usize, deferred: Option<DeferredRef>) {
        let mut g = self.inner.lock();
        let Some(r) = g.region.as_mut() else {
            debug_assert!(false, "region_add without an open region");
            return;
        };
        if let Err(i) = r.ranks.binary_search(&rank) {
            r.ranks.insert(i, rank);
        }
        r.deferred.extend(deferred);
        debug_assert!(r.ranks.windows(2).all(|w| w[0] < w[1]));
    }
}

impl RmaState {
    /// An implicit-handle packed transfer: into this thread's region, else into the
    /// implicit set.
    pub(crate) fn add_nbi_pack(&self, op: Arc<PackOp>) {
        let in_region = self.in_region();
        let mut g = self.inner.lock();
        match g.region.as_mut() {
            Some(r) if in_region => r.packs.push(op),
            _ => g.nbi_packs.push(op),
        }
    }
}

impl CtxInner {
    /// `fh_begin_nbi_accessregion`.
    pub fn begin_region(&self) -> Result<()> {
        self.check_live()?;
        crate::api::am::table::check_not_in_handler("fh_begin_nbi_accessregion")?;
        let mut g = self.rma.inner.lock();
        if g.region.is_some() {
            bail!(
                State,
                "an access region is already open on this context (regions do not nest: end it with fh_end_nbi_accessregion first)"
            );
        }
        g.region = Some(Region {
            owner: std::thread::current().id(),
            ranks: Vec::new(),
            deferred: Vec::new(),
            packs: Vec::new(),
        });
        self.rma.region_open.store(true, Ordering::Release);
        Ok(())
    }

    /// `fh_end_nbi_accessregion`: the handle of everything the region initiated.
    pub fn end_region(&self) -> Result<Handle> {
        self.check_live()?;
        let mut g = self.rma.inner.lock();
        let me = std::thread::current().id();
        match &g.region {
            None => bail!(
                State,
                "no access region is open (begin one with fh_begin_nbi_accessregion)"
            ),
            Some(r) if r.owner != me => bail!(
                State,
                "the access region was begun by another thread; only that thread ends it"
            ),
            Some(_) => {}
        }
        let r = g.region.take().expect("checked above");
        self.rma.region_open.store(false, Ordering::Release);
        if r.ranks.is_empty() && r.deferred.is_empty() && r.packs.is_empty() {
            return Ok(HANDLE_NULL);
        }
        let seqs: Arc<[(usize, u64)]> = r.ranks.iter().map(|&k| (k, g.issued[k])).collect();
        let op = Op::Group {
            seqs,
            deferred: r.deferred.into(),
            packs: r.packs.into(),
        };
        Ok(RmaState::slot_for(&mut g, op))
    }
}
