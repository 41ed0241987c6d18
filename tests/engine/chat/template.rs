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
