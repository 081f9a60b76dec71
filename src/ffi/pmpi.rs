//! PMPI interposition: blocking MPI calls keep serving the library.
//!
//! `libfirehose` defines the blocking MPI calls below. A program linked with
//! `pkg-config --libs firehose` (which puts `-lfirehose` before the MPI libraries)
//! resolves `MPI_Barrier` etc. to these definitions; each one starts the call's
//! non-blocking form (`PMPI_Ibarrier`, `PMPI_Irecv`, ...) and drives it with
//! `PMPI_Test` plus the library's poll (`api::progress`), so a rank waiting in MPI
//! still answers firehose moves, AMs, invalidations and hand-offs. Why this and not a
//! progress thread: it works at every thread level, including the `MPI_THREAD_SINGLE`
//! of a plain `MPI_Init`, and costs nothing while no context is live.
//!
//! Guarantees:
//! - Same semantics as the MPI call: the same buffers, status and error code; the
//!   wrappers only add polling while MPI has not completed.
//! - Straight to MPI (one relaxed load, one thread-local read) when no context is
//!   served (`FH_MPI_PROGRESS=0`, none live) or when the caller is the library itself
//!   (its own MPI calls, AM handlers that call MPI, the progress thread).
//! - No panic crosses: the poll catches them (`api::progress::serve`).
//!
//! Fortran callers are covered by `pmpi_fortran`. A profiling tool that also defines
//! these symbols and is linked *before* `-lfirehose` takes them first; it then calls
//! `PMPI_*` and bypasses this file (README, "Progress and MPI interoperability").

use crate::api::progress;
use crate::api::progress::{drive, drive_request};
use mpi::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Status, MPI_Win};
use std::os::raw::{c_int, c_void};

const SUCCESS: c_int = ffi::MPI_SUCCESS as c_int;

fn serve() -> usize {
    progress::serve()
}

/// Start `$nb` (the non-blocking form, called with `args..., &mut req`) and drive it.
macro_rules! nb_then_drive {
    ($nb:ident ( $($a:expr),* )) => {{
        let mut req = ffi::RSMPI_REQUEST_NULL;
        // SAFETY: the caller's arguments are passed to MPI unchanged, as the blocking
        // call would have passed them; req lives on this frame until driven to
        // completion below.
        let rc = unsafe { ffi::$nb($($a,)* &mut req) };
        if rc != SUCCESS {
            return rc;
        }
        // SAFETY: req was just started; the status is ignored.
        unsafe { drive_request(&mut req, ffi::RSMPI_STATUS_IGNORE, &mut serve) }
    }};
}

/// Define a blocking collective or point-to-point call without a status as its
/// non-blocking form plus `drive`.
macro_rules! interpose {
    ($( $name:ident => $pmpi:ident, $nb:ident ( $($a:ident : $t:ty),* ); )*) => {$(
        /// Interposed: serves the library while MPI completes the call.
        ///
        /// # Safety
        /// As the MPI call of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            if !progress::wanted() {
                // SAFETY: the caller's arguments, unchanged.
                return unsafe { ffi::$pmpi($($a),*) };
            }
            nb_then_drive!($nb($($a),*))
        }
    )*};
}

type Buf = *const c_void;
type BufMut = *mut c_void;
type Counts = *const c_int;

interpose! {
    MPI_Barrier => PMPI_Barrier, PMPI_Ibarrier(comm: MPI_Comm);
    MPI_Send => PMPI_Send, PMPI_Isend(buf: Buf, count: c_int, dt: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm);
    MPI_Ssend => PMPI_Ssend, PMPI_Issend(buf: Buf, count: c_int, dt: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm);
    MPI_Bcast => PMPI_Bcast, PMPI_Ibcast(buf: BufMut, count: c_int, dt: MPI_Datatype, root: c_int, comm: MPI_Comm);
    MPI_Reduce => PMPI_Reduce, PMPI_Ireduce(s: Buf, r: BufMut, count: c_int, dt: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm);
    MPI_Allreduce => PMPI_Allreduce, PMPI_Iallreduce(s: Buf, r: BufMut, count: c_int, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm);
    MPI_Gather => PMPI_Gather, PMPI_Igather(s: Buf, sc: c_int, st: MPI_Datatype, r: BufMut, rc: c_int, rt: MPI_Datatype, root: c_int, comm: MPI_Comm);
    MPI_Gatherv => PMPI_Gatherv, PMPI_Igatherv(s: Buf, sc: c_int, st: MPI_Datatype, r: BufMut, rcs: Counts, displs: Counts, rt: MPI_Datatype, root: c_int, comm: MPI_Comm);
    MPI_Scatter => PMPI_Scatter, PMPI_Iscatter(s: Buf, sc: c_int, st: MPI_Datatype, r: BufMut, rc: c_int, rt: MPI_Datatype, root: c_int, comm: MPI_Comm);
    MPI_Scatterv => PMPI_Scatterv, PMPI_Iscatterv(s: Buf, scs: Counts, displs: Counts, st: MPI_Datatype, r: BufMut, rc: c_int, rt: MPI_Datatype, root: c_int, comm: MPI_Comm);
    MPI_Allgather => PMPI_Allgather, PMPI_Iallgather(s: Buf, sc: c_int, st: MPI_Datatype, r: BufMut, rc: c_int, rt: MPI_Datatype, comm: MPI_Comm);
    MPI_Allgatherv => PMPI_Allgatherv, PMPI_Iallgatherv(s: Buf, sc: c_int, st: MPI_Datatype, r: BufMut, rcs: Counts, displs: Counts, rt: MPI_Datatype, comm: MPI_Comm);
    MPI_Alltoall => PMPI_Alltoall, PMPI_Ialltoall(s: Buf, sc: c_int, st: MPI_Datatype, r: BufMut, rc: c_int, rt: MPI_Datatype, comm: MPI_Comm);
    MPI_Alltoallv => PMPI_Alltoallv, PMPI_Ialltoallv(s: Buf, scs: Counts, sd: Counts, st: MPI_Datatype, r: BufMut, rcs: Counts, rd: Counts, rt: MPI_Datatype, comm: MPI_Comm);
    MPI_Reduce_scatter => PMPI_Reduce_scatter, PMPI_Ireduce_scatter(s: Buf, r: BufMut, rcs: Counts, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm);
    MPI_Reduce_scatter_block => PMPI_Reduce_scatter_block, PMPI_Ireduce_scatter_block(s: Buf, r: BufMut, rc: c_int, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm);
    MPI_Scan => PMPI_Scan, PMPI_Iscan(s: Buf, r: BufMut, count: c_int, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm);
    MPI_Exscan => PMPI_Exscan, PMPI_Iexscan(s: Buf, r: BufMut, count: c_int, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm);
}

/// Interposed: serves the library while MPI completes the receive.
///
/// # Safety
/// As `MPI_Recv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: BufMut,
    count: c_int,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: (whole body) the caller's arguments, unchanged; req lives on this frame.
    unsafe {
        if !progress::wanted() {
            return ffi::PMPI_Recv(buf, count, dt, src, tag, comm, status);
        }
        let mut req = ffi::RSMPI_REQUEST_NULL;
        let rc = ffi::PMPI_Irecv(buf, count, dt, src, tag, comm, &mut req);
        if rc != SUCCESS {
            return rc;
        }
        drive_request(&mut req, status, &mut serve)
    }
}

/// Interposed: the receive and the send both progress while the library is served.
///
/// # Safety
/// As `MPI_Sendrecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sbuf: Buf,
    scount: c_int,
    stype: MPI_Datatype,
    dest: c_int,
    stag: c_int,
    rbuf: BufMut,
    rcount: c_int,
    rtype: MPI_Datatype,
    src: c_int,
    rtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: (whole body) the caller's arguments, unchanged; both requests live on
    // this frame until driven to completion.
    unsafe {
        if !progress::wanted() {
            return ffi::PMPI_Sendrecv(
                sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, status,
            );
        }
        let mut rreq = ffi::RSMPI_REQUEST_NULL;
        let rc = ffi::PMPI_Irecv(rbuf, rcount, rtype, src, rtag, comm, &mut rreq);
        if rc != SUCCESS {
            return rc;
        }
        let mut sreq = ffi::RSMPI_REQUEST_NULL;
        let rc = ffi::PMPI_Isend(sbuf, scount, stype, dest, stag, comm, &mut sreq);
        if rc != SUCCESS {
            ffi::PMPI_Cancel(&mut rreq);
            ffi::PMPI_Request_free(&mut rreq);
            return rc;
        }
        let rc = drive_request(&mut sreq, ffi::RSMPI_STATUS_IGNORE, &mut serve);
        let rc2 = drive_request(&mut rreq, status, &mut serve);
        if rc != SUCCESS {
            rc
        } else {
            rc2
        }
    }
}

/// Interposed: `PMPI_Iprobe` until a message matches.
///
/// # Safety
/// As `MPI_Probe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    if !progress::wanted() {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { ffi::PMPI_Probe(src, tag, comm, status) };
    }
    drive(
        || {
            let mut flag = 0;
            // SAFETY: the caller's arguments, unchanged.
            let rc = unsafe { ffi::PMPI_Iprobe(src, tag, comm, &mut flag, status) };
            (rc, flag != 0)
        },
        &mut serve,
    )
}

/// Interposed: `PMPI_Test` until done.
///
/// # Safety
/// As `MPI_Wait`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(req: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    if !progress::wanted() {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { ffi::PMPI_Wait(req, status) };
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { drive_request(req, status, &mut serve) }
}

/// Interposed: `PMPI_Testall` until done.
///
/// # Safety
/// As `MPI_Waitall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    n: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> c_int {
    if !progress::wanted() {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { ffi::PMPI_Waitall(n, reqs, statuses) };
    }
    drive(
        || {
            let mut flag = 0;
            // SAFETY: the caller's arguments, unchanged.
            let rc = unsafe { ffi::PMPI_Testall(n, reqs, &mut flag, statuses) };
            (rc, flag != 0)
        },
        &mut serve,
    )
}

/// Interposed: `PMPI_Testany` until one completes (or none is active).
///
/// # Safety
/// As `MPI_Waitany`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    n: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    if !progress::wanted() {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { ffi::PMPI_Waitany(n, reqs, index, status) };
    }
    drive(
        || {
            let mut flag = 0;
            // SAFETY: the caller's arguments, unchanged.
            let rc = unsafe { ffi::PMPI_Testany(n, reqs, index, &mut flag, status) };
            (rc, flag != 0)
        },
        &mut serve,
    )
}

/// Interposed: `PMPI_Testsome` until at least one completes (or none is active).
///
/// # Safety
/// As `MPI_Waitsome`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    n: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    if !progress::wanted() {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { ffi::PMPI_Waitsome(n, reqs, outcount, indices, statuses) };
    }
    drive(
        || {
            // SAFETY: the caller's arguments, unchanged; outcount is valid (MPI rule).
            let rc = unsafe { ffi::PMPI_Testsome(n, reqs, outcount, indices, statuses) };
            // SAFETY: as above.
            (rc, unsafe { *outcount } != 0)
        },
        &mut serve,
    )
}

/// Interposed: when the window's ranks are exactly a served context's, they first
/// meet in a serving barrier (a rank that is still waiting for our answer before it
/// can reach the fence gets it), then fence.
///
/// # Safety
/// As `MPI_Win_fence`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Win_fence(assert: c_int, win: MPI_Win) -> c_int {
    if progress::wanted() {
        let rc =
            progress::first_serving_barrier(&mut |c| progress::same_ranks_as(c, win), &mut serve);
        if rc != SUCCESS {
            return rc;
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { ffi::PMPI_Win_fence(assert, win) }
}

macro_rules! serve_first {
    ($( $name:ident => $pmpi:ident ( $($a:ident : $t:ty),* ); )*) => {$(
        /// Interposed: serves the library once, then the MPI call (which completes
        /// without help from the application at the target).
        ///
        /// # Safety
        /// As the MPI call of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            if progress::wanted() {
                serve();
            }
            // SAFETY: the caller's arguments, unchanged.
            unsafe { ffi::$pmpi($($a),*) }
        }
    )*};
}

serve_first! {
    MPI_Win_flush => PMPI_Win_flush(rank: c_int, win: MPI_Win);
    MPI_Win_flush_all => PMPI_Win_flush_all(win: MPI_Win);
    MPI_Win_flush_local => PMPI_Win_flush_local(rank: c_int, win: MPI_Win);
    MPI_Win_flush_local_all => PMPI_Win_flush_local_all(win: MPI_Win);
}

/// Interposed: before MPI goes away, the ranks of every still-live served context
/// meet in a serving barrier, so requests peers sent us before they reached
/// `MPI_Finalize` are answered.
///
/// # Safety
/// As `MPI_Finalize`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    if progress::wanted() {
        progress::serving_barriers(&mut serve);
    }
    // SAFETY: a plain MPI call.
    unsafe { ffi::PMPI_Finalize() }
}
