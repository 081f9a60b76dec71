//! Header section: status codes, errors and versions.

use crate::runtime::error::{last_error, Status};
use std::os::raw::{c_char, c_int, c_uint};

/// Success.
pub const FH_OK: c_int = 0;
/// A test/try call found the operation not complete yet (not an error).
pub const FH_NOT_READY: c_int = 1;
pub const FH_ERR_INVALID_ARG: c_int = -1;
pub const FH_ERR_BAD_RANK: c_int = -2;
pub const FH_ERR_NO_MEMORY: c_int = -3;
pub const FH_ERR_NO_RESOURCE: c_int = -4;
pub const FH_ERR_ACCESS: c_int = -5;
pub const FH_ERR_NOT_PINNED: c_int = -6;
pub const FH_ERR_BARRIER_MISMATCH: c_int = -7;
pub const FH_ERR_STATE: c_int = -8;
pub const FH_ERR_MPI: c_int = -9;
pub const FH_ERR_TRANSPORT: c_int = -10;
pub const FH_ERR_UNSUPPORTED: c_int = -11;
pub const FH_ERR_VERSION: c_int = -12;
pub const FH_ERR_INTERNAL: c_int = -13;

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

pub(crate) const MAJOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MAJOR"));
pub(crate) const MINOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MINOR"));
pub(crate) const PATCH: u32 = parse_u32(env!("CARGO_PKG_VERSION_PATCH"));

/// Static description of a status code ("FH_ERR_ACCESS: ..."). Never NULL.
/// Threads: any thread, at any time, no context needed. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_strerror(status: c_int) -> *const c_char {
    crate::ffi_boundary!(value c"unknown firehose status".as_ptr(), {
        Ok(match Status::from_code(status) {
            Some(s) => s.describe().as_ptr() as *const c_char,
            None => c"unknown firehose status".as_ptr(),
        })
    })
}

/// Copy this thread's last detailed error message (what failed, with which argument)
/// into `buf` (NUL-terminated, truncated to `len`); returns the full message length.
/// `buf` may be NULL when `len` is 0 (to query the length).
/// Threads: any thread, at any time, no context needed. Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_last_error(buf: *mut c_char, len: usize) -> usize {
    crate::ffi_boundary!(value 0, {
        let msg = last_error();
        if !buf.is_null() && len > 0 {
            let n = msg.len().min(len - 1);
            // SAFETY: buf is non-null and the caller promises len writable bytes;
            // we write n + 1 <= len bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        Ok(msg.len())
    })
}

/// The library version: (major << 16) | (minor << 8) | patch.
/// Threads: any thread, at any time, no context needed.
#[no_mangle]
pub extern "C" fn fh_version() -> c_uint {
    (MAJOR << 16) | (MINOR << 8) | PATCH
}

/// Check that a program compiled against header version `major.minor` with
/// `sizeof(fh_config_t) == config_size` can use this library. `fh_init` (the inline
/// wrapper) calls it for you. Returns FH_OK or FH_ERR_VERSION.
/// The rule (semantic versioning): from 1.0 on, the major versions must be equal and
/// the header's minor version at most the library's (minor versions only add). Before
/// 1.0 every minor version may change the ABI, so major and minor must both be equal.
/// `config_size` must be a real `sizeof(fh_config_t)`: at least `sizeof(size_t)` and
/// at most this library's.
/// Threads: any thread, at any time, no context needed.
#[no_mangle]
pub extern "C" fn fh_version_check(major: c_uint, minor: c_uint, config_size: usize) -> c_int {
    crate::ffi_boundary!(status {
        // Semantic versioning: a program built against header M.m runs on library M.n
        // for n >= m. Before 1.0 (major 0) every minor version may change the ABI,
        // so the minor versions must be equal.
        let compatible = major == MAJOR && if MAJOR == 0 { minor == MINOR } else { minor <= MINOR };
        if !compatible {
            crate::bail!(
                Version,
                "program was compiled against firehose.h {}.{} but the library is {}.{}.{}: {}",
                major, minor, MAJOR, MINOR, PATCH,
                if MAJOR == 0 {
                    "before 1.0 the major and minor versions must match; rebuild the program"
                } else {
                    "the major versions must match and the header's minor may not be newer"
                }
            );
        }
        if config_size < std::mem::size_of::<usize>() {
            crate::bail!(
                Version,
                "sizeof(fh_config_t) is {} in the program: not a firehose.h fh_config_t",
                config_size
            );
        }
        if config_size > std::mem::size_of::<super::init::fh_config_t>() {
            crate::bail!(
                Version,
                "sizeof(fh_config_t) is {} in the program but {} in the library (newer header than library)",
                config_size,
                std::mem::size_of::<super::init::fh_config_t>()
            );
        }
        super::OK
    })
}
