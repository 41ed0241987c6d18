//! `config.json` and `synth.json`, and the minimal deterministic JSON writer they use.

use crate::*;

impl SynthSpec {
    /// `config.json` text (MODEL.md §2): the nested released shape (multimodal wrapper with
    /// `text_config` and `text_config.linear_attn_config`) or the flat test shape, with
    /// `kda_layers` as the exact complement of `full_attn_layers` and the released MXFP4
    /// `quantization_config`.
    pub fn config_json(&self) -> String {
        let kda_layers: Vec<Json> = (1..=self.num_hidden_layers)
            .filter(|l| !self.full_attn_layers.contains(l))
            .map(|l| Json::Int(l as i64))
            .collect();
        let full: Vec<Json> = self
            .full_attn_layers
            .iter()
            .map(|&l| Json::Int(l as i64))
            .collect();
        let [bos, eos, pad] = self.special_ids;
        let u = |v: usize| Json::Int(v as i64);
        let text = vec![
            ("hidden_size", u(self.hidden_size)),
            ("num_hidden_layers", u(self.num_hidden_layers)),
            ("vocab_size", u(self.vocab_size)),
            ("rms_norm_eps", Json::Num(self.rms_norm_eps)),
            ("num_attention_heads", u(self.num_attention_heads)),
            ("num_key_value_heads", u(self.num_attention_heads)),
            ("q_lora_rank", u(self.q_lora_rank)),
            ("kv_lora_rank", u(self.kv_lora_rank)),
            ("qk_nope_head_dim", u(self.qk_nope_head_dim)),
            ("qk_rope_head_dim", u(self.qk_rope_head_dim)),
            ("v_head_dim", u(self.v_head_dim)),
            ("mla_use_nope", Json::Bool(true)),
            ("mla_use_output_gate", Json::Bool(self.mla_use_output_gate)),
            ("num_experts", u(self.num_experts)),
            ("num_experts_per_token", u(self.num_experts_per_token)),
            ("num_shared_experts", u(self.num_shared_experts)),
            (
                "routed_expert_hidden_size",
                u(self.routed_expert_hidden_size),
            ),
            ("moe_intermediate_size", u(self.moe_intermediate_size)),
            (
                "routed_scaling_factor",
                Json::Num(self.routed_scaling_factor),
            ),
            ("moe_renormalize", Json::Bool(self.moe_renormalize)),
            ("moe_router_activation_func", Json::str("sigmoid")),
            ("latent_moe_use_norm", Json::Bool(self.latent_moe_use_norm)),
            ("use_grouped_topk", Json::Bool(true)),
            ("num_expert_group", u(1)),
            ("topk_group", u(1)),
            ("topk_method", Json::str("noaux_tc")),
            ("first_k_dense_replace", u(self.first_k_dense_replace)),
            ("moe_layer_freq", u(1)),
            ("intermediate_size", u(self.intermediate_size)),
            ("hidden_act", Json::str("situ")),
            ("attn_res_block_size", u(self.attn_res_block_size)),
            ("max_position_embeddings", u(1_048_576)),
            ("num_nextn_predict_layers", u(0)),
            ("tie_word_embeddings", Json::Bool(self.tie_word_embeddings)),
            ("bos_token_id", Json::Int(bos as i64)),
            ("eos_token_id", Json::Int(eos as i64)),
            ("pad_token_id", Json::Int(pad as i64)),
            ("dtype", Json::str("bfloat16")),
        ];
        let text: Vec<(String, Json)> = text.into_iter().map(|(k, v)| (k.into(), v)).collect();
        let linear = |heads: &str, dim: &str| -> Vec<(String, Json)> {
            vec![
                (heads.into(), u(self.kda_num_heads)),
                (dim.into(), u(self.kda_head_dim)),
                (
                    "short_conv_kernel_size".into(),
                    u(self.short_conv_kernel_size),
                ),
                ("gate_lower_bound".into(), Json::Num(self.gate_lower_bound)),
                ("use_full_rank_gate".into(), Json::Bool(true)),
                ("full_attn_layers".into(), Json::Arr(full.clone())),
                ("kda_layers".into(), Json::Arr(kda_layers.clone())),
            ]
        };
        let root = if self.nested_config {
            let mut tc = vec![
                (
                    "architectures".into(),
                    Json::Arr(vec![Json::str("KimiLinearForCausalLM")]),
                ),
                ("model_type".into(), Json::str("kimi_linear")),
            ];
            tc.extend(text);
            tc.push(("activation_situ_beta".into(), Json::Num(self.situ_beta)));
            tc.push((
                "activation_situ_linear_beta".into(),
                Json::Num(self.situ_linear_beta),
            ));
            tc.push((
                "linear_attn_config".into(),
                Json::Obj(linear("num_heads", "head_dim")),
            ));
            tc.push(("quantization_config".into(), quantization_config()));
            Json::Obj(vec![
                (
                    "architectures".into(),
                    Json::Arr(vec![Json::str("KimiK3ForConditionalGeneration")]),
                ),
                ("model_type".into(), Json::str("kimi_k3")),
                ("bos_token_id".into(), Json::Int(bos as i64)),
                ("eos_token_id".into(), Json::Int(eos as i64)),
                ("pad_token_id".into(), Json::Int(pad as i64)),
                ("media_placeholder_token_id".into(), Json::Int(163_605)),
                ("dtype".into(), Json::str("bfloat16")),
                (
                    "tie_word_embeddings".into(),
                    Json::Bool(self.tie_word_embeddings),
                ),
                ("text_config".into(), Json::Obj(tc)),
                (
                    "vision_config".into(),
                    Json::Obj(vec![
                        ("model_type".into(), Json::str("moonvit_v2")),
                        ("hidden_size".into(), u(16)),
                    ]),
                ),
                ("quantization_config".into(), quantization_config()),
            ])
        } else {
            let mut root = vec![("model_type".into(), Json::str("kimi_linear"))];
            root.extend(text);
            root.push(("situ_beta".into(), Json::Num(self.situ_beta)));
            root.push(("situ_linear_beta".into(), Json::Num(self.situ_linear_beta)));
            root.extend(linear("kda_num_heads", "kda_head_dim"));
            root.push(("quantization_config".into(), quantization_config()));
            Json::Obj(root)
        };
        let mut s = String::new();
        root.write_pretty(&mut s, 0);
        s.push('\n');
        s
    }

    /// `synth.json` text: the generator version, the seed and every spec field, so that a
    /// checkpoint can be regenerated (the engine ignores this file).
    pub fn synth_json(&self, total_bytes: u64) -> String {
        let u = |v: usize| Json::Int(v as i64);
        let obj = Json::Obj(vec![
            (
                "generator".into(),
                // The generator's name as first written (it lived in tests/support/synth.rs):
                // kept, so synth.json keeps its bytes (bench/results/synth-k3-default.sha256).
                Json::str("k3 synth (tests/support/synth.rs)"),
            ),
            (
                "generator_version".into(),
                Json::Int(GENERATOR_VERSION as i64),
            ),
            // u64 seeds may exceed 2^53: keep them exact as a string as well.
            ("seed".into(), Json::str(&self.seed.to_string())),
            ("total_bytes".into(), Json::Int(total_bytes as i64)),
            ("layer_map".into(), Json::str(&self.layer_map())),
            (
                "spec".into(),
                Json::Obj(vec![
                    ("hidden_size".into(), u(self.hidden_size)),
                    ("vocab_size".into(), u(self.vocab_size)),
                    ("num_hidden_layers".into(), u(self.num_hidden_layers)),
                    ("rms_norm_eps".into(), Json::Num(self.rms_norm_eps)),
                    (
                        "tie_word_embeddings".into(),
                        Json::Bool(self.tie_word_embeddings),
                    ),
                    ("kda_num_heads".into(), u(self.kda_num_heads)),
                    ("kda_head_dim".into(), u(self.kda_head_dim)),
                    (
                        "short_conv_kernel_size".into(),
                        u(self.short_conv_kernel_size),
                    ),
                    ("gate_lower_bound".into(), Json::Num(self.gate_lower_bound)),
                    ("num_attention_heads".into(), u(self.num_attention_heads)),
                    ("q_lora_rank".into(), u(self.q_lora_rank)),
                    ("kv_lora_rank".into(), u(self.kv_lora_rank)),
                    ("qk_nope_head_dim".into(), u(self.qk_nope_head_dim)),
                    ("qk_rope_head_dim".into(), u(self.qk_rope_head_dim)),
                    ("v_head_dim".into(), u(self.v_head_dim)),
                    (
                        "mla_use_output_gate".into(),
                        Json::Bool(self.mla_use_output_gate),
                    ),
                    ("num_experts".into(), u(self.num_experts)),
                    (
                        "num_experts_per_token".into(),
                        u(self.num_experts_per_token),
                    ),
                    ("num_shared_experts".into(), u(self.num_shared_experts)),
                    (
                        "routed_expert_hidden_size".into(),
                        u(self.routed_expert_hidden_size),
                    ),
                    (
                        "moe_intermediate_size".into(),
                        u(self.moe_intermediate_size),
                    ),
                    (
                        "routed_scaling_factor".into(),
                        Json::Num(self.routed_scaling_factor),
                    ),
                    ("moe_renormalize".into(), Json::Bool(self.moe_renormalize)),
                    (
                        "latent_moe_use_norm".into(),
                        Json::Bool(self.latent_moe_use_norm),
                    ),
                    (
                        "first_k_dense_replace".into(),
                        u(self.first_k_dense_replace),
                    ),
                    ("intermediate_size".into(), u(self.intermediate_size)),
                    ("situ_beta".into(), Json::Num(self.situ_beta)),
                    ("situ_linear_beta".into(), Json::Num(self.situ_linear_beta)),
                    ("attn_res_block_size".into(), u(self.attn_res_block_size)),
                    (
                        "full_attn_layers".into(),
                        Json::Arr(self.full_attn_layers.iter().map(|&l| u(l)).collect()),
                    ),
                    (
                        "special_ids".into(),
                        Json::Arr(
                            self.special_ids
                                .iter()
                                .map(|&v| Json::Int(v as i64))
                                .collect(),
                        ),
                    ),
                    ("nested_config".into(), Json::Bool(self.nested_config)),
                    ("layers_per_shard".into(), u(self.layers_per_shard)),
                    (
                        "shard_name_digits".into(),
                        Json::Arr(vec![
                            u(self.shard_name_digits.0),
                            u(self.shard_name_digits.1),
                        ]),
                    ),
                    ("vision_dummies".into(), Json::Bool(self.vision_dummies)),
                ]),
            ),
        ]);
        let mut s = String::new();
        obj.write_pretty(&mut s, 0);
        s.push('\n');
        s
    }
}

/// The released `quantization_config` (MODEL.md §2.4): MXFP4, group 32, routed experts only.
fn quantization_config() -> Json {
    let ignore = [
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*",
        "re:.*vision_tower.*",
        "re:.*mm_projector.*",
    ];
    Json::Obj(vec![
        ("quant_method".into(), Json::str("compressed-tensors")),
        ("format".into(), Json::str("mxfp4-pack-quantized")),
        ("quantization_status".into(), Json::str("compressed")),
        (
            "config_groups".into(),
            Json::Obj(vec![(
                "group_0".into(),
                Json::Obj(vec![
                    ("targets".into(), Json::Arr(vec![Json::str("Linear")])),
                    (
                        "weights".into(),
                        Json::Obj(vec![
                            ("num_bits".into(), Json::Int(4)),
                            ("type".into(), Json::str("float")),
                            ("strategy".into(), Json::str("group")),
                            ("group_size".into(), Json::Int(32)),
                            ("symmetric".into(), Json::Bool(true)),
                            ("dynamic".into(), Json::Bool(false)),
                            ("scale_dtype".into(), Json::str("torch.uint8")),
                            ("zp_dtype".into(), Json::Null),
                            ("actorder".into(), Json::Null),
                            ("block_structure".into(), Json::Null),
                            ("observer".into(), Json::str("minmax")),
                        ]),
                    ),
                    ("input_activations".into(), Json::Null),
                    ("output_activations".into(), Json::Null),
                ]),
            )]),
        ),
        (
            "ignore".into(),
            Json::Arr(ignore.iter().map(|s| Json::str(s)).collect()),
        ),
        ("kv_cache_scheme".into(), Json::Null),
    ])
}

/// JSON value for the config writers.
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    /// A finite f64, written with Rust's shortest round-trip formatting (`1e-5`, `4.0`).
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn str(s: &str) -> Json {
        Json::Str(s.to_string())
    }

    fn write_pretty(&self, out: &mut String, indent: usize) {
        let pad = |n: usize| "  ".repeat(n);
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::Num(f) => {
                let _ = write!(out, "{f:?}");
            }
            Json::Str(s) => out.push_str(&json_string(s)),
            Json::Arr(a) if a.is_empty() => out.push_str("[]"),
            Json::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    out.push_str(&pad(indent + 1));
                    v.write_pretty(out, indent + 1);
                }
                out.push('\n');
                out.push_str(&pad(indent));
                out.push(']');
            }
            Json::Obj(o) if o.is_empty() => out.push_str("{}"),
            Json::Obj(o) => {
                out.push('{');
                for (i, (k, v)) in o.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    out.push_str(&pad(indent + 1));
                    out.push_str(&json_string(k));
                    out.push_str(": ");
                    v.write_pretty(out, indent + 1);
                }
                out.push('\n');
                out.push_str(&pad(indent));
                out.push('}');
            }
        }
    }
}

/// A JSON string literal for `s` (quotes, backslashes and control characters escaped).
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
