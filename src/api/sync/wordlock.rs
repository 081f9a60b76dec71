//! Word locks: a lock that is one 64-bit word anywhere the atomics reach (a heap or
//! registered word of any rank, any address of another rank), created by nobody
//! (a zero word is a free lock), as many as there are words, and that knows its
//! holder. What Fortran's `LOCK` on a lock coarray (an array of them per image)
//! needs: `STAT_LOCKED` and `STAT_LOCKED_OTHER_IMAGE` name the holder.
//!
//! Guarantee: the word holds 0 when free, else the holder's `rank + 1`; every change
//! is one compare-and-swap by the acquirer (0 -> me) or the holder (me -> 0), so the
//! word is always one of those values and only its holder frees it. A blocked
//! acquirer retries in the library's wait loop (progress, yielding, stall reports);
//! grants are not FIFO (the MCS lock of `lock.rs` is, for its cost of collective
//! creation and a per-context limit).

use crate::api::ctx::CtxInner;
use crate::conduit::{AtomicOp, Width};
use crate::runtime::error::Result;

/// How an acquire ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// This rank holds the lock now.
    Acquired,
    /// `try` only: another rank holds it.
    HeldBy(usize),
    /// This rank held it already (not recursive).
    Already,
}

/// How a release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    Released,
    /// Nobody held it.
    NotHeld,
    /// Another rank holds it; the word is unchanged.
    HeldBy(usize),
}

impl CtxInner {
    fn word_cas(&self, rank: i64, word: usize, from: u64, to: u64) -> Result<u64> {
        let op = AtomicOp::Cas {
            expected: from,
            desired: to,
        };
        self.atomic(rank, word, Width::W64, op)
    }

    /// Take the word lock at `word` of `rank`; with `try_only`, do not wait.
    pub fn word_lock(&self, rank: i64, word: usize, try_only: bool) -> Result<Taken> {
        let me = self.rank as u64 + 1;
        let old = self.word_cas(rank, word, 0, me)?;
        let verdict = |old: u64| match old {
            0 => Some(Taken::Acquired),
            o if o == me => Some(Taken::Already),
            o if try_only => Some(Taken::HeldBy(o as usize - 1)),
            _ => None,
        };
        if let Some(t) = verdict(old) {
            return Ok(t);
        }
        crate::api::am::check_not_in_handler("fh_word_lock")?;
        let what = crate::api::stall::Wait::call(
            "fh_word_lock",
            usize::try_from(old - 1).ok(),
            "the release of the lock by its holder",
        );
        let mut got = Taken::Acquired;
        self.wait_awake(what, || {
            let old = self.word_cas(rank, word, 0, me)?;
            Ok(verdict(old).map(|t| got = t).is_some())
        })?;
        Ok(got)
    }

    /// Release the word lock at `word` of `rank` if this rank holds it.
    pub fn word_unlock(&self, rank: i64, word: usize) -> Result<Freed> {
        let me = self.rank as u64 + 1;
        Ok(match self.word_cas(rank, word, me, 0)? {
            o if o == me => Freed::Released,
            0 => Freed::NotHeld,
            o => Freed::HeldBy(o as usize - 1),
        })
    }
}
