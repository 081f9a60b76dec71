//! The node-aware barrier (`FH_BARRIER=node`, the default): shared-memory words
//! inside a node, dissemination (seed 004 ch. 3) across the nodes' leaders.
//!
//! A node is the set of ranks that map each other's library heaps
//! (`Conduit::node_view`); its leader is its lowest rank. Barrier epoch `e`:
//! 1. every rank stores its value (id, tag `e << 2 | kind`) in its own `node_val`
//!    line, then adds one to the arrival counter at its leader;
//! 2. the rank whose addition makes the counter `e * m` (m ranks on the node) is the
//!    last to arrive: it combines the node's values. On a one-node job it then
//!    publishes the release (id, then tag) at the leader and rings the bells of the
//!    node's ranks (a system call only for those asleep). On several nodes it rings the leader,
//!    which combines the values itself, runs dissemination with the other leaders
//!    through the transport, then publishes the release for its node;
//! 3. the others wait for the release tag of epoch `e` (asleep on their own bell
//!    after the spin and yield stages of `runtime::wait`, so an AM wakes them too).
//!
//! Invariants: the counter only grows, by exactly m per epoch, so "`e * m` reached"
//! means every rank of the node notified epoch `e`. A rank's `node_val` is not
//! rewritten before it is read: the rank writes epoch `e + 1` only after the release
//! of `e`, which is published after the values of `e` were combined. The release
//! words have one writer per epoch (the last arriver, or the leader) and epoch
//! `e + 1` cannot be released before every rank of the node left epoch `e`.
//!
//! These words are touched only by the node's own ranks, with CPU atomics through
//! their node-shared mapping, whatever other nodes there are.

use super::state::{Barrier, Phase, Step, Val};
use crate::api::ctx::CtxInner;
use crate::runtime::error::Result;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// The 64-bit word at `addr` (mapped here by [`Node::new`]).
fn w(addr: usize) -> &'static AtomicU64 {
    // SAFETY: addresses in `Node` are 8-byte aligned words of sync areas mapped for
    // the context's life and touched only through atomics by the node's ranks.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }
}

impl CtxInner {
    /// Ring the bell of every other rank of the node. Each rank sleeps on its own
    /// bell only, so the AM frames sent to it wake it too; a ring costs a load where
    /// nobody sleeps.
    pub(crate) fn ring_node(&self) {
        for &r in &self.sync.node.members {
            if r != self.rank {
                self.bells.ring(r);
            }
        }
    }

    /// Step 1 and 2 of the module documentation for epoch `e`; returns the next step
    /// (or the result, when this rank released a one-node barrier).
    pub(crate) fn node_notify(&self, b: &mut Barrier) -> Result<Step> {
        let nd = &self.sync.node;
        let e = b.epoch;
        let (id, kind) = b.acc.encode();
        w(nd.val_at[nd.idx]).store(id, SeqCst);
        w(nd.val_at[nd.idx] + 8).store(e << 2 | kind, SeqCst);
        let m = nd.members.len() as u64;
        let c = w(nd.bar).fetch_add(1, SeqCst) + 1;
        debug_assert!(c <= e * m, "node barrier counter ahead of its epoch");
        if c == e * m && nd.alone() {
            b.acc = self.node_combine(b.acc, e);
            self.node_release(b.acc, e);
            return Ok(Step::NodeDone);
        }
        if c == e * m && !nd.leads() {
            self.bells.ring(nd.members[0]);
        }
        Ok(if nd.leads() && !nd.alone() {
            Step::NodeGather
        } else {
            Step::NodeWait
        })
    }

    /// Combine the values of the node's ranks for epoch `e` into `acc`.
    fn node_combine(&self, mut acc: Val, e: u64) -> Val {
        for &v in &self.sync.node.val_at {
            let tag = w(v + 8).load(SeqCst);
            debug_assert_eq!(tag >> 2, e, "a node value of another epoch");
            acc = acc.combine(Val::decode(w(v).load(SeqCst), tag & 3));
        }
        acc
    }

    /// Publish the release of epoch `e` with value `v` and wake the node.
    pub(crate) fn node_release(&self, v: Val, e: u64) {
        let bar = self.sync.node.bar;
        let (id, kind) = v.encode();
        w(bar + 8).store(id, SeqCst);
        w(bar + 16).store(e << 2 | kind, SeqCst);
        self.ring_node();
    }

    /// The leader of a node of a several-node job: the node's arrivals are in?
    /// Then its combined value (and the leaders' dissemination starts).
    pub(crate) fn node_gathered(&self, b: &Barrier) -> Option<Val> {
        let nd = &self.sync.node;
        let e = b.epoch;
        if w(nd.bar).load(SeqCst) < e * nd.members.len() as u64 {
            return None;
        }
        Some(self.node_combine(b.acc, e))
    }

    /// The release of epoch `e`, if published.
    pub(crate) fn node_released(&self, e: u64) -> Option<Val> {
        let bar = self.sync.node.bar;
        let tag = w(bar + 16).load(SeqCst);
        if tag >> 2 != e {
            debug_assert!(tag >> 2 < e, "a release from the future");
            return None;
        }
        Some(Val::decode(w(bar + 8).load(SeqCst), tag & 3))
    }

    /// Where a wait in the barrier's current step may sleep (None: only spin and
    /// yield, because what it waits for comes unannounced).
    pub(crate) fn barrier_bell(&self) -> Option<usize> {
        let b = self.sync.barrier.lock();
        match b.phase {
            Phase::Running {
                step: Step::NodeWait | Step::NodeGather,
            } => self.bells.at.get(self.rank).copied().flatten(),
            _ => self.bells.own(self.rank),
        }
    }
}
