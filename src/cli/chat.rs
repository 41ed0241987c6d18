//! `k3 chat <model_dir> [run options]` (ENGINE.md §9, TOKENIZER.md §10–§13): a conversation
//! on the terminal, or scripted through a pipe. The conversation logic is the library's
//! [`Conversation`]; this module reads the flags and the input, shows the answers
//! ([`display`]) and keeps the files (`--history`, `/save`, `/load`: [`files`]).

use super::args::{Args, Spec};
use crate::chat::conversation::transcript::{
    history_command, history_start, parse_thinking, thinking_name, HistoryCommand,
};
use crate::chat::conversation::{tool_message, user_message, Conversation, ConversationOptions};
use crate::chat::{Message, Request, Role};
use crate::error::{Error, ErrorKind, Result};
use crate::json::Value;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

mod column;
mod display;
mod files;
mod input;
mod lineedit;

use crate::generate::prefix_cache::PrefixCache;
use display::Display;
use files::History;
use input::{Entry, Lines, Reader, Source};

/// Chat's own flags.
const CHAT_SPECS: &[Spec] = &[
    Spec::Value("system"),
    Spec::Value("system-file"),
    Spec::Value("tools"),
    Spec::Value("thinking"),
    Spec::Value("max-reply"),
    Spec::Value("history"),
    Spec::Value("messages"),
    Spec::Value("prefix-cache"),
    Spec::Value("prefix-cache-gb"),
    Spec::Value("json-schema"),
];

/// The run options chat takes (memory, compute, sampling, the context), as the run spells them.
const RUN_FLAGS: &[&str] = &[
    "ctx",
    "tok",
    "config",
    "preset",
    "mem-gb",
    "trunk",
    "trunk-gb",
    "trunk-ring",
    "trunk-pieces",
    "trunk-codec",
    "io-depth",
    "cache-gb",
    "prefill-chunk",
    "cache-policy",
    "temperature",
    "top-p",
    "top-k",
    "min-p",
    "seed",
    "spec",
    "threads",
    "isa",
    "layers",
    "quiet",
    "no-progress",
    "help",
];

/// Every flag `k3 chat` accepts: its own, then the run options it shares.
pub(crate) fn specs() -> Vec<Spec> {
    let run = super::run::SPECS
        .iter()
        .filter(|s| RUN_FLAGS.contains(&s.name()));
    CHAT_SPECS.iter().chain(run).copied().collect()
}

const USAGE: &str = "\
usage: k3 chat <model_dir> [options]
  A conversation in the model's chat template (docs/cli.md#k3-chat): each turn prefills only
  its new ids. On a terminal type messages (/help for the commands, Ctrl-D leaves); from a
  pipe every line is a message, answered in turn, and k3 exits at the end of input.
  --system TEXT | --system-file PATH   the system prompt (a file's last line ending is
                       dropped: an editor ends a file with one)
  --json-schema FILE   each reply's response is one JSON value of this schema (constrained)
  --tools FILE         a JSON array of tools; the model's calls are printed as JSON lines and
                       the next line (or /result FILE) is the tool's result
  --thinking EFFORT|off   thinking effort low, high or max (default max), or off
  --max-reply N        ids per answer at most (default: until the end of turn or the context)
  --messages FILE      start from a conversation (an array of messages or a request body) and
                       answer it
  --history FILE       append the chat as JSON lines, to replay it: its start (settings, the
                       system prompt, the --messages), every message (role, content,
                       reasoning, tool calls, ids, seconds, turn) and the commands that
                       change it (/undo, /reset, /think, /load)
  --prefix-cache DIR   keep each turn's prompt state as a state file in DIR and start from the
                       longest one the conversation extends, across runs (docs/cli.md);
                       --prefix-cache-gb X bounds the files (decimal GB, default 20)
  --ctx N              positions of the conversation (default: the largest that fits, printed)
  --temperature T, --top-p P, --top-k K, --min-p M   sampling (default: generation_config.json,
                       else 1.0, 0.95, 0 off; min-p 0);  --seed S  (default: from the OS, printed)
  --spec K             speculative decoding: up to K drafted ids per sweep (0 to 64; default 0 =
                       off); the same answers as without it (README: when it helps)
  --tok DIR, --config PATH, --preset NAME, --mem-gb X, --trunk DIR, --trunk-gb X,
  --trunk-ring N, --trunk-pieces M, --trunk-codec auto|on|off, --io-depth N, --cache-gb X,
  --cache-policy NAME, --prefill-chunk N, --threads N, --isa NAME, --layers N
                       as for a run (k3 help run)
  --quiet, --no-progress   no plan lines / no live line
";

/// The chat's own flags, checked before the model is opened.
struct ChatFlags {
    req: Request,
    /// `--json-schema` or `--tools`: replies are constrained (ENGINE.md §8).
    structured: bool,
    max_reply: Option<u64>,
    history: Option<History>,
    /// What the chat reads (and its `--history`): `/save` may not write there.
    inputs: files::Inputs,
    /// `--messages` was given: answer it first.
    answer_first: bool,
    /// The user messages of the `--history` file, oldest first (Up recalls them).
    past_lines: Vec<String>,
}

/// Reads `--system`/`--system-file`, `--messages`, `--tools`, `--thinking`, `--max-reply`
/// and `--history` (exit 2 naming the flag, the file, the message index and field).
fn chat_flags(a: &Args) -> Result<ChatFlags> {
    let system = system_prompt(a)?;
    let messages = a.value_os("messages").map(PathBuf::from);
    let mut req = match &messages {
        Some(p) => {
            let body = super::template::read_json(p, true)?;
            let req =
                Request::from_json(&body).map_err(|e| e.context(super::template::label(p)))?;
            // an empty conversation would have the model answer nothing (and run on)
            if req.messages.is_empty() {
                return Err(Error::invalid(format!(
                    "{}: messages: empty; give at least one message, or leave out --messages \
                     to start a conversation",
                    super::template::label(p)
                )));
            }
            req
        }
        None => Request::from_json(&Value::Array(Vec::new()))?,
    };
    if let (Some((flag, _)), Some(p)) = (&system, &messages) {
        // two system prompts would both reach the model: say which to keep
        let own = req
            .messages
            .iter()
            .position(|m| matches!(m.role, Role::System | Role::Developer) && m.content.is_some());
        if let Some(k) = own {
            return Err(Error::invalid(format!(
                "flags `{flag}` and `--messages {}`: the file has its own system message \
                 (messages[{k}]); give one system prompt (leave out `{flag}`, or that message)",
                p.display()
            )));
        }
    }
    if let Some((_, s)) = system {
        req.messages.insert(0, system_message(&s));
    }
    if let Some(p) = a.value_os("tools").map(PathBuf::from) {
        let tools = super::template::read_json(&p, false)?;
        req.set_tools(tools)
            .map_err(|e| e.context(super::template::label(&p)))?;
    }
    // `--json-schema FILE`: every reply's response channel is one JSON value of it (the
    // template's response-format message asks for it too, as the server's response_format)
    let json_schema = match a.value_os("json-schema") {
        Some(p) => Some(super::run::schema::read(std::path::Path::new(&p))?),
        None => None,
    };
    if let Some(f) = &json_schema {
        req.response_format = Some(crate::chat::ResponseFormat::JsonSchema(f.json.clone()));
    }
    let structured = json_schema.is_some() || req.tools.is_some();
    if let Some(t) = a.value("thinking")? {
        let t = parse_thinking(&t).ok_or_else(|| {
            Error::invalid(format!(
                "flag `--thinking {t}`: unsupported value (expected low, high, max or off)"
            ))
        })?;
        req.set_thinking(t);
    }
    let max_reply = a.parsed::<u64>("max-reply", "a positive integer")?;
    if max_reply == Some(0) {
        return Err(Error::invalid("flag `--max-reply 0`: must be at least 1"));
    }
    let mut inputs = files::Inputs::from_args(a);
    let history = match a.value_os("history") {
        Some(p) => Some(History::open(&PathBuf::from(p), &inputs)?),
        None => None,
    };
    let past_lines = history
        .as_ref()
        .map_or_else(Vec::new, |h| files::user_lines(h.path()));
    if let Some(h) = &history {
        inputs.add_file(h.path());
    }
    Ok(ChatFlags {
        structured,
        req,
        max_reply,
        history,
        inputs,
        answer_first: messages.is_some(),
        past_lines,
    })
}

/// `--system TEXT` or `--system-file PATH` (one line ending stripped: an editor ends a file
/// with one) with the flag's name, or None.
///
/// Errors (exit 2): both flags; an unreadable or non-UTF-8 file (naming it).
fn system_prompt(a: &Args) -> Result<Option<(&'static str, String)>> {
    if a.value_os("system").is_some() && a.value_os("system-file").is_some() {
        return Err(Error::invalid(
            "flags `--system` and `--system-file`: give one system prompt",
        ));
    }
    let Some(p) = a.value_os("system-file") else {
        return Ok(a.value("system")?.map(|s| ("--system", s)));
    };
    let p = PathBuf::from(p);
    let bytes = super::tokenize::read_file(&p)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::invalid(format!(
            "flag `--system-file {}`: not UTF-8 (invalid byte at offset {})",
            p.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    let text = match text.strip_suffix('\n') {
        Some(t) => t.strip_suffix('\r').unwrap_or(t).to_string(),
        None => text,
    };
    Ok(Some(("--system-file", text)))
}

fn system_message(text: &str) -> Message {
    let mut m = user_message(text);
    m.role = Role::System;
    m
}

/// Runs `k3 chat`. Errors: bad flags or input files (exit 2), the plan (exit 3), a failed
/// read (exit 4); with piped input also a turn's error (a turn past the context: exit 3, or
/// 2 with an explicit `--ctx`); interactively a turn's error is a line and the chat goes on.
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(a) = Args::parse_or_help(argv, &specs(), USAGE)? else {
        return Ok(());
    };
    let flags = chat_flags(&a)?;
    let prefix_cache = super::serve::prefix_cache_flags(&a)?;
    let mut model = super::run::chat_open::open(a)?;
    let opts = ConversationOptions {
        settings: model.settings,
        ctx: model.ctx,
        max_reply: flags.max_reply,
        end_ids: model.end_ids.clone(),
        vocab: model.vocab,
        structured: if flags.structured {
            let specials = crate::constrain::Specials::from_tokenizer(&model.tok).ok_or_else(|| {
                Error::invalid("--json-schema/--tools: the tokenizer lacks the chat template's special tokens")
            })?;
            Some(crate::chat::conversation::Structured {
                vocab: std::sync::Arc::new(crate::constrain::Vocabulary::new(&model.tok)),
                specials,
            })
        } else {
            None
        },
    };
    let interactive = std::io::stdin().is_terminal();
    let quiet = model.quiet;
    let s = &model.settings;
    if model.seed_from_os && !quiet {
        crate::sayln!(
            "seed: {} (from the OS; give --seed {} to repeat this chat)",
            s.seed,
            s.seed
        );
    }
    if !quiet {
        crate::sayln!(
            "chat: thinking {}, context {} positions, temperature {}, top-p {}, top-k {}, min-p {}",
            thinking_name(flags.req.thinking),
            model.ctx,
            s.temperature,
            s.top_p,
            s.top_k,
            s.min_p
        );
    }
    if interactive {
        crate::io::signal::catch_interrupt();
        crate::sayln!("type a message; /help for the commands, Ctrl-D to leave");
    }
    let live = !quiet && !model.no_progress && crate::io::sys::stderr_is_terminal();
    let mut chat = Chat {
        conv: Conversation::new(flags.req, opts),
        display: Display::new(live, flags.max_reply),
        history: flags.history,
        inputs: flags.inputs,
        interactive,
        quiet,
        results: Vec::new(),
        typed_ahead: false,
    };
    if let Some((dir, bytes)) = prefix_cache {
        let id = model.identity.clone();
        chat.conv.disk = Some(PrefixCache::open(&dir, id, bytes, "k3 chat")?);
    }
    if let Some(h) = &mut chat.history {
        h.lines(&history_start(&chat.conv, flags.max_reply))?;
    }
    if flags.answer_first {
        chat.turn(&mut model, Vec::new())?;
    }
    // on a terminal the line editor, which draws on standard error (where the prompts go);
    // else plain lines, as a pipe gives them
    let source: Box<dyn Source> = if interactive && crate::io::sys::stderr_is_terminal() {
        let past = flags.past_lines;
        Box::new(lineedit::Terminal::new(past))
    } else {
        Box::new(Lines::new(std::io::stdin().lock(), interactive))
    };
    let mut reader = Reader::new(source);
    loop {
        let entry = match reader.next(&chat.prompt()) {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) if interactive && e.kind == ErrorKind::Invalid => {
                crate::sayln!("k3: error: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        // a line typed ahead (complete before the prompt) was echoed before it: the answer
        // then starts after the prompt, mid-row
        chat.typed_ahead = interactive && reader.typed_ahead();
        if !chat.entry(&mut model, entry)? {
            break;
        }
    }
    if interactive {
        crate::sayln!();
    }
    Ok(())
}

/// The running chat: the conversation, its display and files, and the tool results being
/// collected.
struct Chat {
    conv: Conversation,
    display: Display,
    history: Option<History>,
    /// What `/save` may not write over ([`files::Inputs`]).
    inputs: files::Inputs,
    interactive: bool,
    quiet: bool,
    /// Results of the last reply's calls gathered so far.
    results: Vec<Message>,
    /// The entry's last line was typed ahead of its prompt (the cursor is not at a row start).
    typed_ahead: bool,
}

impl Chat {
    /// The prompt on a terminal: `> `, or which call's result is expected.
    fn prompt(&self) -> String {
        let calls = self.conv.pending_calls();
        match calls.get(self.results.len()) {
            Some(c) => format!("result of {} ({})> ", c.id.as_deref().unwrap_or(""), c.name),
            None => "> ".to_string(),
        }
    }

    /// Handles one entry; false to leave.
    fn entry(&mut self, model: &mut super::run::chat_open::ChatModel, e: Entry) -> Result<bool> {
        let res = match e {
            Entry::Exit => return Ok(false),
            Entry::Help => {
                crate::say!("{}", input::COMMANDS);
                Ok(())
            }
            // a blank line is no message (a stray Enter, the gaps of a piped file); with a
            // tool call waiting it is that call's (empty) result
            Entry::Text(t) if t.trim().is_empty() && self.conv.pending_calls().is_empty() => Ok(()),
            Entry::Text(t) => self.text(model, t),
            Entry::Result(_) if self.conv.pending_calls().is_empty() => Err(Error::invalid(
                "/result: no tool call is waiting for a result (send a message instead)",
            )),
            Entry::Result(path) => files::read_result(&path).and_then(|t| self.text(model, t)),
            Entry::Reset => {
                self.conv.reset();
                self.results.clear();
                self.say("the conversation starts again from the system prompt");
                self.record(HistoryCommand::Reset)
            }
            Entry::Undo => self.undo(),
            Entry::Think(arg) => self.think(model, &arg),
            Entry::Save(path) => files::save(&self.conv, model, &path, &self.inputs).map(|()| {
                self.say(&format!(
                    "saved {path} (state) and {path}.json (transcript)"
                ));
            }),
            Entry::Load(path) => files::load(model, &self.conv.opts, &path).and_then(|mut c| {
                // the prefix cache stays with the chat
                c.disk = self.conv.disk.take();
                self.conv = c;
                self.results.clear();
                let s = &self.conv.opts.settings;
                // the saved settings replace this chat's: say what the chat now runs with
                self.say(&format!(
                    "loaded {path}: the conversation holds {} ids; restored thinking {}, \
                     temperature {}, top-p {}, top-k {}, min-p {}, seed {}",
                    self.conv.len(),
                    thinking_name(self.conv.req.thinking),
                    s.temperature,
                    s.top_p,
                    s.top_k,
                    s.min_p,
                    s.seed
                ));
                self.record(HistoryCommand::Load(&path))
            }),
            Entry::Stats => {
                crate::say!("{}", files::stats(&self.conv));
                Ok(())
            }
        };
        self.after(res, model.ctx_explicit)?;
        Ok(true)
    }

    /// A turn's or a command's error: a line on a terminal; with piped input the exit (a turn
    /// past a `--ctx` the user gave is exit 2, past the planned one exit 3).
    fn after(&mut self, res: Result<()>, ctx_explicit: bool) -> Result<()> {
        match res {
            Ok(()) => Ok(()),
            Err(e) if self.interactive && e.kind != ErrorKind::Io => {
                crate::sayln!("k3: error: {e}");
                Ok(())
            }
            Err(e) if e.kind == ErrorKind::Resources && ctx_explicit => {
                Err(Error::invalid(e.message))
            }
            Err(e) => Err(e),
        }
    }

    /// `/undo`, and its history line.
    fn undo(&mut self) -> Result<()> {
        self.results.clear();
        let turn = self.conv.exchanges.len();
        if !self.conv.undo()? {
            self.say("nothing to undo");
            return Ok(());
        }
        self.say(&format!(
            "undone: the conversation holds {} ids",
            self.conv.len()
        ));
        self.record(HistoryCommand::Undo { turn })
    }

    /// Appends the `--history` line of a command that changed the conversation.
    fn record(&mut self, command: HistoryCommand<'_>) -> Result<()> {
        match &mut self.history {
            Some(h) => h.lines(&[history_command(command, &self.conv)]),
            None => Ok(()),
        }
    }

    fn say(&self, s: &str) {
        if !self.quiet || self.interactive {
            crate::sayln!("{s}");
        }
    }

    /// A line of text: the next tool result while calls are pending, else a user message.
    fn text(&mut self, model: &mut super::run::chat_open::ChatModel, t: String) -> Result<()> {
        let calls = self.conv.pending_calls().to_vec();
        if calls.is_empty() {
            return self.turn(model, vec![user_message(&t)]);
        }
        self.results
            .push(tool_message(&calls[self.results.len()], &t));
        if self.results.len() < calls.len() {
            return Ok(());
        }
        let results = std::mem::take(&mut self.results);
        self.turn(model, results)
    }

    /// Sends `input` and shows the answer, the turn's figures, and its history lines.
    fn turn(
        &mut self,
        model: &mut super::run::chat_open::ChatModel,
        input: Vec<Message>,
    ) -> Result<()> {
        crate::io::signal::take_interrupt();
        self.display
            .start(self.conv.exchanges.len() + 1, !self.typed_ahead);
        let res = self
            .conv
            .send(&mut model.sess, &model.tok, input, &mut self.display);
        self.display.finish();
        res?;
        let x = self.conv.exchanges.last().expect("a turn ran");
        if !self.quiet {
            crate::sayln!(
                "[turn {}: prefilled {} new ids, {} reply ids, stop: {}; the conversation holds {} of {} positions]",
                self.conv.exchanges.len(),
                x.prefilled,
                x.reply_ids.len(),
                x.end.name(),
                self.conv.len(),
                self.conv.opts.ctx
            );
        }
        if let Some(h) = &mut self.history {
            h.append(x, self.conv.exchanges.len())?;
        }
        self.display.take_failure()
    }

    /// `/think EFFORT|off`.
    fn think(&mut self, model: &mut super::run::chat_open::ChatModel, arg: &str) -> Result<()> {
        let t = parse_thinking(arg).ok_or_else(|| {
            Error::invalid(format!(
                "/think {arg}: unsupported value (expected low, high, max or off)"
            ))
        })?;
        self.results.clear();
        let n = self.conv.set_thinking(&model.tok, t)?;
        self.record(HistoryCommand::Think(t))?;
        if n > 0 {
            self.say(&format!(
                "thinking {}: the conversation ({n} ids) is encoded again and prefilled again at the next turn",
                thinking_name(self.conv.req.thinking)
            ));
        } else {
            self.say(&format!(
                "thinking {}",
                thinking_name(self.conv.req.thinking)
            ));
        }
        Ok(())
    }
}
