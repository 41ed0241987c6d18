//! JSON (RFC 8259): our own scanner, a DOM, and a small writer.
//!
//! Three layers, one grammar:
//! * [`Scanner`], a pull parser over a UTF-8 byte slice: the caller asks for the next key,
//!   element, string or number. Strings without escapes are borrowed from the input, numbers
//!   are returned as their raw lexeme. The safetensors and index readers use it directly so
//!   that a 40 MB header with 497,220 tensors never becomes a DOM.
//! * [`Value`], a DOM built by [`parse`]: objects keep member order, numbers keep their raw
//!   lexeme (so the config reader can tell `4` from `4.0` and read a u64 exactly), and a
//!   duplicate member name is an error.
//! * A writer ([`Value::to_json`], [`Value::to_json_pretty`], [`write_string`]) with correct
//!   escaping, f64 written shortest-round-trip and non-finite numbers written as `null`.
//!
//! Errors are [`JsonError`] with the byte offset in the input and what was expected; callers
//! turn them into [`crate::Error::invalid`] naming the file (see [`JsonError::into_error`]).
//!
//! Layout: `dom` ([`Value`], [`Number`], [`Object`]), `scanner` ([`Scanner`]), `write` (the
//! writer); the error type and [`parse`] here.

mod dom;
mod scanner;
mod write;

pub use dom::{lexeme_as_u64, lexeme_is_integer, quote_str, Number, Object, Value, QUOTE_MAX};
pub use scanner::{Kind, Scanner};
pub use write::{write_f64, write_string};

use std::fmt;

/// Default nesting limit (arrays and objects) for [`parse`] and [`Scanner::new`]. Deeper input is
/// refused instead of recursing without bound.
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// A JSON syntax error: the byte offset in the input and what the scanner expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Zero-based byte offset in the scanned input.
    pub offset: usize,
    /// What was expected and what was found there (`expected ',' or '}' after an object
    /// member, found 'x'`), or the problem when nothing else could stand there (`duplicate
    /// member name "a"`, `nesting deeper than 128 (arrays and objects)`).
    pub expected: String,
}

impl JsonError {
    /// A new error at `offset`.
    pub fn new(offset: usize, expected: impl Into<String>) -> Self {
        JsonError {
            offset,
            expected: expected.into(),
        }
    }

    /// Converts to an engine error (exit 2) whose message names `file` and the byte offset,
    /// shifted by `base` (the file offset where the JSON text starts; 8 for a safetensors header).
    pub fn into_error(self, file: impl fmt::Display, base: u64) -> crate::Error {
        crate::Error::invalid(format!(
            "{file}: invalid JSON at byte {}: {}",
            base + self.offset as u64,
            self.expected
        ))
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.expected)
    }
}

impl std::error::Error for JsonError {}

type JResult<T> = std::result::Result<T, JsonError>;

/// Parses a complete JSON text (one value, surrounded only by whitespace) into a DOM, with the
/// nesting limit [`DEFAULT_MAX_DEPTH`].
///
/// Errors: invalid UTF-8, any RFC 8259 violation, a lone surrogate escape, nesting deeper than
/// the limit, a duplicate member name, or anything but whitespace after the value.
pub fn parse(input: &[u8]) -> JResult<Value> {
    parse_with_max_depth(input, DEFAULT_MAX_DEPTH)
}

/// [`parse`] with an explicit nesting limit (arrays and objects count one level each).
pub fn parse_with_max_depth(input: &[u8], max_depth: usize) -> JResult<Value> {
    let mut s = Scanner::with_max_depth(input, max_depth)?;
    let v = s.value()?;
    s.finish()?;
    Ok(v)
}
