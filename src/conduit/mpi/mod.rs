//! The MPI conduit: MPI-3 passive-target RMA for put/get, MPI two-sided messages on a
//! private communicator for active messages, the node-shared mapping and the
//! kernel's single copy between ranks of one node.
//!
//! One file per concern (as UCX splits a transport): [`startup`] (communicators,
//! heap, windows, the start-up exchange, teardown), [`shm`] (the node-shared
//! mapping of the library heaps), [`rma`] (windows, puts, gets, flushes, atomics),
//! [`attach`] (the dynamic window's attachments), [`cma`] (the kernel's single copy
//! to node peers), [`am`] (active-message frames), [`agree`] (checks every rank
//! makes together at start-up), [`boot`] (who owns MPI, MPI_T, the MPI_Finalize
//! hook), [`interop`] (the driver of the interposed blocking calls). This file holds
//! the conduit's state and its [`Conduit`] implementation.
//!
//! Memory: the library heap is exposed with `MPI_Win_create`. On one node the heaps
//! of all ranks live in an `MPI_Win_allocate_shared` window (`FH_SHM=1`, the
//! default), so access to a node peer's heap is a plain memory copy; otherwise the
//! heap is a private `mmap`ed area. User memory is attached on demand to one
//! `MPI_Win_create_dynamic` window (only the target can attach, so registration
//! happens on the target). Both windows stay in a `MPI_Win_lock_all` epoch for the
//! context's life; completion is by flush.
//!
//! Guarantees: every MPI error is returned (`MPI_ERRORS_RETURN` on our communicators
//! and windows), never fatal; a frame that fails to parse is dropped and counted, the
//! target keeps running. With an MPI thread level below `MPI_THREAD_MULTIPLE` every
//! MPI call of this conduit is serialised by one re-entrant lock.

pub mod agree;
mod am;
pub mod attach;
pub mod boot;
mod cma;
pub mod interop;
mod node_am;
mod ring;
mod rma;
mod segs;
mod shm;
mod split;
mod startup;

use super::{AtomicOp, Caps, Conduit, Launch, LongSrc, SendId, Sink, Width};
use crate::bail;
use crate::runtime::config::{Config, Pin, Resolved, ThreadLevel};
use crate::runtime::error::Result;
use crate::runtime::os::{self, Mapping};
use am::{RecvState, SendState};
use boot::check;
use cma::single_copy_peers;
use mpi::ffi;
use parking_lot::{Mutex, ReentrantMutex, ReentrantMutexGuard};
use rma::{Max3, GUESS_SLOTS};
use shm::NodeMapping;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Tag of AM frames.
const TAG_AM: c_int = 1;
/// Long payload tags cycle through [LONG_TAG_BASE, LONG_TAG_BASE + LONG_TAG_SPAN).
/// 32767 is the smallest MPI_TAG_UB the standard allows.
const LONG_TAG_BASE: u32 = 2;
const LONG_TAG_SPAN: u32 = 32000;
/// Conduit frame prefix: magic u16, flags u16, long tag u32, long length u64.
const PREFIX: usize = 16;
/// Open MPI 4.1 osc/rdma: attachments per dynamic window (`osc_rdma_max_attach`)
/// when the tool interface cannot tell.
const OMPI_MAX_ATTACH: usize = 64;
/// Of the dynamic window's attachments, at most this many are kept for
/// `fh_mem_register` (a quarter when the window holds fewer than 64); firehose's
/// units have the rest.
const REG_SHARE: usize = 16;
const MAGIC: u16 = 0xFC01;
const FLAG_LONG: u16 = 1;

/// Words every rank publishes at start-up: heap base, heap length, start of its
/// shared segment (0 if none), process id.
const WORDS: usize = 4;

/// Idle polls between full scans of the AM receives.
const SCAN_EVERY: u32 = 8;

/// Frame buffer pool bounds.
const POOL_MAX: usize = 64;
const POOL_BUF: usize = 4096;

const WIN_HEAP: u8 = 1;
const WIN_DYN: u8 = 2;

/// An MPI handle that may cross threads (MPI handles are process-wide values; the
/// MPI library does its own locking under MPI_THREAD_MULTIPLE and we serialise below it).
#[derive(Clone, Copy)]
struct H<T>(T);
// SAFETY: see the type's comment; handles are plain values, not thread-bound.
unsafe impl<T> Send for H<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for H<T> {}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

pub struct MpiConduit {
    caps: Caps,
    rank: usize,
    size: usize,
    am_comm: H<ffi::MPI_Comm>,
    rma_comm: H<ffi::MPI_Comm>,
    /// Barriers the interposed `MPI_Win_fence`/`MPI_Finalize` add (`interop`).
    prog_comm: H<ffi::MPI_Comm>,
    /// The transport barrier's reductions (`max3`), alone (see `startup::Comms`).
    sync_comm: H<ffi::MPI_Comm>,
    /// The library heap `(base, len)`: page-aligned, inside `heap_map` or `shm`.
    heap_at: (usize, usize),
    /// The heap's memory when it is a private mapping (no node sharing).
    _heap_map: Option<Mapping>,
    /// The heap's memory when ranks of this node share it (`FH_SHM`).
    shm: Option<NodeMapping>,
    /// Per rank: where its library heap appears in *our* address space when it is on
    /// this node and mapped here (puts/gets to it are then plain copies).
    peer_heaps: Vec<Option<usize>>,
    /// Per rank: its process id when it is a node peer this rank reaches through
    /// the kernel (probed with `process_vm_readv` at start-up), else 0.
    pids: Vec<i32>,
    /// The single copy carries puts and gets (`FH_CMA`); without it, `pids` serve
    /// only to map peers' heap segments and to tell a peer that exited.
    cma: bool,
    /// Node peers' *any* address goes through the single copy (needs `FH_SHM`: with
    /// `FH_SHM=0` firehose serves every peer and the single copy only carries the
    /// bytes of dynamic-window accesses, where it is checked and MPI's is not).
    cma_any: bool,
    /// What `fh_config_print` says about the single-copy path.
    cma_note: String,
    /// Every rank's heap is mapped here (one node, `FH_SHM`): atomics on heap words
    /// are CPU atomics for *every* rank, so they are atomic across all operations.
    /// Otherwise every rank uses MPI compare-and-swap for every heap word.
    all_native: bool,
    /// Last value seen per hashed (rank, address): the first guess of the
    /// compare-and-swap loop (a wrong guess costs one more round trip, nothing else).
    guess: Vec<AtomicU64>,
    /// Offset of every rank's bell in its heap (`Conduit::set_bell_offset`).
    bell_off: std::sync::OnceLock<usize>,
    heap_locked: bool,
    heap_win: H<ffi::MPI_Win>,
    dyn_win: H<ffi::MPI_Win>,
    /// What this rank attached to `dyn_win` (disjoint, page-aligned; `attach`).
    attach: Mutex<attach::AttachMap>,
    /// `attach` holds an attachment (readable without its lock).
    attached: AtomicBool,
    /// False for a 1-rank communicator: no windows, all RMA is local copies.
    windows: bool,
    remote_heaps: Vec<(usize, usize)>,
    /// Windows used towards each rank (WIN_* bits); never cleared, so a flush always
    /// covers every window an operation may have used.
    used: Vec<AtomicU8>,
    recv: Mutex<RecvState>,
    send: Mutex<SendState>,
    /// AMs to node peers through shared-memory rings (`FH_SHM`; `node_am`).
    node: Option<node_am::NodeAm>,
    /// Heap segments shared with node peers (`segs`; `FH_SHM` with the single copy).
    segs: Option<segs::SharedSegs>,
    barrier: Mutex<Option<H<ffi::MPI_Request>>>,
    /// `MPI_Iallreduce(MAX)` of three words in flight (FH_BARRIER=mpi): request and
    /// the in/out buffers it uses (boxed: they must not move while it runs).
    max3: Mutex<Option<Max3>>,
    /// `MPI_Iallreduce(SUM)` of finalize's frame counts (on the AM communicator).
    sum3: Mutex<Option<Max3>>,
    /// Held around MPI calls when the thread level is below MULTIPLE.
    serial: Option<ReentrantMutex<()>>,
    max_long: usize,
    verbose: bool,
    finalized: AtomicBool,
    /// This conduit holds one `boot::open` (released once, by `abandon`).
    booted: AtomicBool,
    /// Owned sends not yet complete (`send.reqs.len()`, readable without the lock).
    sends_pending: AtomicUsize,
}

fn u8t() -> ffi::MPI_Datatype {
    // SAFETY: reading an extern constant of rsmpi's C shim.
    unsafe { ffi::RSMPI_UINT8_T }
}

impl MpiConduit {
    pub fn heap_locked(&self) -> bool {
        self.heap_locked
    }

    fn serial(&self) -> Option<ReentrantMutexGuard<'_, ()>> {
        self.serial.as_ref().map(|m| m.lock())
    }

    fn live(&self) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            bail!(State, "context is finalized");
        }
        Ok(())
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.size {
            bail!(
                BadRank,
                "rank {} out of range (communicator size {})",
                rank,
                self.size
            );
        }
        Ok(())
    }
}

impl Conduit for MpiConduit {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn heap(&self) -> (usize, usize) {
        self.heap_at
    }

    fn remote_heap(&self, rank: usize) -> (usize, usize) {
        self.remote_heaps[rank]
    }

    fn heap_segment(&self, len: usize) -> Result<Mapping> {
        self.shared_segment(len)
    }

    fn segment_registered(&self, map: &Mapping) {
        self.publish_segment(map)
    }

    fn register(&self, addr: usize, len: usize) -> Result<()> {
        self.live()?;
        if !self.windows {
            return Ok(());
        }
        let _s = self.serial();
        let mut a = self.attach.lock();
        let r = a.register(addr, len, &mut |st| self.attach_step(st));
        self.attached.store(a.attached() > 0, Ordering::Release);
        r
    }

    fn deregister(&self, addr: usize, len: usize) -> Result<()> {
        self.live()?;
        if !self.windows {
            return Ok(());
        }
        let _s = self.serial();
        let mut a = self.attach.lock();
        let r = a.deregister(addr, len, &mut |st| self.attach_step(st));
        self.attached.store(a.attached() > 0, Ordering::Release);
        r
    }

    unsafe fn put(&self, rank: usize, raddr: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded Conduit::put contract.
        unsafe { self.rma(true, rank, raddr, src as *mut u8, len, false) }
    }

    unsafe fn put_sync(&self, rank: usize, raddr: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded Conduit::put_sync contract.
        unsafe { self.rma(true, rank, raddr, src as *mut u8, len, true) }
    }

    unsafe fn get(&self, rank: usize, raddr: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded Conduit::get contract.
        unsafe { self.rma(false, rank, raddr, dst, len, false) }
    }

    unsafe fn get_sync(&self, rank: usize, raddr: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded Conduit::get_sync contract.
        unsafe { self.rma(false, rank, raddr, dst, len, true) }
    }

    fn flush(&self, rank: usize) -> Result<()> {
        self.check_rank(rank)?;
        // Direct copies into a node peer's heap are complete already; order them
        // before whatever the caller stores next.
        fence(Ordering::SeqCst);
        if rank == self.rank {
            return Ok(());
        }
        let used = self.used[rank].load(Ordering::Relaxed);
        let _s = self.serial();
        for (bit, win) in [(WIN_HEAP, self.heap_win), (WIN_DYN, self.dyn_win)] {
            if used & bit != 0 {
                // SAFETY: flushing a window in a lock_all epoch.
                let rc = unsafe { ffi::PMPI_Win_flush(rank as c_int, win.0) };
                check(rc, || format!("MPI_Win_flush(rank {})", rank))?;
            }
        }
        Ok(())
    }

    fn flush_all(&self) -> Result<()> {
        if !self.windows {
            return Ok(());
        }
        let _s = self.serial();
        for win in [self.heap_win, self.dyn_win] {
            // SAFETY: flushing a window in a lock_all epoch.
            let rc = unsafe { ffi::PMPI_Win_flush_all(win.0) };
            check(rc, || "MPI_Win_flush_all".into())?;
        }
        Ok(())
    }

    fn am_send(
        &self,
        dest: usize,
        frame: Vec<u8>,
        long: Option<LongSrc>,
    ) -> Result<Option<SendId>> {
        self.send_frame(dest, frame, long)
    }

    fn am_send_small(&self, dest: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        self.send_node_small(dest, len, fill)
    }

    fn frame_buffer(&self) -> Vec<u8> {
        am::pooled_buffer()
    }

    fn native(&self, rank: usize, raddr: usize, len: usize) -> Option<*mut u8> {
        if !self.all_native || rank >= self.size {
            return None;
        }
        let (base, hlen) = self.remote_heaps[rank];
        if raddr < base || !raddr.checked_add(len).is_some_and(|e| e <= base + hlen) {
            return None;
        }
        if rank == self.rank {
            return Some(raddr as *mut u8);
        }
        self.peer_heaps[rank].map(|view| (view + (raddr - base)) as *mut u8)
    }

    fn node_view(&self, rank: usize, raddr: usize, len: usize) -> Option<*mut u8> {
        let &(base, hlen) = self.remote_heaps.get(rank)?;
        if raddr < base || !raddr.checked_add(len).is_some_and(|e| e <= base + hlen) {
            return None;
        }
        if rank == self.rank {
            return Some(raddr as *mut u8);
        }
        self.peer_heaps[rank].map(|view| (view + (raddr - base)) as *mut u8)
    }

    fn local_view(&self, rank: usize, raddr: usize, len: usize) -> Option<*mut u8> {
        Conduit::node_view(self, rank, raddr, len)
            .or_else(|| self.seg_view(rank, raddr, len).map(|a| a as *mut u8))
    }

    fn needs_progress(&self) -> bool {
        !self.all_native || self.attached.load(Ordering::Acquire)
    }

    fn set_bell_offset(&self, off: usize) {
        let _ = self.bell_off.set(off);
    }

    fn atomic(&self, rank: usize, raddr: usize, w: Width, op: AtomicOp) -> Result<u64> {
        self.atomic_op(rank, raddr, w, op)
    }

    fn send_done(&self, id: SendId) -> Result<bool> {
        self.send_finished(id)
    }

    fn am_poll(&self, sink: &mut Sink<'_>) -> Result<usize> {
        self.poll_frames(sink)
    }

    fn idle(&self) {
        std::thread::yield_now();
    }

    fn allgather_u64(&self, x: u64) -> Result<Vec<u64>> {
        let _s = self.serial();
        let mut all = vec![0u64; self.size];
        // SAFETY: 8 bytes in, 8*size bytes out.
        let rc = unsafe {
            ffi::PMPI_Allgather(
                &x as *const u64 as *const c_void,
                8,
                u8t(),
                all.as_mut_ptr() as *mut c_void,
                8,
                u8t(),
                self.rma_comm.0,
            )
        };
        check(rc, || "MPI_Allgather".into())?;
        Ok(all)
    }

    fn barrier_start(&self) -> Result<()> {
        let _s = self.serial();
        let mut b = self.barrier.lock();
        if b.is_some() {
            bail!(State, "a bootstrap barrier is already in progress");
        }
        // SAFETY: reads an immutable extern constant (MPI_REQUEST_NULL) from rsmpi's C shim.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: am_comm is our live communicator (serialized by `_s`); req is a
            // local out-parameter, stored in `self.barrier` until MPI_Test completes it.
            unsafe { ffi::MPI_Ibarrier(self.am_comm.0, &mut req) },
            || "MPI_Ibarrier".into(),
        )?;
        *b = Some(H(req));
        Ok(())
    }

    fn barrier_test(&self) -> Result<bool> {
        let _s = self.serial();
        let mut b = self.barrier.lock();
        let Some(req) = b.as_mut() else {
            bail!(State, "no barrier in progress");
        };
        let mut flag: c_int = 0;
        check(
            // SAFETY: testing the Ibarrier request we own (held in `self.barrier` under
            // its lock); flag is a local and the status is ignored.
            unsafe { ffi::MPI_Test(&mut req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            || "MPI_Test (barrier)".into(),
        )?;
        if flag != 0 {
            *b = None;
        }
        Ok(flag != 0)
    }

    fn finalize(&self) -> Result<()> {
        self.finish()
    }

    fn abandon(&self) {
        if !self.booted.swap(false, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = boot::close() {
            eprintln!("firehose[{}]: {}", self.rank, e);
        }
    }

    unsafe fn copy_any(
        &self,
        rank: usize,
        put: bool,
        raddr: usize,
        local: usize,
        len: usize,
    ) -> Option<Result<()>> {
        self.single_copy_pid(rank)?;
        Some(self.single_copy(rank, put, raddr, local, len))
    }

    unsafe fn copy_any_v(
        &self,
        rank: usize,
        put: bool,
        pieces: &[(usize, usize, usize)],
    ) -> Option<Result<()>> {
        let pid = self.single_copy_pid(rank)?;
        // Pieces in a segment mapped here are memory copies; from the first that is
        // not, the rest go in one kernel call (no list of views is built).
        let mapped = pieces
            .iter()
            .map_while(|&(raddr, local, len)| {
                let at = self.seg_view(rank, raddr, len)?;
                // SAFETY: `at` lies in a node peer's shared heap segment mapped here
                // (seg_view checked the span); local pieces per the contract.
                unsafe { cma::plain_copy(put, at, local, len) };
                Some(())
            })
            .count();
        let rest = &pieces[mapped..];
        if rest.is_empty() {
            return Some(Ok(()));
        }
        let dir = if put {
            crate::runtime::os::VmDir::Write
        } else {
            crate::runtime::os::VmDir::Read
        };
        Some(
            crate::runtime::os::vm_copy_v(pid, dir, rest).map_err(|e| {
                crate::err!(Access, "vectored single copy with rank {}: {:?}", rank, e)
            }),
        )
    }

    unsafe fn rma_v(
        &self,
        rank: usize,
        put: bool,
        pieces: &[(usize, usize, usize)],
        sync: bool,
    ) -> Option<Result<()>> {
        // SAFETY: forwarded contract.
        unsafe { self.rma_typed(put, rank, pieces, sync) }
    }

    fn reaches_any_address(&self, rank: usize) -> bool {
        self.single_copy_pid(rank).is_some()
    }

    fn peer_exited(&self, rank: usize) -> bool {
        MpiConduit::peer_exited(self, rank)
    }

    fn reduce3_start(&self, op: crate::conduit::Reduce3, v: [u64; 3]) -> Result<()> {
        self.start_reduce3(op, v)
    }

    fn reduce3_test(&self, op: crate::conduit::Reduce3) -> Result<Option<[u64; 3]>> {
        self.test_reduce3(op)
    }

    fn describe_now(&self) -> Vec<String> {
        vec![self.segs_note()]
    }

    fn describe(&self) -> Vec<String> {
        let level = boot::query_thread();
        vec![
            format!("conduit: mpi ({} ranks)", self.size),
            format!(
                "MPI library: {}",
                boot::library_version().lines().next().unwrap_or("?")
            ),
            format!("built against: {}", boot::BUILT_FOR),
            format!(
                "MPI thread level: {}{}",
                describe_level(level),
                if level < ThreadLevel::Multiple {
                    " (library serialises its own MPI calls)"
                } else {
                    ""
                }
            ),
            format!("MPI owned by firehose: {}", boot::owns_mpi()),
            format!("heap mlocked: {}", self.heap_locked),
            format!("kernel single copy to node peers: {}", self.cma_note),
            self.node.as_ref().map_or_else(
                || "AMs between node peers: MPI messages (no node-shared mapping)".into(),
                |n| n.describe(),
            ),
        ]
    }

    /// On MPI_COMM_WORLD, whatever this context's communicator: MPI ends the whole
    /// job either way, but MPICH's launcher reports an abort on another communicator
    /// with the status of a peer it killed (9) about half the time, not `code`.
    fn abort(&self, code: i32) -> ! {
        abort_world(code)
    }

    fn split_parent(&self) -> Option<i32> {
        // SAFETY: converting a live communicator handle.
        Some(unsafe { ffi::RSMPI_Comm_c2f(self.prog_comm.0) })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// [`crate::conduit::launch`] for MPI: make MPI usable (initialising it for
/// `Launch::World` when nobody has), check the settings with every rank, then build
/// the conduit. MPI is released (`boot::close`) if that fails, and otherwise when the
/// conduit is finalized or abandoned.
pub fn launch<S: Resolved>(
    how: Launch,
    cfg: Result<S>,
    max_frame: fn(&S) -> usize,
) -> Result<(std::sync::Arc<dyn Conduit>, S)> {
    boot::open(match how {
        Launch::Comm(_) | Launch::Split { .. } => None,
        Launch::World(level) => Some(level),
    })?;
    let comm = comm_from_fint(match how {
        Launch::Comm(f) => f,
        Launch::World(_) => world_fint(),
        Launch::Split {
            parent,
            colour,
            key,
        } => {
            let made = split::launch(parent, colour, key, cfg, max_frame);
            if made.is_err() {
                let _ = boot::close();
            }
            return made;
        }
    });
    let made = agree::settings(comm, &cfg)
        .and(cfg)
        .and_then(|cfg| MpiConduit::new(comm, cfg.core(), max_frame(&cfg)).map(|c| (c, cfg)));
    match made {
        Ok((c, cfg)) => Ok((std::sync::Arc::new(c), cfg)),
        Err(e) => {
            let _ = boot::close();
            Err(e)
        }
    }
}

/// MPI_Abort on MPI_COMM_WORLD if MPI is running, else exit.
pub fn abort_world(code: c_int) -> ! {
    if boot::is_initialized() {
        // SAFETY: MPI is initialised and not finalized; the world communicator.
        unsafe { ffi::PMPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
    }
    std::process::exit(code)
}

/// Convert a Fortran communicator handle (`MPI_Fint`) to a C one.
pub fn comm_from_fint(comm_f: c_int) -> ffi::MPI_Comm {
    // SAFETY: MPI_Comm_f2c accepts any integer; invalid ones map to an invalid handle
    // that later MPI calls reject (or MPI_COMM_NULL).
    unsafe { ffi::RSMPI_Comm_f2c(comm_f) }
}

/// MPI_COMM_WORLD as a Fortran handle.
pub fn world_fint() -> c_int {
    // SAFETY: converting a predefined handle.
    unsafe { ffi::RSMPI_Comm_c2f(ffi::RSMPI_COMM_WORLD) }
}

/// The MPI name of a thread level (for messages and fh_config_print).
pub fn describe_level(l: ThreadLevel) -> &'static str {
    match l {
        ThreadLevel::Single => "MPI_THREAD_SINGLE",
        ThreadLevel::Funneled => "MPI_THREAD_FUNNELED",
        ThreadLevel::Serialized => "MPI_THREAD_SERIALIZED",
        ThreadLevel::Multiple => "MPI_THREAD_MULTIPLE",
    }
}
