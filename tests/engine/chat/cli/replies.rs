//! Forced replies (`K3_TEST_FORCE_IDS`, DEVELOPERS.md "Test hooks") through `k3 chat`: what
//! it prints, what the history records, and the ids the next turn continues with — reasoning
//! and content, tool calls with every argument type and the tool's result, malformed markup,
//! and a reply cut by `--max-reply` (closed before the next turn, TOKENIZER.md §11).

use super::{body, chat, ids, reply_ids, template_ids, text_ids, tok};
use k3::chat::{CLOSE, END_OF_MSG, OPEN, SEP};
use k3::json::Value;

const U1: &str = r#"{"role": "user", "content": "What is the capital of France?"}"#;
const U2: &str = r#"{"role": "user", "content": "Thanks"}"#;
const ARGS: &[&str] = &[
    "--max-reply",
    "200",
    "--seed",
    "3",
    "--ctx",
    "600",
    "--quiet",
];

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The whole conversation's ids after the second turn's input.
fn conversation(c: &super::Chat) -> Vec<u32> {
    let (r, inputs) = (c.replies(), c.inputs());
    let mut all = inputs[0].clone();
    all.extend(ids(r[0], "ids"));
    all.extend(&inputs[1]);
    all
}

#[test]
fn reasoning_and_content() {
    let a = r#"{"role": "assistant", "reasoning_content": "Let me think.", "content": "Paris is the capital."}"#;
    let force = reply_ids(U1, a, None, false);
    let c = chat(
        "chat-forced-content",
        ARGS,
        "What is the capital of France?\nThanks\n",
        Some(&force),
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let turn = "<think>\nLet me think.\n</think>\nParis is the capital.\n";
    assert_eq!(c.stdout(), turn.repeat(2));
    let r = c.replies();
    assert_eq!(s(r[0], "reasoning_content"), "Let me think.");
    assert_eq!(s(r[0], "content"), "Paris is the capital.");
    assert_eq!(s(r[0], "stop_reason"), "end_of_turn");
    assert_eq!(ids(r[0], "ids"), force);
    assert!(ids(r[0], "closing_ids").is_empty());
    // generated as the template writes it: the conversation is the template's ids
    let want = template_ids(&body(&format!("{U1}, {a}, {U2}"), false), None, true);
    assert_eq!(conversation(&c), want);
}

#[test]
fn tool_calls_with_every_argument_type_and_the_result() {
    let dir = crate::support::scratch_dir("chat-forced-tools-src");
    let tools = r#"[{"type": "function", "function": {"name": "lookup", "description": "Look something up", "parameters": {"type": "object", "properties": {"s": {"type": "string"}}}}}]"#;
    let tools_file = dir.join("tools.json");
    std::fs::write(&tools_file, tools).unwrap();
    let arguments = r#"{\"s\": \"Paris\", \"n\": 3.5, \"b\": true, \"z\": null, \"o\": {\"k\": [1, 2]}, \"a\": [\"x\", -2]}"#;
    let a = format!(
        r#"{{"role": "assistant", "reasoning_content": "I will call.", "content": "", "tool_calls": [{{"id": "call_1_1", "type": "function", "function": {{"name": "lookup", "arguments": "{arguments}"}}}}]}}"#
    );
    let force = reply_ids(U1, &a, Some(tools), false);
    let mut args = ARGS.to_vec();
    args.extend(["--tools", tools_file.to_str().unwrap()]);
    let c = chat(
        "chat-forced-tools",
        &args,
        "What is the capital of France?\nsunny\n",
        Some(&force),
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let line = r#"{"id":"call_1_1","name":"lookup","arguments":{"s":"Paris","n":3.5,"b":true,"z":null,"o":{"k":[1,2]},"a":["x",-2]}}"#;
    let out = c.stdout();
    assert!(
        out.starts_with(&format!("<think>\nI will call.\n</think>\n{line}\n")),
        "{out}"
    );
    // the second turn answers the tool result (and is forced to call again)
    assert!(out.contains(&line.replace("call_1_1", "call_2_1")), "{out}");
    let r = c.replies();
    let call = &r[0].get("tool_calls").unwrap().as_array().unwrap()[0];
    let f = call.get("function").unwrap();
    assert_eq!(s(f, "name"), "lookup");
    let got = k3::json::parse(s(f, "arguments").as_bytes()).unwrap();
    let want = k3::json::parse(arguments.replace("\\\"", "\"").as_bytes()).unwrap();
    assert_eq!(got, want);
    let result = c
        .history
        .iter()
        .find(|l| s(l, "role") == "tool")
        .expect("a tool line");
    assert_eq!(s(result, "content"), "sunny");
    assert_eq!(s(result, "tool_call_id"), "call_1_1");
    let t = r#"{"role": "tool", "tool_call_id": "call_1_1", "content": "sunny"}"#;
    let want = template_ids(&body(&format!("{U1}, {a}, {t}"), false), Some(tools), true);
    assert_eq!(conversation(&c), want);
}

#[test]
fn malformed_markup_is_content_with_a_warning() {
    let mut force = text_ids("Hi ");
    force.push(OPEN);
    force.extend(text_ids("bogus"));
    force.push(SEP);
    force.extend(text_ids(" there"));
    let end = reply_ids(U1, r#"{"role": "assistant", "content": ""}"#, None, true);
    // an empty response's reply: close(response) + close(message) + end
    force.extend(&end);
    let mut args = ARGS.to_vec();
    args.extend(["--thinking", "off"]);
    let c = chat(
        "chat-forced-malformed",
        &args,
        "What is the capital of France?\nThanks\n",
        Some(&force),
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let text = "Hi <|open|>bogus<|sep|> there";
    assert_eq!(c.stdout(), format!("{text}\n").repeat(2));
    assert!(c.stderr().contains("warning: "), "{}", c.stderr());
    let r = c.replies();
    assert_eq!(s(r[0], "content"), text);
    assert!(r[0].get("warnings").is_some());
    assert_eq!(s(r[0], "stop_reason"), "end_of_turn");
    assert!(ids(r[0], "closing_ids").is_empty());
    // with thinking off and no tools the next turn is the template of its message alone
    assert_eq!(c.inputs()[1], template_ids(&body(U2, true), None, true));
}

#[test]
fn a_reply_cut_by_the_limit_is_closed_before_the_next_turn() {
    let force = text_ids("Thinking very hard about the capital of France today");
    assert!(force.len() > 3);
    let args = ["--max-reply", "3", "--seed", "3", "--ctx", "600", "--quiet"];
    let c = chat(
        "chat-forced-cut",
        &args,
        "What is the capital of France?\nThanks\n",
        Some(&force),
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let shown = tok().decode_lossy(&force[..3]).unwrap();
    let turn = format!("<think>\n{shown}\n</think>\n");
    assert_eq!(c.stdout(), turn.repeat(2));
    let r = c.replies();
    assert_eq!(s(r[0], "stop_reason"), "length");
    assert_eq!(ids(r[0], "ids"), &force[..3]);
    assert_eq!(s(r[0], "reasoning_content"), shown);
    let mut closing = vec![CLOSE];
    closing.extend(text_ids("think"));
    closing.extend([SEP, OPEN]);
    closing.extend(text_ids("response"));
    closing.extend([SEP, CLOSE]);
    closing.extend(text_ids("response"));
    closing.extend([SEP, CLOSE]);
    closing.extend(text_ids("message"));
    closing.extend([SEP, END_OF_MSG]);
    assert_eq!(ids(r[0], "closing_ids"), closing);
    let next = &c.inputs()[1];
    assert_eq!(&next[..closing.len()], &closing[..]);
    // then the user message and the generation prompt, as the template adds them
    let a = format!(
        r#"{{"role": "assistant", "reasoning_content": {}, "content": ""}}"#,
        Value::from(shown.as_str()).to_json()
    );
    let before = template_ids(&body(&format!("{U1}, {a}"), false), None, false);
    let after = template_ids(&body(&format!("{U1}, {a}, {U2}"), false), None, true);
    assert_eq!(&next[closing.len()..], &after[before.len()..]);
}

#[test]
fn a_partial_prefix_is_continued_in_the_response_channel() {
    let dir = crate::support::scratch_dir("chat-forced-partial-src");
    let f = dir.join("m.json");
    let p = r#"{"role": "assistant", "reasoning_content": "Easy.", "content": "The capital is", "partial": true}"#;
    std::fs::write(&f, format!("[{U1}, {p}]")).unwrap();
    let end = reply_ids(U1, r#"{"role": "assistant", "content": ""}"#, None, true);
    let mut force = text_ids(" Paris.");
    force.extend(&end);
    let mut args = ARGS.to_vec();
    args.extend(["--messages", f.to_str().unwrap()]);
    let c = chat("chat-forced-partial", &args, "", Some(&force));
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert_eq!(c.stdout(), " Paris.\n");
    let r = c.replies();
    assert_eq!(s(r[0], "content"), "The capital is Paris.");
    assert_eq!(s(r[0], "reasoning_content"), "Easy.");
    assert_eq!(s(r[0], "stop_reason"), "end_of_turn");
    assert_eq!(
        c.inputs()[0],
        template_ids(&body(&format!("{U1}, {p}"), false), None, true)
    );
}

#[test]
fn think_off_encodes_the_conversation_again() {
    let a = r#"{"role": "assistant", "reasoning_content": "Let me think.", "content": "Paris."}"#;
    let force = reply_ids(U1, a, None, false);
    let c = chat(
        "chat-forced-think",
        ARGS,
        "What is the capital of France?\n/think off\nThanks\n/stats\n",
        Some(&force),
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    // the whole conversation runs again, rendered with thinking off (the reasoning left out)
    let a_off = r#"{"role": "assistant", "content": "Paris."}"#;
    let all = template_ids(&body(&format!("{U1}, {a_off}, {U2}"), true), None, true);
    let r = c.replies();
    let p = r[1].get("prefilled").unwrap().as_number().unwrap().as_u64();
    assert_eq!(p, Some(all.len() as u64));
    let before = template_ids(&body(&format!("{U1}, {a_off}"), true), None, false);
    assert_eq!(c.inputs()[1], &all[before.len()..]);
    assert!(
        c.stderr().contains("all turns: prefilled"),
        "{}",
        c.stderr()
    );
}

const WEATHER: &str = r#"[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]"#;
const U_WEATHER: &str = r#"{"role": "user", "content": "Weather in Paris?"}"#;

/// A forced reply (thinking off) whose call `index="1"` has a raw-string argument (kept as
/// content with a warning) and whose call `index="2"` is valid.
fn malformed_then_valid_call() -> Vec<u32> {
    let a = r#"{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "not json"}},
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}"#;
    let force = reply_ids(U_WEATHER, a, Some(WEATHER), true);
    let text = tok().decode_lossy(&force).unwrap();
    assert!(
        text.contains(r#"tool="get_weather" index="1""#)
            && text.contains(r#"tool="get_weather" index="2""#),
        "{text}"
    );
    force
}

/// What the turn after the result `sunny` of call 2 appends (thinking off): the tool message
/// numbered as the model numbered its call, then the generation prompt.
fn result_of_call_2() -> Vec<u32> {
    use k3::chat::Segment::{Special, Text};
    let t = |s: &str| Text(s.to_string());
    let mut segs = vec![Special(OPEN), t("message")];
    for (k, v) in [("role", "tool"), ("tool", "get_weather"), ("index", "2")] {
        segs.extend([t(&format!(" {k}")), t("=\""), t(v), t("\"")]);
    }
    segs.extend([
        Special(SEP),
        t("sunny"),
        Special(CLOSE),
        t("message"),
        Special(SEP),
    ]);
    segs.extend([Special(END_OF_MSG), Special(OPEN), t("message")]);
    segs.extend([t(" role"), t("=\""), t("assistant"), t("\""), Special(SEP)]);
    segs.extend([Special(OPEN), t("response"), Special(SEP)]);
    k3::chat::encode(tok(), &segs).unwrap()
}

fn tools_file(name: &str) -> String {
    let dir = crate::support::scratch_dir(name);
    let f = dir.join("tools.json");
    std::fs::write(&f, WEATHER).unwrap();
    f.display().to_string()
}

/// After a malformed call, the valid call keeps the number the model wrote: it is shown as
/// `call_1_2`, and its result goes back as `index="2"` (it went back as `index="1"`, the
/// number of the malformed call, when calls were numbered by counting the ones that parsed).
#[test]
fn a_result_after_a_malformed_call_answers_the_call_the_model_made() {
    let force = malformed_then_valid_call();
    let tools = tools_file("chat-forced-call-numbers-src");
    let mut args = ARGS.to_vec();
    args.extend(["--thinking", "off", "--tools", &tools]);
    let c = chat(
        "chat-forced-call-numbers",
        &args,
        "Weather in Paris?\nsunny\n",
        Some(&force),
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let line = r#"{"id":"call_1_2","name":"get_weather","arguments":{"city":"Paris"}}"#;
    let out = c.stdout();
    assert!(out.contains(&format!("{line}\n")), "{out}");
    assert!(!out.contains("call_1_1"), "{out}");
    assert!(
        c.stderr().contains("warning: malformed tool call"),
        "{}",
        c.stderr()
    );
    let r = c.replies();
    let call = &r[0].get("tool_calls").unwrap().as_array().unwrap()[0];
    assert_eq!(s(call, "id"), "call_1_2");
    let n = call.get("xtml_index").and_then(Value::as_number);
    assert_eq!(n.and_then(|n| n.as_u64()), Some(2));
    let result = c.history.iter().find(|l| s(l, "role") == "tool").unwrap();
    assert_eq!(s(result, "tool_call_id"), "call_1_2");
    let next = &c.inputs()[1];
    assert_eq!(
        tok().decode_lossy(next).unwrap(),
        "<|open|>message role=\"tool\" tool=\"get_weather\" index=\"2\"<|sep|>sunny\
         <|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|>\
         <|open|>response<|sep|>"
    );
    assert_eq!(next, &result_of_call_2());
    // the second turn (the same forced reply) numbers its call the same way
    assert!(out.contains(&line.replace("call_1_2", "call_2_2")), "{out}");
}

/// The call's number survives `/save` + `/load`: the result sent after the load answers it.
#[test]
fn a_loaded_conversation_keeps_the_numbers_of_its_pending_calls() {
    let force = malformed_then_valid_call();
    let tools = tools_file("chat-forced-call-load-src");
    let mut args = ARGS.to_vec();
    args.extend(["--thinking", "off", "--tools", &tools]);
    let saved = chat(
        "chat-forced-call-save",
        &args,
        "Weather in Paris?\n/save s.state\n",
        Some(&force),
    );
    assert_eq!(saved.code(), 0, "{}", saved.stderr());
    let state = saved.dir.join("s.state");
    let loaded = chat(
        "chat-forced-call-load",
        &args,
        &format!("/load {}\nsunny\n", state.display()),
        Some(&force),
    );
    assert_eq!(loaded.code(), 0, "{}", loaded.stderr());
    let result = loaded.history.iter().find(|l| s(l, "role") == "tool");
    assert_eq!(s(result.unwrap(), "tool_call_id"), "call_1_2");
    assert_eq!(loaded.inputs()[0], result_of_call_2());
}
