//! Device read bandwidth with the engine's read patterns (see `k3_bench::device`), after
//! checking that the machine is otherwise idle. Writes a TSV under bench/results/ with the
//! machine description and the exact command.
//!
//! `cargo run --release -p k3-bench --bin device -- <file|model_dir>... [options]`

use k3_bench::device::{self, Measurement, Target, ENGINE_QUEUE_DEPTH, KDA_LAYER_BYTES};
use k3_bench::{idle, machine};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

const USAGE: &str = "\
usage: cargo run --release -p k3-bench --bin device -- <file|model_dir>... [options]

Measures O_DIRECT read bandwidth the way the engine reads: random 17,547,264-byte expert
reads at queue depth 1 and 16, and whole-layer sequential reads (one pread per window, and
the window split over threads). The device figure is the best of all patterns.

  --rounds N          repeat every pattern N times (default 2)
  --qd1-reads N       expert reads per QD1 round (default 64)
  --qd16-reads N      expert reads per QD16 round (default 256)
  --layer-bytes N     sequential window (default 1267744256, a K3 KDA+MoE layer run)
  --seq-bytes N       bytes per sequential round at most (default 16000000000)
  --split-threads L   thread counts of the split sequential pattern, comma-separated
                      (default 4,16)
  --seed S            seed of the random offsets (default 1)
  --wait-idle SECS    wait up to SECS for an idle machine before timing (default 120)
  --require-idle      exit 3 if the machine never became idle (default: measure anyway and
                      record that it was busy)
  --out PATH          TSV path (default bench/results/device-<utc>.tsv)
";

struct Opts {
    inputs: Vec<PathBuf>,
    rounds: usize,
    qd1_reads: usize,
    qd16_reads: usize,
    layer_bytes: u64,
    seq_bytes: u64,
    split_threads: Vec<usize>,
    seed: u64,
    wait_idle: u64,
    require_idle: bool,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        inputs: Vec::new(),
        rounds: 2,
        qd1_reads: 64,
        qd16_reads: 256,
        layer_bytes: KDA_LAYER_BYTES,
        seq_bytes: 16_000_000_000,
        split_threads: vec![4, 16],
        seed: 1,
        wait_idle: 120,
        require_idle: false,
        out: None,
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        i += 1;
        let mut val = |name: &str| -> Result<String, String> {
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| format!("{name}: expected a value"))?;
            i += 1;
            Ok(v)
        };
        fn num<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{name}: expected a non-negative integer, found `{v}`"))
        }
        match a.as_str() {
            "--help" | "-h" => return Ok(None),
            "--rounds" => o.rounds = num(&a, val(&a)?)?,
            "--qd1-reads" => o.qd1_reads = num(&a, val(&a)?)?,
            "--qd16-reads" => o.qd16_reads = num(&a, val(&a)?)?,
            "--layer-bytes" => o.layer_bytes = num(&a, val(&a)?)?,
            "--seq-bytes" => o.seq_bytes = num(&a, val(&a)?)?,
            "--split-threads" => {
                o.split_threads = val(&a)?
                    .split(',')
                    .map(|v| num(&a, v.trim().to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--seed" => o.seed = num(&a, val(&a)?)?,
            "--wait-idle" => o.wait_idle = num(&a, val(&a)?)?,
            "--require-idle" => o.require_idle = true,
            "--out" => o.out = Some(PathBuf::from(val(&a)?)),
            s if s.starts_with("--") => return Err(format!("{s}: unknown flag (see --help)")),
            _ => o.inputs.push(PathBuf::from(a)),
        }
    }
    if o.inputs.is_empty() {
        return Err("no file or model directory given (see --help)".into());
    }
    if o.rounds == 0 || o.split_threads.contains(&0) || o.layer_bytes == 0 {
        return Err("--rounds, --split-threads and --layer-bytes must be >= 1".into());
    }
    Ok(Some(o))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match parse(&args) {
        Ok(None) => {
            print!("{USAGE}");
            0
        }
        Err(e) => {
            eprintln!("device: error: {e}");
            2
        }
        Ok(Some(o)) => match run(&o, &args) {
            Ok(()) => 0,
            Err((code, e)) => {
                eprintln!("device: error: {e}");
                code
            }
        },
    };
    std::process::exit(code);
}

fn quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

fn run(o: &Opts, args: &[String]) -> Result<(), (i32, String)> {
    let files = device::expand_inputs(&o.inputs).map_err(|e| (2, e.to_string()))?;
    let targets: Vec<Target> = files
        .iter()
        .map(|p| device::open_target(p))
        .collect::<Result<_, _>>()
        .map_err(|e| (2, e.to_string()))?;
    let total: u64 = targets.iter().map(|t| t.size).sum();
    if targets.iter().all(|t| t.size < device::EXPERT_BYTES) {
        return Err((
            2,
            "every input is smaller than one expert (17,547,264 B)".into(),
        ));
    }
    let dev = idle::device_of(&files[0]);
    let limits = idle::IdleLimits::default();
    eprintln!(
        "device: {} files, {:.2} GB on {}; O_DIRECT {}",
        targets.len(),
        total as f64 / 1e9,
        dev.as_deref().unwrap_or("?"),
        if targets.iter().all(|t| t.direct) {
            "yes"
        } else {
            "NO (buffered fallback)"
        }
    );
    let (before, was_idle) = idle::wait_for_idle(
        Duration::from_secs(2),
        Duration::from_secs(o.wait_idle),
        dev.as_deref(),
        limits,
        |r| {
            eprintln!(
                "device: waiting for an idle machine: {}",
                r.describe(limits)
            )
        },
    )
    .map_err(|e| (4, format!("idle check: {e}")))?;
    eprintln!("device: before: {}", before.describe(limits));
    if !was_idle {
        if o.require_idle {
            return Err((
                3,
                format!(
                    "the machine did not become idle within {} s ({})",
                    o.wait_idle,
                    before.describe(limits)
                ),
            ));
        }
        eprintln!("device: warning: machine busy; measuring anyway and recording it");
    }

    let mut results: Vec<(usize, Measurement)> = Vec::new();
    let io = |e: std::io::Error| (4, e.to_string());
    for round in 0..o.rounds {
        let seed = o.seed.wrapping_add(round as u64 * 1000);
        let req1 = device::random_requests(&targets, o.qd1_reads, seed);
        let req16 = device::random_requests(&targets, o.qd16_reads, seed + 1);
        let mut ms = vec![
            device::random_expert(&targets, &req1, 1, dev.as_deref()).map_err(io)?,
            device::random_expert(&targets, &req16, ENGINE_QUEUE_DEPTH, dev.as_deref())
                .map_err(io)?,
            device::sequential_layer(&targets, o.layer_bytes, o.seq_bytes, 0, dev.as_deref())
                .map_err(io)?,
        ];
        for &n in &o.split_threads {
            ms.push(
                device::sequential_layer(&targets, o.layer_bytes, o.seq_bytes, n, dev.as_deref())
                    .map_err(io)?,
            );
        }
        for m in ms {
            eprintln!(
                "device: round {} {:<23} QD{:<2} {:>4} reads {:>7.2} GB {:>6.2} s {:>7.0} MB/s",
                round + 1,
                m.pattern,
                m.queue_depth,
                m.reads,
                m.bytes as f64 / 1e9,
                m.seconds,
                m.mb_per_s()
            );
            results.push((round + 1, m));
        }
    }
    let after = idle::sample(Duration::from_secs(2), dev.as_deref())
        .map_err(|e| (4, format!("idle check: {e}")))?;
    eprintln!("device: after: {}", after.describe(limits));
    let best = results
        .iter()
        .max_by(|a, b| a.1.mb_per_s().total_cmp(&b.1.mb_per_s()))
        .expect("at least one measurement");

    let mut tsv = String::new();
    let cmd: Vec<String> = args.iter().map(|a| quote(a)).collect();
    let _ = writeln!(tsv, "# k3 device read bandwidth (bench/src/bin/device.rs)");
    let _ = writeln!(
        tsv,
        "# command\tcargo run --release -p k3-bench --bin device -- {}",
        cmd.join(" ")
    );
    let _ = writeln!(
        tsv,
        "# cwd\t{}",
        std::env::current_dir().map_or("?".into(), |p| p.display().to_string())
    );
    for (k, v) in machine::describe()
        .into_iter()
        .chain(machine::describe_storage(&files[0]))
    {
        let _ = writeln!(tsv, "# {k}\t{v}");
    }
    let _ = writeln!(tsv, "# inputs\t{} files, {} bytes", targets.len(), total);
    let _ = writeln!(tsv, "# idle_before\t{}", before.describe(limits));
    let _ = writeln!(tsv, "# idle_after\t{}", after.describe(limits));
    let _ = writeln!(
        tsv,
        "# idle_limits\tcpu_busy <= {} disk_util <= {}",
        limits.max_cpu_busy, limits.max_disk_util
    );
    let _ = writeln!(
        tsv,
        "round\tpattern\tblock_bytes\tqueue_depth\tdirect\treads\tbytes\tseconds\tmb_per_s\tdevice_bytes"
    );
    let row = |tsv: &mut String, round: &str, m: &Measurement| {
        let _ = writeln!(
            tsv,
            "{round}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.4}\t{:.1}\t{}",
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
    };
    for (r, m) in &results {
        row(&mut tsv, &r.to_string(), m);
    }
    row(&mut tsv, "best", &best.1);

    let out = o.out.clone().unwrap_or_else(|| {
        let stamp = machine::utc_now().replace([':', '-'], "");
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("results")
            .join(format!("device-{stamp}.tsv"))
    });
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| (4, format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(&out, &tsv).map_err(|e| (4, format!("{}: {e}", out.display())))?;
    print!("{tsv}");
    eprintln!(
        "device: best {:.0} MB/s ({} QD{}); wrote {}",
        best.1.mb_per_s(),
        best.1.pattern,
        best.1.queue_depth,
        out.display()
    );
    Ok(())
}
