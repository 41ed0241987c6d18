//! An OpenAI-style chat request body → a validated [`Request`] (TOKENIZER.md §10 "Details
//! the reference fixes"). Every error is `Error::invalid` (exit 2) and names the field as a
//! path into the request (`messages[3].tool_calls[0].function.name: …`); callers prefix
//! the file.

use crate::error::{Error, Result};
use crate::json::{Object, Value};

/// Longest tool name the reference accepts (TOKENIZER.md §10).
pub const MAX_TOOL_NAME_LEN: usize = 256;

/// Thinking effort (TOKENIZER.md §10 step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// `low`.
    Low,
    /// `high`.
    High,
    /// `max` (the default).
    Max,
}

impl Effort {
    /// Parses `low`, `high` or `max`; anything else (`medium` included) is `None`.
    pub fn parse(s: &str) -> Option<Effort> {
        match s {
            "low" => Some(Effort::Low),
            "high" => Some(Effort::High),
            "max" => Some(Effort::Max),
            _ => None,
        }
    }

    /// The spelling in the thinking-effort message.
    pub fn name(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::High => "high",
            Effort::Max => "max",
        }
    }
}

/// Thinking off, or on with an effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// No think channel anywhere.
    Off,
    /// The think channel with this effort.
    On(Effort),
}

/// `tool_choice` (TOKENIZER.md §10 step 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// `auto` or absent: nothing rendered.
    Auto,
    /// `none`.
    None,
    /// `required`.
    Required,
    /// A named, declared function (thinking is then off).
    Named(String),
}

/// `response_format` (TOKENIZER.md §10 step 5).
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// `text`: nothing rendered.
    Text,
    /// `json_object`.
    JsonObject,
    /// `json_schema` with its schema (`json_schema.schema`, else `json_schema.json_schema`,
    /// else `json_schema` itself).
    JsonSchema(Value),
}

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

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The messages in order.
    pub messages: Vec<Message>,
    /// The top-level `tools` array (unsorted; `None` when absent or null).
    pub tools: Option<Value>,
    /// The tool choice.
    pub tool_choice: ToolChoice,
    /// The response format, when given.
    pub response_format: Option<ResponseFormat>,
    /// The thinking switch and effort.
    pub thinking: Thinking,
}

fn bad(field: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{field}: {what}"))
}

fn present<'a>(o: Option<&'a Object>, key: &str) -> Option<&'a Value> {
    o.and_then(|o| o.get(key)).filter(|v| !v.is_null())
}

impl Request {
    /// Validates `body`: an array of messages, or an object with `messages`, `tools`,
    /// `tool_choice`, `response_format`, `reasoning_effort`, `chat_template_kwargs`
    /// (`thinking`, `enable_thinking`, `thinking_effort`, `reasoning_effort`); other keys
    /// are ignored.
    ///
    /// Errors (exit 2, naming the field): see TOKENIZER.md §10 "Refused", plus image parts
    /// and values of the wrong type (the reference falls back silently; k3 refuses).
    pub fn from_json(body: &Value) -> Result<Request> {
        let (msgs, top) = match body {
            Value::Array(a) => (a.as_slice(), None),
            Value::Object(o) => match o.get("messages") {
                Some(Value::Array(a)) => (a.as_slice(), Some(o)),
                Some(v) => return Err(bad("messages", format!("expected array, found {}", v.type_name()))),
                None => return Err(bad("messages", "missing (expected an array of messages)")),
            },
            v => {
                return Err(Error::invalid(format!(
                    "expected an array of messages or a request object, found {}",
                    v.type_name()
                )))
            }
        };
        let messages = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| message(m, i, i + 1 == msgs.len()))
            .collect::<Result<Vec<_>>>()?;
        let tools = match present(top, "tools") {
            None => None,
            Some(v @ Value::Array(_)) => Some(v.clone()),
            Some(v) => return Err(bad("tools", format!("expected array, found {}", v.type_name()))),
        };
        let mut req = Request {
            messages,
            tools,
            tool_choice: ToolChoice::Auto,
            response_format: None,
            thinking: Thinking::On(Effort::Max),
        };
        req.check_tool_names()?;
        req.tool_choice = tool_choice(present(top, "tool_choice"))?;
        if let ToolChoice::Named(name) = &req.tool_choice {
            if !req.declares(name) {
                return Err(bad(
                    "tool_choice.function.name",
                    format!("tool {name:?} is not declared in `tools`"),
                ));
            }
        }
        req.response_format = present(top, "response_format").map(response_format).transpose()?;
        req.thinking = thinking(top, &req.tool_choice)?;
        Ok(req)
    }

    /// Sets the thinking switch (the command line's `--thinking`); a named tool_choice keeps
    /// thinking off.
    pub fn set_thinking(&mut self, t: Thinking) {
        if !matches!(self.tool_choice, ToolChoice::Named(_)) {
            self.thinking = t;
        }
    }

    /// Replaces the top-level tools (the command line's `--tools FILE`) and validates them.
    ///
    /// Errors: as [`Request::from_json`] for `tools`.
    pub fn set_tools(&mut self, tools: Value) -> Result<()> {
        if tools.as_array().is_none() {
            return Err(bad("tools", format!("expected array, found {}", tools.type_name())));
        }
        self.tools = Some(tools);
        self.check_tool_names()?;
        if let ToolChoice::Named(name) = &self.tool_choice {
            if !self.declares(name) {
                return Err(bad("tool_choice.function.name", format!("tool {name:?} is not declared in `tools`")));
            }
        }
        Ok(())
    }

    fn declares(&self, name: &str) -> bool {
        let top = self.tools.iter();
        let dynamic = self.messages.iter().filter_map(|m| m.tools.as_ref());
        top.chain(dynamic)
            .filter_map(Value::as_array)
            .flatten()
            .any(|t| tool_entry_name(t, "").ok() == Some(name))
    }

    /// Every declared tool (top level, then dynamic ones) is well-formed and named once.
    fn check_tool_names(&self) -> Result<()> {
        let mut seen: Vec<String> = Vec::new();
        let mut lists: Vec<(String, &Value)> = Vec::new();
        if let Some(t) = &self.tools {
            lists.push(("tools".to_string(), t));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if let Some(t) = &m.tools {
                lists.push((format!("messages[{i}].tools"), t));
            }
        }
        for (field, list) in lists {
            for (j, tool) in list.as_array().unwrap_or_default().iter().enumerate() {
                let at = format!("{field}[{j}]");
                let name = tool_entry_name(tool, &at)?;
                if seen.iter().any(|s| s == name) {
                    let key = if tool.get("function").is_some() { "function.name" } else { "name" };
                    return Err(bad(&format!("{at}.{key}"), format!("tool {name:?} is declared more than once")));
                }
                seen.push(name.to_string());
            }
        }
        Ok(())
    }
}

/// The name of a tool declaration: `{"type": "function", "function": {"name": …}}` or a bare
/// `{"name": …}`; the name must match `[A-Za-z_][A-Za-z0-9_-]*` and be ≤ 256 characters.
fn tool_entry_name<'a>(tool: &'a Value, at: &str) -> Result<&'a str> {
    let Some(o) = tool.as_object() else {
        return Err(bad(at, format!("expected a tool object, found {}", tool.type_name())));
    };
    let (name, field) = match (o.get("type"), o.get("function")) {
        (Some(kind), function) => {
            if kind.as_str() != Some("function") {
                return Err(bad(&format!("{at}.type"), format!("expected \"function\", found {kind}")));
            }
            match function.and_then(Value::as_object) {
                Some(f) => (f.get("name"), "function.name"),
                None => return Err(bad(&format!("{at}.function"), "missing (expected an object)")),
            }
        }
        (None, Some(_)) => return Err(bad(&format!("{at}.type"), "missing (expected \"function\")")),
        (None, None) => (o.get("name"), "name"),
    };
    let field = format!("{at}.{field}");
    let name = name
        .and_then(Value::as_str)
        .ok_or_else(|| bad(&field, "missing (expected a string)"))?;
    check_tool_name(name, &field)?;
    Ok(name)
}

fn check_tool_name(name: &str, field: &str) -> Result<()> {
    let mut chars = name.chars();
    let start = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !start || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(bad(field, format!("tool name {name:?} must match [A-Za-z_][A-Za-z0-9_-]*")));
    }
    if name.len() > MAX_TOOL_NAME_LEN {
        return Err(bad(
            field,
            format!("tool name is {} characters; at most {MAX_TOOL_NAME_LEN}", name.len()),
        ));
    }
    Ok(())
}

fn tool_choice(v: Option<&Value>) -> Result<ToolChoice> {
    match v {
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(bad(
                "tool_choice",
                format!("unknown value {other:?} (expected auto, none, required or a function object)"),
            )),
        },
        Some(Value::Object(o)) => {
            if o.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad("tool_choice.type", "expected \"function\""));
            }
            let name = o
                .get("function")
                .and_then(Value::as_object)
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("tool_choice.function.name", "missing (expected a non-empty string)"))?;
            Ok(ToolChoice::Named(name.to_string()))
        }
        Some(v) => Err(bad("tool_choice", format!("expected string or object, found {}", v.type_name()))),
    }
}

fn response_format(v: &Value) -> Result<ResponseFormat> {
    let kind = v.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let js = v.get("json_schema").filter(|j| !j.is_null()).unwrap_or(&Value::Null);
            let schema = js.get("schema").or_else(|| js.get("json_schema")).unwrap_or(js);
            Ok(ResponseFormat::JsonSchema(schema.clone()))
        }
        _ => Err(bad("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"")),
    }
}

/// The thinking switch and effort (TOKENIZER.md §10 "Thinking switch and effort").
fn thinking(top: Option<&Object>, choice: &ToolChoice) -> Result<Thinking> {
    let kwargs = match present(top, "chat_template_kwargs") {
        None => None,
        Some(Value::Object(o)) => Some(o),
        Some(v) => {
            return Err(bad(
                "chat_template_kwargs",
                format!("expected object, found {}", v.type_name()),
            ))
        }
    };
    let mut on = true;
    for key in ["thinking", "enable_thinking"] {
        if let Some(v) = present(kwargs, key) {
            on = v
                .as_bool()
                .ok_or_else(|| bad(&format!("chat_template_kwargs.{key}"), format!("expected bool, found {}", v.type_name())))?;
            break;
        }
    }
    let effort = [
        (present(kwargs, "thinking_effort"), "chat_template_kwargs.thinking_effort"),
        (present(top, "reasoning_effort"), "reasoning_effort"),
        (present(kwargs, "reasoning_effort"), "chat_template_kwargs.reasoning_effort"),
    ]
    .into_iter()
    .find_map(|(v, field)| v.map(|v| (v, field)));
    let effort = match effort {
        None => Effort::Max,
        Some((v, field)) => {
            let s = v
                .as_str()
                .ok_or_else(|| bad(field, format!("expected string, found {}", v.type_name())))?;
            match Effort::parse(s) {
                Some(e) => e,
                None if !on || matches!(choice, ToolChoice::Named(_)) => Effort::Max,
                None => return Err(bad(field, format!("unsupported thinking effort {s:?} (expected low, high or max)"))),
            }
        }
    };
    if !on || matches!(choice, ToolChoice::Named(_)) {
        return Ok(Thinking::Off);
    }
    Ok(Thinking::On(effort))
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
                format!("unknown role {other:?} (expected system, developer, user, assistant or tool)"),
            )),
        },
        Some(v) => Err(bad(&field, format!("expected string, found {}", v.type_name()))),
        None => Err(bad(&field, "missing")),
    }
}

fn message(v: &Value, i: usize, last: bool) -> Result<Message> {
    let at = format!("messages[{i}]");
    let Some(m) = v.as_object() else {
        return Err(bad(&at, format!("expected a message object, found {}", v.type_name())));
    };
    let role = role(m, &at)?;
    let partial = match present(Some(m), "partial") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(bad(&format!("{at}.partial"), format!("expected bool, found {}", v.type_name()))),
    };
    if present(Some(m), "partial").is_some() && role != Role::Assistant {
        return Err(bad(&format!("{at}.partial"), "only an assistant message may be partial"));
    }
    if partial && !last {
        return Err(bad(&format!("{at}.partial"), "only the final message may be partial"));
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
            return Err(bad(&format!("{at}.tools"), format!("expected array, found {}", t.type_name())))
        }
        (_, Some(_)) => return Err(bad(&format!("{at}.tools"), "only a system or developer message may declare tools")),
    };
    let content_given = match m.get("content") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Null) | None => false,
        Some(_) => true,
    };
    if role == Role::System && tools.is_some() && content_given {
        return Err(bad(&format!("{at}.tools"), "a system message carries either `content` or `tools`, not both"));
    }
    if matches!(role, Role::System | Role::Developer) && tools.is_none() && content.is_none() {
        return Err(bad(&format!("{at}.content"), "missing (a system message needs `content` or `tools`)"));
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
            return Err(bad(&format!("{at}.partial"), "a partial assistant message cannot carry tool_calls"));
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
                    return Err(bad(&format!("{field}[{j}].type"), "image parts are not supported (k3 is text-only)"));
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
        Some(v) => return Err(bad(&format!("{at}.tool_calls"), format!("expected array, found {}", v.type_name()))),
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
            .ok_or_else(|| bad(&format!("{prefix}.name"), "missing (a tool call needs its function name)"))?;
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
            Ok(v) => Err(bad(field, format!("expected a JSON object, found {}", v.type_name()))),
            Err(_) => Ok(Arguments::Raw(s.clone())),
        },
        Some(v) => Err(bad(field, format!("expected an object or a JSON object string, found {}", v.type_name()))),
    }
}
