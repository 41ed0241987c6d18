//! End-to-end tests of the run command on the tiny fixtures (tests/fixtures/tiny-k3,
//! tiny-k3-text): greedy tokens, teacher-forced argmaxes, logits against the float64
//! reference, bit-identity across prefill chunks, full recompute and thread counts / ISA paths,
//! the `--dump-logits` layout and the `--out` JSON.

use crate::support;
use serde_json::Value;
use std::path::Path;
use support::{copy_dir, fixture, run_k3, scratch_dir};

fn expected(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name).join("expected.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn csv(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn read_f32(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs k3 and returns (stdout, stderr), asserting success.
fn ok(args: &[&str]) -> (String, String) {
    let o = run_k3(args);
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    assert!(
        o.status.success(),
        "k3 {args:?} failed ({:?}):\n{se}",
        o.status.code()
    );
    (so, se)
}

fn first_max(row: &[f32]) -> usize {
    let mut b = 0;
    for i in 1..row.len() {
        if row[i] > row[b] {
            b = i;
        }
    }
    b
}

struct Run {
    stdout: String,
    dump: Vec<f32>,
    json: Value,
}

fn run(fx: &str, tag: &str, ids: &[u32], gen: usize, extra: &[&str]) -> Run {
    let dir = scratch_dir(&format!("run_tiny_{tag}"));
    let dump = dir.join("logits.f32");
    let out = dir.join("run.json");
    let model = fixture(fx);
    let gen_s = gen.to_string();
    let ids_s = csv(ids);
    let mut args: Vec<&str> = vec![
        model.to_str().unwrap(),
        "--ids",
        &ids_s,
        "--gen",
        &gen_s,
        "--dump-logits",
        dump.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let (stdout, _) = ok(&args);
    let json: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    Run {
        stdout,
        dump: read_f32(&dump),
        json,
    }
}

#[test]
fn greedy_incremental_and_full_recompute_match_and_are_bit_identical() {
    let e = expected("tiny-k3");
    let prompt = ids(&e["prompt_ids"]);
    let greedy = ids(&e["greedy_ids"]);
    let n = greedy.len();
    let inc = run("tiny-k3", "inc", &prompt, n, &[]);
    assert_eq!(inc.stdout.trim(), csv(&greedy), "incremental greedy ids");
    let full = run("tiny-k3", "full", &prompt, n, &["--full-recompute"]);
    assert_eq!(
        full.stdout.trim(),
        csv(&greedy),
        "full-recompute greedy ids"
    );
    // T + N - 1 rows, identical bits at every step
    let v = 512;
    assert_eq!(inc.dump.len(), (prompt.len() + n - 1) * v);
    assert!(
        inc.dump
            .iter()
            .zip(&full.dump)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "full recompute differs from incremental"
    );
    assert_eq!(inc.json["logits_hash"], full.json["logits_hash"]);
    assert_eq!(full.json["mode"], "full_recompute");
    assert_eq!(inc.json["mode"], "incremental");
    // JSON fields of FORMATS.md §10
    let j = &inc.json;
    assert_eq!(ids(&j["prompt_ids"]), prompt);
    assert_eq!(ids(&j["generated_ids"]), greedy);
    assert_eq!(j["logits_hash"].as_str().unwrap().len(), 16);
    assert!(j["timing"]["seconds_per_token"].as_f64().unwrap() > 0.0);
    assert!(j["memory"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(j["steps"].as_array().unwrap().len(), n);
    assert_eq!(j["stop_reason"], "length");
    assert!(j["error"].is_null());
    // each step's hash is that of its dump row
    for (s, step) in j["steps"].as_array().unwrap().iter().enumerate() {
        let row = &inc.dump[(prompt.len() - 1 + s) * v..(prompt.len() + s) * v];
        let mut h: u64 = 0xcbf29ce484222325;
        for x in row {
            for b in x.to_bits().to_le_bytes() {
                h = (h ^ b as u64).wrapping_mul(0x100000001b3);
            }
        }
        assert_eq!(
            step["logits_fnv1a64"].as_str().unwrap(),
            format!("{h:016x}"),
            "step {s}"
        );
        assert_eq!(first_max(row) as u32, greedy[s]);
    }
}

#[test]
fn teacher_forced_argmax_and_logits_match_the_reference() {
    let e = expected("tiny-k3");
    let full = ids(&e["full_ids"]);
    let tf = ids(&e["tf_argmax"]);
    let r = run("tiny-k3", "tf", &full, 0, &[]);
    let v = 512;
    assert_eq!(r.dump.len(), full.len() * v, "--gen 0 writes T rows");
    assert!(r.stdout.trim().is_empty());
    let reference = read_f32(&fixture("tiny-k3").join("logits.f32"));
    let tol = 1e-4 * e["max_abs_logit"].as_f64().unwrap().max(1.0);
    let mut worst = 0f64;
    for (a, b) in r.dump.iter().zip(&reference) {
        worst = worst.max((*a as f64 - *b as f64).abs());
    }
    eprintln!("max |engine - reference| = {worst:e} (tolerance {tol:e})");
    assert!(worst <= tol);
    for (p, want) in tf.iter().enumerate() {
        assert_eq!(
            first_max(&r.dump[p * v..(p + 1) * v]) as u32,
            *want,
            "tf argmax at position {p}"
        );
    }
    assert_eq!(
        r.json["logits_hashed_vectors"].as_u64().unwrap(),
        full.len() as u64
    );
}

#[test]
fn prefill_chunk_size_never_changes_a_logit() {
    let e = expected("tiny-k3");
    let full = ids(&e["full_ids"]);
    let runs: Vec<Run> = ["1", "7", "64"]
        .iter()
        .map(|c| {
            run(
                "tiny-k3",
                &format!("chunk{c}"),
                &full[..20],
                4,
                &["--prefill-chunk", c],
            )
        })
        .collect();
    for r in &runs[1..] {
        assert_eq!(r.dump.len(), runs[0].dump.len());
        assert!(r
            .dump
            .iter()
            .zip(&runs[0].dump)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(r.json["logits_hash"], runs[0].json["logits_hash"]);
    }
}

#[test]
fn tiny_k3_text_logits_and_greedy() {
    let e = expected("tiny-k3-text");
    let full = ids(&e["full_ids"]);
    let prompt = ids(&e["prompt_ids"]);
    let greedy = ids(&e["greedy_ids"]);
    let tf = ids(&e["tf_argmax"]);
    let v = 163840;
    // teacher-forced over positions 0..9, compare rows 4..9
    let r = run("tiny-k3-text", "text_tf", &full[..10], 0, &[]);
    let reference = read_f32(&fixture("tiny-k3-text").join("logits.f32"));
    let tol = 1e-4 * e["max_abs_logit"].as_f64().unwrap().max(1.0);
    let mut worst = 0f64;
    for (j, p) in (4..10).enumerate() {
        let row = &r.dump[p * v..(p + 1) * v];
        for (a, b) in row.iter().zip(&reference[j * v..(j + 1) * v]) {
            worst = worst.max((*a as f64 - *b as f64).abs());
        }
        assert_eq!(first_max(row) as u32, tf[p]);
    }
    assert!(worst <= tol, "{worst} > {tol}");
    let g = run(
        "tiny-k3-text",
        "text_gen",
        &prompt,
        greedy.len(),
        &["--prefill-chunk", "2"],
    );
    // the model directory holds the tokenizer: text goes to stdout, ids to the JSON
    assert_eq!(ids(&g.json["generated_ids"]), greedy);
    assert_eq!(g.json["generated_text"], e["generated_text_lossy"]);
}

#[test]
fn json_is_written_on_failure_with_the_error() {
    let dir = scratch_dir("run_tiny_fail_json");
    let out = dir.join("r.json");
    let model = fixture("tiny-k3");
    let o = run_k3([
        model.to_str().unwrap(),
        "--ids",
        "1,512",
        "--gen",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["error"]["exit_code"], 2);
    assert_eq!(j["stop_reason"], "error");
    assert!(j["error"]["message"].as_str().unwrap().contains("512"));
}

#[test]
fn layers_flag_binds_a_prefix() {
    let model = fixture("tiny-k3");
    let dir = scratch_dir("run_tiny_layers");
    let out = dir.join("r.json");
    let (so, _) = ok(&[
        model.to_str().unwrap(),
        "--ids",
        "1,2,3",
        "--gen",
        "2",
        "--layers",
        "4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(so.trim().split(',').count(), 2);
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["layers_bound"], 4);
    assert_eq!(j["layers"], 13);
    let o = run_k3([model.to_str().unwrap(), "--ids", "1", "--layers", "14"]);
    assert_eq!(o.status.code(), Some(2));
}

/// MODEL.md §5.6, §11 rows 19–20: the logits hash is the same on every ISA path this CPU
/// runs and at 1, 2 and 3 threads (`--isa`, `--threads`); also through `K3_ISA`/`K3_THREADS`.
#[test]
fn logits_hash_is_identical_across_isa_paths_and_thread_counts() {
    let e = expected("tiny-k3");
    let prompt = ids(&e["prompt_ids"]);
    let mut hashes = Vec::new();
    for isa in k3_kernels::isa::available() {
        for t in ["1", "2", "3"] {
            let r = run(
                "tiny-k3",
                &format!("isa_{}_{t}", isa.name()),
                &prompt,
                8,
                &["--isa", isa.name(), "--threads", t],
            );
            assert_eq!(r.json["numerics"]["isa"], isa.name());
            assert_eq!(
                r.json["numerics"]["threads"].as_u64().unwrap(),
                t.parse::<u64>().unwrap()
            );
            hashes.push((
                format!("{} x{t}", isa.name()),
                r.json["logits_hash"].clone(),
                r.dump,
            ));
        }
    }
    for (name, h, dump) in &hashes[1..] {
        assert_eq!(h, &hashes[0].1, "{name} vs {}", hashes[0].0);
        assert!(
            dump.iter()
                .zip(&hashes[0].2)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}"
        );
    }
    // the environment variables reach the kernels too
    let out = scratch_dir("run_tiny_env").join("r.json");
    let o = support::k3_command(env!("CARGO_BIN_EXE_k3"))
        .args([
            fixture("tiny-k3").to_str().unwrap(),
            "--ids",
            &csv(&prompt),
            "--gen",
            "8",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("K3_ISA", "scalar")
        .env("K3_THREADS", "3")
        .output()
        .unwrap();
    assert!(o.status.success());
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["numerics"]["isa"], "scalar");
    assert_eq!(j["numerics"]["threads"], 3);
    assert_eq!(j["logits_hash"], hashes[0].1);
    // a bad value is refused naming the variable
    let o = support::k3_command(env!("CARGO_BIN_EXE_k3"))
        .args([
            fixture("tiny-k3").to_str().unwrap(),
            "--ids",
            "1",
            "--gen",
            "1",
        ])
        .env("K3_ISA", "sparc")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("K3_ISA"));
}

/// ENGINE.md §4: the plan is refused with exit 3 before anything is allocated.
#[test]
fn memory_plan_that_does_not_fit_is_refused_with_exit_3() {
    // max_position_embeddings is informational: without it only the plan limits positions
    let dir = copy_dir(&fixture("tiny-k3"), "run_tiny_plan");
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        cfg.replace("\"max_position_embeddings\": 1048576,", ""),
    )
    .unwrap();
    let out = dir.join("r.json");
    // 10^12 positions x 4 MLA layers x 160 B = 640 TB of MLA cache
    let o = run_k3([
        dir.to_str().unwrap(),
        "--ids",
        "1,2",
        "--gen",
        "1000000000000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("memory plan does not fit")
            && err.contains("MLA cache")
            && err.contains("short by"),
        "{err}"
    );
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["error"]["exit_code"], 3);
    assert!(
        j["memory"]["plan"]["mla_cache"].as_u64().unwrap()
            > j["memory"]["plan"]["available"].as_u64().unwrap()
    );
    assert!(
        j["memory"]["peak_rss_bytes"].as_u64().unwrap() < 1_000_000_000,
        "nothing was allocated"
    );
}

/// `--dump-cache-trace` (FORMATS.md §8): one teacher-forced step over the whole sequence
/// records, per MoE layer ascending, per position ascending, the selected experts in selection
/// order — the fixture's `tf_routing`.
#[test]
fn cache_trace_matches_the_fixture_routing() {
    let e = expected("tiny-k3");
    let full = ids(&e["full_ids"]);
    let dir = scratch_dir("run_tiny_trace");
    let trace = dir.join("trace");
    let r = run(
        "tiny-k3",
        "trace_run",
        &full,
        0,
        &["--dump-cache-trace", trace.to_str().unwrap()],
    );
    assert!(r.json["error"].is_null());
    let b = std::fs::read(trace.join("expert_trace.bin")).unwrap();
    let rec: Vec<(i32, i32)> = b
        .chunks_exact(8)
        .map(|c| {
            (
                i32::from_le_bytes(c[..4].try_into().unwrap()),
                i32::from_le_bytes(c[4..].try_into().unwrap()),
            )
        })
        .collect();
    let mut want = Vec::new();
    for l in 1..13 {
        for sel in e["tf_routing"][l.to_string()].as_array().unwrap() {
            for x in sel.as_array().unwrap() {
                want.push((l, x.as_u64().unwrap() as i32));
            }
        }
    }
    assert_eq!(rec, want);
    assert_eq!(
        r.json["expert_cache"]["requests"].as_u64().unwrap(),
        want.len() as u64
    );
    let hist: Value =
        serde_json::from_slice(&std::fs::read(trace.join("expert_hist.json")).unwrap()).unwrap();
    assert_eq!(hist["n_layers"], 13);
}
