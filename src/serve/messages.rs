//! The Anthropic Messages face of `k3 serve` (ENGINE.md §11): `POST /v1/messages` and
//! `POST /v1/messages/count_tokens`. The request codec is [`api::messages`]; the job goes to
//! the one scheduler like a chat completion, and the reply — the same [`ReplyBuilder`] pieces
//! — becomes Anthropic content blocks: `thinking` (with its `signature`), then `text`, then
//! `tool_use` (the call's parsed arguments as `input`, a reproducible id). The stream is
//! Anthropic's events (`message_start`, `content_block_start` / `_delta` / `_stop`,
//! `message_delta`, `message_stop`, `ping` while a prefill runs, `error`), each with its
//! `event:` line, and the whole reply is built by applying those same events ([`Blocks`]),
//! so the streamed reply and the whole one agree by construction. Errors are in Anthropic's
//! shape with the statuses of the other endpoints; the key comes from `x-api-key` or
//! `Authorization: Bearer`; `anthropic-version` and `anthropic-beta` are accepted, whatever
//! their value.

use super::api::messages::{self as codec, error_body, thinking_signature};
use super::api::ApiError;
use super::encode::{self, Usage};
use super::reply::{Piece, ReplyBuilder};
use super::run::{call_base, next, seed_source, Outcome};
use super::sched::{Event, Job};
use super::server::Server;
use crate::generate::stop::StopReason;
use crate::http::{Request, Responder, Response, Stream};
use crate::json::{Object, Value};
use std::sync::atomic::Ordering;
use std::sync::mpsc;

/// Routes `/v1/messages` and `/v1/messages/count_tokens` (the key, the method, the model
/// loaded), every refusal in Anthropic's error shape.
pub fn route(server: &Server, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
    if let Err(e) = server.authorized(req) {
        return refused(server, out, &e);
    }
    let path = req.path();
    let count = match path {
        "/v1/messages" => false,
        "/v1/messages/count_tokens" => true,
        _ => {
            let e = ApiError::other(
                404,
                "not_found_error",
                format!(
                    "{} {path}: no such route (routes: /v1/messages, /v1/messages/count_tokens)",
                    req.method
                ),
            );
            return refused(server, out, &e);
        }
    };
    if req.method != "POST" {
        let e = ApiError::other(
            405,
            "invalid_request_error",
            format!("{} {path}: method not allowed; use POST", req.method),
        );
        let r = error_response(server, &e).header("Allow", "POST");
        let mut o = Outcome::sent(out, r);
        o.error = Some(e.kind.to_string());
        return o;
    }
    if !server.loaded.load(Ordering::SeqCst) {
        let e = ApiError::other(
            503,
            "overloaded_error",
            "the model is still loading; retry shortly (GET /health says when it is ready)",
        );
        return refused(server, out, &e);
    }
    let body = super::api::parse_body(&req.body);
    if count {
        let r = body.and_then(|o| codec::count_tokens(&o, &server.tok, &server.limits));
        return match r {
            Err(e) => refused(server, out, &e),
            Ok(k) => {
                let v: Value = Object::new().with("input_tokens", k).into();
                let mut o = Outcome::sent(out, server.json(200, v.to_json()));
                o.usage.prompt_tokens = k;
                o
            }
        };
    }
    let job =
        body.and_then(|o| codec::messages_job(&o, &server.tok, &server.limits, &mut seed_source()));
    match job {
        Err(e) => refused(server, out, &e),
        Ok(j) => generate(server, out, j, format!("msg_k3_{n}")),
    }
}

fn error_response(server: &Server, e: &ApiError) -> Response {
    let r = server.json(e.status, error_body(e));
    match e.status {
        503 => r.header("Retry-After", "1"),
        401 => r.header("WWW-Authenticate", "Bearer"),
        _ => r,
    }
}

fn refused(server: &Server, out: &mut Responder<'_>, e: &ApiError) -> Outcome {
    let mut o = Outcome::sent(out, error_response(server, e));
    o.error = Some(e.param.clone().unwrap_or_else(|| e.kind.to_string()));
    o
}

/// The content blocks of a reply as Anthropic events: [`Blocks::push`] turns pieces into
/// `content_block_*` events, [`Blocks::apply`] builds the whole reply's `content` from them.
pub struct Blocks<'k> {
    key: &'k [u8],
    /// The open block: its index and kind (`thinking` or `text`; a `tool_use` block is
    /// opened and closed at once, its call being whole).
    open: Option<(usize, &'static str)>,
    next: usize,
    thinking: String,
}

impl<'k> Blocks<'k> {
    /// No block yet; `key` signs the thinking ([`thinking_signature`]).
    pub fn new(key: &'k [u8]) -> Blocks<'k> {
        Blocks {
            key,
            open: None,
            next: 0,
            thinking: String::new(),
        }
    }

    fn close(&mut self, out: &mut Vec<Value>) {
        let Some((i, kind)) = self.open.take() else {
            return;
        };
        if kind == "thinking" {
            let sig = thinking_signature(self.key, &std::mem::take(&mut self.thinking));
            let d = Object::new()
                .with("type", "signature_delta")
                .with("signature", sig);
            out.push(delta(i, d));
        }
        out.push(
            Object::new()
                .with("type", "content_block_stop")
                .with("index", i)
                .into(),
        );
    }

    fn start(&mut self, block: Object, out: &mut Vec<Value>) -> usize {
        let i = self.next;
        self.next += 1;
        out.push(
            Object::new()
                .with("type", "content_block_start")
                .with("index", i)
                .with("content_block", block)
                .into(),
        );
        i
    }

    /// The events of one piece of the reply.
    pub fn push(&mut self, p: &Piece, out: &mut Vec<Value>) {
        let (kind, text) = match p {
            Piece::Reasoning(t) => ("thinking", t),
            Piece::Content(t) => ("text", t),
            Piece::ToolCall {
                id,
                name,
                arguments,
                ..
            } => {
                self.close(out);
                let b = Object::new()
                    .with("type", "tool_use")
                    .with("id", id.as_str())
                    .with("name", name.as_str())
                    .with("input", Object::new());
                let i = self.start(b, out);
                let d = Object::new()
                    .with("type", "input_json_delta")
                    .with("partial_json", arguments.as_str());
                out.push(delta(i, d));
                out.push(
                    Object::new()
                        .with("type", "content_block_stop")
                        .with("index", i)
                        .into(),
                );
                return;
            }
        };
        if text.is_empty() {
            return;
        }
        let i = match self.open {
            Some((i, k)) if k == kind => i,
            _ => {
                self.close(out);
                let b = match kind {
                    "thinking" => Object::new()
                        .with("type", "thinking")
                        .with("thinking", "")
                        .with("signature", ""),
                    _ => Object::new().with("type", "text").with("text", ""),
                };
                let i = self.start(b, out);
                self.open = Some((i, kind));
                i
            }
        };
        let d = if kind == "thinking" {
            self.thinking.push_str(text);
            Object::new()
                .with("type", "thinking_delta")
                .with("thinking", text.as_str())
        } else {
            Object::new()
                .with("type", "text_delta")
                .with("text", text.as_str())
        };
        out.push(delta(i, d));
    }

    /// The reply ended: the open block's events end it.
    pub fn finish(&mut self, out: &mut Vec<Value>) {
        self.close(out);
    }

    /// Applies one event to `content` as a client accumulates it: a start adds its block, a
    /// delta appends to it, a `tool_use` block's stop parses its collected JSON as `input`.
    /// `json` holds each block's collected `partial_json`.
    pub fn apply(ev: &Value, content: &mut Vec<Value>, json: &mut Vec<String>) {
        let idx = ev
            .get("index")
            .and_then(Value::as_number)
            .and_then(|n| n.as_u64())
            .unwrap_or(0) as usize;
        match ev.get("type").and_then(Value::as_str) {
            Some("content_block_start") => {
                content.push(ev.get("content_block").cloned().unwrap_or(Value::Null));
                json.push(String::new());
            }
            Some("content_block_delta") => {
                let (Some(Value::Object(b)), Some(d)) = (content.get_mut(idx), ev.get("delta"))
                else {
                    return;
                };
                let (key, add) = match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => ("text", d.get("text")),
                    Some("thinking_delta") => ("thinking", d.get("thinking")),
                    Some("signature_delta") => ("signature", d.get("signature")),
                    _ => {
                        if let (Some(j), Some(p)) = (json.get_mut(idx), d.get("partial_json")) {
                            j.push_str(p.as_str().unwrap_or(""));
                        }
                        return;
                    }
                };
                let mut s = b.get(key).and_then(Value::as_str).unwrap_or("").to_string();
                s.push_str(add.and_then(Value::as_str).unwrap_or(""));
                b.insert(key, s);
            }
            Some("content_block_stop") => {
                if let (Some(Value::Object(b)), Some(j)) = (content.get_mut(idx), json.get(idx)) {
                    if b.get("type").and_then(Value::as_str) == Some("tool_use") && !j.is_empty() {
                        // the reply parser writes the arguments as one JSON object
                        let input = match crate::json::parse(j.as_bytes()) {
                            Ok(v @ Value::Object(_)) => v,
                            _ => Object::new().into(),
                        };
                        b.insert("input", input);
                    }
                }
            }
            _ => {}
        }
    }
}

fn delta(i: usize, d: Object) -> Value {
    Object::new()
        .with("type", "content_block_delta")
        .with("index", i)
        .with("delta", d)
        .into()
}

/// One SSE event of the Messages stream: `event: TYPE` then `data: JSON`.
pub fn sse_event(v: &Value) -> Vec<u8> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or("message");
    format!("event: {kind}\ndata: {}\n\n", v.to_json()).into_bytes()
}

/// `usage` of a Messages reply: `input_tokens` are the prompt ids not read from a held
/// snapshot (as Anthropic counts: a client adds the cache fields for the whole prompt);
/// nothing is ever written at a cost, so `cache_creation_input_tokens` is 0.
fn usage(u: &Usage) -> Object {
    Object::new()
        .with("input_tokens", u.prompt_tokens - u.cached_tokens)
        .with("cache_creation_input_tokens", 0u64)
        .with("cache_read_input_tokens", u.cached_tokens)
        .with("output_tokens", u.completion_tokens)
}

/// `stop_reason` and `stop_sequence` of the reply.
fn stop_reason(
    b: &ReplyBuilder<'_>,
    why: Option<StopReason>,
    stops: &[String],
) -> (&'static str, Value) {
    if let Some(k) = b.stop_index {
        let s = stops
            .get(k)
            .cloned()
            .map(Value::from)
            .unwrap_or(Value::Null);
        return ("stop_sequence", s);
    }
    let r = match b.finish_reason(why) {
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        _ => "end_turn",
    };
    (r, Value::Null)
}

/// The reply as it is built.
struct Running<'t> {
    b: ReplyBuilder<'t>,
    blocks: Blocks<'t>,
    usage: Usage,
    why: Option<StopReason>,
}

impl Running<'_> {
    fn token(&mut self, id: u32, out: &mut Vec<Value>) {
        let mut pieces = Vec::new();
        self.b.push(id, &mut pieces);
        for p in &pieces {
            self.blocks.push(p, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<Value>) {
        let mut pieces = Vec::new();
        self.b.finish(&mut pieces);
        for p in &pieces {
            self.blocks.push(p, out);
        }
        self.blocks.finish(out);
    }

    fn final_usage(&mut self) -> Usage {
        self.usage.cached_tokens = self.usage.cached_tokens.min(self.usage.prompt_tokens);
        self.usage.completion_tokens = self.b.completion_tokens;
        self.usage.reasoning_tokens = self.b.reasoning_tokens;
        self.usage
    }
}

fn message(id: &str, model: &str, content: Vec<Value>, stop: (&str, Value), u: &Usage) -> Object {
    let (reason, seq) = stop;
    Object::new()
        .with("id", id)
        .with("type", "message")
        .with("role", "assistant")
        .with("model", model)
        .with("content", content)
        .with("stop_reason", (!reason.is_empty()).then_some(reason))
        .with("stop_sequence", seq)
        .with("usage", usage(u))
}

fn generate(
    server: &Server,
    out: &mut Responder<'_>,
    j: codec::MessagesJob,
    id: String,
) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let prompt_tokens = j.ids.len() - j.stub;
    let base = call_base(&j.ids).replacen("call_", "toolu_", 1);
    let job = Job {
        max_tokens: j.params.max_tokens.unwrap_or(1),
        settings: j.params.settings,
        logprobs: None,
        events: tx,
        ids: j.ids,
        think_budget: j.think_budget.map(Box::new),
        constraints: Box::new(j.params.constraints),
    };
    if server.queue.submit(job).is_err() {
        let e = ApiError::other(
            503,
            "overloaded_error",
            format!(
                "the server is busy: {} requests are waiting (--queue); retry shortly",
                server.queue.max_waiting
            ),
        );
        return refused(server, out, &e);
    }
    let stops = j.params.stop.clone();
    let mut r = Running {
        b: ReplyBuilder::new(&server.tok, Some(j.thinking), &stops, &server.end_ids, base),
        blocks: Blocks::new(&server.limits.sign_key),
        usage: Usage {
            prompt_tokens,
            ..Usage::default()
        },
        why: None,
    };
    let model = server.limits.model_id.as_str();
    if j.params.stream {
        return stream(server, out, &rx, &mut r, &id, model, &stops);
    }
    let mut events = Vec::new();
    loop {
        let Some(ev) = next(&rx, &mut || out.disconnected()) else {
            return Outcome::gone(r.final_usage());
        };
        match ev {
            Event::Started { cached } => r.usage.cached_tokens = cached,
            Event::Progress { .. } => {}
            Event::Token { id, .. } => {
                r.token(id, &mut events);
                if r.b.stopped {
                    break;
                }
            }
            Event::Done(why) => {
                r.why = Some(why);
                break;
            }
            Event::Failed(m) => return refused(server, out, &failed(&m)),
        }
    }
    r.finish(&mut events);
    let (mut content, mut json) = (Vec::new(), Vec::new());
    for e in &events {
        Blocks::apply(e, &mut content, &mut json);
    }
    let u = r.final_usage();
    let stop = stop_reason(&r.b, r.why, &stops);
    let body = Value::from(message(&id, model, content, stop, &u)).to_json();
    let mut o = Outcome::sent(out, server.json(200, body));
    o.usage = u;
    o
}

fn failed(message: &str) -> ApiError {
    ApiError::other(500, "server_error", format!("generation failed: {message}"))
}

fn stream(
    server: &Server,
    out: &mut Responder<'_>,
    rx: &mpsc::Receiver<Event>,
    r: &mut Running<'_>,
    id: &str,
    model: &str,
    stops: &[String],
) -> Outcome {
    let headers = server.sse_headers();
    // a failure before the job started is a plain error response
    let first = match next(rx, &mut || out.disconnected()) {
        Some(Event::Failed(m)) => return refused(server, out, &failed(&m)),
        Some(e) => e,
        None => return Outcome::gone(r.final_usage()),
    };
    let Ok(mut s) = out.stream(200, headers) else {
        return Outcome::gone(r.final_usage());
    };
    let send =
        |s: &mut Stream<'_>, evs: &[Value]| evs.iter().all(|v| s.chunk(&sse_event(v)).is_ok());
    let mut ev = Some(first);
    while let Some(e) = ev.take() {
        let mut evs = Vec::new();
        let mut end = false;
        let mut ok = true;
        match e {
            Event::Started { cached } => {
                r.usage.cached_tokens = cached;
                let u = r.final_usage();
                let m = message(id, model, Vec::new(), ("", Value::Null), &u);
                evs.push(
                    Object::new()
                        .with("type", "message_start")
                        .with("message", m)
                        .into(),
                );
            }
            Event::Progress { done, total } => {
                ok = s
                    .chunk(&encode::sse_comment(&format!("prefill {done}/{total}")))
                    .is_ok();
                evs.push(Object::new().with("type", "ping").into());
            }
            Event::Token { id, .. } => {
                r.token(id, &mut evs);
                end = r.b.stopped;
            }
            Event::Done(why) => {
                r.why = Some(why);
                end = true;
            }
            Event::Failed(m) => {
                let e = failed(&m);
                let _ = s.chunk(format!("event: error\ndata: {}\n\n", error_body(&e)).as_bytes());
                let _ = s.finish();
                let mut o = Outcome {
                    status: 500,
                    ..Outcome::default()
                };
                o.error = Some("server_error".into());
                return o;
            }
        }
        if !(ok && send(&mut s, &evs)) {
            return Outcome::gone(r.final_usage());
        }
        if end {
            break;
        }
        ev = next(rx, &mut || s.disconnected());
        if ev.is_none() {
            return Outcome::gone(r.final_usage());
        }
    }
    let mut evs = Vec::new();
    r.finish(&mut evs);
    let u = r.final_usage();
    let (reason, seq) = stop_reason(&r.b, r.why, stops);
    let d = Object::new()
        .with("stop_reason", reason)
        .with("stop_sequence", seq);
    evs.push(
        Object::new()
            .with("type", "message_delta")
            .with("delta", d)
            .with("usage", usage(&u))
            .into(),
    );
    evs.push(Object::new().with("type", "message_stop").into());
    send(&mut s, &evs);
    let _ = s.finish();
    Outcome {
        status: 200,
        usage: u,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(pieces: &[Piece]) -> Vec<Value> {
        let mut b = Blocks::new(b"key");
        let mut out = Vec::new();
        for p in pieces {
            b.push(p, &mut out);
        }
        b.finish(&mut out);
        out
    }

    /// Thinking, then text in two pieces, then a call: four blocks in order, the thinking
    /// signed, the call's arguments parsed into `input`.
    #[test]
    fn blocks_from_pieces() {
        let evs = events(&[
            Piece::Reasoning("Let me ".into()),
            Piece::Reasoning("check.".into()),
            Piece::Content("Check".into()),
            Piece::Content("ing.".into()),
            Piece::ToolCall {
                index: 0,
                id: "toolu_1_0".into(),
                name: "get_weather".into(),
                arguments: r#"{"city": "Paris"}"#.into(),
            },
        ]);
        let kinds: Vec<&str> = evs
            .iter()
            .map(|e| e.get("type").and_then(Value::as_str).unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
            ]
        );
        let (mut content, mut json) = (Vec::new(), Vec::new());
        for e in &evs {
            Blocks::apply(e, &mut content, &mut json);
        }
        assert_eq!(content.len(), 3);
        assert_eq!(
            content[0].get("thinking").and_then(Value::as_str),
            Some("Let me check.")
        );
        assert_eq!(
            content[0].get("signature").and_then(Value::as_str),
            Some(thinking_signature(b"key", "Let me check.").as_str())
        );
        assert_eq!(
            content[1].get("text").and_then(Value::as_str),
            Some("Checking.")
        );
        let input = content[2].get("input").unwrap();
        assert_eq!(input.get("city").and_then(Value::as_str), Some("Paris"));
        assert_eq!(
            content[2].get("id").and_then(Value::as_str),
            Some("toolu_1_0")
        );
    }

    #[test]
    fn sse_events_name_their_type() {
        let v: Value = Object::new().with("type", "ping").into();
        assert_eq!(sse_event(&v), b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
}
