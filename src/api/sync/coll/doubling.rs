//! `fh_allreduce` by recursive doubling (issue 19 part 3: jobs that span nodes,
//! and every job with `FH_SHM=0`). Seed 004 §2.3 builds reductions on the binomial
//! tree; this is the same combination order in half the rounds.
//!
//! **The schedule** ([`steps`]). At distance `d = 1, 2, 4, ...` below `n`, rank `r`
//! holds the combination of its block of `d` ranks; blocks pair up into blocks of
//! `2d`. The rank exchanges its value with `r ^ d`, and both compute
//! `lower op upper`. When `n` is not a power of two the upper block may be short:
//! a lower rank whose partner `r + d` does not exist takes the upper block's value
//! from one of its ranks ([`extras`] names who sends to whom) and sends nothing at
//! that step. Every rank of an upper block holds the same bits, so it does not
//! matter which one.
//!
//! **The same bits as the tree.** The block of `2d` ranks starting at `b` is
//! `[b, b + d) op [b + d, b + 2d)`, clipped to `n`: exactly the binomial reduce's
//! rank order (`super::reduce_flow`), the node slots' and `node_big`'s. So a result
//! depends on `n` and the count only, whichever path computed it.
//!
//! **Agreement.** Every rank sends its state before each step (its value, or an
//! error chunk once its call failed) and every rank of a `2d` block hears from the
//! other half. By induction on `d`, after the last step every rank has seen every
//! rank's description, and either all ranks failed or none did. A call larger than
//! a chunk reduces its first chunk this way and, only if that worked everywhere, the
//! rest on the trees (`allreduce_with`): ranks whose counts differ across the chunk
//! size cannot run different flows and wait for each other.

use super::{Call, Comb};
use crate::api::ctx::CtxInner;
use crate::api::sync::state::CollState;
use crate::runtime::error::Result;

/// What rank `me` does at one step of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Step {
    /// The distance of the step (1, 2, 4, ...).
    pub dist: usize,
    /// The rank whose value this rank receives.
    pub from: usize,
    /// The rank this rank sends its value to (None: an extra, it only receives).
    pub to: Option<usize>,
    /// This rank's block is the lower half: `acc op theirs`, else `theirs op acc`.
    pub lower: bool,
}

/// The steps of rank `me` among `n`, in order (a step whose upper half is empty is
/// skipped: nothing moves in it).
pub(super) fn steps(me: usize, n: usize) -> impl Iterator<Item = Step> {
    std::iter::successors(Some(1usize), |d| d.checked_mul(2))
        .take_while(move |&d| d < n)
        .filter_map(move |dist| {
            let base = me & !(2 * dist - 1);
            let up = base + dist;
            if up >= n {
                return None;
            }
            if me >= up {
                let p = me - dist;
                return Some(Step {
                    dist,
                    from: p,
                    to: Some(p),
                    lower: false,
                });
            }
            let p = me + dist;
            Some(if p < n {
                Step {
                    dist,
                    from: p,
                    to: Some(p),
                    lower: true,
                }
            } else {
                Step {
                    dist,
                    from: up + (me - base) % (n - up),
                    to: None,
                    lower: true,
                }
            })
        })
}

/// The lower ranks without a partner that take upper rank `me`'s value at step
/// `dist` (those whose [`Step::from`] is `me`).
pub(super) fn extras(me: usize, n: usize, dist: usize) -> impl Iterator<Item = usize> {
    let base = me & !(2 * dist - 1);
    let up = base + dist;
    debug_assert!(up <= me && me < n, "only an upper rank serves extras");
    let m = n - up;
    (me - up + m..dist).step_by(m).map(move |off| base + off)
}

impl CtxInner {
    /// The recursive-doubling allreduce of the first `len` bytes of `src` into
    /// `dst` (every rank's `len` is the same when the arguments match). Runs in
    /// failed mode too (error chunks instead of values), so every rank learns.
    pub(super) fn doubling_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        (src, dst): (usize, usize),
        len: usize,
        comb: Comb,
    ) -> Result<()> {
        let (me, n) = (self.rank, self.size);
        call.expect.extend(steps(me, n).map(|s| s.from));
        let mut acc = std::mem::take(&mut st.acc);
        let mut tmp = std::mem::take(&mut st.tmp);
        acc.resize(len, 0);
        tmp.resize(len, 0);
        if !call.failed() && len > 0 {
            // SAFETY: src is valid for at least len bytes (caller's checked contract).
            acc.copy_from_slice(unsafe { std::slice::from_raw_parts(src as *const u8, len) });
        }
        let r = self.doubling_steps(st, call, &mut acc, &mut tmp, comb);
        if r.is_ok() && !call.failed() && len > 0 {
            // SAFETY: dst is valid for at least len bytes (caller).
            unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), dst as *mut u8, len) };
        }
        st.acc = acc;
        st.tmp = tmp;
        r
    }

    /// The steps of [`Self::doubling_flow`] on the accumulator.
    fn doubling_steps(
        &self,
        st: &mut CollState,
        call: &mut Call,
        acc: &mut Vec<u8>,
        tmp: &mut Vec<u8>,
        comb: Comb,
    ) -> Result<()> {
        let (me, n, len) = (self.rank, self.size, acc.len());
        for s in steps(me, n) {
            // Our value before this step goes out first: to the partner, and from an
            // upper rank to the lower ranks that have none.
            if let Some(p) = s.to {
                self.c_send(st, call, p, acc.as_ptr(), len, true)?;
            }
            if !s.lower {
                for x in extras(me, n, s.dist) {
                    self.c_send(st, call, x, acc.as_ptr(), len, true)?;
                }
            }
            let Some(got) = self.c_recv(st, call, s.from)? else {
                continue;
            };
            if !self.c_accept(call, s.from, &got, true, len) {
                self.end_recv(st, call, s.from)?;
                continue;
            }
            // SAFETY: got.data is len bytes of our area (c_accept checked the length).
            let theirs = unsafe { std::slice::from_raw_parts(got.data, len) };
            if s.lower {
                comb.apply(acc, theirs);
            } else {
                tmp.copy_from_slice(theirs);
                comb.apply(tmp, acc);
                std::mem::swap(acc, tmp);
            }
            self.c_done(st, call, s.from, &got)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binomial tree's combination of ranks [r, r + span) as a string.
    fn tree_expr(r: usize, n: usize) -> String {
        let mut e = r.to_string();
        let mut k = 1;
        while k < n && r & k == 0 {
            if r + k < n {
                e = format!("({} {})", e, tree_expr(r + k, n));
            }
            k *= 2;
        }
        e
    }

    /// Run the schedule in lock step on expressions: every rank ends with the
    /// binomial tree's expression (the same association, so the same bits), every
    /// send has exactly one receiver and every receive one sender.
    #[test]
    fn doubling_gives_the_tree_order_on_every_rank() {
        for n in 1..=70 {
            let mut val: Vec<String> = (0..n).map(|r| r.to_string()).collect();
            let mut d = 1;
            while d < n {
                let before = val.clone();
                let mut sent: Vec<(usize, usize)> = Vec::new();
                let mut got: Vec<(usize, usize)> = Vec::new();
                for me in 0..n {
                    for s in steps(me, n).filter(|s| s.dist == d) {
                        sent.extend(s.to.map(|p| (me, p)));
                        if !s.lower {
                            sent.extend(extras(me, n, d).map(|x| (me, x)));
                        }
                        got.push((s.from, me));
                        let (a, b) = if s.lower {
                            (&before[me], &before[s.from])
                        } else {
                            (&before[s.from], &before[me])
                        };
                        val[me] = format!("({} {})", a, b);
                    }
                }
                sent.sort();
                got.sort();
                assert_eq!(sent, got, "n {} dist {}", n, d);
                d *= 2;
            }
            let want = tree_expr(0, n);
            for (r, v) in val.iter().enumerate() {
                assert_eq!(*v, want, "n {} rank {}", n, r);
            }
        }
    }

    #[test]
    fn extras_serve_every_partnerless_rank() {
        // n = 6, distance 4: ranks 2 and 3 have no partner (6, 7); 4 serves 2, 5 serves 3.
        assert_eq!(extras(4, 6, 4).collect::<Vec<_>>(), vec![2]);
        assert_eq!(extras(5, 6, 4).collect::<Vec<_>>(), vec![3]);
        // n = 5, distance 4: 4 serves 1, 2 and 3.
        assert_eq!(extras(4, 5, 4).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(steps(2, 5).last().map(|s| (s.from, s.to)), Some((4, None)));
    }
}
