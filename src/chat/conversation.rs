//! A conversation over one sequence (ENGINE.md §9, TOKENIZER.md §10, §11, §13): the turns of
//! `k3 chat` without any terminal I/O. Each turn appends only its new ids — the closing of an
//! answer stopped early, the new messages and the generation prompt — to the sequence left
//! by the previous turn and prefills just those ([`Sequence::continue_with`]); the ids the
//! model generated stay in the history as generated (§11). The reply is read by the
//! streaming [`ReplyParser`] (§13) into reasoning, content and tool calls, told to an
//! [`Observer`] as it streams.
//!
//! `/undo` restores the snapshot taken before the last exchange; an older exchange is undone
//! by keeping the ids before it (nothing run), which the next turn prefills again — the same
//! logits (ENGINE.md §9), only slower. One snapshot is held: its memory is planned with the
//! live sequence's (the caller plans two sequences).

use super::message::{Arguments, Message, Role, ToolCall};
use super::messages::{Request, Thinking};
use super::reply::{coalesce, ReplyEvent, ReplyParser};
use super::template::{encode, render};
use crate::error::{Error, Result};
use crate::generate::prefix_cache::PrefixCache;
use crate::generate::sample::SamplerSettings;
use crate::generate::session::{Progress, Sequence, SequenceOptions, Session, Snapshot, StepEvent};
use crate::generate::stop::{StopReason, StopRules};
use crate::json::Value;
use crate::model::experts::ExpertSource;
use crate::model::TrunkSource;
use crate::tokenizer::Tokenizer;
use std::time::Instant;

pub mod transcript;

/// How a conversation generates: fixed for its life (a `/load` brings its own sampler).
#[derive(Debug, Clone)]
pub struct ConversationOptions {
    /// The sampler settings (ENGINE.md §8: chat's defaults, the flags, the seed).
    pub settings: SamplerSettings,
    /// Positions the sequence may reach (`--ctx`, planned up front).
    pub ctx: usize,
    /// `--max-reply N`: ids per reply at most; `None` = until the end of turn or the context.
    pub max_reply: Option<u64>,
    /// The end-of-turn ids (`[EOS]`, `<|end_of_msg|>`, TOKENIZER.md §11).
    pub end_ids: Vec<u32>,
    /// The vocabulary size V (for the stop rules).
    pub vocab: usize,
    /// Structured output (`--json-schema`, `--tools`): each reply is constrained to the
    /// request's response format and declared tools ([`super::structured`]).
    pub structured: Option<Structured>,
}

/// What a chat's constraints walk: the vocabulary and the template's specials.
#[derive(Clone)]
pub struct Structured {
    /// The vocabulary trie (built once).
    pub vocab: std::sync::Arc<crate::constrain::Vocabulary>,
    /// `<|open|>`, `<|close|>`, `<|sep|>`, the end ids.
    pub specials: crate::constrain::Specials,
}

impl std::fmt::Debug for Structured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Structured {{ specials: {:?} }}", self.specials)
    }
}

/// Why a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyEnd {
    /// A stop rule of the sequence: end of turn, `--max-reply` (`Length`), the context.
    Stop(StopReason),
    /// The observer asked to stop (Ctrl-C).
    Interrupted,
}

impl ReplyEnd {
    /// `end_of_turn`, `length`, `context` or `interrupted` (the history's `stop_reason`).
    pub fn name(self) -> &'static str {
        match self {
            ReplyEnd::Stop(r) => r.name(),
            ReplyEnd::Interrupted => "interrupted",
        }
    }
}

/// One exchange: the messages sent, the reply, and what it cost.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The user or tool messages of the turn (none for the first turn of a `--messages` file).
    pub input: Vec<Message>,
    /// The ids appended for the turn: the closing of the previous reply, the new messages,
    /// the generation prompt (the first turn: the whole rendered conversation).
    pub input_ids: Vec<u32>,
    /// Ids prefilled for the turn (its input, plus the id the previous turn chose but did
    /// not run; everything when the history had to be run again).
    pub prefilled: usize,
    /// The reply as an assistant message (reasoning, content, tool calls with ids).
    pub reply: Message,
    /// The generated ids of the reply, as generated (the end id included).
    pub reply_ids: Vec<u32>,
    /// FNV-1a-64 of the logits each reply id was chosen from (FORMATS.md §10 per-step hash).
    pub logits_fnv1a64: Vec<u64>,
    /// Why the reply ended.
    pub end: ReplyEnd,
    /// The ids that close the reply before the next turn (empty when it ended its turn).
    pub closing: Vec<u32>,
    /// The parser's warnings (malformed markup surfaced as content).
    pub warnings: Vec<String>,
    /// Seconds of the prefill.
    pub prefill_seconds: f64,
    /// Seconds of the decode steps.
    pub decode_seconds: f64,
}

/// What a turn tells its caller as it goes (the terminal, a test).
pub trait Observer {
    /// The progress of the prefill's forward, if it is shown.
    fn progress(&mut self) -> Option<&mut dyn Progress> {
        None
    }
    /// The prefill of `ids` finished in `seconds`.
    fn prefilled(&mut self, _ids: usize, _seconds: f64) {}
    /// One parsed piece of the reply, as soon as its bytes are complete.
    fn event(&mut self, e: &ReplyEvent);
    /// `generated` ids so far; the last step took `seconds`.
    fn step(&mut self, _generated: usize, _seconds: f64) {}
    /// True to stop the reply now (Ctrl-C); checked between steps.
    fn interrupted(&mut self) -> bool {
        false
    }
}

/// An exchange that can be undone: where the conversation stood before it.
#[derive(Debug, Clone)]
struct Mark {
    /// Messages of the request before the exchange.
    messages: usize,
    /// Ids of the sequence before the exchange (0: no sequence yet).
    ids: usize,
    /// The closing ids pending before it.
    closing: Vec<u32>,
    /// The sequence before it, for the last exchange only.
    snapshot: Option<Snapshot>,
}

/// A conversation: the request so far (system prompt, tools, thinking, messages), the live
/// sequence, the exchanges, and the undo marks.
pub struct Conversation {
    /// The conversation as messages: what `/think` re-encodes and `/save` writes.
    pub req: Request,
    /// The options it generates with.
    pub opts: ConversationOptions,
    /// The exchanges so far, in order.
    pub exchanges: Vec<Exchange>,
    seq: Option<Sequence>,
    /// Ids that close the last reply, prepended to the next turn's input.
    closing: Vec<u32>,
    marks: Vec<Mark>,
    /// Messages of the request at the start (the system prompt): what `/reset` keeps.
    base_messages: usize,
    /// The prefix cache on disk (`k3 chat --prefix-cache`): a new sequence starts from the
    /// longest file its ids extend, and each turn's prompt state is written to it.
    pub disk: Option<PrefixCache>,
}

impl Conversation {
    /// A conversation of `req` (its messages are the history: a system prompt, or a whole
    /// `--messages` file), nothing run yet.
    pub fn new(req: Request, opts: ConversationOptions) -> Conversation {
        Conversation {
            base_messages: req.messages.len(),
            req,
            opts,
            exchanges: Vec::new(),
            seq: None,
            closing: Vec::new(),
            marks: Vec::new(),
            disk: None,
        }
    }

    /// The live sequence, once a turn ran (or a state was loaded).
    pub fn sequence(&self) -> Option<&Sequence> {
        self.seq.as_ref()
    }

    /// Ids of the conversation so far (0 before the first turn).
    pub fn len(&self) -> usize {
        self.seq.as_ref().map_or(0, |s| s.ids().len())
    }

    /// True before the first turn.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ids that close the last reply (empty when it ended its turn).
    pub fn closing(&self) -> &[u32] {
        &self.closing
    }

    /// True with thinking on (the reply starts in the think channel).
    pub fn thinking(&self) -> bool {
        self.req.thinking != Thinking::Off
    }

    /// The tool calls of the last reply, when it made any and no result was sent yet.
    pub fn pending_calls(&self) -> &[ToolCall] {
        match self.req.messages.last() {
            Some(m) if m.role == Role::Assistant => &m.tool_calls,
            _ => &[],
        }
    }

    /// The ids the next turn with `new` messages appends: the closing of the last reply,
    /// then the segments the new messages and the generation prompt add to the rendered
    /// conversation (the whole rendering before the first turn).
    ///
    /// Errors (exit 2): a message the template refuses (naming its index and field).
    pub fn turn_ids(&self, tok: &Tokenizer, new: &[Message]) -> Result<Vec<u32>> {
        let mut full = self.req.clone();
        full.messages.extend(new.iter().cloned());
        let after = render(&full, true)?;
        if self.seq.is_none() {
            return encode(tok, &after);
        }
        // The response-format message (TOKENIZER.md §10 step 5) follows the messages: each
        // turn's comes after that turn's new messages, and the earlier turns keep theirs in
        // the ids they generated from. So the renderings are compared without it, and the
        // new ids are the new messages, then this turn's response-format message and the
        // generation prompt.
        let bare = |r: &Request| Request {
            response_format: None,
            ..r.clone()
        };
        let before = render(&bare(&self.req), false)?;
        let grown = render(&bare(&full), false)?;
        let starts = |a: &[_], b: &[_]| a.len() >= b.len() && a[..b.len()] == b[..];
        if !starts(&grown, &before) || !starts(&after, &grown) {
            return Err(Error::internal(
                "chat: the conversation's rendering changed with the new messages",
            ));
        }
        let mut ids = self.closing.clone();
        ids.extend(encode(tok, &after[before.len()..])?);
        Ok(ids)
    }

    /// Refuses a turn of `input` ids that would not fit the context with room for one reply id.
    ///
    /// Errors (exit 3): naming the ids the conversation would hold and the context; the
    /// caller makes it exit 2 when the context was an explicit `--ctx`.
    pub fn check_room(&self, input: usize) -> Result<()> {
        let need = self.len() + input;
        if need >= self.opts.ctx {
            return Err(Error::resources(format!(
                "this turn would make the conversation {need} ids, and the context holds {} \
                 (with room for at least one reply id); /undo or /reset to make room, or give a \
                 larger --ctx",
                self.opts.ctx
            )));
        }
        Ok(())
    }

    /// Sends `input` (user or tool messages; none to answer the history as it is) and
    /// generates the reply, telling `obs` as it goes. The sequence continues from the last
    /// turn: only the new ids are prefilled. On error the conversation is as before the turn
    /// (a failed forward leaves the sequence unusable: it is dropped and run again next turn).
    ///
    /// Errors: a message the template refuses (exit 2); a turn past the context (exit 3,
    /// [`Conversation::check_room`]); a failed read (exit 4) or non-finite value (exit 2).
    pub fn send<T: TrunkSource, E: ExpertSource>(
        &mut self,
        sess: &mut Session<'_, T, E>,
        tok: &Tokenizer,
        input: Vec<Message>,
        obs: &mut dyn Observer,
    ) -> Result<&Exchange> {
        let ids = self.turn_ids(tok, &input)?;
        self.check_room(ids.len())?;
        // a final `partial` assistant message (a `--messages` file) is continued in its
        // response channel, and the reply completes it (TOKENIZER.md §10 step 6)
        let partial = input.is_empty() && self.req.messages.last().is_some_and(|m| m.partial);
        let rules = StopRules::new(
            self.opts.end_ids.clone(),
            Vec::new(),
            Vec::new(),
            self.opts.max_reply.unwrap_or(u64::MAX),
            self.opts.ctx as u64,
            self.opts.vocab,
        )?;
        let mark = Mark {
            messages: self.req.messages.len(),
            ids: self.len(),
            closing: self.closing.clone(),
            snapshot: self.seq.as_ref().map(Sequence::snapshot),
        };
        let mut seq = match self.seq.take() {
            Some(mut s) => match s.continue_with(&ids, rules.clone()) {
                Ok(()) => s,
                Err(e) => {
                    self.seq = Some(s);
                    return Err(e);
                }
            },
            None => {
                let so = SequenceOptions {
                    settings: self.opts.settings,
                    rules,
                    all_rows: false,
                };
                let held = self
                    .disk
                    .as_mut()
                    .and_then(|d| d.continue_from(&sess.model, &ids, 0, self.opts.ctx, &so));
                match held {
                    Some((s, _)) => s,
                    None => sess.sequence(&ids, self.opts.ctx, so)?,
                }
            }
        };
        if let Err(e) = self.constrain(&mut seq, partial) {
            self.seq = Some(seq);
            self.restore_mark(mark)?;
            return Err(e);
        }
        let mut disk = self.disk.take();
        let res = self.run_reply(sess, tok, &mut seq, obs, partial, disk.as_mut());
        self.disk = disk;
        match res {
            Ok(mut x) => {
                x.input = input.clone();
                x.input_ids = ids;
                if partial {
                    if let Some(p) = self.req.messages.pop() {
                        complete_partial(&mut x.reply, p);
                    }
                }
                self.req.messages.extend(input);
                self.req.messages.push(x.reply.clone());
                self.closing = x.closing.clone();
                self.seq = Some(seq);
                // only the last exchange keeps its snapshot (planned memory)
                for m in &mut self.marks {
                    m.snapshot = None;
                }
                self.marks.push(mark);
                self.exchanges.push(x);
                Ok(self.exchanges.last().expect("just pushed"))
            }
            Err(e) => {
                self.seq = Some(seq);
                self.restore_mark(mark)?;
                Err(e)
            }
        }
    }

    /// Sets the turn's constraints (none without structured output, or when the reply
    /// continues a partial message: no constraint starts inside one).
    ///
    /// Errors (exit 2): a schema of the request the engine cannot enforce.
    fn constrain(&self, seq: &mut Sequence, partial: bool) -> Result<()> {
        let Some(st) = &self.opts.structured else {
            return Ok(());
        };
        let thinking = self.req.thinking != Thinking::Off;
        let spec = super::structured::reply_spec(&self.req, thinking)
            .map_err(|r| Error::invalid(format!("structured output: {r:?}")))?;
        let list = match spec {
            Some(spec) if !partial => {
                vec![
                    crate::constrain::reply(&spec, st.vocab.clone(), &st.specials)
                        .map_err(|e| Error::invalid(format!("structured output: {e}")))?,
                ]
            }
            _ => Vec::new(),
        };
        seq.set_constraints(list);
        Ok(())
    }

    /// Prefill, then steps until a stop rule or the observer's interrupt.
    fn run_reply<T: TrunkSource, E: ExpertSource>(
        &self,
        sess: &mut Session<'_, T, E>,
        tok: &Tokenizer,
        seq: &mut Sequence,
        obs: &mut dyn Observer,
        partial: bool,
        disk: Option<&mut PrefixCache>,
    ) -> Result<Exchange> {
        let prefilled = seq.ids().len() - seq.state().n_pos;
        crate::generate::prefix_cache::prefill(disk, sess, seq, obs.progress())?;
        let prefill_seconds = seq.figures().seconds;
        obs.prefilled(prefilled, prefill_seconds);
        let mut parser = ReplyParser::new(self.thinking() && !partial);
        let mut events = Vec::new();
        let mut hashes = Vec::new();
        let mut decode_seconds = 0.0;
        let mut end = None;
        while seq.active() {
            if obs.interrupted() {
                end = Some(ReplyEnd::Interrupted);
                break;
            }
            let f = sess.step(&mut [&mut *seq], &mut |ev| {
                if let StepEvent::Chosen(_, c) = ev {
                    hashes.push(c.logits_fnv1a64);
                    let at = events.len();
                    parser.push(tok, c.id, &mut events);
                    for e in &events[at..] {
                        obs.event(e);
                    }
                }
                Ok(())
            })?;
            decode_seconds += f.seconds;
            obs.step(hashes.len(), f.seconds);
        }
        let at = events.len();
        parser.finish(&mut events);
        for e in &events[at..] {
            obs.event(e);
        }
        let end = end.unwrap_or(ReplyEnd::Stop(
            seq.stop_reason().unwrap_or(StopReason::Length),
        ));
        let closing = if parser.done() {
            Vec::new()
        } else {
            encode(tok, &parser.closing())?
        };
        let (reply, warnings) = reply_message(coalesce(events), self.exchanges.len() + 1);
        Ok(Exchange {
            input: Vec::new(),
            input_ids: Vec::new(),
            prefilled,
            reply,
            reply_ids: seq.generated().to_vec(),
            logits_fnv1a64: hashes,
            end,
            closing,
            warnings,
            prefill_seconds,
            decode_seconds,
        })
    }

    /// Back to where `mark` was taken: its messages, closing ids, and the sequence from its
    /// snapshot (or rewound to the ids before it, to be run again, or none).
    fn restore_mark(&mut self, mark: Mark) -> Result<()> {
        self.req.messages.truncate(mark.messages);
        self.closing = mark.closing;
        self.seq = match (mark.snapshot, self.seq.take()) {
            _ if mark.ids == 0 => None,
            (Some(snap), Some(mut s)) => {
                s.restore(&snap)?;
                Some(s)
            }
            (None, Some(mut s)) => {
                let ids = s.ids()[..mark.ids].to_vec();
                s.rewind(&ids);
                Some(s)
            }
            (_, None) => None,
        };
        Ok(())
    }

    /// `/undo`: drops the last exchange (its messages and reply), back to the snapshot taken
    /// before it (or, for an older one, the ids before it, run again at the next turn).
    /// Returns false when there is nothing to undo.
    ///
    /// Errors: internal (a snapshot of another shape).
    pub fn undo(&mut self) -> Result<bool> {
        let Some(mark) = self.marks.pop() else {
            return Ok(false);
        };
        self.exchanges.pop();
        self.restore_mark(mark)?;
        Ok(true)
    }

    /// `/reset`: back to the system prompt (and tools), nothing run.
    pub fn reset(&mut self) {
        self.req.messages.truncate(self.base_messages);
        self.seq = None;
        self.closing.clear();
        self.marks.clear();
        self.exchanges.clear();
    }

    /// `/think EFFORT|off`: changes the thinking preamble at the start of the conversation,
    /// so the whole conversation is encoded again from its messages and run again at the next
    /// turn (the replies re-rendered: with thinking off their reasoning is left out). Undo
    /// marks go (they point into the old encoding). Returns the ids to run again.
    ///
    /// Errors (exit 2): a message the template refuses.
    pub fn set_thinking(&mut self, tok: &Tokenizer, t: Thinking) -> Result<usize> {
        self.req.set_thinking(t);
        self.marks.clear();
        self.closing.clear();
        if self.seq.is_none() {
            // nothing run yet: the next turn encodes the whole conversation anyway
            return Ok(0);
        }
        let ids = encode(tok, &render(&self.req, false)?)?;
        if ids.len() >= self.opts.ctx {
            return Err(Error::resources(format!(
                "/think: the conversation encodes to {} ids, beyond the context of {}",
                ids.len(),
                self.opts.ctx
            )));
        }
        if let Some(s) = &mut self.seq {
            s.rewind(&ids);
        }
        Ok(ids.len())
    }

    /// A conversation continuing a loaded sequence `seq` (from a `/load`ed state file) with
    /// its request, exchanges and closing ids (from the transcript).
    pub fn resumed(
        req: Request,
        opts: ConversationOptions,
        seq: Sequence,
        closing: Vec<u32>,
        base_messages: usize,
    ) -> Conversation {
        Conversation {
            req,
            opts,
            exchanges: Vec::new(),
            seq: Some(seq),
            closing,
            marks: Vec::new(),
            base_messages,
            disk: None,
        }
    }

    /// Messages of the request at the start (the system prompt).
    pub fn base_messages(&self) -> usize {
        self.base_messages
    }
}

/// The reply's events → an assistant message (reasoning, content, tool calls with the id
/// `call_<exchange>_<index>` and the number the model wrote, [`ToolCall::index`]) and the
/// warnings.
fn reply_message(events: Vec<ReplyEvent>, exchange: usize) -> (Message, Vec<String>) {
    let mut reasoning = String::new();
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut warnings = Vec::new();
    let mut names: Vec<(usize, String)> = Vec::new();
    for e in events {
        match e {
            ReplyEvent::Reasoning(t) => reasoning.push_str(&t),
            ReplyEvent::Content(t) => content.push_str(&t),
            ReplyEvent::ToolCallStart { index, name } => names.push((index, name)),
            ReplyEvent::ToolCallEnd { index, arguments } => {
                let name = names
                    .iter()
                    .find(|(i, _)| *i == index)
                    .map(|(_, n)| n.clone())
                    .unwrap_or_default();
                let args = match crate::json::parse(arguments.as_bytes()) {
                    Ok(Value::Object(o)) => Arguments::Object(
                        o.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
                    ),
                    _ => Arguments::Raw(arguments),
                };
                calls.push(ToolCall {
                    id: Some(call_id(exchange, index)),
                    name,
                    arguments: args,
                    // the model's number: its result is rendered with it (ReplyParser)
                    index: Some(index),
                });
            }
            ReplyEvent::Warning(w) => warnings.push(w),
            ReplyEvent::ToolCallArgument { .. } | ReplyEvent::EndOfTurn(_) => {}
        }
    }
    let m = Message {
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        tool_calls: calls,
        ..Message::plain(Role::Assistant, Some(vec![content]))
    };
    (m, warnings)
}

/// The reply to a `partial` assistant message `p` made whole: its reasoning (rendered and
/// closed in the prompt) and its content prefix before the reply's content.
fn complete_partial(reply: &mut Message, p: Message) {
    let mut content = p.content.map(|c| c.concat()).unwrap_or_default();
    content.push_str(&reply.content.take().map(|c| c.concat()).unwrap_or_default());
    reply.content = Some(vec![content]);
    reply.reasoning = p.reasoning;
    reply.name = p.name;
}

/// The id of call `index` (the model's number for it, [`ReplyEvent::ToolCallStart`]) of
/// exchange `exchange` (1-based): `call_<x>_<i>`.
pub fn call_id(exchange: usize, index: usize) -> String {
    format!("call_{exchange}_{index}")
}

/// A user message of `text`.
pub fn user_message(text: &str) -> Message {
    Message::plain(Role::User, Some(vec![text.to_string()]))
}

/// The result `text` of `call` as a tool message (its `tool_call_id` and name).
pub fn tool_message(call: &ToolCall, text: &str) -> Message {
    Message {
        tool_call_id: call.id.clone(),
        tool: Some(call.name.clone()),
        ..Message::plain(Role::Tool, Some(vec![text.to_string()]))
    }
}

/// The seconds since `t` (for callers timing a turn).
pub fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}
