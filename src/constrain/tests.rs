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
        Tokenizer::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-k3-text"),
        )
        .unwrap()
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
        let pick = if rng.next() % 2 == 0 {
            0
        } else {
            (rng.next() % n as u64) as usize
        };
        let id = mask.iter().nth(pick).unwrap();
        c.accept(id)
            .unwrap_or_else(|e| panic!("admitted id not accepted: {e}"));
        ids.push(id);
    }
    (ids, c.is_complete())
}

fn text(ids: &[u32]) -> Vec<u8> {
    let v = vocab();
    ids.iter()
        .filter_map(|&i| v.token(i))
        .flatten()
        .copied()
        .collect()
}

/// An independent validator for the supported subset (serde_json values).
pub(crate) fn valid(
    root: &serde_json::Value,
    s: &serde_json::Value,
    x: &serde_json::Value,
) -> bool {
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
        if s.get("minLength")
            .and_then(|v| v.as_u64())
            .is_some_and(|m| n < m)
            || s.get("maxLength")
                .and_then(|v| v.as_u64())
                .is_some_and(|m| n > m)
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
        if s.get("minItems")
            .and_then(|v| v.as_u64())
            .is_some_and(|m| n < m)
            || s.get("maxItems")
                .and_then(|v| v.as_u64())
                .is_some_and(|m| n > m)
        {
            return false;
        }
        let prefix = s
            .get("prefixItems")
            .and_then(|p| p.as_array())
            .cloned()
            .unwrap_or_default();
        for (i, it) in a.iter().enumerate() {
            let sch = if i < prefix.len() {
                Some(&prefix[i])
            } else {
                s.get("items")
            };
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
            if !req
                .iter()
                .all(|r| r.as_str().is_some_and(|r| o.contains_key(r)))
            {
                return false;
            }
        }
        for (k, v) in o {
            let sub = match props.and_then(|p| p.get(k)) {
                Some(ps) => Some(ps),
                None => match s.get("additionalProperties") {
                    Some(J::Bool(false)) => return false,
                    Some(a @ J::Object(_)) => Some(a),
                    _ => None,
                },
            };
            if sub.is_some_and(|sub| !valid(root, sub, v)) {
                return false;
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
            let Some((a, b)) = s.split_once('-') else {
                return false;
            };
            (2..=4).contains(&a.len())
                && a.bytes().all(|c| c.is_ascii_lowercase())
                && !b.is_empty()
                && b.bytes().all(|c| c.is_ascii_digit())
        }
        "^(yes|no)$" => s == "yes" || s == "no",
        "^\\d{3}$" => s.len() == 3 && s.bytes().all(|c| c.is_ascii_digit()),
        "^[a-z]{1,3}(-[0-9])?$" => {
            let (a, b) = s.split_once('-').unwrap_or((s, "0"));
            (1..=3).contains(&a.len())
                && a.bytes().all(|c| c.is_ascii_lowercase())
                && b.len() == 1
                && b.as_bytes()[0].is_ascii_digit()
        }
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
        assert!(
            complete,
            "{schema}: not complete within {budget} ids: {:?}",
            String::from_utf8_lossy(&text(&ids))
        );
        assert_eq!(*ids.last().unwrap(), end);
        let t = text(&ids[..ids.len() - 1]);
        let x: serde_json::Value = serde_json::from_slice(&t)
            .unwrap_or_else(|e| panic!("{schema}: {e}: {:?}", String::from_utf8_lossy(&t)));
        assert!(
            !t.contains(&b' ') || x.to_string().contains(' '),
            "whitespace outside strings: {:?}",
            String::from_utf8_lossy(&t)
        );
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
        assert!(
            !calls.is_empty(),
            "no call in {:?}",
            tok().decode_lossy(&ids)
        );
        for (name, args) in calls {
            assert_eq!(name, "get_weather");
            let x: serde_json::Value = serde_json::from_str(&args).unwrap();
            assert!(valid(&params, &params, &x), "{x}");
        }
    }
}

/// The ids of a template text: specials by name, texts encoded on their own (§10).
fn seg(parts: &[&str]) -> Vec<u32> {
    let mut ids = Vec::new();
    for p in parts {
        match tok().special_id(p) {
            Some(id) => ids.push(id),
            None => ids.extend(tok().encode(p, false)),
        }
    }
    ids
}

fn accepts_all(c: &mut dyn Constraint, ids: &[u32]) -> Result<(), Rejected> {
    for (i, &id) in ids.iter().enumerate() {
        c.accept(id).map_err(|e| Rejected {
            reason: format!("{} after {:?}", e.reason, tok().decode_lossy(&ids[..i])),
            ..e
        })?;
    }
    Ok(())
}

#[test]
fn reply_channels_in_order_with_auto_tools() {
    use serde_json::json;
    // (serde_json's map sorts keys: the schema order is n, q.)
    let params = json!({"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": ["integer", "null"]}}, "required": ["q"]});
    let sch = Arc::new(Schema::compile(&k3_value(&params), JsonStyle::Template).unwrap());
    let spec = ReplySpec {
        thinking: true,
        response: None,
        tools: vec![("find".into(), sch)],
        tool_choice: ToolChoice::Auto,
    };
    let (o, c, s) = ("<|open|>", "<|close|>", "<|sep|>");
    let ids = seg(&[
        "let me think",
        c,
        "think",
        s,
        o,
        "response",
        s,
        "Searching.",
        c,
        "response",
        s,
        o,
        "tools",
        s,
        o,
        "call tool=\"find\" index=\"1\"",
        s,
        o,
        "argument key=\"n\" type=\"number\"",
        s,
        "3",
        c,
        "argument",
        s,
        o,
        "argument key=\"q\" type=\"string\"",
        s,
        "cats & \"dogs\"",
        c,
        "argument",
        s,
        c,
        "call",
        s,
        c,
        "tools",
        s,
        c,
        "message",
        s,
        "[EOS]",
    ]);
    let mut k = reply(&spec, vocab(), &specials()).unwrap();
    accepts_all(&mut *k, &ids).unwrap();
    assert!(k.is_complete());
    let mut m = Mask::new(vocab().size());
    k.mask(None, &mut m);
    assert_eq!(m.count(), 0, "nothing after the end id");
    // A wrong argument type is rejected where it starts.
    let bad = seg(&[
        c,
        "think",
        s,
        o,
        "response",
        s,
        c,
        "response",
        s,
        o,
        "tools",
        s,
        o,
        "call tool=\"find\" index=\"1\"",
        s,
        o,
        "argument key=\"q\" type=\"number\"",
    ]);
    let mut k = reply(&spec, vocab(), &specials()).unwrap();
    assert!(accepts_all(&mut *k, &bad).is_err());
    // Without tools channel: also complete.
    let plain_reply = seg(&[
        c,
        "think",
        s,
        o,
        "response",
        s,
        "hi",
        c,
        "response",
        s,
        c,
        "message",
        s,
        "<|end_of_msg|>",
    ]);
    let mut k = reply(&spec, vocab(), &specials()).unwrap();
    accepts_all(&mut *k, &plain_reply).unwrap();
    assert!(k.is_complete());
}

#[test]
fn tool_choice_none_never_opens_tools_and_json_response_closes() {
    use serde_json::json;
    let params = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let sch = Arc::new(Schema::compile(&k3_value(&params), JsonStyle::Template).unwrap());
    let resp = Arc::new(Schema::compile(&k3_value(&json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})), JsonStyle::Compact).unwrap());
    let spec = ReplySpec {
        thinking: false,
        response: Some(resp),
        tools: vec![("find".into(), sch)],
        tool_choice: ToolChoice::None,
    };
    let (c, s) = ("<|close|>", "<|sep|>");
    let mut k = reply(&spec, vocab(), &specials()).unwrap();
    let mut m = Mask::new(vocab().size());
    k.mask(None, &mut m);
    assert!(!m.allows(specials().close), "the response JSON comes first");
    accepts_all(&mut *k, &seg(&["{\"ok\":true}", c, "response", s])).unwrap();
    k.mask(None, &mut m);
    assert_eq!(
        m.iter().collect::<Vec<_>>(),
        vec![specials().close],
        "no <|open|>: tools are off"
    );
    let mut rng = Rng(3);
    for _ in 0..3 {
        let mut k = reply(&spec, vocab(), &specials()).unwrap();
        let (ids, complete) = run(&mut *k, 40, &mut rng);
        assert!(complete);
        let text = tok().decode_lossy(&ids).unwrap();
        let json = text.split("<|close|>").next().unwrap();
        let x: serde_json::Value = serde_json::from_str(json).unwrap();
        assert!(x["ok"].is_boolean());
    }
}

#[test]
fn reply_errors_name_the_tool() {
    use serde_json::json;
    let bad = Arc::new(
        Schema::compile(&k3_value(&json!({"type": "string"})), JsonStyle::Template).unwrap(),
    );
    let spec = ReplySpec {
        thinking: false,
        response: None,
        tools: vec![("t".into(), bad)],
        tool_choice: ToolChoice::Auto,
    };
    let e = reply(&spec, vocab(), &specials()).unwrap_err();
    assert!(e.path.starts_with("tools.t.parameters"), "{e}");
    let spec = ReplySpec {
        thinking: false,
        response: None,
        tools: Vec::new(),
        tool_choice: ToolChoice::Named("x".into()),
    };
    assert_eq!(
        reply(&spec, vocab(), &specials()).unwrap_err().keyword,
        "tool_choice"
    );
}

#[test]
fn boxed_clone_diverges_independently() {
    let sch = Arc::new(Schema::any_object(JsonStyle::Compact));
    let mut a = plain(sch, vocab(), &[specials().eos]);
    accepts_all(&mut *a, &seg(&["{\"k\":"])).unwrap();
    let mut b = a.boxed_clone();
    accepts_all(&mut *a, &seg(&["1}"])).unwrap();
    accepts_all(&mut *b, &seg(&["[true]}"])).unwrap();
    assert!(a.accept(specials().eos).is_ok() && b.accept(specials().eos).is_ok());
    assert!(a.is_complete() && b.is_complete());
}

mod property {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value as J};

    fn leaf() -> impl Strategy<Value = J> {
        prop_oneof![
            Just(json!({"type": "null"})),
            Just(json!({"type": "boolean"})),
            (
                proptest::option::of(-60i64..60),
                proptest::option::of(0i64..200)
            )
                .prop_map(|(lo, w)| {
                    let mut o = json!({"type": "integer"});
                    if let Some(lo) = lo {
                        o["minimum"] = json!(lo);
                    }
                    if let (Some(lo), Some(w)) = (lo, w) {
                        o["maximum"] = json!(lo + w);
                    }
                    o
                }),
            (
                proptest::option::of(-60i64..60),
                proptest::option::of(1i64..100)
            )
                .prop_map(|(lo, w)| {
                    let mut o = json!({"type": "number"});
                    if let Some(w) = w {
                        o["maximum"] = json!(lo.unwrap_or(0) + w);
                    }
                    if let Some(lo) = lo {
                        o["minimum"] = json!(lo);
                    }
                    o
                }),
            (0u64..3, proptest::option::of(0u64..6)).prop_map(|(min, extra)| {
                let mut o = json!({"type": "string", "minLength": min});
                if let Some(e) = extra {
                    o["maxLength"] = json!(min + e);
                }
                o
            }),
            proptest::collection::vec(
                prop_oneof![
                    Just(json!("a")),
                    Just(json!("b\"c")),
                    Just(json!(7)),
                    Just(json!(null)),
                    Just(json!(false))
                ],
                1..4
            )
            .prop_map(|v| json!({"enum": v})),
            Just(json!({"type": "string", "pattern": "^[a-z]{1,3}(-[0-9])?$"})),
        ]
    }

    fn schema() -> impl Strategy<Value = J> {
        leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                (proptest::collection::vec(inner.clone(), 0..4), any::<u8>(), any::<bool>()).prop_map(|(ps, req, closed)| {
                    let names = ["a", "b", "c", "d"];
                    let mut props = serde_json::Map::new();
                    let mut required = Vec::new();
                    for (i, p) in ps.into_iter().enumerate() {
                        props.insert(names[i].into(), p);
                        if req >> i & 1 == 1 {
                            required.push(json!(names[i]));
                        }
                    }
                    json!({"type": "object", "properties": props, "required": required, "additionalProperties": !closed})
                }),
                (inner.clone(), 0u64..3, proptest::option::of(0u64..3)).prop_map(|(it, min, extra)| {
                    let mut o = json!({"type": "array", "items": it, "minItems": min});
                    if let Some(e) = extra {
                        o["maxItems"] = json!(min + e);
                    }
                    o
                }),
                proptest::collection::vec(inner, 1..3).prop_map(|bs| json!({"anyOf": bs})),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Every walk of a generated schema completes within its budget (the closing rule)
        /// and what it wrote parses as JSON and validates.
        #[test]
        fn admitted_outputs_validate(s in schema(), seed in any::<u64>()) {
            let sch = match Schema::compile(&k3_value(&s), JsonStyle::Compact) {
                Ok(x) => Arc::new(x),
                Err(e) => {
                    // Only an empty language may be refused here (every keyword is supported).
                    prop_assert!(e.message.contains("admits no value"), "{s}: {e}");
                    return Ok(());
                }
            };
            let mut rng = Rng(seed);
            for _ in 0..2 {
                let mut c = plain(sch.clone(), vocab(), &[specials().eos]);
                let (ids, complete) = run(&mut *c, 160, &mut rng);
                prop_assert!(complete, "{s}: {:?}", String::from_utf8_lossy(&text(&ids)));
                let t = text(&ids[..ids.len() - 1]);
                match serde_json::from_slice::<serde_json::Value>(&t) {
                    Ok(x) => prop_assert!(valid(&s, &s, &x), "{s}: {x}"),
                    // serde_json (without arbitrary precision) refuses integers beyond f64;
                    // they are valid JSON, and unbounded integers may be that long.
                    Err(e) if e.to_string().contains("number out of range") => {
                        prop_assert!(crate::json::parse(&t).is_ok());
                    }
                    Err(e) => prop_assert!(false, "{s}: {e}: {:?}", String::from_utf8_lossy(&t)),
                }
            }
        }
    }
}

#[test]
fn deep_recursion_never_dead_ends() {
    // Always-open arrays: `[` repeated until the depth bound, then only closing remains.
    use serde_json::json;
    let s = json!({"$defs": {"a": {"type": "object", "properties": {"x": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/a"}]}}, "required": ["x"]}}, "$ref": "#/$defs/a"});
    let sch = Arc::new(Schema::compile(&k3_value(&s), JsonStyle::Compact).unwrap());
    let mut c = plain(sch, vocab(), &[specials().eos]);
    let open = seg(&["{\"x\":"]);
    let mut mask = Mask::new(vocab().size());
    let mut depth = 0;
    // Open objects while the mask admits them (greedy on the opening ids).
    loop {
        c.mask(None, &mut mask);
        assert!(mask.count() > 0, "dead end at depth {depth}");
        if !open.iter().all(|&id| mask.allows(id)) && !mask.allows(open[0]) {
            break;
        }
        let mut ok = true;
        for &id in &open {
            c.mask(None, &mut mask);
            if !mask.allows(id) {
                ok = false;
                break;
            }
            c.accept(id).unwrap();
        }
        if !ok {
            break;
        }
        depth += 1;
        assert!(depth < 1000, "no depth bound");
    }
    assert!(depth > 20 && depth < 300, "depth {depth}");
    let mut rng = Rng(1);
    let (_, complete) = run(&mut *c, 4 * depth + 50, &mut rng);
    assert!(complete);
}
