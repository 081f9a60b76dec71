//! Active messages between ranks of one node: every rank's receive queue is a
//! [`Ring`] at the end of its segment of the node-shared mapping, so a frame to a
//! node peer is one copy into the peer's ring, and polling an empty queue is two
//! loads (GASNet's PSHM AM transport).
//!
//! - **Frames** of up to the ring's largest body go through the ring. A frame that
//!   does not fit (ring full, or larger than half the ring) goes through MPI as before;
//!   the sender first counts it in the receiver's `MPI_SENT` word, so a receiver with
//!   only node peers tests its MPI receives only while such frames are owed.
//! - **Long payloads** are not copied through the ring: the receiver copies them
//!   straight into their destination from the sender's memory (a plain copy from
//!   the sender's node-shared heap, else the kernel's single copy), then raises the
//!   sender's acknowledgement word for it; the sender's `send_done` reads that word.
//!   A payload the receiver could not reach that way goes through MPI as before.
//!
//! Flow control stays the layer above's: credits bound the requests in flight, so
//! a full ring never loses a frame, it only sends it the slower way.
//!
//! Guarantees: nothing a peer writes into the ring is trusted (see [`Ring`]); a
//! frame from a rank that is not a node peer, a pull longer than `FH_AM_MAX_LONG`
//! and a head that cannot be right are delivered as malformed (counted and refused
//! by the layer above); every pull is acknowledged, delivered or not, so the sender
//! never waits for a payload the receiver refused.

use super::ring::{Head, Kind, Popped, Ring, CELL};
use super::{MpiConduit, PREFIX};
use crate::bail;
use crate::conduit::{Conduit, LongIn, LongSrc, SendId, Sink};
use crate::runtime::error::Result;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Extra word 0 of a ring: frames node peers sent its owner through MPI.
const MPI_SENT: usize = 0;
/// Extra word `ACKS + m`: the last pull of the ring's owner that node member `m`
/// has taken.
const ACKS: usize = 1;
/// Ids of sends whose long payload a node peer pulls (distinct from MPI sends' ids).
const PULL_ID: SendId = 1 << 63;
/// Messages one poll delivers at most (bounded work per poll).
const BATCH: usize = 64;
/// Even with only node peers, test the MPI receives every this many polls.
const MPI_EVERY: u32 = 1024;
/// Ring size in cells: at least this many, and room for eight of the largest frames.
const MIN_CELLS: usize = 4096;
const MAX_CELLS: usize = 1 << 16;

/// Cells of each rank's ring for frames of up to `max_frame` bytes.
fn cells_for(max_frame: usize) -> usize {
    (8 * (max_frame + 2 * CELL) / CELL)
        .next_power_of_two()
        .clamp(MIN_CELLS, MAX_CELLS)
}

/// Bytes each rank of a node of `members` ranks appends to its shared segment.
pub(super) fn ring_bytes(max_frame: usize, members: usize) -> usize {
    Ring::bytes(cells_for(max_frame), ACKS + members)
}

/// Sends whose long payload a node peer pulls.
struct Pulls {
    /// Per node member: the last pull sequence number used towards it.
    seq: Vec<u64>,
    /// Borrowed payloads the caller waits for: id -> (member, sequence).
    waiting: HashMap<SendId, (usize, u64)>,
    /// Owned payloads kept until pulled: (member, sequence, bytes).
    owned: VecDeque<(usize, u64, Vec<u8>)>,
    next_id: SendId,
}

/// The node's rings as this rank sees them.
pub(super) struct NodeAm {
    /// Per rank of the communicator: its receive ring when it is on this node.
    rings: Vec<Option<Ring>>,
    /// Per rank: its index among the node's members.
    idx: Vec<Option<usize>>,
    /// Per rank: our copy of its ring's head (`Ring::push`).
    seen: Vec<AtomicU64>,
    me: usize,
    my_idx: usize,
    /// Some rank is on another node: the MPI receives are tested at every poll.
    offnode: bool,
    /// Frames node peers sent us through MPI that we have delivered.
    mpi_got: AtomicU64,
    polls: AtomicU64,
    /// The consumer of our ring (one poller at a time).
    consumer: Mutex<()>,
    pulls: Mutex<Pulls>,
    /// `pulls.owned.len()`, readable without the lock.
    owned: AtomicUsize,
    cells: usize,
}

/// What `send_node` did with a frame.
pub(super) enum NodeSent {
    Done(Option<SendId>),
    /// Send it through MPI (ownership handed back).
    Mpi(Vec<u8>, Option<LongSrc>),
}

impl NodeAm {
    /// The rings of the node: `members[i]` is a rank whose segment starts at
    /// `heaps[members[i]] + heap_len[members[i]]` here.
    ///
    /// # Safety
    /// Each such address is where that rank's ring of `ring_bytes(max_frame,
    /// members.len())` bytes lies in the node-shared mapping, mapped for the
    /// conduit's life, and zeroed by its owner before the start-up exchange.
    pub(super) unsafe fn new(
        me: usize,
        size: usize,
        members: &[usize],
        heaps: &[Option<usize>],
        heap_len: impl Fn(usize) -> usize,
        max_frame: usize,
    ) -> Option<NodeAm> {
        let cells = cells_for(max_frame);
        let mut rings = vec![None; size];
        let mut idx = vec![None; size];
        for (i, &r) in members.iter().enumerate() {
            let at = heaps[r]? + heap_len(r);
            // SAFETY: the caller's contract.
            rings[r] = Some(unsafe { Ring::at(at, cells, ACKS + members.len()) });
            idx[r] = Some(i);
        }
        Some(NodeAm {
            my_idx: idx[me]?,
            rings,
            idx,
            seen: (0..size).map(|_| AtomicU64::new(0)).collect(),
            me,
            offnode: members.len() < size,
            mpi_got: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            consumer: Mutex::new(()),
            pulls: Mutex::new(Pulls {
                seq: vec![0; members.len()],
                waiting: HashMap::new(),
                owned: VecDeque::new(),
                next_id: PULL_ID,
            }),
            owned: AtomicUsize::new(0),
            cells,
        })
    }

    #[inline]
    pub(super) fn is_peer(&self, rank: usize) -> bool {
        self.idx.get(rank).is_some_and(|i| i.is_some())
    }

    #[inline]
    fn ring(&self, rank: usize) -> Ring {
        self.rings[rank].expect("a node peer's ring")
    }

    /// `fh_config_print`'s line.
    pub(super) fn describe(&self) -> String {
        format!(
            "AMs between node peers: shared-memory rings of {} KiB ({} ranks here)",
            self.cells * CELL / 1024,
            self.rings.iter().filter(|r| r.is_some()).count()
        )
    }

    /// A frame from a node peer went through MPI: count it at the receiver.
    pub(super) fn note_mpi_send(&self, dest: usize) {
        if self.is_peer(dest) {
            self.ring(dest)
                .extra(MPI_SENT)
                .fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A frame from `src` arrived through MPI.
    pub(super) fn note_mpi_recv(&self, src: usize) {
        if self.is_peer(src) {
            self.mpi_got.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether this poll should test the MPI receives.
    #[inline]
    pub(super) fn mpi_due(&self) -> bool {
        // A plain load and store: a lost count only moves the next safety test.
        let n = self.polls.load(Ordering::Relaxed).wrapping_add(1);
        self.polls.store(n, Ordering::Relaxed);
        self.offnode
            || self.ring(self.me).extra(MPI_SENT).load(Ordering::Acquire)
                > self.mpi_got.load(Ordering::Relaxed)
            || n % MPI_EVERY as u64 == 0
    }

    /// Whether the pull of send `id` finished (None: not a pull).
    pub(super) fn pull_done(&self, id: SendId) -> Option<bool> {
        if id & PULL_ID == 0 {
            return None;
        }
        let mut p = self.pulls.lock();
        let Some(&(m, seq)) = p.waiting.get(&id) else {
            return Some(true);
        };
        let done = self.acked(m) >= seq;
        if done {
            p.waiting.remove(&id);
        }
        Some(done)
    }

    fn acked(&self, member: usize) -> u64 {
        self.ring(self.me)
            .extra(ACKS + member)
            .load(Ordering::Acquire)
    }

    /// Free owned payloads their receivers have taken.
    fn sweep_owned(&self) {
        let mut p = self.pulls.lock();
        p.owned.retain(|(m, seq, _)| self.acked(*m) < *seq);
        self.owned.store(p.owned.len(), Ordering::Relaxed);
    }
}

impl MpiConduit {
    /// Send a frame to node peer `dest` through its ring, or hand it back for MPI.
    pub(super) fn send_node(
        &self,
        n: &NodeAm,
        dest: usize,
        frame: Vec<u8>,
        long: Option<LongSrc>,
    ) -> NodeSent {
        let ring = n.ring(dest);
        let body = &frame[PREFIX..];
        let mut head = Head {
            src: self.rank as u32,
            ..Head::default()
        };
        let Some(l) = long else {
            if self.push_frame(n, dest, body) {
                self.recycle(frame);
                return NodeSent::Done(None);
            }
            return NodeSent::Mpi(frame, None); // full, or larger than half the ring
        };
        let (ptr, len) = match &l {
            LongSrc::Borrowed { ptr, len } => (*ptr as usize, *len),
            LongSrc::Owned(v) => (v.as_ptr() as usize, v.len()),
        };
        if !self.pullable(dest, ptr, len) {
            return NodeSent::Mpi(frame, Some(l));
        }
        let m = n.idx[dest].expect("a node peer");
        // The pulls lock is held from numbering to pushing, so this rank's pulls
        // reach each receiver in sequence order (its acknowledgements only grow).
        let mut p = n.pulls.lock();
        let seq = p.seq[m] + 1;
        head.long_ptr = ptr as u64;
        head.long_len = len as u64;
        head.long_seq = seq;
        if ring.push(Kind::Pull, &head, body, &n.seen[dest]).is_err() {
            return NodeSent::Mpi(frame, Some(l));
        }
        p.seq[m] = seq;
        self.recycle(frame);
        match l {
            LongSrc::Owned(v) => {
                p.owned.push_back((m, seq, v));
                n.owned.store(p.owned.len(), Ordering::Relaxed);
                NodeSent::Done(None)
            }
            LongSrc::Borrowed { .. } => {
                let id = p.next_id;
                p.next_id += 1;
                p.waiting.insert(id, (m, seq));
                NodeSent::Done(Some(id))
            }
        }
    }

    /// Push a small frame straight into node peer `dest`'s ring (no frame buffer,
    /// no copy through the pool); false when `dest` is not a node peer or its ring
    /// has no room (the caller then takes the general path, which may use MPI).
    pub(super) fn send_node_small(
        &self,
        dest: usize,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let Some(n) = self.node.as_ref().filter(|n| n.is_peer(dest)) else {
            return false;
        };
        if self.finalized.load(Ordering::Acquire) {
            return false; // the general path says why
        }
        self.push_frame_with(n, dest, len, fill)
    }

    /// Push one frame (no long payload) into node peer `dest`'s ring: false when it
    /// is full or the frame is larger than half of it.
    fn push_frame(&self, n: &NodeAm, dest: usize, body: &[u8]) -> bool {
        self.push_frame_with(n, dest, body.len(), &mut |dst| dst.copy_from_slice(body))
    }

    /// As [`Self::push_frame`], for a frame of `len` bytes that `fill` writes into
    /// the ring (every byte).
    fn push_frame_with(
        &self,
        n: &NodeAm,
        dest: usize,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let head = Head {
            src: self.rank as u32,
            ..Head::default()
        };
        n.ring(dest)
            .push_with(Kind::Frame, &head, len, &n.seen[dest], fill)
            .is_ok()
    }

    /// Whether node peer `dest` can copy `[ptr, ptr + len)` out of this process.
    fn pullable(&self, dest: usize, ptr: usize, len: usize) -> bool {
        let (base, hlen) = self.heap_at;
        dest == self.rank
            || self.pid_for_copy(dest).is_some()
            || (self.shm.is_some()
                && ptr >= base
                && ptr.checked_add(len).is_some_and(|e| e <= base + hlen))
    }

    /// Deliver up to [`BATCH`] frames from our ring to `sink`.
    pub(super) fn poll_node(&self, n: &NodeAm, sink: &mut Sink<'_>) -> usize {
        let ring = n.ring(self.rank);
        if n.owned.load(Ordering::Relaxed) > 0 {
            n.sweep_owned();
        }
        // An empty ring costs two loads and no lock.
        if !ring.published() {
            return 0;
        }
        // Below MPI_THREAD_MULTIPLE one thread at a time calls us: no lock (whose
        // locked instruction would also wait for our last stores to travel).
        let _c = if self.caps.thread_multiple {
            match n.consumer.try_lock() {
                Some(g) => Some(g),
                None => return 0,
            }
        } else {
            None
        };
        let mut delivered = 0;
        for _ in 0..BATCH {
            match ring.peek() {
                Popped::Empty => break,
                Popped::Corrupt { src } => {
                    self.malformed(src as usize, sink, "a ring message with an impossible head");
                    ring.release(1);
                }
                Popped::Msg {
                    kind,
                    head,
                    body,
                    cells,
                } => {
                    delivered += self.deliver_node(n, kind, &head, body, sink);
                    ring.release(cells);
                }
            }
        }
        delivered
    }

    /// Hand `sink` an empty frame from `src` (the layer above counts it as malformed
    /// and refuses it); say what it was with `FH_VERBOSE`.
    pub(super) fn malformed(&self, src: usize, sink: &mut Sink<'_>, what: &str) {
        sink(src.min(self.size.saturating_sub(1)), &mut [], None);
        if self.verbose {
            eprintln!(
                "firehose[{}]: dropped {} from rank {}",
                self.rank, what, src
            );
        }
    }

    fn deliver_node(
        &self,
        n: &NodeAm,
        kind: Kind,
        head: &Head,
        body: &mut [u8],
        sink: &mut Sink<'_>,
    ) -> usize {
        let src = head.src as usize;
        if !n.is_peer(src) {
            self.malformed(src, sink, "a ring message naming no node peer");
            return 0;
        }
        if kind == Kind::Frame {
            sink(src, body, None);
            return 1;
        }
        let delivered = if head.long_len > self.max_long as u64 {
            self.malformed(src, sink, "a long payload above FH_AM_MAX_LONG");
            0
        } else {
            let mut l = Pulled {
                c: self,
                src,
                ptr: head.long_ptr as usize,
                len: head.long_len as usize,
                done: false,
            };
            sink(src, body, Some(&mut l));
            1
        };
        // Taken or refused, the sender may reuse the payload now.
        n.ring(src)
            .extra(ACKS + n.my_idx)
            .fetch_max(head.long_seq, Ordering::AcqRel);
        delivered
    }
}

/// A long payload still in its sender's memory.
struct Pulled<'a> {
    c: &'a MpiConduit,
    src: usize,
    ptr: usize,
    len: usize,
    done: bool,
}

impl LongIn for Pulled<'_> {
    fn len(&self) -> usize {
        self.len
    }

    unsafe fn deliver_to(&mut self, dst: *mut u8) -> Result<()> {
        if self.done {
            bail!(State, "long payload already delivered");
        }
        self.done = true;
        let c = self.c;
        if self.src == c.rank {
            // SAFETY: our own send's payload, alive until acknowledged; `dst` is
            // writable for len bytes (caller's contract). Both may overlap when a
            // rank sends to itself in place, hence `copy`.
            unsafe { std::ptr::copy(self.ptr as *const u8, dst, self.len) };
            return Ok(());
        }
        if let Some(view) = Conduit::node_view(c, self.src, self.ptr, self.len) {
            // SAFETY: inside the sender's heap, mapped here; the sender keeps the
            // payload until acknowledged; `dst` is writable (caller's contract).
            unsafe { std::ptr::copy(view as *const u8, dst, self.len) };
            return Ok(());
        }
        c.single_copy(self.src, false, self.ptr, dst as usize, self.len)
    }
}
