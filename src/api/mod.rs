//! API objects: the context and what hangs off it: RMA with handles (`rma`), active
//! messages (`am`), memory registration and invalidation (`mem`, `regtab`), the
//! library heap (`heap`), Firehose's move protocol run by a context (`moves`),
//! rpipe (`rpipe`), synchronisation (`sync`), progress inside blocking MPI calls
//! (`progress`), stall diagnosis (`stall`) and the composed settings (`settings`).
//!
//! The transport is reached only through `Arc<dyn Conduit>` (no module here names
//! the MPI conduit); subsystems register their handlers and hooks
//! (`ctx::Subsystem`), composed once in `context`. The ffi layer above is a thin
//! validation + translation shell.

pub mod am;
pub mod bells;
pub mod context;
pub mod ctx;
pub mod heap;
pub mod mem;
pub mod moves;
pub mod progress;
pub mod regtab;
pub mod rma;
pub mod rpipe;
pub mod settings;
pub mod stall;
pub mod stats;
pub mod sync;
pub mod wait;
pub mod wire;

pub use crate::conduit::Launch;
pub use context::Context;
pub use ctx::CtxInner;

/// Have `hook` run when the transport is shut down under the library (the program
/// calls `MPI_Finalize` while contexts are live): the C boundary finalizes them.
pub fn on_transport_shutdown(hook: fn()) {
    crate::conduit::on_shutdown(hook)
}
