//! The released model's plan inputs without its files (shared by tests/plan_budgets.rs and
//! examples/hardware_table.rs): the released config and the byte figures of MODEL.md §9.

use k3::config::Config;
use k3::model::state::DecodeState;
use k3::model::Dims;
use k3::plan::{
    buffer_bytes, layer_piece_bytes, layer_run_bytes, layer_vector_bytes, scratch_bytes, ModelSizes,
};
use std::path::PathBuf;

/// The released config (tests/fixtures/configs/k3-released-reserialised.json).
pub fn k3_config() -> Config {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/configs/k3-released-reserialised.json");
    Config::from_file(&p).unwrap()
}

/// The released model's plan inputs for a run of `positions` positions (prompt + generation),
/// prefill chunks of 64, one logits row; index and tokenizer as measured on the released
/// checkpoint (tests/model_plan.rs).
pub fn k3_sizes(positions: usize) -> ModelSizes {
    let cfg = k3_config();
    let d = Dims::from_config(&cfg);
    let expert = k3::model::expert_bytes(&d);
    ModelSizes {
        layer_runs: (0..d.nl).map(|l| layer_run_bytes(&cfg, l)).collect(),
        layer_pieces: (0..d.nl).map(|l| layer_piece_bytes(&cfg, l)).collect(),
        layer_vectors: (0..d.nl).map(|l| layer_vector_bytes(&d, l)).sum(),
        embed: (d.v * d.h * 2) as u64,
        lm_head: (d.v * d.h * 2) as u64,
        row: (2 * d.h) as u64,
        vocab: d.v,
        table_vectors: (2 * d.h * 4) as u64,
        expert,
        expert_stride: buffer_bytes(expert),
        experts_total: 92 * d.e,
        top_k: d.kt,
        kda_state: DecodeState::kda_bytes(&d, d.nl),
        mla_cache: DecodeState::mla_bytes(&d, d.nl, positions),
        scratch: scratch_bytes(&d, 64, 1),
        tokenizer: 5_600_000,
        tensor_index: 21_000_000,
        logits_rows: 1,
    }
}
