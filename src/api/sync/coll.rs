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
//!   root chunk by chunk. **Allreduce** = reduce to 0 + broadcast from 0.
//! - **Allgather** gathers contiguous blocks up the same binomial tree into `dst`,
//!   then broadcasts `dst` from rank 0.
//!
//! Collectives on one context are called by all ranks in the same order, from one
//! thread at a time (a second concurrent caller gets FH_ERR_STATE).

use super::chan::Chans;
use crate::api::ctx::CtxInner;
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::time::Instant;

pub const INT32: i32 = 0;
pub const INT64: i32 = 1;
pub const UINT32: i32 = 2;
pub const UINT64: i32 = 3;
pub const FLOAT: i32 = 4;
pub const DOUBLE: i32 = 5;

pub const SUM: i32 = 0;
pub const PROD: i32 = 1;
pub const MIN: i32 = 2;
pub const MAX: i32 = 3;
pub const BAND: i32 = 4;
pub const BOR: i32 = 5;
pub const BXOR: i32 = 6;

/// Largest collective payload accepted (bytes).
pub const MAX_BYTES: usize = 1 << 40;

/// A broadcast tree over *relative* ranks (root = 0).
#[derive(Clone, Debug)]
pub struct Tree {
    pub parent: Vec<usize>,
    pub children: Vec<Vec<usize>>,
}

/// The postal-model optimal broadcast tree for `n` ranks and latency `lambda`.
pub fn postal_tree(n: usize, lambda: u32) -> Tree {
    let lambda = lambda.max(1) as u64;
    let mut parent = vec![0; n];
    let mut children = vec![Vec::new(); n];
    // (time this rank can send next, rank); min-heap by time, then rank.
    let mut ready = std::collections::BinaryHeap::new();
    ready.push(std::cmp::Reverse((0u64, 0usize)));
    for (next, p) in parent.iter_mut().enumerate().skip(1) {
        let std::cmp::Reverse((t, r)) = ready.pop().expect("root is always there");
        *p = r;
        children[r].push(next);
        ready.push(std::cmp::Reverse((t + 1, r)));
        ready.push(std::cmp::Reverse((t + lambda, next)));
    }
    Tree { parent, children }
}

/// Per-context collective state.
pub struct CollState {
    pub chans: Chans,
    lambda: Option<u32>,
    tree: Option<(u32, Tree)>,
}

impl CollState {
    pub fn new(n: usize) -> CollState {
        CollState {
            chans: Chans::new(n),
            lambda: None,
            tree: None,
        }
    }
}

/// Bytes of one element of `dt`.
pub fn dtype_size(dt: i32) -> Result<usize> {
    Ok(match dt {
        INT32 | UINT32 | FLOAT => 4,
        INT64 | UINT64 | DOUBLE => 8,
        _ => bail!(
            InvalidArg,
            "datatype {} is not an fh_dtype_t (FH_INT32..FH_DOUBLE)",
            dt
        ),
    })
}

fn check_op(dt: i32, op: i32) -> Result<()> {
    if !(SUM..=BXOR).contains(&op) {
        bail!(
            InvalidArg,
            "operation {} is not an fh_op_t (FH_SUM..FH_BXOR)",
            op
        );
    }
    if matches!(dt, FLOAT | DOUBLE) && op >= BAND {
        bail!(
            InvalidArg,
            "bitwise operation {} on a floating-point datatype",
            op
        );
    }
    Ok(())
}

macro_rules! fold {
    ($t:ty, $acc:expr, $x:expr, $op:expr, $int:tt) => {{
        const S: usize = std::mem::size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(S).zip($x.chunks_exact(S)) {
            let l = <$t>::from_ne_bytes(a.try_into().expect("S bytes"));
            let r = <$t>::from_ne_bytes(b.try_into().expect("S bytes"));
            let v = fold!(@op $int, l, r, $op);
            a.copy_from_slice(&v.to_ne_bytes());
        }
    }};
    (@op int, $l:expr, $r:expr, $op:expr) => {
        match $op {
            SUM => $l.wrapping_add($r),
            PROD => $l.wrapping_mul($r),
            MIN => $l.min($r),
            MAX => $l.max($r),
            BAND => $l & $r,
            BOR => $l | $r,
            _ => $l ^ $r,
        }
    };
    (@op float, $l:expr, $r:expr, $op:expr) => {
        match $op {
            SUM => $l + $r,
            PROD => $l * $r,
            MIN => if $r < $l { $r } else { $l },
            _ => if $r > $l { $r } else { $l },
        }
    };
}

/// `acc = acc op x`, element-wise (acc is the left operand: lower ranks).
pub fn combine(acc: &mut [u8], x: &[u8], dt: i32, op: i32) {
    debug_assert_eq!(acc.len(), x.len());
    match dt {
        INT32 => fold!(i32, acc, x, op, int),
        INT64 => fold!(i64, acc, x, op, int),
        UINT32 => fold!(u32, acc, x, op, int),
        UINT64 => fold!(u64, acc, x, op, int),
        FLOAT => fold!(f32, acc, x, op, float),
        _ => fold!(f64, acc, x, op, float),
    }
}

/// Binomial tree in rank order: (parent, children in increasing distance).
fn binomial(me: usize, n: usize) -> (Option<usize>, Vec<usize>) {
    let mut kids = Vec::new();
    let mut k = 1usize;
    while k < n {
        if me & k != 0 {
            return (Some(me - k), kids);
        }
        if me + k < n {
            kids.push(me + k);
        }
        k <<= 1;
    }
    (None, kids)
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

impl CtxInner {
    fn coll_enter(&self, what: &str) -> Result<parking_lot::MutexGuard<'_, CollState>> {
        self.check_live()?;
        crate::api::am::check_not_in_handler(what)?;
        self.area()?;
        self.sync.coll.try_lock().ok_or_else(|| {
            err!(
                State,
                "{}: another collective is running on this context in another thread",
                what
            )
        })
    }

    /// The broadcast tree, built once (λ from FH_BCAST_LAMBDA or measured by rank 0
    /// and broadcast on the binomial tree, so every rank builds the same tree).
    fn bcast_tree(&self, st: &mut CollState) -> Result<Tree> {
        if let Some((_, t)) = &st.tree {
            return Ok(t.clone());
        }
        let lambda = match self.cfg.bcast_lambda.or(st.lambda) {
            Some(l) => l,
            None => {
                let mut v = [0u8; 8];
                if self.rank == 0 {
                    v = (self.measure_lambda()? as u64).to_ne_bytes();
                }
                let bin = postal_tree(self.size, 1);
                self.bcast_on(st, &bin, 0, v.as_mut_ptr(), 8)?;
                let l = u64::from_ne_bytes(v).clamp(1, 64) as u32;
                st.lambda = Some(l);
                l
            }
        };
        let t = postal_tree(self.size, lambda);
        st.tree = Some((lambda, t.clone()));
        self.info
            .lock()
            .push(format!("broadcast tree: postal model, lambda {}", lambda));
        Ok(t)
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

    /// Broadcast on `tree` (relative ranks).
    fn bcast_on(
        &self,
        st: &mut CollState,
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
        let mut off = 0;
        while off < nbytes {
            let len = chunk.min(nbytes - off);
            // SAFETY: buf is valid for nbytes (caller).
            let at = unsafe { buf.add(off) };
            if rel == 0 {
                for &c in &kids {
                    self.chan_send(&mut st.chans, c, at, len)?;
                }
            } else {
                let p = abs(tree.parent[rel]);
                let (src, got) = self.chan_recv(&st.chans, p)?;
                if got != len {
                    let _ = self.chan_done(&mut st.chans, p);
                    bail!(
                        InvalidArg,
                        "broadcast: rank {} sent {} bytes where {} were expected (the ranks \
                         passed different sizes or roots)",
                        p,
                        got,
                        len
                    );
                }
                for &c in &kids {
                    // Forward from the inbox slot: registered memory, no copy.
                    self.chan_send(&mut st.chans, c, src, len)?;
                }
                // SAFETY: src is len bytes of our area, at is valid for len.
                unsafe { std::ptr::copy_nonoverlapping(src, at, len) };
                self.chan_done(&mut st.chans, p)?;
            }
            off += len;
        }
        Ok(())
    }

    /// `fh_broadcast`.
    pub fn broadcast(&self, root: i64, buf: usize, nbytes: usize) -> Result<()> {
        let root = self.check_rank(root)?;
        check_buf(buf, nbytes, "broadcast: buf")?;
        let mut st = self.coll_enter("fh_broadcast")?;
        if self.size == 1 || nbytes == 0 {
            return Ok(());
        }
        let tree = self.bcast_tree(&mut st)?;
        self.bcast_on(&mut st, &tree, root, buf as *mut u8, nbytes)
    }

    /// Reduce to rank 0, then (if `root != 0`) pass the result to `root`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_in(
        &self,
        st: &mut CollState,
        root: usize,
        src: usize,
        dst: usize,
        nbytes: usize,
        dt: i32,
        op: i32,
    ) -> Result<()> {
        let (me, n) = (self.rank, self.size);
        let esz = dtype_size(dt)?;
        let chunk = self.area()?.chunk / esz * esz;
        let (parent, kids) = binomial(me, n);
        let mut acc = vec![0u8; chunk.min(nbytes)];
        let mut off = 0;
        while off < nbytes {
            let len = chunk.min(nbytes - off);
            let acc = &mut acc[..len];
            // SAFETY: src is valid for nbytes (caller).
            acc.copy_from_slice(unsafe {
                std::slice::from_raw_parts((src + off) as *const u8, len)
            });
            for &c in &kids {
                let (p, got) = self.chan_recv(&st.chans, c)?;
                if got != len {
                    let _ = self.chan_done(&mut st.chans, c);
                    bail!(InvalidArg, "reduce: rank {} sent {} bytes where {} were expected (different counts or datatypes)", c, got, len);
                }
                // SAFETY: p is len bytes of our area.
                combine(acc, unsafe { std::slice::from_raw_parts(p, len) }, dt, op);
                self.chan_done(&mut st.chans, c)?;
            }
            match parent {
                Some(p) => self.chan_send(&mut st.chans, p, acc.as_ptr(), len)?,
                None if root == 0 => {
                    // SAFETY: dst is valid for nbytes at the root (caller).
                    unsafe {
                        std::ptr::copy_nonoverlapping(acc.as_ptr(), (dst + off) as *mut u8, len)
                    }
                }
                None => self.chan_send(&mut st.chans, root, acc.as_ptr(), len)?,
            }
            if me == root && root != 0 {
                // SAFETY: dst is valid for nbytes at the root (caller).
                self.chan_recv_into(&mut st.chans, 0, (dst + off) as *mut u8, len, "reduce")?;
            }
            off += len;
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
        let root = self.check_rank(root)?;
        let nbytes = reduce_bytes(count, dt, op)?;
        check_buf(src, nbytes, "reduce: src")?;
        if self.rank == root {
            check_buf(dst, nbytes, "reduce: dst")?;
        }
        let mut st = self.coll_enter("fh_reduce")?;
        if nbytes == 0 {
            return Ok(());
        }
        if self.size == 1 {
            // SAFETY: both valid for nbytes (checked non-null; caller's contract).
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, nbytes) };
            return Ok(());
        }
        self.reduce_in(&mut st, root, src, dst, nbytes, dt, op)
    }

    /// `fh_allreduce`.
    pub fn allreduce(&self, src: usize, dst: usize, count: usize, dt: i32, op: i32) -> Result<()> {
        let nbytes = reduce_bytes(count, dt, op)?;
        check_buf(src, nbytes, "allreduce: src")?;
        check_buf(dst, nbytes, "allreduce: dst")?;
        let mut st = self.coll_enter("fh_allreduce")?;
        if nbytes == 0 {
            return Ok(());
        }
        if self.size == 1 {
            // SAFETY: both valid for nbytes (caller's contract).
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, nbytes) };
            return Ok(());
        }
        self.reduce_in(&mut st, 0, src, dst, nbytes, dt, op)?;
        let tree = self.bcast_tree(&mut st)?;
        self.bcast_on(&mut st, &tree, 0, dst as *mut u8, nbytes)
    }

    /// `fh_allgather`: rank i's `nbytes` land at `dst + i * nbytes` on every rank.
    pub fn allgather(&self, src: usize, nbytes: usize, dst: usize) -> Result<()> {
        let n = self.size;
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
            })?;
        check_buf(src, nbytes, "allgather: src")?;
        check_buf(dst, total, "allgather: dst")?;
        let mut st = self.coll_enter("fh_allgather")?;
        if nbytes == 0 {
            return Ok(());
        }
        let me = self.rank;
        // SAFETY: src valid for nbytes, dst for total (caller); they may overlap only
        // if the caller passed src == dst + me*nbytes, which copy handles.
        unsafe { std::ptr::copy(src as *const u8, (dst + me * nbytes) as *mut u8, nbytes) };
        if n == 1 {
            return Ok(());
        }
        let chunk = self.area()?.chunk;
        let (parent, kids) = binomial(me, n);
        for &c in &kids {
            let (mut off, end) = (c * nbytes, (c + span(c, n)) * nbytes);
            while off < end {
                let len = chunk.min(end - off);
                self.chan_recv_into(&mut st.chans, c, (dst + off) as *mut u8, len, "allgather")?;
                off += len;
            }
        }
        if let Some(p) = parent {
            let (mut off, end) = (me * nbytes, (me + span(me, n)) * nbytes);
            while off < end {
                let len = chunk.min(end - off);
                self.chan_send(&mut st.chans, p, (dst + off) as *const u8, len)?;
                off += len;
            }
        }
        let tree = self.bcast_tree(&mut st)?;
        self.bcast_on(&mut st, &tree, 0, dst as *mut u8, total)
    }
}

fn reduce_bytes(count: usize, dt: i32, op: i32) -> Result<usize> {
    let esz = dtype_size(dt)?;
    check_op(dt, op)?;
    count
        .checked_mul(esz)
        .filter(|&b| b <= MAX_BYTES)
        .ok_or_else(|| err!(InvalidArg, "count {} is too large", count))
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

    #[test]
    fn combine_ops() {
        let mut a = 5i32.to_ne_bytes().to_vec();
        combine(&mut a, &(-7i32).to_ne_bytes(), INT32, MIN);
        assert_eq!(i32::from_ne_bytes(a[..].try_into().unwrap()), -7);
        let mut a = 2.5f64.to_ne_bytes().to_vec();
        combine(&mut a, &4.0f64.to_ne_bytes(), DOUBLE, PROD);
        assert_eq!(f64::from_ne_bytes(a[..].try_into().unwrap()), 10.0);
        let mut a = 0b1100u64.to_ne_bytes().to_vec();
        combine(&mut a, &0b1010u64.to_ne_bytes(), UINT64, BXOR);
        assert_eq!(u64::from_ne_bytes(a[..].try_into().unwrap()), 0b0110);
        assert!(check_op(FLOAT, BAND).is_err());
        assert!(dtype_size(9).is_err());
    }
}
