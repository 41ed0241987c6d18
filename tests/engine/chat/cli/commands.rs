//! `k3 chat`'s input end to end through a pipe: the commands (`/help`, `/exit`, `/reset`,
//! `/result FILE`, `/load` saying what it restored), multi-line messages (`\` continuation,
//! `"""` blocks), and the `--history` lines that let a chat be replayed (its start, the
//! system prompt, every message with its turn, and a line per command that changes the
//! conversation: `/undo`, `/reset`, `/think`, `/load`).

use super::{body, chat, ids, k3_template, reply_ids, s, template_ids};
use k3::json::Value;

const ARGS: &[&str] = &["--max-reply", "3", "--seed", "7", "--ctx", "400"];

fn num(v: &Value, key: &str) -> Option<u64> {
    v.get(key)
        .and_then(Value::as_number)
        .and_then(|n| n.as_u64())
}

#[test]
fn help_lists_the_commands_and_exit_leaves() {
    let c = chat(
        "chat-help-exit",
        ARGS,
        "/help\nHi\n/exit\nnever sent\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let err = c.stderr();
    assert!(
        err.contains("commands:") && err.contains("/result FILE"),
        "{err}"
    );
    // one turn: the lines after /exit are not read
    assert_eq!(c.replies().len(), 1, "{err}");
    assert!(!c.history.iter().any(|l| s(l, "content") == "never sent"));
}

#[test]
fn reset_starts_again_from_the_system_prompt() {
    let mut args = ARGS.to_vec();
    args.extend(["--system", "Be brief."]);
    let c = chat("chat-reset", &args, "Hi\nMore\n/reset\nHi\n", None);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert!(
        c.stderr()
            .contains("the conversation starts again from the system prompt"),
        "{}",
        c.stderr()
    );
    let (r, inputs) = (c.replies(), c.inputs());
    assert_eq!(r.len(), 3);
    // the whole first turn again: the same ids in, all prefilled, the same answer
    assert_eq!(inputs[2], inputs[0]);
    assert_eq!(num(r[2], "prefilled"), Some(inputs[0].len() as u64));
    assert_eq!(ids(r[2], "ids"), ids(r[0], "ids"));
    assert_eq!(num(r[2], "turn"), Some(1));
}

#[test]
fn a_result_from_a_file_answers_the_call() {
    let dir = crate::support::scratch_dir("chat-result-file-src");
    let tools = r#"[{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"s": {"type": "string"}}}}}]"#;
    std::fs::write(dir.join("tools.json"), tools).unwrap();
    let result = "sunny\nand warm\n";
    std::fs::write(dir.join("r.txt"), result).unwrap();
    let u = r#"{"role": "user", "content": "Weather?"}"#;
    let a = r#"{"role": "assistant", "content": "", "tool_calls": [{"id": "call_1_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"s\": \"Paris\"}"}}]}"#;
    let force = reply_ids(u, a, Some(tools), true);
    let t = dir.join("tools.json");
    let r = dir.join("r.txt");
    let mut args = vec!["--max-reply", "200", "--seed", "7", "--ctx", "600"];
    args.extend(["--thinking", "off", "--tools", t.to_str().unwrap()]);
    let stdin = format!("Weather?\n/result {}\n", r.display());
    let c = chat("chat-result-file", &args, &stdin, Some(&force));
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let line = c.history.iter().find(|l| s(l, "role") == "tool").unwrap();
    assert_eq!(s(line, "content"), result);
    assert_eq!(s(line, "tool_call_id"), "call_1_1");
    let tool = format!(
        r#"{{"role": "tool", "tool_call_id": "call_1_1", "content": {}}}"#,
        Value::from(result).to_json()
    );
    let before = template_ids(&body(&format!("{u}, {a}"), true), Some(tools), false);
    let after = template_ids(&body(&format!("{u}, {a}, {tool}"), true), Some(tools), true);
    assert_eq!(c.inputs()[1], &after[before.len()..]);
}

#[test]
fn continued_lines_and_blocks_are_one_message() {
    let stdin = "first \\\nsecond\n\"\"\"\nblock a\n\n block b\n\"\"\"\n";
    let c = chat("chat-multi-line", ARGS, stdin, None);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let users: Vec<&str> = c
        .history
        .iter()
        .filter(|l| s(l, "role") == "user")
        .map(|l| s(l, "content"))
        .collect();
    assert_eq!(users, ["first \nsecond", "block a\n\n block b"]);
    let want = k3_template(&c.dir, r#"[{"role": "user", "content": "first \nsecond"}]"#);
    assert_eq!(c.inputs()[0], want);
}

/// Every command that changes the conversation has its line, so a replay knows which
/// exchanges stand: here turn 2 is undone, then everything after the system prompt reset.
#[test]
fn history_records_the_start_and_the_commands_that_change_the_conversation() {
    let mut args = ARGS.to_vec();
    args.extend(["--system", "Be brief."]);
    let stdin = "one\n/think off\ntwo\n/undo\n/reset\n/undo\nthree\n/stats\n";
    let c = chat("chat-history-commands", &args, stdin, None);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let commands: Vec<String> = c
        .commands()
        .iter()
        .map(|l| {
            let mut v = (*l).clone();
            // what varies with the machine: the seed is given, the context too
            if let Value::Object(o) = &mut v {
                o.remove("sampler");
            }
            v.to_json()
        })
        .collect();
    assert_eq!(
        commands,
        [
            r#"{"command":"chat","thinking":"max","tools":null,"seed":7,"ctx":400,"max_reply":3}"#,
            r#"{"command":"think","thinking":"off"}"#,
            r#"{"command":"undo","turn":2}"#,
            r#"{"command":"reset"}"#,
        ]
    );
    // the system prompt follows the start line; each message has its turn
    assert_eq!(s(&c.history[1], "role"), "system");
    let turns: Vec<(String, Option<u64>)> = c
        .exchange_lines()
        .iter()
        .map(|l| (s(l, "role").to_string(), num(l, "turn")))
        .collect();
    let t = |r: &str, n| (r.to_string(), Some(n));
    assert_eq!(
        turns,
        [
            t("user", 1),
            t("assistant", 1),
            t("user", 2),
            t("assistant", 2),
            t("user", 1),
            t("assistant", 1),
        ]
    );
}

/// `/load` continues with the saved thinking, sampler settings and seed, and says so.
#[test]
fn load_says_what_it_restored_and_the_history_records_it() {
    let mut args = ARGS.to_vec();
    args.extend(["--thinking", "low"]);
    let saved = chat("chat-load-says-save", &args, "Hi\n/save s.state\n", None);
    assert_eq!(saved.code(), 0, "{}", saved.stderr());
    let state = saved.dir.join("s.state");
    let other = [
        "--max-reply",
        "3",
        "--seed",
        "9",
        "--temperature",
        "0.5",
        "--ctx",
        "400",
    ];
    let stdin = format!("/load {}\nMore\n", state.display());
    let c = chat("chat-load-says", &other, &stdin, None);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert!(
        c.stderr()
            .contains("restored thinking low, temperature 1, top-p 0.95, top-k 0, min-p 0, seed 7"),
        "{}",
        c.stderr()
    );
    let load = c.commands()[1];
    assert_eq!(s(load, "command"), "load");
    assert_eq!(s(load, "file"), state.to_str().unwrap());
    assert_eq!(s(load, "thinking"), "low");
    assert_eq!(num(load, "seed"), Some(7));
    let messages = load.get("messages").and_then(Value::as_array).unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| s(m, "role")).collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(s(&messages[0], "content"), "Hi");
    // the turns after it count from 1 again
    assert_eq!(num(c.replies()[0], "turn"), Some(1));
}
