//! Reading the model's reply (TOKENIZER.md §13): a streaming state machine over generated
//! ids → [`ReplyEvent`]s. Text is emitted as soon as its characters are complete (the
//! tokenizer's [`StreamDecoder`], TOKENIZER.md §9); structural tokens are never text; a
//! tool call is emitted whole at its close(`call`). Malformed markup (an unknown tag, a
//! stray token, an argument that does not parse, a call without a name) becomes content
//! plus a [`ReplyEvent::Warning`]: every byte of the reply reaches an event, nothing panics.

use super::template::Segment;
use super::{CLOSE, END_OF_MSG, EOS, OPEN, SEP};
use crate::json::{Object, Value};
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// One parsed part of the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyEvent {
    /// Text of the think channel (`reasoning_content`).
    Reasoning(String),
    /// Text of the response channel (`content`), and malformed markup surfaced as text.
    Content(String),
    /// A call opened: its number in the reply ([`ReplyParser`] "Call numbers") and its
    /// `tool` attribute.
    ToolCallStart {
        /// The call's number: the `index` the model wrote for it (1-based).
        index: usize,
        /// The function name.
        name: String,
    },
    /// One argument of the call `index`: its key and its value as JSON text.
    ToolCallArgument {
        /// The call's number.
        index: usize,
        /// The argument key.
        key: String,
        /// The value as compact JSON (a string argument as a JSON string).
        value: String,
    },
    /// The call `index` closed: its arguments as one compact JSON object.
    ToolCallEnd {
        /// The call's number.
        index: usize,
        /// The arguments object.
        arguments: String,
    },
    /// The end-of-turn id (`[EOS]` or `<|end_of_msg|>`, TOKENIZER.md §11).
    EndOfTurn(u32),
    /// Malformed markup or an id outside the vocabulary; the bytes went to `Content`.
    Warning(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Think,
    /// After close(think), before open(response).
    Between,
    Response,
    /// After close(response): open(tools) or close(message) may follow.
    AfterResponse,
    Tools,
    Call,
    Argument,
    Json,
    /// After close(message): the end id follows.
    AfterMessage,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    Open,
    Close,
}

/// A call being read: emitted whole at close(`call`).
#[derive(Debug, Default)]
struct Call {
    /// The `index` attribute the model wrote, when it is a positive integer.
    written: Option<usize>,
    /// Its position among the calls the reply opened (1-based, malformed ones counted).
    position: usize,
    name: String,
    args: Vec<(String, Value)>,
    key: String,
    kind: String,
    value: Vec<u8>,
    raw: Vec<u8>,
}

/// The streaming reply parser. Feed ids with [`ReplyParser::push`], then call
/// [`ReplyParser::finish`] once; the events of one id at a time and of all ids at once are
/// the same up to how adjacent texts are split.
///
/// Call numbers: a call is numbered by the `index` attribute the model wrote for it, so that
/// its result, sent back with that index (TOKENIZER.md §10 "tool result"), answers the call
/// the model made even when an earlier call was malformed and surfaced as content (calls
/// `index="1"` malformed and `index="2"` valid: the valid one is number 2, not 1). When the
/// attribute is missing, not a positive integer, or the number of an earlier call of the
/// reply, the call takes its position among the calls the reply opened (malformed ones
/// counted), raised past every number already given: numbers are unique within a reply, and
/// for a model that numbers its calls 1, 2, … as the template does they are those numbers.
#[derive(Debug)]
pub struct ReplyParser {
    state: State,
    header: Option<(Header, Vec<u8>)>,
    call: Option<Call>,
    /// `open(call)` tags read (malformed calls included).
    opened: usize,
    /// The numbers given to the calls emitted so far.
    numbers: Vec<usize>,
    decoder: StreamDecoder,
    /// Whether the decoder currently holds reasoning (true) or content bytes.
    reasoning: bool,
}

impl ReplyParser {
    /// A parser for a reply that starts inside the channel the generation prompt opened:
    /// the think channel when `thinking`, else the response channel (also after a `partial`
    /// prefix, TOKENIZER.md §10 step 6).
    pub fn new(thinking: bool) -> ReplyParser {
        ReplyParser {
            state: if thinking {
                State::Think
            } else {
                State::Response
            },
            header: None,
            call: None,
            opened: 0,
            numbers: Vec::new(),
            decoder: StreamDecoder::new(),
            reasoning: thinking,
        }
    }

    /// True once the end-of-turn id was read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads one generated id, appending its events to `out`.
    pub fn push(&mut self, tok: &Tokenizer, id: u32, out: &mut Vec<ReplyEvent>) {
        let bytes = match tok.token_bytes(id) {
            Ok(b) => b,
            Err(_) => {
                out.push(ReplyEvent::Warning(format!(
                    "id {id} is outside the vocabulary (skipped)"
                )));
                return;
            }
        };
        if let Some(call) = &mut self.call {
            call.raw.extend_from_slice(bytes);
        }
        match id {
            OPEN | CLOSE => {
                if let Some((_, raw)) = self.header.take() {
                    self.malformed(raw, "a tag header without <|sep|>", out);
                }
                let kind = if id == OPEN {
                    Header::Open
                } else {
                    Header::Close
                };
                self.header = Some((kind, bytes.to_vec()));
            }
            SEP => match self.header.take() {
                Some((kind, mut raw)) => {
                    raw.extend_from_slice(bytes);
                    self.tag(kind, raw, out);
                }
                None => self.malformed(bytes.to_vec(), "<|sep|> outside a tag", out),
            },
            END_OF_MSG | EOS => {
                if let Some((_, raw)) = self.header.take() {
                    self.malformed(raw, "a tag header cut by the end of turn", out);
                }
                if self.state == State::Done {
                    self.malformed(bytes.to_vec(), "an id after the end of turn", out);
                    return;
                }
                self.abandon_call(out);
                if self.state != State::AfterMessage {
                    out.push(ReplyEvent::Warning(format!(
                        "end of turn inside {} (channels left open)",
                        self.where_name()
                    )));
                }
                self.flush(out);
                self.state = State::Done;
                out.push(ReplyEvent::EndOfTurn(id));
            }
            _ => self.text(bytes, out),
        }
    }

    /// Reads several ids (the same events as pushing them one at a time).
    pub fn push_all(&mut self, tok: &Tokenizer, ids: &[u32], out: &mut Vec<ReplyEvent>) {
        for &id in ids {
            self.push(tok, id, out);
        }
    }

    /// Ends the reply (generation stopped): a held partial character prints as U+FFFD, an
    /// unfinished tag or call becomes content with a warning.
    pub fn finish(&mut self, out: &mut Vec<ReplyEvent>) {
        if let Some((_, raw)) = self.header.take() {
            self.malformed(raw, "a tag header cut by the end of the reply", out);
        }
        self.abandon_call(out);
        self.flush(out);
    }

    /// The segments that close what the reply left open, so that a reply stopped early
    /// (a reply limit, an interrupt) ends like a finished turn before the next one: a cut tag
    /// header gets its `<|sep|>`, then close(`argument`/`json`), close(`call`), close(`tools`),
    /// close(`think`) + open(`response`), close(`response`), close(`message`) and
    /// `<|end_of_msg|>` as the state needs (TOKENIZER.md §10, §11). Empty after the end id.
    /// Encode them with [`super::encode`].
    pub fn closing(&self) -> Vec<Segment> {
        let mut out = Vec::new();
        if self.state == State::Done {
            return out;
        }
        if self.header.is_some() {
            out.push(Segment::Special(SEP));
        }
        let close = |out: &mut Vec<Segment>, tag: &str| {
            out.extend([
                Segment::Special(CLOSE),
                Segment::Text(tag.to_string()),
                Segment::Special(SEP),
            ]);
        };
        let in_call = self.call.is_some();
        match self.state {
            State::Argument if in_call => close(&mut out, "argument"),
            State::Json if in_call => close(&mut out, "json"),
            _ => {}
        }
        if matches!(self.state, State::Call | State::Argument | State::Json) {
            close(&mut out, "call");
        }
        if matches!(
            self.state,
            State::Tools | State::Call | State::Argument | State::Json
        ) {
            close(&mut out, "tools");
        }
        if self.state == State::Think {
            close(&mut out, "think");
        }
        if matches!(self.state, State::Think | State::Between) {
            out.extend([
                Segment::Special(OPEN),
                Segment::Text("response".to_string()),
                Segment::Special(SEP),
            ]);
        }
        if matches!(self.state, State::Think | State::Between | State::Response) {
            close(&mut out, "response");
        }
        if self.state != State::AfterMessage {
            close(&mut out, "message");
        }
        out.push(Segment::Special(END_OF_MSG));
        out
    }

    fn where_name(&self) -> &'static str {
        match self.state {
            State::Think => "the think channel",
            State::Response => "the response channel",
            State::Tools | State::Call | State::Argument | State::Json => "the tool calls",
            _ => "the message",
        }
    }

    fn text(&mut self, bytes: &[u8], out: &mut Vec<ReplyEvent>) {
        if let Some((_, raw)) = &mut self.header {
            raw.extend_from_slice(bytes);
            return;
        }
        match self.state {
            State::Think => self.emit(true, bytes, out),
            State::Response => self.emit(false, bytes, out),
            State::Argument | State::Json => {
                if let Some(call) = &mut self.call {
                    call.value.extend_from_slice(bytes);
                }
            }
            State::Call if self.call.is_none() => self.emit(false, bytes, out),
            _ => self.malformed(bytes.to_vec(), "text outside a channel", out),
        }
    }

    /// Streams `bytes` as reasoning or content; switching kind flushes the held tail.
    fn emit(&mut self, reasoning: bool, bytes: &[u8], out: &mut Vec<ReplyEvent>) {
        if reasoning != self.reasoning {
            self.flush(out);
            self.reasoning = reasoning;
        }
        let s = self.decoder.push(bytes);
        self.send(s, out);
    }

    fn flush(&mut self, out: &mut Vec<ReplyEvent>) {
        let s = self.decoder.finish();
        self.send(s, out);
    }

    fn send(&self, s: String, out: &mut Vec<ReplyEvent>) {
        if s.is_empty() {
            return;
        }
        out.push(if self.reasoning {
            ReplyEvent::Reasoning(s)
        } else {
            ReplyEvent::Content(s)
        });
    }

    fn malformed(&mut self, raw: Vec<u8>, why: &str, out: &mut Vec<ReplyEvent>) {
        // Inside a call the bytes are already in the call's raw record.
        if let Some(call) = self.call.take() {
            drop(raw);
            let raw = call.raw;
            self.state = State::Call; // skip to close(call), bytes as content
            out.push(ReplyEvent::Warning(format!(
                "malformed tool call ({why}): kept as content"
            )));
            self.emit(false, &raw, out);
            return;
        }
        out.push(ReplyEvent::Warning(format!(
            "malformed markup ({why}): kept as content"
        )));
        self.emit(false, &raw, out);
    }

    /// An unfinished call at the end: its bytes become content.
    fn abandon_call(&mut self, out: &mut Vec<ReplyEvent>) {
        if let Some(call) = self.call.take() {
            out.push(ReplyEvent::Warning(
                "unfinished tool call: kept as content".to_string(),
            ));
            self.emit(false, &call.raw, out);
            self.state = State::Tools;
        }
    }

    fn tag(&mut self, kind: Header, raw: Vec<u8>, out: &mut Vec<ReplyEvent>) {
        let Some((name, attrs)) = parse_header(&raw) else {
            return self.malformed(raw, "a tag header that does not parse", out);
        };
        let attr = |k: &str| attrs.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        let next = match (kind, name.as_str(), self.state) {
            (Header::Close, "think", State::Think) => State::Between,
            (Header::Open, "response", State::Between) => State::Response,
            (Header::Close, "response", State::Response) => State::AfterResponse,
            (Header::Open, "tools", State::AfterResponse) => State::Tools,
            (Header::Close, "tools", State::Tools) => State::AfterResponse,
            (Header::Close, "message", State::AfterResponse) => State::AfterMessage,
            (Header::Open, "call", State::Tools) => {
                self.opened += 1;
                match attr("tool").filter(|t| !t.is_empty()) {
                    Some(name) => {
                        self.call = Some(Call {
                            written: attr("index").as_deref().and_then(positive),
                            position: self.opened,
                            name,
                            raw: raw.clone(),
                            ..Call::default()
                        });
                        State::Call
                    }
                    None => return self.malformed(raw, "a call without a tool name", out),
                }
            }
            (Header::Close, "call", State::Call) => return self.end_call(raw, out),
            (Header::Open, "argument", State::Call) if self.call.is_some() => {
                let (Some(key), Some(t)) = (attr("key"), attr("type")) else {
                    return self.malformed(raw, "an argument without key or type", out);
                };
                if let Some(call) = &mut self.call {
                    call.key = key;
                    call.kind = t;
                    call.value.clear();
                }
                State::Argument
            }
            (Header::Open, "json", State::Call) if self.call.is_some() => {
                if let Some(call) = &mut self.call {
                    call.value.clear();
                }
                State::Json
            }
            (Header::Close, "argument", State::Argument) => return self.end_argument(raw, out),
            (Header::Close, "json", State::Json) => return self.end_json(raw, out),
            _ => return self.malformed(raw, &format!("unexpected tag `{name}`"), out),
        };
        self.state = next;
    }

    fn end_argument(&mut self, raw: Vec<u8>, out: &mut Vec<ReplyEvent>) {
        let Some(call) = &mut self.call else { return };
        let text = String::from_utf8_lossy(&call.value).into_owned();
        let value = match call.kind.as_str() {
            "string" => Some(Value::String(text)),
            t => crate::json::parse(text.as_bytes())
                .ok()
                .filter(|v| type_matches(t, v)),
        };
        match value {
            Some(v) => {
                let key = std::mem::take(&mut call.key);
                call.args.push((key, v));
                self.state = State::Call;
            }
            None => self.malformed(
                raw,
                "an argument value that does not parse as its type",
                out,
            ),
        }
    }

    fn end_json(&mut self, raw: Vec<u8>, out: &mut Vec<ReplyEvent>) {
        let Some(call) = &mut self.call else { return };
        match crate::json::parse(&call.value) {
            Ok(Value::Object(o)) => {
                call.args = o.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
                self.state = State::Call;
            }
            _ => self.malformed(raw, "a json block that is not an object", out),
        }
    }

    fn end_call(&mut self, raw: Vec<u8>, out: &mut Vec<ReplyEvent>) {
        self.state = State::Tools;
        let Some(call) = self.call.take() else {
            // The close of a call already surfaced as content: its bytes too.
            self.emit(false, &raw, out);
            return;
        };
        let index = match call.written {
            Some(n) if !self.numbers.contains(&n) => n,
            _ => {
                let past = self.numbers.iter().max().map_or(1, |m| m + 1);
                call.position.max(past)
            }
        };
        self.numbers.push(index);
        out.push(ReplyEvent::ToolCallStart {
            index,
            name: call.name,
        });
        let mut obj = Object::new();
        for (key, value) in call.args {
            out.push(ReplyEvent::ToolCallArgument {
                index,
                key: key.clone(),
                value: value.to_json(),
            });
            obj.insert(key, value);
        }
        out.push(ReplyEvent::ToolCallEnd {
            index,
            arguments: Value::Object(obj).to_json(),
        });
    }
}

/// Events with adjacent texts of one kind merged: what a reply says, independent of how its
/// text was split across ids.
pub fn coalesce(events: Vec<ReplyEvent>) -> Vec<ReplyEvent> {
    let mut out: Vec<ReplyEvent> = Vec::with_capacity(events.len());
    for e in events {
        match (out.last_mut(), &e) {
            (Some(ReplyEvent::Reasoning(a)), ReplyEvent::Reasoning(b)) => a.push_str(b),
            (Some(ReplyEvent::Content(a)), ReplyEvent::Content(b)) => a.push_str(b),
            _ => out.push(e),
        }
    }
    out
}

/// A positive decimal integer (an `index` attribute), else `None`.
fn positive(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|&n| n > 0)
}

fn type_matches(t: &str, v: &Value) -> bool {
    matches!(
        (t, v),
        ("number", Value::Number(_))
            | ("boolean", Value::Bool(_))
            | ("null", Value::Null)
            | ("object", Value::Object(_))
            | ("array", Value::Array(_))
    )
}

/// `<|open|>tag key="v"…<|sep|>` (raw bytes with the token names) → tag and attributes
/// (`&quot;`, `&amp;` unescaped). `None` when it does not have that shape.
fn parse_header(raw: &[u8]) -> Option<(String, Vec<(String, String)>)> {
    let s = std::str::from_utf8(raw).ok()?;
    let s = s
        .strip_prefix("<|open|>")
        .or_else(|| s.strip_prefix("<|close|>"))?;
    let s = s.strip_suffix("<|sep|>")?;
    let (tag, mut rest) = s.split_once(' ').map_or((s, ""), |(t, r)| (t, r));
    if tag.is_empty()
        || !tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return None;
    }
    let mut attrs = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let (value, after) = after.split_once('"')?;
        if key.is_empty() || key.contains(' ') {
            return None;
        }
        attrs.push((
            key.to_string(),
            value.replace("&quot;", "\"").replace("&amp;", "&"),
        ));
        rest = match after.strip_prefix(' ') {
            Some(r) => r,
            None if after.is_empty() => "",
            None => return None,
        };
    }
    Some((tag.to_string(), attrs))
}
