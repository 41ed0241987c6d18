//! The memory plan's figures against MODEL.md §7–§8 on the released configuration.

use k3::config::Config;
use k3::model::state::DecodeState;
use k3::model::Dims;
use std::path::PathBuf;

fn k3_dims() -> Dims {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/configs/k3-released-reserialised.json");
    Dims::from_config(&Config::from_file(&p).unwrap())
}

#[test]
fn kda_state_and_mla_cache_match_model_md() {
    let d = k3_dims();
    assert_eq!(d.layer_map().matches('M').count(), 24);
    // MODEL.md §8: KDA state is fixed, 69 × 6,733,824 B
    assert_eq!(DecodeState::kda_bytes(&d, 93), 464_633_856);
    // 55,296 B per position; 4,096 positions = 226,492,416 B
    assert_eq!(DecodeState::mla_bytes(&d, 93, 1), 55_296);
    assert_eq!(DecodeState::mla_bytes(&d, 93, 4096), 226_492_416);
    assert_eq!(DecodeState::mla_bytes(&d, 93, 1_048_576), 57_982_058_496);
    // one expert: 17,547,264 B
    assert_eq!(k3::model::expert_bytes(&d), 17_547_264);
    // a prefix of layers counts only its own layers (layers 0-3: 3 KDA, 1 MLA)
    assert_eq!(DecodeState::kda_bytes(&d, 4), 3 * 6_733_824);
    assert_eq!(DecodeState::mla_bytes(&d, 4, 10), 10 * 2_304);
}

#[test]
fn plan_adds_up_and_refuses_with_exit_3() {
    let d = k3_dims();
    let inp = k3::plan::PlanInput {
        layers: 93,
        positions: 4096,
        chunk: 64,
        logits_rows: 1,
        expert_buffers: 16,
        expert_bytes: k3::model::expert_bytes(&d),
        tensor_index: 21_000_000,
        tokenizer: 5_600_000,
    };
    let mut p = k3::plan::MemoryPlan::resident(&d, &inp);
    let sum = p.trunk_resident
        + p.trunk_ring
        + p.model_tables
        + p.expert_cache
        + p.kda_state
        + p.mla_cache
        + p.scratch
        + p.tokenizer
        + p.tensor_index;
    assert_eq!(p.total, sum);
    // embedding + lm_head as BF16: 2 × 163840 × 7168 × 2 B (plus two H-wide vectors)
    assert_eq!(p.model_tables, 4_697_620_480 + 2 * 7168 * 4);
    // every bound matrix is BF16 and every small vector fp32: at least the 108.8 GB of trunk
    assert!(
        p.trunk_resident >= 108_811_877_376 && p.trunk_resident < 109_000_000_000,
        "{}",
        p.trunk_resident
    );
    p.available = Some(16_000_000_000);
    let e = k3::Error::from(p.check().unwrap_err());
    assert_eq!(e.exit_code(), 3);
    assert!(e.message.contains("short by"));
    p.available = Some(p.total);
    p.check().unwrap();
}
