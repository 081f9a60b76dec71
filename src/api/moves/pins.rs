//! The explicit pin API (seed 000 §3.3: `fh_local_pin`, `fh_remote_pin` and their
//! try/partial/async forms). Guarantees: a pin holds its firehoses until
//! `fh_release`; an asynchronous pin advances only in progress, never in a handler.

use super::*;

/// How a local pin behaves on a miss.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PinHow {
    Blocking,
    Try,
    Partial,
}

impl CtxInner {
    fn check_range(&self, addr: usize, len: usize) -> Result<usize> {
        if addr == 0 {
            bail!(InvalidArg, "address is NULL");
        }
        if len == 0 {
            bail!(InvalidArg, "len is 0");
        }
        addr.checked_add(len)
            .ok_or_else(|| err!(InvalidArg, "[{:#x}, +{}) wraps around", addr, len))
    }

    /// A pin of memory that needs none (library heap, registered regions: they act
    /// as prepinned): it holds no references.
    fn prepinned_pin(&self, rank: Option<usize>, addr: usize, len: usize) -> Box<PinObj> {
        Box::new(PinObj {
            owner: self.id(),
            start: addr,
            len,
            rank,
            pins: OpPins {
                rank: rank.unwrap_or(self.rank),
                remote: vec![],
                local: vec![],
            },
        })
    }

    /// `fh_local_pin` and its try/partial forms.
    pub fn local_pin(&self, addr: usize, len: usize, how: PinHow) -> Result<Box<PinObj>> {
        self.local_pin_inner(addr, len, how)
            .map(|p| self.tracked(p))
    }

    fn local_pin_inner(&self, addr: usize, len: usize, how: PinHow) -> Result<Box<PinObj>> {
        self.check_live()?;
        let end = self.check_range(addr, len)?;
        if self.plain_access(self.rank, addr, len).is_some() {
            return Ok(self.prepinned_pin(None, addr, len));
        }
        let fh = &self.fh;
        let (s, e, held) = match how {
            PinHow::Blocking => {
                am::check_not_in_handler("fh_local_pin")?;
                if fh.params.piece_count(addr, len) > fh.params.victim_units.max(1) {
                    bail!(
                        NoResource,
                        "{} bytes need more units than the local share (MAXVICTIM = {} units of {} bytes)",
                        len,
                        fh.params.victim_units,
                        fh.params.unit_bytes
                    );
                }
                (addr, end, self.fh_acquire_local(addr, len)?)
            }
            PinHow::Try | PinHow::Partial => {
                let r = fh.local.lock().local_try(addr, end, how == PinHow::Partial);
                match r {
                    Some(x) => {
                        self.count(&fh.stats.try_hits, 1);
                        if how == PinHow::Partial {
                            self.count(&fh.stats.partial_pins, 1);
                        }
                        x
                    }
                    None => {
                        self.count(&fh.stats.try_misses, 1);
                        bail!(NotPinned, "[{:#x}, +{}) is not pinned here", addr, len)
                    }
                }
            }
        };
        Ok(Box::new(PinObj {
            owner: self.id(),
            start: s,
            len: e - s,
            rank: None,
            pins: OpPins {
                rank: self.rank,
                remote: vec![],
                local: held,
            },
        }))
    }

    /// `fh_try_remote_pin` / `fh_partial_remote_pin`.
    pub fn remote_pin_try(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        partial: bool,
    ) -> Result<Box<PinObj>> {
        self.remote_pin_try_inner(rank, addr, len, partial)
            .map(|p| self.tracked(p))
    }

    fn remote_pin_try_inner(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        partial: bool,
    ) -> Result<Box<PinObj>> {
        self.check_live()?;
        let end = self.check_range(addr, len)?;
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        if self.plain_access(rank, addr, len).is_some() {
            self.count(&self.fh.stats.try_hits, 1);
            return Ok(self.prepinned_pin(Some(rank), addr, len));
        }
        let fh = &self.fh;
        let r = fh.peers[rank].lock().partial(addr, end, !partial);
        match r {
            Some((s, e, held)) => {
                self.count(&fh.stats.try_hits, 1);
                if partial {
                    self.count(&fh.stats.partial_pins, 1);
                }
                Ok(Box::new(PinObj {
                    owner: self.id(),
                    start: s,
                    len: e - s,
                    rank: Some(rank),
                    pins: OpPins {
                        rank,
                        remote: held,
                        local: vec![],
                    },
                }))
            }
            None => {
                self.count(&fh.stats.try_misses, 1);
                bail!(
                    NotPinned,
                    "[{:#x}, +{}) on rank {} is not covered by firehoses of this rank",
                    addr,
                    len,
                    rank
                )
            }
        }
    }

    fn check_remote_pin_size(&self, addr: usize, len: usize) -> Result<()> {
        let p = &self.fh.params;
        let n = p.piece_count(addr, len);
        if n > p.f.min(MAX_PIECES_PER_MOVE) {
            bail!(
                NoResource,
                "[{:#x}, +{}) needs {} firehoses; a pin may use at most {} (f) — pin it in parts",
                addr,
                len,
                n,
                p.f.min(MAX_PIECES_PER_MOVE)
            );
        }
        Ok(())
    }

    /// `fh_remote_pin`, blocking.
    pub fn remote_pin(&self, rank: usize, addr: usize, len: usize) -> Result<Box<PinObj>> {
        self.remote_pin_inner(rank, addr, len)
            .map(|p| self.tracked(p))
    }

    fn remote_pin_inner(&self, rank: usize, addr: usize, len: usize) -> Result<Box<PinObj>> {
        self.check_live()?;
        am::check_not_in_handler("fh_remote_pin")?;
        self.check_range(addr, len)?;
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        if self.plain_access(rank, addr, len).is_some() {
            return Ok(self.prepinned_pin(Some(rank), addr, len));
        }
        self.check_remote_pin_size(addr, len)?;
        match self.fh_acquire_remote(rank, addr, len, Carry::None, true)? {
            Grant::Pins(pins) => Ok(Box::new(PinObj {
                owner: self.id(),
                start: addr,
                len,
                rank: Some(rank),
                pins,
            })),
            Grant::Done => bail!(Internal, "a pin carried a put"),
        }
    }

    /// `fh_remote_pin` with a callback: a hit returns the pin; a miss sends the move
    /// and returns `None`; `cb` runs later from a library call on this context.
    pub fn remote_pin_async(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        cb: Box<dyn FnOnce(Result<Box<PinObj>>) + Send>,
    ) -> Result<Option<Box<PinObj>>> {
        self.check_live()?;
        am::check_not_in_handler("fh_remote_pin")?;
        self.check_range(addr, len)?;
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        if self.plain_access(rank, addr, len).is_some() {
            return Ok(Some(self.prepinned_pin(Some(rank), addr, len)));
        }
        self.check_remote_pin_size(addr, len)?;
        let mut pp = PendingPin {
            rank,
            addr,
            len,
            waits: vec![],
            own: None,
            cb,
            write: true,
            track: true,
        };
        match self.advance_pin(&mut pp)? {
            Some(pin) => Ok(Some(pin)),
            None => {
                self.fh.pending_pins.lock().push(pp);
                Ok(None)
            }
        }
    }

    /// Acquire firehoses for a non-blocking transfer without waiting (seed 002:
    /// non-blocking even on a miss): `Ok(Some)` on a hit; `Ok(None)` when a move was
    /// sent, and `done` receives the references (or the refusal) from a later
    /// library call on this context. `Err(NoResource)`: more than one move's worth of
    /// firehoses (the caller takes the blocking path).
    pub fn fh_acquire_async(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        write: bool,
        done: Box<dyn FnOnce(Result<OpPins>) + Send>,
    ) -> Result<Option<OpPins>> {
        self.check_remote_pin_size(addr, len)?;
        let mut pp = PendingPin {
            rank,
            addr,
            len,
            waits: vec![],
            own: None,
            cb: Box::new(move |r: Result<Box<PinObj>>| done(r.map(|p| p.pins))),
            write,
            track: false,
        };
        match self.advance_pin(&mut pp)? {
            Some(pin) => Ok(Some(pin.pins)),
            None => {
                self.fh.pending_pins.lock().push(pp);
                Ok(None)
            }
        }
    }

    /// One non-blocking step of a pending pin: `Some` when it holds its references.
    ///
    /// Kept in one piece: it is one transition of the `PendingPin` state machine
    /// (`waits`, `own`): consume our move's answer, then each `Plan` arm sets the next
    /// state, and the `Move` arm sends under the id just checked against the gate and
    /// used for the plan.
    fn advance_pin(&self, pp: &mut PendingPin) -> Result<Option<Box<PinObj>>> {
        let fh = &self.fh;
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
        let id = self.new_id();
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
                if pp.write && fh_any_read_only(&fh.peers[pp.rank].lock(), &pins.remote) {
                    self.fh_release_pins(pins);
                    bail!(
                        Access,
                        "[{:#x}, +{}) of rank {} is read-only memory there: puts and atomics are refused",
                        pp.addr,
                        pp.len,
                        pp.rank
                    );
                }
                let pin = Box::new(PinObj {
                    owner: self.id(),
                    start: pp.addr,
                    len: pp.len,
                    rank: Some(pp.rank),
                    pins,
                });
                Ok(Some(if pp.track { self.tracked(pin) } else { pin }))
            }
            Plan::Wait(ids) => {
                pp.waits = ids;
                Ok(None)
            }
            Plan::NeedReplacements => {
                // Every firehose to that peer is referenced by operations in flight:
                // the waiter completes some (`fh_recover`), then this tries again.
                self.fh.starved[pp.rank].store(true, Ordering::Release);
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
                if let Err(e) = self.am_request(
                    pp.rank,
                    Category::Medium,
                    LibHandler::FhMove as u8,
                    &args,
                    &payload,
                    None,
                ) {
                    fh.moves.lock().remove(&id);
                    fh.peers[pp.rank].lock().abort_move(id);
                    return Err(e);
                }
                self.count(&fh.stats.moves_sent, 1);
                self.count(&fh.stats.misses, 1);
                pp.waits = vec![id];
                pp.own = Some(id);
                Ok(None)
            }
        }
    }

    /// Advance pending non-blocking pins; run the callbacks of finished ones (outside
    /// every lock, marked as handler context: they must not block).
    pub fn fh_progress_pins(&self) {
        if am::in_handler() {
            return;
        }
        let mut list = {
            let mut g = self.fh.pending_pins.lock();
            if g.is_empty() {
                return;
            }
            std::mem::take(&mut *g)
        };
        let mut keep = Vec::new();
        let mut ready = Vec::new();
        for mut pp in list.drain(..) {
            match self.advance_pin(&mut pp) {
                Ok(None) => keep.push(pp),
                Ok(Some(pin)) => ready.push((pp.cb, Ok(pin))),
                Err(e) => ready.push((pp.cb, Err(e))),
            }
        }
        self.fh.pending_pins.lock().extend(keep);
        for (cb, r) in ready {
            am::run_as_handler(|| cb(r));
        }
    }

    /// `fh_release`.
    pub fn release_pin(&self, pin: PinObj) -> Result<()> {
        let (rank, nr, nl) = (pin.pins.rank, pin.pins.remote.len(), pin.pins.local.len());
        self.fh_release_pins(pin.pins);
        // Uncounted only after the references are gone (a waiter comparing the
        // two may see more references than pins, never fewer: it keeps waiting).
        self.fh.pin_refs[rank].fetch_sub(nr as u64, Ordering::AcqRel);
        self.fh.pin_refs[self.size].fetch_sub(nl as u64, Ordering::AcqRel);
        let me = self as *const CtxInner as usize;
        my_pin_refs_add(me, rank, nr as u64, false);
        my_pin_refs_add(me, self.size, nl as u64, false);
        Ok(())
    }

    /// Count an explicit pin's references (see `FhState::pin_refs`).
    fn tracked(&self, p: Box<PinObj>) -> Box<PinObj> {
        let fh = &self.fh;
        fh.pin_refs[p.pins.rank].fetch_add(p.pins.remote.len() as u64, Ordering::AcqRel);
        fh.pin_refs[self.size].fetch_add(p.pins.local.len() as u64, Ordering::AcqRel);
        let me = self as *const CtxInner as usize;
        my_pin_refs_add(me, p.pins.rank, p.pins.remote.len() as u64, true);
        my_pin_refs_add(me, self.size, p.pins.local.len() as u64, true);
        p
    }
}
