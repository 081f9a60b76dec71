//! The rest of seed 002's extended API on the sim conduit: value forms, memset (every
//! completion, sizes across the pattern block, plain/heap/registered memory), access
//! regions (one handle for the interval's _nbi operations to several ranks; nesting
//! and ownership errors), fh_test_some, and no-interrupt sections / handler-safe
//! locks postponing application handlers.

mod common;

use common::{sim_world, Completion};
use firehose::api::am::hsl::Hsl;
use firehose::api::rma::shape::Side;
use firehose::api::rma::vis::Completion as How;
use firehose::api::rma::NBI_ALL;
use firehose::api::settings::Settings;
use firehose::api::wire::Category;
use firehose::api::Context;
use firehose::Status;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

fn world() -> Vec<Context> {
    let (w, c) = sim_world(3, 4 << 20, Completion::Reversed, |_s: &mut Settings| {});
    std::mem::forget(w);
    c
}

/// A target buffer of `n` bytes of rank `rank`: 0 heap, 1 registered, 2 plain.
struct Target<'a> {
    c: &'a Context,
    kind: usize,
    plain: Vec<u8>,
    base: usize,
    n: usize,
}

impl<'a> Target<'a> {
    fn new(c: &'a Context, kind: usize, n: usize) -> Target<'a> {
        let mut plain = vec![0u8; n];
        let base = match kind {
            0 => c.malloc(n).unwrap(),
            _ => plain.as_mut_ptr() as usize,
        };
        if kind == 1 {
            c.mem_register(base, n).unwrap();
        }
        let t = Target {
            c,
            kind,
            plain,
            base,
            n,
        };
        t.bytes().fill(0xA5);
        t
    }

    #[allow(clippy::mut_from_ref)]
    fn bytes(&self) -> &mut [u8] {
        // SAFETY: `base` is a live buffer of `n` bytes owned by this Target (the
        // library heap or `plain`), not otherwise accessed while the test reads it.
        unsafe { std::slice::from_raw_parts_mut(self.base as *mut u8, self.n) }
    }
}

impl Drop for Target<'_> {
    fn drop(&mut self) {
        match self.kind {
            0 => self.c.free(self.base).unwrap(),
            1 => self.c.mem_unregister(self.base, self.n).unwrap(),
            _ => {}
        }
        let _ = &self.plain;
    }
}

#[test]
fn value_forms_write_and_read_every_width() {
    let c = world();
    for kind in 0..3 {
        let t = Target::new(&c[1], kind, 128);
        for (w, v) in [
            (1usize, 0x1ffu64),
            (2, 0x1_beef),
            (4, 0x1_dead_beef),
            (8, u64::MAX - 5),
        ] {
            let at = t.base + 8 * w;
            c[0].put_val(1, at, v, w).unwrap();
            let mask = if w == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * w)) - 1
            };
            assert_eq!(c[0].get_val(1, at, w).unwrap(), v & mask, "width {}", w);
            let b = t.bytes();
            assert_eq!(&b[8 * w..9 * w], &(v & mask).to_ne_bytes()[..w]);
            assert_eq!(b[8 * w - 1], 0xA5, "byte before untouched");
            assert_eq!(b[9 * w], 0xA5, "byte after untouched");
        }
        for bad in [0usize, 3, 16] {
            let e = c[0].put_val(1, t.base, 1, bad).unwrap_err();
            assert_eq!(e.status, Status::InvalidArg, "{}", e.msg);
            assert!(e.msg.contains("1, 2, 4 or 8"), "{}", e.msg);
            assert!(c[0].get_val(1, t.base, bad).is_err());
        }
        assert!(t.bytes()[..8].iter().all(|&b| b == 0xA5));
    }
    assert_eq!(
        c[0].put_val(9, 64, 1, 4).unwrap_err().status,
        Status::BadRank
    );
    assert_eq!(
        c[0].get_val(1, 0, 4).unwrap_err().status,
        Status::InvalidArg
    );
}

#[test]
fn memset_fills_exactly_its_range_with_every_completion() {
    let c = world();
    let n = 300 << 10;
    for kind in 0..3 {
        let t = Target::new(&c[2], kind, n);
        for (k, how) in [How::Blocking, How::Explicit, How::Implicit]
            .into_iter()
            .enumerate()
        {
            for &(off, len) in &[
                (0usize, 0usize),
                (5, 1),
                (17, 100),
                (1000, (64 << 10) + 3),
                (70, 200 << 10),
            ] {
                let val = 0x30 + k as i32 + off as i32;
                let h = c[0]
                    .memset(2, t.base + off, val | 0x7f00, len, how)
                    .unwrap();
                match how {
                    How::Explicit => c[0].wait(h).unwrap(),
                    How::Implicit => c[0].wait_nbi(NBI_ALL).unwrap(),
                    How::Blocking => assert_eq!(h, 0),
                }
                let b = t.bytes();
                assert!(
                    b[off..off + len].iter().all(|&x| x == val as u8),
                    "kind {} off {} len {}",
                    kind,
                    off,
                    len
                );
                if off > 0 {
                    assert_ne!(b[off - 1], val as u8, "byte before the range");
                }
                assert_ne!(b[off + len], val as u8, "byte after the range");
                b.fill(0xA5);
            }
        }
    }
    let e = c[0].memset(1, 0, 1, 8, How::Blocking).unwrap_err();
    assert_eq!(e.status, Status::InvalidArg, "{}", e.msg);
}

#[test]
fn an_access_region_completes_its_operations_with_one_handle() {
    let c = world();
    let (t1, t2) = (Target::new(&c[1], 2, 4096), Target::new(&c[2], 0, 4096));
    let src: Vec<u8> = (0..4096).map(|i| (i * 13) as u8).collect();
    let mut back = vec![0u8; 1024];
    t1.bytes()[..1024].copy_from_slice(&src[..1024]);
    c[0].begin_region().unwrap();
    let e = c[0].begin_region().unwrap_err();
    assert_eq!(e.status, Status::State, "regions do not nest: {}", e.msg);
    c[0].put_nbi(2, t2.base, src.as_ptr() as usize, 4096)
        .unwrap();
    c[0].get_nbi(back.as_mut_ptr() as usize, 1, t1.base, 1024)
        .unwrap();
    c[0].memset(1, t1.base + 2048, 7, 512, How::Implicit)
        .unwrap();
    let d = Side::vector(&[(t1.base + 3000, 10), (t1.base + 3100, 10)], "d").unwrap();
    let s = Side::vector(&[(src.as_ptr() as usize, 20)], "s").unwrap();
    c[0].vis_put(1, &d, &s, How::Implicit).unwrap();
    // Another thread neither ends it nor has its _nbi operations in it.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let e = c[0].end_region().unwrap_err();
            assert_eq!(e.status, Status::State, "{}", e.msg);
        });
    });
    let h = c[0].end_region().unwrap();
    assert_ne!(h, 0, "a region with operations has a handle");
    c[0].wait(h).unwrap();
    assert_eq!(t2.bytes(), &src[..]);
    assert_eq!(back, src[..1024]);
    assert!(t1.bytes()[2048..2560].iter().all(|&b| b == 7));
    assert_eq!(t1.bytes()[3000..3010], src[..10]);
    assert_eq!(t1.bytes()[3100..3110], src[10..20]);
    // Synced once: the handle is gone.
    assert_eq!(c[0].wait(h).unwrap_err().status, Status::InvalidArg);
    // End without a begin; an empty region.
    assert_eq!(c[0].end_region().unwrap_err().status, Status::State);
    c[0].begin_region().unwrap();
    assert_eq!(c[0].end_region().unwrap(), 0);
    // A refused operation inside the region is refused at its call.
    c[0].begin_region().unwrap();
    assert!(c[0].put_nbi(7, t1.base, src.as_ptr() as usize, 8).is_err());
    assert_eq!(c[0].end_region().unwrap(), 0);
}

#[test]
fn test_some_completes_what_it_can_and_nulls_it() {
    let c = world();
    let t = Target::new(&c[1], 2, 8192);
    let src = vec![9u8; 8192];
    let mut hs: Vec<u64> = (0..4)
        .map(|k| {
            c[0].put_nb(1, t.base + k * 2048, src.as_ptr() as usize + k * 2048, 2048)
                .unwrap()
        })
        .collect();
    hs.push(0);
    let mut rounds = 0;
    while hs.iter().any(|&h| h != 0) {
        let left = hs.iter().filter(|&&h| h != 0).count();
        let any = c[0].test_some(&mut hs).unwrap();
        assert_eq!(any, hs.iter().filter(|&&h| h != 0).count() < left);
        rounds += 1;
        assert!(rounds < 10_000, "test_some never completed the puts");
    }
    assert!(t.bytes().iter().all(|&b| b == 9));
    assert!(c[0].test_some(&mut hs).unwrap(), "all NULL: true");
    let mut stale = [hs[0] | (1 << 40) | 1];
    assert_eq!(
        c[0].test_some(&mut stale).unwrap_err().status,
        Status::InvalidArg
    );
    assert!(c[0].test_some(&mut []).unwrap());
}

static RAN: AtomicUsize = AtomicUsize::new(0);
static HSL: std::sync::OnceLock<Hsl> = std::sync::OnceLock::new();

unsafe extern "C" fn count(
    _t: *mut firehose::api::am::Token,
    _b: *mut c_void,
    _n: usize,
    args: *const u64,
    nargs: usize,
    _u: *mut c_void,
) {
    // SAFETY: the library passes `nargs` readable arguments.
    let a = unsafe { std::slice::from_raw_parts(args, nargs) };
    RAN.fetch_add(a[0] as usize, Ordering::SeqCst);
}

unsafe extern "C" fn keep_lock(
    _t: *mut firehose::api::am::Token,
    _b: *mut c_void,
    _n: usize,
    _a: *const u64,
    _na: usize,
    _u: *mut c_void,
) {
    HSL.get_or_init(Hsl::default).lock().unwrap();
}

/// Run rank 1's progress until `want` handler calls ran (or a round limit).
fn poll_until(c: &Context, want: usize) {
    for _ in 0..10_000 {
        if RAN.load(Ordering::SeqCst) >= want {
            return;
        }
        let _ = c.progress_once();
    }
}

#[test]
fn handlers_wait_for_the_end_of_a_no_interrupt_section_or_an_hsl() {
    let _g = common::serial();
    let c = world();
    RAN.store(0, Ordering::SeqCst);
    c[1].am_register(150, count, 0).unwrap();
    c[1].am_register(151, keep_lock, 0).unwrap();
    // A section: frames are received but the handler waits.
    c[1].hold_interrupts().unwrap();
    c[1].hold_interrupts().unwrap();
    for k in 1..=3 {
        c[0].am_request(1, Category::Short, 150, &[k], &[], None)
            .unwrap();
    }
    for _ in 0..200 {
        c[1].progress_once().unwrap();
    }
    assert_eq!(
        RAN.load(Ordering::SeqCst),
        0,
        "no handler runs in a section"
    );
    c[1].resume_interrupts().unwrap();
    assert_eq!(RAN.load(Ordering::SeqCst), 0, "still one section open");
    c[1].resume_interrupts().unwrap();
    assert_eq!(RAN.load(Ordering::SeqCst), 6, "all three ran at the end");
    assert_eq!(c[1].resume_interrupts().unwrap_err().status, Status::State);
    // Holding an hsl holds interrupts too.
    let h = Hsl::default();
    c[1].hsl_lock(&h).unwrap();
    c[0].am_request(1, Category::Short, 150, &[10], &[], None)
        .unwrap();
    for _ in 0..200 {
        c[1].progress_once().unwrap();
    }
    assert_eq!(RAN.load(Ordering::SeqCst), 6);
    c[1].hsl_unlock(&h).unwrap();
    assert_eq!(RAN.load(Ordering::SeqCst), 16, "ran at the unlock");
    // A handler that returns holding an hsl: released, and reported.
    c[0].am_request(1, Category::Short, 151, &[], &[], None)
        .unwrap();
    c[0].am_request(1, Category::Short, 150, &[100], &[], None)
        .unwrap();
    poll_until(&c[1], 116);
    assert_eq!(RAN.load(Ordering::SeqCst), 116);
    let held = HSL.get().expect("the handler ran");
    assert!(!held.is_held(), "the library released it");
    let e = c[1].poll().unwrap_err();
    assert_eq!(e.status, Status::State, "{}", e.msg);
    assert!(
        e.msg.contains("returned holding 1 handler-safe lock"),
        "{}",
        e.msg
    );
}
