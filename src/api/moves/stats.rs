//! Firehose and RMA counters of one context (`fh_stats_get`, `fh_stats_reset`) and
//! the one-line summary printed with `FH_STATS=1`.

use super::*;

/// Firehose and RMA statistics of one context (fh_stats_get). Counters count since
/// init or the last fh_stats_reset; `bytes_pinned`, `victim_*`, `firehoses_used` are
/// current levels; `limit_bytes`, `firehoses_per_peer`, `mode`, `unit_bytes` are
/// parameters. Hit rate = hits / (hits + misses).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct FhSnapshot {
    /// sizeof(fh_stats_t) of the library (set by fh_stats_get).
    pub struct_size: u64,
    /// Remote accesses fully covered by live firehoses (one-sided).
    pub hits: u64,
    /// Remote accesses that sent a move (one round trip).
    pub misses: u64,
    /// Remote accesses that waited for a move already in flight (no new message).
    pub pending_hits: u64,
    /// Local pins (conduits that register the local side) found / not found pinned.
    pub local_hits: u64,
    pub local_misses: u64,
    /// fh_try_* / fh_partial_* outcomes.
    pub try_hits: u64,
    pub try_misses: u64,
    pub partial_pins: u64,
    /// Move requests sent by this rank and handled for peers.
    pub moves_sent: u64,
    pub moves_handled: u64,
    /// Small puts and gets that travelled inside their move (no separate RMA).
    pub putinmove: u64,
    /// Units pinned and unpinned on this rank.
    pub pins: u64,
    pub unpins: u64,
    /// Bytes pinned by firehose on this rank now, the peak, and the bound M+MAXVICTIM.
    pub bytes_pinned: u64,
    pub bytes_pinned_peak: u64,
    pub limit_bytes: u64,
    /// Pinned but unreferenced bytes kept for reuse (local victim FIFO).
    pub victim_local_bytes: u64,
    /// Idle firehoses this rank holds into peers (remote victim FIFOs).
    pub victim_remote: u64,
    /// Firehoses this rank holds into all peers, and f (per peer).
    pub firehoses_used: u64,
    pub firehoses_per_peer: u64,
    /// 0 page mode, 1 region mode; the unit (page or largest region) in bytes.
    pub mode: u64,
    pub unit_bytes: u64,
    /// Nanoseconds spent waiting for firehose moves and replacements.
    pub stall_ns: u64,
    /// Active messages sent (requests + replies) and handled.
    pub am_sent: u64,
    pub am_handled: u64,
    /// Accesses refused because the target memory was not accessible.
    pub access_refused: u64,
    /// Pins that could not be mlocked (RLIMIT_MEMLOCK) and were registered only.
    pub mlock_failures: u64,
    /// Put/get operations and bytes.
    pub puts: u64,
    pub gets: u64,
    pub put_bytes: u64,
    pub get_bytes: u64,
    /// Firehose-SMP (seed 000 §4, §5): acquisitions that left the easy path and
    /// entered deadlock avoidance; that posted the DA flag; rollbacks; sleeps on the
    /// "no deadlock" condition variable; nanoseconds spent in deadlock avoidance.
    pub da_entries: u64,
    pub da_wins: u64,
    pub rollbacks: u64,
    pub da_waits: u64,
    pub da_stall_ns: u64,
}

impl CtxInner {
    /// Per-rank summary printed at finalize with FH_STATS=1.
    pub fn stats_summary(&self) -> String {
        let s = self.fh_stats();
        let hr = if s.hits + s.misses > 0 {
            100.0 * s.hits as f64 / (s.hits + s.misses) as f64
        } else {
            100.0
        };
        format!(
            "firehose[{}] stats: puts {} gets {} | hits {} misses {} pending-hits {} (hit rate {:.3}%) | local hits {} misses {} | moves sent {} handled {} put-in-move {} | pins {} unpins {} pinned {} B (peak {} B, limit {} B) victims {} B local, {} remote | f {} used {} | stalled {:.3} ms | DA entries {} wins {} rollbacks {} waits {} ({:.3} ms) | AMs sent {} handled {} | bad releases refused {}\n",
            self.rank,
            s.puts,
            s.gets,
            s.hits,
            s.misses,
            s.pending_hits,
            hr,
            s.local_hits,
            s.local_misses,
            s.moves_sent,
            s.moves_handled,
            s.putinmove,
            s.pins,
            s.unpins,
            s.bytes_pinned,
            s.bytes_pinned_peak,
            s.limit_bytes,
            s.victim_local_bytes,
            s.victim_remote,
            s.firehoses_per_peer,
            s.firehoses_used,
            s.stall_ns as f64 / 1e6,
            s.da_entries,
            s.da_wins,
            s.rollbacks,
            s.da_waits,
            s.da_stall_ns as f64 / 1e6,
            s.am_sent,
            s.am_handled,
            self.fh.stats.bad_releases.load(Ordering::Relaxed)
        )
    }

    /// A snapshot of every counter `fh_stats_t` reports.
    pub fn fh_stats(&self) -> FhSnapshot {
        let fh = &self.fh;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let lc = fh.local.lock().counts;
        let (mut used, mut idle) = (0u64, 0u64);
        for p in &fh.peers {
            let p = p.lock();
            used += p.used as u64;
            idle += p.idle as u64;
        }
        let mut st = self.stats.snapshot();
        st.puts += self.hot.sum(|s| &s.puts);
        st.gets += self.hot.sum(|s| &s.gets);
        st.put_bytes += self.hot.sum(|s| &s.put_bytes);
        st.get_bytes += self.hot.sum(|s| &s.get_bytes);
        FhSnapshot {
            struct_size: std::mem::size_of::<FhSnapshot>() as u64,
            hits: g(&fh.stats.hits) + self.hot.sum(|s| &s.hits),
            misses: g(&fh.stats.misses),
            pending_hits: g(&fh.stats.pending_hits),
            local_hits: g(&fh.stats.local_hits),
            local_misses: g(&fh.stats.local_misses),
            try_hits: g(&fh.stats.try_hits),
            try_misses: g(&fh.stats.try_misses),
            partial_pins: g(&fh.stats.partial_pins),
            moves_sent: g(&fh.stats.moves_sent),
            moves_handled: g(&fh.stats.moves_handled),
            putinmove: g(&fh.stats.putinmove),
            pins: lc.pins,
            unpins: lc.unpins,
            bytes_pinned: lc.bytes as u64,
            bytes_pinned_peak: lc.peak as u64,
            limit_bytes: fh.params.limit_bytes() as u64,
            victim_local_bytes: lc.idle_bytes as u64,
            victim_remote: idle,
            firehoses_used: used,
            firehoses_per_peer: fh.params.f.min(u32::MAX as usize) as u64,
            mode: matches!(fh.params.mode, crate::firehose::settings::FhMode::Region) as u64,
            unit_bytes: fh.params.unit_bytes as u64,
            stall_ns: g(&fh.stats.stall_ns),
            am_sent: st.am_requests_sent + st.am_replies_sent,
            am_handled: st.am_handled,
            access_refused: st.access_refused,
            mlock_failures: st.mlock_failures + lc.mlock_failures,
            puts: st.puts,
            gets: st.gets,
            put_bytes: st.put_bytes,
            get_bytes: st.get_bytes,
            da_entries: g(&fh.stats.da_entries),
            da_wins: g(&fh.stats.da_wins),
            rollbacks: g(&fh.stats.rollbacks),
            da_waits: g(&fh.stats.da_waits),
            da_stall_ns: g(&fh.stats.da_stall_ns),
        }
    }

    /// `fh_stats_reset`: zero the counters (levels such as bytes pinned stay; the
    /// peak restarts from the current level).
    pub fn fh_stats_reset(&self) {
        self.fh.stats.reset();
        self.stats.reset();
        self.hot.reset();
        let mut l = self.fh.local.lock();
        l.counts.pins = 0;
        l.counts.unpins = 0;
        l.counts.mlock_failures = 0;
        l.counts.peak = l.counts.bytes;
    }

    // ---------------------------------------------------------------- explicit API
}
