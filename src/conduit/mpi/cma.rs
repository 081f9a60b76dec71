//! The kernel's single copy to node peers (`process_vm_readv`/`writev`, as Open
//! MPI's vader and libfabric's shm use it): put and get to any mapped address of a
//! node peer, complete on return, without the peer's CPU.
//!
//! Guarantees: the node decides together at start-up whether every pair may use it
//! (Yama, containers); an address the peer has not mapped with the needed protection
//! is `FH_ERR_ACCESS`, never a fault and never a retry (Open MPI's one-sided path
//! over the same copy retries an `EFAULT` for ever).

use super::{
    shm::{all_on_node, node_members},
    MpiConduit, WORDS,
};
use crate::bail;
use crate::runtime::error::Result;
use crate::runtime::os;
use mpi::ffi;

/// Decide, together with the node, whether node peers reach each other with the
/// kernel's single copy: every rank probes every node peer's heap (a known mapped
/// address) and the node takes the minimum, so either all pairs use it or none.
/// `all` is the start-up table (`WORDS` per rank). Returns per-rank pids and a note.
pub(super) fn single_copy_peers(
    comm: ffi::MPI_Comm,
    rank: usize,
    all: &[u64],
) -> (Vec<i32>, String) {
    let size = all.len() / WORDS;
    let Ok((node, members)) = node_members(comm) else {
        return (
            vec![0; size],
            "DISABLED (cannot tell which ranks share this node)".into(),
        );
    };
    let mut ok_here = true;
    let mut why = String::new();
    for &r in members.iter().filter(|&&r| r != rank) {
        let (pid, heap) = (all[WORDS * r + 3] as i32, all[WORDS * r] as usize);
        let mut probe = 0u64;
        if let Err(e) = os::vm_copy(
            pid,
            os::VmDir::Read,
            heap,
            &mut probe as *mut u64 as usize,
            8,
        ) {
            ok_here = false;
            why = format!("rank {} (pid {}) not reachable: {:?}", r, pid, e);
            break;
        }
    }
    let ok_all = all_on_node(node, ok_here);
    let mut node = node;
    // SAFETY: the communicator node_members made for us.
    unsafe { ffi::MPI_Comm_free(&mut node) };
    if !ok_all {
        let why = if why.is_empty() {
            "a node peer cannot reach its peers".into()
        } else {
            why
        };
        return (
            vec![0; size],
            format!("DISABLED ({}; Yama ptrace_scope or a container without CAP_SYS_PTRACE?): node peers' memory outside the heap goes through firehose", why),
        );
    }
    let mut pids = vec![0; size];
    for &r in members.iter().filter(|&&r| r != rank) {
        pids[r] = all[WORDS * r + 3] as i32;
    }
    (
        pids,
        format!(
            "on for {} node peers (process_vm_readv/writev): put/get to any of their addresses without their CPU",
            members.len() - 1
        ),
    )
}

/// A put (`local` to `at`) or get (`at` to `local`) as a memory copy, complete on
/// return; the release fence keeps later stores (a notification flag) from becoming
/// visible first.
///
/// # Safety
/// Both ranges valid for `len` bytes.
pub(super) unsafe fn plain_copy(put: bool, at: usize, local: usize, len: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        if put {
            std::ptr::copy(local as *const u8, at as *mut u8, len)
        } else {
            std::ptr::copy(at as *const u8, local as *mut u8, len)
        }
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}

impl MpiConduit {
    /// The process id of `rank` when it is reached with the kernel's single copy.
    #[inline]
    pub fn single_copy_pid(&self, rank: usize) -> Option<i32> {
        if !self.cma_any {
            return None;
        }
        self.pid_for_copy(rank)
    }

    #[inline]
    pub(super) fn pid_for_copy(&self, rank: usize) -> Option<i32> {
        self.peer_pid(rank).filter(|_| self.cma)
    }

    /// The process id of node peer `rank` when this rank reaches it through the
    /// kernel (with or without `FH_CMA`).
    pub(super) fn peer_pid(&self, rank: usize) -> Option<i32> {
        match self.pids.get(rank) {
            Some(&p) if p != 0 => Some(p),
            _ => None,
        }
    }

    /// Copy to or from any address of node peer `rank` through the kernel, complete
    /// on return. Errors: `FH_ERR_ACCESS` for memory the peer does not have mapped
    /// with the needed protection (the peer is never touched or interrupted).
    pub fn single_copy(
        &self,
        rank: usize,
        put: bool,
        raddr: usize,
        local: usize,
        len: usize,
    ) -> Result<()> {
        if let Some(at) = self.seg_view(rank, raddr, len) {
            // SAFETY: `at` is the peer's shared heap segment mapped here, in range
            // (seg_view checked the whole span); `local` is valid for len bytes
            // (the callers' contract).
            unsafe { plain_copy(put, at, local, len) };
            return Ok(());
        }
        let Some(pid) = self.pid_for_copy(rank) else {
            bail!(
                Unsupported,
                "rank {} is not reached with the kernel's single copy",
                rank
            );
        };
        let dir = if put {
            os::VmDir::Write
        } else {
            os::VmDir::Read
        };
        os::vm_copy(pid, dir, raddr, local, len).map_err(|e| match e {
            os::VmError::Fault => {
                // The kernel does not say which side faulted: ours first.
                let (mine, theirs) = if put {
                    (os::Need::Read, os::Need::ReadWrite)
                } else {
                    (os::Need::ReadWrite, os::Need::Read)
                };
                if let Some(why) = os::Maps::read().why_not(local, len, mine) {
                    return crate::err!(
                        InvalidArg,
                        "the local {} buffer [{:#x}, +{}) of a {} rank {} is {} in this process",
                        if put { "source" } else { "destination" },
                        local,
                        len,
                        if put { "put to" } else { "get from" },
                        rank,
                        why
                    );
                }
                let need = theirs;
                let why = os::Maps::of_pid(pid)
                    .and_then(|m| m.why_not(raddr, len, need))
                    .unwrap_or("not mapped there with the protection the access needs");
                crate::err!(
                    Access,
                    "rank {} refused a {} [{:#x}, +{}): the memory is {} there",
                    rank,
                    if put { "put to" } else { "get from" },
                    raddr,
                    len,
                    why
                )
            }
            os::VmError::Gone => crate::err!(Transport, "rank {} (pid {}) has exited", rank, pid),
            other => crate::err!(
                Transport,
                "single copy to rank {} failed: {:?}",
                rank,
                other
            ),
        })
    }

    /// True when `rank` is a process of this node that no longer exists (only
    /// known for node peers reached with the single copy; others: false).
    pub fn peer_exited(&self, rank: usize) -> bool {
        let Some(pid) = self.peer_pid(rank) else {
            return false;
        };
        // SAFETY: signal 0 only checks that the process exists; nothing is sent.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// `fh_config_print`'s line on the single-copy path.
    pub fn single_copy_note(&self) -> &str {
        &self.cma_note
    }
}
