//! Runtime: the bottom layer. Errors, the settings machinery (and the runtime's own
//! settings), OS facilities. Nothing here names a conduit, Firehose or the API
//! objects; the progress thread is the context's (`api::context`).

// First, so the error macros (`err!`, `bail!`) are in scope in the modules below
// without naming the crate root.
#[macro_use]
pub mod error;
pub mod config;
pub mod os;
pub mod solo;
pub mod wait;
