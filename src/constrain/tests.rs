//! End-to-end checks of the constraint over the real tokenizer (tests/fixtures/tiny-k3-text):
//! every output the mask walk admits to completion parses as JSON and validates against its
//! schema (an independent validator below), the closing rule ends every walk within its
//! budget, and the reply grammar yields parseable calls.

use std::sync::{Arc, OnceLock};

use super::*;
use crate::tokenizer::Tokenizer;

pub(crate) fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        Tokenizer::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-k3-text")).unwrap()
    })
}

pub(crate) fn vocab() -> Arc<Vocabulary> {
    static V: OnceLock<Arc<Vocabulary>> = OnceLock::new();
    V.get_or_init(|| Arc::new(Vocabulary::new(tok()))).clone()
}

fn specials() -> Specials {
    Specials::from_tokenizer(tok()).unwrap()
}

/// A small deterministic generator (SplitMix64).
pub(crate) struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Runs `c` for at most `budget` ids, each chosen among the admitted ones (biased to short
/// ids half the time so structure gets exercised); panics on an empty mask of an
/// incomplete output. Returns the ids and whether the output completed.
pub(crate) fn run(c: &mut dyn Constraint, budget: usize, rng: &mut Rng) -> (Vec<u32>, bool) {
    let v = vocab();
    let mut mask = Mask::new(v.size());
    let mut ids = Vec::new();
    while ids.len() < budget {
        if c.is_complete() {
            break;
        }
        c.mask(Some(budget - ids.len()), &mut mask);
        let n = mask.count();
        assert!(n > 0, "empty mask on an incomplete output after {ids:?}");
        let pick = if rng.next() % 2 == 0 { 0 } else { (rng.next() % n as u64) as usize };
        let id = mask.iter().nth(pick).unwrap();
        c.accept(id).unwrap_or_else(|e| panic!("admitted id not accepted: {e}"));
        ids.push(id);
    }
    (ids, c.is_complete())
}

fn text(ids: &[u32]) -> Vec<u8> {
    let v = vocab();
    ids.iter().filter_map(|&i| v.token(i)).flatten().copied().collect()
}

/// An independent validator for the supported subset (serde_json values).
pub(crate) fn valid(root: &serde_json::Value, s: &serde_json::Value, x: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    let s = match s {
        J::Bool(b) => return *b,
        J::Object(o) => o,
        _ => return false,
    };
    if let Some(r) = s.get("$ref").and_then(|r| r.as_str()) {
        let ptr = r.trim_start_matches('#');
        return root.pointer(ptr).is_some_and(|t| valid(root, t, x));
    }
    if let Some(J::Array(a)) = s.get("allOf") {
        return a.iter().all(|b| valid(root, b, x));
    }
    if let Some(J::Array(a)) = s.get("anyOf") {
        return a.iter().any(|b| valid(root, b, x));
    }
    if let Some(J::Array(a)) = s.get("oneOf") {
        return a.iter().filter(|b| valid(root, b, x)).count() == 1;
    }
    if let Some(c) = s.get("const") {
        if !json_eq(c, x) {
            return false;
        }
    }
    if let Some(J::Array(e)) = s.get("enum") {
        if !e.iter().any(|c| json_eq(c, x)) {
            return false;
        }
    }
    if let Some(t) = s.get("type") {
        let ok = |t: &str| match t {
            "null" => x.is_null(),
            "boolean" => x.is_boolean(),
            "integer" => x.is_i64() || x.is_u64() || x.as_f64().is_some_and(|f| f.fract() == 0.0),
            "number" => x.is_number(),
            "string" => x.is_string(),
            "array" => x.is_array(),
            "object" => x.is_object(),
            _ => false,
        };
        let any = match t {
            J::String(t) => ok(t),
            J::Array(ts) => ts.iter().any(|t| t.as_str().is_some_and(ok)),
            _ => false,
        };
        if !any {
            return false;
        }
    }
    if let Some(f) = x.as_f64() {
        let num = |k: &str| s.get(k).and_then(|v| v.as_f64());
        if num("minimum").is_some_and(|m| f < m)
            || num("maximum").is_some_and(|m| f > m)
            || num("exclusiveMinimum").is_some_and(|m| f <= m)
            || num("exclusiveMaximum").is_some_and(|m| f >= m)
        {
            return false;
        }
    }
    if let Some(st) = x.as_str() {
        let n = st.chars().count() as u64;
        if s.get("minLength").and_then(|v| v.as_u64()).is_some_and(|m| n < m)
            || s.get("maxLength").and_then(|v| v.as_u64()).is_some_and(|m| n > m)
        {
            return false;
        }
        if let Some(p) = s.get("pattern").and_then(|p| p.as_str()) {
            if !pattern_matches(p, st) {
                return false;
            }
        }
    }
    if let Some(a) = x.as_array() {
        let n = a.len() as u64;
        if s.get("minItems").and_then(|v| v.as_u64()).is_some_and(|m| n < m)
            || s.get("maxItems").and_then(|v| v.as_u64()).is_some_and(|m| n > m)
        {
            return false;
        }
        let prefix = s.get("prefixItems").and_then(|p| p.as_array()).cloned().unwrap_or_default();
        for (i, it) in a.iter().enumerate() {
            let sch = if i < prefix.len() { Some(&prefix[i]) } else { s.get("items") };
            if let Some(sch) = sch {
                if !valid(root, sch, it) {
                    return false;
                }
            }
        }
    }
    if let Some(o) = x.as_object() {
        let props = s.get("properties").and_then(|p| p.as_object());
        if let Some(J::Array(req)) = s.get("required") {
            if !req.iter().all(|r| r.as_str().is_some_and(|r| o.contains_key(r))) {
                return false;
            }
        }
        for (k, v) in o {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => {
                    if !valid(root, ps, v) {
                        return false;
                    }
                }
                None => match s.get("additionalProperties") {
                    Some(J::Bool(false)) => return false,
                    Some(a @ J::Object(_)) => {
                        if !valid(root, a, v) {
                            return false;
                        }
                    }
                    _ => {}
                },
            }
        }
    }
    true
}

fn json_eq(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The reference regex engine (regex-syntax's parse → a backtracking-free check through
/// `regex_syntax::hir` would need the `regex` crate; the patterns used here are checked by
/// a tiny matcher of their own instead).
fn pattern_matches(p: &str, s: &str) -> bool {
    match p {
        "^[a-z]{2,4}-[0-9]+$" => {
            let Some((a, b)) = s.split_once('-') else { return false };
            (2..=4).contains(&a.len())
                && a.bytes().all(|c| c.is_ascii_lowercase())
                && !b.is_empty()
                && b.bytes().all(|c| c.is_ascii_digit())
        }
        "^(yes|no)$" => s == "yes" || s == "no",
        "^\\d{3}$" => s.len() == 3 && s.bytes().all(|c| c.is_ascii_digit()),
        _ => panic!("no oracle for pattern {p}"),
    }
}

fn k3_value(j: &serde_json::Value) -> crate::json::Value {
    crate::json::parse(j.to_string().as_bytes()).unwrap()
}

/// Walks `schema` `n` times with a budget; every completed output must parse and validate,
/// and every walk must complete (the closing rule).
fn check_schema(schema: serde_json::Value, n: usize, budget: usize, seed: u64) {
    let sch = Arc::new(Schema::compile(&k3_value(&schema), JsonStyle::Compact).unwrap());
    let end = specials().eos;
    let mut rng = Rng(seed);
    for _ in 0..n {
        let mut c = plain(sch.clone(), vocab(), &[end]);
        let (ids, complete) = run(&mut *c, budget, &mut rng);
        assert!(complete, "{schema}: not complete within {budget} ids: {:?}", String::from_utf8_lossy(&text(&ids)));
        assert_eq!(*ids.last().unwrap(), end);
        let t = text(&ids[..ids.len() - 1]);
        let x: serde_json::Value = serde_json::from_slice(&t)
            .unwrap_or_else(|e| panic!("{schema}: {e}: {:?}", String::from_utf8_lossy(&t)));
        assert!(!t.contains(&b' ') || x.to_string().contains(' '), "whitespace outside strings: {:?}", String::from_utf8_lossy(&t));
        assert!(valid(&schema, &schema, &x), "{schema}: invalid output {x}");
    }
}

#[test]
fn schemas_of_the_issue_validate_and_close() {
    use serde_json::json;
    let schemas = [
        json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3}}, "required": ["name", "age"], "additionalProperties": false}),
        json!({"anyOf": [{"type": "boolean"}, {"type": "number", "minimum": -5, "maximum": 5}, {"type": "null"}]}),
        json!({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": -20, "maximum": 999}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}}, "$ref": "#/$defs/node"}),
        json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"}, "ok": {"type": "string", "pattern": "^(yes|no)$"}, "n": {"type": "string", "pattern": "^\\d{3}$"}}, "required": ["code", "ok", "n"]}),
        json!({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "number"}}, "required": ["kind", "x"]}, {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string", "minLength": 2, "maxLength": 5}}, "required": ["kind", "y"]}]}),
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}], "items": false, "minItems": 2}),
        json!({"type": "object"}),
    ];
    for (i, s) in schemas.into_iter().enumerate() {
        check_schema(s, 4, 120, i as u64);
    }
}

#[test]
fn reply_with_named_tool_parses_back() {
    use serde_json::json;
    let params = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7}, "units": {"enum": ["c", "f"]}, "opts": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}}, "required": ["city", "days", "opts"]});
    let sch = Arc::new(Schema::compile(&k3_value(&params), JsonStyle::Template).unwrap());
    let spec = ReplySpec {
        thinking: false,
        response: None,
        tools: vec![("get_weather".into(), sch.clone()), ("other".into(), sch)],
        tool_choice: ToolChoice::Named("get_weather".into()),
    };
    let mut rng = Rng(7);
    for _ in 0..4 {
        let mut c = reply(&spec, vocab(), &specials()).unwrap();
        let (ids, complete) = run(&mut *c, 200, &mut rng);
        assert!(complete, "{:?}", tok().decode_lossy(&ids));
        use crate::chat::reply::{ReplyEvent, ReplyParser};
        let mut parser = ReplyParser::new(false);
        let mut evs = Vec::new();
        parser.push_all(tok(), &ids, &mut evs);
        parser.finish(&mut evs);
        let mut names = Vec::new();
        let mut calls = Vec::new();
        for ev in evs {
            match ev {
                ReplyEvent::ToolCallStart { name, .. } => names.push(name),
                ReplyEvent::ToolCallEnd { arguments, .. } => calls.push(arguments),
                ReplyEvent::Warning(w) => panic!("warning {w} in {:?}", tok().decode_lossy(&ids)),
                _ => {}
            }
        }
        let calls: Vec<(String, String)> = names.into_iter().zip(calls).collect();
        assert!(!calls.is_empty(), "no call in {:?}", tok().decode_lossy(&ids));
        for (name, args) in calls {
            assert_eq!(name, "get_weather");
            let x: serde_json::Value = serde_json::from_str(&args).unwrap();
            assert!(valid(&params, &params, &x), "{x}");
        }
    }
}
