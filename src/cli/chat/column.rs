//! Where the cursor stands after the text `k3 chat` printed on a terminal: the column of its
//! current row in cells (a CJK character takes two, a combining mark none), and whether the
//! terminal is waiting to wrap (the last cell of the row written). The live line is put on
//! the row below the text and the cursor brought back with save/restore cursor, which is
//! exact only when the terminal is not waiting to wrap (moving the cursor forgets that
//! state, and the next character would overwrite the last cell): the display asks
//! [`Column::settled`] first. A character whose width terminals disagree on (emoji,
//! variation selectors, most controls, scripts not listed below) makes the column unknown
//! until the next line break, and the live line waits for it.

/// The cursor's column on its row, as far as the printed text tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Cells used on the current row, `0..=width` (`width`: the terminal waits to wrap);
    /// `None`: unknown.
    cells: Option<usize>,
    /// The terminal's width in cells; `None`: unknown (no wrapping assumed).
    width: Option<usize>,
    /// Where an escape sequence stands in the text.
    escape: Escape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// After ESC.
    Start,
    /// Inside `ESC [` … (a control sequence), until its final byte.
    Csi,
}

impl Column {
    /// At the start of an empty row of a terminal `width` cells wide (`None`: unknown), or
    /// somewhere unknown on its row when not `at_row_start`.
    pub fn new(width: Option<usize>, at_row_start: bool) -> Column {
        Column {
            cells: at_row_start.then_some(0),
            width,
            escape: Escape::None,
        }
    }

    /// True at the start of an empty row (nothing written on it since the line break).
    pub fn at_row_start(&self) -> bool {
        self.cells == Some(0)
    }

    /// True when the cursor is known to stand before a free cell of its row: the column is
    /// known and the terminal is not waiting to wrap.
    pub fn settled(&self) -> bool {
        match (self.cells, self.width) {
            (Some(c), Some(w)) => c < w,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Reads printed text.
    pub fn advance(&mut self, text: &str) {
        for c in text.chars() {
            self.char(c);
        }
    }

    fn char(&mut self, c: char) {
        match (self.escape, c) {
            (Escape::Start, '[') => self.escape = Escape::Csi,
            (Escape::Start, _) => {
                // ESC 7, ESC D, …: may move the cursor
                self.escape = Escape::None;
                self.cells = None;
            }
            (Escape::Csi, '\x40'..='\x7e') => {
                self.escape = Escape::None;
                // SGR (the dimmed thinking) moves nothing; any other sequence may
                if c != 'm' {
                    self.cells = None;
                }
            }
            (Escape::Csi, _) => {}
            (Escape::None, '\x1b') => self.escape = Escape::Start,
            (Escape::None, '\n') => self.cells = Some(0),
            (Escape::None, '\t') => {
                self.cells = match (self.cells, self.width) {
                    (Some(c), Some(w)) if c < w => Some(((c / 8 + 1) * 8).min(w - 1).max(c)),
                    (Some(c), None) => Some((c / 8 + 1) * 8),
                    _ => None,
                }
            }
            (Escape::None, '\x07') => {}
            (Escape::None, c) => self.put(cells(c)),
        }
    }

    /// A character of `w` cells (`None`: unknown) written at the cursor.
    fn put(&mut self, w: Option<usize>) {
        self.cells = match (self.cells, w, self.width) {
            (Some(c), Some(0), _) => Some(c),
            // a character that does not fit goes to the start of the next row
            (Some(c), Some(w), Some(width)) if c + w > width => Some(w.min(width)),
            (Some(c), Some(w), _) => Some(c + w),
            _ => None,
        };
    }
}

/// The cells a character takes on a terminal, where terminals agree: `None` otherwise.
pub(super) fn cells(c: char) -> Option<usize> {
    match u32::from(c) {
        0x20..=0x7e => Some(1),
        // combining marks
        0x0300..=0x036f
        | 0x0483..=0x0489
        | 0x1ab0..=0x1aff
        | 0x1dc0..=0x1dff
        | 0x20d0..=0x20ff
        | 0x302a..=0x302d
        | 0x3099..=0x309a
        | 0xfe20..=0xfe2f => Some(0),
        // Latin, Greek, Cyrillic, general punctuation, currency
        0x00a0..=0x02ff
        | 0x0370..=0x0482
        | 0x048a..=0x052f
        | 0x1e00..=0x1fff
        | 0x2010..=0x2027
        | 0x2030..=0x205e
        | 0x20a0..=0x20c0 => Some(1),
        // East Asian wide and fullwidth: Hangul Jamo, CJK, kana, Hangul syllables, forms
        0x1100..=0x115f
        | 0x2e80..=0x3029
        | 0x302e..=0x303e
        | 0x3041..=0x3098
        | 0x309b..=0x33ff
        | 0x3400..=0x4dbf
        | 0x4e00..=0x9fff
        | 0xa000..=0xa4cf
        | 0xac00..=0xd7a3
        | 0xf900..=0xfaff
        | 0xfe30..=0xfe4f
        | 0xff01..=0xff60
        | 0xffe0..=0xffe6
        | 0x20000..=0x2fffd
        | 0x30000..=0x3fffd => Some(2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(width: Option<usize>, text: &str) -> Column {
        let mut c = Column::new(width, true);
        c.advance(text);
        c
    }

    #[test]
    fn cells_of_text_wide_characters_marks_and_escapes() {
        assert_eq!(after(Some(80), "hello").cells, Some(5));
        assert_eq!(after(Some(80), "日本語").cells, Some(6));
        assert_eq!(after(Some(80), "e\u{301}té").cells, Some(3));
        assert_eq!(after(Some(80), "\x1b[2mthink\x1b[0m").cells, Some(5));
        assert_eq!(after(Some(80), "a\tb").cells, Some(9));
        assert_eq!(after(Some(80), "first line\nab").cells, Some(2));
        assert_eq!(after(None, &"x".repeat(500)).cells, Some(500));
        assert!(after(Some(80), "").at_row_start() && !after(Some(80), "a").at_row_start());
        let unknown = Column::new(Some(80), false);
        assert!(!unknown.settled() && !unknown.at_row_start());
    }

    #[test]
    fn a_full_row_waits_to_wrap_and_the_next_character_wraps() {
        let full = after(Some(10), "0123456789");
        assert_eq!(full.cells, Some(10));
        assert!(!full.settled());
        let wrapped = after(Some(10), "0123456789a");
        assert_eq!(wrapped.cells, Some(1));
        assert!(wrapped.settled());
        // a wide character that does not fit in the last cell starts the next row
        assert_eq!(after(Some(10), "012345678日").cells, Some(2));
        assert_eq!(after(Some(10), "01234567日").cells, Some(10));
        assert!(after(Some(10), "012345678").settled());
    }

    #[test]
    fn unknown_widths_and_cursor_moves_make_the_column_unknown_until_a_line_break() {
        // a carriage return: the row is not empty, and text will be written over
        for text in ["ok 🙂", "\x1b[5D", "\x1b7", "a\x08", "\u{fe0f}", "ab\r"] {
            let c = after(Some(80), text);
            assert!(!c.settled(), "{text:?}");
            let mut c = c;
            c.advance(" more\nab");
            assert_eq!(c.cells, Some(2), "{text:?}");
        }
    }
}
