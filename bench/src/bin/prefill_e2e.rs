//! End-to-end prefill (issue 23): prompts of given lengths through `k3` at given budgets,
//! the prompt's multiply-adds (a ledger from the config: every BF16 trunk matrix once per
//! position, each position's top-k experts, the MLA scores and mixes over its prefix, the KDA
//! recurrence, one lm_head row) per second as a ratio to the compute roof measured in the
//! same run (`k3_bench::roof`, the best ISA path at the run's thread count), the weight bytes
//! read per prompt against one pass, the spill bytes and the logits hash; the same with a
//! previous binary (`--k3-old`) when given.
//!
//! cargo run --release -p k3-bench --bin prefill_e2e -- --model DIR --k3 target/release/k3 \
//!     [--k3-old PATH] [--prompts 512,2048] [--budgets resident,floor] [--threads 2] [--out FILE]
//!
//! `floor` is the smallest `--mem-gb` that accepts chunks of 64 positions (the previous
//! default; a refused probe's reported plan, from `--k3-old` when given), the same for both.
//! One pass over the weights = the trunk, the whole lm_head, the prompt's embedding rows and
//! every expert the prompt selects once (the expert bytes a resident run of the same prompt
//! reads into its empty cache).

use k3::config::Config;
use k3::model::Dims;
use k3_kernels::Isa;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

struct Opts {
    model: PathBuf,
    k3: PathBuf,
    old: Option<PathBuf>,
    prompts: Vec<usize>,
    budgets: Vec<String>,
    threads: usize,
    out: Option<PathBuf>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        model: PathBuf::new(),
        k3: PathBuf::from("target/release/k3"),
        old: None,
        prompts: vec![512, 2048],
        budgets: vec!["resident".into(), "floor".into()],
        threads: 2,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut v = || it.next().ok_or(format!("{a}: missing value"));
        match a.as_str() {
            "--model" => o.model = v()?.into(),
            "--k3" => o.k3 = v()?.into(),
            "--k3-old" => o.old = Some(v()?.into()),
            "--prompts" => {
                o.prompts = v()?
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("--prompts: {s}")))
                    .collect::<Result<_, _>>()?
            }
            "--budgets" => o.budgets = v()?.split(',').map(String::from).collect(),
            "--threads" => o.threads = v()?.parse().map_err(|_| "--threads".to_string())?,
            "--out" => o.out = Some(v()?.into()),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.model.as_os_str().is_empty() {
        return Err("--model DIR is required".into());
    }
    Ok(o)
}

/// Multiply-adds of a prompt of `p` positions (the ledger of the module doc).
fn prompt_macs(cfg: &Config, d: &Dims, p: usize) -> f64 {
    let mut per_pos = 0f64;
    for l in 0..d.nl {
        for t in k3::catalogue::layer_tensors(cfg, l) {
            if t.dtype == k3::safetensors::Dtype::BF16 && t.shape.len() == 2 {
                per_pos += (t.shape[0] * t.shape[1]) as f64;
            }
        }
        if l >= d.first_dense {
            per_pos += (d.kt * 3 * d.i * d.l) as f64;
        }
    }
    per_pos += (d.v * d.h) as f64 / p as f64; // one lm_head row for the prompt
    let mut macs = per_pos * p as f64;
    let pairs = (p * (p + 1) / 2) as f64; // (query, key) pairs of a causal prompt
    for k in &d.kinds {
        macs += match k {
            k3::model::AttnKind::Mla => d.hm as f64 * pairs * (2 * d.rkv + d.dr) as f64,
            k3::model::AttnKind::Kda => (p * 3 * d.hk * d.dk * d.dk) as f64,
        };
    }
    macs
}

struct Outcome {
    json: Value,
    stderr: String,
    seconds: f64,
}

fn k3_run(bin: &Path, model: &Path, ids: &str, extra: &[String], tag: &str) -> Outcome {
    let out = std::env::temp_dir().join(format!("prefill_e2e_{}_{tag}.json", std::process::id()));
    let t = Instant::now();
    let o = Command::new(bin)
        .arg(model)
        .args(["--ids", ids, "--gen", "1", "--no-progress", "--out"])
        .arg(&out)
        .args(extra)
        .output()
        .expect("k3 runs");
    let seconds = t.elapsed().as_secs_f64();
    let json = std::fs::read(&out)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let _ = std::fs::remove_file(&out);
    Outcome {
        json,
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        seconds,
    }
}

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[k]).as_u64().unwrap_or(0)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("prefill_e2e: {e}");
            std::process::exit(2);
        }
    };
    let cfg = Config::from_file(&o.model.join("config.json")).expect("config");
    let d = Dims::from_config(&cfg);
    let load_before = k3_bench::machine::loadavg();
    let isa = Isa::best();
    let roof = k3_bench::roof::measure(isa, o.threads, 3);
    eprintln!(
        "roof {isa:?} t{}: {:.2} G multiply-adds/s",
        o.threads,
        roof.best_macs_per_s / 1e9
    );
    let trunk: u64 = (0..d.nl).map(|l| k3::plan::layer_run_bytes(&cfg, l)).sum();
    let table = (d.v * d.h * 2) as u64;
    let mut rows = Vec::new();
    let mut bins = vec![("new", o.k3.clone())];
    if let Some(p) = &o.old {
        bins.push(("old", p.clone()));
    }
    for &p in &o.prompts {
        let ids: Vec<String> = (0..p)
            .map(|i| ((i * 7919 + 13) % d.v).to_string())
            .collect();
        let ids = ids.join(",");
        let macs = prompt_macs(&cfg, &d, p);
        let mut experts_once = None;
        let mut floor: Option<u64> = None;
        for budget in &o.budgets {
            for (label, bin) in &bins {
                let threads = vec!["--threads".to_string(), o.threads.to_string()];
                let mut extra = threads.clone();
                match budget.as_str() {
                    "resident" => {}
                    "floor" => {
                        // one budget for both binaries: the smallest that accepts chunks of 64
                        // (the previous default), so `auto` shows what it makes of the same
                        // memory
                        let floor = *floor.get_or_insert_with(|| {
                            let mut probe = threads.clone();
                            probe.extend(
                                ["--prefill-chunk", "64", "--mem-gb", "0.000001"].map(String::from),
                            );
                            let (_, first) = &bins[bins.len() - 1];
                            let r = k3_run(first, &o.model, &ids, &probe, "probe");
                            u(&r.json, &["memory", "plan", "total"])
                        });
                        extra.extend([
                            "--mem-gb".into(),
                            format!("{:.9}", (floor + 1) as f64 / 1e9),
                        ]);
                    }
                    gb => extra.extend(["--mem-gb".into(), gb.to_string()]),
                }
                eprintln!("{label} {budget} {p}: k3 {extra:?}");
                let r = k3_run(bin, &o.model, &ids, &extra, label);
                if r.json.is_null() || !r.json["error"].is_null() {
                    eprintln!("{label} {budget} {p}: failed:\n{}", r.stderr);
                    continue;
                }
                let secs = r.json["timing"]["prefill_seconds"].as_f64().unwrap_or(0.0);
                let expert_bytes = u(&r.json, &["expert_cache", "bytes_read"]);
                if budget == "resident" && experts_once.is_none() {
                    experts_once = Some(expert_bytes);
                }
                let read = u(&r.json, &["trunk", "bytes_read"])
                    + expert_bytes
                    + u(&r.json, &["io", "lm_head_bytes_read"])
                    + u(&r.json, &["io", "embedding_bytes_read"]);
                let one_pass =
                    trunk + table + (p as u64) * 2 * d.h as u64 + experts_once.unwrap_or(0);
                let chunk = r
                    .stderr
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("prefill chunk: "))
                    .and_then(|l| l.split(' ').next())
                    .unwrap_or(if *label == "old" { "64" } else { "?" })
                    .to_string();
                let plan_total = u(&r.json, &["memory", "plan", "total"]);
                rows.push(format!(
                    "{label}\t{budget}\t{}\t{p}\t{chunk}\t{secs:.3}\t{:.2}\t{:.4e}\t{:.4e}\t{:.4e}\t{:.3}\t{read}\t{one_pass}\t{:.3}\t0\t{}\t{:.1}",
                    k3::units::gb(plan_total),
                    p as f64 / secs,
                    macs,
                    macs / secs,
                    roof.best_macs_per_s,
                    macs / secs / roof.best_macs_per_s,
                    read as f64 / one_pass as f64,
                    r.json["logits_hash"].as_str().unwrap_or("?"),
                    r.seconds,
                ));
                eprintln!("{}", rows.last().unwrap());
            }
        }
    }
    let mut s = String::new();
    s.push_str(
        "# k3 end-to-end prefill against the compute roof measured in the same run (issue 23)\n",
    );
    s.push_str(&format!(
        "# command: cargo run --release -p k3-bench --bin prefill_e2e -- {}\n",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    ));
    s.push_str(&format!("# date_utc: {}\n", k3_bench::machine::utc_now()));
    for (k, v) in k3_bench::machine::describe() {
        s.push_str(&format!("# {k}: {v}\n"));
    }
    s.push_str(&format!(
        "# loadavg before: {load_before}; after: {} (a busy machine: other jobs building and testing on both cores)\n",
        k3_bench::machine::loadavg()
    ));
    s.push_str(&format!(
        "# roof: {isa:?} at {} threads, best of 3: {:.3e} multiply-adds/s; macs = the prompt's multiply-adds from the config's ledger (prefill_e2e.rs); seconds = the report's prefill_seconds; bytes_read = weights only (trunk + experts + lm_head + embedding rows read during the run, --gen 1); one_pass_bytes = trunk + lm_head + the prompt's embedding rows + every expert the prompt selects once; spill_bytes: no spill path in this build (0)\n",
        o.threads, roof.best_macs_per_s
    ));
    s.push_str("binary\tbudget\tplan\tprompt_tokens\tchunk\tseconds\ttokens_per_s\tmacs\tmacs_per_s\troof_macs_per_s\troof_ratio\tbytes_read\tone_pass_bytes\tread_passes\tspill_bytes\tlogits_hash\twall_seconds\n");
    for r in &rows {
        s.push_str(r);
        s.push('\n');
    }
    match &o.out {
        Some(p) => std::fs::write(p, &s).expect("write --out"),
        None => print!("{s}"),
    }
}
