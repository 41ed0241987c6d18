//! The batch benchmark (`k3_bench::batch`): B = 1, 2, 4, 8 sequences in one trunk sweep at
//! each B's floor, a fixed budget and resident; normally started by `cargo xtask bench batch`.
//!
//! `batch [--k3 PATH] [--model DIR] [--budgets LIST] [--bs LIST] [--gen N] [--threads N]
//! [--seq-bytes N] [--skip-device] [--out FILE] [--work-dir DIR] [--command TEXT]`
//! The result TSV is rewritten after every point, so an interrupted run keeps what it measured.

use k3_bench::batch::{self, Point};
use k3_bench::harness::{base_header, k3_output, say, Budget, Options};
use k3_bench::{device, idle, machine};
use std::path::PathBuf;

const USAGE: &str = "\
usage: cargo xtask bench batch [options]
  --model DIR        synthetic checkpoint (default /work/synth-k3)
  --budgets LIST     comma-separated: floor (each B's own), resident, or GB (default floor,7.4,resident)
  --bs LIST          sequences per batch (default 1,2,4,8)
  --gen N            ids generated per sequence, at least 2 (default 3); each point also runs --gen 1
  --threads N        k3 --threads (default: all cores)
  --seq-bytes N      bytes of the sequential device pattern (default 1267744256: one layer window)
  --skip-device      no device patterns (the engine's own read rate is the device figure)
  --out FILE         result TSV (default bench/results/batch-<utc>.tsv)
  --work-dir DIR     run JSONs and logs (default target/bench-batch)
  --command TEXT     the command line to record (set by cargo xtask bench)
";

struct Args {
    o: Options,
    bs: Vec<usize>,
    skip_device: bool,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().map(PathBuf::from).unwrap_or_default();
    let stamp = machine::utc_now().replace([':', '-'], "");
    let mut a = Args {
        o: Options {
            k3: root.join("target/release/k3"),
            model: PathBuf::from("/work/synth-k3"),
            budgets: vec![Budget::Floor, Budget::Gb(7.4), Budget::Resident],
            reps: 1,
            ids: String::new(),
            gen: 3,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prefill_chunk: 64,
            k3_args: Vec::new(),
            floor_gb: None,
            wait_idle: 0,
            wait_idle_run: 0,
            require_idle: false,
            device_rounds: 1,
            seq_bytes: device::KDA_LAYER_BYTES,
            skip_device: false,
            membw_bytes: 0,
            drop_caches: false,
            out_dir: manifest.join("results"),
            work_dir: root.join("target/bench-batch"),
            command: String::new(),
            layer_experts: 64,
            top_k: 16,
        },
        bs: vec![1, 2, 4, 8],
        skip_device: false,
        out: manifest.join(format!("results/batch-{stamp}.tsv")),
    };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        if flag == "--skip-device" {
            a.skip_device = true;
            i += 1;
            continue;
        }
        let v = args
            .get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{flag}: expected a value"))?;
        i += 2;
        let num = |v: &str| -> Result<usize, String> {
            v.parse()
                .map_err(|_| format!("{flag}: expected a non-negative integer, found `{v}`"))
        };
        match flag {
            "--k3" => a.o.k3 = PathBuf::from(v),
            "--model" => a.o.model = PathBuf::from(v),
            "--budgets" => {
                a.o.budgets = v.split(',').map(Budget::parse).collect::<Result<_, _>>()?
            }
            "--bs" => a.bs = v.split(',').map(num).collect::<Result<_, _>>()?,
            "--gen" => a.o.gen = num(&v)?,
            "--threads" => a.o.threads = num(&v)?,
            "--seq-bytes" => a.o.seq_bytes = num(&v)? as u64,
            "--out" => a.out = PathBuf::from(v),
            "--work-dir" => a.o.work_dir = PathBuf::from(v),
            "--command" => a.o.command = v,
            s => return Err(format!("{s}: unknown argument (see --help)")),
        }
    }
    if a.o.gen < 2 || a.o.threads == 0 || a.bs.is_empty() || a.bs.contains(&0) {
        return Err("--gen must be >= 2, --threads and every --bs >= 1".into());
    }
    if a.o.budgets.contains(&Budget::Mid) {
        return Err("--budgets: `mid` is not measured here (floor, resident or GB)".into());
    }
    if !a.o.k3.is_file() {
        return Err(format!(
            "--k3 {}: no such file (cargo build --release -p k3)",
            a.o.k3.display()
        ));
    }
    if a.o.command.is_empty() {
        a.o.command = std::iter::once("batch".to_string())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
    }
    Ok(Some(a))
}

fn run(a: &Args) -> Result<(), (i32, String)> {
    let o = &a.o;
    std::fs::create_dir_all(&o.work_dir)
        .map_err(|e| (4, format!("{}: {e}", o.work_dir.display())))?;
    let version = k3_output(&o.k3, &["--version"])?;
    let files =
        device::expand_inputs(std::slice::from_ref(&o.model)).map_err(|e| (2, e.to_string()))?;
    let mut header = base_header(o, &files[0], &version);
    header.insert(1, ("what".into(), "k3 --batch FILE --parallel B: B sequences (prompts batch::prompt(0..B), greedy, same --gen) per trunk sweep; per-step figures = (--gen G run - --gen 1 run) / extra sweeps, same --ctx so the same plan (bench/src/batch.rs)".into()));
    header.push((
        "runs".into(),
        format!(
            "--gen 1 and --gen {} --ctx {} --threads {} --prefill-chunk {}",
            o.gen,
            batch::PROMPT_LEN + o.gen,
            o.threads,
            o.prefill_chunk
        ),
    ));
    let dev = idle::device_of(&o.model);
    let before = idle::sample(std::time::Duration::from_secs(2), dev.as_deref())
        .map_err(|e| (4, format!("idle check: {e}")))?;
    header.push(("loadavg_before".into(), machine::loadavg()));
    header.push((
        "idle_before".into(),
        before.describe(idle::IdleLimits::default()),
    ));
    let device = if a.skip_device {
        Vec::new()
    } else {
        batch::quick_device(o, &files)?
    };
    for m in &device {
        say(&format!(
            "device: {} QD{} {:.0} MB/s",
            m.pattern,
            m.queue_depth,
            m.mb_per_s()
        ));
    }
    let mut points: Vec<Point> = Vec::new();
    let write = |points: &[Point], extra: &[(String, String)]| -> Result<(), (i32, String)> {
        let mut h = header.clone();
        h.extend(extra.iter().cloned());
        if let Some(d) = a.out.parent() {
            let _ = std::fs::create_dir_all(d);
        }
        std::fs::write(&a.out, batch::tsv(&h, &device, points))
            .map_err(|e| (4, format!("{}: {e}", a.out.display())))
    };
    for budget in &o.budgets {
        for &b in &a.bs {
            say(&format!(
                "batch: {} B = {b} (load {})",
                budget.label(),
                machine::loadavg()
            ));
            points.push(batch::measure_point(o, budget, b));
            let now = vec![("loadavg_now".to_string(), machine::loadavg())];
            write(&points, &now)?;
        }
    }
    let after = idle::sample(std::time::Duration::from_secs(2), dev.as_deref())
        .map_err(|e| (4, format!("idle check: {e}")))?;
    write(
        &points,
        &[
            ("loadavg_after".into(), machine::loadavg()),
            (
                "idle_after".into(),
                after.describe(idle::IdleLimits::default()),
            ),
        ],
    )?;
    print!("{}", std::fs::read_to_string(&a.out).unwrap_or_default());
    println!("wrote {}", a.out.display());
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Ok(Some(a)) => {
            if let Err((code, e)) = run(&a) {
                eprintln!("batch: error: {e}");
                std::process::exit(code);
            }
        }
        Ok(None) => print!("{USAGE}"),
        Err(e) => {
            eprintln!("batch: error: {e}");
            std::process::exit(2);
        }
    }
}
