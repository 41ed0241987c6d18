//! Response bodies in the OpenAI shapes (ENGINE.md §11): `chat.completion`,
//! `chat.completion.chunk`, `text_completion` (and its chunks), `usage`, `logprobs`, the model
//! list, and Server-Sent Events framing (`data: …\n\n`, comment lines, `data: [DONE]`).

use super::reply::{Piece, TokenLogprob};
use crate::json::{Object, Value};
use crate::tokenizer::Tokenizer;

/// What identifies one response: `id`, `created` (Unix seconds) and `model`.
#[derive(Debug, Clone)]
pub struct Head {
    /// `chatcmpl-…` or `cmpl-…`.
    pub id: String,
    /// Unix seconds when the request started.
    pub created: u64,
    /// The model id.
    pub model: String,
}

/// Token counts of `usage` (ENGINE.md §11).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt ids, without the generation prompt's channel-opening stub (chat).
    pub prompt_tokens: usize,
    /// Generated ids.
    pub completion_tokens: usize,
    /// Generated ids of the think channel.
    pub reasoning_tokens: usize,
    /// Prompt ids reused from a held snapshot.
    pub cached_tokens: usize,
}

impl Usage {
    /// The `usage` object.
    pub fn to_value(&self) -> Value {
        Object::new()
            .with("prompt_tokens", self.prompt_tokens)
            .with("completion_tokens", self.completion_tokens)
            .with("total_tokens", self.prompt_tokens + self.completion_tokens)
            .with(
                "prompt_tokens_details",
                Object::new().with("cached_tokens", self.cached_tokens),
            )
            .with(
                "completion_tokens_details",
                Object::new().with("reasoning_tokens", self.reasoning_tokens),
            )
            .into()
    }
}

/// One SSE event carrying `v` as JSON.
pub fn sse(v: &Value) -> Vec<u8> {
    format!("data: {}\n\n", v.to_json()).into_bytes()
}

/// An SSE comment line (ignored by clients): prefill progress.
pub fn sse_comment(text: &str) -> Vec<u8> {
    format!(": {}\n\n", text.replace('\n', " ")).into_bytes()
}

/// The end of an SSE stream.
pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// The message (or the whole of a chat delta) of the pieces: `role`, `content`,
/// `reasoning_content` (when any), `tool_calls` (when any). `delta`: only the keys present.
pub fn message(pieces: &[Piece], delta: bool, role: bool) -> Object {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for p in pieces {
        match p {
            Piece::Content(t) => content.push_str(t),
            Piece::Reasoning(t) => reasoning.push_str(t),
            Piece::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let mut c = Object::new();
                if delta {
                    c.insert("index", *index);
                }
                c.insert("id", id.as_str());
                c.insert("type", "function");
                c.insert(
                    "function",
                    Object::new()
                        .with("name", name.as_str())
                        .with("arguments", arguments.as_str()),
                );
                calls.push(Value::from(c));
            }
        }
    }
    let mut m = Object::new();
    if role {
        m.insert("role", "assistant");
    }
    if !delta {
        let c: Value = if content.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            content.into()
        };
        m.insert("content", c);
        if !reasoning.is_empty() {
            m.insert("reasoning_content", reasoning);
        }
        if !calls.is_empty() {
            m.insert("tool_calls", calls);
        }
        return m;
    }
    if !reasoning.is_empty() {
        m.insert("reasoning_content", reasoning);
    }
    if !content.is_empty() || (role && calls.is_empty()) {
        m.insert("content", content);
    }
    if !calls.is_empty() {
        m.insert("tool_calls", calls);
    }
    m
}

/// A token's text (lossy UTF-8) and bytes, for `logprobs`.
fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<Value>) {
    let b = tok.token_bytes(id).unwrap_or(&[]);
    (
        String::from_utf8_lossy(b).into_owned(),
        b.iter().map(|&x| Value::from(x as u64)).collect(),
    )
}

/// Chat `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
pub fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f64| {
        let (t, b) = token_text(tok, id);
        Object::new()
            .with("token", t)
            .with("logprob", lp)
            .with("bytes", b)
    };
    let content: Vec<Value> = lps
        .iter()
        .map(|l| {
            let top: Vec<Value> = l.top.iter().map(|&(i, x)| entry(i, x).into()).collect();
            entry(l.id, l.logprob).with("top_logprobs", top).into()
        })
        .collect();
    Object::new().with("content", content).into()
}

/// Where a completion's `logprobs.text_offset` stands: the characters (Unicode code points,
/// as the OpenAI API counts) of the reply's token bytes so far. The same count serves a whole
/// response and a stream's chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextOffset {
    chars: usize,
}

impl TextOffset {
    /// The offset of a token of `bytes`, and moves past it: the index of the character its
    /// first byte belongs to. A character cut over several tokens gives each of them its own
    /// offset (a token that ends inside it and one that starts inside it alike); a token
    /// without bytes gets the offset of the next character.
    pub fn next(&mut self, bytes: &[u8]) -> usize {
        let is_cont = |b: u8| b & 0xC0 == 0x80;
        let at = match bytes.first() {
            Some(&b) if is_cont(b) => self.chars.saturating_sub(1),
            _ => self.chars,
        };
        self.chars += bytes.iter().filter(|&&b| !is_cont(b)).count();
        at
    }
}

/// Completions `logprobs`: `tokens`, `token_logprobs`, `top_logprobs` (token → logprob),
/// `text_offset` (characters, counted by `at`, which moves past these tokens).
pub fn completion_logprobs(tok: &Tokenizer, lps: &[TokenLogprob], at: &mut TextOffset) -> Value {
    let (mut tokens, mut lp, mut top, mut offs) = (vec![], vec![], vec![], vec![]);
    for l in lps {
        let (t, _) = token_text(tok, l.id);
        offs.push(Value::from(at.next(tok.token_bytes(l.id).unwrap_or(&[]))));
        tokens.push(Value::from(t));
        lp.push(Value::from(l.logprob));
        let mut o = Object::new();
        for &(i, x) in &l.top {
            o.insert(token_text(tok, i).0, x);
        }
        top.push(Value::from(o));
    }
    Object::new()
        .with("tokens", tokens)
        .with("token_logprobs", lp)
        .with("top_logprobs", top)
        .with("text_offset", offs)
        .into()
}

fn head_obj(h: &Head, object: &str) -> Object {
    Object::new()
        .with("id", h.id.as_str())
        .with("object", object)
        .with("created", h.created)
        .with("model", h.model.as_str())
}

/// A whole `chat.completion`.
pub fn chat_completion(
    h: &Head,
    pieces: &[Piece],
    finish: &str,
    logprobs: Option<Value>,
    usage: &Usage,
) -> Value {
    let choice = Object::new()
        .with("index", 0u64)
        .with("message", message(pieces, false, true))
        .with("logprobs", logprobs.unwrap_or(Value::Null))
        .with("finish_reason", finish);
    head_obj(h, "chat.completion")
        .with("choices", vec![Value::from(choice)])
        .with("usage", usage.to_value())
        .into()
}

/// One `chat.completion.chunk` with a delta (or, with `usage`, the usage chunk: no choices).
pub fn chat_chunk(
    h: &Head,
    delta: Option<Object>,
    finish: Option<&str>,
    logprobs: Option<Value>,
    usage: Option<&Usage>,
) -> Value {
    let mut o = head_obj(h, "chat.completion.chunk");
    match usage {
        Some(u) => {
            o.insert("choices", Vec::<Value>::new());
            o.insert("usage", u.to_value());
        }
        None => {
            let choice = Object::new()
                .with("index", 0u64)
                .with("delta", delta.unwrap_or_default())
                .with("logprobs", logprobs.unwrap_or(Value::Null))
                .with("finish_reason", finish);
            o.insert("choices", vec![Value::from(choice)]);
        }
    }
    o.into()
}

/// A whole `text_completion`, or one of its chunks (`usage` None while streaming; with
/// `usage_only`, the usage chunk with no choices).
pub fn completion(
    h: &Head,
    text: &str,
    finish: Option<&str>,
    logprobs: Option<Value>,
    usage: Option<&Usage>,
    usage_only: bool,
) -> Value {
    let mut o = head_obj(h, "text_completion");
    if usage_only {
        o.insert("choices", Vec::<Value>::new());
    } else {
        let choice = Object::new()
            .with("text", text)
            .with("index", 0u64)
            .with("logprobs", logprobs.unwrap_or(Value::Null))
            .with("finish_reason", finish);
        o.insert("choices", vec![Value::from(choice)]);
    }
    if let Some(u) = usage {
        let mut uo = Object::new()
            .with("prompt_tokens", u.prompt_tokens)
            .with("completion_tokens", u.completion_tokens)
            .with("total_tokens", u.prompt_tokens + u.completion_tokens);
        uo.insert(
            "prompt_tokens_details",
            Object::new().with("cached_tokens", u.cached_tokens),
        );
        o.insert("usage", uo);
    }
    o.into()
}

/// The model object of `model` (an entry of `GET /v1/models`, and `GET /v1/models/{id}`).
pub fn model(model: &str, created: u64) -> Value {
    Object::new()
        .with("id", model)
        .with("object", "model")
        .with("created", created)
        .with("owned_by", "k3")
        .into()
}

/// `GET /v1/models`: the one model, in `data` (OpenAI's list) and again in `models` (what
/// Codex CLI reads from its provider's model list).
pub fn models(model: &str, created: u64) -> Value {
    Object::new()
        .with("object", "list")
        .with("data", vec![self::model(model, created)])
        .with("models", vec![self::model(model, created)])
        .into()
}

#[cfg(test)]
mod tests {
    use super::TextOffset;

    /// `text_offset` counted bytes (`[0, 6]` after "智商"); it counts characters, and a
    /// character cut over tokens gives each piece that character's offset.
    #[test]
    fn text_offsets_count_characters() {
        let mut at = TextOffset::default();
        let offs: Vec<usize> = [
            "智商".as_bytes(),
            b"ok",
            &[0xE4],
            &[0xB8],
            &[0xAD, b'x'],
            &[],
            &[b'y', 0xC3],
            &[0xA9],
            "😀".as_bytes(),
            b"!",
        ]
        .iter()
        .map(|b| at.next(b))
        .collect();
        // 智商 ok 中 x y é 😀 !: chars 0,1 2,3 4 5 6 7 8 9
        assert_eq!(offs, [0, 2, 4, 4, 4, 6, 6, 7, 8, 9]);
    }
}
