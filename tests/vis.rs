//! Non-contiguous put and get (vector, indexed, strided; blocking, explicit and
//! implicit handles) on the sim conduit, against a byte model: random shapes of 1
//! to 4 levels on both sides, to heap, registered and plain memory (firehose pins
//! it on demand), also with a tiny M so a section's runs cannot all be pinned at
//! once. Every byte of the target area is checked, inside and outside the section.

mod common;

use common::{sim_world, Completion, Rng};
use firehose::api::rma::settings::VisAlgo;
use firehose::api::rma::shape::{Side, Strided};
use firehose::api::rma::vis::Completion as How;
use firehose::api::rma::NBI_ALL;
use firehose::api::settings::Settings;
use firehose::api::Context;
use firehose::firehose::settings::FhMode;
use proptest::prelude::*;

const AREA: usize = 32 << 10;

/// A random section of at most `AREA` bytes of extent: (strides, counts).
fn section(r: &mut Rng, levels: usize) -> (Vec<usize>, Vec<usize>) {
    loop {
        let mut count = vec![1 + r.below(48)];
        let mut strides = vec![];
        let mut extent = count[0];
        for _ in 0..levels {
            let n = 1 + r.below(5);
            let s = extent + [0, 8, 24][r.below(3)];
            extent += (n - 1) * s;
            strides.push(s);
            count.push(n);
        }
        if extent < AREA {
            return (strides, count);
        }
    }
}

fn extent(strides: &[usize], count: &[usize]) -> usize {
    strides
        .iter()
        .zip(&count[1..])
        .map(|(s, n)| (n - 1) * s)
        .sum::<usize>()
        + count[0]
}

/// The source side in the form asked for, with the destination's total.
enum Form {
    Vector,
    Indexed,
    Strided,
}

/// Two sides (dst within `dbase`'s area, src within `sbase`'s) of equal totals.
fn sides(r: &mut Rng, form: &Form, dbase: usize, sbase: usize) -> (Side, Side) {
    let levels = 1 + r.below(4).min(3);
    let (ds, dc) = section(r, levels);
    let doff = r.below(AREA - extent(&ds, &dc));
    let dst = Strided {
        base: dbase + doff,
        strides: &ds,
        count: &dc,
    };
    dst.check("dst").unwrap();
    let d = Side::strided(&dst, "dst").unwrap();
    let total = d.total;
    let s = match form {
        Form::Strided => {
            // Same counts, other strides.
            let mut ss: Vec<usize> = ds.iter().map(|&x| x + 8 * r.below(3)).collect();
            if extent(&ss, &dc) >= AREA {
                ss = ds.clone(); // wider strides would not fit the area
            }
            let soff = r.below(AREA - extent(&ss, &dc));
            let src = Strided {
                base: sbase + soff,
                strides: &ss,
                count: &dc,
            };
            Side::strided(&src, "src").unwrap()
        }
        Form::Indexed => {
            // Equal pieces of a size dividing the total, scattered without overlap.
            let mut len = 1 + r.below(64);
            while total % len != 0 {
                len -= 1;
            }
            let n = total / len;
            let slots = AREA / len;
            let mut picks: Vec<usize> = (0..slots).collect();
            for i in 0..n {
                let j = i + r.below(slots - i);
                picks.swap(i, j);
            }
            let addrs: Vec<usize> = picks[..n].iter().map(|&k| sbase + k * len).collect();
            Side::indexed(&addrs, len, "src").unwrap()
        }
        Form::Vector => {
            // Pieces of random sizes, in order, with gaps while the area has room.
            let mut pieces = vec![];
            let (mut left, mut at, mut slack) = (total, sbase, AREA - total);
            while left > 0 {
                let n = (1 + r.below(100)).min(left);
                pieces.push((at, n));
                let gap = r.below(4).min(slack);
                at += n + gap;
                slack -= gap;
                left -= n;
            }
            assert!(at <= sbase + AREA, "fits the source area");
            Side::vector(&pieces, "src").unwrap()
        }
    };
    (d, s)
}

/// Byte offsets (from `base`) of a side, in order.
fn offsets(s: &Side, base: usize) -> Vec<usize> {
    s.runs
        .iter()
        .flat_map(|r| r.addr - base..r.addr - base + r.len)
        .collect()
}

fn world(tiny: bool) -> Vec<Context> {
    world_with(tiny, VisAlgo::Auto)
}

fn world_with(tiny: bool, algo: VisAlgo) -> Vec<Context> {
    let (_w, c) = sim_world(3, 4 << 20, Completion::Reversed, |s: &mut Settings| {
        s.rma.vis_algo = algo;
        if tiny {
            s.firehose.mode = Some(FhMode::Page);
            s.firehose.m = Some(16 * 4096);
            s.firehose.maxvictim = Some(4 * 4096);
        }
    });
    std::mem::forget(_w);
    c
}

/// One put and one get of random shapes between ranks 0 and 1, on memory `kind`
/// (0 heap, 1 registered, 2 plain), checked against the model.
fn round(c: &[Context], r: &mut Rng, kind: usize, form: Form, how: How) {
    let mut targets = [vec![0u8; 2 * AREA], vec![0u8; 2 * AREA]];
    let base = |i: usize, t: &mut [Vec<u8>; 2]| -> usize {
        match kind {
            0 => c[i].malloc(AREA).unwrap(),
            _ => t[i].as_mut_ptr() as usize,
        }
    };
    let (b0, b1) = (base(0, &mut targets), base(1, &mut targets));
    if kind == 1 {
        c[0].mem_register(b0, AREA).unwrap();
        c[1].mem_register(b1, AREA).unwrap();
    }
    let fill = |b: usize, seed: u8| {
        // SAFETY: `b` is a live AREA-byte buffer of this test (heap or vector).
        let a = unsafe { std::slice::from_raw_parts_mut(b as *mut u8, AREA) };
        for (k, x) in a.iter_mut().enumerate() {
            *x = seed.wrapping_add((k * 7 + (k >> 9)) as u8);
        }
    };
    let read = |b: usize| -> Vec<u8> {
        // SAFETY: as in `fill`.
        unsafe { std::slice::from_raw_parts(b as *const u8, AREA) }.to_vec()
    };
    // Put: rank 0's area (pattern 1) along `s` into rank 1's area (pattern 2) along `d`.
    fill(b0, 1);
    fill(b1, 2);
    let (d, s) = sides(r, &form, b1, b0);
    let (before_src, mut want) = (read(b0), read(b1));
    for (dk, sk) in offsets(&d, b1).into_iter().zip(offsets(&s, b0)) {
        want[dk] = before_src[sk];
    }
    let h = c[0].vis_put(1, &d, &s, how).unwrap();
    match how {
        How::Explicit => c[0].wait(h).unwrap(),
        How::Implicit => c[0].wait_nbi(NBI_ALL).unwrap(),
        How::Blocking => assert_eq!(h, 0),
    }
    assert!(
        read(b1) == want,
        "put: the target area differs from the model"
    );
    // Get: rank 1's area along `s` into rank 0's along `d`.
    fill(b0, 3);
    let (d, s) = sides(r, &form, b0, b1);
    let (src_now, mut want) = (read(b1), read(b0));
    for (dk, sk) in offsets(&d, b0).into_iter().zip(offsets(&s, b1)) {
        want[dk] = src_now[sk];
    }
    let h = c[0].vis_get(&d, 1, &s, how).unwrap();
    match how {
        How::Explicit => c[0].wait(h).unwrap(),
        How::Implicit => c[0].wait_nbi(NBI_ALL).unwrap(),
        How::Blocking => {}
    }
    assert!(
        read(b0) == want,
        "get: the local area differs from the model"
    );
    if kind == 1 {
        c[0].mem_unregister(b0, AREA).unwrap();
        c[1].mem_unregister(b1, AREA).unwrap();
    }
    if kind == 0 {
        c[0].free(b0).unwrap();
        c[1].free(b1).unwrap();
    }
}

/// Every memory kind, completion and form, with shapes from `seed`.
fn all_forms(seed: u64, tiny: bool) {
    forms_on(&world(tiny), seed);
}

fn forms_on(c: &[Context], seed: u64) {
    let mut r = Rng(seed | 1);
    for kind in 0..3 {
        for how in [How::Blocking, How::Explicit, How::Implicit] {
            round(c, &mut r, kind, Form::Vector, how);
            round(c, &mut r, kind, Form::Indexed, how);
            round(c, &mut r, kind, Form::Strided, how);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_form_matches_the_model(seed in any::<u64>(), tiny in any::<bool>()) {
        all_forms(seed, tiny);
    }
}

/// A seed whose strided source once came out wider than its area (the test's own
/// shape generator, since fixed).
#[test]
fn a_wide_strided_source_stays_in_its_area() {
    all_forms(540644135208127782, false);
}

#[test]
fn refused_calls_move_nothing() {
    let c = world(false);
    let mut buf = vec![0xEEu8; 64];
    let dst = Side::vector(&[(buf.as_mut_ptr() as usize, 16)], "d").unwrap();
    let src = Side::vector(&[(buf.as_ptr() as usize + 32, 8)], "s").unwrap();
    let e = c[0].vis_put(1, &dst, &src, How::Blocking).unwrap_err();
    assert_eq!(e.status, firehose::Status::InvalidArg);
    assert!(
        e.msg.contains("16 bytes but the source pieces 8"),
        "{}",
        e.msg
    );
    let e = c[0].vis_get(&src, 7, &src, How::Explicit).unwrap_err();
    assert_eq!(e.status, firehose::Status::BadRank, "{}", e.msg);
    assert!(buf.iter().all(|&b| b == 0xEE));
    // Nothing to move: no handle.
    let none = Side::vector(&[], "d").unwrap();
    assert_eq!(c[0].vis_put(1, &none, &none, How::Explicit).unwrap(), 0);
}

/// The pack algorithm (FH_VIS_ALGORITHM=pack) against the same model: every form,
/// completion and memory kind travels in active messages (the target handled some),
/// also with a medium so small that pieces are split across messages.
#[test]
fn the_pack_algorithm_matches_the_model() {
    for medium in [0usize, 512] {
        let (w, c) = sim_world(3, 4 << 20, Completion::Reversed, |s: &mut Settings| {
            s.rma.vis_algo = VisAlgo::Pack;
            if medium > 0 {
                s.am_max_medium = medium;
            }
        });
        std::mem::forget(w);
        let before = c[1].stats.snapshot().am_handled;
        forms_on(&c, 0x5eed_0000 + medium as u64);
        assert!(
            c[1].stats.snapshot().am_handled > before + 10,
            "the target unpacked messages"
        );
    }
}

/// A packed put or get that touches memory the target has not mapped, or that is
/// read-only, is refused by the target with FH_ERR_ACCESS (never a fault), and the
/// job goes on.
#[test]
fn the_target_refuses_bad_packed_pieces() {
    let c = world_with(false, VisAlgo::Pack);
    // SAFETY: a fresh anonymous mapping of 3 pages, owned by this test.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            3 * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as usize;
    assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
    // SAFETY: protecting pages of our own mapping.
    unsafe {
        libc::mprotect((p + 4096) as *mut libc::c_void, 4096, libc::PROT_NONE);
        libc::mprotect((p + 8192) as *mut libc::c_void, 4096, libc::PROT_READ);
    }
    let src = [7u8; 64];
    let s = Side::vector(&[(src.as_ptr() as usize, 32)], "s").unwrap();
    for bad in [p + 4096 + 8, p + 8192 + 8] {
        let d = Side::vector(&[(p + 16, 16), (bad, 16)], "d").unwrap();
        for how in [How::Blocking, How::Explicit, How::Implicit] {
            let r = c[0].vis_put(1, &d, &s, how).and_then(|h| match how {
                How::Explicit => c[0].wait(h),
                How::Implicit => c[0].wait_nbi(NBI_ALL),
                How::Blocking => Ok(()),
            });
            let e = r.unwrap_err();
            assert_eq!(e.status, firehose::Status::Access, "{}", e.msg);
            assert!(e.msg.contains("refused a packed"), "{}", e.msg);
        }
    }
    let mut back = vec![0u8; 32];
    let b = Side::vector(&[(back.as_mut_ptr() as usize, 32)], "b").unwrap();
    let from = Side::vector(&[(p, 16), (p + 4096, 16)], "f").unwrap();
    let e = c[0].vis_get(&b, 1, &from, How::Blocking).unwrap_err();
    assert_eq!(e.status, firehose::Status::Access, "{}", e.msg);
    // The read-only page reads; the job goes on.
    let ro = Side::vector(&[(p, 16), (p + 8192, 16)], "f").unwrap();
    c[0].vis_get(&b, 1, &ro, How::Blocking).unwrap();
    assert_eq!(back, vec![0u8; 32]);
    // SAFETY: our mapping, no longer used.
    unsafe { libc::munmap(p as *mut libc::c_void, 3 * 4096) };
}
