//! The engine's one error type. Every error carries the exit code class of ENGINE.md §3
//! and a message that names the file, tensor, key or flag involved.

use std::fmt;

/// Exit code classes of ENGINE.md §3 ("Exit codes, which scripts rely on").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Exit 1: an internal error (a bug in k3).
    Internal,
    /// Exit 2: usage error or invalid input (flags, prompt, config, checkpoint, tokenizer,
    /// state file), also when found mid-run (an E8M0 scale of 255, a non-finite activation).
    Invalid,
    /// Exit 3: not enough resources (the memory plan, KV cache or disk space does not fit).
    Resources,
    /// Exit 4: I/O failure during the run (read error, short read, file truncated after it
    /// was indexed). The same defect found while indexing is `Invalid`.
    Io,
}

impl ErrorKind {
    /// The process exit code of this class (ENGINE.md §3).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Internal => 1,
            ErrorKind::Invalid => 2,
            ErrorKind::Resources => 3,
            ErrorKind::Io => 4,
        }
    }

    /// Short name used in the JSON report's `error.kind`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Internal => "internal",
            ErrorKind::Invalid => "invalid_input",
            ErrorKind::Resources => "resources",
            ErrorKind::Io => "io",
        }
    }
}

/// An engine error: its class and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

/// Result alias used throughout the engine.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// Exit 2: invalid input or usage.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    /// Exit 3: not enough memory or disk.
    pub fn resources(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Resources, message)
    }
    /// Exit 4: I/O failure during the run.
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, message)
    }
    /// Exit 1: a bug.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    /// Prefixes the message with `context: ` (typically a file path), keeping the class.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Error {
            kind: self.kind,
            message: format!("{context}: {}", self.message),
        }
    }
    /// The process exit code (ENGINE.md §3).
    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
