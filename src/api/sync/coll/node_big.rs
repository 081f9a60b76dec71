//! Large reductions of a one-node job: a reduce-scatter and an all-gather through
//! staging windows in the node-shared mapping (issue 18's `CO_SUM` of 1 MiB; issue 19
//! part 3's switch of algorithm above a measured size).
//!
//! Which calls: `fh_allreduce` and `fh_reduce` of more than a node slot ([`NSLOT`]) when every rank of
//! the context is on this node and every rank's sync area has the staging region
//! (`Area::with_big`: heaps large enough; every rank decides alike). Smaller calls
//! use the slots (`node`), other jobs the trees. The call's arguments are checked
//! against every rank's first, through the node slots (`node_coll`), as for a small
//! call.
//!
//! The operands move in windows of [`WINDOW`] bytes (the same offsets on every
//! rank), through two staging buffers per rank. Window k (buffer k & 1):
//! 1. every rank copies its part of the operand into its buffer and raises STAGED;
//! 2. once every rank staged, rank i combines slice i of the window ([`slice`]) from
//!    every rank's buffer in the binomial tree's rank order (the order of the tree
//!    path and of the slots: the same bits whatever the size), in place, so the
//!    result lands in rank 0's buffer, and raises REDUCED;
//! 3. once every rank reduced, every rank that receives the result (all of them, or
//!    the root of `fh_reduce`) copies the window's result from rank 0's buffer into
//!    its own result; every rank raises COPIED.
//!
//! A rank copies in window k + 1 while others still reduce window k; each of the
//! three steps touches its operand, result or buffer once, with no system call.
//!
//! Invariants: a flag (STAGED, REDUCED, COPIED: the words of the region's first
//! line) only grows: it says `seq << 32 | (k + 1)` for window k of call `seq`, and
//! COPIED says `seq << 32 | u32::MAX` once the call's last window is out. In window
//! k only rank i touches slice i of any buffer between STAGED and REDUCED. A rank
//! refills a buffer (window k) only after every rank's COPIED reached window k - 2,
//! or the end of the previous large call ([`CollState`]`::big_last`), so nobody
//! reads it any more. A rank's result is written only by itself, after it copied
//! its operand's window, so an operand and a result that are one buffer are safe.

use super::{Call, Comb, K_REDUCE};
use crate::api::ctx::CtxInner;
use crate::api::sync::area::{NSLOT, WINDOW};
use crate::api::sync::state::CollState;
use crate::runtime::error::Result;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// The flags of a staging region's first line.
#[derive(Clone, Copy)]
enum Flag {
    Staged = 0,
    Reduced = 1,
    Copied = 2,
}

/// What a flag says for window k of call `seq`.
fn mark(seq: u64, k: usize) -> u64 {
    debug_assert!(k < u32::MAX as usize - 1);
    seq << 32 | (k as u64 + 1)
}

/// Byte range `[lo, hi)` of rank `r`'s slice of `elems` elements of `esz` bytes
/// among `n` ranks (whole elements; the slices cover everything, in rank order).
pub(super) fn slice(r: usize, n: usize, elems: usize, esz: usize) -> (usize, usize) {
    let at = |i: usize| ((elems as u128 * i as u128 / n as u128) as usize) * esz;
    (at(r), at(r + 1))
}

impl CtxInner {
    /// A reduction of `nbytes` takes this path (every rank decides alike).
    pub(super) fn node_big_ok(&self, nbytes: u64) -> bool {
        nbytes > NSLOT as u64 && !self.sync.node.stage_at.is_empty()
    }

    fn flag(&self, r: usize, f: Flag) -> &'static AtomicU64 {
        let at = self.sync.node.stage_at[r] + 8 * f as usize;
        // SAFETY: the first line of a staging region of this node (mapped for the
        // context's life, 64-byte aligned), touched only through atomics.
        unsafe { AtomicU64::from_ptr(at as *mut u64) }
    }

    /// Buffer `b` of rank `r`'s staging region.
    fn buffer(&self, r: usize, b: usize) -> usize {
        self.sync.node.stage_at[r] + 64 + b * WINDOW
    }

    /// Raise our flag `f` to `v` and wake whoever waits for it.
    fn raise(&self, f: Flag, v: u64) {
        self.flag(self.rank, f).store(v, SeqCst);
        self.ring_node();
    }

    /// Wait until every rank's flag `f` reached `v`.
    fn all_reached(&self, f: Flag, v: u64, what: &'static str) -> Result<()> {
        let all = || (0..self.size).all(|r| self.flag(r, f).load(SeqCst) >= v);
        if all() {
            return Ok(());
        }
        let what = crate::api::stall::Wait::call("fh_allreduce/fh_reduce", None, what);
        self.wait_rung(what, || Ok(all()))
    }

    /// The module documentation's steps for `call`, whose arguments every rank
    /// agreed on; (`src`, `dst`) = this rank's operand and result buffer (used at
    /// the root only for `fh_reduce`).
    pub(super) fn node_big(
        &self,
        st: &mut CollState,
        call: &Call,
        (src, dst): (usize, usize),
        nbytes: usize,
        c: Comb,
    ) -> Result<()> {
        let (n, s, esz) = (self.size, call.d.seq, c.esz());
        let win = (WINDOW / esz).max(1) * esz;
        debug_assert!(win <= WINDOW, "elements are at most a chunk");
        let out = call.d.kind != K_REDUCE || call.d.root as usize == self.rank;
        let mut ops = Vec::with_capacity(n);
        for k in 0..nbytes.div_ceil(win) {
            let (b, off) = (k & 1, k * win);
            let len = win.min(nbytes - off);
            let free = if k < 2 { st.big_last } else { mark(s, k - 2) };
            self.all_reached(Flag::Copied, free, "every rank's copy of an earlier window")?;
            // SAFETY: src is valid for nbytes (caller); our buffer has WINDOW >= len
            // bytes that no rank reads before our STAGED says window k.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (src + off) as *const u8,
                    self.buffer(self.rank, b) as *mut u8,
                    len,
                )
            };
            self.raise(Flag::Staged, mark(s, k));
            self.all_reached(Flag::Staged, mark(s, k), "every rank's operand")?;
            let (lo, hi) = slice(self.rank, n, len / esz, esz);
            ops.clear();
            ops.extend((0..n).map(|r| self.buffer(r, b) + lo));
            // SAFETY: slice [lo, hi) of every buffer of window k is ours alone until
            // our REDUCED says k (module invariants).
            unsafe { fold_at(c, &ops, hi - lo) };
            self.raise(Flag::Reduced, mark(s, k));
            self.all_reached(
                Flag::Reduced,
                mark(s, k),
                "every rank's slice of the result",
            )?;
            if out {
                // SAFETY: rank 0's buffer holds the window's result until every
                // COPIED says k; dst is valid for nbytes where the result goes (caller).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.buffer(0, b) as *const u8,
                        (dst + off) as *mut u8,
                        len,
                    )
                };
            }
            self.raise(Flag::Copied, mark(s, k));
        }
        st.big_last = s << 32 | u32::MAX as u64;
        self.raise(Flag::Copied, st.big_last);
        Ok(())
    }
}

/// Combine `ops.len()` operands of `len` bytes (operand r at `ops[r]`) in the
/// binomial tree's rank order, leaving the result in operand 0: at distance k, the
/// subtree of r (ranks [r, r + 2k)) takes in its child r + k.
///
/// # Safety
/// Every `ops[r]` is valid for `len` bytes, the ranges are disjoint, and nothing
/// else touches them during the call.
unsafe fn fold_at(c: Comb, ops: &[usize], len: usize) {
    let n = ops.len();
    let mut k = 1;
    while k < n {
        for r in (0..n).step_by(2 * k).filter(|&r| r + k < n) {
            // SAFETY: the function's contract (disjoint ranges of len bytes).
            let (acc, x) = unsafe {
                (
                    std::slice::from_raw_parts_mut(ops[r] as *mut u8, len),
                    std::slice::from_raw_parts(ops[r + k] as *const u8, len),
                )
            };
            c.apply(acc, x);
        }
        k <<= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_in_order() {
        for (n, elems, esz) in [(4usize, 131072usize, 8usize), (3, 1000, 8), (8, 5, 1024)] {
            let mut at = 0;
            for r in 0..n {
                let (lo, hi) = slice(r, n, elems, esz);
                assert_eq!(lo, at);
                assert!(hi >= lo && (hi - lo) % esz == 0);
                at = hi;
            }
            assert_eq!(at, elems * esz);
        }
    }

    #[test]
    fn fold_matches_the_tree_order() {
        // Doubles whose sum depends on the association: the in-place fold must give
        // the bits of the recursive binomial fold ((0+1)+(2+3))+((4+5)+6).
        let vals: [f64; 7] = [1e16, 1.0, -1e16, 3.0, 0.5, 1e-3, 7.0];
        let n = vals.len();
        let mut tmp = vec![0u8; n * 8];
        for (r, v) in vals.iter().enumerate() {
            tmp[r * 8..r * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        let ops: Vec<usize> = (0..n).map(|r| tmp.as_mut_ptr() as usize + r * 8).collect();
        let c = Comb::Builtin {
            dt: super::super::DOUBLE,
            op: super::super::SUM,
        };
        // SAFETY: n disjoint 8-byte ranges of tmp, untouched during the call.
        unsafe { fold_at(c, &ops, 8) };
        let got = f64::from_ne_bytes(tmp[..8].try_into().unwrap());
        let want = ((vals[0] + vals[1]) + (vals[2] + vals[3])) + ((vals[4] + vals[5]) + vals[6]);
        assert_eq!(got.to_bits(), want.to_bits());
    }
}
