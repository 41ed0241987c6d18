//! Request bodies of the OpenAI API → jobs (ENGINE.md §11): which fields are accepted,
//! ignored or refused, the sampler settings over the checkpoint's defaults (§8), `stop`,
//! `max_tokens` against `--ctx`, `logprobs`. Every refusal is an [`ApiError`] naming the field
//! (`param`); the chat template's own refusals (TOKENIZER.md §10) name their path.

use crate::chat::{self, Request as ChatRequest, Thinking};
use crate::error::Error;
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

/// Chat fields handled here or by the chat layer.
const CHAT_ACCEPTED: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "response_format",
    "reasoning_effort",
    "chat_template_kwargs",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "n",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
];
/// Completion fields handled here.
const COMPLETION_ACCEPTED: &[&str] = &[
    "model",
    "prompt",
    "stream",
    "stream_options",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "n",
    "logprobs",
    "echo",
    "best_of",
    "frequency_penalty",
    "presence_penalty",
];
/// Fields accepted and ignored by both endpoints (ENGINE.md §11).
pub const IGNORED: &[&str] = &["user", "parallel_tool_calls", "store", "metadata"];
/// Fields refused whatever their value (ENGINE.md §11: k3 has no logit bias and is text-only).
pub const REFUSED: &[&str] = &[
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "suffix",
    "web_search_options",
];

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
    if let Some(n) = opt_uint(o, "top_logprobs")? {
        if n > 20 {
            return Err(ApiError::invalid("top_logprobs", "expected 0 to 20"));
        }
        if !params.logprobs && n > 0 {
            return Err(ApiError::invalid("top_logprobs", "needs `logprobs: true`"));
        }
        params.top_logprobs = n as usize;
    }
    check_length(ids.len(), &params, lim)?;
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
    if let Some(b) = opt_uint(o, "best_of")? {
        if b != 1 {
            return Err(ApiError::invalid("best_of", "only 1 is supported"));
        }
    }
    let mut params = gen_params(o, lim, os_seed, "max_tokens")?;
    if let Some(n) = opt_uint(o, "logprobs")? {
        if n > 5 {
            return Err(ApiError::invalid("logprobs", "expected 0 to 5"));
        }
        params.logprobs = true;
        params.top_logprobs = n as usize;
    }
    check_length(ids.len(), &params, lim)?;
    Ok(CompletionJob { ids, params })
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

/// Refuses unknown and refused fields; drops the ignored ones.
fn check_fields(o: &Object, accepted: &[&str]) -> Result<(), ApiError> {
    for (k, v) in o.iter() {
        if REFUSED.contains(&k) {
            if v.is_null() {
                continue;
            }
            return Err(ApiError::invalid(
                k,
                "not supported by k3; remove the field (the README lists the accepted fields)",
            ));
        }
        if !accepted.contains(&k) && !IGNORED.contains(&k) {
            return Err(ApiError::invalid(
                k,
                "unknown field (see the field table in the README)",
            ));
        }
    }
    for k in ["frequency_penalty", "presence_penalty"] {
        if let Some(v) = o.get(k).filter(|v| !v.is_null()) {
            match v.as_number().map(|n| n.as_f64()) {
                Some(0.0) => {}
                Some(_) => {
                    return Err(ApiError::invalid(
                        k,
                        "not supported (k3 has no repetition penalties); give 0 or leave it out",
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        k,
                        format!("expected number, found {}", v.type_name()),
                    ))
                }
            }
        }
    }
    if let Some(n) = opt_uint(o, "n")? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                "only 1 choice per request is supported",
            ));
        }
    }
    Ok(())
}

fn check_model(o: &Object, lim: &Limits) -> Result<(), ApiError> {
    match o.get("model") {
        None | Some(Value::Null) => Err(ApiError::invalid(
            "model",
            format!("missing; this server serves `{}`", lim.model_id),
        )),
        Some(Value::String(m)) if *m == lim.model_id => Ok(()),
        Some(Value::String(m)) => Err(ApiError {
            status: 404,
            kind: "invalid_request_error",
            message: format!(
                "model: `{m}` does not exist; this server serves `{}`",
                lim.model_id
            ),
            param: Some("model".to_string()),
            code: Some("model_not_found"),
        }),
        Some(v) => Err(ApiError::invalid(
            "model",
            format!("expected string, found {}", v.type_name()),
        )),
    }
}

/// Sampling, `stop`, `stream`, `stream_options` and the token limit (`max_tokens`, or
/// `alt_max` which wins when both are given).
fn gen_params(
    o: &Object,
    lim: &Limits,
    os_seed: &mut dyn FnMut() -> u64,
    alt_max: &str,
) -> Result<GenParams, ApiError> {
    let mut s = lim.defaults;
    if let Some(t) = opt_f64(o, "temperature")? {
        if !(t.is_finite() && t >= 0.0) {
            return Err(ApiError::invalid(
                "temperature",
                "expected a finite number ≥ 0",
            ));
        }
        s.temperature = t;
    }
    if let Some(p) = opt_f64(o, "top_p")? {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::invalid("top_p", "expected a number in (0, 1]"));
        }
        s.top_p = p;
    }
    if let Some(m) = opt_f64(o, "min_p")? {
        if !(0.0..1.0).contains(&m) {
            return Err(ApiError::invalid("min_p", "expected a number in [0, 1)"));
        }
        s.min_p = m;
    }
    if let Some(v) = o.get("top_k").filter(|v| !v.is_null()) {
        let n = v.as_number().filter(|n| n.is_integer());
        s.top_k = match (n.and_then(|n| n.as_u64()), n.and_then(|n| n.as_i64())) {
            (Some(k), _) => k,
            (None, Some(-1)) => 0,
            _ => {
                return Err(ApiError::invalid(
                    "top_k",
                    "expected an integer ≥ 0 (0 or -1: off)",
                ))
            }
        };
    }
    s.seed = match o.get("seed").filter(|v| !v.is_null()) {
        None => {
            if s.is_greedy() {
                0
            } else {
                os_seed()
            }
        }
        Some(v) => seed(v)?,
    };
    let max_tokens = match opt_uint(o, alt_max)? {
        Some(m) => Some(m),
        None => opt_uint(o, "max_tokens")?,
    };
    if max_tokens == Some(0) {
        let f = if o.get(alt_max).is_some_and(|v| !v.is_null()) {
            alt_max
        } else {
            "max_tokens"
        };
        return Err(ApiError::invalid(f, "expected at least 1"));
    }
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(ApiError::invalid(
                    &format!("stop[{i}]"),
                    format!("expected string, found {}", v.type_name()),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Array(_)) => return Err(ApiError::invalid("stop", "at most 4 stop strings")),
        Some(v) => {
            return Err(ApiError::invalid(
                "stop",
                format!(
                    "expected string or array of strings, found {}",
                    v.type_name()
                ),
            ))
        }
    };
    if let Some(i) = stop.iter().position(|s| s.is_empty()) {
        return Err(ApiError::invalid(&format!("stop[{i}]"), "empty string"));
    }
    let stream = opt_bool(o, "stream")?.unwrap_or(false);
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => {
            for (k, _) in so.iter() {
                if k != "include_usage" && k != "continuous_usage_stats" {
                    return Err(ApiError::invalid(
                        &format!("stream_options.{k}"),
                        "unknown field",
                    ));
                }
            }
            match so.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(ApiError::invalid(
                        "stream_options.include_usage",
                        format!("expected boolean, found {}", v.type_name()),
                    ))
                }
            }
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("expected object, found {}", v.type_name()),
            ))
        }
    };
    Ok(GenParams {
        settings: s,
        max_tokens,
        stop,
        stream,
        include_usage,
        logprobs: false,
        top_logprobs: 0,
    })
}

/// A seed in [−2⁶³, 2⁶⁴), a negative one modulo 2⁶⁴ (ENGINE.md §8).
fn seed(v: &Value) -> Result<u64, ApiError> {
    let n = v.as_number().filter(|n| n.is_integer());
    match (n.and_then(|n| n.as_u64()), n.and_then(|n| n.as_i64())) {
        (Some(s), _) => Ok(s),
        (None, Some(s)) => Ok(s as u64),
        _ => Err(ApiError::invalid(
            "seed",
            "expected an integer in [-2^63, 2^64)",
        )),
    }
}

/// The prompt and `max_tokens` against `--ctx` (refused before anything runs).
fn check_length(prompt: usize, p: &GenParams, lim: &Limits) -> Result<(), ApiError> {
    let too_long = |message: String| ApiError {
        status: 400,
        kind: "invalid_request_error",
        message,
        param: Some("messages".to_string()),
        code: Some("context_length_exceeded"),
    };
    if prompt >= lim.ctx {
        return Err(too_long(format!(
            "the prompt has {prompt} tokens; this server's context (--ctx) is {} tokens, \
             leaving no room for a reply",
            lim.ctx
        )));
    }
    if let Some(m) = p.max_tokens {
        if prompt as u64 + m > lim.ctx as u64 {
            return Err(ApiError {
                param: Some("max_tokens".to_string()),
                ..too_long(format!(
                    "max_tokens: the prompt ({prompt} tokens) + max_tokens ({m}) exceeds this \
                     server's context (--ctx) of {} tokens; give max_tokens {} or less",
                    lim.ctx,
                    lim.ctx - prompt
                ))
            });
        }
    }
    Ok(())
}

fn opt_bool(o: &Object, k: &str) -> Result<Option<bool>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected boolean, found {}", v.type_name()),
        )),
    }
}

fn opt_f64(o: &Object, k: &str) -> Result<Option<f64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n.as_f64())),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected number, found {}", v.type_name()),
        )),
    }
}

fn opt_uint(o: &Object, k: &str) -> Result<Option<u64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_integer() => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::invalid(k, "expected a non-negative integer")),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected a non-negative integer, found {}", v.type_name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits {
            model_id: "m".into(),
            ctx: 100,
            vocab: 1000,
            defaults: SamplerSettings {
                temperature: 1.0,
                top_k: 0,
                top_p: 0.95,
                min_p: 0.0,
                seed: 0,
            },
        }
    }

    fn obj(s: &str) -> Object {
        parse_body(s.as_bytes()).unwrap()
    }

    fn params(s: &str) -> Result<GenParams, ApiError> {
        gen_params(&obj(s), &lim(), &mut || 77, "max_completion_tokens")
    }

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
    fn sampling_over_the_defaults_and_seeds() {
        let p = params("{}").unwrap();
        assert_eq!((p.settings.temperature, p.settings.top_p), (1.0, 0.95));
        assert_eq!(
            p.settings.seed, 77,
            "a sampled request without a seed gets the OS's"
        );
        let p = params(r#"{"temperature": 0}"#).unwrap();
        assert_eq!(p.settings.seed, 0, "greedy needs no seed");
        let p = params(r#"{"seed": -1, "top_k": -1, "min_p": 0.1}"#).unwrap();
        assert_eq!((p.settings.seed, p.settings.top_k), (u64::MAX, 0));
        assert_eq!(
            params(r#"{"seed": 18446744073709551615}"#)
                .unwrap()
                .settings
                .seed,
            u64::MAX
        );
        for (body, field) in [
            (r#"{"temperature": -0.5}"#, "temperature"),
            (r#"{"top_p": 1.5}"#, "top_p"),
            (r#"{"min_p": 1}"#, "min_p"),
            (r#"{"top_k": -2}"#, "top_k"),
            (r#"{"seed": "x"}"#, "seed"),
            (r#"{"stop": ""}"#, "stop[0]"),
            (r#"{"stop": [1]}"#, "stop[0]"),
            (r#"{"max_tokens": 0}"#, "max_tokens"),
            (r#"{"stream_options": {"x": 1}}"#, "stream_options.x"),
        ] {
            let e = params(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
        // max_completion_tokens wins over max_tokens
        let p = params(r#"{"max_tokens": 5, "max_completion_tokens": 7}"#).unwrap();
        assert_eq!(p.max_tokens, Some(7));
    }

    #[test]
    fn the_field_table() {
        let ok = |s: &str| check_fields(&obj(s), CHAT_ACCEPTED);
        assert!(ok(
            r#"{"user": "u", "store": false, "metadata": {}, "parallel_tool_calls": true}"#
        )
        .is_ok());
        assert!(ok(
            r#"{"frequency_penalty": 0, "presence_penalty": 0.0, "n": 1, "logit_bias": null}"#
        )
        .is_ok());
        for (body, field) in [
            (r#"{"logit_bias": {"1": 2}}"#, "logit_bias"),
            (r#"{"audio": {}}"#, "audio"),
            (r#"{"presence_penalty": 1}"#, "presence_penalty"),
            (r#"{"n": 3}"#, "n"),
            (r#"{"what": 1}"#, "what"),
        ] {
            assert_eq!(
                ok(body).unwrap_err().param.as_deref(),
                Some(field),
                "{body}"
            );
        }
    }

    #[test]
    fn the_model_and_the_context() {
        assert!(check_model(&obj(r#"{"model": "m"}"#), &lim()).is_ok());
        let e = check_model(&obj(r#"{"model": "x"}"#), &lim()).unwrap_err();
        assert_eq!((e.status, e.code), (404, Some("model_not_found")));
        assert_eq!(check_model(&obj("{}"), &lim()).unwrap_err().status, 400);
        let p = |m: Option<u64>| GenParams {
            max_tokens: m,
            ..params("{}").unwrap()
        };
        assert!(check_length(99, &p(None), &lim()).is_ok());
        assert!(check_length(100, &p(None), &lim()).is_err());
        assert!(check_length(90, &p(Some(10)), &lim()).is_ok());
        let e = check_length(90, &p(Some(11)), &lim()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert!(
            e.message.contains("give max_tokens 10 or less"),
            "{}",
            e.message
        );
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
