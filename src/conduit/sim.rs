//! The sim conduit: N virtual nodes inside one process.
//!
//! Guarantees: deterministic when driven from one thread (frames are delivered in
//! send order per destination; a blocked node runs the other nodes' pollers from
//! `idle`, in rank order). It behaves like a strict RDMA NIC: a put or get to a range
//! the target has not registered is refused with `FH_ERR_ACCESS` when initiated and
//! again when it would complete, and data moves only at `flush`, so layers that forget
//! to flush or to keep memory registered fail their tests here.

use super::{Caps, Conduit, LongIn, LongSrc, SendId, Sink};
use crate::runtime::error::Result;
use crate::runtime::os::Mapping;
use crate::{bail, err};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A poll function a context installs so other nodes can run it while they wait.
pub type PollHook = Weak<dyn Fn() + Send + Sync>;

struct Frame {
    src: usize,
    bytes: Vec<u8>,
    long: Option<Vec<u8>>,
}

#[derive(Clone, Copy)]
enum Op {
    Put {
        raddr: usize,
        src: usize,
        len: usize,
    },
    Get {
        raddr: usize,
        dst: usize,
        len: usize,
    },
}

struct Node {
    heap: Mapping,
    /// Registered ranges: start -> end. Invariant: non-overlapping.
    regs: Mutex<BTreeMap<usize, usize>>,
    inbox: Mutex<VecDeque<Frame>>,
    /// Ops this node initiated, per target, not yet completed.
    pending: Mutex<Vec<Vec<Op>>>,
    hook: Mutex<Option<PollHook>>,
    polling: AtomicBool,
    finalized: AtomicBool,
}

/// A set of virtual nodes sharing one process.
pub struct SimWorld {
    nodes: Vec<Node>,
    /// Frames sent in total (for tests).
    pub frames_sent: AtomicU64,
    /// Complete the operations of one flush in reverse order of issue (MPI promises
    /// no order within a flush; tests use this to catch code that relies on one).
    pub reverse_completion: AtomicBool,
}

impl SimWorld {
    pub fn new(n: usize, heap_size: usize) -> Result<Arc<SimWorld>> {
        if n == 0 {
            bail!(InvalidArg, "a sim world needs at least one node");
        }
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(Node {
                heap: Mapping::new(heap_size)?,
                regs: Mutex::new(BTreeMap::new()),
                inbox: Mutex::new(VecDeque::new()),
                pending: Mutex::new(vec![Vec::new(); n]),
                hook: Mutex::new(None),
                polling: AtomicBool::new(false),
                finalized: AtomicBool::new(false),
            });
        }
        Ok(Arc::new(SimWorld {
            nodes,
            frames_sent: AtomicU64::new(0),
            reverse_completion: AtomicBool::new(false),
        }))
    }

    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// The conduit endpoint of node `rank`.
    pub fn conduit(self: &Arc<Self>, rank: usize, max_frame: usize) -> Arc<SimConduit> {
        assert!(rank < self.nodes.len());
        Arc::new(SimConduit {
            world: self.clone(),
            rank,
            caps: Caps {
                name: "sim",
                thread_multiple: true,
                max_frame,
                frame_headroom: 0,
                atomics: true,
                registers_regions: false,
                max_registrations: None,
                user_registrations: None,
                registrations_fix: "",
                reduction: false,
                interop: false,
                local_registration: true,
                sleep: false,
            },
        })
    }

    /// Node `rank`'s registrations (start, end), for tests: the oracle of what is
    /// really pinned.
    pub fn registrations(&self, rank: usize) -> Vec<(usize, usize)> {
        self.nodes[rank]
            .regs
            .lock()
            .iter()
            .map(|(&s, &e)| (s, e))
            .collect()
    }

    /// True if `[addr, addr+len)` is covered by node `rank`'s heap or by adjacent
    /// registrations (the local side of a transfer: a scatter/gather list may name
    /// several registrations, one per element).
    fn locally_accessible(&self, rank: usize, addr: usize, len: usize) -> bool {
        if self.accessible(rank, addr, len) {
            return true;
        }
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let regs = self.nodes[rank].regs.lock();
        let mut cur = addr;
        while cur < end {
            match regs.range(..=cur).next_back() {
                Some((_, &e)) if e > cur => cur = e,
                _ => return false,
            }
        }
        true
    }

    /// True if `[addr, addr+len)` is inside node `rank`'s heap or one registration.
    fn accessible(&self, rank: usize, addr: usize, len: usize) -> bool {
        let node = &self.nodes[rank];
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        if addr >= node.heap.addr() && end <= node.heap.addr() + node.heap.len() {
            return true;
        }
        let regs = node.regs.lock();
        match regs.range(..=addr).next_back() {
            Some((_, &rend)) => end <= rend,
            None => false,
        }
    }
}

/// One virtual node's endpoint.
pub struct SimConduit {
    world: Arc<SimWorld>,
    rank: usize,
    caps: Caps,
}

thread_local! {
    static IN_IDLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl SimConduit {
    /// Install the function other nodes call (from their `idle`) to progress this node.
    pub fn set_poll_hook(&self, hook: PollHook) {
        *self.node().hook.lock() = Some(hook);
    }

    fn node(&self) -> &Node {
        &self.world.nodes[self.rank]
    }

    fn check_live(&self) -> Result<()> {
        if self.node().finalized.load(Ordering::Acquire) {
            bail!(State, "sim node {} is finalized", self.rank);
        }
        Ok(())
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.world.size() {
            bail!(
                BadRank,
                "rank {} out of range (size {})",
                rank,
                self.world.size()
            );
        }
        Ok(())
    }

    fn complete(&self, rank: usize, mut ops: Vec<Op>) -> Result<()> {
        let mut first_err = None;
        if self.world.reverse_completion.load(Ordering::Relaxed) {
            ops.reverse();
        }
        for op in ops {
            let (raddr, len) = match op {
                Op::Put { raddr, len, .. } | Op::Get { raddr, len, .. } => (raddr, len),
            };
            if !self.world.accessible(rank, raddr, len) {
                first_err.get_or_insert(err!(
                    Access,
                    "sim: rank {} no longer has [{:#x}, +{}) registered when the operation completed",
                    rank,
                    raddr,
                    len
                ));
                continue;
            }
            match op {
                // SAFETY: the initiator promised src/dst stay valid until this flush
                // (Conduit::put/get contract) and the target range was just checked to
                // be registered, i.e. owned memory of this process; ranges may overlap
                // only if the user passed overlapping buffers, so use copy (memmove).
                Op::Put { raddr, src, len } => unsafe {
                    std::ptr::copy(src as *const u8, raddr as *mut u8, len)
                },
                // SAFETY: as above, in the other direction.
                Op::Get { raddr, dst, len } => unsafe {
                    std::ptr::copy(raddr as *const u8, dst as *mut u8, len)
                },
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

struct SimLong<'a> {
    data: &'a [u8],
}

impl LongIn for SimLong<'_> {
    fn len(&self) -> usize {
        self.data.len()
    }
    unsafe fn deliver_to(&mut self, dst: *mut u8) -> Result<()> {
        // SAFETY: caller guarantees dst is writable for len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.data.as_ptr(), dst, self.data.len()) };
        Ok(())
    }
}

impl Conduit for SimConduit {
    fn caps(&self) -> &Caps {
        &self.caps
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.world.size()
    }
    fn heap(&self) -> (usize, usize) {
        let h = &self.node().heap;
        (h.addr(), h.len())
    }
    fn remote_heap(&self, rank: usize) -> (usize, usize) {
        let h = &self.world.nodes[rank].heap;
        (h.addr(), h.len())
    }

    fn register(&self, addr: usize, len: usize) -> Result<()> {
        self.check_live()?;
        let end = addr
            .checked_add(len)
            .ok_or_else(|| err!(InvalidArg, "range overflows"))?;
        let mut regs = self.node().regs.lock();
        if let Some((&s, &e)) = regs.range(..end).next_back() {
            if e > addr {
                bail!(
                    InvalidArg,
                    "sim: [{:#x},{:#x}) overlaps registration [{:#x},{:#x})",
                    addr,
                    end,
                    s,
                    e
                );
            }
        }
        regs.insert(addr, end);
        Ok(())
    }

    fn deregister(&self, addr: usize, len: usize) -> Result<()> {
        let mut regs = self.node().regs.lock();
        match regs.get(&addr) {
            Some(&e) if e == addr + len => {
                regs.remove(&addr);
                Ok(())
            }
            _ => bail!(NotPinned, "sim: [{:#x}, +{}) is not registered", addr, len),
        }
    }

    /// Every node lives in this process: a word of any node is reachable by CPU
    /// atomics (like a NIC whose atomics are coherent with its host), provided the
    /// node exposes it.
    fn native(&self, rank: usize, raddr: usize, len: usize) -> Option<*mut u8> {
        (rank < self.world.nodes.len() && self.world.accessible(rank, raddr, len))
            .then_some(raddr as *mut u8)
    }

    fn atomic(
        &self,
        rank: usize,
        raddr: usize,
        w: super::Width,
        op: super::AtomicOp,
    ) -> Result<u64> {
        self.check_live()?;
        self.check_rank(rank)?;
        match self.native(rank, raddr, w.bytes()) {
            // SAFETY: accessible memory of a node of this process; the layer above
            // checked alignment; every atomic on it goes through cpu_atomic.
            Some(p) => Ok(unsafe { super::cpu_atomic(p, w, op) }),
            None => bail!(
                Access,
                "sim: atomic on rank {} at {:#x} which is not registered there",
                rank,
                raddr
            ),
        }
    }

    unsafe fn put(&self, rank: usize, raddr: usize, src: *const u8, len: usize) -> Result<()> {
        self.check_live()?;
        self.check_rank(rank)?;
        if !self.world.locally_accessible(self.rank, src as usize, len) {
            bail!(
                Access,
                "sim: local buffer [{:#x}, +{}) of a put is not registered on this node",
                src as usize,
                len
            );
        }
        if !self.world.accessible(rank, raddr, len) {
            bail!(
                Access,
                "sim: put to rank {} at [{:#x}, +{}) which is not registered there",
                rank,
                raddr,
                len
            );
        }
        self.node().pending.lock()[rank].push(Op::Put {
            raddr,
            src: src as usize,
            len,
        });
        Ok(())
    }

    unsafe fn get(&self, rank: usize, raddr: usize, dst: *mut u8, len: usize) -> Result<()> {
        self.check_live()?;
        self.check_rank(rank)?;
        if !self.world.locally_accessible(self.rank, dst as usize, len) {
            bail!(
                Access,
                "sim: local buffer [{:#x}, +{}) of a get is not registered on this node",
                dst as usize,
                len
            );
        }
        if !self.world.accessible(rank, raddr, len) {
            bail!(
                Access,
                "sim: get from rank {} at [{:#x}, +{}) which is not registered there",
                rank,
                raddr,
                len
            );
        }
        self.node().pending.lock()[rank].push(Op::Get {
            raddr,
            dst: dst as usize,
            len,
        });
        Ok(())
    }

    fn flush(&self, rank: usize) -> Result<()> {
        self.check_rank(rank)?;
        // Complete under the lock: a concurrent flush by another thread must not
        // return before the operations this one took have landed (MPI_Win_flush
        // semantics: everything issued before the call is complete when it returns).
        let mut g = self.node().pending.lock();
        let ops = std::mem::take(&mut g[rank]);
        self.complete(rank, ops)
    }

    fn flush_all(&self) -> Result<()> {
        let mut g = self.node().pending.lock();
        let all: Vec<Vec<Op>> = std::mem::replace(&mut *g, vec![Vec::new(); self.world.size()]);
        let mut res = Ok(());
        for (rank, ops) in all.into_iter().enumerate() {
            if let Err(e) = self.complete(rank, ops) {
                res = Err(e);
            }
        }
        res
    }

    fn am_send(
        &self,
        dest: usize,
        frame: Vec<u8>,
        long: Option<LongSrc>,
    ) -> Result<Option<SendId>> {
        self.check_live()?;
        self.check_rank(dest)?;
        if frame.len() > self.caps.max_frame {
            bail!(
                Internal,
                "frame of {} bytes exceeds max_frame {}",
                frame.len(),
                self.caps.max_frame
            );
        }
        let long = long.map(|l| match l {
            LongSrc::Borrowed { ptr, len } => {
                // SAFETY: the caller guarantees ptr is readable for len bytes for the
                // duration of the send; we copy immediately, so the send is done at once.
                unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec()
            }
            LongSrc::Owned(v) => v,
        });
        self.world.nodes[dest].inbox.lock().push_back(Frame {
            src: self.rank,
            bytes: frame,
            long,
        });
        self.world.frames_sent.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }

    fn send_done(&self, _id: SendId) -> Result<bool> {
        Ok(true)
    }

    fn am_poll(&self, sink: &mut Sink<'_>) -> Result<usize> {
        let node = self.node();
        if node.polling.swap(true, Ordering::Acquire) {
            return Ok(0);
        }
        let mut n = 0;
        loop {
            // Take one frame at a time so frames sent by handlers are seen in order.
            let f = node.inbox.lock().pop_front();
            let Some(mut f) = f else { break };
            match f.long {
                Some(ref data) => {
                    let mut l = SimLong { data };
                    sink(f.src, &mut f.bytes, Some(&mut l));
                }
                None => sink(f.src, &mut f.bytes, None),
            }
            n += 1;
        }
        node.polling.store(false, Ordering::Release);
        Ok(n)
    }

    fn idle(&self) {
        if IN_IDLE.with(|f| f.replace(true)) {
            return;
        }
        for (j, node) in self.world.nodes.iter().enumerate() {
            if j == self.rank {
                continue;
            }
            let hook = node.hook.lock().as_ref().and_then(|w| w.upgrade());
            if let Some(h) = hook {
                h();
            }
        }
        IN_IDLE.with(|f| f.set(false));
    }

    fn allgather_u64(&self, _x: u64) -> Result<Vec<u64>> {
        bail!(
            Unsupported,
            "sim: no collectives; nodes share the world directly"
        )
    }
    fn barrier_start(&self) -> Result<()> {
        Ok(())
    }
    fn barrier_test(&self) -> Result<bool> {
        Ok(true)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn finalize(&self) -> Result<()> {
        self.node().finalized.store(true, Ordering::Release);
        *self.node().hook.lock() = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn puts_land_only_at_flush_and_only_in_registered_memory() {
        let w = SimWorld::new(2, 1 << 16).unwrap();
        let c0 = w.conduit(0, 1024);
        let c1 = w.conduit(1, 1024);
        let mut target = vec![0u8; 64];
        let t = target.as_mut_ptr() as usize;
        let src = [7u8; 16];
        let s = src.as_ptr() as usize;
        // SAFETY: src outlives the flush below.
        let e = unsafe { c0.put(1, t, src.as_ptr(), 16) }.unwrap_err();
        assert_eq!(e.status, crate::runtime::error::Status::Access);
        c1.register(t, 64).unwrap();
        // The local side must be registered too (a strict NIC).
        // SAFETY: as above.
        let e = unsafe { c0.put(1, t + 8, src.as_ptr(), 16) }.unwrap_err();
        assert_eq!(e.status, crate::runtime::error::Status::Access);
        c0.register(s, 16).unwrap();
        // SAFETY: as above.
        unsafe { c0.put(1, t + 8, src.as_ptr(), 16) }.unwrap();
        assert_eq!(target[8], 0, "data must not move before flush");
        c0.flush(1).unwrap();
        assert_eq!(&target[8..24], &[7u8; 16]);
        // Deregistered before completion: the flush reports it.
        // SAFETY: as above.
        unsafe { c0.put(1, t, src.as_ptr(), 8) }.unwrap();
        c1.deregister(t, 64).unwrap();
        assert!(c0.flush(1).is_err());
        assert_eq!(target[0], 0);
    }

    #[test]
    fn frames_arrive_in_order_with_payloads() {
        let w = SimWorld::new(2, 1 << 16).unwrap();
        let c0 = w.conduit(0, 1024);
        let c1 = w.conduit(1, 1024);
        for i in 0..5u8 {
            c0.am_send(1, vec![i], Some(LongSrc::Owned(vec![i; 3])))
                .unwrap();
        }
        let mut got = Vec::new();
        c1.am_poll(&mut |src, f: &mut [u8], long| {
            let long = long.unwrap();
            let mut buf = vec![0u8; long.len()];
            // SAFETY: buf has long.len() bytes.
            unsafe { long.deliver_to(buf.as_mut_ptr()) }.unwrap();
            got.push((src, f[0], buf));
        })
        .unwrap();
        assert_eq!(got.len(), 5);
        for (i, (src, b, buf)) in got.into_iter().enumerate() {
            assert_eq!((src, b as usize), (0, i));
            assert_eq!(buf, vec![i as u8; 3]);
        }
        assert!(
            c0.am_send(1, vec![0; 2000], None).is_err(),
            "oversized frame refused"
        );
    }
}
