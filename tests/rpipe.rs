//! rpipe on the sim conduit: each virtual node runs on its own thread, and the sim
//! completes the operations of a flush in *reverse* order of issue (MPI promises no
//! order within a flush), so a notice that could overtake its data would be caught
//! by the checksums here.

mod common;

use common::{serial, sim_world, within, Completion, Rng};
use firehose::api::rpipe::pipe::{extent, UNIT};
use firehose::api::rpipe::rmalloc::Rmalloc;
use firehose::api::rpipe::{self, Pipe, Policy, Role, Spec, Transfer};
use firehose::api::Context;
use firehose::conduit::sim::SimWorld;
use firehose::Status;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const POLICIES: [Policy; 4] = [
    Policy::NextFit,
    Policy::FirstFit,
    Policy::BestFit,
    Policy::WorstFit,
];
const OFF_MASK: u64 = (1 << 48) - 1;

fn world(n: usize) -> (Arc<SimWorld>, Vec<Context>) {
    sim_world(n, 4 << 20, Completion::Reversed, |_| {})
}

fn spec(role: Role, width: usize, transfer: Transfer, policy: Policy) -> Spec {
    Spec {
        role,
        width,
        duplex: role == Role::Both,
        transfer,
        policy,
    }
}

/// Open a pipe between nodes `a` and `b` (each end on its own thread).
fn pair(c: &[Context], a: usize, b: usize, sa: Spec, sb: Spec) -> (Arc<Pipe>, Arc<Pipe>) {
    std::thread::scope(|s| {
        let hb = s.spawn(|| rpipe::open(&c[b].inner, a as i64, sb));
        let pa = rpipe::open(&c[a].inner, b as i64, sa).unwrap();
        (pa, hb.join().unwrap().unwrap())
    })
}

fn close_pair(a: &Pipe, b: &Pipe) {
    std::thread::scope(|s| {
        let h = s.spawn(|| b.close());
        a.close().unwrap();
        h.join().unwrap().unwrap();
    })
}

/// Byte `k` of message `seq` (the first 8 bytes hold `seq` itself when they fit).
fn byte(seq: u64, k: usize) -> u8 {
    (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u8 ^ (k as u8).wrapping_mul(31)
}

fn fill(p: *mut u8, seq: u64, len: usize) {
    // SAFETY: the caller passes rmem of a live allocation of `len` bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(p, len) };
    for (k, x) in b.iter_mut().enumerate() {
        *x = byte(seq, k);
    }
    if len >= 8 {
        b[..8].copy_from_slice(&seq.to_le_bytes());
    }
}

fn check(p: *const u8, seq: u64, len: usize) {
    // SAFETY: rmem of a message just read, `len` bytes.
    let b = unsafe { std::slice::from_raw_parts(p, len) };
    if len >= 8 {
        let got = u64::from_le_bytes(b[..8].try_into().unwrap());
        assert_eq!(got, seq, "message out of order (or lost/duplicated)");
    }
    for (k, &x) in b.iter().enumerate().skip(8.min(len)) {
        assert_eq!(x, byte(seq, k), "message {seq} byte {k} of {len} is wrong");
    }
}

/// Sizes 0 ..= width, log-uniform, with 0 and width themselves frequent.
fn size(r: &mut Rng, width: usize) -> usize {
    match r.below(20) {
        0 => 0,
        1 => width,
        _ => {
            let bits = r.below(width.trailing_zeros() as usize + 1);
            r.below((1usize << bits).min(width) + 1)
        }
    }
}

/// Writer sends `n` messages of random sizes at a random pace; the reader takes them
/// at its own random pace (blocking or trying), holds a random window of them and
/// frees them out of order. Every byte, the order and the count are checked.
fn stream(n: u64, width: usize, transfer: Transfer, policy: Policy, seed: u64) {
    let (_w, c) = world(2);
    let (wp, rp) = pair(
        &c,
        0,
        1,
        spec(Role::Writer, width, transfer, policy),
        spec(Role::Reader, width, transfer, policy),
    );
    within(300, "stream", || {
        std::thread::scope(|s| {
            let wp2 = &wp;
            s.spawn(move || {
                let mut r = Rng(seed);
                for seq in 0..n {
                    let len = size(&mut r, width);
                    let a = if r.below(4) == 0 {
                        loop {
                            match wp2.rmalloc(len, false).unwrap() {
                                Some(a) => break a,
                                None => std::thread::yield_now(),
                            }
                        }
                    } else {
                        wp2.rmalloc(len, true).unwrap().unwrap()
                    };
                    fill(wp2.rmem(a).unwrap() as *mut u8, seq, len);
                    wp2.rwrite(a).unwrap();
                    r.spin(300);
                }
            });
            let mut r = Rng(seed ^ 0xABCD);
            let mut held: Vec<u64> = Vec::new();
            let mut window = 1;
            for seq in 0..n {
                let (a, len) = loop {
                    // Block only when holding nothing: the writer may need the
                    // space of every held message for its next one.
                    let m = if held.is_empty() && r.below(2) == 0 {
                        rp.rread(true).unwrap()
                    } else {
                        rp.rread(false).unwrap()
                    };
                    match m {
                        Some(m) => break m,
                        None if !held.is_empty() => {
                            let victim = held.swap_remove(r.below(held.len()));
                            rp.rfree(victim).unwrap();
                        }
                        None => r.spin(100),
                    }
                };
                check(rp.rmem(a).unwrap() as *const u8, seq, len);
                held.push(a);
                if r.below(64) == 0 {
                    window = 1 + r.below(16);
                }
                while held.len() >= window {
                    let victim = held.swap_remove(r.below(held.len()));
                    rp.rfree(victim).unwrap();
                }
                r.spin(300);
            }
            for a in held {
                rp.rfree(a).unwrap();
            }
            assert_eq!(
                rp.rread(false).unwrap(),
                None,
                "nothing beyond the last message"
            );
        })
    });
    let (ws, _) = wp.stats();
    let (rs, _) = rp.stats();
    assert_eq!((ws.written, rs.read), (n, n));
    assert_eq!(ws.bytes_written, rs.bytes_read);
    assert_eq!((ws.refused, rs.refused), (0, 0));
    close_pair(&wp, &rp);
}

#[test]
fn hundred_thousand_ordered_messages_with_checksums() {
    let _s = serial();
    stream(100_000, 16 << 10, Transfer::Push, Policy::NextFit, 1);
}

#[test]
fn every_policy_and_pull_mode_deliver_in_order() {
    let _s = serial();
    for (i, p) in POLICIES.into_iter().enumerate() {
        for t in [Transfer::Push, Transfer::Pull] {
            stream(4000, 8 << 10, t, p, 7 + i as u64);
        }
    }
}

/// The writer's allocator follows a reference model of its policy exactly: same
/// offsets, same free space, same fragmentation. Deferred policies (next/first fit)
/// see frees when an allocation fails; immediate ones (best/worst) at every rmalloc.
#[test]
fn allocation_matches_the_reference_model_for_every_policy() {
    let _s = serial();
    let width = 16 << 10;
    for policy in POLICIES {
        let (_w, c) = world(2);
        let (wp, rp) = pair(
            &c,
            0,
            1,
            spec(Role::Writer, width, Transfer::Push, policy),
            spec(Role::Reader, width, Transfer::Push, policy),
        );
        let immediate = matches!(policy, Policy::BestFit | Policy::WorstFit);
        let mut model = Rmalloc::new(width, UNIT, policy);
        let mut unsynced: Vec<usize> = Vec::new();
        let mut held: Vec<u64> = Vec::new();
        let mut r = Rng(99);
        let (mut fails, mut frag_seen) = (0, 0.0f64);
        for _ in 0..4000 {
            if r.below(5) < 3 {
                let len = 1 + r.below(1500);
                if immediate {
                    unsynced.drain(..).for_each(|o| {
                        model.free(o).unwrap();
                    });
                }
                let mut want = model.alloc(len);
                if want.is_none() && !immediate {
                    unsynced.drain(..).for_each(|o| {
                        model.free(o).unwrap();
                    });
                    want = model.alloc(len);
                }
                let got = wp.rmalloc(len, false).unwrap();
                assert_eq!(got.map(|a| (a & OFF_MASK) as usize), want, "{policy:?}");
                match got {
                    Some(a) => {
                        wp.rwrite(a).unwrap();
                        let (m, l) = rp.rread(false).unwrap().expect("delivered");
                        assert_eq!(l, len);
                        held.push(m);
                    }
                    None => fails += 1,
                }
            } else if !held.is_empty() {
                let a = held.swap_remove(r.below(held.len()));
                rp.rfree(a).unwrap();
                unsynced.push((a & OFF_MASK) as usize);
            }
            let (_, v) = wp.stats();
            assert_eq!(v.free_bytes, model.free_bytes(), "{policy:?}");
            assert_eq!(v.largest_free, model.largest_free(), "{policy:?}");
            assert!((v.fragmentation - model.fragmentation()).abs() < 1e-12);
            frag_seen = frag_seen.max(v.fragmentation);
        }
        assert!(fails > 0, "{policy:?}: the trace must fill the heap");
        assert!(
            frag_seen > 0.1,
            "{policy:?}: the trace must fragment the heap"
        );
        model.validate().unwrap();
        for a in held {
            rp.rfree(a).unwrap();
        }
        close_pair(&wp, &rp);
    }
}

#[test]
fn full_heap_blocks_the_writer_and_frees_recover_it() {
    let _s = serial();
    let (_w, c) = world(2);
    let width = 4096;
    let (wp, rp) = pair(
        &c,
        0,
        1,
        spec(Role::Writer, width, Transfer::Push, Policy::NextFit),
        spec(Role::Reader, width, Transfer::Push, Policy::NextFit),
    );
    let mut sent = Vec::new();
    while let Some(a) = wp.rmalloc(100, false).unwrap() {
        fill(wp.rmem(a).unwrap() as *mut u8, sent.len() as u64, 100);
        wp.rwrite(a).unwrap();
        sent.push(a);
    }
    assert_eq!(
        sent.len(),
        width / extent(100),
        "the heap holds exactly this many"
    );
    let (ws, v) = wp.stats();
    assert_eq!((v.free_bytes, v.allocations), (0, sent.len()));
    assert!(ws.rmalloc_waits >= 1);
    let mut got = Vec::new();
    while let Some((a, l)) = rp.rread(false).unwrap() {
        check(rp.rmem(a).unwrap() as *const u8, got.len() as u64, l);
        got.push(a);
    }
    assert_eq!(got.len(), sent.len());
    assert_eq!(
        wp.rmalloc(1, false).unwrap(),
        None,
        "read but not freed: still full"
    );
    // The writer blocks; the reader's frees (no message, no reader progress) free it.
    std::thread::scope(|s| {
        let h = s.spawn(|| wp.rmalloc(width, true).unwrap().unwrap());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!h.is_finished(), "rmalloc must wait while the heap is full");
        for a in got {
            rp.rfree(a).unwrap();
        }
        let big = h.join().unwrap();
        assert_eq!(big & OFF_MASK, 0, "the whole heap, coalesced");
        wp.rfree(big).unwrap();
    });
    // The notice ring caps messages in flight: 0-byte messages in a wide heap.
    close_pair(&wp, &rp);
    let (wp, rp) = pair(
        &c,
        0,
        1,
        spec(Role::Writer, 256 << 10, Transfer::Push, Policy::NextFit),
        spec(Role::Reader, 256 << 10, Transfer::Push, Policy::NextFit),
    );
    let mut n = 0;
    while let Some(a) = wp.rmalloc(0, false).unwrap() {
        wp.rwrite(a).unwrap();
        n += 1;
    }
    assert_eq!(n, rpipe::pipe::SLOTS_MAX);
    let (_, v) = wp.stats();
    assert!(v.free_bytes > 0, "capped by slots, not by space");
    for i in 0..n {
        let (a, l) = rp
            .rread(false)
            .unwrap()
            .unwrap_or_else(|| panic!("message {i}"));
        assert_eq!(l, 0);
        rp.rfree(a).unwrap();
    }
    assert!(wp.rmalloc(0, false).unwrap().is_some());
    close_pair(&wp, &rp);
}

#[test]
fn full_duplex_both_ends_write_and_read() {
    let _s = serial();
    let (_w, c) = world(2);
    let s = spec(Role::Both, 8 << 10, Transfer::Push, Policy::NextFit);
    let (p0, p1) = pair(&c, 0, 1, s, s);
    let n = 5000u64;
    within(120, "full duplex", || {
        std::thread::scope(|sc| {
            for (me, p) in [(0u64, &p0), (1u64, &p1)] {
                sc.spawn(move || {
                    let mut r = Rng(3 + me);
                    let (mut sent, mut got) = (0u64, 0u64);
                    while sent < n || got < n {
                        if sent < n {
                            let len = size(&mut r, 8 << 10);
                            if let Some(a) = p.rmalloc(len, false).unwrap() {
                                fill(p.rmem(a).unwrap() as *mut u8, sent * 2 + me, len);
                                p.rwrite(a).unwrap();
                                sent += 1;
                            }
                        }
                        if let Some((a, l)) = p.rread(false).unwrap() {
                            check(p.rmem(a).unwrap() as *const u8, got * 2 + (1 - me), l);
                            p.rfree(a).unwrap();
                            got += 1;
                        }
                    }
                });
            }
        })
    });
    close_pair(&p0, &p1);
}

/// Four nodes, a full-duplex pipe between every two, every node writing to all.
#[test]
fn all_to_all_pipes() {
    let _s = serial();
    let n = 4;
    let (_w, c) = world(n);
    let k = 500u64;
    let s = spec(Role::Both, 4 << 10, Transfer::Push, Policy::NextFit);
    within(120, "all to all", || {
        std::thread::scope(|sc| {
            for me in 0..n {
                let c = &c;
                sc.spawn(move || {
                    // Opens in increasing peer order: every node walks the pairs in
                    // one global order, so no wait cycle can form. (Closes do not
                    // wait for the peer.)
                    let pipes: Vec<(usize, Arc<Pipe>)> = (0..n)
                        .filter(|&p| p != me)
                        .map(|p| (p, rpipe::open(&c[me].inner, p as i64, s).unwrap()))
                        .collect();
                    let mut r = Rng(11 + me as u64);
                    let mut sent = vec![0u64; pipes.len()];
                    let mut got = vec![0u64; pipes.len()];
                    while sent.iter().chain(&got).any(|&x| x < k) {
                        let i = r.below(pipes.len());
                        let (peer, p) = &pipes[i];
                        if sent[i] < k {
                            let len = 8 + r.below(600);
                            if let Some(a) = p.rmalloc(len, false).unwrap() {
                                let tag = (me * 100 + peer) as u64 * 1_000_000 + sent[i];
                                fill(p.rmem(a).unwrap() as *mut u8, tag, len);
                                p.rwrite(a).unwrap();
                                sent[i] += 1;
                            }
                        }
                        for (j, (peer, p)) in pipes.iter().enumerate() {
                            if got[j] == k {
                                continue; // the peer may have closed already
                            }
                            if let Some((a, l)) = p.rread(false).unwrap() {
                                let tag = (peer * 100 + me) as u64 * 1_000_000 + got[j];
                                check(p.rmem(a).unwrap() as *const u8, tag, l);
                                p.rfree(a).unwrap();
                                got[j] += 1;
                            }
                        }
                    }
                    for (_, p) in pipes {
                        p.close().unwrap();
                    }
                });
            }
        })
    });
}

/// Closes do not wait for the peer: one thread closes both ends of two pipes in
/// "crossed" order (each rank its writing pipe first), and each end's library heap
/// comes back once both ends have closed (at the next open or close).
#[test]
fn closes_in_any_order_and_give_the_heap_back() {
    let _s = serial();
    let (_w, c) = world(2);
    let in_use = |i: usize| c[i].inner.heap.in_use();
    let before = (in_use(0), in_use(1));
    let s = |r| spec(r, 64 << 10, Transfer::Push, Policy::NextFit);
    let (a_w, a_r) = pair(&c, 0, 1, s(Role::Writer), s(Role::Reader));
    let one_pipe = (in_use(0), in_use(1));
    assert!(one_pipe.0 > before.0 && one_pipe.1 > before.1);
    let (b_r, b_w) = pair(&c, 0, 1, s(Role::Reader), s(Role::Writer));
    let m = a_w.rmalloc(100, true).unwrap().unwrap();
    fill(a_w.rmem(m).unwrap() as *mut u8, 3, 100);
    a_w.rwrite(m).unwrap();
    within(20, "crossed closes", || {
        // Rank 0 closes its writing pipe (a), rank 1 its writing pipe (b), then the
        // others: on one thread, so a close that waited for its peer would hang.
        a_w.close().unwrap();
        b_w.close().unwrap();
        assert!(
            in_use(0) > before.0,
            "rank 1 has not closed a yet: a's blocks kept"
        );
        let (got, l) = a_r.rread(true).unwrap().unwrap();
        check(a_r.rmem(got).unwrap() as *const u8, 3, l);
        a_r.rfree(got).unwrap();
        assert_eq!(st(a_r.rread(true)), Status::State, "the writer closed");
        a_r.close().unwrap();
        b_r.close().unwrap();
    });
    // Each rank's last close saw the other's BYEs only if they had arrived; the
    // next open on each rank sweeps them: then only the new pipe holds heap.
    let (x, y) = pair(&c, 0, 1, s(Role::Writer), s(Role::Reader));
    assert_eq!(
        (in_use(0), in_use(1)),
        one_pipe,
        "every closed pipe's blocks came back"
    );
    close_pair(&x, &y);
}

fn st<T>(r: firehose::Result<T>) -> Status {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.status,
    }
}

#[test]
fn bad_requests_get_clear_errors_and_the_pipe_keeps_working() {
    let _s = serial();
    let (_w, c) = world(2);
    let width = 4096;
    // Opening: bad arguments fail on both ends (the handshake compares them).
    assert_eq!(
        st(rpipe::open(
            &c[0].inner,
            0,
            spec(Role::Writer, width, Transfer::Push, Policy::NextFit)
        )),
        Status::InvalidArg,
        "a pipe to oneself"
    );
    assert_eq!(
        st(rpipe::open(
            &c[0].inner,
            5,
            spec(Role::Writer, width, Transfer::Push, Policy::NextFit)
        )),
        Status::BadRank
    );
    for (a, b) in [
        (
            spec(Role::Writer, width, Transfer::Push, Policy::NextFit),
            spec(Role::Reader, 2 * width, Transfer::Push, Policy::NextFit),
        ),
        (
            spec(Role::Writer, width, Transfer::Push, Policy::NextFit),
            spec(Role::Writer, width, Transfer::Push, Policy::NextFit),
        ),
        (
            spec(Role::Writer, 10, Transfer::Push, Policy::NextFit),
            spec(Role::Reader, 10, Transfer::Push, Policy::NextFit),
        ),
        (
            spec(Role::Writer, width, Transfer::Pull, Policy::NextFit),
            spec(Role::Reader, width, Transfer::Push, Policy::NextFit),
        ),
    ] {
        std::thread::scope(|s| {
            let h = s.spawn(|| st(rpipe::open(&c[1].inner, 0, b)));
            assert_eq!(
                st(rpipe::open(&c[0].inner, 1, a)),
                Status::InvalidArg,
                "{a:?} vs {b:?}"
            );
            assert_eq!(h.join().unwrap(), Status::InvalidArg, "{a:?} vs {b:?}");
        });
    }
    let (wp, rp) = pair(
        &c,
        0,
        1,
        spec(Role::Writer, width, Transfer::Push, Policy::BestFit),
        spec(Role::Reader, width, Transfer::Push, Policy::BestFit),
    );
    assert_eq!(
        st(wp.rmalloc(width + 1, true)),
        Status::InvalidArg,
        "never fits"
    );
    assert_eq!(st(rp.rmalloc(8, true)), Status::State, "reader-only end");
    assert_eq!(st(wp.rread(false)), Status::State, "writer-only end");
    assert_eq!(st(wp.rwrite(12345)), Status::InvalidArg, "not from rmalloc");
    assert_eq!(st(wp.rwrite(0)), Status::InvalidArg);
    let a = wp.rmalloc(64, true).unwrap().unwrap();
    assert_eq!(
        st(wp.rwrite(a + 64)),
        Status::InvalidArg,
        "not the start of an allocation"
    );
    assert_eq!(
        st(rp.rmem(a)),
        Status::InvalidArg,
        "the reader has not read it"
    );
    fill(wp.rmem(a).unwrap() as *mut u8, 5, 64);
    wp.rwrite(a).unwrap();
    assert_eq!(st(wp.rwrite(a)), Status::InvalidArg, "written twice");
    assert_eq!(st(wp.rmem(a)), Status::InvalidArg, "rmem after rwrite");
    assert_eq!(
        st(wp.rfree(a)),
        Status::InvalidArg,
        "the reader frees written messages"
    );
    let (m, l) = rp.rread(true).unwrap().unwrap();
    assert_eq!(m, a, "both ends name a message alike");
    check(rp.rmem(m).unwrap() as *const u8, 5, l);
    assert_eq!(
        st(rp.rwrite(m)),
        Status::InvalidArg,
        "a received message is not rwritten"
    );
    rp.rfree(m).unwrap();
    assert_eq!(st(rp.rfree(m)), Status::InvalidArg, "double rfree");
    assert_eq!(
        st(rp.rmem(m)),
        Status::InvalidArg,
        "rmem of a freed message"
    );
    // A writer may drop an allocation it never wrote.
    let b = wp.rmalloc(10, true).unwrap().unwrap();
    wp.rfree(b).unwrap();
    assert_eq!(st(wp.rmem(b)), Status::InvalidArg);
    // Still works.
    let a = wp.rmalloc(width, true).unwrap().unwrap();
    fill(wp.rmem(a).unwrap() as *mut u8, 6, width);
    wp.rwrite(a).unwrap();
    let (m, l) = rp.rread(true).unwrap().unwrap();
    check(rp.rmem(m).unwrap() as *const u8, 6, l);
    // The writer closes; the reader still gets what was sent, then a clear error.
    std::thread::scope(|s| {
        let h = s.spawn(|| wp.close());
        assert_eq!(
            st(rp.rread(true)),
            Status::State,
            "peer closed, nothing left"
        );
        rp.close().unwrap();
        h.join().unwrap().unwrap();
    });
    assert_eq!(st(wp.rmalloc(8, true)), Status::State, "use after close");
    assert_eq!(st(rp.rread(false)), Status::State);
    assert_eq!(st(rp.close()), Status::State, "closed twice");
    let (rs, _) = rp.stats();
    assert_eq!(rs.discarded, 1, "the message held at close is counted");
}

/// Several threads write into one pipe while two threads read from it: every message
/// arrives exactly once and intact.
#[test]
fn threads_share_a_pipe() {
    let _s = serial();
    let (_w, c) = world(2);
    let width = 8 << 10;
    let (wp, rp) = pair(
        &c,
        0,
        1,
        spec(Role::Writer, width, Transfer::Push, Policy::FirstFit),
        spec(Role::Reader, width, Transfer::Push, Policy::FirstFit),
    );
    let (writers, per) = (3u64, 3000u64);
    let seen = std::sync::Mutex::new(vec![Vec::new(); writers as usize]);
    let total = std::sync::atomic::AtomicU64::new(0);
    within(120, "threads share a pipe", || {
        std::thread::scope(|s| {
            for t in 0..writers {
                let wp = &wp;
                s.spawn(move || {
                    let mut r = Rng(40 + t);
                    for k in 0..per {
                        let len = 8 + r.below(2000);
                        let a = wp.rmalloc(len, true).unwrap().unwrap();
                        fill(wp.rmem(a).unwrap() as *mut u8, t << 32 | k, len);
                        wp.rwrite(a).unwrap();
                    }
                });
            }
            for _ in 0..2 {
                let (rp, seen, total) = (&rp, &seen, &total);
                s.spawn(move || {
                    while total.load(Ordering::SeqCst) < writers * per {
                        let Some((a, len)) = rp.rread(false).unwrap() else {
                            std::thread::yield_now();
                            continue;
                        };
                        // SAFETY: a message just read, len >= 8 bytes.
                        let b = unsafe {
                            std::slice::from_raw_parts(rp.rmem(a).unwrap() as *const u8, len)
                        };
                        let tag = u64::from_le_bytes(b[..8].try_into().unwrap());
                        check(b.as_ptr(), tag, len);
                        seen.lock().unwrap()[(tag >> 32) as usize].push(tag & 0xffff_ffff);
                        rp.rfree(a).unwrap();
                        total.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        })
    });
    for (t, mut v) in seen.into_inner().unwrap().into_iter().enumerate() {
        v.sort_unstable();
        assert_eq!(
            v,
            (0..per).collect::<Vec<_>>(),
            "writer {t}: lost or duplicated"
        );
    }
    close_pair(&wp, &rp);
}
