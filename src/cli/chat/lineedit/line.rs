//! The text being edited and the cursor in it. The cursor steps over whole characters as
//! a terminal shows them: a character with the zero-width marks that follow it (combining
//! accents, variation selectors, joiners) is one step, a wide character (CJK, emoji) too;
//! [`width`] says how many cells each takes.

/// How a tab is drawn (the text keeps the tab).
pub const TAB: &str = "    ";

/// Cells character `c` takes when the editor draws it: 0 for marks that join the character
/// before, 2 for East Asian wide characters and emoji, 2 for a control drawn as `^X`, 4 for a
/// tab, 1 otherwise. A line break is not drawn on its row (0).
pub fn width(c: char) -> usize {
    match c {
        '\n' => 0,
        '\t' => TAB.len(),
        '\0'..='\x1f' | '\x7f' => 2,
        '\u{80}'..='\u{9f}' => 1,
        _ => super::super::column::cells(c).unwrap_or_else(|| other_width(c)),
    }
}

/// Widths where terminals disagree ([`super::super::column`] leaves them unknown): the
/// editor needs one, and takes what current terminals do.
fn other_width(c: char) -> usize {
    match u32::from(c) {
        // Hebrew, Arabic and Devanagari marks; zero-width spaces and joiners, bidi controls,
        // variation selectors, tags
        0x0591..=0x05bd
        | 0x05bf..=0x05c7
        | 0x0610..=0x061a
        | 0x064b..=0x065f
        | 0x0670
        | 0x06d6..=0x06dc
        | 0x0900..=0x0902
        | 0x093a..=0x094f
        | 0x0951..=0x0957
        | 0x200b..=0x200f
        | 0x2028..=0x202e
        | 0x2060..=0x206f
        | 0xfe00..=0xfe0f
        | 0xfeff
        | 0xe0000..=0xe0fff => 0,
        // emoji with emoji presentation
        0x1f004
        | 0x1f0cf
        | 0x1f18e
        | 0x1f191..=0x1f19a
        | 0x1f200..=0x1f2ff
        | 0x1f300..=0x1f64f
        | 0x1f680..=0x1f6ff
        | 0x1f900..=0x1f9ff
        | 0x1fa70..=0x1faff => 2,
        _ => 1,
    }
}

/// Cells of a whole string (a prompt).
pub fn str_width(s: &str) -> usize {
    s.chars().map(width).sum()
}

/// The text and the cursor (a byte offset at a step boundary).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    text: String,
    cursor: usize,
}

impl Line {
    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The cursor's byte offset.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Replaces the text, the cursor at its end.
    pub fn set(&mut self, text: String) {
        self.cursor = text.len();
        self.text = text;
    }

    /// The text, leaving the line empty.
    pub fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }

    /// Inserts `s` at the cursor, the cursor after it.
    pub fn insert(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    pub fn left(&mut self) {
        self.cursor = prev(&self.text, self.cursor);
    }

    pub fn right(&mut self) {
        self.cursor = next(&self.text, self.cursor);
    }

    pub fn home(&mut self) {
        self.cursor = 0;
    }

    pub fn end(&mut self) {
        self.cursor = self.text.len();
    }

    /// Deletes the step before the cursor.
    pub fn backspace(&mut self) {
        let from = prev(&self.text, self.cursor);
        self.cut(from, self.cursor);
    }

    /// Deletes the step at the cursor.
    pub fn delete(&mut self) {
        let to = next(&self.text, self.cursor);
        self.cut(self.cursor, to);
    }

    /// Cuts from the cursor to the end; returns what was cut.
    pub fn kill_end(&mut self) -> String {
        self.cut(self.cursor, self.text.len())
    }

    /// Cuts from the start to the cursor; returns what was cut.
    pub fn kill_start(&mut self) -> String {
        self.cut(0, self.cursor)
    }

    /// Cuts the word before the cursor and the blanks after it (as a shell's Ctrl-W: words
    /// end at whitespace); returns what was cut.
    pub fn kill_word(&mut self) -> String {
        let from = self.word_start();
        self.cut(from, self.cursor)
    }

    /// To the start of the word before the cursor.
    pub fn word_left(&mut self) {
        self.cursor = self.word_start();
    }

    /// To the end of the word after the cursor.
    pub fn word_right(&mut self) {
        let rest = &self.text[self.cursor..];
        let blanks = rest.len() - rest.trim_start().len();
        let word = rest[blanks..]
            .find(char::is_whitespace)
            .unwrap_or(rest.len() - blanks);
        self.cursor += blanks + word;
    }

    fn word_start(&self) -> usize {
        let head = self.text[..self.cursor].trim_end();
        head.rfind(char::is_whitespace).map_or(0, |i| {
            i + head[i..].chars().next().map_or(1, char::len_utf8)
        })
    }

    /// Removes `from..to`, the cursor at `from`; returns the removed text.
    fn cut(&mut self, from: usize, to: usize) -> String {
        self.cursor = from;
        self.text.drain(from..to).collect()
    }
}

/// A step starts with a character that is not a zero-width mark, or a line break, or at 0.
fn starts_step(c: char) -> bool {
    c == '\n' || width(c) > 0
}

/// The end of the step that starts at `i` (`i` itself at the end).
fn next(text: &str, i: usize) -> usize {
    let mut it = text[i..].char_indices();
    let Some((_, first)) = it.next() else {
        return i;
    };
    if first == '\n' {
        return i + 1;
    }
    for (j, c) in it {
        if starts_step(c) {
            return i + j;
        }
    }
    text.len()
}

/// The start of the step that ends at `i` (0 at the start).
fn prev(text: &str, i: usize) -> usize {
    let mut j = i;
    for (k, c) in text[..i].char_indices().rev() {
        j = k;
        if starts_step(c) {
            break;
        }
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, cursor: usize) -> Line {
        Line {
            text: text.to_string(),
            cursor,
        }
    }

    #[test]
    fn widths() {
        assert_eq!(str_width("abc"), 3);
        assert_eq!(str_width("日本"), 4);
        assert_eq!(str_width("🙂"), 2);
        assert_eq!(str_width("e\u{301}"), 1);
        assert_eq!(str_width("a\u{200d}\u{fe0f}"), 1);
        assert_eq!(str_width("\t\x01"), 6);
    }

    #[test]
    fn a_wide_character_or_a_character_with_its_marks_is_one_step() {
        let text = "a日e\u{301}\u{302}🙂\nz";
        let mut l = line(text, 0);
        let mut stops = vec![0];
        for _ in 0..7 {
            l.right();
            stops.push(l.cursor());
        }
        assert_eq!(stops, vec![0, 1, 4, 9, 13, 14, 15, 15]);
        for want in stops[..6].iter().rev() {
            l.left();
            assert_eq!(l.cursor(), *want);
        }
        // a mark at the very start is a step of its own
        let mut l = line("\u{301}a", 3);
        l.left();
        assert_eq!(l.cursor(), 2);
        l.left();
        assert_eq!(l.cursor(), 0);
        // backspace takes the whole character with its marks
        let mut l = line("xe\u{301}", 4);
        l.backspace();
        assert_eq!((l.text(), l.cursor()), ("x", 1));
        let mut l = line("日本", 0);
        l.delete();
        assert_eq!(l.text(), "本");
    }

    #[test]
    fn edits_and_cuts() {
        let mut l = Line::default();
        l.insert("abc");
        l.left();
        l.insert("X");
        assert_eq!(l.text(), "abXc");
        l.home();
        l.insert(">");
        l.end();
        l.insert("<");
        assert_eq!(l.text(), ">abXc<");
        l.home();
        l.right();
        assert_eq!(l.kill_end(), "abXc<");
        assert_eq!(l.text(), ">");
        let mut l = line("one two  three", 9);
        assert_eq!(l.kill_start(), "one two  ");
        assert_eq!((l.text(), l.cursor()), ("three", 0));
        let mut l = line("one two  three", 9);
        assert_eq!(l.kill_word(), "two  ");
        assert_eq!(l.text(), "one three");
        let mut l = line("  héllo wörld", 15);
        l.word_left();
        assert_eq!(l.cursor(), 9);
        l.word_left();
        assert_eq!(l.cursor(), 2);
        l.word_left();
        assert_eq!(l.cursor(), 0);
        l.word_right();
        assert_eq!(l.cursor(), 8);
        l.word_right();
        assert_eq!(l.cursor(), 15);
        assert_eq!(line("x", 0).take(), "x");
    }
}
