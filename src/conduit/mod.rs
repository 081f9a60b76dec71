//! The transport contract.
//!
//! A conduit moves bytes between ranks: it registers local memory so peers may
//! access it, initiates one-sided puts and gets that complete at a flush, and carries
//! active-message frames with an optional bulk ("long") payload. Everything above
//! (flow control, handler dispatch, access checks, the firehose algorithm) is written
//! once against [`Conduit`] and tested on the deterministic [`sim`] conduit.
//!
//! Guarantees every implementation gives:
//! - `put`/`get` are *initiated* by the call and complete (remotely for puts, locally
//!   for gets) no later than the next `flush(rank)`/`flush_all()` that starts after
//!   the call returned.
//! - A frame passed to `am_send` is delivered exactly once to the destination's
//!   `am_poll`, unless an error is returned.
//! - A long payload is handed to the receiver's sink together with its frame; the sink
//!   places it (zero-copy where the conduit can) or lets it be discarded.
//! - No call faults on a bad remote address: the conduit either refuses (sim, NIC
//!   protection) or relies on the layer above having validated it (MPI).

use crate::runtime::error::Result;

pub mod mpi;
pub mod sim;

/// What a conduit can do; the layers above adapt to it.
#[derive(Clone, Debug)]
pub struct Caps {
    pub name: &'static str,
    /// Several threads may call the conduit at once (MPI_THREAD_MULTIPLE or sim).
    pub thread_multiple: bool,
    /// Bytes a frame may carry (header + arguments + medium payload).
    pub max_frame: usize,
    /// Bytes the sender leaves free at the start of every frame for the conduit's own
    /// prefix (`am_send` frames include them; `am_poll` delivers frames without).
    pub frame_headroom: usize,
    /// Remote atomics are implemented.
    pub atomics: bool,
    /// The transport registers any range as cheaply as a page (seed 000 §3.3: the
    /// network decides): Firehose then pins regions unless the user chose pages.
    pub registers_regions: bool,
    /// Separate registrations firehose may hold at once (None: no limit).
    pub max_registrations: Option<usize>,
    /// Separate `fh_mem_register` ranges the conduit keeps room for (None: no limit).
    pub user_registrations: Option<usize>,
    /// How to get more of them (for the message when they are used up).
    pub registrations_fix: &'static str,
    /// The local side of a put/get must be registered too (a strict RDMA NIC).
    pub local_registration: bool,
    /// [`Conduit::reduce3_start`] is implemented (a non-blocking reduction).
    pub reduction: bool,
    /// The transport's own blocking calls can serve the library while they wait
    /// (the MPI conduit, through the interposed blocking MPI calls).
    pub interop: bool,
    /// Every rank is a process of its own whose waits may sleep on a futex in
    /// node-shared memory (`runtime::wait`); false where ranks share a thread (sim).
    pub sleep: bool,
}

/// A bulk payload to send with a frame.
pub enum LongSrc {
    /// The caller keeps the bytes alive and unchanged until `send_done` says so.
    Borrowed { ptr: *const u8, len: usize },
    /// The conduit owns the bytes (used from handler context: never blocks).
    Owned(Vec<u8>),
}

/// The receive side of a long payload, offered to the sink with its frame.
pub trait LongIn {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Receive the payload into `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len()` bytes.
    unsafe fn deliver_to(&mut self, dst: *mut u8) -> Result<()>;
}

/// The receiver of incoming frames: `(source rank, frame bytes, long payload)`.
/// If the sink does not call `deliver_to`, the conduit drains and drops the payload.
pub type Sink<'a> = dyn FnMut(usize, &mut [u8], Option<&mut dyn LongIn>) + 'a;

/// Identifies a send whose borrowed payload is still in use.
pub type SendId = u64;

/// Operand width of a remote atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    W32,
    W64,
}

impl Width {
    pub fn bytes(self) -> usize {
        match self {
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }
    /// Keep the bits this width holds.
    pub fn mask(self, v: u64) -> u64 {
        match self {
            Width::W32 => v & 0xffff_ffff,
            Width::W64 => v,
        }
    }
}

/// Remote atomic operations (seed 004 Table 5.1). Signed types use the same bits:
/// two's complement makes add, swap, compare&swap and the bitwise ops width-exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    Fetch,
    Set(u64),
    Swap(u64),
    Cas { expected: u64, desired: u64 },
    FetchAdd(u64),
    FetchAnd(u64),
    FetchOr(u64),
    FetchXor(u64),
}

impl AtomicOp {
    /// The value the word takes when it held `old`; `None` leaves it unchanged.
    pub fn apply(self, old: u64, w: Width) -> Option<u64> {
        let v = match self {
            AtomicOp::Fetch => return None,
            AtomicOp::Set(x) | AtomicOp::Swap(x) => x,
            AtomicOp::Cas { expected, desired } => {
                if w.mask(old) != w.mask(expected) {
                    return None;
                }
                desired
            }
            AtomicOp::FetchAdd(x) => old.wrapping_add(x),
            AtomicOp::FetchAnd(x) => old & x,
            AtomicOp::FetchOr(x) => old | x,
            AtomicOp::FetchXor(x) => old ^ x,
        };
        Some(w.mask(v))
    }
}

/// Run `op` on the word at `p` with one CPU atomic instruction (or a CAS loop for
/// set). Returns the old value.
///
/// # Safety
/// `p` must be valid, aligned to `w.bytes()`, and every concurrent access to the word
/// must be atomic too.
pub unsafe fn cpu_atomic(p: *mut u8, w: Width, op: AtomicOp) -> u64 {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
    macro_rules! run {
        ($a:expr, $t:ty) => {{
            let a = $a;
            let x = |v: u64| v as $t;
            (match op {
                AtomicOp::Fetch => a.load(SeqCst),
                AtomicOp::Set(v) | AtomicOp::Swap(v) => a.swap(x(v), SeqCst),
                AtomicOp::Cas { expected, desired } => {
                    match a.compare_exchange(x(expected), x(desired), SeqCst, SeqCst) {
                        Ok(o) | Err(o) => o,
                    }
                }
                AtomicOp::FetchAdd(v) => a.fetch_add(x(v), SeqCst),
                AtomicOp::FetchAnd(v) => a.fetch_and(x(v), SeqCst),
                AtomicOp::FetchOr(v) => a.fetch_or(x(v), SeqCst),
                AtomicOp::FetchXor(v) => a.fetch_xor(x(v), SeqCst),
            }) as u64
        }};
    }
    // SAFETY: the caller guarantees p is valid, aligned and only accessed atomically.
    unsafe {
        match w {
            Width::W32 => run!(AtomicU32::from_ptr(p as *mut u32), u32),
            Width::W64 => run!(AtomicU64::from_ptr(p as *mut u64), u64),
        }
    }
}

/// The elementwise operation of [`Conduit::reduce3_start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce3 {
    Max,
    Sum,
}

pub trait Conduit: Send + Sync {
    fn caps(&self) -> &Caps;
    fn rank(&self) -> usize;
    fn size(&self) -> usize;

    /// The local library heap: always registered, `(base, len)`.
    fn heap(&self) -> (usize, usize);
    /// Rank `rank`'s library heap `(base, len)` in its address space.
    fn remote_heap(&self, rank: usize) -> (usize, usize);
    /// Memory for a further heap segment of at least `len` bytes (the caller
    /// registers it). A conduit that shares heaps with node peers makes it shareable
    /// too.
    fn heap_segment(&self, len: usize) -> Result<crate::runtime::os::Mapping> {
        crate::runtime::os::Mapping::new(len)
    }
    /// A segment from [`Conduit::heap_segment`] is registered and will be handed
    /// out: a conduit that shares it tells the node peers where it is, so they find
    /// it later without this rank's CPU. Not called for one whose registration
    /// failed (it is unmapped again).
    fn segment_registered(&self, _map: &crate::runtime::os::Mapping) {}

    /// Make local `[addr, addr+len)` remotely accessible.
    fn register(&self, addr: usize, len: usize) -> Result<()>;
    /// Undo `register` (exactly the same range).
    fn deregister(&self, addr: usize, len: usize) -> Result<()>;

    /// Initiate a put of `len` bytes from local `src` to `raddr` on `rank`.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes until the next flush of `rank`
    /// completes; `raddr` must be accessible on `rank` (registered there).
    unsafe fn put(&self, rank: usize, raddr: usize, src: *const u8, len: usize) -> Result<()>;

    /// Initiate a get of `len` bytes from `raddr` on `rank` into local `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes until the next flush of `rank`
    /// completes; `raddr` must be accessible on `rank`.
    unsafe fn get(&self, rank: usize, raddr: usize, dst: *mut u8, len: usize) -> Result<()>;

    /// Put and complete it (remotely) before returning. Completes nothing else.
    ///
    /// # Safety
    /// As `put`, until this call returns.
    unsafe fn put_sync(&self, rank: usize, raddr: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.put(rank, raddr, src, len)? };
        self.flush(rank)
    }

    /// Get and complete it before returning.
    ///
    /// # Safety
    /// As `get`, until this call returns.
    unsafe fn get_sync(&self, rank: usize, raddr: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.get(rank, raddr, dst, len)? };
        self.flush(rank)
    }

    /// Complete every put/get to `rank` initiated before this call.
    fn flush(&self, rank: usize) -> Result<()>;
    /// Complete every put/get initiated before this call.
    fn flush_all(&self) -> Result<()>;

    /// Where `[raddr, raddr+len)` of `rank` can be reached with CPU instructions such
    /// that CPU atomics on it are atomic with the atomics *every* rank issues on it
    /// (the memory is mapped here and every rank takes this same path for it).
    /// `None`: use [`Conduit::atomic`].
    fn native(&self, _rank: usize, _raddr: usize, _len: usize) -> Option<*mut u8> {
        None
    }

    /// Where `[raddr, raddr+len)` of `rank` is mapped here when `rank` is this rank
    /// or shares this node's mapping with it (whatever other nodes there are). CPU
    /// atomics through it are atomic only with those of the other ranks of the node:
    /// for words no rank of another node touches (the node's own protocols).
    fn node_view(&self, rank: usize, raddr: usize, len: usize) -> Option<*mut u8> {
        self.native(rank, raddr, len)
    }

    /// Where `[raddr, raddr+len)` of `rank` can be loaded and stored here for as long
    /// as the conduit lives: [`Self::node_view`], or a heap segment of a node peer
    /// that this rank mapped (`fh_local_addr`).
    fn local_view(&self, rank: usize, raddr: usize, len: usize) -> Option<*mut u8> {
        self.node_view(rank, raddr, len)
    }

    /// Where every rank's bell (`runtime::wait::Bell`) lies: `off` bytes into its
    /// library heap. The conduit then rings a node peer's bell whenever it starts an
    /// operation through the transport that the peer may have to progress (a peer
    /// asleep in a wait would not serve it). Set once, by the context.
    fn set_bell_offset(&self, _off: usize) {}

    /// An operation of another rank through the transport may need this rank to
    /// call in (so a wait here must not sleep): MPI one-sided operations on memory
    /// that is not node-shared progress only inside the target's MPI calls.
    fn needs_progress(&self) -> bool {
        false
    }

    /// Remote atomic through the transport; returns the old value. Atomic with every
    /// other `atomic` call on the word, whatever the operation (the conduit decides
    /// how, e.g. by expressing every operation as compare-and-swap).
    /// The caller checked alignment and that `raddr` is accessible on `rank`.
    fn atomic(&self, _rank: usize, _raddr: usize, _w: Width, _op: AtomicOp) -> Result<u64> {
        Err(crate::err!(
            Unsupported,
            "remote atomics are not implemented on the {} conduit",
            self.caps().name
        ))
    }

    /// Send one frame (`caps().frame_headroom` free bytes, then at most
    /// `caps().max_frame` bytes) with an optional long payload.
    /// Never blocks on the peer. Returns an id to pass to `send_done` when a borrowed
    /// payload is still in use.
    fn am_send(&self, dest: usize, frame: Vec<u8>, long: Option<LongSrc>)
        -> Result<Option<SendId>>;
    /// Send a small frame of `len` bytes (no headroom, no long payload) at once, if
    /// this conduit has a direct path to `dest` with room now (the node ring of a
    /// peer): `fill` writes the frame straight into the conduit's memory, every byte
    /// of the slice it is given. False: nothing was sent (and `fill` may not have
    /// run); the caller sends it through [`Conduit::am_send`]. The caller checked
    /// `dest` and that the conduit is live.
    fn am_send_small(&self, _dest: usize, _len: usize, _fill: &mut dyn FnMut(&mut [u8])) -> bool {
        false
    }
    /// An empty buffer to encode the next frame into (recycled when the conduit can).
    fn frame_buffer(&self) -> Vec<u8> {
        Vec::new()
    }

    /// True when the borrowed payload of send `id` may be reused.
    fn send_done(&self, id: SendId) -> Result<bool>;
    /// Deliver arrived frames to `sink`; returns how many were delivered. If another
    /// thread is already polling, returns 0 at once. A frame the conduit itself cannot
    /// parse is delivered as an empty frame (so the layer above counts it).
    fn am_poll(&self, sink: &mut Sink<'_>) -> Result<usize>;

    /// Called by wait loops when nothing completed: yield the CPU, or (sim) run the
    /// other virtual nodes.
    fn idle(&self);

    /// Exchange one u64 with every rank (bootstrap only; blocking).
    fn allgather_u64(&self, x: u64) -> Result<Vec<u64>>;
    /// Start a barrier; `barrier_test` completes it without blocking.
    fn barrier_start(&self) -> Result<()>;
    fn barrier_test(&self) -> Result<bool>;

    /// Release every resource. Collective for MPI. After this every call errors.
    fn finalize(&self) -> Result<()>;

    /// The context is abandoned without the collective teardown (a finalize that
    /// gave up): release what is this process's alone. Idempotent; `finalize` does it.
    fn abandon(&self) {}

    /// Optional capability: put to or get from *any* mapped address of `rank`
    /// without the target (the kernel's single copy between ranks of one node),
    /// complete on return. `None`: `rank` is not reached this way.
    ///
    /// # Safety
    /// `local` must be valid (readable for puts, writable for gets) for `len` bytes.
    unsafe fn copy_any(
        &self,
        _rank: usize,
        _put: bool,
        _raddr: usize,
        _local: usize,
        _len: usize,
    ) -> Option<Result<()>> {
        None
    }

    /// [`Conduit::copy_any`] of many pieces `(raddr, local, len)` at once (the
    /// kernel copy takes lists: one system call for a whole vector). `None` when
    /// `rank` is not reached that way. On an error a prefix of the pieces may have
    /// been copied.
    ///
    /// # Safety
    /// Every `local` range must be valid (readable for puts, writable for gets).
    unsafe fn copy_any_v(
        &self,
        _rank: usize,
        _put: bool,
        _pieces: &[(usize, usize, usize)],
    ) -> Option<Result<()>> {
        None
    }

    /// One operation moving many pieces `(raddr, local, len)` with `rank` (MPI: one
    /// put or get with derived datatypes), completed by a later flush unless `sync`.
    /// `None` when this conduit has no such operation for these pieces (the caller
    /// moves them one by one). The caller guarantees the pieces lie in memory the
    /// target exposes as one unit (its heap, or one registered region).
    ///
    /// # Safety
    /// Every `local` range valid until completion; every `raddr` accessible.
    unsafe fn rma_v(
        &self,
        _rank: usize,
        _put: bool,
        _pieces: &[(usize, usize, usize)],
        _sync: bool,
    ) -> Option<Result<()>> {
        None
    }

    /// Whether [`Conduit::copy_any`] reaches `rank`.
    fn reaches_any_address(&self, _rank: usize) -> bool {
        false
    }

    /// True when `rank` is known to have exited (a process of this node that no
    /// longer exists); false when unknown.
    fn peer_exited(&self, _rank: usize) -> bool {
        false
    }

    /// Optional capability: start an elementwise reduction (`op`) of three words over
    /// every rank, completed by [`Conduit::reduce3_test`] (the maximum: a barrier that
    /// carries ids; the sum: counting frames in flight at finalize). One at a time.
    fn reduce3_start(&self, _op: Reduce3, _v: [u64; 3]) -> Result<()> {
        Err(crate::err!(
            Unsupported,
            "the {} conduit has no non-blocking reduction",
            self.caps().name
        ))
    }
    /// The reduction's result once complete.
    fn reduce3_test(&self, _op: Reduce3) -> Result<Option<[u64; 3]>> {
        Err(crate::err!(Unsupported, "no reduction in progress"))
    }

    /// Lines for `fh_config_print` about the transport.
    fn describe(&self) -> Vec<String> {
        Vec::new()
    }

    /// Lines for `fh_config_print` about what changes while the context runs
    /// (asked at each print; [`Conduit::describe`] is asked once, at init).
    fn describe_now(&self) -> Vec<String> {
        Vec::new()
    }

    /// End every process of the job with exit status `code` (does not return).
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }

    /// The communicator a split of this context starts from (a Fortran handle of a
    /// private duplicate of the context's communicator), if the transport has one.
    fn split_parent(&self) -> Option<i32> {
        None
    }

    /// For transport-specific callers above the API (the MPI interposition): the
    /// conduit as `Any`.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// How a new context's ranks find each other: the library is started from MPI.
#[derive(Clone, Copy, Debug)]
pub enum Launch {
    /// The program's communicator, as a Fortran handle; MPI must be initialised.
    Comm(i32),
    /// `MPI_COMM_WORLD`, initialising MPI at this thread level first when nobody has
    /// (the library then finalizes it with its last context).
    World(crate::runtime::config::ThreadLevel),
    /// A part of the communicator `parent` (a Fortran handle) split by `colour` and
    /// `key`; collective over `parent` (see `mpi::split`).
    Split { parent: i32, colour: i32, key: i32 },
}

/// Start the transport for a new context (collective). `cfg` is this rank's
/// resolution of its settings: every rank learns whether some rank's failed or the
/// job-wide ones differ, before anything is created. `max_frame` gives the largest
/// frame for a configuration.
pub fn launch<S: crate::runtime::config::Resolved>(
    how: Launch,
    cfg: crate::runtime::error::Result<S>,
    max_frame: fn(&S) -> usize,
) -> Result<(std::sync::Arc<dyn Conduit>, S)> {
    mpi::launch(how, cfg, max_frame)
}

/// The driver of the interposed blocking calls (transport-specific; see
/// `api::progress`).
pub use mpi::interop;

/// End every process of the job with exit status `code` when no context is at hand
/// (the transport's abort if it is running, else this process's exit).
pub fn abort_job(code: i32) -> ! {
    mpi::abort_world(code)
}

/// Run `hook` when the transport is shut down while contexts are live (the program
/// calls `MPI_Finalize` first).
pub fn on_shutdown(hook: fn()) {
    mpi::boot::on_mpi_finalize(hook)
}
