//! Runtime: the bottom layer. Errors, the settings machinery (and the runtime's own
//! settings), OS facilities. Nothing here names a conduit, Firehose or the API
//! objects; the progress thread is the context's (`api::context`).

pub mod config;
pub mod error;
pub mod os;
