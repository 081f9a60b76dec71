//! Stall diagnosis: a blocking wait that lasts says why, and may give up.
//!
//! Every blocking wait of the library that depends on a peer carries a [`Wait`]:
//! which call waits, for which peer, and for what. A [`Watch`] reads the clock every
//! few hundred rounds of the wait loop (a clock read per round would cost more than
//! the poll itself) and
//! - after `FH_STALL_WARN` seconds prints one line on stderr naming this rank, the
//!   call, the peer, what is missing and the likely fix, once per wait;
//! - after `FH_STALL_ABORT` seconds (if set) ends the wait with `FH_ERR_TRANSPORT`
//!   and the same text;
//! - at once, when the peer is a process on this node that no longer exists
//!   (`FH_ERR_TRANSPORT`): a dead peer never answers;
//! - for waits that need the peer to make a call ([`Wait::needs_call`]: a barrier, a
//!   collective, a lock hand-over, an rpipe message), within about 100 ms of the
//!   peer calling `fh_finalize` or exiting without it (its life word,
//!   `sync::area::Life`): `FH_ERR_STATE` naming it. Two life checks in a row must
//!   see it, so what the peer did just before finalizing (a flag, a chunk) is seen
//!   by the wait's own test first; a barrier wait does not blame a peer that
//!   notified this barrier before it finalized (the epoch in its life word). Waits for what a finalizing rank still serves (moves,
//!   AM handlers, acknowledgements) go on: it serves until every rank finalizes.
//! - every few rounds, the process's other contexts are polled too
//!   (`progress::serve_others`): a wait in one context never starves a peer that
//!   waits for this rank in another.

use super::ctx::CtxInner;
use crate::runtime::error::{Error, Result};
use std::time::{Duration, Instant};

/// What a blocking wait waits for.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    /// The public call (or family of calls) that waits.
    pub call: &'static str,
    /// The rank whose answer or action is missing (None: several or any).
    pub peer: Option<usize>,
    /// What has not arrived.
    pub missing: &'static str,
    /// It arrives only if the peer makes a call (it does not come from the peer's
    /// progress alone): a peer that finalized or exited ends the wait.
    pub needs_call: bool,
    /// A wait inside barrier epoch `e`: a peer that notified it (or a later one)
    /// before finalizing owes it nothing more (its flags are on their way).
    pub barrier: Option<u64>,
}

impl Wait {
    pub const fn new(call: &'static str, peer: Option<usize>, missing: &'static str) -> Wait {
        Wait {
            call,
            peer,
            missing,
            needs_call: false,
            barrier: None,
        }
    }

    /// As `new`, for what only a call of the peer provides.
    pub const fn call(call: &'static str, peer: Option<usize>, missing: &'static str) -> Wait {
        Wait {
            call,
            peer,
            missing,
            needs_call: true,
            barrier: None,
        }
    }

    /// As `call`, for a wait inside barrier epoch `epoch`.
    pub const fn in_barrier(self, epoch: u64) -> Wait {
        Wait {
            barrier: Some(epoch),
            ..self
        }
    }
}

/// How often a wait that needs a peer's call looks at the peers' life words.
const LIFE_EVERY: Duration = Duration::from_millis(50);

/// Rounds of a wait loop between polls of the process's other contexts.
const SERVE_OTHERS_EVERY: u32 = 16;

/// Rounds of a wait loop between clock reads.
const ROUNDS_PER_CHECK: u32 = 256;

/// Watches one blocking wait (see the module documentation).
pub struct Watch<'a> {
    ctx: &'a CtxInner,
    what: Wait,
    t0: Instant,
    rounds: u32,
    warned: bool,
    life_checked: Instant,
    /// A peer looked finalized or exited at the last life check. The wait fails
    /// only if it still does at the next one, so the wait's condition is tested
    /// again in between: what the peer did just before finalizing is then seen.
    suspect: bool,
}

impl<'a> Watch<'a> {
    pub fn new(ctx: &'a CtxInner, what: Wait) -> Watch<'a> {
        let now = Instant::now();
        Watch {
            ctx,
            what,
            t0: now,
            rounds: 0,
            warned: false,
            life_checked: now,
            suspect: false,
        }
    }

    /// Call once per round of the wait loop.
    #[inline]
    pub fn round(&mut self) -> Result<()> {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds % SERVE_OTHERS_EVERY == 0 {
            super::progress::serve_others(self.ctx);
        }
        if self.rounds % ROUNDS_PER_CHECK != 0 {
            return Ok(());
        }
        self.check()
    }

    /// Check now (after a sleep: rounds no longer measure time).
    pub fn check_now(&mut self) -> Result<()> {
        self.check()
    }

    #[cold]
    fn check(&mut self) -> Result<()> {
        let cfg = &self.ctx.cfg;
        if let Some(p) = self.what.peer {
            if self.ctx.conduit.peer_exited(p) {
                return Err(self.error("has exited"));
            }
        }
        if self.what.needs_call && self.life_checked.elapsed() >= LIFE_EVERY {
            self.life_checked = Instant::now();
            self.check_life()?;
        }
        let waited = self.t0.elapsed();
        if let Some(s) = cfg.stall_abort_s {
            if waited >= Duration::from_secs(s) {
                return Err(self.error(&format!("did not answer within FH_STALL_ABORT={} s", s)));
            }
        }
        if !self.warned && cfg.stall_warn_s > 0 && waited >= Duration::from_secs(cfg.stall_warn_s) {
            self.warned = true;
            eprintln!("{}", self.line(waited));
            if crate::runtime::config::debug_tables() {
                eprintln!("{}", self.ctx.fh_debug_dump());
            }
        }
        Ok(())
    }

    /// The peer (or, for a wait on any peer, every peer) finalized or exited? Said
    /// at the second check in a row that sees it (see `suspect`).
    fn check_life(&mut self) -> Result<()> {
        use crate::api::sync::area::Life;
        let ctx = self.ctx;
        let peers: Vec<usize> = match self.what.peer {
            Some(p) => vec![p],
            None => (0..ctx.size).filter(|&r| r != ctx.rank).collect(),
        };
        for p in peers {
            let how = match ctx.peer_life(p) {
                (Life::Live, _) => continue,
                (Life::Finalizing, e) if self.what.barrier.is_some_and(|b| e >= b) => continue,
                (Life::Finalizing, _) => "called fh_finalize",
                (Life::Exited, _) => "exited without fh_finalize",
            };
            if !self.suspect {
                self.suspect = true;
                return Ok(());
            }
            crate::bail!(
                State,
                "{}: rank {} {} while this rank waited for {}; it will not come",
                self.what.call,
                p,
                how,
                self.what.missing
            );
        }
        self.suspect = false;
        Ok(())
    }

    fn who(&self) -> String {
        match self.what.peer {
            Some(p) => format!("rank {}", p),
            None => "a peer".into(),
        }
    }

    /// The one-line diagnosis.
    fn line(&self, waited: Duration) -> String {
        format!(
            "firehose[rank {}]: {} has waited {:.0} s for {}: {} has not arrived. {} is not \
             serving the library: it computes without calling firehose, waits in a call that \
             does not serve it, or never makes the matching call. Fix: make that rank call \
             fh_poll during long computations, or run with FH_PROGRESS=thread \
             (MPI_THREAD_MULTIPLE), and keep FH_MPI_PROGRESS=1 with -lfirehose linked before \
             MPI so blocking MPI calls serve it.{} (FH_STALL_WARN=0 silences this line; \
             FH_STALL_ABORT=N gives up after N s.)",
            self.ctx.rank,
            self.what.call,
            waited.as_secs_f64(),
            self.who(),
            self.what.missing,
            self.who(),
            self.crowded_hint(),
        )
    }

    /// On a node with more ranks than cores: the one known cause of a starved rank
    /// that the fixes above do not cover (README, "Running on a cluster").
    fn crowded_hint(&self) -> &'static str {
        if self.ctx.bells.policy() == crate::runtime::wait::CROWDED {
            " This node runs more ranks than cores: with Open MPI, also run mpirun \
             --mca mpi_yield_when_idle 0 (its idle yields can starve a rank for seconds \
             under Linux's EEVDF scheduler)."
        } else {
            ""
        }
    }

    fn error(&self, how: &str) -> Error {
        crate::err!(
            Transport,
            "{} gave up waiting for {}, which {}: {} never arrived",
            self.what.call,
            self.who(),
            how,
            self.what.missing
        )
    }
}
