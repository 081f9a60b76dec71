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
//! - [`protocol`]: the move protocol's handlers, the target's (validate, release,
//!   pin, carry, answer) and the initiator's (enter the answer), against
//!   [`protocol::MoveHost`], what a context provides.
//! - [`settings`]: Firehose's own variables (`FH_FIREHOSE_*`, `FH_REGISTRATION`).
//!
//! The initiator's side that sends moves and waits for them runs one layer up in
//! `api::moves` (`initiator.rs`), against the context, as does the explicit pin API;
//! the tables here are pure data structures, tested against models.

pub mod local;
pub mod params;
pub mod protocol;
pub mod registry;
pub mod remote;
pub mod settings;
pub mod smp;
pub mod state;
pub mod victim;
pub mod wire;
