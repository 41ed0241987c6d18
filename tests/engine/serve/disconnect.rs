//! A client that leaves frees what it held (ENGINE.md §11: "a client that disconnects frees
//! its sequence within one step"): a non-streaming request while it decodes, and a request
//! still waiting in the queue (never prefilled). The streaming case is in `bad_input`.

use super::support::*;
use serde_json::json;
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

/// The bug: a non-streaming handler looked at its client only after 250 ms without an event,
/// and during decode an event comes every step, so a client that left (`curl -m 2`) kept its
/// slot until the last token and was logged `200 completion=400`.
#[test]
fn a_non_streaming_client_that_leaves_frees_its_slot_while_decoding() {
    let s = start(&["--parallel", "1", "--ctx", "2048"], &[]);
    let c = send_only(
        &s,
        "/v1/chat/completions",
        &chat_body("Keep going.", 1900, 3),
    );
    until("the request decodes", || {
        metric(&s, "k3_completion_tokens_total").unwrap_or(0.0) >= 1.0
    });
    drop(c);
    let mut seen = Vec::new();
    let line = s.wait_log(&mut seen, |l| l.contains("POST /v1/chat/completions"));
    assert!(
        line.contains("/v1/chat/completions 499 "),
        "the request is logged as abandoned: {line}"
    );
    until("the slot is free", || {
        metric(&s, "k3_active_sequences") == Some(0.0)
    });
    let made = metric(&s, "k3_completion_tokens_total").unwrap();
    assert!(
        made < 1900.0,
        "generation went on for a gone client: {made}"
    );
    assert_eq!(metric(&s, "k3_requests_total{status=\"499\"}"), Some(1.0));
    // the slot serves the next request
    let r = post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A request whose client left while it waited in the queue is dropped when its turn comes,
/// before any prefill (its prompt is never run, so it never counts in the prompt tokens).
#[test]
fn a_queued_request_whose_client_left_is_never_prefilled() {
    let s = start(&["--parallel", "1", "--queue", "4", "--ctx", "2048"], &[]);
    let held = open_stream(&s, &chat_body("Keep going.", 1900, 3));
    until("the held request decodes", || {
        metric(&s, "k3_completion_tokens_total").unwrap_or(0.0) >= 1.0
    });
    let before = metric(&s, "k3_prompt_tokens_total").unwrap();
    let ids: Vec<u32> = (1000..1037).collect();
    let body = json!({"model": MODEL, "prompt": ids, "max_tokens": 4, "temperature": 0});
    let queued = send_only(&s, "/v1/completions", &body);
    until("the request waits", || {
        metric(&s, "k3_queue_depth") == Some(1.0)
    });
    drop(queued);
    let mut seen = Vec::new();
    let line = s.wait_log(&mut seen, |l| l.contains("POST /v1/completions"));
    assert!(line.contains(" 499 "), "{line}");
    drop(held);
    s.wait_log(&mut seen, |l| l.contains("POST /v1/chat/completions"));
    // the slot is free and the dead job has left the queue: the next request runs alone
    let fresh = json!({"model": MODEL, "prompt": [5, 6, 7, 8, 9], "max_tokens": 2,
                       "temperature": 0});
    let r = post(&s, "/v1/completions", &fresh);
    assert_eq!(r.status, 200, "{}", r.text());
    let after = metric(&s, "k3_prompt_tokens_total").unwrap();
    assert_eq!(
        after - before,
        5.0,
        "only the fresh request's 5 ids were prefilled, not the 37 of the one that left"
    );
    assert_eq!(metric(&s, "k3_queue_depth"), Some(0.0));
}
