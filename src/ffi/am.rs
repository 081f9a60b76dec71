//! Header section: active messages.
//!
//! Handler rules (also in the header): handlers run inside fh_poll or any call that
//! polls, or on the progress thread; several may run at once on different threads.
//! A handler must not block: it may call only fh_am_reply_* (at most once, and only
//! from a request handler), fh_am_source, fh_rank/fh_size, fh_strerror,
//! fh_last_error, fh_am_max_*. Other calls return FH_ERR_STATE from handlers.
//! `buf` and `args` are valid only during the handler call.

use super::{ctx_ref, fh_ctx_t, slice, OK};
use crate::api::am::{self, LongOut, Token, INDEX_USER_MAX, INDEX_USER_MIN};
use crate::api::wire::{Category, MAX_ARGS};
use crate::runtime::error::Result;
use std::os::raw::{c_int, c_uint, c_void};

/// An AM handler: `buf`/`nbytes` is the payload (NULL/0 for short messages; for long
/// messages, the destination where the payload already landed), `args`/`nargs` the
/// 64-bit arguments (with `nargs` 0, `args` is not NULL but must not be read), `user`
/// the pointer given to fh_am_register. AMs are not ordered: two AMs from one rank
/// may run in another order than they were sent (one that finds the target's queue
/// full travels another way). Count or number them if order matters.
pub type fh_am_handler_t = Option<
    unsafe extern "C" fn(
        token: *mut Token,
        buf: *mut c_void,
        nbytes: usize,
        args: *const u64,
        nargs: usize,
        user: *mut c_void,
    ),
>;

/// Handler indices the application may register (128..255); 0..127 are the library's.
pub const FH_AM_INDEX_USER_MIN: c_uint = 128;
pub const FH_AM_INDEX_USER_MAX: c_uint = 255;
const _: () = assert!(
    FH_AM_INDEX_USER_MIN as usize == INDEX_USER_MIN
        && FH_AM_INDEX_USER_MAX as usize == INDEX_USER_MAX
);

fn user_index(index: c_uint) -> Result<u8> {
    if !(FH_AM_INDEX_USER_MIN..=FH_AM_INDEX_USER_MAX).contains(&index) {
        crate::bail!(
            InvalidArg,
            "handler index {} is not in the application range {}..={}",
            index,
            FH_AM_INDEX_USER_MIN,
            FH_AM_INDEX_USER_MAX
        );
    }
    Ok(index as u8)
}

/// Register `fn` at `index` (FH_AM_INDEX_USER_MIN..FH_AM_INDEX_USER_MAX) with `user`
/// passed to every call. Replaces an earlier registration. Register on every rank
/// before other ranks send to that index (an AM to an index with no handler is
/// refused by the target and reported to the sender by fh_poll).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_register(
    ctx: *mut fh_ctx_t,
    index: c_uint,
    fn_: fh_am_handler_t,
    user: *mut c_void,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        let Some(f) = fn_ else {
            crate::bail!(InvalidArg, "handler function is NULL");
        };
        c.am_register(index as usize, f, user as usize)?;
        OK
    })
}

/// Send a short request (arguments only) to `rank`'s handler `index`. Blocks only
/// while flow control says `rank` has too many of our requests unhandled (it keeps
/// serving AMs meanwhile). The handler runs at the target's next poll, which may
/// come after a barrier both ranks pass: a reply tells the sender that it ran.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_am_request_short(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    index: c_uint,
    args: *const u64,
    nargs: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        let r = c.check_rank(rank as i64)?;
        // SAFETY: args points to nargs readable u64 for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let a = unsafe { slice(args, nargs, "args")? };
        c.am_request(r, Category::Short, user_index(index)?, a, &[], None)?;
        OK
    })
}

/// Send a medium request: `nbytes` (<= fh_am_max_medium) of `buf` are copied into
/// the message; the handler sees them in a temporary buffer. `buf` may be reused
/// when this returns.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_am_request_medium(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    index: c_uint,
    buf: *const c_void,
    nbytes: usize,
    args: *const u64,
    nargs: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        let r = c.check_rank(rank as i64)?;
        // SAFETY: args points to nargs readable u64 for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let a = unsafe { slice(args, nargs, "args")? };
        // SAFETY: buf is readable for nbytes bytes for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let b = unsafe { slice(buf as *const u8, nbytes, "buf")? };
        c.am_request(r, Category::Medium, user_index(index)?, a, b, None)?;
        OK
    })
}

/// Send a long request: `nbytes` (<= fh_am_max_long) of `buf` land at `dst` in
/// `rank`'s memory (fh_malloc'd or registered there, else FH_ERR_ACCESS) before the
/// handler runs with buf = dst. Returns when `buf` may be reused.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Not from AM handlers (blocks).
#[no_mangle]
pub extern "C" fn fh_am_request_long(
    ctx: *mut fh_ctx_t,
    rank: c_int,
    index: c_uint,
    buf: *const c_void,
    nbytes: usize,
    dst: *mut c_void,
    args: *const u64,
    nargs: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: ctx_ref checks the handle; the context is not finalized concurrently
        // with this call (header contract).
        let c = unsafe { ctx_ref(ctx)? };
        let r = c.check_rank(rank as i64)?;
        // SAFETY: args points to nargs readable u64 for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let a = unsafe { slice(args, nargs, "args")? };
        // SAFETY: buf is readable for nbytes bytes for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let b = unsafe { slice(buf as *const u8, nbytes, "buf")? };
        if dst.is_null() {
            crate::bail!(InvalidArg, "dst is NULL");
        }
        c.check_live()?;
        am::check_not_in_handler("fh_am_request_long")?;
        if nbytes > c.am_max_long() {
            crate::bail!(InvalidArg, "long payload of {} bytes exceeds fh_am_max_long() = {}", nbytes, c.am_max_long());
        }
        // Ask the target now so a bad destination is a synchronous error.
        c.check_registered(r, dst as usize, nbytes)?;
        c.am_request(r, Category::Long, user_index(index)?, a, &[], Some(LongOut { dst: dst as usize, data: b }))?;
        OK
    })
}

/// # Safety
/// `token` is a pointer a handler received (validated inside).
unsafe fn token<'a>(token: *mut Token) -> Result<&'a Token> {
    // SAFETY: forwarded contract.
    unsafe { Token::from_ptr(token) }
}

/// Reply (short) to the request being handled. Only from a request handler, at most
/// once. Never blocks.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_reply_short(
    tok: *mut Token,
    index: c_uint,
    args: *const u64,
    nargs: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: tok is the token passed to the running handler (caller contract);
        // Token::from_ptr refuses NULL and checks its magic.
        let t = unsafe { token(tok)? };
        // SAFETY: args points to nargs readable u64 for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let a = unsafe { slice(args, nargs, "args")? };
        t.ctx().am_reply(t, Category::Short, user_index(index)?, a, &[], None)?;
        OK
    })
}

/// Reply (medium) to the request being handled; `buf` is copied.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_reply_medium(
    tok: *mut Token,
    index: c_uint,
    buf: *const c_void,
    nbytes: usize,
    args: *const u64,
    nargs: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: tok is the token passed to the running handler (caller contract);
        // Token::from_ptr refuses NULL and checks its magic.
        let t = unsafe { token(tok)? };
        // SAFETY: args points to nargs readable u64 for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let a = unsafe { slice(args, nargs, "args")? };
        // SAFETY: buf is readable for nbytes bytes for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let b = unsafe { slice(buf as *const u8, nbytes, "buf")? };
        t.ctx().am_reply(t, Category::Medium, user_index(index)?, a, b, None)?;
        OK
    })
}

/// Reply (long) to the request being handled: `buf` is copied and lands at `dst` on
/// the requester before its handler runs. If `dst` is not fh_malloc'd or registered
/// memory there, the requester refuses it and fh_poll here reports FH_ERR_ACCESS.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_reply_long(
    tok: *mut Token,
    index: c_uint,
    buf: *const c_void,
    nbytes: usize,
    dst: *mut c_void,
    args: *const u64,
    nargs: usize,
) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: tok is the token passed to the running handler (caller contract);
        // Token::from_ptr refuses NULL and checks its magic.
        let t = unsafe { token(tok)? };
        // SAFETY: args points to nargs readable u64 for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let a = unsafe { slice(args, nargs, "args")? };
        // SAFETY: buf is readable for nbytes bytes for this call (caller contract);
        // slice refuses NULL with a non-zero count.
        let b = unsafe { slice(buf as *const u8, nbytes, "buf")? };
        if dst.is_null() {
            crate::bail!(InvalidArg, "dst is NULL");
        }
        t.ctx().am_reply(t, Category::Long, user_index(index)?, a, &[], Some(LongOut { dst: dst as usize, data: b }))?;
        OK
    })
}

/// The rank that sent the message being handled, or a negative FH_ERR_*.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_source(tok: *const Token) -> c_int {
    crate::ffi_boundary!(status {
        // SAFETY: token validated.
        let t = unsafe { Token::from_ptr(tok)? };
        Ok(t.src as c_int)
    })
}

/// Most 64-bit arguments an AM carries (16).
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_max_args() -> usize {
    MAX_ARGS
}

/// Largest medium payload for this context (FH_AM_MAX_MEDIUM); 0 if ctx is invalid.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_max_medium(ctx: *const fh_ctx_t) -> usize {
    crate::ffi_boundary!(value 0, {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        Ok(c.am_max_medium())
    })
}

/// Largest long payload for this context (FH_AM_MAX_LONG); 0 if ctx is invalid.
/// Threads: any thread, concurrently with other calls on the same context (MPI_THREAD_MULTIPLE;
/// below it, one thread at a time per the MPI thread level). Also from AM handlers.
#[no_mangle]
pub extern "C" fn fh_am_max_long(ctx: *const fh_ctx_t) -> usize {
    crate::ffi_boundary!(value 0, {
        // SAFETY: validated handle.
        let c = unsafe { ctx_ref(ctx)? };
        Ok(c.am_max_long())
    })
}
