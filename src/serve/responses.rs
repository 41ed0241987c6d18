//! The OpenAI Responses face of `k3 serve` (ENGINE.md §11): `POST /v1/responses`. The request
//! codec is [`api::responses`]; the job goes to the one scheduler like a chat completion, and
//! the reply — the same [`ReplyBuilder`] pieces — becomes output items: `reasoning` (its text
//! as one `reasoning_text` part), `message` (one `output_text` part), `function_call` (the
//! call's `call_id`, `name` and `arguments`) or, for a `custom` tool, `custom_tool_call` (its
//! `input`). The stream is the Responses events (`response.created`, `response.in_progress`,
//! `response.output_item.added` / `.done`, `response.content_part.added` / `.done`, the text,
//! reasoning and argument deltas, `response.completed` / `.incomplete` / `.failed`), each with
//! its `sequence_number` and `event:` line, no `[DONE]`; the whole reply's `output` is the
//! items of the same events' `response.output_item.done`, so the streamed reply and the whole
//! one agree by construction. Errors are in OpenAI's shape naming the field. A response with
//! `store` (the default) is kept with its conversation in a bounded in-memory [`Store`]:
//! `previous_response_id` puts that conversation before the new `input`, and
//! `GET /v1/responses/{id}` answers it; an unknown or evicted id is 404 naming it.

use super::api::responses::{self as codec, ResponsesJob};
use super::api::ApiError;
use super::drive::{call_base, drive, seed_source, End, Face, Frames, Outcome, Reply};
use super::encode::Usage;
use super::reply::{Piece, TokenLogprob};
use super::server::{no_route, not_allowed, unix_now, Server};
use super::store::STORE_MAX;
use crate::http::{Request, Responder, Response};
use crate::json::{Object, Value};

fn unknown_id(id: &str, field: &str) -> ApiError {
    let mut e = ApiError::invalid(
        field,
        format!("no stored response {id:?} (never stored with `store`, or evicted: the server keeps the last {STORE_MAX}, in memory)"),
    );
    e.status = 404;
    e
}

/// `input` as items (a string is one user message).
fn items_of(v: Option<&Value>) -> Vec<Value> {
    match v {
        Some(Value::String(s)) => vec![Object::new()
            .with("role", "user")
            .with("content", s.as_str())
            .into()],
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    }
}

/// Routes `POST /v1/responses` and `GET /v1/responses/{id}` (the key, the method, the model
/// loaded).
pub fn route(server: &Server, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
    if let Err(e) = server.authorized(req) {
        return refused(server, out, &e);
    }
    let path = req.path();
    if let Some(id) = path.strip_prefix("/v1/responses/") {
        if req.method != "GET" {
            let e = not_allowed(req, "GET");
            return Outcome::sent(out, server.error(&e).header("Allow", "GET"));
        }
        return match server.stored.get(id) {
            Some((_, r)) => Outcome::sent(out, server.json(200, r.to_json())),
            None => refused(server, out, &unknown_id(id, "id")),
        };
    }
    if path != "/v1/responses" {
        let e = no_route(req, "/v1/responses, /v1/responses/{id}");
        return refused(server, out, &e);
    }
    if req.method != "POST" {
        let e = not_allowed(req, "POST");
        return Outcome::refused(out, server.error(&e).header("Allow", "POST"), &e);
    }
    if let Err(e) = server.ready() {
        return refused(server, out, &e);
    }
    let mut store = None;
    let job = super::api::parse_body(&req.body).and_then(|mut o| {
        // a continuation: the stored conversation, then this input
        if let Some(prev) = o.remove("previous_response_id").filter(|v| !v.is_null()) {
            let Some(id) = prev.as_str() else {
                return Err(ApiError::invalid(
                    "previous_response_id",
                    "expected a string",
                ));
            };
            let (mut items, _) = server
                .stored
                .get(id)
                .ok_or_else(|| unknown_id(id, "previous_response_id"))?;
            items.extend(items_of(o.get("input")));
            o.insert("input", items);
        }
        if o.get("store").and_then(Value::as_bool) != Some(false) {
            store = Some(items_of(o.get("input")));
        }
        codec::responses_job(&o, &server.tok, &server.limits, &mut seed_source())
    });
    match job {
        Err(e) => refused(server, out, &e),
        Ok(j) => {
            for t in &j.built_in {
                crate::sayln!(
                    "k3 serve: req-{n} POST /v1/responses: a built-in tool of type {t:?} accepted and not offered (k3 runs no hosted tools)"
                );
            }
            generate(server, out, j, n, store)
        }
    }
}

fn refused(server: &Server, out: &mut Responder<'_>, e: &ApiError) -> Outcome {
    Outcome::refused(out, server.error(e), e)
}

/// The open output item: its index, id and kind, and its text so far.
struct Open {
    index: usize,
    id: String,
    kind: &'static str,
    text: String,
}

/// The output items of a reply as Responses events: [`Items::push`] turns pieces into
/// `response.output_item.*`, `response.content_part.*` and delta events; the whole reply's
/// `output` is the `item` of each `response.output_item.done` ([`Items::output`]).
pub struct Items<'c> {
    base: String,
    /// The signing key when reasoning items carry `encrypted_content`.
    encrypt: Option<&'c [u8]>,
    custom: &'c [String],
    open: Option<Open>,
    next: usize,
}

fn ev(kind: &str) -> Object {
    Object::new().with("type", kind)
}

impl<'c> Items<'c> {
    /// No item yet; `base` (the request's hash) makes the item ids reproducible; calls of the
    /// `custom` tools become `custom_tool_call` items.
    pub fn new(base: &str, custom: &'c [String], encrypt: Option<&'c [u8]>) -> Items<'c> {
        Items {
            base: base.to_string(),
            encrypt,
            custom,
            open: None,
            next: 0,
        }
    }

    fn item_id(&self, prefix: &str, i: usize) -> String {
        format!("{prefix}_{}_{i}", self.base)
    }

    fn part(kind: &str, text: &str) -> Object {
        let p = Object::new().with("type", kind).with("text", text);
        if kind == "output_text" {
            p.with("annotations", Vec::<Value>::new())
        } else {
            p
        }
    }

    fn item(o: &Open, status: &str) -> Object {
        match o.kind {
            "reasoning" => Object::new()
                .with("type", "reasoning")
                .with("id", o.id.as_str())
                .with("summary", Vec::<Value>::new())
                .with(
                    "content",
                    vec![Value::from(Self::part("reasoning_text", &o.text))],
                )
                .with("status", status),
            _ => Object::new()
                .with("type", "message")
                .with("id", o.id.as_str())
                .with("role", "assistant")
                .with("status", status)
                .with(
                    "content",
                    vec![Value::from(Self::part("output_text", &o.text))],
                ),
        }
    }

    fn close(&mut self, out: &mut Vec<Object>) {
        let Some(o) = self.open.take() else {
            return;
        };
        let (part, done) = match o.kind {
            "reasoning" => ("reasoning_text", "response.reasoning_text.done"),
            _ => ("output_text", "response.output_text.done"),
        };
        let mut d = ev(done)
            .with("item_id", o.id.as_str())
            .with("output_index", o.index)
            .with("content_index", 0u64)
            .with("text", o.text.as_str());
        if part == "output_text" {
            d.insert("logprobs", Vec::<Value>::new());
        }
        out.push(d);
        out.push(
            ev("response.content_part.done")
                .with("item_id", o.id.as_str())
                .with("output_index", o.index)
                .with("content_index", 0u64)
                .with("part", Self::part(part, &o.text)),
        );
        let mut item = Self::item(&o, "completed");
        if let (Some(key), "reasoning") = (self.encrypt, o.kind) {
            item.insert("encrypted_content", codec::encrypted_content(key, &o.text));
        }
        out.push(
            ev("response.output_item.done")
                .with("output_index", o.index)
                .with("item", item),
        );
    }

    /// The events of one piece of the reply.
    pub fn push(&mut self, p: &Piece, out: &mut Vec<Object>) {
        let (kind, text) = match p {
            Piece::Reasoning(t) => ("reasoning", t),
            Piece::Content(t) => ("message", t),
            Piece::ToolCall {
                id,
                name,
                arguments,
                ..
            } => {
                self.close(out);
                self.call(id, name, arguments, out);
                return;
            }
        };
        if text.is_empty() {
            return;
        }
        if self.open.as_ref().is_none_or(|o| o.kind != kind) {
            self.close(out);
            let index = self.next;
            self.next += 1;
            let o = Open {
                index,
                id: self.item_id(if kind == "reasoning" { "rs" } else { "msg" }, index),
                kind,
                text: String::new(),
            };
            let mut added = Self::item(&o, "in_progress");
            let part = if kind == "reasoning" {
                "reasoning_text"
            } else {
                "output_text"
            };
            added.insert("content", Vec::<Value>::new());
            out.push(
                ev("response.output_item.added")
                    .with("output_index", index)
                    .with("item", added),
            );
            out.push(
                ev("response.content_part.added")
                    .with("item_id", o.id.as_str())
                    .with("output_index", index)
                    .with("content_index", 0u64)
                    .with("part", Self::part(part, "")),
            );
            self.open = Some(o);
        }
        let Some(o) = self.open.as_mut() else {
            return;
        };
        o.text.push_str(text);
        let mut d = ev(if kind == "reasoning" {
            "response.reasoning_text.delta"
        } else {
            "response.output_text.delta"
        })
        .with("item_id", o.id.as_str())
        .with("output_index", o.index)
        .with("content_index", 0u64)
        .with("delta", text.as_str());
        if kind == "message" {
            d.insert("logprobs", Vec::<Value>::new());
        }
        out.push(d);
    }

    /// A whole call: its item added, its arguments (or a custom tool's input) as one delta,
    /// done, and the item done.
    fn call(&mut self, call_id: &str, name: &str, arguments: &str, out: &mut Vec<Object>) {
        let index = self.next;
        self.next += 1;
        let custom = self.custom.iter().any(|c| c == name);
        let (prefix, kind, key, delta, done) = if custom {
            (
                "ctc",
                "custom_tool_call",
                "input",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
            )
        } else {
            (
                "fc",
                "function_call",
                "arguments",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
            )
        };
        // a custom tool's call is its one string argument `input`
        let value = if custom {
            crate::json::parse(arguments.as_bytes())
                .ok()
                .and_then(|v| v.get("input").and_then(Value::as_str).map(String::from))
                .unwrap_or_else(|| arguments.to_string())
        } else {
            arguments.to_string()
        };
        let id = self.item_id(prefix, index);
        let item = |v: &str, status: &str| {
            Object::new()
                .with("type", kind)
                .with("id", id.as_str())
                .with("call_id", call_id)
                .with("name", name)
                .with(key, v)
                .with("status", status)
        };
        out.push(
            ev("response.output_item.added")
                .with("output_index", index)
                .with("item", item("", "in_progress")),
        );
        out.push(
            ev(delta)
                .with("item_id", id.as_str())
                .with("output_index", index)
                .with("delta", value.as_str()),
        );
        let mut d = ev(done)
            .with("item_id", id.as_str())
            .with("output_index", index)
            .with(key, value.as_str());
        if !custom {
            d.insert("name", name);
        }
        out.push(d);
        out.push(
            ev("response.output_item.done")
                .with("output_index", index)
                .with("item", item(&value, "completed")),
        );
    }

    /// The reply ended: the open item's events end it.
    pub fn finish(&mut self, out: &mut Vec<Object>) {
        self.close(out);
    }

    /// The output items the events add up to (each `response.output_item.done`'s item).
    pub fn output(events: &[Object]) -> Vec<Value> {
        events
            .iter()
            .filter(|e| e.get("type").and_then(Value::as_str) == Some("response.output_item.done"))
            .filter_map(|e| e.get("item").cloned())
            .collect()
    }
}

/// `usage` of a Responses reply: `input_tokens` count the whole prompt (as OpenAI does), the
/// part read from a held snapshot in `input_tokens_details.cached_tokens`.
fn usage(u: &Usage) -> Object {
    Object::new()
        .with("input_tokens", u.prompt_tokens)
        .with(
            "input_tokens_details",
            Object::new().with("cached_tokens", u.cached_tokens),
        )
        .with("output_tokens", u.completion_tokens)
        .with(
            "output_tokens_details",
            Object::new().with("reasoning_tokens", u.reasoning_tokens),
        )
        .with("total_tokens", u.prompt_tokens + u.completion_tokens)
}

/// What a response object echoes of its request.
struct Echo<'a> {
    id: String,
    created: u64,
    model: &'a str,
    max_output_tokens: Option<u64>,
    temperature: f64,
    top_p: f64,
    effort: Option<String>,
    store: bool,
}

fn response(
    e: &Echo<'_>,
    status: &str,
    output: Vec<Value>,
    u: Option<&Usage>,
    error: Option<&ApiError>,
) -> Object {
    let incomplete =
        (status == "incomplete").then(|| Object::new().with("reason", "max_output_tokens"));
    let err = error.map(|x| {
        Object::new()
            .with("code", "server_error")
            .with("message", x.message.as_str())
    });
    Object::new()
        .with("id", e.id.as_str())
        .with("object", "response")
        .with("created_at", e.created)
        .with("status", status)
        .with("model", e.model)
        .with("output", output)
        .with("error", err)
        .with("incomplete_details", incomplete)
        .with("instructions", Value::Null)
        .with("max_output_tokens", e.max_output_tokens)
        .with("parallel_tool_calls", true)
        .with("previous_response_id", Value::Null)
        .with(
            "reasoning",
            Object::new()
                .with("effort", e.effort.as_deref())
                .with("summary", Value::Null),
        )
        .with("store", e.store)
        .with("temperature", e.temperature)
        .with("top_p", e.top_p)
        .with("tool_choice", "auto")
        .with("tools", Vec::<Value>::new())
        .with("truncation", "disabled")
        .with(
            "text",
            Object::new().with("format", Object::new().with("type", "text")),
        )
        .with("metadata", Object::new())
        .with("usage", u.map(usage))
}

/// `completed`, or `incomplete` when the reply ran out of `max_output_tokens`.
fn status(end: &End) -> &'static str {
    match end.finish {
        "length" => "incomplete",
        _ => "completed",
    }
}

/// Stores a finished response (when the request asked to) under its id.
fn keep(server: &Server, store: Option<Vec<Value>>, resp: &Object) {
    let Some(mut items) = store else {
        return;
    };
    if let Some(Value::Array(o)) = resp.get("output") {
        items.extend(o.iter().cloned());
    }
    let id = resp.get("id").and_then(Value::as_str).unwrap_or("");
    server.stored.put(id, items, Value::from(resp.clone()));
}

/// The Responses encoding of a reply: the events of [`Items`], each with its
/// `sequence_number` and `event:` line; the output so far is the items done.
struct ResponsesFace<'s> {
    server: &'s Server,
    echo: Echo<'s>,
    items: Items<'s>,
    /// The conversation to keep with the response (`store`).
    store: Option<Vec<Value>>,
    /// The output items done so far.
    output: Vec<Value>,
    seq: u64,
}

impl ResponsesFace<'_> {
    fn send(&mut self, evs: Vec<Object>, out: &mut Frames) {
        self.output.extend(Items::output(&evs));
        for e in evs {
            self.frame(e, out);
        }
    }

    /// One SSE event of the Responses stream: `event: TYPE` then `data: JSON` (the object
    /// with its `sequence_number`).
    fn frame(&mut self, e: Object, out: &mut Frames) {
        if out.streaming() {
            let e = e.with("sequence_number", self.seq);
            self.seq += 1;
            out.push(super::messages::sse_event(&Value::from(e)));
        }
    }

    /// The response at its end (kept when the request asked to store it).
    fn done(&mut self, end: &End) -> Object {
        let mut evs = Vec::new();
        self.items.finish(&mut evs);
        self.output.extend(Items::output(&evs));
        let output = std::mem::take(&mut self.output);
        let resp = response(&self.echo, status(end), output, Some(&end.usage), None);
        keep(self.server, self.store.take(), &resp);
        resp
    }
}

impl Face for ResponsesFace<'_> {
    fn start(&mut self, _: &Usage, out: &mut Frames) {
        let resp = response(&self.echo, "in_progress", Vec::new(), None, None);
        self.frame(ev_with("response.created", resp.clone()), out);
        self.frame(ev_with("response.in_progress", resp), out);
    }

    fn pieces(&mut self, pieces: &[Piece], _: Option<TokenLogprob>, out: &mut Frames) {
        let mut evs = Vec::new();
        for p in pieces {
            self.items.push(p, &mut evs);
        }
        self.send(evs, out);
    }

    fn finish(&mut self, end: &End, out: &mut Frames) {
        let mut evs = Vec::new();
        self.items.finish(&mut evs);
        self.send(evs, out);
        let resp = self.done(end);
        let kind = if status(end) == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.frame(ev_with(kind, resp), out);
    }

    fn whole(&mut self, end: &End) -> String {
        Value::from(self.done(end)).to_json()
    }

    fn failed(&mut self, e: &ApiError, usage: &Usage, out: &mut Frames) {
        let output = std::mem::take(&mut self.output);
        let resp = response(&self.echo, "failed", output, Some(usage), Some(e));
        self.frame(ev_with("response.failed", resp), out);
    }

    fn refusal(&self, server: &Server, e: &ApiError) -> Response {
        server.error(e)
    }
}

fn generate(
    server: &Server,
    out: &mut Responder<'_>,
    j: ResponsesJob,
    n: u64,
    store: Option<Vec<Value>>,
) -> Outcome {
    let base = call_base(&j.ids);
    let hash = base.trim_start_matches("call_").to_string();
    let mut face = ResponsesFace {
        server,
        echo: Echo {
            id: format!("resp_k3_{n}"),
            created: unix_now(),
            model: server.limits.model_id.as_str(),
            max_output_tokens: j.params.max_tokens,
            temperature: j.params.settings.temperature,
            top_p: j.params.settings.top_p,
            effort: j.effort.clone(),
            store: store.is_some(),
        },
        items: Items::new(
            &hash,
            &j.custom,
            j.encrypted.then_some(server.limits.sign_key.as_slice()),
        ),
        store,
        output: Vec::new(),
        seq: 0,
    };
    let reply = Reply {
        ids: j.ids,
        stub: j.stub,
        chat: Some(j.thinking),
        params: j.params,
        think_budget: None,
        call_base: base,
    };
    drive(server, out, reply, &mut face)
}

fn ev_with(kind: &str, resp: Object) -> Object {
    ev(kind).with("response", resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reasoning, text in two pieces, a call and a custom call: four items in order, with
    /// their texts, and the custom tool's input unwrapped.
    #[test]
    fn items_from_pieces() {
        let custom = vec!["apply_patch".to_string()];
        let mut it = Items::new("abc", &custom, None);
        let mut evs = Vec::new();
        for p in [
            Piece::Reasoning("Let me ".into()),
            Piece::Reasoning("check.".into()),
            Piece::Content("Check".into()),
            Piece::Content("ing.".into()),
            Piece::ToolCall {
                index: 0,
                id: "call_abc_0".into(),
                name: "get_weather".into(),
                arguments: r#"{"city": "Paris"}"#.into(),
            },
            Piece::ToolCall {
                index: 1,
                id: "call_abc_1".into(),
                name: "apply_patch".into(),
                arguments: r#"{"input": "*** Begin"}"#.into(),
            },
        ] {
            it.push(&p, &mut evs);
        }
        it.finish(&mut evs);
        let out = Items::output(&evs);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].get("id").and_then(Value::as_str), Some("rs_abc_0"));
        let text = |v: &Value| {
            v.get("content").and_then(|c| {
                c.as_array()?
                    .first()?
                    .get("text")?
                    .as_str()
                    .map(String::from)
            })
        };
        assert_eq!(text(&out[0]).as_deref(), Some("Let me check."));
        assert_eq!(text(&out[1]).as_deref(), Some("Checking."));
        assert_eq!(
            out[2].get("arguments").and_then(Value::as_str),
            Some(r#"{"city": "Paris"}"#)
        );
        assert_eq!(
            out[3].get("type").and_then(Value::as_str),
            Some("custom_tool_call")
        );
        assert_eq!(
            out[3].get("input").and_then(Value::as_str),
            Some("*** Begin")
        );
    }
}
