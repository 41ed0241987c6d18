//! One generation request end to end (ENGINE.md §11): decode the body, queue the job (503
//! with `Retry-After` when the queue is full), then turn the scheduler's events into the
//! response — whole, or as Server-Sent Events in the OpenAI chunk shape with prefill progress
//! as comment lines. A client that disconnects, or a `stop` string, drops the job's receiver,
//! which frees its slot at the next step.

use super::api::{self, ApiError, GenParams};
use super::encode::{self, Head, TextOffset, Usage};
use super::reply::{Piece, ReplyBuilder, TokenLogprob};
use super::sched::{Event, Job};
use super::server::{unix_now, Server};
use crate::generate::sample::os_seed;
use crate::generate::stop::StopReason;
use crate::http::{Request, Responder, Response, Stream};
use crate::json::Value;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// What a handler did, for the log line and the metrics.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The status sent.
    pub status: u16,
    /// The request's token counts.
    pub usage: Usage,
    /// The refused field or error type (never prompt text).
    pub error: Option<String>,
}

impl Outcome {
    /// Sends `r` and reports its status.
    pub fn sent(out: &mut Responder<'_>, r: Response) -> Outcome {
        let status = r.status;
        let _ = out.send(r);
        Outcome {
            status,
            ..Outcome::default()
        }
    }

    /// The client went away before the response was complete (logged as 499 with the
    /// tokens made for it so far).
    pub(super) fn gone(usage: Usage) -> Outcome {
        Outcome {
            status: 499,
            usage,
            error: Some("client disconnected".into()),
        }
    }

    fn refused(server: &Server, out: &mut Responder<'_>, e: &ApiError) -> Outcome {
        let mut o = Outcome::sent(out, server.error(e));
        o.error = Some(e.param.clone().unwrap_or_else(|| e.kind.to_string()));
        o
    }
}

/// The kind of reply: a chat turn (thinking on or off; the generation stub's length) or a
/// plain completion.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Chat { thinking: bool, stub: usize },
    Completion,
}

pub(super) fn seed_source() -> impl FnMut() -> u64 {
    // a sampled request without a seed: one from the OS (ENGINE.md §8 step 7)
    || os_seed().unwrap_or(0x9E37_79B9_7F4A_7C15)
}

/// `POST /v1/chat/completions`.
pub fn chat(server: &Server, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
    let job = api::parse_body(&req.body)
        .and_then(|o| api::chat_job(&o, &server.tok, &server.limits, &mut seed_source()));
    match job {
        Err(e) => Outcome::refused(server, out, &e),
        Ok(j) => {
            let kind = Kind::Chat {
                thinking: j.thinking,
                stub: j.stub,
            };
            generate(
                server,
                out,
                j.ids,
                j.params,
                kind,
                format!("chatcmpl-k3-{n}"),
            )
        }
    }
}

/// `POST /v1/completions`.
pub fn completion(server: &Server, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
    let job = api::parse_body(&req.body)
        .and_then(|o| api::completion_job(&o, &server.tok, &server.limits, &mut seed_source()));
    match job {
        Err(e) => Outcome::refused(server, out, &e),
        Ok(j) => generate(
            server,
            out,
            j.ids,
            j.params,
            Kind::Completion,
            format!("cmpl-k3-{n}"),
        ),
    }
}

/// The tool-call id prefix: a function of the prompt ids (reproducible).
pub(super) fn call_base(ids: &[u32]) -> String {
    let mut h = k3_kernels::Fnv1a64::new();
    for id in ids {
        h.update(&id.to_le_bytes());
    }
    format!("call_{:016x}", h.finish())
}

/// The reply as it is built: pieces, logprobs, usage; `emit` gets each increment.
struct Running<'t> {
    b: ReplyBuilder<'t>,
    kind: Kind,
    params: GenParams,
    usage: Usage,
    why: Option<StopReason>,
}

fn generate(
    server: &Server,
    out: &mut Responder<'_>,
    ids: Vec<u32>,
    params: GenParams,
    kind: Kind,
    id: String,
) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let prompt_tokens = match kind {
        Kind::Chat { stub, .. } => ids.len().saturating_sub(stub),
        Kind::Completion => ids.len(),
    };
    let base = call_base(&ids);
    let job = Job {
        max_tokens: params
            .max_tokens
            .unwrap_or(server.limits.ctx.saturating_sub(ids.len()) as u64),
        settings: params.settings,
        logprobs: params.logprobs.then_some(params.top_logprobs),
        events: tx,
        ids,
        think_budget: None,
        constraints: Box::new(params.constraints.clone()),
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
        return Outcome::refused(server, out, &e);
    }
    let chat = match kind {
        Kind::Chat { thinking, .. } => Some(thinking),
        Kind::Completion => None,
    };
    let mut r = Running {
        b: ReplyBuilder::new(&server.tok, chat, &params.stop, &server.end_ids, base),
        kind,
        usage: Usage {
            prompt_tokens,
            ..Usage::default()
        },
        params,
        why: None,
    };
    let head = Head {
        id,
        created: unix_now(),
        model: server.limits.model_id.clone(),
    };
    if r.params.stream {
        stream(server, out, &rx, &mut r, &head)
    } else {
        whole(server, out, &rx, &mut r, &head)
    }
}

/// Longest wait for an event before the client is looked at anyway (a long prefill chunk).
const QUIET: Duration = Duration::from_millis(250);

/// The next event; `None` when the client is gone (`gone()`) or the scheduler went away.
/// The client is looked at after every event, not only after `QUIET` without one: during
/// decode an event comes every step, and a handler that looked only on silence never saw a
/// non-streaming client leave, so its slot was held to the last token. Dropping the receiver
/// (returning `None`) is what frees the slot, at the scheduler's next send.
pub(super) fn next(rx: &Receiver<Event>, gone: &mut dyn FnMut() -> bool) -> Option<Event> {
    loop {
        match rx.recv_timeout(QUIET) {
            Ok(_) if gone() => return None,
            Ok(e) => return Some(e),
            Err(RecvTimeoutError::Timeout) if !gone() => continue,
            Err(_) => return None,
        }
    }
}

impl Running<'_> {
    /// Reads one token with its logprob (the scheduler's); returns its pieces and the
    /// logprob when the token counts in the reply.
    fn token(&mut self, id: u32, lp: Option<TokenLogprob>) -> (Vec<Piece>, Option<TokenLogprob>) {
        let mut pieces = Vec::new();
        let before = self.b.completion_tokens;
        self.b.push(id, &mut pieces);
        let counted = self.b.completion_tokens > before;
        (pieces, lp.filter(|_| counted))
    }

    fn finish_reason(&self) -> &'static str {
        self.b.finish_reason(self.why)
    }

    fn final_usage(&mut self) -> Usage {
        // the stub's ids may be among the reused ones; they are not prompt tokens
        self.usage.cached_tokens = self.usage.cached_tokens.min(self.usage.prompt_tokens);
        self.usage.completion_tokens = self.b.completion_tokens;
        self.usage.reasoning_tokens = match self.kind {
            Kind::Chat { .. } => self.b.reasoning_tokens,
            Kind::Completion => 0,
        };
        self.usage
    }
}

impl Running<'_> {
    /// A 500 for a job the scheduler failed or cancelled (a read failure, the shutdown's
    /// drain bound), logged with the ids the request had used: it said `prompt=0
    /// completion=0` for a request cancelled mid-reply.
    fn failed(&mut self, server: &Server, out: &mut Responder<'_>, message: &str) -> Outcome {
        let mut o = Outcome::refused(server, out, &failed(message));
        o.usage = self.final_usage();
        o
    }
}

fn failed(message: &str) -> ApiError {
    ApiError::other(500, "server_error", format!("generation failed: {message}"))
}

/// A non-streaming response: every event, then one body.
fn whole(
    server: &Server,
    out: &mut Responder<'_>,
    rx: &Receiver<Event>,
    r: &mut Running<'_>,
    head: &Head,
) -> Outcome {
    let mut pieces = Vec::new();
    let mut lps = Vec::new();
    loop {
        let Some(ev) = next(rx, &mut || out.disconnected()) else {
            return Outcome::gone(r.final_usage());
        };
        match ev {
            Event::Started { cached } => r.usage.cached_tokens = cached,
            Event::Progress { .. } => {}
            Event::Token { id, logprob } => {
                let (p, lp) = r.token(id, logprob);
                pieces.extend(p);
                lps.extend(lp);
                if r.b.stopped {
                    break;
                }
            }
            Event::Done(why) => {
                r.why = Some(why);
                break;
            }
            Event::Failed(m) => return r.failed(server, out, &m),
        }
    }
    r.b.finish(&mut pieces);
    let usage = r.final_usage();
    let finish = r.finish_reason();
    let body = match r.kind {
        Kind::Chat { .. } => {
            let lp = r
                .params
                .logprobs
                .then(|| encode::chat_logprobs(&server.tok, &lps));
            encode::chat_completion(head, &pieces, finish, lp, &usage)
        }
        Kind::Completion => {
            let text: String = pieces.iter().map(piece_text).collect();
            let lp = r.params.logprobs.then(|| {
                encode::completion_logprobs(&server.tok, &lps, &mut TextOffset::default())
            });
            encode::completion(head, &text, Some(finish), lp, Some(&usage), false)
        }
    };
    let mut o = Outcome::sent(out, server.json(200, body.to_json()));
    o.usage = usage;
    o
}

fn piece_text(p: &Piece) -> &str {
    match p {
        Piece::Content(t) | Piece::Reasoning(t) => t,
        Piece::ToolCall { .. } => "",
    }
}

/// A streamed response: SSE chunks as the events come.
fn stream(
    server: &Server,
    out: &mut Responder<'_>,
    rx: &Receiver<Event>,
    r: &mut Running<'_>,
    head: &Head,
) -> Outcome {
    let headers = server.sse_headers();
    // the first event says whether the job started: a failure before it is a plain 500
    let first = match next(rx, &mut || out.disconnected()) {
        Some(Event::Failed(m)) => return r.failed(server, out, &m),
        Some(e) => e,
        None => return Outcome::gone(r.final_usage()),
    };
    let Ok(mut s) = out.stream(200, headers) else {
        return Outcome::gone(r.final_usage());
    };
    let mut text_at = TextOffset::default();
    let send = |s: &mut Stream<'_>, v: Value| s.chunk(&encode::sse(&v)).is_ok();
    let mut ev = Some(first);
    while let Some(e) = ev.take() {
        let ok = match e {
            Event::Started { cached } => {
                r.usage.cached_tokens = cached;
                match r.kind {
                    Kind::Chat { .. } => {
                        let d = encode::message(&[], true, true);
                        send(&mut s, encode::chat_chunk(head, Some(d), None, None, None))
                    }
                    Kind::Completion => true,
                }
            }
            Event::Progress { done, total } => s
                .chunk(&encode::sse_comment(&format!("prefill {done}/{total}")))
                .is_ok(),
            Event::Token { id, logprob } => {
                let (p, lp) = r.token(id, logprob);
                let ok = emit(server, &mut s, r, head, &p, lp, &mut text_at);
                if r.b.stopped {
                    break;
                }
                ok
            }
            Event::Done(why) => {
                r.why = Some(why);
                break;
            }
            Event::Failed(m) => {
                let e = failed(&m);
                let _ = s.chunk(format!("data: {}\n\n", e.body()).as_bytes());
                let _ = s.chunk(encode::SSE_DONE);
                let _ = s.finish();
                let mut o = Outcome {
                    status: 500,
                    usage: r.final_usage(),
                    ..Outcome::default()
                };
                o.error = Some("server_error".into());
                return o;
            }
        };
        if !ok {
            return Outcome::gone(r.final_usage());
        }
        ev = next(rx, &mut || s.disconnected());
        if ev.is_none() {
            return Outcome::gone(r.final_usage());
        }
    }
    let mut tail = Vec::new();
    r.b.finish(&mut tail);
    emit(server, &mut s, r, head, &tail, None, &mut text_at);
    let usage = r.final_usage();
    let finish = r.finish_reason();
    let last = match r.kind {
        Kind::Chat { .. } => {
            encode::chat_chunk(head, Some(Default::default()), Some(finish), None, None)
        }
        Kind::Completion => encode::completion(head, "", Some(finish), None, None, false),
    };
    send(&mut s, last);
    if r.params.include_usage {
        let u = match r.kind {
            Kind::Chat { .. } => encode::chat_chunk(head, None, None, None, Some(&usage)),
            Kind::Completion => encode::completion(head, "", None, None, Some(&usage), true),
        };
        send(&mut s, u);
    }
    let _ = s.chunk(encode::SSE_DONE);
    let _ = s.finish();
    Outcome {
        status: 200,
        usage,
        error: None,
    }
}

/// Writes the chunk of one increment (nothing when it is empty and has no logprob).
fn emit(
    server: &Server,
    s: &mut Stream<'_>,
    r: &Running<'_>,
    head: &Head,
    pieces: &[Piece],
    lp: Option<TokenLogprob>,
    text_at: &mut TextOffset,
) -> bool {
    if pieces.is_empty() && lp.is_none() {
        return true;
    }
    let lps: Vec<TokenLogprob> = lp.into_iter().collect();
    let v = match r.kind {
        Kind::Chat { .. } => {
            let lpv = (!lps.is_empty()).then(|| encode::chat_logprobs(&server.tok, &lps));
            let d = encode::message(pieces, true, false);
            encode::chat_chunk(head, Some(d), None, lpv, None)
        }
        Kind::Completion => {
            let text: String = pieces.iter().map(piece_text).collect();
            let lpv =
                (!lps.is_empty()).then(|| encode::completion_logprobs(&server.tok, &lps, text_at));
            encode::completion(head, &text, None, lpv, None, false)
        }
    };
    s.chunk(&encode::sse(&v)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bug: `next` looked at the client only after `QUIET` without an event, and during
    /// decode an event comes every step, so a gone client was never noticed. Events every
    /// 5 ms and a client gone from the start: the first event must end the wait.
    #[test]
    fn a_gone_client_is_noticed_at_the_next_event_however_busy() {
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            for id in 0..400 {
                let tok = Event::Token { id, logprob: None };
                if tx.send(tok).is_err() {
                    return id;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            400
        });
        let mut asked = 0;
        assert!(next(&rx, &mut || {
            asked += 1;
            true
        })
        .is_none());
        assert_eq!(asked, 1, "looked at the client once, at the first event");
        drop(rx);
        // the receiver is gone: the sender's next send fails (what frees a scheduler slot)
        assert!(sender.join().unwrap() < 400);
    }

    /// A client still there gets every event.
    #[test]
    fn events_pass_while_the_client_is_there() {
        let (tx, rx) = mpsc::channel();
        tx.send(Event::Started { cached: 0 }).unwrap();
        tx.send(Event::Done(StopReason::Length)).unwrap();
        assert!(matches!(
            next(&rx, &mut || false),
            Some(Event::Started { cached: 0 })
        ));
        assert!(matches!(
            next(&rx, &mut || false),
            Some(Event::Done(StopReason::Length))
        ));
        drop(tx);
        assert!(
            next(&rx, &mut || false).is_none(),
            "the scheduler went away"
        );
    }
}
