//! The registration table's layout and this rank's view of its own slots (pure
//! data; the protocol that reads and writes it is in [`super`]).

use parking_lot::Mutex;

/// Registrations one rank can publish at once.
pub const MAX_REGS: usize = 64;
pub(crate) const HDR: usize = 64;
pub(crate) const ENTRY: usize = 16;

/// Where the table's words are, relative to its start.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Holder words per entry (one bit per rank).
    pub(crate) words: usize,
    /// Bytes of the whole table (page multiple).
    pub bytes: usize,
}

impl Layout {
    pub fn new(ranks: usize) -> Layout {
        let words = ranks.div_ceil(64);
        let raw = HDR + MAX_REGS * ENTRY + MAX_REGS * words * 8;
        Layout {
            words,
            bytes: raw.div_ceil(4096) * 4096,
        }
    }
    pub(crate) fn entry(&self, i: usize) -> usize {
        HDR + i * ENTRY
    }
    pub(crate) fn holder_word(&self, i: usize, rank: usize) -> usize {
        HDR + MAX_REGS * ENTRY + (i * self.words + rank / 64) * 8
    }
    /// Bytes a reader fetches: the version and every entry.
    pub(crate) fn scan_len(&self) -> usize {
        HDR + MAX_REGS * ENTRY
    }
}

/// A slot of this rank's own table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Free,
    Published {
        start: usize,
        end: usize,
    },
    /// Removed from the table; its holder bits are cleared once every holder
    /// acknowledged the invalidation, then it becomes `Free`.
    Retiring,
}

/// Per-context table state.
pub struct RegTab {
    /// `None` when the heaps have no room for it (registration then goes through
    /// firehose moves, which need the target's CPU).
    pub layout: Option<Layout>,
    pub(crate) slots: Mutex<Vec<Slot>>,
}

impl RegTab {
    pub fn new(layout: Option<Layout>) -> RegTab {
        RegTab {
            layout,
            slots: Mutex::new(vec![Slot::Free; MAX_REGS]),
        }
    }
}
