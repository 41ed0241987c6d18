//! Request arithmetic at the extremes (issue 22): every numeric field of every request type —
//! chat completions, completions, `--batch` lines — fed 0, 1, 2^31±1, 2^32±1, 2^53±1,
//! 2^63±1, 2^64−1, 2^64, 1e23, -1, 1.5 and huge exponents, alone and in random mixes. Never a
//! panic; a job that is accepted fits the context (`prompt + max_tokens ≤ --ctx`, compared in
//! u128: `prompt_ids + max_tokens` wrapped and let 18446744073709551527 through); a refusal is
//! a 400 naming the field and the range it may take.

use k3::generate::batch_input::{parse_line, BatchDefaults};
use k3::generate::sample::SamplerSettings;
use k3::serve::api::{chat_job, completion_job, parse_body, ApiError, Limits};
use proptest::prelude::*;

const CTX: usize = 512;

/// The extremes, as JSON lexemes.
const EXTREMES: &[&str] = &[
    "0",
    "1",
    "-0",
    "0.5",
    "2147483647",
    "2147483648",
    "2147483649",
    "4294967295",
    "4294967296",
    "4294967297",
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "9223372036854775809",
    "18446744073709551527",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
    "-1",
    "-9223372036854775808",
    "-9223372036854775809",
    "-18446744073709551616",
    "1.5",
    "1.0",
    "1e23",
    "1E400",
    "1e-400",
    "-1e400",
    "1e999999999999999999999",
];

const CHAT_FIELDS: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "n",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
];

const COMPLETION_FIELDS: &[&str] = &[
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "n",
    "best_of",
    "logprobs",
    "frequency_penalty",
    "presence_penalty",
];

/// What every refusal of a number says: the range (or the one value) it may take.
const RANGE_WORDS: &[&str] = &[
    "from ",
    "in [",
    "in (",
    "≥",
    "expected 1",
    "give 0",
    "or less",
    "below vocab_size",
];

fn limits() -> Limits {
    Limits {
        model_id: "m".into(),
        ctx: CTX,
        vocab: 1000,
        defaults: SamplerSettings {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.95,
            min_p: 0.0,
            seed: 0,
        },
        sign_key: b"test".to_vec(),
        vocabulary: Default::default(),
    }
}

#[derive(Clone, Copy, Debug)]
enum Endpoint {
    Chat,
    Completion,
}

/// Runs one body through its endpoint's decoder: the accepted job's (prompt ids, max_tokens),
/// or the refusal.
fn decode(ep: Endpoint, fields: &[(&str, String)]) -> Result<(usize, Option<u64>), ApiError> {
    let mut body = match ep {
        Endpoint::Chat => {
            r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": true"#
                .to_string()
        }
        Endpoint::Completion if fields.iter().any(|(k, _)| *k == "prompt") => {
            r#"{"model": "m""#.to_string()
        }
        Endpoint::Completion => r#"{"model": "m", "prompt": [1, 2, 3]"#.to_string(),
    };
    for (k, v) in fields {
        body.push_str(&format!(r#", "{k}": {v}"#));
    }
    body.push('}');
    let o = parse_body(body.as_bytes()).unwrap_or_else(|e| panic!("{body}: {}", e.message));
    let tok = crate::support::tokenizer::tok();
    match ep {
        Endpoint::Chat => {
            chat_job(&o, tok, &limits(), &mut || 7).map(|j| (j.ids.len(), j.params.max_tokens))
        }
        Endpoint::Completion => completion_job(&o, tok, &limits(), &mut || 7)
            .map(|j| (j.ids.len(), j.params.max_tokens)),
    }
}

/// The checks of one outcome: an accepted job fits the context; a refusal is a 400 naming one
/// of `fields` and a range.
fn check(ep: Endpoint, fields: &[(&str, String)]) {
    match decode(ep, fields) {
        Ok((ids, Some(m))) => assert!(
            ids as u128 + m as u128 <= CTX as u128,
            "{ep:?} {fields:?}: accepted {ids} prompt ids + max_tokens {m} in a context of {CTX}"
        ),
        Ok(_) => {}
        Err(e) => {
            assert_eq!(e.status, 400, "{ep:?} {fields:?}: {e:?}");
            let p = e.param.clone().unwrap_or_default();
            let named = fields
                .iter()
                .any(|(k, _)| p == *k || p.starts_with(&format!("{k}[")));
            assert!(named, "{ep:?} {fields:?}: names {p:?}: {}", e.message);
            assert!(
                e.message.starts_with(&format!("{p}:")),
                "{ep:?} {fields:?}: {}",
                e.message
            );
            assert!(
                RANGE_WORDS.iter().any(|w| e.message.contains(w)),
                "{ep:?} {fields:?}: no range in {:?}",
                e.message
            );
        }
    }
}

/// Every field alone at every extreme, on both endpoints (and a completion's prompt ids).
#[test]
fn every_field_at_every_extreme() {
    for (ep, fields) in [
        (Endpoint::Chat, CHAT_FIELDS),
        (Endpoint::Completion, COMPLETION_FIELDS),
    ] {
        for k in fields {
            for v in EXTREMES {
                check(ep, &[(k, v.to_string())]);
            }
        }
    }
    for v in EXTREMES {
        check(Endpoint::Completion, &[("prompt", format!("[{v}]"))]);
    }
}

/// The request of the issue: `--ctx 512`, `max_tokens` 18446744073709551527 (it summed past
/// 2^64 to a small number and ran to the context's end), and 2^64, 1e23 (said "expected at
/// least 1"): each refused naming the field and its range, on both endpoints.
#[test]
fn max_tokens_near_2_64_names_the_field_and_range() {
    for (ep, k) in [
        (Endpoint::Chat, "max_tokens"),
        (Endpoint::Chat, "max_completion_tokens"),
        (Endpoint::Completion, "max_tokens"),
    ] {
        for v in [
            "18446744073709551527",
            "18446744073709551615",
            "18446744073709551616",
            "1e23",
        ] {
            let e = decode(ep, &[(k, v.to_string())]).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(k));
            assert!(
                e.message
                    .contains(&format!("expected an integer from 1 to {}", CTX - 1))
                    && e.message.ends_with(&format!("found {v}")),
                "{}",
                e.message
            );
        }
        // in range but beyond the prompt's room: the context refusal, naming the field
        let e = decode(ep, &[(k, (CTX - 1).to_string())]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some(k));
        assert_eq!(e.code, Some("context_length_exceeded"));
    }
}

/// Every numeric key of a `--batch` line at every extreme: accepted, or refused naming the key
/// and its range.
#[test]
fn batch_line_keys_at_every_extreme() {
    let d = BatchDefaults::default();
    for k in [
        "gen",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "seed",
        "ids",
    ] {
        for v in EXTREMES {
            let line = match k {
                "ids" => format!(r#"{{"ids": [{v}]}}"#),
                _ => format!(r#"{{"ids": [1], "{k}": {v}}}"#),
            };
            if let Err(e) = parse_line(line.as_bytes(), 1, "b.jsonl", &d) {
                assert_eq!(e.exit_code(), 2, "{line}: {}", e.message);
                assert!(
                    e.message.contains(&format!("key `{k}`")),
                    "{line}: {}",
                    e.message
                );
                assert!(
                    [" in ", "from ", "≥", "0..", "in ["]
                        .iter()
                        .any(|w| e.message.contains(w)),
                    "{line}: no range in {}",
                    e.message
                );
            }
        }
    }
}

fn lexeme() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(EXTREMES).prop_map(str::to_string),
        any::<u64>().prop_map(|x| x.to_string()),
        any::<i64>().prop_map(|x| x.to_string()),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| format!("{x:e}")),
        (0u32..40).prop_map(|e| format!("1e{e}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Several fields at once, each at an extreme or a random value.
    #[test]
    fn mixed_fields_never_wrap_or_panic(
        chat in any::<bool>(),
        picks in prop::collection::vec((any::<prop::sample::Index>(), lexeme()), 1..5),
    ) {
        let (ep, fields) = if chat {
            (Endpoint::Chat, CHAT_FIELDS)
        } else {
            (Endpoint::Completion, COMPLETION_FIELDS)
        };
        let mut body: Vec<(&str, String)> = Vec::new();
        for (i, v) in picks {
            let k = fields[i.index(fields.len())];
            if !body.iter().any(|(b, _)| *b == k) {
                body.push((k, v));
            }
        }
        check(ep, &body);
    }
}
