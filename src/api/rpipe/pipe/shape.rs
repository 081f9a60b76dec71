//! The blocks of one pipe direction: sizes and offsets, derived from the width
//! alone, so both ends compute the same (the layout diagram is in `pipe/mod.rs`).

use super::{SLOTS_MAX, UNIT};
use crate::api::rpipe::{freemap, slots};

/// The staging block of `write_through`: inline bytes, then the notice's words.
const STAGE: usize = slots::INLINE_MAX + 16;
pub(super) const WORDS_STAGED: usize = slots::INLINE_MAX;

/// Bytes a message of `len` bytes takes in the inbox.
pub fn extent(len: usize) -> usize {
    len.max(1).div_ceil(UNIT) * UNIT
}

/// Sizes and offsets of one direction's blocks, derived from the width alone so
/// both ends compute the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub width: usize,
    /// Most messages in flight (allocated and not yet freed by the reader).
    pub slots: usize,
    /// Notice slots in the ring: `slots` rounded up to a power of two, so a
    /// sequence number finds its slot with a mask (a division cost more than the
    /// rest of an empty poll). At least `slots`, so a slot is reused only after
    /// its notice was taken (`slots` bounds the messages not yet freed).
    pub ring: usize,
    pub bitmap: usize,
}

impl Shape {
    /// The blocks for a pipe whose largest message is `width` bytes (the inbox space is
    /// `width` rounded up to whole units).
    pub fn new(width: usize) -> Shape {
        let width = width.div_ceil(UNIT) * UNIT;
        let units = width / UNIT;
        let slots = units.clamp(1, SLOTS_MAX);
        Shape {
            width,
            slots,
            ring: slots.next_power_of_two(),
            bitmap: freemap::bytes_for(units),
        }
    }
    pub fn ring_off(&self) -> usize {
        self.width
    }
    pub fn bitmap_off(&self) -> usize {
        self.width + self.ring * slots::SLOT_BYTES
    }
    pub fn inbox_bytes(&self) -> usize {
        self.bitmap_off() + self.bitmap
    }
    pub fn view_off(&self) -> usize {
        self.width
    }
    pub fn stage_off(&self) -> usize {
        self.width + self.bitmap
    }
    pub fn outbox_bytes(&self) -> usize {
        self.stage_off() + STAGE
    }
}
