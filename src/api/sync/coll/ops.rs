//! What a reduction computes: the datatype and operation codes of the C API, the
//! element-wise combination of two operands (`combine`, and [`Comb`] for a user's
//! function), and their names for messages.
//!
//! Guarantees: `check_op` refuses a datatype or operation the API does not define,
//! and an operation a datatype does not support (bitwise or logical ones on
//! floating point, an ordering on complex numbers); integers wrap; the logical
//! operations give 1 or 0; `acc` is always the left operand (the lower ranks'
//! side), so results keep rank order.

use super::MAX_BYTES;
use crate::runtime::error::Result;
use crate::{bail, err};

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
    pub(super) fn esz(&self) -> usize {
        match *self {
            Comb::Builtin { dt, .. } => dtype_size(dt).unwrap_or(1),
            Comb::User { esz, .. } => esz.max(1),
        }
    }

    /// The public call's name: `builtin` or `user` by the kind of combination.
    pub(super) fn call_name(&self, builtin: &'static str, user: &'static str) -> &'static str {
        match self {
            Comb::Builtin { .. } => builtin,
            Comb::User { .. } => user,
        }
    }

    /// What the call's chunks carry (datatype, operation).
    pub(super) fn codes(&self) -> (i32, i32) {
        match *self {
            Comb::Builtin { dt, op } => (dt, op),
            Comb::User { .. } => (USER, USER),
        }
    }

    /// The payload in bytes, or why the arguments are refused.
    pub(super) fn bytes(&self, count: usize) -> Result<usize> {
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
    pub(super) fn apply(&self, acc: &mut [u8], x: &[u8]) {
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

/// The name of a code the chunks carry: `names[v]`, `user` for a user-defined
/// reduction's code, else `other v`.
fn code_name(names: &[&str], v: u8, user: &str, other: &str) -> String {
    match names.get(v as usize) {
        Some(n) => n.to_string(),
        None if v as i32 == USER => user.into(),
        None => format!("{} {}", other, v),
    }
}

pub(super) fn dt_name(dt: u8) -> String {
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

pub(super) fn op_name(op: u8) -> String {
    let names = [
        "FH_SUM", "FH_PROD", "FH_MIN", "FH_MAX", "FH_BAND", "FH_BOR", "FH_BXOR", "FH_LAND",
        "FH_LOR",
    ];
    code_name(&names, op, "a user function", "operation")
}

fn reduce_bytes(count: usize, dt: i32, op: i32) -> Result<usize> {
    let esz = dtype_size(dt)?;
    check_op(dt, op)?;
    count
        .checked_mul(esz)
        .filter(|&b| b <= MAX_BYTES)
        .ok_or_else(|| err!(InvalidArg, "count {} is too large", count))
}

#[cfg(test)]
mod tests {
    use super::*;

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
