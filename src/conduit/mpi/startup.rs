//! Start-up and teardown of the MPI conduit: private communicators, the library heap
//! (node-shared or private) and its windows, the start-up exchange, the kernel copy's
//! probe, the attachment limit; and their release at finalize.
//!
//! Guarantees: collective over the communicator; on failure everything created so
//! far is freed and the error says which MPI call failed (and, when /dev/shm is the
//! likely reason, says so).

use super::*;

/// When MPI cannot create a window: MPI's shared-memory transport keeps its segments
/// in /dev/shm, and a full /dev/shm makes it fail with no word of why.
pub(super) fn shm_hint() -> String {
    match os::tmpfs_available("/dev/shm") {
        Some(free) if free < 64 << 20 => format!(
            " (/dev/shm has only {} free: MPI's shared-memory transport keeps its segments \
             there; enlarge /dev/shm or free space in it)",
            mib(free)
        ),
        _ => String::new(),
    }
}

/// Attachments kept for `fh_mem_register` out of a window holding `cap`.
pub(super) fn reg_share(cap: usize) -> usize {
    (cap / 4).clamp(1, REG_SHARE)
}

/// The four private duplicates of the application's communicator: AM frames (and
/// `fh_finalize`'s barrier), the windows, the interposed calls' own barriers
/// (`interop`), and the transport barrier's reductions (`max3`). The last is alone
/// on its own so that no other collective of the library can match a pending one:
/// a rank's `fh_finalize` completed its peers' `FH_BARRIER=mpi` barriers with
/// `FH_OK` when both were on `am`.
struct Comms {
    am: ffi::MPI_Comm,
    rma: ffi::MPI_Comm,
    prog: ffi::MPI_Comm,
    sync: ffi::MPI_Comm,
}

impl Comms {
    fn dup(comm: ffi::MPI_Comm) -> Result<Comms> {
        let mut out = Vec::with_capacity(4);
        for _ in 0..4 {
            // SAFETY: duplicating a communicator the caller validated; the handle is
            // written to a local of the right type.
            let d = unsafe {
                let mut d: ffi::MPI_Comm = std::mem::zeroed();
                check(ffi::MPI_Comm_dup(comm, &mut d), || "MPI_Comm_dup".into())
                    .and_then(|_| {
                        check(
                            ffi::MPI_Comm_set_errhandler(d, ffi::RSMPI_ERRORS_RETURN),
                            || "MPI_Comm_set_errhandler".into(),
                        )
                    })
                    .map(|_| d)
            };
            match d {
                Ok(d) => out.push(d),
                Err(e) => {
                    free_comms(out);
                    return Err(e);
                }
            }
        }
        Ok(Comms {
            am: out[0],
            rma: out[1],
            prog: out[2],
            sync: out[3],
        })
    }

    fn rank_size(&self) -> (usize, usize) {
        let (mut r, mut s) = (0, 0);
        // SAFETY: queries on a communicator we own; out-pointers are locals.
        unsafe {
            ffi::MPI_Comm_rank(self.am, &mut r);
            ffi::MPI_Comm_size(self.am, &mut s);
        }
        (r as usize, s as usize)
    }

    fn free(self) {
        free_comms(vec![self.am, self.rma, self.prog, self.sync]);
    }
}

fn free_comms(v: Vec<ffi::MPI_Comm>) {
    for mut c in v {
        // SAFETY: communicators we duplicated and nobody else holds.
        unsafe { ffi::MPI_Comm_free(&mut c) };
    }
}

/// This rank's library heap: in the node-shared mapping (`FH_SHM=1`, when there is
/// room) or a private mapping, locked in RAM where `FH_PIN=mlock` allows.
struct LibHeap {
    shm: Option<NodeMapping>,
    map: Option<Mapping>,
    at: (usize, usize),
    locked: bool,
}

impl LibHeap {
    fn create(
        cfg: &Config,
        rma: ffi::MPI_Comm,
        rank: usize,
        windows: bool,
        max_frame: usize,
    ) -> Result<LibHeap> {
        let shm = if windows && cfg.shm {
            let rings = |members| node_am::ring_bytes(max_frame, members);
            match NodeMapping::new(rma, cfg.heap_size, cfg.shm_max_ranks, rings) {
                Ok(sh) => Some(sh),
                Err(e) => {
                    // Slower, not broken: say so once per job (and in
                    // fh_config_print's "node-shared heaps" line).
                    if rank == 0 || cfg.verbose {
                        eprintln!(
                            "firehose[{}]: {}; node peers' heaps go through MPI RMA instead (slower)",
                            rank, e.msg
                        );
                    }
                    None
                }
            }
        } else {
            None
        };
        let (map, at) = match &shm {
            Some(sh) => (None, (sh.base, sh.len)),
            None => {
                let m = Mapping::new(cfg.heap_size)?;
                let at = (m.addr(), m.len());
                (Some(m), at)
            }
        };
        let locked = cfg.pin == Pin::Mlock && os::mlock(at.0, at.1).is_ok();
        if cfg.pin == Pin::Mlock && !locked && cfg.verbose {
            eprintln!(
                "firehose[{}]: could not mlock the {}-byte heap; continuing unlocked",
                rank, at.1
            );
        }
        Ok(LibHeap {
            shm,
            map,
            at,
            locked,
        })
    }
}

/// The heap's window and the dynamic window, both in a `lock_all` epoch.
fn create_windows(
    heap: (usize, usize),
    rma: ffi::MPI_Comm,
) -> Result<(ffi::MPI_Win, ffi::MPI_Win)> {
    // SAFETY: (whole block) plain MPI calls over memory this rank owns for the
    // conduit's life; every out-pointer is a local of the right type.
    unsafe {
        let mut heap_win: ffi::MPI_Win = ffi::RSMPI_WIN_NULL;
        let mut dyn_win: ffi::MPI_Win = ffi::RSMPI_WIN_NULL;
        let made = (|| -> Result<()> {
            check(
                ffi::MPI_Win_create(
                    heap.0 as *mut c_void,
                    heap.1 as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    rma,
                    &mut heap_win,
                ),
                || "MPI_Win_create (library heap)".into(),
            )?;
            check(
                ffi::MPI_Win_create_dynamic(ffi::RSMPI_INFO_NULL, rma, &mut dyn_win),
                || "MPI_Win_create_dynamic".into(),
            )?;
            for w in [heap_win, dyn_win] {
                check(
                    ffi::MPI_Win_set_errhandler(w, ffi::RSMPI_ERRORS_RETURN),
                    || "MPI_Win_set_errhandler".into(),
                )?;
                check(
                    ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, w),
                    || "MPI_Win_lock_all".into(),
                )?;
            }
            Ok(())
        })();
        made.map(|_| (heap_win, dyn_win)).map_err(|mut e| {
            e.msg.push_str(&shm_hint());
            e
        })
    }
}

/// What every rank learns of every other at start-up ([`WORDS`] words each: heap
/// base and length, where its shared segment starts (0: none), process id), and
/// where the node peers' heaps are in this address space.
struct Exchange {
    all: Vec<u64>,
    remote_heaps: Vec<(usize, usize)>,
    peer_heaps: Vec<Option<usize>>,
}

fn exchange(heap: &LibHeap, rma: ffi::MPI_Comm, size: usize) -> Result<Exchange> {
    // Node peers may read and write us with the kernel's single copy; the allgather
    // below is the barrier between this and their probes.
    os::allow_single_copy_peers();
    let raw = heap.shm.as_ref().map_or(0, |sh| sh.raw);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mine = [heap.at.0 as u64, heap.at.1 as u64, raw as u64, pid as u64];
    let mut all = vec![0u64; WORDS * size];
    check(
        // SAFETY: `mine` holds WORDS u64 and `all` WORDS u64 per rank (8 * WORDS bytes
        // each way); a collective on our own communicator.
        unsafe {
            ffi::PMPI_Allgather(
                mine.as_ptr() as *const c_void,
                8 * WORDS as c_int,
                u8t(),
                all.as_mut_ptr() as *mut c_void,
                8 * WORDS as c_int,
                u8t(),
                rma,
            )
        },
        || "MPI_Allgather (heap addresses)".into(),
    )?;
    let remote_heaps = all
        .chunks(WORDS)
        .map(|c| (c[0] as usize, c[1] as usize))
        .collect();
    let mut peer_heaps = vec![None; size];
    if let Some(sh) = &heap.shm {
        for (&r, &view) in sh.members.iter().zip(&sh.views) {
            let c = &all[WORDS * r..WORDS * r + WORDS];
            // Their heap starts (base - raw) bytes into their segment.
            peer_heaps[r] = Some(view + (c[0] - c[2]) as usize);
        }
    }
    Ok(Exchange {
        all,
        remote_heaps,
        peer_heaps,
    })
}

/// Which node peers this rank reaches through the kernel (per-rank pids; 0: no),
/// whether any address of theirs goes through its single copy, and
/// `fh_config_print`'s line. The node probes even with `FH_CMA=0` when `FH_SHM`
/// asks for shared heaps: mapping a peer's heap segment through `/proc/<pid>/fd`
/// needs the same permission, and `FH_CMA` is about memory outside the library
/// heap. The probe is collective over the node, so whether it runs depends on the
/// job's settings only, never on how this rank's mapping went.
fn decide_kernel_copy(
    cfg: &Config,
    windows: bool,
    rma: ffi::MPI_Comm,
    rank: usize,
    ex: &Exchange,
    shared: bool,
) -> (Vec<i32>, bool, String) {
    let size = ex.remote_heaps.len();
    let (pids, mut note) = if windows && (cfg.cma || cfg.shm) {
        single_copy_peers(rma, rank, &ex.all)
    } else {
        (vec![0; size], String::new())
    };
    let reached = pids.iter().any(|&p| p != 0);
    if !cfg.cma {
        note = match reached && shared {
            true => "off (FH_CMA=0); node peers still map each other's heap segments".into(),
            false => "off (FH_CMA=0)".into(),
        };
    } else if reached && !shared {
        note = format!(
            "{}; without node-shared heaps (FH_SHM=0) only firehose-pinned and registered memory is copied this way, after firehose made it accessible",
            note
        );
    }
    (pids, cfg.cma && shared && reached, note)
}

impl MpiConduit {
    /// Create the conduit on `comm` (collective over `comm`). `max_frame` is the
    /// largest frame the layer above will send.
    ///
    /// Long because most of it is the one `MpiConduit` literal (a field per line);
    /// the collective steps before it (dup, heap, windows, exchange) must run in the same
    /// order on every rank, and the first of them free what came before on failure.
    pub fn new(comm: ffi::MPI_Comm, cfg: &Config, max_frame: usize) -> Result<MpiConduit> {
        let level = boot::query_thread();
        agree::validate_comm(comm)?;
        let comms = Comms::dup(comm)?;
        let (rank, size) = comms.rank_size();
        // A 1-rank communicator needs no windows (every access is to self and is a
        // memory copy); Open MPI 4.1's osc/rdma cannot create them there anyway.
        let windows = size > 1;
        let heap = match LibHeap::create(cfg, comms.rma, rank, windows, max_frame) {
            Ok(h) => h,
            Err(e) => {
                comms.free();
                return Err(e);
            }
        };
        // SAFETY: reading extern constants exported by rsmpi's C shim.
        let none = unsafe { ffi::RSMPI_WIN_NULL };
        let (heap_win, dyn_win) = match windows.then(|| create_windows(heap.at, comms.rma)) {
            None => (none, none),
            Some(Ok(w)) => w,
            Some(Err(e)) => {
                comms.free();
                if heap.locked {
                    os::munlock(heap.at.0, heap.at.1);
                }
                return Err(e);
            }
        };
        let ex = exchange(&heap, comms.rma, size)?;
        let (pids, cma_any, cma_note) =
            decide_kernel_copy(cfg, windows, comms.rma, rank, &ex, heap.shm.is_some());
        // Open MPI's dynamic windows hold a fixed number of attachments.
        let attach_cap = (boot::BUILT_FOR == "openmpi")
            .then(|| boot::ompi_max_attach().unwrap_or(OMPI_MAX_ATTACH).max(2));
        let recv = RecvState::new(cfg.am_recv_buffers, PREFIX + max_frame);
        let node = heap.shm.as_ref().and_then(|sh| {
            // SAFETY: each member's ring lies right after its heap in its segment of
            // the node-shared mapping (NodeMapping::new sized and zeroed it before
            // the exchange above, which every member has passed).
            unsafe {
                node_am::NodeAm::new(
                    rank,
                    size,
                    &sh.members,
                    &ex.peer_heaps,
                    |r| ex.remote_heaps[r].1,
                    max_frame,
                )
            }
        });
        // Segments are shared only where a node peer may open our files: the same
        // permission as the single copy's.
        let segs = heap
            .shm
            .as_ref()
            .filter(|_| pids.iter().any(|&p| p != 0))
            .map(|sh| segs::SharedSegs::new(size, sh.dir_off - sh.len));
        let c = MpiConduit {
            caps: Caps {
                name: "mpi",
                thread_multiple: level == ThreadLevel::Multiple,
                max_frame,
                frame_headroom: PREFIX,
                atomics: true,
                // Region mode: MPI_Win_attach takes any range, and Open MPI's
                // osc/rdma holds at most 64 attachments per dynamic window (one
                // per page would exhaust it); 16 are left for fh_mem_register.
                registers_regions: true,
                max_registrations: attach_cap.map(|c| c - reg_share(c)),
                user_registrations: attach_cap.map(reg_share),
                registrations_fix: "raise Open MPI's osc_rdma_max_attach (mpirun --mca \
                    osc_rdma_max_attach N: a quarter of it, up to 16, is kept for \
                    registrations)",
                local_registration: false,
                reduction: true,
                interop: true,
                sleep: true,
            },
            rank,
            size,
            am_comm: H(comms.am),
            rma_comm: H(comms.rma),
            prog_comm: H(comms.prog),
            sync_comm: H(comms.sync),
            heap_at: heap.at,
            _heap_map: heap.map,
            shm: heap.shm,
            segs,
            all_native: !windows
                || ex
                    .peer_heaps
                    .iter()
                    .enumerate()
                    .all(|(r, v)| r == rank || v.is_some()),
            peer_heaps: ex.peer_heaps,
            pids,
            cma: cfg.cma,
            cma_any,
            cma_note,
            guess: (0..GUESS_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            bell_off: Default::default(),
            heap_locked: heap.locked,
            heap_win: H(heap_win),
            dyn_win: H(dyn_win),
            attach: Mutex::new(attach::AttachMap::new(os::page_size(), attach_cap)),
            attached: AtomicBool::new(false),
            windows,
            remote_heaps: ex.remote_heaps,
            used: (0..size).map(|_| AtomicU8::new(0)).collect(),
            recv: Mutex::new(recv),
            send: Mutex::new(SendState::new(size)),
            node,
            barrier: Mutex::new(None),
            max3: Mutex::new(None),
            sum3: Mutex::new(None),
            // SINGLE/FUNNELED: the program promises one thread calls MPI (and we start no
            // thread), so no lock is needed. SERIALIZED: threads may call us one
            // at a time as far as they know, so we serialise our own MPI calls.
            serial: (level == ThreadLevel::Serialized).then(|| ReentrantMutex::new(())),
            max_long: cfg.am_max_long,
            verbose: cfg.verbose,
            finalized: AtomicBool::new(false),
            booted: AtomicBool::new(true),
            sends_pending: AtomicUsize::new(0),
        };
        c.post_all()?;
        Ok(c)
    }

    pub(super) fn finish(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let _s = self.serial();
        let mut first: Result<()> = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                if let Err(e) = r {
                    first = Err(e);
                }
            }
        };
        // SAFETY: (whole block) tearing down handles this conduit created; the layer
        // above has quiesced (barrier) so no operation uses them any more.
        unsafe {
            note(self.close_am());
            for w in [self.heap_win, self.dyn_win]
                .into_iter()
                .filter(|_| self.windows)
            {
                note(check(ffi::MPI_Win_unlock_all(w.0), || {
                    "MPI_Win_unlock_all".into()
                }));
                let mut w = w.0;
                note(check(ffi::MPI_Win_free(&mut w), || "MPI_Win_free".into()));
            }
            // A frame count left pending (finalize gave up on it): MPI may still
            // write its buffer.
            if let Some(pending) = self.sum3.lock().take() {
                std::mem::forget(pending);
            }
            for c in [self.am_comm, self.rma_comm, self.prog_comm] {
                let mut c = c.0;
                note(check(ffi::MPI_Comm_free(&mut c), || "MPI_Comm_free".into()));
            }
            // A transport barrier still pending (a peer finalized instead of joining,
            // and this rank's wait gave up) never completes: its communicator and
            // the buffer MPI may still read stay allocated.
            match self.max3.lock().take() {
                Some(pending) => std::mem::forget(pending),
                None => {
                    let mut c = self.sync_comm.0;
                    note(check(ffi::MPI_Comm_free(&mut c), || "MPI_Comm_free".into()));
                }
            }
        }
        if self.heap_locked {
            os::munlock(self.heap_at.0, self.heap_at.1);
        }
        if let Some(sh) = &self.shm {
            // SAFETY: freed once, here, after every window over the heap was freed.
            unsafe { sh.free(&mut note) };
        }
        self.abandon();
        first
    }
}
