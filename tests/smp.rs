//! Firehose-SMP on the sim conduit (a strict NIC: any access to memory the target
//! has not registered, or from a local buffer not registered, fails): seed 000 §5's
//! deadlock-prone synthetic traces. Many threads share node 0's context and its
//! firehose tables:
//! - f = 8 pages, 32 KiB requests (8 pages each) to random offsets of a large remote
//!   region, 1, 2, 4 and 8 threads: every request needs all of f, so the threads
//!   compete for it on (nearly) every request;
//! - local-pin storms: explicit local pins near MAXVICTIM from every thread at once;
//! - mixed random traffic (blocking, nb, nbi, pins) from 4 threads to 3 peers.
//!
//! Every run must finish within a generous bound (a watchdog fails the test instead
//! of hanging), the data read back must be what was written, and afterwards the
//! tables pass their validation, pinned bytes stay within M + MAXVICTIM and nothing
//! is left registered after shutdown.

mod common;

use common::{sim_world, within_with, Completion, Rng, Watch};
use firehose::api::moves::{thread_stats, thread_stats_reset, PinHow};
use firehose::api::Context;
use firehose::conduit::sim::SimWorld;
use firehose::firehose::settings::FhMode;
use std::sync::Arc;

const PAGE: usize = 4096;

/// The contexts of the current world, for `dump_tables`.
static DUMP: std::sync::Mutex<Vec<Arc<firehose::api::ctx::CtxInner>>> =
    std::sync::Mutex::new(Vec::new());

/// The tables of the contexts in use (what the watchdog shows before failing).
fn dump_tables() -> String {
    DUMP.lock()
        .unwrap()
        .iter()
        .map(|c| format!("{}\n", c.fh_debug_dump()))
        .collect()
}

/// Fail (instead of hanging) if `f` does not finish within `secs`. Only the time is
/// watched: a panic fails the test the usual way.
fn within<T: Send>(secs: u64, what: &str, f: impl FnOnce() -> T + Send) -> T {
    let how = Watch {
        fail_on_panic: false,
        exit_code: 3,
        dump: Some(dump_tables),
    };
    within_with(secs, what, how, f)
}

struct World {
    w: Arc<SimWorld>,
    c: Vec<Context>,
}

fn world(n: usize, f: usize, victim_pages: usize) -> World {
    let (w, c) = sim_world(n, 1 << 16, Completion::InOrder, |cfg| {
        cfg.firehose.mode = Some(FhMode::Page);
        cfg.firehose.m = Some(f * PAGE * (n - 1));
        cfg.firehose.maxvictim = Some(victim_pages * PAGE);
    });
    *DUMP.lock().unwrap() = c.iter().map(|x: &Context| x.inner.clone()).collect();
    World { w, c }
}

impl World {
    /// Tables valid, f respected, pinned bytes within the bound and equal to what the
    /// conduit really has registered.
    fn check(&self) {
        for (r, c) in self.c.iter().enumerate() {
            c.fh_debug_validate()
                .unwrap_or_else(|e| panic!("rank {r}: {e}"));
            let s = c.fh_stats();
            assert!(s.bytes_pinned <= s.limit_bytes, "rank {r}: {s:?}");
            assert!(
                s.firehoses_used <= s.firehoses_per_peer * (self.c.len() as u64 - 1),
                "rank {r}: {s:?}"
            );
            let (hb, hl) = c.conduit.heap();
            let real: usize = self
                .w
                .registrations(r)
                .iter()
                .filter(|&&(a, _)| a < hb || a >= hb + hl)
                .map(|&(a, b)| b - a)
                .sum();
            assert_eq!(real as u64, s.bytes_pinned, "rank {r}: registered bytes");
        }
    }

    fn shutdown(self) {
        for c in &self.c {
            c.fh_shutdown();
        }
        for r in 0..self.c.len() {
            let (hb, hl) = self.c[r].conduit.heap();
            assert!(self
                .w
                .registrations(r)
                .iter()
                .all(|&(a, _)| a >= hb && a < hb + hl));
        }
    }
}

/// Seed 000 §5's fairness trace: f = 8, 32 KiB puts to random page-aligned offsets.
fn fig8_trace(threads: usize, per_thread: usize) -> (u64, u64) {
    let w = world(2, 8, 16);
    let slot = 64 * 32 * 1024; // each thread's stripe of the target
    let target = vec![0u8; threads * slot + PAGE];
    let tbase = (target.as_ptr() as usize + PAGE - 1) & !(PAGE - 1);
    let (da, req) = within(120, &format!("fig8 trace, {threads} threads"), || {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let c = &w.c[0];
                    s.spawn(move || {
                        thread_stats_reset();
                        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
                        let mut src = vec![0u8; 32 * 1024];
                        let mut back = vec![0u8; 32 * 1024];
                        let mut shadow = vec![0u8; slot];
                        for i in 0..per_thread {
                            let off = rng.below(slot / (32 * 1024)) * 32 * 1024;
                            let fill = (t * 31 + i) as u8;
                            src.iter_mut().for_each(|b| *b = fill);
                            let dst = tbase + t * slot + off;
                            c.put(1, dst, src.as_ptr() as usize, src.len())
                                .unwrap_or_else(|e| panic!("thread {t} put {i}: {e}"));
                            shadow[off..off + src.len()].copy_from_slice(&src);
                            if i % 8 == 7 {
                                c.get(back.as_mut_ptr() as usize, 1, dst, back.len())
                                    .unwrap_or_else(|e| panic!("thread {t} get {i}: {e}"));
                                assert_eq!(back, src, "thread {t}: read back differs");
                            }
                        }
                        // Everything this thread wrote is there.
                        let mut all = vec![0u8; slot];
                        for k in 0..slot / (32 * 1024) {
                            let o = k * 32 * 1024;
                            c.get(
                                all[o..].as_mut_ptr() as usize,
                                1,
                                tbase + t * slot + o,
                                32 * 1024,
                            )
                            .unwrap();
                        }
                        assert!(all == shadow, "thread {t}: final contents differ");
                        let ts = thread_stats();
                        (ts.da_entries, ts.requests)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
    });
    w.check();
    let s = w.c[0].fh_stats();
    assert!(s.da_wins <= s.da_entries, "{s:?}");
    w.shutdown();
    drop(target);
    (da, req)
}

#[test]
fn fig8_trace_one_thread() {
    let (da, req) = fig8_trace(1, 300);
    assert!(req > 0);
    // One client never has to wait for another: the easy path always commits.
    assert_eq!(da, 0, "a single thread entered deadlock avoidance");
}

#[test]
fn fig8_trace_2_4_8_threads() {
    for t in [2, 4, 8] {
        let (da, req) = fig8_trace(t, 200);
        eprintln!("fig8 trace: {t} threads, {da} of {req} requests took the DA path");
        assert!(req > 0);
    }
}

/// Every thread pins local memory near the local share at once (seed 000 §4's local
/// livelock case): MAXVICTIM = 8 pages, each pin 5–8 pages, so at most one fits.
#[test]
fn local_pin_storm() {
    let w = world(2, 8, 8);
    let threads = 6;
    let buf = vec![0u8; threads * 64 * PAGE + PAGE];
    let base = (buf.as_ptr() as usize + PAGE - 1) & !(PAGE - 1);
    within(120, "local pin storm", || {
        std::thread::scope(|s| {
            for t in 0..threads {
                let c = &w.c[0];
                s.spawn(move || {
                    let mut rng = Rng(77 + t as u64);
                    for _ in 0..150 {
                        let pages = 5 + rng.below(4);
                        let at = base + t * 64 * PAGE + rng.below(56) * PAGE;
                        let pin = c
                            .local_pin(at, pages * PAGE, PinHow::Blocking)
                            .unwrap_or_else(|e| panic!("thread {t}: {e}"));
                        assert_eq!(pin.len, pages * PAGE);
                        std::thread::yield_now();
                        c.release_pin(*pin).unwrap();
                    }
                });
            }
        })
    });
    w.check();
    let s = w.c[0].fh_stats();
    assert!(
        s.da_entries > 0,
        "the storm never needed deadlock avoidance: {s:?}"
    );
    w.shutdown();
}

/// Mixed traffic: 4 threads of node 0 and 2 threads of node 1 to every other node,
/// blocking / nb / nbi puts and gets and explicit remote pins, with request sizes up
/// to all of f. Each (node, thread) owns a stripe of each target; the final
/// contents must match the shadows.
#[test]
fn mixed_threads_many_peers() {
    let n = 4;
    let w = world(n, 6, 64);
    let stripe = 256 * 1024;
    let writers: Vec<(usize, usize)> = (0..4)
        .map(|t| (0, t))
        .chain((0..2).map(|t| (1, t)))
        .collect();
    let mem: Vec<Vec<u8>> = (0..n)
        .map(|_| vec![0u8; writers.len() * stripe + PAGE])
        .collect();
    let bases: Vec<usize> = mem
        .iter()
        .map(|m| (m.as_ptr() as usize + PAGE - 1) & !(PAGE - 1))
        .collect();
    within(180, "mixed threads", || {
        std::thread::scope(|s| {
            for (k, &(node, t)) in writers.iter().enumerate() {
                let c = &w.c[node];
                let bases = &bases;
                s.spawn(move || {
                    let mut rng = Rng(1234 + k as u64);
                    let mut shadow: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; stripe]).collect();
                    let mut kinds: Vec<Vec<(usize, usize)>> =
                        (0..n).map(|_| vec![(9, 0); stripe]).collect();
                    let mut src = vec![0u8; 24 * 1024];
                    let mut back = vec![0u8; 24 * 1024];
                    for i in 0..400 {
                        let mut peer = rng.below(n);
                        if peer == node {
                            peer = (peer + 1) % n;
                        }
                        let op = rng.below(5);
                        // An explicit pin may cover at most f firehoses (5 pages here
                        // whatever the alignment).
                        let len = 1 + rng.below(if op == 3 { 5 * PAGE - 1 } else { 24 * 1024 });
                        let off = rng.below(stripe - len);
                        let dst = bases[peer] + k * stripe + off;
                        let fill = (i as u8).wrapping_mul(7).wrapping_add(k as u8);
                        src[..len].iter_mut().for_each(|b| *b = fill);
                        let r = match op {
                            0 => c.put(peer as i64, dst, src.as_ptr() as usize, len),
                            1 => c
                                .put_nb(peer as i64, dst, src.as_ptr() as usize, len)
                                .and_then(|h| c.wait(h)),
                            2 => c
                                .put_nbi(peer as i64, dst, src.as_ptr() as usize, len)
                                .and_then(|_| c.wait_nbi(firehose::api::rma::NBI_ALL)),
                            3 => {
                                // An explicit pin, then a put inside it (a hit on the
                                // pinned firehoses: a thread holding a pin must not
                                // ask for more than f minus what it pins).
                                let pin = c
                                    .remote_pin(peer, dst, len)
                                    .unwrap_or_else(|e| panic!("node {node} thread {t}: pin: {e}"));
                                let r = c.put(peer as i64, dst, src.as_ptr() as usize, len);
                                c.release_pin(*pin).unwrap();
                                r
                            }
                            _ => {
                                // Read what we wrote somewhere earlier.
                                c.get(back.as_mut_ptr() as usize, peer as i64, dst, len)
                                    .unwrap_or_else(|e| {
                                        panic!("node {node} thread {t}: get: {e}\n{}", c.fh_debug_dump())
                                    });
                                if back[..len] != shadow[peer][off..off + len] {
                                    let d = (0..len)
                                        .find(|&j| back[j] != shadow[peer][off + j])
                                        .unwrap();
                                    let n = (d..len)
                                        .take_while(|&j| back[j] != shadow[peer][off + j])
                                        .count();
                                    panic!(
                                        "node {node} thread {t}: get {i} from {peer} read stale data at {:#x} (+{d}, {n} bytes): got {} want {} written by op kind {} #{}",
                                        dst + d,
                                        back[d],
                                        shadow[peer][off + d],
                                        kinds[peer][off + d].0,
                                        kinds[peer][off + d].1
                                    );
                                }
                                continue;
                            }
                        };
                        r.unwrap_or_else(|e| {
                            panic!("node {node} thread {t} op {i}: {e}\n{}", c.fh_debug_dump())
                        });
                        shadow[peer][off..off + len].copy_from_slice(&src[..len]);
                        kinds[peer][off..off + len].iter_mut().for_each(|k| *k = (op, i));
                    }
                    for (peer, sh) in shadow.iter().enumerate() {
                        if peer == node {
                            continue;
                        }
                        let mut all = vec![0u8; stripe];
                        for o in (0..stripe).step_by(16 * 1024) {
                            c.get(
                                all[o..].as_mut_ptr() as usize,
                                peer as i64,
                                bases[peer] + k * stripe + o,
                                16 * 1024,
                            )
                            .unwrap();
                        }
                        assert!(&all == sh, "node {node} thread {t}: peer {peer} differs");
                    }
                });
            }
        })
    });
    w.check();
    w.shutdown();
    drop(mem);
}
