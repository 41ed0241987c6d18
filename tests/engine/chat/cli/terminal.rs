//! `k3 chat` on a terminal (a pseudo-terminal from util-linux `script`): a turn past the
//! context is an error line and the conversation stays usable; the thinking is dimmed.

use super::model;
use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `k3 chat <model> <args>` on a pseudo-terminal fed `input`: (exit code, everything the
/// terminal showed). None when `script` is not installed.
fn on_terminal(args: &str, input: &str) -> Option<(i32, String)> {
    if !std::path::Path::new("/usr/bin/script").exists() {
        eprintln!("skipped: /usr/bin/script (util-linux) is not installed");
        return None;
    }
    let cmd = format!("{} chat {} {args}", env!("CARGO_BIN_EXE_k3"), model());
    let mut child = Command::new("/usr/bin/script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("K3_TEST_FORCE_IDS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
    assert!(shown.contains("1 exchanges"), "{shown}");
    // thinking on: dimmed, never the pipe's markers
    assert!(
        shown.contains("\x1b[2m") && !shown.contains("<think>"),
        "{shown}"
    );
}
