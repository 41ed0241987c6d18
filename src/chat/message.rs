//! One message of a chat request: its types and its validation (TOKENIZER.md §10 "Details
//! the reference fixes": roles, content and parts, reasoning, tool calls and their
//! arguments, `partial`). Errors name the field as `messages[i].…` (exit 2).

use super::field::{bad, check_tool_name, present};
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
    /// The call's `index` in the template when it is not its position (TOKENIZER.md §10):
    /// the number the model wrote for a call `k3 chat` read from its reply (after a malformed
    /// call, the valid call `index="2"` is the reply's only call but keeps its 2), so that
    /// the conversation renders the call and its result with the number the model's ids
    /// hold. JSON: `xtml_index` (k3's own key, written by `k3 chat`; OpenAI's `index` is a
    /// 0-based position in a stream and is not read). `None`: the 1-based position.
    pub index: Option<usize>,
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

impl Message {
    /// A message of `role` with `content` and nothing else (no name, reasoning, calls or
    /// tool fields; not partial): what every builder of a message starts from.
    pub fn plain(role: Role, content: Option<Vec<String>>) -> Message {
        Message {
            role,
            name: None,
            content,
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool: None,
            tools: None,
            partial: false,
        }
    }
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
    let name = opt_str(m, "name", &at)?;
    let tool_call_id = opt_str(m, "tool_call_id", &at)?;
    let id = opt_str(m, "id", &at)?;
    let tool = opt_str(m, "tool", &at)?;
    let mut msg = Message {
        role,
        name: name.clone().filter(|n| !n.is_empty()),
        content,
        reasoning: None,
        tool_calls: Vec::new(),
        tool_call_id: tool_call_id.or(id),
        tool: tool.or(name),
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

/// Content → text segments: a string, or an array of parts (see [`part`]).
///
/// Errors: any other value, naming the field and the type found.
fn content(c: &Value, field: &str) -> Result<Vec<String>> {
    match c {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| part(p, &format!("{field}[{j}]")))
            .collect(),
        other => Err(bad(
            field,
            format!(
                "expected a string or an array of parts, found {}",
                other.type_name()
            ),
        )),
    }
}

/// One content part: `{"type": "text", "text": …}` renders its text; image, audio, video
/// and file parts are refused by name (k3 is text-only), as is any other part type, a part
/// without `type` and a part that is not an object (nothing is dropped silently).
fn part(p: &Value, field: &str) -> Result<String> {
    let Some(o) = p.as_object() else {
        return Err(bad(
            field,
            format!("expected a content part object, found {}", p.type_name()),
        ));
    };
    let type_field = format!("{field}.type");
    let kind = match o.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(v) => {
            return Err(bad(
                &type_field,
                format!("expected a string, found {}", v.type_name()),
            ))
        }
        None => return Err(bad(&type_field, "missing (expected \"text\")")),
    };
    let media = match kind {
        "text" => {
            let text_field = format!("{field}.text");
            return match present(Some(o), "text") {
                Some(t) => text(t, &text_field),
                None => Err(bad(&text_field, "missing (a text part needs its text)")),
            };
        }
        "image" | "image_url" | "input_image" => "image",
        "audio" | "input_audio" => "audio",
        "video" | "video_url" | "input_video" => "video",
        "file" | "input_file" => "file",
        other => {
            return Err(bad(
                &type_field,
                format!("unknown part type {other:?} (expected \"text\")"),
            ))
        }
    };
    Err(bad(
        &type_field,
        format!("{media} parts are not supported (k3 is text-only)"),
    ))
}

/// A text value: a string, or an array of strings joined with "\n" (empty ones dropped).
///
/// Errors: any other value, naming the field and the type found.
fn text(v: &Value, field: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(a) if a.iter().all(|x| x.as_str().is_some()) => Ok(a
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n")),
        other => Err(bad(
            field,
            format!(
                "expected a string or an array of strings, found {}",
                other.type_name()
            ),
        )),
    }
}

/// `m[key]` as a string; absent or null is `None`.
///
/// Errors: any other type, naming `{at}.{key}`.
fn opt_str(m: &Object, key: &str, at: &str) -> Result<Option<String>> {
    match present(Some(m), key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(bad(
            &format!("{at}.{key}"),
            format!("expected a string, found {}", v.type_name()),
        )),
    }
}

/// `reasoning_content` when non-empty, else `reasoning`; empty is none.
fn reasoning(m: &Object, at: &str) -> Result<Option<String>> {
    for key in ["reasoning_content", "reasoning"] {
        if let Some(v) = present(Some(m), key) {
            let t = text(v, &format!("{at}.{key}"))?;
            if !t.is_empty() {
                return Ok(Some(t));
            }
        }
    }
    Ok(None)
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
        let name_field = format!("{prefix}.name");
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(&name_field, "missing (a tool call needs its function name)"))?;
        check_tool_name(name, &name_field)?;
        let arguments = arguments(function.get("arguments"), &format!("{prefix}.arguments"))?;
        let (id, index) = match call.as_object() {
            Some(c) => (opt_str(c, "id", &at)?, xtml_index(c, &at)?),
            None => (None, None),
        };
        if let Some(n) = index {
            if let Some(k) = out.iter().position(|c: &ToolCall| c.index == Some(n)) {
                return Err(bad(
                    &format!("{at}.xtml_index"),
                    format!("{n} is already the index of tool_calls[{k}]"),
                ));
            }
        }
        out.push(ToolCall {
            id,
            name: name.to_string(),
            arguments,
            index,
        });
    }
    Ok(out)
}

/// A call's `xtml_index` ([`ToolCall::index`]): absent or null is `None`.
///
/// Errors: anything but an integer from 1 to 2^32 − 1, naming `{at}.xtml_index`.
fn xtml_index(c: &Object, at: &str) -> Result<Option<usize>> {
    match present(Some(c), "xtml_index") {
        None => Ok(None),
        Some(v) => v
            .as_number()
            .and_then(|n| n.as_u64())
            .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
            .map(|n| Some(n as usize))
            .ok_or_else(|| {
                bad(
                    &format!("{at}.xtml_index"),
                    format!(
                        "expected an integer from 1 to {}, found {}",
                        u32::MAX,
                        match v {
                            Value::Number(n) => n.quoted(),
                            _ => v.type_name().to_string(),
                        }
                    ),
                )
            }),
    }
}

/// TOKENIZER.md §10 "Arguments": an object; a string parsing to an object; a blank string
/// or null as none; an unparsable string as a raw block; anything else refused.
pub(crate) fn arguments(v: Option<&Value>, field: &str) -> Result<Arguments> {
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
