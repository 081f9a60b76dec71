//! The move protocol's handlers, registered for the context: the AM entry points and
//! [`MoveHost`] for the context. The handlers themselves are Firehose's
//! (`firehose::protocol`): this file only hands them the context and a way to
//! answer.

use super::*;
use crate::firehose::protocol::{self, MoveHost};
use crate::firehose::registry::{LocalRegions, RemoteCache};

impl MoveHost for CtxInner {
    fn rank(&self) -> usize {
        self.rank
    }
    fn fh(&self) -> &FhState {
        &self.fh
    }
    fn regions(&self) -> &LocalRegions {
        &self.local_regs
    }
    fn remote_regions(&self) -> &RemoteCache {
        &self.remote
    }
    fn invalidations_seen(&self) -> &Invalidations {
        &self.inval_seen
    }
    fn invalidation_epoch(&self) -> u64 {
        self.inval_epoch.load(Ordering::Acquire)
    }
    fn count(&self, c: &AtomicU64, n: u64) {
        CtxInner::count(self, c, n)
    }
    fn access_refused(&self) {
        CtxInner::count(self, &self.stats.access_refused, 1)
    }
    fn max_answer(&self) -> usize {
        self.am_max_medium()
    }
    fn pinner<'a>(&'a self, maps: Option<&'a os::Maps>) -> Box<dyn Pinner + 'a> {
        Box::new(CtxPinner { ctx: self, maps })
    }
}

/// `H_FH_MOVE`: a peer asks this rank to pin (and maybe carries a small transfer).
pub(crate) fn handle_move(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let reply = |args: &[u64], payload: &[u8]| {
        let _ = ctx.am_reply(
            tok,
            Category::Medium,
            LibHandler::FhAnswer as u8,
            args,
            payload,
            None,
        );
    };
    protocol::process_move(ctx, tok.src, f.args(), f.payload, &reply);
}

/// `H_FH_ANSWER`: a peer answered one of this rank's moves.
pub(crate) fn handle_answer(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    protocol::process_answer(ctx, tok.src, f.args(), f.payload);
}

impl CtxInner {
    /// Run the moves handlers parked because they met a unit being pinned, and
    /// answer them (by request: their handler returned long ago).
    pub(super) fn fh_drain_parked(&self) {
        let list = std::mem::take(&mut *self.fh.parked.lock());
        for pm in list {
            let reply = |args: &[u64], payload: &[u8]| {
                let _ = self.am_request(
                    pm.src,
                    Category::Medium,
                    LibHandler::FhAnswer as u8,
                    args,
                    payload,
                    None,
                );
            };
            // Parks itself again if the unit is still being pinned.
            protocol::process_move(self, pm.src, &pm.args, &pm.payload, &reply);
        }
    }
}
