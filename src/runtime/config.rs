//! The settings table: every tunable of the library in one place.
//!
//! Guarantees: each setting has a name (`FH_*`, GASNet-style), a default, a help
//! line and one parser. Values are layered: default, then the caller's
//! `fh_config_t`, then the environment (the environment wins). Each resolved value
//! remembers where it came from so `fh_config_print` can say so. A value that does
//! not parse is an `FH_ERR_INVALID_ARG` naming the variable, never a silent default.

use crate::runtime::error::Result;
use crate::runtime::wait::Sleep;

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
    pub stats: bool,
    /// Map the library heaps of ranks on this node into each other (direct copies).
    pub shm: bool,
    /// At most this many ranks share one node mapping (`FH_SHM_MAX_RANKS`; 0: all).
    pub shm_max_ranks: usize,
    /// Serve the library while the application blocks in MPI (`FH_MPI_PROGRESS`).
    pub serve_blocking: bool,
    /// Seconds a blocking wait lasts before it says why on stderr (0: never).
    pub stall_warn_s: u64,
    /// Seconds after which a blocking wait gives up with FH_ERR_TRANSPORT (None: wait).
    pub stall_abort_s: Option<u64>,
    /// Whether blocking calls may end their wait asleep on a futex (`FH_WAIT_SLEEP`).
    pub wait_sleep: Sleep,
    /// Kernel single-copy (process_vm_readv/writev) to node peers, where permitted.
    pub cma: bool,
    /// Firehose table diagnostics on stderr (`FH_DEBUG_TABLES`).
    pub debug_tables: bool,
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

/// One row of a settings table: a setting of the group `C` (see [`Group`]).
pub struct Setting<C: 'static> {
    pub name: &'static str,
    pub scope: Scope,
    pub default: &'static str,
    pub help: &'static str,
    /// The one parser of this variable.
    pub set: fn(&mut C, &str) -> Result<()>,
    /// The value as text (what `fh_config_print` shows and the agreement hashes).
    pub show: fn(&C) -> String,
}

/// Largest medium AM payload we accept as a setting (one posted buffer each).
pub const MAX_AM_MEDIUM_LIMIT: usize = 1 << 24;
/// MPI counts are `int`: a long payload travels as one message.
pub const MAX_AM_LONG_LIMIT: usize = i32::MAX as usize;

/// The runtime's own settings (transport, heap, AMs, progress, diagnostics).
pub static SETTINGS: &[Setting<Config>] = &[
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
        help: "bytes of library heap per rank (fh_malloc, library objects); always registered; fh_malloc grows it by registered segments of at least this size",
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
        name: "FH_SHM_MAX_RANKS",
        scope: Scope::Job,
        default: "0",
        help: "at most this many ranks of a node share one node-shared mapping (consecutive node ranks; 0: the whole node), as GASNet's supernode limit: one machine then runs as several nodes, with the node barrier and collectives crossing between them through MPI",
        set: |c, v| {
            c.shm_max_ranks = v.trim().parse().map_err(|_| {
                crate::err!(InvalidArg, "FH_SHM_MAX_RANKS={}: expected a rank count (0: no limit)", v)
            })?;
            Ok(())
        },
        show: |c| c.shm_max_ranks.to_string(),
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
        name: "FH_WAIT_SLEEP",
        scope: Scope::Job,
        default: "auto",
        help: "whether a blocking wait that outlasts its spin and yield stages sleeps on a futex in the node-shared mapping until a node peer's write wakes it (at most 5 ms): auto (only while no MPI one-sided operation can need this rank: one node, no registered or firehose-pinned memory), 1 (always), 0 (never: keep yielding and polling)",
        set: |c, v| {
            c.wait_sleep = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => Sleep::Auto,
                x => match parse_bool(x) {
                    Ok(true) => Sleep::On,
                    Ok(false) => Sleep::Off,
                    Err(_) => bail!(InvalidArg, "FH_WAIT_SLEEP={}: expected auto, 1 or 0", v),
                },
            };
            Ok(())
        },
        show: |c| c.wait_sleep.name().into(),
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

/// A group of settings one layer owns: its struct, its rows and its defaults. The
/// runtime's own group is [`Config`]; Firehose (`firehose::settings`) and the sync
/// subsystem (`api::sync::settings`) own theirs, and the API composes them
/// (`api::settings::Settings`). A group's rows are the only place its variables
/// are parsed.
pub trait Group: Sized + 'static {
    /// Every setting of the group, in `fh_config_print` order.
    const ROWS: &'static [Setting<Self>];

    /// The struct before any row's default is applied.
    fn blank() -> Self;

    /// Defaults only.
    fn defaults() -> Self {
        let mut c = Self::blank();
        for s in Self::ROWS {
            (s.set)(&mut c, s.default).expect("settings table default must parse");
        }
        c
    }

    /// Cross-setting rules checked once every value is in (e.g. one limit above
    /// another).
    fn check(&self) -> Result<()> {
        Ok(())
    }
}

/// A group seen row by row, whatever its struct: what the layered resolution, the
/// rendering and the agreement iterate over.
pub trait Rows {
    fn count(&self) -> usize;
    fn name(&self, i: usize) -> &'static str;
    fn scope(&self, i: usize) -> Scope;
    fn help(&self, i: usize) -> &'static str;
    fn set(&mut self, i: usize, v: &str) -> Result<()>;
    fn show(&self, i: usize) -> String;
    fn check(&self) -> Result<()>;
}

impl<C: Group> Rows for C {
    fn count(&self) -> usize {
        C::ROWS.len()
    }
    fn name(&self, i: usize) -> &'static str {
        C::ROWS[i].name
    }
    fn scope(&self, i: usize) -> Scope {
        C::ROWS[i].scope
    }
    fn help(&self, i: usize) -> &'static str {
        C::ROWS[i].help
    }
    fn set(&mut self, i: usize, v: &str) -> Result<()> {
        (C::ROWS[i].set)(self, v)
    }
    fn show(&self, i: usize) -> String {
        (C::ROWS[i].show)(self)
    }
    fn check(&self) -> Result<()> {
        Group::check(self)
    }
}

/// Several groups read as one table: a flat index runs over the groups in order.
/// Guarantees: the layers apply in order (default, then the caller's struct, then
/// the environment) and `sources[i]` says which one set row `i`.
/// `R` is `&dyn Rows` to read, `&mut dyn Rows` to resolve.
pub struct Layered<R> {
    pub groups: Vec<R>,
}

impl<'a, R: std::ops::Deref<Target = dyn Rows + 'a>> Layered<R> {
    /// (group, row) of flat index `i`.
    fn locate(&self, mut i: usize) -> (usize, usize) {
        for (g, rows) in self.groups.iter().enumerate() {
            if i < rows.count() {
                return (g, i);
            }
            i -= rows.count();
        }
        unreachable!("setting index out of range")
    }

    /// Flat index of the setting called `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        (0..self.len()).find(|&i| self.name(i) == name)
    }

    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.count()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn name(&self, i: usize) -> &'static str {
        let (g, r) = self.locate(i);
        self.groups[g].name(r)
    }

    pub fn show(&self, i: usize) -> String {
        let (g, r) = self.locate(i);
        self.groups[g].show(r)
    }

    pub fn scope(&self, i: usize) -> Scope {
        let (g, r) = self.locate(i);
        self.groups[g].scope(r)
    }

    pub fn help(&self, i: usize) -> &'static str {
        let (g, r) = self.locate(i);
        self.groups[g].help(r)
    }

    /// Every setting, its value, its source and its scope, one per line.
    // `i` indexes settings (self.locate/name); `sources` is parallel to them.
    #[allow(clippy::needless_range_loop)]
    pub fn render(&self, sources: &[Source]) -> String {
        let mut out = String::new();
        for i in 0..self.len() {
            let (g, r) = self.locate(i);
            let rows = &self.groups[g];
            out.push_str(&format!(
                "  {:<27} = {:<10} ({}; {})  {}\n",
                rows.name(r),
                rows.show(r),
                sources[i].label(),
                rows.scope(r).label(),
                rows.help(r)
            ));
        }
        out
    }

    /// `(setting index, hash of its value)` for every job-wide setting: what
    /// `fh_init` compares across ranks.
    pub fn agreement(&self) -> Vec<(usize, u64)> {
        (0..self.len())
            .filter(|&i| self.scope(i) == Scope::Job)
            .map(|i| (i, fnv1a(self.show(i).as_bytes())))
            .collect()
    }
}

impl<'a, R: std::ops::DerefMut<Target = dyn Rows + 'a>> Layered<R> {
    /// Apply `overrides` (name, value) from the caller's struct, then `env`, over
    /// defaults already in place; then each group's cross-setting check.
    // `i` indexes settings (self.locate/name); `sources` is parallel to them.
    #[allow(clippy::needless_range_loop)]
    pub fn resolve(
        &mut self,
        sources: &mut [Source],
        overrides: &[(&'static str, String)],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<()> {
        for (name, value) in overrides {
            let i = self
                .index(name)
                .ok_or_else(|| err!(Internal, "unknown setting {} in overrides", name))?;
            let (g, r) = self.locate(i);
            self.groups[g].set(r, value).map_err(|e| {
                err!(
                    InvalidArg,
                    "fh_config_t field for {}={:?}: {}",
                    name,
                    value,
                    e.msg
                )
            })?;
            sources[i] = Source::Struct;
        }
        for i in 0..self.len() {
            let name = self.name(i);
            let Some(v) = env(name) else { continue };
            let v = v.trim().to_string();
            if v.is_empty() {
                // One rule for every variable: set but empty means the default.
                continue;
            }
            let (g, r) = self.locate(i);
            self.groups[g].set(r, &v).map_err(|e| {
                err!(
                    InvalidArg,
                    "environment variable {}={:?}: {}",
                    name,
                    v,
                    e.msg
                )
            })?;
            sources[i] = Source::Env;
        }
        self.groups.iter().try_for_each(|g| g.check())
    }
}

/// What the transport needs of a rank's resolved settings at start-up: the
/// runtime's own group, and the job-wide values every rank must agree on.
pub trait Resolved: Sized {
    fn core(&self) -> &Config;
    /// `(setting index, hash)` of every job-wide setting (see [`Layered::agreement`]).
    fn agreement(&self) -> Vec<(usize, u64)>;
    /// How many job-wide settings there are (the same on every rank of one build).
    fn agreed_count() -> usize;
    /// The name of setting `i`.
    fn name(i: usize) -> &'static str;
    /// The value of setting `i` as text.
    fn value(&self, i: usize) -> String;
}

impl Group for Config {
    const ROWS: &'static [Setting<Config>] = SETTINGS;

    fn blank() -> Config {
        Config {
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
            stats: false,
            shm: true,
            shm_max_ranks: 0,
            serve_blocking: true,
            stall_warn_s: 0,
            stall_abort_s: None,
            wait_sleep: Sleep::Auto,
            cma: true,
            debug_tables: false,
        }
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
}

impl Config {
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
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Environment variables named `FH_*` that are not settings, each with the closest
/// setting name when one is near (a typo), for the `FH_VERBOSE` report.
pub fn unknown_env(
    names: &[&'static str],
    vars: impl Iterator<Item = String>,
) -> Vec<(String, Option<&'static str>)> {
    vars.filter(|n| n.starts_with("FH_") && !names.contains(&n.as_str()))
        .map(|n| {
            let best = names
                .iter()
                .map(|&s| (edit_distance(&n, s), s))
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

pub fn parse_auto_size(v: &str) -> Result<Option<usize>> {
    if v.trim() == "auto" {
        Ok(None)
    } else {
        parse_size(v).map(Some)
    }
}

pub fn show_auto(v: Option<usize>) -> String {
    v.map_or("auto".into(), show_size)
}

pub fn parse_count(v: &str, min: usize, max: usize) -> Result<usize> {
    let n: usize = v
        .trim()
        .parse()
        .map_err(|_| err!(InvalidArg, "not a whole number"))?;
    if n < min || n > max {
        bail!(InvalidArg, "must be between {} and {}", min, max);
    }
    Ok(n)
}

pub fn parse_bool(v: &str) -> Result<bool> {
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
    fn unknown_variables_get_a_suggestion() {
        let names = ["FH_FIREHOSE_M", "FH_SHM"];
        let v = unknown_env(
            &names,
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
}
