//! The config's identity (FORMATS.md §9.1: the canonical string and its FNV-1a-64
//! fingerprint) and its resolved summary for `inspect --json` and the run report.

use super::{Config, MlaForm, NUMERICS_VERSION};
use crate::json::{Object, Value};
use k3_kernels::fnv1a64;
use std::fmt::Write as _;

impl Config {
    /// The canonical config string of FORMATS.md §9.1: `key=value;` for the listed keys in
    /// order, integers in decimal, floats as `0x` + 16 hex digits of the f64 bits, booleans
    /// 0/1, then `layer_map`, `numerics` (= [`NUMERICS_VERSION`]) and `mla_form`.
    pub fn canonical_string(&self, mla_form: MlaForm) -> String {
        fn f(v: f64) -> String {
            format!("0x{:016x}", v.to_bits())
        }
        fn b(v: bool) -> &'static str {
            if v {
                "1"
            } else {
                "0"
            }
        }
        let fields: [(&str, String); 32] = [
            ("hidden_size", self.hidden_size.to_string()),
            ("num_hidden_layers", self.num_hidden_layers.to_string()),
            ("vocab_size", self.vocab_size.to_string()),
            ("rms_norm_eps", f(self.rms_norm_eps)),
            ("tie_word_embeddings", b(self.tie_word_embeddings).into()),
            ("kda_num_heads", self.kda_num_heads.to_string()),
            ("kda_head_dim", self.kda_head_dim.to_string()),
            (
                "short_conv_kernel_size",
                self.short_conv_kernel_size.to_string(),
            ),
            ("gate_lower_bound", f(self.gate_lower_bound)),
            ("num_attention_heads", self.num_attention_heads.to_string()),
            ("q_lora_rank", self.q_lora_rank.to_string()),
            ("kv_lora_rank", self.kv_lora_rank.to_string()),
            ("qk_nope_head_dim", self.qk_nope_head_dim.to_string()),
            ("qk_rope_head_dim", self.qk_rope_head_dim.to_string()),
            ("v_head_dim", self.v_head_dim.to_string()),
            ("mla_use_output_gate", b(self.mla_use_output_gate).into()),
            ("num_experts", self.num_experts.to_string()),
            (
                "num_experts_per_token",
                self.num_experts_per_token.to_string(),
            ),
            ("num_shared_experts", self.num_shared_experts.to_string()),
            (
                "routed_expert_hidden_size",
                self.routed_expert_hidden_size.to_string(),
            ),
            (
                "moe_intermediate_size",
                self.moe_intermediate_size.to_string(),
            ),
            ("routed_scaling_factor", f(self.routed_scaling_factor)),
            ("moe_renormalize", b(self.moe_renormalize).into()),
            ("latent_moe_use_norm", b(self.latent_moe_use_norm).into()),
            (
                "first_k_dense_replace",
                self.first_k_dense_replace.to_string(),
            ),
            ("intermediate_size", self.intermediate_size.to_string()),
            ("attn_res_block_size", self.attn_res_block_size.to_string()),
            ("situ_beta", f(self.situ_beta)),
            ("situ_linear_beta", f(self.situ_linear_beta)),
            ("layer_map", self.layer_map()),
            ("numerics", NUMERICS_VERSION.to_string()),
            ("mla_form", mla_form.as_str().to_string()),
        ];
        let mut s = String::new();
        for (k, v) in fields {
            let _ = write!(s, "{k}={v};");
        }
        s
    }

    /// The config fingerprint: FNV-1a-64 of [`Config::canonical_string`] (FORMATS.md §9.1).
    pub fn fingerprint(&self, mla_form: MlaForm) -> u64 {
        fnv1a64(self.canonical_string(mla_form).as_bytes())
    }

    /// The resolved config as a JSON object with canonical names (FORMATS.md §9.1 spellings),
    /// plus `config_shape`, `layer_map` and the derived constants; for `k3 inspect --json` and
    /// the run report.
    pub fn summary_json(&self) -> Value {
        let d = &self.derived;
        let ul = |v: &[usize]| Value::from(v.to_vec());
        let o = Object::new()
            .with("config_shape", self.shape.as_str())
            .with("hidden_size", self.hidden_size)
            .with("num_hidden_layers", self.num_hidden_layers)
            .with("vocab_size", self.vocab_size)
            .with("rms_norm_eps", self.rms_norm_eps)
            .with("tie_word_embeddings", self.tie_word_embeddings)
            .with("kda_num_heads", self.kda_num_heads)
            .with("kda_head_dim", self.kda_head_dim)
            .with("short_conv_kernel_size", self.short_conv_kernel_size)
            .with("gate_lower_bound", self.gate_lower_bound)
            .with("num_attention_heads", self.num_attention_heads)
            .with("q_lora_rank", self.q_lora_rank)
            .with("kv_lora_rank", self.kv_lora_rank)
            .with("qk_nope_head_dim", self.qk_nope_head_dim)
            .with("qk_rope_head_dim", self.qk_rope_head_dim)
            .with("v_head_dim", self.v_head_dim)
            .with("mla_use_output_gate", self.mla_use_output_gate)
            .with("num_experts", self.num_experts)
            .with("num_experts_per_token", self.num_experts_per_token)
            .with("num_shared_experts", self.num_shared_experts)
            .with("routed_expert_hidden_size", self.routed_expert_hidden_size)
            .with("moe_intermediate_size", self.moe_intermediate_size)
            .with("routed_scaling_factor", self.routed_scaling_factor)
            .with("moe_renormalize", self.moe_renormalize)
            .with("latent_moe_use_norm", self.latent_moe_use_norm)
            .with("first_k_dense_replace", self.first_k_dense_replace)
            .with("intermediate_size", self.intermediate_size)
            .with("attn_res_block_size", self.attn_res_block_size)
            .with("situ_beta", self.situ_beta)
            .with("situ_linear_beta", self.situ_linear_beta)
            .with("full_attn_layers", ul(&self.full_attn_layers))
            .with("layer_map", self.layer_map())
            .with("mla_layers_zero_based", ul(&self.mla_layers()))
            .with(
                "moe_layers_zero_based",
                Value::from(
                    (0..self.num_hidden_layers)
                        .filter(|&l| self.is_moe(l))
                        .collect::<Vec<_>>(),
                ),
            )
            .with("attn_res_boundaries_zero_based", ul(&self.boundaries()))
            .with("max_position_embeddings", self.max_position_embeddings)
            .with("bos_token_id", self.bos_token_id)
            .with("eos_token_id", self.eos_token_id)
            .with("pad_token_id", self.pad_token_id)
            .with(
                "derived",
                Object::new()
                    .with("kda_proj_width", d.kda_proj_width)
                    .with("kda_query_scale", d.kda_query_scale)
                    .with("mla_head_width", d.mla_head_width)
                    .with("mla_softmax_scale", d.mla_softmax_scale)
                    .with("q_b_rows", d.q_b_rows)
                    .with("kv_a_rows", d.kv_a_rows)
                    .with("kv_b_rows", d.kv_b_rows)
                    .with("mla_out_width", d.mla_out_width)
                    .with("mla_cache_row", d.mla_cache_row)
                    .with("shared_width", d.shared_width)
                    .with("groups_w13", d.groups_w13)
                    .with("groups_w2", d.groups_w2)
                    .with("conv_history", d.conv_history)
                    .with("snapshots", d.snapshots)
                    .with("max_agg_sources", d.max_agg_sources)
                    .with("n_dense", d.n_dense)
                    .with("n_moe", d.n_moe)
                    .with("n_kda", d.n_kda)
                    .with("n_mla", d.n_mla),
            );
        Value::Object(o)
    }
}
