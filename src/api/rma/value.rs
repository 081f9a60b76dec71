//! Value forms and memset (seed 002's extended API: `put_val`/`get_val`, and GASNet's
//! `gasnet_memset`).
//!
//! Guarantees:
//! - a value form moves 1, 2, 4 or 8 bytes (anything else is `FH_ERR_INVALID_ARG`):
//!   `put_val` writes the low `8 * nbytes` bits of the value as an integer of that
//!   size in the target's (= this machine's) byte order, `get_val` reads one and
//!   returns it zero-extended; both take the contiguous engine's path, so they reach
//!   any address of the target and are as checked as `fh_put`/`fh_get`;
//! - `memset` fills `[dst, +nbytes)` of any address of the target. It is a vector put
//!   from a read-only pattern block of the byte (one per byte value, made on first
//!   use and kept for the process's life, so a non-blocking memset's source outlives
//!   any handle), and so completes, defers on firehose misses and joins the implicit
//!   set or an access region exactly as a vector put does.

use super::handles::Handle;
use super::shape::Side;
use super::vis::Completion;
use crate::api::ctx::CtxInner;
use crate::bail;
use crate::runtime::error::Result;
use std::sync::OnceLock;

/// Bytes of one pattern block: a memset of n bytes is `ceil(n / PATTERN)` pieces.
const PATTERN: usize = 64 << 10;

static PATTERNS: [OnceLock<Box<[u8]>>; 256] = [const { OnceLock::new() }; 256];

/// The pattern block of byte `b`.
fn pattern(b: u8) -> &'static [u8] {
    PATTERNS[b as usize].get_or_init(|| vec![b; PATTERN].into_boxed_slice())
}

fn check_width(nbytes: usize, what: &str) -> Result<()> {
    if !matches!(nbytes, 1 | 2 | 4 | 8) {
        bail!(
            InvalidArg,
            "{}: nbytes {} must be 1, 2, 4 or 8",
            what,
            nbytes
        );
    }
    Ok(())
}

/// `value` as an integer of `nbytes` bytes, in memory order.
fn to_bytes(value: u64, nbytes: usize) -> [u8; 8] {
    let mut b = [0u8; 8];
    match nbytes {
        1 => b[..1].copy_from_slice(&(value as u8).to_ne_bytes()),
        2 => b[..2].copy_from_slice(&(value as u16).to_ne_bytes()),
        4 => b[..4].copy_from_slice(&(value as u32).to_ne_bytes()),
        _ => b = value.to_ne_bytes(),
    }
    b
}

fn from_bytes(b: [u8; 8], nbytes: usize) -> u64 {
    match nbytes {
        1 => b[0] as u64,
        2 => u16::from_ne_bytes([b[0], b[1]]) as u64,
        4 => u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as u64,
        _ => u64::from_ne_bytes(b),
    }
}

impl CtxInner {
    /// `fh_put_val`: returns when the value is visible at the target.
    pub fn put_val(&self, rank: i64, dst: usize, value: u64, nbytes: usize) -> Result<()> {
        check_width(nbytes, "fh_put_val")?;
        let b = to_bytes(value, nbytes);
        self.put(rank, dst, b.as_ptr() as usize, nbytes)
    }

    /// `fh_get_val`: the value at `src` on `rank`, zero-extended.
    pub fn get_val(&self, rank: i64, src: usize, nbytes: usize) -> Result<u64> {
        check_width(nbytes, "fh_get_val")?;
        let mut b = [0u8; 8];
        self.get(b.as_mut_ptr() as usize, rank, src, nbytes)?;
        Ok(from_bytes(b, nbytes))
    }

    /// `fh_memset` (and its `_nb`, `_nbi` forms): `nbytes` bytes of `value` (as an
    /// `unsigned char`, like memset) at `dst` on `rank`.
    pub fn memset(
        &self,
        rank: i64,
        dst: usize,
        value: i32,
        nbytes: usize,
        how: Completion,
    ) -> Result<Handle> {
        let src = pattern(value as u8);
        let pieces: Vec<(usize, usize)> = (0..nbytes)
            .step_by(PATTERN)
            .map(|off| (src.as_ptr() as usize, (nbytes - off).min(PATTERN)))
            .collect();
        let dst = Side::vector(&[(dst, nbytes)], "fh_memset: dst")?;
        let src = Side::vector(&pieces, "fh_memset")?;
        self.vis_put(rank, &dst, &src, how)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_at_every_width() {
        for &(v, n) in &[
            (0xabu64, 1),
            (0xbeefu64, 2),
            (0xdead_beefu64, 4),
            (0x0123_4567_89ab_cdefu64, 8),
        ] {
            assert_eq!(from_bytes(to_bytes(v, n), n), v);
            // Only the low 8 * n bits are written.
            assert!(to_bytes(v, n)[n..].iter().all(|&b| b == 0));
        }
        assert_eq!(from_bytes(to_bytes(0x1_0000_00ff, 1), 1), 0xff);
        assert!(check_width(3, "t").is_err());
        assert!(check_width(0, "t").is_err());
        assert!(check_width(16, "t").is_err());
    }

    #[test]
    fn pattern_blocks_hold_their_byte_and_are_made_once() {
        let a = pattern(0x5a);
        assert_eq!(a.len(), PATTERN);
        assert!(a.iter().all(|&b| b == 0x5a));
        assert_eq!(a.as_ptr(), pattern(0x5a).as_ptr());
    }
}
