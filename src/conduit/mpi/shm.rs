//! The node-shared mapping: the library heaps of the ranks on one node in one MPI
//! shared-memory window, so a node peer's heap is plain memory here (GASNet's PSHM).
//!
//! Guarantees: see [`NodeMapping`]. Room in /dev/shm is checked with the node before
//! the collective allocation (a full tmpfs gives SIGBUS on first touch, not an
//! error); without room the node's ranks fall back together to MPI RMA.

use super::{boot::check, mib, H};
use crate::bail;
use crate::runtime::error::Result;
use crate::runtime::os;
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// The library heaps of the ranks on this node, in one MPI shared-memory window
/// (`MPI_Win_allocate_shared` on the node's communicator), so each rank sees the
/// others' heaps in its own address space and a put or get to them is a memory copy
/// (GASNet's PSHM idea). The heap window of `MPI_Win_create` is still created over
/// the same memory for ranks on other nodes.
///
/// Guarantees: `base` is page-aligned and `[base, base + len)` lies in this rank's
/// segment; `views[i]` is where node member `members[i]`'s segment starts in our
/// address space. Freed once, at finalize, after the windows over it.
pub(super) struct NodeMapping {
    pub(super) win: H<ffi::MPI_Win>,
    pub(super) node: H<ffi::MPI_Comm>,
    pub(super) raw: usize,
    pub(super) base: usize,
    pub(super) len: usize,
    /// Where each member's directory of further heap segments (`segs`) starts,
    /// from the start of its heap (the same for every member).
    pub(super) dir_off: usize,
    /// Ranks (of the conduit's communicator) on this node, and their segments here.
    pub(super) members: Vec<usize>,
    pub(super) views: Vec<usize>,
}

impl NodeMapping {
    /// `max`: at most this many ranks per mapping (0: the whole node), as if the
    /// node were several (`FH_SHM_MAX_RANKS`). Each segment holds the heap, then
    /// `rings(members)` bytes (the rank's AM receive ring), then the directory of the
    /// rank's further heap segments (`segs::DIR_BYTES`); ring and directory are zeroed
    /// here, and the segment is page-aligned.
    pub(super) fn new(
        comm: ffi::MPI_Comm,
        heap_size: usize,
        max: usize,
        rings: impl Fn(usize) -> usize,
    ) -> Result<NodeMapping> {
        let page = os::page_size();
        let len = os::page_span(0, heap_size).1.max(page);
        let (node, members) = node_members_max(comm, max)?;
        let ring = rings(members.len()).next_multiple_of(64);
        let seg = len + page + ring + super::segs::DIR_BYTES;
        // SAFETY: (whole block) plain MPI calls on a valid communicator with
        // out-parameters that live on this stack frame; every handle created is
        // either returned (and freed at finalize) or freed on the error path.
        unsafe {
            let free_node = |mut n: ffi::MPI_Comm| {
                ffi::MPI_Comm_free(&mut n);
            };
            let members_n = members.len() as c_int;
            if let Err(e) = room_on_node(node, seg as u64 * members_n as u64 * 2) {
                free_node(node);
                return Err(e);
            }
            let mut info: ffi::MPI_Info = std::mem::zeroed();
            ffi::MPI_Info_create(&mut info);
            ffi::MPI_Info_set(info, c"alloc_shared_noncontig".as_ptr(), c"true".as_ptr());
            let mut raw: *mut c_void = std::ptr::null_mut();
            let mut win: ffi::MPI_Win = std::mem::zeroed();
            let rc = ffi::MPI_Win_allocate_shared(
                seg as ffi::MPI_Aint,
                1,
                info,
                node,
                &mut raw as *mut *mut c_void as *mut c_void,
                &mut win,
            );
            ffi::MPI_Info_free(&mut info);
            if let Err(e) = check(rc, || "MPI_Win_allocate_shared (library heaps)".into()) {
                free_node(node);
                return Err(e);
            }
            ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN);
            let raw = raw as usize;
            let base = (raw + page - 1) & !(page - 1);
            // Where the segments of this node's ranks are here.
            let n = members_n;
            let mut views = Vec::with_capacity(n as usize);
            let mut bad = None;
            for q in 0..n {
                let (mut sz, mut du, mut p): (ffi::MPI_Aint, c_int, *mut c_void) =
                    (0, 0, std::ptr::null_mut());
                let rc = ffi::MPI_Win_shared_query(
                    win,
                    q,
                    &mut sz,
                    &mut du,
                    &mut p as *mut *mut c_void as *mut c_void,
                );
                if rc != ffi::MPI_SUCCESS as c_int || (sz as usize) < seg {
                    bad.get_or_insert(crate::err!(
                        Mpi,
                        "MPI_Win_shared_query({}) gave {} bytes",
                        q,
                        sz
                    ));
                }
                views.push(p as usize);
            }
            if let Some(e) = bad {
                ffi::MPI_Win_free(&mut win);
                free_node(node);
                return Err(e);
            }
            // Our ring and directory start empty before any peer can know where
            // they are (the start-up exchange comes after).
            std::ptr::write_bytes((base + len) as *mut u8, 0, ring + super::segs::DIR_BYTES);
            Ok(NodeMapping {
                win: H(win),
                node: H(node),
                raw,
                base,
                len,
                dir_off: len + ring,
                members,
                views,
            })
        }
    }

    /// # Safety
    /// Once, after no window over the heap remains and no access to it can come.
    pub(super) unsafe fn free(&self, note: &mut impl FnMut(Result<()>)) {
        let (mut w, mut c) = (self.win.0, self.node.0);
        // SAFETY: handles we created; the caller's contract says nobody uses them.
        unsafe {
            note(check(ffi::MPI_Win_free(&mut w), || {
                "MPI_Win_free (shared heaps)".into()
            }));
            note(check(ffi::MPI_Comm_free(&mut c), || {
                "MPI_Comm_free (node)".into()
            }));
        }
    }
}

/// Whether `ok_here` holds on every rank of `node` (collective over `node`, every
/// rank of it calls; false when the reduction itself fails).
pub(super) fn all_on_node(node: ffi::MPI_Comm, ok_here: bool) -> bool {
    let ok_here = c_int::from(ok_here);
    let mut ok_all: c_int = 0;
    // SAFETY: one int in, one out, on the node's communicator (every node rank calls).
    let rc = unsafe {
        ffi::PMPI_Allreduce(
            &ok_here as *const c_int as *const c_void,
            &mut ok_all as *mut c_int as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            ffi::RSMPI_MIN,
            node,
        )
    };
    rc == ffi::MPI_SUCCESS as c_int && ok_all != 0
}

/// Shared segments live in a tmpfs (/dev/shm): one that is too small gives SIGBUS on
/// first touch, not an error, so check the room first. Every rank of the node must
/// make the same choice (the allocation is collective), hence the reduction on the
/// node's communicator.
fn room_on_node(node: ffi::MPI_Comm, need: u64) -> Result<()> {
    let room = os::tmpfs_available("/dev/shm").unwrap_or(u64::MAX);
    if !all_on_node(node, room >= need) {
        bail!(
            NoMemory,
            "node-shared heaps need {} in /dev/shm, {} is free on some rank of this node: \
             enlarge /dev/shm, or set FH_SHM=0",
            mib(need),
            mib(room)
        );
    }
    Ok(())
}

/// The ranks of `comm` that share this node (`MPI_COMM_TYPE_SHARED`), and the node
/// communicator (the caller frees it).
pub(super) fn node_members(comm: ffi::MPI_Comm) -> Result<(ffi::MPI_Comm, Vec<usize>)> {
    node_members_max(comm, 0)
}

/// As [`node_members`], the node cut into groups of at most `max` consecutive node
/// ranks when `max > 0` (GASNet's supernode limit: tests and tuning treat one machine
/// as several nodes).
fn node_members_max(comm: ffi::MPI_Comm, max: usize) -> Result<(ffi::MPI_Comm, Vec<usize>)> {
    // SAFETY: plain MPI calls with out-parameters on this frame; groups are freed.
    unsafe {
        let mut node: ffi::MPI_Comm = std::mem::zeroed();
        check(
            ffi::MPI_Comm_split_type(
                comm,
                ffi::RSMPI_COMM_TYPE_SHARED as c_int,
                0,
                ffi::RSMPI_INFO_NULL,
                &mut node,
            ),
            || "MPI_Comm_split_type(SHARED)".into(),
        )?;
        if max > 0 {
            let mut r: c_int = 0;
            ffi::MPI_Comm_rank(node, &mut r);
            let mut part: ffi::MPI_Comm = std::mem::zeroed();
            let rc = ffi::MPI_Comm_split(node, r / max as c_int, r, &mut part);
            ffi::MPI_Comm_free(&mut node);
            check(rc, || "MPI_Comm_split (FH_SHM_MAX_RANKS)".into())?;
            node = part;
        }
        let mut n: c_int = 0;
        ffi::MPI_Comm_size(node, &mut n);
        let (mut g_node, mut g_comm) = (std::mem::zeroed(), std::mem::zeroed());
        ffi::MPI_Comm_group(node, &mut g_node);
        ffi::MPI_Comm_group(comm, &mut g_comm);
        let local: Vec<c_int> = (0..n).collect();
        let mut members = vec![0 as c_int; n as usize];
        let rc =
            ffi::MPI_Group_translate_ranks(g_node, n, local.as_ptr(), g_comm, members.as_mut_ptr());
        ffi::MPI_Group_free(&mut g_node);
        ffi::MPI_Group_free(&mut g_comm);
        if let Err(e) = check(rc, || "MPI_Group_translate_ranks".into()) {
            ffi::MPI_Comm_free(&mut node);
            return Err(e);
        }
        Ok((node, members.iter().map(|&m| m as usize).collect()))
    }
}
