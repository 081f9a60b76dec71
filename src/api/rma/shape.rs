//! Non-contiguous transfer shapes (seed 002, "GASNet Extensions for Non-Contiguous
//! Remote Access": vector, indexed and strided metadata), reduced to what a transfer
//! algorithm works on: each side's ordered list of runs, and their pairing into
//! segments `(dst, src, len)` that each side covers contiguously.
//!
//! Guarantees:
//! - every list and shape is checked once, here, before anything moves: no count,
//!   product or extent overflows, no piece wraps the address space, a NULL list with
//!   a nonzero count and a NULL base with bytes to move are refused, and the two
//!   sides' totals must be equal (`FH_ERR_INVALID_ARG` naming the two totals);
//! - zero-size pieces and zero counts move nothing and are dropped;
//! - adjacent runs are coalesced (a strided section whose rows touch is one run),
//!   and a run never crosses a segment boundary of the other side;
//! - the order of bytes is the shape's order: a vector's and an index list's in list
//!   order, a strided section's with level 0 (`count[0]` contiguous bytes) innermost.
//!   The n-th byte of the source goes to the n-th byte of the destination.
//!
//! A strided section's runs are produced by an iterator (a 256×256×64 face has
//! 16,384 of them); a vector or index list is copied once, so the caller may reuse
//! its lists as soon as the call returns (GASNet's rule).

use crate::bail;
use crate::runtime::error::Result;

/// One contiguous piece: `len` bytes at `addr` (`len > 0`, `addr + len` does not wrap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub addr: usize,
    pub len: usize,
}

/// One side of a transfer: its runs in order, adjacent ones coalesced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Side {
    pub runs: Vec<Run>,
    /// Bytes in all runs.
    pub total: usize,
}

impl Side {
    /// Append a piece (dropped if empty; merged into the last run if adjacent).
    fn push(&mut self, addr: usize, len: usize, what: &str) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if addr == 0 {
            bail!(InvalidArg, "{}: a piece of {} bytes at NULL", what, len);
        }
        if addr.checked_add(len).is_none() {
            bail!(InvalidArg, "{}: [{:#x}, +{}) wraps around", what, addr, len);
        }
        self.total = self
            .total
            .checked_add(len)
            .ok_or_else(|| crate::err!(InvalidArg, "{}: the pieces' total overflows", what))?;
        match self.runs.last_mut() {
            Some(last) if last.addr + last.len == addr => last.len += len,
            _ => self.runs.push(Run { addr, len }),
        }
        Ok(())
    }

    /// A vector (`fh_memvec_t` list): pieces of any sizes.
    pub fn vector(pieces: &[(usize, usize)], what: &str) -> Result<Side> {
        let mut s = Side::default();
        for &(addr, len) in pieces {
            s.push(addr, len, what)?;
        }
        Ok(s)
    }

    /// An index list: `addrs.len()` pieces of `len` bytes each.
    pub fn indexed(addrs: &[usize], len: usize, what: &str) -> Result<Side> {
        let mut s = Side::default();
        for &addr in addrs {
            s.push(addr, len, what)?;
        }
        Ok(s)
    }

    /// A strided section (see [`Strided`]).
    pub fn strided(shape: &Strided<'_>, what: &str) -> Result<Side> {
        let mut s = Side::default();
        for r in shape.runs() {
            s.push(r.addr, r.len, what)?;
        }
        Ok(s)
    }
}

/// A strided section: `count[0]` contiguous bytes; `count[i]` repetitions at level
/// `i` (1 ..= levels), `strides[i - 1]` bytes apart. `levels` 0 is one run.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    pub base: usize,
    pub strides: &'a [usize],
    pub count: &'a [usize],
}

impl<'a> Strided<'a> {
    /// Check the shape: `count` has `strides.len() + 1` entries, the total and the
    /// extent (the last byte's offset) do not overflow, nothing wraps. Returns the
    /// total bytes.
    pub fn check(&self, what: &str) -> Result<usize> {
        let levels = self.strides.len();
        if self.count.len() != levels + 1 {
            bail!(
                InvalidArg,
                "{}: {} counts for {} stride levels (need levels + 1)",
                what,
                self.count.len(),
                levels
            );
        }
        let mut total = self.count[0];
        let mut extent = self.count[0];
        for (i, &s) in self.strides.iter().enumerate() {
            let n = self.count[i + 1];
            total = total.checked_mul(n).ok_or_else(|| {
                crate::err!(InvalidArg, "{}: the counts' product overflows", what)
            })?;
            if n > 0 {
                extent = (n - 1)
                    .checked_mul(s)
                    .and_then(|e| e.checked_add(extent))
                    .ok_or_else(|| {
                        crate::err!(InvalidArg, "{}: the section's extent overflows", what)
                    })?;
            }
        }
        if total == 0 {
            return Ok(0);
        }
        if self.base == 0 {
            bail!(InvalidArg, "{}: base address is NULL", what);
        }
        if self.base.checked_add(extent).is_none() {
            bail!(
                InvalidArg,
                "{}: the section at {:#x} ({} bytes across) wraps around",
                what,
                self.base,
                extent
            );
        }
        Ok(total)
    }

    /// The runs in order, level 0 innermost (after [`Self::check`]). Adjacent runs
    /// are not merged here ([`Side`] does it).
    pub fn runs(&self) -> impl Iterator<Item = Run> + 'a {
        let reps: usize = self.count[1..].iter().product();
        let len = self.count[0];
        let (base, strides, count) = (self.base, self.strides, self.count);
        let mut idx = vec![0usize; strides.len()];
        let mut left = if len == 0 { 0 } else { reps };
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let off: usize = idx.iter().zip(strides).map(|(&i, &s)| i * s).sum();
            // Odometer: level 1 turns fastest.
            for (l, i) in idx.iter_mut().enumerate() {
                *i += 1;
                if *i < count[l + 1] {
                    break;
                }
                *i = 0;
            }
            Some(Run {
                addr: base + off,
                len,
            })
        })
    }
}

/// One piece both sides cover contiguously: `len` bytes from `src` to `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub dst: usize,
    pub src: usize,
    pub len: usize,
}

/// Pair the destination's runs with the source's: the n-th byte of `src` goes to
/// the n-th byte of `dst`. The totals must be equal.
pub fn pair(dst: &Side, src: &Side) -> Result<Vec<Segment>> {
    if dst.total != src.total {
        bail!(
            InvalidArg,
            "the destination pieces total {} bytes but the source pieces {}",
            dst.total,
            src.total
        );
    }
    let mut out = Vec::with_capacity(dst.runs.len().max(src.runs.len()));
    let (mut d, mut s) = (dst.runs.iter().copied(), src.runs.iter().copied());
    let (mut dr, mut sr) = (d.next(), s.next());
    while let (Some(a), Some(b)) = (dr, sr) {
        let len = a.len.min(b.len);
        out.push(Segment {
            dst: a.addr,
            src: b.addr,
            len,
        });
        dr = rest(a, len, &mut d);
        sr = rest(b, len, &mut s);
    }
    debug_assert!(dr.is_none() && sr.is_none(), "equal totals end together");
    Ok(out)
}

/// What is left of `r` after its first `len` bytes, else the next run.
fn rest(r: Run, len: usize, next: &mut impl Iterator<Item = Run>) -> Option<Run> {
    if r.len > len {
        Some(Run {
            addr: r.addr + len,
            len: r.len - len,
        })
    } else {
        next.next()
    }
}

#[cfg(test)]
mod tests {
    //! Shapes against a byte model: the segments, applied in order to a model
    //! memory, move the n-th source byte to the n-th destination byte.
    use super::*;
    use proptest::prelude::*;

    /// Offsets (from a base) of every byte of a side, in order.
    fn bytes(s: &Side) -> Vec<usize> {
        s.runs.iter().flat_map(|r| r.addr..r.addr + r.len).collect()
    }

    #[test]
    fn strided_rows_that_touch_are_one_run() {
        // Rows of 16 bytes 16 apart touch: each plane is one 64-byte run; planes
        // 128 apart do not touch.
        let sh = Strided {
            base: 0x1000,
            strides: &[16, 128],
            count: &[16, 4, 3],
        };
        assert_eq!(sh.check("t").unwrap(), 192);
        let s = Side::strided(&sh, "t").unwrap();
        let run = |addr| Run { addr, len: 64 };
        assert_eq!(s.runs, vec![run(0x1000), run(0x1080), run(0x1100)]);
        // Planes 64 apart touch too: one run.
        let sh = Strided {
            strides: &[16, 64],
            ..sh
        };
        assert_eq!(
            Side::strided(&sh, "t").unwrap().runs,
            vec![Run {
                addr: 0x1000,
                len: 192
            }]
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        let bad = |sh: Strided<'_>| sh.check("t").unwrap_err().msg.clone();
        assert!(bad(Strided {
            base: 8,
            strides: &[1],
            count: &[1]
        })
        .contains("counts"));
        let huge = usize::MAX / 2;
        assert!(bad(Strided {
            base: 8,
            strides: &[1, 1],
            count: &[huge, 2, 2]
        })
        .contains("overflows"));
        assert!(bad(Strided {
            base: usize::MAX - 8,
            strides: &[8],
            count: &[8, 3]
        })
        .contains("wraps"));
        assert!(bad(Strided {
            base: 0,
            strides: &[],
            count: &[8]
        })
        .contains("NULL"));
        // Zero counts move nothing: even a NULL base is fine.
        assert_eq!(
            Strided {
                base: 0,
                strides: &[8],
                count: &[8, 0]
            }
            .check("t")
            .unwrap(),
            0
        );
        assert!(Side::vector(&[(usize::MAX - 2, 8)], "t").is_err());
        assert!(Side::indexed(&[0x100, 0], 8, "t").is_err());
        let e = pair(
            &Side::vector(&[(0x100, 8)], "d").unwrap(),
            &Side::vector(&[(0x200, 16)], "s").unwrap(),
        );
        assert!(e
            .unwrap_err()
            .msg
            .contains("total 8 bytes but the source pieces 16"));
    }

    fn strided_shape() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
        // 0..=3 levels; each stride at least the extent of the level below, so the
        // section does not overlap itself.
        (
            1usize..24,
            proptest::collection::vec((0usize..5, 0usize..9), 0..4),
        )
            .prop_map(|(len, levels)| {
                let (mut strides, mut count) = (vec![], vec![len]);
                let mut extent = len;
                for (n, gap) in levels {
                    strides.push(extent + gap);
                    count.push(n);
                    extent = if n == 0 {
                        extent
                    } else {
                        (n - 1) * (extent + gap) + extent
                    };
                }
                (strides, count)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// A strided section's bytes are exactly the nested-loop enumeration's.
        #[test]
        fn strided_matches_nested_loops((strides, count) in strided_shape()) {
            let sh = Strided { base: 4096, strides: &strides, count: &count };
            let total = sh.check("t").unwrap();
            let s = Side::strided(&sh, "t").unwrap();
            prop_assert_eq!(s.total, total);
            let mut want = vec![];
            let reps: usize = count[1..].iter().product();
            for k in 0..reps {
                let (mut rem, mut off) = (k, 0);
                for (l, &st) in strides.iter().enumerate() {
                    off += (rem % count[l + 1]) * st;
                    rem /= count[l + 1];
                }
                want.extend(4096 + off..4096 + off + count[0]);
            }
            prop_assert_eq!(bytes(&s), want);
            // Coalesced: no two consecutive runs touch.
            prop_assert!(s.runs.windows(2).all(|w| w[0].addr + w[0].len != w[1].addr));
        }

        /// Segments cover both sides in order, whatever the two shapes.
        #[test]
        fn pairing_moves_the_nth_byte_to_the_nth(
            dst in proptest::collection::vec((0usize..64, 0usize..12), 0..12),
            split in proptest::collection::vec(1usize..9, 1..40),
        ) {
            // Destination: a vector with gaps; source: the same total cut differently.
            let mut at = 1 << 20;
            let dpieces: Vec<(usize, usize)> = dst.iter().map(|&(gap, len)| {
                at += gap;
                let p = (at, len);
                at += len;
                p
            }).collect();
            let d = Side::vector(&dpieces, "d").unwrap();
            let mut spieces = vec![];
            let (mut left, mut src_at, mut i) = (d.total, 1usize << 24, 0);
            while left > 0 {
                let n = split[i % split.len()].min(left);
                spieces.push((src_at, n));
                src_at += n + (i % 3);
                left -= n;
                i += 1;
            }
            let s = Side::vector(&spieces, "s").unwrap();
            let segs = pair(&d, &s).unwrap();
            let dst_bytes: Vec<usize> = segs.iter().flat_map(|g| g.dst..g.dst + g.len).collect();
            let src_bytes: Vec<usize> = segs.iter().flat_map(|g| g.src..g.src + g.len).collect();
            prop_assert_eq!(dst_bytes, bytes(&d));
            prop_assert_eq!(src_bytes, bytes(&s));
            prop_assert!(segs.iter().all(|g| g.len > 0));
        }
    }
}
