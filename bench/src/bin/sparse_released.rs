//! The released shape on this machine (issue 16 item 4): k3 runs two decode steps on the
//! sparse released checkpoint (`cargo xtask synth --sparse --released DIR`: 96 shards, 497,220
//! tensors, 1.56 TB apparent, tensor data as file holes) at each budget, and this records per
//! budget the plan, the peak RSS (the run's own `VmHWM`), the wall and CPU seconds (compute at
//! the released widths; the holes read as zeros, so no bandwidth figure is derived from the
//! reads) and, next to them, the **predicted** bytes a token reads at that budget for the real
//! model — the plan's streamed trunk and tables plus the expert misses at the hit rate of the
//! recorded real routing trace (`k3::plan::released`) — and the s/token that implies at 3 GB/s.
//! (The sparse model's zero routers always pick the same 16 experts, so its own expert reads
//! are not the model's.)
//!
//! ```text
//! cargo run --release -p k3-bench --bin sparse_released -- DIR \
//!     [--k3 target/release/k3] [--budget floor] [--budget "--mem-gb 8"] [--budget "--preset laptop"] \
//!     [--out bench/results/sparse-released-<date>.tsv]
//! ```
//! `floor` is the smallest budget k3 accepts for the run (found from its refusal message).

use k3::plan::released::{self, TokenBytes};
use k3::plan::{gb_to_bytes, plan_run, preset, Budget};
use k3_bench::machine;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The prompt ("The capital of France is", no BOS) and the tokens generated: the prefill
/// forward yields the first, one decode step the second.
const IDS: &str = "1008,10484,318,15383,387";
const GEN: usize = 2;
/// The disk speed of the predicted column, GB/s.
const DISK_GBPS: f64 = 3.0;

struct Cli {
    dir: PathBuf,
    k3: PathBuf,
    budgets: Vec<String>,
    out: Option<PathBuf>,
}

fn parse() -> Cli {
    let mut a = std::env::args().skip(1);
    let mut cli = Cli {
        dir: PathBuf::new(),
        k3: PathBuf::from("target/release/k3"),
        budgets: Vec::new(),
        out: None,
    };
    while let Some(x) = a.next() {
        match x.as_str() {
            "--k3" => cli.k3 = PathBuf::from(a.next().expect("--k3 PATH")),
            "--budget" => cli.budgets.push(a.next().expect("--budget FLAGS")),
            "--out" => cli.out = Some(PathBuf::from(a.next().expect("--out PATH"))),
            _ => cli.dir = PathBuf::from(x),
        }
    }
    assert!(
        cli.dir.is_dir(),
        "usage: sparse_released DIR [--k3 PATH] [--budget FLAGS]... [--out TSV]"
    );
    if cli.budgets.is_empty() {
        cli.budgets = vec![
            "floor".into(),
            "--mem-gb 8".into(),
            "--preset laptop".into(),
        ];
    }
    cli
}

/// Children's (user, system) CPU seconds so far: fields 16 and 17 (`cutime`, `cstime`) of
/// `/proc/self/stat`, in clock ticks of 1/100 s (USER_HZ, fixed at 100 on Linux).
fn children_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // rest starts at field 3: cutime is field 16 → index 13, cstime index 14.
    let tick = |i: usize| f.get(i).copied().unwrap_or(0.0) / 100.0;
    (tick(13), tick(14))
}

/// The smallest `--mem-gb` k3 accepts for this run: its refusal names the minimum (4 decimals);
/// one ten-thousandth more.
fn floor_flags(cli: &Cli) -> String {
    let o = Command::new(&cli.k3)
        .arg(&cli.dir)
        .args(["--ids", IDS, "--gen", &GEN.to_string(), "--mem-gb", "0.001"])
        .output()
        .expect("run k3");
    let err = String::from_utf8_lossy(&o.stderr);
    let at = err
        .find("below the minimum ")
        .expect("k3 names the minimum")
        + 18;
    let gb: f64 = err[at..].split(' ').next().unwrap().parse().unwrap();
    format!("--mem-gb {:.4}", gb + 0.0001)
}

/// The engine's budget for `flags` (`--mem-gb X` or `--preset NAME`).
fn budget_of(flags: &str) -> Budget {
    let f: Vec<&str> = flags.split_whitespace().collect();
    match f.as_slice() {
        ["--mem-gb", x] => Budget {
            mem: Some(gb_to_bytes(x.parse().unwrap())),
            ..Budget::default()
        },
        ["--preset", p] => Budget {
            preset: preset(p),
            ..Budget::default()
        },
        _ => panic!("--budget: `--mem-gb X` or `--preset NAME`, not `{flags}`"),
    }
}

/// The member at `path` of a report (a JSON pointer without the slashes).
fn at<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a serde_json::Value {
    path.iter().fold(v, |c, k| &c[*k])
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("report lacks {}", path.join(".")))
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    at(v, path)
        .as_f64()
        .unwrap_or_else(|| panic!("report lacks {}", path.join(".")))
}

/// One run at `flags`: its TSV row.
fn run_one(cli: &Cli, label: &str, flags: &str, tmp: &Path) -> String {
    let report = tmp.join(format!("sparse-released-{}.json", label.replace(' ', "_")));
    let (u0, s0) = children_cpu();
    let load0 = machine::loadavg();
    let o = Command::new(&cli.k3)
        .arg(&cli.dir)
        .args([
            "--ids",
            IDS,
            "--gen",
            &GEN.to_string(),
            "--verbose",
            "--out",
        ])
        .arg(&report)
        .args(flags.split_whitespace())
        .output()
        .expect("run k3");
    let (u1, s1) = children_cpu();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "k3 {flags}: {err}");
    eprintln!("{err}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).expect("--out JSON");
    let plan = u(&v, &["memory", "plan", "total"]);
    let rss = u(&v, &["memory", "peak_rss_bytes"]);
    let steps = v["steps"].as_array().unwrap();
    let step = |i: usize, k: &str| steps[i][k].as_f64().unwrap();
    // The prediction at the same budget for the real model (same positions and threads).
    let cfg = released::config().unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut sizes = released::run_sizes(&cfg, IDS.split(',').count() + GEN, threads);
    sizes.tensor_index += k3::bind::experts::location_table_bytes(&cfg, cfg.num_hidden_layers);
    let rp = plan_run(&sizes, &budget_of(flags), None).expect("the prediction's plan");
    let tb = TokenBytes::of_plan(&rp, &sizes, released::moe_layers(&cfg));
    let cols = [
        label.to_string(),
        flags.to_string(),
        v["memory"]["plan"]["budget"]
            .as_u64()
            .map_or("-".into(), |b| b.to_string()),
        plan.to_string(),
        rss.to_string(),
        (rss <= plan).to_string(),
        u(&v, &["trunk", "pinned_layers"]).to_string(),
        format!(
            "{}x{}",
            u(&v, &["trunk", "ring_slots"]),
            u(&v, &["trunk", "slot_bytes"])
        ),
        u(&v, &["memory", "plan", "lm_head_resident_rows"]).to_string(),
        u(&v, &["expert_cache", "slots"]).to_string(),
        format!("{:.1}", f(&v, &["timing", "load_seconds"])),
        format!("{:.1}", step(0, "seconds")),
        format!("{:.1}", step(1, "seconds")),
        format!("{:.1}", u1 - u0),
        format!("{:.1}", s1 - s0),
        format!("{}", step(1, "bytes_read") as u64),
        v["logits_hash"].as_str().unwrap_or("-").to_string(),
        rp.memory.total.to_string(),
        tb.trunk.to_string(),
        tb.tables.to_string(),
        tb.experts.to_string(),
        format!("{:.4}", tb.hit_rate),
        tb.total().to_string(),
        format!("{:.1}", tb.total() as f64 / (DISK_GBPS * 1e9)),
        format!("{load0} / {}", machine::loadavg()),
    ];
    cols.join("\t")
}

fn main() {
    let cli = parse();
    let tmp = std::env::temp_dir();
    let mut out = String::new();
    out += "# the released shape on this machine: two decode steps on the sparse released checkpoint (bench/src/bin/sparse_released.rs)\n";
    out += &format!(
        "# command\tcargo run --release -p k3-bench --bin sparse_released -- {}{}\n",
        cli.dir.display(),
        cli.budgets
            .iter()
            .map(|b| format!(" --budget \"{b}\""))
            .collect::<String>()
    );
    for (k, v) in machine::describe()
        .into_iter()
        .chain(machine::describe_storage(&cli.dir))
    {
        out += &format!("# {k}\t{v}\n");
    }
    out += &format!("# run\tk3 DIR --ids {IDS} --gen {GEN} --verbose --out R.json BUDGET (prefill of 5 positions = step 1, one decode step = step 2)\n");
    out += "# measured: plan_bytes, peak_rss_bytes (VmHWM), seconds (wall, on a shared machine: load average in the last column), cpu seconds of the k3 process; step2_bytes_read counts the holes it read (zeros, no disk: not a bandwidth figure)\n";
    out += &format!("# predicted (k3::plan::released, for the real model at the same budget): bytes a token reads = streamed trunk + tables not resident + expert misses at the real trace's hit rate; s/token = bytes / {DISK_GBPS} GB/s, reads only\n");
    out += "label\tbudget_flags\tbudget_bytes\tplan_bytes\tpeak_rss_bytes\trss_within_plan\tpinned_layers\tring\tlm_head_resident_rows\tcache_slots\tload_s\tprefill_s\tdecode_step_s\tcpu_user_s\tcpu_sys_s\tstep2_bytes_read\tlogits_hash\tpredicted_plan_bytes\tpredicted_trunk_bytes\tpredicted_tables_bytes\tpredicted_expert_bytes\tpredicted_hit_rate\tpredicted_bytes_per_token\tpredicted_s_per_token_3gbps\tloadavg_before_after\n";
    for b in &cli.budgets {
        let (label, flags) = if b == "floor" {
            ("floor".to_string(), floor_flags(&cli))
        } else {
            (b.trim_start_matches("--").to_string(), b.clone())
        };
        let row = run_one(&cli, &label, &flags, &tmp);
        println!("{row}");
        out += &row;
        out.push('\n');
    }
    if let Some(p) = &cli.out {
        std::fs::write(p, out).expect("write --out");
    } else {
        print!("{out}");
    }
}
