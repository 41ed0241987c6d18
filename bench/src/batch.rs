//! The batch benchmark (issue 12's Bench, ENGINE.md §10): B sequences (different prompts, the
//! same `--gen`) decoded together by `k3 --batch FILE --parallel B`, at each B's floor (the
//! smallest `--mem-gb` the plan accepts with B sequences' states), at a fixed budget and
//! resident. Driven by `cargo xtask bench batch` through the `batch` binary.
//!
//! The `--out` report of a batch run gives run totals only (bytes read per kind, the steps'
//! seconds, sweeps), and the joiners' prefills are in the totals. So each point runs twice with
//! the same `--ctx` (the same plan): `--gen 1` and `--gen G`; the prefills are the same work, so
//! the differences ÷ the extra sweeps are exactly the bytes one B-sequence step reads. The step
//! time is the difference of the runs' `timing.decode_seconds` ÷ the extra sweeps (the last
//! sweep of a run only chooses ids: it runs no forward).

use crate::device::{self, Measurement, ENGINE_QUEUE_DEPTH, KDA_LAYER_BYTES};
use crate::harness::{
    budget_flags, device_seed, find_floor_with, k3_args, open_targets, say, Budget, Fail, Options,
};
use crate::idle::{self, IdleReport};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Prompt length of every sequence (ids). One id: each joiner's prefill (run alone, before
/// the sweeps) is then one position, as cheap as a step, which keeps the runs short on a
/// shared machine; the steps measured do not depend on it.
pub const PROMPT_LEN: usize = 1;

/// The prompt of sequence `i`: `PROMPT_LEN` ids, distinct between sequences (below 1000, so
/// valid for any vocabulary the synthetic checkpoint has).
pub fn prompt(i: usize) -> Vec<u32> {
    (0..PROMPT_LEN as u32)
        .map(|j| 1 + j + (i as u32) * (37 + 3 * j))
        .collect()
}

/// The batch file of `b` sequences: one `{"ids": [...]}` line each.
pub fn batch_file(b: usize) -> String {
    (0..b)
        .map(|i| {
            let ids: Vec<String> = prompt(i).iter().map(u32::to_string).collect();
            format!("{{\"ids\": [{}]}}\n", ids.join(", "))
        })
        .collect()
}

/// Run totals of one `--batch` report (FORMATS.md §10): bytes and read seconds per kind, the
/// steps' seconds and count, memory, and each input's logits hash (from standard output).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub trunk: u64,
    pub expert: u64,
    pub table: u64,
    pub trunk_read_s: f64,
    pub expert_read_s: f64,
    pub table_read_s: f64,
    pub decode_s: f64,
    pub prefill_s: f64,
    pub load_s: f64,
    pub sweeps: u64,
    pub tokens: u64,
    pub peak_rss: u64,
    pub plan_total: u64,
    pub hashes: BTreeMap<u64, String>,
}

fn u(v: &Value, path: &[&str]) -> Result<u64, String> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{}: expected a non-negative integer", path.join(".")))
}

fn f(v: &Value, path: &[&str]) -> Result<f64, String> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("{}: expected a number", path.join(".")))
}

impl Totals {
    /// From the report `v` and the JSON lines `stdout` of one batch run. Errors name the key.
    pub fn from_report(v: &Value, stdout: &str) -> Result<Totals, String> {
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            return Err(format!("the run failed: {e}"));
        }
        let mut hashes = BTreeMap::new();
        for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
            let l: Value =
                serde_json::from_str(line).map_err(|e| format!("stdout line `{line}`: {e}"))?;
            let i = u(&l, &["index"])?;
            let h = l.get("logits_hash").and_then(Value::as_str);
            hashes.insert(i, h.ok_or("stdout: logits_hash: expected a string")?.into());
        }
        Ok(Totals {
            trunk: u(v, &["trunk", "bytes_read"])?,
            expert: u(v, &["expert_cache", "bytes_read"])?,
            table: u(v, &["io", "embedding_bytes_read"])? + u(v, &["io", "lm_head_bytes_read"])?,
            trunk_read_s: f(v, &["trunk", "read_seconds"])?,
            expert_read_s: f(v, &["expert_cache", "read_seconds"])?,
            table_read_s: f(v, &["io", "model_table_read_seconds"])?,
            decode_s: f(v, &["timing", "decode_seconds"])?,
            prefill_s: f(v, &["timing", "prefill_seconds"])?,
            load_s: f(v, &["timing", "load_seconds"])?,
            sweeps: u(v, &["batch", "sweeps"])?,
            tokens: u(v, &["batch", "tokens"])?,
            peak_rss: u(v, &["memory", "peak_rss_bytes"])?,
            plan_total: u(v, &["memory", "plan", "total"])?,
            hashes,
        })
    }

    fn read_bytes(&self) -> u64 {
        self.trunk + self.expert + self.table
    }

    fn read_s(&self) -> f64 {
        self.trunk_read_s + self.expert_read_s + self.table_read_s
    }
}

/// One B-sequence step's figures: the `--gen G` run minus the `--gen 1` run, per extra sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub trunk: f64,
    pub expert: f64,
    pub table: f64,
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Read seconds of the step's bytes (difference of the runs' read seconds ÷ sweeps).
    pub read_s: f64,
}

impl Step {
    /// `one` = the `--gen 1` run, `full` = the `--gen G` run of the same batch and plan.
    pub fn between(one: &Totals, full: &Totals) -> Option<Step> {
        let extra = full.sweeps.checked_sub(one.sweeps).filter(|&n| n > 0)? as f64;
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / extra;
        // A sweep chooses each sequence's next id from the logits it holds, then runs the
        // forward of the chosen ids unless every sequence is done: the last sweep of a run
        // has no forward, so the extra sweeps of the `--gen G` run are its extra forwards.
        let seconds = (full.decode_s - one.decode_s).max(0.0) / extra;
        let per_sweep = d(full.tokens, one.tokens);
        Some(Step {
            trunk: d(full.trunk, one.trunk),
            expert: d(full.expert, one.expert),
            table: d(full.table, one.table),
            seconds,
            tokens_per_s: if seconds > 0.0 {
                per_sweep / seconds
            } else {
                0.0
            },
            read_s: (full.read_s() - one.read_s()).max(0.0) / extra,
        })
    }

    /// Bytes read in the step.
    pub fn bytes(&self) -> f64 {
        self.trunk + self.expert + self.table
    }
}

/// One measured point: a budget and B.
#[derive(Clone, Debug)]
pub struct Point {
    pub budget: Budget,
    pub b: usize,
    pub mem_gb: Option<f64>,
    pub one: Option<Totals>,
    pub full: Option<Totals>,
    pub error: String,
    pub idle: Option<IdleReport>,
}

impl Point {
    /// The step figures, when both runs succeeded.
    pub fn step(&self) -> Option<Step> {
        Step::between(self.one.as_ref()?, self.full.as_ref()?)
    }
}

/// k3's arguments for a batch run of `file` at `parallel`, `gen`, the same `--ctx` for every
/// `gen` (so the same plan), and a budget.
fn batch_args(
    o: &Options,
    file: &Path,
    parallel: usize,
    gen: usize,
    ctx: usize,
    json: &Path,
    mem_gb: Option<f64>,
) -> Vec<String> {
    let input = [
        "--batch".into(),
        file.display().to_string(),
        "--parallel".into(),
        parallel.to_string(),
        "--ctx".into(),
        ctx.to_string(),
    ];
    k3_args(o, &input, gen, mem_gb, json)
}

fn one_run(o: &Options, args: &[String], json: &Path, log: &Path) -> Result<Totals, String> {
    let _ = std::fs::remove_file(json);
    let err = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let out = Command::new(&o.k3)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(err)
        .output()
        .map_err(|e| format!("{}: cannot run: {e}", o.k3.display()))?;
    if !out.status.success() {
        let tail = std::fs::read_to_string(log).unwrap_or_default();
        let last = tail.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!(
            "exit {:?}: {}",
            out.status.code(),
            last.unwrap_or("")
        ));
    }
    let bytes = std::fs::read(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", json.display()))?;
    Totals::from_report(&v, &String::from_utf8_lossy(&out.stdout))
        .map_err(|e| format!("{}: {e}", json.display()))
}

/// Measures one point: the floor for B when asked, then the `--gen 1` and `--gen G` runs.
pub fn measure_point(o: &Options, budget: &Budget, b: usize) -> Point {
    let mut p = Point {
        budget: budget.clone(),
        b,
        mem_gb: None,
        one: None,
        full: None,
        error: String::new(),
        idle: None,
    };
    let file = o.work_dir.join(format!("batch-{b}.jsonl"));
    if let Err(e) = std::fs::write(&file, batch_file(b)) {
        p.error = format!("{}: {e}", file.display());
        return p;
    }
    let ctx = PROMPT_LEN + o.gen;
    p.mem_gb = match budget {
        Budget::Resident => None,
        Budget::Gb(g) => Some(*g),
        Budget::Floor | Budget::Mid => {
            let args = |json: &Path, g: f64| batch_args(o, &file, b, o.gen, ctx, json, Some(g));
            match find_floor_with(o, 16.0, &args) {
                Ok(g) => Some(g),
                Err((_, e)) => {
                    p.error = format!("floor: {e}");
                    return p;
                }
            }
        }
    };
    let dev = idle::device_of(&o.model);
    p.idle = idle::sample(Duration::from_secs(2), dev.as_deref()).ok();
    let label = format!("{}-b{b}", budget.label());
    for gen in [1, o.gen] {
        let json = o.work_dir.join(format!("{label}-gen{gen}.json"));
        let log = o.work_dir.join(format!("{label}-gen{gen}.stderr"));
        let t0 = Instant::now();
        let r = one_run(
            o,
            &batch_args(o, &file, b, gen, ctx, &json, p.mem_gb),
            &json,
            &log,
        );
        say(&format!(
            "batch: {label} --gen {gen}: {} in {:.1} s",
            if r.is_ok() { "ok" } else { "failed" },
            t0.elapsed().as_secs_f64()
        ));
        match r {
            Ok(t) if gen == 1 => p.one = Some(t),
            Ok(t) => p.full = Some(t),
            Err(e) => {
                p.error = format!("--gen {gen}: {e}");
                return p;
            }
        }
    }
    p
}

/// A short device measurement with the engine's patterns (the batch runs leave less time than
/// the roofline harness's): 32 random expert reads at QD1, 4 expert batches (top-k of one
/// layer, file-offset order) at QD16, and `seq_bytes` of whole-layer windows at QD1.
pub fn quick_device(o: &Options, files: &[PathBuf]) -> Result<Vec<Measurement>, Fail> {
    let targets = open_targets(files)?;
    let dev = idle::device_of(&files[0]);
    let io = |e: std::io::Error| (4, e.to_string());
    let seed = device_seed();
    let req = device::random_requests(&targets, 32, seed);
    let batches = device::expert_batches(&targets, 4, o.layer_experts, o.top_k, seed + 1);
    let mut b16 = device::random_expert(&targets, &batches, ENGINE_QUEUE_DEPTH, dev.as_deref())
        .map_err(io)?;
    b16.pattern = "expert_batch";
    Ok(vec![
        device::random_expert(&targets, &req, 1, dev.as_deref()).map_err(io)?,
        b16,
        device::sequential_layer(&targets, KDA_LAYER_BYTES, o.seq_bytes, 0, dev.as_deref())
            .map_err(io)?,
    ])
}

/// The device figure: the best pattern, or the engine's own reads in any run (bytes ÷ read
/// seconds) when faster, so no ratio against it flatters the engine.
pub fn device_figure(device: &[Measurement], points: &[Point]) -> (f64, f64, f64) {
    let patterns = device
        .iter()
        .map(|m| m.bytes as f64 / m.seconds.max(1e-9))
        .fold(0.0, f64::max);
    let engine = points
        .iter()
        .filter_map(|p| p.full.as_ref())
        .filter(|t| t.read_s() > 0.0)
        .map(|t| t.read_bytes() as f64 / t.read_s())
        .fold(0.0, f64::max);
    (patterns.max(engine), patterns, engine)
}

/// Whether every input's logits hash is the same in every point that ran it (a sequence's
/// logits do not depend on its batch or budget): the distinct hashes of each index.
pub fn hash_check(points: &[Point]) -> BTreeMap<u64, Vec<String>> {
    let mut m: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for t in points.iter().filter_map(|p| p.full.as_ref()) {
        for (i, h) in &t.hashes {
            let v = m.entry(*i).or_default();
            if !v.contains(h) {
                v.push(h.clone());
            }
        }
    }
    m
}

/// The result TSV: `header` lines, the device patterns, then one row per point with ratios to
/// B = 1 of the same budget.
pub fn tsv(header: &[(String, String)], device: &[Measurement], points: &[Point]) -> String {
    let mut t = String::new();
    for (k, v) in header {
        let _ = writeln!(t, "# {k}\t{v}");
    }
    let (dev_bps, pat_bps, eng_bps) = device_figure(device, points);
    let _ = writeln!(
        t,
        "# device_figure\t{:.1} MB/s (best pattern {:.1}, engine's own reads {:.1})",
        dev_bps / 1e6,
        pat_bps / 1e6,
        eng_bps / 1e6
    );
    let hashes = hash_check(points);
    let differ: Vec<String> = hashes
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(i, v)| format!("{i}: {}", v.join(",")))
        .collect();
    let _ = writeln!(
        t,
        "# logits_hash_per_input\t{}",
        if differ.is_empty() {
            format!("same in every point ({} inputs)", hashes.len())
        } else {
            format!("DIFFER: {}", differ.join("; "))
        }
    );
    let _ = writeln!(t, "# section device");
    let _ = writeln!(t, "pattern\tqueue_depth\treads\tbytes\tseconds\tMBps");
    for m in device {
        let _ = writeln!(
            t,
            "{}\t{}\t{}\t{}\t{:.3}\t{:.1}",
            m.pattern,
            m.queue_depth,
            m.reads,
            m.bytes,
            m.seconds,
            m.mb_per_s()
        );
    }
    let _ = writeln!(t, "# section batch");
    let _ = writeln!(t, "budget\tB\tflags\tstep_s\ttokens_per_s\ttrunk_B_per_step\texpert_B_per_step\ttable_B_per_step\tstep_B\tread_s_per_step\tt_device_s\tstep_vs_device\ttokens_per_s_vs_B1\tstep_B_vs_B1\tstep_s_vs_B1\ttrunk_vs_B1\texpert_vs_B1\ttable_vs_B1\tpeak_rss_B\tplan_total_B\tload_s\tload1\tcpu_busy\terror");
    let mut base: BTreeMap<String, Step> = BTreeMap::new();
    for p in points {
        let flags = budget_flags(p.mem_gb).join(" ");
        let flags = if flags.is_empty() { "-".into() } else { flags };
        let idle = p.idle.as_ref().map_or("-\t-".into(), |i| {
            format!("{:.2}\t{:.3}", i.load1, i.cpu_busy)
        });
        let Some(s) = p.step() else {
            let _ = writeln!(
                t,
                "{}\t{}\t{flags}\tnot measured: {}",
                p.budget.label(),
                p.b,
                p.error.replace('\t', " ")
            );
            continue;
        };
        if p.b == 1 {
            base.insert(p.budget.label(), s.clone());
        }
        let r = |a: f64, b: Option<f64>| {
            b.filter(|&b| b > 0.0)
                .map_or("-".into(), |b| format!("{:.3}", a / b))
        };
        let b1 = base.get(&p.budget.label());
        let full = p.full.as_ref();
        let t_dev = s.bytes() / dev_bps.max(1.0);
        let _ = writeln!(
            t,
            "{}\t{}\t{flags}\t{:.3}\t{:.4}\t{:.0}\t{:.0}\t{:.0}\t{:.0}\t{:.3}\t{:.3}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.1}\t{idle}\t-",
            p.budget.label(),
            p.b,
            s.seconds,
            s.tokens_per_s,
            s.trunk,
            s.expert,
            s.table,
            s.bytes(),
            s.read_s,
            t_dev,
            if t_dev > 0.0 { format!("{:.3}", s.seconds / t_dev) } else { "-".into() },
            r(s.tokens_per_s, b1.map(|x| x.tokens_per_s)),
            r(s.bytes(), b1.map(Step::bytes)),
            r(s.seconds, b1.map(|x| x.seconds)),
            r(s.trunk, b1.map(|x| x.trunk)),
            r(s.expert, b1.map(|x| x.expert)),
            r(s.table, b1.map(|x| x.table)),
            full.map_or(0, |f| f.peak_rss),
            full.map_or(0, |f| f.plan_total),
            full.map_or(0.0, |f| f.load_s),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(sweeps: u64, trunk: u64, expert: u64, decode_s: f64) -> Totals {
        Totals {
            trunk,
            expert,
            table: 10 * sweeps,
            decode_s,
            sweeps,
            tokens: 4 * sweeps,
            ..Totals::default()
        }
    }

    #[test]
    fn a_step_is_the_difference_of_the_two_runs() {
        // --gen 1: one sweep, no forward; --gen 3: two forwards of 2 s.
        let one = totals(1, 1000, 500, 0.0);
        let full = totals(3, 1400, 900, 4.0);
        let s = Step::between(&one, &full).unwrap();
        assert_eq!((s.trunk, s.expert, s.table), (200.0, 200.0, 10.0));
        assert_eq!(s.seconds, 2.0);
        assert_eq!(s.tokens_per_s, 2.0); // 4 sequences per sweep, 2 s a sweep
        assert!(Step::between(&full, &one).is_none());
        assert!(Step::between(&one, &one).is_none());
    }

    #[test]
    fn prompts_differ() {
        assert_eq!(prompt(0).len(), PROMPT_LEN);
        let all: Vec<Vec<u32>> = (0..8).map(prompt).collect();
        for i in 0..8 {
            for j in 0..i {
                assert_ne!(all[i], all[j]);
            }
        }
        assert!(all.iter().flatten().all(|&x| x < 1000));
        assert_eq!(batch_file(2).lines().count(), 2);
        assert!(batch_file(1).starts_with("{\"ids\": [1"));
    }

    #[test]
    fn report_totals_and_hashes() {
        let v: Value = serde_json::from_str(
            r#"{"error": null, "trunk": {"bytes_read": 7, "read_seconds": 0.5},
            "expert_cache": {"bytes_read": 9, "read_seconds": 0.25},
            "io": {"embedding_bytes_read": 1, "lm_head_bytes_read": 2, "model_table_read_seconds": 0.25},
            "timing": {"decode_seconds": 3.0, "prefill_seconds": 1.0, "load_seconds": 2.0},
            "batch": {"sweeps": 2, "tokens": 4}, "memory": {"peak_rss_bytes": 5, "plan": {"total": 6}}}"#,
        )
        .unwrap();
        let out = "{\"index\":0,\"logits_hash\":\"aa\"}\n{\"index\":1,\"logits_hash\":\"bb\"}\n";
        let t = Totals::from_report(&v, out).unwrap();
        assert_eq!((t.trunk, t.expert, t.table, t.sweeps), (7, 9, 3, 2));
        assert_eq!(t.read_s(), 1.0);
        assert_eq!(t.hashes.get(&1).map(String::as_str), Some("bb"));
        let mut bad = v.clone();
        bad["batch"] = Value::Null;
        assert!(Totals::from_report(&bad, "")
            .unwrap_err()
            .contains("batch.sweeps"));
    }
}
