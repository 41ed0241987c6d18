//! `--batch FILE` (ENGINE.md §10): JSON lines in — `{"prompt": "…"}` or `{"ids": [...]}` with
//! optional `gen`, `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `stop` — and one JSON line
//! out per input, in input order: `index`, `generated_ids`, `generated_text` (with a
//! tokenizer), `stop_reason`, `seed`, `logits_hash`; or `index` and `error` for a line that
//! could not run. A bad line is refused alone (with its line number and key); the others run.

use crate::error::{Error, Result};
use crate::generate::sample::{parse_seed, SamplerSettings, Setting};
use crate::generate::stop::StopReason;
use crate::json::{self, Object, Value};
use crate::units::hex;

/// The keys a batch line may carry.
pub const KEYS: [&str; 9] = [
    "prompt",
    "ids",
    "gen",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "seed",
    "stop",
];

/// The run's settings, which a line's own keys override.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchDefaults {
    /// `--gen` (ids to generate per line unless the line gives `gen`).
    pub gen: u64,
    /// The run's sampler settings (`--temperature` …); `seed` here is used only when
    /// `seed_given` says the run had `--seed`.
    pub sampler: SamplerSettings,
    /// True when the run gave `--seed`; otherwise a line without `seed` gets one from the OS.
    pub seed_given: bool,
    /// The run's `--stop` strings (a line's `stop` replaces them).
    pub stop: Vec<String>,
    /// V: ids must be below it (`None`: not checked here).
    pub vocab_size: Option<u64>,
    /// False when the run has no tokenizer: a `prompt` line is refused.
    pub has_tokenizer: bool,
}

impl Default for BatchDefaults {
    /// `run`'s defaults: `--gen 16`, greedy, no seed, no stop strings, no vocabulary check,
    /// a tokenizer present.
    fn default() -> Self {
        BatchDefaults {
            gen: 16,
            sampler: SamplerSettings::greedy(),
            seed_given: false,
            stop: Vec::new(),
            vocab_size: None,
            has_tokenizer: true,
        }
    }
}

/// The input of one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchInput {
    /// `prompt`: text to encode (plain, TOKENIZER.md).
    Prompt(String),
    /// `ids`: token ids.
    Ids(Vec<u32>),
}

/// One parsed batch line, with the run's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    /// `prompt` or `ids` (exactly one; never empty).
    pub input: BatchInput,
    /// Ids to generate.
    pub gen: u64,
    /// Sampler settings, every range checked. `sampler.seed` is meaningful only when
    /// `seed_given`; otherwise the caller draws one ([`crate::generate::sample::os_seed`]).
    pub sampler: SamplerSettings,
    /// True when the line or the run gave the seed.
    pub seed_given: bool,
    /// Stop strings (each non-empty).
    pub stop: Vec<String>,
}

/// A line's key error: `key `top_p`: expected …, found …`.
fn key_err(key: &str, why: impl std::fmt::Display) -> String {
    format!("key `{key}`: {why}")
}

fn found(v: &Value) -> String {
    match v {
        Value::Number(n) => n.lexeme().to_string(),
        Value::String(_) | Value::Bool(_) | Value::Null => v.to_json(),
        _ => format!("an {}", v.type_name()),
    }
}

/// A non-negative integer that fits in u64.
fn uint(key: &str, v: &Value) -> std::result::Result<u64, String> {
    match v.as_number().and_then(|n| n.as_u64()) {
        Some(x) => Ok(x),
        None => Err(key_err(
            key,
            format!(
                "expected an integer from 0 to {}, found {}",
                u64::MAX,
                found(v)
            ),
        )),
    }
}

/// A float sampling setting: a JSON number in the setting's range.
fn setting_f64(s: Setting, v: &Value) -> std::result::Result<f64, String> {
    match v.as_number().map(|n| n.as_f64()) {
        Some(x) if s.f64_in_range(x) => Ok(x),
        _ => Err(key_err(
            s.key(),
            format!("expected {}, found {}", s.expected(), found(v)),
        )),
    }
}

fn ids(v: &Value, vocab: Option<u64>) -> std::result::Result<Vec<u32>, String> {
    let arr = v.as_array().ok_or_else(|| {
        key_err(
            "ids",
            format!("expected an array of ids, found {}", found(v)),
        )
    })?;
    if arr.is_empty() {
        return Err(key_err("ids", "empty; give at least one id"));
    }
    let limit = vocab
        .unwrap_or(u32::MAX as u64 + 1)
        .min(u32::MAX as u64 + 1);
    arr.iter()
        .enumerate()
        .map(|(i, x)| match x.as_number().and_then(|n| n.as_u64()) {
            Some(id) if id < limit => Ok(id as u32),
            _ => Err(key_err(
                "ids",
                format!(
                    "element {i}: expected an id in 0..{limit}, found {}",
                    found(x)
                ),
            )),
        })
        .collect()
}

fn stops(v: &Value) -> std::result::Result<Vec<String>, String> {
    let list: Vec<&Value> = match v {
        Value::String(_) => vec![v],
        Value::Array(a) => a.iter().collect(),
        _ => {
            return Err(key_err(
                "stop",
                format!(
                    "expected a string or an array of strings, found {}",
                    found(v)
                ),
            ))
        }
    };
    list.iter()
        .map(|x| match x.as_str() {
            Some("") => Err(key_err("stop", "a stop string must not be empty")),
            Some(s) => Ok(s.to_string()),
            None => Err(key_err(
                "stop",
                format!("expected a string, found {}", found(x)),
            )),
        })
        .collect()
}

/// Applies one member to `req` (the line's `input` is set by the caller).
fn apply(req: &mut BatchRequest, key: &str, v: &Value) -> std::result::Result<(), String> {
    match key {
        "gen" => req.gen = uint(key, v)?,
        "temperature" => req.sampler.temperature = setting_f64(Setting::Temperature, v)?,
        "top_p" => req.sampler.top_p = setting_f64(Setting::TopP, v)?,
        "min_p" => req.sampler.min_p = setting_f64(Setting::MinP, v)?,
        "top_k" => {
            req.sampler.top_k = match v.as_number() {
                Some(n) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
                // An integer too large for u64 keeps every id, as on the command line.
                Some(n) if n.is_integer() && !n.lexeme().starts_with('-') => u64::MAX,
                _ => {
                    let s = Setting::TopK;
                    return Err(key_err(
                        key,
                        format!("expected {}, found {}", s.expected(), found(v)),
                    ));
                }
            }
        }
        "seed" => {
            let lexeme = v.as_number().filter(|n| n.is_integer()).map(|n| n.lexeme());
            req.sampler.seed = lexeme
                .ok_or_else(|| {
                    let s = Setting::Seed;
                    key_err(
                        key,
                        format!("expected {}, found {}", s.expected(), found(v)),
                    )
                })
                .and_then(|l| parse_seed(l).map_err(|why| key_err(key, why)))?;
            req.seed_given = true;
        }
        "stop" => req.stop = stops(v)?,
        _ => {}
    }
    Ok(())
}

/// The line's input: exactly one of `prompt` and `ids`.
fn input(o: &Object, d: &BatchDefaults) -> std::result::Result<BatchInput, String> {
    match (o.get("prompt"), o.get("ids")) {
        (Some(_), Some(_)) => Err("both `prompt` and `ids`; give exactly one".into()),
        (None, None) => Err("no `prompt` or `ids`; give exactly one".into()),
        (None, Some(v)) => Ok(BatchInput::Ids(ids(v, d.vocab_size)?)),
        (Some(v), None) => match v.as_str() {
            _ if !d.has_tokenizer => Err(key_err(
                "prompt",
                "the model has no tokenizer; give `ids` or a tokenizer with --tok",
            )),
            Some("") => Err(key_err("prompt", "empty; give some text")),
            Some(s) => Ok(BatchInput::Prompt(s.to_string())),
            None => Err(key_err(
                "prompt",
                format!("expected a string, found {}", found(v)),
            )),
        },
    }
}

/// Parses one line's bytes (without its newline) as line number `line` (one-based) of
/// `file`. Returns `Ok(None)` for a blank line (not an input).
///
/// Errors (exit 2): `<file>: line <n>: <problem>` — invalid JSON (with the byte in the line),
/// not an object, an unknown key, a key of the wrong type or out of range (naming the key),
/// neither or both of `prompt` and `ids`.
pub fn parse_line(
    bytes: &[u8],
    line: u64,
    file: &str,
    d: &BatchDefaults,
) -> Result<Option<BatchRequest>> {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    let at = |why: String| Error::invalid(format!("{file}: line {line}: {why}"));
    let v = json::parse(bytes).map_err(|e| {
        at(format!(
            "invalid JSON at byte {} of the line: {}",
            e.offset, e.expected
        ))
    })?;
    let o = v
        .as_object()
        .ok_or_else(|| at(format!("expected a JSON object, found {}", found(&v))))?;
    if let Some((k, _)) = o.iter().find(|(k, _)| !KEYS.contains(k)) {
        return Err(at(format!(
            "unknown key `{k}`; a line takes {}",
            KEYS.join(", ")
        )));
    }
    let mut req = BatchRequest {
        input: input(o, d).map_err(at)?,
        gen: d.gen,
        sampler: d.sampler,
        seed_given: d.seed_given,
        stop: d.stop.clone(),
    };
    for (k, v) in o.iter() {
        apply(&mut req, k, v).map_err(at)?;
    }
    Ok(Some(req))
}

/// One input of a batch file: its index (zero-based, in input order, blank lines skipped),
/// its line number (one-based) and the parsed request or its error.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchLine {
    /// Zero-based input index (the output line's `index`).
    pub index: u64,
    /// One-based line number in the file.
    pub line: u64,
    /// The request, or the error for this line alone (exit 2 at the end of the run).
    pub request: Result<BatchRequest>,
}

/// Splits a whole batch file into its inputs ([`parse_line`] per non-blank line).
pub fn parse_file(bytes: &[u8], file: &str, d: &BatchDefaults) -> Vec<BatchLine> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut line = 0u64;
    while !rest.is_empty() {
        line += 1;
        let (this, next) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        match parse_line(this, line, file, d) {
            Ok(None) => {}
            Ok(Some(r)) => out.push(BatchLine {
                index: out.len() as u64,
                line,
                request: Ok(r),
            }),
            Err(e) => out.push(BatchLine {
                index: out.len() as u64,
                line,
                request: Err(e),
            }),
        }
    }
    out
}

/// What one sequence of a batch produced (an output line's fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchResult {
    /// The input index.
    pub index: u64,
    /// The generated ids (stop ids included, TOKENIZER.md §11).
    pub generated_ids: Vec<u32>,
    /// The generated text without any `--stop` string (with a tokenizer; else `None`).
    pub generated_text: Option<String>,
    /// Why the sequence stopped.
    pub stop_reason: StopReason,
    /// The seed used (given or drawn from the OS).
    pub seed: u64,
    /// FNV-1a-64 over every logits vector that chose an emitted id (FORMATS.md §10).
    pub logits_hash: u64,
}

/// The output line of a finished sequence (no newline): `{"index":0,"generated_ids":[…],
/// "generated_text":"…","stop_reason":"length","seed":…,"logits_hash":"…"}`;
/// `generated_text` is left out without a tokenizer.
pub fn result_line(r: &BatchResult) -> String {
    let mut o = Object::new()
        .with("index", r.index)
        .with("generated_ids", r.generated_ids.clone());
    if let Some(t) = &r.generated_text {
        o.insert("generated_text", t.as_str());
    }
    Value::from(
        o.with("stop_reason", r.stop_reason.name())
            .with("seed", r.seed)
            .with("logits_hash", hex(r.logits_hash)),
    )
    .to_json()
}

/// The output line of an input that could not run (no newline): `{"index":3,"error":"…"}`.
pub fn error_line(index: u64, e: &Error) -> String {
    Value::from(
        Object::new()
            .with("index", index)
            .with("error", e.message.as_str()),
    )
    .to_json()
}

#[cfg(test)]
mod tests;
