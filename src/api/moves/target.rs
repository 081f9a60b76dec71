//! The context as Firehose's host: the AM entry points of the move protocol's
//! handlers, and [`MoveHost`] and [`Mover`] for the context. The protocol itself is
//! Firehose's (`firehose::protocol`, `firehose::initiator`): this file only hands it
//! the context — its AM engine to send and answer, its waits (with stall diagnosis),
//! its progress and RMA completion.

use super::*;
use crate::api::ctx::State;
use crate::api::stall::Wait;
use crate::api::wire::Category;
use crate::firehose::host::{MoveHost, MoveMsg, Mover};
use crate::firehose::protocol;
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

impl Mover for CtxInner {
    fn owner(&self) -> usize {
        self.id()
    }
    fn new_id(&self) -> u64 {
        CtxInner::new_id(self)
    }
    fn send(&self, rank: usize, msg: MoveMsg, args: &[u64], payload: &[u8]) -> Result<()> {
        let handler = match msg {
            MoveMsg::Request => LibHandler::FhMove,
            MoveMsg::Answer => LibHandler::FhAnswer,
        };
        // Also while fh_finalize completes transfers (which may still need moves).
        if self.state.load(Ordering::Acquire) == State::Finalized as u8 {
            return self.check_live();
        }
        self.am_request_unchecked(rank, Category::Medium, handler as u8, args, payload, None)
    }
    fn wait_until(
        &self,
        call: &'static str,
        peer: Option<usize>,
        missing: &'static str,
        done: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()> {
        self.wait_for(Wait::new(call, peer, missing), done)
    }
    fn progress(&self) -> Result<usize> {
        self.progress_once()
    }
    fn idle(&self) {
        self.conduit.idle()
    }
    fn complete_ops(&self, rank: Option<usize>) -> Result<()> {
        match rank {
            Some(r) => self.rma_flush_rank(r),
            None => self.rma_flush_all(),
        }
    }
    fn in_handler(&self) -> bool {
        am::in_handler()
    }
    fn check_not_in_handler(&self, what: &str) -> Result<()> {
        am::check_not_in_handler(what)
    }
    fn run_as_handler(&self, f: Box<dyn FnOnce() + '_>) {
        am::run_as_handler(f)
    }
    #[inline]
    fn count_hit(&self) {
        self.count(&self.hot.shard().hits, 1)
    }
    fn report_async(&self, e: crate::runtime::error::Error) {
        self.record_async_error(e)
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
