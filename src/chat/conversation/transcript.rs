//! The conversation as JSON: a message in the OpenAI shape, the `--history` lines (one per
//! message, and one per command that changes the conversation, so that it can be replayed),
//! and the `/save` transcript (system prompt, tools, thinking, sampler settings, seed,
//! messages, the closing ids pending) that `/load` reads back next to the state file.

use super::{Conversation, Exchange};
use crate::chat::message::{Arguments, Message, Role};
use crate::chat::messages::{Effort, Request, Thinking};
use crate::error::{Error, Result};
use crate::generate::sample::SamplerSettings;
use crate::json::{Object, Value};

/// The transcript's `format` value.
pub const TRANSCRIPT_FORMAT: &str = "k3-chat-transcript-1";

/// `low`, `high`, `max` or `off`.
pub fn thinking_name(t: Thinking) -> &'static str {
    match t {
        Thinking::Off => "off",
        Thinking::On(e) => e.name(),
    }
}

/// Parses `low`, `high`, `max` or `off` (anything else, `medium` included, is `None`).
pub fn parse_thinking(s: &str) -> Option<Thinking> {
    match s {
        "off" => Some(Thinking::Off),
        e => Effort::parse(e).map(Thinking::On),
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::Developer => "developer",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// A call's arguments as JSON text (an object; a raw block as it was written).
pub fn arguments_text(a: &Arguments) -> String {
    match a {
        Arguments::Raw(s) => s.clone(),
        Arguments::Object(kv) => {
            let mut o = Object::new();
            for (k, v) in kv {
                o.insert(k.clone(), v.clone());
            }
            Value::Object(o).to_json()
        }
    }
}

/// A message in the OpenAI shape (`role`, `content`, `reasoning_content`, `tool_calls` with
/// `id`, `type`, `function.name`, `function.arguments` as JSON text and k3's `xtml_index`,
/// `tool_call_id`, `name`), which [`Request::from_json`] reads back to the same message.
pub fn message_json(m: &Message) -> Value {
    let mut o = Object::new().with("role", role_name(m.role));
    if let Some(n) = &m.name {
        o.insert("name", n.as_str());
    }
    match &m.content {
        Some(parts) => o.insert("content", parts.concat()),
        None => o.insert("content", Value::Null),
    }
    if let Some(r) = &m.reasoning {
        o.insert("reasoning_content", r.as_str());
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let mut call = Object::new();
                if let Some(id) = &c.id {
                    call.insert("id", id.as_str());
                }
                call.insert("type", "function");
                if let Some(n) = c.index {
                    call.insert("xtml_index", n);
                }
                call.insert(
                    "function",
                    Object::new()
                        .with("name", c.name.as_str())
                        .with("arguments", arguments_text(&c.arguments)),
                );
                Value::Object(call)
            })
            .collect();
        o.insert("tool_calls", Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id", id.as_str());
    }
    if m.role == Role::Tool {
        if let Some(t) = &m.tool {
            o.insert("name", t.as_str());
        }
    }
    if m.partial {
        o.insert("partial", true);
    }
    if let Some(t) = &m.tools {
        o.insert("tools", t.clone());
    }
    Value::Object(o)
}

fn ids_json(ids: &[u32]) -> Value {
    Value::Array(ids.iter().map(|&i| Value::from(i)).collect())
}

/// The `--history` lines that start a chat: `{"command": "chat"}` with `thinking`, `tools`,
/// `sampler`, `seed`, `ctx` and `max_reply` (null: none), then each message the
/// conversation starts from (the system prompt, or a `--messages` file's messages) as
/// [`message_json`] writes it.
pub fn history_start(conv: &Conversation, max_reply: Option<u64>) -> Vec<String> {
    let s = &conv.opts.settings;
    let start = Object::new()
        .with("command", "chat")
        .with("thinking", thinking_name(conv.req.thinking))
        .with("tools", conv.req.tools.clone().unwrap_or(Value::Null))
        .with("sampler", sampler_json(s))
        .with("seed", s.seed)
        .with("ctx", conv.opts.ctx)
        .with("max_reply", max_reply.map_or(Value::Null, Value::from));
    let mut lines = vec![Value::Object(start).to_json()];
    lines.extend(conv.req.messages.iter().map(|m| message_json(m).to_json()));
    lines
}

/// A command that changed the conversation, for its `--history` line.
#[derive(Debug, Clone, Copy)]
pub enum HistoryCommand<'a> {
    /// `/undo` dropped the exchange of turn `turn` (its lines stand before this one).
    Undo {
        /// The turn undone (1-based, as its lines' `turn`).
        turn: usize,
    },
    /// `/reset`: back to the messages the chat started from.
    Reset,
    /// `/think`: the thinking changed; the conversation is encoded again.
    Think(Thinking),
    /// `/load FILE`: the conversation is now the loaded one.
    Load(&'a str),
}

/// The `--history` line of `command`, applied to `conv` (after it): `{"command": "undo",
/// "turn"}`, `{"command": "reset"}`, `{"command": "think", "thinking"}`, or `{"command":
/// "load", "file", "thinking", "tools", "sampler", "seed", "messages", "base_messages"}`
/// (the conversation loaded, the turns after it numbered from 1 again).
pub fn history_command(command: HistoryCommand<'_>, conv: &Conversation) -> String {
    let o = match command {
        HistoryCommand::Undo { turn } => Object::new().with("command", "undo").with("turn", turn),
        HistoryCommand::Reset => Object::new().with("command", "reset"),
        HistoryCommand::Think(t) => Object::new()
            .with("command", "think")
            .with("thinking", thinking_name(t)),
        HistoryCommand::Load(file) => Object::new()
            .with("command", "load")
            .with("file", file)
            .with("thinking", thinking_name(conv.req.thinking))
            .with("tools", conv.req.tools.clone().unwrap_or(Value::Null))
            .with("sampler", sampler_json(&conv.opts.settings))
            .with("seed", conv.opts.settings.seed)
            .with(
                "messages",
                Value::Array(conv.req.messages.iter().map(message_json).collect()),
            )
            .with("base_messages", conv.base_messages),
    };
    Value::Object(o).to_json()
}

/// The `--history` lines of exchange `turn` (JSON objects, one per line, each with `turn`):
/// each input message with `ids` (the turn's input ids on its first message; a turn without
/// input, the first of a `--messages` file, has the line `{"role": "prompt", "ids"}`), then
/// the reply with `ids` (as generated), `seconds`, `prefilled`, `stop_reason`,
/// `closing_ids` and `logits_fnv1a64` (hex per reply id).
pub fn history_lines(x: &Exchange, turn: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, m) in x.input.iter().enumerate() {
        let mut o = obj(message_json(m));
        o.insert("turn", turn);
        o.insert(
            "ids",
            if i == 0 {
                ids_json(&x.input_ids)
            } else {
                Value::Array(Vec::new())
            },
        );
        lines.push(Value::Object(o).to_json());
    }
    if x.input.is_empty() {
        let o = Object::new()
            .with("role", "prompt")
            .with("turn", turn)
            .with("ids", ids_json(&x.input_ids));
        lines.push(Value::Object(o).to_json());
    }
    let mut o = obj(message_json(&x.reply));
    o.insert("turn", turn);
    o.insert("ids", ids_json(&x.reply_ids));
    o.insert(
        "seconds",
        Value::from_f64(x.prefill_seconds + x.decode_seconds),
    );
    o.insert("prefilled", x.prefilled);
    o.insert("stop_reason", x.end.name());
    o.insert("closing_ids", ids_json(&x.closing));
    o.insert(
        "logits_fnv1a64",
        Value::Array(
            x.logits_fnv1a64
                .iter()
                .map(|h| Value::from(crate::units::hex(*h)))
                .collect(),
        ),
    );
    if !x.warnings.is_empty() {
        let w: Vec<Value> = x.warnings.iter().map(|w| Value::from(w.as_str())).collect();
        o.insert("warnings", Value::Array(w));
    }
    lines.push(Value::Object(o).to_json());
    lines
}

fn obj(v: Value) -> Object {
    match v {
        Value::Object(o) => o,
        _ => Object::new(),
    }
}

/// The sampler settings as the transcript and the report write them.
pub fn sampler_json(s: &SamplerSettings) -> Value {
    Value::Object(
        Object::new()
            .with("temperature", Value::from_f64(s.temperature))
            .with("top_p", Value::from_f64(s.top_p))
            .with("top_k", s.top_k)
            .with("min_p", Value::from_f64(s.min_p))
            .with("seed", s.seed),
    )
}

impl Conversation {
    /// The `/save` transcript: `format`, `system` (the system prompt or null), `tools`,
    /// `thinking`, `sampler` (with the `seed`), `seed`, `ctx`, `messages` (the whole
    /// conversation, OpenAI shape), `base_messages` (how many of them `/reset` keeps),
    /// `closing_ids` (what closes the last reply before the next turn) and `ids` (the
    /// sequence's ids, to check against the state file).
    pub fn transcript(&self) -> Value {
        let system = self
            .req
            .messages
            .first()
            .filter(|m| m.role == Role::System && self.base_messages > 0)
            .and_then(|m| m.content.as_ref())
            .map_or(Value::Null, |c| Value::from(c.concat()));
        let s = &self.opts.settings;
        Value::Object(
            Object::new()
                .with("format", TRANSCRIPT_FORMAT)
                .with("system", system)
                .with("tools", self.req.tools.clone().unwrap_or(Value::Null))
                .with("thinking", thinking_name(self.req.thinking))
                .with("sampler", sampler_json(s))
                .with("seed", s.seed)
                .with("ctx", self.opts.ctx)
                .with(
                    "messages",
                    Value::Array(self.req.messages.iter().map(message_json).collect()),
                )
                .with("base_messages", self.base_messages)
                .with("closing_ids", ids_json(&self.closing))
                .with(
                    "ids",
                    ids_json(self.sequence().map_or(&[][..], |q| q.ids())),
                ),
        )
    }
}

/// A transcript read back: the request, the closing ids, the system-prompt count and the
/// sequence's ids (to check against the state file).
#[derive(Debug)]
pub struct Transcript {
    /// The conversation (messages, tools, thinking).
    pub req: Request,
    /// The ids that close the last reply.
    pub closing: Vec<u32>,
    /// Messages `/reset` keeps.
    pub base_messages: usize,
    /// The sequence's ids when it was saved.
    pub ids: Vec<u32>,
    /// The sampler settings and seed.
    pub sampler: SamplerSettings,
}

/// Reads a transcript written by [`Conversation::transcript`]; `origin` names the file.
///
/// Errors (exit 2): not a transcript, or a field missing or of the wrong type (naming it),
/// or messages the template refuses (naming their index and field).
pub fn read_transcript(v: &Value, origin: &str) -> Result<Transcript> {
    let bad = |field: &str, what: &str| Error::invalid(format!("{origin}: {field}: {what}"));
    let o = v
        .as_object()
        .ok_or_else(|| bad("(root)", "expected a transcript object"))?;
    if o.get("format").and_then(Value::as_str) != Some(TRANSCRIPT_FORMAT) {
        return Err(bad("format", &format!("expected \"{TRANSCRIPT_FORMAT}\"")));
    }
    let ids_of = |key: &str| -> Result<Vec<u32>> {
        o.get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| bad(key, "expected an array of ids"))?
            .iter()
            .map(|x| {
                x.as_number()
                    .and_then(|n| n.as_u64())
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad(key, "expected an array of ids"))
            })
            .collect()
    };
    let thinking = o
        .get("thinking")
        .and_then(Value::as_str)
        .and_then(parse_thinking)
        .ok_or_else(|| bad("thinking", "expected low, high, max or off"))?;
    let mut body = Object::new().with(
        "messages",
        o.get("messages")
            .cloned()
            .ok_or_else(|| bad("messages", "missing"))?,
    );
    if let Some(t) = o.get("tools").filter(|t| !t.is_null()) {
        body.insert("tools", t.clone());
    }
    let mut req = Request::from_json(&Value::Object(body)).map_err(|e| e.context(origin))?;
    req.set_thinking(thinking);
    let sampler = read_sampler(o.get("sampler"), origin)?;
    let base_messages =
        o.get("base_messages")
            .and_then(Value::as_number)
            .and_then(|n| n.as_u64())
            .filter(|&n| n as usize <= req.messages.len())
            .ok_or_else(|| bad("base_messages", "expected a count of messages"))? as usize;
    Ok(Transcript {
        req,
        closing: ids_of("closing_ids")?,
        base_messages,
        ids: ids_of("ids")?,
        sampler,
    })
}

fn read_sampler(v: Option<&Value>, origin: &str) -> Result<SamplerSettings> {
    let bad = |k: &str| Error::invalid(format!("{origin}: sampler.{k}: expected a number"));
    let o = v
        .and_then(Value::as_object)
        .ok_or_else(|| Error::invalid(format!("{origin}: sampler: expected an object")))?;
    let f = |k: &str| -> Result<f64> {
        o.get(k)
            .and_then(Value::as_number)
            .map(|n| n.as_f64())
            .ok_or_else(|| bad(k))
    };
    let u = |k: &str| -> Result<u64> {
        o.get(k)
            .and_then(Value::as_number)
            .and_then(|n| n.as_u64())
            .ok_or_else(|| bad(k))
    };
    let s = SamplerSettings {
        temperature: f("temperature")?,
        top_p: f("top_p")?,
        top_k: u("top_k")?,
        min_p: f("min_p")?,
        seed: u("seed")?,
    };
    s.validate(&format!("{origin}: sampler"))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_their_json() {
        let body = r#"[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "reasoning_content": "Call it.", "content": "",
             "tool_calls": [{"id": "call_1_1", "type": "function", "function": {"name": "w",
               "arguments": "{\"city\": \"Paris\", \"n\": [1, 2.5, null, true]}"}},
               {"id": "call_1_2", "type": "function", "xtml_index": 3, "function": {"name": "w", "arguments": "not json"}}]},
            {"role": "tool", "tool_call_id": "call_1_1", "name": "w", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_1_2", "name": "w", "content": "?"}
        ]"#;
        let req = Request::from_json(&crate::json::parse(body.as_bytes()).unwrap()).unwrap();
        let again = Value::Array(req.messages.iter().map(message_json).collect());
        let back = Request::from_json(&again).unwrap();
        assert_eq!(back.messages, req.messages);
    }

    #[test]
    fn thinking_names() {
        for t in ["low", "high", "max", "off"] {
            assert_eq!(thinking_name(parse_thinking(t).unwrap()), t);
        }
        assert_eq!(parse_thinking("medium"), None);
    }
}
