//! JSON text as the reference encoder writes it (TOKENIZER.md §10 "Arguments", "Tools"):
//! serde_json's compact form (its string escapes and its number spelling: integers that fit
//! in i64/u64 as written, every other number as the shortest round-trip f64 in ryu's
//! notation, `-0` as `-0.0`), optionally with every object's keys sorted, and the Python
//! `", "` / `": "` spacing applied outside strings.

use crate::json::{Number, Value};

/// Compact JSON of `v`; with `sorted`, every object's keys in byte order (recursively).
///
/// Errors: a number too large for f64 (`1e400`), which the reference cannot represent; the
/// message names the number.
pub fn compact(v: &Value, sorted: bool) -> Result<String, String> {
    let mut out = String::new();
    write(&mut out, v, sorted)?;
    Ok(out)
}

/// [`compact`] (unsorted) with `", "` and `": "` separators outside strings, as Python's
/// `json.dumps` writes them (the argument values of a tool call, TOKENIZER.md §10).
pub fn python_spaced(v: &Value) -> Result<String, String> {
    let compact = compact(v, false)?;
    let mut out = String::with_capacity(compact.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    for ch in compact.chars() {
        out.push(ch);
        if in_string {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
        } else if ch == '"' {
            in_string = true;
        } else if ch == ',' || ch == ':' {
            out.push(' ');
        }
    }
    Ok(out)
}

fn write(out: &mut String, v: &Value, sorted: bool) -> Result<(), String> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)?),
        Value::String(s) => string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, item, sorted)?;
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut members: Vec<(&str, &Value)> = o.iter().collect();
            if sorted {
                crate::sort::sort_by(&mut members, |a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(out, k);
                out.push(':');
                write(out, item, sorted)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// serde_json's string escapes: `"`, `\`, `\b \f \n \r \t`, other controls as `\u00xx`.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as serde_json (without `arbitrary_precision`) reads and writes it.
fn number(n: &Number) -> Result<String, String> {
    let lex = n.lexeme();
    if n.is_integer() && lex != "-0" {
        if let Some(u) = n.as_u64() {
            return Ok(u.to_string());
        }
        if let Some(i) = n.as_i64() {
            return Ok(i.to_string());
        }
    }
    let f = n.as_f64();
    if !f.is_finite() {
        return Err(format!("number {lex} is out of range for a 64-bit float"));
    }
    Ok(ryu_style(f))
}

/// The shortest round-trip digits of `f` in ryu's notation: fixed from 1e-5 up to below
/// 1e16 (`100.0`, `0.00001`), else `1e+20`, `1.5e-7`.
fn ryu_style(f: f64) -> String {
    let sci = format!("{f:e}"); // shortest digits: "-1.2345e-7", "1e20", "0e0"
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let len = digits.len() as i32;
    // value = 0.DIGITS × 10^kk
    let kk = exp + 1;
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if digits == "0" {
        out.push_str("0.0");
    } else if len <= kk && kk <= 16 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (kk - len) as usize));
        out.push_str(".0");
    } else if 0 < kk && kk <= 16 {
        out.push_str(&digits[..kk as usize]);
        out.push('.');
        out.push_str(&digits[kk as usize..]);
    } else if -5 < kk && kk <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-kk) as usize));
        out.push_str(&digits);
    } else {
        let (head, rest) = digits.split_at(1);
        out.push_str(head);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        // A positive exponent carries its sign, as the oracle fixtures show (`1e+20`).
        let e = kk - 1;
        out.push_str(&if e > 0 {
            format!("e+{e}")
        } else {
            format!("e{e}")
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(s: &str) -> String {
        number(
            crate::json::parse(s.as_bytes())
                .unwrap()
                .as_number()
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn numbers_as_serde_json_writes_them() {
        for (i, o) in [
            ("42", "42"),
            ("-7", "-7"),
            ("-0", "-0.0"),
            ("0", "0"),
            ("1.0", "1.0"),
            ("1e2", "100.0"),
            ("1e20", "1e+20"),
            ("1.5e-7", "1.5e-7"),
            ("0.1", "0.1"),
            ("0.0001", "0.0001"),
            ("0.00001", "0.00001"),
            ("0.000001", "1e-6"),
            ("1e16", "1e+16"),
            ("1e15", "1000000000000000.0"),
            ("12345678901234567890", "12345678901234567890"),
            ("123456789012345678901234567890", "1.2345678901234568e+29"),
            ("-0.0", "-0.0"),
            ("2E-3", "0.002"),
        ] {
            assert_eq!(num(i), o, "{i}");
        }
    }
}
