//! The public context: creating one (launching the conduit, agreeing the firehose
//! parameters, composing the subsystems), its progress thread, and the collective
//! teardown. This is where the subsystems are named: the context's core
//! ([`super::ctx`]) and the AM engine iterate over what is registered here.

use super::am::AmState;
use super::ctx::{CtxInner, State, Subsystem};
use super::heap::Heap;
use super::rma::RmaState;
use super::settings::Settings;
use super::stats::Stats;
use super::wire;
use crate::bail;
use crate::conduit::sim::SimWorld;
use crate::conduit::{Conduit, Launch};
use crate::firehose::params::Params;
use crate::firehose::registry::{LocalRegions, RemoteCache};
use crate::firehose::settings::FhMode;
use crate::firehose::state::{FhState, Invalidations};
use crate::runtime::config::Progress;
use crate::runtime::error::Result;
use crate::runtime::wait::Sleep;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Every subsystem of the API, in the order their progress hooks run.
static SUBSYSTEMS: &[&Subsystem] = &[
    &super::moves::SUBSYSTEM,
    &super::rma::SUBSYSTEM,
    &super::sync::SUBSYSTEM,
    &super::mem::SUBSYSTEM,
    &super::rpipe::open::SUBSYSTEM,
];

/// A hash of this machine's host name.
fn host_hash() -> u64 {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    crate::runtime::config::fnv1a(&buf[..n])
}

/// `FH_VERBOSE`: name `FH_*` variables that are not settings (a typo such as
/// `FH_FIREHOSE_MM` would otherwise be ignored without a word), once per process.
fn report_unknown_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let names = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        for (name, near) in Settings::unknown_env(names) {
            match near {
                Some(s) => eprintln!(
                    "firehose: {} in the environment is not a firehose setting (did you mean {}?)",
                    name, s
                ),
                None => eprintln!(
                    "firehose: {} in the environment is not a firehose setting (fh_config_print lists them)",
                    name
                ),
            }
        }
    });
}

/// Firehose's parameters as the whole job uses them (collective): each rank derives
/// its own from its settings and machine (ranks sharing a host share its RAM), then
/// all take the smallest unit and f ([`Params::agree`]).
fn agree_params(c: &dyn Conduit, cfg: &Settings, host: u64) -> Result<Params> {
    let caps = c.caps();
    let local_ranks = c
        .allgather_u64(host)?
        .iter()
        .filter(|&&h| h == host)
        .count();
    let p = Params::derive(
        &cfg.firehose,
        c.size(),
        local_ranks,
        default_mode(caps),
        caps.max_registrations,
    );
    // One word: log2(unit) in the top 6 bits, f (saturated) below.
    const F_MASK: u64 = (1 << 58) - 1;
    let word = (p.unit_bytes.trailing_zeros() as u64) << 58 | (p.f as u64).min(F_MASK);
    let all: Vec<(usize, usize)> = c
        .allgather_u64(word)?
        .into_iter()
        .map(|w| {
            let f = w & F_MASK;
            let f = if f == F_MASK {
                p.f.max(F_MASK as usize)
            } else {
                f as usize
            };
            (1usize << (w >> 58), f)
        })
        .collect();
    Ok(p.agree(
        &all,
        &cfg.firehose,
        local_ranks,
        default_mode(caps),
        caps.max_registrations,
    ))
}

/// A context plus its progress thread.
pub struct Context {
    pub inner: Arc<CtxInner>,
    progress: Mutex<Option<(Arc<AtomicBool>, JoinHandle<()>)>>,
}

impl std::ops::Deref for Context {
    type Target = CtxInner;
    fn deref(&self) -> &CtxInner {
        &self.inner
    }
}

/// Firehose's pin granularity when the user chose none: what the transport registers
/// cheaply (seed 000 §3.3).
fn default_mode(caps: &crate::conduit::Caps) -> FhMode {
    if caps.registers_regions {
        FhMode::Region
    } else {
        FhMode::Page
    }
}

fn max_frame(cfg: &Settings) -> usize {
    wire::HEADER + 8 * wire::MAX_ARGS + cfg.am_max_medium
}

impl Context {
    /// Create a context (collective over its ranks): the conduit is launched as
    /// `how` says; `cfg` is this rank's resolution of its settings, and every rank
    /// learns whether some rank's failed or the job-wide ones differ before anything
    /// is created (`conduit::launch`).
    pub fn new(how: Launch, cfg: Result<Settings>) -> Result<Context> {
        let (c, cfg) = crate::conduit::launch(how, cfg, max_frame)?;
        if cfg.verbose {
            report_unknown_env();
        }
        let mut info = c.describe();
        let want_thread = cfg.progress == Progress::Thread;
        let can_thread = c.caps().thread_multiple;
        if want_thread && !can_thread {
            // Asked for and refused: say so once per job (every rank with
            // FH_VERBOSE=1), not only in fh_config_print.
            if c.rank() == 0 || cfg.verbose {
                eprintln!(
                    "firehose[{}]: FH_PROGRESS=thread needs MPI_THREAD_MULTIPLE (MPI_Init_thread); \
                     MPI gave less, so there is no progress thread: ranks progress only inside \
                     library calls and interposed blocking MPI calls",
                    c.rank()
                );
            }
            info.push(
                "progress thread: DISABLED (FH_PROGRESS=thread needs MPI_THREAD_MULTIPLE); \
                 polling only"
                    .into(),
            );
        }
        // Ranks on this machine share its RAM (firehose's default M divides it).
        let params = match agree_params(&*c, &cfg, host_hash()) {
            Ok(p) => p,
            Err(e) => {
                let _ = c.finalize();
                return Err(e);
            }
        };
        let (leaders, here) = match node_leaders(&*c) {
            Ok(l) => l,
            Err(e) => {
                let _ = c.finalize();
                return Err(e);
            }
        };
        let inner = build(c, cfg, info, params, (leaders, here));
        super::wait::register(&inner);
        super::progress::register(&inner);
        inner.info.lock().push(if super::progress::wanted_for(&inner) {
            "progress inside blocking MPI calls: on (MPI_Barrier, MPI_Wait*, MPI_Recv, collectives, ... serve the library)".into()
        } else {
            "progress inside blocking MPI calls: off (FH_MPI_PROGRESS=0)".into()
        });
        let ctx = Context {
            inner,
            progress: Mutex::new(None),
        };
        if want_thread && can_thread {
            ctx.start_progress_thread();
        } else if !want_thread {
            ctx.info
                .lock()
                .push("progress thread: off (FH_PROGRESS=poll)".into());
        }
        Ok(ctx)
    }

    /// Create the context of virtual node `rank` of a sim world.
    pub fn new_sim(world: &Arc<SimWorld>, rank: usize, cfg: Settings) -> Result<Context> {
        if rank >= world.size() {
            bail!(
                BadRank,
                "sim rank {} out of range (world of {})",
                rank,
                world.size()
            );
        }
        let c = world.conduit(rank, max_frame(&cfg));
        let caps = c.caps();
        let params = Params::derive(
            &cfg.firehose,
            world.size(),
            world.size(),
            default_mode(caps),
            caps.max_registrations,
        );
        let inner = build(
            c.clone(),
            cfg,
            vec![format!("conduit: sim ({} nodes)", world.size())],
            params,
            (vec![0; world.size()], world.size()),
        );
        super::wait::register(&inner);
        let weak = Arc::downgrade(&inner);
        let hook: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(ctx) = weak.upgrade() {
                let _ = ctx.progress_once();
            }
        });
        c.set_poll_hook(Arc::downgrade(&hook));
        *inner.sim_hook.lock() = Some(hook);
        let ctx = Context {
            inner,
            progress: Mutex::new(None),
        };
        if ctx.cfg.progress == Progress::Thread {
            ctx.start_progress_thread();
        }
        Ok(ctx)
    }

    fn start_progress_thread(&self) {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let inner = self.inner.clone();
        let interval = std::time::Duration::from_micros(self.cfg.progress_interval_us);
        let spawned = std::thread::Builder::new()
            .name(format!("firehose-progress-{}", self.rank))
            .spawn(move || {
                let _in = super::progress::Inside::enter();
                while !s2.load(Ordering::Acquire) {
                    let n = inner.progress_once().unwrap_or(0);
                    if n == 0 {
                        if interval.is_zero() {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(interval);
                        }
                    }
                }
            });
        match spawned {
            Ok(h) => {
                *self.progress.lock() = Some((stop, h));
                self.info.lock().push(format!(
                    "progress thread: on (polls every {} us when idle)",
                    self.cfg.progress_interval_us
                ));
            }
            Err(e) => self.info.lock().push(format!(
                "progress thread: failed to start ({}); polling only",
                e
            )),
        }
    }

    /// Collective teardown. Never finalizes an MPI the library did not initialise.
    pub fn finalize(&self) -> Result<()> {
        super::am::check_not_in_handler("fh_finalize")?;
        let inner = &self.inner;
        if inner
            .state
            .compare_exchange(
                State::Live as u8,
                State::Finalizing as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            bail!(State, "context is already finalized");
        }
        // Peers waiting for a call of ours (a barrier, a collective, an rpipe message,
        // a lock hand-over) stop waiting: we make no more.
        inner.set_life(super::sync::area::Life::Finalizing);
        super::progress::unregister(inner);
        if let Some((stop, h)) = self.progress.lock().take() {
            stop.store(true, Ordering::Release);
            let _ = h.join();
        }
        let mut first: Result<()> = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                if let Err(e) = r {
                    first = Err(e);
                }
            }
        };
        note(inner.rma.complete_everything(inner));
        // Quiesce: keep serving AMs until every rank has arrived (said after
        // FH_STALL_WARN; with FH_STALL_ABORT the context ends here without the
        // collective teardown, whose MPI objects are then left to MPI_Finalize).
        note(inner.conduit.barrier_start());
        let what = super::stall::Wait::new(
            "fh_finalize",
            None,
            "the fh_finalize of every rank (a rank that is still working, or waits for this one in a call that does not end)",
        );
        let mut watch = super::stall::Watch::new(inner, what);
        loop {
            let _ = inner.progress_once();
            match inner.conduit.barrier_test() {
                Ok(true) => break,
                Ok(false) => inner.conduit.idle(),
                Err(e) => {
                    note(Err(e));
                    break;
                }
            }
            if let Err(e) = watch.round() {
                inner.state.store(State::Finalized as u8, Ordering::Release);
                inner.conduit.abandon();
                return Err(e);
            }
        }
        // Every rank is here; AMs (and the replies their handlers send) may still be
        // in flight: serve them until none is.
        if let Err(e) = inner.am_quiesce(&mut watch) {
            if e.status == crate::runtime::error::Status::Transport {
                inner.state.store(State::Finalized as u8, Ordering::Release);
                inner.conduit.abandon();
                return Err(e);
            }
            note(Err(e));
        }
        if inner.cfg.stats {
            eprint!("{}", inner.stats_summary());
        }
        for s in inner.subsystems {
            if let Some(hook) = s.shutdown {
                hook(inner);
            }
        }
        for (start, r) in inner.local_regs.drain() {
            let _ = inner.conduit.deregister(start, r.end - start);
            if r.locked {
                let (s, l) = crate::runtime::os::page_span(start, r.end - start);
                crate::runtime::os::munlock(s, l);
            }
        }
        note(inner.conduit.finalize());
        *inner.sim_hook.lock() = None;
        inner.state.store(State::Finalized as u8, Ordering::Release);
        first
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Some((stop, h)) = self.progress.lock().take() {
            stop.store(true, Ordering::Release);
            let _ = h.join();
        }
    }
}

/// Every subsystem's AM handlers.
fn handlers() -> Vec<(super::am::LibHandler, super::ctx::LibHandlerFn)> {
    SUBSYSTEMS
        .iter()
        .flat_map(|s| s.handlers.iter().copied())
        .collect()
}

/// Every rank's node, named by its leader (its lowest rank): the ranks whose heaps
/// this rank maps ([`Conduit::node_view`]) form its node (collective).
/// Also how many ranks run on this machine (the waiting policy's "crowded").
fn node_leaders(c: &dyn Conduit) -> Result<(Vec<usize>, usize)> {
    let me = (0..c.size())
        .find(|&r| c.node_view(r, c.remote_heap(r).0, 8).is_some())
        .unwrap_or(c.rank());
    let leaders = c.allgather_u64(me as u64)?;
    let host = host_hash();
    let here = c
        .allgather_u64(host)?
        .iter()
        .filter(|&&h| h == host)
        .count();
    Ok((leaders.into_iter().map(|l| l as usize).collect(), here))
}

/// The context's state, from its conduit, settings, firehose parameters and every
/// rank's node leader.
fn build(
    conduit: Arc<dyn Conduit>,
    cfg: Settings,
    info: Vec<String>,
    params: Params,
    (leaders, here): (Vec<usize>, usize),
) -> Arc<CtxInner> {
    let (rank, size) = (conduit.rank(), conduit.size());
    let (hb, hl) = conduit.heap();
    let caps = conduit.caps().clone();
    let concurrent = caps.thread_multiple;
    let mut info = info;
    info.push(params.describe());
    let remote_heaps: Vec<(usize, usize)> = (0..size).map(|r| conduit.remote_heap(r)).collect();
    let (mut sync, reserved) =
        super::sync::SyncState::new(&remote_heaps, cfg.sync.barrier, concurrent);
    let view = |r: usize, addr: usize| conduit.node_view(r, addr, 64).map(|p| p as usize);
    let all_native = (0..size).all(|r| conduit.native(r, remote_heaps[r].0, 8).is_some());
    let bells = super::bells::Bells::new(
        (0..size)
            .map(|r| {
                let a = sync
                    .area
                    .filter(|_| caps.sleep && cfg.wait_sleep != Sleep::Off)?;
                view(r, a.bell(remote_heaps[r].0))
            })
            .collect(),
        all_native,
        here,
    );
    if let (Some(a), true) = (sync.area, caps.sleep && cfg.wait_sleep != Sleep::Off) {
        conduit.set_bell_offset(a.bell(0));
        crate::runtime::wait::prepare_wakers();
    }
    sync.node = super::sync::state::Node::new(rank, &leaders, sync.area, &remote_heaps, &view);
    if sync.node.ok {
        info.push(format!(
            "nodes: {} (this rank's node: {} ranks, led by rank {}); barriers and small reductions use node-shared words inside a node",
            sync.node.leaders.len(),
            sync.node.members.len(),
            sync.node.members[0]
        ));
    }
    // The registration table follows the sync area, when every heap has room.
    let tab = super::regtab::Layout::new(size);
    let tab_fits = reserved > 0
        && remote_heaps
            .iter()
            .all(|&(_, l)| l >= reserved + tab.bytes + (64 << 10));
    let layout = tab_fits.then_some(tab);
    let internal = reserved + layout.map_or(0, |t| t.bytes);
    if layout.is_none() {
        info.push(
            "registration table: none (heap too small): the first access to a registered region asks its owner"
                .into(),
        );
    }
    if reserved == 0 {
        info.push(
            "sync area: none (heap too small): locks, barriers and collectives are unavailable"
                .into(),
        );
    }
    Arc::new(CtxInner {
        rank,
        size,
        concurrent,
        subsystems: SUBSYSTEMS,
        progress_hooks: SUBSYSTEMS.iter().filter_map(|s| s.progress).collect(),
        am: AmState::new(size, cfg.credits_for(size), &handlers()),
        rma: RmaState::new(size),
        heap: Heap::new(hb + internal, hl - internal),
        segments: Default::default(),
        local_regs: LocalRegions::new(size),
        remote_heaps,
        bells,
        internal,
        regtab_off: reserved,
        regtab: super::regtab::RegTab::new(layout),
        sync,
        remote: RemoteCache::new(size),
        stats: Stats::default(),
        fh: FhState::new(params, size, caps.local_registration),
        rpipe: Default::default(),
        invals: Mutex::new(HashMap::new()),
        inval_epoch: AtomicU64::new(0),
        inval_seen: Invalidations::new(size),
        next_id: AtomicU64::new(1),
        async_err: Mutex::new(None),
        async_pending: AtomicBool::new(false),
        hot: Default::default(),
        info: Mutex::new(info),
        sim_hook: Mutex::new(None),
        state: AtomicU8::new(State::Live as u8),
        conduit,
        cfg,
    })
}
