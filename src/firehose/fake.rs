//! A fake context for Firehose's unit tests: two ranks in one process, rank 0 the
//! initiator and rank 1 its target. A move request is handed to the target's
//! handler at once and the answer to the initiator's, so a request's whole round
//! trip runs inside `Mover::send`. Pinning is recorded, not done; memory is real
//! (the tests map pages with the protections they need).

use super::host::{MoveHost, MoveMsg, Mover};
use super::local::Pinner;
use super::params::Params;
use super::protocol::{process_answer, process_move};
use super::registry::{LocalRegions, RemoteCache};
use super::settings::{FhMode, FirehoseSettings};
use super::state::{FhState, Invalidations};
use crate::runtime::config::Group;
use crate::runtime::error::{Error, Result};
use crate::runtime::os;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Host {
    pub rank: usize,
    pub fh: FhState,
    pub regions: LocalRegions,
    pub remote: RemoteCache,
    pub seen: Invalidations,
    pub refused: Cell<u64>,
    pub pinned: RefCell<Vec<(usize, usize)>>,
    pub next_id: Cell<u64>,
    pub hits: Cell<u64>,
    /// Answers of parked moves sent (`drain_parked`), and whether sending them fails.
    pub answers_sent: Cell<u64>,
    pub answers_fail: Cell<bool>,
    /// Errors reported through `Mover::report_async`.
    pub reported: RefCell<Vec<Error>>,
    /// Rank 1, for rank 0.
    pub target: Option<Box<Host>>,
}

struct FakePinner<'a>(&'a Host, Option<&'a os::Maps>);

impl Pinner for FakePinner<'_> {
    fn pin(&mut self, s: usize, e: usize) -> Result<bool> {
        self.0.pinned.borrow_mut().push((s, e));
        Ok(false)
    }
    fn unpin(&mut self, s: usize, e: usize, _locked: bool) {
        self.0.pinned.borrow_mut().retain(|&r| r != (s, e));
    }
    fn extent(&self, a: usize, b: usize, lo: usize, hi: usize) -> Option<(usize, usize, bool)> {
        match self.1 {
            Some(m) => m.extent(a, b - a, lo, hi),
            None => os::Maps::read().extent(a, b - a, lo, hi),
        }
    }
}

impl MoveHost for Host {
    fn rank(&self) -> usize {
        self.rank
    }
    fn fh(&self) -> &FhState {
        &self.fh
    }
    fn regions(&self) -> &LocalRegions {
        &self.regions
    }
    fn remote_regions(&self) -> &RemoteCache {
        &self.remote
    }
    fn invalidations_seen(&self) -> &Invalidations {
        &self.seen
    }
    fn invalidation_epoch(&self) -> u64 {
        0
    }
    fn count(&self, c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    fn access_refused(&self) {
        self.refused.set(self.refused.get() + 1);
    }
    fn max_answer(&self) -> usize {
        64 << 10
    }
    fn pinner<'a>(&'a self, maps: Option<&'a os::Maps>) -> Box<dyn Pinner + 'a> {
        Box::new(FakePinner(self, maps))
    }
}

impl Mover for Host {
    fn owner(&self) -> usize {
        self as *const Host as usize
    }
    fn new_id(&self) -> u64 {
        self.next_id.set(self.next_id.get() + 1);
        self.next_id.get()
    }
    fn send(&self, rank: usize, msg: MoveMsg, args: &[u64], payload: &[u8]) -> Result<()> {
        if msg == MoveMsg::Answer {
            if self.answers_fail.get() {
                crate::bail!(Transport, "rank {rank} has exited");
            }
            self.answers_sent.set(self.answers_sent.get() + 1);
            return Ok(());
        }
        let t = self.target.as_deref().expect("only rank 0 sends");
        assert_eq!((rank, msg), (t.rank, MoveMsg::Request));
        let answer = |a: &[u64], p: &[u8]| process_answer(self, t.rank, a, p);
        assert!(process_move(t, self.rank, args, payload, &answer), "parked");
        Ok(())
    }
    fn wait_until(
        &self,
        call: &'static str,
        _peer: Option<usize>,
        missing: &'static str,
        done: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()> {
        // Answers arrive inside `send`: one look is enough.
        if done()? {
            return Ok(());
        }
        crate::bail!(Transport, "{call}: {missing} never came")
    }
    fn progress(&self) -> Result<usize> {
        Ok(0)
    }
    fn idle(&self) {}
    fn complete_ops(&self, _rank: Option<usize>) -> Result<()> {
        Ok(())
    }
    fn in_handler(&self) -> bool {
        false
    }
    fn check_not_in_handler(&self, _what: &str) -> Result<()> {
        Ok(())
    }
    fn run_as_handler(&self, f: Box<dyn FnOnce() + '_>) {
        f()
    }
    fn count_hit(&self) {
        self.hits.set(self.hits.get() + 1);
    }
    fn report_async(&self, e: Error) {
        self.reported.borrow_mut().push(e);
    }
}

/// Rank `rank` of two, page mode, M = 64 pages.
pub fn host(rank: usize) -> Host {
    let mut s = FirehoseSettings::defaults();
    s.mode = Some(FhMode::Page);
    s.m = Some(64 * os::page_size());
    let p = Params::derive(&s, 2, 1, FhMode::Page, None);
    Host {
        rank,
        fh: FhState::new(p, 2, false),
        regions: LocalRegions::new(2),
        remote: RemoteCache::new(2),
        seen: Invalidations::new(2),
        refused: Default::default(),
        pinned: Default::default(),
        next_id: Cell::new(0),
        hits: Cell::new(0),
        answers_sent: Cell::new(0),
        answers_fail: Cell::new(false),
        reported: Default::default(),
        target: None,
    }
}

/// Rank 0 with rank 1 as its target.
pub fn pair() -> Host {
    Host {
        target: Some(Box::new(host(1))),
        ..host(0)
    }
}

/// Three fresh pages: writable, read-only, no access. Unmap with [`unmap`].
pub fn pages() -> usize {
    let pg = os::page_size();
    // SAFETY: a fresh anonymous mapping of three pages; mprotect on pages of it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            3 * pg,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let b = p as usize;
        assert_eq!(libc::mprotect((b + pg) as *mut _, pg, libc::PROT_READ), 0);
        assert_eq!(
            libc::mprotect((b + 2 * pg) as *mut _, pg, libc::PROT_NONE),
            0
        );
        b
    }
}

/// Unmap what [`pages`] mapped.
pub fn unmap(b: usize) {
    // SAFETY: `b` is the start of the three pages `pages` mapped; nothing uses them now.
    unsafe { libc::munmap(b as *mut _, 3 * os::page_size()) };
}
