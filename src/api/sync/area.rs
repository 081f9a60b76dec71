//! The sync area: a fixed block at the start of every rank's library heap, laid out
//! identically on all ranks, so any rank computes the address of any flag word from
//! the heap base it already knows (no address exchange, no collective set-up).
//!
//! Invariant: the area is zero when the heap is created (fresh mappings), and every
//! word in it is written only through `CtxInner::word` (atomic for all ranks).
//! Tags start at 1, so a zero word never matches.

/// Locks one context can hold at once (one 64-byte line per lock on every rank).
pub const MAX_LOCKS: usize = 128;
/// Dissemination rounds the area has room for (N < 2^64).
const MAX_ROUNDS: usize = 64;
/// Fan-in of the gather-and-broadcast barrier tree.
pub const TREE_DEGREE: usize = 4;
/// Chunk slots per (writer, reader) pair.
pub const SLOTS: usize = 4;
pub(crate) const LINE: usize = 64;
/// The length bits of an inbox slot's tag word (the channel's `LAST` and `ERR` flags
/// sit above them; `chan` writes tags, `chan` and `chan_am` read them).
pub(super) const LEN_MASK: u64 = (1 << 30) - 1;
/// Payload bytes of a node collective slot ([`Area::nslot`]).
pub const NSLOT: usize = 4096;
/// Node collective slots per rank, used in turn: a broadcast root runs up to this
/// many calls ahead of its slowest reader.
pub const NDEPTH: usize = 64;
/// Bytes of one window of a large node allreduce (`coll::node_big`): each rank
/// stages two, so operands larger than a slot move in steps of this size.
pub const WINDOW: usize = 256 << 10;
/// The staging region of a large node allreduce: a line of flags, two windows.
const BIG: usize = LINE + 2 * WINDOW;

/// What a rank's life word says (its low byte; a finalizing rank puts the epoch of
/// the last barrier it notified above it, see [`life_word`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Life {
    Live = 0,
    /// It called `fh_finalize` (or MPI_Finalize finalized it): it makes no more calls
    /// a peer could be waiting for.
    Finalizing = 1,
    /// It exited without finalizing.
    Exited = 2,
}

/// The life word `l` with `barrier` (the epoch of the last barrier the rank
/// notified) above its low byte: a peer still waiting in that barrier knows this
/// rank did its part before it finalized.
pub fn life_word(l: Life, barrier: u64) -> u64 {
    l as u64 | barrier << 8
}

/// A life word read back: what it says and the barrier epoch it carries.
pub fn read_life(w: u64) -> (Life, u64) {
    let l = match w & 0xff {
        1 => Life::Finalizing,
        2 => Life::Exited,
        _ => Life::Live,
    };
    (l, w >> 8)
}

#[derive(Clone, Copy, Debug)]
pub struct Area {
    pub n: usize,
    /// Bytes of data one chunk slot carries.
    pub chunk: usize,
    /// Total bytes (page multiple).
    pub bytes: usize,
    diss: usize,
    tree_arr: usize,
    tree_rel: usize,
    scratch: usize,
    life: usize,
    bell: usize,
    node: usize,
    nslots: usize,
    credits: usize,
    inbox: usize,
    stage: usize,
    desc_stage: usize,
    /// Offset of the large-allreduce staging region, 0 without one ([`Area::with_big`]).
    big: usize,
}

impl Area {
    /// The layout for `n` ranks. Chunks shrink as N grows so the inboxes (one per
    /// possible writer) stay near 1 MiB per rank.
    pub fn new(n: usize) -> Area {
        let chunk = ((1usize << 20) / (n.max(1) * SLOTS)).clamp(1024, 64 << 10) & !(LINE - 1);
        let diss = MAX_LOCKS * LINE;
        let tree_arr = diss + MAX_ROUNDS * 2 * 16;
        let tree_rel = tree_arr + TREE_DEGREE * 2 * 16;
        let scratch = tree_rel + LINE;
        let life = scratch + LINE;
        let bell = life + LINE;
        let node = bell + LINE;
        let nslots = node + 2 * LINE;
        let credits = nslots + NDEPTH * (LINE + NSLOT);
        let inbox = credits + n * LINE;
        // The description line right before the data stage: a header line and a
        // slot's data, the layout of an inbox slot, so one put carries both.
        let desc_stage = inbox + n * SLOTS * (LINE + chunk);
        let stage = desc_stage + LINE;
        let bytes = (stage + chunk + 4095) & !4095;
        Area {
            n,
            chunk,
            bytes,
            diss,
            tree_arr,
            tree_rel,
            scratch,
            life,
            bell,
            node,
            nslots,
            credits,
            inbox,
            stage,
            desc_stage,
            big: 0,
        }
    }

    /// This layout with the staging region of large node allreduces at its end, when
    /// the whole area stays within a quarter of every heap (`lens`: every rank decides
    /// alike from the same lengths; small heaps keep their room for the program).
    pub fn with_big(self, lens: impl Iterator<Item = usize>) -> Area {
        let bytes = self.bytes + ((BIG + 4095) & !4095);
        let mut lens = lens;
        match lens.all(|l| l / 4 >= bytes) {
            true => Area {
                big: self.bytes,
                bytes,
                ..self
            },
            false => self,
        }
    }

    /// The staging region of a large node allreduce (flags line, then two windows),
    /// if this layout has one.
    pub fn big(&self, base: usize) -> Option<(usize, usize)> {
        (self.big != 0).then_some((base + self.big, BIG))
    }
    /// Lock `i`'s line: `next` at +0, `locked` at +8, `tail` (home rank only) at +16.
    pub fn lock_line(&self, base: usize, i: usize) -> usize {
        debug_assert!(i < MAX_LOCKS);
        base + i * LINE
    }
    /// Dissemination slot (two words: id, tag) for `round` and epoch parity.
    pub fn diss(&self, base: usize, round: usize, parity: usize) -> usize {
        debug_assert!(round < MAX_ROUNDS && parity < 2);
        base + self.diss + (round * 2 + parity) * 16
    }
    /// Tree arrival slot of child number `c` (0..TREE_DEGREE) at its parent.
    pub fn tree_arr(&self, base: usize, c: usize, parity: usize) -> usize {
        debug_assert!(c < TREE_DEGREE && parity < 2);
        base + self.tree_arr + (c * 2 + parity) * 16
    }
    /// Tree release slot of a rank.
    pub fn tree_rel(&self, base: usize, parity: usize) -> usize {
        base + self.tree_rel + parity * 16
    }
    /// The barrier flags' region (dissemination and tree slots): `[lo, hi)`.
    pub fn flags_range(&self, base: usize) -> (usize, usize) {
        (base + self.diss, base + self.tree_rel + 32)
    }
    /// A line no protocol uses (latency probes).
    pub fn scratch(&self, base: usize) -> usize {
        base + self.scratch
    }
    /// This rank's life word ([`Life`]), which only it writes and peers read while
    /// they wait for it.
    pub fn life(&self, base: usize) -> usize {
        base + self.life
    }
    /// This rank's bell (`runtime::wait::Bell`): rung by whoever writes a word this
    /// rank may be waiting for.
    pub fn bell(&self, base: usize) -> usize {
        base + self.bell
    }
    /// At a node's leader: the barrier's arrival counter, then its release (id,
    /// tag) — three words of one line.
    pub fn node_barrier(&self, base: usize) -> usize {
        base + self.node
    }
    /// Each rank's own barrier value for the node (id, tag), then the last node
    /// collective it finished (+16), then its tree mark (+24: seq, description,
    /// size; `coll::node`).
    pub fn node_val(&self, base: usize) -> usize {
        base + self.node + LINE
    }
    /// A rank's node collective slot `p` (of [`NDEPTH`]): a header line (the call's
    /// description) then [`NSLOT`] payload bytes.
    pub fn nslot(&self, base: usize, p: usize) -> usize {
        debug_assert!(p < NDEPTH);
        base + self.nslots + p * (LINE + NSLOT)
    }
    /// In a writer's area: how many chunks `reader` has consumed from it.
    pub fn credit(&self, base: usize, reader: usize) -> usize {
        debug_assert!(reader < self.n);
        base + self.credits + reader * LINE
    }
    /// In a reader's area: the header line of slot `s` of writer `src`: the tag word,
    /// then the collective's description (`chan::Desc`).
    pub fn inbox_hdr(&self, base: usize, src: usize, s: usize) -> usize {
        debug_assert!(src < self.n && s < SLOTS);
        base + self.inbox + (src * SLOTS + s) * (LINE + self.chunk)
    }
    /// The data bytes of that slot.
    pub fn inbox_data(&self, base: usize, src: usize, s: usize) -> usize {
        self.inbox_hdr(base, src, s) + LINE
    }
    /// This rank's staging buffer (sources that are not registered memory, and
    /// small chunks that travel with their description).
    pub fn stage(&self, base: usize) -> usize {
        base + self.stage
    }
    /// This rank's line where a chunk's description is written before it is put:
    /// the line right before [`Self::stage`], as a slot's header before its data.
    pub fn desc_stage(&self, base: usize) -> usize {
        base + self.desc_stage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn regions_do_not_overlap_and_fit() {
        for n in [1usize, 2, 3, 8, 100, 5000] {
            let a = Area::new(n);
            assert!(a.lock_line(0, MAX_LOCKS - 1) + LINE <= a.diss(0, 0, 0));
            assert!(a.diss(0, MAX_ROUNDS - 1, 1) + 16 <= a.tree_arr(0, 0, 0));
            assert!(a.tree_arr(0, TREE_DEGREE - 1, 1) + 16 <= a.tree_rel(0, 0));
            assert!(a.tree_rel(0, 1) + 16 <= a.scratch(0));
            assert_eq!(a.flags_range(0), (a.diss(0, 0, 0), a.tree_rel(0, 1) + 16));
            assert!(a.scratch(0) + LINE <= a.life(0) && a.life(0) + LINE <= a.bell(0));
            assert!(a.bell(0) + LINE <= a.node_barrier(0));
            assert!(a.node_barrier(0) + LINE <= a.node_val(0));
            assert!(a.node_val(0) + LINE <= a.nslot(0, 0));
            assert!(a.nslot(0, NDEPTH - 1) + LINE + NSLOT <= a.credit(0, 0));
            assert!(a.credit(0, n - 1) + LINE <= a.inbox_hdr(0, 0, 0));
            assert!(a.inbox_data(0, n - 1, SLOTS - 1) + a.chunk <= a.desc_stage(0));
            assert_eq!(a.desc_stage(0) + LINE, a.stage(0));
            assert!(a.stage(0) + a.chunk <= a.bytes);
            let b = a.with_big([1usize << 40].into_iter());
            let (at, len) = b.big(0).expect("room for the staging region");
            assert!(at >= a.bytes && at + len <= b.bytes && at % 4096 == 0);
            assert!(a.with_big([4 * a.bytes].into_iter()).big(0).is_none());
            assert_eq!(a.inbox_hdr(0, n - 1, SLOTS - 1) % 64, 0);
        }
    }
}
