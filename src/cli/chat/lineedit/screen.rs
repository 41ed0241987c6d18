//! Drawing the prompt and the text: where each character lands on a terminal `cols` cells
//! wide (a character that does not fit on the row goes to the next one; a line break of the
//! text starts a row with [`CONTINUATION`]), and the bytes that draw it all again from the
//! prompt's row and put the cursor where it belongs. Everything is drawn again on each
//! change: the text is a message, short for a terminal.

use super::line::{str_width, width, TAB};
use std::fmt::Write as _;

/// Starts the rows after a line break of the text (a multi-line paste).
pub const CONTINUATION: &str = "... ";

/// Terminals narrower than this are drawn on as if they had this many columns.
const MIN_COLS: usize = 8;

/// A row and a column (cells from the left), rows counted from the prompt's.
pub type Pos = (usize, usize);

/// Where drawing `c` at `at` leaves the cursor; a column of `cols` is a full row whose
/// terminal waits to wrap.
fn advance((row, col): Pos, c: char, cols: usize) -> Pos {
    if c == '\n' {
        return (row + 1, CONTINUATION.len());
    }
    match width(c) {
        0 => (row, col),
        w if col + w > cols => (row + 1, w),
        w => (row, col + w),
    }
}

/// A full row's cursor stands at the start of the next.
fn settle((row, col): Pos, cols: usize) -> Pos {
    if col >= cols {
        (row + 1, 0)
    } else {
        (row, col)
    }
}

/// Where the cursor stands when it is before byte `upto` of `text`, after a prompt of
/// `prompt_w` cells.
pub fn position(prompt_w: usize, text: &str, upto: usize, cols: usize) -> Pos {
    let cols = cols.max(MIN_COLS);
    let mut at = (0, prompt_w.min(cols));
    for c in text[..upto].chars() {
        at = advance(at, c, cols);
    }
    settle(at, cols)
}

/// How `c` is drawn: itself, a tab as spaces, a control as `^X`, a C1 control as U+FFFD.
fn glyph(c: char, out: &mut String) {
    match c {
        '\t' => out.push_str(TAB),
        '\0'..='\x1f' | '\x7f' => {
            out.push('^');
            out.push(char::from(c as u8 ^ 0x40));
        }
        '\u{80}'..='\u{9f}' => out.push(char::REPLACEMENT_CHARACTER),
        c => out.push(c),
    }
}

/// The bytes that draw `prompt` and `text` again with the cursor before byte `cursor`,
/// from a cursor on row `from_row` (of the last drawing); and the cursor's row after.
pub fn draw(
    prompt: &str,
    text: &str,
    cursor: usize,
    cols: usize,
    from_row: usize,
) -> (String, usize) {
    let cols = cols.max(MIN_COLS);
    let mut out = String::new();
    if from_row > 0 {
        let _ = write!(out, "\x1b[{from_row}A");
    }
    out.push_str("\r\x1b[J");
    out.push_str(prompt);
    let mut at = (0, str_width(prompt).min(cols));
    for c in text.chars() {
        let next = advance(at, c, cols);
        if c == '\n' {
            out.push_str("\r\n");
            out.push_str(CONTINUATION);
        } else {
            if next.0 > at.0 {
                // fill the row, so that the terminal wraps where the layout does
                out.extend(std::iter::repeat_n(' ', cols.saturating_sub(at.1)));
            }
            glyph(c, &mut out);
        }
        at = next;
    }
    if at.1 >= cols {
        // the terminal waits to wrap: go to the next row, where the cursor is known
        out.push_str("\r\n");
    }
    let end = settle(at, cols);
    let want = position(str_width(prompt), text, cursor, cols);
    if end.0 > want.0 {
        let _ = write!(out, "\x1b[{}A", end.0 - want.0);
    }
    out.push('\r');
    if want.1 > 0 {
        let _ = write!(out, "\x1b[{}C", want.1);
    }
    (out, want.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_wrap_wide_characters_and_line_breaks() {
        assert_eq!(position(2, "abc", 3, 80), (0, 5));
        assert_eq!(position(2, "abc", 1, 80), (0, 3));
        // a full row: the cursor at the next row's start
        assert_eq!(position(2, "abcdef", 6, 8), (1, 0));
        assert_eq!(position(2, "abcdefg", 7, 8), (1, 1));
        // a wide character that does not fit starts the next row
        assert_eq!(position(2, "abcde日", 8, 8), (1, 2));
        assert_eq!(position(2, "日本語", 9, 8), (1, 0));
        assert_eq!(position(2, "a\nb", 3, 80), (1, 5));
        // a line break right after a full row is one row down, not two
        assert_eq!(position(2, "abcdef\nx", 8, 8), (1, 5));
        assert_eq!(position(0, "e\u{301}", 3, 80), (0, 1));
    }

    #[test]
    fn drawing_goes_back_to_the_prompt_row_and_places_the_cursor() {
        let (s, row) = draw("> ", "abc", 1, 80, 0);
        assert_eq!(s, "\r\x1b[J> abc\r\x1b[3C");
        assert_eq!(row, 0);
        // from row 2 of a taller drawing; a full last row is left for the next
        let (s, row) = draw("> ", "abcdef", 6, 8, 2);
        assert_eq!(s, "\x1b[2A\r\x1b[J> abcdef\r\n\r");
        assert_eq!(row, 1);
        // the wide character that does not fit: the row filled with a space
        let (s, row) = draw("> ", "abcde日x", 0, 8, 0);
        assert_eq!(s, "\r\x1b[J> abcde 日x\x1b[1A\r\x1b[2C");
        assert_eq!(row, 0);
        let (s, _) = draw("> ", "a\nb\tc\x01", 2, 80, 0);
        assert_eq!(s, "\r\x1b[J> a\r\n... b    c^A\r\x1b[4C");
        let (s, row) = draw("> ", "a\nb", 3, 80, 0);
        assert_eq!(s, "\r\x1b[J> a\r\n... b\r\x1b[5C");
        assert_eq!(row, 1);
    }
}
