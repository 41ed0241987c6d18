//! Parity with the reference tokenizer on tests/fixtures/tokenizer/cases.json (81 ordinary +
//! 12 allowed-special cases, real Kimi vocabulary; TOKENIZER.md §12), the §12 reference
//! vectors, and byte-exact decode of every case.

use base64::Engine as _;
use k3::tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::OnceLock;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::load(&fixtures().join("tiny-k3-text")).expect("load tokenizer"))
}

fn cases() -> serde_json::Value {
    let text = std::fs::read(fixtures().join("tokenizer/cases.json")).unwrap();
    serde_json::from_slice(&text).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn text_of(case: &serde_json::Value) -> String {
    let b = base64::engine::general_purpose::STANDARD
        .decode(case["text_b64"].as_str().unwrap())
        .unwrap();
    let t = String::from_utf8(b).unwrap();
    if let Some(plain) = case.get("text").and_then(|t| t.as_str()) {
        assert_eq!(plain, t);
    }
    t
}

#[test]
fn ordinary_cases_match_exactly() {
    let c = cases();
    let list = c["cases"].as_array().unwrap();
    assert_eq!(list.len(), 81);
    let mut failed = Vec::new();
    for case in list {
        let name = case["name"].as_str().unwrap();
        let text = text_of(case);
        let want = ids(&case["ids"]);
        let got = tok().encode(&text, false);
        if got != want {
            failed.push(format!("{name}: got {got:?}\n  want {want:?}"));
        }
        // Decoding the reference ids reproduces the text bytes exactly.
        assert_eq!(tok().decode(&want).unwrap(), text.as_bytes(), "{name}");
        // Ordinary mode and allowed-special mode agree when no special name occurs.
        if !text.contains("<|") && !text.contains('[') && !text.contains("<osagent") {
            assert_eq!(tok().encode(&text, true), want, "{name} (allow_special)");
        }
    }
    assert!(
        failed.is_empty(),
        "{} cases differ:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn with_special_cases_match_exactly() {
    let c = cases();
    let list = c["with_special"].as_array().unwrap();
    assert_eq!(list.len(), 12);
    for case in list {
        let name = case["name"].as_str().unwrap();
        let text = text_of(case);
        assert_eq!(tok().encode(&text, true), ids(&case["ids"]), "{name}");
        assert_eq!(
            tok().encode(&text, false),
            ids(&case["ids_ordinary"]),
            "{name} ordinary"
        );
        assert_eq!(
            tok().decode(&ids(&case["ids"])).unwrap(),
            text.as_bytes(),
            "{name}"
        );
    }
}

#[test]
fn special_names_of_the_fixture_header() {
    let c = cases();
    for (id, name) in c["special_tokens"].as_object().unwrap() {
        let id: u32 = id.parse().unwrap();
        assert_eq!(tok().special().name(id), Some(name.as_str().unwrap()));
        assert_eq!(tok().special_id(name.as_str().unwrap()), Some(id));
    }
}

#[test]
fn reference_vectors_of_section_12() {
    let v: &[(&str, &[u32])] = &[
        ("Hello world", &[19180, 2695]),
        ("Hello, world!", &[19180, 11, 2695, 0]),
        ("你好世界", &[33845, 2243]),
        ("1234567890", &[6694, 12972, 16242, 15]),
        ("中文English混合", &[16717, 44372, 13935]),
        ("The capital of France is", &[1008, 10484, 318, 15383, 387]),
    ];
    for (text, want) in v {
        assert_eq!(&tok().encode(text, false), want, "{text:?}");
        assert_eq!(&tok().encode(text, true), want, "{text:?}");
    }
    assert!(tok().encode("", false).is_empty());
    assert!(tok().encode("", true).is_empty());
}

#[test]
fn tiny_k3_text_prompt_ids() {
    let text = std::fs::read(fixtures().join("tiny-k3-text/expected.json")).unwrap();
    let e: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let prompt = e["prompt_text"].as_str().unwrap();
    assert_eq!(tok().encode(prompt, false), ids(&e["prompt_ids"]));
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The text side of the tiny-k3-text end-to-end fixture: the recorded greedy ids decode to the
/// recorded bytes and text, per token and streamed (the run command prints the same).
#[test]
fn tiny_k3_text_generated_text() {
    let text = std::fs::read(fixtures().join("tiny-k3-text/expected.json")).unwrap();
    let e: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let greedy = ids(&e["greedy_ids"]);
    let t = tok();
    assert_eq!(
        t.decode(&greedy).unwrap(),
        unhex(e["generated_bytes_hex"].as_str().unwrap())
    );
    for (id, hex) in greedy
        .iter()
        .zip(e["generated_token_bytes_hex"].as_array().unwrap())
    {
        assert_eq!(t.token_bytes(*id).unwrap(), unhex(hex.as_str().unwrap()));
    }
    let lossy = e["generated_text_lossy"].as_str().unwrap();
    assert_eq!(t.decode_lossy(&greedy).unwrap(), lossy);
    let mut out = Vec::new();
    let mut p = k3::cli::tokenize::TextPrinter::new(t, &mut out);
    for &id in &greedy {
        p.push(id).unwrap();
    }
    p.finish().unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), lossy);
    let full = ids(&e["full_ids"]);
    assert_eq!(
        t.decode(&full).unwrap(),
        unhex(e["full_bytes_hex"].as_str().unwrap())
    );
}
