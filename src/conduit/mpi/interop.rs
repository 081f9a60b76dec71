//! The MPI side of progress inside blocking MPI calls (`api::progress` says why).
//!
//! A blocking call becomes its non-blocking form plus [`drive`]: `PMPI_Test` (or the
//! call's own test) alternated with the library's poll until MPI says done. MPI's
//! own progress happens inside the tests exactly as inside the blocking call, so the
//! result, the status and the error code are MPI's own.
//!
//! Guarantees: `drive` returns the first non-success code or the code of the test
//! that completed; it never returns while MPI still uses the caller's buffers. When
//! the poll finds nothing to do for a while the thread yields, as MPI's own waits do
//! when ranks outnumber cores.

use super::MpiConduit;
use mpi::ffi;
use std::os::raw::c_int;

/// Tests of the MPI request per poll of the library. MPI completes most calls within
/// a few tests; the poll costs several tests' worth, and a peer waiting for us can
/// afford a few microseconds.
const TESTS_PER_SERVE: u32 = 16;
/// Idle polls (the library had nothing to do) before each yield.
const IDLE_BEFORE_YIELD: u32 = 4;

/// Alternate `test` (returns MPI's code and whether the operation completed) with
/// `serve` (the library's poll; returns the work it did) until completion or error.
/// Serves once before the first test: a call that MPI completes at once (the last
/// rank into a collective) still runs the handlers already waiting for this rank,
/// so a program that waits for replies by looping on an MPI call gets them.
pub fn drive(mut test: impl FnMut() -> (c_int, bool), serve: &mut dyn FnMut() -> usize) -> c_int {
    let mut idle = 0u32;
    let mut tests = 0u32;
    serve();
    loop {
        let (rc, done) = test();
        if rc != ffi::MPI_SUCCESS as c_int || done {
            return rc;
        }
        tests += 1;
        if tests % TESTS_PER_SERVE != 0 {
            continue;
        }
        if serve() > 0 {
            idle = 0;
        } else {
            idle += 1;
            if idle >= IDLE_BEFORE_YIELD {
                std::thread::yield_now();
            }
        }
    }
}

/// `drive` for one request.
///
/// # Safety
/// `req` is a valid request (or `MPI_REQUEST_NULL`); `status` is a valid status
/// pointer or `MPI_STATUS_IGNORE`.
pub unsafe fn drive_request(
    req: *mut ffi::MPI_Request,
    status: *mut ffi::MPI_Status,
    serve: &mut dyn FnMut() -> usize,
) -> c_int {
    drive(
        || {
            let mut flag: c_int = 0;
            // SAFETY: caller contract.
            let rc = unsafe { ffi::PMPI_Test(req, &mut flag, status) };
            (rc, flag != 0)
        },
        serve,
    )
}

impl MpiConduit {
    /// A barrier over this context's ranks that serves the library while it waits
    /// (collective over the context's communicator; a private duplicate, so it never
    /// matches an application collective).
    fn serving_barrier(&self, serve: &mut dyn FnMut() -> usize) -> c_int {
        if !self.windows {
            return ffi::MPI_SUCCESS as c_int; // one rank: nobody to wait for
        }
        // SAFETY: a communicator we own; the request lives on this frame until done.
        unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            let rc = ffi::PMPI_Ibarrier(self.prog_comm.0, &mut req);
            if rc != ffi::MPI_SUCCESS as c_int {
                return rc;
            }
            drive_request(&mut req, ffi::RSMPI_STATUS_IGNORE, serve)
        }
    }

    /// True when `win`'s group has exactly this context's ranks (so every rank of a
    /// fence on `win` is a rank of this context and will take the same path).
    fn same_ranks_as(&self, win: ffi::MPI_Win) -> bool {
        // SAFETY: plain MPI queries; groups created here are freed here.
        unsafe {
            let mut wg: ffi::MPI_Group = std::mem::zeroed();
            if ffi::PMPI_Win_get_group(win, &mut wg) != ffi::MPI_SUCCESS as c_int {
                return false;
            }
            let mut cg: ffi::MPI_Group = std::mem::zeroed();
            ffi::PMPI_Comm_group(self.prog_comm.0, &mut cg);
            let mut res: c_int = 0;
            let rc = ffi::PMPI_Group_compare(wg, cg, &mut res);
            ffi::PMPI_Group_free(&mut wg);
            ffi::PMPI_Group_free(&mut cg);
            rc == ffi::MPI_SUCCESS as c_int
                && (res == ffi::RSMPI_IDENT || res == ffi::RSMPI_SIMILAR)
        }
    }
}

/// A barrier of `c`'s ranks that serves the library while it waits (0 = success; a
/// transport other than MPI has nothing to do).
pub fn serving_barrier(c: &dyn crate::conduit::Conduit, serve: &mut dyn FnMut() -> usize) -> c_int {
    match c.as_any().downcast_ref::<MpiConduit>() {
        Some(m) => m.serving_barrier(serve),
        None => ffi::MPI_SUCCESS as c_int,
    }
}

/// True when `win`'s group is exactly `c`'s ranks.
pub fn same_ranks_as(c: &dyn crate::conduit::Conduit, win: ffi::MPI_Win) -> bool {
    c.as_any()
        .downcast_ref::<MpiConduit>()
        .is_some_and(|m| m.same_ranks_as(win))
}
