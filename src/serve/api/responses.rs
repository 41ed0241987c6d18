//! OpenAI Responses request bodies → jobs (`POST /v1/responses`; ENGINE.md §11): a codec
//! beside chat completions and Messages. The body maps onto the one validated conversation
//! type ([`chat::Request`]), rendered by the one chat template (TOKENIZER.md §10):
//! `instructions` → a system message; `input` (a string, or items) → messages: a `message`
//! item of role user, system or developer → that message, of role assistant (with the
//! `reasoning`, `function_call` and `custom_tool_call` items around it) → one assistant turn
//! (its reasoning, text and tool calls); a `function_call_output` / `custom_tool_call_output`
//! → a tool result, which must answer a call of the assistant turn before it; a final
//! assistant message → a `partial` prefill. `tools` of type `function` → declarations; a
//! `custom` tool → a function taking one string `input` (its calls come back as
//! `custom_tool_call` items); built-in tools (`web_search`, …) are accepted, not offered, and
//! named in the server log. `reasoning.effort`: `none` → thinking off, `minimal`/`low` →
//! low, `medium`/`high` → high, `xhigh` → max; absent is the template's default (on, max).
//! Every refusal names the field as a path (`input[2].call_id`), in OpenAI's error shape.

use super::convert::{
    declaration, function, get, known_fields, named_choice, open_calls, push_call, render, req_str,
    tool_name, tool_result, type_err, Rendered,
};
use super::fields::check_model;
use super::params::{check_length, gen_params};
use super::{ApiError, GenParams, Limits};
use crate::chat::{self, Effort, Message, ResponseFormat, Role, Thinking, ToolChoice};
use crate::json::{Object, Value};
use crate::tokenizer::Tokenizer;

/// Fields of `POST /v1/responses` read here (`previous_response_id` by the route, which puts
/// the stored conversation before `input`).
const ACCEPTED: &[&str] = &[
    "previous_response_id",
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "reasoning",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "include",
    "parallel_tool_calls",
    "text",
];
/// Fields accepted and ignored here (Codex CLI and the `openai` client send them): `store`
/// (read by the route, which keeps the response), request metadata, prompt-cache keys (every held prefix is reused anyway), the service tier,
/// truncation, user ids. (`text` is read for its `format`; its `verbosity` is ignored.)
pub const IGNORED: &[&str] = &[
    "store",
    "metadata",
    "prompt_cache_key",
    "service_tier",
    "truncation",
    "user",
    "safety_identifier",
    "stream_options",
];
/// The one `include` value k3 knows (others are refused by name).
const INCLUDES: &[&str] = &[
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
];
/// Built-in tool types: accepted, never offered to the model (k3 runs no hosted tool).
const BUILT_IN: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "local_shell",
    "mcp",
];

/// A decoded `POST /v1/responses` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesJob {
    /// The prompt ids (the template's, ending with the generation prompt or the prefill).
    pub ids: Vec<u32>,
    /// Ids of the generation prompt's channel-opening stub, left out of `input_tokens`.
    pub stub: usize,
    /// The reply starts in the think channel (thinking on, no prefill).
    pub thinking: bool,
    /// Sampling, `max_output_tokens`, `stream`.
    pub params: GenParams,
    /// Names of the `custom` tools (their calls are `custom_tool_call` items).
    pub custom: Vec<String>,
    /// `tools[i].type` of each built-in tool accepted and not offered (for the log).
    pub built_in: Vec<String>,
    /// The request's `reasoning.effort` as given (echoed in the response), if any.
    pub effort: Option<String>,
    /// `include` names `reasoning.encrypted_content`: reasoning items carry it.
    pub encrypted: bool,
}

/// The `encrypted_content` of a reasoning item: `k3e1.` + the thinking signature's HMAC
/// ([`super::messages::thinking_signature`]) + `.` + the reasoning text in hex. Not a secret
/// (the text is only encoded; anyone with the checkpoint can compute the HMAC): it lets a
/// client that keeps nothing but this string (as Codex CLI does with `store: false`) give the
/// reasoning back, and the server check it is the model's own, unchanged.
pub fn encrypted_content(key: &[u8], text: &str) -> String {
    let sig = super::messages::thinking_signature(key, text);
    let mut s = format!("k3e1.{}.", sig.trim_start_matches("k3s1."));
    for b in text.as_bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The reasoning text of an `encrypted_content` this model wrote, or None.
fn decrypted(key: &[u8], s: &str) -> Option<String> {
    let rest = s.strip_prefix("k3e1.")?;
    let (_, hex) = rest.split_once('.')?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let want = encrypted_content(key, &text);
    crate::serve::handler::constant_time_eq(s.as_bytes(), want.as_bytes()).then_some(text)
}

/// Decodes a Responses request: fields (unknown ones refused), the model, the conversation
/// through the template, `max_output_tokens`, sampling, `stream`.
pub fn responses_job(
    o: &Object,
    tok: &Tokenizer,
    lim: &Limits,
    os_seed: &mut dyn FnMut() -> u64,
) -> Result<ResponsesJob, ApiError> {
    known_fields(o, ACCEPTED, IGNORED, "docs/cli.md's Responses section")?;
    check_model(o, lim)?;
    let encrypted = include(o)?;
    if let Some(v) = get(o, "parallel_tool_calls").filter(|v| v.as_bool().is_none()) {
        return Err(type_err("parallel_tool_calls", "a boolean", v));
    }
    let (tools, names, custom, built_in) = tools(get(o, "tools"))?;
    let tool_choice = tool_choice(get(o, "tool_choice"), &names)?;
    let (thinking, effort) = reasoning(get(o, "reasoning"))?;
    let mut messages = Vec::new();
    match get(o, "instructions") {
        None => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            messages.push(Message::plain(Role::System, Some(vec![s.clone()])))
        }
        Some(v) => return Err(type_err("instructions", "a string", v)),
    }
    messages.extend(input(get(o, "input"), &lim.sign_key)?);
    let Rendered {
        ids,
        stub,
        thinking,
        constraints,
    } = render(
        messages,
        tools,
        tool_choice,
        text_format(get(o, "text"))?,
        thinking,
        tok,
        lim,
        &super::constraint::RESPONSES,
    )?;
    let mut params = gen_params(o, lim, os_seed, "max_output_tokens")?;
    params.constraints = constraints;
    check_length(ids.len(), stub, &params, lim, "input")?;
    Ok(ResponsesJob {
        ids,
        stub,
        thinking,
        params,
        custom,
        built_in,
        effort,
        encrypted,
    })
}

/// `text`: `format` — `{"type": "text"}`, `{"type": "json_object"}` or `{"type":
/// "json_schema", "schema": …, "name"?, "strict"?, "description"?}` (the template's
/// response-format message and the constraint of the response channel, as chat completions'
/// `response_format`); `verbosity` is accepted and ignored.
fn text_format(v: Option<&Value>) -> Result<Option<ResponseFormat>, ApiError> {
    let o = match v {
        None => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(type_err("text", "an object", v)),
    };
    known_keys(o, &["format", "verbosity"], "text")?;
    let f = match get(o, "format") {
        None => return Ok(None),
        Some(Value::Object(f)) => f,
        Some(v) => return Err(type_err("text.format", "an object", v)),
    };
    match req_str(f, "type", "text.format")? {
        "text" => {
            known_keys(f, &[], "text.format")?;
            Ok(Some(ResponseFormat::Text))
        }
        "json_object" => {
            known_keys(f, &[], "text.format")?;
            Ok(Some(ResponseFormat::JsonObject))
        }
        "json_schema" => {
            known_keys(
                f,
                &["schema", "name", "strict", "description"],
                "text.format",
            )?;
            if let Some(v) = get(f, "strict").filter(|v| v.as_bool().is_none()) {
                return Err(type_err("text.format.strict", "a boolean", v));
            }
            match get(f, "schema") {
                Some(s @ Value::Object(_)) => Ok(Some(ResponseFormat::JsonSchema(s.clone()))),
                Some(v) => Err(type_err("text.format.schema", "an object", v)),
                None => Err(ApiError::invalid(
                    "text.format.schema",
                    "missing (required)",
                )),
            }
        }
        other => Err(ApiError::invalid(
            "text.format.type",
            format!("unknown value {other:?} (expected text, json_object or json_schema)"),
        )),
    }
}

/// `include`: known values only; whether it names `reasoning.encrypted_content`.
fn include(o: &Object) -> Result<bool, ApiError> {
    let list = match get(o, "include") {
        None => return Ok(false),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_err("include", "an array of strings", v)),
    };
    for (i, v) in list.iter().enumerate() {
        let at = format!("include[{i}]");
        match v {
            Value::String(s) if INCLUDES.contains(&s.as_str()) => {}
            Value::String(s) => {
                return Err(ApiError::invalid(
                    &at,
                    format!("unknown value {s:?} (k3 knows {})", INCLUDES.join(", ")),
                ))
            }
            v => return Err(type_err(&at, "a string", v)),
        }
    }
    Ok(list
        .iter()
        .any(|v| v.as_str() == Some("reasoning.encrypted_content")))
}

/// Every non-null member of an item is one its type knows (`id` and `status`, which clients
/// send back with items, are always accepted).
fn known_keys(o: &Object, keys: &[&str], at: &str) -> Result<(), ApiError> {
    for (k, v) in o.iter() {
        if v.is_null() || keys.contains(&k) || matches!(k, "type" | "id" | "status") {
            continue;
        }
        return Err(ApiError::invalid(
            &format!("{at}.{k}"),
            "unknown field for this item type",
        ));
    }
    Ok(())
}

/// A message's content: a string, or parts `input_text` / `output_text` (`refusal` as its
/// text); media parts are refused (k3 is text-only).
fn content(v: &Value, at: &str) -> Result<Vec<String>, ApiError> {
    let parts = match v {
        Value::String(s) => return Ok(vec![s.clone()]),
        Value::Array(a) => a,
        v => return Err(type_err(at, "a string or an array of content parts", v)),
    };
    let mut out = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let o = p
            .as_object()
            .ok_or_else(|| type_err(&at, "a content part object", p))?;
        match req_str(o, "type", &at)? {
            "input_text" | "output_text" | "text" => {
                known_keys(o, &["text", "annotations", "logprobs"], &at)?;
                out.push(req_str(o, "text", &at)?.to_string());
            }
            "refusal" => {
                known_keys(o, &["refusal"], &at)?;
                out.push(req_str(o, "refusal", &at)?.to_string());
            }
            "input_image" | "input_file" | "input_audio" => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    "image, file and audio parts are not supported (k3 is text-only)",
                ))
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    format!(
                        "unknown content part type {other:?} (expected input_text or output_text)"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// The assistant turn being gathered from consecutive assistant-side items.
#[derive(Default)]
struct Turn {
    msg: Option<Message>,
}

impl Turn {
    fn get(&mut self) -> &mut Message {
        self.msg.get_or_insert_with(|| {
            let mut m = Message::plain(Role::Assistant, None);
            m.content = Some(Vec::new());
            m
        })
    }
}

/// `input` → chat messages.
fn input(v: Option<&Value>, key: &[u8]) -> Result<Vec<Message>, ApiError> {
    let items = match v {
        Some(Value::String(s)) => {
            return Ok(vec![Message::plain(Role::User, Some(vec![s.clone()]))])
        }
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid("input", "empty; give at least one item"))
        }
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_err("input", "a string or an array of items", v)),
        None => return Err(ApiError::invalid("input", "missing (required)")),
    };
    let mut out: Vec<Message> = Vec::new();
    let mut turn = Turn::default();
    // the call ids of the last assistant turn, and whether each was answered
    let mut open: Vec<(String, bool)> = Vec::new();
    let mut last_assistant_text = false;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let o = item
            .as_object()
            .ok_or_else(|| type_err(&at, "an item object", item))?;
        let kind = match get(o, "type") {
            None if o.get("role").is_some() => "message",
            None => return Err(ApiError::invalid(&format!("{at}.type"), "missing")),
            Some(Value::String(s)) => s.as_str(),
            Some(v) => return Err(type_err(&format!("{at}.type"), "a string", v)),
        };
        let assistant_side = match kind {
            "message" => get(o, "role").and_then(Value::as_str) == Some("assistant"),
            "reasoning" | "function_call" | "custom_tool_call" => true,
            _ => false,
        };
        if !assistant_side {
            if let Some(m) = turn.msg.take() {
                open = open_calls(&m);
                out.push(m);
            }
        }
        last_assistant_text = false;
        match kind {
            "message" => {
                known_keys(o, &["role", "content"], &at)?;
                let role = req_str(o, "role", &at)?;
                let c = get(o, "content")
                    .ok_or_else(|| ApiError::invalid(&format!("{at}.content"), "missing"))?;
                let text = content(c, &format!("{at}.content"))?;
                let role = match role {
                    "user" => Role::User,
                    "system" => Role::System,
                    "developer" => Role::Developer,
                    "assistant" => {
                        let m = turn.get();
                        m.content.get_or_insert_with(Vec::new).extend(text);
                        last_assistant_text = true;
                        continue;
                    }
                    other => {
                        return Err(ApiError::invalid(
                            &format!("{at}.role"),
                            format!("unknown role {other:?} (expected user, system, developer or assistant)"),
                        ))
                    }
                };
                out.push(Message::plain(role, Some(text)));
            }
            "reasoning" => {
                known_keys(o, &["summary", "content", "encrypted_content"], &at)?;
                let take = |key: &str, want: &str| -> Result<String, ApiError> {
                    let mut text = String::new();
                    match get(o, key) {
                        None => Ok(text),
                        Some(Value::Array(a)) => {
                            for (j, p) in a.iter().enumerate() {
                                let at = format!("{at}.{key}[{j}]");
                                let po = p
                                    .as_object()
                                    .ok_or_else(|| type_err(&at, "an object", p))?;
                                let t = req_str(po, "type", &at)?;
                                if t != want {
                                    return Err(ApiError::invalid(
                                        &format!("{at}.type"),
                                        format!("expected {want:?}"),
                                    ));
                                }
                                text.push_str(req_str(po, "text", &at)?);
                            }
                            Ok(text)
                        }
                        Some(v) => Err(type_err(&format!("{at}.{key}"), "an array", v)),
                    }
                };
                let mut text = take("content", "reasoning_text")?;
                match get(o, "encrypted_content") {
                    None => {}
                    Some(Value::String(e)) => {
                        let field = format!("{at}.encrypted_content");
                        let Some(d) = decrypted(key, e) else {
                            return Err(ApiError::invalid(
                                &field,
                                "not an encrypted_content this model wrote (changed, or another model's); give the item back as it was sent, or leave it out",
                            ));
                        };
                        if !text.is_empty() && text != d {
                            return Err(ApiError::invalid(
                                &field,
                                "does not hold the reasoning text of this item's content",
                            ));
                        }
                        text = d;
                    }
                    Some(v) => {
                        return Err(type_err(&format!("{at}.encrypted_content"), "a string", v))
                    }
                }
                if text.is_empty() {
                    text = take("summary", "summary_text")?;
                }
                let m = turn.get();
                let r = m.reasoning.get_or_insert_with(String::new);
                r.push_str(&text);
            }
            "function_call" | "custom_tool_call" => {
                let custom_call = kind == "custom_tool_call";
                let arg_key = if custom_call { "input" } else { "arguments" };
                known_keys(o, &["call_id", "name", arg_key], &at)?;
                let id = req_str(o, "call_id", &at)?;
                let name = tool_name(o, &at)?;
                let arguments = if custom_call {
                    let input = req_str(o, "input", &at)?;
                    chat::Arguments::Object(vec![("input".to_string(), Value::from(input))])
                } else {
                    match get(o, "arguments") {
                        None | Some(Value::String(_)) => {}
                        Some(v) => return Err(type_err(&format!("{at}.arguments"), "a string", v)),
                    }
                    chat::message::arguments(get(o, "arguments"), &format!("{at}.arguments"))
                        .map_err(|e| ApiError::from_chat(&e))?
                };
                push_call(turn.get(), id, name, arguments, &at, "call_id", "call")?;
            }
            "function_call_output" | "custom_tool_call_output" => {
                known_keys(o, &["call_id", "output"], &at)?;
                let id = req_str(o, "call_id", &at)?;
                let out_text = match get(o, "output") {
                    None => return Err(ApiError::invalid(&format!("{at}.output"), "missing")),
                    Some(v) => content(v, &format!("{at}.output"))?,
                };
                let field = format!("{at}.call_id");
                out.push(tool_result(&mut open, id, &field, "function_call", out_text)?);
            }
            "item_reference" => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    "item references are not supported (k3 keeps no items); send the item itself",
                ))
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    format!("unknown item type {other:?} (expected message, reasoning, function_call, function_call_output, custom_tool_call or custom_tool_call_output)"),
                ))
            }
        }
    }
    if let Some(mut m) = turn.msg.take() {
        if !m.tool_calls.is_empty() {
            return Err(ApiError::invalid(
                &format!("input[{}]", items.len() - 1),
                "the input ends with a call that has no function_call_output; answer it",
            ));
        }
        if !last_assistant_text {
            return Err(ApiError::invalid(
                &format!("input[{}]", items.len() - 1),
                "the input ends with reasoning alone; end with a message",
            ));
        }
        // a final assistant message is a prefill the reply continues
        m.partial = true;
        out.push(m);
    }
    Ok(out)
}

/// The parameters of a `custom` tool offered as a function: one string `input`.
fn custom_parameters() -> Value {
    let input = Object::new().with("type", "string");
    Object::new()
        .with("type", "object")
        .with("properties", Object::new().with("input", input))
        .with("required", vec![Value::from("input")])
        .into()
}

type Tools = (Vec<Value>, Vec<String>, Vec<String>, Vec<String>);

/// `tools` → declarations in the chat-completions form the template renders, their names,
/// the custom tools' names, and the built-in tools' types.
fn tools(v: Option<&Value>) -> Result<Tools, ApiError> {
    let list = match v {
        None => return Ok(Default::default()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_err("tools", "an array", v)),
    };
    let (mut out, mut custom, mut built_in) = (Vec::new(), Vec::new(), Vec::new());
    let mut names = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let o = t
            .as_object()
            .ok_or_else(|| type_err(&at, "a tool object", t))?;
        let kind = req_str(o, "type", &at)?;
        if BUILT_IN.contains(&kind) {
            built_in.push(kind.to_string());
            continue;
        }
        let is_custom = match kind {
            "function" => false,
            "custom" => true,
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    format!("unknown tool type {other:?} (expected function or custom; built-in tools are accepted and not offered)"),
                ))
            }
        };
        if is_custom {
            known_keys(o, &["name", "description", "format"], &at)?;
        } else {
            known_keys(o, &["name", "description", "parameters", "strict"], &at)?;
        }
        let mut f = declaration(o, &at, &mut names)?;
        if is_custom {
            if let Some(v) = get(o, "format").filter(|v| v.as_object().is_none()) {
                return Err(type_err(&format!("{at}.format"), "an object", v));
            }
            f.insert("parameters", custom_parameters());
            custom.extend(names.last().cloned());
        } else {
            if let Some(v) = get(o, "strict").filter(|v| v.as_bool().is_none()) {
                return Err(type_err(&format!("{at}.strict"), "a boolean", v));
            }
            match get(o, "parameters") {
                Some(s @ Value::Object(_)) => f.insert("parameters", s.clone()),
                Some(v) => {
                    return Err(type_err(
                        &format!("{at}.parameters"),
                        "an object (a JSON Schema)",
                        v,
                    ))
                }
                None => {}
            }
        }
        out.push(function(f));
    }
    Ok((out, names, custom, built_in))
}

/// `tool_choice`: `"auto" | "none" | "required"` or `{"type": "function" | "custom",
/// "name"}`.
fn tool_choice(v: Option<&Value>, declared: &[String]) -> Result<ToolChoice, ApiError> {
    let o = match v {
        None => return Ok(ToolChoice::Auto),
        Some(Value::String(s)) => {
            return match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => Err(ApiError::invalid(
                    "tool_choice",
                    format!("unknown value {other:?} (expected auto, none, required or an object)"),
                )),
            }
        }
        Some(Value::Object(o)) => o,
        Some(v) => return Err(type_err("tool_choice", "a string or an object", v)),
    };
    match req_str(o, "type", "tool_choice")? {
        "function" | "custom" => named_choice(o, declared),
        other => Err(ApiError::invalid(
            "tool_choice.type",
            format!("unsupported value {other:?} (expected function or custom)"),
        )),
    }
}

/// `reasoning`: `{"effort", "summary"?, "generate_summary"?}` (the summary fields accepted:
/// k3 returns the reasoning text whole). Effort `none` is thinking off; the template has three
/// levels, so `minimal` and `low` → low, `medium` (Codex CLI's default) and `high` → high,
/// `xhigh` → max.
fn reasoning(v: Option<&Value>) -> Result<(Thinking, Option<String>), ApiError> {
    let o = match v {
        None => return Ok((Thinking::On(Effort::Max), None)),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(type_err("reasoning", "an object", v)),
    };
    for (k, v) in o.iter() {
        if !v.is_null() && !matches!(k, "effort" | "summary" | "generate_summary") {
            return Err(ApiError::invalid(
                &format!("reasoning.{k}"),
                "unknown field",
            ));
        }
    }
    match get(o, "effort") {
        None => Ok((Thinking::On(Effort::Max), None)),
        Some(Value::String(s)) => {
            let t = match s.as_str() {
                "none" => Thinking::Off,
                "minimal" | "low" => Thinking::On(Effort::Low),
                "medium" | "high" => Thinking::On(Effort::High),
                "xhigh" => Thinking::On(Effort::Max),
                other => {
                    return Err(ApiError::invalid(
                        "reasoning.effort",
                        format!("unknown value {other:?} (expected none, minimal, low, medium, high or xhigh)"),
                    ))
                }
            };
            Ok((t, Some(s.clone())))
        }
        Some(v) => Err(type_err("reasoning.effort", "a string", v)),
    }
}
