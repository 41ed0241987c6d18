//! Config reader (MODEL.md §2, §3): shapes, lookup order, the KDA exception, the layer map,
//! derived constants, the fingerprint, and one test per refusal rule, each with a config that
//! fails in exactly that way (generated in code from the tiny-k3 config).

use crate::support;

use k3::config::{AttnKind, Config, ConfigShape, MlaForm};
use k3::json::{self, Value};
use support::fixture;

fn tiny_value() -> Value {
    let bytes = std::fs::read(fixture("tiny-k3/config.json")).unwrap();
    json::parse(&bytes).unwrap()
}

fn load(v: &Value) -> k3::Result<Config> {
    Config::from_value(v, "test/config.json")
}

fn tc(v: &mut Value) -> &mut Value {
    v.get_mut("text_config").unwrap()
}

fn lac(v: &mut Value) -> &mut Value {
    tc(v).get_mut("linear_attn_config").unwrap()
}

fn set(v: &mut Value, key: &str, x: impl Into<Value>) {
    v.as_object_mut().unwrap().insert(key, x);
}

fn num(text: &str) -> Value {
    json::parse(text.as_bytes()).unwrap()
}

/// Asserts the load fails with exit 2, naming the origin, and every fragment.
fn refused(v: &Value, fragments: &[&str]) -> String {
    let e = load(v).expect_err("config should be refused");
    assert_eq!(e.exit_code(), 2, "{}", e.message);
    assert!(
        e.message.starts_with("test/config.json: "),
        "message must start with the file: {}",
        e.message
    );
    for f in fragments {
        assert!(e.message.contains(f), "message lacks {f:?}:\n{}", e.message);
    }
    e.message
}

/// Asserts the config fails with exactly one problem (not a cascade).
fn refused_once(v: &Value, fragments: &[&str]) {
    let m = refused(v, fragments);
    assert!(
        !m.contains("problems:"),
        "expected exactly one problem:\n{m}"
    );
}

#[test]
fn tiny_k3_nested_loads_with_its_layer_map() {
    let c = Config::from_file(&fixture("tiny-k3/config.json")).unwrap();
    assert_eq!(c.shape, ConfigShape::Nested);
    assert_eq!(c.layer_map(), "KKKMKKKMKKKMM");
    assert_eq!(c.mla_layers(), [3, 7, 11, 12]);
    assert_eq!(c.boundaries(), [0, 3, 6, 9, 12]);
    assert!(c.is_dense(0) && !c.is_dense(1) && c.is_moe(12));
    assert!(c.is_boundary(9) && !c.is_boundary(10));
    assert_eq!(c.attn_kind(12), AttnKind::Mla);
    assert_eq!((c.kda_num_heads, c.kda_head_dim), (4, 16));
    assert_eq!(c.derived.snapshots, 5);
    assert_eq!(c.derived.n_kda, 9);
    assert_eq!(c.derived.n_mla, 4);
    assert_eq!(c.derived.shared_width, 128);
    assert_eq!(c.eos_token_id, Some(510));
    assert_eq!(c.bos_token_id, Some(509));
    assert_eq!(c.max_position_embeddings, Some(1048576));
    let q = c.quantization_config.as_ref().unwrap();
    assert_eq!(q.scope, "text_config.quantization_config");
    assert_eq!(q.groups.len(), 1);
    assert_eq!((q.groups[0].num_bits, q.groups[0].group_size), (4, 32));
}

#[test]
fn tiny_k3_text_loads() {
    let c = Config::from_file(&fixture("tiny-k3-text/config.json")).unwrap();
    assert_eq!(c.layer_map(), "KKMKM");
    assert_eq!(c.boundaries(), [0, 2, 4]);
    assert_eq!(c.vocab_size, 163840);
}

#[test]
fn config_summary_matches_expected_json() {
    // expected.json's config_summary is the reference's resolved config (canonical names).
    let exp = json::parse(&std::fs::read(fixture("tiny-k3/expected.json")).unwrap()).unwrap();
    let s = exp.get("config_summary").unwrap();
    let c = Config::from_file(&fixture("tiny-k3/config.json")).unwrap();
    let u = |k: &str| s.get(k).unwrap().as_number().unwrap().as_u64().unwrap() as usize;
    let f = |k: &str| s.get(k).unwrap().as_number().unwrap().as_f64();
    assert_eq!(c.hidden_size, u("hidden_size"));
    assert_eq!(c.kda_num_heads, u("kda_num_heads"));
    assert_eq!(c.kda_head_dim, u("kda_head_dim"));
    assert_eq!(c.situ_beta, f("situ_beta"));
    assert_eq!(c.situ_linear_beta, f("situ_linear_beta"));
    assert_eq!(c.gate_lower_bound, f("gate_lower_bound"));
    assert_eq!(
        c.layer_map(),
        s.get("layer_kinds").unwrap().as_str().unwrap()
    );
    assert_eq!(
        c.shape.as_str(),
        s.get("config_shape").unwrap().as_str().unwrap()
    );
    let list = |k: &str| -> Vec<usize> {
        s.get(k)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_number().unwrap().as_u64().unwrap() as usize)
            .collect()
    };
    assert_eq!(c.mla_layers(), list("mla_layers_zero_based"));
    assert_eq!(c.boundaries(), list("attn_res_boundaries_zero_based"));
    let moe: Vec<usize> = (0..c.num_hidden_layers).filter(|&l| c.is_moe(l)).collect();
    assert_eq!(moe, list("moe_layers_zero_based"));
}

#[test]
fn released_shape_maps_mla_to_zero_based_3_7_to_91_92() {
    // Nested, 93 layers, real K3 values, and the re-serialisation traps
    // (text_config.head_dim = 74, text_config.num_heads = 64, root head_dim/num_heads).
    let c = Config::from_file(&fixture("configs/k3-released-reserialised.json")).unwrap();
    let mut mla: Vec<usize> = (3..92).step_by(4).collect();
    mla.push(92);
    assert_eq!(c.mla_layers(), mla);
    assert_eq!(c.mla_layers().len(), 24);
    assert_eq!(c.derived.n_kda, 69);
    let map = c.layer_map();
    assert_eq!(&map[..8], "KKKMKKKM");
    assert!(map.ends_with("KKKMM"));
    assert_eq!(c.attn_kind(0), AttnKind::Kda);
    assert_eq!(c.attn_kind(91), AttnKind::Mla);
    assert_eq!(c.attn_kind(92), AttnKind::Mla);
    assert_eq!(c.attn_kind(90), AttnKind::Kda);
    // The KDA exception: linear_attn_config wins over every trap.
    assert_eq!((c.kda_num_heads, c.kda_head_dim), (96, 128));
    // §2.6 derived constants, K3 column.
    let d = &c.derived;
    assert_eq!(d.kda_proj_width, 12288);
    // MODEL.md §5.1 defines sD = 1.0/sqrt(Dk as f64) = 0.08838834764831843; the §2.6 table
    // prints 0.08838834764831845 (Dk**-0.5, one ulp away). §5.1 is the numerics contract.
    assert_eq!(d.kda_query_scale, 1.0 / 128f64.sqrt());
    assert_eq!(d.kda_query_scale, 0.08838834764831843);
    assert_eq!(d.mla_head_width, 192);
    assert_eq!(d.mla_softmax_scale, 0.07216878364870323);
    assert_eq!(d.q_b_rows, 18432);
    assert_eq!(d.kv_a_rows, 576);
    assert_eq!(d.kv_b_rows, 24576);
    assert_eq!(d.mla_out_width, 12288);
    assert_eq!(d.mla_cache_row, 576);
    assert_eq!(d.shared_width, 6144);
    assert_eq!((d.n_dense, d.n_moe), (1, 92));
    assert_eq!(c.boundaries(), [0, 12, 24, 36, 48, 60, 72, 84]);
    assert!(c
        .boundaries()
        .iter()
        .all(|&l| c.attn_kind(l) == AttnKind::Kda));
    assert_eq!((d.snapshots, d.max_agg_sources), (8, 9));
    assert_eq!((d.groups_w13, d.groups_w2), (112, 96));
    assert_eq!(d.conv_history, 3);
    assert_eq!(d.a_log_len, 128);
}

#[test]
fn head_dim_trap_in_text_config_is_never_read() {
    // The tiny config plus the traps: it must load with linear_attn_config's 4 x 16.
    let mut v = tiny_value();
    set(tc(&mut v), "head_dim", 74u64);
    set(tc(&mut v), "num_heads", 7u64);
    set(&mut v, "head_dim", 74u64);
    set(&mut v, "num_heads", 7u64);
    set(tc(&mut v), "kda_head_dim", 99u64);
    let c = load(&v).unwrap();
    assert_eq!((c.kda_num_heads, c.kda_head_dim), (4, 16));
    // Without linear_attn_config.head_dim the trap must not be used as a fallback.
    lac(&mut v).as_object_mut().unwrap().remove("head_dim");
    refused_once(
        &v,
        &["missing required key text_config.linear_attn_config.head_dim"],
    );
    // The flat spelling inside linear_attn_config is the one allowed fallback.
    set(lac(&mut v), "kda_head_dim", 16u64);
    assert_eq!(load(&v).unwrap().kda_head_dim, 16);
}

#[test]
fn flat_config_loads_like_the_nested_one() {
    let flat = Config::from_file(&fixture("configs/tiny-k3-flat.json")).unwrap();
    let nested = Config::from_file(&fixture("tiny-k3/config.json")).unwrap();
    assert_eq!(flat.shape, ConfigShape::Flat);
    assert_eq!(flat.layer_map(), nested.layer_map());
    assert_eq!(
        flat.canonical_string(MlaForm::Absorbed),
        nested.canonical_string(MlaForm::Absorbed)
    );
    assert_eq!(flat.derived, nested.derived);
    // Flat: root `num_heads`/`head_dim` are never read for KDA.
    let mut v = json::parse(&std::fs::read(fixture("configs/tiny-k3-flat.json")).unwrap()).unwrap();
    set(&mut v, "head_dim", 74u64);
    set(&mut v, "num_heads", 3u64);
    let c = load(&v).unwrap();
    assert_eq!((c.kda_num_heads, c.kda_head_dim), (4, 16));
    v.as_object_mut().unwrap().remove("kda_head_dim");
    refused_once(&v, &["missing required key kda_head_dim"]);
}

#[test]
fn flat_config_reads_a_root_linear_attn_config_after_the_root() {
    let mut v = json::parse(&std::fs::read(fixture("configs/tiny-k3-flat.json")).unwrap()).unwrap();
    let o = v.as_object_mut().unwrap();
    let full = o.remove("full_attn_layers").unwrap();
    let kc = o.remove("short_conv_kernel_size").unwrap();
    o.insert(
        "linear_attn_config",
        json::Object::new()
            .with("full_attn_layers", full)
            .with("short_conv_kernel_size", kc)
            .with("kda_head_dim", 99u64),
    );
    let c = load(&v).unwrap();
    assert_eq!(c.layer_map(), "KKKMKKKMKKKMM");
    assert_eq!(c.kda_head_dim, 16, "flat KDA dims come only from the root");
}

#[test]
fn lookup_order_text_config_first_and_null_is_absent() {
    let mut v = tiny_value();
    // Root echo disagrees: text_config wins.
    set(&mut v, "hidden_size", 999u64);
    assert_eq!(load(&v).unwrap().hidden_size, 128);
    // text_config null: falls through to the next scope (root).
    set(tc(&mut v), "hidden_size", Value::Null);
    assert_eq!(load(&v).unwrap().hidden_size, 999);
    // Released spelling before flat spelling in the same scope.
    set(tc(&mut v), "situ_beta", 3.0);
    assert_eq!(load(&v).unwrap().situ_beta, 4.0);
    tc(&mut v)
        .as_object_mut()
        .unwrap()
        .remove("activation_situ_beta");
    assert_eq!(load(&v).unwrap().situ_beta, 3.0);
}

#[test]
fn fingerprint_matches_the_canonical_string() {
    let c = Config::from_file(&fixture("tiny-k3/config.json")).unwrap();
    let s = c.canonical_string(MlaForm::Absorbed);
    assert_eq!(
        s,
        "hidden_size=128;num_hidden_layers=13;vocab_size=512;rms_norm_eps=0x3ee4f8b588e368f1;\
tie_word_embeddings=0;kda_num_heads=4;kda_head_dim=16;short_conv_kernel_size=4;\
gate_lower_bound=0xc014000000000000;num_attention_heads=4;q_lora_rank=64;kv_lora_rank=32;\
qk_nope_head_dim=24;qk_rope_head_dim=8;v_head_dim=16;mla_use_output_gate=1;num_experts=8;\
num_experts_per_token=2;num_shared_experts=2;routed_expert_hidden_size=64;\
moe_intermediate_size=64;routed_scaling_factor=0x3ff0000000000000;moe_renormalize=1;\
latent_moe_use_norm=1;first_k_dense_replace=1;intermediate_size=96;attn_res_block_size=3;\
situ_beta=0x4010000000000000;situ_linear_beta=0x4039000000000000;layer_map=KKKMKKKMKKKMM;\
numerics=1;mla_form=absorbed;"
    );
    // Computed independently (Python) from the string above.
    assert_eq!(c.fingerprint(MlaForm::Absorbed), 0xefcb9cf199d2f7f5);
    assert_ne!(
        c.fingerprint(MlaForm::Expanded),
        c.fingerprint(MlaForm::Absorbed)
    );
}

// ------------------------------------------------------------------------------------------
// Refusals (MODEL.md §2.5), one config per rule.
// ------------------------------------------------------------------------------------------

#[test]
fn refuse_missing_required_keys_all_listed_at_once() {
    let mut v = tiny_value();
    let t = tc(&mut v).as_object_mut().unwrap();
    t.remove("hidden_size");
    t.remove("activation_situ_beta");
    t.insert("routed_scaling_factor", Value::Null); // null counts as absent
    lac(&mut v)
        .as_object_mut()
        .unwrap()
        .remove("full_attn_layers");
    refused_once(
        &v,
        &[
            "missing required keys",
            "hidden_size",
            "routed_scaling_factor",
            "activation_situ_beta",
            "full_attn_layers",
            "searched text_config, text_config.linear_attn_config, the root",
        ],
    );
}

#[test]
fn refuse_each_missing_required_key() {
    let required = [
        "hidden_size",
        "num_hidden_layers",
        "vocab_size",
        "rms_norm_eps",
        "num_attention_heads",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "num_experts",
        "num_experts_per_token",
        "num_shared_experts",
        "routed_expert_hidden_size",
        "moe_intermediate_size",
        "routed_scaling_factor",
        "first_k_dense_replace",
        "intermediate_size",
        "activation_situ_beta",
        "activation_situ_linear_beta",
        "attn_res_block_size",
    ];
    for key in required {
        let mut v = tiny_value();
        tc(&mut v).as_object_mut().unwrap().remove(key);
        // Root echoes of these keys do not exist in the fixture, except the token ids.
        refused_once(&v, &[&format!("missing required key {key} ")]);
    }
    for key in [
        "num_heads",
        "head_dim",
        "short_conv_kernel_size",
        "gate_lower_bound",
        "full_attn_layers",
    ] {
        let mut v = tiny_value();
        lac(&mut v).as_object_mut().unwrap().remove(key);
        refused_once(&v, &["missing required key", key]);
    }
}

#[test]
fn refuse_wrong_types() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "hidden_size",
            num("128.0"),
            "text_config.hidden_size: expected int, found number 128.0",
        ),
        (
            "hidden_size",
            num("1.28e2"),
            "expected int, found number 1.28e2",
        ),
        (
            "hidden_size",
            Value::from("128"),
            "expected int, found string \"128\"",
        ),
        (
            "tie_word_embeddings",
            num("0"),
            "expected bool (true/false), found number 0",
        ),
        (
            "moe_renormalize",
            Value::from("true"),
            "text_config.moe_renormalize: expected bool",
        ),
        (
            "rms_norm_eps",
            Value::from("1e-5"),
            "rms_norm_eps: expected float, found string",
        ),
        (
            "rms_norm_eps",
            num("1e400"),
            "rms_norm_eps: 1e400 is not finite",
        ),
        ("routed_scaling_factor", num("-1e999"), "is not finite"),
        (
            "num_experts",
            num("99999999999999999999"),
            "integer 99999999999999999999 is out of range",
        ),
        (
            "eos_token_id",
            Value::from("x"),
            "text_config.eos_token_id: expected int",
        ),
        (
            "max_position_embeddings",
            num("-1"),
            "max_position_embeddings: must be ≥ 0",
        ),
        ("hidden_act", num("1"), "hidden_act: expected string"),
    ];
    for (key, val, frag) in cases {
        let mut v = tiny_value();
        set(tc(&mut v), key, val);
        refused_once(&v, &[frag]);
    }
    let mut v = tiny_value();
    set(lac(&mut v), "full_attn_layers", Value::from("4,8"));
    refused_once(&v, &["full_attn_layers: expected int list, found string"]);
    let mut v = tiny_value();
    set(lac(&mut v), "full_attn_layers", num("[4, 8.0, 12, 13]"));
    refused_once(&v, &["full_attn_layers[1]: expected int, found number 8.0"]);
}

#[test]
fn refuse_non_positive_required_widths_but_allow_zero_rope_and_shared() {
    for key in [
        "hidden_size",
        "num_hidden_layers",
        "vocab_size",
        "num_attention_heads",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "v_head_dim",
        "num_experts",
        "intermediate_size",
        "attn_res_block_size",
    ] {
        for bad in ["0", "-3"] {
            let mut v = tiny_value();
            set(tc(&mut v), key, num(bad));
            refused_once(
                &v,
                &[&format!("text_config.{key}: must be ≥ 1, found {bad}")],
            );
        }
    }
    for key in ["num_heads", "head_dim", "short_conv_kernel_size"] {
        let mut v = tiny_value();
        set(lac(&mut v), key, 0u64);
        refused_once(
            &v,
            &[&format!(
                "text_config.linear_attn_config.{key}: must be ≥ 1, found 0"
            )],
        );
    }
    let mut v = tiny_value();
    set(tc(&mut v), "qk_rope_head_dim", -1i64);
    refused_once(&v, &["qk_rope_head_dim: must be ≥ 0, found -1"]);
    let mut v = tiny_value();
    set(tc(&mut v), "num_shared_experts", -1i64);
    refused_once(&v, &["num_shared_experts: must be ≥ 0, found -1"]);
    // Zero rope width and zero shared experts are legitimate.
    let mut v = tiny_value();
    set(tc(&mut v), "qk_rope_head_dim", 0u64);
    set(tc(&mut v), "num_shared_experts", 0u64);
    let c = load(&v).unwrap();
    assert_eq!(c.derived.shared_width, 0);
    assert_eq!(c.derived.mla_head_width, 24);
}

#[test]
fn refuse_non_positive_floats() {
    for (scope_lac, key, bad, frag) in [
        (false, "rms_norm_eps", "0", "must be > 0, found 0"),
        (false, "rms_norm_eps", "-1e-5", "must be > 0"),
        (
            false,
            "activation_situ_beta",
            "0.0",
            "activation_situ_beta: must be > 0",
        ),
        (
            false,
            "activation_situ_linear_beta",
            "-25",
            "activation_situ_linear_beta: must be > 0",
        ),
        (
            true,
            "gate_lower_bound",
            "0",
            "gate_lower_bound: must be < 0, found 0",
        ),
        (
            true,
            "gate_lower_bound",
            "-0.0",
            "gate_lower_bound: must be < 0",
        ),
        (
            true,
            "gate_lower_bound",
            "5.0",
            "gate_lower_bound: must be < 0, found 5",
        ),
    ] {
        let mut v = tiny_value();
        let scope = if scope_lac { lac(&mut v) } else { tc(&mut v) };
        set(scope, key, num(bad));
        refused_once(&v, &[frag]);
    }
}

#[test]
fn refuse_topk_zero_or_above_num_experts() {
    let mut v = tiny_value();
    set(tc(&mut v), "num_experts_per_token", 0u64);
    refused_once(&v, &["num_experts_per_token: must be ≥ 1, found 0"]);
    let mut v = tiny_value();
    set(tc(&mut v), "num_experts_per_token", 9u64);
    refused_once(
        &v,
        &["num_experts_per_token: top-k 9 exceeds num_experts 8"],
    );
    // Kt = E is allowed.
    let mut v = tiny_value();
    set(tc(&mut v), "num_experts_per_token", 8u64);
    load(&v).unwrap();
}

#[test]
fn refuse_mxfp4_widths_not_multiples_of_32() {
    for key in ["routed_expert_hidden_size", "moe_intermediate_size"] {
        let mut v = tiny_value();
        set(tc(&mut v), key, 48u64);
        refused_once(
            &v,
            &[&format!("text_config.{key}: 48 is not a multiple of 32")],
        );
    }
}

#[test]
fn refuse_layer_index_out_of_range_or_duplicate() {
    for (list, frag) in [
        (
            "[0, 4, 8, 12, 13]",
            "full_attn_layers[0]: one-based layer index 0 is outside 1..13",
        ),
        (
            "[4, 8, 12, 14]",
            "full_attn_layers[3]: one-based layer index 14 is outside 1..13",
        ),
        ("[4, 8, 12, -1]", "index -1 is outside 1..13"),
    ] {
        let mut v = tiny_value();
        set(lac(&mut v), "full_attn_layers", num(list));
        // kda_layers is removed so that only the index rule fails.
        lac(&mut v).as_object_mut().unwrap().remove("kda_layers");
        refused_once(&v, &[frag]);
    }
    let mut v = tiny_value();
    set(lac(&mut v), "full_attn_layers", num("[4, 8, 12, 13, 8]"));
    refused_once(&v, &["full_attn_layers[4]: duplicate layer 8"]);
}

#[test]
fn refuse_kda_layers_not_the_exact_complement() {
    // One layer missing from both lists.
    let mut v = tiny_value();
    set(lac(&mut v), "kda_layers", num("[1, 2, 3, 5, 6, 7, 9, 10]"));
    refused_once(
        &v,
        &[
            "kda_layers: is not the exact complement",
            "in neither list: [11]",
        ],
    );
    // One layer in both lists.
    let mut v = tiny_value();
    set(
        lac(&mut v),
        "kda_layers",
        num("[1, 2, 3, 4, 5, 6, 7, 9, 10, 11]"),
    );
    refused_once(&v, &["in both lists: [4]"]);
    // Zero-based kda_layers (the classic misread): both kinds of mismatch.
    let mut v = tiny_value();
    set(
        lac(&mut v),
        "kda_layers",
        num("[0, 1, 2, 4, 5, 6, 8, 9, 10]"),
    );
    let m = refused(&v, &["index 0 is outside 1..13"]);
    assert!(m.contains("kda_layers"), "{m}");
    // A duplicate in kda_layers.
    let mut v = tiny_value();
    set(
        lac(&mut v),
        "kda_layers",
        num("[1, 2, 3, 5, 6, 7, 9, 10, 11, 11]"),
    );
    refused_once(&v, &["kda_layers[9]: duplicate layer 11"]);
    // Absent kda_layers is fine (optional).
    let mut v = tiny_value();
    lac(&mut v).as_object_mut().unwrap().remove("kda_layers");
    assert_eq!(load(&v).unwrap().layer_map(), "KKKMKKKMKKKMM");
}

#[test]
fn refuse_all_mla_no_kda_layer_remains() {
    let mut v = tiny_value();
    set(
        lac(&mut v),
        "full_attn_layers",
        Value::from((1..=13u64).collect::<Vec<_>>()),
    );
    lac(&mut v).as_object_mut().unwrap().remove("kda_layers");
    refused_once(
        &v,
        &["full_attn_layers: covers all 13 layers: no KDA layer remains"],
    );
}

#[test]
fn mla_at_layer_zero_and_last_two_and_several_dense_layers() {
    let mut v = tiny_value();
    set(lac(&mut v), "full_attn_layers", num("[1, 12, 13]"));
    lac(&mut v).as_object_mut().unwrap().remove("kda_layers");
    set(tc(&mut v), "first_k_dense_replace", 3u64);
    set(tc(&mut v), "attn_res_block_size", 5u64);
    let c = load(&v).unwrap();
    assert_eq!(c.layer_map(), "MKKKKKKKKKKMM");
    assert!(c.is_dense(2) && !c.is_dense(3));
    assert_eq!(c.boundaries(), [0, 5, 10]);
    assert_eq!(c.derived.snapshots, 3);
    // An explicit empty list is a legitimate all-KDA model; only an absent list is refused.
    let mut v = tiny_value();
    set(lac(&mut v), "full_attn_layers", Value::Array(vec![]));
    lac(&mut v).as_object_mut().unwrap().remove("kda_layers");
    assert_eq!(load(&v).unwrap().layer_map(), "K".repeat(13));
}

#[test]
fn refuse_first_k_dense_replace_above_layers() {
    let mut v = tiny_value();
    set(tc(&mut v), "first_k_dense_replace", 14u64);
    refused_once(
        &v,
        &["first_k_dense_replace: 14 exceeds num_hidden_layers 13"],
    );
    let mut v = tiny_value();
    set(tc(&mut v), "first_k_dense_replace", 13u64);
    assert_eq!(load(&v).unwrap().derived.n_moe, 0);
    set(tc(&mut v), "first_k_dense_replace", -1i64);
    refused_once(&v, &["first_k_dense_replace: must be ≥ 0, found -1"]);
}

#[test]
fn refuse_values_that_must_be_fixed() {
    let cases: Vec<(bool, &str, Value, &str)> = vec![
        (
            false,
            "mla_use_nope",
            false.into(),
            "mla_use_nope: must be true",
        ),
        (
            true,
            "use_full_rank_gate",
            false.into(),
            "use_full_rank_gate: must be true",
        ),
        (
            false,
            "moe_router_activation_func",
            "softmax".into(),
            "must be \"sigmoid\"",
        ),
        (
            false,
            "hidden_act",
            "silu".into(),
            "hidden_act: must be \"situ\"",
        ),
        (
            false,
            "num_expert_group",
            8u64.into(),
            "num_expert_group: must be 1, found 8",
        ),
        (
            false,
            "topk_group",
            2u64.into(),
            "topk_group: must be 1, found 2",
        ),
        (
            false,
            "moe_layer_freq",
            2u64.into(),
            "moe_layer_freq: must be 1, found 2",
        ),
    ];
    for (in_lac, key, val, frag) in cases {
        let mut v = tiny_value();
        let scope = if in_lac { lac(&mut v) } else { tc(&mut v) };
        set(scope, key, val);
        refused_once(&v, &[frag]);
    }
    // The O defaults apply only when absent.
    let mut v = tiny_value();
    for k in [
        "mla_use_nope",
        "moe_router_activation_func",
        "hidden_act",
        "num_expert_group",
        "topk_group",
        "moe_layer_freq",
        "mla_use_output_gate",
        "moe_renormalize",
        "latent_moe_use_norm",
        "tie_word_embeddings",
        "quantization_config",
    ] {
        tc(&mut v).as_object_mut().unwrap().remove(k);
    }
    v.as_object_mut().unwrap().remove("tie_word_embeddings");
    v.as_object_mut().unwrap().remove("quantization_config");
    lac(&mut v)
        .as_object_mut()
        .unwrap()
        .remove("use_full_rank_gate");
    let c = load(&v).unwrap();
    assert!(c.mla_use_output_gate && c.moe_renormalize && c.latent_moe_use_norm);
    assert!(!c.tie_word_embeddings);
    assert!(c.quantization_config.is_none());
}

#[test]
fn refuse_quantization_other_than_mxfp4_group_32() {
    type Edit = fn(&mut Value);
    let cases: Vec<(Edit, &str)> = vec![
        (
            |q| set(q, "quant_method", "gptq"),
            "text_config.quantization_config.quant_method: must be \"compressed-tensors\"",
        ),
        (
            |q| set(q, "format", "nvfp4-pack-quantized"),
            "quantization_config.format: must be \"mxfp4-pack-quantized\"",
        ),
        (
            |q| set(w(q), "num_bits", 8u64),
            "config_groups.group_0.weights.num_bits: must be 4",
        ),
        (
            |q| set(w(q), "type", "int"),
            "config_groups.group_0.weights.type: must be \"float\"",
        ),
        (
            |q| set(w(q), "group_size", 16u64),
            "config_groups.group_0.weights.group_size: must be 32",
        ),
        (
            |q| set(w(q), "symmetric", false),
            "config_groups.group_0.weights.symmetric: must be true",
        ),
        (
            |q| {
                q.as_object_mut().unwrap().remove("config_groups");
            },
            "quantization_config.config_groups: missing",
        ),
        (
            |q| set(q, "config_groups", json::Object::new()),
            "quantization_config.config_groups: is empty",
        ),
        (
            |q| {
                w(q).as_object_mut().unwrap().remove("group_size");
            },
            "weights.group_size: missing; must be 32",
        ),
    ];
    fn w(q: &mut Value) -> &mut Value {
        q.get_mut("config_groups")
            .unwrap()
            .get_mut("group_0")
            .unwrap()
            .get_mut("weights")
            .unwrap()
    }
    for (edit, frag) in cases {
        let mut v = tiny_value();
        edit(tc(&mut v).get_mut("quantization_config").unwrap());
        refused_once(&v, &[frag]);
    }
    let mut v = tiny_value();
    set(tc(&mut v), "quantization_config", "mxfp4");
    refused_once(&v, &["text_config.quantization_config: expected object"]);
}

#[test]
fn refuse_bad_shapes_of_the_document() {
    let e = Config::from_json(b"[1]", "c.json").unwrap_err();
    assert!(e
        .message
        .contains("c.json: the config must be a JSON object, found array"));
    let mut v = tiny_value();
    set(&mut v, "text_config", "oops");
    refused(&v, &["text_config: expected object, found string"]);
    let mut v = tiny_value();
    set(tc(&mut v), "linear_attn_config", 3u64);
    refused(
        &v,
        &["text_config.linear_attn_config: expected object, found number"],
    );
    // Malformed JSON: the file and byte offset are named.
    let e = Config::from_json(b"{\"hidden_size\": 12,\n \"x\": }", "cfg/config.json").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message.starts_with(
            "cfg/config.json: invalid JSON at byte 26: expected a JSON value, found '}'"
        ),
        "{}",
        e.message
    );
    let e = Config::from_json(b"{\"a\":1,\"a\":2}", "cfg/config.json").unwrap_err();
    assert!(
        e.message.contains("duplicate member name \"a\""),
        "{}",
        e.message
    );
    let e = Config::from_file(std::path::Path::new("/nonexistent/config.json")).unwrap_err();
    assert!(e
        .message
        .starts_with("/nonexistent/config.json: cannot read config"));
}

#[test]
fn refuse_absurd_sizes_without_allocating() {
    let mut v = tiny_value();
    set(tc(&mut v), "num_hidden_layers", 1u64 << 40);
    lac(&mut v).as_object_mut().unwrap().remove("kda_layers");
    refused_once(&v, &["num_hidden_layers: must be ≤ 65536"]);
    let mut v = tiny_value();
    set(tc(&mut v), "vocab_size", 1u64 << 40);
    set(tc(&mut v), "hidden_size", 1u64 << 40);
    refused_once(&v, &["tensor size V·H overflows 64 bits"]);
    let mut v = tiny_value();
    set(tc(&mut v), "num_attention_heads", i64::MAX);
    refused(&v, &["overflows"]);
}

#[test]
fn every_problem_is_reported_together() {
    let mut v = tiny_value();
    set(tc(&mut v), "hidden_size", "big");
    set(tc(&mut v), "num_experts_per_token", 0u64);
    set(tc(&mut v), "moe_intermediate_size", 40u64);
    set(lac(&mut v), "kda_layers", num("[1, 2]"));
    tc(&mut v).as_object_mut().unwrap().remove("vocab_size");
    let m = refused(
        &v,
        &[
            "5 problems:",
            "missing required key vocab_size",
            "text_config.hidden_size: expected int, found string \"big\"",
            "text_config.num_experts_per_token: must be ≥ 1, found 0",
            "text_config.moe_intermediate_size: 40 is not a multiple of 32",
            "text_config.linear_attn_config.kda_layers: is not the exact complement",
        ],
    );
    assert_eq!(m.lines().count(), 6, "{m}");
}
