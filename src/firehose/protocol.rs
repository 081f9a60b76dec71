//! The move protocol's two handlers (seed 000 §3.1, Fig. 2), written against
//! [`MoveHost`], what a context provides: the tables, the registered regions, the
//! invalidation record, counters and a [`super::local::Pinner`]. The messages are
//! [`super::wire`]'s; the context registers these handlers for its AM ids, and the
//! initiator (`initiator`, `pins`) sends the requests.
//!
//! Guarantees (target, [`process_move`]): every piece is validated (one granule,
//! mapped as the access needs, outside the library heap and registered regions)
//! before it is pinned; a carried put is written through the kernel, so unwritable
//! memory is an `FH_ERR_ACCESS` answer, never a fault; a frame that does not decode
//! is refused, never dropped (the mover waits for an answer); the handler never
//! waits: a move meeting a unit a local thread is pinning, or a range it is
//! invalidating, is parked, and [`drain_parked`] runs it again once that pin or
//! invalidation is done.
//!
//! Guarantees (initiator, [`process_answer`]): an answer nobody waits for is
//! ignored; units granted before an invalidation this rank already obeyed are not
//! entered (the waiting request moves again); a carried get's bytes are copied only
//! when the answer carries exactly the bytes asked for.

use super::host::{MoveHost, MoveMsg, Mover};
use super::local::LocalTable;
use super::state::{why_code, ParkedMove};
use super::wire::{Carried, Granted, MoveAnswer, MoveRequest};
use crate::runtime::error::{Error, Status};
use crate::runtime::os;

/// The target's handler of one move request; answers through `reply`. False: parked
/// (nothing was done yet; the host runs it again once the pinning thread is done).
/// A frame that is not a move request is answered with `FH_ERR_INVALID_ARG` (the
/// mover waits for an answer, so it is never dropped).
pub fn process_move(
    host: &dyn MoveHost,
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
    let fh = host.fh();
    // Puts and atomics need writable memory, gets readable: checked against the
    // mappings as they are now, for every piece and for a carried transfer.
    let need = if req.write {
        os::Need::ReadWrite
    } else {
        os::Need::Read
    };
    // Parking first spares a parked move the read of the mappings; the check is
    // made again under the lock that grants (a pin may have begun meanwhile).
    if parked(host, &fh.local.lock(), src, &req, args, body) {
        return false;
    }
    let maps = os::Maps::read();
    // The invalidations this answer already reflects (see `Invalidations`).
    let epoch = host.invalidation_epoch();
    let granted = {
        let mut l = fh.local.lock();
        if parked(host, &l, src, &req, args, body) {
            return false;
        }
        host.count(&fh.stats.moves_handled, 1);
        for &r in &req.releases {
            if !l.remote_release(src, r) {
                host.count(&fh.stats.bad_releases, 1);
            }
        }
        grant_pieces(host, &mut l, src, &req, &maps, need)
    };
    debug_over_f(host, src, req.id);
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
        carry_out(host, &req, &maps, &mut ans, &mut get_buf);
    }
    ans.get_data = &get_buf;
    if ans.status == Status::Access.code() {
        host.access_refused();
    }
    let (a, p) = ans.encode();
    reply(&a, &p);
    // Unpin what the releases left beyond the victim FIFO's limit only now, after
    // answering: the requester does not wait for it.
    fh.local.lock().trim(&mut *host.pinner(None));
    true
}

/// Park the move when a piece meets a unit a local thread is pinning, or a range
/// it is invalidating (handlers never wait). Called under the table lock `l`, so
/// that thread, which finishes under it too, sees the move when it drains the queue
/// after its pin or invalidation.
fn parked(
    host: &dyn MoveHost,
    l: &LocalTable,
    src: usize,
    req: &MoveRequest<'_>,
    args: &[u64],
    body: &[u8],
) -> bool {
    if !req.pins.iter().any(|&(a, b)| b > a && l.must_park(a, b)) {
        return false;
    }
    host.fh().parked.lock().push(ParkedMove {
        src,
        args: args.to_vec(),
        payload: body.to_vec(),
    });
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
    host: &dyn MoveHost,
    l: &mut LocalTable,
    src: usize,
    req: &MoveRequest<'_>,
    maps: &os::Maps,
    need: os::Need,
) -> std::result::Result<Vec<(Granted, usize, usize)>, Refused> {
    let fh = host.fh();
    let unit = fh.params.unit_bytes;
    let mut pinner = host.pinner(Some(maps));
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
            if let Some((s, e)) = host.regions().lookup(cur, 1, Some(src)) {
                out.push((Granted::Region, s, e));
                cur = e.min(pb);
                continue;
            }
            let stop = host.regions().next_start(cur, pb);
            match l.remote_acquire(src, cur, stop, req.write, &mut *pinner) {
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
    host: &dyn MoveHost,
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
            if len > carried_get_cap(host) || 24 * ans.granted.len() + len > host.max_answer() {
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
fn debug_over_f(host: &dyn MoveHost, src: usize, id: u64) {
    if !crate::runtime::config::debug_tables() {
        return;
    }
    let l = host.fh().local.lock();
    let held: Vec<usize> = l
        .units()
        .filter(|(_, u)| u.holder_ranks().contains(&src))
        .map(|(s, _)| s)
        .collect();
    if held.len() > host.fh().params.f {
        eprintln!(
            "[{}] OVER-F peer {} holds {:x?} after move {}",
            host.rank(),
            src,
            held,
            id
        );
    }
}

/// Largest carried get a target answers (it must fit the answer frame).
pub fn carried_get_cap(host: &dyn MoveHost) -> usize {
    host.fh().params.putinmove.min(host.max_answer() / 2)
}

/// Run the move handlers parked because they met a unit being pinned or a range
/// being invalidated, and answer them (by request: their handler returned long
/// ago). A move still meeting such a unit or range parks itself again. An answer
/// that cannot be sent is reported ([`Mover::report_async`]), never dropped
/// silently: its mover waits for it.
pub fn drain_parked<H: Mover>(h: &H) {
    let list = std::mem::take(&mut *h.fh().parked.lock());
    for pm in list {
        let reply = |args: &[u64], payload: &[u8]| {
            if let Err(e) = h.send(pm.src, MoveMsg::Answer, args, payload) {
                h.report_async(Error::new(
                    e.status,
                    format!(
                        "the answer to rank {}'s parked firehose move was not sent: {}",
                        pm.src, e.msg
                    ),
                ));
            }
        };
        process_move(h, pm.src, &pm.args, &pm.payload, &reply);
    }
}

/// The initiator's handler of a move answer from `src`: enter what was granted into
/// the peer's table and wake the mover. An answer nobody waits for is ignored; one
/// that does not decode fails the move with `FH_ERR_INTERNAL`.
pub fn process_answer(host: &dyn MoveHost, src: usize, args: &[u64], payload: &[u8]) {
    let fh = host.fh();
    let Some(id) = MoveAnswer::id_of(args) else {
        return;
    };
    if !fh.moves.lock().contains_key(&id) {
        return; // not ours (or a duplicate): ignore
    }
    let Some(ans) = MoveAnswer::decode(args, payload) else {
        fh.get_dst.lock().remove(&id);
        fh.peers[src].lock().abort_move(id);
        fh.moves
            .lock()
            .insert(id, Some((Status::Internal.code(), false, 0)));
        return;
    };
    let mut units = Vec::new();
    let mut read_only = Vec::new();
    for &(g, s, e) in &ans.granted {
        if e <= s || host.invalidations_seen().stale(src, ans.epoch, s, e) {
            // Made before an invalidation of this range that we already obeyed: the
            // target no longer counts us as a holder there. The waiting request
            // moves again.
            continue;
        }
        match g {
            Granted::Unit => units.push((s, e, false)),
            Granted::UnitReadOnly => {
                units.push((s, e, false));
                read_only.push((s, e));
            }
            Granted::Region => {
                host.remote_regions().insert(src, s, e);
                units.push((s, e, true));
            }
        }
    }
    {
        let mut t = fh.peers[src].lock();
        t.complete_move(id, &units);
        for (s, e) in read_only {
            t.mark_read_only(s, e);
        }
    }
    let mut done = ans.carried_done;
    if let Some((dst, len)) = fh.get_dst.lock().remove(&id) {
        if done && ans.get_data.len() == len {
            // SAFETY: `dst` is the destination of the get that sent this move, valid
            // for `len` bytes until that get completes (it is waiting for this).
            unsafe { std::ptr::copy_nonoverlapping(ans.get_data.as_ptr(), dst as *mut u8, len) };
        } else {
            done = false;
        }
    }
    // Only a move someone still waits for (an abandoned one left no slot).
    if let Some(slot) = fh.moves.lock().get_mut(&id) {
        *slot = Some((ans.status, done, ans.why));
    }
}

#[cfg(test)]
mod tests {
    //! The handlers against a fake host, on real pages: one writable, one
    //! read-only, one without access.
    use super::*;
    use crate::firehose::fake::{host, pages, unmap, Host};
    use std::cell::RefCell;

    /// Run one request through the target's handler; the decoded answer's
    /// (status, granted units, carried_done).
    fn ask(h: &Host, req: &MoveRequest<'_>) -> (i32, Vec<(Granted, usize, usize)>, bool) {
        let (a, p) = req.encode();
        let out = RefCell::new(None);
        let parked = !process_move(h, 1, &a, &p, &|args, payload| {
            let ans = MoveAnswer::decode(args, payload).expect("the answer decodes");
            *out.borrow_mut() = Some((ans.status, ans.granted.clone(), ans.carried_done));
        });
        assert!(!parked, "nothing is being pinned locally");
        out.into_inner().expect("every request is answered")
    }

    fn req(
        pins: Vec<(usize, usize)>,
        write: bool,
        carried: Carried,
        data: &[u8],
    ) -> MoveRequest<'_> {
        MoveRequest {
            id: 7,
            releases: vec![],
            pins,
            carried,
            write,
            put_data: data,
        }
    }

    #[test]
    fn target_grants_refuses_and_carries() {
        let h = host(0);
        let pg = os::page_size();
        let b = pages();
        // A writable page: granted and pinned, and a carried put is written.
        let data = [0xabu8; 8];
        let (st, granted, done) = ask(
            &h,
            &req(
                vec![(b, b + pg)],
                true,
                Carried::Put {
                    addr: b + 8,
                    len: 8,
                },
                &data,
            ),
        );
        assert_eq!((st, done), (Status::Ok.code(), true));
        assert_eq!(granted, vec![(Granted::Unit, b, b + pg)]);
        assert_eq!(h.pinned.borrow().as_slice(), &[(b, b + pg)]);
        // SAFETY: b + 8 lies in the writable page mapped above, 8-byte aligned.
        let written = unsafe { *((b + 8) as *const u64) };
        assert_eq!(written, u64::from_le_bytes(data));
        // The read-only page: a get is granted, a put refused for access.
        let ro = b + pg;
        let (st, granted, _) = ask(&h, &req(vec![(ro, ro + pg)], false, Carried::None, &[]));
        assert_eq!(st, Status::Ok.code());
        assert_eq!(granted.len(), 1);
        let (st, granted, _) = ask(&h, &req(vec![(ro + 8, ro + 16)], true, Carried::None, &[]));
        assert_eq!((st, granted.len()), (Status::Access.code(), 0));
        // No access at all: refused, never pinned, counted.
        let none = b + 2 * pg;
        let (st, _, _) = ask(&h, &req(vec![(none, none + 8)], false, Carried::None, &[]));
        assert_eq!(st, Status::Access.code());
        assert!(h.pinned.borrow().iter().all(|&(s, _)| s != none));
        assert_eq!(h.refused.get(), 2);
        // A piece over two granules is malformed: FH_ERR_INVALID_ARG.
        let (st, _, _) = ask(
            &h,
            &req(vec![(b + pg - 8, b + pg + 8)], false, Carried::None, &[]),
        );
        assert_eq!(st, Status::InvalidArg.code());
        unmap(b);
    }

    /// A move meeting a range a local thread is invalidating parks (no answer, no
    /// pin) until the invalidation ends; a move elsewhere is answered meanwhile.
    #[test]
    fn moves_meeting_a_range_being_invalidated_park() {
        let h = host(0);
        let pg = os::page_size();
        let b = pages();
        h.fh.local.lock().begin_quiesce(b, b + pg);
        let (a, p) = req(vec![(b + 8, b + 16)], true, Carried::None, &[]).encode();
        let answered = RefCell::new(false);
        let ran = process_move(&h, 1, &a, &p, &|_, _| *answered.borrow_mut() = true);
        assert!(!ran && !*answered.borrow(), "parked, not answered");
        assert_eq!(h.fh.parked.lock().len(), 1);
        assert!(h.pinned.borrow().is_empty(), "nothing pinned while parked");
        let ro = b + pg;
        let (st, _, _) = ask(&h, &req(vec![(ro, ro + 8)], false, Carried::None, &[]));
        assert_eq!(st, Status::Ok.code(), "the next page is served meanwhile");
        h.fh.local.lock().end_quiesce(b, b + pg);
        let pm = h.fh.parked.lock().pop().expect("still parked");
        let (st, granted, _) = {
            let out = RefCell::new(None);
            assert!(process_move(
                &h,
                1,
                &pm.args,
                &pm.payload,
                &|args, payload| {
                    let ans = MoveAnswer::decode(args, payload).expect("decodes");
                    *out.borrow_mut() = Some((ans.status, ans.granted.clone(), ans.carried_done));
                }
            ));
            out.into_inner()
                .expect("answered once the invalidation ended")
        };
        assert_eq!((st, granted.len()), (Status::Ok.code(), 1));
        unmap(b);
    }

    /// A parked move whose answer cannot be sent once it runs again is reported
    /// (its mover waits for that answer), not dropped; one that can is sent.
    #[test]
    fn a_parked_answer_that_cannot_be_sent_is_reported() {
        let h = host(0);
        let pg = os::page_size();
        let b = pages();
        let park = || {
            h.fh.local.lock().begin_quiesce(b, b + pg);
            let (a, p) = req(vec![(b + 8, b + 16)], false, Carried::None, &[]).encode();
            assert!(!process_move(&h, 1, &a, &p, &|_, _| panic!(
                "answered while parked"
            )));
            h.fh.local.lock().end_quiesce(b, b + pg);
        };
        park();
        h.answers_fail.set(true);
        drain_parked(&h);
        assert!(h.fh.parked.lock().is_empty());
        assert_eq!(h.answers_sent.get(), 0);
        {
            let rep = h.reported.borrow();
            assert_eq!(rep.len(), 1, "the lost answer is reported");
            assert_eq!(rep[0].status, Status::Transport);
            assert!(
                rep[0].msg.contains("rank 1's parked firehose move"),
                "{}",
                rep[0].msg
            );
        }
        park();
        h.answers_fail.set(false);
        drain_parked(&h);
        assert_eq!((h.answers_sent.get(), h.reported.borrow().len()), (1, 1));
        unmap(b);
    }

    #[test]
    fn a_frame_that_does_not_decode_is_refused_not_dropped() {
        let h = host(0);
        let answered = RefCell::new(None);
        process_move(&h, 1, &[42, 1 << 40], &[], &|args, payload| {
            *answered.borrow_mut() = MoveAnswer::decode(args, payload).map(|a| (a.id, a.status));
        });
        assert_eq!(answered.into_inner(), Some((42, Status::InvalidArg.code())));
    }

    #[test]
    fn an_answer_nobody_waits_for_is_ignored() {
        let h = host(0);
        let ans = MoveAnswer {
            id: 99,
            status: Status::Ok.code(),
            why: 0,
            granted: vec![(Granted::Unit, 4096, 8192)],
            carried_done: false,
            epoch: 0,
            get_data: &[],
        };
        let (a, p) = ans.encode();
        process_answer(&h, 1, &a, &p);
        assert!(h.fh.moves.lock().is_empty());
        assert_eq!(h.fh.peers[1].lock().used, 0);
    }
}
