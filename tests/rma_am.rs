//! One-sided RMA, memory registration and active messages on the sim conduit (N
//! virtual nodes in this process, driven from one thread: deterministic). Checks that
//! put/get reach heap, registered and plain memory (firehose pins on demand) and refuse
//! unmapped targets, bad ranks and sizes; that unregistering invalidates every holder;
//! that nb handles, AM credits, long AMs, finalize and garbage frames behave.
#![allow(clippy::needless_range_loop)]

mod common;

use common::{sim_world, Completion};
use firehose::api::rma::{HANDLE_NULL, NBI_ALL};
use firehose::api::settings::Settings;
use firehose::api::Context;
use firehose::conduit::sim::SimWorld;
use firehose::Status;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn world(n: usize, tweak: impl Fn(&mut Settings)) -> (Arc<SimWorld>, Vec<Context>) {
    sim_world(n, 1 << 20, Completion::InOrder, tweak)
}

#[test]
fn ring_put_get_on_heap_and_registered_memory() {
    let (_w, c) = world(4, |_| {});
    let n = c.len();
    let heaps: Vec<usize> = c.iter().map(|x| x.malloc(4096).unwrap()).collect();
    let mut users: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 4096]).collect();
    for (i, u) in users.iter_mut().enumerate() {
        c[i].mem_register(u.as_mut_ptr() as usize, u.len()).unwrap();
    }
    for i in 0..n {
        let right = (i + 1) % n;
        let src: Vec<u8> = (0..1000).map(|k| (k * 3 + i) as u8).collect();
        c[i].put(
            right as i64,
            heaps[right] + 8,
            src.as_ptr() as usize,
            src.len(),
        )
        .unwrap();
        let uaddr = users[right].as_ptr() as usize;
        c[i].put(right as i64, uaddr + 16, src.as_ptr() as usize, src.len())
            .unwrap();
        let mut back = vec![0u8; 1000];
        c[i].get(back.as_mut_ptr() as usize, right as i64, uaddr + 16, 1000)
            .unwrap();
        assert_eq!(back, src);
    }
    for i in 0..n {
        let left = (i + n - 1) % n;
        // SAFETY: heaps[i] is a live 4096-byte allocation of node i's heap.
        let h = unsafe { std::slice::from_raw_parts((heaps[i] + 8) as *const u8, 1000) };
        assert!(h
            .iter()
            .enumerate()
            .all(|(k, &b)| b == (k * 3 + left) as u8));
        assert!(users[i][16..1016]
            .iter()
            .enumerate()
            .all(|(k, &b)| b == (k * 3 + left) as u8));
        assert_eq!(users[i][15], 0);
    }
    // One move per (initiator, target) pair (answered "registered region": it acts
    // as prepinned and costs no firehose), then one-sided hits.
    let f = c[0].fh_stats();
    assert_eq!(f.misses, 1, "{:?}", f);
    assert_eq!(f.firehoses_used, 0, "{:?}", f);
    assert!(c[0].stats.snapshot().remote_cache_hits >= 1);
}

fn unmapped(len: usize) -> usize {
    // SAFETY: plain anonymous mmap/munmap of a fresh range; nothing else uses it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(libc::munmap(p, len), 0);
        p as usize
    }
}

#[test]
fn any_mapped_memory_works_and_unmapped_is_refused_by_the_target() {
    let (w, c) = world(2, |_| {});
    // 256 bytes inside one page (page mode: the put below must be one unit).
    let backing = vec![7u8; 3 * 4096];
    let off = 4096 - backing.as_ptr() as usize % 4096;
    let victim = &backing[off..off + 256];
    let src = [1u8; 16];
    // Plain (unregistered) memory of the target: firehose pins it on demand.
    c[0].put(1, victim.as_ptr() as usize + 8, src.as_ptr() as usize, 16)
        .unwrap();
    assert_eq!(&victim[8..24], &[1u8; 16]);
    assert!(victim[..8].iter().chain(&victim[24..]).all(|&b| b == 7));
    let f = c[0].fh_stats();
    assert_eq!((f.misses, f.firehoses_used), (1, 1), "{:?}", f);
    assert!(
        w.registrations(1)
            .iter()
            .any(|&(s, e)| s <= victim.as_ptr() as usize && e >= victim.as_ptr() as usize + 24),
        "the target really registered the unit"
    );
    // Unmapped: the target refuses; nothing faults; the job continues.
    let hole = unmapped(8192);
    let e = c[0].put(1, hole, src.as_ptr() as usize, 16).unwrap_err();
    assert_eq!(e.status, Status::Access, "{}", e);
    assert!(e.msg.contains("rank 1 refused"), "{}", e.msg);
    let e = c[0].put(1, 0x1000, src.as_ptr() as usize, 16).unwrap_err();
    assert_eq!(e.status, Status::Access);
    // Own memory: copied by the kernel, unmapped refused.
    c[0].put(0, victim.as_ptr() as usize, src.as_ptr() as usize, 4)
        .unwrap();
    assert_eq!(&victim[..4], &[1u8; 4]);
    assert_eq!(
        c[0].put(0, hole, src.as_ptr() as usize, 16)
            .unwrap_err()
            .status,
        Status::Access
    );
    // The target keeps working.
    let h = c[1].malloc(64).unwrap();
    c[0].put(1, h, src.as_ptr() as usize, 16).unwrap();
}

#[test]
fn unregister_invalidates_every_holder_before_detaching() {
    let (w, c) = world(3, |_| {});
    let mut buf = vec![0u8; 8192];
    let a = buf.as_mut_ptr() as usize;
    c[2].mem_register(a, buf.len()).unwrap();
    let src = [9u8; 64];
    c[0].put(2, a, src.as_ptr() as usize, 64).unwrap();
    c[1].put(2, a + 100, src.as_ptr() as usize, 64).unwrap();
    c[2].mem_unregister(a, buf.len()).unwrap();
    assert_eq!(c[2].stats.snapshot().invalidations_sent, 2);
    assert_eq!(c[0].stats.snapshot().invalidations_handled, 1);
    assert!(
        !w.registrations(2)
            .iter()
            .any(|&(s, e)| s < a + 8192 && e > a),
        "detached"
    );
    // Both holders forgot it: a new access goes through firehose (a move).
    let before = c[0].fh_stats().misses;
    c[0].put(2, a, src.as_ptr() as usize, 8).unwrap();
    assert_eq!(c[0].fh_stats().misses, before + 1);
    assert_eq!(
        c[2].mem_unregister(a, buf.len()).unwrap_err().status,
        Status::NotPinned
    );
    // fh_mem_invalidate drops the firehose pins, everywhere they are held.
    assert!(c[2].mem_invalidate(a + 10, 1).unwrap() >= 1);
    assert_eq!(c[0].fh_stats().firehoses_used, 0);
    assert!(
        !w.registrations(2)
            .iter()
            .any(|&(s, e)| s < a + 8192 && e > a),
        "unpinned"
    );
    // Registering memory peers hold firehoses on replaces those first.
    c[1].put(2, a, src.as_ptr() as usize, 8).unwrap();
    assert_eq!(c[1].fh_stats().firehoses_used, 1);
    c[2].mem_register(a, 4096).unwrap();
    assert_eq!(c[1].fh_stats().firehoses_used, 0);
    c[0].put(2, a, src.as_ptr() as usize, 8).unwrap();
    assert_eq!(buf[..8], [9u8; 8]);
}

static RELEASED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A handler that holds its node's progress until the test says so.
unsafe extern "C" fn hold_progress(
    _t: *mut firehose::api::am::Token,
    _b: *mut c_void,
    _n: usize,
    _a: *const u64,
    _na: usize,
    _u: *mut c_void,
) {
    while !RELEASED.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Two threads invalidate overlapping ranges: the second returns only after the
/// first one's holder confirmed. (The first hands the holder's units back to itself
/// while it waits; the second once took them for unheld, unpinned them and returned
/// while the holder could still access the memory.)
#[test]
fn overlapping_invalidations_wait_for_the_holders_of_the_first() {
    let (_w, c) = world(3, |_| {});
    let mut buf = vec![0u8; 8192];
    let a = buf.as_mut_ptr() as usize;
    let src = [5u8; 64];
    c[0].put(2, a, src.as_ptr() as usize, 64).unwrap();
    assert_eq!(c[0].fh_stats().firehoses_used, 1);
    // Rank 0 will not answer the invalidation until this handler returns.
    c[0].am_register(220, hold_progress, 0).unwrap();
    c[1].am_request(0, firehose::api::wire::Category::Short, 220, &[], &[], None)
        .unwrap();
    std::thread::scope(|s| {
        let first = s.spawn(|| c[2].mem_invalidate(a, 4096).unwrap());
        while c[2].stats.snapshot().invalidations_sent == 0 {
            std::thread::yield_now();
        }
        let second = s.spawn(|| {
            let n = c[2].mem_invalidate(a + 10, 1).unwrap();
            assert!(
                RELEASED.load(Ordering::Acquire),
                "the second invalidation returned before the holder confirmed the first"
            );
            n
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        RELEASED.store(true, Ordering::Release);
        assert!(first.join().unwrap() >= 1);
        second.join().unwrap();
    });
    assert_eq!(c[0].fh_stats().firehoses_used, 0);
    c[0].put(2, a, src.as_ptr() as usize, 8).unwrap();
    assert_eq!(buf[..8], [5u8; 8]);
}

#[test]
fn registration_validates_its_input() {
    let (_w, c) = world(1, |_| {});
    let buf = vec![0u8; 8192];
    let a = buf.as_ptr() as usize;
    assert_eq!(
        c[0].mem_register(0, 10).unwrap_err().status,
        Status::InvalidArg
    );
    assert_eq!(
        c[0].mem_register(a, 0).unwrap_err().status,
        Status::InvalidArg
    );
    assert_eq!(
        c[0].mem_register(usize::MAX - 10, 100).unwrap_err().status,
        Status::InvalidArg
    );
    assert_eq!(
        c[0].mem_register(0x1000, 4096).unwrap_err().status,
        Status::Access
    );
    c[0].mem_register(a, 4096).unwrap();
    assert_eq!(
        c[0].mem_register(a + 100, 10).unwrap_err().status,
        Status::InvalidArg
    );
    let (hb, _) = c[0].conduit.heap();
    assert_eq!(
        c[0].mem_register(hb, 10).unwrap_err().status,
        Status::InvalidArg
    );
    assert_eq!(
        c[0].mem_unregister(a, 100).unwrap_err().status,
        Status::NotPinned
    );
    c[0].mem_unregister(a, 4096).unwrap();
}

#[test]
fn nb_handles_complete_in_any_order_and_are_retired() {
    let (_w, c) = world(3, |_| {});
    let tgt: Vec<usize> = c.iter().map(|x| x.malloc(64 * 1024).unwrap()).collect();
    let srcs: Vec<Vec<u8>> = (0..64).map(|k| vec![k as u8 + 1; 256]).collect();
    let mut hs = Vec::new();
    for (k, s) in srcs.iter().enumerate() {
        let r = 1 + k % 2;
        hs.push((
            r,
            k,
            c[0].put_nb(r as i64, tgt[r] + k * 256, s.as_ptr() as usize, 256)
                .unwrap(),
        ));
    }
    // Nothing moved before sync (the sim NIC moves data only at flush).
    // SAFETY: tgt[1] is a live allocation of 64 KiB.
    assert_eq!(unsafe { *(tgt[1] as *const u8) }, 0);
    hs.reverse();
    let mut raw: Vec<u64> = hs.iter().map(|h| h.2).collect();
    c[0].wait(raw[0]).unwrap();
    assert_eq!(
        c[0].wait(raw[0]).unwrap_err().status,
        Status::InvalidArg,
        "retired handle refused"
    );
    raw[0] = HANDLE_NULL;
    c[0].wait_some(&mut raw).unwrap();
    c[0].wait_all(&mut raw).unwrap();
    assert!(raw.iter().all(|&h| h == HANDLE_NULL));
    assert_eq!(c[0].outstanding_handles(), 0);
    for (r, k, _) in hs {
        // SAFETY: inside the live allocation.
        let got = unsafe { std::slice::from_raw_parts((tgt[r] + k * 256) as *const u8, 256) };
        assert!(got.iter().all(|&b| b == k as u8 + 1));
    }
    assert_eq!(
        c[0].put_nb(1, tgt[1], srcs[0].as_ptr() as usize, 0)
            .unwrap(),
        HANDLE_NULL
    );
    assert_eq!(
        c[0].test(0xdead_0000_0001).unwrap_err().status,
        Status::InvalidArg
    );
    // nbi
    let mut dst = vec![0u8; 256];
    c[0].put_nbi(2, tgt[2], srcs[5].as_ptr() as usize, 256)
        .unwrap();
    c[0].get_nbi(dst.as_mut_ptr() as usize, 1, tgt[1] + 2 * 256, 256)
        .unwrap();
    c[0].wait_nbi(NBI_ALL).unwrap();
    assert!(
        dst.iter().all(|&b| b == 3),
        "k = 2 wrote 3s at offset 512 of rank 1"
    );
    assert_eq!(c[0].wait_nbi(0).unwrap_err().status, Status::InvalidArg);
    assert_eq!(c[0].wait_nbi(8).unwrap_err().status, Status::InvalidArg);
}

#[test]
fn bad_ranks_and_sizes_are_refused() {
    let (_w, c) = world(2, |_| {});
    let b = [0u8; 8];
    let p = b.as_ptr() as usize;
    for r in [-1i64, 2, i64::MAX] {
        assert_eq!(c[0].put(r, p, p, 8).unwrap_err().status, Status::BadRank);
        assert_eq!(c[0].get_nb(p, r, p, 8).unwrap_err().status, Status::BadRank);
    }
    assert_eq!(c[0].put(1, 0, p, 8).unwrap_err().status, Status::InvalidArg);
    assert_eq!(c[0].put(1, p, 0, 8).unwrap_err().status, Status::InvalidArg);
    assert_eq!(
        c[0].put(1, p, p, usize::MAX).unwrap_err().status,
        Status::InvalidArg
    );
    c[0].put(1, 0, 0, 0).unwrap();
}

static SEEN: AtomicU64 = AtomicU64::new(0);
static SUM: AtomicU64 = AtomicU64::new(0);
static REPLIES: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn on_medium(
    tok: *mut firehose::api::am::Token,
    buf: *mut c_void,
    n: usize,
    args: *const u64,
    nargs: usize,
    _u: *mut c_void,
) {
    // SAFETY: the dispatcher passes a valid payload and args for this call.
    let (data, args) = unsafe {
        (
            std::slice::from_raw_parts(buf as *const u8, n),
            std::slice::from_raw_parts(args, nargs),
        )
    };
    let sum: u64 = data.iter().map(|&b| b as u64).sum();
    assert_eq!(sum, args[0], "payload checksum");
    SEEN.fetch_add(1, Ordering::Relaxed);
    SUM.fetch_add(sum, Ordering::Relaxed);
    // SAFETY: tok is the live token of this handler call.
    let t = unsafe { firehose::api::am::Token::from_ptr(tok) }.unwrap();
    t.ctx()
        .am_reply(
            t,
            firehose::api::wire::Category::Short,
            201,
            &[n as u64],
            &[],
            None,
        )
        .unwrap();
    assert_eq!(
        t.ctx()
            .am_reply(t, firehose::api::wire::Category::Short, 201, &[], &[], None)
            .unwrap_err()
            .status,
        Status::State,
        "second reply refused"
    );
    assert_eq!(
        t.ctx().put(0, 0, 0, 1).unwrap_err().status,
        Status::State,
        "blocking call refused in a handler"
    );
}

unsafe extern "C" fn on_reply(
    _t: *mut firehose::api::am::Token,
    _b: *mut c_void,
    _n: usize,
    _a: *const u64,
    _na: usize,
    _u: *mut c_void,
) {
    REPLIES.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn am_storm_with_tiny_credits_loses_nothing() {
    let (w, c) = world(4, |cfg| cfg.am_credits = 2);
    for x in &c {
        x.am_register(200, on_medium, 0).unwrap();
        x.am_register(201, on_reply, 0).unwrap();
    }
    let mut expect_sum = 0u64;
    let per = 300;
    for k in 0..per {
        for (i, x) in c.iter().enumerate() {
            let dest = (i + k) % c.len();
            let len = (k * 37 + i * 11) % 2000;
            let payload: Vec<u8> = (0..len).map(|j| (j * 7 + k) as u8).collect();
            let s: u64 = payload.iter().map(|&b| b as u64).sum();
            expect_sum += s;
            x.am_request(
                dest,
                firehose::api::wire::Category::Medium,
                200,
                &[s],
                &payload,
                None,
            )
            .unwrap();
        }
    }
    let total = (per * c.len()) as u64;
    let mut spins = 0;
    while REPLIES.load(Ordering::Relaxed) < total {
        for x in &c {
            x.poll().unwrap();
        }
        spins += 1;
        assert!(spins < 100_000, "replies never arrived");
    }
    assert_eq!(SEEN.load(Ordering::Relaxed), total);
    assert_eq!(REPLIES.load(Ordering::Relaxed), total);
    assert_eq!(SUM.load(Ordering::Relaxed), expect_sum);
    let stalls: u64 = c.iter().map(|x| x.stats.snapshot().credit_stalls).sum();
    assert!(
        stalls > 0,
        "with 2 credits the senders must have been throttled"
    );
    assert!(w.frames_sent.load(Ordering::Relaxed) >= 2 * total);
    // An AM to an index nobody registered is refused and reported to the sender.
    c[0].am_request(1, firehose::api::wire::Category::Short, 250, &[], &[], None)
        .unwrap();
    c[1].poll().unwrap();
    let e = c[0].poll().unwrap_err();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.msg.contains("rank 1 refused"), "{}", e.msg);
    c[0].poll().unwrap();
}

static LONG_OK: AtomicU64 = AtomicU64::new(0);
unsafe extern "C" fn on_long(
    _t: *mut firehose::api::am::Token,
    buf: *mut c_void,
    n: usize,
    args: *const u64,
    _na: usize,
    _u: *mut c_void,
) {
    // SAFETY: as in on_medium.
    let (data, want) = unsafe { (std::slice::from_raw_parts(buf as *const u8, n), *args) };
    assert_eq!(
        buf as u64,
        unsafe { *args.add(1) },
        "buf is the destination"
    );
    assert_eq!(
        data.iter().map(|&b| b as u64).sum::<u64>(),
        want,
        "payload in place before the handler"
    );
    LONG_OK.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn long_payloads_land_before_the_handler_and_bad_destinations_are_refused() {
    let (_w, c) = world(2, |_| {});
    for x in &c {
        x.am_register(210, on_long, 0).unwrap();
    }
    let dst = c[1].malloc(1 << 16).unwrap();
    let payload: Vec<u8> = (0..50_000).map(|j| (j % 251) as u8).collect();
    let s: u64 = payload.iter().map(|&b| b as u64).sum();
    let lo = firehose::api::am::LongOut {
        dst: dst + 64,
        data: &payload,
    };
    c[0].am_request(
        1,
        firehose::api::wire::Category::Long,
        210,
        &[s, (dst + 64) as u64],
        &[],
        Some(lo),
    )
    .unwrap();
    c[1].poll().unwrap();
    assert_eq!(LONG_OK.load(Ordering::Relaxed), 1);
    // Destination not registered at the target: refused there, reported here.
    let bogus = [0u8; 100];
    let lo = firehose::api::am::LongOut {
        dst: bogus.as_ptr() as usize,
        data: &payload[..100],
    };
    c[0].am_request(
        1,
        firehose::api::wire::Category::Long,
        210,
        &[0, 0],
        &[],
        Some(lo),
    )
    .unwrap();
    c[1].poll().unwrap();
    assert_eq!(c[0].poll().unwrap_err().status, Status::Access);
    assert!(bogus.iter().all(|&b| b == 0));
    assert_eq!(LONG_OK.load(Ordering::Relaxed), 1);
}

#[test]
fn handler_indices_and_limits_are_checked() {
    let (_w, c) = world(1, |_| {});
    assert_eq!(
        c[0].am_register(5, on_reply, 0).unwrap_err().status,
        Status::InvalidArg
    );
    assert_eq!(
        c[0].am_register(256, on_reply, 0).unwrap_err().status,
        Status::InvalidArg
    );
    c[0].am_register(128, on_reply, 0).unwrap();
    let big = vec![0u8; c[0].am_max_medium() + 1];
    assert_eq!(
        c[0].am_request(
            0,
            firehose::api::wire::Category::Medium,
            128,
            &[],
            &big,
            None
        )
        .unwrap_err()
        .status,
        Status::InvalidArg
    );
    let args = [0u64; 17];
    assert_eq!(
        c[0].am_request(
            0,
            firehose::api::wire::Category::Short,
            128,
            &args,
            &[],
            None
        )
        .unwrap_err()
        .status,
        Status::InvalidArg
    );
}

#[test]
fn finalized_contexts_refuse_calls() {
    let (_w, c) = world(2, |_| {});
    c[0].finalize().unwrap();
    assert_eq!(c[0].finalize().unwrap_err().status, Status::State);
    assert_eq!(c[0].malloc(8).unwrap_err().status, Status::State);
    assert_eq!(c[0].poll().unwrap_err().status, Status::State);
    assert_eq!(c[0].put(1, 1, 1, 1).unwrap_err().status, Status::State);
    c[1].finalize().unwrap();
}

#[test]
fn the_decoder_survives_garbage_frames() {
    let (_w, c) = world(2, |_| {});
    // Frames straight to the conduit, bypassing the encoder.
    for junk in [
        vec![],
        vec![0xA1],
        vec![0xA1; 19],
        vec![0xA1; 64],
        vec![0u8; 300],
    ] {
        c[0].conduit.am_send(1, junk, None).unwrap();
    }
    c[1].poll().unwrap();
    assert_eq!(c[1].stats.snapshot().am_malformed, 5);
    let h = c[1].malloc(8).unwrap();
    c[0].put(1, h, [1u8; 8].as_ptr() as usize, 8).unwrap();
}
