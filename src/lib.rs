//! firehose: one-sided RMA to any address, active messages, rpipe channels and
//! NIC-style synchronisation for MPI programs, with a stable C ABI.
//!
//! Layers, top to bottom (dependencies point down only):
//! - [`ffi`]: the C ABI (`include/firehose.h`), one file per header section.
//! - [`api`]: API objects — context, RMA with handles, active messages, memory,
//!   Firehose's move protocol, rpipe, synchronisation, composed settings.
//! - [`firehose`]: the Firehose algorithm: tables, parameters, its settings, the
//!   move protocol's wire format.
//! - [`conduit`]: the transport contract and its MPI and sim implementations.
//! - [`runtime`]: errors, the settings machinery, OS facilities.
//!
//! A module names only its own layer and the layers below (docs/ARCHITECTURE.md).

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod conduit;
pub mod ffi;
pub mod firehose;
pub mod runtime;

pub use runtime::error::{Error, Result, Status};
