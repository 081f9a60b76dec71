//! The rpipe subsystem's per-context state (pure data): the pairing of opens, the
//! handshake messages that arrived before their open, and the open pipes' "peer
//! closed" flags.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Weak;

/// HELLO arguments: k, ok, role, width, flags (1 duplex, 2 pull), policy, inbox, outbox.
pub(crate) const HELLO_ARGS: usize = 8;

#[derive(Default)]
pub struct RpipeState {
    /// Opens made towards each peer so far.
    pub(crate) next: Mutex<HashMap<usize, u64>>,
    /// HELLOs arrived and not yet taken: (src, k) -> arguments.
    pub(crate) hellos: Mutex<HashMap<(usize, u64), [u64; HELLO_ARGS]>>,
    /// BYEs arrived and not yet taken.
    pub(crate) byes: Mutex<HashSet<(usize, u64)>>,
    /// Open pipes' "the peer said BYE" flags, by (peer, open number).
    pub(crate) open: Mutex<HashMap<(usize, u64), Weak<AtomicBool>>>,
}
