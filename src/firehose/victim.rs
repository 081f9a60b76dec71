//! The victim FIFO (seed 000 §3.1, Table 2): pinned units whose reference count fell
//! to zero, oldest first, so the least recently used is evicted first.
//!
//! Guarantees: O(1) amortised push and pop ("all bookkeeping O(1)", seed 002). The
//! queue is *lazy*: the owning table stores, in each unit, the sequence number of its
//! one valid entry (`queued`); entries whose number no longer matches (the unit was
//! reused, re-queued or removed) are skipped when popped. Together with a use stamp
//! in the unit this gives second-chance LRU: a unit used again since it was queued is
//! re-queued as the newest instead of being evicted, without touching the queue on
//! the hit path.

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

    /// The oldest entry (valid or stale: the owner decides).
    pub fn pop(&mut self) -> Option<(u64, usize)> {
        self.q.pop_front()
    }

    /// Entries queued, stale ones included.
    pub fn raw_len(&self) -> usize {
        self.q.len()
    }

    /// The sequence number the next push will get (for use stamps).
    pub fn now(&self) -> u64 {
        self.next
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
