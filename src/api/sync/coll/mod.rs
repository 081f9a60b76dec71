//! Collectives over the eager channels ([`super::chan`]).
//!
//! - **Broadcast** on seed 004 §2.3's postal-model optimal tree: with latency λ
//!   (in units of the time between two sends), a rank informed at time t sends to a
//!   new rank at t, t+1, t+2, ..., each informed at its send time + λ. Greedy earliest
//!   sender is optimal in the postal model; λ = 1 gives the binomial tree. Large
//!   messages are pipelined: a rank forwards chunk j to its children straight from
//!   its inbox slot while its parent already sends chunk j+1.
//! - **Reduce** combines along a binomial tree in *rank order* (rank i holds the
//!   combination of ranks [i, i + 2^k)), so floating-point results depend only on N
//!   and count, never on the root or on timing; rank 0 forwards the result to the
//!   root chunk by chunk. **Allreduce** off the node path: recursive doubling in
//!   the same rank order (`doubling`) for the first chunk, reduce to 0 + broadcast
//!   from 0 for the rest of a larger one.
//! - **Allgather** gathers contiguous blocks up the same binomial tree into `dst`,
//!   then broadcasts `dst` from rank 0.
//!
//! Collectives on one context are called by all ranks in the same order, from one
//! thread at a time (a second concurrent caller gets FH_ERR_STATE).
//!
//! The files: `ops.rs` (datatypes, operations, the combination), `call.rs` (a
//! call's entry, description, streams and end), this file (the trees and the
//! flows of broadcast, reduce, allreduce, allgather), `doubling.rs` (recursive
//! doubling), `node.rs` and `node_big.rs` (through the node's shared slots and
//! staging windows).

mod call;
mod doubling;
mod node;
mod node_big;
mod ops;

pub use super::state::{postal_tree, CollState, Tree};
use crate::api::ctx::CtxInner;
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use crate::{bail, err};
use call::{describe, Call, K_ALLGATHER, K_ALLREDUCE, K_BCAST, K_LAMBDA, K_REDUCE};
pub use ops::{combine, dtype_size, Comb, UserFn};
pub use ops::{
    BAND, BOR, BXOR, CDOUBLE, CFLOAT, DOUBLE, FLOAT, INT16, INT32, INT64, INT8, LAND, LOR, MAX,
    MIN, PROD, SUM, UINT16, UINT32, UINT64, UINT8,
};
use std::time::Instant;

/// Largest collective payload accepted (bytes).
pub const MAX_BYTES: usize = 1 << 40;

/// Binomial tree in rank order: (parent, children in increasing distance).
fn binomial(me: usize, n: usize) -> (Option<usize>, Vec<usize>) {
    let low = if me == 0 {
        None
    } else {
        Some(me & me.wrapping_neg())
    };
    (low.map(|k| me - k), binomial_kids(me, n).collect())
}

/// The children of `me` in the binomial tree of `n` ranks, nearest first
/// (`me + 1, me + 2, me + 4, ...` below `me`'s lowest set bit), without allocating.
fn binomial_kids(me: usize, n: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(move |&k| k < n && me & k == 0)
        .map(move |k| me + k)
        .filter(move |&c| c < n)
}

/// Ranks in the binomial subtree of `r`: [r, r + span).
fn span(r: usize, n: usize) -> usize {
    let low = if r == 0 {
        n.next_power_of_two()
    } else {
        r & r.wrapping_neg()
    };
    low.min(n - r)
}

/// One rank's part in a reduction ([`CtxInner::reduce_flow`]).
struct Red<'a> {
    /// Where this rank's combination goes (parent, or the root from rank 0).
    up: Option<usize>,
    /// This rank is a root other than 0: the result comes from rank 0.
    from0: bool,
    kids: &'a [usize],
    src: usize,
    dst: usize,
    nbytes: usize,
    comb: Comb,
    /// Bytes per chunk (whole elements).
    chunk: usize,
}

impl CtxInner {
    /// The broadcast tree, built at a context's first collective (λ from
    /// FH_BCAST_LAMBDA, or measured by rank 0 and broadcast on the binomial tree as a
    /// call of its own, so every rank builds the same tree whatever its first
    /// collective is).
    fn ensure_tree(&self, st: &mut CollState) -> Result<()> {
        if st.tree.is_some() {
            return Ok(());
        }
        let lambda = match self.cfg.sync.bcast_lambda {
            Some(l) => l,
            None => {
                let mut v = [0u8; 8];
                if self.rank == 0 {
                    v = (self.measure_lambda()? as u64).to_ne_bytes();
                }
                st.seq += 1;
                let mut call = self.call(st, "fh_broadcast (tree set-up)", K_LAMBDA, 0, 8, (0, 0));
                let bin = postal_tree(self.size, 1);
                self.bcast_flow(st, &mut call, &bin, 0, v.as_mut_ptr(), 8)?;
                self.finish(st, call)?;
                u64::from_ne_bytes(v).clamp(1, 64) as u32
            }
        };
        st.tree = Some((lambda, postal_tree(self.size, lambda)));
        self.info
            .lock()
            .push(format!("broadcast tree: postal model, lambda {}", lambda));
        Ok(())
    }

    /// λ = (time for a one-word flag to land at rank 1) / (time between two sends).
    fn measure_lambda(&self) -> Result<u32> {
        let a = self.area()?;
        let to = 1 % self.size;
        let w = a.scratch(self.area_base(to));
        let reps = 64u32;
        let t0 = Instant::now();
        for i in 0..reps {
            self.word(to, w, AtomicOp::Set(i as u64))?;
        }
        let per_send = t0.elapsed().as_secs_f64() / reps as f64;
        let t1 = Instant::now();
        for i in 0..reps {
            self.word(to, w, AtomicOp::Swap(i as u64))?;
        }
        let round_trip = t1.elapsed().as_secs_f64() / reps as f64;
        // A send costs the overhead; a swap is a round trip: half of it is latency.
        let l = (round_trip * 0.5 + per_send) / per_send.max(1e-9);
        Ok((l.round() as u32).clamp(1, 64))
    }

    /// Broadcast `nbytes` at `buf` from `root` on `tree` (relative ranks): the parent's
    /// stream is forwarded to the children chunk by chunk, straight from the inbox.
    /// A failed call sends error chunks down instead and drains the parent's stream.
    fn bcast_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        tree: &Tree,
        root: usize,
        buf: *mut u8,
        nbytes: usize,
    ) -> Result<()> {
        let n = self.size;
        let chunk = self.area()?.chunk;
        let rel = (self.rank + n - root) % n;
        let abs = |r: usize| (r + root) % n;
        let kids: Vec<usize> = tree.children[rel].iter().map(|&c| abs(c)).collect();
        let parent = (rel != 0).then(|| abs(tree.parent[rel]));
        call.expect.extend(parent);
        let count = nbytes.div_ceil(chunk).max(1);
        for j in 0..count {
            if call.failed() {
                break;
            }
            let off = j * chunk;
            let len = chunk.min(nbytes - off);
            let last = j + 1 == count;
            // SAFETY: buf is valid for nbytes (caller); off <= nbytes.
            let at = unsafe { buf.add(off) };
            let Some(p) = parent else {
                for &c in &kids {
                    self.c_send(st, call, c, at, len, last)?;
                }
                continue;
            };
            let Some(got) = self.c_recv(st, call, p)? else {
                break;
            };
            if !self.c_accept(call, p, &got, j == 0, len) {
                break;
            }
            for &c in &kids {
                // Forward from the inbox slot: registered memory, no copy.
                self.c_send(st, call, c, got.data, len, last)?;
            }
            // SAFETY: got.data is len bytes of our area, at is valid for len.
            unsafe { std::ptr::copy_nonoverlapping(got.data, at, len) };
            self.c_done(st, call, p, &got)?;
        }
        for &c in &kids {
            self.end_send(st, call, c)?;
        }
        if let Some(p) = parent {
            self.end_recv(st, call, p)?;
        }
        Ok(())
    }

    /// A call whose second phase is a broadcast from `root` expects its parent's
    /// chunks from the start: they may arrive while the first phase still sends,
    /// and a chunk from a rank not expected is consumed as a mismatch (`chan_send`).
    fn expect_bcast_parent(&self, st: &CollState, call: &mut Call, root: usize) {
        let n = self.size;
        let rel = (self.rank + n - root) % n;
        if let (Some((_, tree)), true) = (&st.tree, rel != 0) {
            call.expect.push((tree.parent[rel] + root) % n);
        }
    }

    /// [`Self::bcast_flow`] on the context's tree (built at the first collective).
    fn bcast_main(
        &self,
        st: &mut CollState,
        call: &mut Call,
        root: usize,
        buf: *mut u8,
        nbytes: usize,
    ) -> Result<()> {
        let (l, tree) = st.tree.take().expect("built at entry");
        let r = self.bcast_flow(st, call, &tree, root, buf, nbytes);
        st.tree = Some((l, tree));
        r
    }

    /// A collective's root, or, when out of range, rank 0 standing in with the
    /// refusal: the call still takes part, failed, so the ranks that hear from this
    /// one fail too and nobody waits for a rank that left (its call number is taken).
    fn coll_root(&self, root: i64) -> (usize, Option<crate::runtime::error::Error>) {
        match self.check_rank(root) {
            Ok(r) => (r, None),
            Err(e) => (0, Some(e)),
        }
    }

    /// `fh_broadcast`.
    pub fn broadcast(&self, root: i64, buf: usize, nbytes: usize) -> Result<()> {
        let mut st = self.coll_enter("fh_broadcast")?;
        let (root, bad_root) = self.coll_root(root);
        let mut call = self.call(&mut st, "fh_broadcast", K_BCAST, root, nbytes, (0, 0));
        if let Some(e) = bad_root {
            call.fail(e, self.rank);
        }
        if let Err(e) = check_buf(buf, nbytes, "broadcast: buf") {
            call.fail(e, self.rank);
        }
        if self.size > 1
            && !(self.node_fast(K_BCAST, call.d.nbytes)
                && self.node_bcast(&mut st, &mut call, root, buf, nbytes)?)
        {
            self.bcast_main(&mut st, &mut call, root, buf as *mut u8, nbytes)?;
        }
        self.finish(&mut st, call)
    }

    /// Reduce to rank 0 along the binomial tree in rank order, then (if `root != 0`)
    /// pass the result to `root`, chunk by chunk.
    #[allow(clippy::too_many_arguments)]
    fn reduce_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        root: usize,
        src: usize,
        dst: usize,
        nbytes: usize,
        comb: Comb,
    ) -> Result<()> {
        let (me, n) = (self.rank, self.size);
        let esz = comb.esz();
        let (parent, kids) = binomial(me, n);
        let red = Red {
            // Rank 0 passes the result to a root other than itself.
            up: parent.or((me == 0 && root != 0).then_some(root)),
            from0: me == root && root != 0,
            kids: &kids,
            src,
            dst,
            nbytes,
            comb,
            // At least one element: a call refused for too large an element moves 0 bytes.
            chunk: (self.area()?.chunk / esz * esz).max(esz),
        };
        call.expect.extend(&kids);
        if red.from0 {
            call.expect.push(0);
        }
        let mut acc = std::mem::take(&mut st.acc);
        acc.resize(red.chunk.min(nbytes), 0);
        let r = self.reduce_chunks(st, call, &red, &mut acc);
        st.acc = acc;
        r?;
        if let Some(p) = red.up {
            self.end_send(st, call, p)?;
        }
        for &c in &kids {
            self.end_recv(st, call, c)?;
        }
        if red.from0 {
            self.end_recv(st, call, 0)?;
        }
        Ok(())
    }

    /// The chunk loop of [`Self::reduce_flow`]: combine the children's chunks into
    /// `acc` and pass each on (to the parent, the root, or `dst`). Stops at the
    /// call's first failure; the caller ends the streams.
    fn reduce_chunks(
        &self,
        st: &mut CollState,
        call: &mut Call,
        red: &Red<'_>,
        acc: &mut [u8],
    ) -> Result<()> {
        let (chunk, nbytes) = (red.chunk, red.nbytes);
        let count = nbytes.div_ceil(chunk).max(1);
        for j in 0..count {
            if call.failed() {
                return Ok(());
            }
            let off = j * chunk;
            let len = chunk.min(nbytes - off);
            let last = j + 1 == count;
            let acc = &mut acc[..len];
            // SAFETY: src is valid for nbytes (caller).
            acc.copy_from_slice(unsafe {
                std::slice::from_raw_parts((red.src + off) as *const u8, len)
            });
            for &c in red.kids {
                let Some(got) = self.c_recv(st, call, c)? else {
                    return Ok(());
                };
                if !self.c_accept(call, c, &got, j == 0, len) {
                    return Ok(());
                }
                // SAFETY: got.data is len bytes of our area.
                let theirs = unsafe { std::slice::from_raw_parts(got.data, len) };
                red.comb.apply(acc, theirs);
                self.c_done(st, call, c, &got)?;
            }
            match red.up {
                Some(p) => self.c_send(st, call, p, acc.as_ptr(), len, last)?,
                // SAFETY: dst is valid for nbytes at the root (caller).
                None => unsafe {
                    std::ptr::copy_nonoverlapping(acc.as_ptr(), (red.dst + off) as *mut u8, len)
                },
            }
            if red.from0 {
                let Some(got) = self.c_recv(st, call, 0)? else {
                    return Ok(());
                };
                if !self.c_accept(call, 0, &got, j == 0, len) {
                    return Ok(());
                }
                // SAFETY: got.data is len bytes of our area; dst is valid for nbytes
                // at the root (caller).
                unsafe { std::ptr::copy_nonoverlapping(got.data, (red.dst + off) as *mut u8, len) };
                self.c_done(st, call, 0, &got)?;
            }
        }
        Ok(())
    }

    /// `fh_reduce`: `dst` is written at `root` only (it may be NULL elsewhere).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        root: i64,
        src: usize,
        dst: usize,
        count: usize,
        dt: i32,
        op: i32,
    ) -> Result<()> {
        self.reduce_with(root, src, dst, count, Comb::Builtin { dt, op })
    }

    /// The payload of a reduction, or why this rank's arguments are refused.
    fn red_bytes(
        &self,
        comb: &Comb,
        count: usize,
        src: usize,
        dst: Option<usize>,
    ) -> Result<usize> {
        let b = comb.bytes(count)?;
        if comb.esz() > self.area()?.chunk {
            bail!(
                InvalidArg,
                "elem_size {} is larger than a collective chunk ({} bytes)",
                comb.esz(),
                self.area()?.chunk
            );
        }
        check_buf(src, b, "reduce: src")?;
        if let Some(d) = dst {
            check_buf(d, b, "reduce: dst")?;
        }
        Ok(b)
    }

    /// A reduction's call record and payload; an argument this rank refuses is
    /// recorded in the call (payload 0), so it still takes part and every rank learns.
    fn red_call(
        &self,
        st: &mut CollState,
        name: &'static str,
        (kind, root, count, comb): (u8, usize, usize, Comb),
        src: usize,
        dst: Option<usize>,
    ) -> (Call, usize) {
        let want = *comb.bytes(count).as_ref().unwrap_or(&0);
        let mut call = self.call(st, name, kind, root, want, comb.codes());
        let nbytes = match self.red_bytes(&comb, count, src, dst) {
            Ok(b) => b,
            Err(e) => {
                call.fail(e, self.rank);
                0
            }
        };
        (call, nbytes)
    }

    /// A reduction on one rank: the result is the operand.
    fn red_alone(
        &self,
        st: &mut CollState,
        call: Call,
        src: usize,
        dst: usize,
        nbytes: usize,
    ) -> Result<()> {
        if !call.failed() && nbytes > 0 {
            // SAFETY: both valid for nbytes (checked non-null; caller's contract).
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, nbytes) };
        }
        self.finish(st, call)
    }

    /// `fh_reduce` (built-in `comb`) and `fh_reduce_fn` (a user's).
    pub fn reduce_with(
        &self,
        root: i64,
        src: usize,
        dst: usize,
        count: usize,
        comb: Comb,
    ) -> Result<()> {
        let name = comb.call_name("fh_reduce", "fh_reduce_fn");
        let mut st = self.coll_enter(name)?;
        let (root, bad_root) = self.coll_root(root);
        let at_root = (self.rank == root && bad_root.is_none()).then_some(dst);
        let how = (K_REDUCE, root, count, comb);
        let (mut call, mut nbytes) = self.red_call(&mut st, name, how, src, at_root);
        if let Some(e) = bad_root {
            call.fail(e, self.rank);
            nbytes = 0;
        }
        if self.size == 1 {
            return self.red_alone(&mut st, call, src, dst, nbytes);
        }
        if !(self.node_fast(K_REDUCE, call.d.nbytes)
            && self.node_coll(&mut st, &mut call, (src, dst), nbytes, Some(comb))?)
        {
            self.reduce_flow(&mut st, &mut call, root, src, dst, nbytes, comb)?;
        }
        self.finish(&mut st, call)
    }

    /// `fh_allreduce`: through the node slots on a one-node job, else by recursive
    /// doubling (a failure anywhere reaches every rank).
    pub fn allreduce(&self, src: usize, dst: usize, count: usize, dt: i32, op: i32) -> Result<()> {
        self.allreduce_with(src, dst, count, Comb::Builtin { dt, op })
    }

    /// `fh_allreduce` (built-in `comb`) and `fh_allreduce_fn` (a user's).
    pub fn allreduce_with(&self, src: usize, dst: usize, count: usize, comb: Comb) -> Result<()> {
        let name = comb.call_name("fh_allreduce", "fh_allreduce_fn");
        let mut st = self.coll_enter(name)?;
        let how = (K_ALLREDUCE, 0, count, comb);
        let (mut call, nbytes) = self.red_call(&mut st, name, how, src, Some(dst));
        if self.size == 1 {
            return self.red_alone(&mut st, call, src, dst, nbytes);
        }
        if !(self.node_fast(K_ALLREDUCE, call.d.nbytes)
            && self.node_coll(&mut st, &mut call, (src, dst), nbytes, Some(comb))?)
        {
            self.allreduce_flow(&mut st, &mut call, (src, dst), nbytes, comb)?;
        }
        self.finish(&mut st, call)
    }

    /// An allreduce off the node path: the first chunk by recursive doubling
    /// (`doubling`: the ranks agree there whether the call failed), the rest, if
    /// any, reduced to 0 and broadcast from 0 on the trees.
    fn allreduce_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        (src, dst): (usize, usize),
        nbytes: usize,
        comb: Comb,
    ) -> Result<()> {
        let esz = comb.esz();
        let head = nbytes.min((self.area()?.chunk / esz * esz).max(esz));
        let rest = nbytes - head;
        if rest > 0 {
            // The trees' chunks may arrive while the doubling still runs: expected.
            self.expect_bcast_parent(st, call, 0);
            call.expect.extend(binomial_kids(self.rank, self.size));
        }
        self.doubling_flow(st, call, (src, dst), head, comb)?;
        if rest == 0 || call.failed() {
            return Ok(());
        }
        // New streams to the same ranks in the same call.
        call.ended.clear();
        call.closed.retain(|&r| r == usize::MAX);
        let (src, dst) = (src + head, dst + head);
        self.reduce_flow(st, call, 0, src, dst, rest, comb)?;
        self.bcast_main(st, call, 0, dst as *mut u8, rest)
    }

    /// `fh_allgather`: rank i's `nbytes` land at `dst + i * nbytes` on every rank.
    /// Blocks travel up the binomial tree into `dst`, then `dst` is broadcast from 0.
    ///
    /// Long because the coll guard `st` and the `call` record thread through every
    /// phase (argument check, gather from kids, send to parent, end markers, broadcast):
    /// an argument error is recorded in `call`, not returned, so this rank still takes
    /// part in the end markers and broadcast with its tree neighbours.
    pub fn allgather(&self, src: usize, nbytes: usize, dst: usize) -> Result<()> {
        let mut st = self.coll_enter("fh_allgather")?;
        let n = self.size;
        let me = self.rank;
        let mut call = self.call(&mut st, "fh_allgather", K_ALLGATHER, 0, nbytes, (0, 0));
        let total = nbytes
            .checked_mul(n)
            .filter(|&t| t <= MAX_BYTES)
            .ok_or_else(|| {
                err!(
                    InvalidArg,
                    "allgather: {} bytes from {} ranks is too large",
                    nbytes,
                    n
                )
            })
            .and_then(|t| {
                check_buf(src, nbytes, "allgather: src")?;
                check_buf(dst, t, "allgather: dst")?;
                Ok(t)
            });
        let (nbytes, total) = match total {
            Ok(t) => (nbytes, t),
            Err(e) => {
                call.fail(e, me);
                (0, 0)
            }
        };
        if !call.failed() && nbytes > 0 {
            // SAFETY: src valid for nbytes, dst for total (caller); they may overlap
            // only if the caller passed src == dst + me*nbytes, which copy handles.
            unsafe { std::ptr::copy(src as *const u8, (dst + me * nbytes) as *mut u8, nbytes) };
        }
        if n == 1 {
            return self.finish(&mut st, call);
        }
        let chunk = self.area()?.chunk;
        let (parent, kids) = binomial(me, n);
        call.expect.extend(&kids);
        self.expect_bcast_parent(&st, &mut call, 0);
        'kids: for &c in &kids {
            let (start, end) = (c * nbytes, (c + span(c, n)) * nbytes);
            let count = (end - start).div_ceil(chunk).max(1);
            for j in 0..count {
                if call.failed() {
                    break 'kids;
                }
                let off = start + j * chunk;
                let len = chunk.min(end - off);
                let Some(got) = self.c_recv(&mut st, &mut call, c)? else {
                    break 'kids;
                };
                if !self.c_accept(&mut call, c, &got, j == 0, len) {
                    break 'kids;
                }
                // SAFETY: got.data is len bytes of our area; dst is valid for total.
                unsafe { std::ptr::copy_nonoverlapping(got.data, (dst + off) as *mut u8, len) };
                self.c_done(&mut st, &mut call, c, &got)?;
            }
        }
        if let Some(p) = parent {
            let (start, end) = (me * nbytes, (me + span(me, n)) * nbytes);
            let count = (end - start).div_ceil(chunk).max(1);
            for j in 0..count {
                if call.failed() {
                    break;
                }
                let off = start + j * chunk;
                let len = chunk.min(end - off);
                self.c_send(
                    &mut st,
                    &mut call,
                    p,
                    (dst + off) as *const u8,
                    len,
                    j + 1 == count,
                )?;
            }
            self.end_send(&mut st, &mut call, p)?;
        }
        for &c in &kids {
            self.end_recv(&mut st, &mut call, c)?;
        }
        self.bcast_main(&mut st, &mut call, 0, dst as *mut u8, total)?;
        self.finish(&mut st, call)
    }
}

fn check_buf(p: usize, nbytes: usize, what: &str) -> Result<()> {
    if nbytes > 0 && p == 0 {
        bail!(InvalidArg, "{} is NULL ({} bytes)", what, nbytes);
    }
    if nbytes > MAX_BYTES || p.checked_add(nbytes).is_none() {
        bail!(InvalidArg, "{}: {} bytes is too large", what, nbytes);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    fn depth(t: &Tree, mut r: usize) -> usize {
        let mut d = 0;
        while r != 0 {
            r = t.parent[r];
            d += 1;
        }
        d
    }

    #[test]
    fn postal_tree_is_a_tree_and_lambda_1_is_binomial() {
        for n in 1..40 {
            for l in [1, 2, 3, 5] {
                let t = postal_tree(n, l);
                let mut seen = vec![false; n];
                seen[0] = true;
                for r in 1..n {
                    assert!(t.parent[r] < r, "parents are informed first");
                    assert!(t.children[t.parent[r]].contains(&r));
                    seen[r] = true;
                }
                assert!(seen.iter().all(|&s| s));
            }
            // λ = 1: rank r's parent clears r's highest bit (binomial).
            let t = postal_tree(n, 1);
            for r in 1..n {
                let hb = 1 << (usize::BITS - 1 - r.leading_zeros());
                assert_eq!(t.parent[r], r - hb, "n {} r {}", n, r);
            }
        }
    }

    #[test]
    fn larger_lambda_gives_flatter_trees() {
        let n = 64;
        let d1 = (1..n).map(|r| depth(&postal_tree(n, 1), r)).max().unwrap();
        let d8 = (1..n).map(|r| depth(&postal_tree(n, 8), r)).max().unwrap();
        assert!(d8 < d1, "λ=8 depth {} vs binomial {}", d8, d1);
        assert!(postal_tree(n, 8).children[0].len() > postal_tree(n, 1).children[0].len());
    }

    /// The tree as a loop over the bits of `me` would build it.
    #[test]
    fn binomial_parent_and_kids_match_the_bit_loop() {
        for n in 1..70 {
            for me in 0..n {
                let (mut parent, mut kids, mut k) = (None, Vec::new(), 1usize);
                while k < n {
                    if me & k != 0 {
                        parent = Some(me - k);
                        break;
                    }
                    if me + k < n {
                        kids.push(me + k);
                    }
                    k <<= 1;
                }
                assert_eq!(binomial(me, n), (parent, kids), "n {} me {}", n, me);
            }
        }
    }

    #[test]
    fn binomial_spans_cover_everything() {
        for n in 1..33 {
            let mut covered = vec![0; n];
            for r in 0..n {
                let (p, kids) = binomial(r, n);
                assert_eq!(p.is_none(), r == 0);
                let s: usize = kids.iter().map(|&c| span(c, n)).sum();
                assert_eq!(span(r, n), 1 + s, "n {} r {}", n, r);
                for i in r..r + span(r, n) {
                    covered[i] += 1;
                }
            }
            assert!(covered.iter().all(|&c| c >= 1));
        }
    }
}
