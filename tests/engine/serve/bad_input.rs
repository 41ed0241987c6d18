//! Bad input to `k3 serve` (issue 14): each answered with its status and an OpenAI-shape error
//! naming the field, while the server keeps serving.

use super::support::*;
use serde_json::{json, Value};

/// Asserts an OpenAI-shape error of `status` whose `param` is `param` (when given).
fn assert_error(r: &Reply, status: u16, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
    v
}

#[test]
fn bad_requests_are_refused_naming_the_field() {
    let s = start(&[], &[]);
    let chat = "/v1/chat/completions";
    // malformed JSON: the byte offset
    let r = request(
        &s,
        "POST",
        chat,
        &[],
        b"{\"model\": \"tiny-k3-text\", \"messages\": [",
    );
    let v = assert_error(&r, 400, None);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("at byte"),
        "{v}"
    );
    let ok = chat_body("hi", 2, 1);
    let with = |k: &str, x: Value| {
        let mut b = ok.clone();
        b[k] = x;
        b
    };
    let cases: Vec<(Value, u16, &str)> = vec![
        (with("temperature", json!("hot")), 400, "temperature"),
        (with("temperature", json!(-1)), 400, "temperature"),
        (with("top_p", json!(0)), 400, "top_p"),
        (with("max_tokens", json!("ten")), 400, "max_tokens"),
        (with("max_tokens", json!(100000)), 400, "max_tokens"),
        (with("n", json!(2)), 400, "n"),
        (
            with("frequency_penalty", json!(0.5)),
            400,
            "frequency_penalty",
        ),
        (with("logit_bias", json!({"1": 5})), 400, "logit_bias"),
        (with("frobnicate", json!(1)), 400, "frobnicate"),
        (with("stream", json!("yes")), 400, "stream"),
        (with("stop", json!(["a", "b", "c", "d", "e"])), 400, "stop"),
        (with("seed", json!(1.5)), 400, "seed"),
        (with("messages", json!([])), 400, "messages"),
        (with("messages", json!("hi")), 400, "messages"),
        (
            with("messages", json!([{"role": "wizard", "content": "x"}])),
            400,
            "messages[0].role",
        ),
        (with("model", json!("gpt-4")), 404, "model"),
        (with("model", json!(7)), 400, "model"),
    ];
    for (body, status, param) in cases {
        let r = post(&s, chat, &body);
        assert_error(&r, status, Some(param));
    }
    // out of range is one message naming the range and the value, 0 or negative (-1 said
    // "expected a non-negative integer") or 2^64 and beyond (said "expected at least 1")
    for v in [json!(0), json!(-1), json!(u64::MAX), json!(1e23)] {
        for (path, k, body) in [
            (
                "/v1/chat/completions",
                "max_tokens",
                with("max_tokens", v.clone()),
            ),
            (
                "/v1/chat/completions",
                "max_completion_tokens",
                with("max_completion_tokens", v.clone()),
            ),
            (
                "/v1/completions",
                "max_tokens",
                json!({"model": MODEL, "prompt": "x", "max_tokens": v.clone()}),
            ),
        ] {
            let e = assert_error(&post(&s, path, &body), 400, Some(k));
            assert_eq!(
                e["error"]["message"],
                format!(
                    "{k}: expected an integer from 1 to 255 (the prompt and the reply share \
                     this server's --ctx of 256 positions), found {v}"
                ),
                "{path} {v}"
            );
        }
    }
    // ignored fields are accepted
    let r = post(&s, chat, &with("user", json!("me")));
    assert_eq!(r.status, 200, "{}", r.text());
    // a prompt longer than the context (--ctx 256)
    let long = "word ".repeat(400);
    let r = post(&s, chat, &chat_body(&long, 1, 1));
    assert_eq!(
        assert_error(&r, 400, Some("messages"))["error"]["code"],
        "context_length_exceeded"
    );
    // the same prompt to /v1/completions is blamed on `prompt` (it said `messages`)
    let r = post(
        &s,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": long, "max_tokens": 1}),
    );
    assert_eq!(
        assert_error(&r, 400, Some("prompt"))["error"]["code"],
        "context_length_exceeded"
    );
    let r = post(
        &s,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": (0..300).collect::<Vec<u32>>()}),
    );
    assert_error(&r, 400, Some("prompt"));
    // completions: ids outside the vocabulary, echo
    let r = post(
        &s,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": [1, 999999999]}),
    );
    assert_error(&r, 400, Some("prompt[1]"));
    let r = post(
        &s,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": "x", "echo": true}),
    );
    assert_error(&r, 400, Some("echo"));
    // routes and methods
    assert_error(&get(&s, "/v1/nothing"), 404, None);
    assert_error(&get(&s, chat), 405, None);
    // the server still answers
    assert_eq!(post(&s, chat, &ok).status, 200);
}

/// The context refusal counts the prompt as `usage.prompt_tokens` does (it said 89 where
/// `usage` said 86: the 3 ids that open the reply were counted too), and names the positions.
#[test]
fn the_context_refusal_counts_the_prompt_as_usage_does() {
    let s = start(&[], &[]);
    let ok = post(&s, "/v1/chat/completions", &chat_body("Count me.", 1, 1));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let n = ok.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    let r = post(&s, "/v1/chat/completions", &chat_body("Count me.", 250, 1));
    let v = assert_error(&r, 400, Some("max_tokens"));
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!(
            "the prompt ({n} tokens as the reply's usage counts them, {} positions with the 3 \
             that open the reply)",
            n + 3
        )),
        "{m}"
    );
    assert!(
        m.contains(&format!("give max_tokens {} or less", 256 - n - 3)),
        "{m}"
    );
    // a completion has no such ids: its count is usage's too
    let c = json!({"model": MODEL, "prompt": [1, 2, 3, 4], "max_tokens": 253});
    let v = assert_error(&post(&s, "/v1/completions", &c), 400, Some("max_tokens"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the prompt (4 tokens) + max_tokens (253)"),
        "{v}"
    );
}

#[test]
fn transport_limits_answer_in_the_openai_shape() {
    let s = start(&[], &[]);
    let host = s.addr;
    // 20 MiB body: 413 before it is sent
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n",
        20 << 20
    );
    assert_error(&raw(&s, head.as_bytes()), 413, None);
    // 100 KiB header: 431
    let big = format!(
        "GET /health HTTP/1.1\r\nHost: {host}\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 << 10)
    );
    assert_error(&raw(&s, big.as_bytes()), 431, None);
    // a header line without a colon: 400
    assert_error(
        &raw(&s, b"GET /health HTTP/1.1\r\nHost x\r\n\r\n"),
        400,
        None,
    );
    assert_eq!(get(&s, "/health").status, 200);
}

#[test]
fn api_key_is_required_when_set() {
    let s = start(&["--api-key", "sekrit"], &[]);
    let body = chat_body("hi", 1, 1);
    let r = post(&s, "/v1/chat/completions", &body);
    assert_error(&r, 401, None);
    let r = post_with(
        &s,
        "/v1/chat/completions",
        &["Authorization: Bearer wrong"],
        &body,
    );
    assert_error(&r, 401, None);
    let r = post_with(
        &s,
        "/v1/chat/completions",
        &["Authorization: Bearer sekrit"],
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_error(&get(&s, "/v1/models"), 401, None);
    // health stays open (load balancers probe it)
    assert_eq!(get(&s, "/health").status, 200);
}

#[test]
fn a_client_that_disconnects_mid_stream_frees_its_slot() {
    let s = start(&["--parallel", "1", "--queue", "0"], &[]);
    let c = open_stream(&s, &chat_body("Go on.", 150, 3));
    drop(c);
    // the one slot comes free: a new request is served (not 503), within bounded retries
    let mut status = 0;
    for _ in 0..200 {
        status = post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1)).status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(status, 200);
}

#[test]
fn a_read_failure_fails_its_request_with_500_and_the_server_stays_up() {
    let dir = crate::support::copy_dir(&crate::support::fixture(MODEL), "serve-read-failure");
    // an expert cache of top-k slots: experts are read from the shards as tokens need them
    let s = start_dir(&dir, &["--cache-gb", "0.000025"], &[]);
    assert_eq!(
        post(&s, "/v1/chat/completions", &chat_body("Hello", 4, 1)).status,
        200
    );
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(4000)
                .unwrap();
        }
    }
    let r = post(
        &s,
        "/v1/chat/completions",
        &chat_body("Something else entirely", 16, 2),
    );
    let v = assert_error(&r, 500, None);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("safetensors"),
        "{v}"
    );
    assert_eq!(get(&s, "/health").status, 200);
    assert_eq!(get(&s, "/v1/models").status, 200);
}

/// A `tool_choice` that requires a call with no tool declared could never be satisfied (the
/// constraint would have no call to start): 400 naming `tool_choice` in every API's shape,
/// where it was accepted and answered with free text.
#[test]
fn a_required_tool_call_without_tools_is_refused() {
    let s = start(&[], &[]);
    let mut chat = chat_body("hi", 2, 1);
    chat["tool_choice"] = json!("required");
    let r = post(&s, "/v1/chat/completions", &chat);
    let v = assert_error(&r, 400, Some("tool_choice"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("no tools"),
        "{v}"
    );
    let msgs = json!({"model": "tiny-k3-text", "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "any"}});
    let r = post(&s, "/v1/messages", &msgs);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["type"], "error", "{}", r.text());
    assert!(r.text().contains("tool_choice"), "{}", r.text());
    let resp = json!({"model": "tiny-k3-text", "max_output_tokens": 2, "input": "hi",
        "tool_choice": "required"});
    let r = post(&s, "/v1/responses", &resp);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("tool_choice"), "{}", r.text());
    // with a tool declared, the same choice is served
    chat["tools"] = json!([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {}}}}]);
    chat["chat_template_kwargs"] = json!({"thinking": false});
    chat["max_tokens"] = json!(40);
    assert_eq!(post(&s, "/v1/chat/completions", &chat).status, 200);
}
