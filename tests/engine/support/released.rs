//! The released model's plan inputs without its files (shared by tests/engine/plan and
//! examples/hardware_table.rs): the engine's own `k3::plan::released`, which embeds the
//! released config (tests/fixtures/configs/k3-released-reserialised.json).

use k3::config::Config;
use k3::plan::ModelSizes;

/// The released config.
pub fn k3_config() -> Config {
    k3::plan::released::config().unwrap()
}

/// The released model's plan inputs for a run of `positions` positions (prompt + generation),
/// prefill chunks of 64, one logits row; index and tokenizer as measured on the released
/// checkpoint.
pub fn k3_sizes(positions: usize) -> ModelSizes {
    k3::plan::released::sizes(&k3_config(), positions)
}
