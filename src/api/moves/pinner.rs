//! Pinning on behalf of the Firehose tables (seed 000 §3.3's "pin"): mlock, the
//! physical resource, then conduit registration. Guarantees: a unit never covers
//! the library heap or a registered region (they are pinned already); a failed
//! registration undoes its mlock; mlock failures are counted, not fatal.

use super::*;

/// Pins on behalf of the local table: mlock (the physical resource) + conduit
/// registration; the extent check keeps units out of the heap and registered regions.
pub struct CtxPinner<'a> {
    pub ctx: &'a CtxInner,
    /// The mappings a move handler read once for all its pieces (`None`: read them
    /// when a unit is created).
    pub maps: Option<&'a os::Maps>,
}

impl Pinner for CtxPinner<'_> {
    fn pin(&mut self, s: usize, e: usize) -> Result<bool> {
        let ctx = self.ctx;
        let (ls, le) = inner_pages(s, e);
        let locked = ctx.cfg.pin == Pin::Mlock && le > ls && os::mlock(ls, le - ls).is_ok();
        if ctx.cfg.pin == Pin::Mlock && le > ls && !locked {
            ctx.count(&ctx.stats.mlock_failures, 1);
        }
        if let Err(e2) = ctx.conduit.register(s, e - s) {
            if locked {
                os::munlock(ls, le - ls);
            }
            return Err(e2);
        }
        Ok(locked || ctx.cfg.pin == Pin::None)
    }

    fn unpin(&mut self, s: usize, e: usize, locked: bool) {
        let ctx = self.ctx;
        if let Err(err) = ctx.conduit.deregister(s, e - s) {
            ctx.record_async_error(err);
        }
        let (ls, le) = inner_pages(s, e);
        if locked && ctx.cfg.pin == Pin::Mlock && le > ls {
            os::munlock(ls, le - ls);
        }
    }

    fn extent(&self, a: usize, b: usize, lo: usize, hi: usize) -> Option<(usize, usize, bool)> {
        let ctx = self.ctx;
        let (hb, hl) = ctx.conduit.heap();
        let (mut lo, mut hi) = (lo, hi);
        // Keep out of the library heap and of explicitly registered regions.
        for (s, e) in std::iter::once((hb, hb + hl)).chain(ctx.local_regs.bounds_near(lo, hi)) {
            if s < b && e > a {
                return None;
            }
            if e <= a {
                lo = lo.max(e);
            } else if s >= b {
                hi = hi.min(s);
            }
        }
        // Protection, not only mapping: a unit never spans pages without read
        // access, and is marked read-only unless every page of it is writable.
        match self.maps {
            Some(m) => m.extent(a, b - a, lo, hi),
            None => os::Maps::read().extent(a, b - a, lo, hi),
        }
    }
}

fn inner_pages(s: usize, e: usize) -> (usize, usize) {
    let p = os::page_size();
    let ls = (s + p - 1) & !(p - 1);
    let le = e & !(p - 1);
    (ls, le.max(ls))
}
