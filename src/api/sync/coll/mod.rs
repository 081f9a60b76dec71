//! Collectives over the eager channels ([`super::chan`]).
//!
//! - **Broadcast** on seed 004 §2.3's postal-model optimal tree: with latency λ
//!   (in units of the time between two sends), a rank informed at time t sends to a
//!   new rank at t, t+1, t+2, ..., each informed at its send time + λ. Greedy earliest
//!   sender is optimal in the postal model; λ = 1 gives the binomial tree. Large
//!   messages are pipelined: a rank forwards chunk j to its children straight from
//!   its inbox slot while its parent already sends chunk j+1.
//! - **Reduce** combines along a binomial tree in *rank order* (rank i holds the
//!   combination of ranks [i, i + 2^k)), so floating-point results depend only on N
//!   and count, never on the root or on timing; rank 0 forwards the result to the
//!   root chunk by chunk. **Allreduce** off the node path: recursive doubling in
//!   the same rank order (`doubling`) for the first chunk, reduce to 0 + broadcast
//!   from 0 for the rest of a larger one.
//! - **Allgather** gathers contiguous blocks up the same binomial tree into `dst`,
//!   then broadcasts `dst` from rank 0.
//!
//! Collectives on one context are called by all ranks in the same order, from one
//! thread at a time (a second concurrent caller gets FH_ERR_STATE).

use super::chan::{Chans, Chunk, Desc, ERR, LAST};
mod doubling;
mod node;
mod node_big;

pub use super::state::{postal_tree, CollState, Tree};
use crate::api::ctx::CtxInner;
use crate::conduit::AtomicOp;
use crate::runtime::error::{Error, Result};
use crate::{bail, err};
use std::time::Instant;

pub const INT32: i32 = 0;
pub const INT64: i32 = 1;
pub const UINT32: i32 = 2;
pub const UINT64: i32 = 3;
pub const FLOAT: i32 = 4;
pub const DOUBLE: i32 = 5;
pub const INT8: i32 = 6;
pub const INT16: i32 = 7;
pub const UINT8: i32 = 8;
pub const UINT16: i32 = 9;
/// A complex number of two floats (real, imaginary): Fortran's `complex(4)`.
pub const CFLOAT: i32 = 10;
/// A complex number of two doubles: Fortran's `complex(8)`.
pub const CDOUBLE: i32 = 11;

pub const SUM: i32 = 0;
pub const PROD: i32 = 1;
pub const MIN: i32 = 2;
pub const MAX: i32 = 3;
pub const BAND: i32 = 4;
pub const BOR: i32 = 5;
pub const BXOR: i32 = 6;
/// Logical and: nonzero is true, the result is 1 or 0 (Fortran's `.and.` on
/// `logical` values, which are integers of their kind).
pub const LAND: i32 = 7;
/// Logical or, as `LAND`.
pub const LOR: i32 = 8;

/// Largest collective payload accepted (bytes).
pub const MAX_BYTES: usize = 1 << 40;

/// The datatype and operation codes chunks carry for a user-defined reduction.
const USER: i32 = 255;

/// A user's reduction: `f(inout, in, count, user)` sets `inout[i] = inout[i] op in[i]`
/// for `count` elements, `inout` being the lower ranks' side.
pub type UserFn = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    *const std::ffi::c_void,
    usize,
    *mut std::ffi::c_void,
);

/// How a reduction combines two operands.
#[derive(Clone, Copy)]
pub enum Comb {
    Builtin {
        dt: i32,
        op: i32,
    },
    /// Elements of `esz` bytes, combined by `f` (called with `user`; `None` is
    /// refused like any bad argument, so the other ranks learn of it too).
    User {
        f: Option<UserFn>,
        user: usize,
        esz: usize,
    },
}

impl Comb {
    fn esz(&self) -> usize {
        match *self {
            Comb::Builtin { dt, .. } => dtype_size(dt).unwrap_or(1),
            Comb::User { esz, .. } => esz.max(1),
        }
    }

    /// The public call's name: `builtin` or `user` by the kind of combination.
    fn call_name(&self, builtin: &'static str, user: &'static str) -> &'static str {
        match self {
            Comb::Builtin { .. } => builtin,
            Comb::User { .. } => user,
        }
    }

    /// What the call's chunks carry (datatype, operation).
    fn codes(&self) -> (i32, i32) {
        match *self {
            Comb::Builtin { dt, op } => (dt, op),
            Comb::User { .. } => (USER, USER),
        }
    }

    /// The payload in bytes, or why the arguments are refused.
    fn bytes(&self, count: usize) -> Result<usize> {
        match *self {
            Comb::Builtin { dt, op } => reduce_bytes(count, dt, op),
            Comb::User { esz, f, .. } => {
                if f.is_none() {
                    bail!(InvalidArg, "fn is NULL");
                }
                if esz == 0 {
                    bail!(InvalidArg, "elem_size is 0");
                }
                count
                    .checked_mul(esz)
                    .filter(|&b| b <= MAX_BYTES)
                    .ok_or_else(|| err!(InvalidArg, "count {} is too large", count))
            }
        }
    }

    /// `acc = acc op x`, element-wise.
    fn apply(&self, acc: &mut [u8], x: &[u8]) {
        match *self {
            Comb::Builtin { dt, op } => combine(acc, x, dt, op),
            Comb::User {
                f: Some(f),
                user,
                esz,
            } => {
                let (inout, input) = (acc.as_mut_ptr().cast(), x.as_ptr().cast());
                let user = user as *mut std::ffi::c_void;
                // SAFETY: the caller's function on `len / esz` elements of two
                // buffers of `len` bytes (the fh_reduce_fn contract).
                unsafe { f(inout, input, acc.len() / esz, user) }
            }
            Comb::User { f: None, .. } => {}
        }
    }
}

/// Bytes of one element of `dt`.
pub fn dtype_size(dt: i32) -> Result<usize> {
    Ok(match dt {
        INT8 | UINT8 => 1,
        INT16 | UINT16 => 2,
        INT32 | UINT32 | FLOAT => 4,
        INT64 | UINT64 | DOUBLE | CFLOAT => 8,
        CDOUBLE => 16,
        _ => bail!(
            InvalidArg,
            "datatype {} is not an fh_dtype_t (FH_INT32..FH_CDOUBLE)",
            dt
        ),
    })
}

fn check_op(dt: i32, op: i32) -> Result<()> {
    if !(SUM..=LOR).contains(&op) {
        bail!(
            InvalidArg,
            "operation {} is not an fh_op_t (FH_SUM..FH_LOR)",
            op
        );
    }
    if matches!(dt, FLOAT | DOUBLE) && op >= BAND {
        bail!(
            InvalidArg,
            "bitwise or logical operation {} on a floating-point datatype",
            op
        );
    }
    if matches!(dt, CFLOAT | CDOUBLE) && op > PROD {
        bail!(
            InvalidArg,
            "operation {} on a complex datatype (only FH_SUM and FH_PROD are defined)",
            op
        );
    }
    Ok(())
}

/// `acc[i] = f(acc[i], x[i])` for every element of `T` in `acc` (the operation is
/// chosen outside the loop, so the loop is one instruction stream the compiler
/// vectorizes; the buffers need no alignment).
#[inline(always)]
fn zip_elems<T: Copy>(acc: &mut [u8], x: &[u8], f: impl Fn(T, T) -> T) {
    let n = acc.len().min(x.len()) / std::mem::size_of::<T>();
    let (pa, px) = (acc.as_mut_ptr().cast::<T>(), x.as_ptr().cast::<T>());
    for i in 0..n {
        // SAFETY: element i lies inside both slices (n elements fit in each); they do
        // not overlap (one is borrowed mutably); unaligned accesses are used; every
        // bit pattern is a valid T (integers and floats only).
        unsafe {
            let v = f(pa.add(i).read_unaligned(), px.add(i).read_unaligned());
            pa.add(i).write_unaligned(v);
        }
    }
}

macro_rules! fold {
    ($t:ty, $acc:expr, $x:expr, $op:expr, int) => {
        match $op {
            SUM => zip_elems::<$t>($acc, $x, |l, r| l.wrapping_add(r)),
            PROD => zip_elems::<$t>($acc, $x, |l, r| l.wrapping_mul(r)),
            MIN => zip_elems::<$t>($acc, $x, |l, r| l.min(r)),
            MAX => zip_elems::<$t>($acc, $x, |l, r| l.max(r)),
            BAND => zip_elems::<$t>($acc, $x, |l, r| l & r),
            BOR => zip_elems::<$t>($acc, $x, |l, r| l | r),
            BXOR => zip_elems::<$t>($acc, $x, |l, r| l ^ r),
            LAND => zip_elems::<$t>($acc, $x, |l, r| ((l != 0) && (r != 0)) as $t),
            _ => zip_elems::<$t>($acc, $x, |l, r| ((l != 0) || (r != 0)) as $t),
        }
    };
    ($t:ty, $acc:expr, $x:expr, $op:expr, float) => {
        match $op {
            SUM => zip_elems::<$t>($acc, $x, |l, r| l + r),
            PROD => zip_elems::<$t>($acc, $x, |l, r| l * r),
            MIN => zip_elems::<$t>($acc, $x, |l, r| if r < l { r } else { l }),
            _ => zip_elems::<$t>($acc, $x, |l, r| if r > l { r } else { l }),
        }
    };
}

/// Complex sum or product, element-wise: each element is (real, imaginary) of `$t`.
macro_rules! fold_complex {
    ($t:ty, $acc:expr, $x:expr, $op:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        let part = |b: &[u8], k: usize| {
            <$t>::from_ne_bytes(b[k * S..(k + 1) * S].try_into().expect("S bytes"))
        };
        for (a, b) in $acc.chunks_exact_mut(2 * S).zip($x.chunks_exact(2 * S)) {
            let (ar, ai, br, bi) = (part(a, 0), part(a, 1), part(b, 0), part(b, 1));
            let (r, i) = if $op == SUM {
                (ar + br, ai + bi)
            } else {
                (ar * br - ai * bi, ar * bi + ai * br)
            };
            a[..S].copy_from_slice(&r.to_ne_bytes());
            a[S..].copy_from_slice(&i.to_ne_bytes());
        }
    }};
}

/// `acc = acc op x`, element-wise (acc is the left operand: lower ranks).
pub fn combine(acc: &mut [u8], x: &[u8], dt: i32, op: i32) {
    debug_assert_eq!(acc.len(), x.len());
    match dt {
        INT8 => fold!(i8, acc, x, op, int),
        INT16 => fold!(i16, acc, x, op, int),
        INT32 => fold!(i32, acc, x, op, int),
        INT64 => fold!(i64, acc, x, op, int),
        UINT8 => fold!(u8, acc, x, op, int),
        UINT16 => fold!(u16, acc, x, op, int),
        UINT32 => fold!(u32, acc, x, op, int),
        UINT64 => fold!(u64, acc, x, op, int),
        FLOAT => fold!(f32, acc, x, op, float),
        CFLOAT => fold_complex!(f32, acc, x, op),
        CDOUBLE => fold_complex!(f64, acc, x, op),
        _ => fold!(f64, acc, x, op, float),
    }
}

/// Binomial tree in rank order: (parent, children in increasing distance).
fn binomial(me: usize, n: usize) -> (Option<usize>, Vec<usize>) {
    let low = if me == 0 {
        None
    } else {
        Some(me & me.wrapping_neg())
    };
    (low.map(|k| me - k), binomial_kids(me, n).collect())
}

/// The children of `me` in the binomial tree of `n` ranks, nearest first
/// (`me + 1, me + 2, me + 4, ...` below `me`'s lowest set bit), without allocating.
fn binomial_kids(me: usize, n: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(move |&k| k < n && me & k == 0)
        .map(move |k| me + k)
        .filter(move |&c| c < n)
}

/// Ranks in the binomial subtree of `r`: [r, r + span).
fn span(r: usize, n: usize) -> usize {
    let low = if r == 0 {
        n.next_power_of_two()
    } else {
        r & r.wrapping_neg()
    };
    low.min(n - r)
}

/// Collective kinds, as chunks describe them.
const K_BCAST: u8 = 1;
const K_REDUCE: u8 = 2;
const K_ALLREDUCE: u8 = 3;
const K_ALLGATHER: u8 = 4;
/// The broadcast of λ at a context's first collective.
const K_LAMBDA: u8 = 5;

/// One rank's part in a reduction ([`CtxInner::reduce_flow`]).
struct Red<'a> {
    /// Where this rank's combination goes (parent, or the root from rank 0).
    up: Option<usize>,
    /// This rank is a root other than 0: the result comes from rank 0.
    from0: bool,
    kids: &'a [usize],
    src: usize,
    dst: usize,
    nbytes: usize,
    comb: Comb,
    /// Bytes per chunk (whole elements).
    chunk: usize,
}

/// A chunk met on the way, and its sender.
type Met = Option<(usize, Chunk)>;

/// Wait rounds between scans of every inbox for chunks of earlier calls.
const STALE_SCAN_EVERY: u32 = 64;

/// One collective call as this rank sees it: its description (what every chunk it
/// sends carries), the first failure, and which streams of the call have ended.
struct Call {
    name: &'static str,
    d: Desc,
    /// First failure and the rank that found it.
    err: Option<(Error, usize)>,
    /// Ranks we sent the last chunk of our stream to (in this call).
    ended: Vec<usize>,
    /// Ranks whose stream to us we consumed to its last chunk.
    closed: Vec<usize>,
    /// Ranks that send to us in this call (the flows add theirs as they start).
    expect: Vec<usize>,
}

impl Call {
    fn fail(&mut self, e: Error, by: usize) {
        if self.err.is_none() {
            self.err = Some((e, by));
        }
    }
    fn failed(&self) -> bool {
        self.err.is_some()
    }
}

/// The name of a code the chunks carry: `names[v]`, `user` for a user-defined
/// reduction's code, else `other v`.
fn code_name(names: &[&str], v: u8, user: &str, other: &str) -> String {
    match names.get(v as usize) {
        Some(n) => n.to_string(),
        None if v as i32 == USER => user.into(),
        None => format!("{} {}", other, v),
    }
}

fn dt_name(dt: u8) -> String {
    let names = [
        "FH_INT32",
        "FH_INT64",
        "FH_UINT32",
        "FH_UINT64",
        "FH_FLOAT",
        "FH_DOUBLE",
        "FH_INT8",
        "FH_INT16",
        "FH_UINT8",
        "FH_UINT16",
        "FH_CFLOAT",
        "FH_CDOUBLE",
    ];
    code_name(&names, dt, "a user-defined element", "datatype")
}

fn op_name(op: u8) -> String {
    let names = [
        "FH_SUM", "FH_PROD", "FH_MIN", "FH_MAX", "FH_BAND", "FH_BOR", "FH_BXOR", "FH_LAND",
        "FH_LOR",
    ];
    code_name(&names, op, "a user function", "operation")
}

/// A call as its arguments show it, for messages.
fn describe(d: &Desc) -> String {
    let count = |d: &Desc| match dtype_size(d.dt as i32) {
        Ok(e) => format!("count {} of {}", d.nbytes / e as u64, dt_name(d.dt)),
        Err(_) => format!("{} bytes of {}", d.nbytes, dt_name(d.dt)),
    };
    match d.kind {
        K_BCAST => format!("fh_broadcast(root {}, {} bytes)", d.root, d.nbytes),
        K_REDUCE => format!(
            "fh_reduce(root {}, {}, {})",
            d.root,
            count(d),
            op_name(d.op)
        ),
        K_ALLREDUCE => format!("fh_allreduce({}, {})", count(d), op_name(d.op)),
        K_ALLGATHER => format!("fh_allgather({} bytes per rank)", d.nbytes),
        K_LAMBDA => "the broadcast tree's set-up".into(),
        k => format!("collective kind {}", k),
    }
}

impl CtxInner {
    /// Enter a collective: one at a time per context; every call (even one that
    /// fails at once) takes the next call number, so ranks agree on numbers.
    fn coll_enter(
        &self,
        what: &'static str,
    ) -> Result<crate::runtime::solo::SoloGuard<'_, CollState>> {
        self.check_live()?;
        crate::api::am::check_not_in_handler(what)?;
        self.area()?;
        let mut st = self.sync.coll.try_lock().ok_or_else(|| {
            err!(
                State,
                "{}: another collective is running on this context in another thread",
                what
            )
        })?;
        if self.size > 1 {
            self.ensure_tree(&mut st)?;
        }
        st.seq += 1;
        self.node_entered(st.seq);
        Ok(st)
    }

    fn call(
        &self,
        st: &mut CollState,
        name: &'static str,
        kind: u8,
        root: usize,
        nbytes: usize,
        (dt, op): (i32, i32),
    ) -> Call {
        let call = Call {
            name,
            d: Desc {
                seq: st.seq,
                kind,
                dt: dt as u8,
                op: op as u8,
                root: root as u32,
                nbytes: nbytes as u64,
            },
            err: None,
            ended: std::mem::take(&mut st.spare[0]),
            closed: std::mem::take(&mut st.spare[1]),
            expect: std::mem::take(&mut st.spare[2]),
        };
        // A call on the tree path says so to ranks on the node path (`node`).
        self.node_enter(&call);
        call
    }

    /// Send one chunk of our stream to `dst` (the last one if `last`). Once the call
    /// failed, the stream ends with an error chunk instead; nothing is sent on a
    /// stream that ended.
    fn c_send(
        &self,
        st: &mut CollState,
        call: &mut Call,
        dst: usize,
        src: *const u8,
        len: usize,
        last: bool,
    ) -> Result<()> {
        if call.ended.contains(&dst) {
            return Ok(());
        }
        let (flags, len, by) = match &call.err {
            Some((_, by)) => (LAST | ERR, 0, Some(*by)),
            None => (if last { LAST } else { 0 }, len, None),
        };
        let mine = call.d;
        let (mut seen, mut stale): (Met, Met) = (None, None);
        self.chan_send(
            &mut st.chans,
            dst,
            src,
            len,
            &call.d,
            flags,
            by,
            &call.expect,
            &mut |r, c| {
                let keep = if c.desc.seq == mine.seq {
                    &mut seen
                } else {
                    &mut stale
                };
                keep.get_or_insert((r, *c));
            },
        )?;
        if let Some((r, c)) = stale {
            self.note_stale(call, r, &c);
        }
        if let Some((r, c)) = seen {
            call.fail(self.mismatch(call.name, r, &c, &mine), self.rank);
        }
        if flags & LAST != 0 {
            call.ended.push(dst);
        }
        Ok(())
    }

    /// The next chunk of this call from `src`, not consumed. Chunks of earlier calls
    /// are consumed and reported on the way. `None`: `src` is already in a later call,
    /// or broadcasts this call through the node slots (the call fails; nothing more
    /// can come from it in this one).
    fn c_recv(&self, st: &mut CollState, call: &mut Call, src: usize) -> Result<Option<Chunk>> {
        let seq = call.d.seq;
        let mut rounds = 0u32;
        let mut stale: Vec<(usize, Chunk)> = Vec::new();
        loop {
            let got = self.chan_recv(&mut st.chans, src, &mut |ctx, ch| {
                rounds += 1;
                if rounds % STALE_SCAN_EVERY == 0 {
                    ctx.drop_stale(ch, seq, &mut stale)?;
                }
                Ok(ctx.node_bcast_left(src, seq))
            })?;
            for (r, c) in stale.drain(..) {
                self.note_stale(call, r, &c);
            }
            let Some(c) = got else {
                // `src` broadcast through the node slots: it sends no chunk.
                let e = err!(
                    InvalidArg,
                    "{}: rank {} took this call for a broadcast of at most {} bytes through \
                     the node slots (the ranks passed different arguments); this rank called {}",
                    call.name,
                    src,
                    crate::api::sync::area::NSLOT,
                    describe(&call.d)
                );
                call.fail(e, self.rank);
                call.closed.push(src);
                return Ok(None);
            };
            if c.desc.seq < seq {
                self.note_stale(call, src, &c);
                self.chan_done(&mut st.chans, src)?;
                continue;
            }
            if c.desc.seq > seq {
                call.fail(
                    err!(
                        InvalidArg,
                        "{}: rank {} is already in a later collective ({}): the ranks did not \
                         call the same collectives in the same order",
                        call.name,
                        src,
                        describe(&c.desc)
                    ),
                    self.rank,
                );
                call.closed.push(src);
                return Ok(None);
            }
            return Ok(Some(c));
        }
    }

    /// Consume every chunk of earlier calls waiting in any inbox (their writers may be
    /// waiting for the room).
    fn drop_stale(&self, ch: &mut Chans, seq: u64, out: &mut Vec<(usize, Chunk)>) -> Result<()> {
        for r in (0..self.size).filter(|&r| r != self.rank) {
            while let Some(c) = self.chan_peek(ch, r)? {
                if c.desc.seq >= seq {
                    break;
                }
                out.push((r, c));
                self.chan_done(ch, r)?;
            }
        }
        Ok(())
    }

    /// A chunk of an earlier call nobody took: that call's arguments did not match.
    /// Reported once per call, on stderr and by the next `fh_poll`.
    fn note_stale(&self, call: &mut Call, src: usize, c: &Chunk) {
        if call.closed.contains(&usize::MAX) {
            return;
        }
        call.closed.push(usize::MAX);
        self.report_stale(src, c);
    }

    fn report_stale(&self, src: usize, c: &Chunk) {
        let e = err!(
            InvalidArg,
            "an earlier collective did not match on every rank: rank {} sent this rank data of \
             {} (collective number {}) that this rank did not expect in its own call of that \
             number; that call returned without it",
            src,
            describe(&c.desc),
            c.desc.seq
        );
        eprintln!("firehose[{}]: {}", self.rank, e.msg);
        self.record_async_error(e);
    }

    fn mismatch(&self, name: &str, src: usize, c: &Chunk, mine: &Desc) -> Error {
        let what = if c.desc.seq == mine.seq {
            "the ranks passed different arguments"
        } else {
            "the ranks did not call the same collectives in the same order"
        };
        err!(
            InvalidArg,
            "{}: {}: rank {} called {} where this rank called {}",
            name,
            what,
            src,
            describe(&c.desc),
            describe(mine)
        )
    }

    /// Whether chunk `c` from `src` may be used: not an error chunk, described as
    /// this call (checked on a stream's first chunk), and of the expected length.
    /// Otherwise the call fails (the chunk stays for [`Self::end_recv`] to drain).
    fn c_accept(&self, call: &mut Call, src: usize, c: &Chunk, first: bool, len: usize) -> bool {
        if c.err {
            let by = c.err_rank.unwrap_or(src);
            call.fail(
                err!(
                    InvalidArg,
                    "{}: rank {} found that the ranks' arguments did not match or were wrong \
                     (its own call returned the details); this rank called {}",
                    call.name,
                    by,
                    describe(&call.d)
                ),
                by,
            );
            return false;
        }
        if first && c.desc != call.d {
            let e = self.mismatch(call.name, src, c, &call.d);
            call.fail(e, self.rank);
            return false;
        }
        if c.len != len {
            let e = err!(
                InvalidArg,
                "{}: rank {} sent a chunk of {} bytes where {} were expected",
                call.name,
                src,
                c.len,
                len
            );
            call.fail(e, self.rank);
            return false;
        }
        true
    }

    /// Consume chunk `c` from `src`.
    fn c_done(&self, st: &mut CollState, call: &mut Call, src: usize, c: &Chunk) -> Result<()> {
        self.chan_done(&mut st.chans, src)?;
        if c.last {
            call.closed.push(src);
        }
        Ok(())
    }

    /// End our stream to `dst` if the flow did not (it failed): an error chunk.
    fn end_send(&self, st: &mut CollState, call: &mut Call, dst: usize) -> Result<()> {
        if call.ended.contains(&dst) {
            return Ok(());
        }
        debug_assert!(call.failed(), "a stream of a successful call ended early");
        if !call.failed() {
            call.fail(
                err!(Internal, "{}: stream to rank {} not ended", call.name, dst),
                self.rank,
            );
        }
        self.c_send(st, call, dst, std::ptr::null(), 0, true)
    }

    /// The end of a call: chunks of this call from ranks that do not send to us in
    /// it are a mismatch (another rank made a different call, e.g. took itself for
    /// the root); consume them, so their writer is not left waiting for room.
    fn finish(&self, st: &mut CollState, mut call: Call) -> Result<()> {
        if self.size > 1 {
            for r in 0..self.size {
                if r == self.rank || call.expect.contains(&r) {
                    continue;
                }
                while let Some(c) = self.chan_peek(&st.chans, r)? {
                    if c.desc.seq > call.d.seq {
                        break;
                    }
                    if c.desc.seq == call.d.seq {
                        let e = self.mismatch(call.name, r, &c, &call.d);
                        call.fail(e, self.rank);
                    } else {
                        self.note_stale(&mut call, r, &c);
                    }
                    self.chan_done(&mut st.chans, r)?;
                }
            }
        }
        for (k, mut v) in [call.ended, call.closed, call.expect]
            .into_iter()
            .enumerate()
        {
            v.clear();
            st.spare[k] = v;
        }
        match call.err {
            Some((e, _)) => Err(e),
            None => Ok(()),
        }
    }

    /// Consume what is left of `src`'s stream to us in this call.
    fn end_recv(&self, st: &mut CollState, call: &mut Call, src: usize) -> Result<()> {
        while !call.closed.contains(&src) {
            let Some(c) = self.c_recv(st, call, src)? else {
                break;
            };
            self.c_done(st, call, src, &c)?;
        }
        Ok(())
    }

    /// The broadcast tree, built at a context's first collective (λ from
    /// FH_BCAST_LAMBDA, or measured by rank 0 and broadcast on the binomial tree as a
    /// call of its own, so every rank builds the same tree whatever its first
    /// collective is).
    fn ensure_tree(&self, st: &mut CollState) -> Result<()> {
        if st.tree.is_some() {
            return Ok(());
        }
        let lambda = match self.cfg.sync.bcast_lambda {
            Some(l) => l,
            None => {
                let mut v = [0u8; 8];
                if self.rank == 0 {
                    v = (self.measure_lambda()? as u64).to_ne_bytes();
                }
                st.seq += 1;
                let mut call = self.call(st, "fh_broadcast (tree set-up)", K_LAMBDA, 0, 8, (0, 0));
                let bin = postal_tree(self.size, 1);
                self.bcast_flow(st, &mut call, &bin, 0, v.as_mut_ptr(), 8)?;
                self.finish(st, call)?;
                u64::from_ne_bytes(v).clamp(1, 64) as u32
            }
        };
        st.tree = Some((lambda, postal_tree(self.size, lambda)));
        self.info
            .lock()
            .push(format!("broadcast tree: postal model, lambda {}", lambda));
        Ok(())
    }

    /// λ = (time for a one-word flag to land at rank 1) / (time between two sends).
    fn measure_lambda(&self) -> Result<u32> {
        let a = self.area()?;
        let to = 1 % self.size;
        let w = a.scratch(self.area_base(to));
        let reps = 64u32;
        let t0 = Instant::now();
        for i in 0..reps {
            self.word(to, w, AtomicOp::Set(i as u64))?;
        }
        let per_send = t0.elapsed().as_secs_f64() / reps as f64;
        let t1 = Instant::now();
        for i in 0..reps {
            self.word(to, w, AtomicOp::Swap(i as u64))?;
        }
        let round_trip = t1.elapsed().as_secs_f64() / reps as f64;
        // A send costs the overhead; a swap is a round trip: half of it is latency.
        let l = (round_trip * 0.5 + per_send) / per_send.max(1e-9);
        Ok((l.round() as u32).clamp(1, 64))
    }

    /// Broadcast `nbytes` at `buf` from `root` on `tree` (relative ranks): the parent's
    /// stream is forwarded to the children chunk by chunk, straight from the inbox.
    /// A failed call sends error chunks down instead and drains the parent's stream.
    fn bcast_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        tree: &Tree,
        root: usize,
        buf: *mut u8,
        nbytes: usize,
    ) -> Result<()> {
        let n = self.size;
        let chunk = self.area()?.chunk;
        let rel = (self.rank + n - root) % n;
        let abs = |r: usize| (r + root) % n;
        let kids: Vec<usize> = tree.children[rel].iter().map(|&c| abs(c)).collect();
        let parent = (rel != 0).then(|| abs(tree.parent[rel]));
        call.expect.extend(parent);
        let count = nbytes.div_ceil(chunk).max(1);
        for j in 0..count {
            if call.failed() {
                break;
            }
            let off = j * chunk;
            let len = chunk.min(nbytes - off);
            let last = j + 1 == count;
            // SAFETY: buf is valid for nbytes (caller); off <= nbytes.
            let at = unsafe { buf.add(off) };
            let Some(p) = parent else {
                for &c in &kids {
                    self.c_send(st, call, c, at, len, last)?;
                }
                continue;
            };
            let Some(got) = self.c_recv(st, call, p)? else {
                break;
            };
            if !self.c_accept(call, p, &got, j == 0, len) {
                break;
            }
            for &c in &kids {
                // Forward from the inbox slot: registered memory, no copy.
                self.c_send(st, call, c, got.data, len, last)?;
            }
            // SAFETY: got.data is len bytes of our area, at is valid for len.
            unsafe { std::ptr::copy_nonoverlapping(got.data, at, len) };
            self.c_done(st, call, p, &got)?;
        }
        for &c in &kids {
            self.end_send(st, call, c)?;
        }
        if let Some(p) = parent {
            self.end_recv(st, call, p)?;
        }
        Ok(())
    }

    /// A call whose second phase is a broadcast from `root` expects its parent's
    /// chunks from the start: they may arrive while the first phase still sends,
    /// and a chunk from a rank not expected is consumed as a mismatch (`chan_send`).
    fn expect_bcast_parent(&self, st: &CollState, call: &mut Call, root: usize) {
        let n = self.size;
        let rel = (self.rank + n - root) % n;
        if let (Some((_, tree)), true) = (&st.tree, rel != 0) {
            call.expect.push((tree.parent[rel] + root) % n);
        }
    }

    /// [`Self::bcast_flow`] on the context's tree (built at the first collective).
    fn bcast_main(
        &self,
        st: &mut CollState,
        call: &mut Call,
        root: usize,
        buf: *mut u8,
        nbytes: usize,
    ) -> Result<()> {
        let (l, tree) = st.tree.take().expect("built at entry");
        let r = self.bcast_flow(st, call, &tree, root, buf, nbytes);
        st.tree = Some((l, tree));
        r
    }

    /// `fh_broadcast`.
    pub fn broadcast(&self, root: i64, buf: usize, nbytes: usize) -> Result<()> {
        let mut st = self.coll_enter("fh_broadcast")?;
        let root = self.check_rank(root)?;
        let mut call = self.call(&mut st, "fh_broadcast", K_BCAST, root, nbytes, (0, 0));
        if let Err(e) = check_buf(buf, nbytes, "broadcast: buf") {
            call.fail(e, self.rank);
        }
        if self.size > 1
            && !(self.node_fast(K_BCAST, call.d.nbytes)
                && self.node_bcast(&mut st, &mut call, root, buf, nbytes)?)
        {
            self.bcast_main(&mut st, &mut call, root, buf as *mut u8, nbytes)?;
        }
        self.finish(&mut st, call)
    }

    /// Reduce to rank 0 along the binomial tree in rank order, then (if `root != 0`)
    /// pass the result to `root`, chunk by chunk.
    #[allow(clippy::too_many_arguments)]
    fn reduce_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        root: usize,
        src: usize,
        dst: usize,
        nbytes: usize,
        comb: Comb,
    ) -> Result<()> {
        let (me, n) = (self.rank, self.size);
        let esz = comb.esz();
        let (parent, kids) = binomial(me, n);
        let red = Red {
            // Rank 0 passes the result to a root other than itself.
            up: parent.or((me == 0 && root != 0).then_some(root)),
            from0: me == root && root != 0,
            kids: &kids,
            src,
            dst,
            nbytes,
            comb,
            // At least one element: a call refused for too large an element moves 0 bytes.
            chunk: (self.area()?.chunk / esz * esz).max(esz),
        };
        call.expect.extend(&kids);
        if red.from0 {
            call.expect.push(0);
        }
        let mut acc = std::mem::take(&mut st.acc);
        acc.resize(red.chunk.min(nbytes), 0);
        let r = self.reduce_chunks(st, call, &red, &mut acc);
        st.acc = acc;
        r?;
        if let Some(p) = red.up {
            self.end_send(st, call, p)?;
        }
        for &c in &kids {
            self.end_recv(st, call, c)?;
        }
        if red.from0 {
            self.end_recv(st, call, 0)?;
        }
        Ok(())
    }

    /// The chunk loop of [`Self::reduce_flow`]: combine the children's chunks into
    /// `acc` and pass each on (to the parent, the root, or `dst`). Stops at the
    /// call's first failure; the caller ends the streams.
    fn reduce_chunks(
        &self,
        st: &mut CollState,
        call: &mut Call,
        red: &Red<'_>,
        acc: &mut [u8],
    ) -> Result<()> {
        let (chunk, nbytes) = (red.chunk, red.nbytes);
        let count = nbytes.div_ceil(chunk).max(1);
        for j in 0..count {
            if call.failed() {
                return Ok(());
            }
            let off = j * chunk;
            let len = chunk.min(nbytes - off);
            let last = j + 1 == count;
            let acc = &mut acc[..len];
            // SAFETY: src is valid for nbytes (caller).
            acc.copy_from_slice(unsafe {
                std::slice::from_raw_parts((red.src + off) as *const u8, len)
            });
            for &c in red.kids {
                let Some(got) = self.c_recv(st, call, c)? else {
                    return Ok(());
                };
                if !self.c_accept(call, c, &got, j == 0, len) {
                    return Ok(());
                }
                // SAFETY: got.data is len bytes of our area.
                let theirs = unsafe { std::slice::from_raw_parts(got.data, len) };
                red.comb.apply(acc, theirs);
                self.c_done(st, call, c, &got)?;
            }
            match red.up {
                Some(p) => self.c_send(st, call, p, acc.as_ptr(), len, last)?,
                // SAFETY: dst is valid for nbytes at the root (caller).
                None => unsafe {
                    std::ptr::copy_nonoverlapping(acc.as_ptr(), (red.dst + off) as *mut u8, len)
                },
            }
            if red.from0 {
                let Some(got) = self.c_recv(st, call, 0)? else {
                    return Ok(());
                };
                if !self.c_accept(call, 0, &got, j == 0, len) {
                    return Ok(());
                }
                // SAFETY: got.data is len bytes of our area; dst is valid for nbytes
                // at the root (caller).
                unsafe { std::ptr::copy_nonoverlapping(got.data, (red.dst + off) as *mut u8, len) };
                self.c_done(st, call, 0, &got)?;
            }
        }
        Ok(())
    }

    /// `fh_reduce`: `dst` is written at `root` only (it may be NULL elsewhere).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        root: i64,
        src: usize,
        dst: usize,
        count: usize,
        dt: i32,
        op: i32,
    ) -> Result<()> {
        self.reduce_with(root, src, dst, count, Comb::Builtin { dt, op })
    }

    /// The payload of a reduction, or why this rank's arguments are refused.
    fn red_bytes(
        &self,
        comb: &Comb,
        count: usize,
        src: usize,
        dst: Option<usize>,
    ) -> Result<usize> {
        let b = comb.bytes(count)?;
        if comb.esz() > self.area()?.chunk {
            bail!(
                InvalidArg,
                "elem_size {} is larger than a collective chunk ({} bytes)",
                comb.esz(),
                self.area()?.chunk
            );
        }
        check_buf(src, b, "reduce: src")?;
        if let Some(d) = dst {
            check_buf(d, b, "reduce: dst")?;
        }
        Ok(b)
    }

    /// A reduction's call record and payload; an argument this rank refuses is
    /// recorded in the call (payload 0), so it still takes part and every rank learns.
    fn red_call(
        &self,
        st: &mut CollState,
        name: &'static str,
        (kind, root, count, comb): (u8, usize, usize, Comb),
        src: usize,
        dst: Option<usize>,
    ) -> (Call, usize) {
        let want = *comb.bytes(count).as_ref().unwrap_or(&0);
        let mut call = self.call(st, name, kind, root, want, comb.codes());
        let nbytes = match self.red_bytes(&comb, count, src, dst) {
            Ok(b) => b,
            Err(e) => {
                call.fail(e, self.rank);
                0
            }
        };
        (call, nbytes)
    }

    /// A reduction on one rank: the result is the operand.
    fn red_alone(
        &self,
        st: &mut CollState,
        call: Call,
        src: usize,
        dst: usize,
        nbytes: usize,
    ) -> Result<()> {
        if !call.failed() && nbytes > 0 {
            // SAFETY: both valid for nbytes (checked non-null; caller's contract).
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, nbytes) };
        }
        self.finish(st, call)
    }

    /// `fh_reduce` (built-in `comb`) and `fh_reduce_fn` (a user's).
    pub fn reduce_with(
        &self,
        root: i64,
        src: usize,
        dst: usize,
        count: usize,
        comb: Comb,
    ) -> Result<()> {
        let name = comb.call_name("fh_reduce", "fh_reduce_fn");
        let mut st = self.coll_enter(name)?;
        let root = self.check_rank(root)?;
        let at_root = (self.rank == root).then_some(dst);
        let how = (K_REDUCE, root, count, comb);
        let (mut call, nbytes) = self.red_call(&mut st, name, how, src, at_root);
        if self.size == 1 {
            return self.red_alone(&mut st, call, src, dst, nbytes);
        }
        if !(self.node_fast(K_REDUCE, call.d.nbytes)
            && self.node_coll(&mut st, &mut call, (src, dst), nbytes, Some(comb))?)
        {
            self.reduce_flow(&mut st, &mut call, root, src, dst, nbytes, comb)?;
        }
        self.finish(&mut st, call)
    }

    /// `fh_allreduce`: through the node slots on a one-node job, else by recursive
    /// doubling (a failure anywhere reaches every rank).
    pub fn allreduce(&self, src: usize, dst: usize, count: usize, dt: i32, op: i32) -> Result<()> {
        self.allreduce_with(src, dst, count, Comb::Builtin { dt, op })
    }

    /// `fh_allreduce` (built-in `comb`) and `fh_allreduce_fn` (a user's).
    pub fn allreduce_with(&self, src: usize, dst: usize, count: usize, comb: Comb) -> Result<()> {
        let name = comb.call_name("fh_allreduce", "fh_allreduce_fn");
        let mut st = self.coll_enter(name)?;
        let how = (K_ALLREDUCE, 0, count, comb);
        let (mut call, nbytes) = self.red_call(&mut st, name, how, src, Some(dst));
        if self.size == 1 {
            return self.red_alone(&mut st, call, src, dst, nbytes);
        }
        if !(self.node_fast(K_ALLREDUCE, call.d.nbytes)
            && self.node_coll(&mut st, &mut call, (src, dst), nbytes, Some(comb))?)
        {
            self.allreduce_flow(&mut st, &mut call, (src, dst), nbytes, comb)?;
        }
        self.finish(&mut st, call)
    }

    /// An allreduce off the node path: the first chunk by recursive doubling
    /// (`doubling`: the ranks agree there whether the call failed), the rest, if
    /// any, reduced to 0 and broadcast from 0 on the trees.
    fn allreduce_flow(
        &self,
        st: &mut CollState,
        call: &mut Call,
        (src, dst): (usize, usize),
        nbytes: usize,
        comb: Comb,
    ) -> Result<()> {
        let esz = comb.esz();
        let head = nbytes.min((self.area()?.chunk / esz * esz).max(esz));
        let rest = nbytes - head;
        if rest > 0 {
            // The trees' chunks may arrive while the doubling still runs: expected.
            self.expect_bcast_parent(st, call, 0);
            call.expect.extend(binomial_kids(self.rank, self.size));
        }
        self.doubling_flow(st, call, (src, dst), head, comb)?;
        if rest == 0 || call.failed() {
            return Ok(());
        }
        // New streams to the same ranks in the same call.
        call.ended.clear();
        call.closed.retain(|&r| r == usize::MAX);
        let (src, dst) = (src + head, dst + head);
        self.reduce_flow(st, call, 0, src, dst, rest, comb)?;
        self.bcast_main(st, call, 0, dst as *mut u8, rest)
    }

    /// `fh_allgather`: rank i's `nbytes` land at `dst + i * nbytes` on every rank.
    /// Blocks travel up the binomial tree into `dst`, then `dst` is broadcast from 0.
    ///
    /// Long because the coll guard `st` and the `call` record thread through every
    /// phase (argument check, gather from kids, send to parent, end markers, broadcast):
    /// an argument error is recorded in `call`, not returned, so this rank still takes
    /// part in the end markers and broadcast with its tree neighbours.
    pub fn allgather(&self, src: usize, nbytes: usize, dst: usize) -> Result<()> {
        let mut st = self.coll_enter("fh_allgather")?;
        let n = self.size;
        let me = self.rank;
        let mut call = self.call(&mut st, "fh_allgather", K_ALLGATHER, 0, nbytes, (0, 0));
        let total = nbytes
            .checked_mul(n)
            .filter(|&t| t <= MAX_BYTES)
            .ok_or_else(|| {
                err!(
                    InvalidArg,
                    "allgather: {} bytes from {} ranks is too large",
                    nbytes,
                    n
                )
            })
            .and_then(|t| {
                check_buf(src, nbytes, "allgather: src")?;
                check_buf(dst, t, "allgather: dst")?;
                Ok(t)
            });
        let (nbytes, total) = match total {
            Ok(t) => (nbytes, t),
            Err(e) => {
                call.fail(e, me);
                (0, 0)
            }
        };
        if !call.failed() && nbytes > 0 {
            // SAFETY: src valid for nbytes, dst for total (caller); they may overlap
            // only if the caller passed src == dst + me*nbytes, which copy handles.
            unsafe { std::ptr::copy(src as *const u8, (dst + me * nbytes) as *mut u8, nbytes) };
        }
        if n == 1 {
            return self.finish(&mut st, call);
        }
        let chunk = self.area()?.chunk;
        let (parent, kids) = binomial(me, n);
        call.expect.extend(&kids);
        self.expect_bcast_parent(&st, &mut call, 0);
        'kids: for &c in &kids {
            let (start, end) = (c * nbytes, (c + span(c, n)) * nbytes);
            let count = (end - start).div_ceil(chunk).max(1);
            for j in 0..count {
                if call.failed() {
                    break 'kids;
                }
                let off = start + j * chunk;
                let len = chunk.min(end - off);
                let Some(got) = self.c_recv(&mut st, &mut call, c)? else {
                    break 'kids;
                };
                if !self.c_accept(&mut call, c, &got, j == 0, len) {
                    break 'kids;
                }
                // SAFETY: got.data is len bytes of our area; dst is valid for total.
                unsafe { std::ptr::copy_nonoverlapping(got.data, (dst + off) as *mut u8, len) };
                self.c_done(&mut st, &mut call, c, &got)?;
            }
        }
        if let Some(p) = parent {
            let (start, end) = (me * nbytes, (me + span(me, n)) * nbytes);
            let count = (end - start).div_ceil(chunk).max(1);
            for j in 0..count {
                if call.failed() {
                    break;
                }
                let off = start + j * chunk;
                let len = chunk.min(end - off);
                self.c_send(
                    &mut st,
                    &mut call,
                    p,
                    (dst + off) as *const u8,
                    len,
                    j + 1 == count,
                )?;
            }
            self.end_send(&mut st, &mut call, p)?;
        }
        for &c in &kids {
            self.end_recv(&mut st, &mut call, c)?;
        }
        self.bcast_main(&mut st, &mut call, 0, dst as *mut u8, total)?;
        self.finish(&mut st, call)
    }
}

fn reduce_bytes(count: usize, dt: i32, op: i32) -> Result<usize> {
    let esz = dtype_size(dt)?;
    check_op(dt, op)?;
    count
        .checked_mul(esz)
        .filter(|&b| b <= MAX_BYTES)
        .ok_or_else(|| err!(InvalidArg, "count {} is too large", count))
}

fn check_buf(p: usize, nbytes: usize, what: &str) -> Result<()> {
    if nbytes > 0 && p == 0 {
        bail!(InvalidArg, "{} is NULL ({} bytes)", what, nbytes);
    }
    if nbytes > MAX_BYTES || p.checked_add(nbytes).is_none() {
        bail!(InvalidArg, "{}: {} bytes is too large", what, nbytes);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    fn depth(t: &Tree, mut r: usize) -> usize {
        let mut d = 0;
        while r != 0 {
            r = t.parent[r];
            d += 1;
        }
        d
    }

    #[test]
    fn postal_tree_is_a_tree_and_lambda_1_is_binomial() {
        for n in 1..40 {
            for l in [1, 2, 3, 5] {
                let t = postal_tree(n, l);
                let mut seen = vec![false; n];
                seen[0] = true;
                for r in 1..n {
                    assert!(t.parent[r] < r, "parents are informed first");
                    assert!(t.children[t.parent[r]].contains(&r));
                    seen[r] = true;
                }
                assert!(seen.iter().all(|&s| s));
            }
            // λ = 1: rank r's parent clears r's highest bit (binomial).
            let t = postal_tree(n, 1);
            for r in 1..n {
                let hb = 1 << (usize::BITS - 1 - r.leading_zeros());
                assert_eq!(t.parent[r], r - hb, "n {} r {}", n, r);
            }
        }
    }

    #[test]
    fn larger_lambda_gives_flatter_trees() {
        let n = 64;
        let d1 = (1..n).map(|r| depth(&postal_tree(n, 1), r)).max().unwrap();
        let d8 = (1..n).map(|r| depth(&postal_tree(n, 8), r)).max().unwrap();
        assert!(d8 < d1, "λ=8 depth {} vs binomial {}", d8, d1);
        assert!(postal_tree(n, 8).children[0].len() > postal_tree(n, 1).children[0].len());
    }

    /// The tree as a loop over the bits of `me` would build it.
    #[test]
    fn binomial_parent_and_kids_match_the_bit_loop() {
        for n in 1..70 {
            for me in 0..n {
                let (mut parent, mut kids, mut k) = (None, Vec::new(), 1usize);
                while k < n {
                    if me & k != 0 {
                        parent = Some(me - k);
                        break;
                    }
                    if me + k < n {
                        kids.push(me + k);
                    }
                    k <<= 1;
                }
                assert_eq!(binomial(me, n), (parent, kids), "n {} me {}", n, me);
            }
        }
    }

    #[test]
    fn binomial_spans_cover_everything() {
        for n in 1..33 {
            let mut covered = vec![0; n];
            for r in 0..n {
                let (p, kids) = binomial(r, n);
                assert_eq!(p.is_none(), r == 0);
                let s: usize = kids.iter().map(|&c| span(c, n)).sum();
                assert_eq!(span(r, n), 1 + s, "n {} r {}", n, r);
                for i in r..r + span(r, n) {
                    covered[i] += 1;
                }
            }
            assert!(covered.iter().all(|&c| c >= 1));
        }
    }

    #[test]
    fn combine_ops() {
        let mut a = 5i32.to_ne_bytes().to_vec();
        combine(&mut a, &(-7i32).to_ne_bytes(), INT32, MIN);
        assert_eq!(i32::from_ne_bytes(a[..].try_into().unwrap()), -7);
        let mut a = 2.5f64.to_ne_bytes().to_vec();
        combine(&mut a, &4.0f64.to_ne_bytes(), DOUBLE, PROD);
        assert_eq!(f64::from_ne_bytes(a[..].try_into().unwrap()), 10.0);
        let mut a = 0b1100u64.to_ne_bytes().to_vec();
        combine(&mut a, &0b1010u64.to_ne_bytes(), UINT64, BXOR);
        assert_eq!(u64::from_ne_bytes(a[..].try_into().unwrap()), 0b0110);
        assert!(check_op(FLOAT, BAND).is_err());
        assert!(check_op(DOUBLE, LAND).is_err());
        assert!(check_op(CFLOAT, MIN).is_err());
        assert!(check_op(CDOUBLE, PROD).is_ok());
        assert!(check_op(INT8, LOR).is_ok());
        assert!(check_op(INT32, LOR + 1).is_err());
        // Small integers wrap; logical ops give 1 or 0.
        let mut a = [250u8];
        combine(&mut a, &[10u8], UINT8, SUM);
        assert_eq!(a, [4]);
        let mut a = (-3i16).to_ne_bytes();
        combine(&mut a, &(-7i16).to_ne_bytes(), INT16, MIN);
        assert_eq!(i16::from_ne_bytes(a), -7);
        let mut a = 5i32.to_ne_bytes();
        combine(&mut a, &0i32.to_ne_bytes(), INT32, LAND);
        assert_eq!(i32::from_ne_bytes(a), 0);
        let mut a = 0i64.to_ne_bytes();
        combine(&mut a, &(-9i64).to_ne_bytes(), INT64, LOR);
        assert_eq!(i64::from_ne_bytes(a), 1);
        // (1 + 2i)(3 - 4i) = 11 + 2i; (1 + 2i) + (3 - 4i) = 4 - 2i.
        let c = |r: f64, i: f64| [r.to_ne_bytes(), i.to_ne_bytes()].concat();
        let mut a = c(1.0, 2.0);
        combine(&mut a, &c(3.0, -4.0), CDOUBLE, PROD);
        assert_eq!(a, c(11.0, 2.0));
        let cf = |r: f32, i: f32| [r.to_ne_bytes(), i.to_ne_bytes()].concat();
        let mut a = cf(1.0, 2.0);
        combine(&mut a, &cf(3.0, -4.0), CFLOAT, SUM);
        assert_eq!(a, cf(4.0, -2.0));
        assert!(dtype_size(12).is_err());
    }
}
