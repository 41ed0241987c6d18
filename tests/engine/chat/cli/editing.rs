//! `k3 chat` edits lines like a shell on a terminal (issue 22 item 2), driven through a
//! pseudo-terminal pair: the arrows, Home/End, Backspace, Ctrl-A/E/K/W, Up through this
//! session's lines and the `--history` file's, a bracketed paste, wide characters; what
//! reached the model is read back from `--history`. The terminal's settings come back after
//! every line, at the end, and when the process is stopped or terminated at the prompt.
//! Before the editor, `"abc\u001b[DX"` was sent to the model and Up showed `^[[A`.

use super::{model, s, text_ids};
use crate::support::pty::{modes, termios, Pty};
use std::path::Path;
use std::process::Command;

/// Raw mode turns bracketed paste on as a line's reading starts: the prompt is up.
const READING: &str = "\x1b[?2004h";
/// … and off when the line is read.
const READ: &str = "\x1b[?2004l";

/// The terminal tests run the host binary only (never under an emulator).
fn emulated() -> bool {
    std::env::var("K3_TEST_RUNNER").is_ok_and(|r| !r.trim().is_empty())
}

/// `k3 chat` on the tiny model with a short forced reply, thinking off, `--history history`.
fn chat_command(history: &Path) -> Command {
    let reply: Vec<String> = text_ids("Fine.").iter().map(u32::to_string).collect();
    let mut c = Command::new(env!("CARGO_BIN_EXE_k3"));
    c.arg("chat")
        .arg(model())
        .args([
            "--ctx",
            "400",
            "--seed",
            "1",
            "--thinking",
            "off",
            "--max-reply",
        ])
        .arg(reply.len().to_string())
        .arg("--history")
        .arg(history)
        .env("K3_TEST_FORCE_IDS", reply.join(","));
    c
}

/// The user messages of a `--history` file, in order.
fn user_messages(history: &Path) -> Vec<String> {
    std::fs::read_to_string(history)
        .unwrap()
        .lines()
        .map(|l| k3::json::parse(l.as_bytes()).unwrap())
        .filter(|l| s(l, "role") == "user")
        .map(|l| s(&l, "content").to_string())
        .collect()
}

#[test]
fn keys_edit_the_line_and_the_model_gets_the_edited_text() {
    if emulated() {
        return;
    }
    let dir = crate::support::scratch_dir("chat-line-editing");
    let history = dir.join("history.jsonl");
    let mut pty = Pty::open();
    let before = modes(&termios(&pty.slave));
    let mut child = pty.spawn(chat_command(&history));
    let lines: [&[u8]; 5] = [
        // Left then a character: inserted before the last one
        b"abc\x1b[DX\r",
        // Ctrl-A Ctrl-K cut all, Ctrl-A to the start again, Ctrl-E to the end, Backspace
        b"wrong words\x01\x0bright\x01say \x05!\x7f?\r",
        // Up recalls the last line, to edit it
        b"\x1b[A\x1b[D\x7fT\r",
        // a paste with a line break is one message
        b"\x1b[200~line one\r\nline two\x1b[201~\r",
        // a wide character is one step; Ctrl-W cuts a word; Home
        "日本\x1b[D\x1b[Dx\x1b[C\x7f\x05 caf\u{e9} tea\x17\x1b[H>\r".as_bytes(),
    ];
    for (n, line) in lines.iter().enumerate() {
        pty.wait_for(READING, n + 1);
        // raw mode while the line is read
        assert_eq!(termios(&pty.slave).c_lflag & libc::ICANON, 0);
        pty.type_in(line);
    }
    // Ctrl-C drops what was typed, Ctrl-D on the empty line leaves
    pty.wait_for(READING, 6);
    pty.type_in(b"dropped\x03");
    pty.wait_for(READING, 7);
    pty.type_in(b"\x04");
    let status = child.wait().unwrap();
    let after = modes(&termios(&pty.slave));
    let shown = pty.close();
    assert_eq!(status.code(), Some(0), "{shown:?}");
    assert_eq!(
        user_messages(&history),
        [
            "abXc",
            "say right?",
            "say righT?",
            "line one\nline two",
            ">x本 café "
        ]
    );
    assert_eq!(after, before, "the terminal's settings are restored");
    assert!(!shown.contains("^[["), "no escape codes echoed: {shown:?}");
    // (the terminal's output processing makes the line feed CR LF)
    assert!(shown.contains("^C\r\r\n"), "{shown:?}");
    assert!(shown.rfind(READ) > shown.rfind(READING), "{shown:?}");

    // a new chat recalls the user lines of the --history file
    let mut pty = Pty::open();
    let mut child = pty.spawn(chat_command(&history));
    pty.wait_for(READING, 1);
    pty.type_in(b"\x1b[A\x1b[A\r");
    pty.wait_for(READING, 2);
    pty.type_in(b"\x04");
    let status = child.wait().unwrap();
    let shown = pty.close();
    assert_eq!(status.code(), Some(0), "{shown:?}");
    assert_eq!(
        user_messages(&history).last().unwrap(),
        "line one\nline two"
    );
}

#[test]
fn the_terminal_is_restored_when_the_chat_is_stopped_or_terminated_at_the_prompt() {
    if emulated() {
        return;
    }
    let dir = crate::support::scratch_dir("chat-line-editing-signals");
    let history = dir.join("history.jsonl");
    let mut pty = Pty::open();
    let before = modes(&termios(&pty.slave));
    let mut child = pty.spawn(chat_command(&history));
    let pid = child.id() as libc::pid_t;
    pty.wait_for(READING, 1);
    assert_ne!(
        modes(&termios(&pty.slave)),
        before,
        "raw mode at the prompt"
    );
    // SIGTSTP (a `kill -TSTP`, or a shell's Ctrl-Z outside raw mode): restored, stopped
    // SAFETY: plain libc calls on the child's pid; `st` is a live out-value.
    let stopped = unsafe {
        libc::kill(pid, libc::SIGTSTP);
        let mut st = 0;
        libc::waitpid(pid, &mut st, libc::WUNTRACED);
        libc::WIFSTOPPED(st)
    };
    assert!(stopped);
    assert_eq!(
        modes(&termios(&pty.slave)),
        before,
        "restored while stopped"
    );
    // continued: raw again, and the line still works
    // SAFETY: a plain kill on the child's pid.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    pty.wait_for(READING, 2);
    pty.type_in(b"hi\x1b[Do\r");
    pty.wait_for(READING, 3);
    assert_eq!(user_messages(&history), ["hoi"]);
    // SIGTERM at the prompt: restored, then the default action
    // SAFETY: a plain kill on the child's pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let after = modes(&termios(&pty.slave));
    let shown = pty.close();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{shown:?}");
    assert_eq!(after, before, "restored: {shown:?}");
    assert!(shown.rfind(READ) > shown.rfind(READING), "{shown:?}");
}
