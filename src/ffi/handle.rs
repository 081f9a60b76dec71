//! The one handle scheme of the C surface (contexts, locks, pins, pipes).
//!
//! A handle is not a pointer to memory: it encodes a kind, a slot of a process-wide
//! table and the slot's generation (`kind << 56 | gen << 32 | slot + 1`). Releasing
//! an object bumps its slot's generation, so a stale or double-released handle names
//! a generation that no longer exists and is refused with `FH_ERR_STATE`, and a
//! pointer that is no handle (or a handle of another kind) with
//! `FH_ERR_INVALID_ARG` — never a read of freed memory.
//!
//! Slots live in chunks allocated on first use and never freed, so a lookup is a few
//! plain loads with no lock and no reference count (the hot paths resolve a handle
//! on every call). Free slots are reused oldest first, so a stale handle stays
//! refused as long as possible. A lookup's reference is valid until the object is
//! released; the header's rules forbid releasing an object while another call uses
//! it.

use crate::bail;
use crate::runtime::error::Result;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

const CHUNK: usize = 1024;
const CHUNKS: usize = 1024;
/// Objects of one kind alive at once.
pub(crate) const CAPACITY: usize = CHUNK * CHUNKS;
const GEN_MASK: u32 = 0x00ff_ffff;

struct Slot<T> {
    gen: AtomicU32,
    obj: AtomicPtr<T>,
}

/// The table of one kind of object.
pub struct Table<T> {
    /// Names the kind in messages (`fh_ctx_t`, ...).
    name: &'static str,
    /// Tells this kind's handles from the others' (1..=255).
    kind: u8,
    /// The call that releases one (named in the stale-handle message).
    released_by: &'static str,
    chunks: [AtomicPtr<[Slot<T>; CHUNK]>; CHUNKS],
    /// Free slots (oldest first) and the next never-used one.
    free: Mutex<(VecDeque<usize>, usize)>,
}

// SAFETY: the table hands out `&T` to any thread and moves `Box<T>` between
// threads at insert and remove; both need T: Send + Sync, which the bound requires.
unsafe impl<T: Send + Sync> Sync for Table<T> {}

impl<T> Table<T> {
    pub const fn new(name: &'static str, kind: u8, released_by: &'static str) -> Table<T> {
        Table {
            name,
            kind,
            released_by,
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS],
            free: Mutex::new((VecDeque::new(), 0)),
        }
    }

    fn slot(&self, i: usize) -> Option<&Slot<T>> {
        let c = self.chunks.get(i / CHUNK)?.load(Ordering::Acquire);
        // SAFETY: a non-null chunk pointer comes from Box::into_raw in `insert` and
        // is never freed (the table is a static).
        (!c.is_null()).then(|| unsafe { &(*c)[i % CHUNK] })
    }

    /// Take ownership of `obj`; its handle.
    pub fn insert(&self, obj: Box<T>) -> Result<usize> {
        let i = {
            let mut f = self.free.lock();
            match f.0.pop_front() {
                Some(i) => i,
                None if f.1 < CAPACITY => {
                    f.1 += 1;
                    let i = f.1 - 1;
                    let chunk = &self.chunks[i / CHUNK];
                    if chunk.load(Ordering::Acquire).is_null() {
                        let fresh: Box<[Slot<T>; CHUNK]> =
                            Box::new(std::array::from_fn(|_| Slot {
                                gen: AtomicU32::new(0),
                                obj: AtomicPtr::new(std::ptr::null_mut()),
                            }));
                        chunk.store(Box::into_raw(fresh), Ordering::Release);
                    }
                    i
                }
                None => bail!(
                    NoResource,
                    "{} {} objects exist in this process: release some",
                    CAPACITY,
                    self.name
                ),
            }
        };
        let s = self.slot(i).expect("allocated above");
        let old = s.obj.swap(Box::into_raw(obj), Ordering::AcqRel);
        debug_assert!(old.is_null(), "a free slot holds no object");
        let gen = s.gen.load(Ordering::Acquire) & GEN_MASK;
        Ok((self.kind as usize) << 56 | (gen as usize) << 32 | (i + 1))
    }

    /// The slot and generation `h` names (whatever the slot holds now).
    fn decode(&self, h: usize) -> Result<(&Slot<T>, u32, usize)> {
        if h == 0 {
            bail!(InvalidArg, "{} handle is NULL", self.name);
        }
        let (kind, gen, i) = (
            (h >> 56) as u8,
            (h >> 32) as u32 & GEN_MASK,
            h & 0xffff_ffff,
        );
        match (kind == self.kind)
            .then(|| i.checked_sub(1).and_then(|i| self.slot(i).map(|s| (s, i))))
        {
            Some(Some((s, i))) => Ok((s, gen, i)),
            _ => bail!(
                InvalidArg,
                "{:#x} is not a {} handle (uninitialised, corrupted, or another kind)",
                h,
                self.name
            ),
        }
    }

    /// The object behind a live handle.
    ///
    /// The hit is inline and builds no `Result` of its own: every C call resolves a
    /// handle, so this sits on every call's path (an empty `fh_poll` spent a sixth
    /// of its time here when it went through `decode`). Anything else takes
    /// [`Self::get_slow`], which says what is wrong.
    #[inline]
    pub fn get(&self, h: usize) -> Result<&T> {
        let i = (h & 0xffff_ffff).wrapping_sub(1);
        if (h >> 56) as u8 == self.kind && i < CAPACITY {
            let c = self.chunks[i / CHUNK].load(Ordering::Acquire);
            if !c.is_null() {
                // SAFETY: as in `slot`: a non-null chunk is never freed.
                let s = unsafe { &(*c)[i % CHUNK] };
                let p = s.obj.load(Ordering::Acquire);
                if !p.is_null()
                    && s.gen.load(Ordering::Acquire) & GEN_MASK == (h >> 32) as u32 & GEN_MASK
                {
                    // SAFETY: as in `get_slow`.
                    return Ok(unsafe { &*p });
                }
            }
        }
        self.get_slow(h)
    }

    /// [`Self::get`] for a handle its inline check did not resolve.
    #[cold]
    #[inline(never)]
    fn get_slow(&self, h: usize) -> Result<&T> {
        let (s, gen, _) = self.decode(h)?;
        let p = s.obj.load(Ordering::Acquire);
        if p.is_null() || s.gen.load(Ordering::Acquire) & GEN_MASK != gen {
            return Err(self.stale(h));
        }
        // SAFETY: the slot owns this object until `remove` (which the header's rules
        // keep from running concurrently with a call that uses the handle).
        Ok(unsafe { &*p })
    }

    /// Give the object back to the caller and retire the handle (every later use is
    /// `FH_ERR_STATE`).
    pub fn remove(&self, h: usize) -> Result<Box<T>> {
        let (s, gen, i) = self.decode(h)?;
        let mut f = self.free.lock();
        if s.gen
            .compare_exchange(
                gen,
                (gen + 1) & GEN_MASK,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(self.stale(h));
        }
        let p = s.obj.swap(std::ptr::null_mut(), Ordering::AcqRel);
        f.0.push_back(i);
        if p.is_null() {
            return Err(self.stale(h));
        }
        // SAFETY: `p` came from Box::into_raw in `insert`; the slot gave it up above.
        Ok(unsafe { Box::from_raw(p) })
    }

    /// Every live object's handle, oldest slot first.
    pub fn handles(&self) -> Vec<usize> {
        let used = self.free.lock().1;
        (0..used)
            .filter_map(|i| {
                let s = self.slot(i)?;
                let p = s.obj.load(Ordering::Acquire);
                (!p.is_null()).then(|| {
                    let gen = s.gen.load(Ordering::Acquire) & GEN_MASK;
                    (self.kind as usize) << 56 | (gen as usize) << 32 | (i + 1)
                })
            })
            .collect()
    }

    #[cold]
    fn stale(&self, h: usize) -> crate::runtime::error::Error {
        crate::err!(
            State,
            "{} {:#x} was released already by {} (a stale handle)",
            self.name,
            h,
            self.released_by
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::error::Status;

    static T: Table<String> = Table::new("thing_t", 9, "thing_free");
    static OTHER: Table<u32> = Table::new("other_t", 10, "other_free");

    #[test]
    fn stale_double_and_foreign_handles_are_refused() {
        let h = T.insert(Box::new("a".into())).unwrap();
        assert_eq!(T.get(h).unwrap(), "a");
        assert!(T.handles().contains(&h));
        assert_eq!(*T.remove(h).unwrap(), "a");
        assert_eq!(T.get(h).unwrap_err().status, Status::State, "stale");
        assert_eq!(
            T.remove(h).unwrap_err().status,
            Status::State,
            "double release"
        );
        // The slot is reused with a new generation: the old handle stays stale.
        let h2 = T.insert(Box::new("b".into())).unwrap();
        assert_ne!(h, h2);
        assert_eq!(T.get(h).unwrap_err().status, Status::State);
        assert_eq!(T.get(h2).unwrap(), "b");
        assert_eq!(T.get(0).unwrap_err().status, Status::InvalidArg);
        assert_eq!(
            T.get(0x7fff_1234_5678).unwrap_err().status,
            Status::InvalidArg
        );
        // The right kind, but slot 0 (no handle names it: slots count from 1), a slot
        // in a chunk never allocated, and a slot past the table.
        let kind = 9usize << 56;
        for bad in [kind, kind | (CHUNK * 7 + 3), kind | 0xffff_ffff] {
            assert_eq!(
                T.get(bad).unwrap_err().status,
                Status::InvalidArg,
                "{bad:#x}"
            );
        }
        let o = OTHER.insert(Box::new(5)).unwrap();
        assert_eq!(
            T.get(o).unwrap_err().status,
            Status::InvalidArg,
            "another kind"
        );
        OTHER.remove(o).unwrap();
        T.remove(h2).unwrap();
    }
}
