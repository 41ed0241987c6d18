//! The released Kimi K3 without its files (MODEL.md §2, §9): its config (embedded), the sizes
//! its memory plan is computed from, the expert-cache hit rates of the recorded real routing
//! trace, and the bytes a decoded token reads at a plan. Used by `k3 doctor` (ENGINE.md §12),
//! the README's predicted-speed table (examples/hardware_table.rs) and the plan tests.
//!
//! Everything here is a **prediction**: the sizes are the catalogue's (MODEL.md §4), the index
//! and tokenizer figures were measured on the released checkpoint, and the hit rates come from
//! a short recorded trace (tests/fixtures/real/expert_trace.bin, `k3 sim-cache`).

use super::{buffer_bytes, layer_piece_bytes, layer_run_bytes, layer_vector_bytes, scratch_bytes};
use super::{ModelSizes, RunPlan, RunShape};
use crate::config::Config;
use crate::error::Result;
use crate::model::state::DecodeState;
use crate::model::Dims;

/// The released `config.json`, re-serialised (tests/fixtures/configs/k3-released-reserialised.json).
pub const CONFIG_JSON: &str =
    include_str!("../../tests/fixtures/configs/k3-released-reserialised.json");

/// Bytes of the released tensor index in memory (497,220 tensors), as measured.
pub const TENSOR_INDEX_BYTES: u64 = 21_000_000;
/// Bytes of the released tokenizer tables in memory, as measured.
pub const TOKENIZER_BYTES: u64 = 5_600_000;

/// The released config, parsed from [`CONFIG_JSON`].
///
/// Errors: none in practice (the embedded text is a valid config; exit 2 otherwise).
pub fn config() -> Result<Config> {
    Config::from_json(CONFIG_JSON.as_bytes(), "released config (embedded)")
}

/// The released model's plan inputs for a run of `positions` positions (prompt +
/// generation), prefill chunks of 64, one logits row, no kernel scratch (one thread); index
/// and tokenizer as measured on the released checkpoint.
pub fn sizes(cfg: &Config, positions: usize) -> ModelSizes {
    let d = Dims::from_config(cfg);
    let expert = crate::model::expert_bytes(&d);
    let moe = (0..d.nl).filter(|&l| l >= d.first_dense).count();
    ModelSizes {
        layer_runs: (0..d.nl).map(|l| layer_run_bytes(cfg, l)).collect(),
        layer_pieces: (0..d.nl).map(|l| layer_piece_bytes(cfg, l)).collect(),
        layer_vectors: (0..d.nl).map(|l| layer_vector_bytes(&d, l)).sum(),
        embed: (d.v * d.h * 2) as u64,
        lm_head: if d.tied { 0 } else { (d.v * d.h * 2) as u64 },
        row: (2 * d.h) as u64,
        vocab: d.v,
        table_vectors: (2 * d.h * 4) as u64,
        expert,
        expert_stride: buffer_bytes(expert),
        experts_total: moe * d.e,
        top_k: d.kt,
        kda_state: DecodeState::kda_bytes(&d, d.nl),
        mla_cache: DecodeState::mla_bytes(&d, d.nl, positions),
        scratch: scratch_bytes(&d, 64, 1),
        tokenizer: TOKENIZER_BYTES,
        tensor_index: TENSOR_INDEX_BYTES,
        logits_rows: 1,
    }
}

/// The released model's plan inputs as a run computes them ([`ModelSizes::for_run`]): one
/// sequence of `positions` positions, prefill chunks of 64, `threads` compute threads (their
/// kernel scratch), the measured index and tokenizer sizes. What `k3 doctor` plans with.
pub fn run_sizes(cfg: &Config, positions: usize, threads: usize) -> ModelSizes {
    let d = Dims::from_config(cfg);
    let table = (d.v * d.h * 2) as u64;
    ModelSizes::for_run(
        &d,
        RunShape {
            layers: d.nl,
            layer_runs: (0..d.nl).map(|l| layer_run_bytes(cfg, l)).collect(),
            layer_pieces: (0..d.nl).map(|l| layer_piece_bytes(cfg, l)).collect(),
            embed: table,
            lm_head: if d.tied { 0 } else { table },
            positions,
            chunk: 64,
            all_logits: false,
            threads,
            sequences: 1,
            decoding: 1,
            spec: 0,
            codec_staging: 0,
            tokenizer: TOKENIZER_BYTES,
            tensor_index: TENSOR_INDEX_BYTES,
        },
    )
}

/// Expert-cache hit rates on the recorded real routing trace (the incremental-decode trace of
/// tests/fixtures/real/expert_trace.bin, 17,664 requests, policy `lfu`), by cache slots:
/// bench/results/sim-cache-real.tsv and sim-cache-real-presets.tsv (`k3 sim-cache`).
pub const REAL_TRACE_HIT_RATES: [(usize, f64); 12] = [
    (0, 0.0),
    (17, 0.075917),
    (56, 0.094995),
    (455, 0.121433),
    (569, 0.122452),
    (740, 0.158288),
    (911, 0.184896),
    (1709, 0.258039),
    (1823, 0.260700),
    (3647, 0.365546),
    (6211, 0.415534),
    (7294, 0.423120),
];

/// The trace's ceiling: the share of its requests that are not a first touch (a cache of any
/// size misses every first touch), `ceiling` in the sim-cache tables.
pub const REAL_TRACE_CEILING: f64 = 0.433311;

/// The predicted expert-cache hit rate of `slots` slots out of `experts_total` experts: 1 when
/// every expert fits, else the real trace's rate interpolated linearly between the measured
/// capacities of [`REAL_TRACE_HIT_RATES`] and capped at [`REAL_TRACE_CEILING`] beyond them.
pub fn expert_hit_rate(slots: usize, experts_total: usize) -> f64 {
    if slots >= experts_total {
        return 1.0;
    }
    let t = &REAL_TRACE_HIT_RATES;
    for w in t.windows(2) {
        let ((s0, h0), (s1, h1)) = (w[0], w[1]);
        if slots <= s1 {
            let f = (slots - s0) as f64 / (s1 - s0) as f64;
            return h0 + f * (h1 - h0);
        }
    }
    let (sl, hl) = t[t.len() - 1];
    // Beyond the last measured capacity: linear towards the ceiling at 2× that capacity.
    let f = ((slots - sl) as f64 / sl as f64).min(1.0);
    hl + f * (REAL_TRACE_CEILING - hl)
}

/// What one decoded token reads from disk under a plan (bytes), a prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBytes {
    /// Trunk layers not pinned (every streamed layer is read once per token).
    pub trunk: u64,
    /// lm_head rows not resident, and the embedding row when the table is streamed.
    pub tables: u64,
    /// Routed experts missed: requests × (1 − hit rate) × expert bytes.
    pub experts: u64,
    /// Expert requests per token (MoE layers × top-k).
    pub expert_requests: u64,
    /// The hit rate assumed ([`expert_hit_rate`]).
    pub hit_rate: f64,
}

impl TokenBytes {
    /// The bytes of one token read from disk under `p`, the plan of `s` (one sequence) whose
    /// bound MoE layers number `moe_layers`, with the expert hit rate of [`expert_hit_rate`].
    pub fn of_plan(p: &RunPlan, s: &ModelSizes, moe_layers: usize) -> TokenBytes {
        let requests = (moe_layers * s.top_k) as u64;
        let hit_rate = expert_hit_rate(p.cache_slots, s.experts_total);
        TokenBytes {
            trunk: p.trunk.streamed_bytes,
            tables: p.tables.step_read_bytes(s.row, 1),
            experts: (requests as f64 * (1.0 - hit_rate) * s.expert as f64).round() as u64,
            expert_requests: requests,
            hit_rate,
        }
    }

    /// Trunk + tables: the bytes read in large sequential windows at queue depth 1.
    pub fn sequential(&self) -> u64 {
        self.trunk + self.tables
    }

    /// Every byte read.
    pub fn total(&self) -> u64 {
        self.trunk + self.tables + self.experts
    }
}

/// MoE layers of `cfg` (layers at or after `first_k_dense_replace`).
pub fn moe_layers(cfg: &Config) -> usize {
    (0..cfg.num_hidden_layers)
        .filter(|&l| cfg.is_moe(l))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_config_is_the_released_shape() {
        let cfg = config().unwrap();
        let s = sizes(&cfg, 1024);
        assert_eq!(s.layer_runs.len(), 93);
        assert_eq!(s.layer_runs[0], 2_341_213_184);
        assert_eq!(s.layer_runs.iter().sum::<u64>(), 108_811_877_376);
        assert_eq!(s.experts_total, 92 * 896);
        assert_eq!(s.expert, 17_547_264);
    }

    #[test]
    fn hit_rates_follow_the_trace_and_stay_below_the_ceiling() {
        assert_eq!(expert_hit_rate(0, 100), 0.0);
        assert_eq!(expert_hit_rate(455, 82_432), 0.121433);
        let mid = expert_hit_rate(500, 82_432);
        assert!(mid > 0.121433 && mid < 0.122452);
        assert!(expert_hit_rate(50_000, 82_432) <= REAL_TRACE_CEILING);
        assert_eq!(expert_hit_rate(82_432, 82_432), 1.0);
    }
}
