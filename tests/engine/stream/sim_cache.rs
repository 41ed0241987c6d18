//! Traces (FORMATS.md §8) and `k3 sim-cache`: reading and writing traces, deriving the
//! incremental-decode trace from the recorded full-recompute one, Belady's optimum (checked
//! against exhaustive search), and the command line on the real trace, whose best policy on the
//! incremental trace must be the engine's default.

use crate::support;
use crate::support::io as io_support;

use io_support::{fixture, Rng, TempDir};
use k3::stream::policy::{DEFAULT_POLICY, POLICY_NAMES};
use k3::stream::sim::{batches, belady, compulsory, simulate};
use k3::stream::trace::{
    derive_incremental, encode_trace, hist_json, parse_trace, read_trace, split_steps, TraceWriter,
};
use k3::stream::{ExpertKey, KeySet};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const CAPACITIES_GB: [f64; 5] = [8.0, 16.0, 32.0, 64.0, 128.0];
const EXPERT_BYTES: f64 = 17_547_264.0;

fn k(l: u32, e: u32) -> ExpertKey {
    ExpertKey::new(l, e)
}

fn real() -> Vec<ExpertKey> {
    read_trace(&fixture("real/expert_trace.bin")).unwrap()
}

fn k3(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_k3"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_real_trace_is_8_full_recompute_steps_over_5_to_12_positions() {
    let r = real();
    assert_eq!(r.len(), 100_096);
    let steps = split_steps(&r);
    assert_eq!(steps.len(), 8);
    let inc = derive_incremental(&r).expect("recognised as full recompute");
    assert_eq!(inc.steps, 8);
    assert_eq!(inc.moe_layers, 92);
    assert_eq!(inc.top_k, 16);
    assert_eq!(inc.positions, (5..=12).collect::<Vec<_>>());
    assert_eq!(inc.records.len(), 12 * 1472);
    // The first step (the 5-position prompt) is kept as one prefill chunk.
    assert_eq!(&inc.records[..92 * 80], &r[..92 * 80]);
    // Then one position per step: per layer ascending, 16 distinct experts.
    for (pos, chunk) in inc.records[92 * 80..].chunks(1472).enumerate() {
        for (li, sel) in chunk.chunks(16).enumerate() {
            let layer = 1 + li as u32;
            assert!(sel.iter().all(|x| x.layer == layer), "position {}", pos + 5);
            let d: KeySet = sel.iter().copied().collect();
            assert_eq!(d.len(), 16);
        }
        // Position p's routing equals the last full-recompute step's records for p.
        let last = &steps[7];
        for (li, (_, run)) in last.runs.iter().enumerate() {
            let p = pos + 5;
            assert_eq!(
                &r[run.start + p * 16..run.start + (p + 1) * 16],
                &chunk[li * 16..(li + 1) * 16]
            );
        }
    }
}

/// A full-recompute trace in FORMATS.md §8 order from per-position routing.
fn full_recompute(
    route: &[Vec<Vec<u32>>],
    layers: &[u32],
    steps: std::ops::Range<usize>,
) -> Vec<ExpertKey> {
    let mut out = Vec::new();
    for t in steps {
        for (li, &l) in layers.iter().enumerate() {
            for pos in route.iter().take(t) {
                out.extend(pos[li].iter().map(|&e| k(l, e)));
            }
        }
    }
    out
}

#[test]
fn derivation_maps_request_order_back_to_positions() {
    let layers = [1u32, 2, 5];
    let mut rng = Rng(77);
    // 6 positions, top-3 of 10 experts.
    let route: Vec<Vec<Vec<u32>>> = (0..6)
        .map(|_| {
            layers
                .iter()
                .map(|_| {
                    let mut s = Vec::new();
                    while s.len() < 3 {
                        let e = rng.below(10) as u32;
                        if !s.contains(&e) {
                            s.push(e);
                        }
                    }
                    s
                })
                .collect()
        })
        .collect();
    let fr = full_recompute(&route, &layers, 3..7);
    let inc = derive_incremental(&fr).unwrap();
    assert_eq!(inc.positions, vec![3, 4, 5, 6]);
    assert_eq!(inc.top_k, 3);
    // Expected: prompt chunk (positions 0..2 per layer), then each position per layer.
    let mut want = Vec::new();
    for (li, &l) in layers.iter().enumerate() {
        for pos in &route[..3] {
            want.extend(pos[li].iter().map(|&e| k(l, e)));
        }
    }
    for pos in &route[3..6] {
        for (li, &l) in layers.iter().enumerate() {
            want.extend(pos[li].iter().map(|&e| k(l, e)));
        }
    }
    assert_eq!(inc.records, want);

    // An incremental trace (prompt chunk, then one position per step) is not re-derived.
    assert_eq!(derive_incremental(&want), None);
    // A single step is not full recompute either.
    assert_eq!(derive_incremental(&fr[..layers.len() * 9]), None);
    // A re-run position that routes differently breaks the pattern: replayed as recorded.
    let mut bad = fr.clone();
    let i = layers.len() * 9 + 1;
    bad[i] = k(bad[i].layer, (bad[i].expert + 1) % 10);
    assert_eq!(derive_incremental(&bad), None);
}

/// Minimum reads over every eviction choice (exhaustive; tiny inputs only).
fn brute_force_min_reads(records: &[ExpertKey], slots: usize) -> u64 {
    fn go(
        bs: &[Vec<ExpertKey>],
        i: usize,
        resident: Vec<ExpertKey>,
        slots: usize,
        memo: &mut std::collections::HashMap<(usize, Vec<ExpertKey>), u64>,
    ) -> u64 {
        if i == bs.len() {
            return 0;
        }
        if let Some(&v) = memo.get(&(i, resident.clone())) {
            return v;
        }
        let batch = &bs[i];
        let misses: Vec<ExpertKey> = batch
            .iter()
            .filter(|x| !resident.contains(x))
            .copied()
            .collect();
        let free = slots - resident.len();
        let need = misses.len().saturating_sub(free);
        let evictable: Vec<ExpertKey> = resident
            .iter()
            .filter(|x| !batch.contains(x))
            .copied()
            .collect();
        let mut best = u64::MAX;
        // Every subset of evictable of size `need` (a prefetch-free demand cache never evicts
        // more than it must).
        let n = evictable.len();
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != need {
                continue;
            }
            let mut next: Vec<ExpertKey> = resident
                .iter()
                .filter(|x| {
                    evictable
                        .iter()
                        .position(|y| y == *x)
                        .is_none_or(|j| mask & (1 << j) == 0)
                })
                .copied()
                .collect();
            next.extend(&misses);
            next.sort();
            let v = misses.len() as u64 + go(bs, i + 1, next, slots, memo);
            best = best.min(v);
        }
        memo.insert((i, resident), best);
        best
    }
    let bs: Vec<Vec<ExpertKey>> = batches(records, slots)
        .into_iter()
        .map(|r| {
            let mut seen = Vec::new();
            for x in &records[r] {
                if !seen.contains(x) {
                    seen.push(*x);
                }
            }
            seen
        })
        .collect();
    go(&bs, 0, Vec::new(), slots, &mut Default::default())
}

#[test]
fn belady_reads_the_minimum_found_by_exhaustive_search() {
    let mut rng = Rng(99);
    for case in 0..300 {
        let slots = 1 + rng.below(3) as usize;
        let n = 4 + rng.below(12) as usize;
        let mut recs = Vec::new();
        let mut layer = 1;
        while recs.len() < n {
            // Runs of 1..3 records of one layer form a batch.
            let run = 1 + rng.below(3);
            for _ in 0..run {
                recs.push(k(layer, rng.below(5) as u32));
            }
            layer = 1 + rng.below(2) as u32 + if layer == 1 { 1 } else { 0 };
        }
        let b = belady(&recs, slots);
        assert_eq!(
            b.reads,
            brute_force_min_reads(&recs, slots),
            "case {case}: slots {slots}, {recs:?}"
        );
    }
}

#[test]
fn belady_bounds_every_policy_and_the_ceiling_bounds_belady() {
    let r = real();
    let inc = derive_incremental(&r).unwrap().records;
    let (distinct, ceiling) = compulsory(&inc);
    assert_eq!(distinct, 10_010);
    for (trace, cap) in [(&inc, 455usize), (&inc, 1823), (&r, 911), (&r, 7294)] {
        let b = belady(trace, cap);
        let (_, ceil) = compulsory(trace);
        assert!(b.hit_rate() <= ceil + 1e-12);
        for p in POLICY_NAMES {
            let s = simulate(trace, cap, p).unwrap();
            assert_eq!(s.requests, trace.len() as u64);
            assert!(
                s.reads >= b.reads,
                "{p} at {cap}: {} < belady {}",
                s.reads,
                b.reads
            );
            assert!(s.true_resident_hits <= s.requests - s.reads);
        }
    }
    // With room for everything, every policy reaches the ceiling.
    for p in POLICY_NAMES {
        let s = simulate(&inc, 20_000, p).unwrap();
        assert!((s.hit_rate() - ceiling).abs() < 1e-12, "{p}");
        assert_eq!(s.evictions, 0);
    }
}

#[test]
fn default_policy_is_the_best_on_the_real_incremental_trace() {
    let inc = derive_incremental(&real()).unwrap().records;
    let mean = |p: &str| -> f64 {
        CAPACITIES_GB
            .iter()
            .map(|gb| {
                let slots = (gb * 1e9 / EXPERT_BYTES).floor() as usize;
                simulate(&inc, slots, p).unwrap().hit_rate()
            })
            .sum::<f64>()
            / CAPACITIES_GB.len() as f64
    };
    let default = mean(DEFAULT_POLICY);
    for p in POLICY_NAMES {
        assert!(mean(p) <= default, "{p} beats the default {DEFAULT_POLICY}");
    }
}

#[test]
fn sim_cache_on_the_real_trace_prints_every_policy_capacity_belady_and_the_choice() {
    let dir = TempDir::new("sim-tsv");
    let tsv = dir.path().join("table.tsv");
    let (code, out, err) = k3(&[
        "sim-cache",
        "tests/fixtures/real/expert_trace.bin",
        "--tsv",
        tsv.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("full recompute: 8 steps over 5..12 positions (top-16)"),
        "{out}"
    );
    assert!(out.contains("17664 requests"), "{out}");
    assert!(out.contains("compulsory-miss ceiling 43.33%"), "{out}");
    for gb_slots in [
        ("8", 455),
        ("16", 911),
        ("32", 1823),
        ("64", 3647),
        ("128", 7294),
    ] {
        let row = format!("{:>11} {:>6}", gb_slots.0, gb_slots.1);
        assert_eq!(out.matches(&row).count(), 2, "{row} in both tables:\n{out}");
    }
    for p in POLICY_NAMES.iter().chain(&["belady", "ceiling"]) {
        assert!(out.contains(p), "{p}");
    }
    assert!(
        out.contains(&format!(
            "best policy on the incremental trace: {DEFAULT_POLICY} "
        )),
        "{out}"
    );
    let text = std::fs::read_to_string(&tsv).unwrap();
    assert!(text.contains("# command: k3 sim-cache tests/fixtures/real/expert_trace.bin --tsv"));
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows[0].split('\t').count(), 9);
    assert_eq!(rows.len(), 1 + 2 * 5 * (POLICY_NAMES.len() + 2));
}

#[test]
fn sim_cache_flags() {
    let t = "tests/fixtures/real/expert_trace.bin";
    let (code, out, err) = k3(&[
        "sim-cache",
        t,
        "--policy",
        "lru",
        "--slots",
        "2000",
        "--capacity-gb",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("      -   2000") && out.contains("      1     56"),
        "{out}"
    );
    assert!(!out.contains("s3-fifo"), "{out}");
    let (code, _, err) = k3(&["sim-cache", t, "--policy", "mru"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--policy") && err.contains("`mru`") && err.contains("s3-fifo"),
        "{err}"
    );
    let (code, _, err) = k3(&["sim-cache", t, "--capacity-gb", "0.01"]);
    assert_eq!(code, 2);
    assert!(err.contains("--capacity-gb"), "{err}");
    let (code, _, err) = k3(&["sim-cache", t, "--capacity-gb", "-3"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = k3(&["sim-cache", t, "--slots", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = k3(&["sim-cache"]);
    assert_eq!(code, 2);
    assert!(err.contains("trace"), "{err}");
    let (code, _, err) = k3(&["sim-cache", "tests/fixtures/real/absent.bin"]);
    assert_eq!(code, 2);
    assert!(err.contains("absent.bin"), "{err}");
}

#[test]
fn malformed_traces_are_exit_2_naming_file_and_offset() {
    let dir = TempDir::new("sim-bad");
    let cut = dir.file("cut.bin", &[1, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0]);
    let (code, _, err) = k3(&["sim-cache", cut.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("cut.bin") && err.contains("offset 8"), "{err}");
    let mut neg = encode_trace(&[k(1, 2), k(1, 3)]);
    neg[12..16].copy_from_slice(&(-7i32).to_le_bytes());
    let e = parse_trace(&neg, Path::new("neg.bin")).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message
            .contains("neg.bin: record 1 at offset 8: negative expert -7"),
        "{e}"
    );
    let e = parse_trace(&[], Path::new("empty.bin")).unwrap_err();
    assert_eq!(e.exit_code(), 2);
}

#[test]
fn trace_writer_round_trips_and_writes_the_histogram() {
    let dir = TempDir::new("trace-writer");
    let out = dir.path().join("dump");
    let mut w = TraceWriter::create(&out, 93, 896).unwrap();
    w.record(1, &[498, 764, 498]).unwrap();
    w.record(2, &[0]).unwrap();
    w.record(92, &[895]).unwrap();
    assert_eq!(w.records(), 5);
    assert_eq!(w.record(93, &[0]).unwrap_err().exit_code(), 1);
    assert_eq!(w.record(5, &[896]).unwrap_err().exit_code(), 1);
    w.finish().unwrap();
    let back = read_trace(&out.join("expert_trace.bin")).unwrap();
    assert_eq!(
        back,
        vec![k(1, 498), k(1, 764), k(1, 498), k(2, 0), k(92, 895)]
    );
    let hist = std::fs::read_to_string(out.join("expert_hist.json")).unwrap();
    assert_eq!(
        hist,
        "{\"n_layers\": 93, \"n_experts\": 896, \"counts\": {\"1,498\": 2, \"1,764\": 1, \
         \"2,0\": 1, \"92,895\": 1}}\n"
    );
    let mut counts = BTreeMap::new();
    counts.insert(k(3, 1), 0);
    assert_eq!(
        hist_json(4, 8, &counts),
        "{\"n_layers\": 4, \"n_experts\": 8, \"counts\": {}}\n"
    );
    // A path that cannot be a directory is a usage error.
    let file = dir.file("plain", b"x");
    assert_eq!(
        TraceWriter::create(&file, 93, 896).unwrap_err().exit_code(),
        2
    );
}

#[test]
fn batches_are_layer_runs_cut_to_the_cache_size() {
    let recs = [k(1, 1), k(1, 2), k(1, 1), k(1, 3), k(2, 1), k(1, 1)];
    assert_eq!(batches(&recs, 8), vec![0..4, 4..5, 5..6]);
    // Two slots: the third distinct expert of layer 1 starts a sub-batch; repeats stay.
    assert_eq!(batches(&recs, 2), vec![0..3, 3..4, 4..5, 5..6]);
}

#[test]
fn sim_cache_checks_its_tsv_path_before_replaying() {
    let trace = fixture("real/expert_trace.bin");
    let o = support::run_args(&[
        "sim-cache",
        trace.to_str().unwrap(),
        "--tsv",
        "/nonexistent-k3-dir/x.tsv",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", support::stderr(&o));
    assert!(
        support::stderr(&o).contains("--tsv"),
        "{}",
        support::stderr(&o)
    );
    assert!(
        o.stdout.is_empty(),
        "refused before the replay printed its table"
    );
    let dir = support::scratch_dir("edge_sim_tsv");
    let tsv = dir.join("t.tsv");
    let o = support::run_args(&[
        "sim-cache",
        trace.to_str().unwrap(),
        "--capacity-gb",
        "8",
        "--tsv",
        tsv.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    assert!(std::fs::read_to_string(&tsv).unwrap().contains("hit_rate"));
    assert!(!dir.join("t.tsv.tmp").exists());
}
