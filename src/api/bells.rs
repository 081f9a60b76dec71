//! The ranks' bells: where a waiting rank of this node sleeps and who wakes it
//! (`runtime::wait` has the policy and the futex).
//!
//! Every rank's bell is a line of its sync area, which lies in the node-shared
//! mapping, so a node peer reaches it with a CPU store. Whoever writes a word
//! another rank of the node may be waiting for rings that rank's bell after the
//! write: the synchronisation words (`CtxInner::word` and the native path of the
//! atomics) and the AM frames sent to a node peer.
//!
//! Guarantees: ringing costs one fence and one load when nobody sleeps. A wait
//! sleeps on its own bell only where every write it waits for rings it
//! ([`Bells::sleep_own`]: every rank of the job is on this node and reaches the
//! words by CPU atomics); a sleep is bounded ([`Bells::bound`]), so what no bell
//! announces (a peer's exit, another context's traffic) is seen late, never missed.

use crate::runtime::wait::{Bell, Patience, Policy};
use std::time::Duration;

/// The bells of one context, as this rank sees them.
#[derive(Default)]
pub struct Bells {
    /// Where each rank's bell is mapped here (None: not on this node, or no sync
    /// area, or the conduit's ranks do not sleep).
    pub(crate) at: Vec<Option<usize>>,
    /// Waits on this rank's own bell may sleep: every write they wait for rings it.
    pub(crate) sleep_own: bool,
    /// The waiting policy for this node's ranks and cores (`runtime::wait`).
    pub(crate) policy: Option<Policy>,
    /// How much longer than the policy this context's waits yield (learnt).
    pub(crate) patience: Patience,
}

/// The longest sleep of a wait while this is the only live context and every rank
/// is on the node (nothing it waits for comes unannounced, except a peer's exit).
const BOUND_ALONE: Duration = Duration::from_millis(5);
/// The longest sleep otherwise (another context's traffic does not ring this bell).
const BOUND_SHARED: Duration = Duration::from_micros(500);

impl Bells {
    /// Bells at `at` (every rank's bell address here, where mapped), for a context
    /// with `here` ranks on this machine.
    pub fn new(at: Vec<Option<usize>>, all_native: bool, here: usize) -> Bells {
        let sleep_own = all_native && at.iter().all(|b| b.is_some());
        let policy = Policy::for_node(here, crate::runtime::wait::cpus_online());
        Bells {
            at,
            sleep_own,
            policy: Some(policy),
            patience: Patience::default(),
        }
    }

    /// The waiting policy of this context's blocking calls.
    pub fn policy(&self) -> Policy {
        self.policy.unwrap_or(crate::runtime::wait::DEDICATED)
    }

    /// How long one sleep may last.
    pub fn bound(&self, contexts: usize) -> Duration {
        if contexts <= 1 {
            BOUND_ALONE
        } else {
            BOUND_SHARED
        }
    }
}

impl Bells {
    /// Wake `rank` if it sleeps on its bell (after writing what it may wait for).
    #[inline]
    pub fn ring(&self, rank: usize) {
        if let Some(Some(p)) = self.at.get(rank) {
            // SAFETY: a bell line of `rank`'s sync area, mapped for the context's
            // life, 64-byte aligned, only ever used as a Bell.
            unsafe { Bell::at(*p as *mut u8) }.ring();
        }
    }

    /// `me`'s own bell, when its waits may sleep on it.
    pub fn own(&self, me: usize) -> Option<usize> {
        if self.sleep_own {
            self.at.get(me).copied().flatten()
        } else {
            None
        }
    }
}
