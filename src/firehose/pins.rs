//! The explicit pin API (seed 000 §3.3: local and remote pins, their try, partial
//! and asynchronous forms) and the non-blocking acquisition of a transfer, against
//! [`Mover`]. The API layer checks the arguments and answers memory that needs no
//! pin (heap, registered regions) before it calls here.
//!
//! Guarantees: a pin holds its firehoses until [`release`]; an explicit pin's
//! references are counted in `FhState::pin_refs` (and this thread's share in
//! `MY_PIN_REFS`) while it lives, so a request blocked behind them can tell it is
//! stuck; an asynchronous pin advances only in progress, never in a handler, and its
//! callback runs as handler context.

use super::host::{MoveMsg, Mover};
use super::initiator::{self, any_read_only, read_only_error, Carry, Grant};
use super::remote::Plan;
use super::state::*;
use super::wire::{Carried, MoveRequest};
use crate::bail;
use crate::runtime::error::{Error, Result, Status};
use std::sync::atomic::Ordering;

/// How a local pin behaves on a miss.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PinHow {
    Blocking,
    Try,
    Partial,
}

/// A pin of memory that needs none (library heap, registered regions: they act as
/// prepinned): it holds no references. `rank`: `None` for a local pin.
pub fn prepinned<H: Mover>(h: &H, rank: Option<usize>, addr: usize, len: usize) -> Box<PinObj> {
    Box::new(PinObj {
        owner: h.owner(),
        start: addr,
        len,
        rank,
        pins: OpPins {
            rank: rank.unwrap_or(h.rank()),
            ..OpPins::default()
        },
    })
}

/// `fh_local_pin` and its try and partial forms, for `[addr, end)`.
pub fn local<H: Mover>(h: &H, addr: usize, end: usize, how: PinHow) -> Result<Box<PinObj>> {
    let fh = h.fh();
    let len = end - addr;
    let (s, e, held) = match how {
        PinHow::Blocking => {
            h.check_not_in_handler("fh_local_pin")?;
            if fh.params.piece_count(addr, len) > fh.params.victim_units.max(1) {
                bail!(
                    NoResource,
                    "{} bytes need more units than the local share (MAXVICTIM = {} units of {} bytes)",
                    len,
                    fh.params.victim_units,
                    fh.params.unit_bytes
                );
            }
            (addr, end, initiator::acquire_local(h, addr, len)?)
        }
        PinHow::Try | PinHow::Partial => {
            let r = fh.local.lock().local_try(addr, end, how == PinHow::Partial);
            let Some(x) = r else {
                h.count(&fh.stats.try_misses, 1);
                bail!(NotPinned, "[{:#x}, +{}) is not pinned here", addr, len)
            };
            h.count(&fh.stats.try_hits, 1);
            if how == PinHow::Partial {
                h.count(&fh.stats.partial_pins, 1);
            }
            x
        }
    };
    Ok(tracked(h, pin(h, None, s, e - s, held)))
}

/// A pin of `[start, +len)` holding `held` (remote references when `rank` is set).
fn pin<H: Mover>(
    h: &H,
    rank: Option<usize>,
    start: usize,
    len: usize,
    held: Vec<super::local::Held>,
) -> Box<PinObj> {
    let (remote, local) = match rank {
        Some(_) => (held, vec![]),
        None => (vec![], held),
    };
    Box::new(PinObj {
        owner: h.owner(),
        start,
        len,
        rank,
        pins: OpPins {
            rank: rank.unwrap_or(h.rank()),
            remote,
            local,
        },
    })
}

/// `fh_try_remote_pin` / `fh_partial_remote_pin` for `[addr, end)` of `rank`.
pub fn remote_try<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    end: usize,
    partial: bool,
) -> Result<Box<PinObj>> {
    let fh = h.fh();
    let r = fh.peers[rank].lock().partial(addr, end, !partial);
    let Some((s, e, held)) = r else {
        h.count(&fh.stats.try_misses, 1);
        bail!(
            NotPinned,
            "[{:#x}, +{}) on rank {} is not covered by firehoses of this rank",
            addr,
            end - addr,
            rank
        )
    };
    h.count(&fh.stats.try_hits, 1);
    if partial {
        h.count(&fh.stats.partial_pins, 1);
    }
    Ok(tracked(h, pin(h, Some(rank), s, e - s, held)))
}

/// A pin may use at most f firehoses (and one move's worth), counting the units of
/// `rank`'s memory already in the table (`PeerTable::fitting`).
fn check_remote_size(fh: &FhState, rank: usize, addr: usize, len: usize) -> Result<()> {
    let p = &fh.params;
    let n = p.piece_count(addr, len);
    let most = p.f.min(MAX_PIECES_PER_MOVE);
    if n > most {
        bail!(
            NoResource,
            "[{:#x}, +{}) needs {} firehoses; a pin may use at most {} (f) — pin it in parts",
            addr,
            len,
            n,
            most
        );
    }
    if fh.peers[rank].lock().fitting(p, addr, len, most) < len {
        bail!(
            NoResource,
            "[{:#x}, +{}) of rank {} needs more than the {} firehoses a pin may use (its memory is pinned there in many small units) — pin it in parts",
            addr,
            len,
            rank,
            most
        );
    }
    Ok(())
}

/// `fh_remote_pin`, blocking.
pub fn remote<H: Mover>(h: &H, rank: usize, addr: usize, len: usize) -> Result<Box<PinObj>> {
    check_remote_size(h.fh(), rank, addr, len)?;
    match initiator::acquire_remote(h, rank, addr, len, Carry::None, true)? {
        Grant::Pins(pins) => Ok(tracked(
            h,
            Box::new(PinObj {
                owner: h.owner(),
                start: addr,
                len,
                rank: Some(rank),
                pins,
            }),
        )),
        Grant::Done => bail!(Internal, "a pin carried a put"),
    }
}

/// `fh_remote_pin` with a callback: a hit returns the pin; a miss sends the move
/// and returns `None`; `cb` runs later from a library call on this context.
pub fn remote_async<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    len: usize,
    cb: Box<dyn FnOnce(Result<Box<PinObj>>) + Send>,
) -> Result<Option<Box<PinObj>>> {
    check_remote_size(h.fh(), rank, addr, len)?;
    start(h, PendingPin::new(rank, addr, len, cb, true, true))
}

/// Acquire firehoses for a non-blocking transfer without waiting (seed 002:
/// non-blocking even on a miss): `Ok(Some)` on a hit; `Ok(None)` when a move was
/// sent, and `done` receives the references (or the refusal) from a later library
/// call on this context. `Err(NoResource)`: more than one move's worth of firehoses
/// (the caller takes the blocking path).
pub fn acquire_async<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    len: usize,
    write: bool,
    done: Box<dyn FnOnce(Result<OpPins>) + Send>,
) -> Result<Option<OpPins>> {
    check_remote_size(h.fh(), rank, addr, len)?;
    let cb = Box::new(move |r: Result<Box<PinObj>>| done(r.map(|p| p.pins)));
    let pp = PendingPin::new(rank, addr, len, cb, write, false);
    Ok(start(h, pp)?.map(|p| p.pins))
}

/// First step of a pending pin; queued for progress unless it is done.
fn start<H: Mover>(h: &H, mut pp: PendingPin) -> Result<Option<Box<PinObj>>> {
    let r = advance(h, &mut pp)?;
    if r.is_none() {
        let mut g = h.fh().pending_pins.lock();
        g.push(pp);
        h.fh().has_pending_pins.store(true, Ordering::Release);
    }
    Ok(r)
}

/// One non-blocking step of a pending pin: `Some` when it holds its references.
///
/// Kept in one piece: it is one transition of the `PendingPin` state machine
/// (`waits`, `own`): consume our move's answer, then each `Plan` arm sets the next
/// state, and the `Move` arm sends under the id just checked against the gate and
/// used for the plan.
fn advance<H: Mover>(h: &H, pp: &mut PendingPin) -> Result<Option<Box<PinObj>>> {
    let fh = h.fh();
    {
        let m = fh.moves.lock();
        if pp
            .waits
            .iter()
            .any(|i| m.get(i).is_some_and(|s| s.is_none()))
        {
            return Ok(None);
        }
    }
    // Consume the answer of our own move (errors end the pin). Moves of other
    // requests we waited for are theirs to consume: their senders wait on them.
    pp.waits.clear();
    if let Some(id) = pp.own.take() {
        if let Some(Some((code, _, _))) = fh.moves.lock().remove(&id) {
            if code != 0 {
                let st = Status::from_code(code).unwrap_or(Status::Access);
                return Err(Error::new(
                    st,
                    format!(
                        "rank {} refused to pin [{:#x}, +{})",
                        pp.rank, pp.addr, pp.len
                    ),
                ));
            }
        }
    }
    let id = h.new_id();
    if fh.gates[pp.rank].held_by_other(id) {
        // A request won seed 000 §4.1's deadlock avoidance: let it finish before
        // this pin competes for firehoses again (it would only steal them back).
        return Ok(None);
    }
    let plan = fh.peers[pp.rank]
        .lock()
        .plan(&fh.params, pp.addr, pp.len, id, false);
    match plan {
        Plan::Hit(held) => {
            let pins = OpPins {
                rank: pp.rank,
                remote: held,
                local: vec![],
            };
            if pp.write && any_read_only(&fh.peers[pp.rank].lock(), &pins.remote) {
                initiator::release(h, pins);
                return Err(read_only_error(pp.rank, pp.addr, pp.len));
            }
            let pin = Box::new(PinObj {
                owner: h.owner(),
                start: pp.addr,
                len: pp.len,
                rank: Some(pp.rank),
                pins,
            });
            Ok(Some(if pp.track { tracked(h, pin) } else { pin }))
        }
        Plan::Wait(ids) => {
            pp.waits = ids;
            Ok(None)
        }
        Plan::NeedReplacements => {
            // Every firehose to that peer is referenced by operations in flight:
            // the waiter completes some (`initiator::recover`), then this tries again.
            fh.starved[pp.rank].store(true, Ordering::Release);
            Ok(None)
        }
        Plan::Move { releases, pins } => {
            let (args, payload) = MoveRequest {
                id,
                releases,
                pins,
                carried: Carried::None,
                write: pp.write,
                put_data: &[],
            }
            .encode();
            fh.moves.lock().insert(id, None);
            if let Err(e) = h.send(pp.rank, MoveMsg::Request, &args, &payload) {
                fh.moves.lock().remove(&id);
                fh.peers[pp.rank].lock().abort_move(id);
                return Err(e);
            }
            h.count(&fh.stats.moves_sent, 1);
            h.count(&fh.stats.misses, 1);
            pp.waits = vec![id];
            pp.own = Some(id);
            Ok(None)
        }
    }
}

/// Advance pending non-blocking pins; run the callbacks of finished ones (outside
/// every lock, as handler context: they must not block). The context's progress
/// hook, on every poll: one load when nothing is pending.
#[inline]
pub fn progress<H: Mover>(h: &H) {
    if h.fh().has_pending_pins.load(Ordering::Acquire) && !h.in_handler() {
        progress_pending(h);
    }
}

#[cold]
#[inline(never)]
fn progress_pending<H: Mover>(h: &H) {
    let fh = h.fh();
    let mut list = {
        let mut g = fh.pending_pins.lock();
        if g.is_empty() {
            fh.has_pending_pins.store(false, Ordering::Release);
            return;
        }
        std::mem::take(&mut *g)
    };
    let mut keep = Vec::new();
    let mut ready = Vec::new();
    for mut pp in list.drain(..) {
        match advance(h, &mut pp) {
            Ok(None) => keep.push(pp),
            Ok(Some(pin)) => ready.push((pp.cb, Ok(pin))),
            Err(e) => ready.push((pp.cb, Err(e))),
        }
    }
    fh.pending_pins.lock().extend(keep);
    for (cb, r) in ready {
        h.run_as_handler(Box::new(move || cb(r)));
    }
}

/// `fh_release`: drop the pin's references.
pub fn release<H: Mover>(h: &H, pin: PinObj) {
    let fh = h.fh();
    let size = fh.peers.len();
    let (rank, nr, nl) = (pin.pins.rank, pin.pins.remote.len(), pin.pins.local.len());
    initiator::release(h, pin.pins);
    // Uncounted only after the references are gone (a waiter comparing the two
    // may see more references than pins, never fewer: it keeps waiting).
    fh.pin_refs[rank].fetch_sub(nr as u64, Ordering::AcqRel);
    fh.pin_refs[size].fetch_sub(nl as u64, Ordering::AcqRel);
    my_pin_refs_add(h.owner(), rank, nr as u64, false);
    my_pin_refs_add(h.owner(), size, nl as u64, false);
}

/// Count an explicit pin's references (see `FhState::pin_refs`).
fn tracked<H: Mover>(h: &H, p: Box<PinObj>) -> Box<PinObj> {
    let fh = h.fh();
    let size = fh.peers.len();
    let (nr, nl) = (p.pins.remote.len() as u64, p.pins.local.len() as u64);
    fh.pin_refs[p.pins.rank].fetch_add(nr, Ordering::AcqRel);
    fh.pin_refs[size].fetch_add(nl, Ordering::AcqRel);
    my_pin_refs_add(h.owner(), p.pins.rank, nr, true);
    my_pin_refs_add(h.owner(), size, nl, true);
    p
}
