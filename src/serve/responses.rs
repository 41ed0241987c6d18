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
use super::encode::{self, Usage};
use super::reply::{Piece, ReplyBuilder};
use super::run::{call_base, next, seed_source, Outcome};
use super::sched::{Event, Job};
use super::server::Server;
use super::store::STORE_MAX;
use crate::generate::stop::StopReason;
use crate::http::{Request, Responder, Stream};
use crate::json::{Object, Value};
use std::sync::atomic::Ordering;
use std::sync::mpsc;

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
            let e = ApiError::other(
                405,
                "invalid_request_error",
                format!("{} {path}: method not allowed; use GET", req.method),
            );
            return Outcome::sent(out, server.error(&e).header("Allow", "GET"));
        }
        return match server.stored.get(id) {
            Some((_, r)) => Outcome::sent(out, server.json(200, r.to_json())),
            None => refused(server, out, &unknown_id(id, "id")),
        };
    }
    if path != "/v1/responses" {
        let e = ApiError::other(
            404,
            "not_found_error",
            format!(
                "{} {path}: no such route (routes: /v1/responses, /v1/responses/{{id}})",
                req.method
            ),
        );
        return refused(server, out, &e);
    }
    if req.method != "POST" {
        let e = ApiError::other(
            405,
            "invalid_request_error",
            format!("{} {path}: method not allowed; use POST", req.method),
        );
        let mut o = Outcome::sent(out, server.error(&e).header("Allow", "POST"));
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
    let mut o = Outcome::sent(out, server.error(e));
    o.error = Some(e.param.clone().unwrap_or_else(|| e.kind.to_string()));
    o
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
fn status(b: &ReplyBuilder<'_>, why: Option<StopReason>) -> &'static str {
    match b.finish_reason(why) {
        "length" => "incomplete",
        _ => "completed",
    }
}

/// The reply as it is built.
struct Running<'t> {
    b: ReplyBuilder<'t>,
    items: Items<'t>,
    usage: Usage,
    why: Option<StopReason>,
}

impl Running<'_> {
    fn token(&mut self, id: u32, out: &mut Vec<Object>) {
        let mut pieces = Vec::new();
        self.b.push(id, &mut pieces);
        for p in &pieces {
            self.items.push(p, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<Object>) {
        let mut pieces = Vec::new();
        self.b.finish(&mut pieces);
        for p in &pieces {
            self.items.push(p, out);
        }
        self.items.finish(out);
    }

    fn final_usage(&mut self) -> Usage {
        self.usage.cached_tokens = self.usage.cached_tokens.min(self.usage.prompt_tokens);
        self.usage.completion_tokens = self.b.completion_tokens;
        self.usage.reasoning_tokens = self.b.reasoning_tokens;
        self.usage
    }
}

fn failed(message: &str) -> ApiError {
    ApiError::other(500, "server_error", format!("generation failed: {message}"))
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

fn generate(
    server: &Server,
    out: &mut Responder<'_>,
    j: ResponsesJob,
    n: u64,
    store: Option<Vec<Value>>,
) -> Outcome {
    let stored = store.is_some();
    let (tx, rx) = mpsc::channel();
    let prompt_tokens = j.ids.len() - j.stub;
    let base = call_base(&j.ids);
    let hash = base.trim_start_matches("call_").to_string();
    let echo = Echo {
        id: format!("resp_k3_{n}"),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: server.limits.model_id.as_str(),
        max_output_tokens: j.params.max_tokens,
        temperature: j.params.settings.temperature,
        top_p: j.params.settings.top_p,
        effort: j.effort.clone(),
        store: stored,
    };
    let job = Job {
        max_tokens: j.params.max_tokens.unwrap_or(1),
        settings: j.params.settings,
        logprobs: None,
        events: tx,
        ids: j.ids,
        think_budget: None,
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
    let mut r = Running {
        b: ReplyBuilder::new(&server.tok, Some(j.thinking), &[], &server.end_ids, base),
        items: Items::new(
            &hash,
            &j.custom,
            j.encrypted.then_some(server.limits.sign_key.as_slice()),
        ),
        usage: Usage {
            prompt_tokens,
            ..Usage::default()
        },
        why: None,
    };
    if j.params.stream {
        return stream(server, out, &rx, &mut r, &echo, store);
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
    let u = r.final_usage();
    let st = status(&r.b, r.why);
    let resp = response(&echo, st, Items::output(&events), Some(&u), None);
    keep(server, store, &resp);
    let body = Value::from(resp).to_json();
    let mut o = Outcome::sent(out, server.json(200, body));
    o.usage = u;
    o
}

/// One SSE event of the Responses stream: `event: TYPE` then `data: JSON` (the object with
/// its `sequence_number`).
fn sse(seq: &mut u64, e: Object) -> Vec<u8> {
    let e = e.with("sequence_number", *seq);
    *seq += 1;
    super::messages::sse_event(&Value::from(e))
}

fn stream(
    server: &Server,
    out: &mut Responder<'_>,
    rx: &mpsc::Receiver<Event>,
    r: &mut Running<'_>,
    echo: &Echo<'_>,
    store: Option<Vec<Value>>,
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
    let mut seq = 0u64;
    let mut all: Vec<Object> = Vec::new();
    let send = |s: &mut Stream<'_>, seq: &mut u64, evs: Vec<Object>| {
        evs.into_iter().all(|e| s.chunk(&sse(seq, e)).is_ok())
    };
    let mut ev = Some(first);
    while let Some(e) = ev.take() {
        let mut evs = Vec::new();
        let mut end = false;
        let mut ok = true;
        match e {
            Event::Started { cached } => {
                r.usage.cached_tokens = cached;
                let resp = response(echo, "in_progress", Vec::new(), None, None);
                evs.push(ev_with("response.created", resp.clone()));
                evs.push(ev_with("response.in_progress", resp));
            }
            Event::Progress { done, total } => {
                ok = s
                    .chunk(&encode::sse_comment(&format!("prefill {done}/{total}")))
                    .is_ok();
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
                let output = Items::output(&all);
                let resp = response(echo, "failed", output, Some(&r.final_usage()), Some(&e));
                let _ = s.chunk(&sse(&mut seq, ev_with("response.failed", resp)));
                let _ = s.finish();
                let mut o = Outcome {
                    status: 500,
                    ..Outcome::default()
                };
                o.error = Some("server_error".into());
                return o;
            }
        }
        all.extend(evs.iter().cloned());
        if !(ok && send(&mut s, &mut seq, evs)) {
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
    all.extend(evs.iter().cloned());
    let u = r.final_usage();
    let st = status(&r.b, r.why);
    let resp = response(echo, st, Items::output(&all), Some(&u), None);
    keep(server, store, &resp);
    evs.push(ev_with(
        if st == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        },
        resp,
    ));
    send(&mut s, &mut seq, evs);
    let _ = s.finish();
    Outcome {
        status: 200,
        usage: u,
        error: None,
    }
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
