//! `k3 chat` on a terminal (a pseudo-terminal from util-linux `script`): a turn past the
//! context is an error line and the conversation stays usable; the thinking is dimmed; the
//! live line shows while the text stops mid-row.

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
    script_forced(cmd, None)
}

/// [`script`] with `K3_TEST_FORCE_IDS` set to `force` when given.
fn script_forced(cmd: &str, force: Option<&[u32]>) -> std::process::Child {
    let mut c = Command::new("/usr/bin/script");
    match force {
        Some(f) => {
            let list: Vec<String> = f.iter().map(u32::to_string).collect();
            c.env("K3_TEST_FORCE_IDS", list.join(","))
        }
        None => c.env_remove("K3_TEST_FORCE_IDS"),
    };
    c.args(["-qec", &format!("exec {cmd}"), "/dev/null"])
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
        .filter(|l| l.get("turn").is_some() && l.get("command").is_none())
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

/// On an ordinary terminal (standard output and error the same), the live line shows while
/// the text stops mid-row, the case it exists for (a slow model thinking at length): on the
/// row below the text, with the cursor saved before and restored after (DECSC/DECRC), and
/// erased the same way before the next text. It never showed there: it waited for a line
/// start the thinking seldom reaches.
#[test]
fn the_live_line_shows_below_text_that_stops_mid_row() {
    if std::env::var("K3_TEST_RUNNER").is_ok_and(|r| !r.trim().is_empty()) {
        return;
    }
    if !std::path::Path::new("/usr/bin/script").exists() {
        return;
    }
    // thinking without a line break, cut by the reply limit
    let force = super::text_ids("Thinking very hard about the capital of France today");
    let cmd = format!(
        "{} chat {} --ctx 300 --max-reply 6 --seed 1",
        env!("CARGO_BIN_EXE_k3"),
        model()
    );
    let mut child = script_forced(&cmd, Some(&force));
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut bytes = Vec::new();
    // typed after the prompt, as a user does (a line typed ahead was echoed before the
    // prompt: the answer then starts mid-row, at a column k3 cannot know)
    read_until(&mut stdout, &mut bytes, b"> ");
    stdin.write_all(b"Hi\n").unwrap();
    read_until(&mut stdout, &mut bytes, b"[turn 1:");
    drop(stdin);
    let _ = std::io::Read::read_to_end(&mut stdout, &mut bytes);
    let code = child.wait().unwrap().code();
    let shown = String::from_utf8_lossy(&bytes).into_owned();
    assert_eq!(code, Some(0), "{shown:?}");
    let thinking = shown.find("\x1b[2m").expect("the thinking is shown");
    let after = &shown[thinking..];
    // below the text: a row made, the cursor saved, the line, the cursor restored
    let below = "\x1bD\x1b[A\x1b7\x1bD\r\x1b[0m[1 ids, ";
    let at = after
        .find(below)
        .unwrap_or_else(|| panic!("no live line: {after:?}"));
    let line = &after[at + below.len() - "[1 ids, ".len()..];
    let end = line.find("\x1b[K\x1b8").expect("the cursor restored");
    assert!(
        line[..end].contains(" s/token, about ") && line[..end].ends_with(" s to the reply limit]"),
        "{:?}",
        &line[..end]
    );
    // erased before the next text, and the text goes on where it stopped
    let erase = "\x1b7\x1bD\r\x1b[K\x1b8";
    assert!(line[end..].contains(erase), "{after:?}");
    let shown_text: String = super::tok().decode_lossy(&force[..6]).unwrap();
    let without_live = strip_live(after);
    assert!(without_live.contains(&shown_text), "{without_live:?}");
}

/// `text` without the live line's sequences (shown below the text, and erased).
fn strip_live(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    let next = |r: &str| {
        let show = r.find("\x1bD\x1b[A\x1b7");
        let erase = r.find("\x1b7\x1bD");
        show.into_iter().chain(erase).min()
    };
    while let Some(at) = next(rest) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find("\x1b8").map_or(tail.len(), |e| e + 2);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}
