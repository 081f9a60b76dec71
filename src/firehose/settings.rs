//! Firehose's own settings (`FH_FIREHOSE_*`, `FH_REGISTRATION`): the pin granularity,
//! the registration strategy, and the budgets [`super::params::Params`] derives the
//! tables' limits from.
//!
//! Guarantees: each variable has one parser, here; a value that does not parse is an
//! `FH_ERR_INVALID_ARG` naming it. The rows join the runtime's and the sync
//! subsystem's in one table (`api::settings`), so `fh_config_print` and the
//! agreement check across ranks see them like any other setting.

use crate::bail;
use crate::runtime::config::{
    parse_auto_size, parse_count, parse_size, show_auto, show_size, Group, Scope, Setting,
};

/// Firehose pin granularity (seed 000 §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FhMode {
    /// Page-based networks: the unit of pinning is a bucket (one page).
    Page,
    /// Region-based networks: the unit is a region of adjacent buckets, up to
    /// `FH_FIREHOSE_MAXREGION_SIZE`; limits count regions.
    Region,
}

/// Registration strategy (seed 000 Table 1); all but `Firehose` are baselines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Firehose,
    /// Every operation pins at the target (a round trip), then unpins after it.
    RendezvousUnpin,
    /// Every operation asks the target (a round trip); nothing is ever unpinned.
    RendezvousKeep,
    /// Pin on first touch and never unpin: hits are one-sided, memory only grows.
    PinEverything,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Firehose => "firehose",
            Strategy::RendezvousUnpin => "rendezvous-unpin",
            Strategy::RendezvousKeep => "rendezvous-keep",
            Strategy::PinEverything => "pin-everything",
        }
    }

    /// Does a hit need no message under this strategy?
    #[inline]
    pub fn hits_one_sided(self) -> bool {
        matches!(self, Strategy::Firehose | Strategy::PinEverything)
    }
}

/// Firehose's settings as resolved on this rank.
#[derive(Clone, Debug)]
pub struct FirehoseSettings {
    /// Firehose M in bytes (None: derived from RAM and RLIMIT_MEMLOCK).
    pub m: Option<usize>,
    pub maxvictim: Option<usize>,
    /// None: the conduit's default.
    pub mode: Option<FhMode>,
    pub maxregion: usize,
    pub maxregions: Option<usize>,
    pub maxvictim_r: Option<usize>,
    pub putinmove: usize,
    pub registration: Strategy,
}

impl Group for FirehoseSettings {
    const ROWS: &'static [Setting<FirehoseSettings>] = ROWS;

    fn blank() -> FirehoseSettings {
        FirehoseSettings {
            m: None,
            maxvictim: None,
            mode: None,
            maxregion: 0,
            maxregions: None,
            maxvictim_r: None,
            putinmove: 0,
            registration: Strategy::Firehose,
        }
    }
}

static ROWS: &[Setting<FirehoseSettings>] = &[
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_M",
        scope: Scope::Rank,
        default: "auto",
        help: "bytes of this node's memory remote firehoses may pin (M); auto: 7/8 of min(RLIMIT_MEMLOCK, RAM/(2 x ranks on the node))",
        set: |c, v| {
            c.m = parse_auto_size(v)?;
            Ok(())
        },
        show: |c| show_auto(c.m),
    },
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_MAXVICTIM_M",
        scope: Scope::Rank,
        default: "auto",
        help: "bytes of unreferenced pinned memory kept for reuse (MAXVICTIM); auto: M/7",
        set: |c, v| {
            c.maxvictim = parse_auto_size(v)?;
            Ok(())
        },
        show: |c| show_auto(c.maxvictim),
    },
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_MODE",
        scope: Scope::Job,
        default: "auto",
        help: "page or region pinning; auto: the conduit decides (MPI: region, sim: page)",
        set: |c, v| {
            c.mode = match v {
                "auto" => None,
                "page" => Some(FhMode::Page),
                "region" => Some(FhMode::Region),
                _ => bail!(InvalidArg, "expected auto, page or region"),
            };
            Ok(())
        },
        show: |c| match c.mode {
            None => "auto".into(),
            Some(FhMode::Page) => "page".into(),
            Some(FhMode::Region) => "region".into(),
        },
    },
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_MAXREGION_SIZE",
        scope: Scope::Job,
        default: "1M",
        help: "region mode: largest region (a power of two, at least a page)",
        set: |c, v| {
            let n = parse_size(v)?;
            if !n.is_power_of_two() || !(4096..=1 << 30).contains(&n) {
                bail!(InvalidArg, "must be a power of two between 4K and 1G");
            }
            c.maxregion = n;
            Ok(())
        },
        show: |c| show_size(c.maxregion),
    },
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_MAXREGIONS",
        scope: Scope::Rank,
        default: "auto",
        help: "region mode: regions remote firehoses may hold on this node (R); auto: M / MAXREGION_SIZE, within the conduit's limit",
        set: |c, v| {
            c.maxregions = if v == "auto" { None } else { Some(parse_count(v, 1, 1 << 24)?) };
            Ok(())
        },
        show: |c| c.maxregions.map_or("auto".into(), |n| n.to_string()),
    },
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_MAXVICTIM_R",
        scope: Scope::Rank,
        default: "auto",
        help: "region mode: unreferenced regions kept pinned for reuse; auto: R/6 (at least 1)",
        set: |c, v| {
            c.maxvictim_r = if v == "auto" { None } else { Some(parse_count(v, 0, 1 << 24)?) };
            Ok(())
        },
        show: |c| c.maxvictim_r.map_or("auto".into(), |n| n.to_string()),
    },
    Setting::<FirehoseSettings> {
        name: "FH_FIREHOSE_PUTINMOVE_LIMIT",
        scope: Scope::Job,
        default: "2K",
        help: "a put or get up to this size that misses travels inside the move request and its answer (0: never)",
        set: |c, v| {
            c.putinmove = parse_size(v)?;
            if c.putinmove > 16 << 10 {
                bail!(InvalidArg, "must be at most 16K");
            }
            Ok(())
        },
        show: |c| show_size(c.putinmove),
    },
    Setting::<FirehoseSettings> {
        name: "FH_REGISTRATION",
        scope: Scope::Job,
        default: "firehose",
        help: "firehose | rendezvous-unpin | rendezvous-keep | pin-everything (seed 000 Table 1 baselines)",
        set: |c, v| {
            c.registration = match v {
                "firehose" => Strategy::Firehose,
                "rendezvous-unpin" => Strategy::RendezvousUnpin,
                "rendezvous-keep" => Strategy::RendezvousKeep,
                "pin-everything" => Strategy::PinEverything,
                _ => bail!(
                    InvalidArg,
                    "expected firehose, rendezvous-unpin, rendezvous-keep or pin-everything"
                ),
            };
            Ok(())
        },
        show: |c| c.registration.name().into(),
    },
];
