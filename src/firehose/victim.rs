//! The victim FIFO (seed 000 §3.1, Table 2): pinned units whose reference count fell
//! to zero, oldest first, so the least recently used is evicted first.
//!
//! Guarantees: O(1) amortised push and pop ("all bookkeeping O(1)", seed 002), exact
//! LRU order. The queue is *lazy*: a unit is pushed again every time it becomes
//! unreferenced, and the owning table stores in the unit the sequence number of its
//! newest entry (`queued`); older entries of the same unit (and entries of units since
//! reused or removed) are skipped when popped, so nothing is ever searched or unlinked.
//! `compact` drops stale entries when they outnumber the live ones, which bounds the
//! queue by a constant factor of the units it describes.

use std::collections::VecDeque;

#[derive(Default, Debug)]
pub struct VictimFifo {
    q: VecDeque<(u64, usize)>,
    next: u64,
}

impl VictimFifo {
    /// Queue `key` as the newest; returns the entry's sequence number, which the
    /// owner stores to recognise this entry as the valid one.
    pub fn push(&mut self, key: usize) -> u64 {
        self.next += 1;
        self.q.push_back((self.next, key));
        self.next
    }

    /// Sequence number of the newest entry (0 if none was pushed).
    #[inline]
    pub fn newest(&self) -> u64 {
        self.next
    }

    /// The oldest entry (valid or stale: the owner decides).
    pub fn pop(&mut self) -> Option<(u64, usize)> {
        self.q.pop_front()
    }

    /// Keep only the entries `valid` approves, in order, when stale ones have
    /// piled up beyond twice `live` (+ slack).
    pub fn compact(&mut self, live: usize, mut valid: impl FnMut(u64, usize) -> bool) {
        if self.q.len() > 2 * live + 64 {
            self.q.retain(|&(s, k)| valid(s, k));
        }
    }

    /// Drop every entry (the owner clears its `queued` marks).
    pub fn clear(&mut self) {
        self.q.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order() {
        let mut f = VictimFifo::default();
        let a = f.push(5);
        let b = f.push(1);
        assert!(b > a);
        assert_eq!(f.pop(), Some((a, 5)));
        assert_eq!(f.pop(), Some((b, 1)));
        assert_eq!(f.pop(), None);
    }
}
