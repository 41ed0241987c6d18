//! What the user types to `k3 chat`: lines (from the terminal's line editor, or plain lines
//! from a pipe) joined into one entry (a line ending in `\` continues on the next; a block
//! between two lines of `"""`), then read as a command (`/help`, `/exit`, …) or a message.
//! `//text` sends `/text`.

use crate::error::{Error, Result};
use std::io::BufRead;

/// One entry: a message's text, or a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Text to send (a user message, or a tool's result while calls are pending).
    Text(String),
    /// `/help`.
    Help,
    /// `/exit` (also `/quit`).
    Exit,
    /// `/reset`.
    Reset,
    /// `/undo`.
    Undo,
    /// `/think EFFORT|off`, the argument as given.
    Think(String),
    /// `/save FILE`.
    Save(String),
    /// `/load FILE`.
    Load(String),
    /// `/stats`.
    Stats,
    /// `/result FILE`: a tool's result read from a file.
    Result(String),
}

/// The commands, for `/help`.
pub const COMMANDS: &str = "\
commands:
  /help              this list
  /exit              leave (also /quit, or Ctrl-D)
  /reset             start again from the system prompt
  /undo              drop the last exchange (back to the state before it)
  /think EFFORT|off  thinking effort low, high or max, or off (the conversation is encoded
                     and prefilled again)
  /save FILE         the session state (FILE) and its transcript (FILE.json)
  /load FILE         continue a saved conversation
  /stats             ids, context, prefill and decode figures
  /result FILE       a tool's result from a file (else the next line is the result)
input: a line ending in \\ continues on the next; a block between lines of \"\"\" is one
message; //text sends /text. Ctrl-C stops an answer.
keys: Left/Right, Home/End (Ctrl-A/E), Backspace/Delete, Ctrl-K/U cut to the end/start,
  Ctrl-W cut a word, Ctrl-Y paste it, Up/Down the lines typed before, Ctrl-C drop the line
";

/// What a [`Source`] gives for one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// A line, without its line ending (from the line editor it may hold pasted line breaks).
    Line(String),
    /// Ctrl-C at the prompt: the entry being typed is dropped.
    Cancel,
    /// The end of input (Ctrl-D on an empty line).
    End,
}

/// Where the lines come from: the terminal's line editor, or plain lines (a pipe).
pub trait Source {
    /// The next line, `prompt` shown before it on a terminal.
    ///
    /// Errors: a line that is not UTF-8 (exit 2, naming its number); a failed read (exit 4).
    fn read(&mut self, prompt: &str) -> Result<Read>;

    /// The last line was typed before its prompt was shown (in canonical mode the terminal
    /// echoed it before the prompt: the cursor is not at a row start after it).
    fn typed_ahead(&self) -> bool {
        false
    }
}

/// Plain lines of a byte stream: a pipe, or a terminal in its own (canonical) mode when
/// standard error is not one (the editor could not draw).
pub struct Lines<R: BufRead> {
    r: R,
    /// Lines read so far (for messages).
    line: usize,
    /// Show the prompts and watch for lines typed ahead (standard input is a terminal).
    interactive: bool,
    ahead: bool,
}

impl<R: BufRead> Lines<R> {
    /// The lines of `r`; prompts shown when `interactive`.
    pub fn new(r: R, interactive: bool) -> Lines<R> {
        Lines {
            r,
            line: 0,
            interactive,
            ahead: false,
        }
    }
}

impl<R: BufRead> Source for Lines<R> {
    /// One line without its `\n` (and `\r`).
    fn read(&mut self, prompt: &str) -> Result<Read> {
        if self.interactive {
            self.ahead = crate::io::sys::stdin_ready();
            crate::say!("{prompt}");
        }
        let mut buf = Vec::new();
        let n = self
            .r
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(format!("standard input: {e}")))?;
        if n == 0 {
            return Ok(Read::End);
        }
        self.line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        String::from_utf8(buf).map(Read::Line).map_err(|e| {
            Error::invalid(format!(
                "standard input: line {}: not UTF-8 (invalid byte at offset {})",
                self.line,
                e.utf8_error().valid_up_to()
            ))
        })
    }

    fn typed_ahead(&self) -> bool {
        self.ahead
    }
}

/// The prompt of a continuation line (after `\`, inside a `"""` block).
pub const MORE: &str = "... ";

/// Reads entries from a [`Source`] of lines.
pub struct Reader<S: Source + ?Sized> {
    /// Lines read so far (for messages).
    line: usize,
    src: Box<S>,
}

impl<S: Source + ?Sized> Reader<S> {
    /// A reader over `src`.
    pub fn new(src: Box<S>) -> Reader<S> {
        Reader { line: 0, src }
    }

    /// The entry's last line was typed ahead of its prompt ([`Source::typed_ahead`]).
    pub fn typed_ahead(&self) -> bool {
        self.src.typed_ahead()
    }

    /// The source's next line, counted.
    fn read_line(&mut self, prompt: &str) -> Result<Read> {
        let r = self.src.read(prompt)?;
        if let Read::Line(_) = r {
            self.line += 1;
        }
        Ok(r)
    }

    /// The next entry, or None at the end of input; `prompt` is shown before its first line
    /// on a terminal, [`MORE`] before the others. Ctrl-C drops what was typed of the entry
    /// and reads a new one.
    ///
    /// Errors (exit 2): a line that is not UTF-8, an unknown command, a command without its
    /// argument, a `"""` block not closed before the end of input.
    pub fn next(&mut self, prompt: &str) -> Result<Option<Entry>> {
        'entry: loop {
            let first = match self.read_line(prompt)? {
                Read::Line(l) => l,
                Read::Cancel => continue 'entry,
                Read::End => return Ok(None),
            };
            if first.trim() == "\"\"\"" {
                let start = self.line;
                let mut lines = Vec::new();
                loop {
                    match self.read_line(MORE)? {
                        Read::Cancel => continue 'entry,
                        Read::End => {
                            return Err(Error::invalid(format!(
                                "standard input: line {start}: a \"\"\" block is not closed"
                            )))
                        }
                        Read::Line(l) if l.trim() == "\"\"\"" => break,
                        Read::Line(l) => lines.push(l),
                    }
                }
                return Ok(Some(Entry::Text(lines.join("\n"))));
            }
            let mut text = first;
            while let Some(head) = text.strip_suffix('\\') {
                text = head.to_string();
                match self.read_line(MORE)? {
                    Read::Cancel => continue 'entry,
                    Read::End => break,
                    Read::Line(l) => {
                        text.push('\n');
                        text.push_str(&l);
                    }
                }
            }
            return parse_entry(&text).map(Some);
        }
    }
}

/// Reads one entry's text as a command or a message.
///
/// Errors (exit 2): an unknown command; a command missing its argument or given one it does
/// not take.
pub fn parse_entry(text: &str) -> Result<Entry> {
    if let Some(rest) = text.strip_prefix("//") {
        return Ok(Entry::Text(format!("/{rest}")));
    }
    let Some(cmd) = text.strip_prefix('/') else {
        return Ok(Entry::Text(text.to_string()));
    };
    let (name, arg) = match cmd.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (cmd, ""),
    };
    let needs = |what: &str| -> Result<String> {
        if arg.is_empty() {
            Err(Error::invalid(format!("/{name}: give {what}")))
        } else {
            Ok(arg.to_string())
        }
    };
    let none = |e: Entry| -> Result<Entry> {
        if arg.is_empty() {
            Ok(e)
        } else {
            Err(Error::invalid(format!(
                "/{name} takes no argument, found `{arg}`"
            )))
        }
    };
    match name {
        "help" => none(Entry::Help),
        "exit" | "quit" => none(Entry::Exit),
        "reset" => none(Entry::Reset),
        "undo" => none(Entry::Undo),
        "stats" => none(Entry::Stats),
        "think" => needs("an effort (low, high, max) or off").map(Entry::Think),
        "save" => needs("a file").map(Entry::Save),
        "load" => needs("a file").map(Entry::Load),
        "result" => needs("a file").map(Entry::Result),
        _ => Err(Error::invalid(format!(
            "unknown command `/{name}` (see /help; //text sends /text)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8]) -> Reader<Lines<&[u8]>> {
        Reader::new(Box::new(Lines::new(bytes, false)))
    }

    fn all(text: &str) -> Vec<Entry> {
        let mut r = reader(text.as_bytes());
        let mut out = Vec::new();
        while let Some(e) = r.next("> ").unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn lines_continuations_and_blocks() {
        let t = |s: &str| Entry::Text(s.to_string());
        assert_eq!(
            all("hi\r\none \\\ntwo\n\"\"\"\na\n\n b\n\"\"\"\n//x\n/undo\n"),
            vec![t("hi"), t("one \ntwo"), t("a\n\n b"), t("/x"), Entry::Undo]
        );
        assert_eq!(all("last \\"), vec![t("last ")]);
    }

    #[test]
    fn bad_entries() {
        for (text, want) in [
            ("/nope\n", "unknown command `/nope`"),
            ("/save\n", "/save: give a file"),
            ("/undo 2\n", "/undo takes no argument"),
            ("\"\"\"\nopen\n", "line 1: a \"\"\" block is not closed"),
        ] {
            let mut r = reader(text.as_bytes());
            let e = loop {
                match r.next("> ") {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("{text:?}: no error"),
                    Err(e) => break e,
                }
            };
            assert_eq!(e.exit_code(), 2, "{text:?}");
            assert!(e.message.contains(want), "{text:?}: {}", e.message);
        }
        let mut r = reader(&b"ok\n\xff\n"[..]);
        r.next("> ").unwrap();
        let e = r.next("> ").unwrap_err();
        assert!(e.message.contains("line 2: not UTF-8"), "{}", e.message);
    }
}
