//! Joining requests prefill beside the decoding ones (ENGINE.md §10, §11; issue 23 items 5
//! and 6): a request whose prompt runs in slices as rows of other requests' steps gets the
//! reply it gets alone, with and without `--spec`, greedy and sampled; the prefill's progress
//! comes as SSE comments `: prefill DONE/TOTAL RATE/s ETA s`. (That a decoder chooses an id at
//! every step while a prompt runs is counted at the library level, `generate::join`.)

use super::support::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Polls (bounded) until `cond` holds.
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..2400 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("never: {what}");
}

/// Prompt ids `from..from + n` of the tiny Kimi vocabulary, repeated in a cycle of 11.
fn ids(from: u32, n: u32) -> Vec<u32> {
    (0..n).map(|i| from + i % 11).collect()
}

/// The long-running request, then the joiners: completions of different prompt lengths,
/// greedy and sampled (one with logprobs, one streamed), and a chat request.
fn bodies() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": ids(1000, 3), "max_tokens": 120, "seed": 1}),
        ),
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": ids(1100, 37), "max_tokens": 9, "temperature": 0}),
        ),
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": ids(1200, 71), "max_tokens": 7, "seed": 5,
                   "logprobs": 2}),
        ),
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": ids(1300, 20), "max_tokens": 11, "seed": 6,
                   "stream": true}),
        ),
        (
            "/v1/chat/completions",
            chat_body(&"Count the words of this line, please. ".repeat(4), 6, 7),
        ),
    ]
}

/// A reply without what may differ (`id`, `created`, cached ids, SSE comments).
fn essence(b: &Value, r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    if b["stream"] == json!(true) {
        let evs: Vec<Value> = r
            .events()
            .iter()
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str::<Value>(e).unwrap()["choices"].clone())
            .collect();
        return Value::from(evs);
    }
    let mut v = comparable(r.json());
    if let Some(u) = v.get_mut("usage").and_then(Value::as_object_mut) {
        u.remove("prompt_tokens_details");
    }
    v
}

fn joiners_get_their_solo_replies(extra: &[&str]) {
    let bodies = bodies();
    let solo: Vec<Value> = {
        let s = start(&["--parallel", "1"], &[]);
        bodies
            .iter()
            .map(|(p, b)| essence(b, &post(&s, p, b)))
            .collect()
    };
    // --prefill-chunk 4 with 4 slots: joining prompts run a few positions per step
    let mut args = vec!["--parallel", "4", "--prefill-chunk", "4"];
    args.extend_from_slice(extra);
    let s = start(&args, &[]);
    let together: Vec<Value> = std::thread::scope(|sc| {
        let (p0, b0) = &bodies[0];
        let s = &s;
        let first = sc.spawn(move || essence(b0, &post(s, p0, b0)));
        // the others join while the first decodes
        until("the first request decodes", || {
            metric(s, "k3_completion_tokens_total").unwrap_or(0.0) >= 1.0
        });
        let rest: Vec<_> = bodies[1..]
            .iter()
            .map(|(p, b)| sc.spawn(move || essence(b, &post(s, p, b))))
            .collect();
        std::iter::once(first)
            .chain(rest)
            .map(|h| h.join().unwrap())
            .collect()
    });
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "request {i} ({extra:?}) differs from its solo reply");
    }
}

#[test]
fn joining_requests_get_their_solo_replies() {
    joiners_get_their_solo_replies(&[]);
}

#[test]
fn joining_requests_get_their_solo_replies_under_speculation() {
    joiners_get_their_solo_replies(&["--spec", "3"]);
}

/// `: prefill DONE/TOTAL RATE/s ETA s` after every slice but the last, DONE rising, TOTAL the
/// prompt's ids, all before the first token; the same on the chat and Messages streams.
#[test]
fn prefill_progress_comes_as_sse_comments_in_the_spec_format() {
    // one slot, chunk 4: a 60-id prompt runs in 15 slices
    let s = start(&["--parallel", "1", "--prefill-chunk", "4"], &[]);
    let re = ": prefill ";
    let body = json!({"model": MODEL, "prompt": ids(1400, 60), "max_tokens": 3,
                      "temperature": 0, "stream": true});
    let r = post(&s, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let comments = progress_lines(&text, re);
    assert_eq!(comments.len(), 14, "{text}");
    let mut last = 0;
    for (done, total, rate, eta) in &comments {
        assert_eq!(*total, 60);
        assert!(*done > last && *done < 60 && *done % 4 == 0, "{comments:?}");
        last = *done;
        assert!(rate.is_some() && eta.is_some(), "{comments:?}");
    }
    let first_data = text.find("data: ").unwrap();
    assert!(text.rfind(": prefill ").unwrap() < first_data, "{text}");
    // chat completions and Messages: the same comment lines
    for (path, body) in [
        ("/v1/chat/completions", {
            let mut b = chat_body(&"A line of words to read. ".repeat(8), 2, 1);
            b["stream"] = json!(true);
            b
        }),
        (
            "/v1/messages",
            json!({"model": MODEL, "max_tokens": 2, "stream": true,
                   "messages": [{"role": "user",
                                 "content": "Another line of words to read. ".repeat(8)}]}),
        ),
    ] {
        let r = post(&s, path, &body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let c = progress_lines(&r.text(), re);
        assert!(c.len() >= 3, "{path}: {}", r.text());
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0), "{path}: {c:?}");
    }
}

/// Every progress comment of an SSE body: (done, total, rate, eta), checking the exact shape
/// `: prefill D/T` or `: prefill D/T R/s E s` with R and E decimals of one place.
fn progress_lines(text: &str, prefix: &str) -> Vec<(usize, usize, Option<f64>, Option<f64>)> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix(prefix))
        .map(|rest| {
            let parts: Vec<&str> = rest.split(' ').collect();
            let (d, t) = parts[0].split_once('/').expect(rest);
            let dec = |s: &str| {
                let (a, b) = s.split_once('.').expect(rest);
                assert!(!a.is_empty() && b.len() == 1, "`{rest}`");
                s.parse::<f64>().expect(rest)
            };
            let (rate, eta) = match parts.len() {
                1 => (None, None),
                4 => {
                    assert_eq!(parts[3], "s", "`{rest}`");
                    let r = parts[1].strip_suffix("/s").expect(rest);
                    (Some(dec(r)), Some(dec(parts[2])))
                }
                _ => panic!("not the progress format: `{rest}`"),
            };
            (d.parse().expect(rest), t.parse().expect(rest), rate, eta)
        })
        .collect()
}
