//! Anthropic Messages request bodies → jobs (`POST /v1/messages`, `/v1/messages/count_tokens`;
//! ENGINE.md §11): a codec beside chat completions. The body maps onto the one validated
//! conversation type ([`chat::Request`]), rendered by the one chat template (TOKENIZER.md §10):
//! `system` → a system message; a user turn's `tool_result` blocks → tool results in order,
//! then its text as a user message; an assistant turn's `thinking` blocks → its reasoning
//! (their `signature` checked: [`thinking_signature`]), `text` → content, `tool_use` → tool
//! calls; a final assistant turn → a `partial` prefill; `tools` → function declarations;
//! `tool_choice` any → required, tool → a named function; `thinking` disabled → off, enabled
//! and adaptive (and absent: the template's default) → on, `budget_tokens` a constraint
//! ([`ThinkBudget`], ENGINE.md §8). Every refusal names the field as a path
//! (`messages[2].content[0].tool_use_id`); the error body is Anthropic's ([`error_body`]).

use super::convert::{
    self, declaration, function, get, named_choice, push_call, req_str, tool_name, tool_result,
    type_err, Rendered,
};
use super::fields::{check_model, found};
use super::params::{check_length, gen_params};
use super::{ApiError, GenParams, Limits};
use crate::chat::{self, Arguments, Effort, Message, ResponseFormat, Role, Thinking, ToolChoice};
use crate::generate::budget::ThinkBudget;
use crate::json::{Object, Value};
use crate::tokenizer::Tokenizer;

/// Fields of `POST /v1/messages` read here (`/v1/messages/count_tokens` takes the same body
/// and reads what renders the prompt).
const ACCEPTED: &[&str] = &[
    "model",
    "max_tokens",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "output_format",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
];
/// Fields accepted and ignored (clients such as Claude Code send them): request metadata,
/// prompt-caching marks (k3 reuses every held prefix anyway), server-side context editing
/// (k3 keeps the whole conversation as sent), the service tier, speed, region and account
/// fields, diagnostics.
pub const IGNORED: &[&str] = &[
    "metadata",
    "cache_control",
    "context_management",
    "service_tier",
    "speed",
    "inference_geo",
    "diagnostics",
    "user_profile_id",
    "workspace_id",
];
/// Most `stop_sequences` a request may give (the held-back text is bounded by the longest).
pub const MAX_STOP_SEQUENCES: usize = 16;

/// A decoded `POST /v1/messages` request.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesJob {
    /// The prompt ids (the template's, ending with the generation prompt or the prefill).
    pub ids: Vec<u32>,
    /// Ids of the generation prompt's channel-opening stub, left out of `input_tokens`.
    pub stub: usize,
    /// The reply starts in the think channel (thinking on, no prefill).
    pub thinking: bool,
    /// `thinking.budget_tokens` as the constraint on the think channel.
    pub think_budget: Option<ThinkBudget>,
    /// Sampling, `max_tokens`, `stop_sequences` (as `stop`), `stream`.
    pub params: GenParams,
}

/// The error body in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`
/// (`server_error` is Anthropic's `api_error`; the status stays the server's).
pub fn error_body(e: &ApiError) -> String {
    // Anthropic names a type per status where the OpenAI shape does not: an unknown model
    // is OpenAI's `invalid_request_error` with code `model_not_found`, Anthropic's
    // `not_found_error`.
    let kind = match (e.status, e.kind) {
        (404, _) => "not_found_error",
        (_, "server_error") => "api_error",
        (_, k) => k,
    };
    let err = Object::new()
        .with("type", kind)
        .with("message", e.message.as_str());
    Value::from(Object::new().with("type", "error").with("error", err)).to_json()
}

/// The signature of a thinking text: HMAC-SHA-256 keyed by the model's identity
/// ([`Limits::sign_key`]), hex, prefixed `k3s1.`. It lets the server recognise its own
/// thinking when a client gives it back (so the reasoning re-rendered into the prompt is the
/// model's), across restarts; it is an integrity check, not a secret (anyone with the
/// checkpoint's config and shard headers can compute it).
pub fn thinking_signature(key: &[u8], thinking: &str) -> String {
    let mut msg = b"k3 thinking v1\n".to_vec();
    msg.extend_from_slice(thinking.as_bytes());
    let d = crate::digest::hmac_sha256(key, &msg);
    format!("k3s1.{}", crate::digest::sha256::to_hex(&d))
}

/// Decodes a Messages request: fields (unknown ones refused), the model, the conversation
/// through the template, `max_tokens` (required), sampling, `stop_sequences`, `stream`.
pub fn messages_job(
    o: &Object,
    tok: &Tokenizer,
    lim: &Limits,
    os_seed: &mut dyn FnMut() -> u64,
) -> Result<MessagesJob, ApiError> {
    check_fields(o, ACCEPTED)?;
    check_model(o, lim)?;
    if o.get("max_tokens").is_none_or(Value::is_null) {
        return Err(ApiError::invalid("max_tokens", "missing (required)"));
    }
    anthropic_ranges(o)?;
    let (r, budget) = render(o, tok, lim)?;
    let mut params = gen_params(o, lim, os_seed, "max_tokens")?;
    params.constraints = r.constraints;
    params.stop = stop_sequences(o)?;
    check_length(r.ids.len(), r.stub, &params, lim, "messages")?;
    let think_budget = match budget {
        Some(b) if r.thinking => {
            let close =
                chat::encode(tok, &chat::think_closing()).map_err(|e| ApiError::from_chat(&e))?;
            Some(ThinkBudget { budget: b, close })
        }
        _ => None,
    };
    Ok(MessagesJob {
        ids: r.ids,
        stub: r.stub,
        thinking: r.thinking,
        think_budget,
        params,
    })
}

/// `POST /v1/messages/count_tokens`: the prompt's `input_tokens` as a Messages reply would
/// count them (without the generation prompt's stub), nothing run. The body is a Messages
/// body; what only generation reads (`max_tokens`, sampling, `stream`) is checked by name
/// and does not count.
pub fn count_tokens(o: &Object, tok: &Tokenizer, lim: &Limits) -> Result<usize, ApiError> {
    check_fields(o, ACCEPTED)?;
    check_model(o, lim)?;
    let (r, _) = render(o, tok, lim)?;
    Ok(r.ids.len() - r.stub)
}

/// Unknown top-level fields refused by name.
fn check_fields(o: &Object, accepted: &[&str]) -> Result<(), ApiError> {
    convert::known_fields(o, accepted, IGNORED, "the README's Messages section")
}

/// What Anthropic's API refuses and the sampling reader shared with chat completions takes
/// (OpenAI's ranges): `temperature` above 1, a negative `top_k` (OpenAI-style clients' -1,
/// "off"), a `metadata` that is not an object.
fn anthropic_ranges(o: &Object) -> Result<(), ApiError> {
    if let Some(v @ Value::Number(n)) = get(o, "temperature") {
        if n.as_f64() > 1.0 {
            return Err(ApiError::invalid(
                "temperature",
                format!("expected a number from 0 to 1, found {}", found(v)),
            ));
        }
    }
    if let Some(v @ Value::Number(n)) = get(o, "top_k") {
        if n.lexeme().starts_with('-') {
            return Err(ApiError::invalid(
                "top_k",
                format!("expected an integer ≥ 0, found {}", found(v)),
            ));
        }
    }
    match get(o, "metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(v) => Err(type_err("metadata", "an object", v)),
    }
}

/// The conversation of a Messages body, rendered, and its thinking budget.
fn render(
    o: &Object,
    tok: &Tokenizer,
    lim: &Limits,
) -> Result<(Rendered, Option<usize>), ApiError> {
    let (tools, names) = tools(o.get("tools"))?;
    let tool_choice = tool_choice(o.get("tool_choice"), &names)?;
    let (mut thinking, budget) = thinking(o.get("thinking"))?;
    let (effort, mut response_format) = output_config(o.get("output_config"))?;
    // the structured-outputs beta's spelling of the same format (`output_format`)
    if let Some(f) = get(o, "output_format") {
        let wrapped = Object::new().with("format", f.clone());
        let (_, beta) = output_config(Some(&Value::Object(wrapped)))
            .map_err(|e| ApiError::invalid("output_format", e.message))?;
        if response_format.is_some() {
            return Err(ApiError::invalid(
                "output_format",
                "give either output_config.format or output_format, not both",
            ));
        }
        response_format = beta;
    }
    if let (Thinking::On(_), Some(e)) = (thinking, effort) {
        thinking = Thinking::On(e);
    }
    let mut messages = system(o.get("system"))?;
    messages.extend(turns(o.get("messages"), &lim.sign_key)?);
    let r = convert::render(
        messages,
        tools,
        tool_choice,
        response_format,
        thinking,
        tok,
        lim,
        &super::constraint::MESSAGES,
    )?;
    Ok((r, budget))
}

/// Every non-null member of a block is one its type knows (`cache_control` and `citations`
/// are accepted and ignored on any block): nothing given is dropped unseen.
fn known_keys(o: &Object, keys: &[&str], at: &str) -> Result<(), ApiError> {
    for (k, v) in o.iter() {
        if v.is_null() || keys.contains(&k) || k == "type" || k == "cache_control" {
            continue;
        }
        if k == "citations" && v.as_array().is_some_and(|a| a.is_empty()) {
            continue;
        }
        return Err(ApiError::invalid(
            &format!("{at}.{k}"),
            "unknown field for this block type",
        ));
    }
    Ok(())
}

/// A content block's object and `type`.
fn block<'a>(v: &'a Value, at: &str) -> Result<(&'a Object, &'a str), ApiError> {
    let o = v
        .as_object()
        .ok_or_else(|| type_err(at, "a content block object", v))?;
    let kind = req_str(o, "type", at)?;
    Ok((o, kind))
}

fn media_refusal(kind: &str, at: &str) -> Option<ApiError> {
    let media = match kind {
        "image" => "image",
        "document" | "search_result" => "document",
        _ => return None,
    };
    Some(ApiError::invalid(
        &format!("{at}.type"),
        format!("{media} blocks are not supported (k3 is text-only)"),
    ))
}

/// Text content: a string, or an array of `text` blocks (`cache_control` ignored).
fn texts(v: &Value, at: &str) -> Result<Vec<String>, ApiError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(j, b)| {
                let at = format!("{at}[{j}]");
                let (o, kind) = block(b, &at)?;
                if let Some(e) = media_refusal(kind, &at) {
                    return Err(e);
                }
                if kind != "text" {
                    return Err(ApiError::invalid(
                        &format!("{at}.type"),
                        format!("unknown block type {kind:?} here (expected \"text\")"),
                    ));
                }
                known_keys(o, &["text"], &at)?;
                Ok(req_str(o, "text", &at)?.to_string())
            })
            .collect(),
        v => Err(type_err(at, "a string or an array of text blocks", v)),
    }
}

/// `system`: a string or text blocks → one system message (none when empty).
fn system(v: Option<&Value>) -> Result<Vec<Message>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let t = texts(v, "system")?;
    if t.iter().all(String::is_empty) {
        return Ok(Vec::new());
    }
    Ok(vec![Message::plain(Role::System, Some(t))])
}

/// `messages` → chat messages: user turns (tool results, then text), assistant turns
/// (reasoning, text, tool calls); the final assistant turn, if any, a prefill.
fn turns(v: Option<&Value>, key: &[u8]) -> Result<Vec<Message>, ApiError> {
    let list = match v {
        Some(Value::Array(a)) => a,
        Some(v) if !v.is_null() => return Err(type_err("messages", "an array", v)),
        _ => return Err(ApiError::invalid("messages", "missing (required)")),
    };
    if list.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "empty; give at least one message",
        ));
    }
    let mut out = Vec::new();
    // the tool_use ids of the previous assistant turn, and whether each was answered
    let mut open_calls: Vec<(String, bool)> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let mo = m
            .as_object()
            .ok_or_else(|| type_err(&at, "a message object", m))?;
        for (k, v) in mo.iter() {
            if !v.is_null() && k != "role" && k != "content" {
                return Err(ApiError::invalid(&format!("{at}.{k}"), "unknown field"));
            }
        }
        let role = req_str(mo, "role", &at)?;
        let content = get(mo, "content")
            .ok_or_else(|| ApiError::invalid(&format!("{at}.content"), "missing"))?;
        let blocks: Vec<Value> = match content {
            Value::String(s) => vec![Object::new()
                .with("type", "text")
                .with("text", s.as_str())
                .into()],
            Value::Array(a) if a.is_empty() => {
                return Err(ApiError::invalid(
                    &format!("{at}.content"),
                    "empty; give a string or at least one block",
                ))
            }
            Value::Array(a) => a.clone(),
            v => {
                return Err(type_err(
                    &format!("{at}.content"),
                    "a string or an array of content blocks",
                    v,
                ))
            }
        };
        match role {
            "user" => {
                out.extend(user_turn(&blocks, &at, &mut open_calls)?);
                open_calls.clear();
            }
            "assistant" => {
                let last = i + 1 == list.len();
                let msg = assistant_turn(&blocks, &at, key, last)?;
                open_calls = convert::open_calls(&msg);
                out.push(msg);
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}.role"),
                    format!("unknown role {other:?} (expected user or assistant; give the system prompt as `system`)"),
                ))
            }
        }
    }
    Ok(out)
}

/// A user turn: its `tool_result` blocks become the tool results in order, then its text
/// (wherever it stood among them) one user message after them: the template renders a call's
/// results together, right after the assistant turn that made the calls.
fn user_turn(
    blocks: &[Value],
    at: &str,
    open_calls: &mut [(String, bool)],
) -> Result<Vec<Message>, ApiError> {
    let mut out = Vec::new();
    let mut text = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        let (o, kind) = block(b, &at)?;
        if let Some(e) = media_refusal(kind, &at) {
            return Err(e);
        }
        match kind {
            "text" => {
                known_keys(o, &["text"], &at)?;
                text.push(req_str(o, "text", &at)?.to_string());
            }
            "tool_result" => {
                known_keys(o, &["tool_use_id", "content", "is_error"], &at)?;
                let id = req_str(o, "tool_use_id", &at)?;
                let mut content = match get(o, "content") {
                    None => Vec::new(),
                    Some(v) => texts(v, &format!("{at}.content"))?,
                };
                match get(o, "is_error") {
                    None | Some(Value::Bool(false)) => {}
                    // the template has no error flag: the model reads it as the result's
                    // first words
                    Some(Value::Bool(true)) => content.insert(0, "Error: ".to_string()),
                    Some(v) => return Err(type_err(&format!("{at}.is_error"), "a boolean", v)),
                }
                let field = format!("{at}.tool_use_id");
                out.push(tool_result(open_calls, id, &field, "tool_use", content)?);
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    format!(
                        "unknown block type {other:?} in a user turn (expected text or tool_result)"
                    ),
                ))
            }
        }
    }
    if !text.is_empty() {
        out.push(Message::plain(Role::User, Some(text)));
    }
    Ok(out)
}

fn assistant_turn(blocks: &[Value], at: &str, key: &[u8], last: bool) -> Result<Message, ApiError> {
    let mut m = Message::plain(Role::Assistant, None);
    let mut text = Vec::new();
    let mut reasoning = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        let (o, kind) = block(b, &at)?;
        match kind {
            "text" => {
                known_keys(o, &["text"], &at)?;
                text.push(req_str(o, "text", &at)?.to_string());
            }
            "thinking" => {
                known_keys(o, &["thinking", "signature"], &at)?;
                let t = req_str(o, "thinking", &at)?;
                let sig = req_str(o, "signature", &at)?;
                if !crate::serve::handler::constant_time_eq(
                    sig.as_bytes(),
                    thinking_signature(key, t).as_bytes(),
                ) {
                    return Err(ApiError::invalid(
                        &format!("{at}.signature"),
                        "not the signature this model gave this thinking (the thinking was changed, or came from another model); give the block back as it was sent, or leave it out",
                    ));
                }
                reasoning.push_str(t);
            }
            "redacted_thinking" => {
                // k3 never writes one: another model's encrypted reasoning, which no
                // template can render; accepted (clients replay histories) and left out
                known_keys(o, &["data"], &at)?;
                req_str(o, "data", &at)?;
            }
            "tool_use" => {
                known_keys(o, &["id", "name", "input"], &at)?;
                let id = req_str(o, "id", &at)?;
                let name = tool_name(o, &at)?;
                // required, as Anthropic's API has it: a call without its input is refused
                let input = match get(o, "input") {
                    None => return Err(ApiError::invalid(&format!("{at}.input"), "missing")),
                    Some(Value::Object(i)) => {
                        i.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
                    }
                    Some(v) => return Err(type_err(&format!("{at}.input"), "an object", v)),
                };
                push_call(
                    &mut m,
                    id,
                    name,
                    Arguments::Object(input),
                    &at,
                    "id",
                    "tool_use",
                )?;
            }
            other => {
                if let Some(e) = media_refusal(other, &at) {
                    return Err(e);
                }
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    format!("unknown block type {other:?} in an assistant turn (expected text, thinking, redacted_thinking or tool_use)"),
                ));
            }
        }
    }
    if last {
        if !m.tool_calls.is_empty() {
            return Err(ApiError::invalid(
                at,
                "a final assistant turn is a prefill the reply continues, and cannot hold tool_use blocks; answer them in a user turn",
            ));
        }
        m.partial = true;
    }
    m.content = Some(text);
    m.reasoning = (!reasoning.is_empty()).then_some(reasoning);
    Ok(m)
}

/// `tools` → declarations in the chat-completions form the template renders (`{"type":
/// "function", "function": {name, description, parameters}}`), so the same tools give the
/// same ids through either API; and their names.
fn tools(v: Option<&Value>) -> Result<(Vec<Value>, Vec<String>), ApiError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Default::default()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_err("tools", "an array", v)),
    };
    let mut out: Vec<Value> = Vec::with_capacity(list.len());
    let mut names = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let o = t
            .as_object()
            .ok_or_else(|| type_err(&at, "a tool object", t))?;
        match get(o, "type") {
            None => {}
            Some(Value::String(s)) if s == "custom" => {}
            Some(Value::String(s)) => {
                return Err(ApiError::invalid(
                    &format!("{at}.type"),
                    format!("server tool {s:?} is not supported by k3 (declare client tools: name, description, input_schema)"),
                ))
            }
            Some(v) => return Err(type_err(&format!("{at}.type"), "a string", v)),
        }
        known_keys(o, &["name", "description", "input_schema"], &at)?;
        let mut f = declaration(o, &at, &mut names)?;
        match get(o, "input_schema") {
            Some(s @ Value::Object(_)) => f.insert("parameters", s.clone()),
            Some(v) => {
                return Err(type_err(
                    &format!("{at}.input_schema"),
                    "an object (a JSON Schema)",
                    v,
                ))
            }
            None => {
                return Err(ApiError::invalid(
                    &format!("{at}.input_schema"),
                    "missing (required)",
                ))
            }
        }
        out.push(function(f));
    }
    Ok((out, names))
}

/// `tool_choice`: `{"type": "auto" | "any" | "none" | "tool", "name"?,
/// "disable_parallel_tool_use"?}` (the last accepted and not enforced: the template has no
/// such switch).
fn tool_choice(v: Option<&Value>, declared: &[String]) -> Result<ToolChoice, ApiError> {
    let o = match v {
        None | Some(Value::Null) => return Ok(ToolChoice::Auto),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(type_err("tool_choice", "an object", v)),
    };
    known_keys(o, &["name", "disable_parallel_tool_use"], "tool_choice")?;
    if let Some(v) = get(o, "disable_parallel_tool_use").filter(|v| v.as_bool().is_none()) {
        return Err(type_err(
            "tool_choice.disable_parallel_tool_use",
            "a boolean",
            v,
        ));
    }
    match req_str(o, "type", "tool_choice")? {
        "auto" => Ok(ToolChoice::Auto),
        "any" => Ok(ToolChoice::Required),
        "none" => Ok(ToolChoice::None),
        "tool" => named_choice(o, declared),
        other => Err(ApiError::invalid(
            "tool_choice.type",
            format!("unknown value {other:?} (expected auto, any, tool or none)"),
        )),
    }
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` (N ≥ 1), `{"type": "adaptive"}`,
/// `{"type": "disabled"}`; absent is the template's default, on. Effort is the template's
/// default, `max`.
fn thinking(v: Option<&Value>) -> Result<(Thinking, Option<usize>), ApiError> {
    let o = match v {
        None | Some(Value::Null) => return Ok((Thinking::On(Effort::Max), None)),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(type_err("thinking", "an object", v)),
    };
    match req_str(o, "type", "thinking")? {
        "disabled" => {
            known_keys(o, &[], "thinking")?;
            Ok((Thinking::Off, None))
        }
        "adaptive" => {
            known_keys(o, &["display"], "thinking")?;
            display(o)?;
            Ok((Thinking::On(Effort::Max), None))
        }
        "enabled" => {
            known_keys(o, &["budget_tokens", "display"], "thinking")?;
            display(o)?;
            let b = match get(o, "budget_tokens") {
                None => {
                    return Err(ApiError::invalid(
                        "thinking.budget_tokens",
                        "missing (required with type enabled)",
                    ))
                }
                Some(v) => v
                    .as_number()
                    .filter(|n| n.is_integer())
                    .and_then(|n| n.as_u64())
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "thinking.budget_tokens",
                            format!("expected an integer ≥ 1, found {}", found(v)),
                        )
                    })?,
            };
            Ok((
                Thinking::On(Effort::Max),
                Some(b.min(usize::MAX as u64) as usize),
            ))
        }
        other => Err(ApiError::invalid(
            "thinking.type",
            format!("unknown value {other:?} (expected enabled, adaptive or disabled)"),
        )),
    }
}

/// `thinking.display`: `summarized` or `omitted` accepted; k3 always returns the thinking
/// whole (a local model has nothing to hide from its user).
fn display(o: &Object) -> Result<(), ApiError> {
    match get(o, "display") {
        None => Ok(()),
        Some(Value::String(s)) if s == "summarized" || s == "omitted" => Ok(()),
        Some(_) => Err(ApiError::invalid(
            "thinking.display",
            "expected \"summarized\" or \"omitted\"",
        )),
    }
}

/// `output_config`: `effort` (low → the template's low; medium, high → high; xhigh, max →
/// max) and `format` (`{"type": "json_schema", "schema": …}` → the template's
/// response-format message, TOKENIZER.md §10 step 5; like chat completions' `response_format`
/// it asks, it does not constrain).
fn output_config(v: Option<&Value>) -> Result<(Option<Effort>, Option<ResponseFormat>), ApiError> {
    let o = match v {
        None | Some(Value::Null) => return Ok((None, None)),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(type_err("output_config", "an object", v)),
    };
    known_keys(o, &["effort", "format"], "output_config")?;
    let effort = match get(o, "effort") {
        None => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "low" => Effort::Low,
            "medium" | "high" => Effort::High,
            "xhigh" | "max" => Effort::Max,
            other => {
                return Err(ApiError::invalid(
                    "output_config.effort",
                    format!("unknown value {other:?} (expected low, medium, high, xhigh or max)"),
                ))
            }
        }),
        Some(v) => return Err(type_err("output_config.effort", "a string", v)),
    };
    let format = match get(o, "format") {
        None => None,
        Some(Value::Object(f)) => {
            known_keys(f, &["schema"], "output_config.format")?;
            if req_str(f, "type", "output_config.format")? != "json_schema" {
                return Err(ApiError::invalid(
                    "output_config.format.type",
                    "expected \"json_schema\"",
                ));
            }
            match get(f, "schema") {
                Some(s @ Value::Object(_)) => Some(ResponseFormat::JsonSchema(s.clone())),
                Some(v) => return Err(type_err("output_config.format.schema", "an object", v)),
                None => {
                    return Err(ApiError::invalid(
                        "output_config.format.schema",
                        "missing (required)",
                    ))
                }
            }
        }
        Some(v) => return Err(type_err("output_config.format", "an object", v)),
    };
    Ok((effort, format))
}

fn stop_sequences(o: &Object) -> Result<Vec<String>, ApiError> {
    let list = match get(o, "stop_sequences") {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_err("stop_sequences", "an array of strings", v)),
    };
    if list.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::invalid(
            "stop_sequences",
            format!("at most {MAX_STOP_SEQUENCES} stop sequences"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            Value::String(_) => Err(ApiError::invalid(
                &format!("stop_sequences[{i}]"),
                "empty string",
            )),
            v => Err(type_err(&format!("stop_sequences[{i}]"), "a string", v)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_keyed() {
        let a = thinking_signature(b"model a", "Let me check.");
        assert!(a.starts_with("k3s1.") && a.len() == 5 + 64);
        assert_eq!(a, thinking_signature(b"model a", "Let me check."));
        assert_ne!(a, thinking_signature(b"model b", "Let me check."));
        assert_ne!(a, thinking_signature(b"model a", "Let me check!"));
    }

    #[test]
    fn errors_in_anthropic_shape() {
        let b = error_body(&ApiError::invalid("max_tokens", "missing"));
        let v = crate::json::parse(b.as_bytes()).unwrap();
        assert_eq!(v.get("type").and_then(Value::as_str), Some("error"));
        let e = v.get("error").unwrap();
        assert_eq!(
            e.get("type").and_then(Value::as_str),
            Some("invalid_request_error")
        );
        assert_eq!(
            e.get("message").and_then(Value::as_str),
            Some("max_tokens: missing")
        );
        let s = error_body(&ApiError::other(500, "server_error", "x"));
        assert!(s.contains("\"api_error\""), "{s}");
        let s = error_body(&ApiError::model_not_found("claude-x", "k3"));
        assert!(s.contains("\"not_found_error\""), "{s}");
    }
}
