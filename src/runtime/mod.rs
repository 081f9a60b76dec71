//! Runtime: the bottom layer. Errors, configuration, OS facilities and the progress
//! thread. Nothing here knows about conduits or the algorithm above.

pub mod config;
pub mod error;
pub mod os;
