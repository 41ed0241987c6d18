//! What `k3 chat` shows while the model answers: the thinking channel apart from the answer
//! (dimmed on a terminal; between lines `<think>` and `</think>` when standard output is not
//! one), tool calls as one JSON line each, warnings on standard error, and on a terminal the
//! live line (prefill progress, ids so far, s/token, the time left to the reply limit).

use crate::chat::conversation::{call_id, Observer};
use crate::chat::ReplyEvent;
use crate::cli::progress::TerminalProgress;
use crate::error::{Error, Result};
use crate::json::{Object, Value};
use crate::run::Progress;
use std::io::Write;

/// The chat's output for one turn after another.
pub struct Display {
    /// Standard output is a terminal (dim the thinking).
    tty: bool,
    /// Show the live line and the prefill progress (standard error is a terminal).
    live: bool,
    /// Standard output and standard error are one file: the live line only at line starts.
    same_file: bool,
    /// `--max-reply`, for the time left.
    max_reply: Option<u64>,
    progress: TerminalProgress,
    /// The exchange being answered (1-based), for the call ids.
    pub exchange: usize,
    in_think: bool,
    at_line_start: bool,
    live_shown: bool,
    printed: bool,
    names: Vec<(usize, String)>,
    /// The first failed write to standard output (the turn goes on; the caller reports it).
    pub failed: Option<Error>,
}

impl Display {
    /// A display; `live` for the live line (a terminal on standard error, not `--quiet` or
    /// `--no-progress`).
    pub fn new(live: bool, max_reply: Option<u64>) -> Display {
        Display {
            tty: crate::io::sys::stdout_is_terminal(),
            live,
            same_file: crate::io::sys::stdout_is_stderr(),
            max_reply,
            progress: TerminalProgress::default(),
            exchange: 1,
            in_think: false,
            at_line_start: true,
            live_shown: false,
            printed: false,
            names: Vec::new(),
            failed: None,
        }
    }

    fn out(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        self.clear_live();
        let mut o = std::io::stdout().lock();
        if let Err(e) = o.write_all(s.as_bytes()).and_then(|_| o.flush()) {
            if self.failed.is_none() {
                self.failed = Some(crate::cli::stdout_error(e));
            }
        }
        self.at_line_start = s.ends_with('\n');
        self.printed = true;
    }

    fn clear_live(&mut self) {
        if self.live_shown {
            crate::say!("\r\x1b[K");
            self.live_shown = false;
        }
    }

    fn end_think(&mut self) {
        if self.in_think {
            self.in_think = false;
            if self.tty {
                self.out("\x1b[0m\n\n");
            } else {
                let nl = if self.at_line_start { "" } else { "\n" };
                self.out(&format!("{nl}</think>\n"));
            }
        }
    }

    /// Starts a turn: nothing shown yet for it.
    pub fn start(&mut self, exchange: usize) {
        self.exchange = exchange;
        self.in_think = false;
        self.printed = false;
        self.names.clear();
    }

    /// Ends the turn's output: the thinking closed, the answer's line ended.
    pub fn finish(&mut self) {
        self.end_think();
        self.clear_live();
        if self.printed && !self.at_line_start {
            self.out("\n");
        }
    }

    /// Prints one tool call as a JSON line: `{"id", "name", "arguments"}`.
    fn call(&mut self, index: usize, arguments: &str) {
        let name = self
            .names
            .iter()
            .find(|(i, _)| *i == index)
            .map_or(String::new(), |(_, n)| n.clone());
        let args = crate::json::parse(arguments.as_bytes()).unwrap_or(Value::from(arguments));
        let line = Value::Object(
            Object::new()
                .with("id", call_id(self.exchange, index))
                .with("name", name)
                .with("arguments", args),
        )
        .to_json();
        let nl = if self.at_line_start { "" } else { "\n" };
        self.out(&format!("{nl}{line}\n"));
    }

    /// The result of a failed write, if any (exit 4), cleared.
    pub fn take_failure(&mut self) -> Result<()> {
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Observer for Display {
    fn progress(&mut self) -> Option<&mut dyn Progress> {
        if self.live {
            Some(&mut self.progress)
        } else {
            None
        }
    }

    fn event(&mut self, e: &ReplyEvent) {
        match e {
            ReplyEvent::Reasoning(t) => {
                if !self.in_think {
                    self.in_think = true;
                    self.out(if self.tty { "\x1b[2m" } else { "<think>\n" });
                }
                self.out(t);
            }
            ReplyEvent::Content(t) => {
                self.end_think();
                self.out(t);
            }
            ReplyEvent::ToolCallStart { index, name } => {
                self.names.push((*index, name.clone()));
            }
            ReplyEvent::ToolCallEnd { index, arguments } => {
                self.end_think();
                self.call(*index, arguments);
            }
            ReplyEvent::Warning(w) => {
                self.clear_live();
                crate::sayln!("{}warning: {w}", if self.at_line_start { "" } else { "\n" });
            }
            ReplyEvent::ToolCallArgument { .. } | ReplyEvent::EndOfTurn(_) => {}
        }
    }

    fn step(&mut self, generated: usize, seconds: f64) {
        if !self.live || (self.same_file && !self.at_line_start) {
            return;
        }
        let left = match self.max_reply {
            Some(m) => format!(
                ", about {:.0} s to the reply limit",
                (m.saturating_sub(generated as u64)) as f64 * seconds
            ),
            None => String::new(),
        };
        crate::say!("\r[{generated} ids, {seconds:.2} s/token{left}]\x1b[K");
        self.live_shown = true;
    }

    fn interrupted(&mut self) -> bool {
        crate::io::signal::take_interrupt()
    }
}
