//! The request log of `k3 serve` (ENGINE.md §11): one line per request, the prompt text only
//! with `--log-prompts`, no line for `/health` probes.

use super::support::*;
use serde_json::json;

/// A prompt no other line of the log could contain.
const SECRET: &str = "zebra-quartz-4417";

/// Every kind of request that carries the prompt: answered, streamed, refused by the API,
/// completions, refused by the transport.
fn send_prompts(s: &Server) {
    let chat = "/v1/chat/completions";
    assert_eq!(post(s, chat, &chat_body(SECRET, 2, 1)).status, 200);
    let mut st = chat_body(SECRET, 2, 1);
    st["stream"] = json!(true);
    assert_eq!(post(s, chat, &st).status, 200);
    let mut bad = chat_body(SECRET, 2, 1);
    bad["temperature"] = json!(-1);
    assert_eq!(post(s, chat, &bad).status, 400);
    let c = json!({"model": MODEL, "prompt": SECRET, "max_tokens": 2});
    assert_eq!(post(s, "/v1/completions", &c).status, 200);
    // a body cut short: the transport refuses it (400)
    let host = s.addr;
    let cut = format!(
        "POST {chat} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 999\r\n\r\n{{\"x\": \"{SECRET}"
    );
    let mut conn = connect(s);
    std::io::Write::write_all(&mut conn, cut.as_bytes()).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = Vec::new();
    let _ = std::io::Read::read_to_end(&mut conn, &mut buf);
    assert_eq!(parse(&buf).status, 400);
}

/// All log lines up to the drain's last one.
fn whole_log(mut s: Server) -> Vec<String> {
    s.signal("-TERM");
    assert_eq!(s.wait_exit(), Some(0));
    let mut seen = Vec::new();
    s.wait_log(&mut seen, |l| l.contains("k3 serve: stopped"));
    seen
}

#[test]
fn log_prompts_off_never_logs_the_prompt() {
    let s = start(&[], &[]);
    send_prompts(&s);
    let log = whole_log(s);
    assert!(
        log.iter().filter(|l| l.contains("POST /v1/")).count() >= 4,
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.contains(SECRET)), "{log:?}");
}

#[test]
fn log_prompts_on_logs_each_request_body() {
    let s = start(&["--log-prompts"], &[]);
    send_prompts(&s);
    let log = whole_log(s);
    let with: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("POST /v1/") && l.contains(SECRET))
        .collect();
    // the chat (whole and streamed), the refused one and the completion
    assert_eq!(with.len(), 4, "{log:?}");
    assert!(
        with.iter()
            .any(|l| l.contains(" 400 ") && l.contains("temperature")),
        "{log:?}"
    );
}

/// A probe every few seconds must not bury the requests: `/health` writes no log line (it
/// still counts in `/metrics`).
#[test]
fn health_probes_write_no_log_line() {
    let s = start(&[], &[]);
    for _ in 0..5 {
        assert_eq!(get(&s, "/health").status, 200);
    }
    assert_eq!(get(&s, "/v1/models").status, 200);
    let log = whole_log(s);
    assert!(
        log.iter().any(|l| l.contains("GET /v1/models 200")),
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.contains("/health")), "{log:?}");
}

/// The ready line counts in the singular for 1 (it said "1 slots", "1 snapshots").
#[test]
fn the_ready_line_says_1_slot_and_1_snapshot() {
    let one = start(&["--parallel", "1", "--snapshots", "1"], &[]);
    let line = one.wait_log(&mut Vec::new(), |l| l.contains("ready on"));
    assert!(
        line.contains(", 1 slot (--parallel),") && line.contains(", 1 snapshot,"),
        "{line}"
    );
    let two = start(&["--parallel", "2", "--snapshots", "0"], &[]);
    let line = two.wait_log(&mut Vec::new(), |l| l.contains("ready on"));
    assert!(
        line.contains(", 2 slots (--parallel),") && line.contains(", 0 snapshots,"),
        "{line}"
    );
}
