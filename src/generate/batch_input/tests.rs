//! Batch lines: every key, every refusal with line number and key, and the output lines.

use super::*;

fn d() -> BatchDefaults {
    BatchDefaults {
        vocab_size: Some(100),
        ..BatchDefaults::default()
    }
}

fn ok(line: &str) -> BatchRequest {
    parse_line(line.as_bytes(), 1, "b.jsonl", &d())
        .unwrap()
        .unwrap()
}

fn bad(line: &str) -> String {
    let e = parse_line(line.as_bytes(), 7, "b.jsonl", &d()).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.starts_with("b.jsonl: line 7: "), "{}", e.message);
    e.message
}

#[test]
fn every_key() {
    let r = ok(
        r#"{"prompt": "hi", "gen": 4, "temperature": 0.7, "top_k": 40, "top_p": 0.9,
                  "min_p": 0.05, "seed": -1, "stop": ["\n\n", "END"]}"#,
    );
    assert_eq!(r.input, BatchInput::Prompt("hi".into()));
    assert_eq!(r.gen, 4);
    assert_eq!(
        r.sampler,
        SamplerSettings {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            seed: u64::MAX
        }
    );
    assert!(r.seed_given);
    assert_eq!(r.stop, ["\n\n", "END"]);
    let r = ok(r#"{"ids": [1, 2, 99], "stop": "x", "seed": 18446744073709551615}"#);
    assert_eq!(r.input, BatchInput::Ids(vec![1, 2, 99]));
    assert_eq!(r.stop, ["x"]);
    assert_eq!(r.sampler.seed, u64::MAX);
    assert_eq!(
        ok(r#"{"ids":[0],"top_k":1e0}"#.replace("1e0", "100000000000000000000").as_str())
            .sampler
            .top_k,
        u64::MAX
    );
}

#[test]
fn defaults_apply_and_line_keys_override() {
    let mut dd = d();
    dd.gen = 9;
    dd.sampler.temperature = 1.0;
    dd.sampler.seed = 5;
    dd.seed_given = true;
    dd.stop = vec!["S".into()];
    let r = parse_line(br#"{"ids":[3]}"#, 1, "b", &dd).unwrap().unwrap();
    assert_eq!(
        (r.gen, r.sampler.temperature, r.sampler.seed, r.seed_given),
        (9, 1.0, 5, true)
    );
    assert_eq!(r.stop, ["S"]);
    let r = parse_line(br#"{"ids":[3],"gen":0,"stop":[]}"#, 1, "b", &dd)
        .unwrap()
        .unwrap();
    assert_eq!(r.gen, 0);
    assert!(r.stop.is_empty());
    let r = ok(r#"{"ids":[3]}"#);
    assert!(
        !r.seed_given,
        "no --seed and no seed key: the caller draws one"
    );
}

#[test]
fn blank_lines_are_not_inputs() {
    assert_eq!(parse_line(b"", 1, "b", &d()).unwrap(), None);
    assert_eq!(parse_line(b"  \t\r", 1, "b", &d()).unwrap(), None);
    assert!(parse_line(b"{\"ids\":[1]}\r", 1, "b", &d())
        .unwrap()
        .is_some());
}

#[test]
fn refusals_name_line_and_key() {
    let cases = [
        (r#"{"ids":[1],"temp":1}"#, "unknown key `temp`"),
        (r#"{"ids":[1],"#, "invalid JSON at byte"),
        (r#"[1]"#, "expected a JSON object, found an array"),
        (r#"{"gen":1}"#, "no `prompt` or `ids`"),
        (r#"{"prompt":"a","ids":[1]}"#, "both `prompt` and `ids`"),
        (r#"{"prompt":""}"#, "key `prompt`: empty"),
        (
            r#"{"prompt":5}"#,
            "key `prompt`: expected a string, found 5",
        ),
        (r#"{"ids":[]}"#, "key `ids`: empty"),
        (r#"{"ids":"1,2"}"#, "key `ids`: expected an array"),
        (
            r#"{"ids":[1,100]}"#,
            "key `ids`: element 1: expected an id in 0..100, found 100",
        ),
        (r#"{"ids":[-1]}"#, "key `ids`: element 0"),
        (r#"{"ids":[1.5]}"#, "key `ids`: element 0"),
        (
            r#"{"ids":[1],"gen":-1}"#,
            "key `gen`: expected an integer from 0 to 18446744073709551615, found -1",
        ),
        (
            r#"{"ids":[1],"gen":"4"}"#,
            "key `gen`: expected an integer from 0 to 18446744073709551615, found \"4\"",
        ),
        (
            r#"{"ids":[1],"temperature":-0.5}"#,
            "key `temperature`: expected a finite number ≥ 0",
        ),
        (r#"{"ids":[1],"temperature":1e400}"#, "key `temperature`"),
        (r#"{"ids":[1],"temperature":"hot"}"#, "key `temperature`"),
        (
            r#"{"ids":[1],"top_p":0}"#,
            "key `top_p`: expected a number in (0, 1]",
        ),
        (r#"{"ids":[1],"top_p":1.5}"#, "key `top_p`"),
        (
            r#"{"ids":[1],"min_p":1}"#,
            "key `min_p`: expected a number in [0, 1)",
        ),
        (r#"{"ids":[1],"min_p":-0.1}"#, "key `min_p`"),
        (
            r#"{"ids":[1],"top_k":-1}"#,
            "key `top_k`: expected an integer ≥ 0",
        ),
        (r#"{"ids":[1],"top_k":2.5}"#, "key `top_k`"),
        (
            r#"{"ids":[1],"seed":1.0}"#,
            "key `seed`: expected an integer in [-9223372036854775808, 18446744073709551615], found 1.0",
        ),
        (
            r#"{"ids":[1],"seed":18446744073709551616}"#,
            "key `seed`: expected an integer in",
        ),
        (r#"{"ids":[1],"seed":-9223372036854775809}"#, "key `seed`"),
        (
            r#"{"ids":[1],"stop":""}"#,
            "key `stop`: a stop string must not be empty",
        ),
        (
            r#"{"ids":[1],"stop":["a",3]}"#,
            "key `stop`: expected a string, found 3",
        ),
        (
            r#"{"ids":[1],"stop":{}}"#,
            "key `stop`: expected a string or an array",
        ),
        (r#"{"ids":[1],"ids":[2]}"#, "duplicate"),
    ];
    for (line, want) in cases {
        let m = bad(line);
        assert!(m.contains(want), "{line}: {m}");
    }
    let mut no_tok = d();
    no_tok.has_tokenizer = false;
    let e = parse_line(br#"{"prompt":"a"}"#, 2, "b", &no_tok).unwrap_err();
    assert!(
        e.message
            .contains("key `prompt`: the model has no tokenizer"),
        "{}",
        e.message
    );
}

#[test]
fn a_bad_line_does_not_stop_the_others() {
    let file = b"{\"ids\":[1]}\n\n{\"ids\":[2],\"bogus\":1}\r\n{\"prompt\":\"x\"}";
    let lines = parse_file(file, "b.jsonl", &d());
    assert_eq!(lines.len(), 3);
    assert_eq!((lines[0].index, lines[0].line), (0, 1));
    assert!(lines[0].request.is_ok());
    assert_eq!((lines[1].index, lines[1].line), (1, 3));
    let e = lines[1].request.as_ref().unwrap_err();
    assert!(
        e.message
            .starts_with("b.jsonl: line 3: unknown key `bogus`"),
        "{}",
        e.message
    );
    assert_eq!((lines[2].index, lines[2].line), (2, 4));
    assert_eq!(
        lines[2].request.as_ref().unwrap().input,
        BatchInput::Prompt("x".into())
    );
    assert!(parse_file(b"", "b", &d()).is_empty());
    assert_eq!(parse_file(b"\n\n{\"ids\":[1]}\n", "b", &d())[0].line, 3);
}

#[test]
fn output_lines() {
    let r = BatchResult {
        index: 2,
        generated_ids: vec![5, 6],
        generated_text: Some("a\"b\n".into()),
        stop_reason: StopReason::StopText,
        seed: u64::MAX,
        logits_hash: 0xab,
    };
    assert_eq!(
        result_line(&r),
        r#"{"index":2,"generated_ids":[5,6],"generated_text":"a\"b\n","stop_reason":"stop_text","seed":18446744073709551615,"logits_hash":"00000000000000ab"}"#
    );
    let r = BatchResult {
        generated_text: None,
        ..r
    };
    assert!(!result_line(&r).contains("generated_text"));
    let line = error_line(3, &Error::invalid("b.jsonl: line 4: unknown key `x`"));
    assert_eq!(
        line,
        r#"{"index":3,"error":"b.jsonl: line 4: unknown key `x`"}"#
    );
    // Each output line is one JSON value that parses back.
    assert!(json::parse(result_line(&r).as_bytes()).is_ok());
}
