//! Operating-system facilities: page size, "is this range mapped", mlock/munlock,
//! anonymous mappings.
//!
//! Guarantees: `is_mapped` never touches the memory it checks (it asks the kernel
//! with `mincore`), so a bogus address from a remote rank can be refused without
//! faulting. Pinning reports failures as errors; it never aborts.

use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::OnceLock;

/// The system page size (cached).
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p <= 0 {
            4096
        } else {
            p as usize
        }
    })
}

/// `[addr, addr+len)` rounded out to whole pages: (start, len).
pub fn page_span(addr: usize, len: usize) -> (usize, usize) {
    let p = page_size();
    let start = addr & !(p - 1);
    let end = (addr.saturating_add(len) + p - 1) & !(p - 1);
    (start, end - start)
}

/// True if every page of `[addr, addr+len)` is mapped in this process.
pub fn is_mapped(addr: usize, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    if addr.checked_add(len).is_none() || addr == 0 {
        return false;
    }
    let (start, span) = page_span(addr, len);
    let pages = span / page_size();
    // Check in chunks so the result vector stays small.
    const CHUNK: usize = 4096;
    let mut vec = vec![0u8; CHUNK.min(pages)];
    let mut done = 0;
    while done < pages {
        let n = CHUNK.min(pages - done);
        let a = start + done * page_size();
        // SAFETY: mincore only reads page-table state for [a, a + n pages) and writes
        // n bytes into `vec`, which holds at least n bytes. It never dereferences `a`.
        let rc =
            unsafe { libc::mincore(a as *mut libc::c_void, n * page_size(), vec.as_mut_ptr()) };
        if rc != 0 {
            return false;
        }
        done += n;
    }
    true
}

/// The largest range inside `[lo, hi)` that contains `[addr, addr+len)` and is
/// entirely mapped, probed page by page outward (one `mincore` for the common case
/// of a fully mapped window). `None` if the range itself is not mapped.
/// `lo`, `hi` must be page aligned with `lo <= addr` and `addr + len <= hi`.
pub fn mapped_extent(addr: usize, len: usize, lo: usize, hi: usize) -> Option<(usize, usize)> {
    debug_assert!(lo <= addr && addr + len <= hi);
    if is_mapped(lo, hi - lo) {
        return Some((lo, hi));
    }
    if !is_mapped(addr, len.max(1)) {
        return None;
    }
    let p = page_size();
    let (mut s, span) = page_span(addr, len.max(1));
    let mut e = s + span;
    while s > lo && is_mapped(s - p, p) {
        s -= p;
    }
    while e < hi && is_mapped(e, p) {
        e += p;
    }
    Some((s, e))
}

/// Copy `data` to `addr` in this process through the kernel (`process_vm_writev` on
/// ourselves), so an unwritable or unmapped destination is an `FH_ERR_ACCESS` instead
/// of a fault. Used for data a peer sent (put-in-move).
pub fn write_checked(addr: usize, data: &[u8]) -> Result<()> {
    copy_checked(addr, data.as_ptr() as usize, data.len())
}

/// Copy `len` bytes from `src` to `dst` inside this process through the kernel: an
/// unreadable source or unwritable destination is `FH_ERR_ACCESS`, never a fault.
pub fn copy_checked(dst: usize, src: usize, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: src as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: dst as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the kernel validates both ranges (EFAULT on a bad one); no Rust
    // reference to either is created.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == len as isize {
        return Ok(());
    }
    bail!(
        Access,
        "cannot copy {} bytes from {:#x} to {:#x} in this process: {}",
        len,
        src,
        dst,
        if n >= 0 {
            "short copy".to_string()
        } else {
            std::io::Error::last_os_error().to_string()
        }
    )
}

/// Physical memory of this machine in bytes (0 if unknown).
pub fn phys_mem() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || size <= 0 {
        0
    } else {
        pages as u64 * size as u64
    }
}

/// Lock `[addr, addr+len)` in RAM.
pub fn mlock(addr: usize, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: mlock does not access the memory from user space; it fails with ENOMEM
    // on unmapped ranges and EPERM/ENOMEM over RLIMIT_MEMLOCK.
    let rc = unsafe { libc::mlock(addr as *const libc::c_void, len) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            NoResource,
            "mlock of {} bytes at {:#x} failed: {} (RLIMIT_MEMLOCK {}; set FH_PIN=none to register without locking)",
            len,
            addr,
            e,
            memlock_limit().map(|l| l.to_string()).unwrap_or_else(|| "unlimited".into())
        );
    }
    Ok(())
}

/// Unlock `[addr, addr+len)`. Errors are ignored (the range may already be unmapped).
pub fn munlock(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: munlock has no memory-safety preconditions; failure is harmless.
    unsafe {
        libc::munlock(addr as *const libc::c_void, len);
    }
}

/// RLIMIT_MEMLOCK soft limit in bytes, `None` if unlimited.
pub fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if rc != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(r.rlim_cur)
    }
}

/// An anonymous private read/write mapping, unmapped on drop.
/// Bytes available to us in the file system at `path` (None if it cannot be read).
pub fn tmpfs_available(path: &str) -> Option<u64> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
}

pub struct Mapping {
    addr: usize,
    len: usize,
}

impl Mapping {
    pub fn new(len: usize) -> Result<Mapping> {
        let len = page_span(0, len).1.max(page_size());
        // SAFETY: anonymous mapping with no fixed address; the kernel picks the place.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(err!(
                NoMemory,
                "mmap of {} bytes failed: {}",
                len,
                std::io::Error::last_os_error()
            ));
        }
        Ok(Mapping {
            addr: p as usize,
            len,
        })
    }
    pub fn addr(&self) -> usize {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; nobody holds references past drop (owners
        // detach it from every conduit before dropping).
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_checks_do_not_fault() {
        let v = vec![1u8; 10000];
        assert!(is_mapped(v.as_ptr() as usize, v.len()));
        assert!(!is_mapped(0, 8));
        assert!(!is_mapped(8, 8));
        assert!(!is_mapped(usize::MAX - 4, 100));
        let m = Mapping::new(3 * page_size()).unwrap();
        assert!(is_mapped(m.addr(), m.len()));
        let a = m.addr();
        let l = m.len();
        drop(m);
        assert!(
            !is_mapped(a, l),
            "an unmapped range must be reported as such"
        );
    }

    #[test]
    fn page_span_rounds_out() {
        let p = page_size();
        assert_eq!(page_span(p + 1, 1), (p, p));
        assert_eq!(page_span(p - 1, 2), (0, 2 * p));
    }
}
