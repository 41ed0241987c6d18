//! `k3 chat`'s line editor on a terminal: keys as a shell reads them (Left/Right, Home/End,
//! Backspace/Delete, Ctrl-A/E/K/U/W/Y, Up/Down through the history, a bracketed paste as one
//! piece of text with its line breaks), the cursor stepping over whole characters (a wide
//! character is one step of two cells, a combining mark none).
//!
//! [`Editor`] is the pure part (keys in, text and the bytes that draw it out); [`Terminal`]
//! reads the keys from standard input in raw mode ([`crate::io::tty`], restored after each
//! line and on every way out) and draws on standard error, where the chat's prompts go.

mod history;
mod keys;
mod line;
mod screen;

pub use history::History;
pub use keys::{Decoder, Key};
pub use line::Line;

use super::input::{Read, Source};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::io::Write;

/// What a key did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The text or the cursor may have changed: draw again.
    Edit,
    /// The line is read.
    Done(Read),
    /// Ctrl-Z: stop the process.
    Suspend,
    /// Ctrl-L: clear the screen.
    Clear,
}

/// The line being edited, the history, what was cut last, and what the screen shows.
#[derive(Debug, Default)]
pub struct Editor {
    line: Line,
    history: History,
    cut: String,
    prompt: String,
    /// The cursor's row in the last drawing, from the prompt's row.
    row: usize,
}

impl Editor {
    /// An editor whose Up recalls `past` (oldest first) before this session's lines.
    pub fn new(past: Vec<String>) -> Editor {
        Editor {
            history: History::new(past),
            ..Editor::default()
        }
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        self.line.text()
    }

    /// Starts reading a line after `prompt`.
    pub fn start(&mut self, prompt: &str) {
        self.line = Line::default();
        self.history.start();
        self.prompt = prompt.to_string();
        self.row = 0;
    }

    /// Applies one key.
    pub fn key(&mut self, k: Key) -> Step {
        let l = &mut self.line;
        match k {
            Key::Char(c) => l.insert(c.encode_utf8(&mut [0; 4])),
            Key::Enter => {
                let text = l.take();
                self.history.push(text.clone());
                return Step::Done(Read::Line(text));
            }
            Key::Interrupt => return Step::Done(Read::Cancel),
            Key::CtrlD if l.text().is_empty() => return Step::Done(Read::End),
            Key::CtrlD | Key::Delete => l.delete(),
            Key::Backspace => l.backspace(),
            Key::Left => l.left(),
            Key::Right => l.right(),
            Key::Home => l.home(),
            Key::End => l.end(),
            Key::WordLeft => l.word_left(),
            Key::WordRight => l.word_right(),
            Key::KillEnd | Key::KillStart | Key::KillWord => {
                let cut = match k {
                    Key::KillEnd => l.kill_end(),
                    Key::KillStart => l.kill_start(),
                    _ => l.kill_word(),
                };
                if !cut.is_empty() {
                    self.cut = cut;
                }
            }
            Key::Yank => l.insert(&self.cut),
            Key::Up | Key::Down => {
                let other = if k == Key::Up {
                    self.history.up(l.text())
                } else {
                    self.history.down(l.text())
                };
                if let Some(t) = other {
                    l.set(t);
                }
            }
            Key::Suspend => return Step::Suspend,
            Key::Clear => return Step::Clear,
        }
        Step::Edit
    }

    /// The bytes that draw the prompt and the line again, the cursor in place, on a
    /// terminal `cols` cells wide.
    pub fn draw(&mut self, cols: usize) -> String {
        let (s, row) = screen::draw(
            &self.prompt,
            self.line.text(),
            self.line.cursor(),
            cols,
            self.row,
        );
        self.row = row;
        s
    }

    /// The bytes that end the line on screen: drawn with the cursor at its end, `mark`
    /// after it (`^C` for a dropped line), then the next row. The text is `shown`, as it
    /// was when the line was read (the editor's own line is already empty).
    pub fn finish(&mut self, shown: &str, mark: &str, cols: usize) -> String {
        let (mut s, _) = screen::draw(&self.prompt, shown, shown.len(), cols, self.row);
        s.push_str(mark);
        s.push_str("\r\n");
        self.row = 0;
        s
    }

    /// The screen was cleared, or the process continued below what the shell wrote: the
    /// next drawing starts on the cursor's row.
    pub fn forget_rows(&mut self) {
        self.row = 0;
    }
}

/// Lines typed on a terminal, read with the [`Editor`].
pub struct Terminal {
    ed: Editor,
    decoder: Decoder,
    /// Keys read but not yet used (typed ahead of the next line).
    keys: VecDeque<Key>,
}

impl Terminal {
    /// The editor on standard input and standard error (both terminals); Up recalls `past`.
    /// Makes every way out of the process restore the terminal ([`crate::io::tty`]).
    pub fn new(past: Vec<String>) -> Terminal {
        crate::io::tty::restore_on_exit();
        Terminal {
            ed: Editor::new(past),
            decoder: Decoder::default(),
            keys: VecDeque::new(),
        }
    }

    fn cols() -> usize {
        crate::io::tty::columns(2).unwrap_or(80)
    }

    fn show(s: &str) {
        let mut e = std::io::stderr();
        let _ = e.write_all(s.as_bytes()).and_then(|()| e.flush());
    }
}

impl Source for Terminal {
    fn read(&mut self, prompt: &str) -> Result<Read> {
        use std::io::Read as _;
        let raw = crate::io::tty::RawMode::enter().map_err(|e| {
            Error::io(format!(
                "standard input: cannot set the terminal's mode: {e}"
            ))
        })?;
        self.ed.start(prompt);
        let mut dirty = true;
        let mut buf = [0u8; 4096];
        loop {
            while let Some(k) = self.keys.pop_front() {
                let before = self.ed.text().to_string();
                match self.ed.key(k) {
                    Step::Edit => dirty = true,
                    Step::Done(read) => {
                        let (shown, mark) = match &read {
                            Read::Line(t) => (t.as_str(), ""),
                            Read::Cancel => (before.as_str(), "^C"),
                            Read::End => ("", ""),
                        };
                        if read != Read::End {
                            Self::show(&self.ed.finish(shown, mark, Self::cols()));
                        } else if dirty {
                            // Ctrl-D after an edit in the same read: show the empty line
                            Self::show(&self.ed.draw(Self::cols()));
                        }
                        drop(raw);
                        return Ok(read);
                    }
                    Step::Suspend => {
                        let t = self.ed.text().to_string();
                        Self::show(&self.ed.finish(&t, "", Self::cols()));
                        crate::io::tty::suspend();
                        let _ = crate::io::tty::take_continued();
                        dirty = true;
                    }
                    Step::Clear => {
                        Self::show("\x1b[H\x1b[2J");
                        self.ed.forget_rows();
                        dirty = true;
                    }
                }
            }
            if dirty {
                Self::show(&self.ed.draw(Self::cols()));
                dirty = false;
            }
            let got = std::io::stdin().read(&mut buf);
            if crate::io::tty::take_continued() {
                // stopped and continued: the shell wrote below the line
                Self::show("\r\n");
                self.ed.forget_rows();
                dirty = true;
            }
            let n = match got {
                Ok(0) => return Ok(Read::End),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(format!("standard input: {e}"))),
            };
            self.decoder.feed(&buf[..n], &mut self.keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` to an editor after prompt `> `: the lines read, and the text left.
    fn type_in(ed: &mut Editor, bytes: &[u8]) -> (Vec<Read>, String) {
        let mut keys = Vec::new();
        Decoder::default().feed(bytes, &mut keys);
        ed.start("> ");
        let mut done = Vec::new();
        for k in keys {
            if let Step::Done(r) = ed.key(k) {
                done.push(r);
                ed.start("> ");
            }
        }
        (done, ed.text().to_string())
    }

    fn line(s: &str) -> Read {
        Read::Line(s.to_string())
    }

    #[test]
    fn keys_edit_the_line_as_a_shell_does() {
        let mut ed = Editor::new(Vec::new());
        // the issue's case: Left then X, never an escape code in the message
        let (done, _) = type_in(&mut ed, b"abc\x1b[DX\r");
        assert_eq!(done, vec![line("abXc")]);
        let (done, _) = type_in(&mut ed, b"wrong words\x01\x0bright\x01say \x05!\x7f?\r");
        assert_eq!(done, vec![line("say right?")]);
        let (done, _) = type_in(&mut ed, b"keep this\x17that\x15x\x19\r");
        assert_eq!(done, vec![line("xkeep that")]);
        let (done, _) = type_in(&mut ed, b"abc\x1b[H\x1b[3~\x04\x1b[F\x1b[Dd\r");
        assert_eq!(done, vec![line("dc")]);
        let (done, left) = type_in(&mut ed, b"\x04");
        assert_eq!((done, left), (vec![Read::End], String::new()));
        let (done, _) = type_in(&mut ed, b"half typed\x03");
        assert_eq!(done, vec![Read::Cancel]);
        // a wide character is one step, a combining mark goes with its character
        let (done, _) = type_in(&mut ed, "日本e\u{301}".as_bytes());
        assert!(done.is_empty());
        let (done, _) = type_in(
            &mut ed,
            "日本e\u{301}\x1b[D\x1b[D\x1b[Dx\x1b[C\x7f\r".as_bytes(),
        );
        assert_eq!(done, vec![line("x本e\u{301}")]);
    }

    #[test]
    fn up_and_down_walk_the_history_and_a_paste_is_one_line() {
        let mut ed = Editor::new(vec!["from the file".into()]);
        let (done, _) = type_in(&mut ed, b"first\rsecond\r");
        assert_eq!(done, vec![line("first"), line("second")]);
        let (done, _) = type_in(&mut ed, b"\x1b[A\x1b[A!\x1b[B\x1b[A\r");
        assert_eq!(done, vec![line("first!")]);
        let (done, _) = type_in(&mut ed, b"\x1b[A\x1b[A\x1b[A\x1b[A\x1b[A\r");
        assert_eq!(done, vec![line("from the file")]);
        let (done, _) = type_in(&mut ed, b"x\x1b[A\x1b[Bx\r");
        assert_eq!(done, vec![line("xx")]);
        let (done, _) = type_in(&mut ed, b"> \x1b[200~line one\r\nline two\r\x1b[201~ end\r");
        assert_eq!(done, vec![line("> line one\nline two\n end")]);
    }

    #[test]
    fn drawing_follows_the_cursor_and_finish_ends_the_row() {
        let mut ed = Editor::new(Vec::new());
        ed.start("> ");
        for c in "ab".chars() {
            ed.key(Key::Char(c));
        }
        ed.key(Key::Left);
        assert_eq!(ed.draw(80), "\r\x1b[J> ab\r\x1b[3C");
        let Step::Done(Read::Line(t)) = ed.key(Key::Enter) else {
            panic!()
        };
        assert_eq!(ed.finish(&t, "", 80), "\r\x1b[J> ab\r\x1b[4C\r\n");
    }
}
