//! `k3 sim-cache <trace.bin> [--policy NAME]... [--capacity-gb X]... [--slots N]...
//! [--expert-bytes N] [--tsv PATH]` (ENGINE.md §3): replays an expert trace (FORMATS.md §8)
//! under each eviction policy and capacity and prints the hit rates next to Belady's optimum
//! and the compulsory-miss ceiling. A full-recompute trace (such as the recorded real one) is
//! replayed as recorded and as the incremental-decode trace derived from it; the policy that
//! does best on the incremental one (mean hit rate over the capacities) is named.

use crate::cli::args::{Args, Spec};
use crate::error::{Error, Result};
use crate::io::OutFile;
use crate::stream::policy::POLICY_NAMES;
use crate::stream::sim::{belady, compulsory, simulate, SimResult};
use crate::stream::trace::{derive_incremental, read_trace};
use crate::stream::ExpertKey;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Bytes of one K3 routed expert (FORMATS.md §4): the default `--expert-bytes`.
pub const K3_EXPERT_BYTES: u64 = 17_547_264;

/// Capacities of the default table, decimal GB (ENGINE.md §3: sizes in GB are 10^9 bytes).
pub const DEFAULT_CAPACITIES_GB: &[&str] = &["8", "16", "32", "64", "128"];

const USAGE: &str = "\
usage: k3 sim-cache <trace.bin> [--policy NAME]... [--capacity-gb X]... [--slots N]...
                    [--model DIR | --expert-bytes N] [--tsv PATH]
  Replays an expert trace (docs/formats.md) under each policy and capacity, next to Belady's
  optimum and the compulsory-miss ceiling. A full-recompute trace is also replayed as the
  incremental-decode trace derived from it; the best policy on that one is named.
  --policy NAME      repeatable; default: every policy (lru, fifo, sieve, s3-fifo, arc, 2q,
                     lfu-da, lfu)
  --capacity-gb X    repeatable; slots = floor(X × 10^9 / expert bytes); default 8 16 32 64 128
  --slots N          repeatable; a capacity given in slots
  --model DIR        take the bytes per expert from DIR/config.json (the model the trace
                     came from, `k3 <model_dir> --dump-cache-trace OUT`)
  --expert-bytes N   bytes per expert (default 17547264, a K3 expert)
  --tsv PATH         also write the table as TSV, with the command that made it
";

pub(crate) const SPECS: &[Spec] = &[
    Spec::Switch("help"),
    Spec::Repeat("policy"),
    Spec::Repeat("capacity-gb"),
    Spec::Repeat("slots"),
    Spec::Value("expert-bytes"),
    Spec::Value("model"),
    Spec::Value("tsv"),
];

/// Bytes per expert: `--expert-bytes N`, or the six expert tensors of `--model DIR`'s config
/// (MODEL.md §4), or K3's. Errors (exit 2): both flags given, a bad value or config.
fn expert_bytes(args: &Args) -> Result<u64> {
    let given: Option<u64> = args.parsed("expert-bytes", "a positive integer")?;
    let model = args.value_os("model").map(PathBuf::from);
    let bytes = match (given, model) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "sim-cache: give `--model DIR` or `--expert-bytes N`, not both",
            ))
        }
        (Some(n), None) => n,
        (None, Some(dir)) => crate::catalogue::expert_bytes(&crate::config::Config::from_file(
            &dir.join("config.json"),
        )?),
        (None, None) => K3_EXPERT_BYTES,
    };
    Ok(bytes)
}

/// One cache size of the table.
#[derive(Debug, Clone)]
struct Capacity {
    /// As given (`8`), or `-` for `--slots`.
    gb: String,
    slots: usize,
}

/// One replayed trace variant.
struct Variant {
    name: &'static str,
    what: String,
    records: Vec<ExpertKey>,
}

/// Runs the subcommand; `argv` excludes `sim-cache` itself.
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(args) = Args::parse_or_help(argv, SPECS, USAGE)? else {
        return Ok(());
    };
    let trace_path = trace_path(&args)?;
    let expert_bytes = expert_bytes(&args)?;
    if expert_bytes == 0 {
        return Err(Error::invalid("flag `--expert-bytes`: must be at least 1"));
    }
    let policies = policies(&args)?;
    let capacities = capacities(&args, expert_bytes)?;
    // The TSV path is checked (its temporary created) before the replay, as a run's outputs.
    let mut tsv_out = match args.value_os("tsv") {
        Some(p) => Some({
            // never over the trace being replayed, through any link or spelling
            crate::io::out::check_outputs(&[("--tsv", PathBuf::from(&p))], &[], &[&trace_path])?;
            OutFile::create("--tsv", Path::new(&p), "the sim-cache table")?
        }),
        None => None,
    };

    let records = read_trace(&trace_path)?;
    let mut out = String::new();
    let variants = variants(&trace_path, records, &mut out);
    let _ = writeln!(
        out,
        "capacity in slots = floor(GB × 10^9 / {expert_bytes} bytes per expert{}); hit rate = \
         1 − reads / requests",
        if args.present(&["model", "expert-bytes"]).is_empty() {
            ", K3's: give --model DIR for another model"
        } else {
            ""
        }
    );

    let mut tsv = String::new();
    let _ = writeln!(
        tsv,
        "trace\tcapacity_gb\tslots\tpolicy\trequests\treads\tevictions\ttrue_resident_hits\thit_rate"
    );
    let mut best_line = String::new();
    for (vi, v) in variants.iter().enumerate() {
        let best = replay(v, &policies, &capacities, &mut out, &mut tsv)?;
        if vi == 0 {
            // The first variant is the incremental one when it exists: choose on it.
            let _ = writeln!(out, "{best}");
            best_line = best;
        }
    }
    // The table is the command's output: a failed write is exit 4, not a silent success.
    crate::cli::write_stdout(out.as_bytes())?;
    if let Some(mut f) = tsv_out.take() {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "# expert-cache hit rates vs Belady's optimum and the compulsory-miss ceiling"
        );
        let _ = writeln!(text, "# command: {}", command_line(argv));
        let _ = writeln!(text, "# k3 {} ({})", crate::VERSION, crate::GIT_COMMIT);
        for l in out.lines().take(3) {
            let _ = writeln!(text, "# {l}");
        }
        let _ = writeln!(text, "# {best_line}");
        text.push_str(&tsv);
        f.write_all(text.as_bytes())?;
        f.commit()?;
    }
    Ok(())
}

/// The one positional argument: the trace file. Errors (exit 2): none or several given.
fn trace_path(args: &Args) -> Result<PathBuf> {
    Ok(match args.positional.as_slice() {
        [p] => PathBuf::from(p),
        [] => {
            return Err(Error::invalid(
                "sim-cache: missing the trace file (usage: k3 sim-cache <trace.bin> \
                 [--policy NAME]... [--capacity-gb X]...)",
            ))
        }
        more => {
            return Err(Error::invalid(format!(
                "sim-cache: one trace file expected, got {} arguments",
                more.len()
            )))
        }
    })
}

/// The `--policy` names (deduplicated), or every policy. Errors (exit 2): an unknown name.
fn policies(args: &Args) -> Result<Vec<String>> {
    let mut policies = args.values("policy")?;
    for p in &policies {
        if !POLICY_NAMES.contains(&p.as_str()) {
            return Err(Error::invalid(format!(
                "flag `--policy`: unknown cache policy `{p}` (known: {})",
                POLICY_NAMES.join(", ")
            )));
        }
    }
    if policies.is_empty() {
        policies = POLICY_NAMES.iter().map(|s| s.to_string()).collect();
    }
    policies.dedup();
    Ok(policies)
}

/// The trace variants to replay: the derived incremental-decode trace first (when `records`
/// is a full-recompute trace), then the trace as recorded; their description goes to `out`.
fn variants(trace_path: &Path, records: Vec<ExpertKey>, out: &mut String) -> Vec<Variant> {
    let mut variants = Vec::new();
    let layers = {
        let mut l: Vec<u32> = records.iter().map(|k| k.layer).collect();
        crate::sort::sort(&mut l);
        l.dedup();
        l
    };
    let incremental = derive_incremental(&records);
    let _ = writeln!(
        out,
        "trace {}: {} requests over {} MoE layers ({}..{})",
        trace_path.display(),
        records.len(),
        layers.len(),
        layers[0],
        layers[layers.len() - 1]
    );
    match &incremental {
        Some(inc) => {
            let _ = writeln!(
                out,
                "full recompute: {} steps over {} positions (top-{}); derived incremental-decode \
                 trace: {} requests (first step as one prefill chunk, then each new position once)",
                inc.steps,
                join_positions(&inc.positions),
                inc.top_k,
                inc.records.len()
            );
            variants.push(Variant {
                name: "incremental",
                what: "incremental decode (derived)".into(),
                records: inc.records.clone(),
            });
            variants.push(Variant {
                name: "full-recompute",
                what: "full recompute (as recorded)".into(),
                records,
            });
        }
        None => {
            let _ = writeln!(out, "not a full-recompute trace: replayed as recorded");
            variants.push(Variant {
                name: "recorded",
                what: "as recorded".into(),
                records,
            });
        }
    }
    variants
}

/// Replays variant `v` under every policy and capacity, next to Belady's optimum and the
/// compulsory-miss ceiling: its table goes to `out`, its TSV rows to `tsv`. Returns the line
/// naming the policy with the best mean hit rate over the capacities. Errors: as [`simulate`].
fn replay(
    v: &Variant,
    policies: &[String],
    capacities: &[Capacity],
    out: &mut String,
    tsv: &mut String,
) -> Result<String> {
    let (distinct, ceiling) = compulsory(&v.records);
    let _ = writeln!(
        out,
        "\n{}: {} requests, {} distinct experts, compulsory-miss ceiling {}",
        v.what,
        v.records.len(),
        distinct,
        pct(ceiling)
    );
    let mut header = format!("{:>11} {:>6}", "capacity_gb", "slots");
    for p in policies {
        let _ = write!(header, " {:>8}", p);
    }
    let _ = write!(header, " {:>8} {:>8}", "belady", "ceiling");
    let _ = writeln!(out, "{header}");
    let mut sums = vec![0.0f64; policies.len()];
    for c in capacities {
        let mut line = format!("{:>11} {:>6}", c.gb, c.slots);
        for (pi, p) in policies.iter().enumerate() {
            let r = simulate(&v.records, c.slots, p)?;
            sums[pi] += r.hit_rate();
            let _ = write!(line, " {:>8}", pct(r.hit_rate()));
            tsv_row(tsv, v.name, c, &r);
        }
        let b = belady(&v.records, c.slots);
        let _ = write!(line, " {:>8} {:>8}", pct(b.hit_rate()), pct(ceiling));
        tsv_row(tsv, v.name, c, &b);
        let _ = writeln!(
            tsv,
            "{}\t{}\t{}\tceiling\t{}\t{}\t0\t{}\t{:.6}",
            v.name,
            c.gb,
            c.slots,
            v.records.len(),
            distinct,
            v.records.len() - distinct,
            ceiling
        );
        let _ = writeln!(out, "{line}");
    }
    let mut best = 0;
    for i in 1..policies.len() {
        if sums[i] > sums[best] {
            best = i;
        }
    }
    Ok(format!(
        "best policy on the {} trace: {} (mean hit rate {} over {} capacities)",
        v.name,
        policies[best],
        pct(sums[best] / capacities.len() as f64),
        capacities.len()
    ))
}

fn capacities(args: &Args, expert_bytes: u64) -> Result<Vec<Capacity>> {
    let gbs = args.values("capacity-gb")?;
    let slots = args.values("slots")?;
    let mut out = Vec::new();
    let defaults: Vec<String>;
    let gbs = if gbs.is_empty() && slots.is_empty() {
        defaults = DEFAULT_CAPACITIES_GB
            .iter()
            .map(|s| s.to_string())
            .collect();
        &defaults
    } else {
        &gbs
    };
    for g in gbs {
        let v: f64 = g
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v > 0.0)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "flag `--capacity-gb`: `{g}` is not a positive number of GB"
                ))
            })?;
        let n = crate::plan::gb_to_bytes(v) / expert_bytes;
        if n < 1 || n > u32::MAX as u64 {
            return Err(Error::invalid(format!(
                "flag `--capacity-gb`: {g} GB holds {n} experts of {expert_bytes} bytes (need \
                 1 … {})",
                u32::MAX
            )));
        }
        out.push(Capacity {
            gb: g.trim().to_string(),
            slots: n as usize,
        });
    }
    for s in &slots {
        let n: usize = s
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=u32::MAX as usize).contains(n))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "flag `--slots`: `{s}` is not a positive number of slots"
                ))
            })?;
        out.push(Capacity {
            gb: "-".into(),
            slots: n,
        });
    }
    Ok(out)
}

fn tsv_row(tsv: &mut String, trace: &str, c: &Capacity, r: &SimResult) {
    let _ = writeln!(
        tsv,
        "{trace}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.6}",
        c.gb,
        c.slots,
        r.policy,
        r.requests,
        r.reads,
        r.evictions,
        r.true_resident_hits,
        r.hit_rate()
    );
}

fn pct(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

fn join_positions(p: &[usize]) -> String {
    let consecutive = p.windows(2).all(|w| w[1] == w[0] + 1);
    if consecutive && p.len() > 2 {
        format!("{}..{}", p[0], p[p.len() - 1])
    } else {
        p.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn command_line(argv: &[OsString]) -> String {
    let mut s = String::from("k3 sim-cache");
    for a in argv {
        let a = a.to_string_lossy();
        if a.is_empty()
            || a.chars()
                .any(|c| !(c.is_ascii_alphanumeric() || "-_./=,:".contains(c)))
        {
            let _ = write!(s, " '{}'", a.replace('\'', "'\\''"));
        } else {
            let _ = write!(s, " {a}");
        }
    }
    s
}
