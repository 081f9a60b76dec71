//! Firehose parameters (seed 000 §3.1, "tunable parameters"; §3.3 for regions).
//!
//! Guarantees: every limit the tables enforce is computed here once, from the
//! configuration, the job shape and what the conduit can register, so the bound the
//! tests check (`limit_bytes`) is the bound the algorithm keeps.
//!
//! Units: the algorithm counts *units* — a bucket (one page) in page mode, a region
//! (up to `max_region` bytes of adjacent buckets) in region mode. A node accepts at
//! most `m_units` units referenced by remote firehoses plus `victim_units` unreferenced
//! or locally used ones, so pinned memory never exceeds
//! `limit_bytes = (m_units + victim_units) × unit_bytes` = M + MAXVICTIM.
//! Every peer owns `f = floor(m_units / (nodes − 1))` firehoses into every other node.

use super::settings::{FhMode, FirehoseSettings, Strategy};
use crate::runtime::os;

/// f for strategies that never replace firehoses.
pub const UNBOUNDED: usize = usize::MAX / 4;

#[derive(Clone, Debug)]
pub struct Params {
    pub mode: FhMode,
    pub strategy: Strategy,
    /// Bytes of the pin granule: the page in page mode, the largest region in
    /// region mode. A power of two.
    pub unit_bytes: usize,
    /// M as a count of units, and MAXVICTIM likewise.
    pub m_units: usize,
    pub victim_units: usize,
    /// Firehoses each node owns into each other node.
    pub f: usize,
    /// M and MAXVICTIM in bytes (as configured or derived), for reports.
    pub m_bytes: usize,
    pub maxvictim_bytes: usize,
    pub putinmove: usize,
    /// Why a limit was lowered (reported by fh_config_print).
    pub notes: Vec<String>,
}

impl Params {
    /// Derive the parameters.
    /// - `nodes`: ranks in the job; `local_ranks`: ranks sharing this machine (they
    ///   share its physical memory);
    /// - `default_mode`: the conduit's choice when the user made none;
    /// - `reg_limit`: how many separate registrations the conduit can hold (Open MPI's
    ///   dynamic window: 64 attachments), minus what explicit registrations need.
    pub fn derive(
        cfg: &FirehoseSettings,
        nodes: usize,
        local_ranks: usize,
        default_mode: FhMode,
        reg_limit: Option<usize>,
    ) -> Params {
        Params::derive_with(cfg, nodes, local_ranks, default_mode, reg_limit, None)
    }

    /// As [`Params::derive`], with the region size fixed to `unit` (a power of two,
    /// at most what this rank derived): the size the whole job agreed on.
    ///
    /// Long because each limit is derived from the previous ones in a fixed order
    /// (budget, M and MAXVICTIM, unit size, two per peer, registration cap, f), each
    /// adjustment adding its note; the clamps interact (the registration cap lowers M
    /// but never below the two-per-peer floor), so the chain reads top to bottom.
    pub fn derive_with(
        cfg: &FirehoseSettings,
        nodes: usize,
        local_ranks: usize,
        default_mode: FhMode,
        reg_limit: Option<usize>,
        unit: Option<usize>,
    ) -> Params {
        let mode = cfg.mode.unwrap_or(default_mode);
        let page = os::page_size();
        let mut notes = Vec::new();
        // M + MAXVICTIM default: what RLIMIT_MEMLOCK allows, and at most half of this
        // machine's RAM shared among the ranks on it.
        let ram_share = (os::phys_mem() / (2 * local_ranks.max(1) as u64)) as usize;
        let budget = match os::memlock_limit() {
            Some(l) => (l as usize).min(ram_share.max(page)),
            None => ram_share.max(page),
        }
        .max(16 * page);
        let m_bytes = cfg.m.unwrap_or(budget / 8 * 7);
        let maxvictim_bytes = cfg.maxvictim.unwrap_or(m_bytes / 7);
        let peers = nodes.saturating_sub(1).max(1);
        let (unit_bytes, mut m_units, mut victim_units) = match mode {
            FhMode::Page => (page, m_bytes / page, maxvictim_bytes / page),
            FhMode::Region => {
                let mut r = unit.unwrap_or(cfg.maxregion).max(page);
                // A transfer may straddle a region boundary: give every peer at least
                // four regions (smaller ones) rather than one it would thrash on.
                if cfg.maxregions.is_none() && unit.is_none() {
                    let want = 4 * peers;
                    let cap = reg_limit.unwrap_or(usize::MAX).saturating_sub(want / 6 + 1);
                    while r > page && m_bytes / r < want && m_bytes / r < cap {
                        r /= 2;
                    }
                    if r != cfg.maxregion.max(page) {
                        notes.push(format!(
                            "regions of {} B instead of {} B so each of {} peers gets several firehoses",
                            r, cfg.maxregion, peers
                        ));
                    }
                }
                let m = cfg.maxregions.unwrap_or(m_bytes / r);
                let v = cfg.maxvictim_r.unwrap_or((m / 6).max(1));
                (r, m, v)
            }
        };
        if m_units < 2 * peers {
            notes.push(format!(
                "M allows {} units for {} peers: raised to two firehoses per peer",
                m_units, peers
            ));
            m_units = 2 * peers;
        }
        if let Some(limit) = reg_limit {
            if m_units + victim_units > limit {
                let v = victim_units.min(limit / 6).max(usize::from(limit > peers));
                let m = limit.saturating_sub(v).max(2 * peers);
                notes.push(format!(
                    "the conduit holds at most {} registrations: {} limited from {}+{} to {}+{} units",
                    limit,
                    if mode == FhMode::Page { "M+MAXVICTIM (pages)" } else { "R+MAXVICTIM_R" },
                    m_units,
                    victim_units,
                    m,
                    v
                ));
                m_units = m;
                victim_units = v;
            }
        }
        let f = match cfg.registration {
            // At least two: one transfer may straddle two units.
            Strategy::Firehose | Strategy::RendezvousUnpin => (m_units / peers).max(2),
            Strategy::RendezvousKeep | Strategy::PinEverything => UNBOUNDED,
        };
        Params {
            mode,
            strategy: cfg.registration,
            unit_bytes,
            m_units,
            victim_units,
            f,
            m_bytes,
            maxvictim_bytes,
            putinmove: cfg.putinmove,
            notes,
        }
    }

    /// Agree with the other ranks, whose `(unit_bytes, f)` are `all`: the job uses
    /// the smallest unit (re-deriving this rank's counts for it) and the smallest f,
    /// so no target is asked for more firehoses than it can hold. Ranks derive
    /// different values when `FH_FIREHOSE_M`, RAM or `RLIMIT_MEMLOCK` differ.
    pub fn agree(
        self,
        all: &[(usize, usize)],
        cfg: &FirehoseSettings,
        local_ranks: usize,
        default_mode: FhMode,
        reg_limit: Option<usize>,
    ) -> Params {
        let unit = all.iter().map(|&(u, _)| u).min().unwrap_or(self.unit_bytes);
        let f = all.iter().map(|&(_, f)| f).min().unwrap_or(self.f);
        let mut p = if unit < self.unit_bytes {
            let mut p = Params::derive_with(
                cfg,
                all.len(),
                local_ranks,
                default_mode,
                reg_limit,
                Some(unit),
            );
            p.notes.push(format!(
                "units of {} B: the smallest any rank derived (this rank's settings gave {} B)",
                unit, self.unit_bytes
            ));
            p
        } else {
            self
        };
        if f < p.f {
            p.notes.push(format!(
                "f {}: the smallest any rank can hold (this rank could hold {})",
                f, p.f
            ));
            p.f = f;
        }
        p
    }

    /// Units a node may have pinned at once.
    pub fn capacity(&self) -> usize {
        self.m_units + self.victim_units
    }

    /// The bound on pinned bytes (M + MAXVICTIM in units).
    pub fn limit_bytes(&self) -> usize {
        self.capacity() * self.unit_bytes
    }

    /// The aligned granule `[lo, hi)` containing `addr`.
    #[inline]
    pub fn granule(&self, addr: usize) -> (usize, usize) {
        let lo = addr & !(self.unit_bytes - 1);
        (lo, lo.saturating_add(self.unit_bytes))
    }

    /// Split `[addr, addr+len)` into pieces, one per granule.
    pub fn pieces(&self, addr: usize, len: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let end = addr + len;
        let mut a = addr;
        std::iter::from_fn(move || {
            if a >= end {
                return None;
            }
            let (_, hi) = self.granule(a);
            let e = hi.min(end);
            let p = (a, e);
            a = e;
            Some(p)
        })
    }

    /// Granules `[addr, addr+len)` touches.
    pub fn piece_count(&self, addr: usize, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let first = addr / self.unit_bytes;
        let last = (addr + len - 1) / self.unit_bytes;
        last - first + 1
    }

    /// Target side keeps unreferenced units pinned (lazy deregistration)?
    pub fn victim_keep(&self) -> usize {
        match self.strategy {
            Strategy::RendezvousUnpin => 0,
            _ => self.victim_units,
        }
    }

    /// Human-readable summary.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            FhMode::Page => "page",
            FhMode::Region => "region",
        };
        let f = if self.f >= UNBOUNDED {
            "unbounded".to_string()
        } else {
            self.f.to_string()
        };
        let mut s = format!(
            "firehose: strategy {}, {} mode, unit {} B, M {} units + MAXVICTIM {} units (limit {} B), f {} per peer, put-in-move {} B",
            self.strategy.name(),
            mode,
            self.unit_bytes,
            self.m_units,
            self.victim_units,
            self.limit_bytes(),
            f,
            self.putinmove
        );
        for n in &self.notes {
            s.push_str("\n  note: ");
            s.push_str(n);
        }
        s
    }
}

#[cfg(test)]
pub fn test_params(mode: FhMode, unit: usize, m: usize, v: usize, nodes: usize) -> Params {
    Params {
        mode,
        strategy: Strategy::Firehose,
        unit_bytes: unit,
        m_units: m,
        victim_units: v,
        f: (m / (nodes - 1).max(1)).max(1),
        m_bytes: m * unit,
        maxvictim_bytes: v * unit,
        putinmove: 0,
        notes: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::config::Group;

    #[test]
    fn pieces_follow_granules() {
        let p = test_params(FhMode::Page, 4096, 64, 16, 5);
        assert_eq!(p.f, 16);
        let v: Vec<_> = p.pieces(4000, 5000).collect();
        assert_eq!(v, vec![(4000, 4096), (4096, 8192), (8192, 9000)]);
        assert_eq!(p.piece_count(4000, 5000), 3);
        assert_eq!(p.piece_count(4096, 4096), 1);
        assert_eq!(p.limit_bytes(), 80 * 4096);
    }

    #[test]
    fn derive_respects_conduit_limit_and_peers() {
        let mut c = FirehoseSettings::defaults();
        c.m = Some(256 << 20);
        let p = Params::derive(&c, 8, 8, FhMode::Region, Some(48));
        assert!(p.capacity() <= 48, "{:?}", p);
        assert!(p.f >= 1 && p.f * 7 <= p.m_units);
        c.m = Some(4096);
        let p = Params::derive(&c, 8, 8, FhMode::Page, None);
        assert_eq!(p.f, 2, "at least two firehoses per peer");
    }
}
