//! What `k3 chat` shows while the model answers: the thinking channel apart from the answer
//! (dimmed on a terminal; between lines `<think>` and `</think>` when standard output is not
//! one), tool calls as one JSON line each, warnings on standard error, and on a terminal the
//! live line (prefill progress, ids so far, s/token, the time left to the reply limit).
//!
//! The live line never writes over the text. On standard error apart from the text, or at
//! the start of a text row, it rewrites its own line. When the text shares the terminal and
//! stops mid-row (the usual case: a slow model thinking at length), it goes on the row below
//! (made first, scrolling if needed), the cursor saved before and restored after, and is
//! erased the same way before the next text; only while the terminal waits to wrap or the
//! column is unknown ([`Column::settled`]) does it wait for the next step.

use super::column::Column;
use crate::chat::conversation::{call_id, Observer};
use crate::chat::ReplyEvent;
use crate::cli::progress::TerminalProgress;
use crate::error::{Error, Result};
use crate::json::{Object, Value};
use crate::run::Progress;
use std::io::Write;

/// Shows the live line on the row below the text: a free row made below (IND scrolls at the
/// bottom; CUU comes back to the same column), cursor saved (DECSC, with the text's
/// attributes), IND + CR to that row, plain attributes; then the text, erase to the end of
/// the row, and [`RESTORE`].
const BELOW: &str = "\x1bD\x1b[A\x1b7\x1bD\r\x1b[0m";
/// Ends [`BELOW`] and [`ERASE_BELOW`]: erase to the end of the row, restore the cursor and
/// the text's attributes (DECRC).
const RESTORE: &str = "\x1b[K\x1b8";
/// Erases the live line below the text (the cursor saved and restored around it).
const ERASE_BELOW: &str = "\x1b7\x1bD\r";

/// Where the live line is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    Hidden,
    /// On the cursor's own row (standard error apart, or a row the text has not begun).
    InPlace,
    /// On the row below the text.
    Below,
}

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
    /// The cursor's column after the text (for the live line below it).
    column: Column,
    live_shown: Live,
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
            column: Column::new(None, true),
            live_shown: Live::Hidden,
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
        self.column.advance(s);
        self.printed = true;
    }

    fn clear_live(&mut self) {
        match std::mem::replace(&mut self.live_shown, Live::Hidden) {
            Live::Hidden => {}
            Live::InPlace => crate::say!("\r\x1b[K"),
            Live::Below => crate::say!("{ERASE_BELOW}{RESTORE}"),
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

    /// Starts a turn: nothing shown yet for it. `at_row_start`: the cursor is at the start of
    /// an empty row (after the user's line, or the previous turn's last line), not after a
    /// prompt the typed-ahead line was echoed before.
    pub fn start(&mut self, exchange: usize, at_row_start: bool) {
        self.exchange = exchange;
        self.in_think = false;
        self.printed = false;
        self.names.clear();
        let width = if self.live && self.same_file {
            crate::io::sys::stderr_columns()
        } else {
            None
        };
        self.column = Column::new(width, at_row_start);
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
        if !self.live {
            return;
        }
        let left = match self.max_reply {
            Some(m) => format!(
                ", about {:.0} s to the reply limit",
                (m.saturating_sub(generated as u64)) as f64 * seconds
            ),
            None => String::new(),
        };
        let mut line = format!("[{generated} ids, {seconds:.2} s/token{left}]");
        if !self.same_file || self.column.at_row_start() {
            crate::say!("\r{line}\x1b[K");
            self.live_shown = Live::InPlace;
        } else if self.column.settled() {
            // one row: a line that wrapped would scroll and move the saved cursor
            if let Some(w) = crate::io::sys::stderr_columns() {
                line.truncate(w.saturating_sub(1));
            }
            crate::say!("{BELOW}{line}{RESTORE}");
            self.live_shown = Live::Below;
        }
    }

    fn interrupted(&mut self) -> bool {
        crate::io::signal::take_interrupt()
    }
}
