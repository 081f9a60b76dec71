//! Non-contiguous put and get (seed 002 VIS: vector, indexed, strided): the two
//! sides' runs are paired into segments ([`super::shape`]) and moved by one of four
//! algorithms, chosen per call (seed 002's implementation notes on algorithm
//! selection), with one completion for the whole call:
//! - **node peer** (`node_copy`): to a node peer the kernel copy reaches, the
//!   segments outside its heap and registered memory in one vectored copy;
//! - **pack** ([`super::pack`]): the segments in AM mediums, unpacked by the target;
//! - **datatype** (`typed`): one conduit operation with derived datatypes, where the
//!   target section is the peer's heap or one region it registered;
//! - **direct**: each segment one transfer of the contiguous engine (heap and
//!   registered memory one-sided or through the node mapping, the rest through
//!   Firehose).
//!
//! `FH_VIS_ALGORITHM=auto`: node peer where it applies; then, off the node, pack if
//! the segments average at most `FH_VIS_PACK_MAX` bytes, else datatype where it
//! applies, else direct. `pack` forces pack; `datatype` and `direct` force theirs
//! where they apply (the node-peer copy still serves node peers' user memory).
//!
//! Guarantees:
//! - every argument is checked before anything moves: the shapes and their totals
//!   (`shape`), the rank, and that no remote piece touches the library's own
//!   structures; so a refused call has written nothing. Once transfers are issued, a
//!   refusal by the target (`FH_ERR_ACCESS`) may leave earlier pieces written;
//! - the caller's lists are read before the call returns;
//! - a non-blocking call never waits for a firehose move: its direct pieces that
//!   miss are deferred like `fh_put_nb`'s, and its handle (`Op::Group`) completes
//!   when every piece (and every packed message) has;
//! - overlapping destination pieces: the bytes written there are those of one of the
//!   overlapping pieces, which one is unspecified (as in GASNet).

use super::handles::{Dir, Handle, Started, HANDLE_NULL};
use super::settings::VisAlgo;
use super::shape::{pair, Segment, Side};
use crate::api::ctx::CtxInner;
use crate::runtime::error::Result;

/// How a non-contiguous call completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Returns when the data is visible at the target (put) or here (get).
    Blocking,
    /// Returns a handle (`_nb`).
    Explicit,
    /// Joins the implicit set (`_nbi`).
    Implicit,
}

/// A segment's (remote, local) addresses.
fn ends(dir: Dir, g: &Segment) -> (usize, usize) {
    match dir {
        Dir::Put => (g.dst, g.src),
        Dir::Get => (g.src, g.dst),
    }
}

/// Segments as `(remote, local, len)`, the form the conduit's list operations and
/// the pack algorithm take.
fn pieces(dir: Dir, segs: &[Segment]) -> Vec<(usize, usize, usize)> {
    segs.iter()
        .map(|g| {
            let (rem, loc) = ends(dir, g);
            (rem, loc, g.len)
        })
        .collect()
}

impl CtxInner {
    /// The node-peer algorithm: to a peer the kernel copy reaches, every segment
    /// outside its heap and registered memory moves in one vectored copy (one system
    /// call per 1024 segments instead of one each), complete on return. Returns the
    /// segments left for the contiguous engine: the heap and registered ones (a
    /// memory copy through the node mapping), or all of them when the vectored copy
    /// failed, so that they are redone one by one and the failing piece is named.
    fn node_copy(&self, dir: Dir, r: usize, segs: Vec<Segment>) -> Vec<Segment> {
        if segs.len() < 2 || self.fh.local_side || !self.conduit.reaches_any_address(r) {
            return segs;
        }
        let (mut rest, any): (Vec<Segment>, Vec<Segment>) = segs
            .into_iter()
            .partition(|g| self.plain_access(r, ends(dir, g).0, g.len).is_some());
        if any.len() < 2 {
            rest.extend(any);
            return rest;
        }
        let pieces = pieces(dir, &any);
        // SAFETY: the local pieces are valid for the call (the public functions'
        // contract); the kernel checks the remote ones.
        match unsafe { self.conduit.copy_any_v(r, dir == Dir::Put, &pieces) } {
            Some(Ok(())) => {
                for g in &any {
                    self.count_rma(dir, g.len);
                }
            }
            _ => rest.extend(any),
        }
        rest
    }

    /// The automatic choice of the pack algorithm (`FH_VIS_ALGORITHM=auto`): a
    /// peer reached neither through the node mapping nor the kernel copy (the
    /// off-node path, where each segment would be one RMA and a firehose lookup),
    /// and segments that average at most `FH_VIS_PACK_MAX` bytes (docs/PERFORMANCE.md
    /// has the measurement behind the default).
    fn pack_pays(&self, r: usize, segs: &[Segment]) -> bool {
        let max = self.cfg.rma.vis_pack_max;
        self.cfg.rma.vis_algo == VisAlgo::Auto
            && segs.len() >= 2
            && max > 0
            && r != self.rank
            && !self.conduit.reaches_any_address(r)
            && self.conduit.native(r, self.remote_heaps[r].0, 1).is_none()
            && segs.iter().map(|g| g.len).sum::<usize>() / segs.len() <= max
    }

    /// The datatype algorithm (seed 002's "MPI derived datatypes on the MPI
    /// conduit"): one conduit operation for every segment (`Conduit::rma_v`: one
    /// `MPI_Put`/`MPI_Get` with hindexed datatypes), when asked for
    /// (`FH_VIS_ALGORITHM=datatype`) or, under `auto`, when the segments average more
    /// than `FH_VIS_PACK_MAX` bytes; only where the target section lies in the
    /// peer's heap or one region it registered (one window attachment) and the
    /// conduit reaches it with MPI. `None`: not applicable, the caller goes on with
    /// direct.
    fn typed(
        &self,
        dir: Dir,
        r: usize,
        segs: &[Segment],
        how: Completion,
    ) -> Result<Option<Handle>> {
        let total: usize = segs.iter().map(|g| g.len).sum();
        let wanted = match self.cfg.rma.vis_algo {
            VisAlgo::Datatype => true,
            VisAlgo::Auto => segs.len() >= 2 && total / segs.len() > self.cfg.rma.vis_pack_max,
            _ => false,
        };
        if !wanted || self.fh.local_side || r == self.rank {
            return Ok(None);
        }
        let lo = segs.iter().map(|g| ends(dir, g).0).min().unwrap_or(0);
        let hi = segs
            .iter()
            .map(|g| ends(dir, g).0 + g.len)
            .max()
            .unwrap_or(0);
        if self.plain_access(r, lo, hi - lo).is_none() && !self.regtab_lookup(r, lo, hi - lo)? {
            return Ok(None);
        }
        let Some(_proof) = self.plain_access(r, lo, hi - lo) else {
            return Ok(None);
        };
        let pieces = pieces(dir, segs);
        let sync = how == Completion::Blocking;
        // SAFETY: the local pieces are valid until completion (the public functions'
        // contract); the remote extent is the peer's heap or a region it registered
        // (proof held).
        match unsafe { self.conduit.rma_v(r, dir == Dir::Put, &pieces, sync) } {
            None => return Ok(None),
            Some(res) => res?,
        }
        for g in segs {
            self.count_rma(dir, g.len);
        }
        Ok(Some(match how {
            Completion::Blocking => HANDLE_NULL,
            Completion::Explicit => {
                self.maybe_poll();
                self.rma.new_handle(r)
            }
            Completion::Implicit => {
                self.rma.bump(r);
                self.nbi_issued(dir, r, self.rma.in_region());
                self.maybe_poll();
                HANDLE_NULL
            }
        }))
    }

    /// The pack algorithm (`super::pack`) with each completion.
    fn packed(&self, dir: Dir, r: usize, segs: &[Segment], how: Completion) -> Result<Handle> {
        let pieces = pieces(dir, segs);
        let op = self.pack_start(dir, r, &pieces)?;
        match how {
            Completion::Blocking => {
                self.pack_wait(&op, r)?;
                Ok(HANDLE_NULL)
            }
            Completion::Explicit => {
                self.maybe_poll();
                Ok(self.rma.new_pack(op))
            }
            Completion::Implicit => {
                self.rma.add_nbi_pack(op);
                self.maybe_poll();
                Ok(HANDLE_NULL)
            }
        }
    }

    /// Put: local `src`'s bytes into `dst` on `rank`. Returns the handle of an
    /// [`Completion::Explicit`] call (else `HANDLE_NULL`).
    pub fn vis_put(&self, rank: i64, dst: &Side, src: &Side, how: Completion) -> Result<Handle> {
        self.vis(Dir::Put, rank, dst, src, how)
    }

    /// Get: `src` on `rank` into local `dst`.
    pub fn vis_get(&self, dst: &Side, rank: i64, src: &Side, how: Completion) -> Result<Handle> {
        self.vis(Dir::Get, rank, src, dst, how)
    }

    /// The remote side is `remote`, the local one `local`, whatever the direction.
    fn vis(
        &self,
        dir: Dir,
        rank: i64,
        remote: &Side,
        local: &Side,
        how: Completion,
    ) -> Result<Handle> {
        self.check_live()?;
        crate::api::am::check_not_in_handler("put/get (vector, indexed, strided)")?;
        let r = self.check_rank(rank)?;
        let segs = match dir {
            Dir::Put => pair(remote, local)?,
            Dir::Get => pair(local, remote)?,
        };
        let ends = |g: &Segment| ends(dir, g);
        for g in &segs {
            self.check_not_internal(r, ends(g).0, g.len)?;
        }
        let forced = self.cfg.rma.vis_algo == VisAlgo::Pack;
        let segs = if forced {
            segs
        } else {
            self.node_copy(dir, r, segs)
        };
        if segs.is_empty() {
            return Ok(HANDLE_NULL);
        }
        if forced || self.pack_pays(r, &segs) {
            return self.packed(dir, r, &segs, how);
        }
        if let Some(h) = self.typed(dir, r, &segs, how)? {
            return Ok(h);
        }
        if how == Completion::Implicit {
            for g in &segs {
                let (rem, loc) = ends(g);
                self.nbi(dir, rank, rem, loc, g.len)?;
            }
            return Ok(HANDLE_NULL);
        }
        let mut deferred = Vec::new();
        for g in &segs {
            let (rem, loc) = ends(g);
            match self.start_deferred(dir, r, rem, loc, g.len, false)? {
                Some(Started::Waiting(d)) => deferred.push(d),
                Some(Started::Issued) => {}
                None => self.transfer(dir, r, rem, loc, g.len, false)?,
            }
            self.count_rma(dir, g.len);
        }
        let h = self.rma.new_group(r, deferred);
        if how == Completion::Blocking {
            self.wait(h)?;
            return Ok(HANDLE_NULL);
        }
        self.maybe_poll();
        Ok(h)
    }
}
