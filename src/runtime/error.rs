//! Status codes and the library's error type.
//!
//! Guarantees: every fallible internal function returns [`Result`]; an [`Error`]
//! always carries a [`Status`] (what the C caller branches on) and a message saying
//! what failed and with which argument. The ffi layer stores the message in a
//! thread-local so `fh_last_error` can copy it out; nothing here touches C.

use std::cell::RefCell;
use std::fmt;

/// The status codes of the C API. `Ok` is 0, `NotReady` is positive, errors are negative.
/// The numeric values are ABI: never renumber, only append.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Ok = 0,
    NotReady = 1,
    InvalidArg = -1,
    BadRank = -2,
    NoMemory = -3,
    NoResource = -4,
    Access = -5,
    NotPinned = -6,
    BarrierMismatch = -7,
    State = -8,
    Mpi = -9,
    Transport = -10,
    Unsupported = -11,
    Version = -12,
    Internal = -13,
}

impl Status {
    pub const ALL: [Status; 15] = [
        Status::Ok,
        Status::NotReady,
        Status::InvalidArg,
        Status::BadRank,
        Status::NoMemory,
        Status::NoResource,
        Status::Access,
        Status::NotPinned,
        Status::BarrierMismatch,
        Status::State,
        Status::Mpi,
        Status::Transport,
        Status::Unsupported,
        Status::Version,
        Status::Internal,
    ];

    pub fn from_code(code: i32) -> Option<Status> {
        Self::ALL.iter().copied().find(|s| *s as i32 == code)
    }

    pub fn code(self) -> i32 {
        self as i32
    }

    /// Static, NUL-terminated description (what `fh_strerror` returns).
    pub fn describe(self) -> &'static str {
        match self {
            Status::Ok => "FH_OK: success\0",
            Status::NotReady => "FH_NOT_READY: operation not complete yet\0",
            Status::InvalidArg => "FH_ERR_INVALID_ARG: invalid argument\0",
            Status::BadRank => "FH_ERR_BAD_RANK: rank out of range for this context\0",
            Status::NoMemory => "FH_ERR_NO_MEMORY: out of memory\0",
            Status::NoResource => {
                "FH_ERR_NO_RESOURCE: resource limit reached (pinned memory, buffers)\0"
            }
            Status::Access => {
                "FH_ERR_ACCESS: remote address not accessible (not registered or not mapped)\0"
            }
            Status::NotPinned => "FH_ERR_NOT_PINNED: range is not pinned/registered\0",
            Status::BarrierMismatch => {
                "FH_ERR_BARRIER_MISMATCH: barrier ids differ between ranks\0"
            }
            Status::State => "FH_ERR_STATE: call not allowed in the current state\0",
            Status::Mpi => "FH_ERR_MPI: MPI call failed\0",
            Status::Transport => "FH_ERR_TRANSPORT: transport (conduit) failure\0",
            Status::Unsupported => "FH_ERR_UNSUPPORTED: not supported by this conduit or build\0",
            Status::Version => "FH_ERR_VERSION: header/library version or struct size mismatch\0",
            Status::Internal => "FH_ERR_INTERNAL: internal error (a bug; please report)\0",
        }
    }
}

/// What an [`Error`] carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorInfo {
    pub status: Status,
    pub msg: String,
}

/// An error: a status plus a human-readable message. Boxed so that `Result<(), Error>`
/// is one pointer (returned in a register on the fast paths); fields are reached
/// through `Deref` (`e.status`, `e.msg`).
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<ErrorInfo>);

impl Error {
    #[cold]
    pub fn new(status: Status, msg: impl Into<String>) -> Error {
        debug_assert!(status.code() < 0, "an Error must carry a negative status");
        Error(Box::new(ErrorInfo {
            status,
            msg: msg.into(),
        }))
    }
}

impl std::ops::Deref for Error {
    type Target = ErrorInfo;
    fn deref(&self) -> &ErrorInfo {
        &self.0
    }
}

impl std::ops::DerefMut for Error {
    fn deref_mut(&mut self) -> &mut ErrorInfo {
        &mut self.0
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.status.describe();
        let name = d.split(':').next().unwrap_or("FH_ERR");
        write!(f, "{}: {}", name, self.msg)
    }
}

impl std::error::Error for Error {}

const _: () = assert!(std::mem::size_of::<std::result::Result<(), Error>>() == 8);

pub type Result<T> = std::result::Result<T, Error>;

/// `err!(InvalidArg, "nbytes {} too large", n)` builds an [`Error`].
#[macro_export]
macro_rules! err {
    ($status:ident, $($arg:tt)*) => {
        $crate::runtime::error::Error::new($crate::runtime::error::Status::$status, format!($($arg)*))
    };
}

/// `bail!(...)` returns `Err(err!(...))`.
#[macro_export]
macro_rules! bail {
    ($status:ident, $($arg:tt)*) => {
        return Err($crate::runtime::error::Error::new(
            $crate::runtime::error::Status::$status,
            format!($($arg)*),
        ))
    };
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Record `msg` as this thread's last detailed error message.
pub fn set_last_error(msg: &str) {
    LAST_ERROR.with(|l| {
        let mut l = l.borrow_mut();
        l.clear();
        l.push_str(msg);
    });
}

/// This thread's last detailed error message (empty if none).
pub fn last_error() -> String {
    LAST_ERROR.with(|l| l.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_descriptions_are_c_strings() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s.code()), Some(s));
            assert!(s.describe().ends_with('\0'));
            assert_eq!(s.describe().matches('\0').count(), 1);
        }
        assert_eq!(Status::from_code(42), None);
    }

    #[test]
    fn display_names_the_status() {
        let e = err!(BadRank, "rank {} of {}", 9, 4);
        assert_eq!(e.to_string(), "FH_ERR_BAD_RANK: rank 9 of 4");
    }

    #[test]
    fn last_error_is_per_thread() {
        set_last_error("main thread");
        std::thread::spawn(|| {
            assert_eq!(last_error(), "");
            set_last_error("other");
        })
        .join()
        .unwrap();
        assert_eq!(last_error(), "main thread");
    }
}
