//! Firehose bookkeeping on a hit, measured alone (targets.md: < 100 ns per
//! operation): look up a live firehose, take a reference, drop it — the table work a
//! hit adds to a put, with the lock a context takes around it. Prints ns per hit for
//! a hot entry and for hits spread over f entries (tree lookups).
//! Run: cargo run --release --example bench_table
use firehose::firehose::params::Params;
use firehose::firehose::remote::{PeerTable, Plan};
use firehose::firehose::settings::{FhMode, FirehoseSettings};
use firehose::runtime::config::Group;
use parking_lot::Mutex;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut cfg = FirehoseSettings::defaults();
    cfg.mode = Some(FhMode::Page);
    cfg.m = Some(4096 * 1024);
    let p = Params::derive(&cfg, 2, 1, FhMode::Page, None);
    let t = Mutex::new(PeerTable::default());
    let base = 0x4000_0000usize;
    let n = p.f.min(1024);
    for i in 0..n {
        let a = base + i * 4096;
        match t.lock().plan(&p, a, 8, i as u64 + 1, false) {
            Plan::Move { .. } => {}
            other => panic!("{other:?}"),
        }
        t.lock()
            .complete_move(i as u64 + 1, &[(a, a + 4096, false)]);
    }
    let iters = 10_000_000usize;
    let mut results = Vec::new();
    for (name, spread) in [("hot entry", 1usize), ("spread over f entries", n)] {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t0 = Instant::now();
            for i in 0..iters {
                let a = base + (i % spread) * 4096 + 64;
                let h = t.lock().hit_one(black_box(a), a + 8, false).expect("hit");
                t.lock().release(black_box(h));
            }
            best = best.min(t0.elapsed().as_nanos() as f64 / iters as f64);
        }
        results.push((name, best));
    }
    println!(
        "firehose table bookkeeping per hit (lookup + ref + release, with locks), f = {}:",
        n
    );
    for (name, ns) in results {
        println!("  {:<24} {:6.1} ns", name, ns);
    }
}
