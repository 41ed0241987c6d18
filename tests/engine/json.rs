//! JSON scanner (RFC 8259), DOM, pull API and writer.

use k3::json::{self, Kind, Number, Object, Scanner, Value};

fn err(input: &str) -> json::JsonError {
    match json::parse(input.as_bytes()) {
        Ok(v) => panic!("{input:?} parsed as {v:?}, expected an error"),
        Err(e) => e,
    }
}

#[test]
fn scalars_and_structures() {
    let v =
        json::parse(br#" {"a": [1, -2.5e3, true, false, null, "x"], "b": {}, "c": []} "#).unwrap();
    let a = v.get("a").unwrap().as_array().unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a[0].as_number().unwrap().as_u64(), Some(1));
    assert_eq!(a[1].as_number().unwrap().as_f64(), -2500.0);
    assert!(!a[1].as_number().unwrap().is_integer());
    assert_eq!(a[2], Value::Bool(true));
    assert_eq!(a[4], Value::Null);
    assert_eq!(a[5].as_str(), Some("x"));
    assert!(v.get("b").unwrap().as_object().unwrap().is_empty());
    assert_eq!(
        json::parse(b"0").unwrap().as_number().unwrap().as_u64(),
        Some(0)
    );
    assert_eq!(json::parse(b"\"\"").unwrap().as_str(), Some(""));
}

#[test]
fn object_member_order_is_kept() {
    let v = json::parse(br#"{"z":1,"a":2,"m":3}"#).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["z", "a", "m"]);
}

#[test]
fn numbers_keep_their_lexeme_and_u64_is_exact() {
    let v = json::parse(b"[18446744073709551615, 18446744073709551616, 4.0, 4, -0, 1E2, 1e-20]")
        .unwrap();
    let n: Vec<&Number> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_number().unwrap())
        .collect();
    assert_eq!(n[0].as_u64(), Some(u64::MAX));
    assert_eq!(n[1].as_u64(), None, "u64 overflow is not silently wrapped");
    assert_eq!(n[2].lexeme(), "4.0");
    assert!(!n[2].is_integer());
    assert!(n[3].is_integer());
    assert_eq!(n[4].as_i64(), Some(0));
    assert_eq!(n[4].as_u64(), None, "a sign is not an unsigned integer");
    assert!(!n[5].is_integer());
    assert_eq!(n[5].as_f64(), 100.0);
    assert_eq!(n[6].as_f64(), 1e-20);
    // 9007199254740993 is not representable in f64, but the lexeme keeps it exact.
    let big = json::parse(b"9007199254740993").unwrap();
    assert_eq!(big.as_number().unwrap().as_u64(), Some(9007199254740993));
}

#[test]
fn number_grammar_is_strict() {
    for bad in [
        "01",
        "-",
        "+1",
        ".5",
        "1.",
        "1e",
        "1e+",
        "0x10",
        "NaN",
        "Infinity",
        "-Infinity",
        "1.5.2",
        "--1",
        "1_000",
    ] {
        let e = err(bad);
        assert!(e.offset <= bad.len(), "{bad}: {e}");
    }
    let e = err("[1.]");
    assert_eq!(e.offset, 3);
    assert!(e.expected.contains("digit"), "{e}");
}

#[test]
fn every_escape_and_surrogate_pairs() {
    let v =
        json::parse(br#""a\"b\\c\/d\be\ff\ng\rh\ti\u0041\u00e9\u4e2d\ud83d\ude00\u0000""#).unwrap();
    assert_eq!(
        v.as_str().unwrap(),
        "a\"b\\c/d\u{8}e\u{c}f\ng\rh\ti\u{41}\u{e9}\u{4e2d}\u{1f600}\u{0}"
    );
    // Raw (unescaped) multi-byte UTF-8 passes through.
    assert_eq!(
        json::parse("\"中文 😀\"".as_bytes()).unwrap().as_str(),
        Some("中文 😀")
    );
}

#[test]
fn lone_and_reversed_surrogates_are_errors() {
    let e = err(r#""\ud800""#);
    assert_eq!(e.offset, 1);
    assert!(e.expected.contains("low surrogate"), "{e}");
    let e = err(r#""\udc00""#);
    assert!(e.expected.contains("lone low surrogate"), "{e}");
    let e = err(r#""\ud800\u0041""#);
    assert!(e.expected.contains("low surrogate"), "{e}");
    let e = err(r#""\ude00\ud83d""#);
    assert!(e.expected.contains("lone low surrogate"), "{e}");
    let e = err(r#""ab\ud83dx""#);
    assert_eq!(e.offset, 3);
}

#[test]
fn bad_strings() {
    let e = err("\"a\nb\"");
    assert_eq!(e.offset, 2);
    assert!(e.expected.contains("control character"), "{e}");
    let e = err(r#""\x""#);
    assert_eq!(e.offset, 1);
    assert!(e.expected.contains("escape"), "{e}");
    let e = err(r#""\u12g4""#);
    assert_eq!(e.offset, 5);
    let e = err("\"abc");
    assert_eq!(
        e.offset, 0,
        "an unterminated string points at its opening quote"
    );
    let e = err("\"abc\\");
    assert!(e.expected.contains("escape"), "{e}");
}

#[test]
fn invalid_utf8_is_refused_with_its_offset() {
    let e = json::parse(b"\"ab\xff\"").unwrap_err();
    assert_eq!(e.offset, 3);
    assert!(e.expected.contains("UTF-8"));
    // Overlong encoding and a UTF-8-encoded surrogate are invalid UTF-8 too.
    assert_eq!(json::parse(b"\"\xc0\xaf\"").unwrap_err().offset, 1);
    assert_eq!(json::parse(b"\"\xed\xa0\x80\"").unwrap_err().offset, 1);
}

#[test]
fn structural_errors_give_offset_and_expectation() {
    let cases: [(&str, usize, &str); 12] = [
        ("", 0, "a JSON value"),
        ("   ", 3, "a JSON value"),
        ("{", 1, "member name string or '}'"),
        ("{\"a\" 1}", 5, "':'"),
        ("{\"a\":1,}", 7, "member name string after ','"),
        ("{\"a\":1 \"b\":2}", 7, "',' or '}'"),
        ("[1,]", 3, "array element after ','"),
        ("[1 2]", 3, "',' or ']'"),
        ("[1,2", 4, "',' or ']'"),
        ("{} x", 3, "end of input"),
        ("tru", 0, "`true`"),
        ("{1:2}", 1, "member name string"),
    ];
    for (input, offset, what) in cases {
        let e = err(input);
        assert_eq!(e.offset, offset, "{input:?}: {e}");
        assert!(e.expected.contains(what), "{input:?}: {e}");
    }
}

#[test]
fn duplicate_keys_are_errors_small_and_large_objects() {
    let e = err(r#"{"a":1, "b":2, "a":3}"#);
    assert_eq!(e.offset, 15);
    assert_eq!(e.expected, "duplicate member name \"a\"", "{e}");
    // Past the linear-scan threshold the set-based check must still catch it.
    let mut s = String::from("{");
    for i in 0..40 {
        s.push_str(&format!("\"k{i}\":{i},"));
    }
    s.push_str("\"k3\":0}");
    let e = err(&s);
    assert!(e.expected.contains("\"k3\""), "{e}");
    // A duplicate decoded name written with different escapes is still a duplicate.
    let e = err(r#"{"A":1,"\u0041":2}"#);
    assert!(e.expected.contains("duplicate"), "{e}");
    // The same key in different objects is fine.
    json::parse(br#"{"a":{"a":1},"b":{"a":2}}"#).unwrap();
}

#[test]
fn nesting_limit() {
    let deep_ok = "[".repeat(128) + &"]".repeat(128);
    json::parse(deep_ok.as_bytes()).unwrap();
    let too_deep = "[".repeat(129) + &"]".repeat(129);
    let e = err(&too_deep);
    assert_eq!(e.offset, 128);
    assert!(e.expected.contains("nesting deeper than 128"), "{e}");
    // Far deeper input fails the same way, without exhausting the stack.
    let huge = "{\"a\":".repeat(100_000);
    assert!(err(&huge).expected.contains("nesting deeper than 128"));
    let e = json::parse_with_max_depth(b"[[1]]", 1).unwrap_err();
    assert_eq!(e.offset, 1);
}

#[test]
fn pull_api_borrows_unescaped_strings_and_streams() {
    let text = br#"{"t1": {"dtype": "BF16", "shape": [2, 3]}, "t\u0032": null}"#;
    let mut s = Scanner::new(text).unwrap();
    s.begin_object().unwrap();
    let k = s.next_key().unwrap().unwrap();
    assert!(matches!(k, std::borrow::Cow::Borrowed("t1")));
    s.begin_object().unwrap();
    assert_eq!(s.next_key().unwrap().as_deref(), Some("dtype"));
    assert_eq!(s.string().unwrap(), "BF16");
    assert_eq!(s.next_key().unwrap().as_deref(), Some("shape"));
    assert_eq!(s.peek().unwrap(), Kind::Array);
    s.begin_array().unwrap();
    let mut dims = vec![];
    while s.next_element().unwrap() {
        dims.push(s.number().unwrap());
    }
    assert_eq!(dims, ["2", "3"]);
    assert_eq!(s.next_key().unwrap(), None);
    let k = s.next_key().unwrap().unwrap();
    assert!(matches!(k, std::borrow::Cow::Owned(_)));
    assert_eq!(k, "t2");
    s.skip_value().unwrap();
    assert_eq!(s.next_key().unwrap(), None);
    s.finish().unwrap();
    // Type mismatch through the pull API names what was expected.
    let mut s = Scanner::new(b"[\"x\"]").unwrap();
    s.begin_array().unwrap();
    assert!(s.next_element().unwrap());
    let e = s.number().unwrap_err();
    assert_eq!(e.offset, 1);
    assert!(e.expected.contains("number, found string"), "{e}");
}

#[test]
fn writer_escapes_and_round_trips() {
    let nasty = "q\"b\\s/\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}é😀";
    let v = Value::Object(
        Object::new()
            .with("s", nasty)
            .with(
                "n",
                vec![Value::from(0.1), Value::from(1e-20), Value::from(-0.0)],
            )
            .with("big", 1e300)
            .with("nan", f64::NAN)
            .with("inf", f64::INFINITY)
            .with("i", 42u64)
            .with("neg", -7i64)
            .with("nested", Object::new().with("a", Value::Array(vec![]))),
    );
    let text = v.to_json();
    assert!(
        text.contains(r#""q\"b\\s/\b\f\n\r\t\u0001\u001f"#),
        "{text}"
    );
    assert!(text.contains(r#""nan":null"#) && text.contains(r#""inf":null"#));
    let back = json::parse(text.as_bytes()).unwrap();
    assert_eq!(back.get("s").unwrap().as_str(), Some(nasty));
    let n = back.get("n").unwrap().as_array().unwrap();
    assert_eq!(n[0].as_number().unwrap().as_f64(), 0.1);
    assert_eq!(n[1].as_number().unwrap().as_f64(), 1e-20);
    assert!(n[2].as_number().unwrap().as_f64().is_sign_negative());
    assert_eq!(
        back.get("big").unwrap().as_number().unwrap().as_f64(),
        1e300
    );
    assert_eq!(
        back.get("i").unwrap().as_number().unwrap().as_u64(),
        Some(42)
    );
    let pretty = v.to_json_pretty();
    assert_eq!(json::parse(pretty.as_bytes()).unwrap(), back);
    // Shortest round trip: every f64 below survives text and back, bit for bit.
    for x in [
        0.1,
        1.0 / 3.0,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        123456789.0,
        1e21,
        1e-7,
    ] {
        let t = Value::from(x).to_json();
        let y = json::parse(t.as_bytes())
            .unwrap()
            .as_number()
            .unwrap()
            .as_f64();
        assert_eq!(x.to_bits(), y.to_bits(), "{x} -> {t}");
    }
    assert_eq!(Value::from(0.1).to_json(), "0.1");
    assert_eq!(Value::from(4.0).to_json(), "4.0");
}

/// A released-scale safetensors-like header (497,220 tensors, about 40 MB) scans without error
/// through the pull API; the speed is measured in bench/, not asserted here.
#[test]
fn large_header_scans() {
    let mut s = String::from("{");
    for i in 0..497_220u32 {
        s.push_str(&format!(
            "\"language_model.model.layers.{}.block_sparse_moe.experts.{}.w1.weight_packed\":{{\"dtype\":\"U8\",\"shape\":[3072,1792],\"data_offsets\":[{},{}]}},",
            i % 93,
            i,
            u64::from(i) * 10,
            u64::from(i) * 10 + 10
        ));
    }
    s.pop();
    s.push('}');
    let mut sc = Scanner::new(s.as_bytes()).unwrap();
    sc.begin_object().unwrap();
    let mut n = 0;
    while sc.next_key().unwrap().is_some() {
        sc.skip_value().unwrap();
        n += 1;
    }
    sc.finish().unwrap();
    assert_eq!(n, 497_220);
}

/// Every scanner error reads "expected …, found …", or states the problem: a duplicate member
/// name, nesting deeper than the limit, an unescaped control character, a lone low surrogate.
/// Never a bare expectation ("valid UTF-8") or a negated one ("no duplicate …").
#[test]
fn every_error_reads_expected_found_or_names_the_problem() {
    let problems = [
        "duplicate member name \"",
        "nesting deeper than ",
        "unescaped control character U+",
        "lone low surrogate escape \\u",
    ];
    let inputs: &[&[u8]] = &[
        b"",
        b"   ",
        b"{",
        b"{\"a\" 1}",
        b"{\"a\":1,}",
        b"{\"a\":1 \"b\":2}",
        b"[1,]",
        b"[1 2]",
        b"[1,2",
        b"{} x",
        b"tru",
        b"nul",
        b"{1:2}",
        b"-",
        b"1.",
        b"1e",
        b"01",
        b"\"abc",
        b"\"a\\",
        b"\"\\q\"",
        b"\"\\u12\"",
        b"\"\\ud800\"",
        b"\"\\ud800\\u0041\"",
        b"\"\\udc00\"",
        b"\"a\nb\"",
        b"\"ab\xff\"",
        b"\"ab\xe2\x82",
        b"{\"a\":1,\"a\":2}",
        b"[[[[1]]]]",
        b"{\"a\":1}\xc3\xa9",
        b"\xc3\xa9",
    ];
    for input in inputs {
        let e = match json::parse_with_max_depth(input, 3) {
            Ok(v) => panic!("{input:?} parsed as {v:?}"),
            Err(e) => e,
        };
        let m = &e.expected;
        let ok = (m.starts_with("expected ") && m.contains(", found "))
            || problems.iter().any(|p| m.starts_with(p));
        assert!(ok, "{:?}: {m}", String::from_utf8_lossy(input));
        assert!(!m.starts_with("no "), "{m}");
    }
    // The reported cases, with their offsets.
    let e = json::parse(b"{\"a\":1}   \xff\x00").unwrap_err();
    assert_eq!(e.offset, 10);
    assert_eq!(e.expected, "expected UTF-8 text, found byte 0xff");
    let e = json::parse(b"{} \xc3\xa9").unwrap_err();
    assert_eq!(
        e.expected,
        "expected end of input after the top-level value, found '\u{e9}' (U+00E9)"
    );
    let e = json::parse(b"[1,]").unwrap_err();
    assert_eq!(e.expected, "expected an array element after ',', found ']'");
    let e = json::parse(b"\"a\nb\"").unwrap_err();
    assert_eq!(e.offset, 2);
    assert!(
        e.expected.starts_with("unescaped control character U+000A"),
        "{e}"
    );
    let e = json::JsonError::new(5, "expected a digit, found 'x'").into_error("f.json", 8);
    assert_eq!(
        e.message,
        "f.json: invalid JSON at byte 13: expected a digit, found 'x'"
    );
}
