//! One message of a chat request: its types and its validation (TOKENIZER.md §10 "Details
//! the reference fixes": roles, content and parts, reasoning, tool calls and their
//! arguments, `partial`). Errors name the field as `messages[i].…` (exit 2).

use super::messages::{bad, present};
use crate::error::Result;
use crate::json::{Object, Value};

/// A message role. `developer` renders as `system`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `system`.
    System,
    /// `developer`.
    Developer,
    /// `user`.
    User,
    /// `assistant`.
    Assistant,
    /// `tool` (a tool result).
    Tool,
}

/// A tool call's arguments (TOKENIZER.md §10 "Arguments").
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// Key/value pairs in the object's order.
    Object(Vec<(String, Value)>),
    /// A string that does not parse as JSON: rendered as a raw `json` block.
    Raw(String),
}

/// One call of an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// `id`, used to order the results.
    pub id: Option<String>,
    /// `function.name` (or `name` of a bare call).
    pub name: String,
    /// The arguments.
    pub arguments: Arguments,
}

/// One validated message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The role.
    pub role: Role,
    /// `name`, when a non-empty string.
    pub name: Option<String>,
    /// The content's text segments in order (empty ones render as nothing); `None` when the
    /// content is absent or null.
    pub content: Option<Vec<String>>,
    /// Assistant reasoning: `reasoning_content` when truthy, else `reasoning`.
    pub reasoning: Option<String>,
    /// Assistant tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// A tool result's `tool_call_id` (or `id`).
    pub tool_call_id: Option<String>,
    /// A tool result's `tool` (else `name`).
    pub tool: Option<String>,
    /// A system or developer message's non-empty `tools` (dynamic declaration).
    pub tools: Option<Value>,
    /// `partial: true` (only the final assistant message).
    pub partial: bool,
}

fn role(m: &Object, at: &str) -> Result<Role> {
    let field = format!("{at}.role");
    match m.get("role") {
        Some(Value::String(s)) => match s.as_str() {
            "system" => Ok(Role::System),
            "developer" => Ok(Role::Developer),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(bad(
                &field,
                format!(
                    "unknown role {other:?} (expected system, developer, user, assistant or tool)"
                ),
            )),
        },
        Some(v) => Err(bad(
            &field,
            format!("expected string, found {}", v.type_name()),
        )),
        None => Err(bad(&field, "missing")),
    }
}

pub(super) fn message(v: &Value, i: usize, last: bool) -> Result<Message> {
    let at = format!("messages[{i}]");
    let Some(m) = v.as_object() else {
        return Err(bad(
            &at,
            format!("expected a message object, found {}", v.type_name()),
        ));
    };
    let role = role(m, &at)?;
    let partial = match present(Some(m), "partial") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(bad(
                &format!("{at}.partial"),
                format!("expected bool, found {}", v.type_name()),
            ))
        }
    };
    if present(Some(m), "partial").is_some() && role != Role::Assistant {
        return Err(bad(
            &format!("{at}.partial"),
            "only an assistant message may be partial",
        ));
    }
    if partial && !last {
        return Err(bad(
            &format!("{at}.partial"),
            "only the final message may be partial",
        ));
    }
    let content = match present(Some(m), "content") {
        None => None,
        Some(c) => Some(content(c, &format!("{at}.content"))?),
    };
    let tools = match (role, present(Some(m), "tools")) {
        (_, None) => None,
        (Role::System | Role::Developer, Some(Value::Array(a))) if a.is_empty() => None,
        (Role::System | Role::Developer, Some(t @ Value::Array(_))) => Some(t.clone()),
        (Role::System | Role::Developer, Some(t)) => {
            return Err(bad(
                &format!("{at}.tools"),
                format!("expected array, found {}", t.type_name()),
            ))
        }
        (_, Some(_)) => {
            return Err(bad(
                &format!("{at}.tools"),
                "only a system or developer message may declare tools",
            ))
        }
    };
    let content_given = match m.get("content") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Null) | None => false,
        Some(_) => true,
    };
    if role == Role::System && tools.is_some() && content_given {
        return Err(bad(
            &format!("{at}.tools"),
            "a system message carries either `content` or `tools`, not both",
        ));
    }
    if matches!(role, Role::System | Role::Developer) && tools.is_none() && content.is_none() {
        return Err(bad(
            &format!("{at}.content"),
            "missing (a system message needs `content` or `tools`)",
        ));
    }
    let str_of = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let mut msg = Message {
        role,
        name: str_of("name").filter(|n| !n.is_empty()),
        content,
        reasoning: None,
        tool_calls: Vec::new(),
        tool_call_id: str_of("tool_call_id").or_else(|| str_of("id")),
        tool: str_of("tool").or_else(|| str_of("name")),
        tools,
        partial,
    };
    if role == Role::Assistant {
        msg.reasoning = reasoning(m, &at)?;
        msg.tool_calls = tool_calls(m, &at)?;
        if partial && !msg.tool_calls.is_empty() {
            return Err(bad(
                &format!("{at}.partial"),
                "a partial assistant message cannot carry tool_calls",
            ));
        }
    }
    Ok(msg)
}

/// Content → text segments: a string; an array of parts whose `text` is rendered (a `text`
/// array of strings joined with "\n"; parts without `text` dropped; image parts refused);
/// any other value as compact JSON.
fn content(c: &Value, field: &str) -> Result<Vec<String>> {
    match c {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                if matches!(kind, Some("image" | "image_url" | "input_image")) {
                    return Err(bad(
                        &format!("{field}[{j}].type"),
                        "image parts are not supported (k3 is text-only)",
                    ));
                }
                if let Some(t) = part.get("text") {
                    out.push(body_text(t, &format!("{field}[{j}].text"))?);
                }
            }
            Ok(out)
        }
        other => Ok(vec![body_text(other, field)?]),
    }
}

/// A body value as text: a string; an array of strings joined with "\n" (empty ones
/// dropped); anything else as compact JSON.
fn body_text(v: &Value, field: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(a) if a.iter().all(|x| x.as_str().is_some()) => Ok(a
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n")),
        other => super::jsontext::compact(other, false).map_err(|e| bad(field, e)),
    }
}

/// `reasoning_content` when truthy (Python truthiness), else `reasoning`; empty is none.
fn reasoning(m: &Object, at: &str) -> Result<Option<String>> {
    let truthy = |v: &&Value| match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != 0.0,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    };
    let (v, key) = match m.get("reasoning_content").filter(truthy) {
        Some(v) => (Some(v), "reasoning_content"),
        None => (m.get("reasoning"), "reasoning"),
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Ok(Some(body_text(v, &format!("{at}.{key}"))?).filter(|s| !s.is_empty())),
    }
}

fn tool_calls(m: &Object, at: &str) -> Result<Vec<ToolCall>> {
    let calls = match m.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(bad(
                &format!("{at}.tool_calls"),
                format!("expected array, found {}", v.type_name()),
            ))
        }
    };
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.iter().enumerate() {
        let at = format!("{at}.tool_calls[{j}]");
        let (function, prefix) = match call.get("function") {
            Some(f) => (f, format!("{at}.function")),
            None => (call, at.clone()),
        };
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                bad(
                    &format!("{prefix}.name"),
                    "missing (a tool call needs its function name)",
                )
            })?;
        let arguments = arguments(function.get("arguments"), &format!("{prefix}.arguments"))?;
        out.push(ToolCall {
            id: call.get("id").and_then(Value::as_str).map(str::to_string),
            name: name.to_string(),
            arguments,
        });
    }
    Ok(out)
}

/// TOKENIZER.md §10 "Arguments": an object; a string parsing to an object; a blank string
/// or null as none; an unparsable string as a raw block; anything else refused.
fn arguments(v: Option<&Value>, field: &str) -> Result<Arguments> {
    let members = |o: &Object| o.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    match v {
        None | Some(Value::Null) => Ok(Arguments::Object(Vec::new())),
        Some(Value::Object(o)) => Ok(Arguments::Object(members(o))),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Arguments::Object(Vec::new())),
        Some(Value::String(s)) => match crate::json::parse(s.as_bytes()) {
            Ok(Value::Object(o)) => Ok(Arguments::Object(members(&o))),
            Ok(v) => Err(bad(
                field,
                format!("expected a JSON object, found {}", v.type_name()),
            )),
            Err(_) => Ok(Arguments::Raw(s.clone())),
        },
        Some(v) => Err(bad(
            field,
            format!(
                "expected an object or a JSON object string, found {}",
                v.type_name()
            ),
        )),
    }
}
