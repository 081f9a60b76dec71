//! The MPI conduit: MPI-3 passive-target RMA for put/get, MPI two-sided messages on a
//! private communicator for active messages.
//!
//! Memory: the library heap is exposed with `MPI_Win_create`. On one node the heaps
//! of all ranks live in an `MPI_Win_allocate_shared` window (`FH_SHM=1`, the
//! default), so access to a node peer's heap is a plain memory copy; otherwise the
//! heap is a private `mmap`ed area. User
//! memory is attached on demand to one `MPI_Win_create_dynamic` window (only the
//! target can attach, so registration happens on the target). Both windows stay in a
//! `MPI_Win_lock_all` epoch for the context's life; completion is by flush.
//!
//! AMs: `recv_buffers` receives are pre-posted (`MPI_ANY_SOURCE`, one tag) on a
//! duplicated communicator, each the size of the largest frame. A long payload is a
//! second message with a per-destination sequence tag; the receiver takes it straight
//! into its destination (zero-copy) once the layer above validated that destination.
//! The number of frames in flight is bounded by the credits of the layer above.
//!
//! Guarantees: every MPI error is returned (`MPI_ERRORS_RETURN` on our communicators
//! and windows), never fatal; a frame that fails to parse is dropped and counted, the
//! target keeps running. With an MPI thread level below `MPI_THREAD_MULTIPLE` every
//! MPI call of this conduit is serialised by one re-entrant lock.

pub mod agree;
pub mod attach;
pub mod boot;
pub mod interop;

use super::{AtomicOp, Caps, Conduit, LongIn, LongSrc, SendId, Sink, Width};
use crate::bail;
use crate::runtime::config::{Config, FhMode, Pin, ThreadLevel};
use crate::runtime::error::Result;
use crate::runtime::os::{self, Mapping};
use boot::check;
use mpi::ffi;
use parking_lot::{Mutex, ReentrantMutex, ReentrantMutexGuard};
use std::collections::HashMap;
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
// SAFETY: the request vectors hold MPI handles (plain values) and are only used
// under their Mutex.
unsafe impl Send for RecvState {}
// SAFETY: as above.
unsafe impl Send for SendState {}

struct RecvState {
    reqs: Vec<ffi::MPI_Request>,
    /// `bufs[i]` is the buffer `reqs[i]` receives into. Invariant: while `reqs[i]`
    /// is active, `bufs[i]` is neither read nor moved.
    bufs: Vec<Vec<u8>>,
    /// The receive most likely to complete next (messages mostly match receives in
    /// posting order). Only a hint: completions may come out of order, so the poll
    /// also scans everything every SCAN_EVERY idle polls.
    hint: usize,
    idle_polls: u32,
    indices: Vec<c_int>,
    statuses: Vec<ffi::MPI_Status>,
    posted: bool,
}

struct SendState {
    /// Outstanding sends whose buffers we own; parallel vectors.
    reqs: Vec<ffi::MPI_Request>,
    keep: Vec<Vec<u8>>,
    /// Sends of borrowed long payloads the caller waits for.
    borrowed: HashMap<SendId, ffi::MPI_Request>,
    next_id: SendId,
    /// Next long-payload sequence per destination.
    long_seq: Vec<u32>,
}

const _: () = assert!(
    cfg!(target_endian = "little"),
    "cas_once assumes little-endian"
);
const GUESS_SLOTS: usize = 256;

/// A reduction in flight: its request and the in/out words it reads and writes.
type Max3 = (H<ffi::MPI_Request>, Box<[u64; 6]>);

/// When MPI cannot create a window: MPI's shared-memory transport keeps its segments
/// in /dev/shm, and a full /dev/shm makes it fail with no word of why.
fn shm_hint() -> String {
    match os::tmpfs_available("/dev/shm") {
        Some(free) if free < 64 << 20 => format!(
            " (/dev/shm has only {} free: MPI's shared-memory transport keeps its segments \
             there; enlarge /dev/shm or free space in it)",
            mib(free)
        ),
        _ => String::new(),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Attachments kept for `fh_mem_register` out of a window holding `cap`.
fn reg_share(cap: usize) -> usize {
    (cap / 4).clamp(1, REG_SHARE)
}

fn guess_slot(rank: usize, raddr: usize) -> usize {
    let h = (raddr as u64 >> 2) ^ ((rank as u64) << 40);
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % GUESS_SLOTS
}

pub struct MpiConduit {
    caps: Caps,
    rank: usize,
    size: usize,
    am_comm: H<ffi::MPI_Comm>,
    rma_comm: H<ffi::MPI_Comm>,
    /// Barriers the interposed `MPI_Win_fence`/`MPI_Finalize` add (`interop`).
    prog_comm: H<ffi::MPI_Comm>,
    /// The library heap `(base, len)`: page-aligned, inside `heap_map` or `shm`.
    heap_at: (usize, usize),
    /// The heap's memory when it is a private mapping (no node sharing).
    _heap_map: Option<Mapping>,
    /// The heap's memory when ranks of this node share it (`FH_SHM`).
    shm: Option<SharedHeaps>,
    /// Per rank: where its library heap appears in *our* address space when it is on
    /// this node and mapped here (puts/gets to it are then plain copies).
    peer_heaps: Vec<Option<usize>>,
    /// Per rank: its process id when it is a node peer we reach with the kernel's
    /// single copy (`process_vm_readv`/`writev`), else 0.
    cma: Vec<i32>,
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
    heap_locked: bool,
    heap_win: H<ffi::MPI_Win>,
    dyn_win: H<ffi::MPI_Win>,
    /// What this rank attached to `dyn_win` (disjoint, page-aligned; `attach`).
    attach: Mutex<attach::AttachMap>,
    /// False for a 1-rank communicator: no windows, all RMA is local copies.
    windows: bool,
    remote_heaps: Vec<(usize, usize)>,
    /// Windows used towards each rank (WIN_* bits); never cleared, so a flush always
    /// covers every window an operation may have used.
    used: Vec<AtomicU8>,
    recv: Mutex<RecvState>,
    send: Mutex<SendState>,
    barrier: Mutex<Option<H<ffi::MPI_Request>>>,
    /// `MPI_Iallreduce(MAX)` of three words in flight (FH_BARRIER=mpi): request and
    /// the in/out buffers it uses (boxed: they must not move while it runs).
    max3: Mutex<Option<Max3>>,
    /// Held around MPI calls when the thread level is below MULTIPLE.
    serial: Option<ReentrantMutex<()>>,
    max_long: usize,
    verbose: bool,
    finalized: AtomicBool,
    /// Owned sends not yet complete (`send.reqs.len()`, readable without the lock).
    sends_pending: AtomicUsize,
    /// Recycled small frame buffers (bounded: at most POOL_MAX of at most POOL_BUF).
    pool: Mutex<Vec<Vec<u8>>>,
}

/// A heap's `(base, len)` with the accessor names of [`Mapping`].
struct HeapAt(usize, usize);
impl HeapAt {
    fn addr(&self) -> usize {
        self.0
    }
    fn len(&self) -> usize {
        self.1
    }
}

/// The library heaps of the ranks on this node, in one MPI shared-memory window
/// (`MPI_Win_allocate_shared` on the node's communicator), so each rank sees the
/// others' heaps in its own address space and a put or get to them is a memory copy
/// (GASNet's PSHM idea). The heap window of `MPI_Win_create` is still created over
/// the same memory for ranks on other nodes.
///
/// Guarantees: `base` is page-aligned and `[base, base + len)` lies in this rank's
/// segment; `views[i]` is where node member `members[i]`'s segment starts in our
/// address space. Freed once, at finalize, after the windows over it.
struct SharedHeaps {
    win: H<ffi::MPI_Win>,
    node: H<ffi::MPI_Comm>,
    raw: usize,
    base: usize,
    len: usize,
    /// Ranks (of the conduit's communicator) on this node, and their segments here.
    members: Vec<usize>,
    views: Vec<usize>,
}

impl SharedHeaps {
    fn new(comm: ffi::MPI_Comm, heap_size: usize) -> Result<SharedHeaps> {
        let page = os::page_size();
        let len = os::page_span(0, heap_size).1.max(page);
        let (node, members) = node_members(comm)?;
        // SAFETY (whole block): plain MPI calls on a valid communicator with
        // out-parameters that live on this stack frame; every handle created is
        // either returned (and freed at finalize) or freed on the error path.
        unsafe {
            let free_node = |mut n: ffi::MPI_Comm| {
                ffi::MPI_Comm_free(&mut n);
            };
            // Shared segments live in a tmpfs (/dev/shm): one that is too small gives
            // SIGBUS on first touch, not an error, so check the room first. Every
            // rank of the node must make the same choice (the allocation is
            // collective), hence the reduction.
            let members_n = members.len() as c_int;
            let need = (len + page) as u64 * members_n as u64 * 2;
            let room = os::tmpfs_available("/dev/shm").unwrap_or(u64::MAX);
            let ok_here: c_int = (room >= need) as c_int;
            let mut ok_all: c_int = 0;
            let rc = ffi::PMPI_Allreduce(
                &ok_here as *const c_int as *const c_void,
                &mut ok_all as *mut c_int as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                ffi::RSMPI_MIN,
                node,
            );
            if rc != ffi::MPI_SUCCESS as c_int || ok_all == 0 {
                free_node(node);
                bail!(
                    NoMemory,
                    "node-shared heaps need {} in /dev/shm, {} is free on some rank of this \
                     node: enlarge /dev/shm, or set FH_SHM=0",
                    mib(need),
                    mib(room)
                );
            }
            let mut info: ffi::MPI_Info = std::mem::zeroed();
            ffi::MPI_Info_create(&mut info);
            ffi::MPI_Info_set(info, c"alloc_shared_noncontig".as_ptr(), c"true".as_ptr());
            let mut raw: *mut c_void = std::ptr::null_mut();
            let mut win: ffi::MPI_Win = std::mem::zeroed();
            let rc = ffi::MPI_Win_allocate_shared(
                (len + page) as ffi::MPI_Aint,
                1,
                info,
                node,
                &mut raw as *mut *mut c_void as *mut c_void,
                &mut win,
            );
            ffi::MPI_Info_free(&mut info);
            if let Err(e) = check(rc, || "MPI_Win_allocate_shared (library heaps)".into()) {
                free_node(node);
                return Err(e);
            }
            ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN);
            let raw = raw as usize;
            let base = (raw + page - 1) & !(page - 1);
            // Where the segments of this node's ranks are here.
            let n = members_n;
            let mut views = Vec::with_capacity(n as usize);
            let mut bad = None;
            for q in 0..n {
                let (mut sz, mut du, mut p): (ffi::MPI_Aint, c_int, *mut c_void) =
                    (0, 0, std::ptr::null_mut());
                let rc = ffi::MPI_Win_shared_query(
                    win,
                    q,
                    &mut sz,
                    &mut du,
                    &mut p as *mut *mut c_void as *mut c_void,
                );
                if rc != ffi::MPI_SUCCESS as c_int || (sz as usize) < len + page {
                    bad.get_or_insert(crate::err!(
                        Mpi,
                        "MPI_Win_shared_query({}) gave {} bytes",
                        q,
                        sz
                    ));
                }
                views.push(p as usize);
            }
            if let Some(e) = bad {
                ffi::MPI_Win_free(&mut win);
                free_node(node);
                return Err(e);
            }
            Ok(SharedHeaps {
                win: H(win),
                node: H(node),
                raw,
                base,
                len,
                members,
                views,
            })
        }
    }

    /// # Safety
    /// Once, after no window over the heap remains and no access to it can come.
    unsafe fn free(&self, note: &mut impl FnMut(Result<()>)) {
        let (mut w, mut c) = (self.win.0, self.node.0);
        // SAFETY: handles we created; the caller's contract says nobody uses them.
        unsafe {
            note(check(ffi::MPI_Win_free(&mut w), || {
                "MPI_Win_free (shared heaps)".into()
            }));
            note(check(ffi::MPI_Comm_free(&mut c), || {
                "MPI_Comm_free (node)".into()
            }));
        }
    }
}

/// Decide, together with the node, whether node peers reach each other with the
/// kernel's single copy: every rank probes every node peer's heap (a known mapped
/// address) and the node takes the minimum, so either all pairs use it or none.
/// `all` is the start-up table (`WORDS` per rank). Returns per-rank pids and a note.
fn single_copy_peers(comm: ffi::MPI_Comm, rank: usize, all: &[u64]) -> (Vec<i32>, String) {
    let size = all.len() / WORDS;
    let Ok((node, members)) = node_members(comm) else {
        return (
            vec![0; size],
            "DISABLED (cannot tell which ranks share this node)".into(),
        );
    };
    let mut ok_here: c_int = 1;
    let mut why = String::new();
    for &r in members.iter().filter(|&&r| r != rank) {
        let (pid, heap) = (all[WORDS * r + 3] as i32, all[WORDS * r] as usize);
        let mut probe = 0u64;
        if let Err(e) = os::vm_copy(
            pid,
            os::VmDir::Read,
            heap,
            &mut probe as *mut u64 as usize,
            8,
        ) {
            ok_here = 0;
            why = format!("rank {} (pid {}) not reachable: {:?}", r, pid, e);
            break;
        }
    }
    let mut ok_all: c_int = 0;
    // SAFETY: one int in, one int out, on the node communicator we own.
    let rc = unsafe {
        ffi::PMPI_Allreduce(
            &ok_here as *const c_int as *const c_void,
            &mut ok_all as *mut c_int as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            ffi::RSMPI_MIN,
            node,
        )
    };
    let mut node = node;
    // SAFETY: the communicator node_members made for us.
    unsafe { ffi::MPI_Comm_free(&mut node) };
    if rc != ffi::MPI_SUCCESS as c_int || ok_all == 0 {
        let why = if why.is_empty() {
            "a node peer cannot reach its peers".into()
        } else {
            why
        };
        return (
            vec![0; size],
            format!("DISABLED ({}; Yama ptrace_scope or a container without CAP_SYS_PTRACE?): node peers' memory outside the heap goes through firehose", why),
        );
    }
    let mut pids = vec![0; size];
    for &r in members.iter().filter(|&&r| r != rank) {
        pids[r] = all[WORDS * r + 3] as i32;
    }
    (
        pids,
        format!(
            "on for {} node peers (process_vm_readv/writev): put/get to any of their addresses without their CPU",
            members.len() - 1
        ),
    )
}

/// The ranks of `comm` that share this node (`MPI_COMM_TYPE_SHARED`), and the node
/// communicator (the caller frees it).
fn node_members(comm: ffi::MPI_Comm) -> Result<(ffi::MPI_Comm, Vec<usize>)> {
    // SAFETY: plain MPI calls with out-parameters on this frame; groups are freed.
    unsafe {
        let mut node: ffi::MPI_Comm = std::mem::zeroed();
        check(
            ffi::MPI_Comm_split_type(
                comm,
                ffi::RSMPI_COMM_TYPE_SHARED as c_int,
                0,
                ffi::RSMPI_INFO_NULL,
                &mut node,
            ),
            || "MPI_Comm_split_type(SHARED)".into(),
        )?;
        let mut n: c_int = 0;
        ffi::MPI_Comm_size(node, &mut n);
        let (mut g_node, mut g_comm) = (std::mem::zeroed(), std::mem::zeroed());
        ffi::MPI_Comm_group(node, &mut g_node);
        ffi::MPI_Comm_group(comm, &mut g_comm);
        let local: Vec<c_int> = (0..n).collect();
        let mut members = vec![0 as c_int; n as usize];
        let rc =
            ffi::MPI_Group_translate_ranks(g_node, n, local.as_ptr(), g_comm, members.as_mut_ptr());
        ffi::MPI_Group_free(&mut g_node);
        ffi::MPI_Group_free(&mut g_comm);
        if let Err(e) = check(rc, || "MPI_Group_translate_ranks".into()) {
            ffi::MPI_Comm_free(&mut node);
            return Err(e);
        }
        Ok((node, members.iter().map(|&m| m as usize).collect()))
    }
}

fn u8t() -> ffi::MPI_Datatype {
    // SAFETY: reading an extern constant of rsmpi's C shim.
    unsafe { ffi::RSMPI_UINT8_T }
}

impl MpiConduit {
    /// Create the conduit on `comm` (collective over `comm`). `max_frame` is the
    /// largest frame the layer above will send.
    pub fn new(comm: ffi::MPI_Comm, cfg: &Config, max_frame: usize) -> Result<MpiConduit> {
        let level = boot::query_thread();
        let thread_multiple = level == ThreadLevel::Multiple;
        // SAFETY (whole block): plain MPI calls on handles we created or were given;
        // every out-pointer refers to a local of the right type.
        unsafe {
            agree::validate_comm(comm)?;
            let mut am_comm: ffi::MPI_Comm = std::mem::zeroed();
            check(ffi::MPI_Comm_dup(comm, &mut am_comm), || {
                "MPI_Comm_dup".into()
            })?;
            let mut rma_comm: ffi::MPI_Comm = std::mem::zeroed();
            check(ffi::MPI_Comm_dup(comm, &mut rma_comm), || {
                "MPI_Comm_dup".into()
            })?;
            // The interposed blocking MPI calls' own barriers (`interop`).
            let mut prog_comm: ffi::MPI_Comm = std::mem::zeroed();
            check(ffi::MPI_Comm_dup(comm, &mut prog_comm), || {
                "MPI_Comm_dup".into()
            })?;
            for c in [am_comm, rma_comm, prog_comm] {
                check(
                    ffi::MPI_Comm_set_errhandler(c, ffi::RSMPI_ERRORS_RETURN),
                    || "MPI_Comm_set_errhandler".into(),
                )?;
            }
            let (mut r, mut s) = (0, 0);
            check(ffi::MPI_Comm_rank(am_comm, &mut r), || {
                "MPI_Comm_rank".into()
            })?;
            check(ffi::MPI_Comm_size(am_comm, &mut s), || {
                "MPI_Comm_size".into()
            })?;
            let (rank, size) = (r as usize, s as usize);

            // A 1-rank communicator needs no windows (every access is to self and is
            // a memory copy); Open MPI 4.1's osc/rdma cannot create them there anyway.
            let windows = size > 1;
            let shm = if windows && cfg.shm {
                match SharedHeaps::new(rma_comm, cfg.heap_size) {
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
            let (heap_map, heap_at) = match &shm {
                Some(sh) => (None, (sh.base, sh.len)),
                None => {
                    let m = Mapping::new(cfg.heap_size)?;
                    let at = (m.addr(), m.len());
                    (Some(m), at)
                }
            };
            let heap = HeapAt(heap_at.0, heap_at.1);
            let heap_locked = cfg.pin == Pin::Mlock && os::mlock(heap.addr(), heap.len()).is_ok();
            if cfg.pin == Pin::Mlock && !heap_locked && cfg.verbose {
                eprintln!(
                    "firehose[{}]: could not mlock the {}-byte heap; continuing unlocked",
                    rank,
                    heap.len()
                );
            }

            let mut heap_win: ffi::MPI_Win = ffi::RSMPI_WIN_NULL;
            let mut dyn_win: ffi::MPI_Win = ffi::RSMPI_WIN_NULL;
            if windows {
                let made = (|| -> Result<()> {
                    check(
                        ffi::MPI_Win_create(
                            heap.addr() as *mut c_void,
                            heap.len() as ffi::MPI_Aint,
                            1,
                            ffi::RSMPI_INFO_NULL,
                            rma_comm,
                            &mut heap_win,
                        ),
                        || "MPI_Win_create (library heap)".into(),
                    )?;
                    check(
                        ffi::MPI_Win_create_dynamic(ffi::RSMPI_INFO_NULL, rma_comm, &mut dyn_win),
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
                if let Err(mut e) = made {
                    e.msg.push_str(&shm_hint());
                    for c in [am_comm, rma_comm, prog_comm] {
                        let mut c = c;
                        ffi::MPI_Comm_free(&mut c);
                    }
                    if heap_locked {
                        os::munlock(heap.addr(), heap.len());
                    }
                    return Err(e);
                }
            }

            // Heap base, length, and (when shared) where the shared segment starts,
            // so a node peer can find our heap inside its view of the segment.
            let raw = shm.as_ref().map_or(0, |sh| sh.raw);
            // Node peers may read and write us with the kernel's single copy; the
            // allgather below is the barrier between this and their probes.
            os::allow_single_copy_peers();
            let mine = [
                heap.addr() as u64,
                heap.len() as u64,
                raw as u64,
                libc::getpid() as u64,
            ];
            let mut all = vec![0u64; WORDS * size];
            check(
                ffi::PMPI_Allgather(
                    mine.as_ptr() as *const c_void,
                    8 * WORDS as c_int,
                    u8t(),
                    all.as_mut_ptr() as *mut c_void,
                    8 * WORDS as c_int,
                    u8t(),
                    rma_comm,
                ),
                || "MPI_Allgather (heap addresses)".into(),
            )?;
            let remote_heaps: Vec<(usize, usize)> = all
                .chunks(WORDS)
                .map(|c| (c[0] as usize, c[1] as usize))
                .collect();
            let mut peer_heaps = vec![None; size];
            if let Some(sh) = &shm {
                for (&r, &view) in sh.members.iter().zip(&sh.views) {
                    let c = &all[WORDS * r..WORDS * r + WORDS];
                    // Their heap starts (base - raw) bytes into their segment.
                    peer_heaps[r] = Some(view + (c[0] - c[2]) as usize);
                }
            }

            let (cma, mut cma_note) = if cfg.cma && windows {
                single_copy_peers(rma_comm, rank, &all)
            } else {
                (vec![0; size], "off (FH_CMA=0)".into())
            };
            let cma_any = shm.is_some() && cma.iter().any(|&p| p != 0);
            if !cma_any && cma.iter().any(|&p| p != 0) {
                cma_note = format!(
                    "{}; without node-shared heaps (FH_SHM=0) only firehose-pinned and registered memory is copied this way, after firehose made it accessible",
                    cma_note
                );
            }
            // Open MPI's dynamic windows hold a fixed number of attachments.
            let attach_cap = (boot::BUILT_FOR == "openmpi")
                .then(|| boot::ompi_max_attach().unwrap_or(OMPI_MAX_ATTACH).max(2));
            let n = cfg.am_recv_buffers;
            let recv = RecvState {
                reqs: vec![ffi::RSMPI_REQUEST_NULL; n],
                bufs: (0..n).map(|_| vec![0u8; PREFIX + max_frame]).collect(),
                hint: 0,
                idle_polls: 0,
                indices: vec![0; n],
                statuses: vec![std::mem::zeroed(); n],
                posted: false,
            };
            let c = MpiConduit {
                caps: Caps {
                    name: "mpi",
                    thread_multiple,
                    max_frame,
                    frame_headroom: PREFIX,
                    atomics: true,
                    // Region mode: MPI_Win_attach takes any range, and Open MPI's
                    // osc/rdma holds at most 64 attachments per dynamic window (one
                    // per page would exhaust it); 16 are left for fh_mem_register.
                    fh_mode: FhMode::Region,
                    max_registrations: attach_cap.map(|c| c - reg_share(c)),
                    user_registrations: attach_cap.map(reg_share),
                    local_registration: false,
                },
                rank,
                size,
                am_comm: H(am_comm),
                rma_comm: H(rma_comm),
                prog_comm: H(prog_comm),
                heap_at,
                _heap_map: heap_map,
                shm,
                all_native: !windows
                    || peer_heaps
                        .iter()
                        .enumerate()
                        .all(|(r, v)| r == rank || v.is_some()),
                peer_heaps,
                cma,
                cma_any,
                cma_note,
                guess: (0..GUESS_SLOTS).map(|_| AtomicU64::new(0)).collect(),
                heap_locked,
                heap_win: H(heap_win),
                dyn_win: H(dyn_win),
                attach: Mutex::new(attach::AttachMap::new(os::page_size(), attach_cap)),
                windows,
                remote_heaps,
                used: (0..size).map(|_| AtomicU8::new(0)).collect(),
                recv: Mutex::new(recv),
                send: Mutex::new(SendState {
                    reqs: Vec::new(),
                    keep: Vec::new(),
                    borrowed: HashMap::new(),
                    next_id: 1,
                    long_seq: vec![0; size],
                }),
                barrier: Mutex::new(None),
                max3: Mutex::new(None),
                // SINGLE/FUNNELED: the program promises one thread calls MPI (and we start no
                // thread), so no lock is needed. SERIALIZED: threads may call us one
                // at a time as far as they know, so we serialise our own MPI calls.
                serial: (level == ThreadLevel::Serialized).then(|| ReentrantMutex::new(())),
                max_long: cfg.am_max_long,
                verbose: cfg.verbose,
                finalized: AtomicBool::new(false),
                sends_pending: AtomicUsize::new(0),
                pool: Mutex::new(Vec::new()),
            };
            {
                let mut rv = c.recv.lock();
                for i in 0..n {
                    c.post(&mut rv, i)?;
                }
                rv.posted = true;
            }
            Ok(c)
        }
    }

    /// `Conduit::put_sync` without dynamic dispatch (the blocking fast path).
    ///
    /// # Safety
    /// As `Conduit::put_sync`.
    #[inline]
    pub unsafe fn put_now(
        &self,
        rank: usize,
        raddr: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(true, rank, raddr, src as *mut u8, len, true) }
    }

    /// `Conduit::get_sync` without dynamic dispatch.
    ///
    /// # Safety
    /// As `Conduit::get_sync`.
    #[inline]
    pub unsafe fn get_now(
        &self,
        rank: usize,
        raddr: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(false, rank, raddr, dst, len, true) }
    }

    /// The process id of `rank` when it is reached with the kernel's single copy.
    #[inline]
    pub fn single_copy_pid(&self, rank: usize) -> Option<i32> {
        if !self.cma_any {
            return None;
        }
        self.pid_for_copy(rank)
    }

    #[inline]
    fn pid_for_copy(&self, rank: usize) -> Option<i32> {
        match self.cma.get(rank) {
            Some(&p) if p != 0 => Some(p),
            _ => None,
        }
    }

    /// Copy to or from any address of node peer `rank` through the kernel, complete
    /// on return. Errors: `FH_ERR_ACCESS` for memory the peer does not have mapped
    /// with the needed protection (the peer is never touched or interrupted).
    pub fn single_copy(
        &self,
        rank: usize,
        put: bool,
        raddr: usize,
        local: usize,
        len: usize,
    ) -> Result<()> {
        let Some(pid) = self.pid_for_copy(rank) else {
            bail!(
                Unsupported,
                "rank {} is not reached with the kernel's single copy",
                rank
            );
        };
        let dir = if put {
            os::VmDir::Write
        } else {
            os::VmDir::Read
        };
        os::vm_copy(pid, dir, raddr, local, len).map_err(|e| match e {
            os::VmError::Fault => {
                let need = if put {
                    os::Need::ReadWrite
                } else {
                    os::Need::Read
                };
                let why = os::Maps::of_pid(pid)
                    .and_then(|m| m.why_not(raddr, len, need))
                    .unwrap_or("not mapped there with the protection the access needs");
                crate::err!(
                    Access,
                    "rank {} refused a {} [{:#x}, +{}): the memory is {} there",
                    rank,
                    if put { "put to" } else { "get from" },
                    raddr,
                    len,
                    why
                )
            }
            os::VmError::Gone => crate::err!(Transport, "rank {} (pid {}) has exited", rank, pid),
            other => crate::err!(
                Transport,
                "single copy to rank {} failed: {:?}",
                rank,
                other
            ),
        })
    }

    /// True when `rank` is a process of this node that no longer exists (only
    /// known for node peers reached with the single copy; others: false).
    pub fn peer_exited(&self, rank: usize) -> bool {
        let Some(pid) = self.pid_for_copy(rank) else {
            return false;
        };
        // SAFETY: signal 0 only checks that the process exists; nothing is sent.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// `fh_config_print`'s line on the single-copy path.
    pub fn single_copy_note(&self) -> &str {
        &self.cma_note
    }

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

    fn post(&self, rv: &mut RecvState, i: usize) -> Result<()> {
        let len = rv.bufs[i].len() as c_int;
        let buf = rv.bufs[i].as_mut_ptr() as *mut c_void;
        // SAFETY: bufs[i] stays allocated and untouched while reqs[i] is active
        // (Recv invariant); the request slot is ours.
        let rc = unsafe {
            ffi::MPI_Irecv(
                buf,
                len,
                u8t(),
                ffi::RSMPI_ANY_SOURCE,
                TAG_AM,
                self.am_comm.0,
                &mut rv.reqs[i],
            )
        };
        check(rc, || "MPI_Irecv (AM receive buffer)".into())
    }

    /// Which window and displacement address `raddr` on `rank` falls in.
    #[inline]
    fn resolve(&self, rank: usize, raddr: usize, len: usize) -> (ffi::MPI_Win, ffi::MPI_Aint, u8) {
        let (base, hlen) = self.remote_heaps[rank];
        if raddr >= base
            && raddr.wrapping_add(len) <= base + hlen
            && raddr.checked_add(len).is_some()
        {
            (self.heap_win.0, (raddr - base) as ffi::MPI_Aint, WIN_HEAP)
        } else {
            (self.dyn_win.0, raddr as ffi::MPI_Aint, WIN_DYN)
        }
    }

    /// One MPI call of the attachment map ([`attach`]).
    fn attach_step(&self, st: attach::Step) -> Result<()> {
        match st {
            attach::Step::Attach { start, end } => {
                // SAFETY: attaching local memory a user of the map owns; MPI only
                // records the range.
                let rc = unsafe {
                    ffi::MPI_Win_attach(
                        self.dyn_win.0,
                        start as *mut c_void,
                        (end - start) as ffi::MPI_Aint,
                    )
                };
                check(rc, || format!("MPI_Win_attach([{:#x}, {:#x}))", start, end))
            }
            attach::Step::Detach { start, end } => {
                // SAFETY: detaching a range the map attached before.
                let rc = unsafe { ffi::MPI_Win_detach(self.dyn_win.0, start as *const c_void) };
                check(rc, || format!("MPI_Win_detach([{:#x}, {:#x}))", start, end))
            }
        }
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

    /// Keep `buf` alive until `req` completes (most small sends complete at once:
    /// then nothing is kept).
    fn keep_until_done(
        &self,
        s: &mut SendState,
        mut req: ffi::MPI_Request,
        buf: Vec<u8>,
    ) -> Result<()> {
        let mut flag: c_int = 0;
        // SAFETY: testing a request we own.
        let rc = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(rc, || "MPI_Test (AM send)".into())?;
        if flag == 0 {
            s.reqs.push(req);
            s.keep.push(buf);
            self.sends_pending.store(s.reqs.len(), Ordering::Release);
        } else {
            self.recycle(buf);
        }
        Ok(())
    }

    fn recycle(&self, buf: Vec<u8>) {
        if buf.capacity() <= POOL_BUF {
            let mut p = self.pool.lock();
            if p.len() < POOL_MAX {
                p.push(buf);
            }
        }
    }

    /// Complete owned sends that finished.
    fn progress_sends(&self, s: &mut SendState) -> Result<()> {
        if s.reqs.is_empty() {
            return Ok(());
        }
        let n = s.reqs.len();
        let mut out: c_int = 0;
        let mut idx = vec![0 as c_int; n];
        // SAFETY: reqs holds n requests; idx has room for n indices; statuses ignored.
        let rc = unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                s.reqs.as_mut_ptr(),
                &mut out,
                idx.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        check(rc, || "MPI_Testsome (AM sends)".into())?;
        if out > 0 && out as usize <= n {
            let mut done: Vec<usize> = idx[..out as usize].iter().map(|&i| i as usize).collect();
            done.sort_unstable_by(|a, b| b.cmp(a));
            for i in done {
                s.reqs.swap_remove(i);
                let buf = s.keep.swap_remove(i);
                self.recycle(buf);
            }
            self.sends_pending.store(s.reqs.len(), Ordering::Release);
        }
        Ok(())
    }
    /// Issue a put (`is_put`) or get, optionally flushing just the window it used,
    /// under one serialisation guard.
    ///
    /// # Safety
    /// `local` must be valid (readable for puts, writable for gets) for `len` bytes
    /// until the operation completes; `raddr` must be accessible on `rank`.
    #[inline]
    unsafe fn rma(
        &self,
        is_put: bool,
        rank: usize,
        raddr: usize,
        local: *mut u8,
        len: usize,
        sync: bool,
    ) -> Result<()> {
        // The layer above validated rank; out of range here is a bug, not user input.
        debug_assert!(rank < self.size);
        if rank == self.rank {
            // SAFETY: our own memory; the layer above checked raddr is registered here
            // and local is valid for len bytes (this function's contract).
            unsafe {
                if is_put {
                    std::ptr::copy(local as *const u8, raddr as *mut u8, len)
                } else {
                    std::ptr::copy(raddr as *const u8, local, len)
                }
            }
            return Ok(());
        }
        if let Some(view) = self.peer_heaps[rank] {
            let (base, hlen) = self.remote_heaps[rank];
            if raddr >= base && raddr.checked_add(len).is_some_and(|e| e <= base + hlen) {
                let at = view + (raddr - base);
                // SAFETY: `at` is the same heap bytes mapped into this process (MPI
                // shared window of this node), in range per the check above; `local`
                // is valid for len bytes (contract). The copy is complete on return,
                // so a later flush has nothing to wait for; the release fence keeps
                // later stores (a notification flag) from becoming visible first.
                unsafe {
                    if is_put {
                        std::ptr::copy(local as *const u8, at as *mut u8, len)
                    } else {
                        std::ptr::copy(at as *const u8, local, len)
                    }
                }
                fence(Ordering::Release);
                return Ok(());
            }
        }
        let (win, disp, bit) = self.resolve(rank, raddr, len);
        if bit == WIN_DYN && self.pid_for_copy(rank).is_some() {
            // User memory of a node peer: the kernel copies it and checks it. Open
            // MPI's one-sided path over the same copy retries an EFAULT for ever (a
            // peer that unmapped memory it had exposed would spin us), MPICH's
            // UCX aborts; here it is FH_ERR_ACCESS.
            let r = self.single_copy(rank, is_put, raddr, local as usize, len);
            fence(Ordering::Release);
            return r;
        }
        let _s = self.serial();
        let dt = u8t();
        let mut off = 0usize;
        let mut retry_until = None;
        loop {
            let n = (len - off).min(i32::MAX as usize) as c_int;
            // SAFETY: local is valid for len bytes until completion (contract); raddr
            // is accessible on rank; n fits an int.
            let rc = unsafe {
                let d = disp + off as ffi::MPI_Aint;
                if is_put {
                    ffi::MPI_Put(
                        local.add(off) as *const c_void,
                        n,
                        dt,
                        rank as c_int,
                        d,
                        n,
                        dt,
                        win,
                    )
                } else {
                    ffi::MPI_Get(
                        local.add(off) as *mut c_void,
                        n,
                        dt,
                        rank as c_int,
                        d,
                        n,
                        dt,
                        win,
                    )
                }
            };
            if rc != ffi::MPI_SUCCESS as c_int {
                if bit == WIN_DYN && range_retry(rc, &mut retry_until) {
                    continue;
                }
                return Err(rma_error(rc, is_put, n as usize, rank, raddr + off));
            }
            off += n as usize;
            if off >= len {
                break;
            }
        }
        if sync {
            // SAFETY: flushing the window just used, inside its lock_all epoch.
            let rc = unsafe { ffi::PMPI_Win_flush(rank as c_int, win) };
            check(rc, || format!("MPI_Win_flush(rank {})", rank))?;
        } else if self.used[rank].load(Ordering::Relaxed) & bit == 0 {
            self.used[rank].fetch_or(bit, Ordering::Relaxed);
        }
        Ok(())
    }
    /// Start `MPI_Iallreduce(MPI_MAX)` of `v` over the communicator.
    pub fn max3_start(&self, v: [u64; 3]) -> Result<()> {
        let _s = self.serial();
        let mut g = self.max3.lock();
        if g.is_some() {
            bail!(
                State,
                "an MPI barrier is already in progress on this context"
            );
        }
        let mut buf = Box::new([v[0], v[1], v[2], 0, 0, 0]);
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: the boxed buffer is kept with the request until it completes.
        let rc = unsafe {
            ffi::MPI_Iallreduce(
                buf.as_ptr() as *const c_void,
                buf.as_mut_ptr().add(3) as *mut c_void,
                3,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_MAX,
                self.am_comm.0,
                &mut req,
            )
        };
        check(rc, || "MPI_Iallreduce (barrier)".into())?;
        *g = Some((H(req), buf));
        Ok(())
    }

    /// Test the reduction `max3_start` began; its result once complete.
    pub fn max3_test(&self) -> Result<Option<[u64; 3]>> {
        let _s = self.serial();
        let mut g = self.max3.lock();
        let Some((req, buf)) = g.as_mut() else {
            bail!(State, "no MPI barrier in progress");
        };
        let mut flag: c_int = 0;
        // SAFETY: testing the request we own.
        check(
            unsafe { ffi::MPI_Test(&mut req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            || "MPI_Test (barrier)".into(),
        )?;
        if flag == 0 {
            return Ok(None);
        }
        let r = [buf[3], buf[4], buf[5]];
        *g = None;
        Ok(Some(r))
    }

    /// Enter MPI's progress engine once (an `MPI_Iprobe` on the AM communicator).
    fn nudge_mpi(&self) {
        let _s = self.serial();
        let mut flag: c_int = 0;
        // SAFETY: probing our own communicator; the status is ignored.
        unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                self.am_comm.0,
                &mut flag,
                ffi::RSMPI_STATUS_IGNORE,
            );
        }
    }

    /// One `MPI_Compare_and_swap` + flush on the word; returns the old value.
    fn cas_once(&self, rank: usize, raddr: usize, w: Width, compare: u64, new: u64) -> Result<u64> {
        let (win, disp, _) = self.resolve(rank, raddr, w.bytes());
        let _s = self.serial();
        let (c, n) = (w.mask(compare), w.mask(new));
        let mut out = 0u64;
        // SAFETY: the three buffers are locals valid for 8 bytes; for 32-bit words
        // the value sits in the low half of a little-endian u64 (checked below);
        // raddr is accessible on rank (caller's contract); we flush before reading.
        unsafe {
            let dt = match w {
                Width::W32 => ffi::RSMPI_UINT32_T,
                Width::W64 => ffi::RSMPI_UINT64_T,
            };
            let rc = ffi::MPI_Compare_and_swap(
                &n as *const u64 as *const c_void,
                &c as *const u64 as *const c_void,
                &mut out as *mut u64 as *mut c_void,
                dt,
                rank as c_int,
                disp,
                win,
            );
            check(rc, || {
                format!("MPI_Compare_and_swap(rank {}, {:#x})", rank, raddr)
            })?;
            let rc = ffi::PMPI_Win_flush(rank as c_int, win);
            check(rc, || format!("MPI_Win_flush(rank {})", rank))?;
        }
        Ok(w.mask(out))
    }

    /// Hand the frame that completed in receive `i` to `sink` (with its long payload,
    /// if any), then repost the receive. Returns how many frames were delivered (0 for
    /// a malformed one, which is counted and dropped).
    fn deliver(
        &self,
        rv: &mut RecvState,
        i: usize,
        st: &ffi::MPI_Status,
        sink: &mut Sink<'_>,
    ) -> Result<usize> {
        let src = st.MPI_SOURCE as usize;
        let mut count: c_int = 0;
        // SAFETY: st is a status MPI filled in for a completed receive.
        unsafe { ffi::MPI_Get_count(st, u8t(), &mut count) };
        let count = (count.max(0) as usize).min(rv.bufs[i].len());
        let buf = &mut rv.bufs[i][..count];
        let ok =
            count >= PREFIX && u16::from_le_bytes([buf[0], buf[1]]) == MAGIC && src < self.size;
        let mut delivered = 0;
        if !ok {
            // Counted by the layer above as a malformed frame.
            sink(src.min(self.size.saturating_sub(1)), &mut [], None);
            if self.verbose {
                eprintln!(
                    "firehose[{}]: dropped a malformed {}-byte AM frame from rank {}",
                    self.rank, count, src
                );
            }
        } else {
            let flags = u16::from_le_bytes([buf[2], buf[3]]);
            let tag = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
            let llen = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")) as usize;
            if flags & FLAG_LONG != 0 {
                if llen > self.max_long
                    || !(LONG_TAG_BASE..LONG_TAG_BASE + LONG_TAG_SPAN).contains(&tag)
                {
                    // Cannot know what to drain: refuse the frame (counted above).
                    sink(src, &mut [], None);
                } else {
                    let mut l = MpiLong {
                        c: self,
                        src,
                        tag: tag as c_int,
                        len: llen,
                        done: false,
                    };
                    sink(src, &mut buf[PREFIX..], Some(&mut l));
                    if !l.done {
                        let mut scratch = vec![0u8; llen];
                        // Drain the payload nobody wanted; an error here is reported but
                        // the receive buffer is still reposted.
                        if let Err(e) = l.recv_into(scratch.as_mut_ptr()) {
                            if self.verbose {
                                eprintln!("firehose[{}]: {}", self.rank, e);
                            }
                        }
                    }
                    delivered = 1;
                }
            } else {
                sink(src, &mut buf[PREFIX..], None);
                delivered = 1;
            }
        }
        self.post(rv, i)?;
        Ok(delivered)
    }
}

/// How long an origin retries an access the target's MPI refused as out of range.
/// The layer above only accesses ranges the target attached, so a refusal is the
/// target replacing attachments by their union ([`attach`]): two MPI calls.
const RANGE_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether to retry a dynamic-window access that failed with `rc`.
#[cold]
#[inline(never)]
fn range_retry(rc: c_int, until: &mut Option<std::time::Instant>) -> bool {
    let mut class: c_int = 0;
    // SAFETY: MPI_Error_class writes one int.
    unsafe { ffi::MPI_Error_class(rc, &mut class) };
    if class != ffi::MPI_ERR_RMA_RANGE as c_int {
        return false;
    }
    let now = std::time::Instant::now();
    let deadline = *until.get_or_insert(now + RANGE_RETRY);
    if now >= deadline {
        return false;
    }
    std::thread::yield_now();
    true
}

#[cold]
#[inline(never)]
fn rma_error(
    rc: c_int,
    is_put: bool,
    n: usize,
    rank: usize,
    at: usize,
) -> crate::runtime::error::Error {
    crate::err!(
        Mpi,
        "{} of {} bytes {} rank {} at {:#x} failed: {}",
        if is_put { "MPI_Put" } else { "MPI_Get" },
        n,
        if is_put { "to" } else { "from" },
        rank,
        at,
        boot::error_string(rc)
    )
}

struct MpiLong<'a> {
    c: &'a MpiConduit,
    src: usize,
    tag: c_int,
    len: usize,
    done: bool,
}

impl MpiLong<'_> {
    fn recv_into(&mut self, dst: *mut u8) -> Result<()> {
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: dst is writable for len bytes (caller's contract); len fits an int
        // (bounded by FH_AM_MAX_LONG <= i32::MAX, checked when the frame was parsed).
        let rc = unsafe {
            ffi::PMPI_Recv(
                dst as *mut c_void,
                self.len as c_int,
                u8t(),
                self.src as c_int,
                self.tag,
                self.c.am_comm.0,
                &mut st,
            )
        };
        self.done = true;
        check(rc, || {
            format!("MPI_Recv (long AM payload from rank {})", self.src)
        })
    }
}

impl LongIn for MpiLong<'_> {
    fn len(&self) -> usize {
        self.len
    }
    unsafe fn deliver_to(&mut self, dst: *mut u8) -> Result<()> {
        if self.done {
            bail!(State, "long payload already delivered");
        }
        self.recv_into(dst)
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

    fn register(&self, addr: usize, len: usize) -> Result<()> {
        self.live()?;
        if !self.windows {
            return Ok(());
        }
        let _s = self.serial();
        self.attach
            .lock()
            .register(addr, len, &mut |st| self.attach_step(st))
    }

    fn deregister(&self, addr: usize, len: usize) -> Result<()> {
        self.live()?;
        if !self.windows {
            return Ok(());
        }
        let _s = self.serial();
        self.attach
            .lock()
            .deregister(addr, len, &mut |st| self.attach_step(st))
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
        self.live()?;
        self.check_rank(dest)?;
        if frame.len() < PREFIX || frame.len() - PREFIX > self.caps.max_frame {
            bail!(
                Internal,
                "frame of {} bytes (with {} bytes headroom) does not fit the {}-byte AM buffers",
                frame.len(),
                PREFIX,
                self.caps.max_frame
            );
        }
        let _s = self.serial();
        let mut s = self.send.lock();
        let (tag, long_len) = match &long {
            Some(l) => {
                let len = match l {
                    LongSrc::Borrowed { len, .. } => *len,
                    LongSrc::Owned(v) => v.len(),
                };
                if len > self.max_long {
                    bail!(
                        InvalidArg,
                        "long payload of {} bytes exceeds FH_AM_MAX_LONG {}",
                        len,
                        self.max_long
                    );
                }
                let seq = s.long_seq[dest];
                s.long_seq[dest] = seq.wrapping_add(1);
                (LONG_TAG_BASE + seq % LONG_TAG_SPAN, len)
            }
            None => (0, 0),
        };
        // The sender left PREFIX bytes of headroom: fill them in place (no copy).
        let mut msg = frame;
        msg[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        msg[2..4].copy_from_slice(&(if long.is_some() { FLAG_LONG } else { 0 }).to_le_bytes());
        msg[4..8].copy_from_slice(&tag.to_le_bytes());
        msg[8..16].copy_from_slice(&(long_len as u64).to_le_bytes());
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: msg stays alive until the request completes: either the immediate
        // test below sees it complete, or it moves into `keep` with its request.
        let rc = unsafe {
            ffi::MPI_Isend(
                msg.as_ptr() as *const c_void,
                msg.len() as c_int,
                u8t(),
                dest as c_int,
                TAG_AM,
                self.am_comm.0,
                &mut req,
            )
        };
        check(rc, || format!("MPI_Isend (AM frame to rank {})", dest))?;
        self.keep_until_done(&mut s, req, msg)?;
        let mut id = None;
        if let Some(l) = long {
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            let (ptr, owned) = match l {
                LongSrc::Borrowed { ptr, .. } => (ptr, None),
                LongSrc::Owned(v) => (v.as_ptr(), Some(v)),
            };
            // SAFETY: a borrowed payload stays valid until send_done reports the
            // request complete (caller's contract); an owned one lives in `keep`.
            let rc = unsafe {
                ffi::MPI_Isend(
                    ptr as *const c_void,
                    long_len as c_int,
                    u8t(),
                    dest as c_int,
                    tag as c_int,
                    self.am_comm.0,
                    &mut req,
                )
            };
            check(rc, || {
                format!(
                    "MPI_Isend (long AM payload of {} bytes to rank {})",
                    long_len, dest
                )
            })?;
            match owned {
                Some(v) => self.keep_until_done(&mut s, req, v)?,
                None => {
                    let i = s.next_id;
                    s.next_id += 1;
                    s.borrowed.insert(i, req);
                    id = Some(i);
                }
            }
        }
        Ok(id)
    }

    fn frame_buffer(&self) -> Vec<u8> {
        self.pool
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(256))
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

    /// Every operation becomes `MPI_Compare_and_swap`: MPI promises atomicity only
    /// between accumulates of the *same* operation (`accumulate_ops`), so with one
    /// operation for everything, fetch&add racing swap racing compare&swap stays
    /// atomic. Fetch is CAS(g, g) (one round trip whatever g is); the others loop:
    /// read-guess, compute, CAS, retry with the value CAS returned.
    fn atomic(&self, rank: usize, raddr: usize, w: Width, op: AtomicOp) -> Result<u64> {
        self.live()?;
        self.check_rank(rank)?;
        if let Some(p) = self.native(rank, raddr, w.bytes()) {
            // SAFETY: a heap word mapped here, aligned (checked above us); with
            // all_native every rank reaches heap words only through cpu_atomic.
            return Ok(unsafe { super::cpu_atomic(p, w, op) });
        }
        if w == Width::W32 {
            // Every 32-bit operation is a 64-bit compare-and-swap loop on the aligned
            // word around it: Open MPI's shared-memory transport emulates 32-bit CAS as
            // lock + get + put, which is not atomic with our own CPU atomics below,
            // while its 64-bit operations are CPU atomics at the target.
            let base = raddr & !7;
            let sh = ((raddr & 4) * 8) as u32;
            loop {
                let cur = self.atomic(rank, base, Width::W64, AtomicOp::Fetch)?;
                let old = (cur >> sh) & 0xffff_ffff;
                let Some(new) = op.apply(old, Width::W32) else {
                    return Ok(old);
                };
                let want = (cur & !(0xffff_ffffu64 << sh)) | (new << sh);
                let got = self.atomic(
                    rank,
                    base,
                    Width::W64,
                    AtomicOp::Cas {
                        expected: cur,
                        desired: want,
                    },
                )?;
                if got == cur {
                    return Ok(old);
                }
            }
        }
        if rank == self.rank && boot::BUILT_FOR == "openmpi" {
            // Open MPI 4.1's osc/rdma crashes on an atomic aimed at the calling rank
            // (btl/vader's emulated compare-and-swap has no endpoint for self). That
            // emulation applies every remote operation *at the target* with CPU
            // atomics (btl_vader_sc_emu.c), so our own CPU atomic on the word is
            // atomic with them.
            // SAFETY: our own address, accessible (caller's contract) and aligned.
            let v = unsafe { super::cpu_atomic(raddr as *mut u8, w, op) };
            // Those remote operations are applied only when we enter MPI: a rank
            // hammering its own words must not starve its peers' operations on them.
            self.nudge_mpi();
            return Ok(v);
        }
        let slot = &self.guess[guess_slot(rank, raddr)];
        let mut guess = slot.load(Ordering::Relaxed);
        loop {
            let (compare, new) = match op {
                AtomicOp::Cas { expected, desired } => (expected, desired),
                AtomicOp::Fetch => (guess, guess),
                _ => (guess, op.apply(guess, w).unwrap_or(guess)),
            };
            let old = self.cas_once(rank, raddr, w, compare, new)?;
            let swapped = old == w.mask(compare);
            // Remember what the word holds now: the next operation's first guess.
            slot.store(if swapped { w.mask(new) } else { old }, Ordering::Relaxed);
            if swapped || matches!(op, AtomicOp::Cas { .. } | AtomicOp::Fetch) {
                return Ok(old);
            }
            guess = old;
        }
    }

    fn send_done(&self, id: SendId) -> Result<bool> {
        let _s = self.serial();
        let mut s = self.send.lock();
        let Some(req) = s.borrowed.get_mut(&id) else {
            return Ok(true);
        };
        let mut flag: c_int = 0;
        // SAFETY: testing a request we own.
        let rc = unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(rc, || "MPI_Test (long AM payload send)".into())?;
        if flag != 0 {
            s.borrowed.remove(&id);
        }
        Ok(flag != 0)
    }

    fn am_poll(&self, sink: &mut Sink<'_>) -> Result<usize> {
        if self.finalized.load(Ordering::Acquire) {
            return Ok(0);
        }
        let _s = self.serial();
        if self.sends_pending.load(Ordering::Acquire) > 0 {
            self.progress_sends(&mut self.send.lock())?;
        }
        let Some(mut rv) = self.recv.try_lock() else {
            return Ok(0);
        };
        let rv = &mut *rv;
        let n = rv.reqs.len();
        let mut delivered = 0;
        // Fast path: test the oldest receive, which usually gets the next message.
        // Bounded work per poll: at most one pass over the ring.
        for _ in 0..n {
            let i = rv.hint;
            let mut flag: c_int = 0;
            // SAFETY: zeroed MPI_Status is a valid out-parameter.
            let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            // SAFETY: testing the active receive request we own.
            let rc = unsafe { ffi::MPI_Test(&mut rv.reqs[i], &mut flag, &mut st) };
            check(rc, || "MPI_Test (AM receive)".into())?;
            if flag == 0 {
                break;
            }
            delivered += self.deliver(rv, i, &st, sink)?;
            rv.hint = (i + 1) % n;
        }
        // Slow path: MPI may complete receives out of posting order (seen with Open
        // MPI's ob1), so scan them all whenever the fast path comes up empty a few
        // times in a row. A message is therefore never stuck behind an idle head.
        if delivered == 0 {
            rv.idle_polls = rv.idle_polls.wrapping_add(1);
            if rv.idle_polls % SCAN_EVERY == 0 {
                let mut out: c_int = 0;
                // SAFETY: reqs, indices and statuses each hold n entries.
                let rc = unsafe {
                    ffi::MPI_Testsome(
                        n as c_int,
                        rv.reqs.as_mut_ptr(),
                        &mut out,
                        rv.indices.as_mut_ptr(),
                        rv.statuses.as_mut_ptr(),
                    )
                };
                check(rc, || "MPI_Testsome (AM receives)".into())?;
                if out > 0 && out as usize <= n {
                    for k in 0..out as usize {
                        let i = rv.indices[k] as usize;
                        let st = rv.statuses[k];
                        delivered += self.deliver(rv, i, &st, sink)?;
                    }
                }
            }
        } else {
            rv.idle_polls = 0;
        }
        Ok(delivered)
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
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: the request is stored until it completes.
        check(
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
        // SAFETY: testing the request we own.
        check(
            unsafe { ffi::MPI_Test(&mut req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            || "MPI_Test (barrier)".into(),
        )?;
        if flag != 0 {
            *b = None;
        }
        Ok(flag != 0)
    }

    fn finalize(&self) -> Result<()> {
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
        // SAFETY (whole block): tearing down handles this conduit created; the layer
        // above has quiesced (barrier) so no operation uses them any more.
        unsafe {
            let mut rv = self.recv.lock();
            if rv.posted {
                for r in rv.reqs.iter_mut() {
                    if *r != ffi::RSMPI_REQUEST_NULL {
                        ffi::MPI_Cancel(r);
                        ffi::PMPI_Wait(r, ffi::RSMPI_STATUS_IGNORE);
                    }
                }
                rv.posted = false;
            }
            let mut s = self.send.lock();
            let n = s.reqs.len();
            if n > 0 {
                note(check(
                    ffi::PMPI_Waitall(n as c_int, s.reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE),
                    || "MPI_Waitall (AM sends at finalize)".into(),
                ));
                s.reqs.clear();
                s.keep.clear();
            }
            for (_, mut r) in s.borrowed.drain() {
                ffi::PMPI_Wait(&mut r, ffi::RSMPI_STATUS_IGNORE);
            }
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
            for c in [self.am_comm, self.rma_comm, self.prog_comm] {
                let mut c = c.0;
                note(check(ffi::MPI_Comm_free(&mut c), || "MPI_Comm_free".into()));
            }
        }
        if self.heap_locked {
            os::munlock(self.heap_at.0, self.heap_at.1);
        }
        if let Some(sh) = &self.shm {
            // SAFETY: freed once, here, after every window over the heap was freed.
            unsafe { sh.free(&mut note) };
        }
        first
    }
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
