//! The reply grammar (issue 25 item 3) after the generation prompt of TOKENIZER.md §10:
//! the think channel (free text) when thinking is on, the response channel (JSON of a schema,
//! or free text), the tools channel per `tool_choice` with each call in the XTML syntax of §10,
//! then close(`message`) and an end id (§11).
//!
//! Free text is any byte string without special ids. A call is
//! `<|open|>call tool="NAME" index="I"<|sep|>` + arguments + `<|close|>call<|sep|>`, I the
//! call's 1-based number (calls beyond [`MAX_CALLS`] are not admitted); each argument is
//! `<|open|>argument key="KEY" type="T"<|sep|>` + value + `<|close|>argument<|sep|>`, in the
//! schema's property order, required ones always, T the value's JSON type (`integer` written
//! `number`), string values raw and other values JSON with the template's `", "` / `": "`.
//! Under `tool_choice` required or named, the response channel is left empty and the tools
//! channel follows at once (the constraint applies "at once", issue 25 item 3).

use std::sync::Arc;

use super::grammar::{Builder, Grammar};
use super::schema::{self, Compiler, Schema, SchemaError};
use super::JsonStyle;
use crate::json::Value;
use crate::tokenizer::Tokenizer;

/// Most calls in one reply (each call's `index` attribute is spelled out, so the count is
/// unrolled in the grammar).
pub const MAX_CALLS: usize = 16;

/// How the reply may use tools (the request's `tool_choice`, TOKENIZER.md §10 step 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may open the tools channel; every call it opens is constrained.
    Auto,
    /// The tools channel is never opened.
    None,
    /// At least one call, at once.
    Required,
    /// At least one call, every call to this tool, at once.
    Named(String),
}

/// What the reply may be (issue 25 item 3), after the generation prompt of TOKENIZER.md §10.
#[derive(Debug, Clone)]
pub struct ReplySpec {
    /// The generation prompt opened the think channel (free text until close(`think`)).
    pub thinking: bool,
    /// The response channel holds exactly this JSON, then closes (None: free text).
    pub response: Option<Arc<Schema>>,
    /// Declared tools: name and parameters schema.
    pub tools: Vec<(String, Arc<Schema>)>,
    /// How the tools may be used.
    pub tool_choice: ToolChoice,
}

/// The ids of the template's structural specials (taken from the tokenizer, never
/// hard-coded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Specials {
    /// `<|open|>`.
    pub open: u32,
    /// `<|close|>`.
    pub close: u32,
    /// `<|sep|>`.
    pub sep: u32,
    /// `<|end_of_msg|>`.
    pub end_of_msg: u32,
    /// `[EOS]`.
    pub eos: u32,
}

impl Specials {
    /// The specials of `tok`; `None` when one is missing (not a chat tokenizer).
    pub fn from_tokenizer(tok: &Tokenizer) -> Option<Specials> {
        use crate::tokenizer::{CLOSE, END_OF_MSG, EOS, OPEN, SEP};
        Some(Specials {
            open: tok.special_id(OPEN)?,
            close: tok.special_id(CLOSE)?,
            sep: tok.special_id(SEP)?,
            end_of_msg: tok.special_id(END_OF_MSG)?,
            eos: tok.special_id(EOS)?,
        })
    }
}

struct X<'a> {
    b: Builder,
    sp: &'a Specials,
}

impl X<'_> {
    /// `<|open|>` TEXT `<|sep|>` from `from`; returns the node after.
    fn open(&mut self, from: u32, text: &[u8]) -> u32 {
        let a = self.b.node();
        self.b.special(from, self.sp.open, a);
        let t = self.b.lit(a, text);
        let z = self.b.node();
        self.b.special(t, self.sp.sep, z);
        z
    }

    /// `<|close|>` TAG `<|sep|>` from `from` to `to`.
    fn close(&mut self, from: u32, tag: &[u8], to: u32) {
        let a = self.b.node();
        self.b.special(from, self.sp.close, a);
        let t = self.b.lit(a, tag);
        self.b.special(t, self.sp.sep, to);
    }

    /// Free text looping at a new node reached from `from`; returns that node.
    fn free(&mut self, from: u32) -> u32 {
        let n = self.b.node();
        self.b.eps(from, n);
        self.b.bytes(n, 0x00, 0xff, n);
        n
    }
}

/// The attribute text of a value (`&` → `&amp;`, `"` → `&quot;`, TOKENIZER.md §10).
fn attr(v: &str) -> String {
    v.replace('&', "&amp;").replace('"', "&quot;")
}

/// The rule of one tool's arguments (between the call's `<|sep|>` and its close).
fn arguments(x: &mut X, name: &str, params: &Value) -> Result<u32, SchemaError> {
    let tool_err = |path: &str, kw: &str, m: String| SchemaError {
        path: format!(
            "tools.{name}.parameters{}{path}",
            if path.is_empty() { "" } else { "." }
        ),
        keyword: kw.to_string(),
        message: m,
    };
    let mut target = params;
    if let Some(r) = params.get("$ref").and_then(|r| r.as_str()) {
        target = schema::resolve(params, r)
            .ok_or_else(|| tool_err("$ref", "$ref", format!("{r:?} names nothing")))?;
    }
    let o = target
        .as_object()
        .filter(|o| o.get("type").is_none_or(|t| t.as_str() == Some("object")))
        .ok_or_else(|| {
            tool_err(
                "",
                "type",
                "a tool's parameters must be an object schema".into(),
            )
        })?;
    for (k, _) in o.iter() {
        if ![
            "type",
            "properties",
            "required",
            "additionalProperties",
            "$defs",
            "definitions",
            "title",
            "description",
            "$schema",
            "$id",
            "$comment",
            "$ref",
        ]
        .contains(&k)
        {
            return Err(tool_err(
                k,
                k,
                format!("keyword `{k}` on a tool's parameters object is not supported"),
            ));
        }
    }
    let props: Vec<(&str, &Value)> = match o.get("properties") {
        None => Vec::new(),
        Some(Value::Object(p)) => p.iter().collect(),
        Some(_) => {
            return Err(tool_err(
                "properties",
                "properties",
                "must be an object".into(),
            ))
        }
    };
    let required: Vec<&str> = match o.get("required") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
        Some(_) => {
            return Err(tool_err(
                "required",
                "required",
                "must be an array of names".into(),
            ))
        }
    };
    for r in &required {
        if !props.iter().any(|(k, _)| k == r) {
            return Err(tool_err(
                "required",
                "required",
                format!("{r:?} is required but not in `properties`"),
            ));
        }
    }
    let (s, e) = x.b.rule();
    let mut lane = s;
    for (key, sch) in props {
        let req = required.contains(&key);
        let path = format!("properties.{key}");
        let mut alts = Vec::new();
        {
            let mut c = Compiler::new(&mut x.b, params, JsonStyle::Template);
            for (t, tname) in [
                (schema::STR, "string"),
                (schema::INT | schema::FRAC, "number"),
                (schema::BOOL, "boolean"),
                (schema::NULL, "null"),
                (schema::OBJ, "object"),
                (schema::ARR, "array"),
            ] {
                let v = c
                    .value(sch, &path, t, t == schema::STR)
                    .map_err(|e| SchemaError {
                        path: format!("tools.{name}.parameters.{}", e.path),
                        ..e
                    })?;
                if let Some(v) = v {
                    alts.push((tname, v));
                }
            }
        }
        if alts.is_empty() {
            if req {
                return Err(tool_err(
                    &path,
                    "",
                    format!("argument {key:?} admits no value"),
                ));
            }
            continue;
        }
        let next = x.b.node();
        let head = format!("argument key=\"{}\" type=\"", attr(key));
        let a = x.b.node();
        x.b.special(lane, x.sp.open, a);
        let h = x.b.lit(a, head.as_bytes());
        for (tname, v) in alts {
            let t = x.b.lit(h, tname.as_bytes());
            let q = x.b.lit(t, b"\"");
            let body = x.b.node();
            x.b.special(q, x.sp.sep, body);
            let done = x.b.node();
            x.b.call(body, v, done);
            x.close(done, b"argument", next);
        }
        if !req {
            x.b.eps(lane, next);
        }
        lane = next;
    }
    x.b.eps(lane, e);
    Ok(s)
}

/// The grammar of one reply (see the module comment).
pub(crate) fn reply_grammar(spec: &ReplySpec, sp: &Specials) -> Result<Grammar, SchemaError> {
    let mut x = X {
        b: Builder::new(),
        sp,
    };
    let (s, e) = x.b.rule();
    let mut cur = s;
    let at_once = matches!(
        spec.tool_choice,
        ToolChoice::Required | ToolChoice::Named(_)
    );
    if let ToolChoice::Named(n) = &spec.tool_choice {
        if !spec.tools.iter().any(|(t, _)| t == n) {
            return Err(SchemaError {
                path: "tool_choice".into(),
                keyword: "tool_choice".into(),
                message: format!("names the tool {n:?}, which is not declared"),
            });
        }
    }
    if matches!(spec.tool_choice, ToolChoice::Required) && spec.tools.is_empty() {
        return Err(SchemaError {
            path: "tool_choice".into(),
            keyword: "tool_choice".into(),
            message: "is `required` but no tool is declared".into(),
        });
    }
    if spec.thinking {
        let f = x.free(cur);
        let n = x.b.node();
        x.close(f, b"think", n);
        cur = x.open(n, b"response");
    }
    // The response channel.
    let resp_end = x.b.node();
    if at_once {
        x.b.eps(cur, resp_end);
    } else if let Some(sch) = &spec.response {
        let v = {
            let mut c = Compiler::new(&mut x.b, sch.source(), sch.style());
            c.top(sch.source(), "", schema::ALL, false)?
        };
        x.b.call(cur, v, resp_end);
    } else {
        let f = x.free(cur);
        x.b.eps(f, resp_end);
    }
    let after_resp = x.b.node();
    x.close(resp_end, b"response", after_resp);
    // The tools channel.
    let before_msg = x.b.node();
    if spec.tool_choice != ToolChoice::None && !spec.tools.is_empty() {
        if !at_once {
            x.b.eps(after_resp, before_msg);
        }
        let tools: Vec<&(String, Arc<Schema>)> = match &spec.tool_choice {
            ToolChoice::Named(n) => spec.tools.iter().filter(|(t, _)| t == n).collect(),
            _ => spec.tools.iter().collect(),
        };
        let mut args = Vec::new();
        for (name, sch) in &tools {
            args.push((name.as_str(), arguments(&mut x, name, sch.source())?));
        }
        let mut c = x.open(after_resp, b"tools");
        let tools_end = x.b.node();
        for i in 1..=MAX_CALLS {
            if i > 1 {
                x.close(c, b"tools", tools_end);
            }
            let a = x.b.node();
            x.b.special(c, sp.open, a);
            let pre = x.b.lit(a, b"call tool=\"");
            let next = x.b.node();
            for (name, rule) in &args {
                let t = x.b.lit(pre, format!("{name}\" index=\"{i}\"").as_bytes());
                let body = x.b.node();
                x.b.special(t, sp.sep, body);
                let done = x.b.node();
                x.b.call(body, *rule, done);
                x.close(done, b"call", next);
            }
            c = next;
        }
        x.close(c, b"tools", tools_end);
        x.b.eps(tools_end, before_msg);
    } else {
        x.b.eps(after_resp, before_msg);
    }
    let m = x.b.node();
    x.close(before_msg, b"message", m);
    x.b.special(m, sp.eos, e);
    x.b.special(m, sp.end_of_msg, e);
    if x.b.overflow {
        return Err(SchemaError {
            path: String::new(),
            keyword: String::new(),
            message: format!(
                "the tools and schemas are too large to enforce (more than {} automaton states)",
                super::grammar::MAX_NODES
            ),
        });
    }
    x.b.finish(s).ok_or_else(|| SchemaError {
        path: String::new(),
        keyword: String::new(),
        message: "the reply admits no output".into(),
    })
}
