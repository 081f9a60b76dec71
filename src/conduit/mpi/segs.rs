//! Heap segments shared with node peers (issue 18: the heap grows "node-shared where
//! the conduit can"). The first region of every rank's heap is in the node-shared
//! mapping made at start-up; the segments `fh_malloc` adds later are memory files
//! (`os::Mapping::shared`) instead. Each rank lists its own, once registered, in a
//! directory at the end of its part of the node-shared mapping. A node peer whose
//! access falls outside the heap reads that directory (plain loads) and maps the
//! segment through `/proc/<pid>/fd`, so the owner's CPU takes no part, and from then
//! on the access is a memory copy instead of a kernel single copy.
//!
//! Guarantees:
//! - Only the owner writes its directory: it fills entry `n`, then publishes `n + 1`
//!   in the count word (release); a reader loads the count (acquire) and reads only
//!   the entries below it. Entries never change once published (segments live until
//!   the context ends).
//! - Nothing a peer wrote is trusted. An entry whose file cannot be opened, is not
//!   sealed against shrinking, or is shorter than it claims stays unmapped, and
//!   accesses to it take the kernel copy as before; a count beyond the directory is
//!   read as the directory's size. No entry can make this rank fault.
//! - A mapping, once made, lives until the conduit is dropped.

use super::MpiConduit;
use crate::runtime::error::Result;
use crate::runtime::os::Mapping;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes of one rank's directory (one page, at the end of its node segment).
pub(super) const DIR_BYTES: usize = 4096;
/// Entries `{base, len, fd}` after a 64-byte header holding the count.
const MAX_SEGS: usize = 128;
const HDR: usize = 64;
const ENTRY: usize = 24;
const _: () = assert!(HDR + MAX_SEGS * ENTRY <= DIR_BYTES);

/// A directory word. `dir` is the start of a directory mapped here (ours or a node
/// peer's), `off` within it and 8-byte aligned.
fn word(dir: usize, off: usize) -> &'static AtomicU64 {
    debug_assert!(off % 8 == 0 && off < DIR_BYTES);
    // SAFETY: directories lie in the node-shared mapping, which stays mapped for
    // the conduit's life (the only user of these references); aligned per above.
    unsafe { AtomicU64::from_ptr((dir + off) as *mut u64) }
}

/// One segment of a peer, as its directory lists it. `view`: where it is mapped
/// here, `None` when it could not be mapped (accesses take the kernel copy).
struct PeerSeg {
    base: usize,
    len: usize,
    view: Option<Mapping>,
}

#[derive(Default)]
struct PeerSegs {
    /// Directory entries already looked at. Invariant: `segs.len() == seen`.
    seen: usize,
    segs: Vec<PeerSeg>,
}

/// This rank's shared segments and what it mapped of its node peers'.
pub(super) struct SharedSegs {
    /// Bytes between the end of a rank's heap and its directory (its AM ring).
    after_heap: usize,
    /// Entries published in our directory (its count word; only we write it).
    published: Mutex<usize>,
    /// Per rank of the conduit's communicator (empty for ranks off this node).
    peers: Vec<RwLock<PeerSegs>>,
    /// Peer segments mapped here (for `fh_config_print`).
    mapped: AtomicUsize,
}

impl SharedSegs {
    pub(super) fn new(size: usize, after_heap: usize) -> SharedSegs {
        SharedSegs {
            after_heap,
            published: Mutex::new(0),
            peers: (0..size).map(|_| RwLock::default()).collect(),
            mapped: AtomicUsize::new(0),
        }
    }

    /// Memory for a new segment of at least `len` bytes: a memory file, or a
    /// private mapping when none can be had (peers then reach it with the kernel
    /// copy, as they reach any memory).
    fn make(len: usize) -> Result<Mapping> {
        Mapping::shared(len).or_else(|_| Mapping::new(len))
    }

    /// List `map` (a segment made by [`Self::make`], now registered) in our
    /// directory at `dir`. Only a registered segment is listed: one whose
    /// registration failed is unmapped again, and an entry for it would let a peer
    /// write into a file this rank no longer maps. The descriptor stays open while
    /// `map` lives, which is until the context ends. With the directory full, or a
    /// private mapping, nothing is listed.
    fn publish(&self, dir: usize, map: &Mapping) {
        let Some(fd) = map.fd() else {
            return;
        };
        let mut n = self.published.lock();
        if *n >= MAX_SEGS {
            return;
        }
        let e = HDR + *n * ENTRY;
        word(dir, e).store(map.addr() as u64, Ordering::Relaxed);
        word(dir, e + 8).store(map.len() as u64, Ordering::Relaxed);
        word(dir, e + 16).store(fd as u64, Ordering::Relaxed);
        *n += 1;
        word(dir, 0).store(*n as u64, Ordering::Release);
    }

    /// Where `[raddr, raddr + len)` of node peer `rank` (process `pid`, directory
    /// mapped here at `dir`) is mapped here, when it lies in one of its shared
    /// segments; maps the segment the first time.
    pub(super) fn view(
        &self,
        rank: usize,
        pid: i32,
        dir: usize,
        raddr: usize,
        len: usize,
    ) -> Option<usize> {
        let slot = self.peers.get(rank)?;
        let find = |p: &PeerSegs| {
            let end = raddr.checked_add(len)?;
            let s = p
                .segs
                .iter()
                .find(|s| raddr >= s.base && end <= s.base + s.len)?;
            s.view.as_ref().map(|m| m.addr() + (raddr - s.base))
        };
        {
            let p = slot.read();
            if let Some(at) = find(&p) {
                return Some(at);
            }
            let count = (word(dir, 0).load(Ordering::Acquire) as usize).min(MAX_SEGS);
            if count <= p.seen {
                return None;
            }
        }
        let mut p = slot.write();
        let count = (word(dir, 0).load(Ordering::Acquire) as usize).min(MAX_SEGS);
        while p.seen < count {
            let e = HDR + p.seen * ENTRY;
            let (base, slen, fd) = (
                word(dir, e).load(Ordering::Relaxed) as usize,
                word(dir, e + 8).load(Ordering::Relaxed) as usize,
                word(dir, e + 16).load(Ordering::Relaxed),
            );
            let view = base
                .checked_add(slen)
                .and_then(|_| Mapping::of_peer(pid, fd, slen).ok());
            if view.is_some() {
                self.mapped.fetch_add(1, Ordering::Relaxed);
            }
            p.segs.push(PeerSeg {
                base,
                len: slen,
                view,
            });
            p.seen += 1;
        }
        debug_assert_eq!(p.segs.len(), p.seen);
        find(&p)
    }

    /// `fh_config_print`'s line.
    pub(super) fn describe(&self) -> String {
        format!(
            "heap segments shared with node peers: on ({} of ours, {} of theirs mapped here)",
            *self.published.lock(),
            self.mapped.load(Ordering::Relaxed)
        )
    }
}

impl MpiConduit {
    /// `Conduit::heap_segment`: a memory file when this rank has node peers that
    /// may open its files.
    pub(super) fn shared_segment(&self, len: usize) -> Result<Mapping> {
        match &self.segs {
            Some(_) => SharedSegs::make(len),
            None => Mapping::new(len),
        }
    }

    /// `Conduit::segment_registered`: list the segment for the node peers.
    pub(super) fn publish_segment(&self, map: &Mapping) {
        if let Some(s) = &self.segs {
            let (base, hlen) = self.heap_at;
            s.publish(base + hlen + s.after_heap, map);
        }
    }

    /// Where `[raddr, raddr + len)` of `rank` is mapped here when it lies in one of
    /// that node peer's shared heap segments.
    #[inline]
    pub(super) fn seg_view(&self, rank: usize, raddr: usize, len: usize) -> Option<usize> {
        let s = self.segs.as_ref()?;
        let heap = (*self.peer_heaps.get(rank)?)?;
        let pid = self.peer_pid(rank)?;
        let dir = heap + self.remote_heaps[rank].1 + s.after_heap;
        s.view(rank, pid, dir, raddr, len)
    }

    /// `fh_config_print`'s line on heap segments.
    pub(super) fn segs_note(&self) -> String {
        self.segs.as_ref().map_or_else(
            || "heap segments shared with node peers: off (no node peer reaches this rank's memory files)".into(),
            |s| s.describe(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A directory in a page of our own, and our own process as the "peer": a
    /// segment is found only once published, is mapped a second time, and shares
    /// its bytes.
    #[test]
    fn a_listed_segment_is_mapped_and_shares_its_bytes() {
        let dir_map = Mapping::new(DIR_BYTES).unwrap();
        let dir = dir_map.addr();
        let s = SharedSegs::new(2, 0);
        let seg = SharedSegs::make(10_000).unwrap();
        let pid = std::process::id() as i32;
        assert_eq!(
            s.view(1, pid, dir, seg.addr(), 8),
            None,
            "not listed before publish"
        );
        s.publish(dir, &seg);
        assert_eq!(s.view(1, pid, dir, seg.addr() - 8, 16), None, "outside");
        s.publish(dir, &Mapping::new(4096).unwrap());
        assert_eq!(*s.published.lock(), 1, "a private mapping is not listed");
        let at = s.view(1, pid, dir, seg.addr() + 104, 8).expect("mapped");
        assert_ne!(at, seg.addr() + 104, "a second mapping of the same file");
        // SAFETY: both addresses lie in live mappings of the same file.
        unsafe {
            *((seg.addr() + 104) as *mut u64) = 0xfeed;
            assert_eq!(*(at as *const u64), 0xfeed);
        }
        assert!(s.describe().contains("1 of ours, 1 of theirs"));
        assert_eq!(s.view(1, pid, dir, seg.addr() + seg.len() - 8, 16), None);
    }

    /// Entries a hostile or broken peer could write stay unmapped: a descriptor
    /// that is no sealed memory file, a length longer than the file, a wrapping
    /// range, and a count past the directory.
    #[test]
    fn hostile_entries_are_not_mapped() {
        let dir_map = Mapping::new(DIR_BYTES).unwrap();
        let dir = dir_map.addr();
        let s = SharedSegs::new(2, 0);
        let real = SharedSegs::make(4096).unwrap();
        s.publish(dir, &real);
        let pid = std::process::id() as i32;
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let bad = [
            (0x1000_0000u64, 4096u64, file.as_raw_fd() as u64),
            (
                0x2000_0000,
                1 << 30,
                word(dir, HDR + 16).load(Ordering::Relaxed),
            ),
            (
                u64::MAX - 10,
                4096,
                word(dir, HDR + 16).load(Ordering::Relaxed),
            ),
            (0x3000_0000, 4096, 99_999),
        ];
        for (i, &(b, l, fd)) in bad.iter().enumerate() {
            let e = HDR + (i + 1) * ENTRY;
            word(dir, e).store(b, Ordering::Relaxed);
            word(dir, e + 8).store(l, Ordering::Relaxed);
            word(dir, e + 16).store(fd, Ordering::Relaxed);
        }
        word(dir, 0).store(1_000_000, Ordering::Release);
        assert_eq!(s.view(1, pid, dir, 0x1000_0000, 8), None);
        assert_eq!(s.view(1, pid, dir, 0x2000_0000, 8), None);
        assert_eq!(s.view(1, pid, dir, 0x3000_0000, 8), None);
        assert!(
            s.view(1, pid, dir, real.addr(), 8).is_some(),
            "the good one"
        );
        assert_eq!(s.mapped.load(Ordering::Relaxed), 1);
        assert_eq!(s.peers[1].read().seen, MAX_SEGS, "count capped");
    }
}
