//! `POST /v1/messages` and `/v1/messages/count_tokens` (issue 24, ENGINE.md §11): the
//! Anthropic Messages face over the same template, scheduler and reply parser. Bad input of
//! every kind answered 400/401/404/405 in Anthropic's error shape naming the field, while the
//! server keeps serving; content blocks and events from a forced reply (thinking, text, a
//! tool call), the tool_use → tool_result round trip with the thinking's signature checked,
//! the thinking budget, stop sequences, and the same ids as chat completions at temperature 0.

use super::support::*;
use serde_json::{json, Value};

fn tools() -> Value {
    json!([{"name": "get_weather", "description": "Weather of a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}])
}

fn body(text: &str, max_tokens: u64) -> Value {
    json!({"model": MODEL, "max_tokens": max_tokens, "temperature": 0,
           "messages": [{"role": "user", "content": text}]})
}

/// Asserts an Anthropic-shape error of `status` whose message starts with `field` (when
/// given).
fn assert_error(r: &Reply, status: u16, field: Option<&str>) {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    let e = &v["error"];
    assert!(e["type"].is_string(), "{v}");
    if let Some(f) = field {
        let m = e["message"].as_str().unwrap();
        assert!(m.starts_with(&format!("{f}: ")), "{f}: {m}");
    }
}

/// The `(event, data)` pairs of an Anthropic stream.
fn events(r: &Reply) -> Vec<(String, Value)> {
    r.text()
        .split("\n\n")
        .filter_map(|e| {
            let mut name = None;
            let mut data = None;
            for l in e.lines() {
                if let Some(n) = l.strip_prefix("event: ") {
                    name = Some(n.to_string());
                }
                if let Some(d) = l.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(d).expect("event JSON"));
                }
            }
            Some((name?, data?))
        })
        .collect()
}

/// The message a stream adds up to, as the Anthropic client accumulates it.
fn accumulate(r: &Reply) -> Value {
    let evs = events(r);
    assert_eq!(evs[0].0, "message_start", "{}", r.text());
    assert_eq!(evs.last().unwrap().0, "message_stop", "{}", r.text());
    let mut m = evs[0].1["message"].clone();
    let mut json_buf: Vec<String> = Vec::new();
    for (name, d) in &evs {
        assert_eq!(
            d["type"],
            name.as_str(),
            "the event line names the data's type"
        );
        let i = d["index"].as_u64().unwrap_or(0) as usize;
        match name.as_str() {
            "content_block_start" => {
                m["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(d["content_block"].clone());
                json_buf.push(String::new());
            }
            "content_block_delta" => {
                let b = &mut m["content"][i];
                let dl = &d["delta"];
                let add = |b: &mut Value, k: &str| {
                    let s = b[k].as_str().unwrap_or("").to_string() + dl[k].as_str().unwrap();
                    b[k] = json!(s);
                };
                match dl["type"].as_str().unwrap() {
                    "text_delta" => add(b, "text"),
                    "thinking_delta" => add(b, "thinking"),
                    "signature_delta" => add(b, "signature"),
                    "input_json_delta" => json_buf[i] += dl["partial_json"].as_str().unwrap(),
                    t => panic!("delta type {t}"),
                }
            }
            "content_block_stop" if m["content"][i]["type"] == "tool_use" => {
                m["content"][i]["input"] = serde_json::from_str(&json_buf[i]).unwrap();
            }
            "message_delta" => {
                m["stop_reason"] = d["delta"]["stop_reason"].clone();
                m["stop_sequence"] = d["delta"]["stop_sequence"].clone();
                m["usage"] = d["usage"].clone();
            }
            _ => {}
        }
    }
    m
}

/// What may differ between identical requests: `id` and the cache split of `usage`.
fn comparable(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("id");
    v.as_object_mut().unwrap().remove("usage");
    v
}

#[test]
fn bad_messages_requests_are_refused_naming_the_field() {
    let s = start(&["--api-key", "sekrit"], &[]);
    let key = "x-api-key: sekrit";
    let m = "/v1/messages";
    // the key: missing, wrong, then as x-api-key or Bearer
    assert_error(&post(&s, m, &body("hi", 2)), 401, None);
    assert_error(
        &post_with(&s, m, &["x-api-key: nope"], &body("hi", 2)),
        401,
        None,
    );
    let ok = post_with(
        &s,
        m,
        &[key, "anthropic-version: 2023-06-01", "anthropic-beta: x"],
        &body("hi", 2),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let ok = post_with(&s, m, &["Authorization: Bearer sekrit"], &body("hi", 2));
    assert_eq!(ok.status, 200, "{}", ok.text());
    // route, method, model, malformed JSON
    assert_error(
        &post_with(&s, "/v1/messages/x", &[key], &json!({})),
        404,
        None,
    );
    let g = request(&s, "GET", m, &[key], b"");
    assert_error(&g, 405, None);
    let mut other = body("hi", 2);
    other["model"] = json!("claude-sonnet-4-5");
    assert_error(&post_with(&s, m, &[key], &other), 404, Some("model"));
    let r = request(&s, "POST", m, &[key], b"{\"model\": ");
    assert_error(&r, 400, Some("request body"));
    let with = |k: &str, x: Value| {
        let mut b = body("hi", 2);
        b[k] = x;
        b
    };
    let user = |c: Value| with("messages", json!([{"role": "user", "content": c}]));
    let call = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]});
    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut b = body("hi", 2);
                b.as_object_mut().unwrap().remove("max_tokens");
                b
            },
            "max_tokens",
        ),
        (with("max_tokens", json!(0)), "max_tokens"),
        (with("max_tokens", json!("9")), "max_tokens"),
        (with("max_tokens", json!(1_000_000)), "max_tokens"),
        (with("temperature", json!("hot")), "temperature"),
        (with("top_p", json!(2)), "top_p"),
        (with("top_k", json!(-3)), "top_k"),
        (with("stream", json!(1)), "stream"),
        (with("frobnicate", json!(1)), "frobnicate"),
        (with("seed", json!(1)), "seed"),
        (with("system", json!(5)), "system"),
        (with("system", json!([{"type": "image"}])), "system[0].type"),
        (with("messages", json!("hi")), "messages"),
        (with("messages", json!([])), "messages"),
        (with("messages", json!([5])), "messages[0]"),
        (
            with("messages", json!([{"role": "system", "content": "x"}])),
            "messages[0].role",
        ),
        (
            with("messages", json!([{"role": "user"}])),
            "messages[0].content",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "x", "name": "n"}]),
            ),
            "messages[0].name",
        ),
        (user(json!([])), "messages[0].content"),
        (user(json!(7)), "messages[0].content"),
        (
            user(json!([{"type": "wat"}])),
            "messages[0].content[0].type",
        ),
        (user(json!([{"text": "x"}])), "messages[0].content[0].type"),
        (
            user(json!([{"type": "image", "source": {}}])),
            "messages[0].content[0].type",
        ),
        (
            user(json!([{"type": "text", "text": 3}])),
            "messages[0].content[0].text",
        ),
        (
            user(json!([{"type": "text", "text": "x", "extra": 1}])),
            "messages[0].content[0].extra",
        ),
        // a tool_result that answers no call
        (
            user(json!([{"type": "tool_result", "tool_use_id": "nope", "content": "x"}])),
            "messages[0].content[0].tool_use_id",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"}, call,
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t2", "content": "x"}]}]),
            ),
            "messages[2].content[0].tool_use_id",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"}, call,
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1", "content": "x"},
                           {"type": "tool_result", "tool_use_id": "t1", "content": "y"}]}]),
            ),
            "messages[2].content[1].tool_use_id",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"}, call,
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1", "is_error": "yes"}]}]),
            ),
            "messages[2].content[0].is_error",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"}, call,
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1", "content": 5}]}]),
            ),
            "messages[2].content[0].content",
        ),
        // a final assistant turn (a prefill) cannot hold a call
        (
            with("messages", json!([{"role": "user", "content": "w?"}, call])),
            "messages[1]",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": [
                           {"type": "tool_use", "id": "t1", "name": "bad name!", "input": {}}]},
                       {"role": "user", "content": "x"}]),
            ),
            "messages[1].content[0].name",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": [
                           {"type": "tool_use", "id": "t1", "name": "f", "input": [1]}]},
                       {"role": "user", "content": "x"}]),
            ),
            "messages[1].content[0].input",
        ),
        // a thinking block this model did not sign
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": [
                           {"type": "thinking", "thinking": "hm", "signature": "forged"},
                           {"type": "text", "text": "ok"}]},
                       {"role": "user", "content": "x"}]),
            ),
            "messages[1].content[0].signature",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": [
                           {"type": "thinking", "thinking": "hm"}]},
                       {"role": "user", "content": "x"}]),
            ),
            "messages[1].content[0].signature",
        ),
        (with("tools", json!({})), "tools"),
        (with("tools", json!([5])), "tools[0]"),
        (
            with("tools", json!([{"name": "f"}])),
            "tools[0].input_schema",
        ),
        (
            with("tools", json!([{"name": "f", "input_schema": "x"}])),
            "tools[0].input_schema",
        ),
        (
            with("tools", json!([{"name": "1f", "input_schema": {}}])),
            "tools[0].name",
        ),
        (
            with(
                "tools",
                json!([{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]),
            ),
            "tools[1].name",
        ),
        (
            with(
                "tools",
                json!([{"type": "web_search_20250305", "name": "web_search"}]),
            ),
            "tools[0].type",
        ),
        (
            with(
                "tools",
                json!([{"name": "f", "input_schema": {}, "description": 1}]),
            ),
            "tools[0].description",
        ),
        (with("tool_choice", json!("auto")), "tool_choice"),
        (
            with("tool_choice", json!({"type": "some"})),
            "tool_choice.type",
        ),
        (
            with("tool_choice", json!({"type": "tool", "name": "nope"})),
            "tool_choice.name",
        ),
        (with("thinking", json!(true)), "thinking"),
        (
            with("thinking", json!({"type": "adaptive", "display": "all"})),
            "thinking.display",
        ),
        (
            with("output_config", json!({"effort": "huge"})),
            "output_config.effort",
        ),
        (
            with("output_config", json!({"format": {"type": "json_object"}})),
            "output_config.format.type",
        ),
        (with("container", json!("c1")), "container"),
        (with("thinking", json!({"type": "on"})), "thinking.type"),
        (
            with("thinking", json!({"type": "enabled"})),
            "thinking.budget_tokens",
        ),
        (
            with("thinking", json!({"type": "enabled", "budget_tokens": 0})),
            "thinking.budget_tokens",
        ),
        // what Anthropic's API refuses and the shared sampling reader took
        (with("temperature", json!(1.5)), "temperature"),
        (with("top_k", json!(-1)), "top_k"),
        (with("metadata", json!("u")), "metadata"),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": [
                           {"type": "tool_use", "id": "t1", "name": "get_weather"}]},
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]),
            ),
            "messages[1].content[0].input",
        ),
        (with("stop_sequences", json!("x")), "stop_sequences"),
        (with("stop_sequences", json!([""])), "stop_sequences[0]"),
        (with("stop_sequences", json!([1])), "stop_sequences[0]"),
        (
            with("stop_sequences", json!(vec!["x"; 17])),
            "stop_sequences",
        ),
    ];
    for (b, field) in &cases {
        let r = post_with(&s, m, &[key], b);
        assert_error(&r, 400, Some(field));
    }
    // the value found is said, as for every other field: 1e30 was "expected an integer ≥ 1"
    let r = post_with(
        &s,
        m,
        &[key],
        &with(
            "thinking",
            json!({"type": "enabled", "budget_tokens": 1e30}),
        ),
    );
    assert_error(&r, 400, Some("thinking.budget_tokens"));
    let msg = r.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(msg.contains("found 1e+30"), "{msg}");
    // count_tokens refuses the same way, and what only generation takes
    let c = "/v1/messages/count_tokens";
    assert_error(
        &post_with(&s, c, &[key], &with("messages", json!([]))),
        400,
        Some("messages"),
    );
    assert_error(
        &post_with(&s, c, &[key], &with("thinking", json!({"type": "x"}))),
        400,
        Some("thinking.type"),
    );
    // the Messages body as it is: what only generation reads does not count
    let n = post_with(&s, c, &[key], &with("stream", json!(true)));
    assert_eq!(n.status, 200, "{}", n.text());
    assert!(n.json()["input_tokens"].as_u64().unwrap() > 0);
    // accepted and ignored: metadata, context_management, cache_control on any block
    let mut b = body("hi", 2);
    b["metadata"] = json!({"user_id": "u"});
    b["context_management"] = json!({"edits": []});
    b["cache_control"] = json!({"type": "ephemeral"});
    b["output_config"] = json!({"effort": "medium",
        "format": {"type": "json_schema", "schema": {"type": "object"}}});
    b["thinking"] = json!({"type": "adaptive", "display": "summarized"});
    b["system"] =
        json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]);
    b["tools"] = json!([{"name": "f", "input_schema": {"type": "object"},
                         "cache_control": {"type": "ephemeral"}}]);
    let r = post_with(
        &s,
        m,
        &[key, "anthropic-beta: context-management-2025-06-27"],
        &b,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // the server still serves
    let r = post_with(&s, m, &[key], &body("hi", 3));
    assert_eq!(r.json()["usage"]["output_tokens"], 3);
}

/// A keyless server's Host/Origin refusal on the Messages routes was OpenAI's error shape
/// (`{"error": {…}}`), which Anthropic clients cannot read: Anthropic's shape, as every other
/// refusal of these routes.
#[test]
fn a_refused_origin_on_messages_is_an_anthropic_error() {
    let s = start(&[], &[]);
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let r = post_with(&s, path, &["Origin: https://evil.example"], &body("hi", 2));
        assert_error(&r, 403, Some("Origin"));
        assert_eq!(r.json()["error"]["type"], "permission_error");
    }
}

#[test]
fn messages_blocks_tool_round_trip_and_signatures() {
    let s = start_forced(&["--ctx", "1024"], TOOL_REPLY);
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let b = json!({"model": MODEL, "max_tokens": 100, "tools": tools(), "messages": [user]});
    let r = post(&s, "/v1/messages", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["type"].as_str(), v["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(v["stop_reason"], "tool_use");
    assert!(v["stop_sequence"].is_null());
    let c = v["content"].as_array().unwrap();
    assert_eq!(c.len(), 3, "{v}");
    assert_eq!(c[0]["type"], "thinking");
    assert_eq!(c[0]["thinking"], "Let me check.");
    assert!(c[0]["signature"].as_str().unwrap().starts_with("k3s1."));
    assert_eq!(
        (c[1]["type"].as_str(), c[1]["text"].as_str()),
        (Some("text"), Some("Checking."))
    );
    assert_eq!(c[2]["type"], "tool_use");
    assert_eq!(c[2]["name"], "get_weather");
    assert_eq!(c[2]["input"], json!({"city": "Paris"}));
    let id = c[2]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("toolu_"), "{id}");
    assert_eq!(v["usage"]["output_tokens"], 56);
    // streamed: the events add up to the whole reply
    let mut sb = b.clone();
    sb["stream"] = json!(true);
    let st = post(&s, "/v1/messages", &sb);
    assert_eq!(st.header("content-type"), Some("text/event-stream"));
    assert_eq!(comparable(accumulate(&st)), comparable(v.clone()));
    // count_tokens: the prompt's input_tokens, as the reply counted them (nothing cached)
    let mut cb = b.clone();
    cb.as_object_mut().unwrap().remove("max_tokens");
    let n = post(&s, "/v1/messages/count_tokens", &cb).json();
    let u = &v["usage"];
    assert_eq!(
        n["input_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap()
    );
    // the tool result sent back with the assistant turn as given: its thinking signature is
    // checked, and the held prompt snapshot is reused
    let follow = json!({"model": MODEL, "max_tokens": 3, "tools": tools(), "messages": [
        user,
        {"role": "assistant", "content": v["content"]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "Sunny, 21 C"}]},
            {"type": "text", "text": "And tomorrow?"}]},
    ]});
    let f = post(&s, "/v1/messages", &follow);
    assert_eq!(f.status, 200, "{}", f.text());
    assert!(
        f.json()["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    // the same turn with its thinking changed: 400 naming the signature
    let mut bad = follow.clone();
    bad["messages"][1]["content"][0]["thinking"] = json!("Let me guess.");
    assert_error(
        &post(&s, "/v1/messages", &bad),
        400,
        Some("messages[1].content[0].signature"),
    );
    // stop sequences: the text stops before "king", which is named
    let mut sq = b.clone();
    sq["stop_sequences"] = json!(["zzz", "king"]);
    let v = post(&s, "/v1/messages", &sq).json();
    assert_eq!(v["stop_reason"], "stop_sequence");
    assert_eq!(v["stop_sequence"], "king");
    assert_eq!(v["content"][1]["text"], "Chec");
    sq["stream"] = json!(true);
    let st = accumulate(&post(&s, "/v1/messages", &sq));
    assert_eq!(comparable(st), comparable(v));
}

#[test]
fn thinking_budget_and_the_same_ids_as_chat_completions() {
    let s = start(&["--ctx", "1024", "--prefill-chunk", "8"], &[]);
    // thinking off: no thinking block; the same ids as chat completions with thinking off
    let mut off = body("Tell me a story.", 8);
    off["thinking"] = json!({"type": "disabled"});
    off["system"] = json!("Be brief.");
    let v = post(&s, "/v1/messages", &off).json();
    assert_eq!(v["content"][0]["type"], "text", "{v}");
    assert_eq!(v["stop_reason"], "max_tokens");
    let chat = json!({"model": MODEL, "max_tokens": 8, "temperature": 0,
        "chat_template_kwargs": {"thinking": false},
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Tell me a story."}]});
    let cv = post(&s, "/v1/chat/completions", &chat).json();
    assert_eq!(
        v["content"][0]["text"],
        cv["choices"][0]["message"]["content"]
    );
    assert_eq!(
        v["usage"]["input_tokens"].as_u64().unwrap()
            + v["usage"]["cache_read_input_tokens"].as_u64().unwrap(),
        cv["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    // thinking on (the default), no budget: the think channel as chat completions has it
    let on = body("Tell me a story.", 8);
    let v = post(&s, "/v1/messages", &on).json();
    let chat_on = json!({"model": MODEL, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Tell me a story."}]});
    let cv = post(&s, "/v1/chat/completions", &chat_on).json();
    let thinking = v["content"][0]["thinking"].as_str().unwrap().to_string();
    assert_eq!(
        thinking,
        cv["choices"][0]["message"]["reasoning_content"]
            .as_str()
            .unwrap()
    );
    // a budget of 2: the first two think ids, then the template's closing, then the response
    let mut budget = on.clone();
    budget["max_tokens"] = json!(12);
    budget["thinking"] = json!({"type": "enabled", "budget_tokens": 2});
    let v = post(&s, "/v1/messages", &budget).json();
    let c = v["content"].as_array().unwrap();
    assert_eq!(
        (c[0]["type"].as_str(), c[1]["type"].as_str()),
        (Some("thinking"), Some("text")),
        "{v}"
    );
    let t = c[0]["thinking"].as_str().unwrap();
    assert!(
        !t.is_empty() && thinking.starts_with(t),
        "{t:?} vs {thinking:?}"
    );
    assert!(t.len() < thinking.len());
    assert_eq!(v["usage"]["output_tokens"], 12);
    // adaptive is on; streamed == whole
    budget["stream"] = json!(true);
    let st = accumulate(&post(&s, "/v1/messages", &budget));
    assert_eq!(comparable(st), comparable(v));
    // a new prompt streamed: its prefill (8 positions a chunk) sends pings after
    // message_start, and the progress comment lines
    let mut fresh = body("Another prompt, long enough for chunks.", 2);
    fresh["stream"] = json!(true);
    let r = post(&s, "/v1/messages", &fresh);
    let names: Vec<String> = events(&r).into_iter().map(|e| e.0).collect();
    assert_eq!(names[0], "message_start");
    assert!(names.iter().any(|n| n == "ping"), "{names:?}");
    // slices of at most 8 positions (a row of a finishing sequence may share the first)
    let text = r.text();
    let first = text
        .lines()
        .find_map(|l| l.strip_prefix(": prefill "))
        .unwrap_or_else(|| panic!("no prefill comment: {text}"));
    let done: usize = first.split('/').next().unwrap().parse().unwrap();
    assert!((1..=8).contains(&done), "{text}");
    // a user turn's text before its tool_result goes after the results (one user message)
    let turns = |first: bool| {
        let result = json!({"type": "tool_result", "tool_use_id": "t1", "content": "Sunny"});
        let text = json!({"type": "text", "text": "Thanks."});
        let blocks = if first {
            json!([text, result])
        } else {
            json!([result, text])
        };
        json!({"model": MODEL, "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
               "thinking": {"type": "disabled"}, "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": blocks}]})
    };
    let a = post(&s, "/v1/messages/count_tokens", &turns(true)).json();
    let b = post(&s, "/v1/messages/count_tokens", &turns(false)).json();
    assert_eq!(a, b);
}
