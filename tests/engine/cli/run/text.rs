//! The run command with text in and text out (ENGINE.md §3, TOKENIZER.md): `--prompt`,
//! `--prompt-file` (bytes verbatim) and `--tok` on tests/fixtures/tiny-k3-text reproduce the
//! fixture's prompt ids, greedy ids and text.

use crate::support;
use serde_json::Value;
use support::{fixture, run_k3, scratch_dir};

fn expected() -> Value {
    serde_json::from_slice(&std::fs::read(fixture("tiny-k3-text").join("expected.json")).unwrap())
        .unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn check(args: &[&str], tag: &str) {
    let e = expected();
    let out = scratch_dir(&format!("run_text_{tag}")).join("r.json");
    let mut a = args.to_vec();
    a.extend_from_slice(&["--gen", "16", "--out", out.to_str().unwrap()]);
    let o = run_k3(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // standard output: the generated text, streamed, then a newline
    let mut want = unhex(e["generated_bytes_hex"].as_str().unwrap());
    want.push(b'\n');
    assert_eq!(o.stdout, want);
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["prompt_ids"], e["prompt_ids"]);
    assert_eq!(j["generated_ids"], e["greedy_ids"]);
    assert_eq!(j["generated_text"], e["generated_text_lossy"]);
}

#[test]
fn prompt_text_gives_the_fixture_ids_and_text() {
    let m = fixture("tiny-k3-text");
    check(
        &[m.to_str().unwrap(), "--prompt", "The capital of France is"],
        "prompt",
    );
}

#[test]
fn prompt_file_and_explicit_tok() {
    let m = fixture("tiny-k3-text");
    let dir = scratch_dir("run_text_prompt_file_input");
    let p = dir.join("prompt.txt");
    std::fs::write(&p, b"The capital of France is").unwrap();
    check(
        &[
            m.to_str().unwrap(),
            "--prompt-file",
            p.to_str().unwrap(),
            "--tok",
            m.to_str().unwrap(),
        ],
        "file",
    );
    // ids with a tokenizer present: text out as well
    check(
        &[m.to_str().unwrap(), "--ids", "1008,10484,318,15383,387"],
        "ids",
    );
}

#[test]
fn text_prompt_without_a_tokenizer_is_refused() {
    let o = run_k3([
        fixture("tiny-k3").to_str().unwrap(),
        "--prompt",
        "hello",
        "--gen",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--prompt") && err.contains("--tok"), "{err}");
    let o = run_k3([
        fixture("tiny-k3").to_str().unwrap(),
        "--ids",
        "1",
        "--prompt",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2));
}
