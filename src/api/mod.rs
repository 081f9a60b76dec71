//! API objects: the context and what hangs off it (RMA with handles, active
//! messages, memory registration, the library heap). Written against the conduit
//! trait only; the ffi layer above is a thin validation + translation shell.

pub mod am;
pub mod context;
pub mod ctx;
pub mod fh;
pub mod heap;
pub mod mem;
pub mod progress;
pub mod regtab;
pub mod rma;
pub mod rpipe;
pub mod stall;
pub mod stats;
pub mod sync;
pub mod wire;

pub use crate::conduit::Launch;
pub use context::Context;
pub use ctx::CtxInner;

/// Have `hook` run when the transport is shut down under the library (the program
/// calls `MPI_Finalize` while contexts are live): the C boundary finalizes them.
pub fn on_transport_shutdown(hook: fn()) {
    crate::conduit::on_shutdown(hook)
}
