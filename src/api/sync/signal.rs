//! Notify counters (put-with-signal; compare OpenSHMEM 1.5 `shmem_put_signal` and
//! `shmem_signal_wait_until`): a put whose completion updates a 64-bit word at the
//! target, and a wait on such a word in the caller's own memory.
//!
//! Guarantee: a rank that observes the signal (through `signal_wait_until` or an
//! atomic fetch) also observes the put's data: the signal is applied only after the
//! data is visible at the target, and by the same atomics as every other operation on
//! the word (`atomic.rs`), so signals from many ranks combine (add) or overwrite
//! (set) atomically. The target's CPU does nothing for heap and registered words.
//! The wait is a normal blocking wait: it progresses the library, yields the CPU
//! when ranks outnumber cores, and reports a stall (FH_STALL_WARN / FH_STALL_ABORT).

use crate::api::ctx::CtxInner;
use crate::bail;
use crate::conduit::{AtomicOp, Width};
use crate::runtime::error::Result;

/// How the signal word changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalOp {
    Set,
    Add,
}

/// The condition `signal_wait_until` waits for: `word <cmp> value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    pub fn holds(self, word: u64, value: u64) -> bool {
        match self {
            Cmp::Eq => word == value,
            Cmp::Ne => word != value,
            Cmp::Gt => word > value,
            Cmp::Ge => word >= value,
            Cmp::Lt => word < value,
            Cmp::Le => word <= value,
        }
    }
}

impl CtxInner {
    /// Put `nbytes` from `src` to `dst` at `rank`, then update the word at `sig` there.
    /// Returns when both are visible at the target.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal(
        &self,
        rank: i64,
        dst: usize,
        src: usize,
        nbytes: usize,
        sig: usize,
        value: u64,
        op: SignalOp,
    ) -> Result<()> {
        // The word is checked before any data moves, so a bad signal moves nothing.
        self.atomic(rank, sig, Width::W64, AtomicOp::Fetch)?;
        self.put(rank, dst, src, nbytes)?;
        let op = match op {
            SignalOp::Set => AtomicOp::Swap(value),
            SignalOp::Add => AtomicOp::FetchAdd(value),
        };
        self.atomic(rank, sig, Width::W64, op).map(|_| ())
    }

    /// Wait until this rank's word at `sig` satisfies `cmp value`; returns the value
    /// that did. The word must be one the atomics accept for the caller (its heap or
    /// a registered region).
    pub fn signal_wait_until(&self, sig: usize, cmp: Cmp, value: u64) -> Result<u64> {
        crate::api::am::check_not_in_handler("fh_signal_wait_until")?;
        let me = self.rank as i64;
        let mut seen = self.atomic(me, sig, Width::W64, AtomicOp::Fetch)?;
        if cmp.holds(seen, value) {
            return Ok(seen);
        }
        let what = crate::api::stall::Wait::call(
            "fh_signal_wait_until",
            None,
            "a put_signal or atomic update of the word from another rank",
        );
        // Awake: any rank's plain atomic may update the word, and atomics ring no bell.
        self.wait_awake(what, || {
            seen = self.atomic(me, sig, Width::W64, AtomicOp::Fetch)?;
            Ok(cmp.holds(seen, value))
        })?;
        Ok(seen)
    }
}

/// The C values of the comparisons (`FH_CMP_*`), in order.
pub fn cmp_of(c: i32) -> Result<Cmp> {
    Ok(match c {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Ge,
        4 => Cmp::Lt,
        5 => Cmp::Le,
        _ => bail!(
            InvalidArg,
            "comparison {c} is not one of FH_CMP_EQ .. FH_CMP_LE (0..5)"
        ),
    })
}

/// The C values of the signal operations (`FH_SIGNAL_SET`, `FH_SIGNAL_ADD`).
pub fn signal_op_of(o: i32) -> Result<SignalOp> {
    Ok(match o {
        0 => SignalOp::Set,
        1 => SignalOp::Add,
        _ => bail!(
            InvalidArg,
            "signal operation {o} is not FH_SIGNAL_SET (0) or FH_SIGNAL_ADD (1)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons() {
        assert!(Cmp::Ge.holds(3, 3) && !Cmp::Gt.holds(3, 3) && Cmp::Lt.holds(2, 3));
        assert!(Cmp::Ne.holds(1, 2) && Cmp::Eq.holds(7, 7) && Cmp::Le.holds(7, 7));
        assert!(cmp_of(6).is_err() && cmp_of(-1).is_err() && cmp_of(3).unwrap() == Cmp::Ge);
        assert!(signal_op_of(2).is_err() && signal_op_of(1).unwrap() == SignalOp::Add);
    }
}
