//! Waiting when ranks may outnumber cores: the one policy every blocking call of the
//! library follows (barriers, collectives, locks, signals, rpipe and AM waits).
//!
//! A wait tests its condition in three stages ([`Backoff`]):
//! 1. **spin** — `spin` tests with a pause instruction between them. With a core
//!    per rank the event is usually a few hundred nanoseconds away, and a system
//!    call would cost more than it saves.
//! 2. **yield** — up to `yields` tests, each after `sched_yield`, plus what the
//!    context learnt ([`Patience`]: longer after sleeps that turned out needless).
//!    When ranks outnumber cores the rank we wait for is often runnable on our
//!    core; yielding hands it the core at once.
//! 3. **sleep** — on a [`Bell`]: a futex word in the node-shared mapping that the
//!    waker rings after making the condition true, so a sleeper takes no CPU time
//!    from the ranks it waits for, and one system call wakes it (or every rank of a
//!    node, for a release). A sleep lasts at most the caller's bound: what no bell
//!    announces (a peer that exited, a message from another node) is still seen.
//!
//! Two sets of thresholds ([`Policy`]), measured on a 2-core machine at 1x and 4x
//! oversubscription (docs/PERFORMANCE.md, "Waiting"): [`DEDICATED`] when the node's
//! ranks have a core each (spin, then yield for about 100 µs: a busy job never
//! sleeps), [`CROWDED`] when they do not (8 tests, 2 yields, then sleep: the ranks
//! waited for get the cores). Both are starting points: a context's [`Patience`]
//! adds up to 256 yields where its sleeps keep turning out needless.
//!
//! Guarantee (no lost wake-up): a waker that makes the condition true and then calls
//! [`Bell::ring`] wakes every sleeper whose last test of the condition was false.
//! The waiter announces itself (`sleepers += 1`), reads the bell's sequence, tests
//! the condition and sleeps only while the sequence is unchanged; the waker's
//! condition store, a full fence, then its read of `sleepers`: either it sees the
//! sleeper (and bumps the sequence and wakes it) or the sleeper's test sees the
//! condition (sequentially consistent order of the two announcements).
//!
//! The fence is asymmetric where Linux allows (`membarrier`, as liburcu and folly
//! do): the waker, on every message and release, pays only a compiler fence; the
//! rare sleeper pays `membarrier(GLOBAL_EXPEDITED)` after announcing itself, which
//! runs a full fence on every CPU running a process of the job. Either a waker's
//! read of `sleepers` comes after that fence on its CPU (and sees the sleeper), or
//! its condition store, before the read in program order, was made visible by it
//! (and the sleeper's test sees the condition). The waker's full fence stalled it
//! until its message's cache lines reached the receiver: about a tenth of a
//! microsecond on each active message.

use std::sync::atomic::{
    compiler_fence, fence, AtomicU32, AtomicU8, Ordering::Relaxed, Ordering::SeqCst,
};
use std::time::Duration;

/// The thresholds of one policy: tests in the spin stage, then in the yield stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub spin: u32,
    pub yields: u32,
}

/// Every rank of the node has a core: spin, then yield (cheap with nobody else
/// runnable) for about 100 µs before sleeping, so a busy job never pays a wake-up.
pub const DEDICATED: Policy = Policy {
    spin: 64,
    yields: 256,
};

/// More ranks than cores: the rank waited for needs our core, so hand it over
/// after a few tests and sleep soon (measured: spinning 1000 tests made a 4-rank
/// barrier 8x slower than 8; a second yield stage longer than 4 tests cost 10-30%).
pub const CROWDED: Policy = Policy { spin: 8, yields: 2 };

impl Policy {
    /// The policy for `ranks` processes of a job on a machine with `cpus` online.
    pub fn for_node(ranks: usize, cpus: usize) -> Policy {
        if ranks <= cpus.max(1) {
            DEDICATED
        } else {
            CROWDED
        }
    }
}

/// Processors online on this machine (not the affinity mask: MPI may bind each
/// rank to one core while others are free).
pub fn cpus_online() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// A futex word two processes of one node share (in a `MAP_SHARED` mapping), and
/// the count of its sleepers. Zeroed memory is a valid bell.
#[repr(C)]
pub struct Bell {
    seq: AtomicU32,
    sleepers: AtomicU32,
}

/// Bytes a bell occupies (it is given a line of its own by its users).
pub const BELL_BYTES: usize = std::mem::size_of::<Bell>();

impl Bell {
    /// The bell at `p`.
    ///
    /// # Safety
    /// `p` is 8-byte aligned, valid for [`BELL_BYTES`] bytes for `'a`, and only ever
    /// accessed as a `Bell` (by every process that maps it).
    pub unsafe fn at<'a>(p: *mut u8) -> &'a Bell {
        debug_assert!(p as usize % 8 == 0);
        // SAFETY: the caller's contract; Bell is two AtomicU32 (valid for any bits).
        unsafe { &*(p as *const Bell) }
    }

    /// Wake every sleeper. Cheap when nobody sleeps: a fence (a compiler fence
    /// with `membarrier`) and one load.
    #[inline]
    pub fn ring(&self) {
        if asymmetric() {
            compiler_fence(SeqCst);
        } else {
            fence(SeqCst);
        }
        if self.sleepers.load(SeqCst) != 0 {
            self.seq.fetch_add(1, SeqCst);
            futex_wake(&self.seq);
        }
    }

    /// Sleep until rung or `max` elapsed, unless `still()` (the wait's condition is
    /// still false) says otherwise after the announcement. Says whether it blocked.
    pub fn sleep<E>(
        &self,
        max: Duration,
        still: impl FnOnce() -> Result<bool, E>,
    ) -> Result<Slept, E> {
        self.sleepers.fetch_add(1, SeqCst);
        if asymmetric() {
            heavy_fence();
        }
        let s = self.seq.load(SeqCst);
        let r = still().map(|still| match still {
            false => Slept::NotNeeded,
            true if futex_wait(&self.seq, s, max) => Slept::Blocked,
            true => Slept::Raced,
        });
        self.sleepers.fetch_sub(1, SeqCst);
        r
    }
}

/// What a [`Bell::sleep`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slept {
    /// `still()` said the condition may hold: no sleep.
    NotNeeded,
    /// Rung between the test and the futex call: back at once, without blocking.
    Raced,
    /// Blocked until rung, or until the bound.
    Blocked,
}

/// Whether wakers may skip their fence (`asymmetric`): 0 not asked yet, 1 yes, 2 no.
static ASYM: AtomicU8 = AtomicU8::new(0);

/// Ask the kernel for the asymmetric fence now, not at the first ring or sleep.
///
/// Registering with `membarrier` takes microseconds in a single-threaded process
/// but 8-16 ms in one with threads (Open MPI's `MPI_Init` starts some), where the
/// kernel waits for a grace period. Asked lazily, it stalled a rank's first AM
/// send (which rings the target's bell) by that much. So the library asks when it
/// is loaded, before `MPI_Init` in a program linked with it, and `fh_init` asks
/// again (a no-op then; a program that loads the library later pays inside the
/// collective `fh_init`, where every rank pays at once).
pub fn prepare_wakers() {
    let _ = asymmetric();
}

/// Run when the library is loaded (the ELF constructors).
extern "C" fn prepare_wakers_at_load() {
    prepare_wakers();
}

#[used]
#[link_section = ".init_array"]
static PREPARE_AT_LOAD: extern "C" fn() = prepare_wakers_at_load;

/// Whether wakers may skip their fence: `membarrier` offers the global expedited
/// barrier and this process is registered for it (asked once per process).
#[inline]
fn asymmetric() -> bool {
    match ASYM.load(SeqCst) {
        1 => true,
        2 => false,
        _ => {
            let yes = membarrier_register();
            ASYM.store(if yes { 1 } else { 2 }, SeqCst);
            yes
        }
    }
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

#[cold]
fn membarrier_register() -> bool {
    let need = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let have = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    if have < 0 || have & need as libc::c_long != need as libc::c_long {
        return false;
    }
    // SAFETY: as above.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
            0,
            0,
        )
    };
    rc == 0
}

/// A full fence on every CPU that runs a registered process (every rank of the job,
/// each registered on its first `asymmetric()`); a plain fence if the call fails.
fn heavy_fence() {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) };
    if rc != 0 {
        fence(SeqCst);
    }
}

/// Block while `*w == expected`, for at most `max`; false if the word had changed
/// already (the kernel did not block).
fn futex_wait(w: &AtomicU32, expected: u32, max: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: max.as_secs() as libc::time_t,
        tv_nsec: max.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (shared: the word may be in a mapping other processes share)
    // on a live, aligned u32; the kernel only reads it and the timespec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN)
}

fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32; wakes every waiter of the word.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// What a wait does before its next test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Spin,
    Yield,
    Sleep,
}

/// Where one wait is in the policy (see the module documentation).
pub struct Backoff {
    tests: u32,
    p: Policy,
    /// Tests added to the yield stage by the caller's [`Patience`].
    extra: u32,
}

impl Backoff {
    /// A wait whose yield stage lasts `extra` tests longer ([`Patience::extra`]).
    pub fn patient(p: Policy, extra: u32) -> Backoff {
        Backoff { tests: 0, p, extra }
    }

    /// The stage for the next test (and count it).
    #[inline]
    pub fn step(&mut self) -> Stage {
        self.tests = self.tests.saturating_add(1);
        let Policy { spin, yields } = self.p;
        if self.tests <= spin {
            Stage::Spin
        } else if self.tests <= spin.saturating_add(yields).saturating_add(self.extra) {
            Stage::Yield
        } else {
            Stage::Sleep
        }
    }
}

/// How much longer than its policy's yield stage a wait yields before it sleeps,
/// learnt from the waits before it (as glibc's adaptive mutex learns its spin count).
///
/// Announcing a sleep is not free: the `membarrier` of [`Bell::sleep`] interrupts
/// every CPU of the job, and each waker that sees the announcement makes a `futex`
/// call. When the condition comes true during the announcement (a *wasted* sleep),
/// all of that bought nothing. Measured at 4 ranks on 2 cores (docs/PERFORMANCE.md,
/// "Waiting, adaptive"): in some launches one rank announced a sleep in 1 700 of
/// 2 200 barriers and slept in 15, and the barrier took 11-12 us instead of 2.
/// So a wasted sleep (the condition held after the announcement, or a ring came
/// before the futex call) doubles the extra yields, up to [`Patience::MAX`], and a
/// real one takes back as much: jobs whose waits end within a few yields stop
/// announcing, jobs whose waiters need the cores (4x oversubscribed) keep sleeping
/// early, and waits that alternate stay where they are (below the cap). Threads
/// waiting at once may lose each other's updates: it is a hint, never a guarantee.
#[derive(Default)]
pub struct Patience(AtomicU32);

impl Patience {
    /// The most extra yields: about a time slice's worth of yields to a core-mate.
    /// (Not `pub`: cbindgen would export it into the C header.)
    const MAX: u32 = 256;

    /// Extra yield-stage tests for the next wait.
    #[inline]
    pub fn extra(&self) -> u32 {
        self.0.load(Relaxed)
    }

    /// What a sleep came to: yield longer next time if it did not block, shorter if
    /// it did (what the wait waited for was far off). `e` -> `2e + 2` -> `e`.
    pub fn learn(&self, s: Slept) {
        let e = self.extra();
        let next = match s {
            Slept::NotNeeded | Slept::Raced => (e * 2 + 2).min(Self::MAX),
            Slept::Blocked => e.saturating_sub(e / 2 + 1),
        };
        self.0.store(next, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// The library's load-time constructor already asked for the asymmetric fence
    /// (a first ring must not pay a slow `membarrier` registration).
    #[test]
    fn fence_mode_is_decided_at_load() {
        assert_ne!(ASYM.load(SeqCst), 0, "the constructor did not run");
    }

    #[test]
    fn stages_in_order() {
        let p = CROWDED;
        let mut b = Backoff::patient(p, 0);
        let s: Vec<Stage> = (0..p.spin + p.yields + 2).map(|_| b.step()).collect();
        assert!(s[..p.spin as usize].iter().all(|&x| x == Stage::Spin));
        assert!(s[p.spin as usize..(p.spin + p.yields) as usize]
            .iter()
            .all(|&x| x == Stage::Yield));
        assert_eq!(s[(p.spin + p.yields) as usize], Stage::Sleep);
        assert_eq!(Policy::for_node(2, 2), DEDICATED);
        assert_eq!(Policy::for_node(8, 2), CROWDED);
        b = Backoff::patient(p, 0);
        assert_eq!(b.step(), Stage::Spin);
    }

    /// Wasted sleeps lengthen the yield stage (up to the cap), real ones shorten it
    /// again, and a patient wait reaches its sleep stage that much later.
    #[test]
    fn patience_learns_both_ways() {
        let pat = Patience::default();
        assert_eq!(pat.extra(), 0);
        pat.learn(Slept::NotNeeded);
        pat.learn(Slept::Raced);
        assert_eq!(pat.extra(), 6);
        for _ in 0..20 {
            pat.learn(Slept::NotNeeded);
        }
        assert_eq!(pat.extra(), Patience::MAX);
        pat.learn(Slept::Blocked);
        assert_eq!(pat.extra(), Patience::MAX / 2 - 1);
        for _ in 0..20 {
            pat.learn(Slept::Blocked);
        }
        assert_eq!(pat.extra(), 0);
        // Alternating wasted and real sleeps neither grows nor shrinks the stage.
        for e in [0, 5, 40] {
            pat.0.store(e, Relaxed);
            for _ in 0..50 {
                pat.learn(Slept::Raced);
                pat.learn(Slept::Blocked);
            }
            assert_eq!(pat.extra(), e);
        }

        let p = CROWDED;
        let mut b = Backoff::patient(p, 5);
        let s: Vec<Stage> = (0..p.spin + p.yields + 6).map(|_| b.step()).collect();
        let first_sleep = s.iter().position(|&x| x == Stage::Sleep);
        assert_eq!(first_sleep, Some((p.spin + p.yields + 5) as usize));
    }

    /// A sleeper is woken by a ring long before its bound, and a ring with no
    /// sleeper costs no wake-up later (no lost or stale wake-ups).
    #[test]
    fn ring_wakes_sleeper() {
        let mem = Arc::new([0u64; 1]);
        let p = mem.as_ptr() as *mut u8 as usize;
        let flag = Arc::new(AtomicBool::new(false));
        let f2 = flag.clone();
        let t = std::thread::spawn(move || {
            // SAFETY: `mem` outlives the thread (joined below), aligned, only a Bell.
            let b = unsafe { Bell::at(p as *mut u8) };
            let t0 = std::time::Instant::now();
            while !f2.load(SeqCst) {
                let _ = b.sleep(Duration::from_secs(10), || Ok::<_, ()>(!f2.load(SeqCst)));
            }
            t0.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        flag.store(true, SeqCst);
        // SAFETY: as above.
        unsafe { Bell::at(p as *mut u8) }.ring();
        let waited = t.join().unwrap();
        assert!(
            waited < Duration::from_secs(5),
            "sleeper not woken: {:?}",
            waited
        );
        drop(mem);
    }
}

/// `FH_WAIT_SLEEP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sleep {
    /// Never: spin and yield only.
    Off,
    /// While no operation through the transport can need this rank's progress
    /// (`Conduit::needs_progress`).
    Auto,
    /// Always (a transport operation aimed at a sleeping rank may wait up to a sleep).
    On,
}

impl Sleep {
    pub fn name(self) -> &'static str {
        match self {
            Sleep::Off => "0",
            Sleep::Auto => "auto",
            Sleep::On => "1",
        }
    }
}
