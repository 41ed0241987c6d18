//! The chat template (TOKENIZER.md §10, XTML): a validated [`Request`] → segments → ids,
//! exactly as the released model's reference encoder orders them.

use super::jsontext;
use super::message::{Arguments, Message, Role, ToolCall};
use super::messages::{Request, ResponseFormat, Thinking, ToolChoice};
use super::{CLOSE, END_OF_MSG, OPEN, SEP};
use crate::error::{Error, Result};
use crate::json::Value;
use crate::tokenizer::Tokenizer;

/// One segment: a special id, or a text encoded on its own (TOKENIZER.md §10 notation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A control token (`<|open|>`, `<|close|>`, `<|sep|>`, `<|end_of_msg|>`).
    Special(u32),
    /// Plain text; special-token names in it are ordinary text (TOKENIZER.md §3).
    Text(String),
}

/// Encodes segments: each text on its own (TOKENIZER.md §4, §5 windows per segment), ids
/// concatenated.
///
/// Errors: the tokenizer lacks the chat specials (TOKENIZER.md §3 "Chat mode").
pub fn encode(tok: &Tokenizer, segments: &[Segment]) -> Result<Vec<u32>> {
    tok.check_chat_specials()?;
    let mut ids = Vec::new();
    for s in segments {
        match s {
            Segment::Special(id) => ids.push(*id),
            Segment::Text(t) => ids.extend(tok.encode(t, false)),
        }
    }
    Ok(ids)
}

/// Segment builder: empty texts are no segment.
#[derive(Default)]
struct Out(Vec<Segment>);

impl Out {
    fn text(&mut self, t: &str) {
        if !t.is_empty() {
            self.0.push(Segment::Text(t.to_string()));
        }
    }

    fn open(&mut self, tag: &str, attrs: &[(&str, &str)]) {
        self.0.push(Segment::Special(OPEN));
        self.text(tag);
        for (k, v) in attrs {
            self.text(&format!(" {k}"));
            self.text("=\"");
            self.text(&v.replace('&', "&amp;").replace('"', "&quot;"));
            self.text("\"");
        }
        self.0.push(Segment::Special(SEP));
    }

    fn close(&mut self, tag: &str) {
        self.0.push(Segment::Special(CLOSE));
        self.text(tag);
        self.0.push(Segment::Special(SEP));
    }

    fn end(&mut self) {
        self.0.push(Segment::Special(END_OF_MSG));
    }

    fn sysmsg(&mut self, kind: &str, body: &str) {
        self.open("message", &[("role", "system"), ("type", kind)]);
        self.text(body.trim());
        self.close("message");
        self.end();
    }

    fn content(&mut self, m: &Message) {
        for part in m.content.iter().flatten() {
            self.text(part);
        }
    }
}

const TOOLS_HEAD: &str =
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
const DYNAMIC_TOOLS_HEAD: &str = "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n```json\n";
const RESPONSE_FORMAT_HEAD: &str = "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";

fn tool_declare(out: &mut Out, tools: &Value, head: &str, field: &str) -> Result<()> {
    let json =
        jsontext::compact(tools, true).map_err(|e| Error::invalid(format!("{field}: {e}")))?;
    // Not trimmed: the reference writes the declaration body as is.
    out.open("message", &[("role", "system"), ("type", "tool-declare")]);
    out.text(&format!("{head}{json}\n```"));
    out.close("message");
    out.end();
    Ok(())
}

/// Renders `req` into segments (TOKENIZER.md §10 steps 1–6). With `generation_prompt` the
/// assistant turn is opened (think or response channel); a final `partial` assistant
/// message replaces it either way.
///
/// Errors (exit 2, naming the field): a tool result whose tool cannot be named; a number
/// out of f64 range in a rendered JSON value.
pub fn render(req: &Request, generation_prompt: bool) -> Result<Vec<Segment>> {
    let mut out = Out::default();
    let thinking = req.thinking != Thinking::Off;
    if let Some(tools) = req
        .tools
        .as_ref()
        .filter(|t| !t.as_array().is_some_and(<[Value]>::is_empty))
    {
        tool_declare(&mut out, tools, TOOLS_HEAD, "tools")?;
    }
    if let Thinking::On(effort) = req.thinking {
        out.sysmsg("thinking-effort", &format!(
            "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort={}`.",
            effort.name()
        ));
    }
    let (history, tail) = match req.messages.split_last() {
        Some((last, rest)) if last.partial => (rest, Some(last)),
        _ => (req.messages.as_slice(), None),
    };
    let mut previous: &[ToolCall] = &[];
    let mut tool_index = 0usize;
    for (i, m, answered) in ordered(history) {
        match m.role {
            Role::System | Role::Developer if m.tools.is_some() => {
                let tools = m.tools.as_ref().unwrap_or(&Value::Null);
                tool_declare(
                    &mut out,
                    tools,
                    DYNAMIC_TOOLS_HEAD,
                    &format!("messages[{i}].tools"),
                )?;
                if m.role == Role::Developer && m.content.is_some() {
                    role_message(&mut out, m, "system");
                }
            }
            Role::System | Role::Developer => role_message(&mut out, m, "system"),
            Role::User => role_message(&mut out, m, "user"),
            Role::Assistant => {
                previous = &m.tool_calls;
                tool_index = 0;
                assistant(&mut out, m, thinking, i)?;
            }
            Role::Tool => {
                tool_index += 1;
                let fallback = previous.get(tool_index - 1).map(|c| c.name.as_str());
                let call_name = answered.map(|c| c.name.as_str());
                let name = call_name.or(m.tool.as_deref()).or(fallback).ok_or_else(|| {
                    Error::invalid(format!(
                        "messages[{i}].tool: a tool result needs `tool`/`name` or a preceding assistant tool call"
                    ))
                })?;
                // the reference counts the results; a call that keeps the model's own number
                // (`k3 chat`, ToolCall::index) gives its result that number
                let index = answered
                    .and_then(|c| c.index)
                    .unwrap_or(tool_index)
                    .to_string();
                out.open(
                    "message",
                    &[("role", "tool"), ("tool", name), ("index", &index)],
                );
                out.content(m);
                out.close("message");
                out.end();
            }
        }
    }
    tool_choice_and_format(&mut out, req)?;
    if let Some(m) = tail {
        assistant_open(&mut out, m, thinking);
        out.open("response", &[]);
        out.content(m);
    } else if generation_prompt {
        out.open("message", &[("role", "assistant")]);
        out.0.extend(generation_stub(thinking));
    }
    Ok(out.0)
}

/// The channel-opening stub that ends the generation prompt: open(`think`) with thinking on,
/// else open(`response`). The reference API does not count it in `prompt_tokens`
/// (TOKENIZER.md §10 "Usage"): subtract the length of its encoding.
pub fn generation_stub(thinking: bool) -> Vec<Segment> {
    let mut out = Out::default();
    out.open(if thinking { "think" } else { "response" }, &[]);
    out.0
}

/// How the template closes the think channel and opens the response (TOKENIZER.md §10,
/// §13): close(`think`) + open(`response`). A thinking budget (ENGINE.md §8) forces these ids
/// once the channel is full, so the reply continues as the template writes it.
pub fn think_closing() -> Vec<Segment> {
    let mut out = Out::default();
    out.close("think");
    out.open("response", &[]);
    out.0
}

fn role_message(out: &mut Out, m: &Message, role: &str) {
    match &m.name {
        Some(name) => out.open("message", &[("role", role), ("name", name)]),
        None => out.open("message", &[("role", role)]),
    }
    out.content(m);
    out.close("message");
    out.end();
}

/// open(message) + the think channel (thinking on: rendered and closed).
fn assistant_open(out: &mut Out, m: &Message, thinking: bool) {
    match &m.name {
        Some(name) => out.open("message", &[("role", "assistant"), ("name", name)]),
        None => out.open("message", &[("role", "assistant")]),
    }
    if thinking {
        out.open("think", &[]);
        out.text(m.reasoning.as_deref().unwrap_or(""));
        out.close("think");
    }
}

fn assistant(out: &mut Out, m: &Message, thinking: bool, i: usize) -> Result<()> {
    assistant_open(out, m, thinking);
    out.open("response", &[]);
    out.content(m);
    out.close("response");
    if !m.tool_calls.is_empty() {
        out.open("tools", &[]);
        for (j, call) in m.tool_calls.iter().enumerate() {
            let index = call.index.unwrap_or(j + 1).to_string();
            out.open("call", &[("tool", &call.name), ("index", &index)]);
            match &call.arguments {
                Arguments::Raw(raw) => {
                    out.open("json", &[("type", "object")]);
                    out.text(raw);
                    out.close("json");
                }
                Arguments::Object(args) => {
                    for (key, value) in args {
                        let text = match value {
                            Value::String(s) => s.clone(),
                            v => jsontext::python_spaced(v).map_err(|e| {
                                Error::invalid(format!(
                                    "messages[{i}].tool_calls[{j}].function.arguments.{key}: {e}"
                                ))
                            })?,
                        };
                        out.open("argument", &[("key", key), ("type", xtml_type(value))]);
                        out.text(&text);
                        out.close("argument");
                    }
                }
            }
            out.close("call");
        }
        out.close("tools");
    }
    out.close("message");
    out.end();
    Ok(())
}

fn xtml_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
    }
}

fn tool_choice_and_format(out: &mut Out, req: &Request) -> Result<()> {
    match &req.tool_choice {
        ToolChoice::Auto => {}
        ToolChoice::Required => out.sysmsg(
            "tool-choice",
            "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.",
        ),
        ToolChoice::None => out.sysmsg(
            "tool-choice",
            "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.",
        ),
        ToolChoice::Named(name) => out.sysmsg(
            "tool-choice",
            &format!("The system is invoked with `tool_choice=specified`.\nYou MUST call the tool `{name}` in the next message."),
        ),
    }
    match &req.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => out.sysmsg(
            "response-format",
            &format!(
                "The system is invoked with `response_format=json_object`.\n{RESPONSE_FORMAT_HEAD}"
            ),
        ),
        Some(ResponseFormat::JsonSchema(schema)) => {
            let schema = jsontext::compact(schema, true)
                .map_err(|e| Error::invalid(format!("response_format.json_schema: {e}")))?;
            out.sysmsg(
                "response-format",
                &format!("The system is invoked with `response_format=json_schema`.\n{RESPONSE_FORMAT_HEAD}\nThe JSON data must match the following schema:\n```json\n{schema}\n```"),
            );
        }
    }
    Ok(())
}

/// The messages in rendering order with their original index (TOKENIZER.md §10 "Tool
/// results"): a run of tool results whose every `tool_call_id` names a call of the latest
/// assistant message is put in the calls' order, each with the call it answers (its name
/// and number); otherwise the run keeps arrival order.
fn ordered(messages: &[Message]) -> Vec<(usize, &Message, Option<&ToolCall>)> {
    let mut out = Vec::with_capacity(messages.len());
    let mut calls: &[ToolCall] = &[];
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m.role != Role::Tool {
            if m.role == Role::Assistant {
                calls = &m.tool_calls;
            }
            out.push((i, m, None));
            i += 1;
            continue;
        }
        let start = i;
        while i < messages.len() && messages[i].role == Role::Tool {
            i += 1;
        }
        // The first call with an id wins, as in the reference's index.
        let find = |id: &str| calls.iter().position(|c| c.id.as_deref() == Some(id));
        let run: Option<Vec<(usize, usize)>> = (start..i)
            .map(|k| {
                messages[k]
                    .tool_call_id
                    .as_deref()
                    .and_then(find)
                    .map(|p| (p, k))
            })
            .collect();
        match run {
            Some(mut run) => {
                // Distinct pairs: unstable is the same order.
                crate::sort::sort(&mut run);
                out.extend(
                    run.into_iter()
                        .map(|(p, k)| (k, &messages[k], Some(&calls[p]))),
                );
            }
            None => out.extend((start..i).map(|k| (k, &messages[k], None))),
        }
    }
    out
}
