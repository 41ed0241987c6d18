//! The kernels' error type. The crate knows nothing of files, so its messages name the
//! environment variable, flag, row or group involved; callers prefix the file or tensor.

use std::fmt;

/// An error from the kernels crate: a bad ISA or thread-count choice, a malformed MXFP4
/// matrix (wrong lengths, an E8M0 scale of 255), or a NaN router key.
///
/// All of these are invalid input in the engine's terms (exit 2, ENGINE.md §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// Human-readable message, e.g. `row 3000, group 12: E8M0 scale 255 (NaN)`.
    pub message: String,
}

impl KernelError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        KernelError {
            message: message.into(),
        }
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KernelError {}
