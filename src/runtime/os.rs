//! Operating-system facilities: page size, "is this range mapped", mlock/munlock,
//! anonymous mappings, and mappings shared with node peers by file descriptor.
//!
//! Guarantees: `is_mapped` never touches the memory it checks (it asks the kernel
//! with `mincore`), so a bogus address from a remote rank can be refused without
//! faulting. Pinning reports failures as errors; it never aborts.

use crate::runtime::error::Result;
use std::sync::OnceLock;

/// The system page size (cached).
/// An exclusive `flock` on `path` (created if missing), held until the file is
/// dropped: a lock between the processes of one machine.
pub fn lock_file(path: &std::path::Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| crate::err!(Transport, "cannot open {}: {}", path.display(), e))?;
    loop {
        // SAFETY: flock on a descriptor this File owns.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(crate::err!(Transport, "flock {}: {}", path.display(), e));
        }
    }
}

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

/// Protection a range needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Read,
    ReadWrite,
}

/// One line of `/proc/self/maps`: `[start, end)`, readable, writable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Area {
    start: usize,
    end: usize,
    r: bool,
    w: bool,
}

impl Area {
    fn allows(&self, need: Need) -> bool {
        self.r && (need == Need::Read || self.w)
    }
}

/// This process's mappings with their protections (`mincore` only says "mapped": a
/// `PROT_NONE` or read-only page passes it). Where the kernel has the
/// `PROCMAP_QUERY` ioctl (Linux 6.11), each lookup asks it for the one mapping that
/// covers an address (about 0.6 us, always current); elsewhere `/proc/self/maps` is
/// read once per `Maps` (tens of microseconds). Make one `Maps` per decision:
/// mappings change under us.
pub struct Maps(Source);

enum Source {
    Query(i32),
    Snapshot(Vec<Area>),
}

/// `struct procmap_query` of `<linux/fs.h>` (Linux 6.11).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}
/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = 0xc068_6611;
const _: () = assert!(std::mem::size_of::<ProcmapQuery>() == 104);

/// An open `/proc/self/maps` whose `PROCMAP_QUERY` works, or `None` (probed once).
fn query_fd() -> Option<i32> {
    static FD: OnceLock<Option<i32>> = OnceLock::new();
    *FD.get_or_init(|| {
        // SAFETY: open with a NUL-terminated path; the fd stays open for the process.
        let fd = unsafe {
            libc::open(
                c"/proc/self/maps".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        let probe = page_size as fn() -> usize as usize; // our own text: always mapped
        if query_one(fd, probe).is_some() {
            Some(fd)
        } else {
            // SAFETY: our own fd.
            unsafe { libc::close(fd) };
            None
        }
    })
}

fn query_one(fd: i32, addr: usize) -> Option<Area> {
    let mut q = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        query_addr: addr as u64,
        ..Default::default()
    };
    // SAFETY: the ioctl reads and writes exactly one ProcmapQuery (size set), which
    // lives on this frame; names and build ids are not requested (sizes 0).
    let rc = unsafe { libc::ioctl(fd, PROCMAP_QUERY as _, &mut q as *mut ProcmapQuery) };
    if rc != 0 || q.vma_start as usize > addr || q.vma_end as usize <= addr {
        return None;
    }
    Some(Area {
        start: q.vma_start as usize,
        end: (q.vma_end as usize).min(USER_TOP),
        r: q.vma_flags & 1 != 0,
        w: q.vma_flags & 2 != 0,
    })
}

impl Maps {
    /// Ready to answer for the current mappings.
    pub fn read() -> Maps {
        match query_fd() {
            Some(fd) => Maps(Source::Query(fd)),
            None => {
                let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
                Maps::parse(&text)
            }
        }
    }

    fn parse(text: &str) -> Maps {
        let mut v = Vec::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(range), Some(perms)) = (it.next(), it.next()) else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            else {
                continue;
            };
            let p = perms.as_bytes();
            if start >= USER_TOP || p.len() < 2 {
                continue; // [vsyscall] and other kernel-half entries: never for peers
            }
            v.push(Area {
                start,
                end: end.min(USER_TOP),
                r: p[0] == b'r',
                w: p[1] == b'w',
            });
        }
        v.sort_by_key(|x| x.start);
        Maps(Source::Snapshot(v))
    }

    /// The mapping that contains `addr`.
    fn area_at(&self, addr: usize) -> Option<Area> {
        if addr >= USER_TOP {
            return None;
        }
        match &self.0 {
            Source::Query(fd) => query_one(*fd, addr),
            Source::Snapshot(v) => {
                let i = v.partition_point(|x| x.end <= addr);
                v.get(i).filter(|x| x.start <= addr).copied()
            }
        }
    }

    /// True when every byte of `[addr, addr+len)` is mapped with `need`.
    pub fn allows(&self, addr: usize, len: usize, need: Need) -> bool {
        let len = len.max(1);
        addr.checked_add(len)
            .is_some_and(|end| self.run(addr, len, need, addr, end).is_some())
    }

    /// The run of adjacent mappings that all allow `need`, contain `[addr, addr+len)`,
    /// and reach out towards `[lo, hi)` (not further: the walk stops there);
    /// `None` if some byte of `[addr, addr+len)` is not allowed.
    fn run(
        &self,
        addr: usize,
        len: usize,
        need: Need,
        lo: usize,
        hi: usize,
    ) -> Option<(usize, usize)> {
        let end = addr.checked_add(len)?;
        let first = self.area_at(addr).filter(|x| x.allows(need))?;
        let (mut s, mut e) = (first.start, first.end);
        while s > lo {
            match self.area_at(s - 1) {
                Some(x) if x.end == s && x.allows(need) => s = x.start,
                _ => break,
            }
        }
        while e < hi.max(end) {
            match self.area_at(e) {
                Some(x) if x.start == e && x.allows(need) => e = x.end,
                _ => break,
            }
        }
        (end <= e).then_some((s, e))
    }

    /// Why `[addr, addr+len)` is not mapped with `need` (for messages): "not mapped",
    /// "PROT_NONE", "read-only" or "partly outside a mapping"; `None` if it is.
    pub fn why_not(&self, addr: usize, len: usize, need: Need) -> Option<&'static str> {
        if self.allows(addr, len, need) {
            return None;
        }
        let Some(first) = self.area_at(addr) else {
            return Some(if addr >= USER_TOP {
                "not user memory (a kernel address)"
            } else {
                "not mapped"
            });
        };
        if !first.r {
            return Some("PROT_NONE (no access)");
        }
        if need == Need::ReadWrite && !first.w {
            return Some("read-only");
        }
        if self.allows(addr, len, Need::Read) {
            return Some("read-only in part");
        }
        Some("partly outside a mapping (it runs past the end of the memory there)")
    }

    /// Another process's mappings (`/proc/PID/maps`; needs the right to read it, which
    /// the kernel's single copy to that process needs too). For messages only.
    pub fn of_pid(pid: i32) -> Option<Maps> {
        std::fs::read_to_string(format!("/proc/{}/maps", pid))
            .ok()
            .map(|t| Maps::parse(&t))
    }

    /// Within `[lo, hi)`: the largest range containing `[addr, addr+len)` that is
    /// mapped readable and writable (`true`), else readable (`false`); `None` when
    /// `[addr, addr+len)` is not even readable throughout.
    pub fn extent(
        &self,
        addr: usize,
        len: usize,
        lo: usize,
        hi: usize,
    ) -> Option<(usize, usize, bool)> {
        for (need, w) in [(Need::ReadWrite, true), (Need::Read, false)] {
            if let Some((s, e)) = self.run(addr, len.max(1), need, lo, hi) {
                return Some((s.max(lo), e.min(hi), w));
            }
        }
        None
    }
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

/// First address above the user half of the address space (x86-64 and AArch64 with
/// 48-bit virtual addresses; larger layouts only map above it on request).
pub const USER_TOP: usize = 1 << 47;

/// Which way the bytes go in a [`vm_copy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmDir {
    /// Local bytes into the other process.
    Write,
    /// The other process's bytes into local memory.
    Read,
}

/// Why a [`vm_copy`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmError {
    /// The remote range (or the local one) is not accessible that way: unmapped,
    /// protected, or a kernel address. Nothing was copied, or (a put into a range
    /// that becomes unwritable part-way) only a prefix was.
    Fault,
    /// The kernel does not let us reach that process (Yama, no CAP_SYS_PTRACE).
    Denied,
    /// The process is gone.
    Gone,
    /// Anything else (errno).
    Other(i32),
}

/// Copy `len` bytes between local `local` and `remote` in process `pid` with the
/// kernel's single copy (`process_vm_writev`/`readv`, cross-memory attach). The
/// kernel checks both ranges: a bad address is an error, never a fault, on either
/// side. A write that crosses a page boundary writes its last byte first, in the
/// same call, so a put that runs off the end of a mapping is refused whole instead of
/// changing a prefix; a read that does so fails (its local buffer may hold a prefix,
/// which the error tells the caller not to use).
pub fn vm_copy(
    pid: i32,
    dir: VmDir,
    remote: usize,
    local: usize,
    len: usize,
) -> std::result::Result<(), VmError> {
    if len == 0 {
        return Ok(());
    }
    if remote >= USER_TOP || remote.checked_add(len).map_or(true, |e| e > USER_TOP) {
        return Err(VmError::Fault);
    }
    let p = page_size();
    let first = remote & !(p - 1);
    let last = (remote + len - 1) & !(p - 1);
    let n = if first != last && dir == VmDir::Write {
        // The last byte first, in the same call: if the end of the range is not
        // writable the call stops before any byte changed; then the rest.
        let l = [
            libc::iovec {
                iov_base: (local + len - 1) as *mut libc::c_void,
                iov_len: 1,
            },
            libc::iovec {
                iov_base: local as *mut libc::c_void,
                iov_len: len - 1,
            },
        ];
        let r = [
            libc::iovec {
                iov_base: (remote + len - 1) as *mut libc::c_void,
                iov_len: 1,
            },
            libc::iovec {
                iov_base: remote as *mut libc::c_void,
                iov_len: len - 1,
            },
        ];
        // SAFETY: the kernel validates every range (EFAULT on a bad one); no Rust
        // reference to any of them is created.
        unsafe { libc::process_vm_writev(pid, l.as_ptr(), 2, r.as_ptr(), 2, 0) }
    } else {
        let l = libc::iovec {
            iov_base: local as *mut libc::c_void,
            iov_len: len,
        };
        let r = libc::iovec {
            iov_base: remote as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: as above.
        unsafe {
            match dir {
                VmDir::Write => libc::process_vm_writev(pid, &l, 1, &r, 1, 0),
                VmDir::Read => libc::process_vm_readv(pid, &l, 1, &r, 1, 0),
            }
        }
    };
    if n == len as isize {
        return Ok(());
    }
    Err(if n >= 0 { VmError::Fault } else { vm_errno() })
}

/// Most pieces one `process_vm_*` call takes (the kernel's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// [`vm_copy`] of many pieces `(remote, local, len)`: one system call per 1024 of
/// them. On an error, a prefix of the pieces may have been copied (the caller redoes
/// them one by one to learn which piece failed, and why).
pub fn vm_copy_v(
    pid: i32,
    dir: VmDir,
    pieces: &[(usize, usize, usize)],
) -> std::result::Result<(), VmError> {
    let mut l = Vec::with_capacity(pieces.len().min(IOV_MAX));
    let mut r = Vec::with_capacity(pieces.len().min(IOV_MAX));
    for chunk in pieces.chunks(IOV_MAX) {
        l.clear();
        r.clear();
        let mut total = 0usize;
        for &(remote, local, len) in chunk {
            if remote >= USER_TOP || remote.checked_add(len).map_or(true, |e| e > USER_TOP) {
                return Err(VmError::Fault);
            }
            l.push(libc::iovec {
                iov_base: local as *mut libc::c_void,
                iov_len: len,
            });
            r.push(libc::iovec {
                iov_base: remote as *mut libc::c_void,
                iov_len: len,
            });
            total += len;
        }
        // SAFETY: the kernel validates every range (EFAULT on a bad one); no Rust
        // reference to any of them is created; both lists hold `chunk.len()` entries.
        let n = unsafe {
            match dir {
                VmDir::Write => libc::process_vm_writev(
                    pid,
                    l.as_ptr(),
                    l.len() as libc::c_ulong,
                    r.as_ptr(),
                    r.len() as libc::c_ulong,
                    0,
                ),
                VmDir::Read => libc::process_vm_readv(
                    pid,
                    l.as_ptr(),
                    l.len() as libc::c_ulong,
                    r.as_ptr(),
                    r.len() as libc::c_ulong,
                    0,
                ),
            }
        };
        if n != total as isize {
            return Err(if n >= 0 { VmError::Fault } else { vm_errno() });
        }
    }
    Ok(())
}

fn vm_errno() -> VmError {
    match std::io::Error::last_os_error().raw_os_error().unwrap_or(0) {
        libc::EFAULT | libc::ENOMEM | libc::EINVAL => VmError::Fault,
        libc::EPERM | libc::EACCES | libc::ENOSYS => VmError::Denied,
        libc::ESRCH => VmError::Gone,
        e => VmError::Other(e),
    }
}

/// Let any process of this user attach to us with the kernel's single copy (Yama's
/// `ptrace_scope` 1 otherwise allows only descendants). Harmless without Yama.
pub fn allow_single_copy_peers() {
    // SAFETY: prctl with integer arguments; failure only means Yama is absent or
    // stricter, which the init probe then detects.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
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

/// Bytes available to us in the file system at `path` (None if it cannot be read).
pub fn tmpfs_available(path: &str) -> Option<u64> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// A read/write mapping, unmapped on drop: anonymous and private, or (`shared`) a
/// memory file other processes of this node can map too, whose descriptor it holds.
pub struct Mapping {
    addr: usize,
    len: usize,
    /// The memory file of a shared mapping (closed on drop, after the unmap).
    fd: Option<std::os::fd::OwnedFd>,
}

impl Mapping {
    pub fn new(len: usize) -> Result<Mapping> {
        let len = page_span(0, len).1.max(page_size());
        Mapping::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
    }

    /// `mmap` of `len` read/write bytes with `flags` (of `fd`, or -1), anywhere.
    fn map(len: usize, flags: i32, fd: i32) -> Result<Mapping> {
        // SAFETY: no fixed address, so the kernel picks a place that overlaps nothing
        // of ours; `fd` is -1 (anonymous) or a descriptor the caller holds open.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!(
                NoMemory,
                "mmap of {} bytes failed: {}",
                len,
                std::io::Error::last_os_error()
            );
        }
        Ok(Mapping {
            addr: p as usize,
            len,
            fd: None,
        })
    }
    /// A mapping of at least `len` bytes that another process of this node can map
    /// too: a memory file (`memfd_create`) sealed against shrinking and growing, so
    /// a process that maps it can never touch a page past its end (SIGBUS), whatever
    /// the creator does later. Peers open it as `/proc/<pid>/fd/<fd>`
    /// ([`Mapping::of_peer`]), which the kernel allows to processes that may read the
    /// creator's memory anyway (the permission the single copy needs).
    pub fn shared(len: usize) -> Result<Mapping> {
        use std::os::fd::FromRawFd;
        let len = page_span(0, len).1.max(page_size());
        let fail = |what: &str| {
            err!(
                NoMemory,
                "{} for a shared segment of {} bytes failed: {}",
                what,
                len,
                std::io::Error::last_os_error()
            )
        };
        // SAFETY: a constant C string and flags; the returned descriptor is owned below.
        let raw = unsafe {
            libc::memfd_create(
                c"firehose-heap".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(fail("memfd_create"));
        }
        // SAFETY: `raw` is a new descriptor nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: plain calls on the descriptor we own.
        if unsafe { libc::ftruncate(raw, len as libc::off_t) } != 0 {
            return Err(fail("ftruncate"));
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(fail("sealing"));
        }
        let mut map = Mapping::of_fd(raw, len).map_err(|_| fail("mmap"))?;
        map.fd = Some(fd);
        Ok(map)
    }

    /// The memory file's descriptor of a [`Mapping::shared`] mapping.
    pub fn fd(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// `len` bytes of the open file `fd`, shared (writes are seen by every process
    /// that maps the file); the caller keeps `fd` (the mapping does not need it).
    fn of_fd(fd: i32, len: usize) -> Result<Mapping> {
        Mapping::map(len, libc::MAP_SHARED, fd)
    }

    /// Map the [`Mapping::shared`] mapping that process `pid` holds open as descriptor `fd`,
    /// `len` bytes. The peer wrote `fd` and `len` itself, so nothing is trusted: the
    /// file must be a regular file of at least `len` bytes, sealed against shrinking
    /// (else a later truncation would make our accesses fault).
    pub fn of_peer(pid: i32, fd: u64, len: usize) -> Result<Mapping> {
        use std::os::fd::AsRawFd;
        if len == 0 || len % page_size() != 0 || fd > i32::MAX as u64 {
            bail!(
                InvalidArg,
                "fd {} of {} bytes is no shared segment",
                fd,
                len
            );
        }
        let path = format!("/proc/{}/fd/{}", pid, fd);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| err!(Access, "opening {}: {}", path, e))?;
        let meta = f.metadata().map_err(|e| err!(Access, "{}: {}", path, e))?;
        // SAFETY: F_GET_SEALS on a descriptor we hold.
        let seals = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GET_SEALS) };
        if !meta.is_file()
            || meta.len() < len as u64
            || seals < 0
            || seals & libc::F_SEAL_SHRINK == 0
        {
            bail!(
                Access,
                "{} is not a sealed shared segment of {} bytes",
                path,
                len
            );
        }
        Mapping::of_fd(f.as_raw_fd(), len)
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
        // Tests run in parallel: another thread may map the freed range again at
        // once, so a few tries (one unmapped report is the proof).
        let unmapped_seen = (0..8).any(|_| {
            let m = Mapping::new(3 * page_size()).unwrap();
            assert!(is_mapped(m.addr(), m.len()));
            let (a, l) = (m.addr(), m.len());
            drop(m);
            !is_mapped(a, l)
        });
        assert!(unmapped_seen, "an unmapped range must be reported as such");
    }

    #[test]
    fn page_span_rounds_out() {
        let p = page_size();
        assert_eq!(page_span(p + 1, 1), (p, p));
        assert_eq!(page_span(p - 1, 2), (0, 2 * p));
    }
}

#[cfg(test)]
mod maps_tests {
    use super::*;

    const TEXT: &str = "\
1000-3000 rw-p 00000000 00:00 0
3000-4000 r--p 00000000 00:00 0
4000-5000 ---p 00000000 00:00 0
5000-6000 rw-p 00000000 00:00 0
8000-9000 rw-p 00000000 00:00 0 [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
";

    #[test]
    fn protections_are_honoured() {
        let m = Maps::parse(TEXT);
        assert!(m.allows(0x1000, 0x2000, Need::ReadWrite));
        assert!(m.allows(0x2ff8, 0x10, Need::Read));
        assert!(
            !m.allows(0x2ff8, 0x10, Need::ReadWrite),
            "straddles into read-only"
        );
        assert!(!m.allows(0x4000, 8, Need::Read), "PROT_NONE");
        assert!(
            !m.allows(0x5ff8, 0x10, Need::Read),
            "runs off the end of a mapping"
        );
        assert!(!m.allows(0x7000, 8, Need::Read), "never mapped");
        assert!(
            !m.allows(0xffff_ffff_ff60_0000, 8, Need::Read),
            "kernel half"
        );
        assert_eq!(
            m.extent(0x1800, 8, 0, 0x10000),
            Some((0x1000, 0x3000, true))
        );
        assert_eq!(
            m.extent(0x3800, 8, 0, 0x10000),
            Some((0x1000, 0x4000, false))
        );
        assert_eq!(
            m.extent(0x3800, 8, 0x3000, 0x3800 + 8),
            Some((0x3000, 0x3808, false))
        );
        assert_eq!(m.extent(0x4800, 8, 0, 0x10000), None);
    }

    #[test]
    fn own_mappings_are_seen() {
        for m in [
            Maps::read(),
            Maps::parse(&std::fs::read_to_string("/proc/self/maps").unwrap()),
        ] {
            own_mappings(m);
        }
    }

    fn own_mappings(m: Maps) {
        let x = Box::new(5u64);
        assert!(m.allows(&*x as *const u64 as usize, 8, Need::ReadWrite));
        static RO: [u8; 16] = [1; 16];
        assert!(m.allows(RO.as_ptr() as usize, 16, Need::Read));
        assert!(!m.allows(RO.as_ptr() as usize, 16, Need::ReadWrite));
        assert!(!m.allows(8, 8, Need::Read));
    }
}
