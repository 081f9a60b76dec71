//! The pack algorithm for non-contiguous transfers (seed 002's VIS implementation
//! notes: pack the pieces into active messages and let the target unpack them): a
//! put's segments travel in AM mediums together with their target addresses, and the
//! target's handler copies them into place; a get sends the list of source pieces
//! and the target gathers them into its reply, which is unpacked here. A section of
//! many small runs costs a few messages instead of one RMA (and one firehose lookup)
//! per run.
//!
//! Wire format of a request's payload: `n: u64`, then `n` pieces `(addr: u64,
//! len: u64)`, then (puts) the pieces' bytes in order. args: `[message id]`. The
//! answer is a short `VisAck` (puts) or a medium `VisData` (gets) with args
//! `[id, status, index of the refused piece]`.
//!
//! Guarantees:
//! - the target checks the whole message before it copies anything (sizes
//!   consistent, no piece inside the library's own structures), and copies through
//!   the kernel-checked copy, so a piece it does not have mapped with the needed
//!   protection is refused (`FH_ERR_ACCESS` for the call), never a fault; a message
//!   is never more than `FH_AM_MAX_MEDIUM` bytes, its data included;
//! - completion: a put is complete when every message was acknowledged (its bytes
//!   are in place at the target), a get when every reply was unpacked here;
//! - a non-blocking call never waits for the target, only (like any AM) for flow
//!   control credits;
//! - a put's source bytes are copied into the messages before the call returns.
//!
//! The operations' and messages' records (`PackOp`, `Packs`) are with the rest of
//! the RMA state in `handles`.

use super::handles::{Dir, Msg, PackOp, RmaState};
use crate::api::am::table::Token;
use crate::api::ctx::CtxInner;
use crate::api::wire::{Category, Frame, LibHandler};
use crate::runtime::error::{Error, Result, Status};
use crate::runtime::os;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Why the target refused a message: status, index of the piece, message.
type Refused = (Status, usize, String);

/// Pieces `(remote, local, len)` grouped into messages of at most `max` bytes:
/// metadata (8 + 16 per piece) plus, for puts, the data; a get's data (its reply)
/// is also at most `max`. Pieces are split where a message fills up.
fn plan(pieces: &[(usize, usize, usize)], dir: Dir, max: usize) -> Vec<Vec<(usize, usize, usize)>> {
    debug_assert!(max >= 64);
    let mut out: Vec<Vec<(usize, usize, usize)>> = Vec::new();
    let (mut cur, mut meta, mut data) = (Vec::new(), 8usize, 0usize);
    for &(mut rem, mut loc, mut len) in pieces {
        while len > 0 {
            let room = match dir {
                Dir::Put => max.saturating_sub(meta + 16 + data),
                Dir::Get => {
                    if meta + 16 > max {
                        0
                    } else {
                        max - data
                    }
                }
            };
            if room == 0 {
                out.push(std::mem::take(&mut cur));
                (meta, data) = (8, 0);
                continue;
            }
            let n = len.min(room);
            cur.push((rem, loc, n));
            meta += 16;
            data += n;
            (rem, loc, len) = (rem + n, loc + n, len - n);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A request's pieces `(addr, len)` and the offset of its data.
type Parsed = (Vec<(usize, usize)>, usize);

/// The pieces of a request payload, checked against its length.
fn parse(p: &[u8], with_data: bool) -> std::result::Result<Parsed, &'static str> {
    let word = |i: usize| -> Option<u64> {
        p.get(i * 8..i * 8 + 8)
            .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    };
    let n = word(0).ok_or("no piece count")? as usize;
    if n > p.len() / 16 {
        return Err("more pieces than the message holds");
    }
    let mut pieces = Vec::with_capacity(n);
    let mut total = 0usize;
    for k in 0..n {
        let (a, l) = (
            word(1 + 2 * k).ok_or("short")?,
            word(2 + 2 * k).ok_or("short")?,
        );
        let (a, l) = (a as usize, l as usize);
        if a == 0 || a.checked_add(l).is_none() {
            return Err("a piece at NULL or wrapping around");
        }
        total = total.checked_add(l).ok_or("pieces overflow")?;
        pieces.push((a, l));
    }
    let head = 8 + 16 * n;
    if with_data && p.len() != head + total {
        return Err("the data does not match the pieces");
    }
    Ok((pieces, head))
}

impl RmaState {
    fn add_msg(&self, m: Msg) -> u64 {
        let mut g = self.packs.lock();
        g.next += 1;
        let id = g.next;
        g.msgs.insert(id, m);
        id
    }
}

impl CtxInner {
    /// Start a packed transfer of `pieces` `(remote, local, len)` with `rank`; the
    /// operation completes when [`PackOp::done`].
    pub(crate) fn pack_start(
        &self,
        dir: Dir,
        rank: usize,
        pieces: &[(usize, usize, usize)],
    ) -> Result<Arc<PackOp>> {
        let msgs = plan(pieces, dir, self.cfg.am_max_medium);
        let op = Arc::new(PackOp::default());
        op.left.store(msgs.len(), Ordering::Release);
        for (k, m) in msgs.iter().enumerate() {
            let total: usize = m.iter().map(|p| p.2).sum();
            let mut buf =
                Vec::with_capacity(8 + 16 * m.len() + if dir == Dir::Put { total } else { 0 });
            buf.extend_from_slice(&(m.len() as u64).to_ne_bytes());
            for &(rem, _, len) in m {
                buf.extend_from_slice(&(rem as u64).to_ne_bytes());
                buf.extend_from_slice(&(len as u64).to_ne_bytes());
            }
            if dir == Dir::Put {
                for &(_, loc, len) in m {
                    // SAFETY: the caller of the public put keeps its source pieces
                    // readable for the call (header contract); copied here, once.
                    buf.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(loc as *const u8, len)
                    });
                }
            }
            let id = self.rma.add_msg(Msg {
                op: op.clone(),
                rank,
                scatter: match dir {
                    Dir::Get => m.iter().map(|&(_, loc, len)| (loc, len)).collect(),
                    Dir::Put => Vec::new(),
                },
                remote: m.iter().map(|&(rem, _, len)| (rem, len)).collect(),
            });
            let handler = match dir {
                Dir::Put => LibHandler::VisPut,
                Dir::Get => LibHandler::VisGet,
            };
            if let Err(e) =
                self.am_request(rank, Category::Medium, handler as u8, &[id], &buf, None)
            {
                // This message and the ones not sent will never be answered.
                self.rma.packs.lock().msgs.remove(&id);
                op.left.fetch_sub(msgs.len() - k, Ordering::AcqRel);
                return Err(e);
            }
            self.count_rma(dir, total);
        }
        Ok(op)
    }

    /// Wait for a packed operation (blocking calls).
    pub(crate) fn pack_wait(&self, op: &PackOp, rank: usize) -> Result<()> {
        let what = crate::api::stall::Wait::new(
            "fh_putv/getv/puti/geti/puts/gets",
            Some(rank),
            "the target's answer to a packed non-contiguous transfer",
        );
        self.wait_for(what, || Ok(op.done()))?;
        op.take_error()
    }

    /// The target side of a packed put: check, copy, acknowledge.
    fn unpack_put(&self, p: &[u8]) -> std::result::Result<(), Refused> {
        let (pieces, head) = parse(p, true).map_err(|w| (Status::InvalidArg, 0, w.to_string()))?;
        self.check_pieces(&pieces)?;
        copy_own(os::VmDir::Write, &pieces, p.as_ptr() as usize + head)
    }

    /// The target side of a packed get: check, gather.
    fn gather(&self, p: &[u8]) -> std::result::Result<Vec<u8>, Refused> {
        let (pieces, _) = parse(p, false).map_err(|w| (Status::InvalidArg, 0, w.to_string()))?;
        self.check_pieces(&pieces)?;
        let total: usize = pieces.iter().map(|x| x.1).sum();
        if total > self.cfg.am_max_medium {
            return Err((
                Status::InvalidArg,
                0,
                "the reply would exceed FH_AM_MAX_MEDIUM".into(),
            ));
        }
        let mut out = vec![0u8; total];
        copy_own(os::VmDir::Read, &pieces, out.as_mut_ptr() as usize)?;
        Ok(out)
    }

    fn check_pieces(&self, pieces: &[(usize, usize)]) -> std::result::Result<(), Refused> {
        for (k, &(addr, len)) in pieces.iter().enumerate() {
            self.check_not_internal(self.rank, addr, len)
                .map_err(|e| (e.status, k, e.msg.clone()))?;
        }
        Ok(())
    }

    /// An answer arrived: unpack a get's data, record a refusal, count it.
    fn pack_answered(&self, f: &Frame<'_>) {
        let a = f.args();
        let (Some(&id), Some(&status)) = (a.first(), a.get(1)) else {
            return;
        };
        let Some(m) = self.rma.packs.lock().msgs.remove(&id) else {
            return; // not ours (a malformed or duplicated answer): ignore it
        };
        let err = match Status::from_code(status as i64 as i32) {
            Some(Status::Ok) => self.scatter(&m, f.payload).err(),
            s => {
                let k = a.get(2).copied().unwrap_or(0) as usize;
                let (addr, len) = m.remote.get(k).copied().unwrap_or((0, 0));
                Some(Error::new(
                    s.unwrap_or(Status::Transport),
                    format!(
                        "rank {} refused a packed non-contiguous transfer: piece [{:#x}, +{}) is not {} there",
                        m.rank,
                        addr,
                        len,
                        if m.scatter.is_empty() {
                            "writable memory of the library's user"
                        } else {
                            "readable memory of the library's user"
                        }
                    ),
                ))
            }
        };
        m.op.answered(err);
    }

    fn scatter(&self, m: &Msg, data: &[u8]) -> Result<()> {
        let total: usize = m.scatter.iter().map(|x| x.1).sum();
        if data.len() != total {
            crate::bail!(
                Transport,
                "a packed get's reply holds {} bytes, not {}",
                data.len(),
                total
            );
        }
        let mut at = 0;
        for &(loc, len) in &m.scatter {
            // SAFETY: the caller of the public get keeps its destination pieces
            // writable until the operation completes (header contract), and this
            // reply is the only writer of these bytes; `data` holds `total` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), loc as *mut u8, len) };
            at += len;
        }
        Ok(())
    }
}

/// Copy `pieces` `(addr, len)` of this process's memory to or from a message buffer
/// at `buf` (the pieces back to back there) through the kernel, which checks every
/// `addr`: a piece that is not mapped with the needed protection is an error, never a
/// fault. One system call per 1024 pieces; on an error, the pieces are redone one by
/// one to name the first refused one.
fn copy_own(
    dir: os::VmDir,
    pieces: &[(usize, usize)],
    buf: usize,
) -> std::result::Result<(), Refused> {
    let mut at = buf;
    let v: Vec<(usize, usize, usize)> = pieces
        .iter()
        .map(|&(addr, len)| {
            at += len;
            (addr, at - len, len)
        })
        .collect();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    if os::vm_copy_v(me, dir, &v).is_ok() {
        return Ok(());
    }
    for (k, &(addr, b, len)) in v.iter().enumerate() {
        let r = match dir {
            os::VmDir::Write => os::copy_checked(addr, b, len),
            os::VmDir::Read => os::copy_checked(b, addr, len),
        };
        r.map_err(|e| (Status::Access, k, e.msg.clone()))?;
    }
    Err((Status::Access, 0, "the kernel copy failed".into()))
}

fn refusal(ctx: &CtxInner, (status, k, msg): Refused, src: usize) -> [u64; 3] {
    crate::api::stats::Stats::add(&ctx.stats.access_refused, 1);
    if ctx.cfg.verbose {
        eprintln!(
            "firehose[{}]: refused a packed transfer from rank {}: {}",
            ctx.rank, src, msg
        );
    }
    [0, status.code() as i64 as u64, k as u64]
}

fn handle_put(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let id = f.args().first().copied().unwrap_or(0);
    let mut ans = match ctx.unpack_put(f.payload) {
        Ok(()) => [0, 0, 0],
        Err(r) => refusal(ctx, r, tok.src),
    };
    ans[0] = id;
    let r = ctx.am_reply(
        tok,
        Category::Short,
        LibHandler::VisAck as u8,
        &ans,
        &[],
        None,
    );
    if let Err(e) = r {
        ctx.record_async_error(e);
    }
}

fn handle_get(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let id = f.args().first().copied().unwrap_or(0);
    let (mut ans, data) = match ctx.gather(f.payload) {
        Ok(d) => ([0, 0, 0], d),
        Err(r) => (refusal(ctx, r, tok.src), Vec::new()),
    };
    ans[0] = id;
    let r = ctx.am_reply(
        tok,
        Category::Medium,
        LibHandler::VisData as u8,
        &ans,
        &data,
        None,
    );
    if let Err(e) = r {
        ctx.record_async_error(e);
    }
}

fn handle_answer(ctx: &CtxInner, _tok: &Token, f: &Frame<'_>) {
    ctx.pack_answered(f);
}

/// The pack algorithm's handlers (registered with the RMA subsystem).
pub(crate) static HANDLERS: &[(LibHandler, crate::api::ctx::LibHandlerFn)] = &[
    (LibHandler::VisPut, handle_put),
    (LibHandler::VisAck, handle_answer),
    (LibHandler::VisGet, handle_get),
    (LibHandler::VisData, handle_answer),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fit_the_medium_and_keep_every_byte_in_order() {
        let pieces: Vec<(usize, usize, usize)> = (0..50)
            .map(|k| (0x10000 + 1000 * k, 0x90000 + 700 * k, 1 + 37 * k))
            .collect();
        for dir in [Dir::Put, Dir::Get] {
            for max in [64usize, 512, 4096, 65536] {
                let msgs = plan(&pieces, dir, max);
                let flat: Vec<(usize, usize, usize)> = msgs.iter().flatten().copied().collect();
                // Every byte once, in order: re-merge adjacent splits.
                let mut merged: Vec<(usize, usize, usize)> = Vec::new();
                for (r, l, n) in flat {
                    match merged.last_mut() {
                        Some(m) if m.0 + m.2 == r && m.1 + m.2 == l => m.2 += n,
                        _ => merged.push((r, l, n)),
                    }
                }
                assert_eq!(merged, pieces, "dir put={} max={}", dir == Dir::Put, max);
                for m in &msgs {
                    let data: usize = m.iter().map(|p| p.2).sum();
                    let meta = 8 + 16 * m.len();
                    match dir {
                        Dir::Put => assert!(meta + data <= max),
                        Dir::Get => assert!(meta <= max && data <= max),
                    }
                }
            }
        }
    }

    #[test]
    fn parse_refuses_inconsistent_messages() {
        let mut p = Vec::new();
        p.extend_from_slice(&2u64.to_ne_bytes());
        for (a, l) in [(0x1000u64, 4u64), (0x2000, 2)] {
            p.extend_from_slice(&a.to_ne_bytes());
            p.extend_from_slice(&l.to_ne_bytes());
        }
        assert_eq!(parse(&p, false).unwrap().0, vec![(0x1000, 4), (0x2000, 2)]);
        assert!(parse(&p, true).is_err(), "data missing");
        p.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(parse(&p, true).unwrap().1, 40);
        assert!(parse(&p[..20], false).is_err());
        let mut huge = p.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(parse(&huge, false).is_err());
        let mut null = p.clone();
        null[8..16].copy_from_slice(&0u64.to_ne_bytes());
        assert!(parse(&null, true).is_err());
        let mut wrap = p;
        wrap[8..16].copy_from_slice(&(u64::MAX - 1).to_ne_bytes());
        assert!(parse(&wrap, true).is_err());
        assert!(parse(&[], false).is_err());
    }
}
