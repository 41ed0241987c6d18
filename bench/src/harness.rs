//! The end-to-end benchmark (ENGINE.md §7): measure the machine's limits, then run `k3` on a
//! synthetic checkpoint at several memory budgets and report every figure against those
//! limits. Driven by `cargo xtask bench` (xtask/src/bench.rs) through the `roofline` binary.
//!
//! Order of a run:
//! 1. the machine description, `k3 --version`, and `k3 inspect --json` for the byte ledger
//!    (what one decode step multiplies: [`StepBytes`]);
//! 2. an idle check, then the device read bandwidth with the engine's own patterns
//!    ([`crate::device`]: O_DIRECT 17,547,264-byte random reads at QD1 and QD16, whole-layer
//!    sequential reads, the same split over threads) — the best pattern is the device figure;
//! 3. the memory bandwidth ([`crate::membw`]) at 1 thread and at the run's thread count — the
//!    best is the memory figure (so no ratio against either can flatter the engine);
//! 4. for each budget (`resident`, `floor` = the smallest `--mem-gb` the plan accepts, found
//!    by bisection; `mid` = halfway between the floor and the resident plan; or a number of GB)
//!    `reps` runs of `k3 <model> --ids … --gen … --threads … --out run.json`, each after an
//!    idle check, with the device's read counter sampled around it;
//! 5. per budget: s/token median/min/max, bytes read per token, achieved MB/s against the
//!    device figure, I/O share, weights multiplied per second against the memory bandwidth,
//!    peak RSS against the plan, the roofline ratio ([`Roofline`]), and one logits hash that
//!    must be the same at every budget.

use crate::device::{self, Measurement, Target, ENGINE_QUEUE_DEPTH, KDA_LAYER_BYTES};
use crate::roofline::{Roofline, RunFigures, Spread, StepBytes};
use crate::{idle, machine, membw};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A memory budget to run at.
#[derive(Clone, Debug, PartialEq)]
pub enum Budget {
    /// No budget flag: the engine's `auto` plan, everything resident when it fits.
    Resident,
    /// Halfway between the floor and the resident plan's total.
    Mid,
    /// The smallest `--mem-gb` the plan accepts (bisection to 0.05 GB).
    Floor,
    /// `--mem-gb X`.
    Gb(f64),
}

impl Budget {
    /// Parses `resident`, `mid`, `floor` or a positive number of GB.
    pub fn parse(s: &str) -> Result<Budget, String> {
        match s.trim() {
            "resident" => Ok(Budget::Resident),
            "mid" => Ok(Budget::Mid),
            "floor" => Ok(Budget::Floor),
            x => match x.parse::<f64>() {
                Ok(g) if g.is_finite() && g > 0.0 => Ok(Budget::Gb(g)),
                _ => Err(format!(
                    "--budgets: `{x}` is not `resident`, `mid`, `floor` or a positive number of GB"
                )),
            },
        }
    }

    /// The label in the result files.
    pub fn label(&self) -> String {
        match self {
            Budget::Resident => "resident".into(),
            Budget::Mid => "mid".into(),
            Budget::Floor => "floor".into(),
            Budget::Gb(g) => format!("{g}GB"),
        }
    }
}

/// The goals and the anchors (two existing engines measured side by side on this machine, on
/// the default 4-layer 64-expert synthetic checkpoint, prompt of 5 ids, 6 generated): s/token.
pub fn goal_of(b: &Budget, floor_gb: Option<f64>) -> (&'static str, &'static str) {
    const ANCHOR_FLOOR_GB: f64 = 7.4;
    match b {
        Budget::Resident => ("0.8", "1.4-1.9"),
        Budget::Gb(g) if (g - ANCHOR_FLOOR_GB).abs() < 1e-9 => ("2.9", "3.8-4.7"),
        Budget::Floor if floor_gb.is_some_and(|f| (f - ANCHOR_FLOOR_GB).abs() < 0.05) => {
            ("2.9", "3.8-4.7")
        }
        _ => ("-", "-"),
    }
}

/// Options of the benchmark (see the `roofline` binary's usage).
#[derive(Clone, Debug)]
pub struct Options {
    pub k3: PathBuf,
    pub model: PathBuf,
    pub budgets: Vec<Budget>,
    pub reps: usize,
    pub ids: String,
    pub gen: usize,
    pub threads: usize,
    pub prefill_chunk: usize,
    pub k3_args: Vec<String>,
    pub floor_gb: Option<f64>,
    pub wait_idle: u64,
    pub wait_idle_run: u64,
    pub require_idle: bool,
    pub device_rounds: usize,
    pub seq_bytes: u64,
    pub skip_device: bool,
    pub membw_bytes: usize,
    pub drop_caches: bool,
    pub out_dir: PathBuf,
    pub work_dir: PathBuf,
    pub command: String,
    /// Routed experts per MoE layer and top-k (from `k3 inspect`), for the batch pattern.
    pub layer_experts: u64,
    pub top_k: usize,
}

/// Failure of the benchmark: exit code and message.
pub type Fail = (i32, String);

/// One k3 run.
#[derive(Clone, Debug)]
pub struct RunRow {
    pub budget: String,
    pub rep: usize,
    pub flags: String,
    pub exit: i32,
    pub figures: Option<RunFigures>,
    pub error: String,
    pub idle: Option<idle::IdleReport>,
    pub device_read_bytes: Option<u64>,
    pub harness_wall_s: f64,
}

/// One budget's outcome.
#[derive(Clone, Debug)]
pub struct BudgetResult {
    pub budget: Budget,
    pub mem_gb: Option<f64>,
    pub runs: Vec<RunRow>,
    /// Why the budget did not run (refused by the engine, no floor found, …).
    pub skipped: Option<String>,
}

pub fn say(s: &str) {
    eprintln!("bench: {s}");
}

pub fn k3_output(k3: &Path, args: &[&str]) -> Result<String, Fail> {
    let out = Command::new(k3)
        .args(args)
        .output()
        .map_err(|e| (2, format!("{}: cannot run: {e}", k3.display())))?;
    if !out.status.success() {
        return Err((
            1,
            format!(
                "{} {}: exit {:?}: {}",
                k3.display(),
                args.join(" "),
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The budget flags of one run.
pub fn budget_flags(mem_gb: Option<f64>) -> Vec<String> {
    match mem_gb {
        Some(g) => vec!["--mem-gb".into(), format!("{g:.2}")],
        None => Vec::new(),
    }
}

fn run_args(o: &Options, json: &Path, mem_gb: Option<f64>, gen: usize) -> Vec<String> {
    k3_args(o, &["--ids".into(), o.ids.clone()], gen, mem_gb, json)
}

/// k3's arguments for a timed run: the model, `input` (the prompt or batch flags), `--gen`,
/// the options' threads and prefill chunk, `--no-progress`, the budget flags, the extra
/// `--k3-arg`s and `--out json`.
pub fn k3_args(
    o: &Options,
    input: &[String],
    gen: usize,
    mem_gb: Option<f64>,
    json: &Path,
) -> Vec<String> {
    let mut a = vec![o.model.display().to_string()];
    a.extend(input.iter().cloned());
    a.extend([
        "--gen".into(),
        gen.to_string(),
        "--threads".into(),
        o.threads.to_string(),
        "--prefill-chunk".into(),
        o.prefill_chunk.to_string(),
        "--no-progress".into(),
    ]);
    a.extend(budget_flags(mem_gb));
    a.extend(o.k3_args.iter().cloned());
    a.push("--out".into());
    a.push(json.display().to_string());
    a
}

/// Whether the plan accepts `--mem-gb g`: runs k3 until its trunk line (printed after the plan
/// check, ENGINE.md §6) or its exit. Exit 3 = refused; exit 2 = the flag itself is refused.
fn plan_accepts(
    o: &Options,
    g: f64,
    args: &dyn Fn(&Path, f64) -> Vec<String>,
) -> Result<bool, Fail> {
    let json = o.work_dir.join("floor-probe.json");
    let mut child = Command::new(&o.k3)
        // The same positions as the timed runs: the plan depends on them.
        .args(args(&json, g))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| (2, format!("{}: cannot run: {e}", o.k3.display())))?;
    let mut text = String::new();
    let mut accepted = false;
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            text.push_str(&line);
            text.push('\n');
            if line.starts_with("trunk:") {
                accepted = true;
                break;
            }
        }
    }
    if accepted {
        // Our own child, stopped by its id.
        let _ = child.kill();
        let _ = child.wait();
        return Ok(true);
    }
    let status = child
        .wait()
        .map_err(|e| (1, format!("waiting for k3: {e}")))?;
    match status.code() {
        Some(0) => Ok(true),
        Some(3) => Ok(false),
        c => Err((
            2,
            format!(
                "k3 --mem-gb {g:.2}: exit {c:?} while probing the floor: {}",
                text.trim()
            ),
        )),
    }
}

/// The smallest `--mem-gb` (to 0.05 GB) the plan accepts for the timed runs' command line,
/// between 0.25 and `hi`.
fn find_floor(o: &Options, hi: f64) -> Result<f64, Fail> {
    find_floor_with(o, hi, &|json, g| run_args(o, json, Some(g), o.gen))
}

/// The smallest `--mem-gb` (to 0.05 GB, between 0.25 and `hi`) the plan accepts for the k3
/// arguments `args(report_json, gb)` gives (the same positions and sequences as the timed
/// runs: the plan depends on them). Errors: exit 3 when even `hi` is refused; exit 2 when k3
/// refuses the flag itself.
pub fn find_floor_with(
    o: &Options,
    hi: f64,
    args: &dyn Fn(&Path, f64) -> Vec<String>,
) -> Result<f64, Fail> {
    let (mut lo, mut hi) = (0.25f64, hi.max(0.5));
    say(&format!("floor: bisecting --mem-gb in [{lo:.2}, {hi:.2}]"));
    if !plan_accepts(o, hi, args)? {
        return Err((3, format!("the plan refuses even --mem-gb {hi:.2}")));
    }
    if plan_accepts(o, lo, args)? {
        return Ok(lo);
    }
    while hi - lo > 0.05 {
        let m = ((lo + hi) / 2.0 * 100.0).round() / 100.0;
        let ok = plan_accepts(o, m, args)?;
        say(&format!(
            "floor: --mem-gb {m:.2} {}",
            if ok { "accepted" } else { "refused" }
        ));
        if ok {
            hi = m;
        } else {
            lo = m;
        }
    }
    Ok(hi)
}

fn drop_caches() -> Result<(), String> {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| format!("/proc/sys/vm/drop_caches: {e} (needs root)"))
}

fn one_run(o: &Options, b: &Budget, mem_gb: Option<f64>, rep: usize) -> Result<RunRow, Fail> {
    let label = b.label();
    let json = o.work_dir.join(format!("{label}-{rep}.json"));
    let log = o.work_dir.join(format!("{label}-{rep}.stderr"));
    let _ = std::fs::remove_file(&json);
    let dev = idle::device_of(&o.model);
    let limits = idle::IdleLimits::default();
    if o.drop_caches {
        drop_caches().map_err(|e| (3, e))?;
    }
    let (idle_r, quiet) = idle::wait_for_idle(
        Duration::from_secs(2),
        Duration::from_secs(o.wait_idle_run),
        dev.as_deref(),
        limits,
        |_| {},
    )
    .map_err(|e| (4, format!("idle check: {e}")))?;
    if !quiet && o.require_idle {
        return Err((
            3,
            format!(
                "the machine did not become idle within {} s before run {label} #{rep}: {}",
                o.wait_idle_run,
                idle_r.describe(limits)
            ),
        ));
    }
    let args = run_args(o, &json, mem_gb, o.gen);
    let err_file =
        std::fs::File::create(&log).map_err(|e| (4, format!("{}: {e}", log.display())))?;
    let s0 = dev.as_deref().and_then(idle::device_sectors_read);
    let t0 = Instant::now();
    let status = Command::new(&o.k3)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(err_file)
        .status()
        .map_err(|e| (2, format!("{}: cannot run: {e}", o.k3.display())))?;
    let wall = t0.elapsed().as_secs_f64();
    let s1 = dev.as_deref().and_then(idle::device_sectors_read);
    let exit = status.code().unwrap_or(-1);
    let (figures, error) = match std::fs::read(&json) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => match RunFigures::from_report(&v, o.prefill_chunk) {
                Ok(f) if exit == 0 => (Some(f), String::new()),
                Ok(_) => (None, format!("exit {exit}")),
                Err(e) => (None, format!("{}: {e}", json.display())),
            },
            Err(e) => (None, format!("{}: {e}", json.display())),
        },
        Err(e) => (None, format!("{}: {e}", json.display())),
    };
    let error = if exit != 0 {
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        let last = tail
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        format!("exit {exit}: {last}")
    } else {
        error
    };
    Ok(RunRow {
        budget: label,
        rep,
        flags: budget_flags(mem_gb).join(" "),
        exit,
        figures,
        error,
        idle: Some(idle_r),
        device_read_bytes: s0.zip(s1).map(|(a, b)| (b.saturating_sub(a)) * 512),
        harness_wall_s: wall,
    })
}

/// Measures the device with the engine's patterns over the model's shards; returns every
/// measurement (the best is the device figure).
pub fn measure_device(o: &Options, files: &[PathBuf]) -> Result<Vec<(usize, Measurement)>, Fail> {
    let targets = open_targets(files)?;
    let dev = idle::device_of(&files[0]);
    let io = |e: std::io::Error| (4, e.to_string());
    let mut out = Vec::new();
    // Fresh offsets each invocation, so a cache below the guest (a VM host) has not seen
    // them; the seed is recorded in the TSV.
    let seed = device_seed();
    for round in 0..o.device_rounds {
        let s = seed.wrapping_add(round as u64 * 1000);
        let req1 = device::random_requests(&targets, 64, s);
        let req16 = device::random_requests(&targets, 256, s + 1);
        // The engine's own batches: top-k of one layer's experts, in file-offset order.
        let batches = device::expert_batches(&targets, 16, o.layer_experts, o.top_k, s + 2);
        let mut b1 = device::random_expert(&targets, &batches, 1, dev.as_deref()).map_err(io)?;
        b1.pattern = "expert_batch";
        let mut b16 = device::random_expert(&targets, &batches, ENGINE_QUEUE_DEPTH, dev.as_deref())
            .map_err(io)?;
        b16.pattern = "expert_batch";
        let mut ms = vec![
            device::random_expert(&targets, &req1, 1, dev.as_deref()).map_err(io)?,
            device::random_expert(&targets, &req16, ENGINE_QUEUE_DEPTH, dev.as_deref())
                .map_err(io)?,
            b1,
            b16,
            device::sequential_layer(&targets, KDA_LAYER_BYTES, o.seq_bytes, 0, dev.as_deref())
                .map_err(io)?,
        ];
        for n in [4, 16] {
            ms.push(
                device::sequential_layer(&targets, KDA_LAYER_BYTES, o.seq_bytes, n, dev.as_deref())
                    .map_err(io)?,
            );
        }
        for m in ms {
            say(&format!(
                "device: round {} {:<23} QD{:<2} {:>4} reads {:>6.2} GB {:>6.2} s {:>6.0} MB/s",
                round + 1,
                m.pattern,
                m.queue_depth,
                m.reads,
                m.bytes as f64 / 1e9,
                m.seconds,
                m.mb_per_s()
            ));
            out.push((round + 1, m));
        }
    }
    Ok(out)
}

/// Opens the shards for the device patterns (exit 2 naming the file that cannot be opened).
pub fn open_targets(files: &[PathBuf]) -> Result<Vec<Target>, Fail> {
    files
        .iter()
        .map(|p| device::open_target(p))
        .collect::<Result<_, _>>()
        .map_err(|e| (2, e.to_string()))
}

/// The seed of the device measurement's random offsets (from the clock).
pub fn device_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs())
}

/// Everything one benchmark measured.
pub struct Outcome {
    pub header: Vec<(String, String)>,
    pub step: StepBytes,
    pub device: Vec<(usize, Measurement)>,
    /// The device figure every ratio uses: the larger of `device_patterns_bps` and
    /// `engine_read_bps`.
    pub device_bps: f64,
    /// The best device pattern measured by the harness.
    pub device_patterns_bps: f64,
    /// The fastest the engine's own reads ran in any run (bytes ÷ read seconds). When it
    /// beats every pattern (data a cache below the guest keeps warm, an access pattern the
    /// device favours), it is the device figure, so no ratio can flatter the engine.
    pub engine_read_bps: f64,
    pub membw: Vec<membw::MemBw>,
    pub mem_bps: f64,
    pub budgets: Vec<BudgetResult>,
    pub floor_gb: Option<f64>,
    pub idle_before: idle::IdleReport,
    pub idle_after: idle::IdleReport,
}

/// The first lines of a result file's header: the command, the working directory, the machine,
/// the storage under `shard`, k3's `--version` and the model.
pub fn base_header(o: &Options, shard: &Path, version: &str) -> Vec<(String, String)> {
    let mut header: Vec<(String, String)> = vec![
        ("command".into(), o.command.clone()),
        (
            "cwd".into(),
            std::env::current_dir().map_or("?".into(), |p| p.display().to_string()),
        ),
    ];
    header.extend(machine::describe());
    header.extend(machine::describe_storage(shard));
    header.push((
        "k3".into(),
        format!("{} ({})", version.trim(), o.k3.display()),
    ));
    header.push(("model".into(), o.model.display().to_string()));
    header
}

/// Runs the whole benchmark.
pub fn run(o: &Options) -> Result<Outcome, Fail> {
    std::fs::create_dir_all(&o.work_dir)
        .map_err(|e| (4, format!("{}: {e}", o.work_dir.display())))?;
    let version = k3_output(&o.k3, &["--version"])?;
    let inspect = k3_output(
        &o.k3,
        &["inspect", &o.model.display().to_string(), "--json"],
    )?;
    let inspect: Value = serde_json::from_str(&inspect)
        .map_err(|e| (1, format!("k3 inspect --json: not JSON: {e}")))?;
    let step = StepBytes::from_inspect(&inspect).map_err(|e| (1, format!("k3 inspect: {e}")))?;
    let files =
        device::expand_inputs(std::slice::from_ref(&o.model)).map_err(|e| (2, e.to_string()))?;
    let dev = idle::device_of(&files[0]);
    let limits = idle::IdleLimits::default();
    let mut o = o.clone();
    o.layer_experts = inspect["config"]["num_experts"].as_u64().unwrap_or(64);
    o.top_k = inspect["config"]["num_experts_per_token"]
        .as_u64()
        .unwrap_or(16) as usize;
    let o = &o;

    let mut header = base_header(o, &files[0], &version);
    header.push((
        "model_bytes".into(),
        format!(
            "trunk {} model_tables {} experts {} (resident model {})",
            step.trunk,
            step.model_tables,
            step.all_expert_bytes,
            step.resident_model()
        ),
    ));
    header.push((
        "step_multiplies".into(),
        format!(
            "{} B = trunk {} + lm_head {} + embedding row {} + {} experts x {}",
            step.multiplied(),
            step.trunk,
            step.lm_head,
            step.embedding_row,
            step.experts_per_token,
            step.expert_bytes
        ),
    ));
    header.push((
        "prompt".into(),
        format!(
            "--ids {} --gen {} --threads {} --prefill-chunk {}{}",
            o.ids,
            o.gen,
            o.threads,
            o.prefill_chunk,
            if o.k3_args.is_empty() {
                String::new()
            } else {
                format!(" {}", o.k3_args.join(" "))
            }
        ),
    ));

    say(&format!(
        "waiting up to {} s for an idle machine (cpu busy <= {}, disk util <= {})",
        o.wait_idle, limits.max_cpu_busy, limits.max_disk_util
    ));
    let (idle_before, quiet) = idle::wait_for_idle(
        Duration::from_secs(2),
        Duration::from_secs(o.wait_idle),
        dev.as_deref(),
        limits,
        |r| say(&format!("busy: {}", r.describe(limits))),
    )
    .map_err(|e| (4, format!("idle check: {e}")))?;
    say(&format!("before: {}", idle_before.describe(limits)));
    if !quiet {
        if o.require_idle {
            return Err((
                3,
                format!(
                    "the machine did not become idle within {} s: {}",
                    o.wait_idle,
                    idle_before.describe(limits)
                ),
            ));
        }
        say("warning: the machine is busy; measuring anyway and recording it");
    }

    // The machine's limits, measured now.
    let device = if o.skip_device {
        Vec::new()
    } else {
        measure_device(o, &files)?
    };
    let device_patterns_bps = device
        .iter()
        .map(|(_, m)| m.bytes as f64 / m.seconds.max(1e-9))
        .fold(0.0, f64::max);
    let buf = membw::buffer(o.membw_bytes);
    let mut mbw = Vec::new();
    let mut counts = vec![1, o.threads];
    counts.dedup();
    for t in counts {
        let m = membw::measure(&buf, t, 5);
        say(&format!(
            "membw: {t} thread(s): best {:.1} GB/s, median {:.1} GB/s",
            m.best_bytes_per_s / 1e9,
            m.median_bytes_per_s / 1e9
        ));
        mbw.push(m);
    }
    drop(buf);
    let mem_bps = mbw.iter().map(|m| m.best_bytes_per_s).fold(0.0, f64::max);

    // The budgets: resident first (the mid budget needs its plan), then the rest in order.
    let mut results: Vec<BudgetResult> = Vec::new();
    let mut floor_gb = o.floor_gb;
    let mut resident_plan_gb: Option<f64> = None;
    let mut order: Vec<&Budget> = o
        .budgets
        .iter()
        .filter(|b| **b == Budget::Resident)
        .collect();
    order.extend(o.budgets.iter().filter(|b| **b == Budget::Floor));
    order.extend(
        o.budgets
            .iter()
            .filter(|b| !matches!(b, Budget::Resident | Budget::Floor)),
    );
    for b in order {
        let mem_gb = match b {
            Budget::Resident => Ok(None),
            Budget::Gb(g) => Ok(Some(*g)),
            Budget::Floor | Budget::Mid => {
                let f = match floor_gb {
                    Some(f) => Ok(f),
                    None => {
                        let hi = resident_plan_gb
                            .map(|g| g + 0.5)
                            .unwrap_or(step.resident_model() as f64 / 1e9 + 1.0);
                        find_floor(o, hi)
                    }
                };
                match f {
                    Ok(f) => {
                        floor_gb = Some(f);
                        if *b == Budget::Floor {
                            Ok(Some(f))
                        } else {
                            match resident_plan_gb {
                                Some(r) => Ok(Some(((f + r) / 2.0 * 100.0).round() / 100.0)),
                                None => Err(
                                    "needs the resident run's plan (add `resident` to --budgets)"
                                        .to_string(),
                                ),
                            }
                        }
                    }
                    Err((_, e)) => Err(e),
                }
            }
        };
        let mem_gb = match mem_gb {
            Ok(g) => g,
            Err(e) => {
                say(&format!("{}: skipped: {e}", b.label()));
                results.push(BudgetResult {
                    budget: b.clone(),
                    mem_gb: None,
                    runs: Vec::new(),
                    skipped: Some(e),
                });
                continue;
            }
        };
        let mut runs = Vec::new();
        let mut skipped = None;
        for rep in 1..=o.reps {
            let r = one_run(o, b, mem_gb, rep)?;
            match &r.figures {
                Some(f) => say(&format!(
                    "{} #{rep}: {:.4} s/token, {:.3} GB read/token, peak RSS {:.2} GB (plan {:.2} GB), hash {}{}",
                    r.budget,
                    f.s_per_token,
                    f.bytes_read_per_token() / 1e9,
                    f.peak_rss as f64 / 1e9,
                    f.plan_total as f64 / 1e9,
                    f.logits_hash,
                    r.idle.as_ref().map_or(String::new(), |i| format!(", load1 {:.2} cpu_busy {:.2} before", i.load1, i.cpu_busy))
                )),
                None => say(&format!("{} #{rep}: FAILED: {}", r.budget, r.error)),
            }
            if *b == Budget::Resident {
                if let Some(f) = &r.figures {
                    resident_plan_gb = Some(f.plan_total as f64 / 1e9);
                }
            }
            // A budget flag the engine refuses outright is not worth repeating.
            let refused = r.exit == 2 && r.figures.is_none();
            if refused {
                skipped = Some(r.error.clone());
            }
            runs.push(r);
            if refused {
                break;
            }
        }
        results.push(BudgetResult {
            budget: b.clone(),
            mem_gb,
            runs,
            skipped,
        });
    }
    let idle_after = idle::sample(Duration::from_secs(2), dev.as_deref())
        .map_err(|e| (4, format!("idle check: {e}")))?;
    // Back in the order asked for.
    results.sort_by_key(|r| o.budgets.iter().position(|b| *b == r.budget));
    let engine_read_bps = results
        .iter()
        .flat_map(|b| b.runs.iter())
        .filter_map(|r| r.figures.as_ref().map(|f| f.best_read_rate()))
        .fold(0.0, f64::max);
    Ok(Outcome {
        header,
        step,
        device,
        device_bps: device_patterns_bps.max(engine_read_bps),
        device_patterns_bps,
        engine_read_bps,
        membw: mbw,
        mem_bps,
        budgets: results,
        floor_gb,
        idle_before,
        idle_after,
    })
}

/// One budget's summary row (medians over its successful runs).
#[derive(Clone, Debug)]
pub struct Summary {
    pub label: String,
    pub flags: String,
    pub ok: usize,
    pub runs: usize,
    pub spt: Spread,
    pub trunk_read: f64,
    pub expert_read: f64,
    pub table_read: f64,
    pub read: f64,
    pub achieved_bps: f64,
    pub engine_read_bps: Option<f64>,
    pub io_share: f64,
    pub io_s_per_token: f64,
    pub trunk_wait_per_token: f64,
    pub read_ahead: String,
    pub multiplied_bps: f64,
    pub roofline: Roofline,
    /// The roofline against the best device pattern alone (without the engine's own reads).
    pub roofline_patterns: Roofline,
    pub peak_rss: u64,
    pub plan_total: u64,
    pub load_s: f64,
    pub prefill_s: f64,
    pub hashes: Vec<String>,
    pub max_load1: f64,
    pub max_cpu_busy: f64,
    pub layout: String,
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    Spread::of(&v).map_or(f64::NAN, |s| s.median)
}

/// The summary of one budget, or None when no run succeeded.
pub fn summarize(r: &BudgetResult, out: &Outcome) -> Option<Summary> {
    let ok: Vec<&RunFigures> = r.runs.iter().filter_map(|x| x.figures.as_ref()).collect();
    let spt = Spread::of(&ok.iter().map(|f| f.s_per_token).collect::<Vec<_>>())?;
    let trunk_read = median(ok.iter().map(|f| f.trunk_bytes_per_token));
    let expert_read = median(ok.iter().map(|f| f.expert_bytes_per_token));
    let table_read = median(ok.iter().map(|f| f.table_bytes_per_token));
    let read = median(ok.iter().map(|f| f.bytes_read_per_token()));
    let multiplied = out.step.multiplied() as f64;
    let mut hashes: Vec<String> = ok.iter().map(|f| f.logits_hash.clone()).collect();
    hashes.sort();
    hashes.dedup();
    let rates: Vec<f64> = ok.iter().filter_map(|f| f.read_rate()).collect();
    let f0 = ok[0];
    Some(Summary {
        label: r.budget.label(),
        flags: r.runs.first().map_or(String::new(), |x| x.flags.clone()),
        ok: ok.len(),
        runs: r.runs.len(),
        spt,
        trunk_read,
        expert_read,
        table_read,
        read,
        achieved_bps: read / spt.median,
        engine_read_bps: Spread::of(&rates).map(|s| s.median),
        io_share: median(ok.iter().map(|f| f.io_share)),
        io_s_per_token: median(ok.iter().map(|f| f.io_s_per_token())),
        trunk_wait_per_token: median(ok.iter().map(|f| f.trunk_wait_per_token())),
        read_ahead: format!("{}/{}", f0.trunk_reads_ahead, f0.trunk_reads),
        multiplied_bps: multiplied / spt.median,
        roofline: Roofline::new(read, out.device_bps, multiplied, out.mem_bps, spt.median),
        roofline_patterns: Roofline::new(
            read,
            out.device_patterns_bps,
            multiplied,
            out.mem_bps,
            spt.median,
        ),
        peak_rss: ok.iter().map(|f| f.peak_rss).max().unwrap_or(0),
        plan_total: ok.iter().map(|f| f.plan_total).max().unwrap_or(0),
        load_s: median(ok.iter().map(|f| f.load_s)),
        prefill_s: median(ok.iter().map(|f| f.prefill_s)),
        hashes,
        max_load1: r
            .runs
            .iter()
            .filter_map(|x| x.idle.as_ref().map(|i| i.load1))
            .fold(0.0, f64::max),
        max_cpu_busy: r
            .runs
            .iter()
            .filter_map(|x| x.idle.as_ref().map(|i| i.cpu_busy))
            .fold(0.0, f64::max),
        layout: format!(
            "pinned {}/{} ring {} cache_slots {} plan trunk {} ring {} tables {} cache {}; bytes/token from {}",
            f0.pinned_layers,
            f0.layers,
            f0.ring_slots,
            f0.cache_slots,
            f0.plan_trunk_resident,
            f0.plan_trunk_ring,
            f0.plan_model_tables,
            f0.plan_expert_cache,
            if f0.per_step_bytes {
                "per-step counters"
            } else {
                "run totals / forward passes"
            }
        ),
    })
}

fn header_text(out: &Outcome, title: &str) -> String {
    let limits = idle::IdleLimits::default();
    let mut t = String::new();
    let _ = writeln!(t, "# {title}");
    for (k, v) in &out.header {
        let _ = writeln!(t, "# {k}\t{v}");
    }
    let _ = writeln!(t, "# idle_before\t{}", out.idle_before.describe(limits));
    let _ = writeln!(t, "# idle_after\t{}", out.idle_after.describe(limits));
    let _ = writeln!(
        t,
        "# idle_limits\tcpu_busy <= {} disk_util <= {}",
        limits.max_cpu_busy, limits.max_disk_util
    );
    let _ = writeln!(
        t,
        "# device_MBps\t{:.1}\t(the device figure: the larger of the best read pattern, {:.1} MB/s, rows in the -runs file, and the fastest the engine's own reads ran in a run, {:.1} MB/s; all measured in this run)",
        out.device_bps / 1e6,
        out.device_patterns_bps / 1e6,
        out.engine_read_bps / 1e6
    );
    let _ = writeln!(
        t,
        "# membw_GBps\t{:.2}\t(best streaming read over thread counts, measured in this run)",
        out.mem_bps / 1e9
    );
    if let Some(f) = out.floor_gb {
        let _ = writeln!(
            t,
            "# floor_gb\t{f:.2}\t(smallest --mem-gb the plan accepts, to 0.05 GB)"
        );
    }
    t
}

/// The summary TSV: one row per budget.
pub fn summary_tsv(out: &Outcome) -> String {
    let mut t = header_text(
        out,
        "k3 end-to-end benchmark: per-budget summary (bench/src/harness.rs)",
    );
    let _ = writeln!(t, "# GB = 1e9 B, MB = 1e6 B; per-token figures are decode steps (the first step carries the prefill); bytes per token from per-step counters (or run totals / forward passes: see layout); decode_io_s_per_token = each kind's read seconds x the share of its bytes one decode token reads (estimate); io_share = the engine's whole-run figure; roofline_ratio = max(read_per_token / device, multiplied_per_token / membw) / s_per_token_median");
    let _ = writeln!(
        t,
        "budget\tflags\truns_ok\ts_per_token_median\ts_per_token_min\ts_per_token_max\tgoal_s_per_token\tanchor_s_per_token\ttrunk_read_B_per_token\texpert_read_B_per_token\ttable_read_B_per_token\tread_B_per_token\tachieved_MBps\tdevice_MBps\tachieved_vs_device\tengine_read_MBps\tio_share\tdecode_io_s_per_token\tdecode_io_share\ttrunk_wait_s_per_token\ttrunk_reads_ahead\tmultiplied_B_per_token\tmultiplied_GBps\tmembw_GBps\tmultiplied_vs_membw\tt_device_s\tt_memory_s\tbound\troofline_ratio\troofline_ratio_vs_patterns\tpeak_rss_B\tplan_total_B\trss_vs_plan\tload_s\tprefill_s\tlogits_hash\tmax_load1\tmax_cpu_busy\tlayout"
    );
    for r in &out.budgets {
        let (goal, anchor) = goal_of(&r.budget, out.floor_gb);
        match summarize(r, out) {
            Some(s) => {
                let _ = writeln!(
                    t,
                    "{}\t{}\t{}/{}\t{:.4}\t{:.4}\t{:.4}\t{goal}\t{anchor}\t{:.0}\t{:.0}\t{:.0}\t{:.0}\t{:.1}\t{:.1}\t{:.3}\t{}\t{:.3}\t{:.4}\t{:.3}\t{:.4}\t{}\t{}\t{:.2}\t{:.2}\t{:.3}\t{:.4}\t{:.4}\t{}\t{:.3}\t{:.3}\t{}\t{}\t{:.3}\t{:.2}\t{:.2}\t{}\t{:.2}\t{:.2}\t{}",
                    s.label,
                    if s.flags.is_empty() { "-" } else { &s.flags },
                    s.ok,
                    s.runs,
                    s.spt.median,
                    s.spt.min,
                    s.spt.max,
                    s.trunk_read,
                    s.expert_read,
                    s.table_read,
                    s.read,
                    s.achieved_bps / 1e6,
                    out.device_bps / 1e6,
                    s.achieved_bps / out.device_bps,
                    s.engine_read_bps.map_or("-".into(), |b| format!("{:.1}", b / 1e6)),
                    s.io_share,
                    s.io_s_per_token,
                    s.io_s_per_token / s.spt.median,
                    s.trunk_wait_per_token,
                    s.read_ahead,
                    out.step.multiplied(),
                    s.multiplied_bps / 1e9,
                    out.mem_bps / 1e9,
                    s.multiplied_bps / out.mem_bps,
                    s.roofline.t_device,
                    s.roofline.t_memory,
                    s.roofline.bound(),
                    s.roofline.ratio,
                    s.roofline_patterns.ratio,
                    s.peak_rss,
                    s.plan_total,
                    s.peak_rss as f64 / s.plan_total.max(1) as f64,
                    s.load_s,
                    s.prefill_s,
                    s.hashes.join(","),
                    s.max_load1,
                    s.max_cpu_busy,
                    s.layout
                );
            }
            None => {
                let why = r
                    .skipped
                    .clone()
                    .or_else(|| {
                        r.runs
                            .iter()
                            .map(|x| x.error.clone())
                            .find(|e| !e.is_empty())
                    })
                    .unwrap_or_else(|| "no run".into());
                let _ = writeln!(
                    t,
                    "{}\t{}\t0/{}\t-\t-\t-\t{goal}\t{anchor}\tnot measured: {}",
                    r.budget.label(),
                    r.mem_gb.map_or("-".into(), |g| format!("--mem-gb {g:.2}")),
                    r.runs.len(),
                    why.replace('\t', " ")
                );
            }
        }
    }
    t
}

/// The detail TSV: every device pattern, memory bandwidth, and every k3 run.
pub fn runs_tsv(out: &Outcome) -> String {
    let mut t = header_text(
        out,
        "k3 end-to-end benchmark: every measurement (bench/src/harness.rs)",
    );
    let _ = writeln!(t, "# section device");
    let _ = writeln!(t, "round\tpattern\tblock_bytes\tqueue_depth\tdirect\treads\tbytes\tseconds\tMBps\tdevice_bytes");
    for (r, m) in &out.device {
        let _ = writeln!(
            t,
            "{r}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.4}\t{:.1}\t{}",
            m.pattern,
            m.block_bytes,
            m.queue_depth,
            u8::from(m.direct),
            m.reads,
            m.bytes,
            m.seconds,
            m.mb_per_s(),
            m.device_bytes.map_or("-".into(), |b| b.to_string())
        );
    }
    let _ = writeln!(t, "# section membw");
    let _ = writeln!(t, "threads\tbytes\treps\tbest_GBps\tmedian_GBps");
    for m in &out.membw {
        let _ = writeln!(
            t,
            "{}\t{}\t{}\t{:.2}\t{:.2}",
            m.threads,
            m.bytes,
            m.reps,
            m.best_bytes_per_s / 1e9,
            m.median_bytes_per_s / 1e9
        );
    }
    let _ = writeln!(t, "# section runs");
    let _ = writeln!(t, "budget\trep\tflags\texit\ts_per_token\twall_s\tload_s\tprefill_s\ttrunk_read_B_per_token\texpert_read_B_per_token\ttable_read_B_per_token\texpert_read_s\ttrunk_read_s\ttable_read_s\tio_share\texpert_hit_rate\tpeak_rss_B\tplan_total_B\tlogits_hash\tdevice_read_B\tload1_before\tcpu_busy_before\tdisk_util_before\terror");
    for b in &out.budgets {
        for r in &b.runs {
            let i = r.idle.as_ref();
            let idle_cols = format!(
                "{}\t{}\t{}",
                i.map_or("-".into(), |i| format!("{:.2}", i.load1)),
                i.map_or("-".into(), |i| format!("{:.3}", i.cpu_busy)),
                i.map_or("-".into(), |i| format!("{:.3}", i.disk_util))
            );
            let dev = r.device_read_bytes.map_or("-".into(), |b| b.to_string());
            match &r.figures {
                Some(f) => {
                    let _ = writeln!(
                        t,
                        "{}\t{}\t{}\t{}\t{:.4}\t{:.3}\t{:.3}\t{:.3}\t{:.0}\t{:.0}\t{:.0}\t{:.3}\t{:.3}\t{:.3}\t{:.4}\t{:.4}\t{}\t{}\t{}\t{dev}\t{idle_cols}\t-",
                        r.budget,
                        r.rep,
                        if r.flags.is_empty() { "-" } else { &r.flags },
                        r.exit,
                        f.s_per_token,
                        f.wall_s,
                        f.load_s,
                        f.prefill_s,
                        f.trunk_bytes_per_token,
                        f.expert_bytes_per_token,
                        f.table_bytes_per_token,
                        f.expert_read_s,
                        f.trunk_read_s,
                        f.table_read_s,
                        f.io_share,
                        f.expert_hit_rate,
                        f.peak_rss,
                        f.plan_total,
                        f.logits_hash
                    );
                }
                None => {
                    let _ = writeln!(
                        t,
                        "{}\t{}\t{}\t{}\t-\t{:.3}\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t{dev}\t{idle_cols}\t{}",
                        r.budget,
                        r.rep,
                        if r.flags.is_empty() { "-" } else { &r.flags },
                        r.exit,
                        r.harness_wall_s,
                        r.error.replace('\t', " ")
                    );
                }
            }
        }
    }
    t
}

/// The short summary printed at the end.
pub fn summary_text(out: &Outcome) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "device {:.0} MB/s (best of the patterns, {:.0}, and the engine's own reads, {:.0}), memory {:.1} GB/s; a decode step multiplies {:.2} GB",
        out.device_bps / 1e6,
        out.device_patterns_bps / 1e6,
        out.engine_read_bps / 1e6,
        out.mem_bps / 1e9,
        out.step.multiplied() as f64 / 1e9
    );
    for r in &out.budgets {
        let (goal, anchor) = goal_of(&r.budget, out.floor_gb);
        match summarize(r, out) {
            Some(s) => {
                let _ = writeln!(
                    t,
                    "{:<9} {:<14} {:.3} s/token [{:.3}, {:.3}] (goal {goal}, anchors {anchor})  read {:.2} GB/token ({:.0}% of device)  multiply {:.1} GB/s ({:.0}% of memory)  roofline {:.2} ({}-bound)  peak RSS {:.2} GB / plan {:.2} GB  reads {:.3} s/token ({:.0}% of a step)  hash {}",
                    s.label,
                    if s.flags.is_empty() { "(auto)" } else { &s.flags },
                    s.spt.median,
                    s.spt.min,
                    s.spt.max,
                    s.read / 1e9,
                    100.0 * s.achieved_bps / out.device_bps,
                    s.multiplied_bps / 1e9,
                    100.0 * s.multiplied_bps / out.mem_bps,
                    s.roofline.ratio,
                    s.roofline.bound(),
                    s.peak_rss as f64 / 1e9,
                    s.plan_total as f64 / 1e9,
                    s.io_s_per_token,
                    100.0 * s.io_s_per_token / s.spt.median,
                    s.hashes.join(",")
                );
            }
            None => {
                let _ = writeln!(
                    t,
                    "{:<9} not measured: {}",
                    r.budget.label(),
                    r.skipped
                        .clone()
                        .or_else(|| r
                            .runs
                            .iter()
                            .map(|x| x.error.clone())
                            .find(|e| !e.is_empty()))
                        .unwrap_or_default()
                );
            }
        }
    }
    t
}

/// The distinct logits hashes over every successful run (one when the promise holds).
pub fn all_hashes(out: &Outcome) -> Vec<String> {
    let mut h: Vec<String> = out
        .budgets
        .iter()
        .flat_map(|b| {
            b.runs
                .iter()
                .filter_map(|r| r.figures.as_ref().map(|f| f.logits_hash.clone()))
        })
        .collect();
    h.sort();
    h.dedup();
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse() {
        assert_eq!(Budget::parse("resident").unwrap(), Budget::Resident);
        assert_eq!(Budget::parse(" floor").unwrap(), Budget::Floor);
        assert_eq!(Budget::parse("7.4").unwrap(), Budget::Gb(7.4));
        assert_eq!(Budget::Gb(7.4).label(), "7.4GB");
        assert!(Budget::parse("0").is_err());
        assert!(Budget::parse("lots").unwrap_err().contains("`lots`"));
    }

    #[test]
    fn goals_sit_next_to_the_right_budgets() {
        assert_eq!(goal_of(&Budget::Resident, None).0, "0.8");
        assert_eq!(goal_of(&Budget::Gb(7.4), None).0, "2.9");
        assert_eq!(goal_of(&Budget::Floor, Some(7.4)).0, "2.9");
        assert_eq!(goal_of(&Budget::Floor, Some(3.0)).0, "-");
        assert_eq!(goal_of(&Budget::Mid, None).0, "-");
    }

    #[test]
    fn budget_flags_are_the_engine_flags() {
        assert!(budget_flags(None).is_empty());
        assert_eq!(budget_flags(Some(7.4)), vec!["--mem-gb", "7.40"]);
    }

    fn idle_report() -> idle::IdleReport {
        idle::IdleReport {
            window_s: 2.0,
            load1: 0.5,
            cpu_busy: 0.05,
            device: Some("vda".into()),
            disk_util: 0.0,
            disk_read_mb_s: 0.0,
            disk_write_mb_s: 0.0,
        }
    }

    fn outcome() -> Outcome {
        let figures = RunFigures {
            s_per_token: 2.0,
            load_s: 1.0,
            prefill_s: 1.0,
            wall_s: 20.0,
            logits_hash: "9393a1186bba26c7".into(),
            generated: 6,
            expert_bytes_per_token: 5e8,
            trunk_bytes_per_token: 4e9,
            table_bytes_per_token: 0.0,
            io_share: 0.5,
            expert_read_s: 1.0,
            trunk_read_s: 10.0,
            table_read_s: 0.0,
            expert_bytes_total: 3_000_000_000,
            trunk_bytes_total: 24_000_000_000,
            table_bytes_total: 0,
            peak_rss: 7_000_000_000,
            plan_total: 7_400_000_000,
            plan_trunk_resident: 1,
            plan_trunk_ring: 2,
            plan_model_tables: 3,
            plan_expert_cache: 4,
            pinned_layers: 1,
            layers: 4,
            ring_slots: 2,
            cache_slots: 100,
            expert_hit_rate: 0.5,
            trunk_wait_s: 6.0,
            trunk_reads: 24,
            trunk_reads_ahead: 12,
            forwards: 6,
            per_step_bytes: true,
        };
        let row = |rep, figures: Option<RunFigures>| RunRow {
            budget: "7.4GB".into(),
            rep,
            flags: "--mem-gb 7.40".into(),
            exit: if figures.is_some() { 0 } else { 4 },
            error: if figures.is_some() {
                String::new()
            } else {
                "exit 4: short read".into()
            },
            figures,
            idle: Some(idle_report()),
            device_read_bytes: Some(123),
            harness_wall_s: 20.0,
        };
        Outcome {
            header: vec![("command".into(), "cargo xtask bench".into())],
            step: StepBytes {
                trunk: 5_685_244_672,
                lm_head: 2_348_810_240,
                embedding_row: 14_336,
                experts_per_token: 48,
                expert_bytes: 17_547_264,
                all_expert_bytes: 3_369_074_688,
                model_tables: 4_697_663_488,
            },
            device: vec![(
                1,
                Measurement {
                    pattern: "random_expert",
                    block_bytes: 17_547_264,
                    queue_depth: 16,
                    direct: true,
                    reads: 10,
                    bytes: 2_500_000_000,
                    seconds: 1.0,
                    device_bytes: None,
                },
            )],
            device_bps: 2.5e9,
            device_patterns_bps: 2.5e9,
            engine_read_bps: 1.0e9,
            membw: vec![],
            mem_bps: 13.6e9,
            budgets: vec![
                BudgetResult {
                    budget: Budget::Gb(7.4),
                    mem_gb: Some(7.4),
                    runs: vec![row(1, Some(figures.clone())), row(2, None)],
                    skipped: None,
                },
                BudgetResult {
                    budget: Budget::Floor,
                    mem_gb: None,
                    runs: vec![],
                    skipped: Some("flag `--mem-gb`: not supported yet".into()),
                },
            ],
            floor_gb: None,
            idle_before: idle_report(),
            idle_after: idle_report(),
        }
    }

    /// Every data row of every table has as many fields as its header row.
    fn check_columns(tsv: &str, header_starts: &[&str]) {
        let mut width = None;
        let mut headers = 0;
        for line in tsv.lines().filter(|l| !l.starts_with('#')) {
            let n = line.split('\t').count();
            if header_starts.iter().any(|h| line.starts_with(h)) {
                width = Some(n);
                headers += 1;
            } else if !line.contains("not measured") {
                assert_eq!(Some(n), width, "row `{line}`");
            }
        }
        assert_eq!(headers, header_starts.len());
    }

    #[test]
    fn tsv_rows_match_their_headers() {
        let out = outcome();
        let s = summary_tsv(&out);
        check_columns(&s, &["budget\tflags"]);
        // 4.5 GB read per token at 2.5 GB/s = 1.8 s binds; ratio 1.8 / 2.0.
        let row = s.lines().find(|l| l.starts_with("7.4GB")).unwrap();
        assert!(row.contains("\tdevice\t0.900\t"), "{row}");
        assert!(row.contains("\t2.9\t3.8-4.7\t"), "{row}");
        assert!(s.contains("floor\t-\t0/0\t"), "{s}");
        check_columns(&runs_tsv(&out), &["round\t", "threads\t", "budget\trep"]);
        let text = summary_text(&out);
        assert!(text.contains("roofline 0.90 (device-bound)"), "{text}");
        assert_eq!(all_hashes(&out), vec!["9393a1186bba26c7"]);
    }
}
