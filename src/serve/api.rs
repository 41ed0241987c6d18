//! Request bodies of the OpenAI API → jobs (ENGINE.md §11): the body parsed, the prompt (chat
//! messages through the template, or a completion's text or ids), `logprobs`. The field table
//! (accepted, ignored, refused) is `fields`; sampling, `stop`, streaming options and the
//! context check are `params`. Every refusal is an [`ApiError`] naming the field (`param`);
//! the chat template's own refusals (TOKENIZER.md §10) name their path.

pub mod constraint;
mod convert;
mod fields;
pub mod messages;
mod params;
pub mod responses;

use fields::{check_fields, check_model, opt_bool, opt_int_in, CHAT_ACCEPTED, COMPLETION_ACCEPTED};
pub use fields::{IGNORED, REFUSED};
use params::{check_length, gen_params};

use crate::chat::{self, Request as ChatRequest, Thinking};
use crate::error::Error;
use crate::generate::guide::Constraints;
use crate::generate::sample::SamplerSettings;
use crate::json::{Object, Value};
use crate::tokenizer::Tokenizer;

/// An error answered in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (400, 401, 404, 413, 500, 503).
    pub status: u16,
    /// `type`: `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `server_error`, `overloaded_error`.
    pub kind: &'static str,
    /// What was wrong and what to do, naming the field.
    pub message: String,
    /// The field, as a path (`messages[2].content`), when one is to blame.
    pub param: Option<String>,
    /// `code` (e.g. `model_not_found`, `context_length_exceeded`), if any.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 `invalid_request_error` naming `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: format!("{param}: {}", message.into()),
            param: Some(param.to_string()),
            code: None,
        }
    }

    /// An error of another status and type, naming no field.
    pub fn other(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// 404 `model_not_found`: `id` is not the served model `served` (`param` is `model`, as
    /// the OpenAI API answers both a request's `model` and `GET /v1/models/{id}`).
    pub fn model_not_found(id: &str, served: &str) -> ApiError {
        ApiError {
            status: 404,
            kind: "invalid_request_error",
            message: format!("model: `{id}` does not exist; this server serves `{served}`"),
            param: Some("model".to_string()),
            code: Some("model_not_found"),
        }
    }

    /// A refusal of the chat layer (`messages[1].content: …`), its field path as `param`.
    pub fn from_chat(e: &Error) -> ApiError {
        let param = e
            .message
            .split_once(": ")
            .map(|(p, _)| p.to_string())
            .filter(|p| !p.contains(' '));
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: e.message.clone(),
            param,
            code: None,
        }
    }

    /// The body: `{"error":{"message":…,"type":…,"param":…,"code":…}}`.
    pub fn body(&self) -> String {
        let e = Object::new()
            .with("message", self.message.as_str())
            .with("type", self.kind)
            .with("param", self.param.clone())
            .with("code", self.code);
        Value::from(Object::new().with("error", e)).to_json()
    }
}

/// How one request generates (both endpoints).
#[derive(Debug, Clone, PartialEq)]
pub struct GenParams {
    /// The sampler settings (the seed resolved: the request's, or one from the OS).
    pub settings: SamplerSettings,
    /// `max_tokens` / `max_completion_tokens`, if given.
    pub max_tokens: Option<u64>,
    /// The field `max_tokens` came from (`max_tokens` or `max_completion_tokens`), which a
    /// refusal names.
    pub max_tokens_field: &'static str,
    /// `stop` strings (matched on the response text, never returned).
    pub stop: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Log-probabilities of the chosen ids were asked for.
    pub logprobs: bool,
    /// How many alternatives per position (`top_logprobs`, completions' `logprobs` N).
    pub top_logprobs: usize,
    /// The reply's constraints (ENGINE.md §8: `response_format` / `text.format` /
    /// `output_config.format`, tools per `tool_choice`; module `constraint`), set by each
    /// API's decoder from its conversation.
    pub constraints: Constraints,
}

/// A decoded `/v1/chat/completions` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatJob {
    /// The prompt ids (the template's, ending with the generation prompt).
    pub ids: Vec<u32>,
    /// Ids of the generation prompt's channel-opening stub, left out of `prompt_tokens`.
    pub stub: usize,
    /// Thinking on: the reply starts in the think channel.
    pub thinking: bool,
    /// Sampling, limits and output options.
    pub params: GenParams,
}

/// A decoded `/v1/completions` request.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionJob {
    /// The prompt ids (text encoded without special tokens, or given as ids).
    pub ids: Vec<u32>,
    /// Sampling, limits and output options.
    pub params: GenParams,
}

/// What the server checks requests against.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The model id requests must name (`--model-id`, else the directory name).
    pub model_id: String,
    /// Positions each sequence may reach (`--ctx`).
    pub ctx: usize,
    /// The vocabulary size V (ids given to `/v1/completions` are below it).
    pub vocab: usize,
    /// The checkpoint's sampler defaults (ENGINE.md §8), seed unset.
    pub defaults: SamplerSettings,
    /// The key of the thinking signatures (`POST /v1/messages`): the model's identity, its
    /// canonical config string and weights tag (FORMATS.md §9.1), so a signature survives
    /// restarts and belongs to one model.
    pub sign_key: Vec<u8>,
    /// The vocabulary of structured output, built on the first constrained request.
    pub vocabulary: constraint::VocabCell,
}

/// The request body as a JSON object, or 400 with the byte offset (and the field it stopped
/// in) of malformed JSON.
pub fn parse_body(body: &[u8]) -> Result<Object, ApiError> {
    let v = crate::json::parse(body).map_err(|e| {
        let at = chat::messages::failing_path(body)
            .map(|p| format!(" (in `{p}`)"))
            .unwrap_or_default();
        ApiError::other(
            400,
            "invalid_request_error",
            format!(
                "request body: invalid JSON at byte {}{at}: {}",
                e.offset, e.expected
            ),
        )
    })?;
    match v {
        Value::Object(o) => Ok(o),
        v => Err(ApiError::other(
            400,
            "invalid_request_error",
            format!(
                "request body: expected a JSON object, found {}",
                v.type_name()
            ),
        )),
    }
}

/// Decodes a chat request: fields (unknown ones refused), the model, messages through the
/// template, sampling and limits. `os_seed` gives a seed when a sampled request has none.
pub fn chat_job(
    o: &Object,
    tok: &Tokenizer,
    lim: &Limits,
    os_seed: &mut dyn FnMut() -> u64,
) -> Result<ChatJob, ApiError> {
    check_fields(o, CHAT_ACCEPTED)?;
    check_model(o, lim)?;
    let req =
        ChatRequest::from_json(&Value::Object(o.clone())).map_err(|e| ApiError::from_chat(&e))?;
    if req.messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "empty; give at least one message",
        ));
    }
    let thinking = req.thinking != Thinking::Off;
    let segs = chat::render(&req, true).map_err(|e| ApiError::from_chat(&e))?;
    let ids = chat::encode(tok, &segs).map_err(|e| ApiError::from_chat(&e))?;
    let stub = chat::encode(tok, &chat::generation_stub(thinking))
        .map_err(|e| ApiError::from_chat(&e))?
        .len();
    let mut params = gen_params(o, lim, os_seed, "max_completion_tokens")?;
    params.logprobs = opt_bool(o, "logprobs")?.unwrap_or(false);
    if let Some(n) = opt_int_in(o, "top_logprobs", 0, 20, "")? {
        if !params.logprobs && n > 0 {
            return Err(ApiError::invalid("top_logprobs", "needs `logprobs: true`"));
        }
        params.top_logprobs = n as usize;
    }
    let partial = req.messages.last().is_some_and(|m| m.partial);
    params.constraints = constraint::reply_constraints(
        &req,
        thinking && !partial,
        partial,
        tok,
        &lim.vocabulary,
        &constraint::CHAT,
    )?;
    check_length(ids.len(), stub, &params, lim, "messages")?;
    Ok(ChatJob {
        ids,
        stub,
        thinking,
        params,
    })
}

/// Decodes a completions request: `prompt` as a string, an array of one string, an array of
/// ids or an array of one array of ids.
pub fn completion_job(
    o: &Object,
    tok: &Tokenizer,
    lim: &Limits,
    os_seed: &mut dyn FnMut() -> u64,
) -> Result<CompletionJob, ApiError> {
    check_fields(o, COMPLETION_ACCEPTED)?;
    check_model(o, lim)?;
    let ids = match o.get("prompt") {
        None | Some(Value::Null) => return Err(ApiError::invalid("prompt", "missing")),
        Some(p) => prompt_ids(p, tok, lim.vocab)?,
    };
    if ids.is_empty() {
        return Err(ApiError::invalid("prompt", "empty (it encodes to no ids)"));
    }
    if opt_bool(o, "echo")? == Some(true) {
        return Err(ApiError::invalid("echo", "not supported; give false"));
    }
    opt_int_in(o, "best_of", 1, 1, " (k3 returns one choice per request)")?;
    let mut params = gen_params(o, lim, os_seed, "max_tokens")?;
    if let Some(n) = opt_int_in(o, "logprobs", 0, 5, "")? {
        params.logprobs = true;
        params.top_logprobs = n as usize;
    }
    check_length(ids.len(), 0, &params, lim, "prompt")?;
    Ok(CompletionJob { ids, params })
}

/// Positions of the shortest chat request (one user message with empty content, with its
/// generation prompt), the least of every thinking setting: a server whose `--ctx` is not
/// longer than this can answer no chat request (`k3 serve` refuses to start).
///
/// Errors: the template's (a tokenizer without the chat's special tokens).
pub fn shortest_chat_prompt(tok: &Tokenizer) -> Result<usize, Error> {
    let mut least = usize::MAX;
    for extra in [
        "",
        r#", "chat_template_kwargs": {"thinking": false}"#,
        r#", "reasoning_effort": "low""#,
        r#", "reasoning_effort": "high""#,
        r#", "reasoning_effort": "max""#,
    ] {
        let body = format!(r#"{{"messages": [{{"role": "user", "content": ""}}]{extra}}}"#);
        let v = crate::json::parse(body.as_bytes())
            .map_err(|e| Error::internal(format!("the shortest chat request: {}", e.expected)))?;
        let req = ChatRequest::from_json(&v)?;
        let ids = chat::encode(tok, &chat::render(&req, true)?)?;
        least = least.min(ids.len());
    }
    Ok(least)
}

fn prompt_ids(p: &Value, tok: &Tokenizer, vocab: usize) -> Result<Vec<u32>, ApiError> {
    match p {
        Value::String(s) => Ok(tok.encode(s, false)),
        Value::Array(a) if a.len() == 1 && !matches!(a[0], Value::Number(_)) => match &a[0] {
            Value::String(s) => Ok(tok.encode(s, false)),
            Value::Array(ids) => id_list(ids, "prompt[0]", vocab),
            v => Err(ApiError::invalid(
                "prompt[0]",
                format!("expected string or array of ids, found {}", v.type_name()),
            )),
        },
        Value::Array(a) if a.iter().all(|v| matches!(v, Value::Number(_))) => {
            id_list(a, "prompt", vocab)
        }
        Value::Array(_) => Err(ApiError::invalid(
            "prompt",
            "one prompt per request (a string, or an array of ids); `n` prompts are not supported",
        )),
        v => Err(ApiError::invalid(
            "prompt",
            format!("expected string or array of ids, found {}", v.type_name()),
        )),
    }
}

fn id_list(a: &[Value], field: &str, vocab: usize) -> Result<Vec<u32>, ApiError> {
    a.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_number()
                .and_then(|n| n.as_u64())
                .filter(|&id| id < vocab as u64)
                .map(|id| id as u32)
                .ok_or_else(|| {
                    ApiError::invalid(
                        &format!("{field}[{i}]"),
                        format!("expected a token id below vocab_size {vocab}"),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_json_names_the_byte() {
        let e = parse_body(b"{\"model\": ").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.message.contains("at byte 10"), "{}", e.message);
        assert!(parse_body(b"[1]")
            .unwrap_err()
            .message
            .contains("expected a JSON object"));
    }

    #[test]
    fn error_body_shape() {
        let b = ApiError::invalid("messages[0].role", "unknown role \"x\"").body();
        let v = crate::json::parse(b.as_bytes()).unwrap();
        let e = v.get("error").unwrap();
        assert_eq!(
            e.get("param").and_then(Value::as_str),
            Some("messages[0].role")
        );
        assert_eq!(
            e.get("type").and_then(Value::as_str),
            Some("invalid_request_error")
        );
        assert!(e.get("code").unwrap().is_null());
        let c = ApiError::from_chat(&Error::invalid("messages[1].content: expected string"));
        assert_eq!(c.param.as_deref(), Some("messages[1].content"));
    }
}
