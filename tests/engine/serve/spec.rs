//! `k3 serve --spec K` (issue 15 item 4, ENGINE.md §10): every reply (text, finish reason,
//! usage, logprobs, whole and streamed) is the one the server gives without speculation,
//! one request at a time and four at once, on the model's own continuations and on a forced
//! one that repeats the prompt (so drafts are accepted, several ids per sweep).

use super::support::*;
use serde_json::{json, Value};

/// A prompt (ids of the Kimi vocabulary) that the forced reply repeats.
const PROMPT: [u32; 10] = [2108, 10975, 6200, 418, 276, 3271, 13, 276, 10975, 6200];

fn bodies() -> Vec<(&'static str, Value)> {
    let mut v = Vec::new();
    for i in 0..4u64 {
        let mut b = json!({"model": MODEL, "prompt": PROMPT, "max_tokens": 14 + i,
                           "logprobs": 2, "seed": i});
        if i == 1 {
            b["temperature"] = json!(0);
        }
        if i == 2 {
            b["stream"] = json!(true);
        }
        v.push(("/v1/completions", b));
    }
    for i in 0..2u64 {
        let mut b = chat_body(
            "the cat sat on the mat. the cat sat on the mat.",
            12,
            40 + i,
        );
        b["logprobs"] = json!(true);
        b["top_logprobs"] = json!(2);
        if i == 1 {
            b["stream"] = json!(true);
        }
        v.push(("/v1/chat/completions", b));
    }
    v
}

/// What must not change with `--spec`: the response without its id and times; for a stream,
/// every event's choices in order.
fn essence(b: &Value, r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    if b["stream"] != json!(true) {
        return comparable(r.json());
    }
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    Value::from(
        events[..events.len() - 1]
            .iter()
            .map(|e| {
                let mut v: Value = serde_json::from_str(e).unwrap();
                if let Some(u) = v.get_mut("usage").and_then(Value::as_object_mut) {
                    // prefix reuse depends on what ran before, not on --spec
                    u.remove("prompt_tokens_details");
                }
                json!([v["choices"], v["usage"]])
            })
            .collect::<Vec<_>>(),
    )
}

/// The replies to [`bodies`]: one at a time, then all at once.
fn replies(s: &Server) -> (Vec<Value>, Vec<Value>) {
    let bodies = bodies();
    let solo = bodies
        .iter()
        .map(|(p, b)| essence(b, &post(s, p, b)))
        .collect();
    let together = std::thread::scope(|sc| {
        let hs: Vec<_> = bodies
            .iter()
            .map(|(p, b)| sc.spawn(move || essence(b, &post(s, p, b))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (solo, together)
}

#[test]
fn replies_with_speculation_are_the_replies_without() {
    let list: Vec<String> = PROMPT.iter().map(u32::to_string).collect();
    let repeat = format!("{},{}", list.join(","), list.join(","));
    for force in [None, Some(repeat.as_str())] {
        let env: Vec<(&str, &str)> = force
            .map(|f| ("K3_TEST_FORCE_IDS", f))
            .into_iter()
            .collect();
        let (want, together) = replies(&start(&["--parallel", "4"], &env));
        assert_eq!(together, want, "without --spec, together vs alone");
        for k in ["1", "4"] {
            let s = start(&["--parallel", "4", "--spec", k], &env);
            let (solo, together) = replies(&s);
            for (i, w) in want.iter().enumerate() {
                assert_eq!(
                    &solo[i], w,
                    "--spec {k}, force {force:?}: request {i} alone"
                );
                assert_eq!(
                    &together[i], w,
                    "--spec {k}, force {force:?}: request {i} with others"
                );
            }
        }
    }
}

#[test]
fn a_bad_spec_is_refused_naming_the_flag() {
    for v in ["-1", "x", "65"] {
        let (code, err) = refused(&["--spec", v], &[]);
        assert_eq!(code, Some(2), "--spec {v}: {err}");
        assert!(err.contains("--spec"), "--spec {v}: {err}");
    }
}
