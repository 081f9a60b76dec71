//! Per-context counters. Relaxed atomics: each is exact, snapshots are not atomic
//! across counters.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        #[derive(Default)]
        pub struct Stats { $(pub $name: AtomicU64,)* }
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Snapshot { $(pub $name: u64,)* }
        impl Stats {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
            pub fn reset(&self) { $(self.$name.store(0, Ordering::Relaxed);)* }
        }
    };
}

counters!(
    puts,
    gets,
    put_bytes,
    get_bytes,
    am_requests_sent,
    am_replies_sent,
    am_handled,
    am_refused_by_us,
    am_refused_by_peer,
    am_malformed,
    credit_stalls,
    remote_cache_hits,
    remote_cache_misses,
    access_refused,
    invalidations_sent,
    invalidations_handled,
    mlock_failures,
);

impl Stats {
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Shards of [`Hot`]: a power of two.
const SHARDS: usize = 16;

/// Counters written on every RMA call, sharded by thread: threads of one context
/// increment different cache lines, so the hit path has no shared write (with one
/// shared counter every put of every thread would bounce its line between cores).
/// Sums are exact; a snapshot is not atomic across shards.
#[repr(align(128))]
#[derive(Default)]
pub struct HotShard {
    pub puts: AtomicU64,
    pub gets: AtomicU64,
    pub put_bytes: AtomicU64,
    pub get_bytes: AtomicU64,
    /// Firehose hits.
    pub hits: AtomicU64,
    /// Library calls (for the periodic poll of non-blocking calls).
    pub calls: AtomicU64,
}

pub struct Hot {
    /// A fixed-size array: indexing with a mask needs no bounds check.
    shards: Box<[HotShard; SHARDS]>,
}

impl Default for Hot {
    fn default() -> Self {
        Hot {
            shards: Box::new(std::array::from_fn(|_| HotShard::default())),
        }
    }
}

#[inline]
fn thread_slot() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Const-initialised: an access is one TLS load, no lazy-init check.
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        s.set(n);
        n
    })
}

impl Hot {
    /// This thread's shard.
    #[inline]
    pub fn shard(&self) -> &HotShard {
        &self.shards[thread_slot() & (SHARDS - 1)]
    }

    /// Sum of one counter over the shards.
    pub fn sum(&self, f: impl Fn(&HotShard) -> &AtomicU64) -> u64 {
        self.shards
            .iter()
            .map(|s| f(s).load(Ordering::Relaxed))
            .sum()
    }

    pub fn reset(&self) {
        for s in self.shards.iter() {
            for c in [&s.puts, &s.gets, &s.put_bytes, &s.get_bytes, &s.hits] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}
