//! Batched decode benchmark in process (issue 12; the `k3 --batch` benchmark over budgets is
//! the `batch` binary, `cargo xtask bench batch`): B = 1, 2, 4, 8 sequences stepping together
//! through one session (one forward per step over all of them), resident trunk and tables,
//! experts read on demand (`PreadExperts`, through the page cache). Prints per B the median
//! step time, the aggregate tokens/s, the experts read per step, and the ratios to B = 1 of
//! the same run.
//!
//! ```text
//! cargo run --release -p k3-bench --bin batch_session -- <model_dir> [--gen N] [--threads N] [--layers N]
//! ```
//! Not yet: the streamed budgets (about 7.4 GB, each B's smallest) and the device-figure
//! comparison of the issue; results are printed, not written to bench/results/.

use k3::bind::bind_resident;
use k3::checkpoint::TensorIndex;
use k3::config::Config;
use k3::generate::sample::SamplerSettings;
use k3::generate::session::{Sequence, SequenceOptions, Session};
use k3::generate::stop::StopRules;
use k3::model::experts::ExpertSource;
use k3::model::{Dims, Exec};
use k3_kernels::{Isa, Kernels};
use std::path::PathBuf;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().filter(|a| !a.starts_with("--")) else {
        eprintln!("usage: batch_session <model_dir> [--gen N] [--threads N] [--layers N]");
        std::process::exit(2);
    };
    if let Err(e) = run(PathBuf::from(dir), &args) {
        eprintln!("batch_session: {}", e.message);
        std::process::exit(e.exit_code());
    }
}

fn run(dir: PathBuf, args: &[String]) -> k3::Result<()> {
    let gen: usize = arg(args, "--gen", 16);
    let threads: usize = arg(args, "--threads", 2);
    let cfg = Config::from_file(&dir.join("config.json"))?;
    let d = Dims::from_config(&cfg);
    let layers: usize = arg(args, "--layers", d.nl).min(d.nl);
    let index = TensorIndex::open(&dir)?;
    let b = bind_resident(&index, &cfg, layers, d.kt)?;
    let isa = Isa::from_env().map_err(|e| k3::Error::invalid(e.message))?;
    let ex = Exec::new(Kernels::new(isa, threads).map_err(|e| k3::Error::invalid(e.message))?);
    let mut sess = Session::new(b.model, b.trunk, b.experts, ex, 64)?;
    println!("B\tmedian_step_s\ttokens_per_s\texpert_reads_per_step\tstep_ratio\ttps_ratio");
    let mut base: Option<(f64, f64)> = None;
    for bsz in [1usize, 2, 4, 8] {
        let mut seqs: Vec<Sequence> = (0..bsz)
            .map(|i| {
                let prompt: Vec<u32> = (0..8u32)
                    .map(|p| (p * 31 + i as u32 * 97 + 3) % d.v as u32)
                    .collect();
                let rules =
                    StopRules::new(vec![], vec![], vec![], gen as u64, (8 + gen) as u64, d.v)?;
                let o = SequenceOptions {
                    settings: SamplerSettings::greedy(),
                    rules,
                    all_rows: false,
                };
                sess.sequence(&prompt, 8 + gen, o)
            })
            .collect::<k3::Result<_>>()?;
        for s in &mut seqs {
            sess.prefill(s, None, &mut |_| Ok(()))?;
        }
        let mut secs = Vec::new();
        let r0 = sess.experts.stats().reads;
        while seqs.iter().any(|s| s.active()) {
            let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
            let f = sess.step(&mut refs, &mut |_| Ok(()))?;
            if f.seconds > 0.0 {
                secs.push(f.seconds);
            }
        }
        let reads = sess.experts.stats().reads - r0;
        secs.sort_by(|a, b| a.total_cmp(b));
        let med = secs.get(secs.len() / 2).copied().unwrap_or(0.0);
        let tps = if med > 0.0 { bsz as f64 / med } else { 0.0 };
        let (s1, t1) = *base.get_or_insert((med, tps));
        println!(
            "{bsz}\t{med:.5}\t{tps:.1}\t{:.1}\t{:.3}\t{:.3}",
            reads as f64 / secs.len().max(1) as f64,
            med / s1.max(f64::MIN_POSITIVE),
            tps / t1.max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}
