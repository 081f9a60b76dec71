//! Opening and closing pipes: the pairwise handshake.
//!
//! Both ends call `rpipe_open`; the k-th open one rank makes towards a peer pairs
//! with the k-th open the peer makes towards it (as MPI pairs communicator
//! creations by call order). Each end allocates its blocks, sends one `HELLO` AM
//! (its parameters and block addresses) and waits for the peer's. Both then check
//! the same things, so both succeed or both fail with the same message: equal
//! width, duplex, transfer mode and policy; complementary roles; the peer's blocks
//! inside the peer's library heap. An end whose own arguments are bad still says
//! `HELLO` (marked failed) so its peer is never left waiting.
//!
//! Close does not wait for the peer: each end completes its puts, sends `BYE` and
//! keeps its blocks aside until the peer's `BYE` has arrived (`sweep`, at every open
//! and close), so no RDMA ever lands in (or reads from) memory that was returned to
//! the heap, and ends may close in any order. A blocked `rmalloc`/`rread` whose
//! peer said `BYE` fails instead of waiting forever.
//!
//! Guarantees: handlers only record what arrived (bounded: a peer flooding HELLOs
//! beyond [`MAX_PENDING`] is refused and reported, not stored); AMs may arrive in
//! any order (a `BYE` before its `HELLO` is remembered).

use super::pipe::{Ends, Pipe, Shape, Transfer, UNIT, WIDTH_MAX};
use super::rmalloc::Policy;
use crate::api::am::{self, LibHandler, Token};
use crate::api::wire::{Category, Frame};
use crate::api::CtxInner;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Unmatched HELLOs/BYEs kept per context.
pub const MAX_PENDING: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Writer,
    Reader,
    Both,
}

impl Role {
    fn code(self) -> u64 {
        match self {
            Role::Writer => 1,
            Role::Reader => 2,
            Role::Both => 3,
        }
    }
    fn from_code(c: u64) -> Option<Role> {
        Some(match c {
            1 => Role::Writer,
            2 => Role::Reader,
            3 => Role::Both,
            _ => return None,
        })
    }
    fn writes(self) -> bool {
        self != Role::Reader
    }
    fn reads(self) -> bool {
        self != Role::Writer
    }
}

/// What one end asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub role: Role,
    pub width: usize,
    pub duplex: bool,
    pub transfer: Transfer,
    pub policy: Policy,
}

fn policy_code(p: Policy) -> u64 {
    match p {
        Policy::NextFit => 0,
        Policy::FirstFit => 1,
        Policy::BestFit => 2,
        Policy::WorstFit => 3,
    }
}

pub use super::state::RpipeState;
use super::state::HELLO_ARGS;

impl Spec {
    fn check(&self) -> Result<()> {
        if self.width < UNIT || self.width > WIDTH_MAX {
            bail!(
                InvalidArg,
                "width_bytes {} is out of range: a pipe's heap is {} bytes to {} bytes",
                self.width,
                UNIT,
                WIDTH_MAX
            );
        }
        if self.duplex != (self.role == Role::Both) {
            bail!(
                InvalidArg,
                "role and mode disagree: a full-duplex pipe needs RPIPE_BOTH, a half-duplex one RPIPE_WRITER or RPIPE_READER"
            );
        }
        Ok(())
    }
}

/// Open the next pipe with `peer` (both ends call this; blocks until the peer does).
pub fn open(ctx: &Arc<CtxInner>, peer: i64, spec: Spec) -> Result<Arc<Pipe>> {
    open_checked(ctx, peer, Ok(spec))
}

/// As [`open`], for a caller whose arguments may already have failed to parse: with
/// a valid peer, the handshake still runs (marked failed) so the peer fails too
/// instead of waiting forever, and the two ends' open counts stay paired. A problem
/// found at any stage (parse, check, heap allocation) is carried in `problem` until
/// the HELLO is out; the blocks reserved so far are freed on every failure the peer
/// fails too, and kept on the others ([`Reserved`]).
pub fn open_checked(ctx: &Arc<CtxInner>, peer: i64, spec: Result<Spec>) -> Result<Arc<Pipe>> {
    ctx.check_live()?;
    am::check_not_in_handler("rpipe_open")?;
    let peer = ctx.check_rank(peer)?;
    sweep(ctx)?;
    if peer == ctx.rank {
        bail!(
            InvalidArg,
            "rpipe_open: peer is this rank; a pipe joins two different ranks"
        );
    }
    let (spec, mut problem) = match spec {
        Ok(s) => (s, s.check().err()),
        Err(e) => (
            Spec {
                role: Role::Writer,
                width: UNIT,
                duplex: false,
                transfer: Transfer::Push,
                policy: Policy::NextFit,
            },
            Some(e),
        ),
    };
    let shape = Shape::new(spec.width);
    let mut mine = Reserved::new(ctx, peer, &spec, &shape, &mut problem);
    let k = {
        let mut n = ctx.rpipe.next.lock();
        let e = n.entry(peer).or_insert(0);
        *e += 1;
        *e
    };
    let t = hello(ctx, peer, k, &spec, problem.is_none(), &mut mine)?;
    // The peer's BYEs for pipes we closed earlier came before this HELLO.
    sweep(ctx)?;
    // Both ends run the same checks on the same two HELLOs: a refusal here is the
    // peer's too, so it will not use our blocks.
    if let Err(e) = problem.map_or_else(|| agree(ctx, peer, &spec, &shape, &t), Err) {
        mine.promised = false;
        return Err(e);
    }
    let ends = Ends {
        tx: spec.role.writes().then_some((mine.outbox, t[6] as usize)),
        rx: spec.role.reads().then_some((mine.inbox, t[7] as usize)),
    };
    mine.keep();
    let pipe = Arc::new(Pipe::new(
        ctx.clone(),
        peer,
        k,
        spec.width,
        shape,
        spec.transfer,
        spec.policy,
        ends,
    ));
    ctx.rpipe
        .open
        .lock()
        .insert((peer, k), Arc::downgrade(&pipe.peer_closed));
    if ctx.rpipe.byes.lock().contains(&(peer, k)) {
        pipe.peer_closed.store(true, Ordering::Release);
    }
    Ok(pipe)
}

/// This end's heap blocks while its open is under way: handed to the pipe once it
/// succeeds ([`Reserved::keep`]), freed if it fails (dropped) unless `promised`.
struct Reserved<'a> {
    ctx: &'a CtxInner,
    blocks: Vec<usize>,
    /// Our HELLO said this end is ready and the peer's verdict is not known: the peer
    /// may open its end and write into our inbox or read our outbox whatever happens
    /// here, so a failure of ours (the wait for its HELLO given up, a sweep refused)
    /// leaves the blocks allocated (the heap goes at finalize) instead of letting
    /// the heap hand them out again under the peer's pipe.
    promised: bool,
    /// The reader's inbox (0: this end does not read, or it could not be had).
    inbox: usize,
    /// The writer's outbox (0 likewise).
    outbox: usize,
}

impl<'a> Reserved<'a> {
    /// Allocate the blocks `spec`'s role needs, their rings and bitmaps zeroed (the
    /// heap may hold an old pipe's). The first failure goes to `problem`, and nothing
    /// more is allocated after one.
    fn new(
        ctx: &'a CtxInner,
        peer: usize,
        spec: &Spec,
        shape: &Shape,
        problem: &mut Option<crate::Error>,
    ) -> Reserved<'a> {
        let mut r = Reserved {
            ctx,
            blocks: Vec::new(),
            promised: false,
            inbox: 0,
            outbox: 0,
        };
        let mut alloc = |bytes: usize| -> usize {
            if problem.is_some() {
                return 0;
            }
            match alloc_block(ctx, peer, bytes) {
                Ok(a) => {
                    r.blocks.push(a);
                    a
                }
                Err(e) => {
                    *problem = Some(e);
                    0
                }
            }
        };
        let inbox = if spec.role.reads() {
            alloc(shape.inbox_bytes())
        } else {
            0
        };
        let outbox = if spec.role.writes() {
            alloc(shape.outbox_bytes())
        } else {
            0
        };
        if inbox != 0 {
            let z = inbox + shape.ring_off();
            // SAFETY: our fresh allocation, inbox_bytes long.
            unsafe {
                std::ptr::write_bytes(z as *mut u8, 0, shape.inbox_bytes() - shape.ring_off())
            };
        }
        if outbox != 0 {
            let z = outbox + shape.view_off();
            // SAFETY: our fresh allocation, outbox_bytes long.
            unsafe {
                std::ptr::write_bytes(z as *mut u8, 0, shape.outbox_bytes() - shape.view_off())
            };
        }
        r.inbox = inbox;
        r.outbox = outbox;
        r
    }

    /// The pipe owns the blocks now.
    fn keep(mut self) {
        self.blocks.clear();
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if self.promised {
            return;
        }
        for &b in &self.blocks {
            let _ = self.ctx.heap.free(b);
        }
    }
}

/// Send our HELLO for the `k`-th open with `peer` (`ok`: this end's arguments and
/// blocks are fine; `mine` is promised to the peer once it is out) and wait for
/// the peer's.
fn hello(
    ctx: &CtxInner,
    peer: usize,
    k: u64,
    spec: &Spec,
    ok: bool,
    mine: &mut Reserved,
) -> Result<[u64; HELLO_ARGS]> {
    let flags = spec.duplex as u64 | ((spec.transfer == Transfer::Pull) as u64) << 1;
    let args = [
        k,
        ok as u64,
        spec.role.code(),
        spec.width as u64,
        flags,
        policy_code(spec.policy),
        mine.inbox as u64,
        mine.outbox as u64,
    ];
    ctx.am_request(
        peer,
        Category::Short,
        LibHandler::RpipeHello as u8,
        &args,
        &[],
        None,
    )?;
    mine.promised = ok;
    let mut theirs = None;
    let what =
        crate::api::stall::Wait::call("rpipe_open", Some(peer), "the peer's matching rpipe_open");
    ctx.wait_for(what, || {
        theirs = ctx.rpipe.hellos.lock().remove(&(peer, k));
        Ok(theirs.is_some())
    })?;
    Ok(theirs.expect("waited for it"))
}

/// Check the peer's HELLO against ours. Both ends run the same checks.
fn agree(
    ctx: &CtxInner,
    peer: usize,
    spec: &Spec,
    shape: &Shape,
    t: &[u64; HELLO_ARGS],
) -> Result<()> {
    if t[1] == 0 {
        bail!(
            InvalidArg,
            "rpipe_open: rank {} could not open its end (see the error there)",
            peer
        );
    }
    let Some(role) = Role::from_code(t[2]) else {
        bail!(
            Transport,
            "rpipe_open: rank {} sent role code {}: refused",
            peer,
            t[2]
        );
    };
    let mine = (
        spec.width as u64,
        spec.duplex as u64 | ((spec.transfer == Transfer::Pull) as u64) << 1,
        policy_code(spec.policy),
    );
    if (t[3], t[4], t[5]) != mine {
        bail!(
            InvalidArg,
            "rpipe_open: the two ends disagree (width, mode, policy): rank {} asked for ({}, {:#x}, {}), rank {} for ({}, {:#x}, {})",
            ctx.rank,
            mine.0,
            mine.1,
            mine.2,
            peer,
            t[3],
            t[4],
            t[5]
        );
    }
    let complementary = matches!(
        (spec.role, role),
        (Role::Writer, Role::Reader) | (Role::Reader, Role::Writer) | (Role::Both, Role::Both)
    );
    if !complementary {
        bail!(
            InvalidArg,
            "rpipe_open: roles do not pair up: rank {} is {:?}, rank {} is {:?} (one writer and one reader, or both RPIPE_BOTH)",
            ctx.rank,
            spec.role,
            peer,
            role
        );
    }
    let (hb, hl) = ctx.remote_heaps[peer];
    let inside = |a: u64, len: usize| {
        let a = a as usize;
        a >= hb && a % UNIT == 0 && a.checked_add(len).is_some_and(|e| e <= hb + hl)
    };
    if (spec.role.writes() && !inside(t[6], shape.inbox_bytes()))
        || (spec.role.reads() && !inside(t[7], shape.outbox_bytes()))
    {
        bail!(
            Transport,
            "rpipe_open: rank {} named pipe blocks outside its library heap: refused",
            peer
        );
    }
    Ok(())
}

impl Pipe {
    /// Close this end (both ends call it; blocks until the peer does).
    pub fn close(&self) -> Result<()> {
        am::check_not_in_handler("rpipe_close")?;
        if self.closed.swap(true, Ordering::AcqRel) {
            bail!(State, "the pipe is already closed");
        }
        let ctx = &self.ctx;
        ctx.rpipe.open.lock().remove(&(self.peer, self.id));
        if ctx.check_live().is_err() {
            // The context is gone, and with it the heap the blocks lived in.
            return Ok(());
        }
        let left = self.outstanding();
        if left > 0 {
            self.note_discarded(left);
            if ctx.cfg.verbose {
                eprintln!(
                    "firehose[{}]: rpipe {} with rank {} closed with {} message(s) unread or unfreed",
                    ctx.rank, self.id, self.peer, left
                );
            }
        }
        ctx.conduit.flush(self.peer)?;
        ctx.am_request(
            self.peer,
            Category::Short,
            LibHandler::RpipeBye as u8,
            &[self.id],
            &[],
            None,
        )?;
        // The peer may still put into our inbox or read our outbox until its own
        // close: the blocks wait for its BYE instead of this call waiting for it, so
        // ends close in any order (two ranks that each close their writing pipe
        // first must not wait on each other).
        ctx.rpipe
            .retiring
            .lock()
            .insert((self.peer, self.id), self.blocks());
        sweep(ctx)
    }
}

/// Give back the library heap blocks of closed pipes whose peer has closed too
/// (its BYE arrived: it flushed everything it put into them before sending it).
/// Runs at every open and close.
pub(super) fn sweep(ctx: &CtxInner) -> Result<()> {
    let mut retiring = ctx.rpipe.retiring.lock();
    if retiring.is_empty() {
        return Ok(());
    }
    let mut gone = Vec::new();
    {
        let mut byes = ctx.rpipe.byes.lock();
        retiring.retain(|key, blocks| {
            let done = byes.remove(key);
            if done {
                gone.append(blocks);
            }
            !done
        });
    }
    drop(retiring);
    for b in gone {
        ctx.heap.free(b)?;
    }
    Ok(())
}

/// `bytes` of library heap for a new pipe's block, or `FH_ERR_NO_MEMORY` saying how
/// much was needed and how many closed pipes still hold theirs. When the heap is
/// full while closed pipes still hold blocks, waits (progressing) up to
/// [`RETIRING_WAIT`] for their peers' closes: a program that closes and reopens big
/// pipes in turn must not fail because the peer's close of the last one is still on
/// its way. Bounded, because the peer may be waiting for this open before it closes.
fn alloc_block(ctx: &CtxInner, peer: usize, bytes: usize) -> Result<usize> {
    take_block(ctx, peer, bytes).map_err(|e| {
        let held = match retiring(ctx) {
            0 => String::new(),
            n => format!(" ({n} closed pipe(s) still hold theirs until their peer closes its end)"),
        };
        err!(
            NoMemory,
            "rpipe_open: the pipe needs {} bytes of library heap on rank {}: {}{}",
            bytes,
            ctx.rank,
            e.msg,
            held
        )
    })
}

/// [`alloc_block`]'s allocation and bounded wait, with the heap's own error.
fn take_block(ctx: &CtxInner, peer: usize, bytes: usize) -> Result<usize> {
    let first = ctx.heap.alloc(bytes);
    if first.is_ok() || retiring(ctx) == 0 {
        return first;
    }
    let t0 = std::time::Instant::now();
    let mut got = None;
    ctx.wait_for(
        crate::api::stall::Wait::call(
            "rpipe_open",
            Some(peer),
            "library heap held by closed pipes until their peers close them",
        ),
        || {
            sweep(ctx)?;
            got = ctx.heap.alloc(bytes).ok();
            Ok(got.is_some() || retiring(ctx) == 0 || t0.elapsed() > RETIRING_WAIT)
        },
    )?;
    match got {
        Some(a) => Ok(a),
        None => ctx.heap.alloc(bytes),
    }
}

/// How long an open waits for closed pipes' heap blocks (see [`alloc_block`]).
const RETIRING_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Pipes closed here whose blocks still wait for the peer's close.
fn retiring(ctx: &CtxInner) -> usize {
    ctx.rpipe.retiring.lock().len()
}

fn refuse(ctx: &CtxInner, src: usize, what: &str) {
    ctx.record_async_error(err!(
        Transport,
        "rpipe: refused a {} from rank {}",
        what,
        src
    ));
}

/// rpipe: the open and close handshakes.
pub(crate) static SUBSYSTEM: crate::api::ctx::Subsystem = crate::api::ctx::Subsystem {
    name: "rpipe",
    handlers: &[
        (LibHandler::RpipeHello, handle_hello),
        (LibHandler::RpipeBye, handle_bye),
    ],
    progress: None,
    idle: None,
    shutdown: None,
};

pub(crate) fn handle_hello(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let a = f.args();
    if a.len() != HELLO_ARGS {
        return refuse(ctx, tok.src, "malformed HELLO");
    }
    let mut h = ctx.rpipe.hellos.lock();
    if h.len() >= MAX_PENDING {
        drop(h);
        return refuse(ctx, tok.src, "HELLO beyond the pending limit");
    }
    let mut args = [0u64; HELLO_ARGS];
    args.copy_from_slice(a);
    h.insert((tok.src, a[0]), args);
}

pub(crate) fn handle_bye(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let a = f.args();
    if a.len() != 1 {
        return refuse(ctx, tok.src, "malformed BYE");
    }
    let key = (tok.src, a[0]);
    if let Some(closed) = ctx.rpipe.open.lock().get(&key).and_then(|w| w.upgrade()) {
        closed.store(true, Ordering::Release);
    }
    let mut b = ctx.rpipe.byes.lock();
    if b.len() >= MAX_PENDING {
        drop(b);
        return refuse(ctx, tok.src, "BYE beyond the pending limit");
    }
    b.insert(key);
}
