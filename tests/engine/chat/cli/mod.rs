//! `k3 chat` end to end on `tests/fixtures/tiny-k3-text` (issue 13 items 5, 6): driven through
//! a pipe, its `--history` lines read back. `session`: the turns continue one sequence (only
//! the new ids prefilled, logits bit-identical to one run), `/undo`, `/save` + `/load`;
//! `replies`: forced replies (`K3_TEST_FORCE_IDS`) shown, recorded and continued; `refusals`:
//! bad input named and refused; `terminal`, `editing`: on a (pseudo-)terminal, the line
//! editor's keys and the terminal's settings restored.

mod commands;
mod editing;
mod flags;
mod refusals;
mod replies;
mod session;
mod spec;
mod structured;
mod terminal;

use crate::support::{fixture, k3, scratch_dir};
use k3::chat::{self, Request};
use k3::json::Value;
use k3::tokenizer::Tokenizer;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::OnceLock;

/// The model directory (it holds the tokenizer).
pub fn model() -> String {
    fixture("tiny-k3-text").display().to_string()
}

/// The fixture's tokenizer.
pub fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::load(&fixture("tiny-k3-text")).unwrap())
}

/// What a chat run left: its output and its `--history` lines.
pub struct Chat {
    pub out: Output,
    pub history: Vec<Value>,
    pub dir: PathBuf,
}

impl Chat {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    /// The replies of the history (the assistant lines of the exchanges), in order.
    pub fn replies(&self) -> Vec<&Value> {
        self.exchange_lines()
            .into_iter()
            .filter(|l| l.get("role").and_then(Value::as_str) == Some("assistant"))
            .collect()
    }
    /// The input ids of each turn (on the first input line of the turn: the others have
    /// none, and the lines that start the chat carry no turn).
    pub fn inputs(&self) -> Vec<Vec<u32>> {
        self.exchange_lines()
            .into_iter()
            .filter(|l| l.get("role").and_then(Value::as_str) != Some("assistant"))
            .map(|l| ids(l, "ids"))
            .filter(|i| !i.is_empty())
            .collect()
    }
    /// The lines of the exchanges (messages with a `turn`), in order.
    pub fn exchange_lines(&self) -> Vec<&Value> {
        self.history
            .iter()
            .filter(|l| l.get("turn").is_some() && l.get("command").is_none())
            .collect()
    }
    /// The command lines (`{"command": …}`), in order.
    pub fn commands(&self) -> Vec<&Value> {
        self.history
            .iter()
            .filter(|l| l.get("command").is_some())
            .collect()
    }
}

/// The ids of `key` in `v`.
pub fn ids(v: &Value, key: &str) -> Vec<u32> {
    v.get(key)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no {key} in {}", v.to_json()))
        .iter()
        .map(|x| x.as_number().unwrap().as_u64().unwrap() as u32)
        .collect()
}

/// Runs `k3 chat <model> <args> --history H` in scratch directory `name` with `stdin` piped,
/// `K3_TEST_FORCE_IDS` set to `force` when given.
pub fn chat(name: &str, args: &[&str], stdin: &str, force: Option<&[u32]>) -> Chat {
    chat_in(&model(), name, args, stdin, force)
}

/// [`chat`] on the model directory `model_dir`.
pub fn chat_in(
    model_dir: &str,
    name: &str,
    args: &[&str],
    stdin: &str,
    force: Option<&[u32]>,
) -> Chat {
    let dir = scratch_dir(name);
    let history = dir.join("history.jsonl");
    let mut cmd = k3();
    cmd.arg("chat")
        .arg(model_dir)
        .args(args)
        .arg("--history")
        .arg(&history)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match force {
        Some(f) => {
            let s: Vec<String> = f.iter().map(u32::to_string).collect();
            cmd.env("K3_TEST_FORCE_IDS", s.join(","));
        }
        None => {
            cmd.env_remove("K3_TEST_FORCE_IDS");
        }
    }
    let mut child = cmd.spawn().expect("start k3 chat");
    // k3 may exit (a refusal) before it reads all of standard input
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    let history = std::fs::read_to_string(&history)
        .unwrap_or_default()
        .lines()
        .map(|l| k3::json::parse(l.as_bytes()).unwrap())
        .collect();
    Chat { out, history, dir }
}

/// The template's ids of a request body (a JSON array of messages or an object), with the
/// tools `tools` and the generation prompt when `gen`.
pub fn template_ids(body: &str, tools: Option<&str>, gen: bool) -> Vec<u32> {
    let body = k3::json::parse(body.as_bytes()).unwrap();
    let mut req = Request::from_json(&body).unwrap();
    if let Some(t) = tools {
        req.set_tools(k3::json::parse(t.as_bytes()).unwrap())
            .unwrap();
    }
    chat::encode(tok(), &chat::render(&req, gen).unwrap()).unwrap()
}

/// A request body of `messages` (JSON texts of messages, comma-separated), thinking off
/// when `off`.
pub fn body(messages: &str, off: bool) -> String {
    if off {
        format!(r#"{{"messages": [{messages}], "chat_template_kwargs": {{"thinking": false}}}}"#)
    } else {
        format!("[{messages}]")
    }
}

/// The ids the model generates when it writes assistant message `assistant` (JSON) after
/// `before` (messages, comma-separated): the rendering of the conversation with it, past the
/// generation prompt of the one without.
pub fn reply_ids(before: &str, assistant: &str, tools: Option<&str>, off: bool) -> Vec<u32> {
    let prompt = template_ids(&body(before, off), tools, true);
    let with = template_ids(&body(&format!("{before}, {assistant}"), off), tools, false);
    assert_eq!(&with[..prompt.len()], &prompt[..], "the prompt is a prefix");
    with[prompt.len()..].to_vec()
}

/// The ids of one text encoded on its own.
pub fn text_ids(t: &str) -> Vec<u32> {
    tok().encode(t, false)
}

/// The ids `k3 template` prints for `messages` (a JSON body) written to a file in `dir`.
pub fn k3_template(dir: &std::path::Path, messages: &str) -> Vec<u32> {
    let f = dir.join("template-messages.json");
    std::fs::write(&f, messages).unwrap();
    let m = model();
    let o = crate::support::run_k3(["template", "--tok", &m, "--messages", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .trim()
        .split(',')
        .map(|i| i.parse().unwrap())
        .collect()
}

/// The string `key` of `v` ("" when absent).
pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}
