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

/// A client dripping its request one byte at a time gets 408 at the whole-request deadline
/// (`K3_TEST_REQUEST_DEADLINE_MS` shortens the 30 s), while another client is served.
#[test]
fn a_slow_drip_client_gets_408_while_another_request_is_served() {
    let s = start(&[], &[("K3_TEST_REQUEST_DEADLINE_MS", "1500")]);
    let c = connect(&s);
    let mut w = c.try_clone().unwrap();
    let body = chat_body("drip", 2, 1).to_string();
    let host = s.addr;
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // one byte every 50 ms (well inside the 10 s between bytes), stopping when refused
    let dripper = std::thread::spawn(move || {
        for b in req.bytes() {
            if std::io::Write::write_all(&mut w, &[b]).is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    // served meanwhile, the dripping connection notwithstanding
    let r = post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut buf = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::BufReader::new(c), &mut buf);
    let refused = parse(&buf);
    assert_eq!(refused.status, 408, "{}", refused.text());
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not complete within 1.5 s"),
        "{}",
        refused.text()
    );
    dripper.join().unwrap();
    assert_eq!(get(&s, "/health").status, 200);
}

/// `logprobs` (chat, whole and streamed; completions) are the same figures whether a request
/// runs alone or beside others in one step.
#[test]
fn logprobs_under_concurrency_equal_the_solo_request() {
    let s = start(&["--parallel", "4", "--queue", "8"], &[]);
    let bodies: Vec<(&str, Value)> = (0..6u64)
        .map(|i| {
            if i % 3 == 2 {
                let ids: Vec<u64> = (0..3 + i).map(|k| 500 + 17 * k + i).collect();
                let b = json!({"model": MODEL, "prompt": ids, "max_tokens": 3 + i,
                               "logprobs": 5, "seed": i});
                ("/v1/completions", b)
            } else {
                let mut b = chat_body(
                    &format!("Logprobs {i}: {}", "x ".repeat(i as usize)),
                    3 + i,
                    50 + i,
                );
                b["logprobs"] = json!(true);
                b["top_logprobs"] = json!(1 + i);
                if i % 2 == 1 {
                    b["stream"] = json!(true);
                }
                ("/v1/chat/completions", b)
            }
        })
        .collect();
    let logprobs = |path: &str, b: &Value, r: &Reply| -> Value {
        assert_eq!(r.status, 200, "{}", r.text());
        if b["stream"] != json!(true) {
            return r.json()["choices"][0]["logprobs"].clone();
        }
        // a stream: the per-token entries of every chunk, in order
        let events = r.events();
        let all: Vec<Value> = events[..events.len() - 1]
            .iter()
            .filter_map(|e| {
                let v: Value = serde_json::from_str(e).unwrap();
                v["choices"][0]["logprobs"]["content"].as_array().cloned()
            })
            .flatten()
            .collect();
        assert!(!all.is_empty(), "{path}: no logprobs streamed");
        Value::from(all)
    };
    let solo: Vec<Value> = bodies
        .iter()
        .map(|(p, b)| logprobs(p, b, &post(&s, p, b)))
        .collect();
    let together: Vec<Value> = std::thread::scope(|sc| {
        let hs: Vec<_> = bodies
            .iter()
            .map(|(p, b)| {
                let s = &s;
                sc.spawn(move || logprobs(p, b, &post(s, p, b)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert!(!a.is_null(), "request {i}: no logprobs");
        assert_eq!(a, b, "request {i}: logprobs differ when served with others");
    }
}
