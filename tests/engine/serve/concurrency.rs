//! Concurrent requests (ENGINE.md §11): every response is the bits of the same request served
//! alone, whatever else runs; a full queue answers 503 with `Retry-After`.

use super::support::*;
use serde_json::{json, Value};

fn bodies() -> Vec<Value> {
    (0..8u64)
        .map(|i| {
            let mut b = chat_body(
                &format!("Prompt number {i}: {}", "more ".repeat(i as usize)),
                3 + 2 * i,
                100 + i,
            );
            if i % 3 == 0 {
                b["stream"] = json!(true);
            }
            if i == 5 {
                b["temperature"] = json!(0);
            }
            b
        })
        .collect()
}

/// The part of a response that must not depend on other requests.
fn essence(r: &Reply, stream: bool) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    if stream {
        let (reasoning, content, calls, finish, _) = concat_stream(r);
        json!([reasoning, content, calls, finish])
    } else {
        comparable(r.json())
    }
}

#[test]
fn eight_concurrent_clients_each_get_their_solo_reply() {
    let s = start(&["--parallel", "4", "--queue", "16"], &[]);
    let bodies = bodies();
    // solo: one at a time on an idle server
    let solo: Vec<Value> = bodies
        .iter()
        .map(|b| {
            essence(
                &post(&s, "/v1/chat/completions", b),
                b["stream"] == json!(true),
            )
        })
        .collect();
    // together: 8 clients at once, 4 slots (the others queue and join as slots free)
    let together: Vec<Value> = std::thread::scope(|sc| {
        let hs: Vec<_> = bodies
            .iter()
            .map(|b| {
                let s = &s;
                sc.spawn(move || {
                    essence(
                        &post(s, "/v1/chat/completions", b),
                        b["stream"] == json!(true),
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "request {i} differs when served with others");
    }
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let s = start(&["--parallel", "1", "--queue", "0", "--ctx", "2048"], &[]);
    let _held = open_stream(&s, &chat_body("Keep going.", 1900, 3));
    // the one slot is busy and nothing may wait
    let r = post(&s, "/v1/chat/completions", &chat_body("hi", 1, 1));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.json()["error"]["message"].is_string());
}
