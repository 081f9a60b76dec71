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
