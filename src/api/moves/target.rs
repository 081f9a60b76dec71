//! The target of the move protocol: the `H_FH_MOVE` handler. Guarantees: every piece
//! is validated (one granule, mapped as the access needs, outside the library heap)
//! before it is pinned; a carried put is written through the kernel, so unwritable
//! memory is an `FH_ERR_ACCESS` answer, never a fault; a frame that does not decode
//! is refused, never dropped (the mover waits for an answer); the handler never
//! waits: a move meeting a unit a local thread is pinning is parked and replayed.

use super::*;

pub(crate) fn handle_move(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let reply = |args: &[u64], payload: &[u8]| {
        let _ = ctx.am_reply(
            tok,
            Category::Medium,
            LibHandler::FhAnswer as u8,
            args,
            payload,
            None,
        );
    };
    process_move(ctx, tok.src, f.args(), f.payload, &reply);
}

/// The body of a move (see [`handle_move`]); answers through `reply`. False: parked
/// (nothing was done yet; it runs again from [`CtxInner::fh_drain_parked`]).
/// A frame that is not a move request is answered with `FH_ERR_INVALID_ARG` (the
/// mover waits for an answer, so it is never dropped).
fn process_move(
    ctx: &CtxInner,
    src: usize,
    args: &[u64],
    body: &[u8],
    reply: &dyn Fn(&[u64], &[u8]),
) -> bool {
    let Some(req) = MoveRequest::decode(args, body) else {
        if let Some(&id) = args.first() {
            let (a, p) = refusal(id, Status::InvalidArg, 0, 0).encode();
            reply(&a, &p);
        }
        return true;
    };
    let fh = &ctx.fh;
    // Puts and atomics need writable memory, gets readable: checked against the
    // mappings as they are now, for every piece and for a carried transfer.
    let need = if req.write {
        os::Need::ReadWrite
    } else {
        os::Need::Read
    };
    let maps = os::Maps::read();
    // The invalidations this answer already reflects (see `Invalidations`).
    let epoch = ctx.inval_epoch.load(Ordering::Acquire);
    let granted = {
        let mut l = fh.local.lock();
        if req.pins.iter().any(|&(a, b)| b > a && l.any_pinning(a, b)) {
            // A piece meets a unit a local thread is pinning: park the move (handlers
            // never wait). Parked under the table lock, so the pinning thread, which
            // finishes under it too, sees it when it drains the queue after its pin.
            fh.parked.lock().push(ParkedMove {
                src,
                args: args.to_vec(),
                payload: body.to_vec(),
            });
            return false;
        }
        ctx.count(&fh.stats.moves_handled, 1);
        for &r in &req.releases {
            if !l.remote_release(src, r) {
                ctx.count(&fh.stats.bad_releases, 1);
            }
        }
        grant_pieces(ctx, &mut l, src, &req, &maps, need)
    };
    fh_debug_over_f(ctx, src, req.id);
    let mut ans = match granted {
        Ok(granted) => MoveAnswer {
            id: req.id,
            status: Status::Ok.code(),
            why: 0,
            granted,
            carried_done: false,
            epoch,
            get_data: &[],
        },
        Err((st, why)) => refusal(req.id, st, why, epoch),
    };
    let mut get_buf = Vec::new();
    if ans.status == Status::Ok.code() {
        carry_out(ctx, &req, &maps, &mut ans, &mut get_buf);
    }
    ans.get_data = &get_buf;
    if ans.status == Status::Access.code() {
        ctx.count(&ctx.stats.access_refused, 1);
    }
    let (a, p) = ans.encode();
    reply(&a, &p);
    // Unpin what the releases left beyond the victim FIFO's limit only now, after
    // answering: the requester does not wait for it.
    fh.local.lock().trim(&mut CtxPinner { ctx, maps: None });
    true
}

/// Why a move was refused: its status and, with `FH_ERR_ACCESS`, an index into
/// [`WHY`].
type Refused = (Status, u8);

/// An answer that grants nothing.
fn refusal(id: u64, st: Status, why: u8, epoch: u64) -> MoveAnswer<'static> {
    MoveAnswer {
        id,
        status: st.code(),
        why,
        granted: Vec::new(),
        carried_done: false,
        epoch,
        get_data: &[],
    }
}

/// Reference, pinning where needed, the units covering every piece of `req` on
/// behalf of `src` (registered regions answer as prepinned). Err: the status and,
/// with `FH_ERR_ACCESS`, why (an index into [`WHY`]).
fn grant_pieces(
    ctx: &CtxInner,
    l: &mut crate::firehose::local::LocalTable,
    src: usize,
    req: &MoveRequest<'_>,
    maps: &os::Maps,
    need: os::Need,
) -> std::result::Result<Vec<(Granted, usize, usize)>, Refused> {
    let fh = &ctx.fh;
    let unit = fh.params.unit_bytes;
    let mut pinner = CtxPinner {
        ctx,
        maps: Some(maps),
    };
    let mut out = Vec::new();
    for &(pa, pb) in &req.pins {
        let (glo, ghi) = fh.params.granule(pa);
        if pa == 0 || pb <= pa || pb - pa > unit || pa < glo || pb > ghi {
            return Err((Status::InvalidArg, 0));
        }
        if !maps.allows(pa, pb - pa, need) {
            return Err((
                Status::Access,
                why_code(maps.why_not(pa, pb - pa, need)) as u8,
            ));
        }
        let mut cur = pa;
        while cur < pb {
            if let Some((s, e)) = ctx.local_regs.lookup(cur, 1, Some(src)) {
                out.push((Granted::Region, s, e));
                cur = e.min(pb);
                continue;
            }
            let stop = ctx.local_regs.next_start(cur, pb);
            match l.remote_acquire(src, cur, stop, req.write, &mut pinner) {
                Ok(units) => out.extend(units.into_iter().map(|(s, e, ro)| {
                    let g = if ro {
                        Granted::UnitReadOnly
                    } else {
                        Granted::Unit
                    };
                    (g, s, e)
                })),
                Err(e) if e.status == Status::Access => {
                    // Mapped as needed, yet refused: a unit pinned read-only, or
                    // memory the library uses.
                    let why = match maps.why_not(cur, stop - cur, need) {
                        Some(w) => why_code(Some(w)),
                        None if req.write => why_code(Some("read-only")),
                        None => 7,
                    };
                    return Err((Status::Access, why as u8));
                }
                Err(e) => return Err((e.status, 0)),
            }
            cur = stop;
        }
    }
    Ok(out)
}

/// The transfer a granted move carries: write a carried put (checked against the
/// mappings), or read a carried get through the kernel into `get_buf`.
fn carry_out(
    ctx: &CtxInner,
    req: &MoveRequest<'_>,
    maps: &os::Maps,
    ans: &mut MoveAnswer<'_>,
    get_buf: &mut Vec<u8>,
) {
    match req.carried {
        Carried::None => {}
        Carried::Put { addr, len } => {
            let covered = addr != 0
                && addr.checked_add(len).is_some()
                && maps.allows(addr, len, os::Need::ReadWrite);
            if !covered {
                ans.status = Status::Access.code();
                ans.why = why_code(maps.why_not(addr, len, os::Need::ReadWrite)) as u8;
                return;
            }
            match os::write_checked(addr, req.put_data) {
                Ok(()) => ans.carried_done = true,
                Err(e) => ans.status = e.status.code(),
            }
        }
        Carried::Get { addr, len } => {
            if len > fh_putinmove_cap(ctx) || 24 * ans.granted.len() + len > ctx.am_max_medium() {
                return;
            }
            // Read through the kernel (never faults); answer with the bytes.
            get_buf.resize(len, 0);
            match os::copy_checked(get_buf.as_mut_ptr() as usize, addr, len) {
                Ok(()) => ans.carried_done = true,
                Err(_) => get_buf.clear(),
            }
        }
    }
}

/// `FH_DEBUG_TABLES`: say when a peer holds more firehoses here than f.
fn fh_debug_over_f(ctx: &CtxInner, src: usize, id: u64) {
    if !crate::runtime::config::debug_tables() {
        return;
    }
    let l = ctx.fh.local.lock();
    let held: Vec<usize> = l
        .units()
        .filter(|(_, u)| u.holder_ranks().contains(&src))
        .map(|(s, _)| s)
        .collect();
    if held.len() > ctx.fh.params.f {
        eprintln!(
            "[{}] OVER-F peer {} holds {:x?} after move {}",
            ctx.rank, src, held, id
        );
    }
}

/// Largest carried get a target answers (it must fit the answer frame).
fn fh_putinmove_cap(ctx: &CtxInner) -> usize {
    ctx.fh.params.putinmove.min(ctx.am_max_medium() / 2)
}

impl CtxInner {
    /// Run the moves handlers parked because they met a unit being pinned, and
    /// answer them (by request: their handler returned long ago).
    pub(super) fn fh_drain_parked(&self) {
        let list = std::mem::take(&mut *self.fh.parked.lock());
        for pm in list {
            let reply = |args: &[u64], payload: &[u8]| {
                let _ = self.am_request(
                    pm.src,
                    Category::Medium,
                    LibHandler::FhAnswer as u8,
                    args,
                    payload,
                    None,
                );
            };
            // Parks itself again if the unit is still being pinned.
            process_move(self, pm.src, &pm.args, &pm.payload, &reply);
        }
    }
}
