//! PMPI interposition for Fortran callers (`include 'mpif.h'` and `use mpi`).
//!
//! Open MPI's Fortran `MPI_BARRIER` is `mpi_barrier_` in `libmpi_mpifh`, which calls
//! `PMPI_Barrier` directly, so interposing the C symbols (`pmpi`) misses Fortran
//! programs. This file defines the gfortran names of the same blocking calls. Each
//! one starts the *real* Fortran non-blocking form (`mpi_ibarrier_`, `mpi_irecv_`,
//! ...) and drives it with the real `mpi_test_`, serving the library in between, so
//! every Fortran-specific argument (handles, `MPI_IN_PLACE`, `MPI_STATUS_IGNORE`,
//! `MPI_BOTTOM`) is interpreted by the MPI library's own Fortran layer, unchanged.
//!
//! Guarantees: as `pmpi` (same semantics, `ierr` is MPI's own). The real functions
//! are found with `dlsym` the first time they are needed (`RTLD_NEXT` for the
//! blocking ones this file shadows); if the MPI library has no Fortran layer, these
//! wrappers are never called.

use crate::api::progress;
use crate::api::progress::drive;
use std::ffi::{c_void, CStr};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Fortran `INTEGER` (MPI_Fint).
type Fint = c_int;
/// A Fortran buffer argument (any type, by reference).
type FBuf = *mut c_void;
/// Status scratch larger than any MPI's `MPI_STATUS_SIZE` (Open MPI 6, MPICH 5).
type Scratch = [Fint; 16];

/// A lazily resolved real Fortran MPI function.
struct Real {
    name: &'static CStr,
    next: bool,
    at: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr, next: bool) -> Real {
        Real {
            name,
            next,
            at: AtomicUsize::new(0),
        }
    }

    /// The function's address; aborts with a message if MPI has no such symbol
    /// (only reachable when a Fortran MPI program called us, so it has one).
    fn addr(&self) -> usize {
        let a = self.at.load(Ordering::Relaxed);
        if a != 0 {
            return a;
        }
        let h = if self.next {
            libc::RTLD_NEXT
        } else {
            libc::RTLD_DEFAULT
        };
        // SAFETY: dlsym with a NUL-terminated name and a pseudo-handle.
        let p = unsafe { libc::dlsym(h, self.name.as_ptr()) } as usize;
        if p == 0 {
            eprintln!(
                "firehose: the MPI library has no Fortran symbol {:?}; set FH_MPI_PROGRESS=0",
                self.name
            );
            std::process::abort();
        }
        self.at.store(p, Ordering::Relaxed);
        p
    }
}

/// Call a resolved real function with the given Fortran signature.
macro_rules! call {
    ($real:expr, ( $($t:ty),* ) ( $($a:expr),* )) => {{
        let f: unsafe extern "C" fn($($t),*) = {
            let a = $real.addr();
            // SAFETY: `a` is the address of the MPI library's Fortran function of
            // exactly this signature (MPI standard, Fortran bindings by reference).
            unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*)>(a) }
        };
        // SAFETY: arguments as the Fortran caller passed them, or locals.
        unsafe { f($($a),*) }
    }};
}

static TEST: Real = Real::new(c"mpi_test_", false);
static TESTALL: Real = Real::new(c"mpi_testall_", false);
static FINALIZE: Real = Real::new(c"mpi_finalize_", true);

/// Drive Fortran request `req` with the real `mpi_test_`, serving the library.
fn drive_f(req: *mut Fint, status: *mut Fint, ierr: *mut Fint) {
    let rc = drive(
        || {
            let mut flag: Fint = 0;
            call!(TEST, (*mut Fint, *mut Fint, *mut Fint, *mut Fint)(req, &mut flag, status, ierr));
            // SAFETY: ierr is the caller's valid INTEGER.
            (unsafe { *ierr }, flag != 0)
        },
        &mut progress::serve,
    );
    // SAFETY: as above.
    unsafe { *ierr = rc };
}

/// Define Fortran blocking calls as real non-blocking form + `drive_f`. Every
/// argument is a pointer, as Fortran passes them.
macro_rules! interpose_f {
    ($( $name:ident => $blk:literal, $nb:literal ( $($a:ident),* ); )*) => {$(
        /// Interposed (Fortran): serves the library while MPI completes the call.
        ///
        /// # Safety
        /// As the Fortran MPI call of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: FBuf,)* ierr: *mut Fint) {
            static BLK: Real = Real::new($blk, true);
            static NB: Real = Real::new($nb, false);
            if !progress::wanted() {
                call!(BLK, ($(interpose_f!(@t $a),)* *mut Fint)($($a,)* ierr));
                return;
            }
            let mut req: Fint = 0;
            call!(NB, ($(interpose_f!(@t $a),)* *mut Fint, *mut Fint)($($a,)* &mut req, ierr));
            // SAFETY: ierr is the caller's valid INTEGER.
            if unsafe { *ierr } != 0 {
                return;
            }
            let mut st: Scratch = [0; 16];
            drive_f(&mut req, st.as_mut_ptr(), ierr);
        }
    )*};
    (@t $a:ident) => { FBuf };
}

interpose_f! {
    mpi_barrier_ => c"mpi_barrier_", c"mpi_ibarrier_"(comm);
    mpi_send_ => c"mpi_send_", c"mpi_isend_"(buf, count, dt, dest, tag, comm);
    mpi_ssend_ => c"mpi_ssend_", c"mpi_issend_"(buf, count, dt, dest, tag, comm);
    mpi_bcast_ => c"mpi_bcast_", c"mpi_ibcast_"(buf, count, dt, root, comm);
    mpi_reduce_ => c"mpi_reduce_", c"mpi_ireduce_"(s, r, count, dt, op, root, comm);
    mpi_allreduce_ => c"mpi_allreduce_", c"mpi_iallreduce_"(s, r, count, dt, op, comm);
    mpi_gather_ => c"mpi_gather_", c"mpi_igather_"(s, sc, st, r, rc, rt, root, comm);
    mpi_scatter_ => c"mpi_scatter_", c"mpi_iscatter_"(s, sc, st, r, rc, rt, root, comm);
    mpi_allgather_ => c"mpi_allgather_", c"mpi_iallgather_"(s, sc, st, r, rc, rt, comm);
    mpi_alltoall_ => c"mpi_alltoall_", c"mpi_ialltoall_"(s, sc, st, r, rc, rt, comm);
}

/// Interposed (Fortran `MPI_RECV`).
///
/// # Safety
/// As Fortran `MPI_RECV`.
#[no_mangle]
pub unsafe extern "C" fn mpi_recv_(
    buf: FBuf,
    count: FBuf,
    dt: FBuf,
    src: FBuf,
    tag: FBuf,
    comm: FBuf,
    status: *mut Fint,
    ierr: *mut Fint,
) {
    static BLK: Real = Real::new(c"mpi_recv_", true);
    static NB: Real = Real::new(c"mpi_irecv_", false);
    type A = FBuf;
    if !progress::wanted() {
        call!(BLK, (A, A, A, A, A, A, *mut Fint, *mut Fint)(buf, count, dt, src, tag, comm, status, ierr));
        return;
    }
    let mut req: Fint = 0;
    call!(NB, (A, A, A, A, A, A, *mut Fint, *mut Fint)(buf, count, dt, src, tag, comm, &mut req, ierr));
    // SAFETY: ierr is the caller's valid INTEGER.
    if unsafe { *ierr } == 0 {
        drive_f(&mut req, status, ierr);
    }
}

/// Interposed (Fortran `MPI_WAIT`).
///
/// # Safety
/// As Fortran `MPI_WAIT`.
#[no_mangle]
pub unsafe extern "C" fn mpi_wait_(req: *mut Fint, status: *mut Fint, ierr: *mut Fint) {
    static BLK: Real = Real::new(c"mpi_wait_", true);
    if !progress::wanted() {
        call!(BLK, (*mut Fint, *mut Fint, *mut Fint)(req, status, ierr));
        return;
    }
    drive_f(req, status, ierr);
}

/// Interposed (Fortran `MPI_WAITALL`).
///
/// # Safety
/// As Fortran `MPI_WAITALL`.
#[no_mangle]
pub unsafe extern "C" fn mpi_waitall_(
    n: *mut Fint,
    reqs: *mut Fint,
    statuses: *mut Fint,
    ierr: *mut Fint,
) {
    static BLK: Real = Real::new(c"mpi_waitall_", true);
    type P = *mut Fint;
    if !progress::wanted() {
        call!(BLK, (P, P, P, P)(n, reqs, statuses, ierr));
        return;
    }
    let rc = drive(
        || {
            let mut flag: Fint = 0;
            call!(TESTALL, (P, P, P, P, P)(n, reqs, &mut flag, statuses, ierr));
            // SAFETY: ierr is the caller's valid INTEGER.
            (unsafe { *ierr }, flag != 0)
        },
        &mut progress::serve,
    );
    // SAFETY: as above.
    unsafe { *ierr = rc };
}

/// Interposed (Fortran `MPI_SENDRECV`): the receive and the send as real Fortran
/// non-blocking calls, each driven to completion.
///
/// # Safety
/// As Fortran `MPI_SENDRECV`.
#[no_mangle]
pub unsafe extern "C" fn mpi_sendrecv_(
    sbuf: FBuf,
    scount: FBuf,
    stype: FBuf,
    dest: FBuf,
    stag: FBuf,
    rbuf: FBuf,
    rcount: FBuf,
    rtype: FBuf,
    src: FBuf,
    rtag: FBuf,
    comm: FBuf,
    status: *mut Fint,
    ierr: *mut Fint,
) {
    static BLK: Real = Real::new(c"mpi_sendrecv_", true);
    static IRECV: Real = Real::new(c"mpi_irecv_", false);
    static ISEND: Real = Real::new(c"mpi_isend_", false);
    type A = FBuf;
    type P = *mut Fint;
    if !progress::wanted() {
        call!(
            BLK,
            (A, A, A, A, A, A, A, A, A, A, A, P, P)(
                sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, status, ierr
            )
        );
        return;
    }
    let (mut rreq, mut sreq): (Fint, Fint) = (0, 0);
    call!(
        IRECV,
        (A, A, A, A, A, A, P, P)(rbuf, rcount, rtype, src, rtag, comm, &mut rreq, ierr)
    );
    // SAFETY: ierr is the caller's valid INTEGER.
    if unsafe { *ierr } != 0 {
        return;
    }
    call!(
        ISEND,
        (A, A, A, A, A, A, P, P)(sbuf, scount, stype, dest, stag, comm, &mut sreq, ierr)
    );
    // SAFETY: as above.
    if unsafe { *ierr } != 0 {
        return;
    }
    let mut st: Scratch = [0; 16];
    drive_f(&mut sreq, st.as_mut_ptr(), ierr);
    // SAFETY: as above.
    if unsafe { *ierr } == 0 {
        drive_f(&mut rreq, status, ierr);
    }
}

/// Interposed (Fortran `MPI_FINALIZE`): serving barriers as the C `MPI_Finalize`.
///
/// # Safety
/// As Fortran `MPI_FINALIZE`.
#[no_mangle]
pub unsafe extern "C" fn mpi_finalize_(ierr: *mut Fint) {
    if progress::wanted() {
        progress::serving_barriers(&mut progress::serve);
    }
    call!(FINALIZE, (*mut Fint)(ierr));
}

// --- `use mpi_f08` --------------------------------------------------------------
// Open MPI's and MPICH's f08 `MPI_Barrier`, `MPI_Wait`, `MPI_Waitall` and
// `MPI_Finalize` call `PMPI_*` directly. Their handles are one-integer derived
// types (passed like an INTEGER) and `ierror` is optional (NULL when omitted).
// The f08 routines with a buffer argument call the C `MPI_*` names in MPICH (covered
// by `pmpi`); in Open MPI they are not interposed (README).

static TEST_F08: Real = Real::new(c"mpi_test_f08_", false);
static TESTALL_F08: Real = Real::new(c"mpi_testall_f08_", false);

/// `ierr`, or a local when the caller omitted it.
fn ierr_or(p: *mut Fint, local: &mut Fint) -> *mut Fint {
    if p.is_null() {
        local
    } else {
        p
    }
}

fn drive_f08(req: *mut Fint, status: *mut Fint, ierr: *mut Fint) {
    let rc = drive(
        || {
            let mut flag: Fint = 0;
            call!(TEST_F08, (*mut Fint, *mut Fint, *mut Fint, *mut Fint)(req, &mut flag, status, ierr));
            // SAFETY: ierr is valid (ierr_or).
            (unsafe { *ierr }, flag != 0)
        },
        &mut progress::serve,
    );
    // SAFETY: as above.
    unsafe { *ierr = rc };
}

/// Interposed (Fortran 2008 `MPI_Barrier`).
///
/// # Safety
/// As `MPI_Barrier` from `use mpi_f08`.
#[no_mangle]
pub unsafe extern "C" fn mpi_barrier_f08_(comm: *mut Fint, ierr: *mut Fint) {
    static BLK: Real = Real::new(c"mpi_barrier_f08_", true);
    static NB: Real = Real::new(c"mpi_ibarrier_f08_", false);
    let mut local: Fint = 0;
    let e = ierr_or(ierr, &mut local);
    if !progress::wanted() {
        call!(BLK, (*mut Fint, *mut Fint)(comm, e));
        return;
    }
    let mut req: Fint = 0;
    call!(NB, (*mut Fint, *mut Fint, *mut Fint)(comm, &mut req, e));
    // SAFETY: e is valid.
    if unsafe { *e } == 0 {
        let mut st: Scratch = [0; 16];
        drive_f08(&mut req, st.as_mut_ptr(), e);
    }
}

/// Interposed (Fortran 2008 `MPI_Wait`).
///
/// # Safety
/// As `MPI_Wait` from `use mpi_f08`.
#[no_mangle]
pub unsafe extern "C" fn mpi_wait_f08_(req: *mut Fint, status: *mut Fint, ierr: *mut Fint) {
    static BLK: Real = Real::new(c"mpi_wait_f08_", true);
    let mut local: Fint = 0;
    let e = ierr_or(ierr, &mut local);
    if !progress::wanted() {
        call!(BLK, (*mut Fint, *mut Fint, *mut Fint)(req, status, e));
        return;
    }
    drive_f08(req, status, e);
}

/// Interposed (Fortran 2008 `MPI_Waitall`).
///
/// # Safety
/// As `MPI_Waitall` from `use mpi_f08`.
#[no_mangle]
pub unsafe extern "C" fn mpi_waitall_f08_(
    n: *mut Fint,
    reqs: *mut Fint,
    statuses: *mut Fint,
    ierr: *mut Fint,
) {
    static BLK: Real = Real::new(c"mpi_waitall_f08_", true);
    type P = *mut Fint;
    let mut local: Fint = 0;
    let e = ierr_or(ierr, &mut local);
    if !progress::wanted() {
        call!(BLK, (P, P, P, P)(n, reqs, statuses, e));
        return;
    }
    let rc = drive(
        || {
            let mut flag: Fint = 0;
            call!(
                TESTALL_F08,
                (P, P, P, P, P)(n, reqs, &mut flag, statuses, e)
            );
            // SAFETY: e is valid.
            (unsafe { *e }, flag != 0)
        },
        &mut progress::serve,
    );
    // SAFETY: as above.
    unsafe { *e = rc };
}

/// Interposed (Fortran 2008 `MPI_Finalize`).
///
/// # Safety
/// As `MPI_Finalize` from `use mpi_f08`.
#[no_mangle]
pub unsafe extern "C" fn mpi_finalize_f08_(ierr: *mut Fint) {
    static REAL: Real = Real::new(c"mpi_finalize_f08_", true);
    if progress::wanted() {
        progress::serving_barriers(&mut progress::serve);
    }
    call!(REAL, (*mut Fint)(ierr));
}
