//! The lines Up and Down walk through: this session's lines and, first, the user messages
//! of the `--history` file. A recalled line can be edited; the edit stands while the line
//! is being read (walking back to it finds it edited) and the history itself never changes
//! except by a new line at its end.

/// At most this many lines are kept (the oldest go first).
const KEEP: usize = 1000;

/// Past lines, oldest first, and where Up/Down stand during one line's reading.
#[derive(Debug, Clone, Default)]
pub struct History {
    lines: Vec<String>,
    /// The line shown: `lines.len()` is the new line.
    at: usize,
    /// Edits of the lines walked through while this line is read (index, text).
    edits: Vec<(usize, String)>,
}

impl History {
    /// A history of `lines` (oldest first).
    pub fn new(lines: Vec<String>) -> History {
        let mut h = History::default();
        for l in lines {
            h.push(l);
        }
        h.start();
        h
    }

    /// Begins a new line's reading: Up shows the newest line.
    pub fn start(&mut self) {
        self.at = self.lines.len();
        self.edits.clear();
    }

    /// Adds `line` at the end (not a blank one, nor the newest again).
    pub fn push(&mut self, line: String) {
        if line.trim().is_empty() || self.lines.last() == Some(&line) {
            return;
        }
        if self.lines.len() == KEEP {
            self.lines.remove(0);
        }
        self.lines.push(line);
    }

    /// The line before the one shown (`current`: the shown one as edited), or None at the
    /// oldest.
    pub fn up(&mut self, current: &str) -> Option<String> {
        (self.at > 0).then(|| self.go(current, self.at - 1))
    }

    /// The line after the one shown, or None at the new line.
    pub fn down(&mut self, current: &str) -> Option<String> {
        (self.at < self.lines.len()).then(|| self.go(current, self.at + 1))
    }

    fn go(&mut self, current: &str, to: usize) -> String {
        let at = self.at;
        self.edits.retain(|(i, _)| *i != at);
        self.edits.push((at, current.to_string()));
        self.at = to;
        match self.edits.iter().find(|(i, _)| *i == to) {
            Some((_, t)) => t.clone(),
            None => self.lines.get(to).cloned().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_and_down_keep_the_new_line_and_edits() {
        let mut h = History::new(vec!["one".into(), "two".into(), "two".into(), " ".into()]);
        assert_eq!(h.down("new"), None);
        assert_eq!(h.up("new").as_deref(), Some("two"));
        assert_eq!(h.up("two!").as_deref(), Some("one"));
        assert_eq!(h.up("one"), None);
        assert_eq!(h.down("one").as_deref(), Some("two!"));
        assert_eq!(h.down("two!").as_deref(), Some("new"));
        assert_eq!(h.down("new"), None);
        h.push("three".into());
        h.start();
        assert_eq!(h.up("").as_deref(), Some("three"));
        assert_eq!(
            h.up("three").as_deref(),
            Some("two"),
            "edits last one reading"
        );
    }
}
