//! The run options of issue 12 end to end on tests/fixtures/tiny-k3 (and tiny-k3-text for
//! text): a sampled run gives the same ids and hashes on every thread count, ISA path, budget
//! and in full recompute; `--batch` lines equal their runs alone at every `--parallel`; `--ctx`,
//! `--stop`, the OS seed, the forced-reply hook, and every refusal of the "Bad input" list.

use crate::support::{fixture, run_k3, scratch_dir};
use serde_json::Value;
use std::path::Path;

const P: &str = "410,335,224,165,463,246,467";

/// Runs k3 with `--out`, asserting success; returns (stdout, stderr, report).
fn ok(args: &[&str], name: &str) -> (String, String, Value) {
    let dir = scratch_dir(&format!("generate-cli-{name}"));
    let out = dir.join("o.json");
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--out", out.to_str().unwrap()]);
    let o = run_k3(&a);
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    assert!(o.status.success(), "k3 {a:?} failed:\n{se}");
    let rep = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (so, se, rep)
}

/// Runs k3 expecting failure; returns (exit code, stderr).
fn fails(args: &[&str]) -> (i32, String) {
    let o = run_k3(args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

/// (generated_ids, logits_hash, per-step hashes) of a report.
fn outcome(rep: &Value) -> (Value, Value, Vec<Value>) {
    let steps = rep["steps"].as_array().unwrap();
    (
        rep["generated_ids"].clone(),
        rep["logits_hash"].clone(),
        steps.iter().map(|s| s["logits_fnv1a64"].clone()).collect(),
    )
}

fn tiny() -> String {
    fixture("tiny-k3").to_str().unwrap().to_string()
}

#[test]
fn sampled_ids_are_identical_on_every_path_budget_and_mode() {
    let m = tiny();
    let base = [
        m.as_str(),
        "--ids",
        P,
        "--gen",
        "10",
        "--temperature",
        "0.9",
        "--top-p",
        "0.95",
        "--top-k",
        "40",
        "--min-p",
        "0.01",
        "--seed",
        "77",
    ];
    let run = |extra: &[&str], name: &str| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        outcome(&ok(&a, name).2)
    };
    let want = run(&["--threads", "1"], "t1");
    assert_eq!(want.0.as_array().unwrap().len(), 10);
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut variants: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--threads", "2"], "t2"),
        (vec!["--threads", "3"], "t3"),
        (vec!["--isa", "scalar"], "scalar"),
        (vec!["--full-recompute"], "full"),
        (vec!["--prefill-chunk", "3"], "chunk3"),
        (vec!["--mem-gb", "0.015"], "mem015"),
        (vec!["--mem-gb", "0.0142"], "smallest"),
    ];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        variants.push((vec!["--isa", "avx2"], "avx2"));
    }
    for (extra, name) in variants {
        assert_eq!(run(&extra, name), want, "{extra:?}");
    }
    // another seed draws other ids (the seed is used)
    let mut a = base.to_vec();
    let last = a.len() - 1;
    a[last] = "78";
    assert_ne!(outcome(&ok(&a, "seed78").2).0, want.0);
}

#[test]
fn the_report_and_stderr_carry_the_seed_from_the_os() {
    let m = tiny();
    let (_, se, rep) = ok(
        &[&m, "--ids", P, "--gen", "3", "--temperature", "1"],
        "osseed",
    );
    let seed = rep["sampling"]["seed"]
        .as_u64()
        .expect("a sampled run reports its seed");
    assert!(se.contains(&format!("seed: {seed}")), "{se}");
    // repeating with that seed gives the same run
    let s = seed.to_string();
    let (_, _, again) = ok(
        &[
            &m,
            "--ids",
            P,
            "--gen",
            "3",
            "--temperature",
            "1",
            "--seed",
            &s,
        ],
        "osseed2",
    );
    assert_eq!(outcome(&again), outcome(&rep));
    // greedy: seed null
    let (_, _, g) = ok(&[&m, "--ids", P, "--gen", "2"], "greedyseed");
    assert!(g["sampling"]["seed"].is_null());
}

#[test]
fn ctx_stops_with_reason_context() {
    let m = tiny();
    let (so, _, rep) = ok(&[&m, "--ids", P, "--gen", "20", "--ctx", "10"], "ctx");
    assert_eq!(rep["stop_reason"], "context");
    assert_eq!(rep["generated_ids"].as_array().unwrap().len(), 3, "{so}");
    // the ids are the first three of the uncapped run
    let (_, _, full) = ok(&[&m, "--ids", P, "--gen", "5"], "ctxfull");
    assert_eq!(
        rep["generated_ids"].as_array().unwrap()[..],
        full["generated_ids"].as_array().unwrap()[..3]
    );
}

#[test]
fn forced_reply_hook_emits_the_ids_and_hashes_the_logits() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-force");
    let out = dir.join("o.json");
    let o = crate::support::k3()
        .args([&m, "--ids", P, "--gen", "5", "--out", out.to_str().unwrap()])
        .env("K3_TEST_FORCE_IDS", "7,8,9")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ids: Vec<u64> = rep["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(&ids[..3], &[7, 8, 9]);
    assert_eq!(ids.len(), 5);
    assert_eq!(rep["logits_hashed_vectors"].as_u64().unwrap(), 5);
    // the model ran on the forced ids: the unforced run of prompt + 7,8,9 continues the same
    let (_, _, plain) = ok(
        &[&m, "--ids", &format!("{P},7,8,9"), "--gen", "2"],
        "forcecmp",
    );
    assert_eq!(
        plain["generated_ids"].as_array().unwrap()[..],
        rep["generated_ids"].as_array().unwrap()[3..]
    );
    let (code, err) = {
        let o = crate::support::k3()
            .args([&m, "--ids", P, "--gen", "2"])
            .env("K3_TEST_FORCE_IDS", "1,99999")
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("K3_TEST_FORCE_IDS") && err.contains("99999"),
        "{err}"
    );
}

#[test]
fn stop_text_is_not_printed_and_names_the_reason() {
    let m = fixture("tiny-k3-text");
    let m = m.to_str().unwrap();
    let (so, _, full) = ok(&[m, "--prompt", "Hello", "--gen", "12"], "stoptext-full");
    let text = full["generated_text"].as_str().unwrap().to_string();
    assert_eq!(so.trim_end_matches('\n'), text);
    // stop at a piece of the middle of the text
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 4, "{text:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let at = text.find(&stop).unwrap();
    let (so2, _, rep) = ok(
        &[m, "--prompt", "Hello", "--gen", "12", "--stop", &stop],
        "stoptext",
    );
    assert_eq!(rep["stop_reason"], "stop_text");
    assert_eq!(
        so2.trim_end_matches('\n'),
        &text[..at],
        "printed text stops before {stop:?}"
    );
    let n = rep["generated_ids"].as_array().unwrap().len();
    assert!(n <= 12);
    assert_eq!(
        rep["generated_ids"].as_array().unwrap()[..],
        full["generated_ids"].as_array().unwrap()[..n]
    );
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn batch_lines_equal_their_runs_alone_at_every_parallel() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-batch");
    let lines = [
        (
            vec!["--ids", "410,335,224,165", "--gen", "5"],
            r#"{"ids": [410,335,224,165], "gen": 5}"#,
        ),
        (
            vec![
                "--ids",
                "1,2,3",
                "--gen",
                "7",
                "--temperature",
                "0.8",
                "--seed",
                "3",
            ],
            r#"{"ids": [1,2,3], "gen": 7, "temperature": 0.8, "seed": 3}"#,
        ),
        (
            vec![
                "--ids",
                "9,9,9,9,9,9,9",
                "--gen",
                "3",
                "--temperature",
                "1.2",
                "--seed",
                "99",
                "--top-k",
                "20",
            ],
            r#"{"ids": [9,9,9,9,9,9,9], "gen": 3, "temperature": 1.2, "seed": 99, "top_k": 20}"#,
        ),
        (
            vec![
                "--ids",
                "44",
                "--gen",
                "9",
                "--temperature",
                "0.5",
                "--seed",
                "1",
                "--top-p",
                "0.7",
            ],
            r#"{"ids": [44], "gen": 9, "temperature": 0.5, "seed": 1, "top_p": 0.7}"#,
        ),
    ];
    let mut want = Vec::new();
    for (i, (args, _)) in lines.iter().enumerate() {
        let mut a = vec![m.as_str()];
        a.extend_from_slice(args);
        let r = ok(&a, &format!("batch-alone{i}")).2;
        want.push((
            r["generated_ids"].clone(),
            r["logits_hash"].clone(),
            r["stop_reason"].clone(),
        ));
    }
    let mut text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    text.push_str("{\"ids\": [5], \"bogus\": 1}\n");
    let file = write(&dir, "in.jsonl", &text);
    for par in ["1", "2", "3", "8"] {
        let o = run_k3([m.as_str(), "--batch", &file, "--parallel", par, "--quiet"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "--parallel {par}: a bad line is exit 2: {err}"
        );
        let out: Vec<Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(out.len(), 5, "--parallel {par}");
        for (i, w) in want.iter().enumerate() {
            assert_eq!(out[i]["index"], i as u64);
            let got = (
                out[i]["generated_ids"].clone(),
                out[i]["logits_hash"].clone(),
                out[i]["stop_reason"].clone(),
            );
            assert_eq!(&got, w, "--parallel {par}, line {i}");
        }
        assert_eq!(out[4]["index"], 4);
        let e = out[4]["error"].as_str().unwrap();
        assert!(e.contains("line 5") && e.contains("bogus"), "{e}");
    }
}

#[test]
fn bad_input_is_refused_naming_the_flag() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-bad");
    let b = write(&dir, "b.jsonl", "{\"ids\": [1]}\n");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--temperature", "-1"], "--temperature"),
        (vec!["--temperature", "inf"], "--temperature"),
        (vec!["--top-p", "0"], "--top-p"),
        (vec!["--top-p", "1.5"], "--top-p"),
        (vec!["--min-p", "1"], "--min-p"),
        (vec!["--min-p", "-0.1"], "--min-p"),
        (vec!["--top-k", "-1"], "--top-k"),
        (vec!["--seed", "x"], "--seed"),
        (vec!["--stop", ""], "--stop"),
        (vec!["--stop-id", "512"], "--stop-id"),
        (vec!["--ctx", "3"], "--ctx"),
        (vec!["--ctx", "0"], "--ctx"),
        (vec!["--ctx", "1048577"], "--ctx"),
        (vec!["--parallel", "2"], "--parallel"),
        (vec!["--batch", &b], "--batch"),
    ];
    for (extra, flag) in cases {
        let mut a = vec![m.as_str(), "--ids", P, "--gen", "2"];
        a.extend_from_slice(&extra);
        let (code, err) = fails(&a);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?}: {err}");
    }
    // --stop needs a tokenizer to see the text (tiny-k3 has none)
    let (code, err) = fails(&[&m, "--ids", P, "--stop", "ab"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--stop") && err.contains("tokenizer"), "{err}");
    // --parallel 0, and 2^64-1 (it panicked in the plan's arithmetic)
    for n in ["0", "18446744073709551615"] {
        let (code, err) = fails(&[&m, "--batch", &b, "--parallel", n]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("flag `--parallel {n}`: expected 1 to 4096")),
            "{err}"
        );
    }
}

#[test]
fn a_parallel_that_does_not_fit_names_the_largest_that_does() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-par");
    let line = "{\"ids\": [1,2,3], \"gen\": 2}\n";
    let b = write(&dir, "b.jsonl", &line.repeat(4));
    let (code, err) = fails(&[
        &m,
        "--batch",
        &b,
        "--parallel",
        "4096",
        "--ctx",
        "4000",
        "--mem-gb",
        "0.05",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("--parallel 4096") && err.contains("largest --parallel that fits is"),
        "{err}"
    );
}

/// (generated ids, per-step logits hashes, logits hash) of a report.
fn ids_steps_hash(rep: &Value) -> (Vec<Value>, Vec<Value>, Value) {
    let (ids, hash, steps) = outcome(rep);
    (ids.as_array().unwrap().clone(), steps, hash)
}

#[test]
fn save_after_n_then_load_and_m_equals_n_plus_m() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-state");
    let st = dir.join("s.k3");
    let st = st.to_str().unwrap();
    for (name, sampling) in [
        ("greedy", vec![]),
        (
            "sampled",
            vec!["--temperature", "0.9", "--top-k", "30", "--seed", "5"],
        ),
    ] {
        let run = |extra: &[&str], n: &str| {
            let mut a = vec![m.as_str()];
            a.extend_from_slice(extra);
            a.extend_from_slice(&sampling);
            ids_steps_hash(&ok(&a, &format!("state-{name}-{n}")).2)
        };
        let full = run(&["--ids", P, "--gen", "11"], "full");
        let first = run(&["--ids", P, "--gen", "4", "--save-state", st], "first");
        let (rest_ids, rest_steps, rest_hash) = run(&["--load-state", st, "--gen", "7"], "rest");
        assert_eq!([first.0.clone(), rest_ids].concat(), full.0, "{name}: ids");
        assert_eq!(rest_steps[..], full.1[4..], "{name}: per-step hashes");
        assert_eq!(rest_hash, full.2, "{name}: the logits hash continues");
        // appending new input after the state equals the uninterrupted run over all the ids
        let first_ids: Vec<String> = first.0.iter().map(|v| v.to_string()).collect();
        let extra = "17,18";
        let cont = run(
            &["--load-state", st, "--ids", extra, "--gen", "3"],
            "append",
        );
        let all = format!("{P},{},{extra}", first_ids.join(","));
        let (_, _, whole) = ok(
            &{
                let mut a = vec![m.as_str(), "--ids", &all, "--gen", "3"];
                a.extend_from_slice(&sampling);
                a
            },
            &format!("state-{name}-whole"),
        );
        assert_eq!(
            cont.0,
            whole["generated_ids"].as_array().unwrap().clone(),
            "{name}: appended input"
        );
    }
}

#[test]
fn bad_state_files_and_combinations_are_refused() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-badstate");
    let st = dir.join("s.k3");
    let sts = st.to_str().unwrap();
    ok(
        &[&m, "--ids", P, "--gen", "3", "--save-state", sts],
        "badstate-save",
    );
    let bytes = std::fs::read(&st).unwrap();
    let b = write(&dir, "b.jsonl", "{\"ids\": [1]}\n");
    for (extra, want) in [
        (vec!["--full-recompute"], "--full-recompute"),
        (vec!["--batch", b.as_str()], "--batch"),
    ] {
        let mut a = vec![m.as_str(), "--load-state", sts, "--gen", "2"];
        a.extend_from_slice(&extra);
        let (code, err) = fails(&a);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--load-state") && err.contains(want), "{err}");
    }
    let (code, err) = fails(&[&m, "--ids", P, "--gen", "0", "--save-state", sts]);
    assert_eq!(code, 2, "{err}");
    // truncated, flipped checksum byte
    let cut = dir.join("cut.k3");
    std::fs::write(&cut, &bytes[..bytes.len() - 9]).unwrap();
    let flip = dir.join("flip.k3");
    let mut f = bytes.clone();
    let mid = f.len() / 2;
    f[mid] ^= 1;
    std::fs::write(&flip, &f).unwrap();
    // and a directory (it opens, then failed at the first read: exit 4)
    for p in [&cut, &flip, &dir] {
        let (code, err) = fails(&[&m, "--load-state", p.to_str().unwrap(), "--gen", "2"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(p.to_str().unwrap()), "{err}");
    }
    // a config that differs in one field: the first differing key=value is named
    let other = crate::support::copy_dir(&fixture("tiny-k3"), "generate-cli-otherconfig");
    let cfgp = other.join("config.json");
    let text = std::fs::read_to_string(&cfgp).unwrap();
    let changed = text.replacen(
        "\"routed_scaling_factor\": 1.0",
        "\"routed_scaling_factor\": 1.5",
        1,
    );
    assert_ne!(text, changed, "the fixture's routed_scaling_factor moved");
    std::fs::write(&cfgp, changed).unwrap();
    let (code, err) = fails(&[other.to_str().unwrap(), "--load-state", sts, "--gen", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("routed_scaling_factor="), "{err}");
}

/// Counts that come from a flag or a batch line and are added to a prompt's length: the sum
/// saturated and was reported as "18446744073709551615 positions"; now a sum past the
/// counter or past `max_position_embeddings` (1048576 in tiny-k3) is refused naming `--gen`
/// or the line's `gen` and the range it may take.
#[test]
fn gen_sums_are_refused_naming_gen_and_its_range() {
    let m = tiny();
    let dir = scratch_dir("generate-cli-gen-sums");
    let st = dir.join("s.k3");
    let sts = st.to_str().unwrap();
    ok(
        &[&m, "--ids", P, "--gen", "3", "--save-state", sts],
        "gen-sums-save",
    );
    // 7 prompt ids + 3 generated: 10 held, the pending one among them
    let (code, err) = fails(&[&m, "--load-state", sts, "--gen", "18446744073709551615"]);
    assert_eq!(code, 2, "{err}");
    // (refused before the state is read, against max_position_embeddings alone)
    assert!(
        err.contains("--gen 18446744073709551615") && err.contains("give --gen from 0 to 1048576"),
        "{err}"
    );
    let (code, err) = fails(&[&m, "--load-state", sts, "--gen", "1048567"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("flag `--gen 1048567`")
            && err.contains("max_position_embeddings 1048576; give --gen from 0 to 1048566"),
        "{err}"
    );
    let b = write(
        &dir,
        "b.jsonl",
        "{\"ids\": [1, 2, 3], \"gen\": 18446744073709551615}\n\
         {\"ids\": [1, 2, 3], \"gen\": 1048574}\n",
    );
    let o = run_k3([m.as_str(), "--batch", &b, "--quiet"]);
    assert_eq!(o.status.code(), Some(2));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    for (l, most) in lines.iter().zip(["18446744073709551612", "1048573"]) {
        let e = l["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("key `gen`") && e.contains(&format!("give gen from 0 to {most}")),
            "{out}"
        );
    }
}

/// A batch's summary counts every sequence's ids (it said "0 generated tokens", "0.00
/// tokens/s" and a zero logits hash), as do `--out`'s `seconds_per_token` and bytes per
/// token; `--dump-logits` (one sequence's logits) with `--batch` is refused, not ignored, and
/// so is a batch file without an input line.
#[test]
fn a_batch_summary_counts_every_sequence_and_refuses_dump_logits() {
    let m = fixture("tiny-k3");
    let dir = scratch_dir("batch-summary");
    let file = dir.join("b.jsonl");
    std::fs::write(
        &file,
        "{\"ids\":[1,2,3],\"gen\":4}\n{\"ids\":[5,6],\"gen\":3}\n",
    )
    .unwrap();
    let (m, f) = (m.to_str().unwrap(), file.to_str().unwrap());
    let (_, err, rep) = ok(&[m, "--batch", f, "--parallel", "2"], "batch-summary");
    assert!(
        err.contains("summary: batch of 2 sequences (--parallel 2), 7 generated tokens in"),
        "{err}"
    );
    assert!(err.contains("logits hash: one per sequence"), "{err}");
    assert!(!err.contains("0000000000000000"), "{err}");
    assert!(
        rep["timing"]["seconds_per_token"].as_f64().unwrap() > 0.0,
        "{rep}"
    );
    let dump = dir.join("x.f32");
    let (code, err) = fails(&[m, "--batch", f, "--dump-logits", dump.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`--dump-logits` and `--batch`"), "{err}");
    assert!(!dump.exists());
    // a file without an input line is refused (it printed nothing and succeeded)
    for (name, text) in [("empty", ""), ("blank", "\n  \n")] {
        let e = dir.join(format!("{name}.jsonl"));
        std::fs::write(&e, text).unwrap();
        let (code, err) = fails(&[m, "--batch", e.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains("no input lines"), "{name}: {err}");
    }
}
