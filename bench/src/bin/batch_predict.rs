//! Prediction (not a measurement) of the released model's batch gain (issue 12's Bench): the
//! expected union of experts per MoE layer for B sequences from the real routing trace
//! (`tests/fixtures/real/expert_trace.bin`, FORMATS.md §8), the engine's own memory plan of
//! the released model for B sequences at each budget (the released config and byte formulas,
//! as examples/hardware_table.rs, no checkpoint files), and so the bytes a disk-bound step of B
//! sequences reads and the tokens/s gain over B = 1 at a stated read bandwidth.
//!
//! `cargo run --release -p k3-bench --bin batch_predict [-- --gbps 3 --out FILE]`
//! Compute time is ignored; the expert-cache hit rate is slots ÷ experts (uniform routing).

use k3::config::Config;
use k3::model::Dims;
use k3::plan::{
    gb_to_bytes, layer_piece_bytes, layer_run_bytes, plan_run, Budget, ModelSizes, RunShape,
};
use k3_bench::predict::{mean_union, positions_from_trace, uniform_union};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Positions planned per sequence (prompt + generation), as examples/hardware_table.rs.
const POSITIONS: usize = 1024;
const BUDGETS_GB: [f64; 3] = [8.0, 16.0, 32.0];
const BATCHES: [usize; 4] = [1, 2, 4, 8];
/// The real routing trace and the released config, relative to the workspace.
const TRACE: &str = "tests/fixtures/real/expert_trace.bin";
const CONFIG: &str = "tests/fixtures/configs/k3-released-reserialised.json";

fn sizes(cfg: &Config, d: &Dims, sequences: usize) -> ModelSizes {
    ModelSizes::for_run(
        d,
        RunShape {
            layers: d.nl,
            layer_runs: (0..d.nl).map(|l| layer_run_bytes(cfg, l)).collect(),
            layer_pieces: (0..d.nl).map(|l| layer_piece_bytes(cfg, l)).collect(),
            embed: (d.v * d.h * 2) as u64,
            lm_head: (d.v * d.h * 2) as u64,
            positions: POSITIONS,
            chunk: 64,
            all_logits: false,
            threads: 8,
            sequences,
            decoding: sequences,
            // As measured on the released checkpoint (tests/engine/support/released.rs).
            tokenizer: 5_600_000,
            tensor_index: 21_000_000,
            spec: 0,
            codec_staging: 0,
        },
    )
}

fn main() {
    if let Err(e) = run() {
        eprintln!("batch_predict: error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut gbps = 3.0f64;
    let mut out: Option<PathBuf> = None;
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned();
        match (args[i].as_str(), v) {
            ("--gbps", Some(v)) => {
                gbps = v
                    .parse()
                    .ok()
                    .filter(|g: &f64| g.is_finite() && *g > 0.0)
                    .ok_or(format!("--gbps: expected a positive number, found `{v}`"))?
            }
            ("--out", Some(v)) => out = Some(PathBuf::from(v)),
            (a, _) => {
                return Err(format!(
                    "{a}: unknown argument or missing value (--gbps X, --out FILE)"
                ))
            }
        }
        i += 2;
    }
    let trace_path = root.join(TRACE);
    let cfg_path = root.join(CONFIG);
    let bytes = std::fs::read(&trace_path).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    let cfg = Config::from_file(&cfg_path)
        .map_err(|e| format!("{}: {}", cfg_path.display(), e.message))?;
    let d = Dims::from_config(&cfg);
    let (pos, differing) = positions_from_trace(&bytes, 5, 8, d.kt)?;
    let moe_layers = pos.first().map_or(0, Vec::len);
    let expert = k3::model::expert_bytes(&d);

    let mut t = String::new();
    let _ = writeln!(t, "# PREDICTION, not a measurement: cargo run --release -p k3-bench --bin batch_predict -- --gbps {gbps}");
    let _ = writeln!(t, "# date\t{}", k3_bench::machine::utc_now());
    let _ = writeln!(t, "# trace\t{TRACE} ({} positions from the last of 8 full-recompute forwards; {} earlier positions routed differently)", pos.len(), differing);
    let _ = writeln!(t, "# model\treleased config {CONFIG}: {moe_layers} MoE layers x {} experts, top-{}, expert {expert} B; plan for {POSITIONS} positions per sequence, chunk 64, 8 threads", d.e, d.kt);
    let _ = writeln!(t, "# method\tunion = mean over layers and over every set of B of the trace's positions (drawn as B different sequences) of the distinct experts they request; the positions are consecutive tokens of one prompt, so they overlap more than independent sequences would (the uniform column is independent uniform routing). Expert bytes/step = sum over layers of union x (1 - hit) x expert bytes, hit = cache slots / experts (uniform). Step bytes = streamed trunk + streamed lm_head rows + B embedding rows (when streamed) + expert bytes. Step s = bytes / read bandwidth; tokens/s = B / step s; gain = vs B = 1 at the same budget, each B with its own plan (B sequences' states planned).");
    let _ = writeln!(t, "# section union");
    let _ = writeln!(
        t,
        "B\tunion_per_layer_trace\tunion_per_layer_uniform\tunion_vs_B_x_topk"
    );
    let mut unions = Vec::new();
    for &b in &BATCHES {
        let u = mean_union(&pos, b);
        unions.push(u);
        let _ = writeln!(
            t,
            "{b}\t{u:.2}\t{:.2}\t{:.3}",
            uniform_union(d.e, d.kt, b),
            u / (b * d.kt) as f64
        );
    }
    let _ = writeln!(t, "# section predict (read bandwidth {gbps} GB/s)");
    let _ = writeln!(t, "budget_GB\tB\tplan_total_B\tstate_B\ttrunk_streamed_B\ttable_B_per_step\tcache_slots\thit\texpert_B_per_step\tstep_B\tstep_s\ttokens_per_s\tgain_vs_B1\tbytes_vs_B1\tgain_vs_B1_uniform_routing");
    for &g in &BUDGETS_GB {
        let mut base: Option<(f64, f64)> = None;
        for (bi, &b) in BATCHES.iter().enumerate() {
            let s = sizes(&cfg, &d, b);
            let budget = Budget {
                mem: Some(gb_to_bytes(g)),
                ..Budget::default()
            };
            let p = match plan_run(&s, &budget, None) {
                Ok(p) => p,
                Err(e) => {
                    let _ = writeln!(
                        t,
                        "{g}\t{b}\trefused: {}",
                        k3::Error::from(e).message.replace('\t', " ")
                    );
                    continue;
                }
            };
            let trunk = p.trunk.streamed_bytes as f64;
            let tables = p.tables.step_read_bytes(s.row, b) as f64;
            let hit = (p.cache_slots as f64 / s.experts_total as f64).min(1.0);
            let per_union = moe_layers as f64 * (1.0 - hit) * expert as f64;
            let experts = per_union * unions[bi];
            let step = trunk + tables + experts;
            let step_uniform = trunk + tables + per_union * uniform_union(d.e, d.kt, b);
            let secs = step / (gbps * 1e9);
            let tps = b as f64 / secs;
            let (tps1, step1) = *base.get_or_insert((tps, step));
            let gain_uniform = b as f64 * step1 / step_uniform;
            let _ = writeln!(
                t,
                "{g}\t{b}\t{}\t{}\t{trunk:.0}\t{tables:.0}\t{}\t{hit:.4}\t{experts:.0}\t{step:.0}\t{secs:.2}\t{tps:.4}\t{:.2}\t{:.3}\t{gain_uniform:.2}",
                p.memory.total,
                s.kda_state + s.mla_cache,
                p.cache_slots,
                tps / tps1,
                step / step1
            );
        }
    }
    print!("{t}");
    if let Some(o) = out {
        std::fs::write(&o, &t).map_err(|e| format!("{}: {e}", o.display()))?;
        eprintln!("wrote {}", o.display());
    }
    Ok(())
}
