//! `k3 serve` (ENGINE.md §11) end to end over loopback: endpoints, streaming, usage, tool
//! calls, prefix reuse, logprobs (this file); bad input (`bad_input`); concurrency, the queue
//! and a slow client (`concurrency`); clients that leave (`disconnect`); the request log
//! (`log`); the Anthropic Messages API (`messages`); the OpenAI Responses API (`responses`); startup refusals, loading and the drain (`startup`); UTF-8 in streams (`text`);
//! the chat page and the Host/Origin rules (`ui`).

mod arithmetic;
mod bad_input;
mod concurrency;
mod disconnect;
mod log;
mod messages;
mod prefill;
mod prefix_cache;
mod responses;
mod spec;
mod startup;
mod support;
mod text;
mod ui;

use crate::support::{fixture, run_k3};
use serde_json::{json, Value};
use support::*;

#[test]
fn health_models_metrics() {
    let s = start(&[], &[]);
    let h = get(&s, "/health");
    assert_eq!((h.status, h.json()["status"].clone()), (200, json!("ok")));
    let m = get(&s, "/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], MODEL);
    // GET /v1/models/{id} (the openai client's `models.retrieve`): the list's own object
    let one = get(&s, &format!("/v1/models/{MODEL}"));
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(one.json(), m["data"][0]);
    // any other id: 404 model_not_found naming it
    let r = get(&s, "/v1/models/gpt-4");
    assert_eq!(r.status, 404, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(
        (e["code"].as_str(), e["type"].as_str(), e["param"].as_str()),
        (
            Some("model_not_found"),
            Some("invalid_request_error"),
            Some("model")
        ),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("`gpt-4`"), "{e}");
    assert_eq!(post(&s, "/v1/models/gpt-4", &json!({})).status, 405);
    let _ = post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1));
    let t = get(&s, "/metrics");
    assert_eq!(t.status, 200);
    let text = t.text();
    for name in [
        "k3_requests_total{status=\"200\"}",
        "k3_completion_tokens_total 2",
        "k3_queue_depth",
        "k3_expert_cache_hit_rate",
        "k3_bytes_read_total{source=\"trunk\"}",
        "k3_decode_tokens_per_second",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    // no CORS headers without --cors
    assert!(h.header("access-control-allow-origin").is_none());
}

#[test]
fn chat_stream_concatenates_to_the_whole_reply_and_seeds_repeat() {
    let s = start(&[], &[]);
    let body = chat_body("Tell me a story.", 12, 42);
    let a = post(&s, "/v1/chat/completions", &body);
    assert_eq!(a.status, 200, "{}", a.text());
    let a = a.json();
    assert_eq!(a["object"], "chat.completion");
    let msg = &a["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    let u = &a["usage"];
    assert_eq!(u["completion_tokens"], 12);
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + 12)
    );
    assert!(
        u["completion_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            <= 12
    );
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    // the same seed twice: the same reply (cached_tokens aside)
    let b = post(&s, "/v1/chat/completions", &body).json();
    assert_eq!(comparable(a.clone()), comparable(b.clone()));
    assert!(
        b["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    // streamed: role chunk first, deltas concatenate to the whole reply, usage at the end
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let r = post(&s, "/v1/chat/completions", &sb);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let first: Value = serde_json::from_str(&r.events()[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let (reasoning, content, calls, finish, usage) = concat_stream(&r);
    assert_eq!(reasoning, msg["reasoning_content"].as_str().unwrap_or(""));
    assert_eq!(content, msg["content"].as_str().unwrap_or(""));
    assert!(calls.is_empty());
    assert_eq!(finish, "length");
    let mut usage = usage.expect("include_usage chunk");
    let mut whole = a["usage"].clone();
    usage["prompt_tokens_details"] = json!(null);
    whole["prompt_tokens_details"] = json!(null);
    assert_eq!(usage, whole);
    // another seed: (almost surely) another reply
    let c = post(
        &s,
        "/v1/chat/completions",
        &chat_body("Tell me a story.", 12, 43),
    )
    .json();
    assert_ne!(comparable(a), comparable(c));
}

/// The generated text of `k3 run` (greedy) on `ids`.
fn k3_run_text(ids: &str, gen: u32) -> String {
    let o = run_k3([
        fixture(MODEL).to_str().unwrap(),
        "--ids",
        ids,
        "--gen",
        &gen.to_string(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn completion_text_equals_k3_run_on_the_same_ids() {
    let s = start(&[], &[]);
    let ids = [19180u32, 2695, 11, 1008, 10484];
    let body = json!({"model": MODEL, "prompt": ids, "max_tokens": 9, "temperature": 0});
    let r = post(&s, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 9);
    let want = k3_run_text("19180,2695,11,1008,10484", 9);
    assert_eq!(
        v["choices"][0]["text"].as_str().unwrap(),
        want.trim_end_matches('\n')
    );
    // streamed text deltas add up to the same text
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let st = post(&s, "/v1/completions", &sb);
    let events = st.events();
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["text"].as_str().unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(text, v["choices"][0]["text"].as_str().unwrap());
    // a text prompt is the same as its ids
    let t = post(
        &s,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": "Hello world", "max_tokens": 4, "temperature": 0}),
    )
    .json();
    let want = k3_run_text("19180,2695", 4);
    assert_eq!(
        t["choices"][0]["text"].as_str().unwrap(),
        want.trim_end_matches('\n')
    );
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}])
}

#[test]
fn tool_calls_round_trip_and_reuse_the_prefix() {
    let s = start_forced(&["--ctx", "1024"], TOOL_REPLY);
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let body = json!({"model": MODEL, "messages": [user], "tools": tools(), "seed": 5});
    let r = post(&s, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    let m = &c["message"];
    assert_eq!(m["reasoning_content"], "Let me check.");
    assert_eq!(m["content"], "Checking.");
    let call = &m["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    let id = call["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("call_"));
    assert_eq!(v["usage"]["completion_tokens"], 56);
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        4
    );
    // reproducible: the same request gives the same call id
    let again = post(&s, "/v1/chat/completions", &body).json();
    assert_eq!(
        again["choices"][0]["message"]["tool_calls"][0]["id"],
        id.as_str()
    );
    // streamed: the call arrives whole in one delta with its index
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (reasoning, content, calls, finish, _) =
        concat_stream(&post(&s, "/v1/chat/completions", &sb));
    assert_eq!(
        (reasoning.as_str(), content.as_str(), finish.as_str()),
        ("Let me check.", "Checking.", "tool_calls")
    );
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["id"], id.as_str());
    assert_eq!(calls[0]["function"], call["function"]);
    // the tool result sent back as clients do continues from the held prompt snapshot
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let follow = json!({"model": MODEL, "tools": tools(), "seed": 5, "max_tokens": 3, "messages": [
        user,
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Let me check.",
         "tool_calls": [{"id": id, "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": id, "content": "Sunny, 21 C"},
    ]});
    let f = post(&s, "/v1/chat/completions", &follow);
    assert_eq!(f.status, 200, "{}", f.text());
    let cached = f.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    // the whole first prompt: its prompt_tokens and the 3 ids of the stub
    // `<|open|>think<|sep|>`, which the follow-up's assistant message starts with too
    assert_eq!(
        cached,
        prompt_tokens + 3,
        "the follow-up reuses the first prompt"
    );
}

#[test]
fn stop_strings_end_the_content_and_are_not_returned() {
    let s = start_forced(&["--prefill-chunk", "8"], TOOL_REPLY);
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                      "stop": ["king"], "seed": 1});
    let v = post(&s, "/v1/chat/completions", &body).json();
    let c = &v["choices"][0];
    // "Checking." stops at "king": content "Chec", reasoning untouched
    assert_eq!(c["message"]["content"], "Chec");
    assert_eq!(c["message"]["reasoning_content"], "Let me check.");
    assert_eq!(c["finish_reason"], "stop");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (_, content, _, finish, _) = concat_stream(&post(&s, "/v1/chat/completions", &sb));
    assert_eq!((content.as_str(), finish.as_str()), ("Chec", "stop"));
    // a new prompt streamed: its prefill shows as SSE comment lines, in slices of at most 8
    // positions (--prefill-chunk 8); the first may be shorter: the stream before ended at a
    // stop string, and its sequence can still take a row of the next step (the scheduler
    // hears the client has gone at its next send), which the slice leaves room for
    sb["messages"] = json!([{"role": "user", "content": "another prompt"}]);
    let r = post(&s, "/v1/chat/completions", &sb);
    let text = r.text();
    let first = text
        .lines()
        .find_map(|l| l.strip_prefix(": prefill "))
        .unwrap_or_else(|| panic!("no prefill comment: {text}"));
    let done: usize = first.split('/').next().unwrap().parse().unwrap();
    assert!((1..=8).contains(&done), "{text}");
}

#[test]
fn logprobs_of_the_chosen_ids() {
    let s = start(&[], &[]);
    let mut body = chat_body("Hi", 4, 9);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(3);
    let v = post(&s, "/v1/chat/completions", &body).json();
    let lp = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(lp.len(), 4);
    for e in &lp {
        let x = e["logprob"].as_f64().unwrap();
        assert!(x <= 0.0);
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        let t0 = top[0]["logprob"].as_f64().unwrap();
        assert!(top
            .windows(2)
            .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
        assert!(x <= t0);
        assert!(e["bytes"].is_array());
    }
    // the same request gives the same figures (bits)
    let again = post(&s, "/v1/chat/completions", &body).json();
    assert_eq!(again["choices"][0]["logprobs"], v["choices"][0]["logprobs"]);
    // greedy: the chosen id is the most likely one
    let mut g = body.clone();
    g["temperature"] = json!(0);
    let gv = post(&s, "/v1/chat/completions", &g).json();
    for e in gv["choices"][0]["logprobs"]["content"].as_array().unwrap() {
        assert_eq!(e["logprob"], e["top_logprobs"][0]["logprob"]);
    }
}

#[test]
fn cors_only_when_asked() {
    let s = start(&["--cors", "http://localhost:3000"], &[]);
    let r = get(&s, "/v1/models");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    let o = request(
        &s,
        "OPTIONS",
        "/v1/chat/completions",
        &["Origin: http://localhost:3000"],
        b"",
    );
    assert_eq!(o.status, 204);
    assert!(o
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
}
