//! The DOM: values as parsed (objects keep member order, numbers keep their lexeme and byte
//! offset) and built for reports.

use super::write::write_value;
use std::fmt;

/// Longest input text (in bytes) an error message quotes whole; longer text is named by its
/// length and byte offset instead, so a 100,001-digit literal does not fill the terminal.
pub const QUOTE_MAX: usize = 40;

/// A JSON number kept as its raw lexeme (RFC 8259 §6 grammar, already validated), and the
/// byte offset where it starts in the parsed text (`None` for constructed numbers).
/// Two numbers are equal when their lexemes are.
#[derive(Debug, Clone)]
pub struct Number(pub(super) String, pub(super) Option<usize>);

impl PartialEq for Number {
    fn eq(&self, other: &Number) -> bool {
        self.0 == other.0
    }
}

impl Eq for Number {}

impl Number {
    /// The number exactly as written in the input (or as produced by the constructors).
    pub fn lexeme(&self) -> &str {
        &self.0
    }

    /// The number as an error message quotes it: the lexeme when at most [`QUOTE_MAX`]
    /// bytes, else `<N characters at byte B>` (B: its offset in the parsed text).
    pub fn quoted(&self) -> String {
        if self.0.len() <= QUOTE_MAX {
            return self.0.clone();
        }
        match self.1 {
            Some(at) => format!("<{} characters at byte {at}>", self.0.len()),
            None => format!("<{} characters>", self.0.len()),
        }
    }

    /// True when the lexeme has neither a fraction nor an exponent (MODEL.md §2.3 *int*).
    pub fn is_integer(&self) -> bool {
        lexeme_is_integer(&self.0)
    }

    /// The value as u64 when the lexeme is an integer without a sign that fits in u64.
    pub fn as_u64(&self) -> Option<u64> {
        lexeme_as_u64(&self.0)
    }

    /// The value as i64 when the lexeme is an integer that fits in i64 (`-0` is 0).
    pub fn as_i64(&self) -> Option<i64> {
        if !self.is_integer() {
            return None;
        }
        self.0.parse::<i64>().ok()
    }

    /// The value as the nearest f64 (correctly rounded). May be infinite for a huge exponent
    /// (`1e400`); callers that need finiteness check it.
    pub fn as_f64(&self) -> f64 {
        // A validated JSON number lexeme is always accepted by Rust's float parser.
        self.0.parse::<f64>().unwrap_or(f64::NAN)
    }

    /// A number from an unsigned integer.
    pub fn from_u64(v: u64) -> Number {
        Number(v.to_string(), None)
    }

    /// A number from a signed integer.
    pub fn from_i64(v: i64) -> Number {
        Number(v.to_string(), None)
    }

    /// A number from a finite f64, written shortest-round-trip (`0.1`, `1e-20`, `4.0`).
    /// Returns `None` for NaN and infinities, which JSON cannot represent.
    pub fn from_f64(v: f64) -> Option<Number> {
        if v.is_finite() {
            // `{:?}` is Rust's shortest representation that round-trips; it always contains a
            // '.' or an exponent and never uses a form JSON rejects for finite values.
            Some(Number(format!("{v:?}"), None))
        } else {
            None
        }
    }
}

/// `s` in double quotes when at most [`QUOTE_MAX`] bytes, else `<a string of N bytes>`
/// (error messages quote input text capped; the caller names the offset).
pub fn quote_str(s: &str) -> String {
    if s.len() <= QUOTE_MAX {
        format!("\"{s}\"")
    } else {
        format!("<a string of {} bytes>", s.len())
    }
}

/// True when a validated number lexeme has no fraction and no exponent.
pub fn lexeme_is_integer(lexeme: &str) -> bool {
    !lexeme.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

/// A validated number lexeme as u64: only for integers without a sign that fit in u64.
pub fn lexeme_as_u64(lexeme: &str) -> Option<u64> {
    let b = lexeme.as_bytes();
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in b {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(v)
}

/// An object: members in input order, names unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object {
    pub(super) members: Vec<(String, Value)>,
}

impl Object {
    /// An empty object.
    pub fn new() -> Object {
        Object::default()
    }

    /// The value of member `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Mutable access to member `key`, if present.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.members
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Removes member `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.members.iter().position(|(k, _)| k == key)?;
        Some(self.members.remove(i).1)
    }

    /// Sets member `key` (replacing an existing member in place, else appending).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.members.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.members.push((key, value)),
        }
    }

    /// Builder form of [`Object::insert`].
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Object {
        self.insert(key, value);
        self
    }

    /// Members in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.members.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when the object has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// A JSON value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// `null`.
    #[default]
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, kept as its lexeme.
    Number(Number),
    /// A decoded string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object (member order kept, names unique).
    Object(Object),
}

impl Value {
    /// The JSON type name used in error messages (`null`, `bool`, `number`, `string`, `array`, `object`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// The object, if this is one.
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The object, mutably, if this is one.
    pub fn as_object_mut(&mut self) -> Option<&mut Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// Member `key` of an object, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.as_object_mut().and_then(|o| o.get_mut(key))
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_number(&self) -> Option<&Number> {
        match self {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }

    /// The bool, if this is one (`true`/`false` only; 0/1 are numbers).
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Member `key` of an object (None for non-objects or a missing member).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object().and_then(|o| o.get(key))
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// A number value from an f64; NaN and infinities become `null` (FORMATS.md §10 writer rule).
    pub fn from_f64(v: f64) -> Value {
        match Number::from_f64(v) {
            Some(n) => Value::Number(n),
            None => Value::Null,
        }
    }

    /// Compact JSON text.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self, None, 0);
        out
    }

    /// Indented JSON text (two spaces per level), ending without a newline.
    pub fn to_json_pretty(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self, Some(2), 0);
        out
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Number(Number::from_u64(v))
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Number(Number::from_u64(u64::from(v)))
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Number(Number::from_u64(v as u64))
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Number(Number::from_i64(v))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::from_f64(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::String(v)
    }
}
impl From<Object> for Value {
    fn from(v: Object) -> Value {
        Value::Object(v)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}
