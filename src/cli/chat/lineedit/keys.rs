//! Bytes from a terminal in raw mode → keys: UTF-8 characters, control keys, the escape
//! sequences of the cursor and editing keys (CSI `ESC [` and SS3 `ESC O`, as xterm, VTE,
//! tmux and the Linux console send them), and bracketed paste (`ESC[200~` … `ESC[201~`),
//! inside which every character is text (a line break included) and nothing is a command.
//! A sequence the editor has no use for is consumed whole, never inserted as text.

/// What a key asks of the editor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A character of text (typed or pasted; `\n` and `\t` only from a paste or Tab).
    Char(char),
    /// Enter (CR or LF outside a paste).
    Enter,
    /// Backspace (DEL or BS), Ctrl-H.
    Backspace,
    /// Delete (`ESC[3~`).
    Delete,
    /// Left arrow, Ctrl-B.
    Left,
    /// Right arrow, Ctrl-F.
    Right,
    /// Up arrow, Ctrl-P: the previous history entry.
    Up,
    /// Down arrow, Ctrl-N: the next history entry.
    Down,
    /// Home, Ctrl-A.
    Home,
    /// End, Ctrl-E.
    End,
    /// Alt-B, Ctrl-Left: a word back.
    WordLeft,
    /// Alt-F, Ctrl-Right: a word on.
    WordRight,
    /// Ctrl-K: cut to the end.
    KillEnd,
    /// Ctrl-U: cut to the start.
    KillStart,
    /// Ctrl-W, Alt-Backspace: cut the word before the cursor.
    KillWord,
    /// Ctrl-Y: paste what was cut last.
    Yank,
    /// Ctrl-D (or NUL: a Ctrl-D typed before raw mode): the end of input on an empty line,
    /// else Delete.
    CtrlD,
    /// Ctrl-C: drop the line.
    Interrupt,
    /// Ctrl-Z: stop the process.
    Suspend,
    /// Ctrl-L: clear the screen.
    Clear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Esc,
    /// Inside `ESC [` …, until the final byte.
    Csi,
    /// After `ESC O`.
    Ss3,
}

/// Longest parameter string kept of a control sequence (longer ones are consumed, unread).
const PARAMS_MAX: usize = 16;

/// The decoder's state between reads (a sequence or a character may be split across them).
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    params: Vec<u8>,
    /// Bytes of the UTF-8 character being read, and how many it has.
    utf8: [u8; 4],
    have: usize,
    need: usize,
    /// Inside a bracketed paste.
    paste: bool,
    /// The last pasted byte was CR (a CR LF pair is one line break).
    paste_cr: bool,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            state: State::Ground,
            params: Vec::new(),
            utf8: [0; 4],
            have: 0,
            need: 0,
            paste: false,
            paste_cr: false,
        }
    }
}

impl Decoder {
    /// Reads `bytes`, appending the keys they complete to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut impl Extend<Key>) {
        for &b in bytes {
            if self.need > 0 && b & 0xc0 != 0x80 {
                // a character cut short: the replacement, then this byte on its own
                self.need = 0;
                out.extend(self.text(char::REPLACEMENT_CHARACTER));
            }
            out.extend(self.byte(b));
        }
    }

    fn byte(&mut self, b: u8) -> Option<Key> {
        match self.state {
            State::Ground => self.ground(b),
            State::Esc => {
                self.state = State::Ground;
                match b {
                    b'[' => {
                        self.state = State::Csi;
                        self.params.clear();
                        None
                    }
                    b'O' => {
                        self.state = State::Ss3;
                        None
                    }
                    b'\x1b' => {
                        self.state = State::Esc;
                        None
                    }
                    _ if self.paste => None,
                    b'b' | b'B' => Some(Key::WordLeft),
                    b'f' | b'F' => Some(Key::WordRight),
                    0x7f | 0x08 => Some(Key::KillWord),
                    _ => None,
                }
            }
            State::Ss3 => {
                self.state = State::Ground;
                if self.paste {
                    return None;
                }
                cursor_key(b)
            }
            State::Csi => {
                if !(0x40..=0x7e).contains(&b) {
                    if self.params.len() < PARAMS_MAX {
                        self.params.push(b);
                    }
                    return None;
                }
                self.state = State::Ground;
                match (&self.params[..], b) {
                    (b"200", b'~') => {
                        self.paste = true;
                        self.paste_cr = false;
                        None
                    }
                    (b"201", b'~') => {
                        self.paste = false;
                        None
                    }
                    _ if self.paste => None,
                    (b"1;5" | b"1;3", b'D') => Some(Key::WordLeft),
                    (b"1;5" | b"1;3", b'C') => Some(Key::WordRight),
                    (b"1" | b"7", b'~') => Some(Key::Home),
                    (b"4" | b"8", b'~') => Some(Key::End),
                    (b"3", b'~') => Some(Key::Delete),
                    (b"" | b"1", _) => cursor_key(b),
                    _ => None,
                }
            }
        }
    }

    /// A byte outside any escape sequence.
    fn ground(&mut self, b: u8) -> Option<Key> {
        if self.need > 0 {
            // a continuation byte ([`Decoder::feed`] ended a character cut short)
            self.utf8[self.have] = b;
            self.have += 1;
            if self.have < self.need {
                return None;
            }
            self.need = 0;
            let c = std::str::from_utf8(&self.utf8[..self.have])
                .ok()
                .and_then(|s| s.chars().next())
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            return self.text(c);
        }
        let need = match b {
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 0,
        };
        if need > 0 {
            self.utf8[0] = b;
            self.have = 1;
            self.need = need;
            return None;
        }
        if b == 0x1b {
            self.state = State::Esc;
            return None;
        }
        if self.paste {
            let cr = std::mem::replace(&mut self.paste_cr, b == b'\r');
            return match b {
                b'\r' => Some(Key::Char('\n')),
                b'\n' if cr => None,
                b'\n' | b'\t' => Some(Key::Char(b as char)),
                0x20..=0x7e => Some(Key::Char(b as char)),
                0x80..=0xff => Some(Key::Char(char::REPLACEMENT_CHARACTER)),
                _ => None,
            };
        }
        match b {
            // Ctrl-D typed in canonical mode (while the model answered) is kept by the
            // terminal as a NUL that ends the input: read in raw mode, it is still Ctrl-D
            0x00 | 0x04 => Some(Key::CtrlD),
            0x01 => Some(Key::Home),
            0x02 => Some(Key::Left),
            0x03 => Some(Key::Interrupt),
            0x05 => Some(Key::End),
            0x06 => Some(Key::Right),
            0x08 | 0x7f => Some(Key::Backspace),
            0x09 => Some(Key::Char('\t')),
            0x0a | 0x0d => Some(Key::Enter),
            0x0b => Some(Key::KillEnd),
            0x0c => Some(Key::Clear),
            0x0e => Some(Key::Down),
            0x10 => Some(Key::Up),
            0x15 => Some(Key::KillStart),
            0x17 => Some(Key::KillWord),
            0x19 => Some(Key::Yank),
            0x1a => Some(Key::Suspend),
            0x20..=0x7e => Some(Key::Char(b as char)),
            0x80..=0xff => Some(Key::Char(char::REPLACEMENT_CHARACTER)),
            _ => None,
        }
    }

    /// A whole character: text, after a pasted CR too.
    fn text(&mut self, c: char) -> Option<Key> {
        self.paste_cr = false;
        Some(Key::Char(c))
    }
}

/// The final byte of a cursor key (`ESC [ X` or `ESC O X`).
fn cursor_key(b: u8) -> Option<Key> {
    match b {
        b'A' => Some(Key::Up),
        b'B' => Some(Key::Down),
        b'C' => Some(Key::Right),
        b'D' => Some(Key::Left),
        b'H' => Some(Key::Home),
        b'F' => Some(Key::End),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::Key::*;
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<Key> {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        d.feed(bytes, &mut out);
        out
    }

    #[test]
    fn arrows_and_editing_keys_are_keys_never_text() {
        assert_eq!(
            keys(b"ab\x1b[DX\x1b[C\x1bOA\x1b[B\x1b[H\x1b[F\x1b[1~\x1b[4~\x1b[3~"),
            vec![
                Char('a'),
                Char('b'),
                Left,
                Char('X'),
                Right,
                Up,
                Down,
                Home,
                End,
                Home,
                End,
                Delete
            ]
        );
        assert_eq!(
            keys(b"\x01\x05\x0b\x15\x17\x19\x04\x00\x03\x1a\x0c\x7f\x08\r\n"),
            vec![
                Home, End, KillEnd, KillStart, KillWord, Yank, CtrlD, CtrlD, Interrupt, Suspend,
                Clear, Backspace, Backspace, Enter, Enter
            ]
        );
        assert_eq!(
            keys(b"\x1b[1;5D\x1b[1;5C\x1bb\x1bf\x1b\x7f"),
            vec![WordLeft, WordRight, WordLeft, WordRight, KillWord]
        );
        // sequences with no use (F5, a mouse report, Insert, a long private one) vanish whole
        assert_eq!(
            keys(b"\x1b[15~\x1b[M\x1b[2~\x1b[?1;2;3;4;5;6;7;8;9;10;11;12cz"),
            vec![Char('z')]
        );
    }

    #[test]
    fn utf8_split_across_reads_and_invalid_bytes() {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        let s = "é日🙂".as_bytes();
        for b in s {
            d.feed(&[*b], &mut out);
        }
        assert_eq!(out, vec![Char('é'), Char('日'), Char('🙂')]);
        assert_eq!(
            keys(b"\xe6\x97a\xffb"),
            vec![Char('\u{fffd}'), Char('a'), Char('\u{fffd}'), Char('b')]
        );
        // an arrow split across reads
        let mut d = Decoder::default();
        let mut out = Vec::new();
        d.feed(b"\x1b", &mut out);
        d.feed(b"[", &mut out);
        d.feed(b"D", &mut out);
        assert_eq!(out, vec![Left]);
    }

    #[test]
    fn a_bracketed_paste_is_text_with_its_line_breaks() {
        assert_eq!(
            keys(b"\x1b[200~one\r\ntwo\rthree\n\tx\x03\x1b[D\x1b[201~\r"),
            vec![
                Char('o'),
                Char('n'),
                Char('e'),
                Char('\n'),
                Char('t'),
                Char('w'),
                Char('o'),
                Char('\n'),
                Char('t'),
                Char('h'),
                Char('r'),
                Char('e'),
                Char('e'),
                Char('\n'),
                Char('\t'),
                Char('x'),
                Enter
            ]
        );
    }
}
