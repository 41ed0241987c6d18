//! Bad input to `k3 chat` (issue 13 "Bad input"): exit 2 naming the message index and field,
//! before the model is opened; a turn past the context refused before it runs (exit 2 with an
//! explicit `--ctx`, 3 for a context sized by the budget).

use super::{chat, model};
use crate::support::{run_k3, scratch_dir};

/// `k3 chat <model> --messages F` with F holding `body`: (exit code, standard error).
fn refused(name: &str, body: &[u8], extra: &[&str]) -> (i32, String) {
    let dir = scratch_dir(name);
    let f = dir.join("m.json");
    std::fs::write(&f, body).unwrap();
    let m = model();
    let mut args = vec!["chat", m.as_str(), "--messages", f.to_str().unwrap()];
    args.extend(extra);
    let o = run_k3(&args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_messages_name_the_index_and_field() {
    let user = r#"{"role": "user", "content": "hi"}"#;
    let cases: &[(&str, String, &str)] = &[
        (
            "role",
            format!(r#"[{user}, {{"role": "robot", "content": "x"}}]"#),
            "messages[1].role: unknown role \"robot\"",
        ),
        (
            "call-name",
            format!(
                r#"[{user}, {{"role": "assistant", "content": "", "tool_calls": [{{"type": "function", "function": {{"arguments": "{{}}"}}}}]}}]"#
            ),
            "messages[1].tool_calls[0].function.name",
        ),
        (
            "twice",
            format!(
                r#"{{"messages": [{user}], "tools": [{{"type": "function", "function": {{"name": "f"}}}}, {{"type": "function", "function": {{"name": "f"}}}}]}}"#
            ),
            "tools[1]",
        ),
        (
            "effort",
            format!(r#"{{"messages": [{user}], "reasoning_effort": "medium"}}"#),
            "reasoning_effort",
        ),
        (
            "partial",
            format!(r#"[{{"role": "assistant", "content": "a", "partial": true}}, {user}]"#),
            "messages[0].partial",
        ),
        (
            "tool-name",
            format!(
                r#"{{"messages": [{user}], "tools": [{{"type": "function", "function": {{"name": "9bad name"}}}}]}}"#
            ),
            "tools[0].function.name",
        ),
        (
            "image",
            r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]"#
                .to_string(),
            "messages[0].content[0]",
        ),
        (
            "surrogate",
            r#"[{"role": "user", "content": "\ud800"}]"#.to_string(),
            "messages[0].content",
        ),
        (
            "not-json",
            format!(r#"[{user}, {{"role": "user", "content": }}]"#),
            "messages[1].content: invalid JSON at byte 64",
        ),
    ];
    for (name, body, want) in cases {
        let (code, err) = refused(&format!("chat-bad-{name}"), body.as_bytes(), &[]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains("m.json: ") && err.contains(want),
            "{name}: {err}"
        );
    }
}

#[test]
fn bad_flags_are_refused() {
    let m = model();
    for (args, want) in [
        (vec!["--thinking", "medium"], "flag `--thinking medium`"),
        (vec!["--max-reply", "0"], "flag `--max-reply 0`"),
        (
            vec!["--system", "a", "--system-file", "b"],
            "`--system` and `--system-file`",
        ),
        (vec!["--gen", "3"], "--gen"),
    ] {
        let mut a = vec!["chat", m.as_str()];
        a.extend(&args);
        let o = run_k3(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_turn_past_an_explicit_ctx_is_exit_2() {
    let long = "word ".repeat(200);
    let c = chat(
        "chat-ctx-explicit",
        &["--ctx", "100", "--max-reply", "2", "--seed", "1"],
        &format!("{long}\n"),
        None,
    );
    assert_eq!(c.code(), 2, "{}", c.stderr());
    assert!(
        c.stderr().contains("the context holds 100"),
        "{}",
        c.stderr()
    );
    assert!(c.replies().is_empty());
}

#[test]
fn a_turn_past_the_planned_context_is_exit_3() {
    // a budget that leaves room for few positions: the context is sized by it
    let probe = chat(
        "chat-ctx-probe",
        &["--mem-gb", "0.0465", "--max-reply", "1", "--seed", "1"],
        "",
        None,
    );
    let err = probe.stderr();
    let Some(ctx) = err
        .split("context: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
    else {
        panic!("no context line: {err}");
    };
    assert!(ctx < 100_000, "{err}");
    let long = "word ".repeat(ctx + 10);
    let c = chat(
        "chat-ctx-planned",
        &["--mem-gb", "0.0465", "--max-reply", "1", "--seed", "1"],
        &format!("{long}\n"),
        None,
    );
    assert_eq!(c.code(), 3, "{}", c.stderr());
    assert!(
        c.stderr().contains(&format!("the context holds {ctx}")),
        "{}",
        c.stderr()
    );
}

#[test]
fn bad_commands_from_a_pipe_are_exit_2() {
    for (input, want) in [
        ("/load missing.state\n", "missing.state"),
        ("/result r.txt\n", "/result: no tool call is waiting"),
        ("/save s.state\n", "/save: nothing to save yet"),
        ("/think medium\n", "/think medium: unsupported value"),
        ("\"\"\"\nnever closed\n", "a \"\"\" block is not closed"),
    ] {
        let c = chat(
            "chat-bad-command",
            &["--ctx", "200", "--seed", "1"],
            input,
            None,
        );
        assert_eq!(c.code(), 2, "{input:?}: {}", c.stderr());
        assert!(c.stderr().contains(want), "{input:?}: {}", c.stderr());
    }
}

/// A `--messages` file with no message is refused (the model would answer nothing and run on),
/// as the server refuses `"messages": []`.
#[test]
fn an_empty_messages_file_is_refused() {
    for (name, body) in [
        ("empty-array", "[]"),
        ("empty-object", r#"{"messages": []}"#),
    ] {
        let (code, err) = refused(name, body.as_bytes(), &["--max-reply", "2"]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains("messages: empty"), "{name}: {err}");
    }
}

/// A system prompt flag and a `--messages` file with its own system message would put two
/// system prompts before the model: refused, naming both (it kept both).
#[test]
fn a_system_flag_with_a_messages_file_that_has_one_is_refused() {
    let dir = scratch_dir("chat-system-and-messages");
    let prompt = dir.join("p.txt");
    std::fs::write(&prompt, "Be brief.\n").unwrap();
    let m = model();
    for (name, messages, refused) in [
        (
            "system",
            r#"[{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]"#,
            true,
        ),
        (
            "developer",
            r#"[{"role": "user", "content": "Hi"}, {"role": "developer", "content": "Be kind."}]"#,
            true,
        ),
        ("user-only", r#"[{"role": "user", "content": "Hi"}]"#, false),
    ] {
        let f = dir.join(format!("{name}.json"));
        std::fs::write(&f, messages).unwrap();
        for flag in [
            ["--system", "Be brief."],
            ["--system-file", prompt.to_str().unwrap()],
        ] {
            let mut args = vec!["chat", m.as_str(), "--messages", f.to_str().unwrap()];
            args.extend(flag);
            args.extend(["--max-reply", "1", "--ctx", "200", "--seed", "1", "--quiet"]);
            let o = run_k3(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            if refused {
                assert_eq!(o.status.code(), Some(2), "{name} {flag:?}: {err}");
                let both = format!("flags `{}` and `--messages {}`", flag[0], f.display());
                assert!(err.contains(&both), "{name} {flag:?}: {err}");
                assert!(err.contains("its own system message"), "{err}");
            } else {
                assert_eq!(o.status.code(), Some(0), "{name} {flag:?}: {err}");
            }
        }
    }
}

/// No file the chat writes may be one it reads: `--history` and `/save FILE` (the state at
/// FILE, the transcript at FILE.json) onto the model's config or tokenizer, a `--tools` file,
/// or `/save` onto the `--history` file, are exit 2 naming the flag or command and the input,
/// and every file keeps its bytes (they were replaced: a user's trial broke the model).
#[test]
fn outputs_never_replace_the_chat_inputs() {
    use super::chat_in;
    let m = crate::support::copy_dir(std::path::Path::new(&model()), "chat-outputs-model");
    let tools = m.join("tools.json");
    std::fs::write(&tools, "[]").unwrap();
    let snapshot = |d: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&m);
    let ms = m.display().to_string();
    let tl = tools.display().to_string();
    let config = m.join("config.json").display().to_string();
    let stem = m.join("config").display().to_string(); // its transcript is config.json
    let tiktoken = m.join("tiktoken.model").display().to_string();
    let base = [
        "--ctx",
        "300",
        "--seed",
        "1",
        "--max-reply",
        "2",
        "--tools",
        tl.as_str(),
    ];
    // --history onto an input: refused before the model opens
    for target in [&config, &tiktoken, &tl] {
        let o = run_k3(
            [
                &["chat", ms.as_str()][..],
                &base[..],
                &["--history", target.as_str()],
            ]
            .concat(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--history {target}: {err}");
        assert!(
            err.contains("--history") && err.contains("an input of this run"),
            "{err}"
        );
    }
    // /save onto an input, its transcript onto one, or onto the --history file
    for target in [&config, &stem, &tiktoken, &"history.jsonl".to_string()] {
        let c = chat_in(
            &ms,
            "chat-outputs",
            &base,
            &format!("Hi\n/save {target}\n"),
            None,
        );
        assert_eq!(c.code(), 2, "/save {target}: {}", c.stderr());
        assert!(
            c.stderr().contains("/save") && c.stderr().contains("an input of this run"),
            "/save {target}: {}",
            c.stderr()
        );
    }
    assert!(snapshot(&m) == before, "a model file changed");
}

/// A memory refusal of `k3 chat` advised the run's `--gen, a shorter prompt`, flags chat does
/// not have (the plan named them and only serve rewrote them): chat's advice names `--ctx`.
#[test]
fn a_memory_refusal_speaks_of_chat_flags() {
    let c = chat("mem-refusal", &["--mem-gb", "0.001"], "hi\n", None);
    let e = c.stderr();
    assert_eq!(c.code(), 3, "{e}");
    assert!(e.contains("memory plan does not fit"), "{e}");
    assert!(
        e.contains("(a smaller --ctx)") && !e.contains("--gen") && !e.contains("--parallel"),
        "{e}"
    );
    let c = chat(
        "mem-refusal-ctx",
        &["--mem-gb", "0.001", "--ctx", "64"],
        "hi\n",
        None,
    );
    let e = c.stderr();
    assert_eq!(c.code(), 3, "{e}");
    assert!(
        e.contains("(a smaller --ctx)") && !e.contains("--gen"),
        "{e}"
    );
}
