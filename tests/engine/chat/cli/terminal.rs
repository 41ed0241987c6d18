//! `k3 chat` on a terminal (a pseudo-terminal from util-linux `script`): a turn past the
//! context is an error line and the conversation stays usable; the thinking is dimmed.

use super::model;
use std::io::Write;
use std::process::{Command, Stdio};

/// `cmd` run by `script` on a pseudo-terminal, its standard streams piped.
///
/// `script` starts `$SHELL -c CMD`; the command is `exec`ed so that k3 itself is the
/// terminal's foreground process. A shell that stayed as its parent (dash, the `/bin/sh`
/// `script` uses when `SHELL` is unset, does not exec a lone command) would get the same
/// Ctrl-C as k3 and die of it, and `script` would report the shell's 130.
fn script(cmd: &str) -> std::process::Child {
    Command::new("/usr/bin/script")
        .args(["-qec", &format!("exec {cmd}"), "/dev/null"])
        .env_remove("K3_TEST_FORCE_IDS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `k3 chat <model> <args>` on a pseudo-terminal fed `input`: (exit code, everything the
/// terminal showed). None when `script` is not installed.
fn on_terminal(args: &str, input: &str) -> Option<(i32, String)> {
    if !std::path::Path::new("/usr/bin/script").exists() {
        eprintln!("skipped: /usr/bin/script (util-linux) is not installed");
        return None;
    }
    let cmd = format!("{} chat {} {args}", env!("CARGO_BIN_EXE_k3"), model());
    let mut child = script(&cmd);
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

#[test]
fn a_turn_past_the_context_is_an_error_line_and_the_chat_goes_on() {
    if std::env::var("K3_TEST_RUNNER").is_ok_and(|r| !r.trim().is_empty()) {
        return; // the pseudo-terminal runs the host binary only
    }
    let long = "word ".repeat(200);
    let input = format!("Hi\n{long}\n/nope\n/stats\n");
    let Some((code, shown)) = on_terminal("--ctx 150 --max-reply 3 --seed 1", &input) else {
        return;
    };
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("k3: error: this turn would make the conversation"),
        "{shown}"
    );
    assert!(
        shown.contains("k3: error: unknown command `/nope`"),
        "{shown}"
    );
    // the first exchange is still there
    assert!(
        shown.contains("1 exchange") && !shown.contains("1 exchanges"),
        "{shown}"
    );
    // thinking on: dimmed, never the pipe's markers
    assert!(
        shown.contains("\x1b[2m") && !shown.contains("<think>"),
        "{shown}"
    );
}

/// Reads `r` until `what` has been seen in what this call read (or the end); everything
/// read so far is in `buf`.
fn read_until(r: &mut impl std::io::Read, buf: &mut Vec<u8>, what: &[u8]) {
    let mut chunk = [0u8; 4096];
    let from = buf.len();
    while !buf[from..].windows(what.len()).any(|w| w == what) {
        match r.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn ctrl_c_stops_the_answer_and_the_next_turn_closes_it() {
    if std::env::var("K3_TEST_RUNNER").is_ok_and(|r| !r.trim().is_empty())
        || !std::path::Path::new("/usr/bin/script").exists()
    {
        return;
    }
    let dir = crate::support::scratch_dir("chat-ctrl-c");
    let history = dir.join("h.jsonl");
    // an answer far longer than the wait for its first characters
    let cmd = format!(
        "{} chat {} --ctx 8000 --max-reply 3000 --seed 1 --history {}",
        env!("CARGO_BIN_EXE_k3"),
        model(),
        history.display()
    );
    let mut child = script(&cmd);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut shown = Vec::new();
    stdin.write_all(b"Hi\n").unwrap();
    read_until(&mut stdout, &mut shown, b"\x1b[2m");
    // the terminal turns ^C into SIGINT for k3
    stdin.write_all(b"\x03").unwrap();
    read_until(&mut stdout, &mut shown, b"[turn 1:");
    stdin.write_all(b"Again\n").unwrap();
    read_until(&mut stdout, &mut shown, b"\x1b[2m");
    stdin.write_all(b"\x03").unwrap();
    read_until(&mut stdout, &mut shown, b"[turn 2:");
    drop(stdin);
    let _ = std::io::Read::read_to_end(&mut stdout, &mut shown);
    let status = child.wait().unwrap();
    let text = String::from_utf8_lossy(&shown).into_owned();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("stop: interrupted"), "{text}");
    let lines: Vec<k3::json::Value> = std::fs::read_to_string(&history)
        .unwrap()
        .lines()
        .map(|l| k3::json::parse(l.as_bytes()).unwrap())
        .collect();
    let first = &lines[1];
    assert_eq!(
        first.get("stop_reason").unwrap().as_str(),
        Some("interrupted")
    );
    let closing = super::ids(first, "closing_ids");
    assert!(!closing.is_empty());
    let next = super::ids(&lines[2], "ids");
    assert_eq!(
        &next[..closing.len()],
        &closing[..],
        "the next turn closes the answer first"
    );
}
