//! An OpenAI-style chat request body → a validated [`Request`] (TOKENIZER.md §10 "Details
//! the reference fixes"). Every error is `Error::invalid` (exit 2) and names the field as a
//! path into the request (`messages[3].tool_calls[0].function.name: …`); callers prefix
//! the file.

pub use super::field::check_tool_name;
use super::field::{bad, present};
use super::message::{message, Message};

pub use super::field::MAX_TOOL_NAME_LEN;
use crate::error::{Error, Result};
use crate::json::{Kind, Object, Scanner, Value};

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
                Some(v) => {
                    return Err(bad(
                        "messages",
                        format!("expected array, found {}", v.type_name()),
                    ))
                }
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
            Some(v) => {
                return Err(bad(
                    "tools",
                    format!("expected array, found {}", v.type_name()),
                ))
            }
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
        req.response_format = present(top, "response_format")
            .map(response_format)
            .transpose()?;
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
            return Err(bad(
                "tools",
                format!("expected array, found {}", tools.type_name()),
            ));
        }
        self.tools = Some(tools);
        self.check_tool_names()?;
        if let ToolChoice::Named(name) = &self.tool_choice {
            if !self.declares(name) {
                return Err(bad(
                    "tool_choice.function.name",
                    format!("tool {name:?} is not declared in `tools`"),
                ));
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
                    let key = if tool.get("function").is_some() {
                        "function.name"
                    } else {
                        "name"
                    };
                    return Err(bad(
                        &format!("{at}.{key}"),
                        format!("tool {name:?} is declared more than once"),
                    ));
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
        return Err(bad(
            at,
            format!("expected a tool object, found {}", tool.type_name()),
        ));
    };
    let (decl, field) = match (o.get("type"), o.get("function")) {
        (Some(kind), function) => {
            if kind.as_str() != Some("function") {
                return Err(bad(
                    &format!("{at}.type"),
                    format!("expected \"function\", found {kind}"),
                ));
            }
            match function.and_then(Value::as_object) {
                Some(f) => (f, format!("{at}.function")),
                None => {
                    return Err(bad(
                        &format!("{at}.function"),
                        "missing (expected an object)",
                    ))
                }
            }
        }
        (None, Some(_)) => {
            return Err(bad(
                &format!("{at}.type"),
                "missing (expected \"function\")",
            ))
        }
        (None, None) => (o, at.to_string()),
    };
    check_declaration_types(decl, &field)?;
    let field = format!("{field}.name");
    let name = decl
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(&field, "missing (expected a string)"))?;
    check_tool_name(name, &field)?;
    Ok(name)
}

/// A declaration's `description` is a string and its `parameters` an object (JSON Schema),
/// when present and not null: the declaration is rendered as given, so a wrong type would
/// reach the model unnoticed.
///
/// Errors: naming `{field}.description` or `{field}.parameters`.
fn check_declaration_types(decl: &Object, field: &str) -> Result<()> {
    if let Some(v) = present(Some(decl), "description").filter(|v| v.as_str().is_none()) {
        return Err(bad(
            &format!("{field}.description"),
            format!("expected a string, found {}", v.type_name()),
        ));
    }
    if let Some(v) = present(Some(decl), "parameters").filter(|v| v.as_object().is_none()) {
        return Err(bad(
            &format!("{field}.parameters"),
            format!(
                "expected an object (a JSON Schema), found {}",
                v.type_name()
            ),
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
                format!(
                    "unknown value {other:?} (expected auto, none, required or a function object)"
                ),
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
                .ok_or_else(|| {
                    bad(
                        "tool_choice.function.name",
                        "missing (expected a non-empty string)",
                    )
                })?;
            Ok(ToolChoice::Named(name.to_string()))
        }
        Some(v) => Err(bad(
            "tool_choice",
            format!("expected string or object, found {}", v.type_name()),
        )),
    }
}

fn response_format(v: &Value) -> Result<ResponseFormat> {
    let kind = v.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let js = v
                .get("json_schema")
                .filter(|j| !j.is_null())
                .unwrap_or(&Value::Null);
            let schema = js
                .get("schema")
                .or_else(|| js.get("json_schema"))
                .unwrap_or(js);
            Ok(ResponseFormat::JsonSchema(schema.clone()))
        }
        _ => Err(bad(
            "response_format.type",
            "expected \"text\", \"json_object\" or \"json_schema\"",
        )),
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
            on = v.as_bool().ok_or_else(|| {
                bad(
                    &format!("chat_template_kwargs.{key}"),
                    format!("expected bool, found {}", v.type_name()),
                )
            })?;
            break;
        }
    }
    let effort = [
        (
            present(kwargs, "thinking_effort"),
            "chat_template_kwargs.thinking_effort",
        ),
        (present(top, "reasoning_effort"), "reasoning_effort"),
        (
            present(kwargs, "reasoning_effort"),
            "chat_template_kwargs.reasoning_effort",
        ),
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
                None => {
                    return Err(bad(
                        field,
                        format!("unsupported thinking effort {s:?} (expected low, high or max)"),
                    ))
                }
            }
        }
    };
    if !on || matches!(choice, ToolChoice::Named(_)) {
        return Ok(Thinking::Off);
    }
    Ok(Thinking::On(effort))
}

/// Where a request text stops being valid JSON, as a field path (`messages[1].content`; a
/// bare array's elements are `messages[i]`), so that a parse error (a lone `\ud800`, a
/// trailing comma) can name the message and field. `None` when the text parses, or when the
/// fault is at the top level.
pub fn failing_path(text: &[u8]) -> Option<String> {
    let mut s = Scanner::new(text).ok()?;
    let mut path = Vec::new();
    if walk(&mut s, &mut path).is_ok() && s.finish().is_ok() {
        return None;
    }
    let mut out = String::new();
    for (i, step) in path.iter().enumerate() {
        match step {
            Step::Key(k) if i == 0 => out.push_str(k),
            Step::Key(k) => out.push_str(&format!(".{k}")),
            Step::Index(j) if i == 0 => out.push_str(&format!("messages[{j}]")),
            Step::Index(j) => out.push_str(&format!("[{j}]")),
        }
    }
    Some(out).filter(|p| !p.is_empty())
}

enum Step {
    Key(String),
    Index(usize),
}

/// Reads one value, keeping `path` at the innermost value being read when it fails.
fn walk(s: &mut Scanner<'_>, path: &mut Vec<Step>) -> std::result::Result<(), ()> {
    match s.peek().map_err(drop)? {
        Kind::Object => {
            s.begin_object().map_err(drop)?;
            while let Some(k) = s.next_key().map_err(drop)? {
                path.push(Step::Key(k.into_owned()));
                walk(s, path)?;
                path.pop();
            }
        }
        Kind::Array => {
            s.begin_array().map_err(drop)?;
            let mut j = 0;
            while s.next_element().map_err(drop)? {
                path.push(Step::Index(j));
                walk(s, path)?;
                path.pop();
                j += 1;
            }
        }
        Kind::String => drop(s.string().map_err(drop)?),
        Kind::Number => drop(s.number().map_err(drop)?),
        Kind::Bool => drop(s.bool().map_err(drop)?),
        Kind::Null => s.null().map_err(drop)?,
    }
    Ok(())
}
