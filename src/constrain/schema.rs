//! JSON Schema → grammar (ENGINE.md §8; the subset of issue 25 item 2, documented in
//! docs/structured-output.md). Every keyword is either enforced, an annotation (ignored:
//! it never restricts values), or refused with its path; nothing is silently dropped.
//!
//! What is generated is a subset of what the schema admits: object properties come in the
//! schema's order and no property beyond `properties` is ever generated; numbers with bounds
//! have no exponent, and bounds are enforced on the integer part digit by digit; no whitespace
//! in `Compact` style, the template's `", "` / `": "` in `Template` style.

use std::collections::HashMap;

use super::grammar::{utf8_multibyte, Builder, Grammar};
use super::pattern;
use super::JsonStyle;
use crate::json::write_string;
use crate::json::Value;

/// A schema the compiler refuses: the path of the keyword in the schema (e.g.
/// `properties.name.pattern`), the keyword, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// Dotted path from the schema's root to the keyword (the keyword last; empty for the
    /// root itself).
    pub path: String,
    /// The keyword refused (or the one whose value is wrong); empty for a whole schema.
    pub keyword: String,
    /// Why, in words.
    pub message: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "schema: {}", self.message)
        } else {
            write!(f, "schema `{}`: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for SchemaError {}

type R<T> = Result<T, SchemaError>;

/// JSON types as bits (a set of types is their union). `number` is `INT | FRAC`.
pub(crate) const NULL: u8 = 1;
pub(crate) const BOOL: u8 = 2;
pub(crate) const INT: u8 = 4;
pub(crate) const FRAC: u8 = 8;
pub(crate) const STR: u8 = 16;
pub(crate) const ARR: u8 = 32;
pub(crate) const OBJ: u8 = 64;
pub(crate) const ALL: u8 = 127;

/// Keywords enforced.
const SUPPORTED: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
];

/// Annotations: they never restrict values (`format` is an annotation by default in JSON
/// Schema 2020-12 and is ignored, as issue 25 says).
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
    "contentEncoding",
    "contentMediaType",
];

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn err<T>(path: &str, keyword: &str, message: impl Into<String>) -> R<T> {
    Err(SchemaError {
        path: join(path, keyword),
        keyword: keyword.to_string(),
        message: message.into(),
    })
}

/// The JSON type bit of a value.
pub(crate) fn type_of(v: &Value) -> u8 {
    match v {
        Value::Null => NULL,
        Value::Bool(_) => BOOL,
        Value::Number(n) if n.is_integer() => INT,
        Value::Number(_) => FRAC,
        Value::String(_) => STR,
        Value::Array(_) => ARR,
        Value::Object(_) => OBJ,
    }
}

fn type_bits(name: &str) -> Option<u8> {
    Some(match name {
        "null" => NULL,
        "boolean" => BOOL,
        "integer" => INT,
        "number" => INT | FRAC,
        "string" => STR,
        "array" => ARR,
        "object" => OBJ,
        _ => return None,
    })
}

/// The text of a JSON value in `style` (strings escaped as the template's writer does).
pub(crate) fn json_text(v: &Value, style: JsonStyle, out: &mut String) {
    let (comma, colon) = match style {
        JsonStyle::Compact => (",", ":"),
        JsonStyle::Template => (", ", ": "),
    };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n.lexeme()),
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                json_text(x, style, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                write_string(out, k);
                out.push_str(colon);
                json_text(x, style, out);
            }
            out.push('}');
        }
    }
}

/// A compiled, immutable schema: its source and style, and the rules compiled once (so a
/// schema that compiles is known to admit at least one value).
#[derive(Debug, Clone)]
pub struct Schema {
    source: Value,
    style: JsonStyle,
    builder: Builder,
    value: u32,
}

impl Schema {
    /// Compiles `schema` (issue 25 item 2). Errors name the keyword by its path.
    pub fn compile(schema: &Value, style: JsonStyle) -> Result<Schema, SchemaError> {
        let mut b = Builder::new();
        let value = {
            let mut c = Compiler::new(&mut b, schema, style);
            c.top(schema, "", ALL, false)?
        };
        let s = Schema {
            source: schema.clone(),
            style,
            builder: b,
            value,
        };
        if s.grammar(&[]).is_none() {
            return err(
                "",
                "",
                "the schema admits no value (every branch is empty or recursive without end)",
            );
        }
        Ok(s)
    }

    /// Any JSON object (`response_format` `json_object`).
    pub fn any_object(style: JsonStyle) -> Schema {
        let mut src = crate::json::Object::new();
        src.insert("type", Value::String("object".into()));
        Schema::compile(&Value::Object(src), style)
            .unwrap_or_else(|_| unreachable!("the any-object schema compiles"))
    }

    /// The schema as given.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// The style it was compiled for.
    pub fn style(&self) -> JsonStyle {
        self.style
    }

    fn grammar(&self, end_ids: &[u32]) -> Option<Grammar> {
        let mut b = self.builder.clone();
        let (s, e) = b.rule();
        let m = b.node();
        b.call(s, self.value, m);
        if end_ids.is_empty() {
            b.eps(m, e);
        }
        for &id in end_ids {
            b.special(m, id, e);
        }
        if b.overflow {
            return None;
        }
        b.finish(s)
    }

    /// The grammar of the value followed by one of `end_ids` (none: the value alone).
    pub(crate) fn plain_grammar(&self, end_ids: &[u32]) -> Grammar {
        match self.grammar(end_ids) {
            Some(g) => g,
            // Unreachable (`compile` checked the value's grammar); a grammar of the end ids
            // alone keeps the caller safe.
            None => {
                let mut b = Builder::new();
                let (s, e) = b.rule();
                for &id in end_ids {
                    b.special(s, id, e);
                }
                if end_ids.is_empty() {
                    b.eps(s, e);
                }
                b.finish(s)
                    .unwrap_or_else(|| unreachable!("a grammar of end ids is productive"))
            }
        }
    }
}

/// Compiles schemas into rules of one builder. `root` resolves `$ref`s.
pub(crate) struct Compiler<'a> {
    pub b: &'a mut Builder,
    root: &'a Value,
    style: JsonStyle,
    refs: HashMap<(String, u8, bool), u32>,
    any: Option<u32>,
    free_string: Option<u32>,
    depth: usize,
}

/// Deepest schema nesting compiled (a guard for hostile input; `$ref` recursion is a call and
/// does not count).
const MAX_SCHEMA_DEPTH: usize = 64;

impl<'a> Compiler<'a> {
    pub fn new(b: &'a mut Builder, root: &'a Value, style: JsonStyle) -> Compiler<'a> {
        Compiler {
            b,
            root,
            style,
            refs: HashMap::new(),
            any: None,
            free_string: None,
            depth: 0,
        }
    }

    fn overflow(&self, path: &str) -> R<()> {
        if self.b.overflow {
            return Err(SchemaError {
                path: path.to_string(),
                keyword: String::new(),
                message: format!(
                    "the schema is too large to enforce (more than {} automaton states; long maxLength/maxItems or wide ranges count)",
                    super::grammar::MAX_NODES
                ),
            });
        }
        Ok(())
    }

    /// The rule of a top-level schema, `Err` when it admits nothing of `types`.
    pub fn top(&mut self, s: &Value, path: &str, types: u8, raw: bool) -> R<u32> {
        let r = self.value(s, path, types, raw)?;
        self.overflow(path)?;
        match r {
            Some(r) => Ok(r),
            None => err(path, "", "the schema admits no value here"),
        }
    }

    /// The rule of one schema restricted to `types`; `raw`: a string value is its raw text
    /// (a tool-call argument, TOKENIZER.md §10), not a JSON string. `None`: no value.
    pub fn value(&mut self, s: &Value, path: &str, types: u8, raw: bool) -> R<Option<u32>> {
        self.depth += 1;
        let r = if self.depth > MAX_SCHEMA_DEPTH {
            err(
                path,
                "",
                format!("schemas nested deeper than {MAX_SCHEMA_DEPTH} levels"),
            )
        } else {
            self.value_inner(s, path, types, raw)
        };
        self.depth -= 1;
        self.overflow(path)?;
        r
    }

    fn value_inner(&mut self, s: &Value, path: &str, types: u8, raw: bool) -> R<Option<u32>> {
        let o = match s {
            Value::Bool(true) => return Ok(self.any_of_types(types, raw)),
            Value::Bool(false) => return Ok(None),
            Value::Object(o) => o,
            _ => {
                return err(
                    path,
                    "",
                    format!(
                        "a schema must be an object or a boolean, not {}",
                        s.type_name()
                    ),
                )
            }
        };
        for (k, _) in o.iter() {
            if !SUPPORTED.contains(&k) && !ANNOTATIONS.contains(&k) {
                return err(
                    path,
                    k,
                    format!(
                        "keyword `{k}` is not supported (docs/structured-output.md lists what is)"
                    ),
                );
            }
        }
        let only = |allowed: &[&str], why: &str| -> R<()> {
            for (k, _) in o.iter() {
                if !allowed.contains(&k)
                    && !ANNOTATIONS.contains(&k)
                    && k != "$defs"
                    && k != "definitions"
                {
                    return err(path, k, format!("`{k}` beside `{why}` is not supported"));
                }
            }
            Ok(())
        };
        if let Some(r) = o.get("$ref") {
            only(&["$ref"], "$ref")?;
            let Some(r) = r.as_str() else {
                return err(path, "$ref", "must be a string");
            };
            return self.reference(r, &join(path, "$ref"), types, raw);
        }
        if let Some(a) = o.get("allOf") {
            only(&["allOf"], "allOf")?;
            match a.as_array() {
                Some([one]) => return self.value(one, &join(path, "allOf.0"), types, raw),
                _ => {
                    return err(
                        path,
                        "allOf",
                        "only an allOf of exactly one schema is supported",
                    )
                }
            }
        }
        for kw in ["anyOf", "oneOf"] {
            if let Some(a) = o.get(kw) {
                only(&[kw], kw)?;
                let Some(branches) = a.as_array().filter(|a| !a.is_empty()) else {
                    return err(path, kw, "must be a non-empty array of schemas");
                };
                if kw == "oneOf" {
                    self.disjoint(branches, &join(path, kw))?;
                }
                let mut rules = Vec::new();
                for (i, br) in branches.iter().enumerate() {
                    if let Some(r) =
                        self.value(br, &join(path, &format!("{kw}.{i}")), types, raw)?
                    {
                        rules.push(r);
                    }
                }
                return Ok(self.alt(&rules));
            }
        }
        let declared = match o.get("type") {
            None => None,
            Some(Value::String(t)) => match type_bits(t) {
                Some(b) => Some(b),
                None => return err(path, "type", format!("unknown type {t:?}")),
            },
            Some(Value::Array(ts)) if !ts.is_empty() => {
                let mut bits = 0;
                for t in ts {
                    match t.as_str().and_then(type_bits) {
                        Some(b) => bits |= b,
                        None => {
                            return err(
                                path,
                                "type",
                                "every entry of a type list must be a known type name",
                            )
                        }
                    }
                }
                Some(bits)
            }
            Some(_) => {
                return err(
                    path,
                    "type",
                    "must be a type name or a non-empty list of them",
                )
            }
        };
        if o.get("const").is_some() || o.get("enum").is_some() {
            only(&["const", "enum", "type"], "const/enum")?;
            let values: Vec<&Value> = match (o.get("const"), o.get("enum")) {
                (Some(_), Some(_)) => {
                    return err(path, "enum", "`enum` beside `const` is not supported")
                }
                (Some(c), None) => vec![c],
                (None, Some(Value::Array(a))) if !a.is_empty() => a.iter().collect(),
                _ => return err(path, "enum", "must be a non-empty array"),
            };
            let allowed = types & declared.unwrap_or(ALL);
            let mut rules = Vec::new();
            for v in values {
                let t = type_of(v);
                // An integral lexeme also counts as a number, a fractional one only as one.
                if t & allowed == 0 && !(t == INT && allowed & FRAC != 0) {
                    continue;
                }
                let mut text = String::new();
                match (raw, v) {
                    (true, Value::String(s)) => text.push_str(s),
                    _ => json_text(v, self.style, &mut text),
                }
                let (rs, re) = self.b.rule();
                self.b.lit_to(rs, text.as_bytes(), re);
                rules.push(rs);
            }
            return Ok(self.alt(&rules));
        }
        let has = |ks: &[&str]| ks.iter().any(|k| o.get(k).is_some());
        let declared = declared.unwrap_or_else(|| {
            let mut t = 0;
            if has(&["properties", "required", "additionalProperties"]) {
                t |= OBJ;
            }
            if has(&["items", "prefixItems", "minItems", "maxItems"]) {
                t |= ARR;
            }
            if has(&["minLength", "maxLength", "pattern"]) {
                t |= STR;
            }
            if has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]) {
                t |= INT | FRAC;
            }
            if t == 0 {
                ALL
            } else {
                t
            }
        });
        let t = declared & types;
        let mut rules = Vec::new();
        if t & NULL != 0 {
            rules.push(self.lit_rule(b"null"));
        }
        if t & BOOL != 0 {
            let (s, e) = self.b.rule();
            self.b.lit_to(s, b"true", e);
            self.b.lit_to(s, b"false", e);
            rules.push(s);
        }
        if t & (INT | FRAC) != 0 {
            if let Some(r) = self.number(o, path, t & FRAC == 0)? {
                rules.push(r);
            }
        }
        if t & STR != 0 {
            if let Some(r) = self.string(o, path, raw)? {
                rules.push(r);
            }
        }
        if t & ARR != 0 {
            if let Some(r) = self.array(o, path)? {
                rules.push(r);
            }
        }
        if t & OBJ != 0 {
            if let Some(r) = self.object(o, path)? {
                rules.push(r);
            }
        }
        Ok(self.alt(&rules))
    }

    fn lit_rule(&mut self, lit: &[u8]) -> u32 {
        let (s, e) = self.b.rule();
        self.b.lit_to(s, lit, e);
        s
    }

    /// One rule calling each of `rules` (none: `None`).
    fn alt(&mut self, rules: &[u32]) -> Option<u32> {
        match rules {
            [] => None,
            [one] => Some(*one),
            _ => {
                let (s, e) = self.b.rule();
                for &r in rules {
                    self.b.call(s, r, e);
                }
                Some(s)
            }
        }
    }

    /// `$ref` to `#` or a JSON pointer into the root (`#/$defs/Name`, `#/definitions/Name`).
    fn reference(&mut self, r: &str, path: &str, types: u8, raw: bool) -> R<Option<u32>> {
        let key = (r.to_string(), types, raw);
        if let Some(&rule) = self.refs.get(&key) {
            return Ok(Some(rule));
        }
        let Some(target) = resolve(self.root, r) else {
            return Err(SchemaError {
                path: path.to_string(),
                keyword: "$ref".into(),
                message: format!(
                    "{r:?} names nothing in this schema (supported: \"#\" and \"#/…\" pointers)"
                ),
            });
        };
        let (s, e) = self.b.rule();
        self.refs.insert(key, s);
        if let Some(t) = self.value(target, path, types, raw)? {
            self.b.call(s, t, e);
        }
        Ok(Some(s))
    }

    /// Checks that `oneOf` branches are disjoint by type, `const`/`enum` values, or a
    /// required property's `const`/`enum` values (a tagged union).
    fn disjoint(&self, branches: &[Value], path: &str) -> R<()> {
        let sigs: Vec<Sig> = branches.iter().map(|b| sig(self.root, b, 0)).collect();
        for i in 0..sigs.len() {
            for j in i + 1..sigs.len() {
                if !sigs[i].disjoint(&sigs[j]) {
                    return Err(SchemaError {
                        path: path.to_string(),
                        keyword: "oneOf".into(),
                        message: format!(
                            "branches {i} and {j} may both match one value; only oneOf branches disjoint by type, const/enum or a required const property are supported (use anyOf)"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Any JSON value restricted to `types` (`raw`: a string is raw text).
    fn any_of_types(&mut self, types: u8, raw: bool) -> Option<u32> {
        if types == ALL && !raw {
            return Some(self.any());
        }
        let mut rules = Vec::new();
        if types & NULL != 0 {
            rules.push(self.lit_rule(b"null"));
        }
        if types & BOOL != 0 {
            let (s, e) = self.b.rule();
            self.b.lit_to(s, b"true", e);
            self.b.lit_to(s, b"false", e);
            rules.push(s);
        }
        if types & (INT | FRAC) != 0 {
            rules.push(self.number_free(types & FRAC == 0));
        }
        if types & STR != 0 {
            let (s, e) = self.b.rule();
            self.string_body(s, e, 0, None, raw);
            rules.push(s);
        }
        if types & (ARR | OBJ) != 0 {
            let any = self.any();
            if types & ARR != 0 {
                rules.push(self.array_of(any));
            }
            if types & OBJ != 0 {
                rules.push(self.object_of(any));
            }
        }
        self.alt(&rules)
    }

    /// The rule of any JSON value (recursive).
    fn any(&mut self) -> u32 {
        if let Some(a) = self.any {
            return a;
        }
        let (s, e) = self.b.rule();
        self.any = Some(s);
        self.b.lit_to(s, b"null", e);
        self.b.lit_to(s, b"true", e);
        self.b.lit_to(s, b"false", e);
        let n = self.number_free(false);
        self.b.call(s, n, e);
        let st = self.free_string();
        self.b.call(s, st, e);
        let a = self.array_of(s);
        self.b.call(s, a, e);
        let o = self.object_of(s);
        self.b.call(s, o, e);
        s
    }

    fn free_string(&mut self) -> u32 {
        if let Some(s) = self.free_string {
            return s;
        }
        let (s, e) = self.b.rule();
        self.string_body(s, e, 0, None, false);
        self.free_string = Some(s);
        s
    }

    fn comma(&self) -> &'static [u8] {
        match self.style {
            JsonStyle::Compact => b",",
            JsonStyle::Template => b", ",
        }
    }

    fn colon(&self) -> &'static [u8] {
        match self.style {
            JsonStyle::Compact => b":",
            JsonStyle::Template => b": ",
        }
    }

    /// `[` (item (, item)*)? `]` with every item of rule `item`.
    fn array_of(&mut self, item: u32) -> u32 {
        let (s, e) = self.b.rule();
        let open = self.b.lit(s, b"[");
        self.b.byte(open, b']', e);
        let more = self.b.node();
        self.b.call(open, item, more);
        self.b.byte(more, b']', e);
        let sep = self.b.lit(more, self.comma());
        self.b.call(sep, item, more);
        s
    }

    /// `{` (key: value (, key: value)*)? `}` with free keys and values of rule `value`.
    fn object_of(&mut self, value: u32) -> u32 {
        let key = self.free_string();
        let (s, e) = self.b.rule();
        let open = self.b.lit(s, b"{");
        self.b.byte(open, b'}', e);
        let more = self.b.node();
        let k = self.b.node();
        self.b.call(open, key, k);
        let kc = self.b.lit(k, self.colon());
        self.b.call(kc, value, more);
        self.b.byte(more, b'}', e);
        let sep = self.b.lit(more, self.comma());
        let k2 = self.b.node();
        self.b.call(sep, key, k2);
        let kc2 = self.b.lit(k2, self.colon());
        self.b.call(kc2, value, more);
        s
    }

    // ---- strings ----

    fn string(&mut self, o: &crate::json::Object, path: &str, raw: bool) -> R<Option<u32>> {
        let min = count(o, path, "minLength")?.unwrap_or(0);
        let max = count(o, path, "maxLength")?;
        if let Some(mx) = max {
            if mx < min {
                return Ok(None);
            }
        }
        let (s, e) = self.b.rule();
        if let Some(p) = o.get("pattern") {
            if o.get("minLength").is_some() || o.get("maxLength").is_some() {
                return err(
                    path,
                    "pattern",
                    "`pattern` together with minLength/maxLength is not supported",
                );
            }
            let Some(p) = p.as_str() else {
                return err(path, "pattern", "must be a string");
            };
            let (from, to) = if raw {
                (s, e)
            } else {
                let a = self.b.lit(s, b"\"");
                let z = self.b.node();
                self.b.byte(z, b'"', e);
                (a, z)
            };
            if let Err(m) = pattern::compile(self.b, p, from, to, raw) {
                return err(path, "pattern", m);
            }
            return Ok(Some(s));
        }
        self.string_body(s, e, min, max, raw);
        Ok(Some(s))
    }

    /// A string from `s` to `e`: quotes unless `raw`, between `min` and `max` characters.
    fn string_body(&mut self, s: u32, e: u32, min: u64, max: Option<u64>, raw: bool) {
        let (mut cur, z) = if raw {
            (s, e)
        } else {
            let a = self.b.lit(s, b"\"");
            let z = self.b.node();
            self.b.byte(z, b'"', e);
            (a, z)
        };
        for _ in 0..min {
            if self.b.overflow {
                return;
            }
            let n = self.b.node();
            self.char(cur, n, raw);
            cur = n;
        }
        match max {
            None => {
                self.char(cur, cur, raw);
                self.b.eps(cur, z);
            }
            Some(mx) => {
                self.b.eps(cur, z);
                for _ in min..mx {
                    if self.b.overflow {
                        return;
                    }
                    let n = self.b.node();
                    self.char(cur, n, raw);
                    self.b.eps(n, z);
                    cur = n;
                }
            }
        }
    }

    /// One character from `from` to `to`: well-formed UTF-8; in a JSON string no `"`, `\` or
    /// control character except as an escape (`\uXXXX` never a surrogate).
    pub(crate) fn char(&mut self, from: u32, to: u32, raw: bool) {
        let b = &mut *self.b;
        if raw {
            b.bytes(from, 0x00, 0x7f, to);
        } else {
            b.bytes(from, 0x20, 0x21, to);
            b.bytes(from, 0x23, 0x5b, to);
            b.bytes(from, 0x5d, 0x7f, to);
            let esc = b.node();
            b.byte(from, b'\\', esc);
            for &c in b"\"\\/bfnrt" {
                b.byte(esc, c, to);
            }
            let u = b.node();
            b.byte(esc, b'u', u);
            let h2 = b.node();
            let h2low = b.node();
            let h3 = b.node();
            let h4 = b.node();
            for (lo, hi) in [
                (b'0', b'9'),
                (b'a', b'c'),
                (b'A', b'C'),
                (b'e', b'f'),
                (b'E', b'F'),
            ] {
                b.bytes(u, lo, hi, h2);
            }
            b.byte(u, b'd', h2low);
            b.byte(u, b'D', h2low);
            hex(b, h2, h3);
            b.bytes(h2low, b'0', b'7', h3);
            hex(b, h3, h4);
            hex(b, h4, to);
        }
        utf8_multibyte(b, from, to);
    }

    // ---- numbers ----

    /// `0|-?[1-9][0-9]*`, plus fraction and exponent unless `int_only`.
    fn number_free(&mut self, int_only: bool) -> u32 {
        let (s, e) = self.b.rule();
        let b = &mut *self.b;
        let m = b.node();
        let neg = b.node();
        b.byte(s, b'-', neg);
        let (body_from, int_end) = (s, m);
        let d = b.node();
        b.byte(body_from, b'0', int_end);
        b.bytes(body_from, b'1', b'9', d);
        b.bytes(neg, b'1', b'9', d);
        if !int_only {
            b.byte(neg, b'0', int_end);
        }
        b.bytes(d, b'0', b'9', d);
        b.eps(d, int_end);
        if int_only {
            b.eps(m, e);
            return s;
        }
        let f = b.node();
        let fd = b.node();
        b.byte(m, b'.', f);
        b.bytes(f, b'0', b'9', fd);
        b.bytes(fd, b'0', b'9', fd);
        let x = b.node();
        b.eps(m, x);
        b.eps(fd, x);
        b.eps(x, e);
        let ex = b.node();
        let exs = b.node();
        let exd = b.node();
        b.byte(x, b'e', ex);
        b.byte(x, b'E', ex);
        b.byte(ex, b'+', exs);
        b.byte(ex, b'-', exs);
        b.eps(ex, exs);
        b.bytes(exs, b'0', b'9', exd);
        b.bytes(exd, b'0', b'9', exd);
        b.eps(exd, e);
        s
    }

    fn number(&mut self, o: &crate::json::Object, path: &str, int_only: bool) -> R<Option<u32>> {
        let mut lo: Option<f64> = None;
        let mut hi: Option<f64> = None;
        for kw in ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"] {
            let Some(v) = o.get(kw) else { continue };
            let Some(n) = v.as_number() else {
                return err(
                    path,
                    kw,
                    "must be a number (the boolean form of draft 4 is not supported)",
                );
            };
            let x = n.as_f64();
            if !x.is_finite() {
                return err(path, kw, "must be a finite number");
            }
            // Inward to integers: bounds are enforced on the integer part, digit by digit.
            match kw {
                "minimum" => lo = Some(lo.map_or(x.ceil(), |l: f64| l.max(x.ceil()))),
                "exclusiveMinimum" => {
                    lo = Some(lo.map_or(x.floor() + 1.0, |l: f64| l.max(x.floor() + 1.0)))
                }
                "maximum" => hi = Some(hi.map_or(x.floor(), |h: f64| h.min(x.floor()))),
                _ => hi = Some(hi.map_or(x.ceil() - 1.0, |h: f64| h.min(x.ceil() - 1.0))),
            }
        }
        if lo.is_none() && hi.is_none() {
            return Ok(Some(self.number_free(int_only)));
        }
        // Clamp far bounds inward to what the digit automaton handles (a subset: sound).
        const BIG: f64 = 9.0e18;
        let lo = lo
            .map(|l| l.clamp(-BIG, BIG) as i128)
            .unwrap_or(-(BIG as i128));
        let hi = hi
            .map(|h| h.clamp(-BIG, BIG) as i128)
            .unwrap_or(BIG as i128);
        if lo > hi {
            return Ok(None);
        }
        let (s, e) = self.b.rule();
        // Non-negative values.
        if hi >= 0 {
            let a = lo.max(0) as u128;
            self.magnitude(s, e, a, hi as u128, !int_only);
        }
        // Negative values: `-` then a magnitude in [max(-hi, 1), -lo].
        if lo < 0 {
            let neg = self.b.node();
            self.b.byte(s, b'-', neg);
            let a = if hi < 0 {
                (-hi) as u128
            } else if int_only {
                1
            } else {
                0
            };
            self.magnitude(neg, e, a, (-lo) as u128, !int_only);
        }
        Ok(Some(s))
    }

    /// A magnitude in [a, b]: an integer part in [a, b−1] with an optional fraction (when
    /// `frac`), or exactly b.
    fn magnitude(&mut self, from: u32, to: u32, a: u128, b: u128, frac: bool) {
        if !frac {
            digits(self.b, from, to, a, b);
            return;
        }
        if a < b {
            let m = self.b.node();
            digits(self.b, from, m, a, b - 1);
            self.b.eps(m, to);
            let f = self.b.node();
            let fd = self.b.node();
            self.b.byte(m, b'.', f);
            self.b.bytes(f, b'0', b'9', fd);
            self.b.bytes(fd, b'0', b'9', fd);
            self.b.eps(fd, to);
        }
        digits(self.b, from, to, b, b);
    }

    // ---- arrays ----

    fn array(&mut self, o: &crate::json::Object, path: &str) -> R<Option<u32>> {
        let min = count(o, path, "minItems")?.unwrap_or(0);
        let mut max = count(o, path, "maxItems")?;
        let mut prefix: Vec<&Value> = Vec::new();
        if let Some(p) = o.get("prefixItems") {
            match p.as_array() {
                Some(a) => prefix.extend(a),
                None => return err(path, "prefixItems", "must be an array of schemas"),
            }
        }
        let mut prefix_rules = Vec::new();
        for (i, p) in prefix.iter().enumerate() {
            match self.value(p, &join(path, &format!("prefixItems.{i}")), ALL, false)? {
                Some(r) => prefix_rules.push(r),
                None => {
                    max = Some(max.map_or(i as u64, |m| m.min(i as u64)));
                    break;
                }
            }
        }
        let item = match o.get("items") {
            None => Some(self.any()),
            Some(Value::Array(_)) => {
                return err(
                    path,
                    "items",
                    "an array `items` (draft 4) is not supported; use prefixItems",
                )
            }
            Some(it) => self.value(it, &join(path, "items"), ALL, false)?,
        };
        let k = prefix_rules.len() as u64;
        if item.is_none() {
            max = Some(max.map_or(k, |m| m.min(k)));
        }
        if let Some(mx) = max {
            if mx < min {
                return Ok(None);
            }
        }
        let (s, e) = self.b.rule();
        let mut cur = self.b.lit(s, b"[");
        let mut i: u64 = 0;
        loop {
            if self.b.overflow {
                break;
            }
            if i >= min {
                self.b.byte(cur, b']', e);
            }
            if max == Some(i) {
                break;
            }
            let rule = if i < k {
                prefix_rules[i as usize]
            } else {
                item.unwrap_or(0)
            };
            if i >= k && i >= min && max.is_none() && i > 0 {
                // From here on: (, item)* — a loop.
                let sep = self.b.lit(cur, self.comma());
                self.b.call(sep, rule, cur);
                break;
            }
            let from = if i > 0 {
                self.b.lit(cur, self.comma())
            } else {
                cur
            };
            let next = self.b.node();
            self.b.call(from, rule, next);
            cur = next;
            i += 1;
        }
        Ok(Some(s))
    }

    // ---- objects ----

    fn object(&mut self, o: &crate::json::Object, path: &str) -> R<Option<u32>> {
        let props: Vec<(&str, &Value)> = match o.get("properties") {
            None => Vec::new(),
            Some(Value::Object(p)) => p.iter().collect(),
            Some(_) => return err(path, "properties", "must be an object"),
        };
        let mut required: Vec<&str> = Vec::new();
        if let Some(r) = o.get("required") {
            let Some(a) = r.as_array() else {
                return err(path, "required", "must be an array of names");
            };
            for n in a {
                let Some(n) = n.as_str() else {
                    return err(path, "required", "must be an array of names");
                };
                if !props.iter().any(|(k, _)| *k == n) {
                    return err(
                        path,
                        "required",
                        format!("{n:?} is required but not in `properties` (not supported)"),
                    );
                }
                required.push(n);
            }
        }
        let additional = o.get("additionalProperties");
        if let Some(a) = additional {
            if !matches!(a, Value::Bool(_) | Value::Object(_)) {
                return err(
                    path,
                    "additionalProperties",
                    "must be a boolean or a schema",
                );
            }
        }
        if props.is_empty() && !matches!(additional, Some(Value::Bool(false))) {
            // A map: free keys, values of `additionalProperties` (any when absent or true).
            let value = match additional {
                Some(a @ Value::Object(_)) => {
                    match self.value(a, &join(path, "additionalProperties"), ALL, false)? {
                        Some(v) => v,
                        None => return Ok(Some(self.lit_rule(b"{}"))),
                    }
                }
                _ => self.any(),
            };
            return Ok(Some(self.object_of(value)));
        }
        let (s, e) = self.b.rule();
        let open = self.b.lit(s, b"{");
        let mut lane0 = Some(open); // nothing written yet
        let mut lane1: Option<u32> = None; // something written
        for (name, sch) in props {
            let req = required.contains(&name);
            let v = self.value(sch, &join(path, &format!("properties.{name}")), ALL, false)?;
            let Some(v) = v else {
                if req {
                    return Ok(None);
                }
                continue;
            };
            let mut key = String::new();
            write_string(&mut key, name);
            key.push_str(std::str::from_utf8(self.colon()).unwrap_or(":"));
            let next1 = self.b.node();
            if let Some(l0) = lane0 {
                let k = self.b.lit(l0, key.as_bytes());
                self.b.call(k, v, next1);
            }
            if let Some(l1) = lane1 {
                let c = self.b.lit(l1, self.comma());
                let k = self.b.lit(c, key.as_bytes());
                self.b.call(k, v, next1);
                if !req {
                    self.b.eps(l1, next1);
                }
            }
            if req {
                lane0 = None;
            } else if let Some(l0) = lane0 {
                let n0 = self.b.node();
                self.b.eps(l0, n0);
                lane0 = Some(n0);
            }
            lane1 = Some(next1);
        }
        for l in [lane0, lane1].into_iter().flatten() {
            self.b.byte(l, b'}', e);
        }
        Ok(Some(s))
    }
}

fn hex(b: &mut Builder, from: u32, to: u32) {
    b.bytes(from, b'0', b'9', to);
    b.bytes(from, b'a', b'f', to);
    b.bytes(from, b'A', b'F', to);
}

/// Decimal integers without leading zeros in [a, b], from `from` to `to`.
pub(crate) fn digits(b: &mut Builder, from: u32, to: u32, a: u128, hi: u128) {
    if a > hi {
        return;
    }
    let la = a.to_string().len();
    let lb = hi.to_string().len();
    for l in la..=lb {
        let lo_l = if l == 1 { 0 } else { 10u128.pow(l as u32 - 1) }.max(a);
        let hi_l = (10u128.pow(l as u32) - 1).min(hi);
        if lo_l <= hi_l {
            fixed(
                b,
                from,
                to,
                lo_l.to_string().as_bytes(),
                hi_l.to_string().as_bytes(),
            );
        }
    }
}

/// Digit strings of one length between `lo` and `hi` (inclusive, same length).
fn fixed(b: &mut Builder, from: u32, to: u32, lo: &[u8], hi: &[u8]) {
    if b.overflow {
        return;
    }
    if lo.len() == 1 {
        b.bytes(from, lo[0], hi[0], to);
        return;
    }
    let rest_free = lo[1..].iter().all(|&c| c == b'0') && hi[1..].iter().all(|&c| c == b'9');
    if rest_free {
        let mut cur = b.node();
        b.bytes(from, lo[0], hi[0], cur);
        for i in 1..lo.len() {
            let n = if i + 1 == lo.len() { to } else { b.node() };
            b.bytes(cur, b'0', b'9', n);
            cur = n;
        }
        return;
    }
    if lo[0] == hi[0] {
        let n = b.node();
        b.byte(from, lo[0], n);
        fixed(b, n, to, &lo[1..], &hi[1..]);
        return;
    }
    let nines = vec![b'9'; lo.len() - 1];
    let zeros = vec![b'0'; lo.len() - 1];
    let n1 = b.node();
    b.byte(from, lo[0], n1);
    fixed(b, n1, to, &lo[1..], &nines);
    if lo[0] + 1 < hi[0] {
        let n2 = b.node();
        b.bytes(from, lo[0] + 1, hi[0] - 1, n2);
        fixed(b, n2, to, &zeros, &nines);
    }
    let n3 = b.node();
    b.byte(from, hi[0], n3);
    fixed(b, n3, to, &zeros, &hi[1..]);
}

/// A non-negative integer keyword (`minLength`, `maxItems`, …).
fn count(o: &crate::json::Object, path: &str, kw: &str) -> R<Option<u64>> {
    match o.get(kw) {
        None => Ok(None),
        Some(v) => match v.as_number().and_then(|n| n.as_u64()) {
            Some(n) => Ok(Some(n)),
            None => err(path, kw, "must be a non-negative integer"),
        },
    }
}

/// `$ref` → the schema it names: `#`, or `#/` + a JSON pointer (RFC 6901) from the root.
pub(crate) fn resolve<'v>(root: &'v Value, r: &str) -> Option<&'v Value> {
    let p = r.strip_prefix('#')?;
    if p.is_empty() {
        return Some(root);
    }
    let p = p.strip_prefix('/')?;
    let mut cur = root;
    for tok in p.split('/') {
        let tok = tok.replace("~1", "/").replace("~0", "~");
        cur = match cur {
            Value::Object(o) => o.get(&tok)?,
            Value::Array(a) => a.get(tok.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// What a oneOf branch can match, coarsely: its types, its values when it lists them, and
/// its required properties' listed values (a tagged union's discriminator).
struct Sig {
    types: u8,
    values: Option<Vec<String>>,
    tags: Vec<(String, Vec<String>)>,
}

impl Sig {
    fn disjoint(&self, o: &Sig) -> bool {
        let overlap_t = |a: u8, b: u8| a & b != 0;
        match (&self.values, &o.values) {
            (Some(a), Some(b)) => return !a.iter().any(|x| b.contains(x)),
            (Some(_), None) | (None, Some(_)) => {
                if !overlap_t(self.types, o.types) {
                    return true;
                }
            }
            (None, None) => {}
        }
        if !overlap_t(self.types, o.types) {
            return true;
        }
        // Both objects only, with a required property whose listed values are disjoint.
        if self.types == OBJ && o.types == OBJ {
            for (k, va) in &self.tags {
                if let Some((_, vb)) = o.tags.iter().find(|(k2, _)| k2 == k) {
                    if !va.iter().any(|x| vb.contains(x)) {
                        return true;
                    }
                }
            }
        }
        false
    }
}

fn listed(o: &crate::json::Object) -> Option<Vec<String>> {
    let vals: Vec<&Value> = match (o.get("const"), o.get("enum")) {
        (Some(c), _) => vec![c],
        (None, Some(Value::Array(a))) => a.iter().collect(),
        _ => return None,
    };
    Some(
        vals.iter()
            .map(|v| {
                let mut s = String::new();
                json_text(v, JsonStyle::Compact, &mut s);
                s
            })
            .collect(),
    )
}

fn sig(root: &Value, s: &Value, depth: usize) -> Sig {
    let any = Sig {
        types: ALL,
        values: None,
        tags: Vec::new(),
    };
    let Value::Object(o) = s else {
        return if matches!(s, Value::Bool(false)) {
            Sig {
                types: 0,
                values: Some(Vec::new()),
                tags: Vec::new(),
            }
        } else {
            any
        };
    };
    if depth > 16 {
        return any;
    }
    if let Some(r) = o.get("$ref").and_then(|r| r.as_str()) {
        return resolve(root, r).map_or(any, |t| sig(root, t, depth + 1));
    }
    if let Some([one]) = o.get("allOf").and_then(|a| a.as_array()) {
        return sig(root, one, depth + 1);
    }
    for kw in ["anyOf", "oneOf"] {
        if let Some(a) = o.get(kw).and_then(|a| a.as_array()) {
            let mut t = 0;
            for b in a {
                t |= sig(root, b, depth + 1).types;
            }
            return Sig {
                types: t,
                values: None,
                tags: Vec::new(),
            };
        }
    }
    if let Some(values) = listed(o) {
        let mut t = 0;
        let vals: Vec<&Value> = match (o.get("const"), o.get("enum")) {
            (Some(c), _) => vec![c],
            (None, Some(Value::Array(a))) => a.iter().collect(),
            _ => Vec::new(),
        };
        for v in vals {
            t |= type_of(v);
        }
        return Sig {
            types: t,
            values: Some(values),
            tags: Vec::new(),
        };
    }
    let types = match o.get("type") {
        Some(Value::String(t)) => type_bits(t).unwrap_or(ALL),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().and_then(type_bits))
            .fold(0, |a, b| a | b),
        _ => ALL,
    };
    let mut tags = Vec::new();
    if let (Some(Value::Object(p)), Some(Value::Array(req))) =
        (o.get("properties"), o.get("required"))
    {
        for (k, v) in p.iter() {
            if !req.iter().any(|r| r.as_str() == Some(k)) {
                continue;
            }
            let v = match v {
                Value::Object(vo) => vo
                    .get("$ref")
                    .and_then(|r| r.as_str())
                    .and_then(|r| resolve(root, r))
                    .unwrap_or(v),
                _ => v,
            };
            if let Some(vals) = v.as_object().and_then(listed) {
                tags.push((k.to_string(), vals));
            }
        }
    }
    Sig {
        types,
        values: None,
        tags,
    }
}

#[cfg(test)]
mod tests {
    use super::super::pda::accepts;
    use super::*;

    fn compile(text: &str) -> Result<Schema, SchemaError> {
        Schema::compile(
            &crate::json::parse(text.as_bytes()).unwrap(),
            JsonStyle::Compact,
        )
    }

    fn admits(s: &Schema, text: &str) -> bool {
        accepts(&s.plain_grammar(&[]), text.as_bytes())
    }

    #[test]
    fn integer_bounds_digit_by_digit() {
        let s = compile(r#"{"type":"integer","minimum":-20,"maximum":999}"#).unwrap();
        for ok in ["-20", "-1", "0", "5", "99", "999", "100"] {
            assert!(admits(&s, ok), "{ok}");
        }
        for bad in ["-21", "1000", "05", "-0", "1.5", "1e2", "-", ""] {
            assert!(!admits(&s, bad), "{bad}");
        }
        let s =
            compile(r#"{"type":"integer","exclusiveMinimum":10,"exclusiveMaximum":20}"#).unwrap();
        assert!(admits(&s, "11") && admits(&s, "19") && !admits(&s, "10") && !admits(&s, "20"));
    }

    #[test]
    fn number_bounds_keep_fractions_inside() {
        let s = compile(r#"{"type":"number","minimum":0,"maximum":1}"#).unwrap();
        for ok in ["0", "0.5", "1", "0.999"] {
            assert!(admits(&s, ok), "{ok}");
        }
        for bad in ["1.5", "-0.5", "2", "1.0e1"] {
            assert!(!admits(&s, bad), "{bad}");
        }
        let s = compile(r#"{"type":"number","minimum":-2.5,"maximum":-1}"#).unwrap();
        assert!(
            admits(&s, "-2")
                && admits(&s, "-1.5")
                && admits(&s, "-1")
                && !admits(&s, "-0.5")
                && !admits(&s, "-3")
        );
        assert!(compile(r#"{"type":"integer","minimum":3,"maximum":2}"#).is_err());
    }

    #[test]
    fn strings_count_characters_and_escapes() {
        let s = compile(r#"{"type":"string","minLength":1,"maxLength":2}"#).unwrap();
        for ok in [
            "\"a\"",
            "\"é\"",
            "\"ab\"",
            "\"\\n\"",
            "\"\\u00e9x\"",
            "\"😀\"",
        ] {
            assert!(admits(&s, ok), "{ok}");
        }
        for bad in [
            "\"\"",
            "\"abc\"",
            "\"\n\"",
            "\"\\ud800\"",
            "\"\\x\"",
            "\"\u{7}\"",
        ] {
            assert!(!admits(&s, bad), "{bad}");
        }
        // Bytes that are not well-formed UTF-8 never get in.
        let g = s.plain_grammar(&[]);
        assert!(!accepts(&g, b"\"\xc0\x80\""));
        assert!(!accepts(&g, b"\"\xed\xa0\x80\""));
    }

    #[test]
    fn objects_in_schema_order_with_optional_commas() {
        let s = compile(
            r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"null"}},"required":["b"]}"#,
        )
        .unwrap();
        for ok in [
            r#"{"b":true}"#,
            r#"{"a":1,"b":false}"#,
            r#"{"b":true,"c":null}"#,
            r#"{"a":-3,"b":true,"c":null}"#,
        ] {
            assert!(admits(&s, ok), "{ok}");
        }
        for bad in [
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"b":true,"a":1}"#,
            r#"{,"b":true}"#,
            r#"{"b":true,}"#,
            r#"{"b": true}"#,
        ] {
            assert!(!admits(&s, bad), "{bad}");
        }
        let t = Schema::compile(s.source(), JsonStyle::Template).unwrap();
        assert!(admits(&t, r#"{"a": 1, "b": false}"#) && !admits(&t, r#"{"a":1,"b":false}"#));
    }

    #[test]
    fn arrays_with_bounds_and_prefix() {
        let s = compile(r#"{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":1,"maxItems":3}"#).unwrap();
        assert!(admits(&s, "[1]") && admits(&s, "[1,2,3]"));
        assert!(!admits(&s, "[]") && !admits(&s, "[1,2,3,4]") && !admits(&s, "[10]"));
        let s = compile(
            r#"{"type":"array","prefixItems":[{"type":"string"},{"const":5}],"items":false}"#,
        )
        .unwrap();
        assert!(
            admits(&s, "[]")
                && admits(&s, "[\"x\"]")
                && admits(&s, "[\"x\",5]")
                && !admits(&s, "[\"x\",5,5]")
        );
        let s = compile(r#"{"type":"array"}"#).unwrap();
        assert!(admits(&s, r#"[1,"a",[null,{"k":true}],-2.5e3]"#));
    }

    #[test]
    fn enum_const_anyof_ref_recursion() {
        let s = compile(r#"{"enum":["a\"b",1,null,[1,2],{"x":false}]}"#).unwrap();
        for ok in [r#""a\"b""#, "1", "null", "[1,2]", r#"{"x":false}"#] {
            assert!(admits(&s, ok), "{ok}");
        }
        assert!(!admits(&s, "2"));
        let s =
            compile(r#"{"anyOf":[{"type":"string","maxLength":1},{"type":"integer"}]}"#).unwrap();
        assert!(admits(&s, "\"x\"") && admits(&s, "42") && !admits(&s, "\"xy\""));
        let s = compile(
            r##"{"definitions":{"l":{"anyOf":[{"type":"null"},{"type":"object","properties":{"next":{"$ref":"#/definitions/l"}},"required":["next"]}]}},"$ref":"#/definitions/l"}"##,
        )
        .unwrap();
        assert!(
            admits(&s, "null")
                && admits(&s, r#"{"next":{"next":null}}"#)
                && !admits(&s, r#"{"next":{}}"#)
        );
    }

    #[test]
    fn refusals_name_the_keyword_path() {
        let e = compile(
            r#"{"type":"object","properties":{"name":{"type":"string","pattern":"(?=x)"}}}"#,
        )
        .unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.keyword.as_str()),
            ("properties.name.pattern", "pattern")
        );
        let e = compile(r#"{"type":"strin"}"#).unwrap_err();
        assert_eq!(e.path, "type");
        let e = compile(r##"{"properties":{"a":{"$ref":"#/$defs/nope"}}}"##).unwrap_err();
        assert_eq!(e.path, "properties.a.$ref");
        let e = compile(r#"{"type":"object","properties":{"a":{"not":{}}}}"#).unwrap_err();
        assert_eq!(e.path, "properties.a.not");
        let e = compile(r#"{"oneOf":[{"type":"integer"},{"type":"number"}]}"#).unwrap_err();
        assert_eq!(e.keyword, "oneOf");
        assert!(compile(r#"{"oneOf":[{"type":"integer"},{"type":"string"}]}"#).is_ok());
        assert!(compile(r#"{"oneOf":[{"const":1},{"const":2}]}"#).is_ok());
        assert!(compile(r#"{"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]}"#).is_ok());
        assert!(compile("3").is_err());
        assert!(compile(r##"{"$ref":"#"}"##).is_err(), "admits no value");
        let e = compile(r#"{"type":"string","maxLength":100000}"#).unwrap_err();
        assert!(e.message.contains("too large"), "{e}");
        let e = compile(r#"{"type":"object","required":["x"]}"#).unwrap_err();
        assert_eq!(e.path, "required");
    }
}
