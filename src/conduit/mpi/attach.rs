//! What this rank has attached to its dynamic window, kept the way MPI can take it.
//!
//! Users of the dynamic window (firehose units, `fh_mem_register`ed ranges) ask for
//! byte ranges; MPI is shown page-aligned attachments that never overlap:
//! - a range inside an attachment takes a reference on it (no MPI call);
//! - a range that overlaps attachments (shares a page with them) replaces them by
//!   their union (each old one detached, then the union attached once); one that
//!   only touches its neighbours is merged with them when the window is full;
//! - an attachment is detached when its last user leaves;
//! - at most `capacity` attachments exist; a request that would need more is refused
//!   before MPI is asked (`FH_ERR_NO_RESOURCE`).
//!
//! Why: Open MPI 4.1's `osc/rdma` keeps attachments in a table sorted by base and
//! looks them up by binary search. Two attachments with the same base make a detach
//! remove the wrong one, and one that contains others hides addresses from the
//! search; either way a range the owner still has attached fails every access with
//! `MPI_ERR_RMA_RANGE`, for good. Its `osc_rdma_max_attach`-th attach fails and
//! leaves the window locked, so the next attach or detach hangs. (The MPI standard
//! calls overlapping attachments erroneous.) Replacing attachments by their union
//! leaves a short gap in which a peer's access to them is refused; origins retry
//! such refusals for a bounded time (`MpiConduit::rma`).
//!
//! Invariants (checked by `debug_check`): attachments are page-aligned and disjoint;
//! every user range lies inside exactly one attachment; an attachment
//! has at least one user; `atts.len() <= capacity`.

use crate::bail;
use crate::runtime::error::Result;
use std::collections::{BTreeMap, HashMap};

/// One MPI call the map asks its owner to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Attach { start: usize, end: usize },
    Detach { start: usize, end: usize },
}

#[derive(Clone, Copy, Debug)]
struct Att {
    end: usize,
    users: usize,
}

pub struct AttachMap {
    page: usize,
    capacity: Option<usize>,
    /// Attachment start -> its end and how many user ranges it holds.
    atts: BTreeMap<usize, Att>,
    /// User ranges (start, end) -> how many times each is registered.
    users: HashMap<(usize, usize), usize>,
}

impl AttachMap {
    /// `capacity`: attachments MPI holds at once (None: no limit).
    pub fn new(page: usize, capacity: Option<usize>) -> AttachMap {
        debug_assert!(page.is_power_of_two());
        AttachMap {
            page,
            capacity,
            atts: BTreeMap::new(),
            users: HashMap::new(),
        }
    }

    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// Attachments MPI holds now.
    pub fn attached(&self) -> usize {
        self.atts.len()
    }

    fn span(&self, addr: usize, len: usize) -> (usize, usize) {
        let s = addr & !(self.page - 1);
        let e = (addr + len.max(1) + self.page - 1) & !(self.page - 1);
        (s, e)
    }

    /// Attachments that overlap `[s, e)` (and, with `touching`, those that end at
    /// `s` or start at `e`), in address order.
    fn meeting(&self, s: usize, e: usize, touching: bool) -> Vec<(usize, Att)> {
        let t = usize::from(touching);
        self.atts
            .range(..e + t)
            .rev()
            .take_while(|(_, a)| a.end + t > s)
            .map(|(&k, &a)| (k, a))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect()
    }

    /// Make `[addr, addr+len)` accessible. `mpi` makes the MPI calls the map asks for;
    /// when one fails, the map undoes what it did and returns that error.
    pub fn register(
        &mut self,
        addr: usize,
        len: usize,
        mpi: &mut dyn FnMut(Step) -> Result<()>,
    ) -> Result<()> {
        let (s, e) = self.span(addr, len);
        let mut meet = self.meeting(s, e, false);
        if let [(k, a)] = meet.as_slice() {
            if *k <= s && a.end >= e {
                self.atts.get_mut(k).expect("just found").users += 1;
                *self.users.entry((addr, addr + len)).or_insert(0) += 1;
                return Ok(());
            }
        }
        let full = |m: &Vec<(usize, Att)>| {
            self.capacity
                .is_some_and(|c| self.atts.len() - m.len() + 1 > c)
        };
        if full(&meet) {
            // Out of attachments: merge with the neighbours too, if that fits.
            meet = self.meeting(s, e, true);
        }
        if full(&meet) {
            bail!(
                NoResource,
                "all {} attachments of the MPI dynamic window are in use on this rank \
                 (Open MPI's osc_rdma_max_attach): unregister a range or register larger \
                 ones, or raise the limit (mpirun --mca osc_rdma_max_attach N)",
                self.capacity.unwrap_or(0)
            );
        }
        let us = meet.first().map_or(s, |(k, _)| (*k).min(s));
        let ue = meet.last().map_or(e, |(_, a)| a.end.max(e));
        let mut done = Vec::new();
        for &(k, a) in &meet {
            if let Err(err) = mpi(Step::Detach {
                start: k,
                end: a.end,
            }) {
                self.restore(&done, mpi);
                return Err(err);
            }
            done.push((k, a.end));
        }
        if let Err(err) = mpi(Step::Attach { start: us, end: ue }) {
            self.restore(&done, mpi);
            return Err(err);
        }
        let users = meet.iter().map(|(_, a)| a.users).sum::<usize>() + 1;
        for (k, _) in &meet {
            self.atts.remove(k);
        }
        self.atts.insert(us, Att { end: ue, users });
        *self.users.entry((addr, addr + len)).or_insert(0) += 1;
        self.debug_check();
        Ok(())
    }

    /// Attach again what a failed replacement detached (best effort: MPI already
    /// failed once; what cannot be re-attached is dropped from the map, so the map
    /// never claims more than MPI has).
    fn restore(&mut self, detached: &[(usize, usize)], mpi: &mut dyn FnMut(Step) -> Result<()>) {
        for &(s, e) in detached {
            if mpi(Step::Attach { start: s, end: e }).is_err() {
                self.atts.remove(&s);
                self.users.retain(|&(a, b), _| !(a >= s && b <= e));
            }
        }
    }

    /// Give up one registration of exactly `[addr, addr+len)`.
    pub fn deregister(
        &mut self,
        addr: usize,
        len: usize,
        mpi: &mut dyn FnMut(Step) -> Result<()>,
    ) -> Result<()> {
        let key = (addr, addr + len);
        match self.users.get_mut(&key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.users.remove(&key);
            }
            None => bail!(
                InvalidArg,
                "[{:#x}, +{}) was never attached to the dynamic window",
                addr,
                len
            ),
        }
        let (s, _) = self.span(addr, len);
        let (&k, a) = self
            .atts
            .range_mut(..=s)
            .next_back()
            .expect("a user range lies inside an attachment");
        debug_assert!(a.end > s && a.users > 0);
        a.users -= 1;
        if a.users == 0 {
            let end = a.end;
            self.atts.remove(&k);
            mpi(Step::Detach { start: k, end })?;
        }
        self.debug_check();
        Ok(())
    }

    /// Every attachment, for teardown.
    pub fn drain(&mut self) -> Vec<(usize, usize)> {
        self.users.clear();
        std::mem::take(&mut self.atts)
            .into_iter()
            .map(|(s, a)| (s, a.end))
            .collect()
    }

    fn debug_check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let mut prev_end = 0;
        for (&s, a) in &self.atts {
            debug_assert!(s % self.page == 0 && a.end % self.page == 0 && s < a.end);
            debug_assert!(s >= prev_end, "attachments overlap");
            debug_assert!(a.users > 0);
            prev_end = a.end;
        }
        debug_assert!(self.capacity.map_or(true, |c| self.atts.len() <= c));
        let per: usize = self.atts.values().map(|a| a.users).sum();
        debug_assert_eq!(per, self.users.values().sum::<usize>());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: usize = 4096;

    /// What MPI would hold after the steps, checked against Open MPI's rules.
    #[derive(Default)]
    struct FakeMpi {
        live: BTreeMap<usize, usize>,
        fail_next_attach: bool,
    }

    impl FakeMpi {
        fn step(&mut self, s: Step) -> Result<()> {
            match s {
                Step::Attach { start, end } => {
                    if std::mem::take(&mut self.fail_next_attach) {
                        bail!(Mpi, "injected");
                    }
                    for (&a, &b) in &self.live {
                        assert!(b <= start || a >= end, "overlapping attach");
                    }
                    self.live.insert(start, end);
                }
                Step::Detach { start, end } => {
                    assert_eq!(self.live.remove(&start), Some(end), "detach of unknown");
                }
            }
            Ok(())
        }
        fn covers(&self, a: usize, b: usize) -> bool {
            self.live
                .range(..=a)
                .next_back()
                .is_some_and(|(_, &e)| e >= b)
        }
    }

    #[test]
    fn inside_takes_a_reference_and_overlap_merges() {
        let mut m = AttachMap::new(P, Some(4));
        let mut mpi = FakeMpi::default();
        let mut f = |s| mpi.step(s);
        m.register(10 * P, 4 * P, &mut f).unwrap();
        m.register(11 * P + 8, 100, &mut f).unwrap();
        assert_eq!(m.attached(), 1);
        // Shares a page with the first: one attachment, the union.
        m.register(14 * P - 8, 2 * P, &mut f).unwrap();
        assert_eq!(m.attached(), 1);
        m.deregister(10 * P, 4 * P, &mut f).unwrap();
        m.deregister(11 * P + 8, 100, &mut f).unwrap();
        assert_eq!(m.attached(), 1, "a user is left");
        m.deregister(14 * P - 8, 2 * P, &mut f).unwrap();
        assert_eq!(m.attached(), 0);
        assert!(m.deregister(1, 1, &mut f).is_err());
        assert!(mpi.live.is_empty());
    }

    #[test]
    fn capacity_is_refused_before_mpi() {
        let mut m = AttachMap::new(P, Some(2));
        let mut mpi = FakeMpi::default();
        let mut f = |s| mpi.step(s);
        m.register(0x10000, P, &mut f).unwrap();
        m.register(0x20000, P, &mut f).unwrap();
        let e = m.register(0x30000, P, &mut f).unwrap_err();
        assert_eq!(e.status, crate::runtime::error::Status::NoResource);
        assert!(e.msg.contains("osc_rdma_max_attach"), "{}", e.msg);
        // Merging with a neighbour needs no new attachment: allowed when full.
        m.register(0x20000 + P, P, &mut f).unwrap();
        assert_eq!(m.attached(), 2);
        m.register(0x10000 - P, P, &mut f).unwrap();
        assert_eq!(m.attached(), 2);
    }

    #[test]
    fn a_failed_attach_restores_what_was_detached() {
        let mut m = AttachMap::new(P, None);
        let mut mpi = FakeMpi::default();
        m.register(0x10000, P, &mut |s| mpi.step(s)).unwrap();
        mpi.fail_next_attach = true;
        assert!(m.register(0x10000 + P, P, &mut |s| mpi.step(s)).is_err());
        assert!(mpi.covers(0x10000, 0x10000 + P));
        assert_eq!(m.attached(), 1);
    }

    proptest! {
        /// Any sequence of registrations and deregistrations keeps MPI's attachments
        /// disjoint, covers every live user range with one attachment, and ends
        /// with nothing attached.
        #[test]
        fn random_sequences_keep_mpi_consistent(
            ops in proptest::collection::vec((0usize..64, 1usize..6 * P, any::<bool>()), 1..200)
        ) {
            let mut m = AttachMap::new(P, None);
            let mut mpi = FakeMpi::default();
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (slot, len, remove) in ops {
                let addr = 0x100_0000 + slot * 1000;
                if remove && !live.is_empty() {
                    let (a, l) = live.swap_remove(slot % live.len());
                    m.deregister(a, l, &mut |s| mpi.step(s)).unwrap();
                } else {
                    m.register(addr, len, &mut |s| mpi.step(s)).unwrap();
                    live.push((addr, len));
                }
                for &(a, l) in &live {
                    prop_assert!(mpi.covers(a, a + l));
                }
                prop_assert_eq!(mpi.live.len(), m.attached());
            }
            for (a, l) in live {
                m.deregister(a, l, &mut |s| mpi.step(s)).unwrap();
            }
            prop_assert!(mpi.live.is_empty());
        }

        /// With a small window, a registration is refused (and nothing changes) or
        /// accepted, and MPI never holds more attachments than the window can.
        #[test]
        fn a_full_window_refuses_and_stays_consistent(
            ops in proptest::collection::vec((0usize..40, 1usize..3 * P, any::<bool>()), 1..200)
        ) {
            let mut m = AttachMap::new(P, Some(3));
            let mut mpi = FakeMpi::default();
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (slot, len, remove) in ops {
                let addr = 0x100_0000 + slot * 3000;
                if remove && !live.is_empty() {
                    let (a, l) = live.swap_remove(slot % live.len());
                    m.deregister(a, l, &mut |s| mpi.step(s)).unwrap();
                } else {
                    let before = mpi.live.clone();
                    match m.register(addr, len, &mut |s| mpi.step(s)) {
                        Ok(()) => live.push((addr, len)),
                        Err(_) => prop_assert_eq!(&before, &mpi.live),
                    }
                }
                prop_assert!(mpi.live.len() <= 3);
                for &(a, l) in &live {
                    prop_assert!(mpi.covers(a, a + l));
                }
            }
        }
    }
}
