//! The sampling defaults of `k3 chat` and `k3 serve` (ENGINE.md §8 "Defaults"): each of
//! temperature, top_p and top_k from the checkpoint's `generation_config.json` when it has that
//! key, else 1.0, 0.95 and 0 (off); min_p is always 0. `run` stays greedy
//! ([`SamplerSettings::greedy`]).

use super::sample::{SamplerSettings, Setting};
use crate::error::{Error, Result};
use crate::json::{self, Value};
use std::path::Path;

/// The file, in the model directory, whose keys override the chat defaults.
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// Temperature when `generation_config.json` has none (ENGINE.md §8).
pub const CHAT_TEMPERATURE: f64 = 1.0;
/// top_p when `generation_config.json` has none (ENGINE.md §8).
pub const CHAT_TOP_P: f64 = 0.95;
/// top_k when `generation_config.json` has none: 0, off (ENGINE.md §8).
pub const CHAT_TOP_K: u64 = 0;

/// The chat/serve sampler defaults for the checkpoint in `model_dir` (ENGINE.md §8): each of
/// `temperature`, `top_p` and `top_k` from `<model_dir>/generation_config.json` when the file
/// has that key (a `null` counts as absent), else 1.0, 0.95 and 0; `min_p` 0. Other keys of the
/// file (`do_sample`, `max_new_tokens`, `eos_token_id`, …) are ignored. A missing file gives the
/// fixed defaults.
///
/// The seed is 0 here: the caller sets it (`--seed`, a request's `seed`, a loaded state, or
/// [`super::sample::os_seed`], §8 step 7).
///
/// Errors (exit 2), naming the file and the key: the file exists but cannot be read, is not
/// JSON (with the byte offset), is not an object, or a key has a value out of range or of the
/// wrong type, e.g. `m/generation_config.json: top_p: expected a number in (0, 1] (1 is off),
/// found `1.5``.
pub fn chat_defaults(model_dir: &Path) -> Result<SamplerSettings> {
    let path = model_dir.join(GENERATION_CONFIG);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(fixed_defaults()),
        Err(e) => {
            return Err(Error::invalid(format!(
                "{}: cannot read: {e}",
                path.display()
            )))
        }
    };
    chat_defaults_from_json(&bytes, &path.display().to_string())
}

/// The defaults with no `generation_config.json`: T 1.0, top_p 0.95, top_k 0, min_p 0, seed 0.
pub fn fixed_defaults() -> SamplerSettings {
    SamplerSettings {
        temperature: CHAT_TEMPERATURE,
        top_k: CHAT_TOP_K,
        top_p: CHAT_TOP_P,
        min_p: 0.0,
        seed: 0,
    }
}

/// [`chat_defaults`] over the bytes of a `generation_config.json`; `origin` names the file in
/// messages.
///
/// Errors (exit 2): as [`chat_defaults`].
pub fn chat_defaults_from_json(bytes: &[u8], origin: &str) -> Result<SamplerSettings> {
    let root = json::parse(bytes).map_err(|e| e.into_error(origin, 0))?;
    let Some(obj) = root.as_object() else {
        return Err(Error::invalid(format!(
            "{origin}: expected a JSON object, found {}",
            root.type_name()
        )));
    };
    let mut out = fixed_defaults();
    for s in [Setting::Temperature, Setting::TopP, Setting::TopK] {
        let v = match obj.get(s.key()) {
            None | Some(Value::Null) => continue,
            Some(v) => v,
        };
        let bad = |found: String| {
            Error::invalid(format!(
                "{origin}: {}: expected {}, found {found}",
                s.key(),
                s.expected()
            ))
        };
        let Some(n) = v.as_number() else {
            return Err(bad(v.type_name().to_string()));
        };
        match s {
            Setting::TopK => {
                if !n.is_integer() || n.lexeme().starts_with('-') {
                    return Err(bad(format!("`{}`", n.lexeme())));
                }
                // Digits beyond u64 still mean "keep every id", as `--top-k` reads them.
                out.top_k = n.as_u64().unwrap_or(u64::MAX);
            }
            _ => {
                let x = n.as_f64();
                if !s.f64_in_range(x) {
                    return Err(bad(format!("`{}`", n.lexeme())));
                }
                if s == Setting::Temperature {
                    out.temperature = x;
                } else {
                    out.top_p = x;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(text: &str) -> Result<SamplerSettings> {
        chat_defaults_from_json(text.as_bytes(), "m/generation_config.json")
    }

    #[test]
    fn fixed_when_no_key() {
        let s = from(r#"{"do_sample": true, "max_new_tokens": 10}"#).unwrap();
        assert_eq!(s, fixed_defaults());
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p),
            (1.0, 0.95, 0, 0.0)
        );
    }

    #[test]
    fn each_key_overrides_alone() {
        let s = from(r#"{"temperature": 0.6}"#).unwrap();
        assert_eq!((s.temperature, s.top_p, s.top_k), (0.6, 0.95, 0));
        let s = from(r#"{"top_p": 1}"#).unwrap();
        assert_eq!((s.temperature, s.top_p, s.top_k), (1.0, 1.0, 0));
        let s = from(r#"{"top_k": 40, "temperature": 0, "top_p": null}"#).unwrap();
        assert_eq!((s.temperature, s.top_p, s.top_k), (0.0, 0.95, 40));
        let s = from(r#"{"top_k": 123456789012345678901234567890}"#).unwrap();
        assert_eq!(s.top_k, u64::MAX);
    }

    #[test]
    fn bad_values_name_file_and_key() {
        for (text, key) in [
            (
                r#"{"temperature": -1}"#,
                "temperature: expected a finite number",
            ),
            (
                r#"{"temperature": "hot"}"#,
                "temperature: expected a finite number",
            ),
            (r#"{"top_p": 0}"#, "top_p: expected a number in (0, 1]"),
            (r#"{"top_p": 1.5}"#, "top_p: expected a number in (0, 1]"),
            (r#"{"top_k": -1}"#, "top_k: expected an integer ≥ 0"),
            (r#"{"top_k": 2.5}"#, "top_k: expected an integer ≥ 0"),
            (r#"{"top_k": true}"#, "top_k: expected an integer ≥ 0"),
            (
                r#"{"temperature": 1e999}"#,
                "temperature: expected a finite number",
            ),
        ] {
            let e = from(text).unwrap_err();
            assert_eq!(e.kind.exit_code(), 2, "{text}");
            assert!(
                e.message.starts_with("m/generation_config.json: ") && e.message.contains(key),
                "{text}: {}",
                e.message
            );
        }
    }

    #[test]
    fn not_json_or_not_object() {
        let e = from("{\"temperature\": 1,}").unwrap_err();
        assert_eq!(e.kind.exit_code(), 2);
        assert!(
            e.message.contains("invalid JSON at byte 18"),
            "{}",
            e.message
        );
        let e = from("[1]").unwrap_err();
        assert!(
            e.message.contains("expected a JSON object, found array"),
            "{}",
            e.message
        );
    }

    #[test]
    fn reads_the_model_dir() {
        let dir = std::env::temp_dir().join(format!("k3-defaults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(GENERATION_CONFIG));
        assert_eq!(chat_defaults(&dir).unwrap(), fixed_defaults());
        std::fs::write(dir.join(GENERATION_CONFIG), r#"{"top_p": 0.8}"#).unwrap();
        assert_eq!(chat_defaults(&dir).unwrap().top_p, 0.8);
        std::fs::write(dir.join(GENERATION_CONFIG), r#"{"top_p": 2}"#).unwrap();
        let e = chat_defaults(&dir).unwrap_err();
        assert!(
            e.message.contains("generation_config.json: top_p:"),
            "{}",
            e.message
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
