//! The initiator of the move protocol (seed 000 §3.1, Fig. 2; Firehose-SMP §4.1 for
//! threads sharing the tables), against [`Mover`]: plan a request against the peer's
//! remote table, wait for moves in flight (PENDING entries), send one move request
//! for the misses and wait for its answer (`protocol::process_answer` enters it);
//! the local side's two-phase request (§4.1); and the references operations hold
//! until they complete.
//!
//! Guarantees: a request either holds every firehose it needs or none (rollback);
//! a request never waits at a gate holding references (the DA winner may need
//! them); a move nobody waits for any more is ignored when its answer arrives; a
//! request stuck behind explicit pins whose threads are all blocked here too fails
//! with `FH_ERR_NO_RESOURCE` instead of hanging.

use super::host::{MoveMsg, Mover};
use super::local::{Held, LocalBegin};
use super::protocol;
use super::remote::{Acq, PeerTable, Step};
use super::settings::Strategy;
use super::smp::{self, DaClient, DaTally, Round};
use super::state::*;
use super::wire::{Carried, MoveRequest};
use crate::runtime::error::{Error, Result, Status};
use crate::{bail, err};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A small transfer that may ride in the move (seed 000's put-in-move, and the same
/// for gets: the answer carries the data).
#[derive(Clone, Copy, Debug)]
pub enum Carry {
    None,
    /// Source of a put.
    Put(*const u8),
    /// Destination of a get.
    Get(*mut u8),
}

/// What an RMA request was granted.
pub enum Grant {
    /// Hold these references until the operation completes.
    Pins(OpPins),
    /// A put was carried by the move and is complete.
    Done,
}

impl Grant {
    fn into_pins(self) -> OpPins {
        match self {
            Grant::Pins(p) => p,
            Grant::Done => OpPins::default(),
        }
    }
}

/// Does any of `held` lie on memory the target pinned read-only?
pub(super) fn any_read_only(t: &PeerTable, held: &[Held]) -> bool {
    held.iter().any(|h| t.is_read_only(h.0))
}

/// The refusal of a put or an atomic on memory the target pinned read-only.
pub(super) fn read_only_error(rank: usize, addr: usize, len: usize) -> Error {
    err!(
        Access,
        "[{:#x}, +{}) of rank {} is read-only memory there: puts and atomics are refused",
        addr,
        len,
        rank
    )
}

/// Largest part (bytes from `addr`) of a transfer to `rank` one acquisition may
/// cover: at most f firehoses (and what one move's frame holds), counting the units
/// of `rank`'s memory already in the table ([`PeerTable::fitting`]), and, on
/// conduits pinning the local side, at most the local share for the local buffer
/// at `local`.
pub fn chunk<H: Mover>(h: &H, rank: usize, addr: usize, len: usize, local: usize) -> usize {
    let fh = h.fh();
    let p = &fh.params;
    // A move's request and answer must fit one medium frame.
    let max_pieces = p.f.min(MAX_PIECES_PER_MOVE).min(h.max_answer() / 96).max(1);
    let mut c = if p.piece_count(addr, len) <= max_pieces {
        len
    } else {
        let (lo, _) = p.granule(addr);
        lo + max_pieces * p.unit_bytes - addr
    };
    c = fh.peers[rank].lock().fitting(p, addr, c, p.f);
    if fh.local_side {
        let lmax = p.victim_units.max(1);
        while c > 1 && p.piece_count(local, c) > lmax {
            let (lo, _) = p.granule(local + c - 1);
            c = if lo > local { lo - local } else { c / 2 };
        }
    }
    c.max(1)
}

/// A local request going through seed 000 §4.1's protocol (all or nothing, so a
/// rollback has nothing to return).
struct LocalReq<'a, H: Mover> {
    h: &'a H,
    addr: usize,
    len: usize,
    /// The table's release count at the last step.
    epoch: u64,
    /// Set once the request waits (see `DaClient::blocking`).
    blocked: Option<Blocked<'a>>,
}

impl<H: Mover> DaClient for LocalReq<'_, H> {
    type Out = Result<Vec<Held>>;
    type Err = Error;

    fn step(&mut self) -> Round<Result<Vec<Held>>> {
        let h = self.h;
        let fh = h.fh();
        let (a, b) = (self.addr, self.addr + self.len);
        let begin = {
            let mut l = fh.local.lock();
            self.epoch = l.releases;
            l.local_begin(a, b, &mut *h.pinner(None))
        };
        let r = self.finish(begin);
        // Moves parked on units that are pinned (or dropped) now can run.
        if !fh.parked.lock().is_empty() {
            protocol::drain_parked(h);
        }
        r
    }

    fn rollback(&mut self) {}

    fn try_hit(&mut self) -> Option<Result<Vec<Held>>> {
        let (a, b) = (self.addr, self.addr + self.len);
        let held = self.h.fh().local.lock().local_try(a, b, false)?;
        Some(Ok(held.2))
    }

    fn holds(&self) -> bool {
        false
    }

    fn poll(&mut self, _wait: bool) -> Result<bool> {
        let h = self.h;
        let fh = h.fh();
        if fh.inflight.lock().iter().any(|q| !q.is_empty()) {
            h.complete_ops(None)?;
            return Ok(true);
        }
        if h.progress()? > 0 {
            return Ok(true);
        }
        // Stuck only if nothing was released since our step and every local
        // reference belongs to an explicit pin whose thread is blocked here too.
        let stuck = {
            let l = fh.local.lock();
            let (refs, pinning) = l.local_refs();
            l.releases == self.epoch
                && !pinning
                && refs <= fh.pin_refs_blocked[fh.peers.len()].load(Ordering::Acquire)
        };
        if !stuck {
            std::thread::yield_now();
        }
        Ok(!stuck)
    }

    fn blocking(&mut self) {
        if self.blocked.is_none() {
            self.blocked = Some(blocked(self.h, self.h.fh().peers.len()));
        }
    }

    fn exhausted(&mut self) -> Error {
        err!(
            NoResource,
            "local pinnable share (MAXVICTIM = {} units) is held by pins that were not released",
            self.h.fh().params.victim_units
        )
    }
}

impl<H: Mover> LocalReq<'_, H> {
    /// Phase two of a local request after `LocalTable::local_begin`.
    fn finish(&self, begin: Result<LocalBegin>) -> Round<Result<Vec<Held>>> {
        match begin {
            Err(e) => Round::Done(Err(e)),
            Ok(LocalBegin::Done(held)) => Round::Done(Ok(held)),
            Ok(LocalBegin::Busy) => Round::Conflict,
            Ok(LocalBegin::Full) => Round::Short,
            Ok(LocalBegin::Pin { held, pins }) => {
                // Phase two, without the table lock (Table 3, third row).
                let h = self.h;
                let results: Vec<Result<bool>> = pins
                    .iter()
                    .map(|&(s, e, _)| h.pinner(None).pin(s, e))
                    .collect();
                let r =
                    h.fh()
                        .local
                        .lock()
                        .local_finish(held, &pins, results, &mut *h.pinner(None));
                Round::Done(r)
            }
        }
    }
}

/// A remote request going through seed 000 §4.1's protocol ([`smp::acquire`]).
struct RemoteReq<'a, H: Mover> {
    h: &'a H,
    rank: usize,
    acq: Acq,
    /// The id the committed move goes by.
    move_id: u64,
    /// Moves the last round found in flight.
    waits: Vec<u64>,
    waited: bool,
    /// The table's release count at the last step.
    epoch: u64,
    /// Set once the request waits (see `DaClient::blocking`).
    blocked: Option<Blocked<'a>>,
}

impl<H: Mover> DaClient for RemoteReq<'_, H> {
    type Out = Step;
    type Err = Error;

    fn step(&mut self) -> Round<Step> {
        let fh = self.h.fh();
        let id = self.h.new_id();
        let st = {
            let mut t = fh.peers[self.rank].lock();
            self.epoch = t.releases;
            t.step(&fh.params, &mut self.acq, id)
        };
        match st {
            Step::Hit(_) => Round::Done(st),
            Step::Commit { .. } => {
                self.move_id = id;
                Round::Done(st)
            }
            Step::Wait(w) => {
                self.waits = w;
                self.waited = true;
                Round::Wait
            }
            Step::Short => Round::Short,
            Step::Conflict => Round::Conflict,
        }
    }

    fn rollback(&mut self) {
        self.h.fh().peers[self.rank].lock().rollback(&mut self.acq);
    }

    fn try_hit(&mut self) -> Option<Step> {
        let (a, b) = (self.acq.addr, self.acq.addr + self.acq.len);
        let held = self.h.fh().peers[self.rank].lock().partial(a, b, true)?;
        Some(Step::Hit(held.2))
    }

    fn holds(&self) -> bool {
        !self.acq.is_clear()
    }

    fn poll(&mut self, wait: bool) -> Result<bool> {
        if wait {
            let w = std::mem::take(&mut self.waits);
            wait_moves(self.h, &w)?;
            return Ok(true);
        }
        // seed 000 §3.4 "steady state": poll until operations in flight complete and
        // give their firehoses back.
        if recover(self.h, self.rank)? {
            return Ok(true);
        }
        let fh = self.h.fh();
        let pins = fh.pin_refs_blocked[self.rank].load(Ordering::Acquire);
        let stuck = {
            let t = fh.peers[self.rank].lock();
            t.releases == self.epoch && t.only_pins_hold(&self.acq, pins)
        };
        if !stuck {
            std::thread::yield_now();
        }
        Ok(!stuck)
    }

    fn blocking(&mut self) {
        if self.blocked.is_none() {
            self.blocked = Some(blocked(self.h, self.rank));
        }
    }

    fn exhausted(&mut self) -> Error {
        let fh = self.h.fh();
        if crate::runtime::config::debug_tables() {
            eprintln!(
                "STUCK req {:?} epoch {}\n{}",
                self.acq,
                self.epoch,
                fh.peers[self.rank].lock().debug_summary()
            );
        }
        if fh.pin_refs[self.rank].load(Ordering::Acquire) == 0 {
            // Nothing but this request references them (`chunk` sizes requests to
            // avoid this).
            return err!(
                NoResource,
                "[{:#x}, +{}) of rank {} needs more than the {} firehoses to that rank (its memory is pinned there in many small units)",
                self.acq.addr,
                self.acq.len,
                self.rank,
                fh.params.f
            );
        }
        err!(
            NoResource,
            "all {} firehoses to rank {} are held by pins that were not released (fh_release them)",
            fh.params.f,
            self.rank
        )
    }
}

/// Acquire remote firehoses for the longest prefix of `[addr, addr+len)` on `rank`
/// that one acquisition may cover ([`chunk`]; `local` is where the local side of the
/// transfer starts). Returns the grant and the prefix's length.
///
/// A target may answer with smaller units than the table knew of (memory freed and
/// mapped again without `fh_mem_invalidate`), so that the chunk needs more than f
/// firehoses and the acquisition runs out: it is tried again at the size that fits
/// now. The size only shrinks, so this ends.
pub fn acquire_prefix<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    len: usize,
    local: usize,
    carry: Carry,
    write: bool,
) -> Result<(Grant, usize)> {
    let mut c = chunk(h, rank, addr, len, local);
    loop {
        match acquire_remote(h, rank, addr, c, carry, write) {
            Err(e) if e.status == Status::NoResource => {
                let fits = chunk(h, rank, addr, len, local);
                if fits >= c {
                    return Err(e);
                }
                c = fits;
            }
            r => return r.map(|g| (g, c)),
        }
    }
}

/// Acquire remote firehoses for `[addr, addr+len)` on `rank` (one [`chunk`]).
/// `carry`: a small transfer that may travel in the move on a miss. `write`: a put
/// or an atomic (memory the target pinned read-only is refused).
pub fn acquire_remote<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    len: usize,
    carry: Carry,
    write: bool,
) -> Result<Grant> {
    let g = acquire_remote_any(h, rank, addr, len, carry, write)?;
    if let Grant::Pins(p) = &g {
        if write && any_read_only(&h.fh().peers[rank].lock(), &p.remote) {
            release(h, g.into_pins());
            return Err(read_only_error(rank, addr, len));
        }
    }
    Ok(g)
}

/// Long because `keep` (the references from our own committed move) lives across
/// the whole retry loop and must be released on every exit, including the break
/// paths and after the loop; and the hit/pending-hit/miss and stall counters read
/// the `missed`/`waited` flags accumulated over all iterations.
fn acquire_remote_any<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    len: usize,
    carry: Carry,
    write: bool,
) -> Result<Grant> {
    debug_assert!(rank != h.rank() && len > 0);
    let fh = h.fh();
    // Fast path: one live entry covers it.
    if fh.params.strategy.hits_one_sided() {
        if let Some(held) = fh.peers[rank].lock().hit_one(addr, addr + len, write) {
            h.count_hit();
            return Ok(Grant::Pins(OpPins {
                rank,
                remote: vec![held],
                local: vec![],
            }));
        }
    }
    let always = matches!(
        fh.params.strategy,
        Strategy::RendezvousKeep | Strategy::RendezvousUnpin
    );
    let mut first = true;
    let mut missed = false;
    let mut waited = false;
    let t0 = Instant::now();
    // References kept from our own committed move until the request is served
    // (so no other request can replace those firehoses meanwhile).
    let mut keep: Vec<Held> = Vec::new();
    let res = loop {
        let req = h.new_id();
        let mut c = RemoteReq {
            h,
            rank,
            acq: Acq::new(req, addr, len, always && first),
            move_id: 0,
            waits: Vec::new(),
            waited: false,
            epoch: 0,
            blocked: None,
        };
        let mut tally = DaTally::default();
        let r = smp::acquire(&fh.gates[rank], req, &mut c, &mut tally);
        c.blocked = None;
        count_tally(h, &tally);
        waited |= c.waited;
        match r {
            Err(e) => break Err(e),
            Ok(Step::Hit(held)) => {
                break Ok(Grant::Pins(OpPins {
                    rank,
                    remote: held,
                    local: vec![],
                }))
            }
            Ok(Step::Commit { releases, pins }) => {
                missed = true;
                let id = c.move_id;
                keep.append(&mut c.acq.held);
                let room = h
                    .max_answer()
                    .saturating_sub(8 * releases.len() + 40 * pins.len());
                let carry = if first && len <= fh.params.putinmove && len <= room {
                    carry
                } else {
                    Carry::None
                };
                let mv = Move {
                    rank,
                    id,
                    releases: &releases,
                    pins: &pins,
                    addr,
                    len,
                    write,
                };
                let done = send_move(h, &mv, carry);
                keep.append(&mut fh.peers[rank].lock().take_handoff(id));
                match done {
                    Ok(true) => break Ok(Grant::Done),
                    Ok(false) => {}
                    Err(e) => break Err(e),
                }
                if let Some(g) = take_after_move(h, rank, addr, len, &mut keep) {
                    break Ok(g);
                }
            }
            Ok(other) => {
                debug_assert!(false, "acquire returned {other:?}");
                break Err(err!(Internal, "firehose acquisition ended in {:?}", other));
            }
        }
        first = false;
    };
    if !keep.is_empty() {
        let mut t = fh.peers[rank].lock();
        for held in keep {
            t.release(held);
        }
    }
    let st = &fh.stats;
    if missed {
        h.count(&st.misses, 1);
    } else if waited {
        h.count(&st.pending_hits, 1);
    } else {
        h.count(&st.hits, 1);
    }
    if missed || waited {
        h.count(&st.stall_ns, t0.elapsed().as_nanos() as u64);
    }
    res
}

/// After our own move is answered, `keep` holds its units: the range is normally a
/// hit now. Take it without the gate (never wait there holding references: the DA
/// winner may need them). `keep` is released either way; `None`: try again.
fn take_after_move<H: Mover>(
    h: &H,
    rank: usize,
    addr: usize,
    len: usize,
    keep: &mut Vec<Held>,
) -> Option<Grant> {
    let fh = h.fh();
    let mut acq = Acq::new(h.new_id(), addr, len, false);
    let mut t = fh.peers[rank].lock();
    // (u64::MAX: a move id never used, in case it commits.)
    let got = match t.step(&fh.params, &mut acq, u64::MAX) {
        Step::Hit(held) => Some(Grant::Pins(OpPins {
            rank,
            remote: held,
            local: vec![],
        })),
        Step::Commit { .. } => {
            // That move is never sent: undo.
            t.abort_move(u64::MAX);
            for held in std::mem::take(&mut acq.held) {
                t.release(held);
            }
            None
        }
        _ => {
            t.rollback(&mut acq);
            None
        }
    };
    for held in keep.drain(..) {
        t.release(held);
    }
    got
}

/// Count this thread's pin references in table `idx` as blocked on that table's
/// gate until the guard drops. (A thread blocked on another gate will get going once
/// that gate's resources free up, independently of this one.)
fn blocked<H: Mover>(h: &H, idx: usize) -> Blocked<'_> {
    let me = h.owner();
    let fh = h.fh();
    let refs: Vec<(usize, u64)> = MY_PIN_REFS.with(|m| {
        m.borrow()
            .iter()
            .filter(|e| e.0 == me && e.1 == idx)
            .map(|e| (e.1, e.2))
            .collect()
    });
    for &(i, n) in &refs {
        fh.pin_refs_blocked[i].fetch_add(n, Ordering::AcqRel);
    }
    Blocked { fh, refs }
}

/// Add one acquisition's deadlock-avoidance counters to the context's and this
/// thread's statistics.
fn count_tally<H: Mover>(h: &H, t: &DaTally) {
    let st = &h.fh().stats;
    let ns = t.stalled.as_nanos() as u64;
    if t.entered {
        h.count(&st.da_entries, 1);
        h.count(&st.da_stall_ns, ns);
    }
    if t.won {
        h.count(&st.da_wins, 1);
    }
    h.count(&st.rollbacks, t.rollbacks);
    h.count(&st.da_waits, t.waits);
    THREAD_STATS.with(|c| {
        let mut x = c.get();
        x.requests += 1;
        x.da_entries += t.entered as u64;
        x.da_wins += t.won as u64;
        x.rollbacks += t.rollbacks;
        x.da_waits += t.waits;
        x.stall_ns += if t.entered { ns } else { 0 };
        c.set(x);
    });
}

/// One committed move: what it releases and pins, for which transfer.
struct Move<'a> {
    rank: usize,
    id: u64,
    releases: &'a [usize],
    pins: &'a [(usize, usize)],
    addr: usize,
    len: usize,
    write: bool,
}

/// Send one move and wait for its answer. Returns whether a carried put was
/// written by the target (or a carried get's data delivered).
///
/// Move `id` owns three pieces of bookkeeping (its `moves` slot, its `get_dst`
/// entry, the peer table's placeholders), set up before the request and dropped on
/// each exit: send failure, give-up, answer.
fn send_move<H: Mover>(h: &H, mv: &Move<'_>, carry: Carry) -> Result<bool> {
    let fh = h.fh();
    let (rank, id) = (mv.rank, mv.id);
    let (carried, put_data): (Carried, &[u8]) = match carry {
        Carry::None => (Carried::None, &[]),
        // SAFETY: the caller of put guarantees `src` is readable for `len` bytes
        // until the operation completes; the encoder copies it now.
        Carry::Put(src) => (
            Carried::Put {
                addr: mv.addr,
                len: mv.len,
            },
            unsafe { std::slice::from_raw_parts(src, mv.len) },
        ),
        Carry::Get(d) => {
            fh.get_dst.lock().insert(id, (d as usize, mv.len));
            (
                Carried::Get {
                    addr: mv.addr,
                    len: mv.len,
                },
                &[],
            )
        }
    };
    let (args, payload) = MoveRequest {
        id,
        releases: mv.releases.to_vec(),
        pins: mv.pins.to_vec(),
        carried,
        write: mv.write,
        put_data,
    }
    .encode();
    fh.moves.lock().insert(id, None);
    if let Err(e) = h.send(rank, MoveMsg::Request, &args, &payload) {
        fh.moves.lock().remove(&id);
        fh.get_dst.lock().remove(&id);
        fh.peers[rank].lock().abort_move(id);
        return Err(e);
    }
    h.count(&fh.stats.moves_sent, 1);
    let w = h.wait_until(
        "fh_put/fh_get/atomic/fh_remote_pin (firehose miss)",
        Some(rank),
        "the answer to a firehose move (the target pins its memory)",
        &mut || Ok(fh.moves.lock().get(&id).is_some_and(|s| s.is_some())),
    );
    let ans = fh.moves.lock().remove(&id).flatten();
    fh.get_dst.lock().remove(&id);
    if w.is_err() && ans.is_none() {
        // Given up (stall abort, dead peer): drop the move's placeholders so later
        // requests do not wait for it. A late answer still enters its units (the
        // target did pin them for us); its releases are sent again, and the
        // target ignores the duplicates.
        fh.peers[rank].lock().abort_move(id);
    }
    w?;
    match ans {
        Some((0, done, _)) => {
            if done {
                h.count(&fh.stats.putinmove, 1);
            }
            Ok(done)
        }
        Some((code, _, why)) => Err(refusal_error(h, mv, code, why)),
        None => bail!(Internal, "move to rank {} ended without an answer", rank),
    }
}

/// The initiator's error for a move its target refused with `code`.
fn refusal_error<H: Mover>(h: &H, mv: &Move<'_>, code: i32, why: u8) -> Error {
    let st = Status::from_code(code).unwrap_or(Status::Access);
    if st == Status::Access {
        h.access_refused();
    }
    let dir = if mv.write { "a put to" } else { "a get from" };
    let (rank, addr, len) = (mv.rank, mv.addr, mv.len);
    let text = match st {
        Status::Access => format!(
            "rank {} refused {} [{:#x}, +{}): the memory is {} there",
            rank,
            dir,
            addr,
            len,
            WHY.get(why as usize).unwrap_or(&WHY[0])
        ),
        Status::NoResource => format!(
            "rank {} could not pin [{:#x}, +{}) for {}: its pinnable memory \
             (M + MAXVICTIM, FH_FIREHOSE_M) is used up",
            rank, addr, len, dir
        ),
        s => format!(
            "rank {} refused to pin [{:#x}, +{}): {}",
            rank,
            addr,
            len,
            s.describe().trim_end_matches('\0')
        ),
    };
    Error::new(st, text)
}

/// Wait until every move in `ids` is answered (or consumed by its sender).
fn wait_moves<H: Mover>(h: &H, ids: &[u64]) -> Result<()> {
    let fh = h.fh();
    // A move whose slot is gone was answered and consumed by its sender.
    h.wait_until(
        "fh_put/fh_get (firehose miss)",
        None,
        "the answer to another thread's firehose move",
        &mut || {
            let m = fh.moves.lock();
            Ok(ids.iter().all(|i| m.get(i).map_or(true, |s| s.is_some())))
        },
    )
}

/// Complete operations to `rank` and release what they held. True if that freed
/// anything (or moves in flight may).
pub fn recover<H: Mover>(h: &H, rank: usize) -> Result<bool> {
    h.check_not_in_handler("firehose replacement")?;
    let fh = h.fh();
    let before = fh.inflight.lock()[rank].len();
    if before == 0 {
        // No operation of ours holds firehoses to that rank. Moves still in
        // flight (non-blocking pins, other threads) will free or fill entries:
        // progress and retry. Otherwise pins the application holds are in the way.
        let moving = !fh.moves.lock().is_empty();
        if h.progress()? == 0 {
            h.idle();
        }
        return Ok(moving);
    }
    h.complete_ops(Some(rank))?;
    Ok(fh.inflight.lock()[rank].len() < before)
}

/// Record references held by an operation with sequence `seq` to `rank`.
pub fn hold(fh: &FhState, rank: usize, seq: u64, pins: OpPins) {
    if !pins.is_empty() {
        fh.inflight.lock()[rank].push_back((seq, pins));
    }
}

/// Operations to `rank` up to `upto` finished: release their references.
pub fn completed<H: Mover>(h: &H, rank: usize, upto: u64) {
    let done: Vec<OpPins> = {
        let mut g = h.fh().inflight.lock();
        let q = &mut g[rank];
        let mut v = Vec::new();
        while q.front().is_some_and(|(s, _)| *s <= upto) {
            v.push(q.pop_front().expect("front").1);
        }
        v
    };
    for p in done {
        release(h, p);
    }
}

/// Drop an operation's or a pin's references.
pub fn release<H: Mover>(h: &H, p: OpPins) {
    let fh = h.fh();
    if !p.remote.is_empty() {
        let mut t = fh.peers[p.rank].lock();
        for held in &p.remote {
            t.release(*held);
        }
        if fh.params.strategy == Strategy::RendezvousUnpin {
            // The baseline unpins after every operation: the release rides on the
            // next move to that rank (a separate message could be handled after
            // that move — MPI may complete our pre-posted receives out of order —
            // and the target would briefly hold more than f of our firehoses).
            while t.evict_one().is_some() {}
        }
    }
    if !p.local.is_empty() {
        let mut l = fh.local.lock();
        let mut pinner = h.pinner(None);
        for held in p.local {
            l.local_release(held, &mut *pinner);
        }
    }
}

/// Pin local `[addr, addr+len)` for an operation (conduits that need the local side
/// registered, and `fh_local_pin`): seed 000 §4.1's local protocol — an
/// all-or-nothing two-phase request; when the local share is used up or a unit it
/// needs is being pinned by another thread it holds nothing and retries, and after
/// `DA_LIMIT` rounds it posts the local DA flag so the others wait.
pub fn acquire_local<H: Mover>(h: &H, addr: usize, len: usize) -> Result<Vec<Held>> {
    let fh = h.fh();
    {
        let mut l = fh.local.lock();
        if let Some((_, _, held)) = l.local_try(addr, addr + len, false) {
            h.count(&fh.stats.local_hits, 1);
            return Ok(held);
        }
    }
    let req = h.new_id();
    let mut c = LocalReq {
        h,
        addr,
        len,
        epoch: 0,
        blocked: None,
    };
    let mut tally = DaTally::default();
    let r = smp::acquire(&fh.local_gate, req, &mut c, &mut tally);
    count_tally(h, &tally);
    let held = r??;
    h.count(&fh.stats.local_misses, 1);
    Ok(held)
}

#[cfg(test)]
mod tests {
    //! The initiator against the fake pair (`fake.rs`): rank 0 asks rank 1, whose
    //! handler runs at once, on real pages of this process.
    use super::*;
    use crate::firehose::fake::{pages, pair, unmap};
    use crate::firehose::pins;
    use crate::runtime::os;

    fn load(c: &std::sync::atomic::AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// The references of a granted request (not a carried transfer).
    fn held(g: Result<Grant>) -> OpPins {
        match g {
            Ok(Grant::Pins(p)) => p,
            Ok(Grant::Done) => panic!("a transfer was carried; references expected"),
            Err(e) => panic!("refused: {e}"),
        }
    }

    /// The error of a refused request.
    fn refused(g: Result<Grant>) -> Error {
        g.err().expect("the request is refused")
    }

    #[test]
    fn a_miss_moves_once_then_hits_one_sided() {
        let h = pair();
        let (b, pg) = (pages(), os::page_size());
        let p = held(acquire_remote(&h, 1, b + 8, 64, Carry::None, false));
        assert_eq!(p.remote.len(), 1);
        let st = &h.fh.stats;
        assert_eq!((load(&st.moves_sent), load(&st.misses)), (1, 1));
        let t = h.target.as_deref().unwrap();
        assert_eq!(t.pinned.borrow().as_slice(), &[(b, b + pg)]);
        release(&h, p);
        // The firehose stays (victim FIFO): the next access is a hit, no message.
        let p = held(acquire_remote(&h, 1, b + 128, 8, Carry::None, true));
        assert_eq!((load(&st.moves_sent), h.hits.get()), (1, 1));
        release(&h, p);
        assert_eq!(h.fh.peers[1].lock().validate(), Ok(()));
        unmap(b);
    }

    #[test]
    fn a_small_put_rides_in_the_move() {
        let h = pair();
        let b = pages();
        let data = 0x1234_5678_9abc_def0u64.to_le_bytes();
        let g = acquire_remote(&h, 1, b + 16, 8, Carry::Put(data.as_ptr()), true).unwrap();
        assert!(matches!(g, Grant::Done), "the put travelled in the move");
        // SAFETY: b + 16 lies in the writable page `pages` mapped, 8-byte aligned.
        let written = unsafe { *((b + 16) as *const u64) };
        assert_eq!(written, u64::from_le_bytes(data));
        assert_eq!(load(&h.fh.stats.putinmove), 1);
        unmap(b);
    }

    #[test]
    fn puts_to_read_only_or_inaccessible_memory_are_refused() {
        let h = pair();
        let (b, pg) = (pages(), os::page_size());
        let ro = b + pg;
        // Refused by the target: the memory is read-only there.
        let e = refused(acquire_remote(&h, 1, ro, 8, Carry::None, true));
        assert_eq!(e.status, Status::Access);
        assert!(e.to_string().contains("read-only"), "{e}");
        // A get pins it (read-only); a later put is refused here, without a move.
        let p = held(acquire_remote(&h, 1, ro, 8, Carry::None, false));
        release(&h, p);
        let sent = load(&h.fh.stats.moves_sent);
        let e = refused(acquire_remote(&h, 1, ro + 8, 8, Carry::None, true));
        assert_eq!(e.status, Status::Access);
        assert_eq!(load(&h.fh.stats.moves_sent), sent);
        // No access at all: refused for a get too, and counted on both sides.
        let e = refused(acquire_remote(&h, 1, b + 2 * pg, 8, Carry::None, false));
        assert!(e.to_string().contains("PROT_NONE"), "{e}");
        assert!(h.refused.get() >= 2 && h.target.as_deref().unwrap().refused.get() >= 2);
        unmap(b);
    }

    #[test]
    fn an_explicit_pin_counts_its_references_until_released() {
        let h = pair();
        let b = pages();
        let pin = pins::remote(&h, 1, b, 8).unwrap();
        assert_eq!(h.fh.pin_refs[1].load(Ordering::Acquire), 1);
        // A try-pin of the same memory is a hit; of unpinned memory, a miss.
        let again = pins::remote_try(&h, 1, b, b + 8, false).unwrap();
        assert_eq!(h.fh.pin_refs[1].load(Ordering::Acquire), 2);
        let e = pins::remote_try(
            &h,
            1,
            b + 2 * os::page_size(),
            b + 2 * os::page_size() + 8,
            false,
        );
        assert_eq!(e.err().unwrap().status, Status::NotPinned);
        pins::release(&h, *pin);
        pins::release(&h, *again);
        assert_eq!(h.fh.pin_refs[1].load(Ordering::Acquire), 0);
        assert_eq!(h.fh.peers[1].lock().validate(), Ok(()));
        unmap(b);
    }

    #[test]
    fn operations_hold_their_references_until_completed() {
        let h = pair();
        let b = pages();
        let p = held(acquire_remote(&h, 1, b, 8, Carry::None, false));
        hold(&h.fh, 1, 5, p);
        completed(&h, 1, 4);
        assert_eq!(
            h.fh.inflight.lock()[1].len(),
            1,
            "sequence 5 is not complete"
        );
        completed(&h, 1, 5);
        assert!(h.fh.inflight.lock()[1].is_empty());
        unmap(b);
    }
}
