//! The chat template (TOKENIZER.md §10) against the oracle fixtures of
//! `tests/fixtures/chat/cases.json` (made by `chat-oracle/`, see its README): every rendered
//! conversation id for id, every refusal refused with the field named; and `k3 template`.

use k3::chat::{self, Request, Segment};
use k3::json::Value;
use k3::tokenizer::Tokenizer;
use std::sync::OnceLock;

fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::load(&crate::support::fixture("tiny-k3-text")).unwrap())
}

fn cases() -> &'static Vec<Value> {
    static C: OnceLock<Vec<Value>> = OnceLock::new();
    C.get_or_init(|| {
        let bytes = std::fs::read(crate::support::fixture("chat/cases.json")).unwrap();
        k3::json::parse(&bytes)
            .unwrap()
            .as_array()
            .unwrap()
            .to_vec()
    })
}

fn case(name: &str) -> &'static Value {
    cases()
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no fixture case {name}"))
}

fn generation_prompt(c: &Value) -> bool {
    c.get("generation_prompt")
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

fn ours(c: &Value) -> k3::Result<(Vec<Segment>, Vec<u32>)> {
    let req = Request::from_json(c.get("request").unwrap())?;
    let segs = chat::render(&req, generation_prompt(c))?;
    let ids = chat::encode(tok(), &segs)?;
    Ok((segs, ids))
}

fn fixture_ids(c: &Value) -> Vec<u32> {
    let ids = c.get("ids").and_then(Value::as_array).unwrap();
    ids.iter()
        .map(|v| v.as_number().unwrap().as_u64().unwrap() as u32)
        .collect()
}

fn fixture_segments(c: &Value) -> Vec<Segment> {
    let names = [
        ("<|end_of_msg|>", chat::END_OF_MSG),
        ("<|open|>", chat::OPEN),
        ("<|close|>", chat::CLOSE),
        ("<|sep|>", chat::SEP),
    ];
    c.get("segments")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|s| match (s.get("special"), s.get("text")) {
            (Some(n), _) => {
                let n = n.as_str().unwrap();
                Segment::Special(
                    names
                        .iter()
                        .find(|x| x.0 == n)
                        .map(|x| x.1)
                        .unwrap_or(u32::MAX),
                )
            }
            (_, Some(t)) => Segment::Text(t.as_str().unwrap().to_string()),
            _ => panic!("bad segment {s}"),
        })
        .collect()
}

#[test]
fn fixtures_cover_the_issue() {
    let rendered = cases()
        .iter()
        .filter(|c| c.get("ids").is_some() && c.get("k3_refuses").is_none());
    assert!(rendered.count() >= 60, "at least 60 rendered conversations");
}

#[test]
fn every_rendered_conversation_matches_the_oracle_id_for_id() {
    let mut checked = 0;
    for c in cases() {
        let name = c.get("name").and_then(Value::as_str).unwrap();
        if c.get("k3_refuses").is_some() {
            continue;
        }
        assert!(
            c.get("oracle_error").is_none(),
            "{name}: the oracle refuses it but k3_refuses is not set"
        );
        let (segs, ids) = ours(c).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(segs, fixture_segments(c), "{name}: segments");
        assert_eq!(ids, fixture_ids(c), "{name}: ids");
        checked += 1;
    }
    assert!(checked >= 60);
}

/// Every case marked `k3_refuses` is refused, naming that field first.
#[test]
fn every_refusal_names_its_field() {
    for c in cases() {
        if let Some(field) = c.get("k3_refuses").and_then(Value::as_str) {
            check_refusal(c, field);
        }
    }
}

fn check_refusal(c: &Value, field: &str) {
    let name = c.get("name").and_then(Value::as_str).unwrap();
    match ours(c) {
        Ok(_) => panic!("{name}: accepted, expected a refusal naming {field}"),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{name}: {e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("{field}: ")),
                "{name}: `{msg}` does not name {field}"
            );
        }
    }
}

macro_rules! refusal {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let c = case(stringify!($name));
            check_refusal(c, c.get("k3_refuses").and_then(Value::as_str).unwrap());
        }
    )*};
}

refusal!(
    refuse_unknown_role,
    refuse_missing_role,
    refuse_call_without_name,
    refuse_tool_declared_twice,
    refuse_tool_declared_twice_dynamic,
    refuse_effort_medium,
    refuse_effort_top_level_medium,
    refuse_partial_not_final,
    refuse_partial_on_user,
    refuse_partial_not_bool,
    refuse_partial_with_tool_calls,
    refuse_bad_tool_name,
    refuse_tool_name_digit_start,
    refuse_tool_name_too_long,
    refuse_tools_on_user,
    refuse_system_content_and_tools,
    refuse_system_without_content,
    refuse_named_choice_undeclared,
    refuse_tool_choice_bad_type,
    refuse_tool_choice_unknown_string,
    refuse_tool_result_without_name,
    refuse_response_format_unknown,
    refuse_tools_not_array,
    refuse_args_array,
    refuse_args_number,
    refuse_image_part,
    refuse_effort_wrong_type,
    refuse_thinking_wrong_type,
);

// ---- k3 template -----------------------------------------------------------------------

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn template(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let tok = crate::support::fixture("tiny-k3-text");
    let mut all: Vec<&std::ffi::OsStr> =
        vec!["template".as_ref(), "--tok".as_ref(), tok.as_os_str()];
    all.extend_from_slice(args);
    crate::support::run_k3(all)
}

fn ids_line(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",") + "\n"
}

#[test]
fn template_prints_the_fixture_ids() {
    let dir = crate::support::scratch_dir("chat_template_prints");
    for name in [
        "tools_nested_sorted",
        "args_every_type_string",
        "tool_loop_final_answer",
        "response_format_json_schema",
        "partial_cjk_emoji",
        "effort_precedence_top_over_kwargs",
    ] {
        let c = case(name);
        let p = write(
            &dir,
            &format!("{name}.json"),
            &c.get("request").unwrap().to_json(),
        );
        let out = template(&["--messages".as_ref(), p.as_os_str()]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            ids_line(&fixture_ids(c)),
            "{name}"
        );
    }
}

#[test]
fn template_flags_thinking_tools_and_generation_prompt() {
    let dir = crate::support::scratch_dir("chat_template_flags");
    let msgs = write(&dir, "m.json", r#"[{"role": "user", "content": "Hi"}]"#);
    let run = |extra: &[&str]| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["--messages".as_ref(), msgs.as_os_str()];
        a.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
        let out = template(&a);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        run(&["--thinking", "off"]),
        ids_line(&fixture_ids(case("thinking_off")))
    );
    assert_eq!(
        run(&["--thinking", "low"]),
        ids_line(&fixture_ids(case("effort_low")))
    );
    assert_eq!(run(&[]), ids_line(&fixture_ids(case("user_only_hi"))));
    let no_gen = run(&["--no-generation-prompt"]);
    let full = run(&[]);
    assert!(full.starts_with(no_gen.trim_end()) && full.len() > no_gen.len());
    // --tools FILE declares the tools of the body form.
    let c = case("tools_basic");
    let tools = write(
        &dir,
        "tools.json",
        &c.get("request").unwrap().get("tools").unwrap().to_json(),
    );
    let body = write(
        &dir,
        "b.json",
        r#"[{"role": "user", "content": "Weather in Paris?"}]"#,
    );
    let out = template(&[
        "--messages".as_ref(),
        body.as_os_str(),
        "--tools".as_ref(),
        tools.as_os_str(),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        ids_line(&fixture_ids(c))
    );
}

#[test]
fn template_bad_input_exits_2_naming_the_field() {
    let dir = crate::support::scratch_dir("chat_template_bad");
    let cases: &[(&str, &str, &str)] = &[
        (
            "role",
            r#"[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]"#,
            "messages[1].role: unknown role",
        ),
        (
            "noname",
            r#"[{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}]"#,
            "messages[0].tool_calls[0].function.name",
        ),
        (
            "twice",
            r#"{"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "f"}, {"name": "f"}]}"#,
            "tools[1].name: tool \"f\" is declared more than once",
        ),
        (
            "medium",
            r#"{"messages": [{"role": "user", "content": "a"}], "reasoning_effort": "medium"}"#,
            "reasoning_effort: unsupported thinking effort \"medium\"",
        ),
        (
            "partial",
            r#"[{"role": "assistant", "content": "a", "partial": true}, {"role": "user", "content": "b"}]"#,
            "messages[0].partial: only the final message",
        ),
        (
            "notjson",
            "[{\"role\": \"user\", \"content\": \"a\"},]",
            "invalid JSON at byte 34",
        ),
        (
            "badname",
            r#"{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function", "function": {"name": "a.b"}}]}"#,
            "tools[0].function.name: tool name \"a.b\" must match",
        ),
        (
            "image",
            r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]"#,
            "messages[0].content[0].type: image parts",
        ),
        (
            "surrogate",
            r#"[{"role": "user", "content": "a\ud800"}]"#,
            "messages[0].content: invalid JSON at byte",
        ),
    ];
    for (name, text, want) in cases {
        let p = write(&dir, &format!("{name}.json"), text);
        let out = template(&["--messages".as_ref(), p.as_os_str()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!("{}: ", p.display())),
            "{name}: no file in `{err}`"
        );
        assert!(err.contains(want), "{name}: `{err}` lacks `{want}`");
        assert!(out.stdout.is_empty(), "{name}");
    }
    let p = write(&dir, "ok.json", r#"[{"role": "user", "content": "a"}]"#);
    let out = template(&[
        "--messages".as_ref(),
        p.as_os_str(),
        "--thinking".as_ref(),
        "medium".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--thinking"));
}

/// `set_thinking` and `set_tools` (what `k3 template --tools` and a chat's `/think` use).
#[test]
fn set_thinking_and_set_tools() {
    let body = k3::json::parse(br#"{"messages": [{"role": "user", "content": "Hi"}]}"#).unwrap();
    let mut req = Request::from_json(&body).unwrap();
    req.set_thinking(chat::Thinking::Off);
    let off = chat::encode(tok(), &chat::render(&req, true).unwrap()).unwrap();
    assert_eq!(off, fixture_ids(case("thinking_off")));
    req.set_thinking(chat::Thinking::On(chat::Effort::Low));
    let low = chat::encode(tok(), &chat::render(&req, true).unwrap()).unwrap();
    assert_eq!(low, fixture_ids(case("effort_low")));
    // A named tool_choice keeps thinking off.
    let c = case("tool_choice_named");
    let mut named = Request::from_json(c.get("request").unwrap()).unwrap();
    named.set_thinking(chat::Thinking::On(chat::Effort::Max));
    let ids = chat::encode(tok(), &chat::render(&named, true).unwrap()).unwrap();
    assert_eq!(ids, fixture_ids(c));
    // set_tools validates like the body's `tools`.
    let twice = k3::json::parse(br#"[{"name": "f"}, {"name": "f"}]"#).unwrap();
    let e = req.set_tools(twice).unwrap_err();
    assert!(e.to_string().starts_with("tools[1].name: "), "{e}");
    let e = req.set_tools(k3::json::parse(b"{}").unwrap()).unwrap_err();
    assert!(e.to_string().starts_with("tools: "), "{e}");
}

#[test]
fn failing_path_names_the_field_a_parse_error_is_in() {
    use k3::chat::messages::failing_path;
    let body = br#"{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "\ud800"}]}"#;
    assert_eq!(failing_path(body).as_deref(), Some("messages[1].content"));
    assert_eq!(
        failing_path(br#"[{"role": "user", "content": [{"text": tru}]}]"#).as_deref(),
        Some("messages[0].content[0].text")
    );
    assert_eq!(failing_path(b"[1,]"), None);
    assert_eq!(failing_path(br#"[{"role": "user"}]"#), None);
}

/// The generation stub is the tail of a prompt with the generation prompt, and only then.
#[test]
fn generation_stub_ends_the_generation_prompt() {
    for (name, thinking) in [("user_only", true), ("thinking_off", false)] {
        let segs = ours(case(name)).unwrap().0;
        let stub = chat::generation_stub(thinking);
        assert!(segs.ends_with(&stub), "{name}");
        assert_eq!(chat::encode(tok(), &stub).unwrap().len(), 3, "{name}");
    }
    let segs = ours(case("partial_thinking")).unwrap().0;
    assert!(!segs.ends_with(&chat::generation_stub(true)));
}

/// `body` is refused (exit 2) with a message starting `want`.
fn assert_refused(body: &str, want: &str) {
    let v = k3::json::parse(body.as_bytes()).unwrap();
    match Request::from_json(&v) {
        Ok(r) => panic!("{body}: accepted as {r:?}, expected `{want}`"),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{body}: {e}");
            assert!(
                e.to_string().starts_with(want),
                "{body}: `{e}` is not `{want}…`"
            );
        }
    }
}

/// A value of the wrong type is refused naming the field, never stringified; a content part
/// is rendered (`text`) or refused, never dropped.
#[test]
fn wrong_types_and_unrenderable_parts_are_refused_naming_the_field() {
    let user = |content: &str| format!(r#"[{{"role": "user", "content": {content}}}]"#);
    for (content, found) in [("5", "number"), ("true", "bool"), (r#"{"a": 1}"#, "object")] {
        assert_refused(
            &user(content),
            &format!("messages[0].content: expected a string or an array of parts, found {found}"),
        );
    }
    let parts: &[(&str, &str)] = &[
        (
            r#"{"type": "input_audio", "input_audio": {"data": "x"}}"#,
            "messages[0].content[0].type: audio parts are not supported",
        ),
        (
            r#"{"type": "video_url", "video_url": {"url": "x"}}"#,
            "messages[0].content[0].type: video parts are not supported",
        ),
        (
            r#"{"type": "file", "file": {"file_id": "x"}}"#,
            "messages[0].content[0].type: file parts are not supported",
        ),
        (
            r#"{"type": "input_image"}"#,
            "messages[0].content[0].type: image parts are not supported",
        ),
        (
            r#"{"type": "refusal", "refusal": "x"}"#,
            "messages[0].content[0].type: unknown part type \"refusal\"",
        ),
        (
            r#""bare""#,
            "messages[0].content[0]: expected a content part object, found string",
        ),
        (
            r#"{"text": "no type"}"#,
            "messages[0].content[0].type: missing",
        ),
        (
            r#"{"type": 3, "text": "x"}"#,
            "messages[0].content[0].type: expected a string, found number",
        ),
        (
            r#"{"type": "text"}"#,
            "messages[0].content[0].text: missing",
        ),
        (
            r#"{"type": "text", "text": 5}"#,
            "messages[0].content[0].text: expected a string or an array of strings, found number",
        ),
        (
            r#"{"type": "text", "text": ["a", 1]}"#,
            "messages[0].content[0].text: expected a string or an array of strings, found array",
        ),
    ];
    for (part, want) in parts {
        assert_refused(
            &user(&format!(r#"[{part}, {{"type": "text", "text": "kept"}}]"#)),
            want,
        );
    }
    let fields: &[(&str, &str)] = &[
        (
            r#"[{"role": "user", "content": "a", "name": 5}]"#,
            "messages[0].name: expected a string, found number",
        ),
        (
            r#"[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": 5}]"#,
            "messages[1].reasoning_content: expected a string or an array of strings, found number",
        ),
        (
            r#"[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning": {"x": 1}}]"#,
            "messages[1].reasoning: expected a string or an array of strings, found object",
        ),
        (
            r#"[{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": [{"id": 7, "function": {"name": "f", "arguments": "{}"}}]}]"#,
            "messages[1].tool_calls[0].id: expected a string, found number",
        ),
        (
            r#"[{"role": "tool", "content": "r", "tool_call_id": 1, "name": "f"}]"#,
            "messages[0].tool_call_id: expected a string, found number",
        ),
        (
            r#"[{"role": "tool", "content": "r", "tool": false}]"#,
            "messages[0].tool: expected a string, found bool",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": "notobj"}}]}"#,
            "tools[0].function.parameters: expected an object",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "f", "description": 5}]}"#,
            "tools[0].description: expected a string, found number",
        ),
        (
            r#"[{"role": "system", "tools": [{"name": "f", "parameters": [1]}]}, {"role": "user", "content": "a"}]"#,
            "messages[0].tools[0].parameters: expected an object",
        ),
    ];
    for (body, want) in fields {
        assert_refused(body, want);
    }
    // What stays accepted: text parts (a string or an array of strings), null values.
    let ok = r#"[{"role": "user", "name": null, "content": [{"type": "text", "text": ["a", "b"]}, {"type": "text", "text": "c"}]}, {"role": "assistant", "content": "d", "reasoning_content": null, "reasoning": "r"}]"#;
    let req = Request::from_json(&k3::json::parse(ok.as_bytes()).unwrap()).unwrap();
    assert_eq!(
        req.messages[0].content,
        Some(vec!["a\nb".to_string(), "c".to_string()])
    );
    assert_eq!(req.messages[1].reasoning.as_deref(), Some("r"));
}

/// A tool call's name follows the declared tools' rule `[A-Za-z_][A-Za-z0-9_-]*`, ≤ 256.
#[test]
fn tool_call_names_follow_the_tool_name_rule() {
    let call = |name: &str| {
        format!(
            r#"[{{"role": "user", "content": "a"}}, {{"role": "assistant", "tool_calls": [{{"function": {{"name": "{name}", "arguments": "{{}}"}}}}]}}]"#
        )
    };
    let field = "messages[1].tool_calls[0].function.name: ";
    for bad in ["bad name!", "1f", "", "a.b"] {
        assert_refused(&call(bad), &format!("{field}tool name {bad:?} must match"));
    }
    assert_refused(
        &call(&"a".repeat(257)),
        &format!("{field}tool name is 257 characters"),
    );
    let bare = r#"[{"role": "assistant", "tool_calls": [{"name": "x y", "arguments": {}}]}]"#;
    assert_refused(
        bare,
        "messages[0].tool_calls[0].name: tool name \"x y\" must match",
    );
    for good in ["get_weather", "_a-1", &"a".repeat(256)] {
        let v = k3::json::parse(call(good).as_bytes()).unwrap();
        Request::from_json(&v).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

fn template_stdin(args: &[&std::ffi::OsStr], input: &str) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let tok = crate::support::fixture("tiny-k3-text");
    let mut child = crate::support::k3()
        .arg("template")
        .arg("--tok")
        .arg(&tok)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // k3 may refuse (and exit) before it reads standard input: a closed pipe is no failure
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

/// `--messages -` and `--tools -` read standard input (one of them at a time).
#[test]
fn template_dash_reads_standard_input() {
    let dir = crate::support::scratch_dir("chat_template_stdin");
    let msgs = r#"[{"role": "user", "content": "Hi"}]"#;
    let tools =
        r#"[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]"#;
    let m = write(&dir, "m.json", msgs);
    let t = write(&dir, "t.json", tools);
    let from_files = template(&["--messages".as_ref(), m.as_os_str()]);
    assert!(from_files.status.success());
    let out = template_stdin(&["--messages".as_ref(), "-".as_ref()], msgs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(out.stdout, from_files.stdout);
    let with_tools = template(&[
        "--messages".as_ref(),
        m.as_os_str(),
        "--tools".as_ref(),
        t.as_os_str(),
    ]);
    assert!(with_tools.status.success());
    let args = [
        "--messages".as_ref(),
        m.as_os_str(),
        "--tools".as_ref(),
        "-".as_ref(),
    ];
    let out = template_stdin(&args, tools);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, with_tools.stdout);
    let both = [
        "--messages".as_ref(),
        "-".as_ref(),
        "--tools".as_ref(),
        "-".as_ref(),
    ];
    let out = template_stdin(&both, msgs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--messages -") && err.contains("--tools -"),
        "{err}"
    );
    // A refusal on standard input names it.
    let out = template_stdin(
        &["--messages".as_ref(), "-".as_ref()],
        r#"[{"role": "user", "content": 5}]"#,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("standard input: messages[0].content: expected"),
        "{err}"
    );
}

/// A call's `xtml_index` (k3's own key: the number the model wrote, which `k3 chat` records)
/// renders the call and the result that answers it by `tool_call_id` with that number;
/// without it calls and results are numbered as the reference numbers them.
#[test]
fn a_call_with_its_xtml_index_and_its_result_render_that_number() {
    let render = |call: &str| {
        let body = format!(
            r#"[{{"role": "user", "content": "Weather?"}},
            {{"role": "assistant", "content": "", "tool_calls": [{call}]}},
            {{"role": "tool", "tool_call_id": "c", "content": "sunny"}}]"#
        );
        let req = Request::from_json(&k3::json::parse(body.as_bytes()).unwrap()).unwrap();
        let ids = chat::encode(tok(), &chat::render(&req, true).unwrap()).unwrap();
        tok().decode_lossy(&ids).unwrap()
    };
    let call = r#"{"id": "c", "type": "function", "function": {"name": "w", "arguments": "{}"}"#;
    let plain = render(&format!("{call}}}"));
    assert!(
        plain.contains(r#"<|open|>call tool="w" index="1"<|sep|>"#),
        "{plain}"
    );
    assert!(
        plain.contains(r#"role="tool" tool="w" index="1"<|sep|>sunny"#),
        "{plain}"
    );
    let kept = render(&format!(r#"{call}, "xtml_index": 2}}"#));
    assert!(
        kept.contains(r#"<|open|>call tool="w" index="2"<|sep|>"#),
        "{kept}"
    );
    assert!(
        kept.contains(r#"role="tool" tool="w" index="2"<|sep|>sunny"#),
        "{kept}"
    );
    assert_eq!(kept.replace("index=\"2\"", "index=\"1\""), plain);
    // a number that is not one, or twice in a message, is refused naming the field
    let bad = |calls: &str| {
        format!(r#"[{{"role": "assistant", "content": "", "tool_calls": [{calls}]}}]"#)
    };
    let c = |n: &str| {
        format!(r#"{{"type": "function", "function": {{"name": "w"}}, "xtml_index": {n}}}"#)
    };
    assert_refused(
        &bad(&c("0")),
        "messages[0].tool_calls[0].xtml_index: expected an integer from 1 to 4294967295, found 0",
    );
    assert_refused(
        &bad(&c("\"2\"")),
        "messages[0].tool_calls[0].xtml_index: expected an integer from 1",
    );
    assert_refused(
        &bad(&format!("{}, {}", c("3"), c("3"))),
        "messages[0].tool_calls[1].xtml_index: 3 is already the index of tool_calls[0]",
    );
}
