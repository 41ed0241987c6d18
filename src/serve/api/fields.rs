//! The field table of the two generation endpoints (ENGINE.md §11): which request fields are
//! accepted, ignored or refused (each refusal names the field), the `model` check, and the
//! typed readers of optional fields that every other check uses.

use super::{ApiError, Limits};
use crate::json::{Object, Value};

/// Chat fields handled here or by the chat layer.
pub(super) const CHAT_ACCEPTED: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "response_format",
    "reasoning_effort",
    "chat_template_kwargs",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "n",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
];
/// Completion fields handled here.
pub(super) const COMPLETION_ACCEPTED: &[&str] = &[
    "model",
    "prompt",
    "stream",
    "stream_options",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "n",
    "logprobs",
    "echo",
    "best_of",
    "frequency_penalty",
    "presence_penalty",
];
/// Fields accepted and ignored by both endpoints (ENGINE.md §11).
pub const IGNORED: &[&str] = &["user", "parallel_tool_calls", "store", "metadata"];
/// Fields refused whatever their value (ENGINE.md §11: k3 has no logit bias and is text-only).
pub const REFUSED: &[&str] = &[
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "suffix",
    "web_search_options",
];

/// Refuses unknown and refused fields; drops the ignored ones.
pub(super) fn check_fields(o: &Object, accepted: &[&str]) -> Result<(), ApiError> {
    for (k, v) in o.iter() {
        if REFUSED.contains(&k) {
            if v.is_null() {
                continue;
            }
            return Err(ApiError::invalid(
                k,
                "not supported by k3; remove the field (the README lists the accepted fields)",
            ));
        }
        if !accepted.contains(&k) && !IGNORED.contains(&k) {
            return Err(ApiError::invalid(
                k,
                "unknown field (see the field table in the README)",
            ));
        }
    }
    for k in ["frequency_penalty", "presence_penalty"] {
        if let Some(v) = o.get(k).filter(|v| !v.is_null()) {
            match v.as_number().map(|n| n.as_f64()) {
                Some(0.0) => {}
                Some(_) => {
                    return Err(ApiError::invalid(
                        k,
                        "not supported (k3 has no repetition penalties); give 0 or leave it out",
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        k,
                        format!("expected number, found {}", v.type_name()),
                    ))
                }
            }
        }
    }
    opt_int_in(o, "n", 1, 1, " (k3 returns one choice per request)")?;
    Ok(())
}

/// The `model` field: required, and the served id (another name is 404 `model_not_found`).
pub(super) fn check_model(o: &Object, lim: &Limits) -> Result<(), ApiError> {
    match o.get("model") {
        None | Some(Value::Null) => Err(ApiError::invalid(
            "model",
            format!("missing; this server serves `{}`", lim.model_id),
        )),
        Some(Value::String(m)) if *m == lim.model_id => Ok(()),
        Some(Value::String(m)) => Err(ApiError::model_not_found(m, &lim.model_id)),
        Some(v) => Err(ApiError::invalid(
            "model",
            format!("expected string, found {}", v.type_name()),
        )),
    }
}

/// An optional boolean field (`null` counts as absent).
pub(super) fn opt_bool(o: &Object, k: &str) -> Result<Option<bool>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected boolean, found {}", v.type_name()),
        )),
    }
}

/// An optional number field (`null` counts as absent).
pub(super) fn opt_f64(o: &Object, k: &str) -> Result<Option<f64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n.as_f64())),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected number, found {}", v.type_name()),
        )),
    }
}

/// What a refusal quotes of a value: a number's lexeme (at most `QUOTE_MAX` bytes), else its
/// JSON type.
pub(super) fn found(v: &Value) -> String {
    match v {
        Value::Number(n) => n.quoted(),
        v => v.type_name().to_string(),
    }
}

/// An optional integer field in `lo..=hi` (`null` counts as absent). The value is compared
/// as its lexeme's integer, never converted first: `2^64`, `1e23`, `-1` and `1.5` are refused
/// alike, naming the field, the allowed range and what was found (`max_tokens: expected an
/// integer from 1 to 511, found 1e23`). `why` is said after the range (`" (one choice per
/// request)"`).
pub(super) fn opt_int_in(
    o: &Object,
    k: &str,
    lo: u64,
    hi: u64,
    why: &str,
) -> Result<Option<u64>, ApiError> {
    let v = match o.get(k) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    match v.as_number().and_then(|n| n.as_u64()) {
        Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
        _ => Err(ApiError::invalid(k, range_message(lo, hi, why, v))),
    }
}

/// `expected an integer from LO to HI{why}, found X` (`expected 1{why}, found X` when the
/// range is one value).
pub(super) fn range_message(lo: u64, hi: u64, why: &str, v: &Value) -> String {
    let range = if lo == hi {
        format!("{lo}")
    } else {
        format!("an integer from {lo} to {hi}")
    };
    format!("expected {range}{why}, found {}", found(v))
}

#[cfg(test)]
mod tests {
    use super::super::parse_body;
    use super::*;
    use crate::generate::sample::SamplerSettings;

    fn obj(s: &str) -> Object {
        parse_body(s.as_bytes()).unwrap()
    }

    #[test]
    fn the_field_table() {
        let ok = |s: &str| check_fields(&obj(s), CHAT_ACCEPTED);
        assert!(ok(
            r#"{"user": "u", "store": false, "metadata": {}, "parallel_tool_calls": true}"#
        )
        .is_ok());
        assert!(ok(
            r#"{"frequency_penalty": 0, "presence_penalty": 0.0, "n": 1, "logit_bias": null}"#
        )
        .is_ok());
        for (body, field) in [
            (r#"{"logit_bias": {"1": 2}}"#, "logit_bias"),
            (r#"{"audio": {}}"#, "audio"),
            (r#"{"presence_penalty": 1}"#, "presence_penalty"),
            (r#"{"n": 3}"#, "n"),
            (r#"{"what": 1}"#, "what"),
        ] {
            assert_eq!(
                ok(body).unwrap_err().param.as_deref(),
                Some(field),
                "{body}"
            );
        }
    }

    /// `max_tokens: -1` said "expected a non-negative integer" where 0 said "expected at
    /// least 1", and 2^64 (a positive integer) said "expected at least 1" too: every value
    /// outside the range gets one message, naming the range and what was found.
    #[test]
    fn integer_fields_name_their_range_and_the_value() {
        for v in [
            "0",
            "-1",
            "-12345678901234567890",
            "18446744073709551616",
            "1e23",
            "1.5",
            "1.0",
            "\"3\"",
            "true",
        ] {
            let e = opt_int_in(&obj(&format!(r#"{{"k": {v}}}"#)), "k", 1, 511, "").unwrap_err();
            assert_eq!(e.param.as_deref(), Some("k"));
            let shown = match v {
                "\"3\"" => "string",
                "true" => "bool",
                v => v,
            };
            assert_eq!(
                e.message,
                format!("k: expected an integer from 1 to 511, found {shown}"),
                "{v}"
            );
        }
        assert_eq!(
            opt_int_in(&obj(r#"{"k": 511}"#), "k", 1, 511, ""),
            Ok(Some(511))
        );
        assert_eq!(
            opt_int_in(&obj(r#"{"k": null}"#), "k", 1, 511, ""),
            Ok(None)
        );
        let e = check_fields(&obj(r#"{"n": 18446744073709551617}"#), CHAT_ACCEPTED).unwrap_err();
        assert_eq!(
            e.message,
            "n: expected 1 (k3 returns one choice per request), found 18446744073709551617"
        );
    }

    #[test]
    fn the_model() {
        let lim = Limits {
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
        };
        assert!(check_model(&obj(r#"{"model": "m"}"#), &lim).is_ok());
        let e = check_model(&obj(r#"{"model": "x"}"#), &lim).unwrap_err();
        assert_eq!((e.status, e.code), (404, Some("model_not_found")));
        assert_eq!(check_model(&obj("{}"), &lim).unwrap_err().status, 400);
    }
}
