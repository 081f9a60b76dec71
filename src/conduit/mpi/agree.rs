//! Start-up checks every rank of a new context makes together, before any window or
//! shared mapping exists (a rank that fails alone would leave the others waiting in
//! a collective call for ever).
//!
//! Guarantees:
//! - the communicator is a valid intracommunicator (checked locally: a rank holding a
//!   bad handle cannot take part in anything);
//! - then one `MPI_Allreduce` of a few words: whether some rank could not resolve its
//!   settings, and for every job-wide setting (`Scope::Job`) the largest hash of its
//!   value and of its complement (so the smallest too). Every rank returns the same
//!   verdict: `Ok`, or `FH_ERR_INVALID_ARG` naming the setting and two ranks' values
//!   (or the rank whose settings did not parse, with its own message). Only a failed
//!   check costs a second collective, to fetch the values the message names.

use super::boot::{self, check};
use crate::runtime::config::Resolved;
use crate::runtime::error::{Error, Result};
use crate::{bail, err};
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// Bytes of a setting value or error message carried in a failed check's messages.
const TEXT: usize = 256;

/// Refuse a communicator the library cannot use; returns (rank, size).
pub fn validate_comm(comm: ffi::MPI_Comm) -> Result<(usize, usize)> {
    // SAFETY: (whole block) plain MPI queries on a handle the caller gave us, with
    // errors returned (set on MPI_COMM_WORLD for the duration: MPI raises errors about
    // an invalid communicator there, and its handler is usually fatal); every
    // out-pointer is a local of the right type.
    unsafe {
        if comm == ffi::RSMPI_COMM_NULL || comm == std::mem::zeroed::<ffi::MPI_Comm>() {
            bail!(
                InvalidArg,
                "communicator is MPI_COMM_NULL or not a valid handle"
            );
        }
        let mut old: ffi::MPI_Errhandler = std::mem::zeroed();
        ffi::MPI_Comm_get_errhandler(ffi::RSMPI_COMM_WORLD, &mut old);
        ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN);
        let (mut size, mut rank, mut inter) = (0, 0, 0);
        let mut rc = ffi::MPI_Comm_size(comm, &mut size);
        if rc == 0 {
            rc = ffi::MPI_Comm_test_inter(comm, &mut inter);
        }
        if rc == 0 {
            rc = ffi::MPI_Comm_rank(comm, &mut rank);
        }
        ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, old);
        ffi::MPI_Errhandler_free(&mut old);
        if rc != ffi::MPI_SUCCESS as c_int {
            bail!(
                InvalidArg,
                "the communicator handle is not valid: {}",
                boot::error_string(rc)
            );
        }
        if inter != 0 {
            bail!(
                InvalidArg,
                "the communicator is an intercommunicator: firehose needs an \
                 intracommunicator (use MPI_Intercomm_merge)"
            );
        }
        Ok((rank as usize, size as usize))
    }
}

/// Check, collectively over `comm`, that every rank resolved its settings and that
/// the job-wide ones agree. `mine` is this rank's resolution (an error: its settings
/// did not parse); every rank returns the same verdict.
pub fn settings<S: Resolved>(comm: ffi::MPI_Comm, mine: &Result<S>) -> Result<()> {
    let (rank, _) = validate_comm(comm)?;
    let k = S::agreed_count();
    // [lowest bad rank as MAX - rank (0: none), hash_i..., !hash_i...]
    let mut words = vec![0u64; 1 + 2 * k];
    match mine {
        Ok(c) => {
            for (j, (_, h)) in c.agreement().into_iter().enumerate() {
                words[1 + j] = h;
                words[1 + k + j] = !h;
            }
        }
        Err(_) => words[0] = u64::MAX - rank as u64,
    }
    let mut all = vec![0u64; words.len()];
    // SAFETY: both buffers hold words.len() u64s; a collective on the caller's
    // communicator that every rank of it makes (fh_init is collective).
    let rc = unsafe {
        ffi::PMPI_Allreduce(
            words.as_ptr() as *const c_void,
            all.as_mut_ptr() as *mut c_void,
            words.len() as c_int,
            ffi::RSMPI_UINT64_T,
            ffi::RSMPI_MAX,
            comm,
        )
    };
    check(rc, || "MPI_Allreduce (checking that settings agree)".into())?;
    if all[0] != 0 {
        let bad = (u64::MAX - all[0]) as usize;
        let text = bcast_text(comm, bad, rank, || {
            mine.as_ref().err().map_or(String::new(), Error::to_string)
        })?;
        if let Err(e) = mine {
            return Err(e.clone());
        }
        bail!(
            InvalidArg,
            "rank {} could not use its settings, so no rank starts: {}",
            bad,
            text
        );
    }
    let Some(j) = (0..k).find(|&j| all[1 + j] != !all[1 + k + j]) else {
        return Ok(());
    };
    let c = mine.as_ref().expect("every rank resolved its settings");
    let i = c.agreement()[j].0;
    Err(mismatch(comm, S::name(i), &c.value(i))?)
}

/// The error for setting `i`, whose values differ: gather every rank's value and
/// name rank 0's and the first different one.
fn mismatch(comm: ffi::MPI_Comm, name: &str, mine: &str) -> Result<Error> {
    let mut size: c_int = 0;
    // SAFETY: writes one int; comm was validated.
    unsafe { ffi::MPI_Comm_size(comm, &mut size) };
    let out = fixed(mine);
    let mut all = vec![0u8; TEXT * size as usize];
    // SAFETY: out holds TEXT bytes, all TEXT per rank; collective on comm, which
    // every rank reaches (they all saw the same mismatch).
    let rc = unsafe {
        ffi::PMPI_Allgather(
            out.as_ptr() as *const c_void,
            TEXT as c_int,
            ffi::RSMPI_UINT8_T,
            all.as_mut_ptr() as *mut c_void,
            TEXT as c_int,
            ffi::RSMPI_UINT8_T,
            comm,
        )
    };
    check(rc, || "MPI_Allgather (the values of a setting)".into())?;
    let vals: Vec<String> = all.chunks(TEXT).map(unfixed).collect();
    let other = vals.iter().position(|v| *v != vals[0]).unwrap_or(0);
    let show = |v: &str| {
        if v.is_empty() {
            "unset".to_string()
        } else {
            v.to_string()
        }
    };
    Ok(err!(
        InvalidArg,
        "{} is {} on rank 0 but {} on rank {}: it must be the same on every rank \
         (set it in the environment of every rank, or leave it unset everywhere)",
        name,
        show(&vals[0]),
        show(&vals[other]),
        other
    ))
}

/// Broadcast `text()` (evaluated on `root` only) from `root`.
fn bcast_text(
    comm: ffi::MPI_Comm,
    root: usize,
    rank: usize,
    text: impl FnOnce() -> String,
) -> Result<String> {
    let mut buf = if rank == root {
        fixed(&text())
    } else {
        [0u8; TEXT]
    };
    // SAFETY: buf holds TEXT bytes on every rank; collective on comm.
    let rc = unsafe {
        ffi::PMPI_Bcast(
            buf.as_mut_ptr() as *mut c_void,
            TEXT as c_int,
            ffi::RSMPI_UINT8_T,
            root as c_int,
            comm,
        )
    };
    check(rc, || "MPI_Bcast (a rank's settings error)".into())?;
    Ok(unfixed(&buf))
}

fn fixed(s: &str) -> [u8; TEXT] {
    let mut b = [0u8; TEXT];
    let mut n = s.len().min(TEXT - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

fn unfixed(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}
