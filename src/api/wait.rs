//! One wait policy for every blocking call of the library (issue 19 part 2): spin
//! briefly, then progress and yield the core, then sleep on a bell in the
//! node-shared mapping that whoever writes what the wait needs rings. The stages,
//! their thresholds and the bell are `runtime::wait`; this module runs them for a
//! context, and keeps the list of live contexts a wait also serves.
//!
//! A wait names where its condition comes from ([`Source`]): written into memory by
//! another rank (the spin stage only tests it, with a pause between tests), or taken
//! in by this rank's own poll of the transport (an answer, a handshake, a credit: the
//! spin stage polls too, since pausing would only delay it).
//!
//! Guarantees: a wait returns as soon as `done()` holds; past the spin stage every
//! round progresses the context and runs the subsystems' idle hooks (the split-phase
//! barriers of every live context); it sleeps only where `FH_WAIT_SLEEP` allows it
//! and a bell is named, for at most a bound (`api::bells`), and a stall is reported
//! and, if asked, ended (`api::stall`). Not for AM handlers (callers check).

use super::ctx::{CtxInner, State};
use super::stall::{Wait, Watch};
use crate::bail;
use crate::runtime::error::Result;
use crate::runtime::wait::{Backoff, Bell, Sleep, Slept, Stage};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// Every live context of the process: a rank blocked in one context's wait still
/// serves its other contexts (as MPI progresses every communicator), so ranks
/// waiting on two contexts in different orders meet.
static LIVE: Mutex<Vec<Weak<CtxInner>>> = Mutex::new(Vec::new());

/// Register a new context (its waits and the others' serve it).
pub fn register(ctx: &Arc<CtxInner>) {
    let mut g = LIVE.lock();
    g.retain(|w| w.strong_count() > 0);
    g.push(Arc::downgrade(ctx));
}

/// Run `f` on every live context of the process, outside the registry's lock and
/// without allocating for the first few (a wait's every idle round calls this).
pub fn for_each_live(mut f: impl FnMut(&CtxInner)) {
    const FEW: usize = 8;
    let mut few: [Option<Arc<CtxInner>>; FEW] = Default::default();
    let mut more = Vec::new();
    for (i, c) in LIVE.lock().iter().filter_map(|w| w.upgrade()).enumerate() {
        match few.get_mut(i) {
            Some(slot) => *slot = Some(c),
            None => more.push(c),
        }
    }
    for c in few.iter().flatten().chain(&more) {
        f(c);
    }
}

/// How many contexts of this process are live (a wait asleep on one context's bell
/// is not woken by another's traffic, so it sleeps shorter when there are several).
pub fn live_count() -> usize {
    LIVE.lock().iter().filter(|w| w.strong_count() > 0).count()
}

/// How a wait's condition comes true, which decides what its spin stage does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Another rank writes it into memory this rank reads: test with a pause between
    /// tests, and progress only past the spin stage.
    Written,
    /// It arrives through this rank's own poll of the transport (an answer, a
    /// handshake, a credit): poll in every round, from the first, and once more
    /// after announcing a sleep (the message may have rung before the announcement).
    Polled,
}

impl CtxInner {
    /// Wait until `done()`, asleep in the last stage on this rank's own bell, where
    /// every write the wait can be waiting for rings it (`api::bells`).
    pub(crate) fn wait_rung(&self, what: Wait, done: impl FnMut() -> Result<bool>) -> Result<()> {
        let own = self.bells.own(self.rank);
        self.wait_on(what, Source::Written, || own, done)
    }

    /// As [`Self::wait_rung`], without the sleep stage: what it waits for is written
    /// by ranks that do not ring this rank (a word lock's word lives at its home).
    pub(crate) fn wait_awake(&self, what: Wait, done: impl FnMut() -> Result<bool>) -> Result<()> {
        self.wait_on(what, Source::Written, || None, done)
    }

    /// Wait for what arrives through this rank's progress (`Source::Polled`), never
    /// asleep: the transport's messages ring no bell. Not allowed in handlers.
    pub fn wait_for(&self, what: Wait, done: impl FnMut() -> Result<bool>) -> Result<()> {
        self.wait_on(what, Source::Polled, || None, done)
    }

    /// Run the subsystems' idle hooks (what a rank that waits, or spins on a `try`
    /// call, also moves along: the split-phase barriers of every live context).
    pub(crate) fn run_idle_hooks(&self) {
        for idle in self.subsystems.iter().filter_map(|s| s.idle) {
            idle();
        }
    }

    /// `FH_WAIT_SLEEP` allows a sleep now (auto: nothing through the transport can
    /// need this rank's progress).
    fn may_sleep(&self) -> bool {
        match self.cfg.wait_sleep {
            Sleep::Off => false,
            Sleep::On => true,
            Sleep::Auto => !self.conduit.needs_progress(),
        }
    }

    /// The wait itself, for a condition that comes true as `src` says, asleep on the
    /// bell `bell()` names at the time (None: not asleep).
    pub(crate) fn wait_on(
        &self,
        what: Wait,
        src: Source,
        bell: impl Fn() -> Option<usize>,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let mut b = Backoff::patient(self.bells.policy(), self.bells.patience.extra());
        // Started at the first round past the spin stage: a short wait reads no clock.
        let mut watch = None;
        loop {
            if done()? {
                return Ok(());
            }
            let stage = b.step();
            if stage == Stage::Spin {
                match src {
                    Source::Written => std::hint::spin_loop(),
                    Source::Polled => {
                        self.progress_once()?;
                    }
                }
                continue;
            }
            let watch = watch.get_or_insert_with(|| Watch::new(self, what));
            watch.round()?;
            if self.state() == State::Finalized {
                bail!(State, "context was finalized while waiting");
            }
            if self.progress_once()? != 0 {
                continue;
            }
            self.run_idle_hooks();
            match (stage, bell()) {
                (Stage::Sleep, Some(p)) if self.may_sleep() => {
                    // SAFETY: a bell line of a sync area of this node, mapped for the
                    // context's life (`api::bells`, `sync::node`).
                    let bell = unsafe { Bell::at(p as *mut u8) };
                    // The idle hooks above may have done it: no announcement then.
                    if done()? {
                        return Ok(());
                    }
                    // A polled condition's message may have landed (and rung) before
                    // we announced ourselves: poll once more after the announcement.
                    let still = || {
                        if src == Source::Polled {
                            self.progress_once()?;
                        }
                        done().map(|d| !d)
                    };
                    let slept = bell.sleep(self.bells.bound(live_count()), still)?;
                    self.bells.patience.learn(slept);
                    if slept == Slept::NotNeeded {
                        return Ok(()); // `done()` held when tested before the sleep
                    }
                    watch.check_now()?;
                    // Start over with what was just learnt.
                    b = Backoff::patient(self.bells.policy(), self.bells.patience.extra());
                }
                _ => self.conduit.idle(),
            }
        }
    }
}
