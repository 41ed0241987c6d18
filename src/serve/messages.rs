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
use super::drive::{call_base, drive, seed_source, End, Face, Frames, Outcome, Reply};
use super::encode::Usage;
use super::reply::{Piece, TokenLogprob};
use super::server::{no_route, not_allowed, Server};
use crate::http::{Request, Responder, Response};
use crate::json::{Object, Value};

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
            let e = no_route(req, "/v1/messages, /v1/messages/count_tokens");
            return refused(server, out, &e);
        }
    };
    if req.method != "POST" {
        let e = not_allowed(req, "POST");
        return Outcome::refused(out, error_response(server, &e).header("Allow", "POST"), &e);
    }
    if let Err(e) = server.ready() {
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
    Outcome::refused(out, error_response(server, e), e)
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
        out.push(stop(i));
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
                out.push(stop(i));
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

/// `content_block_stop` of block `i`.
fn stop(i: usize) -> Value {
    Object::new()
        .with("type", "content_block_stop")
        .with("index", i)
        .into()
}

/// `content_block_delta` `d` of block `i`.
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
fn stop_reason(end: &End, stops: &[String]) -> (&'static str, Value) {
    if let Some(k) = end.stop_index {
        let s = stops
            .get(k)
            .cloned()
            .map(Value::from)
            .unwrap_or(Value::Null);
        return ("stop_sequence", s);
    }
    let r = match end.finish {
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        _ => "end_turn",
    };
    (r, Value::Null)
}

/// The `message` object: the whole reply, or (empty, no `stop_reason`) `message_start`'s.
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

/// The Messages encoding of a reply: the events of [`Blocks`], each framed with its
/// `event:` line; a whole reply applies the same events to its `content`.
struct MessagesFace<'s> {
    id: String,
    model: &'s str,
    stops: Vec<String>,
    blocks: Blocks<'s>,
    /// A whole reply's content and each block's collected `partial_json` ([`Blocks::apply`]).
    content: Vec<Value>,
    json: Vec<String>,
}

impl MessagesFace<'_> {
    fn send(&mut self, evs: Vec<Value>, out: &mut Frames) {
        for e in &evs {
            if out.streaming() {
                out.push(sse_event(e));
            } else {
                Blocks::apply(e, &mut self.content, &mut self.json);
            }
        }
    }
}

impl Face for MessagesFace<'_> {
    fn start(&mut self, u: &Usage, out: &mut Frames) {
        let m = message(&self.id, self.model, Vec::new(), ("", Value::Null), u);
        let e = Object::new()
            .with("type", "message_start")
            .with("message", m);
        out.push(sse_event(&e.into()));
    }

    fn progress(&mut self, out: &mut Frames) {
        out.push(sse_event(&Object::new().with("type", "ping").into()));
    }

    fn pieces(&mut self, pieces: &[Piece], _: Option<TokenLogprob>, out: &mut Frames) {
        let mut evs = Vec::new();
        for p in pieces {
            self.blocks.push(p, &mut evs);
        }
        self.send(evs, out);
    }

    fn finish(&mut self, end: &End, out: &mut Frames) {
        let mut evs = Vec::new();
        self.blocks.finish(&mut evs);
        let (reason, seq) = stop_reason(end, &self.stops);
        let d = Object::new()
            .with("stop_reason", reason)
            .with("stop_sequence", seq);
        evs.push(
            Object::new()
                .with("type", "message_delta")
                .with("delta", d)
                .with("usage", usage(&end.usage))
                .into(),
        );
        evs.push(Object::new().with("type", "message_stop").into());
        self.send(evs, out);
    }

    fn whole(&mut self, end: &End) -> String {
        let mut evs = Vec::new();
        self.blocks.finish(&mut evs);
        for e in &evs {
            Blocks::apply(e, &mut self.content, &mut self.json);
        }
        let content = std::mem::take(&mut self.content);
        let stop = stop_reason(end, &self.stops);
        Value::from(message(&self.id, self.model, content, stop, &end.usage)).to_json()
    }

    fn failed(&mut self, e: &ApiError, _: &Usage, out: &mut Frames) {
        out.push(format!("event: error\ndata: {}\n\n", error_body(e)).into_bytes());
    }

    fn refusal(&self, server: &Server, e: &ApiError) -> Response {
        error_response(server, e)
    }
}

fn generate(
    server: &Server,
    out: &mut Responder<'_>,
    j: codec::MessagesJob,
    id: String,
) -> Outcome {
    let mut face = MessagesFace {
        id,
        model: server.limits.model_id.as_str(),
        stops: j.params.stop.clone(),
        blocks: Blocks::new(&server.limits.sign_key),
        content: Vec::new(),
        json: Vec::new(),
    };
    let reply = Reply {
        call_base: call_base(&j.ids).replacen("call_", "toolu_", 1),
        ids: j.ids,
        stub: j.stub,
        chat: Some(j.thinking),
        params: j.params,
        think_budget: j.think_budget,
    };
    drive(server, out, reply, &mut face)
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
