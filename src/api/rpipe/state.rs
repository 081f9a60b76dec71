//! The rpipe subsystem's per-context state (pure data): the pairing of opens, the
//! handshake messages that arrived before their open, the open pipes' "peer
//! closed" flags, and the blocks of closed pipes that wait for the peer's close.

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
    /// Pipes closed here whose peer has not closed yet: (peer, open number) -> their
    /// library heap blocks, given back when the peer's BYE arrives (`open::sweep`).
    /// Lock order: `retiring`, then `byes`.
    pub(crate) retiring: Mutex<HashMap<(usize, u64), Vec<usize>>>,
}
