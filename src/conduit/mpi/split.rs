//! Contexts on the parts of a split communicator, created one part at a time.
//!
//! Guarantees: `fh_split` gives every rank of the parent a context on its part, and
//! no two parts create their MPI windows at the same time. Open MPI 4.1's one-sided
//! component names its node-shared segment after the communicator's context id, which
//! the parts of one `MPI_Comm_split` share (ompi#9492): two parts on one node that
//! create windows concurrently remove each other's segment (`MPI_ERR_WIN`, or a crash).
//! So the parts take turns, in increasing colour, with a barrier of the parent between
//! turns; the cost is one barrier per part. Parts of *different* parents that split
//! at the same time (nested teams: every half splits again) collide the same way, and
//! no parent sees them all: a part whose ranks all share this node also takes a lock
//! of the job on this machine (`NodeTurn`, a `flock`) for its set-up. A part spread over several
//! nodes does not (it could deadlock with another one holding the other node's lock).

use super::boot::check;
use super::{agree, comm_from_fint, MpiConduit};
use crate::conduit::Conduit;
use crate::runtime::config::Resolved;
use crate::runtime::error::Result;
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// Every rank's colour, from the parent (which all of it calls this with).
fn colours(parent: ffi::MPI_Comm, colour: c_int) -> Result<Vec<c_int>> {
    let mut n: c_int = 0;
    // SAFETY: a valid communicator and an out-int.
    check(unsafe { ffi::MPI_Comm_size(parent, &mut n) }, || {
        "MPI_Comm_size".into()
    })?;
    let mut all = vec![0 as c_int; n as usize];
    // SAFETY: one int in, `n` ints out.
    let rc = unsafe {
        ffi::PMPI_Allgather(
            &colour as *const c_int as *const c_void,
            1,
            ffi::RSMPI_INT32_T,
            all.as_mut_ptr() as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            parent,
        )
    };
    check(rc, || "MPI_Allgather (colours)".into())?;
    Ok(all)
}

/// The file whose lock is the turn. Open MPI names a window's segment inside the
/// job's session directory, so only parts of one job collide: under `mpirun` the lock
/// lives there (one per job, removed with it), and jobs of one user running at the
/// same time do not wait for each other's splits. Elsewhere it is one per user
/// and machine.
fn turn_file() -> std::path::PathBuf {
    match std::env::var_os("OMPI_MCA_orte_jobfam_session_dir") {
        Some(dir) if std::path::Path::new(&dir).is_dir() => {
            std::path::Path::new(&dir).join("firehose-split.lock")
        }
        _ => std::env::temp_dir().join(format!(
            "firehose-split-{}.lock",
            // SAFETY: getuid cannot fail.
            unsafe { libc::getuid() }
        )),
    }
}

/// A turn for one part's set-up, taken by the part's first rank while
/// the others wait for it (held only when the whole part is on this node).
struct NodeTurn(Option<std::fs::File>);

impl NodeTurn {
    fn take(part: ffi::MPI_Comm) -> Result<NodeTurn> {
        let (mut node, members) = super::shm::node_members(part)?;
        // SAFETY: the node communicator node_members made for us.
        unsafe { ffi::MPI_Comm_free(&mut node) };
        let mut n: c_int = 0;
        let mut me: c_int = 0;
        // SAFETY: a valid communicator and out-ints.
        unsafe {
            ffi::MPI_Comm_size(part, &mut n);
            ffi::MPI_Comm_rank(part, &mut me);
        }
        if members.len() != n as usize || n < 2 {
            return Ok(NodeTurn(None));
        }
        let path = turn_file();
        // Without the lock file (no writable temporary directory) the part goes on
        // without a turn, as a part spread over nodes does.
        let lock = if me == 0 {
            crate::runtime::os::lock_file(&path).ok()
        } else {
            None
        };
        // SAFETY: every rank of the part calls it here.
        check(unsafe { ffi::PMPI_Barrier(part) }, || {
            "MPI_Barrier (part)".into()
        })?;
        Ok(NodeTurn(lock))
    }

    /// Every rank of the part is done setting up; the first one gives the turn back.
    fn give_back(self, part: ffi::MPI_Comm) {
        // SAFETY: every rank of the part calls it here.
        let _ = unsafe { ffi::PMPI_Barrier(part) };
        drop(self.0);
    }
}

/// Collective over `parent_f`: split it by `colour` (ordered by `key`, then parent
/// rank) and build this rank's part's conduit, the parts taking turns.
pub fn launch<S: Resolved>(
    parent_f: c_int,
    colour: c_int,
    key: c_int,
    cfg: Result<S>,
    max_frame: fn(&S) -> usize,
) -> Result<(std::sync::Arc<dyn Conduit>, S)> {
    let parent = comm_from_fint(parent_f);
    let all = colours(parent, colour)?;
    if let Some(r) = all.iter().position(|&c| c < 0) {
        crate::bail!(
            InvalidArg,
            "fh_split: colour {} of rank {r} is negative (every rank needs a part)",
            all[r]
        );
    }
    // SAFETY: a handle is plain data; MPI_Comm_split writes it below.
    let mut part: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
    // SAFETY: a valid communicator; the new one is written to a local.
    let rc = unsafe { ffi::MPI_Comm_split(parent, colour, key, &mut part) };
    check(rc, || "MPI_Comm_split".into())?;
    let mut order = all.clone();
    order.sort_unstable();
    order.dedup();
    let mut cfg = Some(cfg);
    let mut made = None;
    for c in order {
        if c == colour {
            let cfg = cfg.take().expect("one turn per colour");
            let turn = NodeTurn::take(part)?;
            made = Some(agree::settings(part, &cfg).and(cfg).and_then(|cfg| {
                MpiConduit::new(part, cfg.core(), max_frame(&cfg)).map(|c| (c, cfg))
            }));
            turn.give_back(part);
        }
        // SAFETY: the parent, which every rank of it reaches here with.
        let rc = unsafe { ffi::PMPI_Barrier(parent) };
        check(rc, || "MPI_Barrier (between parts)".into())?;
    }
    // SAFETY: the conduit keeps its own duplicates; this handle is ours to free.
    unsafe { ffi::MPI_Comm_free(&mut part) };
    let (c, cfg) = made.expect("our colour is among the colours")?;
    Ok((std::sync::Arc::new(c), cfg))
}
