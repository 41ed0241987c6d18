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
    if let Some(n) = opt_positive(o, "n")? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                "only 1 choice per request is supported",
            ));
        }
    }
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

/// An optional non-negative integer field (`null` counts as absent).
pub(super) fn opt_uint(o: &Object, k: &str) -> Result<Option<u64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_integer() => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::invalid(k, "expected a non-negative integer")),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected a non-negative integer, found {}", v.type_name()),
        )),
    }
}

/// An optional integer field that must be at least 1 (`max_tokens`, `n`, `best_of`; `null`
/// counts as absent): 0 and negative values alike are "expected at least 1".
pub(super) fn opt_positive(o: &Object, k: &str) -> Result<Option<u64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_integer() => match n.as_u64() {
            Some(m) if m >= 1 => Ok(Some(m)),
            _ => Err(ApiError::invalid(k, "expected at least 1")),
        },
        Some(v) => Err(ApiError::invalid(
            k,
            format!("expected an integer ≥ 1, found {}", v.type_name()),
        )),
    }
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
    /// least 1": every value below 1 gets the same message, in every positive-integer field.
    #[test]
    fn positive_fields_refuse_zero_and_negatives_alike() {
        for k in ["max_tokens", "n", "best_of"] {
            for v in ["0", "-1", "-12345678901234567890"] {
                let e = opt_positive(&obj(&format!(r#"{{"{k}": {v}}}"#)), k).unwrap_err();
                assert_eq!(e.param.as_deref(), Some(k));
                assert_eq!(e.message, format!("{k}: expected at least 1"), "{k}: {v}");
            }
            assert_eq!(
                opt_positive(&obj(&format!(r#"{{"{k}": 3}}"#)), k),
                Ok(Some(3))
            );
            let e = opt_positive(&obj(&format!(r#"{{"{k}": 1.5}}"#)), k).unwrap_err();
            assert!(
                e.message.contains("expected an integer ≥ 1"),
                "{}",
                e.message
            );
        }
        let e = check_fields(&obj(r#"{"n": -1}"#), CHAT_ACCEPTED).unwrap_err();
        assert_eq!(e.message, "n: expected at least 1");
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
        };
        assert!(check_model(&obj(r#"{"model": "m"}"#), &lim).is_ok());
        let e = check_model(&obj(r#"{"model": "x"}"#), &lim).unwrap_err();
        assert_eq!((e.status, e.code), (404, Some("model_not_found")));
        assert_eq!(check_model(&obj("{}"), &lim).unwrap_err().status, 400);
    }
}
