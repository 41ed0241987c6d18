//! The one reply driver of every generation API (ENGINE.md §11): queue the job (503 with
//! `Retry-After` when the queue is full), then turn the scheduler's events into the response —
//! whole, or as Server-Sent Events with prefill progress as comment lines. What differs per
//! API is only its encoding, a [`Face`]: chat completions and completions ([`super::run`]),
//! Messages ([`super::messages`]) and Responses ([`super::responses`]) each implement it over
//! the same [`ReplyBuilder`] pieces, so the three faces share one loop, one reply parser and
//! one set of rules for a client that goes away (dropping the job's receiver, which frees its
//! slot at the next step) or a job that fails.

use super::api::{ApiError, GenParams};
use super::encode::{self, Usage};
use super::reply::{Piece, ReplyBuilder, TokenLogprob};
use super::sched::{Event, Job};
use super::server::Server;
use crate::generate::budget::ThinkBudget;
use crate::generate::sample::os_seed;
use crate::generate::stop::StopReason;
use crate::http::{Responder, Response, Stream};
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

    /// Sends the refusal `r` of `e` and reports it by its field (or error type).
    pub fn refused(out: &mut Responder<'_>, r: Response, e: &ApiError) -> Outcome {
        let mut o = Outcome::sent(out, r);
        o.error = Some(e.param.clone().unwrap_or_else(|| e.kind.to_string()));
        o
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
}

/// The SSE frames one step of a reply writes. A whole (non-streamed) reply collects none:
/// [`Frames::streaming`] says whether building them is worth it.
pub struct Frames {
    streaming: bool,
    list: Vec<Vec<u8>>,
}

impl Frames {
    fn new(streaming: bool) -> Frames {
        Frames {
            streaming,
            list: Vec::new(),
        }
    }

    /// Whether the frames go anywhere (a streamed reply).
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    /// Adds one frame (SSE bytes, `data: …\n\n` with its `event:` line where the API has
    /// one); dropped in a whole reply.
    pub fn push(&mut self, frame: Vec<u8>) {
        if self.streaming {
            self.list.push(frame);
        }
    }
}

/// How the reply ended, as every face reports it.
#[derive(Debug, Clone, Copy)]
pub struct End {
    /// The token counts, final.
    pub usage: Usage,
    /// `stop` (an end id or a `stop` string), `tool_calls` or `length`
    /// ([`ReplyBuilder::finish_reason`]).
    pub finish: &'static str,
    /// Which `stop` string ended it, if one did.
    pub stop_index: Option<usize>,
}

/// One API's encoding of a reply: its stream's events and its whole body, built from the
/// reply's pieces. The driver calls, in order: [`Face::start`] (streamed: once the job has a
/// slot), [`Face::progress`] (streamed, while a prefill runs), [`Face::pieces`] per generated
/// id and once more for the text held to the end, then [`Face::finish`] (streamed) or
/// [`Face::whole`]; or [`Face::failed`] when the job fails after the stream opened.
pub trait Face {
    /// The stream's first events (the job has a slot; `usage` holds the prompt counts).
    fn start(&mut self, usage: &Usage, out: &mut Frames);

    /// Events while a prefill runs, after the driver's comment line (Messages' `ping`).
    fn progress(&mut self, _out: &mut Frames) {}

    /// The deltas of one generated id's pieces, in order (reasoning, text, tool calls), with
    /// its log-probability when the request asked for them and the id counts in the reply.
    /// A whole reply gets the same calls: the face keeps what its body needs.
    fn pieces(&mut self, pieces: &[Piece], lp: Option<TokenLogprob>, out: &mut Frames);

    /// The stream's last events: the finish with its usage.
    fn finish(&mut self, end: &End, out: &mut Frames);

    /// The whole reply's body (JSON).
    fn whole(&mut self, end: &End) -> String;

    /// The stream's events for a job that failed after the stream opened (`e` is the 500).
    fn failed(&mut self, e: &ApiError, usage: &Usage, out: &mut Frames);

    /// A refusal in this API's error shape.
    fn refusal(&self, server: &Server, e: &ApiError) -> Response;
}

/// What a request's codec hands the driver.
pub struct Reply {
    /// The prompt ids.
    pub ids: Vec<u32>,
    /// Ids of the generation prompt's channel-opening stub, left out of the prompt count.
    pub stub: usize,
    /// A chat turn (thinking on or off: the reply starts in the think channel), or `None`
    /// for a plain completion.
    pub chat: Option<bool>,
    /// Sampling, limits and output options; no `max_tokens`: up to the context.
    pub params: GenParams,
    /// The thinking budget (Messages' `thinking.budget_tokens`).
    pub think_budget: Option<ThinkBudget>,
    /// The tool-call id prefix ([`call_base`], with the API's own prefix).
    pub call_base: String,
}

/// A source of seeds for a sampled request without one: the OS (ENGINE.md §8 step 7).
pub(super) fn seed_source() -> impl FnMut() -> u64 {
    || os_seed().unwrap_or(0x9E37_79B9_7F4A_7C15)
}

/// The tool-call id prefix: a function of the prompt ids (reproducible).
pub(super) fn call_base(ids: &[u32]) -> String {
    let mut h = k3_kernels::Fnv1a64::new();
    for id in ids {
        h.update(&id.to_le_bytes());
    }
    format!("call_{:016x}", h.finish())
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

/// The reply as it is built: the reply parser, the token counts, why generation stopped.
struct Running<'t> {
    b: ReplyBuilder<'t>,
    usage: Usage,
    why: Option<StopReason>,
}

impl Running<'_> {
    /// Reads one generated id with its logprob (the scheduler's); returns its pieces and the
    /// logprob when the id counts in the reply.
    fn token(&mut self, id: u32, lp: Option<TokenLogprob>) -> (Vec<Piece>, Option<TokenLogprob>) {
        let mut pieces = Vec::new();
        let before = self.b.completion_tokens;
        self.b.push(id, &mut pieces);
        let counted = self.b.completion_tokens > before;
        (pieces, lp.filter(|_| counted))
    }

    /// The text held to the end (a partial character, text held for a `stop` string).
    fn tail(&mut self) -> Vec<Piece> {
        let mut pieces = Vec::new();
        self.b.finish(&mut pieces);
        pieces
    }

    fn final_usage(&mut self) -> Usage {
        // the stub's ids may be among the reused ones; they are not prompt tokens
        self.usage.cached_tokens = self.usage.cached_tokens.min(self.usage.prompt_tokens);
        self.usage.completion_tokens = self.b.completion_tokens;
        self.usage.reasoning_tokens = self.b.reasoning_tokens;
        self.usage
    }

    fn end(&mut self) -> End {
        End {
            usage: self.final_usage(),
            finish: self.b.finish_reason(self.why),
            stop_index: self.b.stop_index,
        }
    }

    /// A 500 for a job the scheduler failed or cancelled (a read failure, the shutdown's
    /// drain bound), logged with the ids the request had used: it said `prompt=0
    /// completion=0` for a request cancelled mid-reply.
    fn failed(
        &mut self,
        server: &Server,
        out: &mut Responder<'_>,
        face: &dyn Face,
        message: &str,
    ) -> Outcome {
        let e = failed(message);
        let mut o = Outcome::refused(out, face.refusal(server, &e), &e);
        o.usage = self.final_usage();
        o
    }
}

fn failed(message: &str) -> ApiError {
    ApiError::other(500, "server_error", format!("generation failed: {message}"))
}

/// Runs one request end to end: queues its job, then answers with `face`'s encoding of the
/// reply, streamed or whole as `reply.params.stream` says.
pub fn drive(
    server: &Server,
    out: &mut Responder<'_>,
    reply: Reply,
    face: &mut dyn Face,
) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let Reply {
        ids,
        stub,
        chat,
        params,
        think_budget,
        call_base,
    } = reply;
    let prompt_tokens = ids.len().saturating_sub(stub);
    let job = Job {
        max_tokens: params
            .max_tokens
            .unwrap_or(server.limits.ctx.saturating_sub(ids.len()) as u64),
        settings: params.settings,
        logprobs: params.logprobs.then_some(params.top_logprobs),
        events: tx,
        ids,
        think_budget: think_budget.map(Box::new),
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
        return Outcome::refused(out, face.refusal(server, &e), &e);
    }
    let mut r = Running {
        b: ReplyBuilder::new(&server.tok, chat, &params.stop, &server.end_ids, call_base),
        usage: Usage {
            prompt_tokens,
            ..Usage::default()
        },
        why: None,
    };
    if params.stream {
        stream(server, out, &rx, &mut r, face)
    } else {
        whole(server, out, &rx, &mut r, face)
    }
}

/// A non-streamed reply: every event, then one body.
fn whole(
    server: &Server,
    out: &mut Responder<'_>,
    rx: &Receiver<Event>,
    r: &mut Running<'_>,
    face: &mut dyn Face,
) -> Outcome {
    let mut none = Frames::new(false);
    loop {
        let Some(ev) = next(rx, &mut || out.disconnected()) else {
            return Outcome::gone(r.final_usage());
        };
        match ev {
            Event::Started { cached } => r.usage.cached_tokens = cached,
            Event::Progress { .. } => {}
            Event::Token { id, logprob } => {
                let (p, lp) = r.token(id, logprob);
                face.pieces(&p, lp, &mut none);
                if r.b.stopped {
                    break;
                }
            }
            Event::Done(why) => {
                r.why = Some(why);
                break;
            }
            Event::Failed(m) => return r.failed(server, out, face, &m),
        }
    }
    let tail = r.tail();
    face.pieces(&tail, None, &mut none);
    let end = r.end();
    let mut o = Outcome::sent(out, server.json(200, face.whole(&end)));
    o.usage = end.usage;
    o
}

/// Writes `frames`; false when the client is gone.
fn send(s: &mut Stream<'_>, frames: Frames) -> bool {
    frames.list.iter().all(|f| s.chunk(f).is_ok())
}

/// A streamed reply: the face's events as the scheduler's come.
fn stream(
    server: &Server,
    out: &mut Responder<'_>,
    rx: &Receiver<Event>,
    r: &mut Running<'_>,
    face: &mut dyn Face,
) -> Outcome {
    // the first event says whether the job started: a failure before it is a plain 500
    let first = match next(rx, &mut || out.disconnected()) {
        Some(Event::Failed(m)) => return r.failed(server, out, face, &m),
        Some(e) => e,
        None => return Outcome::gone(r.final_usage()),
    };
    let Ok(mut s) = out.stream(200, server.sse_headers()) else {
        return Outcome::gone(r.final_usage());
    };
    let mut ev = Some(first);
    while let Some(e) = ev.take() {
        let mut frames = Frames::new(true);
        let mut end = false;
        match e {
            Event::Started { cached } => {
                r.usage.cached_tokens = cached;
                face.start(&r.final_usage(), &mut frames);
            }
            Event::Progress { progress } => {
                frames.push(encode::sse_comment(&progress.to_string()));
                face.progress(&mut frames);
            }
            Event::Token { id, logprob } => {
                let (p, lp) = r.token(id, logprob);
                face.pieces(&p, lp, &mut frames);
                end = r.b.stopped;
            }
            Event::Done(why) => {
                r.why = Some(why);
                end = true;
            }
            Event::Failed(m) => {
                let usage = r.final_usage();
                face.failed(&failed(&m), &usage, &mut frames);
                send(&mut s, frames);
                let _ = s.finish();
                return Outcome {
                    status: 500,
                    usage,
                    error: Some("server_error".into()),
                };
            }
        }
        if !send(&mut s, frames) {
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
    let mut frames = Frames::new(true);
    let tail = r.tail();
    face.pieces(&tail, None, &mut frames);
    let end = r.end();
    face.finish(&end, &mut frames);
    send(&mut s, frames);
    let _ = s.finish();
    Outcome {
        status: 200,
        usage: end.usage,
        error: None,
    }
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
