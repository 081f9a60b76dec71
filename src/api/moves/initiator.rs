//! The initiator of the move protocol (seed 000 §3.1, Fig. 2; Firehose-SMP §4.1 for
//! threads sharing the tables): plan a request against the peer's remote table, wait
//! for moves in flight (PENDING entries), send one move request for the misses,
//! and enter the answer (`handle_answer`). Guarantees: a request either holds every
//! firehose it needs or none (rollback); a move nobody waits for any more is
//! ignored when its answer arrives; an answer older than an invalidation we obeyed
//! grants nothing.

use super::*;

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
            Grant::Done => OpPins {
                rank: 0,
                remote: vec![],
                local: vec![],
            },
        }
    }
}

/// Does any of `held` lie on memory the target pinned read-only?
pub(super) fn fh_any_read_only(t: &PeerTable, held: &[Held]) -> bool {
    held.iter().any(|h| t.is_read_only(h.0))
}

/// A local request going through seed 000 §4.1's protocol (all or nothing, so a
/// rollback has nothing to return).
struct LocalReq<'a> {
    ctx: &'a CtxInner,
    addr: usize,
    len: usize,
    /// The table's release count at the last step.
    epoch: u64,
    /// Set once the request waits (see `DaClient::blocking`).
    blocked: Option<Blocked<'a>>,
}

impl DaClient for LocalReq<'_> {
    type Out = Result<Vec<Held>>;
    type Err = Error;

    fn step(&mut self) -> Round<Result<Vec<Held>>> {
        let ctx = self.ctx;
        let fh = &ctx.fh;
        let (a, b) = (self.addr, self.addr + self.len);
        let begin = {
            let mut l = fh.local.lock();
            self.epoch = l.releases;
            l.local_begin(a, b, &mut CtxPinner { ctx, maps: None })
        };
        let r = self.finish(begin);
        // Moves parked on units that are pinned (or dropped) now can run.
        if !fh.parked.lock().is_empty() {
            ctx.fh_drain_parked();
        }
        r
    }

    fn rollback(&mut self) {}

    fn try_hit(&mut self) -> Option<Result<Vec<Held>>> {
        let (a, b) = (self.addr, self.addr + self.len);
        let h = self.ctx.fh.local.lock().local_try(a, b, false)?;
        Some(Ok(h.2))
    }

    fn holds(&self) -> bool {
        false
    }

    fn poll(&mut self, _wait: bool) -> Result<bool> {
        let ctx = self.ctx;
        let fh = &ctx.fh;
        if fh.inflight.lock().iter().any(|q| !q.is_empty()) {
            ctx.rma_flush_all()?;
            return Ok(true);
        }
        if ctx.progress_once()? > 0 {
            return Ok(true);
        }
        // Stuck only if nothing was released since our step and every local
        // reference belongs to an explicit pin whose thread is blocked here too.
        let stuck = {
            let l = fh.local.lock();
            let (refs, pinning) = l.local_refs();
            l.releases == self.epoch
                && !pinning
                && refs <= fh.pin_refs_blocked[ctx.size].load(Ordering::Acquire)
        };
        if !stuck {
            std::thread::yield_now();
        }
        Ok(!stuck)
    }

    fn blocking(&mut self) {
        if self.blocked.is_none() {
            self.blocked = Some(self.ctx.fh_blocked(self.ctx.size));
        }
    }

    fn exhausted(&mut self) -> Error {
        err!(
            NoResource,
            "local pinnable share (MAXVICTIM = {} units) is held by pins that were not released",
            self.ctx.fh.params.victim_units
        )
    }
}

impl LocalReq<'_> {
    /// Phase two of a local request after [`LocalTable::local_begin`].
    fn finish(&self, begin: Result<LocalBegin>) -> Round<Result<Vec<Held>>> {
        match begin {
            Err(e) => Round::Done(Err(e)),
            Ok(LocalBegin::Done(h)) => Round::Done(Ok(h)),
            Ok(LocalBegin::Busy) => Round::Conflict,
            Ok(LocalBegin::Full) => Round::Short,
            Ok(LocalBegin::Pin { held, pins }) => {
                // Phase two, without the table lock (Table 3, third row).
                let ctx = self.ctx;
                let fh = &ctx.fh;
                let results: Vec<Result<bool>> = pins
                    .iter()
                    .map(|&(s, e, _)| CtxPinner { ctx, maps: None }.pin(s, e))
                    .collect();
                let r = fh.local.lock().local_finish(
                    held,
                    &pins,
                    results,
                    &mut CtxPinner { ctx, maps: None },
                );
                Round::Done(r)
            }
        }
    }
}

/// A remote request going through seed 000 §4.1's protocol ([`smp::acquire`]).
struct RemoteReq<'a> {
    ctx: &'a CtxInner,
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

impl DaClient for RemoteReq<'_> {
    type Out = Step;
    type Err = Error;

    fn step(&mut self) -> Round<Step> {
        let fh = &self.ctx.fh;
        let id = self.ctx.new_id();
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
        self.ctx.fh.peers[self.rank].lock().rollback(&mut self.acq);
    }

    fn try_hit(&mut self) -> Option<Step> {
        let (a, b) = (self.acq.addr, self.acq.addr + self.acq.len);
        let h = self.ctx.fh.peers[self.rank].lock().partial(a, b, true)?;
        Some(Step::Hit(h.2))
    }

    fn holds(&self) -> bool {
        !self.acq.is_clear()
    }

    fn poll(&mut self, wait: bool) -> Result<bool> {
        if wait {
            let w = std::mem::take(&mut self.waits);
            self.ctx.wait_moves(&w)?;
            return Ok(true);
        }
        // seed 000 §3.4 "steady state": poll until operations in flight complete and
        // give their firehoses back.
        if self.ctx.fh_recover(self.rank)? {
            return Ok(true);
        }
        let fh = &self.ctx.fh;
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
            self.blocked = Some(self.ctx.fh_blocked(self.rank));
        }
    }

    fn exhausted(&mut self) -> Error {
        if crate::runtime::config::debug_tables() {
            eprintln!(
                "STUCK req {:?} epoch {}\n{}",
                self.acq,
                self.epoch,
                self.ctx.fh.peers[self.rank].lock().debug_summary()
            );
        }
        err!(
            NoResource,
            "all {} firehoses to rank {} are held by pins that were not released (fh_release them)",
            self.ctx.fh.params.f,
            self.rank
        )
    }
}

impl CtxInner {
    /// Acquire remote firehoses for `[addr, addr+len)` on `rank` (one chunk, see
    /// [`Self::fh_chunk`]). `put`: the source of a blocking or non-blocking put, which
    /// may travel in the move on a miss.
    pub fn fh_acquire_remote(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        carry: Carry,
        write: bool,
    ) -> Result<Grant> {
        let g = self.fh_acquire_remote_any(rank, addr, len, carry, write)?;
        if let Grant::Pins(p) = &g {
            if write && fh_any_read_only(&self.fh.peers[rank].lock(), &p.remote) {
                self.fh_release_pins(g.into_pins());
                bail!(
                    Access,
                    "[{:#x}, +{}) of rank {} is read-only memory there: puts and atomics are refused",
                    addr,
                    len,
                    rank
                );
            }
        }
        Ok(g)
    }

    /// Long because `keep` (the references from our own committed move) lives across
    /// the whole retry loop and must be released on every exit, including the break
    /// paths and after the loop; and the hit/pending-hit/miss and stall counters read
    /// the `missed`/`waited` flags accumulated over all iterations.
    fn fh_acquire_remote_any(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        carry: Carry,
        write: bool,
    ) -> Result<Grant> {
        debug_assert!(rank != self.rank && len > 0);
        let fh = &self.fh;
        // Fast path: one live entry covers it.
        if self.fh_hits_one_sided() {
            if let Some(h) = fh.peers[rank].lock().hit_one(addr, addr + len, write) {
                self.count(&self.hot.shard().hits, 1);
                return Ok(Grant::Pins(OpPins {
                    rank,
                    remote: vec![h],
                    local: vec![],
                }));
            }
        }
        let always = matches!(
            self.strategy(),
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
            let req = self.new_id();
            let mut c = RemoteReq {
                ctx: self,
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
            self.fh_tally(&tally);
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
                    let room = self
                        .am_max_medium()
                        .saturating_sub(8 * releases.len() + 40 * pins.len());
                    let carry = if first && len <= fh.params.putinmove && len <= room {
                        carry
                    } else {
                        Carry::None
                    };
                    let done = self.send_move(rank, id, &releases, &pins, addr, len, carry, write);
                    keep.append(&mut fh.peers[rank].lock().take_handoff(id));
                    match done {
                        Ok(true) => break Ok(Grant::Done),
                        Ok(false) => {}
                        Err(e) => break Err(e),
                    }
                    // Our move is answered and `keep` holds its units: the range is
                    // normally a hit now. Take it without the gate (never wait there
                    // holding references: the DA winner may need them).
                    let mut acq = Acq::new(self.new_id(), addr, len, false);
                    let mut t = fh.peers[rank].lock();
                    // (u64::MAX: a move id never used, in case it commits.)
                    match t.step(&fh.params, &mut acq, u64::MAX) {
                        Step::Hit(held) => {
                            for h in keep.drain(..) {
                                t.release(h);
                            }
                            break Ok(Grant::Pins(OpPins {
                                rank,
                                remote: held,
                                local: vec![],
                            }));
                        }
                        Step::Commit { .. } => {
                            // That move is never sent: undo.
                            t.abort_move(u64::MAX);
                            for h in std::mem::take(&mut acq.held) {
                                t.release(h);
                            }
                        }
                        _ => t.rollback(&mut acq),
                    }
                    for h in keep.drain(..) {
                        t.release(h);
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
            for h in keep {
                t.release(h);
            }
        }
        if missed {
            self.count(&fh.stats.misses, 1);
        } else if waited {
            self.count(&fh.stats.pending_hits, 1);
        } else {
            self.count(&fh.stats.hits, 1);
        }
        if missed || waited {
            self.count(&fh.stats.stall_ns, t0.elapsed().as_nanos() as u64);
        }
        res
    }

    /// Count this thread's pin references in table `idx` as blocked on that
    /// table's gate until the guard drops. (A thread blocked on another gate will
    /// get going once that gate's resources free up, independently of this one.)
    fn fh_blocked(&self, idx: usize) -> Blocked<'_> {
        let me = self as *const CtxInner as usize;
        let refs: Vec<(usize, u64)> = MY_PIN_REFS.with(|m| {
            m.borrow()
                .iter()
                .filter(|e| e.0 == me && e.1 == idx)
                .map(|e| (e.1, e.2))
                .collect()
        });
        for &(i, n) in &refs {
            self.fh.pin_refs_blocked[i].fetch_add(n, Ordering::AcqRel);
        }
        Blocked { fh: &self.fh, refs }
    }

    /// Add one acquisition's deadlock-avoidance counters to the context's and this
    /// thread's statistics.
    fn fh_tally(&self, t: &DaTally) {
        let st = &self.fh.stats;
        let ns = t.stalled.as_nanos() as u64;
        if t.entered {
            self.count(&st.da_entries, 1);
            self.count(&st.da_stall_ns, ns);
        }
        if t.won {
            self.count(&st.da_wins, 1);
        }
        self.count(&st.rollbacks, t.rollbacks);
        self.count(&st.da_waits, t.waits);
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

    /// Send one move and wait for its answer. Returns whether a carried put was
    /// written by the target (or a carried get's data delivered).
    ///
    /// Long because move `id` owns three pieces of bookkeeping (its `moves` slot, its
    /// `get_dst` entry, the peer table's placeholders) set up before the request and
    /// dropped on each exit (send failure, give-up, answer), and the answer's decoding
    /// into an error is the last of those exits.
    #[allow(clippy::too_many_arguments)]
    fn send_move(
        &self,
        rank: usize,
        id: u64,
        releases: &[usize],
        pins: &[(usize, usize)],
        addr: usize,
        len: usize,
        carry: Carry,
        write: bool,
    ) -> Result<bool> {
        let fh = &self.fh;
        let (carried, put_data): (Carried, &[u8]) = match carry {
            Carry::None => (Carried::None, &[]),
            // SAFETY: the caller of put guarantees `src` is readable for `len` bytes
            // until the operation completes; the encoder copies it now.
            Carry::Put(src) => (Carried::Put { addr, len }, unsafe {
                std::slice::from_raw_parts(src, len)
            }),
            Carry::Get(d) => {
                fh.get_dst.lock().insert(id, (d as usize, len));
                (Carried::Get { addr, len }, &[])
            }
        };
        let (args, payload) = MoveRequest {
            id,
            releases: releases.to_vec(),
            pins: pins.to_vec(),
            carried,
            write,
            put_data,
        }
        .encode();
        fh.moves.lock().insert(id, None);
        if let Err(e) = self.am_request(
            rank,
            Category::Medium,
            LibHandler::FhMove as u8,
            &args,
            &payload,
            None,
        ) {
            fh.moves.lock().remove(&id);
            fh.get_dst.lock().remove(&id);
            fh.peers[rank].lock().abort_move(id);
            return Err(e);
        }
        self.count(&fh.stats.moves_sent, 1);
        let w = self.wait_for(
            crate::api::stall::Wait::new(
                "fh_put/fh_get/atomic/fh_remote_pin (firehose miss)",
                Some(rank),
                "the answer to a firehose move (the target pins its memory)",
            ),
            || Ok(fh.moves.lock().get(&id).is_some_and(|s| s.is_some())),
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
                    self.count(&fh.stats.putinmove, 1);
                }
                Ok(done)
            }
            Some((code, _, why)) => {
                let st = Status::from_code(code).unwrap_or(Status::Access);
                if st == Status::Access {
                    self.count(&self.stats.access_refused, 1);
                }
                let dir = if write { "a put to" } else { "a get from" };
                Err(Error::new(
                    st,
                    match st {
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
                    },
                ))
            }
            None => bail!(Internal, "move to rank {} ended without an answer", rank),
        }
    }

    fn wait_moves(&self, ids: &[u64]) -> Result<()> {
        let fh = &self.fh;
        // A move whose slot is gone was answered and consumed by its sender.
        let what = crate::api::stall::Wait::new(
            "fh_put/fh_get (firehose miss)",
            None,
            "the answer to another thread's firehose move",
        );
        self.wait_for(what, || {
            let m = fh.moves.lock();
            Ok(ids.iter().all(|i| m.get(i).map_or(true, |s| s.is_some())))
        })
    }

    /// Complete operations to `rank` (or all, for local pins) and release what they
    /// held. True if that freed anything.
    pub(crate) fn fh_recover(&self, rank: usize) -> Result<bool> {
        am::check_not_in_handler("firehose replacement")?;
        let before = self.fh.inflight.lock()[rank].len();
        if before == 0 {
            // No operation of ours holds firehoses to that rank. Moves still in
            // flight (non-blocking pins, other threads) will free or fill entries:
            // progress and retry. Otherwise pins the application holds are in the way.
            let moving = !self.fh.moves.lock().is_empty();
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
            return Ok(moving);
        }
        self.rma_flush_rank(rank)?;
        Ok(self.fh.inflight.lock()[rank].len() < before)
    }

    /// Record references held by an operation with sequence `seq` to `rank`.
    pub fn fh_hold(&self, rank: usize, seq: u64, pins: OpPins) {
        if !pins.is_empty() {
            self.fh.inflight.lock()[rank].push_back((seq, pins));
        }
    }

    /// Operations to `rank` up to `completed` finished: release their references.
    pub fn fh_completed(&self, rank: usize, completed: u64) {
        let done: Vec<OpPins> = {
            let mut g = self.fh.inflight.lock();
            let q = &mut g[rank];
            let mut v = Vec::new();
            while q.front().is_some_and(|(s, _)| *s <= completed) {
                v.push(q.pop_front().expect("front").1);
            }
            v
        };
        for p in done {
            self.fh_release_pins(p);
        }
    }

    /// Drop an operation's or a pin's references.
    pub fn fh_release_pins(&self, p: OpPins) {
        let fh = &self.fh;
        if !p.remote.is_empty() {
            let mut t = fh.peers[p.rank].lock();
            for h in &p.remote {
                t.release(*h);
            }
            if self.strategy() == Strategy::RendezvousUnpin {
                // The baseline unpins after every operation: the release rides on the
                // next move to that rank (a separate message could be handled after
                // that move — MPI may complete our pre-posted receives out of order —
                // and the target would briefly hold more than f of our firehoses).
                while t.evict_one().is_some() {}
            }
        }
        if !p.local.is_empty() {
            let mut l = fh.local.lock();
            let mut pinner = CtxPinner {
                ctx: self,
                maps: None,
            };
            for h in p.local {
                l.local_release(h, &mut pinner);
            }
        }
    }

    /// Pin local `[addr, addr+len)` for an operation (conduits that need the local
    /// side registered, and `fh_local_pin`): seed 000 §4.1's local protocol — an
    /// all-or-nothing two-phase request; when the local share is used up or a unit
    /// it needs is being pinned by another thread it holds nothing and retries, and
    /// after `DA_LIMIT` rounds it posts the local DA flag so the others wait.
    pub fn fh_acquire_local(&self, addr: usize, len: usize) -> Result<Vec<Held>> {
        let fh = &self.fh;
        {
            let mut l = fh.local.lock();
            if let Some((_, _, h)) = l.local_try(addr, addr + len, false) {
                self.count(&fh.stats.local_hits, 1);
                return Ok(h);
            }
        }
        let req = self.new_id();
        let mut c = LocalReq {
            ctx: self,
            addr,
            len,
            epoch: 0,
            blocked: None,
        };
        let mut tally = DaTally::default();
        let r = smp::acquire(&fh.local_gate, req, &mut c, &mut tally);
        self.fh_tally(&tally);
        let held = r??;
        self.count(&fh.stats.local_misses, 1);
        Ok(held)
    }
}
