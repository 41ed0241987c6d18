//! Exact speculative decoding (issue 15, ENGINE.md §10) end to end on every model fixture:
//! `--spec 1..8` (a subset under an emulator) gives the ids, the logits hash and every per-step hash of decoding without
//! it, greedy and sampled, incremental and after `--load-state`, alone and in a batch, with
//! every stop rule firing inside an accepted draft; drafts are accepted on a prompt that
//! repeats (the forced-reply hook makes the continuation repeat it: the tiny models never
//! repeat by themselves), and a rejected row leaves no trace (the state saved after a
//! rejection is the bytes of one saved without speculation, and continues the same).

use crate::support::{fixture, k3, scratch_dir};
use serde_json::Value;
use std::path::PathBuf;

/// tiny-k3's prompt (12 ids of expected.json).
const P: &str = "410,335,224,165,463,246,467,2,368,223,302,236";
/// tiny-k3-text: "the cat sat on the mat." twice, as ids.
const P_TEXT: &str = "2108,10975,6200,418,276,3271,13,276,10975,6200,418,276,3271,13";

const SAMPLED: &[&str] = &["--temperature", "0.9", "--top-p", "0.95", "--top-k", "40"];

/// True under an emulator (the NEON gate's qemu, `K3_TEST_RUNNER`), where one k3 run costs
/// some fifty native ones: the identity checks then take a subset of their settings and draft
/// lengths. What speculation must not change is decided above the kernels (the same for every
/// ISA), so the full sweep runs natively on every path; the emulated subset runs the NEON
/// kernels through speculation's sweeps of 1, several and the most draft rows.
fn emulated() -> bool {
    crate::support::stream::emulated()
}

/// The sampler settings of every identity check: greedy, and sampled with three seeds (one
/// under an emulator).
fn settings() -> Vec<Vec<String>> {
    let mut v = vec![Vec::new()];
    let seeds: &[&str] = if emulated() {
        &["7"]
    } else {
        &["1", "7", "1234567"]
    };
    for seed in seeds {
        let mut s: Vec<String> = SAMPLED.iter().map(|x| x.to_string()).collect();
        s.extend(["--seed".to_string(), seed.to_string()]);
        v.push(s);
    }
    v
}

/// Runs k3 with `--out` (and `K3_TEST_FORCE_IDS=force` when given), asserting success;
/// returns (stdout, report).
fn run(args: &[&str], force: Option<&str>, name: &str) -> (String, Value) {
    let dir = scratch_dir(&format!("spec-{name}"));
    let out = dir.join("o.json");
    let mut cmd = k3();
    cmd.args(args).args(["--out", out.to_str().unwrap()]);
    match force {
        Some(f) => cmd.env("K3_TEST_FORCE_IDS", f),
        None => cmd.env_remove("K3_TEST_FORCE_IDS"),
    };
    let o = cmd.output().unwrap();
    let se = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "k3 {args:?} failed:\n{se}");
    let rep = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (String::from_utf8_lossy(&o.stdout).to_string(), rep)
}

/// What must not change under speculation: generated ids, stop reason, logits hash and
/// vectors hashed, and every step's own hash.
fn outcome(rep: &Value) -> Value {
    let steps: Vec<Value> = rep["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["logits_fnv1a64"].clone())
        .collect();
    serde_json::json!([
        rep["generated_ids"],
        rep["stop_reason"],
        rep["logits_hash"],
        rep["logits_hashed_vectors"],
        steps
    ])
}

fn model(name: &str) -> String {
    fixture(name).to_str().unwrap().to_string()
}

/// The draft lengths of every identity check: 1..=8; under an emulator 1, 3 and 8.
fn draft_lengths() -> Vec<usize> {
    if emulated() {
        vec![1, 3, 8]
    } else {
        (1..=8).collect()
    }
}

/// Every `--spec K` of [`draft_lengths`] gives `args`' outcome without speculation; returns
/// the reports.
fn same_for_every_k(args: &[&str], force: Option<&str>, name: &str) -> Vec<Value> {
    let (_, plain) = run(args, force, &format!("{name}-k0"));
    assert!(plain["speculation"].is_null());
    let want = outcome(&plain);
    draft_lengths()
        .into_iter()
        .map(|k| {
            let ks = k.to_string();
            let mut a = args.to_vec();
            a.extend(["--spec", &ks]);
            let (_, rep) = run(&a, force, &format!("{name}-k{k}"));
            assert_eq!(outcome(&rep), want, "--spec {k}: {args:?} force {force:?}");
            assert_eq!(rep["speculation"]["max_draft"], k);
            rep
        })
        .collect()
}

fn accepted(reps: &[Value]) -> u64 {
    reps.iter()
        .map(|r| r["speculation"]["accepted"].as_u64().unwrap())
        .sum()
}

#[test]
fn every_k_gives_the_ids_and_hashes_of_plain_decoding() {
    for (m, p) in [(model("tiny-k3"), P), (model("tiny-k3-text"), P_TEXT)] {
        for (si, s) in settings().iter().enumerate() {
            let mut a = vec![m.as_str(), "--ids", p, "--gen", "30"];
            a.extend(s.iter().map(|x| x.as_str()));
            // the model's own continuation (drafts rarely match)
            same_for_every_k(&a, None, &format!("own-{si}"));
            // a continuation that repeats the prompt, then the model's own: drafts are
            // accepted, then rejected where the repetition ends
            let force = format!("{p},{p}");
            let reps = same_for_every_k(&a, Some(&force), &format!("rep-{si}"));
            assert!(
                accepted(&reps) > 0,
                "no draft accepted on a repeating reply"
            );
            for r in &reps {
                let sp = &r["speculation"];
                assert!(sp["drafted"].as_u64() >= sp["accepted"].as_u64());
                let n = r["generated_ids"].as_array().unwrap().len() as f64;
                let sweeps = sp["sweeps"].as_f64().unwrap();
                assert_eq!(sp["ids_per_sweep"].as_f64().unwrap(), n / sweeps);
            }
        }
    }
}

#[test]
fn a_repeating_prompt_shows_accepted_drafts_and_shared_sweeps() {
    let m = model("tiny-k3-text");
    let force = format!("{P_TEXT},{P_TEXT}");
    let a = [m.as_str(), "--ids", P_TEXT, "--gen", "28", "--spec", "4"];
    let (_, rep) = run(&a, Some(&force), "accepted");
    let sp = &rep["speculation"];
    assert!(sp["accepted"].as_u64().unwrap() >= 14, "{sp}");
    // the plan counts the sweep's rows and the KDA copy (natively: under an emulator the
    // peak RSS is the emulator's)
    let rss = rep["memory"]["peak_rss_bytes"].as_u64().unwrap();
    let plan = rep["memory"]["plan"]["total"].as_u64().unwrap();
    assert!(
        emulated() || rss <= plan + (4 << 20),
        "peak RSS {rss} over the plan {plan} + 4 MiB"
    );
    assert!(sp["acceptance_rate"].as_f64().unwrap() > 0.5, "{sp}");
    assert!(sp["ids_per_sweep"].as_f64().unwrap() > 2.0, "{sp}");
    // ids of one sweep share its index; its time and counters are on its first id
    let steps = rep["steps"].as_array().unwrap();
    let sweeps: Vec<u64> = steps.iter().map(|s| s["sweep"].as_u64().unwrap()).collect();
    assert!(sweeps.windows(2).all(|w| w[0] <= w[1] && w[1] <= w[0] + 1));
    assert!(sweeps.windows(2).any(|w| w[0] == w[1]));
    for (i, s) in steps.iter().enumerate().skip(1) {
        if sweeps[i] == sweeps[i - 1] {
            assert_eq!(s["seconds"].as_f64().unwrap(), 0.0);
            assert_eq!(s["bytes_read"].as_u64().unwrap(), 0);
        }
    }
    // without speculation every id has its own sweep
    let (_, plain) = run(&a[..5], Some(&force), "accepted-plain");
    let ps = plain["steps"].as_array().unwrap();
    assert!(ps.iter().enumerate().all(|(i, s)| s["sweep"] == i as u64));
    // the step line says how many ids a sweep produced
    let o = k3()
        .args(a)
        .arg("--verbose")
        .env("K3_TEST_FORCE_IDS", &force)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(sweep 1: 5 ids)"), "{err}");
    assert!(
        err.contains("same sweep") && err.contains("speculation: --spec 4"),
        "{err}"
    );
}

/// tiny-k3's prompt with its 7th id the config's eos_token_id (510): a draft proposes it.
const P_EOS: &str = "410,335,224,165,463,246,510,2,368,223,302,236";

/// (prompt, flags, forced reply, stop reason) per id stop rule, each firing on an id inside
/// an accepted draft: the forced reply repeats the prompt, which the drafts propose.
fn stop_cases() -> Vec<(&'static str, Vec<String>, String, &'static str)> {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let plen = P.split(',').count();
    let rep = format!("{P},{P}");
    vec![
        // the prompt's 6th id as a stop id: the 6th generated id
        (P, own(&["--stop-id", "246"]), rep.clone(), "stop_id"),
        (P_EOS, own(&[]), P_EOS.to_string(), "end_of_turn"),
        (P, own(&["--gen", "17"]), rep.clone(), "length"),
        (
            P,
            vec!["--ctx".into(), (plen + 17).to_string()],
            rep,
            "context",
        ),
    ]
}

#[test]
fn every_stop_rule_inside_an_accepted_draft_gives_plain_results() {
    let m = model("tiny-k3");
    for (ci, (prompt, flags, force, reason)) in stop_cases().iter().enumerate() {
        for (si, s) in settings().iter().enumerate() {
            let mut a = vec![m.as_str(), "--ids", prompt, "--gen", "40"];
            a.extend(flags.iter().map(|x| x.as_str()));
            a.extend(s.iter().map(|x| x.as_str()));
            let reps = same_for_every_k(&a, Some(force), &format!("stop{ci}-{si}"));
            assert!(accepted(&reps) > 0, "case {ci}: nothing accepted");
            assert_eq!(reps[0]["stop_reason"], *reason, "case {ci}");
        }
    }
    // --stop text (tiny-k3-text): stop inside the repetition
    let mt = model("tiny-k3-text");
    let force = format!("{P_TEXT},{P_TEXT}");
    for (si, s) in settings().iter().enumerate() {
        let mut a = vec![
            mt.as_str(),
            "--ids",
            P_TEXT,
            "--gen",
            "40",
            "--stop",
            "sat on the",
        ];
        a.extend(s.iter().map(|x| x.as_str()));
        let reps = same_for_every_k(&a, Some(&force), &format!("stoptext-{si}"));
        assert_eq!(reps[0]["stop_reason"], "stop_text");
        assert!(accepted(&reps) > 0, "--stop: nothing accepted");
        let (plain_out, _) = run(&a, Some(&force), &format!("stoptext-{si}-out0"));
        let mut ak = a.clone();
        ak.extend(["--spec", "5"]);
        let (spec_out, _) = run(&ak, Some(&force), &format!("stoptext-{si}-out5"));
        assert_eq!(spec_out, plain_out, "printed text");
    }
}

#[test]
fn a_rejected_row_leaves_no_trace_in_the_saved_state_and_its_continuation() {
    let m = model("tiny-k3");
    let dir = scratch_dir("spec-states");
    let state_path = |name: &str| -> PathBuf { dir.join(format!("{name}.k3state")) };
    for (si, s) in settings().iter().enumerate() {
        // the reply repeats the prompt for 17 ids, then the model chooses: the draft
        // proposing the prompt's 6th id onwards is rejected at the 18th
        let force = format!(
            "{P},{}",
            &P.split(',').take(5).collect::<Vec<_>>().join(",")
        );
        for k in ["0", "3", "8"] {
            let st = state_path(&format!("{si}-{k}"));
            let st_s = st.to_str().unwrap();
            let mut a = vec![m.as_str(), "--ids", P, "--gen", "20", "--save-state", st_s];
            a.extend(s.iter().map(|x| x.as_str()));
            a.extend(["--spec", k]);
            let (_, rep) = run(&a, Some(&force), &format!("reject-{si}-{k}"));
            if k != "0" {
                let sp = &rep["speculation"];
                assert!(sp["accepted"].as_u64() < sp["drafted"].as_u64(), "{sp}");
            }
        }
        let want = std::fs::read(state_path(&format!("{si}-0"))).unwrap();
        for k in ["3", "8"] {
            let got = std::fs::read(state_path(&format!("{si}-{k}"))).unwrap();
            assert!(
                got == want,
                "state after --spec {k} differs (settings {si})"
            );
        }
        // the continuation, with or without speculation, from either state is the same
        let st0 = state_path(&format!("{si}-0"));
        let a = [
            m.as_str(),
            "--load-state",
            st0.to_str().unwrap(),
            "--gen",
            "12",
        ];
        let reps = same_for_every_k(&a, None, &format!("resume-{si}"));
        let st8 = state_path(&format!("{si}-8"));
        let b = [
            m.as_str(),
            "--load-state",
            st8.to_str().unwrap(),
            "--gen",
            "12",
            "--spec",
            "2",
        ];
        let (_, r8) = run(&b, None, &format!("resume8-{si}"));
        assert_eq!(outcome(&r8), outcome(&reps[0]));
        // and with new input ids appended, drafted from the repetition
        let c = [
            m.as_str(),
            "--load-state",
            st8.to_str().unwrap(),
            "--ids",
            P,
            "--gen",
            "12",
        ];
        same_for_every_k(&c, Some(P), &format!("resume-input-{si}"));
    }
}

#[test]
fn a_batch_with_speculation_prints_the_lines_of_a_batch_without() {
    let m = model("tiny-k3");
    let dir = scratch_dir("spec-batch");
    let file = dir.join("b.jsonl");
    std::fs::write(
        &file,
        format!(
            "{{\"ids\": [{P}], \"gen\": 20}}\n\
             {{\"ids\": [{P},{P}], \"gen\": 14, \"temperature\": 0.9, \"seed\": 3}}\n\
             {{\"ids\": [7, 8, 7, 8], \"gen\": 9, \"stop\": []}}\n\
             {{\"ids\": [{P}], \"gen\": 30, \"temperature\": 0.8, \"top_p\": 0.9, \"seed\": 11}}\n"
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let force = format!("{P},{P}");
    for par in ["1", "3"] {
        let a = [m.as_str(), "--batch", f, "--parallel", par];
        let (want, _) = run(&a, Some(&force), &format!("batch-{par}-k0"));
        for k in ["1", "4", "8"] {
            let mut b = a.to_vec();
            b.extend(["--spec", k]);
            let (got, rep) = run(&b, Some(&force), &format!("batch-{par}-k{k}"));
            assert_eq!(got, want, "--parallel {par} --spec {k}");
            assert!(rep["speculation"]["accepted"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn bad_spec_values_exit_2_naming_the_flag() {
    let m = model("tiny-k3");
    for (v, extra) in [
        ("-1", None),
        ("x", None),
        ("1.5", None),
        ("65", None),
        ("2", Some("--full-recompute")),
    ] {
        let mut a = vec![m.as_str(), "--ids", P, "--spec", v];
        a.extend(extra);
        let o = k3().args(&a).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert!(err.contains("--spec"), "{a:?}: {err}");
    }
}
