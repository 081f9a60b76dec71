//! Active messages over MPI two-sided messages: pre-posted receives of the largest
//! frame on a private communicator, sends that complete in the background, long
//! payloads as a second message taken straight into their destination.
//!
//! Guarantees: a frame that fails to parse is dropped and counted (the target keeps
//! running); every send's buffer lives until MPI completed it; the number of frames
//! in flight is bounded by the credits of the layer above.

use super::node_am::NodeSent;
use super::{
    boot::check, u8t, MpiConduit, FLAG_LONG, LONG_TAG_BASE, LONG_TAG_SPAN, MAGIC, POOL_BUF,
    POOL_MAX, PREFIX, SCAN_EVERY, TAG_AM,
};
use crate::bail;
use crate::conduit::{Conduit, LongIn, LongSrc, SendId, Sink};
use crate::runtime::error::Result;
use mpi::ffi;
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;

// SAFETY: the request vectors hold MPI handles (plain values) and are only used
// under their Mutex.
unsafe impl Send for RecvState {}
// SAFETY: as above.
unsafe impl Send for SendState {}

pub(super) struct RecvState {
    reqs: Vec<ffi::MPI_Request>,
    /// `bufs[i]` is the buffer `reqs[i]` receives into. Invariant: while `reqs[i]`
    /// is active, `bufs[i]` is neither read nor moved.
    bufs: Vec<Vec<u8>>,
    /// The receive most likely to complete next (messages mostly match receives in
    /// posting order). Only a hint: completions may come out of order, so the poll
    /// also scans everything every SCAN_EVERY idle polls.
    hint: usize,
    idle_polls: u32,
    indices: Vec<c_int>,
    statuses: Vec<ffi::MPI_Status>,
    posted: bool,
}

pub(super) struct SendState {
    /// Outstanding sends whose buffers we own; parallel vectors.
    reqs: Vec<ffi::MPI_Request>,
    keep: Vec<Vec<u8>>,
    /// Sends of borrowed long payloads the caller waits for.
    borrowed: HashMap<SendId, ffi::MPI_Request>,
    next_id: SendId,
    /// Next long-payload sequence per destination.
    long_seq: Vec<u32>,
}

thread_local! {
    /// Recycled small frame buffers of this thread (at most POOL_MAX of at most
    /// POOL_BUF bytes): per thread, so taking and returning one costs no atomic
    /// operation; a buffer sent on one thread and recycled on another just moves.
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty frame buffer, recycled when one is at hand.
pub(super) fn pooled_buffer() -> Vec<u8> {
    POOL.with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
        .unwrap_or_else(|| Vec::with_capacity(256))
}

impl RecvState {
    /// `n` receives of `bytes` each, not posted yet.
    pub(super) fn new(n: usize, bytes: usize) -> RecvState {
        RecvState {
            // SAFETY: reading an extern constant exported by rsmpi's C shim.
            reqs: vec![unsafe { ffi::RSMPI_REQUEST_NULL }; n],
            bufs: (0..n).map(|_| vec![0u8; bytes]).collect(),
            hint: 0,
            idle_polls: 0,
            indices: vec![0; n],
            // SAFETY: MPI_Status is a plain C struct; all-zero is a valid value.
            statuses: vec![unsafe { std::mem::zeroed() }; n],
            posted: false,
        }
    }
}

impl SendState {
    pub(super) fn new(ranks: usize) -> SendState {
        SendState {
            reqs: Vec::new(),
            keep: Vec::new(),
            borrowed: HashMap::new(),
            next_id: 1,
            long_seq: vec![0; ranks],
        }
    }
}

impl MpiConduit {
    /// Post every receive (start-up).
    pub(super) fn post_all(&self) -> Result<()> {
        let mut rv = self.recv.lock();
        for i in 0..rv.reqs.len() {
            self.post(&mut rv, i)?;
        }
        rv.posted = true;
        Ok(())
    }

    /// Finalize: cancel the receives, complete the sends.
    pub(super) fn close_am(&self) -> Result<()> {
        // SAFETY: requests this conduit created; the layer above has quiesced, so no
        // operation uses them any more.
        unsafe {
            let mut rv = self.recv.lock();
            if rv.posted {
                for r in rv.reqs.iter_mut() {
                    if *r != ffi::RSMPI_REQUEST_NULL {
                        ffi::MPI_Cancel(r);
                        ffi::PMPI_Wait(r, ffi::RSMPI_STATUS_IGNORE);
                    }
                }
                rv.posted = false;
            }
            let mut s = self.send.lock();
            let n = s.reqs.len();
            let mut r = Ok(());
            if n > 0 {
                r = check(
                    ffi::PMPI_Waitall(n as c_int, s.reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE),
                    || "MPI_Waitall (AM sends at finalize)".into(),
                );
                s.reqs.clear();
                s.keep.clear();
            }
            for (_, mut q) in s.borrowed.drain() {
                ffi::PMPI_Wait(&mut q, ffi::RSMPI_STATUS_IGNORE);
            }
            r
        }
    }

    pub(super) fn post(&self, rv: &mut RecvState, i: usize) -> Result<()> {
        let len = rv.bufs[i].len() as c_int;
        let buf = rv.bufs[i].as_mut_ptr() as *mut c_void;
        // SAFETY: bufs[i] stays allocated and untouched while reqs[i] is active
        // (Recv invariant); the request slot is ours.
        let rc = unsafe {
            ffi::MPI_Irecv(
                buf,
                len,
                u8t(),
                ffi::RSMPI_ANY_SOURCE,
                TAG_AM,
                self.am_comm.0,
                &mut rv.reqs[i],
            )
        };
        check(rc, || "MPI_Irecv (AM receive buffer)".into())
    }

    /// Keep `buf` alive until `req` completes (most small sends complete at once:
    /// then nothing is kept).
    pub(super) fn keep_until_done(
        &self,
        s: &mut SendState,
        mut req: ffi::MPI_Request,
        buf: Vec<u8>,
    ) -> Result<()> {
        let mut flag: c_int = 0;
        // SAFETY: testing a request we own.
        let rc = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(rc, || "MPI_Test (AM send)".into())?;
        if flag == 0 {
            s.reqs.push(req);
            s.keep.push(buf);
            self.sends_pending.store(s.reqs.len(), Ordering::Release);
        } else {
            self.recycle(buf);
        }
        Ok(())
    }

    pub(super) fn recycle(&self, buf: Vec<u8>) {
        if buf.capacity() <= POOL_BUF {
            POOL.with(|p| {
                if let Ok(mut p) = p.try_borrow_mut() {
                    if p.len() < POOL_MAX {
                        p.push(buf);
                    }
                }
            });
        }
    }

    /// Complete owned sends that finished.
    pub(super) fn progress_sends(&self, s: &mut SendState) -> Result<()> {
        if s.reqs.is_empty() {
            return Ok(());
        }
        let n = s.reqs.len();
        let mut out: c_int = 0;
        let mut idx = vec![0 as c_int; n];
        // SAFETY: reqs holds n requests; idx has room for n indices; statuses ignored.
        let rc = unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                s.reqs.as_mut_ptr(),
                &mut out,
                idx.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        check(rc, || "MPI_Testsome (AM sends)".into())?;
        if out > 0 && out as usize <= n {
            let mut done: Vec<usize> = idx[..out as usize].iter().map(|&i| i as usize).collect();
            done.sort_unstable_by(|a, b| b.cmp(a));
            for i in done {
                s.reqs.swap_remove(i);
                let buf = s.keep.swap_remove(i);
                self.recycle(buf);
            }
            self.sends_pending.store(s.reqs.len(), Ordering::Release);
        }
        Ok(())
    }

    /// Hand the frame that completed in receive `i` to `sink` (with its long payload,
    /// if any), then repost the receive. Returns how many frames were delivered (0 for
    /// a malformed one, which is counted and dropped).
    pub(super) fn deliver(
        &self,
        rv: &mut RecvState,
        i: usize,
        st: &ffi::MPI_Status,
        sink: &mut Sink<'_>,
    ) -> Result<usize> {
        let src = st.MPI_SOURCE as usize;
        let mut count: c_int = 0;
        // SAFETY: st is a status MPI filled in for a completed receive.
        unsafe { ffi::MPI_Get_count(st, u8t(), &mut count) };
        let count = (count.max(0) as usize).min(rv.bufs[i].len());
        if let Some(n) = &self.node {
            n.note_mpi_recv(src);
        }
        let buf = &mut rv.bufs[i][..count];
        let ok =
            count >= PREFIX && u16::from_le_bytes([buf[0], buf[1]]) == MAGIC && src < self.size;
        let mut delivered = 0;
        if !ok {
            self.malformed(src, sink, &format!("a malformed {}-byte AM frame", count));
        } else {
            let flags = u16::from_le_bytes([buf[2], buf[3]]);
            let tag = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
            let llen = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")) as usize;
            if flags & FLAG_LONG != 0 {
                if llen > self.max_long
                    || !(LONG_TAG_BASE..LONG_TAG_BASE + LONG_TAG_SPAN).contains(&tag)
                {
                    // Cannot know what to drain: refuse the frame (counted above).
                    sink(src, &mut [], None);
                } else {
                    let mut l = MpiLong {
                        c: self,
                        src,
                        tag: tag as c_int,
                        len: llen,
                        done: false,
                    };
                    sink(src, &mut buf[PREFIX..], Some(&mut l));
                    if !l.done {
                        let mut scratch = vec![0u8; llen];
                        // Drain the payload nobody wanted; an error here is reported but
                        // the receive buffer is still reposted.
                        if let Err(e) = l.recv_into(scratch.as_mut_ptr()) {
                            if self.verbose {
                                eprintln!("firehose[{}]: {}", self.rank, e);
                            }
                        }
                    }
                    delivered = 1;
                }
            } else {
                sink(src, &mut buf[PREFIX..], None);
                delivered = 1;
            }
        }
        self.post(rv, i)?;
        Ok(delivered)
    }

    /// `Conduit::am_send`: send a frame (and its long payload as a second message),
    /// keeping owned buffers until MPI completed them. (Long: the cases — small
    /// frame from the pool, owned or borrowed long payload, completion at once or
    /// later — share their error handling and read best together.)
    pub(super) fn send_frame(
        &self,
        dest: usize,
        frame: Vec<u8>,
        long: Option<LongSrc>,
    ) -> Result<Option<SendId>> {
        self.live()?;
        self.check_rank(dest)?;
        if frame.len() < PREFIX || frame.len() - PREFIX > self.caps.max_frame {
            bail!(
                Internal,
                "frame of {} bytes (with {} bytes headroom) does not fit the {}-byte AM buffers",
                frame.len(),
                PREFIX,
                self.caps.max_frame
            );
        }
        let long_len = match &long {
            Some(LongSrc::Borrowed { len, .. }) => *len,
            Some(LongSrc::Owned(v)) => v.len(),
            None => 0,
        };
        if long_len > self.max_long {
            bail!(
                InvalidArg,
                "long payload of {} bytes exceeds FH_AM_MAX_LONG {}",
                long_len,
                self.max_long
            );
        }
        let (frame, long) = match &self.node {
            Some(n) if n.is_peer(dest) => match self.send_node(n, dest, frame, long) {
                NodeSent::Done(id) => return Ok(id),
                NodeSent::Mpi(f, l) => {
                    n.note_mpi_send(dest);
                    (f, l)
                }
            },
            _ => (frame, long),
        };
        let _s = self.serial();
        let mut s = self.send.lock();
        let tag = match &long {
            Some(_) => {
                let seq = s.long_seq[dest];
                s.long_seq[dest] = seq.wrapping_add(1);
                LONG_TAG_BASE + seq % LONG_TAG_SPAN
            }
            None => 0,
        };
        // The sender left PREFIX bytes of headroom: fill them in place (no copy).
        let mut msg = frame;
        msg[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        msg[2..4].copy_from_slice(&(if long.is_some() { FLAG_LONG } else { 0 }).to_le_bytes());
        msg[4..8].copy_from_slice(&tag.to_le_bytes());
        msg[8..16].copy_from_slice(&(long_len as u64).to_le_bytes());
        // SAFETY: reads an immutable extern constant (MPI_REQUEST_NULL) from rsmpi's C shim.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: msg stays alive until the request completes: either the immediate
        // test below sees it complete, or it moves into `keep` with its request.
        let rc = unsafe {
            ffi::MPI_Isend(
                msg.as_ptr() as *const c_void,
                msg.len() as c_int,
                u8t(),
                dest as c_int,
                TAG_AM,
                self.am_comm.0,
                &mut req,
            )
        };
        check(rc, || format!("MPI_Isend (AM frame to rank {})", dest))?;
        self.keep_until_done(&mut s, req, msg)?;
        let mut id = None;
        if let Some(l) = long {
            // SAFETY: reads an immutable extern constant (MPI_REQUEST_NULL) from rsmpi's C shim.
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            let (ptr, owned) = match l {
                LongSrc::Borrowed { ptr, .. } => (ptr, None),
                LongSrc::Owned(v) => (v.as_ptr(), Some(v)),
            };
            // SAFETY: a borrowed payload stays valid until send_done reports the
            // request complete (caller's contract); an owned one lives in `keep`.
            let rc = unsafe {
                ffi::MPI_Isend(
                    ptr as *const c_void,
                    long_len as c_int,
                    u8t(),
                    dest as c_int,
                    tag as c_int,
                    self.am_comm.0,
                    &mut req,
                )
            };
            check(rc, || {
                format!(
                    "MPI_Isend (long AM payload of {} bytes to rank {})",
                    long_len, dest
                )
            })?;
            match owned {
                Some(v) => self.keep_until_done(&mut s, req, v)?,
                None => {
                    let i = s.next_id;
                    s.next_id += 1;
                    s.borrowed.insert(i, req);
                    id = Some(i);
                }
            }
        }
        Ok(id)
    }

    pub(super) fn send_finished(&self, id: SendId) -> Result<bool> {
        if let Some(done) = self.node.as_ref().and_then(|n| n.pull_done(id)) {
            return Ok(done);
        }
        let _s = self.serial();
        let mut s = self.send.lock();
        let Some(req) = s.borrowed.get_mut(&id) else {
            return Ok(true);
        };
        let mut flag: c_int = 0;
        // SAFETY: testing a request we own.
        let rc = unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(rc, || "MPI_Test (long AM payload send)".into())?;
        if flag != 0 {
            s.borrowed.remove(&id);
        }
        Ok(flag != 0)
    }

    pub(super) fn poll_frames(&self, sink: &mut Sink<'_>) -> Result<usize> {
        if self.finalized.load(Ordering::Acquire) {
            return Ok(0);
        }
        let mut on_node = 0;
        if let Some(n) = &self.node {
            on_node = self.poll_node(n, sink);
            // MPI's own progress serves one-sided operations at this target
            // while any need it (`needs_progress`).
            if !n.mpi_due()
                && self.sends_pending.load(Ordering::Acquire) == 0
                && !Conduit::needs_progress(self)
            {
                return Ok(on_node);
            }
        }
        let _s = self.serial();
        if self.sends_pending.load(Ordering::Acquire) > 0 {
            self.progress_sends(&mut self.send.lock())?;
        }
        let Some(mut rv) = self.recv.try_lock() else {
            return Ok(on_node);
        };
        let rv = &mut *rv;
        let n = rv.reqs.len();
        let mut delivered = 0;
        // Fast path: test the oldest receive, which usually gets the next message.
        // Bounded work per poll: at most one pass over the ring.
        for _ in 0..n {
            let i = rv.hint;
            let mut flag: c_int = 0;
            // SAFETY: zeroed MPI_Status is a valid out-parameter.
            let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            // SAFETY: testing the active receive request we own.
            let rc = unsafe { ffi::MPI_Test(&mut rv.reqs[i], &mut flag, &mut st) };
            check(rc, || "MPI_Test (AM receive)".into())?;
            if flag == 0 {
                break;
            }
            delivered += self.deliver(rv, i, &st, sink)?;
            rv.hint = (i + 1) % n;
        }
        // Slow path: MPI may complete receives out of posting order (seen with Open
        // MPI's ob1), so scan them all whenever the fast path comes up empty a few
        // times in a row. A message is therefore never stuck behind an idle head.
        if delivered == 0 {
            rv.idle_polls = rv.idle_polls.wrapping_add(1);
            if rv.idle_polls % SCAN_EVERY == 0 {
                let mut out: c_int = 0;
                // SAFETY: reqs, indices and statuses each hold n entries.
                let rc = unsafe {
                    ffi::MPI_Testsome(
                        n as c_int,
                        rv.reqs.as_mut_ptr(),
                        &mut out,
                        rv.indices.as_mut_ptr(),
                        rv.statuses.as_mut_ptr(),
                    )
                };
                check(rc, || "MPI_Testsome (AM receives)".into())?;
                if out > 0 && out as usize <= n {
                    for k in 0..out as usize {
                        let i = rv.indices[k] as usize;
                        let st = rv.statuses[k];
                        delivered += self.deliver(rv, i, &st, sink)?;
                    }
                }
            }
        } else {
            rv.idle_polls = 0;
        }
        Ok(on_node + delivered)
    }
}

pub(super) struct MpiLong<'a> {
    c: &'a MpiConduit,
    src: usize,
    tag: c_int,
    len: usize,
    done: bool,
}

impl MpiLong<'_> {
    fn recv_into(&mut self, dst: *mut u8) -> Result<()> {
        // SAFETY: MPI_Status is a plain C struct of integers, so all-zero is a valid
        // value; PMPI_Recv overwrites it.
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: dst is writable for len bytes (caller's contract); len fits an int
        // (bounded by FH_AM_MAX_LONG <= i32::MAX, checked when the frame was parsed).
        let rc = unsafe {
            ffi::PMPI_Recv(
                dst as *mut c_void,
                self.len as c_int,
                u8t(),
                self.src as c_int,
                self.tag,
                self.c.am_comm.0,
                &mut st,
            )
        };
        self.done = true;
        check(rc, || {
            format!("MPI_Recv (long AM payload from rank {})", self.src)
        })
    }
}

impl LongIn for MpiLong<'_> {
    fn len(&self) -> usize {
        self.len
    }
    unsafe fn deliver_to(&mut self, dst: *mut u8) -> Result<()> {
        if self.done {
            bail!(State, "long payload already delivered");
        }
        self.recv_into(dst)
    }
}
