//! rmalloc / rpipe (seed 003): remote allocation and zero-copy notified channels.
//!
//! A pipe joins two ranks. The writer allocates space in the *reader's* memory
//! (`rmalloc`, without asking the reader), fills it in place, and `rwrite`s it: the
//! bytes arrive by one-sided RDMA and a notice lands after them in a ring the
//! reader polls in its own memory. The reader takes messages in order (`rread`),
//! uses them where they lie and `rfree`s them, which the writer collects by RDMA.
//!
//! - [`rmalloc`]: the allocator of one pipe direction's space in the reader's
//!   memory (next/first/best/worst fit, coalescing), pure bookkeeping over offsets.
//! - [`slots`]: tagged notice slots (sequence numbers, stale-record safety).
//! - [`freemap`]: the reader's free bitmap and the writer's deferred/immediate sync.
//! - [`offmap`]: hash maps keyed by inbox offsets (the allocator's live set).
//! - [`pipe`]: one pipe's two directions: rmalloc, rmem, rwrite, rread, rfree.
//! - [`open`]: the pairwise open/close handshake.

pub mod freemap;
pub mod offmap;
pub mod open;
pub mod pipe;
pub mod rmalloc;
pub mod slots;
pub mod state;

pub use open::{open, open_checked, Role, RpipeState, Spec};
pub use pipe::{HeapView, Pipe, PipeStats, Transfer};
pub use rmalloc::Policy;
