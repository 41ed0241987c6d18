//! The end-to-end roofline benchmark (`k3_bench::harness`); normally started by
//! `cargo xtask bench`, which builds `k3` and this binary in release mode first.
//!
//! `roofline --k3 PATH [--model DIR] [options]`

use k3_bench::harness::{self, Budget, Options};
use std::path::PathBuf;

const USAGE: &str = "\
usage: cargo xtask bench [options]
       (roofline --k3 PATH [options], which is what it runs)

Measures the device (O_DIRECT reads in the engine's patterns) and the memory bandwidth, then
runs k3 on a synthetic checkpoint at several budgets and reports every figure against those
limits: s/token (median, min, max), bytes read per token, achieved MB/s vs the device, I/O
share, weights multiplied per second vs memory bandwidth, peak RSS vs plan, roofline ratio.
Writes bench/results/bench-<utc>.tsv (per budget) and bench-<utc>-runs.tsv (every run).

  --model DIR          synthetic checkpoint (default /work/synth-k3; make one with
                       `cargo xtask synth DIR`)
  --budgets LIST       comma-separated: resident, mid, floor, or GB for --mem-gb
                       (default resident,mid,floor,7.4)
  --reps N             runs per budget (default 3)
  --ids LIST           prompt ids (default 1,2,3,4,5)
  --gen N              tokens generated per run, at least 2 (default 6)
  --threads N          k3 --threads (default: all cores)
  --prefill-chunk N    k3 --prefill-chunk (default 64)
  --k3-arg ARG         extra argument for every k3 run (repeatable, e.g. --k3-arg --trunk
                       --k3-arg /tmp/trunk)
  --floor-gb X         use X as the floor instead of bisecting the plan
  --wait-idle SECS     wait up to SECS for an idle machine before measuring (default 120)
  --wait-idle-run SECS wait up to SECS for an idle machine before each run (default 30)
  --require-idle       exit 3 instead of measuring a busy machine
  --device-rounds N    rounds of the device patterns (default 1)
  --seq-bytes N        bytes per sequential device pattern (default 4000000000)
  --skip-device        skip the device measurement (ratios against the device become inf)
  --membw-mb N         memory-bandwidth buffer in MiB (default 1024)
  --drop-caches        sync and drop the page cache before every run (root; the engine's
                       bulk reads are O_DIRECT, so this only matters for buffered fallbacks)
  --out-dir DIR        where the TSVs go (default bench/results)
  --work-dir DIR       run JSONs and logs (default target/bench)
  --command TEXT       the command line to record (set by cargo xtask bench)
";

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().map(PathBuf::from).unwrap_or_default();
    let mut o = Options {
        k3: root.join("target/release/k3"),
        model: PathBuf::from("/work/synth-k3"),
        budgets: vec![
            Budget::Resident,
            Budget::Mid,
            Budget::Floor,
            Budget::Gb(7.4),
        ],
        reps: 3,
        ids: "1,2,3,4,5".into(),
        gen: 6,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        prefill_chunk: 64,
        k3_args: Vec::new(),
        floor_gb: None,
        wait_idle: 120,
        wait_idle_run: 30,
        require_idle: false,
        device_rounds: 1,
        seq_bytes: 4_000_000_000,
        skip_device: false,
        membw_bytes: 1 << 30,
        drop_caches: false,
        out_dir: manifest.join("results"),
        work_dir: root.join("target/bench"),
        command: String::new(),
        layer_experts: 64,
        top_k: 16,
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        i += 1;
        let mut val = || -> Result<String, String> {
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| format!("{a}: expected a value"))?;
            i += 1;
            Ok(v)
        };
        fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag}: expected a non-negative number, found `{v}`"))
        }
        match a.as_str() {
            "--help" | "-h" => return Ok(None),
            "--k3" => o.k3 = PathBuf::from(val()?),
            "--model" => o.model = PathBuf::from(val()?),
            "--budgets" => {
                o.budgets = val()?
                    .split(',')
                    .map(Budget::parse)
                    .collect::<Result<_, _>>()?
            }
            "--reps" => o.reps = num(&a, &val()?)?,
            "--ids" => o.ids = val()?,
            "--gen" => o.gen = num(&a, &val()?)?,
            "--threads" => o.threads = num(&a, &val()?)?,
            "--prefill-chunk" => o.prefill_chunk = num(&a, &val()?)?,
            "--k3-arg" => {
                let v = val()?;
                o.k3_args.push(v)
            }
            "--floor-gb" => o.floor_gb = Some(num(&a, &val()?)?),
            "--wait-idle" => o.wait_idle = num(&a, &val()?)?,
            "--wait-idle-run" => o.wait_idle_run = num(&a, &val()?)?,
            "--require-idle" => o.require_idle = true,
            "--device-rounds" => o.device_rounds = num(&a, &val()?)?,
            "--seq-bytes" => o.seq_bytes = num(&a, &val()?)?,
            "--skip-device" => o.skip_device = true,
            "--membw-mb" => o.membw_bytes = num::<usize>(&a, &val()?)? << 20,
            "--drop-caches" => o.drop_caches = true,
            "--out-dir" => o.out_dir = PathBuf::from(val()?),
            "--work-dir" => o.work_dir = PathBuf::from(val()?),
            "--command" => o.command = val()?,
            s => return Err(format!("{s}: unknown argument (see --help)")),
        }
    }
    if o.reps == 0 || o.threads == 0 || o.prefill_chunk == 0 || o.device_rounds == 0 {
        return Err("--reps, --threads, --prefill-chunk and --device-rounds must be >= 1".into());
    }
    if o.gen < 2 {
        return Err(format!(
            "--gen {}: per-token figures need at least 2 generated tokens",
            o.gen
        ));
    }
    if o.membw_bytes < 64 << 20 {
        return Err(
            "--membw-mb: at least 64 (the buffer must be far larger than the caches)".into(),
        );
    }
    if o.budgets.is_empty() {
        return Err("--budgets: empty".into());
    }
    if o.budgets.contains(&Budget::Mid) && !o.budgets.contains(&Budget::Resident) {
        return Err(
            "--budgets: `mid` needs `resident` (it is halfway between floor and resident)".into(),
        );
    }
    if !o.k3.is_file() {
        return Err(format!(
            "--k3 {}: no such file (build it: cargo build --release -p k3)",
            o.k3.display()
        ));
    }
    if !o.model.join("config.json").is_file() {
        return Err(format!(
            "--model {}: no config.json there (write the synthetic checkpoint with `cargo xtask synth {}`)",
            o.model.display(),
            o.model.display()
        ));
    }
    if o.command.is_empty() {
        o.command = std::iter::once("roofline".to_string())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
    }
    Ok(Some(o))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("bench: error: {e}");
            std::process::exit(2);
        }
    };
    let out = match harness::run(&o) {
        Ok(out) => out,
        Err((code, e)) => {
            eprintln!("bench: error: {e}");
            std::process::exit(code);
        }
    };
    let stamp = k3_bench::machine::utc_now().replace([':', '-'], "");
    let summary = o.out_dir.join(format!("bench-{stamp}.tsv"));
    let runs = o.out_dir.join(format!("bench-{stamp}-runs.tsv"));
    let write = |p: &PathBuf, s: String| {
        std::fs::create_dir_all(&o.out_dir)
            .and_then(|_| std::fs::write(p, s))
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    if let Err(e) = write(&summary, harness::summary_tsv(&out))
        .and_then(|_| write(&runs, harness::runs_tsv(&out)))
    {
        eprintln!("bench: error: {e}");
        std::process::exit(4);
    }
    print!("{}", harness::summary_text(&out));
    println!("wrote {} and {}", summary.display(), runs.display());
    let hashes = harness::all_hashes(&out);
    if hashes.len() > 1 {
        eprintln!(
            "bench: FAILED: the logits hash differs between budgets or runs: {}",
            hashes.join(", ")
        );
        std::process::exit(1);
    }
}
