//! The Kimi pre-tokeniser (TOKENIZER.md §6): the eight-alternative pattern matched by hand,
//! with the reference's backtracking semantics (§6.3), over the UTF-8 bytes of one slice.
//!
//! Positions are byte offsets into the slice; the slice is valid UTF-8 (a `&str`) so every
//! position reached is a character boundary. Every step looks at each code point a bounded
//! number of times, so splitting is linear in the slice length.

use super::unicode::{decode_at, is_pre, is_punct, Classes, HAN, LOW, NL, NUM, UP, WS};

/// Iterator over the pieces of one slice (§6.3): they tile the slice, in order.
pub struct Pieces<'a> {
    m: Matcher<'a>,
    pos: usize,
}

impl<'a> Pieces<'a> {
    /// Pieces of `text`, which is treated as a whole slice (end of text at its end).
    pub fn new(text: &'a str) -> Self {
        Pieces {
            m: Matcher {
                b: text.as_bytes(),
                c: Classes::get(),
            },
            pos: 0,
        }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.pos >= self.m.b.len() {
            return None;
        }
        let start = self.pos;
        let end = self.m.match_at(start);
        debug_assert!(end > start);
        self.pos = end;
        Some(&self.m.b[start..end])
    }
}

/// Splits `text` into its pieces (convenience for tests and tools).
pub fn split(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut pos = 0;
    for p in Pieces::new(text) {
        out.push(&text[pos..pos + p.len()]);
        pos += p.len();
    }
    out
}

struct Matcher<'a> {
    b: &'a [u8],
    c: &'static Classes,
}

/// Contraction letters after case folding (§6.2): `s S ſ` → s; the ASCII pairs of t r e v m l d.
#[inline]
fn fold(cp: u32) -> u8 {
    match cp {
        0x17F => b's',
        0x41..=0x5A | 0x61..=0x7A => {
            let l = (cp as u8) | 0x20;
            match l {
                b's' | b't' | b'r' | b'e' | b'v' | b'm' | b'l' | b'd' => l,
                _ => 0,
            }
        }
        _ => 0,
    }
}

impl Matcher<'_> {
    /// (class flags, code point, position after) of the character at `i` (< len).
    #[inline(always)]
    fn at(&self, i: usize) -> (u8, u32, usize) {
        let b0 = self.b[i];
        if b0 < 0x80 {
            return (self.c.ascii(b0), b0 as u32, i + 1);
        }
        let (cp, l) = decode_at(self.b, i);
        (self.c.flags(cp), cp, i + l)
    }

    /// End of the run of characters from `i` whose flags intersect `bits`.
    #[inline]
    fn run(&self, mut i: usize, bits: u8) -> usize {
        while i < self.b.len() {
            let (f, _, j) = self.at(i);
            if f & bits == 0 {
                break;
            }
            i = j;
        }
        i
    }

    /// End of the PUNCT run from `i`.
    #[inline]
    fn run_punct(&self, mut i: usize) -> usize {
        while i < self.b.len() {
            let (f, _, j) = self.at(i);
            if !is_punct(f) {
                break;
            }
            i = j;
        }
        i
    }

    /// match(p) of §6.3: the end of the piece starting at `p` (< len).
    fn match_at(&self, p: usize) -> usize {
        let n = self.b.len();
        let (f, c, p1) = self.at(p);
        // R1
        if f & HAN != 0 {
            return self.run(p1, HAN);
        }
        let pre = is_pre(f);
        // R2: with the optional prefix first, then without.
        if pre {
            if let Some(e) = self.letters2(p1) {
                return e;
            }
        }
        if let Some(e) = self.letters2(p) {
            return e;
        }
        // R3
        if pre {
            if let Some(e) = self.letters3(p1) {
                return e;
            }
        }
        if let Some(e) = self.letters3(p) {
            return e;
        }
        // R4: \p{N}{1,3}
        if f & NUM != 0 {
            let mut e = p1;
            for _ in 0..2 {
                if e >= n {
                    break;
                }
                let (g, _, j) = self.at(e);
                if g & NUM == 0 {
                    break;
                }
                e = j;
            }
            return e;
        }
        // R5: ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let q = if c == 0x20 && p1 < n && is_punct(self.at(p1).0) {
            Some(p1)
        } else if is_punct(f) {
            Some(p)
        } else {
            None
        };
        if let Some(q) = q {
            let e = self.run_punct(q);
            return self.run(e, NL);
        }
        // R6–R8: c is whitespace.
        let mut i = p;
        let mut last = p; // start of the last WS character seen
        let mut after_nl = None; // end of the last NL seen
        while i < n {
            let (g, _, j) = self.at(i);
            if g & WS == 0 {
                break;
            }
            if g & NL != 0 {
                after_nl = Some(j);
            }
            last = i;
            i = j;
        }
        let w = i;
        if let Some(e) = after_nl {
            return e; // R6
        }
        if w == n {
            return w; // R7 at end of text
        }
        if last > p {
            return last; // R7: two or more WS, leave the last one
        }
        w // R8
    }

    /// letters2(q): `[UP]*[LOW]+` then the optional contraction, with backtracking into UP*.
    #[inline]
    fn letters2(&self, q: usize) -> Option<usize> {
        let n = self.b.len();
        if q >= n {
            return None;
        }
        let mut i = q;
        let mut last_low_end = None;
        let mut next_flags = None;
        while i < n {
            let (g, _, j) = self.at(i);
            if g & UP == 0 {
                next_flags = Some(g);
                break;
            }
            if g & LOW != 0 {
                last_low_end = Some(j);
            }
            i = j;
        }
        let e = match next_flags {
            Some(g) if g & LOW != 0 => self.run(i, LOW),
            // Back off the UP run to its last LOW character; the LOW run from there is that
            // one character, since nothing after it in the run (nor at the run's end) is LOW.
            _ => last_low_end?,
        };
        Some(self.contraction(e))
    }

    /// letters3(q): `[UP]+[LOW]*` then the optional contraction.
    #[inline]
    fn letters3(&self, q: usize) -> Option<usize> {
        if q >= self.b.len() || self.at(q).0 & UP == 0 {
            return None;
        }
        let u = self.run(q, UP);
        let e = self.run(u, LOW);
        Some(self.contraction(e))
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at `e`.
    #[inline]
    fn contraction(&self, e: usize) -> usize {
        let n = self.b.len();
        if e >= n || self.b[e] != b'\'' {
            return e;
        }
        let e1 = e + 1;
        if e1 >= n {
            return e;
        }
        let (_, c1, e2) = self.at(e1);
        let f1 = fold(c1);
        if matches!(f1, b's' | b't' | b'm' | b'd') {
            return e2;
        }
        if e2 >= n {
            return e;
        }
        let (_, c2, e3) = self.at(e2);
        match (f1, fold(c2)) {
            (b'r', b'e') | (b'v', b'e') | (b'l', b'l') => e3,
            _ => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn spec_examples() {
        // TOKENIZER.md §6.4
        let cases: &[(&str, &[&str])] = &[
            ("Hello, world!", &["Hello", ",", " world", "!"]),
            ("hello   world", &["hello", "  ", " world"]),
            ("don't DON'T", &["don't", " DON'T"]),
            ("\n\n  x", &["\n\n", " ", " x"]),
            (" !!\n\nx", &[" !!\n\n", "x"]),
            ("3.14159", &["3", ".", "141", "59"]),
            ("中文English混合", &["中文", "English", "混合"]),
            ("HELLOworld", &["HELLOworld"]),
            ("helloWORLD", &["hello", "WORLD"]),
            ("あA", &["あ", "A"]),
            ("AあB", &["Aあ", "B"]),
            ("\u{301}A", &["\u{301}", "A"]),
            ("x \t!", &["x", " ", "\t", "!"]),
            ("a\tb", &["a", "\tb"]),
            ("it'ſ", &["it'ſ"]),
            ("a'rx", &["a", "'rx"]),
            ("〇12", &["〇", "12"]),
        ];
        for (text, want) in cases {
            assert_eq!(&split(text), want, "{text:?}");
        }
    }
}
