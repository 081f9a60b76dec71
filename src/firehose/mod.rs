//! The registration layer between the API objects and the conduit.
//!
//! Today it holds the explicit-registration tables: [`registry::LocalRegions`]
//! (what this rank registered, and which peers have cached it) and
//! [`registry::RemoteCache`] (what we know peers registered). The firehose algorithm
//! proper (buckets, victim FIFOs, moves) builds on these in the firehose issue.

pub mod registry;
