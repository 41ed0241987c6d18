//! The JSON writer: escaping, f64 shortest-round-trip, non-finite numbers as `null`.

use super::{Number, Value};

/// Appends `s` as a JSON string literal: quotes, `\"`, `\\`, the short escapes for
/// backspace/form feed/newline/carriage return/tab, `\u00XX` for the other control characters.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => out.push_str(&format!("\\u{b:04x}")),
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends an f64 as JSON: shortest round-trip form, `null` for NaN and infinities.
pub fn write_f64(out: &mut String, v: f64) {
    match Number::from_f64(v) {
        Some(n) => out.push_str(n.lexeme()),
        None => out.push_str("null"),
    }
}

fn newline(out: &mut String, indent: Option<usize>, level: usize) {
    if let Some(w) = indent {
        out.push('\n');
        for _ in 0..w * level {
            out.push(' ');
        }
    }
}

pub(super) fn write_value(out: &mut String, v: &Value, indent: Option<usize>, level: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n.lexeme()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            // Arrays of scalars stay on one line even when pretty-printing.
            let flat = items
                .iter()
                .all(|x| !matches!(x, Value::Array(_) | Value::Object(_)));
            let ind = if flat { None } else { indent };
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    if flat && indent.is_some() {
                        out.push(' ');
                    }
                }
                newline(out, ind, level + 1);
                write_value(out, x, indent, level + 1);
            }
            newline(out, ind, level);
            out.push(']');
        }
        Value::Object(o) => {
            if o.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (k, x)) in o.members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, level + 1);
                write_string(out, k);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_value(out, x, indent, level + 1);
            }
            newline(out, indent, level);
            out.push('}');
        }
    }
}
