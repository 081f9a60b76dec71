//! Model check of Firehose-SMP's core (seed 000 §4.1) with `loom`: every
//! interleaving of a few threads that share one remote firehose table (or the local
//! table, last test), its deadlock-avoidance flag and condition variable, on
//! configurations small enough to explore exhaustively (within a preemption bound).
//!
//! The moves are answered inline (the "target" pins exactly what was asked), so the
//! model checks the table state machine and the protocol, not the transport. Loom
//! fails the test on a deadlock (every thread asleep), and the assertions check:
//! - the table's invariants after every step (`validate`);
//! - a move is only ever sent with `used - (its own releases) <= f`;
//! - every thread completes its request, holding references on exactly its range.
//!
//! Run: `make loom` (RUSTFLAGS="--cfg loom", its own target directory).
#![cfg(loom)]

use firehose::firehose::local::{LocalBegin, LocalTable, Pinner};
use firehose::firehose::params::Params;
use firehose::firehose::remote::{Acq, PeerTable, Step};
use firehose::firehose::settings::{FhMode, FirehoseSettings};
use firehose::firehose::smp::{self, DaClient, DaGate, DaTally, Round};
use firehose::runtime::config::Group;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};

const PAGE: usize = 4096;
const BASE: usize = 0x10_0000;

struct Shared {
    table: Mutex<PeerTable>,
    gate: DaGate,
    ids: AtomicU64,
    p: Params,
}

struct Client<'a> {
    sh: &'a Shared,
    acq: Acq,
    epoch: u64,
}

impl DaClient for Client<'_> {
    type Out = Vec<(usize, u64)>;
    type Err = String;

    fn step(&mut self) -> Round<Self::Out> {
        let sh = self.sh;
        let id = sh.ids.fetch_add(1, Ordering::Relaxed);
        let mut t = sh.table.lock().unwrap();
        self.epoch = t.releases;
        let used_before = t.used;
        let st = t.step(&sh.p, &mut self.acq, id);
        t.validate().expect("table invariant after a step");
        match st {
            Step::Hit(h) => Round::Done(h),
            Step::Commit { releases, pins } => {
                // The move: our own releases go first at the target, so what the
                // target holds for us never exceeds f.
                assert!(
                    t.used - releases.len() <= sh.p.f,
                    "move sent with used {} (before {}) and {} releases, f {}",
                    t.used,
                    used_before,
                    releases.len(),
                    sh.p.f
                );
                // The target answers inline with whole pages.
                let units: Vec<(usize, usize, bool)> = pins
                    .iter()
                    .map(|&(a, _)| (a & !(PAGE - 1), (a & !(PAGE - 1)) + PAGE, false))
                    .collect();
                t.complete_move(id, &units);
                let mut held = std::mem::take(&mut self.acq.held);
                held.extend(t.take_handoff(id));
                t.validate().expect("table invariant after a move");
                Round::Done(held)
            }
            Step::Wait(_) => Round::Wait,
            Step::Short => Round::Short,
            Step::Conflict => Round::Conflict,
        }
    }

    fn try_hit(&mut self) -> Option<Self::Out> {
        let (a, b) = (self.acq.addr, self.acq.addr + self.acq.len);
        self.sh
            .table
            .lock()
            .unwrap()
            .partial(a, b, true)
            .map(|x| x.2)
    }

    fn rollback(&mut self) {
        let mut t = self.sh.table.lock().unwrap();
        t.rollback(&mut self.acq);
        t.validate().expect("table invariant after a rollback");
    }

    fn holds(&self) -> bool {
        !self.acq.is_clear()
    }

    fn poll(&mut self, _wait: bool) -> Result<bool, String> {
        // Other threads release on their own; give them the processor. Stuck only
        // if nothing changed and nobody holds anything (no pins exist here).
        loom::thread::yield_now();
        let t = self.sh.table.lock().unwrap();
        Ok(!(t.releases == self.epoch && t.only_pins_hold(&self.acq, 0)))
    }

    fn exhausted(&mut self) -> String {
        "request gave up although nothing holds firehoses but other requests".into()
    }
}

fn params(f: usize) -> Params {
    let mut cfg = FirehoseSettings::defaults();
    cfg.mode = Some(FhMode::Page);
    cfg.m = Some(f * PAGE);
    let p = Params::derive(&cfg, 2, 1, FhMode::Page, None);
    assert_eq!(p.f, f);
    p
}

/// One request per entry of `sizes` (pages), at distinct addresses, against f.
/// Returns how many interleavings loom explored.
fn run(f: usize, sizes: &'static [usize], bound: usize) -> usize {
    let threads = sizes.len();
    // Not a loom type: counts explorations, outside the model.
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r2 = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.check(move || {
        r2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let sh = Arc::new(Shared {
            table: Mutex::new(PeerTable::default()),
            gate: DaGate::default(),
            ids: AtomicU64::new(1),
            p: params(f),
        });
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let sh = sh.clone();
                loom::thread::spawn(move || {
                    let pages = sizes[i];
                    let addr = BASE + i * 8 * PAGE + 8;
                    let len = pages * PAGE - 16;
                    let req = 1_000_000 + i as u64;
                    let mut c = Client {
                        sh: &sh,
                        acq: Acq::new(req, addr, len, false),
                        epoch: 0,
                    };
                    let mut tally = DaTally::default();
                    let held = smp::acquire(&sh.gate, req, &mut c, &mut tally)
                        .unwrap_or_else(|e| panic!("thread {i}: {e}"));
                    // Exactly our pages, each referenced.
                    let mut starts: Vec<usize> = held.iter().map(|h| h.0).collect();
                    starts.sort_unstable();
                    starts.dedup();
                    assert_eq!(starts.len(), pages, "thread {i} holds {starts:x?}");
                    let mut t = sh.table.lock().unwrap();
                    for h in held {
                        t.release(h);
                    }
                    t.validate().unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let t = sh.table.lock().unwrap();
        t.validate().unwrap();
        assert!(t.used <= f);
    });
    let n = runs.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("loom: f {f}, requests of {sizes:?} pages: {n} interleavings");
    n
}

/// Seed 000 §4's example in miniature: f = 2, two threads each needing both
/// firehoses — they can only succeed one after the other.
#[test]
fn two_threads_each_needing_all_of_f() {
    assert!(run(2, &[2, 2], 4) > 10);
}

/// Three threads, two firehoses each, f = 3: any two together exceed f.
#[test]
fn three_threads_overlapping_demands() {
    assert!(run(3, &[2, 2, 2], 3) > 10);
}

/// Two threads each needing all of f = 3 while a third briefly holds two
/// firehoses: without deadlock avoidance they can split f between them and wait
/// for each other forever (the livelock of seed 000 §4).
#[test]
fn two_threads_needing_all_of_f_while_a_third_holds_some() {
    assert!(run(3, &[2, 3, 3], 3) > 10);
}

// ------------------------------------------------------------------ local pins

/// Pins nothing (the model checks the table and the protocol).
struct NoPin;

impl Pinner for NoPin {
    fn pin(&mut self, _s: usize, _e: usize) -> firehose::runtime::error::Result<bool> {
        Ok(true)
    }
    fn unpin(&mut self, _s: usize, _e: usize, _locked: bool) {}
    fn extent(&self, a: usize, b: usize, _lo: usize, _hi: usize) -> Option<(usize, usize, bool)> {
        Some((a & !(PAGE - 1), (b + PAGE - 1) & !(PAGE - 1), true))
    }
}

struct LocalShared {
    table: Mutex<LocalTable>,
    gate: DaGate,
}

struct LocalClient<'a> {
    sh: &'a LocalShared,
    addr: usize,
    len: usize,
    epoch: u64,
}

impl DaClient for LocalClient<'_> {
    type Out = Vec<(usize, u64)>;
    type Err = String;

    fn step(&mut self) -> Round<Self::Out> {
        let (a, b) = (self.addr, self.addr + self.len);
        let begin = {
            let mut t = self.sh.table.lock().unwrap();
            self.epoch = t.releases;
            t.local_begin(a, b, &mut NoPin).expect("local_begin")
        };
        match begin {
            LocalBegin::Done(h) => Round::Done(h),
            LocalBegin::Busy => Round::Conflict,
            LocalBegin::Full => Round::Short,
            LocalBegin::Pin { held, pins } => {
                // Phase two without the lock: another thread may run here.
                loom::thread::yield_now();
                let results = pins.iter().map(|_| Ok(true)).collect();
                let mut t = self.sh.table.lock().unwrap();
                let h = t
                    .local_finish(held, &pins, results, &mut NoPin)
                    .expect("finish");
                t.validate().expect("local table invariant");
                Round::Done(h)
            }
        }
    }

    fn try_hit(&mut self) -> Option<Self::Out> {
        let (a, b) = (self.addr, self.addr + self.len);
        self.sh
            .table
            .lock()
            .unwrap()
            .local_try(a, b, false)
            .map(|x| x.2)
    }

    fn rollback(&mut self) {}

    fn holds(&self) -> bool {
        false
    }

    fn poll(&mut self, _wait: bool) -> Result<bool, String> {
        loom::thread::yield_now();
        let t = self.sh.table.lock().unwrap();
        let (refs, pinning) = t.local_refs();
        Ok(!(t.releases == self.epoch && !pinning && refs == 0))
    }

    fn exhausted(&mut self) -> String {
        "local request gave up although only other requests hold the share".into()
    }
}

/// Local pins against MAXVICTIM = 2 pages: requests of 2 pages (each needs the
/// whole share), two of them on the same pages (one meets the other's unit while it
/// is being pinned: Table 3, third row).
#[test]
fn local_pins_competing_for_the_local_share() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let mut cfg = FirehoseSettings::defaults();
        cfg.mode = Some(FhMode::Page);
        cfg.m = Some(2 * PAGE);
        cfg.maxvictim = Some(2 * PAGE);
        let p = Params::derive(&cfg, 2, 1, FhMode::Page, None);
        assert_eq!(p.victim_units, 2);
        let sh = Arc::new(LocalShared {
            table: Mutex::new(LocalTable::new(p, 2)),
            gate: DaGate::default(),
        });
        let starts = [BASE, BASE, BASE + 8 * PAGE];
        let hs: Vec<_> = starts
            .iter()
            .enumerate()
            .map(|(i, &addr)| {
                let sh = sh.clone();
                loom::thread::spawn(move || {
                    let mut c = LocalClient {
                        sh: &sh,
                        addr: addr + 8,
                        len: 2 * PAGE - 16,
                        epoch: 0,
                    };
                    let mut tally = DaTally::default();
                    let held = smp::acquire(&sh.gate, 1 + i as u64, &mut c, &mut tally)
                        .unwrap_or_else(|e| panic!("thread {i}: {e}"));
                    assert_eq!(held.len(), 2, "thread {i} holds {held:x?}");
                    let mut t = sh.table.lock().unwrap();
                    for h in held {
                        t.local_release(h, &mut NoPin);
                    }
                    t.validate().unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let t = sh.table.lock().unwrap();
        t.validate().unwrap();
        assert_eq!(t.local_refs(), (0, false));
    });
}
