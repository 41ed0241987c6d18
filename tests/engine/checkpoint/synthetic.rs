//! The synthetic checkpoint generator (the `k3-synth` crate) against the engine: `k3 inspect`
//! accepts every variant the generator writes (layer maps, dense prefixes, tied head, optional
//! tensors, flat config, shard plans) and reads back the config it was given.

use crate::support;

use k3::json::{self, Value};
use std::path::Path;
use support::{run_k3, scratch_dir};
use synth::{Options, SynthSpec};

fn generate(spec: &SynthSpec, name: &str) -> std::path::PathBuf {
    let dir = scratch_dir(name);
    synth::generate(
        spec,
        &dir,
        Options {
            threads: 2,
            ..Options::default()
        },
    )
    .expect("generate");
    dir
}

fn inspect_json(dir: &Path) -> Value {
    let out = run_k3([Path::new("inspect"), dir, Path::new("--json")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}: {stderr}", dir.display());
    json::parse(&out.stdout).unwrap_or_else(|e| panic!("inspect --json output: {e}"))
}

fn int(v: &Value, path: &[&str]) -> i64 {
    let mut cur = v;
    for k in path {
        cur = cur
            .get(k)
            .unwrap_or_else(|| panic!("inspect JSON lacks {}", path.join(".")));
    }
    cur.as_number()
        .and_then(|n| n.as_i64())
        .unwrap_or_else(|| panic!("{} is not an integer", path.join(".")))
}

fn text(v: &Value, path: &[&str]) -> String {
    let mut cur = v;
    for k in path {
        cur = cur
            .get(k)
            .unwrap_or_else(|| panic!("inspect JSON lacks {}", path.join(".")));
    }
    cur.as_str()
        .unwrap_or_else(|| panic!("{} is not a string", path.join(".")))
        .to_string()
}

/// Checks the engine's view of a generated checkpoint against the spec.
fn check(spec: &SynthSpec, name: &str) {
    let dir = generate(spec, name);
    let out = run_k3([Path::new("inspect"), &dir]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
    assert!(stdout.contains("census: ok"), "{name}:\n{stdout}");
    assert!(
        stdout.contains(&format!("\nlayer map: {}\n", spec.layer_map())),
        "{name}:\n{stdout}"
    );
    let j = inspect_json(&dir);
    let c = |k: &str| int(&j, &["config", k]);
    assert_eq!(c("hidden_size"), spec.hidden_size as i64);
    assert_eq!(c("num_hidden_layers"), spec.num_hidden_layers as i64);
    assert_eq!(c("num_experts"), spec.num_experts as i64);
    assert_eq!(
        c("num_experts_per_token"),
        spec.num_experts_per_token as i64
    );
    assert_eq!(
        c("first_k_dense_replace"),
        spec.first_k_dense_replace as i64
    );
    assert_eq!(c("kda_num_heads"), spec.kda_num_heads as i64);
    assert_eq!(c("kda_head_dim"), spec.kda_head_dim as i64);
    assert_eq!(text(&j, &["config", "layer_map"]), spec.layer_map());
    assert_eq!(
        text(&j, &["config", "config_shape"]),
        if spec.nested_config { "nested" } else { "flat" }
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inspect_accepts_the_small_preset() {
    check(&SynthSpec::small(13, 8), "synth-small-13");
}

#[test]
fn inspect_accepts_every_variant() {
    let mut s = SynthSpec::small(7, 6);
    s.full_attn_layers = vec![1, 6, 7]; // MLA at layer 0 and the last two
    s.first_k_dense_replace = 3;
    s.attn_res_block_size = 2;
    s.num_experts_per_token = 6; // top-k = E
    s.layers_per_shard = 4;
    s.seed = 5;
    check(&s, "synth-mla0-dense3");

    let mut t = SynthSpec::small(5, 4);
    t.tie_word_embeddings = true;
    t.mla_use_output_gate = false;
    t.latent_moe_use_norm = false;
    t.num_shared_experts = 0;
    t.nested_config = false;
    t.vision_dummies = false;
    t.first_k_dense_replace = 0; // every layer MoE
    t.kda_num_heads = 20; // Hk > Dk: A_log has Hk entries, all used
    check(&t, "synth-flat-tied");

    // Moderate widths with the released head structure (the MLA head widths, KDA head dim 128,
    // E8M0 ranges for wider fan-in) in one small file set.
    let mut m = SynthSpec::k3(4, 8);
    m.hidden_size = 256;
    m.vocab_size = 1024;
    m.kda_num_heads = 2;
    m.num_attention_heads = 2;
    m.q_lora_rank = 64;
    m.kv_lora_rank = 32;
    m.routed_expert_hidden_size = 128;
    m.moe_intermediate_size = 96;
    m.intermediate_size = 320;
    m.num_experts_per_token = 4;
    m.special_ids = [1021, 1022, 1023];
    check(&m, "synth-moderate");
}
