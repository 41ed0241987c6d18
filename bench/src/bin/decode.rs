//! Resident decode benchmark: the forward pass of `k3 run` with every bound weight in memory —
//! the trunk, the model tables and *all* routed experts of the bound MoE layers (loaded once
//! before the first token) — so a decode step is pure compute over resident weights. Each
//! step's weight bytes (trunk of the bound layers, lm_head, the distinct experts the step
//! used, one embedding row) over its time is compared with the memory bandwidth measured
//! right before that step, at the same thread count (a streaming read of a buffer 16x the
//! last-level cache, held for the whole run): on a shared machine the bandwidth available
//! drifts by tens of percent within minutes, so each step gets its own reference.
//!
//! ```text
//! cargo run --release -p k3-bench --bin decode -- <model_dir> [--layers N] [--ids a,b,..]
//!     [--gen N] [--threads N] [--isa scalar|avx2|neon] [--membw-reps N] [--out FILE]
//! ```
//! The logits hash printed at the end covers the same vectors as `k3 run`'s `logits_hash`
//! (the last prompt position, then every decode step but the last), so the two can be
//! compared. Results are appended to FILE (default
//! `bench/results/decode-<YYYYMMDD>.tsv`) with the command, machine and load at the top.

use k3::checkpoint::TensorIndex;
use k3::config::Config;
use k3::generate::sample::SamplerSettings;
use k3::generate::session::{SequenceOptions, Session};
use k3::generate::stop::StopRules;
use k3::model::experts::{ExpertSource, ExpertStats, ExpertView, UseExperts};
use k3::model::{self, Dims, Exec};
use k3_bench::membw;
use k3_kernels::{Isa, Kernels};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

struct Opts {
    dir: PathBuf,
    layers: Option<usize>,
    ids: Vec<u32>,
    gen: usize,
    threads: usize,
    isa: Option<String>,
    membw_reps: usize,
    out: Option<String>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        dir: PathBuf::new(),
        layers: None,
        ids: vec![1008, 10484, 318, 15383, 387],
        gen: 6,
        threads: 2,
        isa: None,
        membw_reps: 3,
        out: None,
    };
    let mut dir = None;
    let mut it = std::env::args().skip(1);
    let num = |flag: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or(format!("{flag}: missing value"))?;
        v.parse()
            .map_err(|_| format!("{flag} {v}: expected a whole number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--layers" => o.layers = Some(num("--layers", it.next())?),
            "--gen" => o.gen = num("--gen", it.next())?,
            "--threads" => o.threads = num("--threads", it.next())?,
            "--membw-reps" => o.membw_reps = num("--membw-reps", it.next())?.max(1),
            "--isa" => o.isa = Some(it.next().ok_or("--isa: missing value")?),
            "--out" => o.out = Some(it.next().ok_or("--out: missing value")?),
            "--ids" => {
                let v = it.next().ok_or("--ids: missing value")?;
                o.ids = v
                    .split(',')
                    .map(|s| s.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| format!("--ids {v}: expected comma-separated token ids"))?;
            }
            "--help" | "-h" => {
                return Err("usage: decode <model_dir> [--layers N] [--ids a,b,..] [--gen N] [--threads N] [--isa P] [--membw-reps N] [--out FILE]".into())
            }
            s if !s.starts_with('-') && dir.is_none() => dir = Some(PathBuf::from(s)),
            _ => return Err(format!("{a}: unknown flag (see --help)")),
        }
    }
    o.dir = dir.ok_or("missing <model_dir>")?;
    if o.ids.is_empty() || o.gen == 0 {
        return Err("need at least one prompt id and --gen ≥ 1".into());
    }
    Ok(o)
}

/// Every routed expert of the bound MoE layers, read once through the engine's own source
/// and then held (leaked: they live for the whole benchmark), validated once.
struct ResidentExperts {
    views: Vec<Vec<ExpertView<'static>>>,
    stats: ExpertStats,
    /// Distinct (layer, expert) pairs used since the last `take_used`.
    used: Vec<(usize, u32)>,
}

impl ResidentExperts {
    fn load(src: &mut dyn ExpertSource, d: &Dims, layers: usize) -> k3::Result<Self> {
        let mut views = Vec::with_capacity(layers);
        for l in 0..layers {
            if l < d.first_dense {
                views.push(Vec::new());
                continue;
            }
            // Filled by id: a source hands experts over in the order they become available.
            let mut lv = vec![None; d.e];
            let ids: Vec<u32> = (0..d.e as u32).collect();
            for group in ids.chunks(src.max_batch()) {
                src.with_experts(l, group, &mut |got, vs| {
                    for (&e, v) in got.iter().zip(vs) {
                        let own = |m: &k3_kernels::Mxfp4<'_>| -> k3_kernels::Mxfp4<'static> {
                            let p: &'static [u8] = Box::leak(m.packed().to_vec().into());
                            let s: &'static [u8] = Box::leak(m.scales().to_vec().into());
                            k3_kernels::Mxfp4::new(p, s, m.rows(), m.cols())
                                .expect("a validated matrix stays valid")
                        };
                        lv[e as usize] = Some(ExpertView {
                            w1: own(&v.w1),
                            w2: own(&v.w2),
                            w3: own(&v.w3),
                        });
                    }
                    Ok(())
                })?;
            }
            views.push(
                lv.into_iter()
                    .map(|v| v.expect("every expert was handed over"))
                    .collect(),
            );
        }
        Ok(ResidentExperts {
            views,
            stats: ExpertStats::default(),
            used: Vec::new(),
        })
    }

    fn take_used(&mut self) -> usize {
        std::mem::take(&mut self.used).len()
    }
}

impl ExpertSource for ResidentExperts {
    fn max_batch(&self) -> usize {
        usize::MAX
    }
    fn note_requests(&mut self, _layer: usize, requests: &[u32]) -> k3::Result<()> {
        self.stats.requests += requests.len() as u64;
        self.stats.resident_hits += requests.len() as u64;
        Ok(())
    }
    fn with_experts(
        &mut self,
        layer: usize,
        experts: &[u32],
        f: &mut UseExperts<'_>,
    ) -> k3::Result<()> {
        let vs: Vec<ExpertView<'_>> = experts
            .iter()
            .map(|&e| self.views[layer][e as usize])
            .collect();
        for &e in experts {
            if !self.used.contains(&(layer, e)) {
                self.used.push((layer, e));
            }
        }
        f(experts, &vs)
    }
    fn stats(&self) -> ExpertStats {
        self.stats
    }
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("decode: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        eprintln!("decode: {}", e.message);
        std::process::exit(e.exit_code());
    }
}

fn run(o: &Opts) -> k3::Result<()> {
    let load_before = k3_bench::machine::loadavg();
    let llc = membw::llc_bytes().unwrap_or(32 << 20);
    let bwbuf = membw::buffer(16 * llc);
    let bw0 = membw::measure(&bwbuf, o.threads, o.membw_reps);
    eprintln!(
        "membw before: {:.2} GB/s best, {:.2} median ({} threads)",
        bw0.best_bytes_per_s / 1e9,
        bw0.median_bytes_per_s / 1e9,
        o.threads
    );
    let cfg = Config::from_file(&o.dir.join("config.json"))?;
    let d = Dims::from_config(&cfg);
    let layers = o.layers.unwrap_or(d.nl).min(d.nl);
    let isa = match &o.isa {
        Some(v) => Isa::select("--isa", v),
        None => Isa::from_env(),
    }
    .map_err(|e| k3::Error::invalid(e.message))?;
    let ex = Exec::new(Kernels::new(isa, o.threads).map_err(|e| k3::Error::invalid(e.message))?);
    let t_load = Instant::now();
    let index = TensorIndex::open(&o.dir)?;
    let bound = k3::bind::bind_resident(&index, &cfg, layers, d.kt)?;
    let (m, trunk, mut pread) = (bound.model, bound.trunk, bound.experts);
    let experts = ResidentExperts::load(&mut pread, &d, layers)?;
    drop(pread);
    let trunk_bytes: usize = trunk.bufs.iter().map(|b| b.len() * 2).sum();
    let head_bytes = d.v * d.h * 2;
    let xb = model::expert_bytes(&d) as usize;
    eprintln!(
        "loaded {layers} layers in {:.1} s: trunk {:.3} GB, lm_head {:.3} GB, experts {} x {:.1} MB resident",
        t_load.elapsed().as_secs_f64(),
        trunk_bytes as f64 / 1e9,
        head_bytes as f64 / 1e9,
        experts.views.iter().map(|v| v.len()).sum::<usize>(),
        xb as f64 / 1e6
    );

    // The decode goes through the engine's session (issue 12): greedy, no end ids, --gen ids.
    let mut sess = Session::new(m, trunk, experts, ex, o.ids.len().max(1))?;
    let rules = StopRules::new(
        vec![],
        vec![],
        vec![],
        o.gen as u64,
        (o.ids.len() + o.gen) as u64,
        d.v,
    )?;
    let so = SequenceOptions {
        settings: SamplerSettings::greedy(),
        rules,
        all_rows: false,
    };
    let mut seq = sess.sequence(&o.ids, o.ids.len() + o.gen, so)?;
    let t0 = Instant::now();
    sess.prefill(&mut seq, None, &mut |_| Ok(()))?;
    let prefill = t0.elapsed().as_secs_f64();
    sess.experts.take_used();
    eprintln!("prefill: {} positions, {prefill:.3} s", o.ids.len());
    // (seconds, weight bytes, memory bandwidth measured right before, bytes/s)
    let mut steps: Vec<(f64, usize, f64)> = Vec::new();
    let mut step = 0;
    while seq.active() {
        let bw_step = membw::measure(&bwbuf, o.threads, o.membw_reps).best_bytes_per_s;
        let f = sess.step(&mut [&mut seq], &mut |_| Ok(()))?;
        step += 1;
        if !seq.active() {
            break; // the last id was chosen: no forward ran
        }
        let s = f.seconds;
        let n_exp = sess.experts.take_used();
        let bytes = trunk_bytes + head_bytes + n_exp * xb + d.h * 2;
        eprintln!(
            "step {step}: {s:.4} s, {n_exp} experts, {:.3} GB, {:.2} GB/s = {:.1}% of {:.2} GB/s measured before it",
            bytes as f64 / 1e9,
            bytes as f64 / s / 1e9,
            100.0 * bytes as f64 / s / bw_step,
            bw_step / 1e9
        );
        steps.push((s, bytes, bw_step));
    }
    let generated = seq.generated().to_vec();
    let hash_fin = seq.logits_hash();
    let (isa_name, threads) = (sess.ex.isa().name(), sess.ex.threads());
    drop(sess);
    let bw1 = membw::measure(&bwbuf, o.threads, o.membw_reps);
    let load_after = k3_bench::machine::loadavg();
    let hash = hash_fin;
    eprintln!(
        "membw after: {:.2} GB/s best; logits hash {hash:016x}; generated {:?}",
        bw1.best_bytes_per_s / 1e9,
        generated
    );

    let mut secs: Vec<f64> = steps.iter().map(|s| s.0).collect();
    secs.sort_by(|a, b| a.total_cmp(b));
    let mut ratios: Vec<f64> = steps.iter().map(|s| s.1 as f64 / s.0 / s.2).collect();
    ratios.sort_by(|a, b| a.total_cmp(b));
    let mut s = String::new();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(
        s,
        "# command: cargo run --release -p k3-bench --bin decode -- {}",
        args.join(" ")
    );
    for (k, v) in k3_bench::machine::describe() {
        let _ = writeln!(s, "# {k}: {v}");
    }
    let _ = writeln!(
        s,
        "# git: {}; isa {}; threads {}; layers {layers}; loadavg before {load_before}, after {load_after}",
        k3::GIT_COMMIT,
        isa_name,
        threads
    );
    let _ = writeln!(
        s,
        "# membw (streaming read of {} bytes, {} threads, best of {}): before loading {:.3} GB/s, after the run {:.3}; each step row has the figure measured right before it",
        bwbuf.len() * 8,
        o.threads,
        o.membw_reps,
        bw0.best_bytes_per_s / 1e9,
        bw1.best_bytes_per_s / 1e9,
    );
    let _ = writeln!(
        s,
        "# prefill {} positions {prefill:.4} s; logits hash {hash:016x}; generated {:?}",
        o.ids.len(),
        generated
    );
    let _ = writeln!(
        s,
        "kind\tstep\tseconds\tweight_bytes\tGBps\tmembw_GBps\tratio"
    );
    for (i, (t, b, bw)) in steps.iter().enumerate() {
        let _ = writeln!(
            s,
            "step\t{}\t{t:.4}\t{b}\t{:.3}\t{:.3}\t{:.3}",
            i + 1,
            *b as f64 / t / 1e9,
            bw / 1e9,
            *b as f64 / t / bw
        );
    }
    if !secs.is_empty() {
        let med = secs[secs.len() / 2];
        let ratio = ratios[ratios.len() / 2];
        let bytes = steps.iter().map(|s| s.1).sum::<usize>() as f64 / steps.len() as f64;
        let _ = writeln!(
            s,
            "median\t-\t{med:.4}\t{bytes:.0}\t{:.3}\t-\t{ratio:.3}",
            bytes / med / 1e9,
        );
        eprintln!(
            "median step {med:.4} s/token: {:.2} GB/s of weights; median ratio to the memory bandwidth measured before each step {:.1}%",
            bytes / med / 1e9,
            100.0 * ratio
        );
    }
    let path = o.out.clone().unwrap_or_else(|| {
        format!(
            "{}/results/decode-{}.tsv",
            env!("CARGO_MANIFEST_DIR"),
            k3_bench::machine::describe()
                .into_iter()
                .find(|(k, _)| k == "date_utc")
                .map(|(_, v)| v.chars().filter(|c| c.is_ascii_digit()).take(8).collect())
                .unwrap_or_else(|| "undated".to_string())
        )
    });
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| k3::Error::io(format!("{path}: {e}")))?;
    f.write_all(s.as_bytes())
        .map_err(|e| k3::Error::io(format!("{path}: {e}")))?;
    eprintln!("appended to {path}");
    Ok(())
}
