//! The explicit pin API's entry points (seed 000 §3.3): the arguments and the
//! context's state are checked here, and memory that needs no pin (this rank's or
//! the peer's library heap, registered regions) gets a pin holding nothing. The
//! rest is Firehose's (`firehose::pins`).

use super::*;
use crate::err;
use crate::firehose::pins::{self, PinHow};

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

    fn check_peer(&self, rank: usize) -> Result<()> {
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        Ok(())
    }

    /// `fh_local_pin` and its try/partial forms.
    pub fn local_pin(&self, addr: usize, len: usize, how: PinHow) -> Result<Box<PinObj>> {
        self.check_live()?;
        let end = self.check_range(addr, len)?;
        if self.plain_access(self.rank, addr, len).is_some() {
            return Ok(pins::prepinned(self, None, addr, len));
        }
        pins::local(self, addr, end, how)
    }

    /// `fh_try_remote_pin` / `fh_partial_remote_pin`.
    pub fn remote_pin_try(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        partial: bool,
    ) -> Result<Box<PinObj>> {
        self.check_live()?;
        let end = self.check_range(addr, len)?;
        self.check_peer(rank)?;
        if self.plain_access(rank, addr, len).is_some() {
            self.count(&self.fh.stats.try_hits, 1);
            return Ok(pins::prepinned(self, Some(rank), addr, len));
        }
        pins::remote_try(self, rank, addr, end, partial)
    }

    /// `fh_remote_pin`, blocking.
    pub fn remote_pin(&self, rank: usize, addr: usize, len: usize) -> Result<Box<PinObj>> {
        self.check_live()?;
        am::check_not_in_handler("fh_remote_pin")?;
        self.check_range(addr, len)?;
        self.check_peer(rank)?;
        if self.plain_access(rank, addr, len).is_some() {
            return Ok(pins::prepinned(self, Some(rank), addr, len));
        }
        pins::remote(self, rank, addr, len)
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
        self.check_peer(rank)?;
        if self.plain_access(rank, addr, len).is_some() {
            return Ok(Some(pins::prepinned(self, Some(rank), addr, len)));
        }
        pins::remote_async(self, rank, addr, len, cb)
    }

    /// `fh_release`.
    pub fn release_pin(&self, pin: PinObj) -> Result<()> {
        pins::release(self, pin);
        Ok(())
    }
}
