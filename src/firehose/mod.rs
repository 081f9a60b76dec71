//! The registration layer between the API objects and the conduit: the Firehose
//! algorithm (seed 000 §3; seed 001; seed 002's firehose slides).
//!
//! - [`params`]: M, MAXVICTIM, f, page or region granule, strategy baselines.
//! - [`local`]: the local bucket/region table — pinned units with reference counts
//!   from remote firehoses and local operations, the local victim FIFO, the bound
//!   M + MAXVICTIM.
//! - [`remote`]: the remote firehose table per peer — firehoses with reference
//!   counts, PENDING placeholders, the per-node remote victim FIFO, replacement.
//! - [`smp`]: Firehose-SMP (§4): the per-node deadlock-avoidance flag and the
//!   optimistic acquisition driver that lets many threads share one table.
//! - [`victim`]: the FIFO both tables use (lazy, second-chance LRU, O(1)).
//! - [`registry`]: explicitly registered regions (`fh_mem_register`), which act as
//!   prepinned memory.
//!
//! - [`state`]: a context's Firehose state (tables, gates, moves in flight,
//!   explicit pins, counters).
//! - [`wire`]: the move protocol's messages (`MoveRequest`, `MoveAnswer`), encoded
//!   and decoded with every inconsistency refused.
//! - [`host`]: what Firehose needs from the context it runs in ([`host::MoveHost`]
//!   for the handlers, [`host::Mover`] to send moves and wait): the API layer's
//!   context implements both, and Firehose never names it.
//! - [`protocol`]: the move protocol's handlers, the target's (validate, release,
//!   pin, carry, answer) and the initiator's (enter the answer); parked moves.
//! - [`initiator`]: the initiator's state machine — plan, wait for PENDING entries,
//!   send the move, wait for the answer, roll back — for remote and local requests,
//!   and the references operations hold until they complete.
//! - [`pins`]: the explicit pin API (§3.3) and non-blocking acquisition.
//! - [`settings`]: Firehose's own variables (`FH_FIREHOSE_*`, `FH_REGISTRATION`).
//!
//! The tables are pure data structures, tested against models; the protocol is
//! tested against a fake host. The API layer (`api::moves`) keeps only the glue:
//! the AM entry points, pinning through the conduit, invalidation, counters.

#[cfg(test)]
mod fake;
pub mod host;
pub mod initiator;
pub mod local;
pub mod params;
pub mod pins;
pub mod protocol;
pub mod registry;
pub mod remote;
pub mod settings;
pub mod smp;
pub mod state;
pub mod victim;
pub mod wire;
