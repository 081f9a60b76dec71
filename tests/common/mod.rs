//! Helpers shared by the integration tests (each test file includes this with
//! `mod common;`): a watchdog that fails the test process, naming the test, instead of
//! letting a deadlocked test hang CI; a small deterministic RNG; the set-up of a sim
//! world (N virtual nodes in this process, one context each); and a lock that runs
//! thread-heavy tests one at a time.

// Each test crate uses only some of these helpers.
#![allow(dead_code)]

use firehose::api::settings::Settings;
use firehose::api::Context;
use firehose::conduit::sim::SimWorld;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Tests that spin threads against each other take this lock to run one at a time
/// (in parallel on 2 cores they starve each other and take 20× longer).
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A small deterministic generator (xorshift64; no shared state between threads).
/// The seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Busy-wait a random number (below `max`) of spin-loop hints.
    pub fn spin(&mut self, max: usize) {
        for _ in 0..self.below(max) {
            std::hint::spin_loop();
        }
    }
}

/// In which order the sim completes the operations of one flush.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Completion {
    /// In issue order (the sim's default).
    InOrder,
    /// In *reverse* order of issue (MPI promises no order within a flush), so a
    /// notice that could overtake its data is caught.
    Reversed,
}

/// A sim world of `n` virtual nodes and one context per node, all with the default
/// settings except `heap_size`, then whatever `tweak` changes.
pub fn sim_world(
    n: usize,
    heap_size: usize,
    completion: Completion,
    tweak: impl FnOnce(&mut Settings),
) -> (Arc<SimWorld>, Vec<Context>) {
    let mut cfg = Settings::defaults();
    cfg.heap_size = heap_size;
    tweak(&mut cfg);
    let w = SimWorld::new(n, cfg.heap_size).unwrap();
    if completion == Completion::Reversed {
        w.reverse_completion.store(true, Ordering::Relaxed);
    }
    let c = (0..n)
        .map(|r| Context::new_sim(&w, r, cfg.clone()).unwrap())
        .collect();
    (w, c)
}

/// What a watchdog does besides its time limit, and how it fails.
#[derive(Clone, Copy)]
pub struct Watch {
    /// Also fail as soon as any thread of the process panics: threads here wait on
    /// each other, so a panicked partner would leave the others waiting forever.
    pub fail_on_panic: bool,
    /// The exit status of the process when the watchdog fires.
    pub exit_code: i32,
    /// Extra diagnostics, printed before the process ends.
    pub dump: Option<fn() -> String>,
}

/// Partner threads: fail on the first panic anywhere, with a failed test's status.
pub const PARTNERS: Watch = Watch {
    fail_on_panic: true,
    exit_code: 101,
    dump: None,
};

/// Set (for good) by the panic hook once any thread of this process panics.
static PANICKED: AtomicBool = AtomicBool::new(false);

/// While alive, a thread that ends the whole test process (failing, with a message
/// naming the test and `what`) if the limit passes or, with `fail_on_panic`, a
/// thread panics. Dropping it stops the watch.
pub struct Watchdog {
    done: Arc<AtomicBool>,
    dog: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(secs: u64, what: &str, how: Watch) -> Watchdog {
        if how.fail_on_panic {
            static HOOK: Once = Once::new();
            HOOK.call_once(|| {
                let prev = std::panic::take_hook();
                std::panic::set_hook(Box::new(move |i| {
                    PANICKED.store(true, Ordering::SeqCst);
                    prev(i);
                }));
            });
        }
        // libtest runs each test on a thread named after it.
        let test = std::thread::current()
            .name()
            .unwrap_or("(unnamed thread)")
            .to_string();
        let what = what.to_string();
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let dog = std::thread::spawn(move || {
            let t0 = Instant::now();
            while !d2.load(Ordering::Acquire) {
                let why = if how.fail_on_panic && PANICKED.load(Ordering::SeqCst) {
                    "a thread panicked (its partners would wait forever)".to_string()
                } else if t0.elapsed() > Duration::from_secs(secs) {
                    format!("did not finish within {secs} s (deadlock or livelock)")
                } else {
                    std::thread::park_timeout(Duration::from_millis(10));
                    continue;
                };
                // Straight to stderr: libtest captures `eprintln!` of a test's threads
                // and the captured output is lost when the process exits.
                let mut msg = format!("watchdog: test {test}: {what}: {why}: failing\n");
                if let Some(dump) = how.dump {
                    msg += &dump();
                }
                let _ = std::io::stderr().write_all(msg.as_bytes());
                std::process::exit(how.exit_code);
            }
        });
        Watchdog {
            done,
            dog: Some(dog),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(dog) = self.dog.take() {
            dog.thread().unpark();
            let _ = dog.join();
        }
    }
}

/// Run `f` on a thread of its own under a watchdog (see [`Watchdog`]) and return its
/// result.
pub fn within_with<T: Send>(secs: u64, what: &str, how: Watch, f: impl FnOnce() -> T + Send) -> T {
    let _dog = Watchdog::start(secs, what, how);
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

/// Run `f` (which runs threads that wait on each other) under a [`PARTNERS`]
/// watchdog: fail instead of hanging if it takes longer than `secs` or any thread
/// panics.
pub fn within<T: Send>(secs: u64, what: &str, f: impl FnOnce() -> T + Send) -> T {
    within_with(secs, what, PARTNERS, f)
}

/// Run one closure per node, each on its own thread, under a [`PARTNERS`] watchdog
/// of `secs`; the results in rank order.
pub fn on_all<T: Send>(c: &[Context], secs: u64, f: impl Fn(&Context) -> T + Sync) -> Vec<T> {
    let _dog = Watchdog::start(secs, "one thread per node", PARTNERS);
    std::thread::scope(|s| {
        let hs: Vec<_> = c.iter().map(|ctx| s.spawn(|| f(ctx))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
