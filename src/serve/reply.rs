//! Generated ids → what a response says (ENGINE.md §11, TOKENIZER.md §13): for a chat, the
//! reply parser's reasoning, content and tool calls, `stop` strings matched on the content
//! (held back until they cannot begin one, never returned), the finish reason and the token
//! counts; for a completion, the decoded text. Streaming and non-streaming responses are built
//! from the same [`Piece`]s, so the streamed deltas concatenate to the non-streamed reply.

use crate::chat::{ReplyEvent, ReplyParser};
use crate::constrain::Mask;
use crate::generate::logprob::log_softmax_masked;
use crate::generate::stop::{StopReason, StopText};
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// One part of a reply, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Think-channel text (`reasoning_content`).
    Reasoning(String),
    /// Response text (`content`; a completion's `text`).
    Content(String),
    /// A whole tool call.
    ToolCall {
        /// 0-based position among the reply's calls (the delta's `index`).
        index: usize,
        /// `call_<request hash>_<index>`: reproducible (a function of the request and index).
        id: String,
        /// The function name.
        name: String,
        /// The arguments as a JSON object text.
        arguments: String,
    },
}

/// The log-probability of one chosen id and its top alternatives (ENGINE.md §11).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The chosen id.
    pub id: u32,
    /// Its log-probability (f64 log-softmax of the fp32 logits).
    pub logprob: f64,
    /// The most likely ids with theirs, best first (ties by id).
    pub top: Vec<(u32, f64)>,
}

/// `TokenLogprob` of `id` from `logits` with the `top` best alternatives.
/// Under a constraint, of the masked distribution (`mask`: the ids admitted at that step;
/// ENGINE.md §8), so no forbidden id is among the alternatives.
pub fn token_logprob(
    logits: &[f32],
    id: u32,
    top: usize,
    mask: Option<&Mask>,
) -> Option<TokenLogprob> {
    let l = log_softmax_masked(logits, mask)?;
    let mut best: Vec<(u32, f64)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &x) in l.iter().enumerate() {
            if x == f64::NEG_INFINITY || best.len() == top && x <= best[top - 1].1 {
                continue;
            }
            let at = best.partition_point(|&(_, y)| y >= x);
            best.insert(at, (i as u32, x));
            best.truncate(top);
        }
    }
    Some(TokenLogprob {
        id,
        logprob: *l.get(id as usize)?,
        top: best,
    })
}

/// The running reply of one request.
pub struct ReplyBuilder<'t> {
    tok: &'t Tokenizer,
    chat: Option<ReplyParser>,
    text: StreamDecoder,
    stop: StopText,
    end_ids: Vec<u32>,
    call_base: String,
    calls: usize,
    pending_name: Option<String>,
    /// Generated ids read (the last one may have completed a `stop` string).
    pub completion_tokens: usize,
    /// Generated ids before the think channel closed (chat with thinking on).
    pub reasoning_tokens: usize,
    in_think: bool,
    /// A `stop` string was found: the reply is complete.
    pub stopped: bool,
    /// Which `stop` string was found (its index), once one was.
    pub stop_index: Option<usize>,
}

impl<'t> ReplyBuilder<'t> {
    /// A chat reply (thinking: it starts in the think channel) or, with `chat` None, a
    /// completion; `stop` strings; `call_base` prefixes the tool-call ids.
    pub fn new(
        tok: &'t Tokenizer,
        chat: Option<bool>,
        stop: &[String],
        end_ids: &[u32],
        call_base: String,
    ) -> ReplyBuilder<'t> {
        ReplyBuilder {
            tok,
            chat: chat.map(ReplyParser::new),
            text: StreamDecoder::new(),
            stop: StopText::new(stop),
            end_ids: end_ids.to_vec(),
            call_base,
            calls: 0,
            pending_name: None,
            completion_tokens: 0,
            reasoning_tokens: 0,
            in_think: chat == Some(true),
            stopped: false,
            stop_index: None,
        }
    }

    /// Reads the next generated id; appends what it completes to `out`. After a `stop`
    /// string, ids are ignored.
    pub fn push(&mut self, id: u32, out: &mut Vec<Piece>) {
        if self.stopped {
            return;
        }
        self.completion_tokens += 1;
        if self.in_think {
            if id == crate::chat::CLOSE {
                self.in_think = false;
            } else {
                self.reasoning_tokens += 1;
            }
        }
        let mut events = Vec::new();
        match &mut self.chat {
            Some(p) => p.push(self.tok, id, &mut events),
            None => {
                if !self.end_ids.contains(&id) {
                    if let Ok(b) = self.tok.token_bytes(id) {
                        events.push(ReplyEvent::Content(self.text.push(b)));
                    }
                }
            }
        }
        self.events(events, out);
    }

    /// Generation ended: flushes held text (a partial character as U+FFFD, text held for a
    /// `stop` string that never came).
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        if self.stopped {
            return;
        }
        let mut events = Vec::new();
        match &mut self.chat {
            Some(p) => p.finish(&mut events),
            None => events.push(ReplyEvent::Content(self.text.finish())),
        }
        self.events(events, out);
        if !self.stopped {
            let rest = self.stop.finish();
            if !rest.is_empty() {
                out.push(Piece::Content(rest));
            }
        }
    }

    /// `finish_reason`: `stop` (an end id or a `stop` string), `tool_calls` (a chat turn that
    /// ended with calls), `length` (`max_tokens` or the context).
    pub fn finish_reason(&self, why: Option<StopReason>) -> &'static str {
        if self.stopped {
            return "stop";
        }
        match why {
            Some(StopReason::Length) | Some(StopReason::Context) | None => "length",
            _ if self.calls > 0 => "tool_calls",
            _ => "stop",
        }
    }

    fn events(&mut self, events: Vec<ReplyEvent>, out: &mut Vec<Piece>) {
        for e in events {
            if self.stopped {
                return;
            }
            match e {
                ReplyEvent::Reasoning(t) if !t.is_empty() => out.push(Piece::Reasoning(t)),
                ReplyEvent::Content(t) if !t.is_empty() => {
                    let r = self.stop.push(&t);
                    if !r.text.is_empty() {
                        out.push(Piece::Content(r.text));
                    }
                    self.stopped = r.stopped.is_some();
                    self.stop_index = r.stopped;
                }
                ReplyEvent::ToolCallEnd { arguments, .. } => {
                    // the name came with the call's start; the parser keeps them in order
                    let name = self.pending_name.take().unwrap_or_default();
                    out.push(Piece::ToolCall {
                        index: self.calls,
                        id: format!("{}_{}", self.call_base, self.calls),
                        name,
                        arguments,
                    });
                    self.calls += 1;
                }
                ReplyEvent::ToolCallStart { name, .. } => self.pending_name = Some(name),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::token_logprob;

    #[test]
    fn top_logprobs_best_first_ties_by_id() {
        let z = [1.0f32, 3.0, 3.0, -2.0, 0.5];
        let l = token_logprob(&z, 4, 3, None).unwrap();
        let ids: Vec<u32> = l.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 2, 0]);
        assert_eq!(l.top[0].1, l.top[1].1);
        assert_eq!(
            l.logprob.to_bits(),
            crate::generate::logprob::logprob(&z, 4).unwrap().to_bits()
        );
        assert!(token_logprob(&z, 9, 0, None).is_none());
        assert!(token_logprob(&z, 0, 0, None).unwrap().top.is_empty());
    }
}
