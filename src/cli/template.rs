//! `k3 template --tok DIR --messages FILE [--tools FILE] [--thinking low|high|max|off]
//! [--no-generation-prompt]`: prints the chat-template ids of a conversation
//! (docs/chat.md), comma-separated, without running a model.

use super::args::{Args, Spec};
use crate::chat::{self, Request};
use crate::error::{Error, Result};
use crate::json::{Object, Value};
use crate::tokenizer::Tokenizer;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) const SPECS: &[Spec] = &[
    Spec::Value("tok"),
    Spec::Value("messages"),
    Spec::Value("tools"),
    Spec::Value("thinking"),
    Spec::Switch("no-generation-prompt"),
];

const USAGE: &str = "\
usage: k3 template --tok DIR --messages FILE [--tools FILE] [--thinking low|high|max|off]
                   [--no-generation-prompt]
  Prints the chat-template ids of a conversation (docs/chat.md), comma-separated.
  --tok DIR               tokenizer directory (tiktoken.model, tokenizer_config.json)
  --messages FILE         a JSON array of messages, or a request body with `messages`, `tools`,
                          `tool_choice`, `response_format`, `reasoning_effort`,
                          `chat_template_kwargs` (`thinking`, `thinking_effort`); other keys ignored
  --tools FILE            a JSON array of tools (replaces the body's `tools`)
                          (`-` reads standard input, for one of --messages and --tools)
  --thinking EFFORT|off   thinking effort low, high or max (default: the body's, else max), or off
  --no-generation-prompt  do not open the assistant turn at the end
";

/// Runs `k3 template`. Errors (exit 2): a missing flag, a file that is not JSON (byte
/// offset), a request the template refuses (the message index and field).
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(a) = Args::parse_or_help(argv, SPECS, USAGE)? else {
        return Ok(());
    };
    if let Some(p) = a.positional.first() {
        return Err(Error::invalid(format!(
            "template: unexpected argument `{}` (see k3 template --help)",
            p.to_string_lossy()
        )));
    }
    let required = |flag: &str, what: &str| {
        a.value_os(flag)
            .map(PathBuf::from)
            .ok_or_else(|| Error::invalid(format!("template: flag `--{flag} {what}` is required")))
    };
    let tok_dir = required("tok", "DIR")?;
    let messages = required("messages", "FILE")?;
    let tools_path = a.value_os("tools").map(PathBuf::from);
    if is_stdin(&messages) && tools_path.as_deref().is_some_and(is_stdin) {
        return Err(Error::invalid(
            "template: `--messages -` and `--tools -` both read standard input; give one of them a file",
        ));
    }
    let mut body = read_json(&messages, true)?;
    let ctx = |e: Error| e.context(label(&messages));
    if let Some(t) = a.value("thinking")? {
        let kw = match t.as_str() {
            "off" => Object::new().with("thinking", false),
            e if chat::Effort::parse(e).is_some() => Object::new()
                .with("thinking", true)
                .with("thinking_effort", e),
            other => {
                return Err(Error::invalid(format!(
                "flag `--thinking`: unsupported value `{other}` (expected low, high, max or off)"
            )))
            }
        };
        set_thinking(&mut body, kw).map_err(ctx)?;
    }
    let mut req = Request::from_json(&body).map_err(ctx)?;
    if let Some(path) = tools_path {
        let tools = read_json(&path, false)?;
        req.set_tools(tools).map_err(|e| e.context(label(&path)))?;
    }
    let segments = chat::render(&req, !a.switch("no-generation-prompt")).map_err(ctx)?;
    let tok = Tokenizer::load(&tok_dir)?;
    let ids = chat::encode(&tok, &segments)?;
    let line = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    crate::cli::write_stdout(format!("{line}\n").as_bytes())
}

/// `--thinking EFFORT|off` as template arguments `kw` merged into the body's
/// `chat_template_kwargs` (a bare message array becomes `{"messages": …}`).
///
/// Errors: `chat_template_kwargs` present but not an object.
fn set_thinking(body: &mut Value, kw: Object) -> Result<()> {
    if let Value::Array(_) = body {
        *body = Value::Object(Object::new().with("messages", std::mem::take(body)));
    }
    if let Some(o) = body.as_object_mut() {
        let mut merged = match o.remove("chat_template_kwargs") {
            Some(Value::Object(k)) => k,
            None | Some(Value::Null) => Object::new(),
            Some(v) => {
                return Err(Error::invalid(format!(
                    "chat_template_kwargs: expected object, found {}",
                    v.type_name()
                )))
            }
        };
        for (k, v) in kw.iter() {
            merged.insert(k, v.clone());
        }
        o.insert("chat_template_kwargs", merged);
    }
    Ok(())
}

/// `-`: the flag reads standard input.
fn is_stdin(path: &Path) -> bool {
    path == Path::new("-")
}

/// How errors name an input: its path, or `standard input` for `-`.
pub(crate) fn label(path: &Path) -> String {
    if is_stdin(path) {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

/// Reads a JSON file (`-`: standard input); with `request`, a parse error also names the
/// field it stopped in.
pub(crate) fn read_json(path: &Path, request: bool) -> Result<Value> {
    let bytes = super::tokenize::read_file(path)?;
    let name = label(path);
    crate::json::parse(&bytes).map_err(|e| {
        match chat::messages::failing_path(&bytes).filter(|_| request) {
            Some(field) => Error::invalid(format!(
                "{name}: {field}: invalid JSON at byte {}: {}",
                e.offset, e.expected
            )),
            None => e.into_error(&name, 0),
        }
    })
}
