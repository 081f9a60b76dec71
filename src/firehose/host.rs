//! What Firehose needs from the context it runs in, as two traits: [`MoveHost`] for
//! the move protocol's handlers (`protocol`), and [`Mover`] for the initiator's side
//! and the explicit pin API (`initiator`, `pins`), which also send moves and wait.
//!
//! The API layer's context implements both; Firehose never names it. Unit tests
//! implement them with fakes. Guarantee asked of an implementation: `wait_until`
//! makes progress (handlers run, so answers arrive) and ends with an error, not a
//! hang, when the wait cannot finish.

use super::local::Pinner;
use super::registry::{LocalRegions, RemoteCache};
use super::state::{FhState, Invalidations};
use crate::runtime::error::Result;
use crate::runtime::os;
use std::sync::atomic::AtomicU64;

/// What the move protocol's handlers need from the context they run in.
pub trait MoveHost {
    /// This rank (for diagnostics).
    fn rank(&self) -> usize;
    /// The context's Firehose state: tables, moves in flight, parked moves, counters.
    fn fh(&self) -> &FhState;
    /// Regions this rank registered explicitly (they answer as prepinned).
    fn regions(&self) -> &LocalRegions;
    /// Peers' registered regions this rank learned of.
    fn remote_regions(&self) -> &RemoteCache;
    /// Invalidations of peers' memory this rank has obeyed.
    fn invalidations_seen(&self) -> &Invalidations;
    /// Invalidations this rank has carried out (what an answer made now reflects).
    fn invalidation_epoch(&self) -> u64;
    /// Add to a statistics counter.
    fn count(&self, c: &AtomicU64, n: u64);
    /// Count an access refused for the memory's protection.
    fn access_refused(&self);
    /// Largest payload a move request or answer may carry.
    fn max_answer(&self) -> usize;
    /// Pins for the local table: mlock + transport registration. `maps`: the
    /// mappings read once for a move's pieces (None: read per unit).
    fn pinner<'a>(&'a self, maps: Option<&'a os::Maps>) -> Box<dyn Pinner + 'a>;
}

/// The two messages of the move protocol.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MoveMsg {
    /// A move request (to the target's `process_move`).
    Request,
    /// An answer sent as a request: a parked move's, whose handler returned long
    /// ago (to the initiator's `process_answer`).
    Answer,
}

/// What the initiator's side needs besides: ids, sending, waiting and progress.
pub trait Mover: MoveHost {
    /// The context's identity: explicit pins carry it (another context refuses
    /// them) and this thread's pin references are kept per context.
    fn owner(&self) -> usize;
    /// A fresh id for a request or a move, unique in this context.
    fn new_id(&self) -> u64;
    /// Send a move message to `rank`.
    fn send(&self, rank: usize, msg: MoveMsg, args: &[u64], payload: &[u8]) -> Result<()>;
    /// Block until `done` holds, making progress meanwhile. `call`, `peer` and
    /// `missing` name the wait if it stalls (a stall report, or the error that ends it).
    fn wait_until(
        &self,
        call: &'static str,
        peer: Option<usize>,
        missing: &'static str,
        done: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()>;
    /// Run handlers and notice completions once; how much work that was.
    fn progress(&self) -> Result<usize>;
    /// Nothing to do now: back off briefly.
    fn idle(&self);
    /// Complete this context's operations to `rank` (to every rank: `None`); their
    /// references come back through [`super::initiator::completed`].
    fn complete_ops(&self, rank: Option<usize>) -> Result<()>;
    /// Is this thread inside an AM handler or a library callback (which must not
    /// block)?
    fn in_handler(&self) -> bool;
    /// The refusal of blocking call `what` inside a handler or callback.
    fn check_not_in_handler(&self, what: &str) -> Result<()>;
    /// Run a completion callback as handler context.
    fn run_as_handler(&self, f: Box<dyn FnOnce() + '_>);
    /// Count a hit that needed no table beyond one entry (the hot path: the
    /// context keeps it in per-thread counters).
    fn count_hit(&self);
    /// Report an error no caller is waiting to receive (a parked move's answer
    /// that could not be sent): the context's next call returns it.
    fn report_async(&self, e: crate::runtime::error::Error);
}
