//! `POST /v1/responses` (issue 24, ENGINE.md §11): the OpenAI Responses face over the same
//! template, scheduler and reply parser. Bad input of every kind answered 400/401/404/405 in
//! OpenAI's error shape naming the field, while the server keeps serving; output items and
//! events from a forced reply (reasoning, text, a tool call), streamed == whole, the
//! function_call → function_call_output round trip, custom tools, and the same ids as chat
//! completions at temperature 0.

use super::support::*;
use serde_json::{json, Value};

fn tools() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}])
}

fn body(text: &str, max: u64) -> Value {
    json!({"model": MODEL, "max_output_tokens": max, "temperature": 0, "input": text})
}

/// An OpenAI-shape error of `status` naming `param` (when given).
fn assert_error(r: &Reply, status: u16, param: Option<&str>) {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
}

/// The `(event, data)` pairs of a Responses stream.
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

/// The response a stream adds up to, accumulated from the deltas as a client would, checked
/// against each `.done` event; the sequence numbers count from 0.
fn accumulate(r: &Reply) -> Value {
    let evs = events(r);
    assert!(!r.text().contains("[DONE]"));
    assert_eq!(evs[0].0, "response.created", "{}", r.text());
    assert_eq!(evs[1].0, "response.in_progress");
    for (i, (name, d)) in evs.iter().enumerate() {
        assert_eq!(d["type"], name.as_str());
        assert_eq!(d["sequence_number"], i as u64);
    }
    let mut output: Vec<Value> = Vec::new();
    for (name, d) in &evs {
        let oi = d["output_index"].as_u64().unwrap_or(0) as usize;
        match name.as_str() {
            "response.output_item.added" => {
                assert_eq!(oi, output.len());
                output.push(d["item"].clone());
            }
            "response.content_part.added" => {
                assert_eq!(d["item_id"], output[oi]["id"]);
                output[oi]["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(d["part"].clone());
            }
            "response.output_text.delta" | "response.reasoning_text.delta" => {
                let ci = d["content_index"].as_u64().unwrap() as usize;
                let p = &mut output[oi]["content"][ci]["text"];
                *p = json!(p.as_str().unwrap().to_string() + d["delta"].as_str().unwrap());
            }
            "response.output_text.done" | "response.reasoning_text.done" => {
                let ci = d["content_index"].as_u64().unwrap() as usize;
                assert_eq!(output[oi]["content"][ci]["text"], d["text"]);
            }
            "response.function_call_arguments.delta" => {
                let p = &mut output[oi]["arguments"];
                *p = json!(p.as_str().unwrap().to_string() + d["delta"].as_str().unwrap());
            }
            "response.function_call_arguments.done" => {
                assert_eq!(output[oi]["arguments"], d["arguments"]);
            }
            "response.output_item.done" => {
                output[oi]["status"] = d["item"]["status"].clone();
                if d["item"].get("encrypted_content").is_some() {
                    output[oi]["encrypted_content"] = d["item"]["encrypted_content"].clone();
                }
                assert_eq!(output[oi], d["item"]);
            }
            _ => {}
        }
    }
    let (last, fin) = evs.last().unwrap();
    assert!(
        last == "response.completed" || last == "response.incomplete",
        "{last}"
    );
    let mut resp = fin["response"].clone();
    assert_eq!(resp["output"], json!(output));
    resp["id"] = json!(null);
    resp["created_at"] = json!(null);
    resp
}

fn comparable(mut v: Value) -> Value {
    v["id"] = json!(null);
    v["created_at"] = json!(null);
    v["usage"]["input_tokens_details"] = json!(null);
    v
}

#[test]
fn bad_responses_requests_are_refused_naming_the_field() {
    let s = start(&["--api-key", "sekrit"], &[]);
    let key = "Authorization: Bearer sekrit";
    let m = "/v1/responses";
    assert_error(&post(&s, m, &body("hi", 2)), 401, None);
    let ok = post_with(&s, m, &[key], &body("hi", 2));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_error(
        &post_with(&s, "/v1/responses/resp_1", &[key], &json!({})),
        405,
        None,
    );
    assert_error(&request(&s, "GET", m, &[key], b""), 405, None);
    let mut other = body("hi", 2);
    other["model"] = json!("gpt-5");
    assert_error(&post_with(&s, m, &[key], &other), 404, Some("model"));
    let with = |k: &str, x: Value| {
        let mut b = body("hi", 2);
        b[k] = x;
        b
    };
    let items = |x: Value| with("input", x);
    let call = json!({"type": "function_call", "call_id": "c1", "name": "get_weather",
                      "arguments": "{\"city\": \"Paris\"}"});
    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut b = body("hi", 2);
                b.as_object_mut().unwrap().remove("input");
                b
            },
            "input",
        ),
        (with("max_output_tokens", json!(0)), "max_output_tokens"),
        (with("max_output_tokens", json!("9")), "max_output_tokens"),
        (
            with("max_output_tokens", json!(1_000_000)),
            "max_output_tokens",
        ),
        (with("temperature", json!("hot")), "temperature"),
        (with("top_p", json!(2)), "top_p"),
        (with("stream", json!(1)), "stream"),
        (with("frobnicate", json!(1)), "frobnicate"),
        (
            with("previous_response_id", json!(5)),
            "previous_response_id",
        ),
        (with("instructions", json!(5)), "instructions"),
        (with("include", json!("x")), "include"),
        (
            with("include", json!(["file_search_call.results"])),
            "include[0]",
        ),
        (
            with("parallel_tool_calls", json!("yes")),
            "parallel_tool_calls",
        ),
        (items(json!(5)), "input"),
        (items(json!([])), "input"),
        (items(json!([5])), "input[0]"),
        (items(json!([{"type": "wat"}])), "input[0].type"),
        (items(json!([{"content": "x"}])), "input[0].type"),
        (
            items(json!([{"type": "message", "role": "tool", "content": "x"}])),
            "input[0].role",
        ),
        (items(json!([{"role": "user"}])), "input[0].content"),
        (
            items(json!([{"role": "user", "content": 7}])),
            "input[0].content",
        ),
        (
            items(
                json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
            ),
            "input[0].content[0].type",
        ),
        (
            items(json!([{"role": "user", "content": [{"type": "input_text", "text": 3}]}])),
            "input[0].content[0].text",
        ),
        (
            items(json!([{"role": "user", "content": "x", "name": "n"}])),
            "input[0].name",
        ),
        (
            items(json!([{"type": "function_call_output", "call_id": "nope", "output": "x"}])),
            "input[0].call_id",
        ),
        (
            items(json!([{"role": "user", "content": "w?"}, call,
                         {"type": "function_call_output", "call_id": "c2", "output": "x"}])),
            "input[2].call_id",
        ),
        (
            items(json!([{"role": "user", "content": "w?"}, call,
                         {"type": "function_call_output", "call_id": "c1", "output": "x"},
                         {"type": "function_call_output", "call_id": "c1", "output": "y"}])),
            "input[3].call_id",
        ),
        (
            items(json!([{"role": "user", "content": "w?"}, call,
                         {"type": "function_call_output", "call_id": "c1"}])),
            "input[2].output",
        ),
        (
            items(json!([{"role": "user", "content": "w?"}, call])),
            "input[1]",
        ),
        (
            items(json!([{"role": "user", "content": "w?"},
                         {"type": "function_call", "call_id": "c1", "name": "bad name!", "arguments": "{}"},
                         {"type": "function_call_output", "call_id": "c1", "output": "x"}])),
            "input[1].name",
        ),
        (
            items(json!([{"role": "user", "content": "w?"},
                         {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}},
                         {"type": "function_call_output", "call_id": "c1", "output": "x"}])),
            "input[1].arguments",
        ),
        (
            items(json!([{"role": "user", "content": "w?"},
                         {"type": "reasoning", "summary": [{"type": "bogus", "text": "x"}]},
                         {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": "x"}])),
            "input[1].summary[0].type",
        ),
        (
            items(json!([{"type": "item_reference", "id": "msg_1"}])),
            "input[0].type",
        ),
        (with("tools", json!({})), "tools"),
        (with("tools", json!([5])), "tools[0]"),
        (with("tools", json!([{"name": "f"}])), "tools[0].type"),
        (with("tools", json!([{"type": "robot"}])), "tools[0].type"),
        (
            with(
                "tools",
                json!([{"type": "function", "name": "f", "parameters": "x"}]),
            ),
            "tools[0].parameters",
        ),
        (
            with("tools", json!([{"type": "function", "name": "1f"}])),
            "tools[0].name",
        ),
        (
            with(
                "tools",
                json!([{"type": "function", "name": "f"}, {"type": "custom", "name": "f"}]),
            ),
            "tools[1].name",
        ),
        (with("tool_choice", json!("some")), "tool_choice"),
        (
            with("tool_choice", json!({"type": "allowed_tools"})),
            "tool_choice.type",
        ),
        (
            with("tool_choice", json!({"type": "function", "name": "nope"})),
            "tool_choice.name",
        ),
        (with("reasoning", json!(true)), "reasoning"),
        (
            with("reasoning", json!({"effort": "huge"})),
            "reasoning.effort",
        ),
        (with("reasoning", json!({"budget": 3})), "reasoning.budget"),
    ];
    for (b, field) in &cases {
        let r = post_with(&s, m, &[key], b);
        assert_error(&r, 400, Some(field));
    }
    // accepted: store, metadata, include, built-in tools (not offered), custom tools, Codex's
    // reasoning effort, developer messages, input_text/output_text parts
    let b = json!({"model": MODEL, "max_output_tokens": 2, "store": false,
        "metadata": {"k": "v"}, "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "medium", "summary": "auto"}, "instructions": "Be brief.",
        "tools": [{"type": "web_search"}, {"type": "custom", "name": "apply_patch",
                   "description": "Patch files", "format": {"type": "text"}}],
        "text": {"verbosity": "low"}, "prompt_cache_key": "x", "parallel_tool_calls": false,
        "input": [{"type": "message", "role": "developer", "content": "Use tools."},
                  {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                  {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
                  {"role": "user", "content": "again"}]});
    let r = post_with(&s, m, &[key], &b);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        s.log_lines()
            .iter()
            .any(|l| l.contains("\"web_search\"") && l.contains("not offered")),
        "{:?}",
        s.log_lines()
    );
    // an unknown previous_response_id or stored id: 404 naming it
    let r = post_with(
        &s,
        m,
        &[key],
        &with("previous_response_id", json!("resp_nope")),
    );
    assert_error(&r, 404, Some("previous_response_id"));
    assert_error(
        &request(&s, "GET", "/v1/responses/resp_nope", &[key], b""),
        404,
        Some("id"),
    );
    // GET /v1/models carries `models` beside `data`
    let v = request(&s, "GET", "/v1/models", &[key], b"").json();
    assert_eq!(v["models"], v["data"], "{v}");
    // the server still serves
    let r = post_with(&s, m, &[key], &body("hi", 3));
    assert_eq!(r.json()["usage"]["output_tokens"], 3);
    assert_eq!(r.json()["status"], "incomplete");
    assert_eq!(
        r.json()["incomplete_details"]["reason"],
        "max_output_tokens"
    );
}

#[test]
fn responses_items_round_trip_and_stream() {
    let s = start_forced(&["--ctx", "1024"], TOOL_REPLY);
    let b = json!({"model": MODEL, "max_output_tokens": 100, "tools": tools(),
                   "input": "Weather in Paris?"});
    let r = post(&s, "/v1/responses", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 3, "{v}");
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(out[0]["content"][0]["text"], "Let me check.");
    assert_eq!(out[1]["type"], "message");
    assert_eq!(out[1]["role"], "assistant");
    assert_eq!(out[1]["content"][0]["type"], "output_text");
    assert_eq!(out[1]["content"][0]["text"], "Checking.");
    assert_eq!(out[2]["type"], "function_call");
    assert_eq!(out[2]["name"], "get_weather");
    let args: Value = serde_json::from_str(out[2]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    let call_id = out[2]["call_id"].as_str().unwrap().to_string();
    let u = &v["usage"];
    assert_eq!(u["output_tokens"], 56);
    assert!(
        u["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + 56
    );
    // streamed: the events add up to the whole reply
    let mut sb = b.clone();
    sb["stream"] = json!(true);
    let st = post(&s, "/v1/responses", &sb);
    assert_eq!(st.header("content-type"), Some("text/event-stream"));
    assert_eq!(comparable(accumulate(&st)), comparable(v.clone()));
    // the output items given back with the function_call_output: the prompt snapshot is
    // reused (the history renders to the same ids)
    let mut input = vec![json!({"role": "user", "content": "Weather in Paris?"})];
    input.extend(out.iter().cloned());
    input
        .push(json!({"type": "function_call_output", "call_id": call_id, "output": "Sunny, 21 C"}));
    let follow = json!({"model": MODEL, "max_output_tokens": 3, "tools": tools(), "input": input});
    let f = post(&s, "/v1/responses", &follow);
    assert_eq!(f.status, 200, "{}", f.text());
    assert!(
        f.json()["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    // include reasoning.encrypted_content: the reasoning item carries it, streamed == whole;
    // given back alone (no content, as Codex CLI keeps it) it renders the same prompt, and a
    // changed one is refused naming it
    let mut eb = b.clone();
    eb["include"] = json!(["reasoning.encrypted_content"]);
    let e = post(&s, "/v1/responses", &eb).json();
    let enc = e["output"][0]["encrypted_content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(enc.starts_with("k3e1."), "{e}");
    eb["stream"] = json!(true);
    assert_eq!(
        comparable(accumulate(&post(&s, "/v1/responses", &eb))),
        comparable(e.clone())
    );
    let mut bare = follow.clone();
    bare["input"][1] = json!({"type": "reasoning", "summary": [], "encrypted_content": enc});
    let fb = post(&s, "/v1/responses", &bare);
    assert_eq!(fb.status, 200, "{}", fb.text());
    assert_eq!(
        fb.json()["usage"]["input_tokens"],
        f.json()["usage"]["input_tokens"]
    );
    assert_eq!(
        fb.json()["usage"]["input_tokens_details"]["cached_tokens"],
        fb.json()["usage"]["input_tokens"]
    );
    let mut changed = bare.clone();
    changed["input"][1]["encrypted_content"] = json!(enc.replace("k3e1.", "k3e1.0"));
    assert_error(
        &post(&s, "/v1/responses", &changed),
        400,
        Some("input[1].encrypted_content"),
    );
    let mut other = bare.clone();
    other["input"][1]["content"] = json!([{"type": "reasoning_text", "text": "Something else."}]);
    assert_error(
        &post(&s, "/v1/responses", &other),
        400,
        Some("input[1].encrypted_content"),
    );
    // a custom tool's call comes back as a custom_tool_call item with its input
    let cb = json!({"model": MODEL, "max_output_tokens": 100, "input": "Weather in Paris?",
        "tools": [{"type": "custom", "name": "get_weather"}]});
    let c = post(&s, "/v1/responses", &cb).json();
    assert_eq!(c["output"][2]["type"], "custom_tool_call", "{c}");
}

#[test]
fn the_same_ids_as_chat_completions() {
    let s = start(&["--ctx", "1024"], &[]);
    for (effort, kwargs) in [
        (json!({"effort": "none"}), json!({"thinking": false})),
        (json!(null), json!({})),
    ] {
        let mut b = body("Tell me a story.", 8);
        b["instructions"] = json!("Be brief.");
        if !effort.is_null() {
            b["reasoning"] = effort;
        }
        let v = post(&s, "/v1/responses", &b).json();
        let chat = json!({"model": MODEL, "max_tokens": 8, "temperature": 0,
            "chat_template_kwargs": kwargs,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Tell me a story."}]});
        let cv = post(&s, "/v1/chat/completions", &chat).json();
        let msg = &cv["choices"][0]["message"];
        let text = |kind: &str| {
            v["output"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["type"] == kind)
                .map(|i| i["content"][0]["text"].clone())
                .unwrap_or(json!(null))
        };
        let content = msg["content"].clone();
        let want = if content == json!("") {
            json!(null)
        } else {
            content
        };
        assert_eq!(text("message"), want, "{v} vs {cv}");
        let r = msg["reasoning_content"].clone();
        let want = if r == json!("") { json!(null) } else { r };
        assert_eq!(text("reasoning"), want, "{v} vs {cv}");
        assert_eq!(v["usage"]["input_tokens"], cv["usage"]["prompt_tokens"]);
        // streamed == whole
        b["stream"] = json!(true);
        let st = accumulate(&post(&s, "/v1/responses", &b));
        assert_eq!(comparable(st), comparable(v));
    }
}

#[test]
fn stored_responses_continue_as_the_whole_conversation() {
    let s = start(&["--ctx", "1024"], &[]);
    let first = body("Tell me a story.", 4);
    let a = post(&s, "/v1/responses", &first).json();
    let id = a["id"].as_str().unwrap().to_string();
    assert_eq!(a["store"], true);
    // GET /v1/responses/{id}: the stored response as it was sent
    let g = get(&s, &format!("/v1/responses/{id}"));
    assert_eq!(g.json(), a);
    // the continuation == the whole conversation sent as input items
    let mut next = body("And then?", 4);
    next["previous_response_id"] = json!(id);
    let c = post(&s, "/v1/responses", &next).json();
    let mut input = vec![json!({"role": "user", "content": "Tell me a story."})];
    input.extend(a["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"role": "user", "content": "And then?"}));
    let mut whole = body("", 4);
    whole["input"] = json!(input);
    whole["store"] = json!(false);
    let w = post(&s, "/v1/responses", &whole).json();
    assert_eq!(
        c["output"].as_array().unwrap().len(),
        w["output"].as_array().unwrap().len()
    );
    for (x, y) in c["output"]
        .as_array()
        .unwrap()
        .iter()
        .zip(w["output"].as_array().unwrap())
    {
        assert_eq!(x["content"], y["content"], "{c} vs {w}");
    }
    assert_eq!(c["usage"]["input_tokens"], w["usage"]["input_tokens"]);
    // store: false keeps nothing
    let wid = w["id"].as_str().unwrap();
    assert_eq!(w["store"], false);
    assert_eq!(get(&s, &format!("/v1/responses/{wid}")).status, 404);
    // a streamed stored response continues too
    let mut st = next.clone();
    st["stream"] = json!(true);
    let sr = accumulate(&post(&s, "/v1/responses", &st));
    assert_eq!(comparable(sr)["output"], comparable(c)["output"]);
}

/// The bug: without `max_output_tokens` a response stopped after one id (the Responses route
/// defaulted to 1 where chat completions runs up to the context), so Codex CLI, which sends
/// none, got one token. The forced reply comes back whole, streamed and not.
#[test]
fn no_max_output_tokens_runs_up_to_the_context() {
    let s = start_forced(&["--ctx", "1024"], TOOL_REPLY);
    let mut b = json!({"model": MODEL, "tools": tools(), "input": "Weather in Paris?"});
    let v = post(&s, "/v1/responses", &b).json();
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["output"].as_array().map(Vec::len), Some(3), "{v}");
    assert!(v["usage"]["output_tokens"].as_u64() > Some(50), "{v}");
    b["stream"] = json!(true);
    let st = accumulate(&post(&s, "/v1/responses", &b));
    assert_eq!(comparable(st), comparable(v));
}
