//! The settings table: every tunable of the library in one place.
//!
//! Guarantees: each setting has a name (`FH_*`, GASNet-style), a default, a help
//! line and one parser. Values are layered: default, then the caller's
//! `fh_config_t`, then the environment (the environment wins). Each resolved value
//! remembers where it came from so `fh_config_print` can say so. A value that does
//! not parse is an `FH_ERR_INVALID_ARG` naming the variable, never a silent default.

use crate::runtime::error::Result;
use crate::{bail, err};

/// How AMs and remote work are progressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Only inside library calls (every call polls; `fh_poll` for explicit polling).
    Poll,
    /// Also on a library thread (needs `MPI_THREAD_MULTIPLE`).
    Thread,
}

/// What "pin" means for memory the library makes remotely accessible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// `mlock` the pages (bounded by `RLIMIT_MEMLOCK`) in addition to conduit registration.
    Mlock,
    /// Conduit registration only.
    None,
}

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
}

/// MPI thread level requested by `fh_init_world`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadLevel {
    Single,
    Funneled,
    Serialized,
    Multiple,
}

/// Where a resolved value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    Struct,
    Env,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Struct => "fh_config_t",
            Source::Env => "environment",
        }
    }
}

/// Resolved configuration of one context.
#[derive(Clone, Debug)]
pub struct Config {
    pub progress: Progress,
    pub progress_interval_us: u64,
    pub heap_size: usize,
    pub am_max_medium: usize,
    pub am_max_long: usize,
    /// 0 = auto (see [`Config::credits_for`]).
    pub am_credits: usize,
    pub am_recv_buffers: usize,
    pub pin: Pin,
    pub mpi_thread: ThreadLevel,
    pub verbose: bool,
    /// Firehose M in bytes (None: derived from RAM and RLIMIT_MEMLOCK).
    pub fh_m: Option<usize>,
    pub fh_maxvictim: Option<usize>,
    /// None: the conduit's default.
    pub fh_mode: Option<FhMode>,
    pub fh_maxregion: usize,
    pub fh_maxregions: Option<usize>,
    pub fh_maxvictim_r: Option<usize>,
    pub fh_putinmove: usize,
    pub registration: Strategy,
    pub stats: bool,
    /// Map the library heaps of ranks on this node into each other (direct copies).
    pub shm: bool,
    /// Barrier algorithm (`FH_BARRIER`).
    pub barrier: BarrierAlgo,
    /// Postal-model latency λ for the broadcast tree (`FH_BCAST_LAMBDA`; None:
    /// measured at the first broadcast).
    pub bcast_lambda: Option<u32>,
    /// Serve the library while the application blocks in MPI (`FH_MPI_PROGRESS`).
    pub serve_blocking: bool,
    /// Seconds a blocking wait lasts before it says why on stderr (0: never).
    pub stall_warn_s: u64,
    /// Seconds after which a blocking wait gives up with FH_ERR_TRANSPORT (None: wait).
    pub stall_abort_s: Option<u64>,
    /// Kernel single-copy (process_vm_readv/writev) to node peers, where permitted.
    pub cma: bool,
    /// Firehose table diagnostics on stderr (`FH_DEBUG_TABLES`).
    pub debug_tables: bool,
    /// `sources[i]` is where `SETTINGS[i]` came from.
    pub sources: Vec<Source>,
}

/// Whether a setting must be the same on every rank of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// It changes a wire format, a memory layout or an algorithm all ranks run
    /// together: `fh_init` checks that every rank resolved the same value.
    Job,
    /// Each rank may choose its own (the protocols tolerate the difference).
    Rank,
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Job => "same on every rank",
            Scope::Rank => "per rank",
        }
    }
}

/// One row of the settings table.
pub struct Setting {
    pub name: &'static str,
    pub scope: Scope,
    pub default: &'static str,
    pub help: &'static str,
    set: fn(&mut Config, &str) -> Result<()>,
    show: fn(&Config) -> String,
}

/// Largest medium AM payload we accept as a setting (one posted buffer each).
pub const MAX_AM_MEDIUM_LIMIT: usize = 1 << 24;
/// MPI counts are `int`: a long payload travels as one message.
pub const MAX_AM_LONG_LIMIT: usize = i32::MAX as usize;

pub static SETTINGS: &[Setting] = &[
    Setting {
        name: "FH_PROGRESS",
        scope: Scope::Rank,
        default: "poll",
        help: "poll: progress only inside library calls; thread: also a progress thread (needs MPI_THREAD_MULTIPLE)",
        set: |c, v| {
            c.progress = match v {
                "poll" => Progress::Poll,
                "thread" => Progress::Thread,
                _ => bail!(InvalidArg, "expected poll or thread"),
            };
            Ok(())
        },
        show: |c| match c.progress {
            Progress::Poll => "poll".into(),
            Progress::Thread => "thread".into(),
        },
    },
    Setting {
        name: "FH_PROGRESS_INTERVAL",
        scope: Scope::Rank,
        default: "20",
        help: "microseconds the progress thread sleeps between polls",
        set: |c, v| {
            c.progress_interval_us = parse_count(v, 0, 1_000_000)? as u64;
            Ok(())
        },
        show: |c| c.progress_interval_us.to_string(),
    },
    Setting {
        name: "FH_HEAP_SIZE",
        scope: Scope::Job,
        default: "32M",
        help: "bytes of library heap per rank (fh_malloc, library objects); always registered",
        set: |c, v| {
            c.heap_size = parse_size(v)?;
            if c.heap_size < 4096 {
                bail!(InvalidArg, "must be at least 4K");
            }
            Ok(())
        },
        show: |c| show_size(c.heap_size),
    },
    Setting {
        name: "FH_AM_MAX_MEDIUM",
        scope: Scope::Job,
        default: "32K",
        help: "largest medium AM payload (each pre-posted receive buffer holds one)",
        set: |c, v| {
            c.am_max_medium = parse_size(v)?;
            if c.am_max_medium < 512 || c.am_max_medium > MAX_AM_MEDIUM_LIMIT {
                bail!(InvalidArg, "must be between 512 and 16M");
            }
            Ok(())
        },
        show: |c| show_size(c.am_max_medium),
    },
    Setting {
        name: "FH_AM_MAX_LONG",
        scope: Scope::Job,
        default: "64M",
        help: "largest long AM payload",
        set: |c, v| {
            c.am_max_long = parse_size(v)?;
            if c.am_max_long < 512 || c.am_max_long > MAX_AM_LONG_LIMIT {
                bail!(InvalidArg, "must be between 512 and 2G-1");
            }
            Ok(())
        },
        show: |c| show_size(c.am_max_long),
    },
    Setting {
        name: "FH_AM_CREDITS",
        scope: Scope::Job,
        default: "auto",
        help: "AM requests a rank may have unhandled at each peer (flow control); auto: 4096/ranks, between 8 and 64",
        set: |c, v| {
            c.am_credits = if v == "auto" { 0 } else { parse_count(v, 1, 4096)? };
            Ok(())
        },
        show: |c| {
            if c.am_credits == 0 {
                "auto".into()
            } else {
                c.am_credits.to_string()
            }
        },
    },
    Setting {
        name: "FH_AM_RECV_BUFFERS",
        scope: Scope::Rank,
        default: "32",
        help: "pre-posted AM receive buffers per context",
        set: |c, v| {
            c.am_recv_buffers = parse_count(v, 2, 65536)?;
            Ok(())
        },
        show: |c| c.am_recv_buffers.to_string(),
    },
    Setting {
        name: "FH_PIN",
        scope: Scope::Rank,
        default: "mlock",
        help: "mlock: registered memory is also locked in RAM; none: conduit registration only",
        set: |c, v| {
            c.pin = match v {
                "mlock" => Pin::Mlock,
                "none" => Pin::None,
                _ => bail!(InvalidArg, "expected mlock or none"),
            };
            Ok(())
        },
        show: |c| match c.pin {
            Pin::Mlock => "mlock".into(),
            Pin::None => "none".into(),
        },
    },
    Setting {
        name: "FH_MPI_THREAD",
        scope: Scope::Rank,
        default: "multiple",
        help: "thread level fh_init_world requests: single, funneled, serialized or multiple",
        set: |c, v| {
            c.mpi_thread = match v {
                "single" => ThreadLevel::Single,
                "funneled" => ThreadLevel::Funneled,
                "serialized" => ThreadLevel::Serialized,
                "multiple" => ThreadLevel::Multiple,
                _ => bail!(InvalidArg, "expected single, funneled, serialized or multiple"),
            };
            Ok(())
        },
        show: |c| {
            match c.mpi_thread {
                ThreadLevel::Single => "single",
                ThreadLevel::Funneled => "funneled",
                ThreadLevel::Serialized => "serialized",
                ThreadLevel::Multiple => "multiple",
            }
            .into()
        },
    },
    Setting {
        name: "FH_VERBOSE",
        scope: Scope::Rank,
        default: "0",
        help: "1: print warnings (degraded modes, refused remote requests) to stderr",
        set: |c, v| {
            c.verbose = parse_bool(v)?;
            Ok(())
        },
        show: |c| (c.verbose as u8).to_string(),
    },
    Setting {
        name: "FH_FIREHOSE_M",
        scope: Scope::Rank,
        default: "auto",
        help: "bytes of this node's memory remote firehoses may pin (M); auto: 7/8 of min(RLIMIT_MEMLOCK, RAM/(2 x ranks on the node))",
        set: |c, v| {
            c.fh_m = parse_auto_size(v)?;
            Ok(())
        },
        show: |c| show_auto(c.fh_m),
    },
    Setting {
        name: "FH_FIREHOSE_MAXVICTIM_M",
        scope: Scope::Rank,
        default: "auto",
        help: "bytes of unreferenced pinned memory kept for reuse (MAXVICTIM); auto: M/7",
        set: |c, v| {
            c.fh_maxvictim = parse_auto_size(v)?;
            Ok(())
        },
        show: |c| show_auto(c.fh_maxvictim),
    },
    Setting {
        name: "FH_FIREHOSE_MODE",
        scope: Scope::Job,
        default: "auto",
        help: "page or region pinning; auto: the conduit decides (MPI: region, sim: page)",
        set: |c, v| {
            c.fh_mode = match v {
                "auto" => None,
                "page" => Some(FhMode::Page),
                "region" => Some(FhMode::Region),
                _ => bail!(InvalidArg, "expected auto, page or region"),
            };
            Ok(())
        },
        show: |c| match c.fh_mode {
            None => "auto".into(),
            Some(FhMode::Page) => "page".into(),
            Some(FhMode::Region) => "region".into(),
        },
    },
    Setting {
        name: "FH_FIREHOSE_MAXREGION_SIZE",
        scope: Scope::Job,
        default: "1M",
        help: "region mode: largest region (a power of two, at least a page)",
        set: |c, v| {
            let n = parse_size(v)?;
            if !n.is_power_of_two() || !(4096..=1 << 30).contains(&n) {
                bail!(InvalidArg, "must be a power of two between 4K and 1G");
            }
            c.fh_maxregion = n;
            Ok(())
        },
        show: |c| show_size(c.fh_maxregion),
    },
    Setting {
        name: "FH_FIREHOSE_MAXREGIONS",
        scope: Scope::Rank,
        default: "auto",
        help: "region mode: regions remote firehoses may hold on this node (R); auto: M / MAXREGION_SIZE, within the conduit's limit",
        set: |c, v| {
            c.fh_maxregions = if v == "auto" { None } else { Some(parse_count(v, 1, 1 << 24)?) };
            Ok(())
        },
        show: |c| c.fh_maxregions.map_or("auto".into(), |n| n.to_string()),
    },
    Setting {
        name: "FH_FIREHOSE_MAXVICTIM_R",
        scope: Scope::Rank,
        default: "auto",
        help: "region mode: unreferenced regions kept pinned for reuse; auto: R/6 (at least 1)",
        set: |c, v| {
            c.fh_maxvictim_r = if v == "auto" { None } else { Some(parse_count(v, 0, 1 << 24)?) };
            Ok(())
        },
        show: |c| c.fh_maxvictim_r.map_or("auto".into(), |n| n.to_string()),
    },
    Setting {
        name: "FH_FIREHOSE_PUTINMOVE_LIMIT",
        scope: Scope::Job,
        default: "2K",
        help: "a put or get up to this size that misses travels inside the move request and its answer (0: never)",
        set: |c, v| {
            c.fh_putinmove = parse_size(v)?;
            if c.fh_putinmove > 16 << 10 {
                bail!(InvalidArg, "must be at most 16K");
            }
            Ok(())
        },
        show: |c| show_size(c.fh_putinmove),
    },
    Setting {
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
    Setting {
        name: "FH_STATS",
        scope: Scope::Rank,
        default: "0",
        help: "1: print a per-rank firehose/RMA statistics summary at fh_finalize",
        set: |c, v| {
            c.stats = parse_bool(v)?;
            Ok(())
        },
        show: |c| (c.stats as u8).to_string(),
    },
    Setting {
        name: "FH_SHM",
        scope: Scope::Job,
        default: "1",
        help: "1: ranks on one node map each other's library heaps (MPI_Win_allocate_shared) and copy directly; 0: every access goes through MPI RMA",
        set: |c, v| {
            c.shm = parse_bool(v)?;
            Ok(())
        },
        show: |c| (c.shm as u8).to_string(),
    },
    Setting {
        name: "FH_BARRIER",
        scope: Scope::Job,
        default: "dissemination",
        help: "barrier algorithm: dissemination (pairwise exchange, any N), tree (gather-and-broadcast, fan-in 4) or mpi (MPI_Iallreduce)",
        set: |c, v| {
            c.barrier = match v.trim().to_ascii_lowercase().as_str() {
                "dissemination" | "pairwise" => BarrierAlgo::Dissemination,
                "tree" => BarrierAlgo::Tree,
                "mpi" => BarrierAlgo::Mpi,
                other => bail!(
                    InvalidArg,
                    "FH_BARRIER={}: expected dissemination, tree or mpi",
                    other
                ),
            };
            Ok(())
        },
        show: |c| c.barrier.name().into(),
    },
    Setting {
        name: "FH_BCAST_LAMBDA",
        scope: Scope::Job,
        default: "auto",
        help: "postal-model latency (in send overheads, 1..64) the broadcast tree is built for; auto: measured at the first broadcast; 1 gives the binomial tree",
        set: |c, v| {
            c.bcast_lambda = match v.trim() {
                "auto" => None,
                x => match x.parse::<u32>() {
                    Ok(l) if (1..=64).contains(&l) => Some(l),
                    _ => bail!(InvalidArg, "FH_BCAST_LAMBDA={}: expected auto or 1..64", x),
                },
            };
            Ok(())
        },
        show: |c| c.bcast_lambda.map_or("auto".into(), |l| l.to_string()),
    },
    Setting {
        name: "FH_MPI_PROGRESS",
        scope: Scope::Job,
        default: "1",
        help: "1: a rank blocked in a blocking MPI call (MPI_Barrier, MPI_Wait, MPI_Recv, collectives, ...) keeps serving the library (PMPI interposition); 0: MPI calls go straight to MPI",
        set: |c, v| {
            c.serve_blocking = parse_bool(v)?;
            Ok(())
        },
        show: |c| (c.serve_blocking as u8).to_string(),
    },
    Setting {
        name: "FH_STALL_WARN",
        scope: Scope::Rank,
        default: "10",
        help: "seconds a blocking call waits for a peer before it prints one line naming the peer and what is missing (0: never)",
        set: |c, v| {
            c.stall_warn_s = parse_count(v, 0, 86_400)? as u64;
            Ok(())
        },
        show: |c| c.stall_warn_s.to_string(),
    },
    Setting {
        name: "FH_STALL_ABORT",
        scope: Scope::Rank,
        default: "",
        help: "seconds after which a blocking call that waits for a peer gives up with FH_ERR_TRANSPORT; empty: wait for ever",
        set: |c, v| {
            c.stall_abort_s = match v.trim() {
                "" => None,
                x => Some(parse_count(x, 1, 86_400)? as u64),
            };
            Ok(())
        },
        show: |c| c.stall_abort_s.map_or(String::new(), |s| s.to_string()),
    },
    Setting {
        name: "FH_CMA",
        scope: Scope::Job,
        default: "1",
        help: "1: put/get to a node peer's memory outside the library heap use the kernel's single copy (process_vm_writev/readv) where the kernel permits it; 0: firehose and MPI RMA",
        set: |c, v| {
            c.cma = parse_bool(v)?;
            Ok(())
        },
        show: |c| (c.cma as u8).to_string(),
    },
    Setting {
        name: "FH_DEBUG_TABLES",
        scope: Scope::Rank,
        default: "0",
        help: "1: print firehose table diagnostics to stderr when a request gives up or a peer exceeds its firehoses",
        set: |c, v| {
            c.debug_tables = parse_bool(v)?;
            Ok(())
        },
        show: |c| (c.debug_tables as u8).to_string(),
    },
];

/// `FH_BARRIER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierAlgo {
    Dissemination,
    Tree,
    Mpi,
}

impl BarrierAlgo {
    pub fn name(self) -> &'static str {
        match self {
            BarrierAlgo::Dissemination => "dissemination",
            BarrierAlgo::Tree => "tree",
            BarrierAlgo::Mpi => "mpi",
        }
    }
}

/// Index of a setting by name.
pub fn setting_index(name: &str) -> Option<usize> {
    SETTINGS.iter().position(|s| s.name == name)
}

impl Config {
    /// Defaults only.
    pub fn defaults() -> Config {
        let mut c = Config {
            progress: Progress::Poll,
            progress_interval_us: 0,
            heap_size: 0,
            am_max_medium: 0,
            am_max_long: 0,
            am_credits: 0,
            am_recv_buffers: 0,
            pin: Pin::Mlock,
            mpi_thread: ThreadLevel::Multiple,
            verbose: false,
            fh_m: None,
            fh_maxvictim: None,
            fh_mode: None,
            fh_maxregion: 0,
            fh_maxregions: None,
            fh_maxvictim_r: None,
            fh_putinmove: 0,
            registration: Strategy::Firehose,
            stats: false,
            shm: true,
            barrier: BarrierAlgo::Dissemination,
            bcast_lambda: None,
            serve_blocking: true,
            stall_warn_s: 0,
            stall_abort_s: None,
            cma: true,
            debug_tables: false,
            sources: vec![Source::Default; SETTINGS.len()],
        };
        for s in SETTINGS {
            (s.set)(&mut c, s.default).expect("settings table default must parse");
        }
        c
    }

    /// Defaults, then `overrides` (name, value) from the caller's struct, then `env`.
    pub fn resolve(
        overrides: &[(&'static str, String)],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let mut c = Config::defaults();
        for (name, value) in overrides {
            let i = setting_index(name)
                .ok_or_else(|| err!(Internal, "unknown setting {} in overrides", name))?;
            (SETTINGS[i].set)(&mut c, value).map_err(|e| {
                err!(
                    InvalidArg,
                    "fh_config_t field for {}={:?}: {}",
                    name,
                    value,
                    e.msg
                )
            })?;
            c.sources[i] = Source::Struct;
        }
        for (i, s) in SETTINGS.iter().enumerate() {
            if let Some(v) = env(s.name) {
                let v = v.trim().to_string();
                if v.is_empty() {
                    // One rule for every variable: set but empty means the default.
                    continue;
                }
                (s.set)(&mut c, &v).map_err(|e| {
                    err!(
                        InvalidArg,
                        "environment variable {}={:?}: {}",
                        s.name,
                        v,
                        e.msg
                    )
                })?;
                c.sources[i] = Source::Env;
            }
        }
        c.check()?;
        Ok(c)
    }

    /// Resolve from the process environment.
    pub fn from_env(overrides: &[(&'static str, String)]) -> Result<Config> {
        Config::resolve(overrides, |n| std::env::var(n).ok())
    }

    fn check(&self) -> Result<()> {
        if self.am_max_long < self.am_max_medium {
            bail!(
                InvalidArg,
                "FH_AM_MAX_LONG ({}) must be at least FH_AM_MAX_MEDIUM ({})",
                self.am_max_long,
                self.am_max_medium
            );
        }
        Ok(())
    }

    /// Request credits per peer for a job of `ranks` ranks: the setting, or with
    /// `auto` 4096/ranks clamped to 8..=64 — a deep window for small jobs (streams do
    /// not stall on a busy target) while the frames one rank can be sent stay bounded
    /// (ranks x credits) at scale.
    pub fn credits_for(&self, ranks: usize) -> usize {
        if self.am_credits > 0 {
            self.am_credits
        } else {
            (4096 / ranks.max(1)).clamp(8, 64)
        }
    }

    /// The value of setting `i` as text.
    pub fn show(&self, i: usize) -> String {
        (SETTINGS[i].show)(self)
    }

    /// Every setting, its value, its source and its scope, one per line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, s) in SETTINGS.iter().enumerate() {
            out.push_str(&format!(
                "  {:<27} = {:<10} ({}; {})  {}\n",
                s.name,
                self.show(i),
                self.sources[i].label(),
                s.scope.label(),
                s.help
            ));
        }
        out
    }

    /// `(setting index, hash of its value)` for every job-wide setting: what
    /// `fh_init` compares across ranks.
    pub fn agreement(&self) -> Vec<(usize, u64)> {
        SETTINGS
            .iter()
            .enumerate()
            .filter(|(_, s)| s.scope == Scope::Job)
            .map(|(i, _)| (i, fnv1a(self.show(i).as_bytes())))
            .collect()
    }
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Environment variables named `FH_*` that are not settings, each with the closest
/// setting name when one is near (a typo), for the `FH_VERBOSE` report.
pub fn unknown_env(vars: impl Iterator<Item = String>) -> Vec<(String, Option<&'static str>)> {
    vars.filter(|n| n.starts_with("FH_") && setting_index(n).is_none())
        .map(|n| {
            let best = SETTINGS
                .iter()
                .map(|s| (edit_distance(&n, s.name), s.name))
                .min()
                .filter(|&(d, _)| d <= 3)
                .map(|(_, name)| name);
            (n, best)
        })
        .collect()
}

/// Levenshtein distance (settings names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Largest size any setting accepts (1 PiB): a larger value is a mistake, and
/// arithmetic on it (rounding up to pages, adding headers) could overflow.
pub const MAX_SIZE: usize = 1 << 50;

/// Parse a byte size: a decimal integer with an optional K, M, G or T suffix (powers of
/// 1024), optionally followed by `B` or `iB`; case-insensitive. At most [`MAX_SIZE`].
pub fn parse_size(v: &str) -> Result<usize> {
    let s = v.trim();
    let lower = s.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let digits = digits.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        bail!(InvalidArg, "not a size (use e.g. 4096, 64K, 32M, 2G)");
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| err!(InvalidArg, "size out of range"))?;
    let bytes = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err!(InvalidArg, "size out of range"))?;
    usize::try_from(bytes)
        .ok()
        .filter(|&b| b <= MAX_SIZE)
        .ok_or_else(|| err!(InvalidArg, "size out of range (at most 1P)"))
}

fn parse_auto_size(v: &str) -> Result<Option<usize>> {
    if v.trim() == "auto" {
        Ok(None)
    } else {
        parse_size(v).map(Some)
    }
}

fn show_auto(v: Option<usize>) -> String {
    v.map_or("auto".into(), show_size)
}

fn parse_count(v: &str, min: usize, max: usize) -> Result<usize> {
    let n: usize = v
        .trim()
        .parse()
        .map_err(|_| err!(InvalidArg, "not a whole number"))?;
    if n < min || n > max {
        bail!(InvalidArg, "must be between {} and {}", min, max);
    }
    Ok(n)
}

fn parse_bool(v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Ok(true),
        "0" | "no" | "false" | "off" => Ok(false),
        _ => bail!(InvalidArg, "expected 0 or 1"),
    }
}

/// Render a size with the largest exact binary suffix.
pub fn show_size(n: usize) -> String {
    for (shift, suf) in [(30, "G"), (20, "M"), (10, "K")] {
        if n >= (1 << shift) && n % (1 << shift) == 0 {
            return format!("{}{}", n >> shift, suf);
        }
    }
    n.to_string()
}

/// `FH_DEBUG_TABLES=1`: print firehose table diagnostics to stderr when a request
/// gives up or a peer exceeds its firehoses (read once; `fh_init` rejects a value
/// that is not a boolean).
pub fn debug_tables() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("FH_DEBUG_TABLES").is_ok_and(|v| parse_bool(&v).unwrap_or(false))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::error::Status;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("32M").unwrap(), 32 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size(" 1T ").unwrap(), 1 << 40);
        for bad in ["", "M", "12Q", "-1", "1.5G", "99999999999999999999"] {
            assert_eq!(
                parse_size(bad).unwrap_err().status,
                Status::InvalidArg,
                "{bad}"
            );
        }
        assert_eq!(show_size(32 << 20), "32M");
        assert_eq!(show_size(1000), "1000");
    }

    #[test]
    fn defaults_parse_and_layers_apply_in_order() {
        let d = Config::defaults();
        assert_eq!(d.progress, Progress::Poll);
        assert_eq!(
            (d.credits_for(2), d.credits_for(128), d.credits_for(100_000)),
            (64, 32, 8)
        );
        assert!(d.sources.iter().all(|s| *s == Source::Default));

        let over = [
            ("FH_HEAP_SIZE", "8M".to_string()),
            ("FH_AM_CREDITS", "4".to_string()),
        ];
        let c =
            Config::resolve(&over, |n| (n == "FH_AM_CREDITS").then(|| "7".to_string())).unwrap();
        assert_eq!(c.heap_size, 8 << 20);
        assert_eq!(
            c.sources[setting_index("FH_HEAP_SIZE").unwrap()],
            Source::Struct
        );
        assert_eq!(c.am_credits, 7, "environment wins over the struct");
        assert_eq!(
            c.sources[setting_index("FH_AM_CREDITS").unwrap()],
            Source::Env
        );
        assert!(c.render().contains(
            "FH_AM_CREDITS               = 7          (environment; same on every rank)"
        ));
    }

    #[test]
    fn an_empty_variable_means_the_default_for_every_setting() {
        let d = Config::defaults();
        for (i, s) in SETTINGS.iter().enumerate() {
            let c = Config::resolve(&[], |n| (n == s.name).then(String::new)).unwrap();
            assert_eq!(c.show(i), d.show(i), "{}", s.name);
            assert_eq!(c.sources[i], Source::Default, "{}", s.name);
        }
    }

    #[test]
    fn sizes_beyond_the_limit_are_refused_not_wrapped() {
        for v in ["18446744073709551615", "2P", "1048577G"] {
            let e = Config::resolve(&[], |n| (n == "FH_HEAP_SIZE").then(|| v.into())).unwrap_err();
            assert!(e.msg.contains("FH_HEAP_SIZE"), "{}", e.msg);
        }
        let over = [("FH_HEAP_SIZE", usize::MAX.to_string())];
        let e = Config::resolve(&over, |_| None).unwrap_err();
        assert!(
            e.msg.contains("FH_HEAP_SIZE") && e.msg.contains("fh_config_t"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn unknown_variables_get_a_suggestion() {
        let v = unknown_env(
            [
                "FH_FIREHOSE_MM",
                "FH_SHM",
                "FH_NOTHING_LIKE_IT_AT_ALL",
                "PATH",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        assert_eq!(
            v,
            vec![
                ("FH_FIREHOSE_MM".to_string(), Some("FH_FIREHOSE_M")),
                ("FH_NOTHING_LIKE_IT_AT_ALL".to_string(), None)
            ]
        );
    }

    #[test]
    fn agreement_covers_job_settings_only() {
        let d = Config::defaults();
        let a = d.agreement();
        assert!(a.iter().all(|&(i, _)| SETTINGS[i].scope == Scope::Job));
        let heap = setting_index("FH_HEAP_SIZE").unwrap();
        let c = Config::resolve(&[], |n| (n == "FH_HEAP_SIZE").then(|| "4M".into())).unwrap();
        let h = |c: &Config| {
            c.agreement()
                .into_iter()
                .find(|&(i, _)| i == heap)
                .unwrap()
                .1
        };
        assert_ne!(h(&d), h(&c));
        let v = Config::resolve(&[], |n| (n == "FH_VERBOSE").then(|| "1".into())).unwrap();
        assert_eq!(
            d.agreement(),
            v.agreement(),
            "FH_VERBOSE may differ per rank"
        );
    }

    #[test]
    fn bad_environment_values_name_the_variable() {
        let e =
            Config::resolve(&[], |n| (n == "FH_PROGRESS").then(|| "sometimes".into())).unwrap_err();
        assert_eq!(e.status, Status::InvalidArg);
        assert!(e.msg.contains("FH_PROGRESS"), "{}", e.msg);
        let e = Config::resolve(&[], |n| (n == "FH_HEAP_SIZE").then(|| "lots".into())).unwrap_err();
        assert!(e.msg.contains("FH_HEAP_SIZE"), "{}", e.msg);
        let e = Config::resolve(&[], |n| (n == "FH_AM_MAX_LONG").then(|| "1K".into())).unwrap_err();
        assert!(e.msg.contains("FH_AM_MAX_LONG"), "{}", e.msg);
    }
}
