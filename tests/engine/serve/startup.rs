//! `k3 serve` startup refusals, loading and the drain (ENGINE.md §11): a non-loopback host
//! without a key, a port in use (exit 2 naming the address), `--parallel` beyond the plan
//! (exit 3 naming the largest that fits), `/health` 503 while the model loads, SIGTERM and
//! SIGINT with requests running (exit 0), memory refusals in serve's terms, an empty API key.

use super::support::*;
use crate::support::{fixture, run_k3};

fn serve(args: &[&str]) -> std::process::Output {
    let dir = fixture(MODEL);
    let mut a = vec!["serve", dir.to_str().unwrap(), "--ctx", "64"];
    a.extend_from_slice(args);
    run_k3(a)
}

#[test]
fn a_non_loopback_host_needs_an_api_key() {
    let o = serve(&["--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--host 0.0.0.0") && e.contains("--api-key"),
        "{e}"
    );
    let o = serve(&["--host", "nowhere", "--port", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

/// An empty key started the server without authentication, silently: refused, exit 2 naming
/// the flag or the variable.
#[test]
fn an_empty_api_key_is_exit_2_naming_its_source() {
    let (code, e) = refused(&["--api-key", ""], &[]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("--api-key") && e.contains("empty"), "{e}");
    let (code, e) = refused(&[], &[("K3_API_KEY", "")]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("K3_API_KEY") && e.contains("empty"), "{e}");
}

/// A key with surrounding whitespace could never be sent (HTTP trims header values): every
/// request was 401. Refused, exit 2 naming the flag or the variable.
#[test]
fn an_api_key_with_surrounding_whitespace_is_exit_2_naming_its_source() {
    for key in [" x", "x ", "x\n", "  "] {
        let (code, e) = refused(&["--api-key", key], &[]);
        assert_eq!(code, Some(2), "{key:?}: {e}");
        assert!(e.contains("--api-key") && e.contains("whitespace"), "{e}");
    }
    let (code, e) = refused(&[], &[("K3_API_KEY", "x ")]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("K3_API_KEY") && e.contains("whitespace"), "{e}");
}

#[test]
fn a_port_in_use_is_exit_2_naming_the_address() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let o = serve(&["--port", &port]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains(&format!("127.0.0.1:{port}")) && e.contains("in use"),
        "{e}"
    );
}

#[test]
fn parallel_beyond_the_plan_is_exit_3_naming_what_fits() {
    let o = serve(&[
        "--port",
        "0",
        "--mem-gb",
        "0.08",
        "--ctx",
        "4096",
        "--parallel",
        "4096",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--parallel 4096") && e.contains("the largest --parallel that fits is"),
        "{e}"
    );
}

/// A memory refusal blamed `--parallel 4` though it was never given, and advised the run's
/// `--gen, a shorter prompt`: serve says the 4 is the default and advises `--ctx`/`--parallel`.
#[test]
fn a_memory_refusal_speaks_of_serve_flags() {
    let (code, e) = refused(&["--mem-gb", "0.02"], &[]);
    assert_eq!(code, Some(3), "{e}");
    assert!(e.contains("flag `--parallel 4` (the default):"), "{e}");
    assert!(
        e.contains("(a smaller --ctx or --parallel)") && !e.contains("--gen"),
        "{e}"
    );
    let (code, e) = refused(&["--mem-gb", "0.02", "--parallel", "4"], &[]);
    assert_eq!(code, Some(3), "{e}");
    assert!(e.contains("flag `--parallel 4`:"), "{e}");
    // --parallel 1: the plan's own refusal, in serve's terms too
    let (code, e) = refused(&["--mem-gb", "0.02", "--parallel", "1"], &[]);
    assert_eq!(code, Some(3), "{e}");
    assert!(
        e.contains("(a smaller --ctx or --parallel)") && !e.contains("--gen"),
        "{e}"
    );
    // k3 run keeps its own advice
    let dir = fixture(MODEL);
    let o = run_k3([
        "run",
        dir.to_str().unwrap(),
        "--mem-gb",
        "0.02",
        "--prompt",
        "hi",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("(--gen, a shorter prompt)"), "{e}");
}

#[test]
fn sigterm_drains_and_exits_0() {
    let mut s = start(&[], &[]);
    assert_eq!(
        post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1)).status,
        200
    );
    s.signal("-TERM");
    assert_eq!(s.wait_exit(), Some(0));
    let log = s.log_lines();
    assert!(
        log.iter().any(|l| l.contains("k3 serve: stopped")),
        "{log:?}"
    );
    // the request line carries no prompt text
    assert!(log
        .iter()
        .any(|l| l.contains("POST /v1/chat/completions 200")));
    assert!(!log.iter().any(|l| l.contains("\"hi\"")), "{log:?}");
}

/// `/health` says 503 (with `Retry-After`) while the model loads, generation is refused the
/// same way, and both open once it is loaded. The test hook `K3_TEST_LOAD_GATE` holds the
/// loading until the test creates the file, so the 503 is seen every time.
#[test]
fn health_is_503_until_the_model_is_loaded() {
    let dir = std::env::temp_dir().join(format!("k3-load-gate-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    let gate = dir.to_str().unwrap().to_string();
    let s = spawn(&fixture(MODEL), &[], &[("K3_TEST_LOAD_GATE", &gate)]);
    let h = get(&s, "/health");
    assert_eq!(h.status, 503, "{}", h.text());
    assert_eq!(h.json()["status"], "loading");
    assert_eq!(h.header("retry-after"), Some("1"));
    let r = post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("loading"));
    std::fs::write(&dir, b"").unwrap();
    wait_healthy(&s);
    let _ = std::fs::remove_file(&dir);
    assert_eq!(
        post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1)).status,
        200
    );
}

/// SIGINT (Ctrl-C) with a request still decoding: the request finishes with its whole reply
/// (200, written before the process exits), and the server exits 0.
#[test]
fn sigint_lets_a_running_request_finish_and_exits_0() {
    let mut s = start(&["--parallel", "2", "--ctx", "1024"], &[]);
    let body = chat_body("Keep going.", 40, 3);
    let solo = post(&s, "/v1/chat/completions", &body);
    assert_eq!(solo.status, 200, "{}", solo.text());
    let c = send_only(&s, "/v1/chat/completions", &body);
    let mut seen = s.log_lines();
    // the second time its prompt is a held snapshot: decoding starts at once
    for _ in 0..2400 {
        if metric(&s, "k3_completion_tokens_total").unwrap_or(0.0) > 40.0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    s.signal("-INT");
    let mut r = std::io::BufReader::new(c);
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut r, &mut buf).unwrap_or_default();
    let reply = parse(&buf);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(comparable(reply.json()), comparable(solo.json()));
    assert_eq!(s.wait_exit(), Some(0));
    s.wait_log(&mut seen, |l| l.contains("k3 serve: stopped"));
    let signal = seen.iter().position(|l| l.contains("signal received"));
    let line = seen
        .iter()
        .rposition(|l| l.contains("/v1/chat/completions 200 ") && l.contains("completion=40"));
    assert!(
        signal.is_some() && line > signal,
        "the request ended after the signal, its line before `stopped`: {seen:?}"
    );
}

/// SIGINT with a request that would run past the drain bound (`K3_TEST_DRAIN_MS` shortens the
/// 30 s): it is cancelled at the bound — a streamed reply ends with an error chunk and
/// `[DONE]`, a whole one is a 500 — the replies are written before the process exits, and
/// it exits 0.
#[test]
fn sigint_cancels_requests_past_the_drain_bound_and_exits_0() {
    let mut s = start(
        &["--parallel", "2", "--ctx", "2048"],
        &[("K3_TEST_DRAIN_MS", "300")],
    );
    let streamed = open_stream(&s, &chat_body("Keep going.", 1900, 3));
    let whole = send_only(
        &s,
        "/v1/chat/completions",
        &chat_body("And you too.", 1900, 4),
    );
    for _ in 0..2400 {
        if metric(&s, "k3_active_sequences") == Some(2.0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    s.signal("-INT");
    let read = |c: std::net::TcpStream| {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::BufReader::new(c), &mut buf);
        buf
    };
    let sb = read(streamed);
    let text = String::from_utf8_lossy(&sb).into_owned();
    assert!(
        text.contains("data: {\"error\"") && text.contains("shutting down"),
        "{text}"
    );
    assert!(text.contains("data: [DONE]"), "{text}");
    let w = parse(&read(whole));
    assert_eq!(w.status, 500, "{}", w.text());
    assert!(w.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("shutting down"));
    assert_eq!(s.wait_exit(), Some(0));
    // each cancelled request is logged with the ids it used (it said `500 prompt=0
    // completion=0`): both had prefilled and decoded for the drain's 300 ms
    let lines = s.log_lines();
    let cancelled: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("/v1/chat/completions 500 "))
        .collect();
    assert_eq!(cancelled.len(), 2, "{lines:?}");
    for l in cancelled {
        let count = |key: &str| -> u64 {
            let at = l.find(key).unwrap_or_else(|| panic!("{key} in {l}")) + key.len();
            l[at..].split(' ').next().unwrap().parse().unwrap()
        };
        assert!(count(" prompt=") > 0 && count(" completion=") > 0, "{l}");
    }
}

/// `--model-id ''` served a model no request could name (every one 404): refused like an
/// empty key, exit 2 naming the flag.
#[test]
fn an_empty_model_id_is_exit_2() {
    let (code, e) = refused(&["--model-id", ""], &[]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("--model-id") && e.contains("empty"), "{e}");
}

/// A `--ctx` shorter than the shortest chat request plus one reply id started a server that
/// refused every chat request: exit 2 at start, naming `--ctx` and the least that serves.
#[test]
fn a_ctx_that_holds_no_chat_request_is_exit_2() {
    let tok = crate::support::tokenizer::tok();
    let least = k3::serve::api::shortest_chat_prompt(tok).unwrap() + 1;
    for c in [1, least - 1] {
        let (code, e) = refused(&["--ctx", &c.to_string()], &[]);
        assert_eq!(code, Some(2), "{e}");
        assert!(
            e.contains(&format!("flag `--ctx {c}`"))
                && e.contains(&format!("give --ctx {least} or more")),
            "{e}"
        );
    }
}

/// `--snapshots` and `--parallel` 18446744073709551615: `parallel + snapshots` and the plan's
/// products of the count overflowed (a panic): refused at the flag, exit 2 naming the range.
#[test]
fn sequence_counts_beyond_any_plan_are_exit_2() {
    for flag in ["--snapshots", "--parallel"] {
        let (code, e) = refused(&[flag, "18446744073709551615"], &[]);
        assert_eq!(code, Some(2), "{e}");
        assert!(
            e.contains(&format!("flag `{flag} 18446744073709551615`: expected"))
                && e.contains("to 4096"),
            "{e}"
        );
    }
}
