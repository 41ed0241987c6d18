//! The OpenAI faces of a generation request (ENGINE.md §11): `POST /v1/chat/completions` and
//! `POST /v1/completions`, decoded by [`api`] and driven by the one reply driver
//! ([`super::drive`]); here only their encoding: whole, or Server-Sent Events in the OpenAI
//! chunk shape (`data: …`, then `data: [DONE]`).

use super::api::{self, ApiError, GenParams};
use super::drive::{call_base, drive, seed_source, End, Face, Frames, Outcome, Reply};
use super::encode::{self, Head, TextOffset, Usage};
use super::reply::{Piece, TokenLogprob};
use super::server::{unix_now, Server};
use crate::http::{Request, Responder, Response};
use crate::tokenizer::Tokenizer;

/// `POST /v1/chat/completions`.
pub fn chat(server: &Server, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
    let job = api::parse_body(&req.body)
        .and_then(|o| api::chat_job(&o, &server.tok, &server.limits, &mut seed_source()));
    match job {
        Err(e) => Outcome::refused(out, server.error(&e), &e),
        Ok(j) => {
            let mut face = OpenAi::new(server, &j.params, true, format!("chatcmpl-k3-{n}"));
            let reply = Reply {
                call_base: call_base(&j.ids),
                ids: j.ids,
                stub: j.stub,
                chat: Some(j.thinking),
                params: j.params,
                think_budget: None,
            };
            drive(server, out, reply, &mut face)
        }
    }
}

/// `POST /v1/completions`.
pub fn completion(server: &Server, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
    let job = api::parse_body(&req.body)
        .and_then(|o| api::completion_job(&o, &server.tok, &server.limits, &mut seed_source()));
    match job {
        Err(e) => Outcome::refused(out, server.error(&e), &e),
        Ok(j) => {
            let mut face = OpenAi::new(server, &j.params, false, format!("cmpl-k3-{n}"));
            let reply = Reply {
                call_base: call_base(&j.ids),
                ids: j.ids,
                stub: 0,
                chat: None,
                params: j.params,
                think_budget: None,
            };
            drive(server, out, reply, &mut face)
        }
    }
}

/// The chat completion (`chat: true`) or text completion encoding of a reply: chunks as the
/// pieces come, or the pieces and logprobs kept for the whole body.
struct OpenAi<'s> {
    tok: &'s Tokenizer,
    head: Head,
    chat: bool,
    logprobs: bool,
    include_usage: bool,
    /// A whole reply's pieces and logprobs.
    pieces: Vec<Piece>,
    lps: Vec<TokenLogprob>,
    /// A streamed completion's `text_offset` so far.
    text_at: TextOffset,
}

impl<'s> OpenAi<'s> {
    fn new(server: &'s Server, p: &GenParams, chat: bool, id: String) -> OpenAi<'s> {
        OpenAi {
            tok: &server.tok,
            head: Head {
                id,
                created: unix_now(),
                model: server.limits.model_id.clone(),
            },
            chat,
            logprobs: p.logprobs,
            include_usage: p.include_usage,
            pieces: Vec::new(),
            lps: Vec::new(),
            text_at: TextOffset::default(),
        }
    }
}

fn piece_text(p: &Piece) -> &str {
    match p {
        Piece::Content(t) | Piece::Reasoning(t) => t,
        Piece::ToolCall { .. } => "",
    }
}

impl Face for OpenAi<'_> {
    fn start(&mut self, _: &Usage, out: &mut Frames) {
        if self.chat {
            let d = encode::message(&[], true, true);
            let v = encode::chat_chunk(&self.head, Some(d), None, None, None);
            out.push(encode::sse(&v));
        }
    }

    /// One chunk of every piece of the id (nothing when there is none and no logprob).
    fn pieces(&mut self, pieces: &[Piece], lp: Option<TokenLogprob>, out: &mut Frames) {
        if !out.streaming() {
            self.pieces.extend_from_slice(pieces);
            self.lps.extend(lp);
            return;
        }
        if pieces.is_empty() && lp.is_none() {
            return;
        }
        let lps: Vec<TokenLogprob> = lp.into_iter().collect();
        let v = if self.chat {
            let lpv = (!lps.is_empty()).then(|| encode::chat_logprobs(self.tok, &lps));
            let d = encode::message(pieces, true, false);
            encode::chat_chunk(&self.head, Some(d), None, lpv, None)
        } else {
            let text: String = pieces.iter().map(piece_text).collect();
            let lpv = (!lps.is_empty())
                .then(|| encode::completion_logprobs(self.tok, &lps, &mut self.text_at));
            encode::completion(&self.head, &text, None, lpv, None, false)
        };
        out.push(encode::sse(&v));
    }

    fn finish(&mut self, end: &End, out: &mut Frames) {
        let h = &self.head;
        let last = if self.chat {
            encode::chat_chunk(h, Some(Default::default()), Some(end.finish), None, None)
        } else {
            encode::completion(h, "", Some(end.finish), None, None, false)
        };
        out.push(encode::sse(&last));
        if self.include_usage {
            let u = if self.chat {
                encode::chat_chunk(h, None, None, None, Some(&end.usage))
            } else {
                encode::completion(h, "", None, None, Some(&end.usage), true)
            };
            out.push(encode::sse(&u));
        }
        out.push(encode::SSE_DONE.to_vec());
    }

    fn whole(&mut self, end: &End) -> String {
        let body = if self.chat {
            let lp = self
                .logprobs
                .then(|| encode::chat_logprobs(self.tok, &self.lps));
            encode::chat_completion(&self.head, &self.pieces, end.finish, lp, &end.usage)
        } else {
            let text: String = self.pieces.iter().map(piece_text).collect();
            let lp = self.logprobs.then(|| {
                encode::completion_logprobs(self.tok, &self.lps, &mut TextOffset::default())
            });
            encode::completion(
                &self.head,
                &text,
                Some(end.finish),
                lp,
                Some(&end.usage),
                false,
            )
        };
        body.to_json()
    }

    fn failed(&mut self, e: &ApiError, _: &Usage, out: &mut Frames) {
        out.push(format!("data: {}\n\n", e.body()).into_bytes());
        out.push(encode::SSE_DONE.to_vec());
    }

    fn refusal(&self, server: &Server, e: &ApiError) -> Response {
        server.error(e)
    }
}
