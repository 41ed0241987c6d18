//! Regenerates `tests/fixtures/chat/cases.json` from `tests/fixtures/chat/requests.json`
//! with the reference K3 chat encoder (`dynamo_renderer::kimi_k3`) and the reference
//! tokenizer (`tiktoken-rs` + `splintr-vocab-kimi`, the Kimi pattern). See
//! tests/fixtures/chat/README.md.
//!
//! Usage: `cargo run --manifest-path chat-oracle/Cargo.toml [-- REQUESTS OUT]`.

use anyhow::{bail, Context, Result};
use dynamo_renderer::kimi_k3::KimiK3Formatter;
use dynamo_renderer::{OAIChatLikeRequest, OAIPromptFormatter};
use minijinja::value::Value as MiniValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use tiktoken_rs::CoreBPE;

#[allow(dead_code)]
#[path = "../../tests/engine/support/tokenizer/reference_data.rs"]
mod reference_data;
use reference_data::{splintr_ranks, KIMI_PATTERN};

/// The control segments the K3 encoder emits and their ids (TOKENIZER.md §3).
const CONTROL: &[(&str, u32)] = &[
    ("<|end_of_msg|>", 163586),
    ("<|open|>", 163587),
    ("<|close|>", 163588),
    ("<|sep|>", 163589),
    ("<|media_pad|>", 163605),
];

/// A raw OpenAI-style request body, as an HTTP frontend would hand it over.
struct Request {
    messages: Value,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    response_format: Option<Value>,
    args: HashMap<String, Value>,
    add_generation_prompt: bool,
}

impl OAIChatLikeRequest for Request {
    fn model(&self) -> String {
        "kimi-k3".to_string()
    }
    fn messages(&self) -> MiniValue {
        MiniValue::from_serialize(&self.messages)
    }
    fn tools(&self) -> Option<MiniValue> {
        self.tools.as_ref().map(MiniValue::from_serialize)
    }
    fn tool_choice(&self) -> Option<MiniValue> {
        self.tool_choice.as_ref().map(MiniValue::from_serialize)
    }
    fn response_format(&self) -> Option<MiniValue> {
        self.response_format.as_ref().map(MiniValue::from_serialize)
    }
    fn should_add_generation_prompt(&self) -> bool {
        self.add_generation_prompt
    }
    fn chat_template_args(&self) -> Option<&HashMap<String, Value>> {
        Some(&self.args)
    }
}

/// A fixture request: an array of messages or a request body (keys of TOKENIZER.md §10).
/// The top-level `reasoning_effort` reaches the encoder as `chat_template_kwargs.reasoning_effort`
/// (the frontend's mapping), so `thinking_effort` still wins over it.
fn request_of(body: &Value, add_generation_prompt: bool) -> Result<Request> {
    let (messages, obj) = match body {
        Value::Array(_) => (body.clone(), None),
        Value::Object(o) => (o.get("messages").cloned().context("no messages")?, Some(o)),
        _ => bail!("request is neither an array nor an object"),
    };
    let get = |k: &str| obj.and_then(|o| o.get(k)).filter(|v| !v.is_null()).cloned();
    let mut args = HashMap::new();
    if let Some(Value::Object(kw)) = get("chat_template_kwargs") {
        for (k, v) in kw {
            args.insert(k, v);
        }
    }
    if let Some(effort) = get("reasoning_effort") {
        args.insert("reasoning_effort".to_string(), effort);
    }
    Ok(Request {
        messages,
        tools: get("tools"),
        tool_choice: get("tool_choice"),
        response_format: get("response_format"),
        args,
        add_generation_prompt,
    })
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/chat");
    let input = argv.first().cloned().unwrap_or(format!("{root}/requests.json"));
    let output = argv.get(1).cloned().unwrap_or(format!("{root}/cases.json"));
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&input)?)?;
    let ranks = splintr_ranks();
    assert_eq!(ranks.len(), 163_584);
    let special: HashMap<String, u32> = CONTROL.iter().map(|&(n, id)| (n.to_string(), id)).collect();
    let bpe = CoreBPE::new(ranks.into_iter().collect(), special.into_iter().collect(), KIMI_PATTERN)?;
    let formatter = KimiK3Formatter::new(false);
    let mut out = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().context("case without name")?;
        let gen = case.get("generation_prompt").and_then(Value::as_bool).unwrap_or(true);
        let req = request_of(&case["request"], gen)?;
        let mut entry = json!({"name": name, "request": case["request"], "generation_prompt": gen});
        match formatter.render_prompt(&req) {
            Ok(prompt) => {
                let segs = prompt.segments().context("unsegmented prompt")?;
                let mut ids = Vec::new();
                let mut seg_json = Vec::new();
                for s in segs {
                    if s.allow_special {
                        let id = CONTROL.iter().find(|c| c.0 == s.text).map(|c| c.1);
                        ids.push(id.with_context(|| format!("unknown control {:?}", s.text))?);
                        seg_json.push(json!({"special": s.text}));
                    } else {
                        assert!(s.text.chars().count() < 400_000, "{name}: segment over one window");
                        ids.extend(bpe.encode_ordinary(&s.text));
                        seg_json.push(json!({"text": s.text}));
                    }
                }
                entry["segments"] = Value::Array(seg_json);
                entry["ids"] = json!(ids);
            }
            Err(e) => {
                entry["oracle_error"] = Value::String(format!("{e:#}"));
            }
        }
        if let Some(r) = case.get("k3_refuses") {
            entry["k3_refuses"] = r.clone();
        }
        out.push(entry);
    }
    let n_ok = out.iter().filter(|e| e.get("ids").is_some()).count();
    std::fs::write(&output, serde_json::to_string_pretty(&Value::Array(out))? + "\n")?;
    eprintln!("{output}: {} cases ({n_ok} rendered, {} refused)", cases.len(), cases.len() - n_ok);
    Ok(())
}
