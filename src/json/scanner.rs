//! The pull scanner over a UTF-8 byte slice (RFC 8259): the caller asks for the next key,
//! element, string or number.

use super::{quote_str, JResult, JsonError, Number, Object, Value, DEFAULT_MAX_DEPTH};
use std::borrow::Cow;
use std::collections::HashSet;

/// The kind of the next value, as seen by [`Scanner::peek`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number.
    Number,
    /// A string.
    String,
    /// `[`.
    Array,
    /// `{`.
    Object,
}

impl Kind {
    /// The JSON type name (`null`, `bool`, `number`, `string`, `array`, `object`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "bool",
            Kind::Number => "number",
            Kind::String => "string",
            Kind::Array => "array",
            Kind::Object => "object",
        }
    }
}

/// A pull parser over one JSON text.
///
/// Protocol: read one value with [`peek`](Scanner::peek) plus the matching reader
/// ([`string`](Scanner::string), [`number`](Scanner::number), [`bool`](Scanner::bool),
/// [`null`](Scanner::null), [`begin_object`](Scanner::begin_object) /
/// [`next_key`](Scanner::next_key), [`begin_array`](Scanner::begin_array) /
/// [`next_element`](Scanner::next_element), [`skip_value`](Scanner::skip_value),
/// [`value`](Scanner::value)); after the top-level value call [`finish`](Scanner::finish).
/// After `next_key` returns a key, exactly one value must be read before the next call.
///
/// The pull API does **not** detect duplicate member names (it keeps no member sets); callers
/// that stream objects must check uniqueness themselves. [`Scanner::value`] and [`parse`] do.
pub struct Scanner<'a> {
    src: &'a [u8],
    pos: usize,
    max_depth: usize,
    /// One entry per open array/object: true while no member/element has been read yet.
    first: Vec<bool>,
    /// Offset of the opening quote of the key last returned by `next_key`.
    key_at: usize,
}

impl<'a> Scanner<'a> {
    /// A scanner over `input` with the default nesting limit. Errors if `input` is not UTF-8.
    pub fn new(input: &'a [u8]) -> JResult<Scanner<'a>> {
        Self::with_max_depth(input, DEFAULT_MAX_DEPTH)
    }

    /// A scanner with an explicit nesting limit. Errors if `input` is not UTF-8.
    pub fn with_max_depth(input: &'a [u8], max_depth: usize) -> JResult<Scanner<'a>> {
        if let Err(e) = std::str::from_utf8(input) {
            let at = e.valid_up_to();
            let found = match e.error_len() {
                Some(_) => format!("byte 0x{:02x}", input[at]),
                None => "a UTF-8 sequence cut short by the end of input".to_string(),
            };
            return Err(JsonError::new(
                at,
                format!("expected UTF-8 text, found {found}"),
            ));
        }
        Ok(Scanner {
            src: input,
            pos: 0,
            max_depth,
            first: Vec::new(),
            key_at: 0,
        })
    }

    /// Current byte offset in the input.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Byte offset of the opening quote of the member name last returned by
    /// [`next_key`](Scanner::next_key) (for messages about that member).
    pub fn key_offset(&self) -> usize {
        self.key_at
    }

    /// A problem at `at` stated as such (`duplicate member name "a"`).
    fn err<T>(&self, at: usize, problem: impl Into<String>) -> JResult<T> {
        Err(JsonError::new(at, problem))
    }

    /// `expected {what}, found {what is at `at`}`, at `at`.
    fn expected<T>(&self, at: usize, what: impl std::fmt::Display) -> JResult<T> {
        Err(JsonError::new(
            at,
            format!("expected {what}, found {}", self.describe_at(at)),
        ))
    }

    fn skip_ws(&mut self) {
        while let Some(&b) = self.src.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// What is at byte `at`, for "found …": end of input, an ASCII character, a non-ASCII
    /// character with its code point, or another byte in hex.
    fn describe_at(&self, at: usize) -> String {
        match self.src.get(at) {
            None => "end of input".to_string(),
            Some(&b) if b.is_ascii_graphic() => format!("'{}'", b as char),
            Some(&b) if b >= 0xC0 => {
                let n = if b >= 0xF0 {
                    4
                } else if b >= 0xE0 {
                    3
                } else {
                    2
                };
                let end = (at + n).min(self.src.len());
                match std::str::from_utf8(&self.src[at..end])
                    .ok()
                    .and_then(|t| t.chars().next())
                {
                    Some(c) => format!("'{c}' (U+{:04X})", c as u32),
                    None => format!("byte 0x{b:02x}"),
                }
            }
            Some(&b) => format!("byte 0x{b:02x}"),
        }
    }

    fn control_char<T>(&self, at: usize) -> JResult<T> {
        self.err(
            at,
            format!(
                "unescaped control character U+{:04X} in a string (write it as an escape, e.g. \\u{:04x})",
                self.src[at], self.src[at]
            ),
        )
    }

    fn unterminated<T>(&self, open: usize) -> JResult<T> {
        self.err(
            open,
            "expected a closing '\"' for the string starting here, found end of input",
        )
    }

    /// The kind of the next value (skipping whitespace). Errors at end of input or on a byte
    /// that cannot start a value.
    pub fn peek(&mut self) -> JResult<Kind> {
        self.skip_ws();
        match self.src.get(self.pos) {
            Some(b'n') => Ok(Kind::Null),
            Some(b't' | b'f') => Ok(Kind::Bool),
            Some(b'-' | b'0'..=b'9') => Ok(Kind::Number),
            Some(b'"') => Ok(Kind::String),
            Some(b'[') => Ok(Kind::Array),
            Some(b'{') => Ok(Kind::Object),
            _ => self.expected(self.pos, "a JSON value"),
        }
    }

    fn expect_kind(&mut self, want: Kind) -> JResult<()> {
        let at = self.pos;
        let k = self.peek()?;
        if k != want {
            let at = at.max(self.pos);
            return self.err(at, format!("expected {}, found {}", want.name(), k.name()));
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static str) -> JResult<()> {
        let end = self.pos + word.len();
        if self.src.get(self.pos..end) == Some(word.as_bytes()) {
            self.pos = end;
            Ok(())
        } else {
            self.expected(self.pos, format!("`{word}`"))
        }
    }

    /// Reads `null`.
    pub fn null(&mut self) -> JResult<()> {
        self.expect_kind(Kind::Null)?;
        self.literal("null")
    }

    /// Reads `true` or `false`.
    pub fn bool(&mut self) -> JResult<bool> {
        self.expect_kind(Kind::Bool)?;
        if self.src[self.pos] == b't' {
            self.literal("true").map(|_| true)
        } else {
            self.literal("false").map(|_| false)
        }
    }

    /// Reads a number and returns its raw lexeme (validated against the RFC 8259 grammar:
    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`).
    pub fn number(&mut self) -> JResult<&'a str> {
        self.expect_kind(Kind::Number)?;
        let start = self.pos;
        let s = self.src;
        let mut i = self.pos;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while matches!(s.get(i), Some(b'0'..=b'9')) {
                    i += 1;
                }
            }
            _ => return self.expected(i, "a digit"),
        }
        if s.get(i) == Some(&b'.') {
            i += 1;
            if !matches!(s.get(i), Some(b'0'..=b'9')) {
                return self.expected(i, "a digit after the decimal point");
            }
            while matches!(s.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(s.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !matches!(s.get(i), Some(b'0'..=b'9')) {
                return self.expected(i, "a digit in the exponent");
            }
            while matches!(s.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        self.pos = i;
        // The input was validated as UTF-8 and the lexeme is ASCII.
        Ok(std::str::from_utf8(&s[start..i]).unwrap_or_default())
    }

    /// Reads a string and returns its decoded value: borrowed from the input when it has no
    /// escapes, owned otherwise. Errors: unescaped control characters (U+0000..U+001F), an
    /// unknown escape, bad `\u` hex digits, a lone or reversed surrogate, end of input.
    pub fn string(&mut self) -> JResult<Cow<'a, str>> {
        self.expect_kind(Kind::String)?;
        let open = self.pos;
        self.pos += 1;
        let start = self.pos;
        // Fast path: find the first quote or backslash; the run before it must be free of
        // control characters.
        let rest = &self.src[start..];
        let hit = memchr::memchr2(b'"', b'\\', rest);
        let run_end = hit.map_or(self.src.len(), |h| start + h);
        if let Some(c) = self.src[start..run_end].iter().position(|&b| b < 0x20) {
            return self.control_char(start + c);
        }
        match hit {
            None => self.unterminated(open),
            Some(h) if rest[h] == b'"' => {
                self.pos = start + h + 1;
                Ok(Cow::Borrowed(self.str_slice(start, start + h)))
            }
            Some(h) => {
                let mut out = String::with_capacity(h + 16);
                out.push_str(self.str_slice(start, start + h));
                self.pos = start + h;
                self.string_slow(open, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    fn str_slice(&self, a: usize, b: usize) -> &'a str {
        // Boundaries are ASCII bytes ('"', '\\') of validated UTF-8, hence char boundaries.
        std::str::from_utf8(&self.src[a..b]).unwrap_or_default()
    }

    /// Continues a string at an escape; `self.pos` is at a backslash or plain text.
    fn string_slow(&mut self, open: usize, out: &mut String) -> JResult<()> {
        loop {
            let rest = &self.src[self.pos..];
            let hit = match memchr::memchr2(b'"', b'\\', rest) {
                Some(h) => h,
                None => return self.unterminated(open),
            };
            let run = &rest[..hit];
            if let Some(c) = run.iter().position(|&b| b < 0x20) {
                return self.control_char(self.pos + c);
            }
            out.push_str(self.str_slice(self.pos, self.pos + hit));
            self.pos += hit;
            if self.src[self.pos] == b'"' {
                self.pos += 1;
                return Ok(());
            }
            // Backslash escape.
            let esc_at = self.pos;
            let c = match self.src.get(self.pos + 1) {
                Some(&c) => c,
                None => return self.expected(self.pos + 1, "an escape character after '\\'"),
            };
            self.pos += 2;
            match c {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let hi = self.hex4()?;
                    let cp = if (0xD800..0xDC00).contains(&hi) {
                        // A high surrogate must be followed by an escaped low surrogate.
                        if self.src.get(self.pos) != Some(&b'\\')
                            || self.src.get(self.pos + 1) != Some(&b'u')
                        {
                            return self.err(
                                esc_at,
                                format!(
                                    "expected a low surrogate escape (\\uDC00..\\uDFFF) after the high surrogate \\u{hi:04X}, found {}",
                                    self.describe_at(self.pos)
                                ),
                            );
                        }
                        self.pos += 2;
                        let lo_at = self.pos - 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..0xE000).contains(&lo) {
                            return self.err(
                                lo_at,
                                format!(
                                    "expected a low surrogate escape (\\uDC00..\\uDFFF) after the high surrogate \\u{hi:04X}, found \\u{lo:04X}"
                                ),
                            );
                        }
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    } else if (0xDC00..0xE000).contains(&hi) {
                        return self.err(
                            esc_at,
                            format!(
                                "lone low surrogate escape \\u{hi:04X} (no high surrogate before it)"
                            ),
                        );
                    } else {
                        hi
                    };
                    match char::from_u32(cp) {
                        Some(ch) => out.push(ch),
                        None => {
                            return self.err(
                                esc_at,
                                format!("escape for U+{cp:X}, which is not a Unicode scalar value"),
                            )
                        }
                    }
                }
                _ => {
                    return self.err(
                        esc_at,
                        format!(
                            "expected a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX) after '\\', found {}",
                            self.describe_at(esc_at + 1)
                        ),
                    )
                }
            }
        }
    }

    fn hex4(&mut self) -> JResult<u32> {
        let mut v = 0u32;
        for k in 0..4 {
            let d = match self.src.get(self.pos + k) {
                Some(&b) => match b {
                    b'0'..=b'9' => b - b'0',
                    b'a'..=b'f' => b - b'a' + 10,
                    b'A'..=b'F' => b - b'A' + 10,
                    _ => return self.expected(self.pos + k, "four hex digits after \\u"),
                },
                None => return self.expected(self.pos + k, "four hex digits after \\u"),
            };
            v = v * 16 + u32::from(d);
        }
        self.pos += 4;
        Ok(v)
    }

    fn open(&mut self, what: u8) -> JResult<()> {
        if self.first.len() >= self.max_depth {
            return self.err(
                self.pos,
                format!(
                    "nesting deeper than {} (arrays and objects)",
                    self.max_depth
                ),
            );
        }
        debug_assert_eq!(self.src[self.pos], what);
        self.pos += 1;
        self.first.push(true);
        Ok(())
    }

    /// Enters an object (consumes `{`). Then call [`next_key`](Scanner::next_key) until it
    /// returns `None`.
    pub fn begin_object(&mut self) -> JResult<()> {
        self.expect_kind(Kind::Object)?;
        self.open(b'{')
    }

    /// The next member name of the current object (consuming `,` and `:`), or `None` after
    /// the closing `}`.
    pub fn next_key(&mut self) -> JResult<Option<Cow<'a, str>>> {
        self.skip_ws();
        let first = match self.first.last_mut() {
            Some(f) => std::mem::replace(f, false),
            None => return self.err(self.pos, "scanner misuse: no open object"),
        };
        match self.src.get(self.pos) {
            Some(b'}') => {
                self.pos += 1;
                self.first.pop();
                return Ok(None);
            }
            Some(b',') if !first => {
                self.pos += 1;
                self.skip_ws();
                if self.src.get(self.pos) != Some(&b'"') {
                    return self.expected(self.pos, "a member name string after ','");
                }
            }
            Some(b'"') if first => {}
            _ => {
                let what = if first {
                    "a member name string or '}'"
                } else {
                    "',' or '}' after an object member"
                };
                return self.expected(self.pos, what);
            }
        }
        self.key_at = self.pos;
        let key = self.string()?;
        self.skip_ws();
        if self.src.get(self.pos) != Some(&b':') {
            return self.expected(self.pos, "':' after the member name");
        }
        self.pos += 1;
        Ok(Some(key))
    }

    /// Enters an array (consumes `[`). Then call [`next_element`](Scanner::next_element)
    /// until it returns false.
    pub fn begin_array(&mut self) -> JResult<()> {
        self.expect_kind(Kind::Array)?;
        self.open(b'[')
    }

    /// True if another element follows (consuming a `,`), false after the closing `]`.
    pub fn next_element(&mut self) -> JResult<bool> {
        self.skip_ws();
        let first = match self.first.last_mut() {
            Some(f) => std::mem::replace(f, false),
            None => return self.err(self.pos, "scanner misuse: no open array"),
        };
        match self.src.get(self.pos) {
            Some(b']') => {
                self.pos += 1;
                self.first.pop();
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                self.skip_ws();
                if self.src.get(self.pos) == Some(&b']') {
                    return self.expected(self.pos, "an array element after ','");
                }
                Ok(true)
            }
            Some(_) if first => Ok(true),
            _ => self.expected(self.pos, "',' or ']' after an array element"),
        }
    }

    /// Skips the next value entirely (validating it).
    pub fn skip_value(&mut self) -> JResult<()> {
        match self.peek()? {
            Kind::Null => self.null(),
            Kind::Bool => self.bool().map(|_| ()),
            Kind::Number => self.number().map(|_| ()),
            Kind::String => self.string().map(|_| ()),
            Kind::Array => {
                self.begin_array()?;
                while self.next_element()? {
                    self.skip_value()?;
                }
                Ok(())
            }
            Kind::Object => {
                self.begin_object()?;
                while self.next_key()?.is_some() {
                    self.skip_value()?;
                }
                Ok(())
            }
        }
    }

    /// Reads the next value as a DOM. A duplicate member name in any object is an error at
    /// the offset of the second occurrence.
    pub fn value(&mut self) -> JResult<Value> {
        match self.peek()? {
            Kind::Null => self.null().map(|_| Value::Null),
            Kind::Bool => self.bool().map(Value::Bool),
            Kind::Number => {
                let n = self.number()?;
                let at = self.pos - n.len();
                Ok(Value::Number(Number(n.to_string(), Some(at))))
            }
            Kind::String => self.string().map(|s| Value::String(s.into_owned())),
            Kind::Array => {
                self.begin_array()?;
                let mut items = Vec::new();
                while self.next_element()? {
                    items.push(self.value()?);
                }
                Ok(Value::Array(items))
            }
            Kind::Object => {
                self.begin_object()?;
                let mut members: Vec<(String, Value)> = Vec::new();
                // Small objects: linear scan; large ones: a set of names.
                let mut seen: Option<HashSet<String>> = None;
                while let Some(key) = self.next_key()? {
                    let key_at = self.key_at;
                    let dup = match &mut seen {
                        Some(set) => !set.insert(key.to_string()),
                        None => {
                            let d = members.iter().any(|(k, _)| *k == key);
                            if members.len() >= 16 {
                                let mut set: HashSet<String> =
                                    members.iter().map(|(k, _)| k.clone()).collect();
                                set.insert(key.to_string());
                                seen = Some(set);
                            }
                            d
                        }
                    };
                    if dup {
                        return self
                            .err(key_at, format!("duplicate member name {}", quote_str(&key)));
                    }
                    let v = self.value()?;
                    members.push((key.into_owned(), v));
                }
                Ok(Value::Object(Object { members }))
            }
        }
    }

    /// Ends the scan: only whitespace may follow the top-level value.
    pub fn finish(&mut self) -> JResult<()> {
        self.skip_ws();
        if self.pos != self.src.len() {
            return self.expected(self.pos, "end of input after the top-level value");
        }
        Ok(())
    }
}
