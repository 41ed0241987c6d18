//! What the chat request's validators share (`messages` for the request, `message` for one
//! message): the error naming a field's path, the read of a key that is present and not
//! `null`, and the tool-name rule. The lowest file of the request's validation: it knows
//! neither a request nor a message.

use crate::error::{Error, Result};
use crate::json::{Object, Value};

/// Longest tool name the reference accepts (TOKENIZER.md §10).
pub const MAX_TOOL_NAME_LEN: usize = 256;

/// `field: what` as an invalid-input error (exit 2).
pub(super) fn bad(field: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{field}: {what}"))
}

/// `o[key]` when `o` has it and it is not `null`.
pub(super) fn present<'a>(o: Option<&'a Object>, key: &str) -> Option<&'a Value> {
    o.and_then(|o| o.get(key)).filter(|v| !v.is_null())
}

/// The tool-name rule of TOKENIZER.md §10: `[A-Za-z_][A-Za-z0-9_-]*`, at most
/// [`MAX_TOOL_NAME_LEN`] characters (declared tools and call names alike).
///
/// Errors: naming `field`.
pub fn check_tool_name(name: &str, field: &str) -> Result<()> {
    let mut chars = name.chars();
    let start = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !start || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(bad(
            field,
            format!("tool name {name:?} must match [A-Za-z_][A-Za-z0-9_-]*"),
        ));
    }
    if name.len() > MAX_TOOL_NAME_LEN {
        return Err(bad(
            field,
            format!(
                "tool name is {} characters; at most {MAX_TOOL_NAME_LEN}",
                name.len()
            ),
        ));
    }
    Ok(())
}
