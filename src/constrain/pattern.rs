//! The `pattern` subset (issue 25 item 2; docs/structured-output.md lists it exactly):
//! literals, `.`, character classes `[…]`/`[^…]` with ranges and `\d \w \s` inside, the
//! escapes `\d \w \s \D \W \S \n \r \t \f \v \xHH \uHHHH` and escaped punctuation, groups
//! `(…)`, `(?:…)`, `(?P<n>…)`, `(?<n>…)`, alternation `|`, and the quantifiers `?`, `*`, `+`,
//! `{m}`, `{m,}`, `{m,n}` (a lazy `?` after one changes nothing for a whole match). `^` may
//! only open the pattern and `$` only end it; a side without its anchor admits any text
//! there (JSON Schema patterns search). Everything else (backreferences, lookaround, `\b`,
//! flags, possessive quantifiers, non-ASCII class members, `\p{…}`) is refused.
//!
//! Character semantics are the subset every regex engine agrees on: `\d` is `[0-9]`, `\w`
//! `[A-Za-z0-9_]`, `\s` `[ \t\n\r\f\v]`; `\D \W \S` admit only ASCII; `.` and negated
//! classes admit every character but newline (resp. the listed ones), non-ASCII included.
//! In a JSON string each character is written as the JSON writer would (`"`, `\` and control
//! characters escaped); in a raw tool argument as itself.

use super::grammar::{utf8_multibyte, Builder};

/// Most repetitions one `{m,n}` may ask for (states grow with it).
const MAX_REPEAT: u32 = 1000;

#[derive(Debug, Clone)]
struct Class {
    ascii: [bool; 128],
    non_ascii: bool,
}

impl Class {
    fn none() -> Class {
        Class {
            ascii: [false; 128],
            non_ascii: false,
        }
    }
    fn range(&mut self, lo: u8, hi: u8) {
        for c in lo..=hi {
            self.ascii[c as usize] = true;
        }
    }
    fn negate(&mut self) {
        for a in &mut self.ascii {
            *a = !*a;
        }
        self.non_ascii = !self.non_ascii;
    }
    fn union(&mut self, o: &Class) {
        for (a, b) in self.ascii.iter_mut().zip(o.ascii.iter()) {
            *a |= *b;
        }
        self.non_ascii |= o.non_ascii;
    }
}

#[derive(Debug, Clone)]
enum Atom {
    /// A literal character (its UTF-8 bytes).
    Char(char),
    Class(Class),
    Group(Vec<Vec<Piece>>),
}

#[derive(Debug, Clone)]
struct Piece {
    atom: Atom,
    min: u32,
    max: Option<u32>,
}

struct Parser<'a> {
    s: Vec<char>,
    i: usize,
    _src: &'a str,
}

type P<T> = Result<T, String>;

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn alt(&mut self, depth: usize) -> P<Vec<Vec<Piece>>> {
        if depth > 32 {
            return Err("groups nested deeper than 32".into());
        }
        let mut alts = vec![self.seq(depth)?];
        while self.peek() == Some('|') {
            self.i += 1;
            alts.push(self.seq(depth)?);
        }
        Ok(alts)
    }

    fn seq(&mut self, depth: usize) -> P<Vec<Piece>> {
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            let atom = match c {
                '|' | ')' => break,
                '^' => return Err("`^` is supported only at the start of the pattern".into()),
                '$' => {
                    if self.i + 1 == self.s.len() {
                        break;
                    }
                    return Err("`$` is supported only at the end of the pattern".into());
                }
                '(' => {
                    self.i += 1;
                    if self.peek() == Some('?') {
                        let rest: String = self.s[self.i..].iter().take(3).collect();
                        if rest.starts_with("?:") {
                            self.i += 2;
                        } else if rest.starts_with("?P<")
                            || rest.starts_with("?<")
                                && !rest.starts_with("?<=")
                                && !rest.starts_with("?<!")
                        {
                            while let Some(c) = self.peek() {
                                self.i += 1;
                                if c == '>' {
                                    break;
                                }
                            }
                        } else {
                            return Err("only the groups (…), (?:…) and named groups are supported (no lookaround or flags)".into());
                        }
                    }
                    let g = self.alt(depth + 1)?;
                    if self.peek() != Some(')') {
                        return Err("unclosed group".into());
                    }
                    self.i += 1;
                    Atom::Group(g)
                }
                '[' => {
                    self.i += 1;
                    Atom::Class(self.class()?)
                }
                '.' => {
                    self.i += 1;
                    let mut c = Class::none();
                    c.negate();
                    c.ascii[b'\n' as usize] = false;
                    Atom::Class(c)
                }
                '\\' => {
                    self.i += 1;
                    self.escape(false)?
                }
                '*' | '+' | '?' | '{' => {
                    return Err(format!("quantifier `{c}` without anything to repeat"))
                }
                _ => {
                    self.i += 1;
                    Atom::Char(c)
                }
            };
            let (min, max) = self.quantifier()?;
            out.push(Piece { atom, min, max });
        }
        Ok(out)
    }

    fn quantifier(&mut self) -> P<(u32, Option<u32>)> {
        let q = match self.peek() {
            Some('?') => (0, Some(1)),
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('{') => {
                let start = self.i;
                self.i += 1;
                let num = |p: &mut Self| -> Option<u32> {
                    let st = p.i;
                    while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                        p.i += 1;
                    }
                    p.s[st..p.i].iter().collect::<String>().parse().ok()
                };
                let Some(m) = num(self) else {
                    self.i = start;
                    return Err(
                        "`{` must start a quantifier {m}, {m,} or {m,n} (escape it as \\{)".into(),
                    );
                };
                let max = if self.peek() == Some(',') {
                    self.i += 1;
                    if self.peek() == Some('}') {
                        None
                    } else {
                        Some(num(self).ok_or("bad {m,n} quantifier")?)
                    }
                } else {
                    Some(m)
                };
                if self.peek() != Some('}') {
                    return Err("bad {m,n} quantifier".into());
                }
                if max.is_some_and(|x| x < m) {
                    return Err("{m,n} with n < m".into());
                }
                if m > MAX_REPEAT || max.is_some_and(|x| x > MAX_REPEAT) {
                    return Err(format!(
                        "repetition counts above {MAX_REPEAT} are not supported"
                    ));
                }
                (m, max)
            }
            _ => return Ok((1, Some(1))),
        };
        self.i += 1;
        match self.peek() {
            Some('?') => self.i += 1, // lazy: the same whole-match language
            Some('+') => return Err("possessive quantifiers are not supported".into()),
            _ => {}
        }
        if matches!(self.peek(), Some('*') | Some('+') | Some('{')) {
            return Err("a quantifier cannot follow a quantifier".into());
        }
        Ok(q)
    }

    fn escape(&mut self, in_class: bool) -> P<Atom> {
        let Some(c) = self.peek() else {
            return Err("pattern ends with `\\`".into());
        };
        self.i += 1;
        let mut cl = Class::none();
        let atom = match c {
            'd' | 'D' => {
                cl.range(b'0', b'9');
                if c == 'D' {
                    cl.negate();
                    cl.non_ascii = false;
                }
                Atom::Class(cl)
            }
            'w' | 'W' => {
                cl.range(b'a', b'z');
                cl.range(b'A', b'Z');
                cl.range(b'0', b'9');
                cl.range(b'_', b'_');
                if c == 'W' {
                    cl.negate();
                    cl.non_ascii = false;
                }
                Atom::Class(cl)
            }
            's' | 'S' => {
                for b in [b' ', b'\t', b'\n', b'\r', 0x0c, 0x0b] {
                    cl.range(b, b);
                }
                if c == 'S' {
                    cl.negate();
                    cl.non_ascii = false;
                }
                Atom::Class(cl)
            }
            'n' => Atom::Char('\n'),
            'r' => Atom::Char('\r'),
            't' => Atom::Char('\t'),
            'f' => Atom::Char('\x0c'),
            'v' => Atom::Char('\x0b'),
            'x' | 'u' => {
                let n = if c == 'x' { 2 } else { 4 };
                let h: String = self
                    .s
                    .get(self.i..self.i + n)
                    .map(|s| s.iter().collect())
                    .unwrap_or_default();
                let v = u32::from_str_radix(&h, 16)
                    .map_err(|_| format!("\\{c} needs {n} hex digits"))?;
                self.i += n;
                Atom::Char(char::from_u32(v).ok_or("\\u of a surrogate is not supported")?)
            }
            c if c.is_ascii_punctuation() => Atom::Char(c),
            'b' if in_class => Atom::Char('\x08'),
            _ => return Err(format!("the escape \\{c} is not supported")),
        };
        Ok(atom)
    }

    fn class(&mut self) -> P<Class> {
        let mut cl = Class::none();
        let neg = self.peek() == Some('^');
        if neg {
            self.i += 1;
        }
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return Err("unclosed character class".into());
            };
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            self.i += 1;
            let lo = match c {
                '\\' => match self.escape(true)? {
                    Atom::Class(k) => {
                        cl.union(&k);
                        continue;
                    }
                    Atom::Char(ch) => ch,
                    Atom::Group(_) => unreachable!("escapes are never groups"),
                },
                '[' if self.peek() == Some(':') => {
                    return Err("POSIX classes [:…:] are not supported".into())
                }
                _ => c,
            };
            let mut hi = lo;
            if self.peek() == Some('-') && self.s.get(self.i + 1).is_some_and(|&n| n != ']') {
                self.i += 1;
                let h = self.peek().ok_or("unclosed character class")?;
                self.i += 1;
                hi = if h == '\\' {
                    match self.escape(true)? {
                        Atom::Char(ch) => ch,
                        _ => return Err("a class range cannot end in a class escape".into()),
                    }
                } else {
                    h
                };
            }
            if !lo.is_ascii() || !hi.is_ascii() {
                return Err(
                    "non-ASCII characters inside a character class are not supported".into(),
                );
            }
            if hi < lo {
                return Err(format!("class range {lo}-{hi} is out of order"));
            }
            cl.range(lo as u8, hi as u8);
        }
        if neg {
            cl.negate();
        }
        Ok(cl)
    }
}

/// Compiles `pat` between the nodes `from` and `to` (the string's content: between the
/// quotes, or the raw argument text). Err: why the pattern is refused.
pub(crate) fn compile(
    b: &mut Builder,
    pat: &str,
    from: u32,
    to: u32,
    raw: bool,
) -> Result<(), String> {
    let mut body = pat;
    let anchored_start = body.starts_with('^');
    if anchored_start {
        body = &body[1..];
    }
    let anchored_end = body.ends_with('$') && !body.ends_with("\\$");
    let mut p = Parser {
        s: body.chars().collect(),
        i: 0,
        _src: pat,
    };
    let alts = p.alt(0)?;
    if p.i < p.s.len() && !(anchored_end && p.i + 1 == p.s.len()) {
        return Err(format!("unbalanced `{}`", p.s[p.i]));
    }
    let mut any = Class::none();
    any.negate();
    let start = if anchored_start {
        from
    } else {
        let n = b.node();
        b.eps(from, n);
        class(b, &any, n, n, raw);
        n
    };
    let end = if anchored_end {
        to
    } else {
        let n = b.node();
        b.eps(n, to);
        class(b, &any, n, n, raw);
        n
    };
    alt(b, &alts, start, end, raw);
    Ok(())
}

fn alt(b: &mut Builder, alts: &[Vec<Piece>], from: u32, to: u32, raw: bool) {
    for s in alts {
        let mut cur = from;
        for (i, p) in s.iter().enumerate() {
            let next = if i + 1 == s.len() { to } else { b.node() };
            piece(b, p, cur, next, raw);
            cur = next;
        }
        if s.is_empty() {
            b.eps(from, to);
        }
    }
}

fn piece(b: &mut Builder, p: &Piece, from: u32, to: u32, raw: bool) {
    let mut cur = from;
    for _ in 0..p.min {
        if b.overflow {
            return;
        }
        let n = b.node();
        atom(b, &p.atom, cur, n, raw);
        cur = n;
    }
    match p.max {
        None => {
            let n = b.node();
            b.eps(cur, n);
            atom(b, &p.atom, n, n, raw);
            b.eps(n, to);
        }
        Some(mx) => {
            b.eps(cur, to);
            for _ in p.min..mx {
                if b.overflow {
                    return;
                }
                let n = b.node();
                atom(b, &p.atom, cur, n, raw);
                b.eps(n, to);
                cur = n;
            }
        }
    }
}

fn atom(b: &mut Builder, a: &Atom, from: u32, to: u32, raw: bool) {
    match a {
        Atom::Char(c) => {
            let mut buf = [0u8; 4];
            let s = c.encode_utf8(&mut buf);
            if c.is_ascii() {
                let mut cl = Class::none();
                cl.range(*c as u8, *c as u8);
                class(b, &cl, from, to, raw);
            } else {
                b.lit_to(from, s.as_bytes(), to);
            }
        }
        Atom::Class(cl) => class(b, cl, from, to, raw),
        Atom::Group(g) => {
            // A fresh entry node keeps a looped group (from == to) a proper loop.
            let n = b.node();
            b.eps(from, n);
            let m = b.node();
            b.eps(m, to);
            alt(b, g, n, m, raw);
        }
    }
}

/// One character of `cl` from `from` to `to`, written as the JSON writer would (or raw).
fn class(b: &mut Builder, cl: &Class, from: u32, to: u32, raw: bool) {
    let mut c = 0usize;
    while c < 128 {
        if !cl.ascii[c] {
            c += 1;
            continue;
        }
        let escaped = !raw && (c < 0x20 || c == b'"' as usize || c == b'\\' as usize);
        if escaped {
            let mut s = String::new();
            crate::json::write_string(&mut s, &(c as u8 as char).to_string());
            let inner = &s.as_bytes()[1..s.len() - 1];
            b.lit_to(from, inner, to);
            c += 1;
            continue;
        }
        let lo = c;
        while c + 1 < 128
            && cl.ascii[c + 1]
            && !(!raw && (c + 1 == b'"' as usize || c + 1 == b'\\' as usize))
        {
            c += 1;
        }
        b.bytes(from, lo as u8, c as u8, to);
        c += 1;
    }
    if cl.non_ascii {
        utf8_multibyte(b, from, to);
    }
}

#[cfg(test)]
mod tests {
    use super::super::grammar::Builder;
    use super::super::pda::accepts;
    use super::*;

    fn m(pat: &str, raw: bool, text: &str) -> bool {
        let mut b = Builder::new();
        let (s, e) = b.rule();
        compile(&mut b, pat, s, e, raw).unwrap();
        accepts(&b.finish(s).unwrap(), text.as_bytes())
    }

    #[test]
    fn anchored_subset() {
        assert!(m("^[a-z]{2,4}-[0-9]+$", true, "abc-12"));
        assert!(!m("^[a-z]{2,4}-[0-9]+$", true, "a-12"));
        assert!(!m("^[a-z]{2,4}-[0-9]+$", true, "abcde-1"));
        assert!(m("^(yes|no)$", true, "no") && !m("^(yes|no)$", true, "yesno"));
        assert!(m("^\\d{3}(\\.\\d+)?$", true, "123.45") && !m("^\\d{3}(\\.\\d+)?$", true, "123."));
        assert!(m("^[^,]*$", true, "é x") && !m("^[^,]*$", true, "a,b"));
        assert!(m("^a.c$", true, "a😀c") && !m("^a.c$", true, "a\nc"));
        assert!(m("^(?:ab)*$", true, "ababab") && !m("^(?:ab)*$", true, "aba"));
        assert!(m("^\\w+@\\w+\\.com$", true, "me@x.com"));
    }

    #[test]
    fn unanchored_sides_search() {
        assert!(m("abc", true, "xxabcyy") && !m("abc", true, "xxabyy"));
        assert!(m("^ab", true, "abzz") && !m("^ab", true, "zab"));
    }

    #[test]
    fn json_strings_escape_what_they_must() {
        // In a JSON string the pattern's characters are written escaped: `"` as `\"`.
        assert!(m("^a\"b$", false, "a\\\"b") && !m("^a\"b$", false, "a\"b"));
        assert!(m("^\\n$", false, "\\n"));
    }

    #[test]
    fn refused_forms() {
        let mut b = Builder::new();
        let (s, e) = b.rule();
        for bad in [
            "(?=a)", "a\\1", "\\bword", "a{2,1}", "[é]", "a*+", "^a|^b", "\\p{L}", "(a", "a)",
            "x{1001}",
        ] {
            assert!(compile(&mut b, bad, s, e, true).is_err(), "{bad}");
        }
    }
}
