//! rmalloc / rpipe (seed 003): remote allocation and zero-copy notified channels.
//!
//! - [`heap`]: the allocator of a pipe's remote heap (next/first/best/worst fit,
//!   coalescing), pure bookkeeping over offsets.
//!
//! The channels themselves (open, rwrite/rread with notification flags, rfree
//! synchronisation) are issue 5's remaining work; see the README's status.

pub mod heap;
