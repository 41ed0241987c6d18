//! Sampling and limits of a generation request (ENGINE.md §8, §11): the sampler settings over
//! the checkpoint's defaults, the seed, `stop`, `stream` and `stream_options`, and the prompt
//! and `max_tokens` against `--ctx`.

use super::fields::{found, opt_bool, opt_f64, opt_int_in};
use super::{ApiError, GenParams, Limits};
use crate::json::{Object, Value};

/// Sampling, `stop`, `stream`, `stream_options` and the token limit (`max_tokens`, or
/// `alt_max` which wins when both are given).
pub(super) fn gen_params(
    o: &Object,
    lim: &Limits,
    os_seed: &mut dyn FnMut() -> u64,
    alt_max: &str,
) -> Result<GenParams, ApiError> {
    let mut s = lim.defaults;
    if let Some(t) = opt_f64(o, "temperature")? {
        if !(t.is_finite() && t >= 0.0) {
            return Err(ApiError::invalid(
                "temperature",
                "expected a finite number ≥ 0",
            ));
        }
        s.temperature = t;
    }
    if let Some(p) = opt_f64(o, "top_p")? {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::invalid("top_p", "expected a number in (0, 1]"));
        }
        s.top_p = p;
    }
    if let Some(m) = opt_f64(o, "min_p")? {
        if !(0.0..1.0).contains(&m) {
            return Err(ApiError::invalid("min_p", "expected a number in [0, 1)"));
        }
        s.min_p = m;
    }
    if let Some(v) = o.get("top_k").filter(|v| !v.is_null()) {
        let n = v.as_number().filter(|n| n.is_integer());
        s.top_k = match (n.and_then(|n| n.as_u64()), n.and_then(|n| n.as_i64())) {
            (Some(k), _) => k,
            (None, Some(-1)) => 0,
            // an integer beyond u64 keeps every id, as on the command line and in a batch line
            _ if n.is_some_and(|n| !n.lexeme().starts_with('-')) => u64::MAX,
            _ => {
                return Err(ApiError::invalid(
                    "top_k",
                    format!(
                        "expected an integer ≥ -1 (0 or -1: off; at least the vocabulary: every \
                         id), found {}",
                        found(v)
                    ),
                ))
            }
        };
    }
    s.seed = match o.get("seed").filter(|v| !v.is_null()) {
        None => {
            if s.is_greedy() {
                0
            } else {
                os_seed()
            }
        }
        Some(v) => seed(v)?,
    };
    // both fields are checked (a bad one is refused even when the other wins); each is at
    // most the context less one prompt id, so no later sum can wrap
    let hi = (lim.ctx as u64).saturating_sub(1).max(1);
    let why = format!(
        " (the prompt and the reply share this server's --ctx of {} positions)",
        lim.ctx
    );
    let alt = opt_int_in(o, alt_max, 1, hi, &why)?;
    let plain = opt_int_in(o, "max_tokens", 1, hi, &why)?;
    let (max_tokens, max_tokens_field) = match (alt, plain) {
        (Some(m), _) => (Some(m), field_name(alt_max)),
        (None, m) => (m, "max_tokens"),
    };
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(ApiError::invalid(
                    &format!("stop[{i}]"),
                    format!("expected string, found {}", v.type_name()),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Array(_)) => return Err(ApiError::invalid("stop", "at most 4 stop strings")),
        Some(v) => {
            return Err(ApiError::invalid(
                "stop",
                format!(
                    "expected string or array of strings, found {}",
                    v.type_name()
                ),
            ))
        }
    };
    if let Some(i) = stop.iter().position(|s| s.is_empty()) {
        return Err(ApiError::invalid(&format!("stop[{i}]"), "empty string"));
    }
    let stream = opt_bool(o, "stream")?.unwrap_or(false);
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => {
            for (k, _) in so.iter() {
                if k != "include_usage" && k != "continuous_usage_stats" {
                    return Err(ApiError::invalid(
                        &format!("stream_options.{k}"),
                        "unknown field",
                    ));
                }
            }
            match so.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(ApiError::invalid(
                        "stream_options.include_usage",
                        format!("expected boolean, found {}", v.type_name()),
                    ))
                }
            }
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("expected object, found {}", v.type_name()),
            ))
        }
    };
    Ok(GenParams {
        settings: s,
        max_tokens,
        max_tokens_field,
        stop,
        stream,
        include_usage,
        logprobs: false,
        top_logprobs: 0,
        constraints: Default::default(),
    })
}

/// The field that limits the reply, as `GenParams::max_tokens_field` keeps it.
fn field_name(k: &str) -> &'static str {
    match k {
        "max_completion_tokens" => "max_completion_tokens",
        "max_output_tokens" => "max_output_tokens",
        _ => "max_tokens",
    }
}

/// A seed in [−2⁶³, 2⁶⁴), a negative one modulo 2⁶⁴ (ENGINE.md §8).
fn seed(v: &Value) -> Result<u64, ApiError> {
    let shown = found(v);
    let n = v.as_number().filter(|n| n.is_integer());
    match (n.and_then(|n| n.as_u64()), n.and_then(|n| n.as_i64())) {
        (Some(s), _) => Ok(s),
        (None, Some(s)) => Ok(s as u64),
        _ => Err(ApiError::invalid(
            "seed",
            format!("expected an integer in [-2^63, 2^64), found {shown}"),
        )),
    }
}

/// The prompt and `max_tokens` against `--ctx` (refused before anything runs). `ids` is every
/// prompt position; `stub` of them (a chat's generation prompt ending in `<|open|>think<|sep|>`
/// or `<|open|>response<|sep|>`) are not counted in `usage.prompt_tokens` (TOKENIZER.md §10
/// "Usage") but take room in the context, so the message gives both counts: the prompt as
/// `usage` counts it, and the positions it fills. A prompt too long is blamed on `prompt_field`
/// (`messages` for a chat, `prompt` for a completion).
pub(super) fn check_length(
    ids: usize,
    stub: usize,
    p: &GenParams,
    lim: &Limits,
    prompt_field: &str,
) -> Result<(), ApiError> {
    let too_long = |message: String| ApiError {
        status: 400,
        kind: "invalid_request_error",
        message,
        param: Some(prompt_field.to_string()),
        code: Some("context_length_exceeded"),
    };
    let prompt = match stub {
        0 => format!("{ids} tokens"),
        s => format!(
            "{} tokens as the reply's usage counts them, {ids} positions with the {s} that \
             open the reply",
            ids - s
        ),
    };
    if ids >= lim.ctx {
        return Err(too_long(format!(
            "the prompt has {prompt}; this server's context (--ctx) is {} positions, leaving \
             no room for a reply",
            lim.ctx
        )));
    }
    if let Some(m) = p.max_tokens {
        // compared without adding: `ids + m` wrapped for m near 2^64 and let the request run
        let room = (lim.ctx - ids) as u64;
        if m > room {
            let f = p.max_tokens_field;
            return Err(ApiError {
                param: Some(f.to_string()),
                ..too_long(format!(
                    "{f}: the prompt ({prompt}) + {f} ({m}) exceeds this server's context \
                     (--ctx) of {} positions; give {f} {room} or less",
                    lim.ctx
                ))
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse_body;
    use super::*;
    use crate::generate::sample::SamplerSettings;

    fn lim() -> Limits {
        Limits {
            model_id: "m".into(),
            ctx: 100,
            vocab: 1000,
            defaults: SamplerSettings {
                temperature: 1.0,
                top_k: 0,
                top_p: 0.95,
                min_p: 0.0,
                seed: 0,
            },
            sign_key: b"k".to_vec(),
            vocabulary: Default::default(),
        }
    }

    fn params(s: &str) -> Result<GenParams, ApiError> {
        let o = parse_body(s.as_bytes()).unwrap();
        gen_params(&o, &lim(), &mut || 77, "max_completion_tokens")
    }

    #[test]
    fn sampling_over_the_defaults_and_seeds() {
        let p = params("{}").unwrap();
        assert_eq!((p.settings.temperature, p.settings.top_p), (1.0, 0.95));
        assert_eq!(
            p.settings.seed, 77,
            "a sampled request without a seed gets the OS's"
        );
        let p = params(r#"{"temperature": 0}"#).unwrap();
        assert_eq!(p.settings.seed, 0, "greedy needs no seed");
        let p = params(r#"{"seed": -1, "top_k": -1, "min_p": 0.1}"#).unwrap();
        assert_eq!((p.settings.seed, p.settings.top_k), (u64::MAX, 0));
        assert_eq!(
            params(r#"{"seed": 18446744073709551615}"#)
                .unwrap()
                .settings
                .seed,
            u64::MAX
        );
        for (body, field) in [
            (r#"{"temperature": -0.5}"#, "temperature"),
            (r#"{"top_p": 1.5}"#, "top_p"),
            (r#"{"min_p": 1}"#, "min_p"),
            (r#"{"top_k": -2}"#, "top_k"),
            (r#"{"seed": "x"}"#, "seed"),
            (r#"{"stop": ""}"#, "stop[0]"),
            (r#"{"stop": [1]}"#, "stop[0]"),
            (r#"{"max_tokens": 0}"#, "max_tokens"),
            (r#"{"max_tokens": -1}"#, "max_tokens"),
            (r#"{"max_completion_tokens": -1}"#, "max_completion_tokens"),
            (r#"{"stream_options": {"x": 1}}"#, "stream_options.x"),
        ] {
            let e = params(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
        // max_completion_tokens wins over max_tokens
        let p = params(r#"{"max_tokens": 5, "max_completion_tokens": 7}"#).unwrap();
        assert_eq!(p.max_tokens, Some(7));
    }

    #[test]
    fn the_context() {
        let p = |m: Option<u64>| GenParams {
            max_tokens: m,
            ..params("{}").unwrap()
        };
        assert!(check_length(99, 0, &p(None), &lim(), "messages").is_ok());
        let e = check_length(100, 0, &p(None), &lim(), "messages").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        // a completion's prompt is `prompt` (it said `messages`, a chat field)
        let e = check_length(100, 0, &p(None), &lim(), "prompt").unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.code),
            (Some("prompt"), Some("context_length_exceeded"))
        );
        assert!(check_length(90, 0, &p(Some(10)), &lim(), "messages").is_ok());
        let e = check_length(90, 0, &p(Some(11)), &lim(), "messages").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert!(
            e.message.contains("give max_tokens 10 or less"),
            "{}",
            e.message
        );
    }

    /// `prompt_ids + max_tokens` wrapped: 18446744073709551527 with a 90-id prompt summed
    /// to 1 and the request ran to the context's end. The comparison no longer adds, and
    /// `max_tokens` is refused at parse time above the context.
    #[test]
    fn max_tokens_near_2_64_is_refused_not_wrapped() {
        let p = |m: u64| GenParams {
            max_tokens: Some(m),
            ..params("{}").unwrap()
        };
        for m in [u64::MAX, u64::MAX - 88, 18446744073709551527, 1 << 63, 101] {
            let e = check_length(90, 0, &p(m), &lim(), "messages").unwrap_err();
            assert_eq!(e.param.as_deref(), Some("max_tokens"), "{m}");
            assert!(
                e.message.contains("give max_tokens 10 or less"),
                "{}",
                e.message
            );
        }
        for v in [
            "18446744073709551527",
            "18446744073709551615",
            "18446744073709551616",
            "1e23",
            "100",
        ] {
            for k in ["max_tokens", "max_completion_tokens"] {
                let e = params(&format!(r#"{{"{k}": {v}}}"#)).unwrap_err();
                assert_eq!(e.param.as_deref(), Some(k), "{v}");
                assert_eq!(
                    e.message,
                    format!(
                        "{k}: expected an integer from 1 to 99 (the prompt and the reply share \
                         this server's --ctx of 100 positions), found {v}"
                    )
                );
            }
        }
        // the field that set the limit is the one a context refusal names
        let q = params(r#"{"max_completion_tokens": 50}"#).unwrap();
        let e = check_length(90, 0, &q, &lim(), "messages").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_completion_tokens"));
        assert!(
            e.message.starts_with("max_completion_tokens: the prompt"),
            "{}",
            e.message
        );
    }

    /// The count in the message is `usage.prompt_tokens`' (the stub left out), and the
    /// positions are said apart: it said 89 where `usage` said 86.
    #[test]
    fn the_context_message_counts_as_usage_does() {
        let p = GenParams {
            max_tokens: Some(20),
            ..params("{}").unwrap()
        };
        let e = check_length(89, 3, &p, &lim(), "messages").unwrap_err();
        assert!(
            e.message.contains(
                "the prompt (86 tokens as the reply's usage counts them, 89 positions with \
                 the 3 that open the reply) + max_tokens (20)"
            ),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("give max_tokens 11 or less"),
            "{}",
            e.message
        );
        let e = check_length(100, 3, &p, &lim(), "messages").unwrap_err();
        assert!(
            e.message
                .starts_with("the prompt has 97 tokens as the reply's usage"),
            "{}",
            e.message
        );
    }
}
