//! `config.json` → a validated [`Config`] (MODEL.md §2, §3).
//!
//! Two shapes (§2.1): **nested** (the released checkpoint: `text_config` and
//! `text_config.linear_attn_config`) and **flat** (every key at the root). Each key is looked up
//! in the scopes of §2.2, released spelling before flat spelling, first hit wins, `null` counts
//! as absent; the KDA head count and head dim come only from `linear_attn_config` (nested) or
//! the root `kda_*` keys (flat), never from a stray `text_config.head_dim = 74`.
//!
//! Every problem is collected and reported together in one error (exit 2), each naming the key
//! and the scope it was read from (§2.5). Nothing required is ever defaulted: a missing required
//! key is an error, and only the O rows of §2.3 have defaults.
//!
//! Layout: [`types`](self) (the validated types and the layer map), `lookup` (the scopes and
//! typed reads of §2.2), one reader per section (`mla`, `moe`, `kda` with the layer map,
//! `quant`, and the model-wide keys here), `derived` (§2.6) and `fingerprint` (FORMATS.md §9.1).

mod derived;
mod fingerprint;
mod kda;
mod lookup;
mod mla;
mod moe;
mod quant;
mod types;

pub use types::{AttnKind, Config, ConfigShape, Derived, MlaForm, QuantGroup, QuantizationConfig};

use crate::error::{Error, Result};
use crate::json::{self, Value};
use lookup::Lookup;
use std::fmt::Write as _;
use std::path::Path;

/// Largest `num_hidden_layers` accepted. The layer map is materialised (one entry per layer),
/// so an absurd count must be refused before allocating; K3 has 93.
pub const MAX_LAYERS: usize = 1 << 16;

/// Version of the numerics contract (MODEL.md §5) in the config fingerprint (FORMATS.md §9.1).
pub const NUMERICS_VERSION: u32 = 1;

fn problems_error(origin: &str, problems: &[String]) -> Error {
    if problems.is_empty() {
        // Unreachable by construction: a None value always records a problem.
        return Error::invalid(format!(
            "{origin}: internal error: a value was rejected without a recorded problem"
        ));
    }
    if problems.len() == 1 {
        return Error::invalid(format!("{origin}: {}", problems[0]));
    }
    let mut msg = format!("{origin}: {} problems:", problems.len());
    for p in problems {
        let _ = write!(msg, "\n  - {p}");
    }
    Error::invalid(msg)
}

/// The model-wide keys read first (MODEL.md §2.3 table order).
struct Model {
    hidden_size: usize,
    num_hidden_layers: usize,
    vocab_size: usize,
    rms_norm_eps: f64,
    tie_word_embeddings: bool,
}

/// Reads the model-wide keys; the layer count is also returned alone, since the MoE and
/// layer-map checks need it even when another key failed.
fn read_model(lk: &mut Lookup<'_>) -> (Option<Model>, Option<usize>) {
    let hidden_size = lk.req_int("hidden_size", "hidden_size", 1);
    let nl_hit = lk.find("num_hidden_layers", "num_hidden_layers");
    let num_hidden_layers = match lk.required(nl_hit, "num_hidden_layers") {
        Some(h) => lk.int_in(&h, 1, Some(MAX_LAYERS as i64)),
        None => None,
    };
    let vocab_size = lk.req_int("vocab_size", "vocab_size", 1);
    let rms_norm_eps = lk.req_positive_float("rms_norm_eps", "rms_norm_eps");
    let tie_word_embeddings = lk.opt_bool("tie_word_embeddings", false, None);
    let model = (|| {
        Some(Model {
            hidden_size: hidden_size?,
            num_hidden_layers: num_hidden_layers?,
            vocab_size: vocab_size?,
            rms_norm_eps: rms_norm_eps?,
            tie_word_embeddings: tie_word_embeddings?,
        })
    })();
    (model, num_hidden_layers)
}

impl Config {
    /// Reads and validates `path` (a `config.json`). Errors (exit 2) name the file, the byte
    /// offset for JSON syntax errors, and every key problem at once.
    pub fn from_file(path: &Path) -> Result<Config> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::invalid(format!("{}: cannot read config: {e}", path.display())))?;
        Self::from_json(&bytes, &path.display().to_string())
    }

    /// Parses and validates JSON text; `origin` (usually the file path) prefixes every message.
    pub fn from_json(bytes: &[u8], origin: &str) -> Result<Config> {
        let root = json::parse(bytes).map_err(|e| e.into_error(origin, 0))?;
        Self::from_value(&root, origin)
    }

    /// Validates a parsed config (MODEL.md §2, §3). `origin` prefixes every message; every
    /// problem is reported at once (exit 2).
    pub fn from_value(root: &Value, origin: &str) -> Result<Config> {
        let root_obj = root.as_object().ok_or_else(|| {
            Error::invalid(format!(
                "{origin}: the config must be a JSON object, found {}",
                root.type_name()
            ))
        })?;
        let (shape, mut lk) = Lookup::new(root_obj, origin)?;
        // §2.3, in table order.
        let (model, num_hidden_layers) = read_model(&mut lk);
        let mla = mla::read(&mut lk);
        let moe = moe::read(&mut lk, num_hidden_layers);
        let attn_res_block_size = lk.req_int("attn_res_block_size", "attn_res_block_size", 1);
        let kda = kda::read(&mut lk, shape);
        let lists = kda::read_layer_lists(&mut lk);
        let quantization_config = match lk.find("quantization_config", "quantization_config") {
            None => Some(None),
            Some(h) => quant::read_quantization(&mut lk, &h).map(Some),
        };
        let max_position_embeddings = lk.opt_info_u64("max_position_embeddings");
        let bos_token_id = lk.opt_info_u64("bos_token_id");
        let eos_token_id = lk.opt_info_u64("eos_token_id");
        let pad_token_id = lk.opt_info_u64("pad_token_id");
        let map = kda::layer_map(&mut lk, num_hidden_layers, &lists);
        let problems = lk.into_problems();
        let (
            Some(model),
            Some(mla),
            Some(moe),
            Some(attn_res_block_size),
            Some(kda),
            Some(use_full_rank_gate),
            Some(quantization_config),
            Some(layer_kinds),
        ) = (
            model,
            mla,
            moe,
            attn_res_block_size,
            kda,
            lists.use_full_rank_gate,
            quantization_config,
            map.kinds,
        )
        else {
            return Err(problems_error(origin, &problems));
        };
        if !problems.is_empty() {
            return Err(problems_error(origin, &problems));
        }
        let mut config = Config {
            shape,
            hidden_size: model.hidden_size,
            num_hidden_layers: model.num_hidden_layers,
            vocab_size: model.vocab_size,
            rms_norm_eps: model.rms_norm_eps,
            tie_word_embeddings: model.tie_word_embeddings,
            num_attention_heads: mla.num_attention_heads,
            q_lora_rank: mla.q_lora_rank,
            kv_lora_rank: mla.kv_lora_rank,
            qk_nope_head_dim: mla.qk_nope_head_dim,
            qk_rope_head_dim: mla.qk_rope_head_dim,
            v_head_dim: mla.v_head_dim,
            mla_use_output_gate: mla.mla_use_output_gate,
            mla_use_nope: mla.mla_use_nope,
            num_experts: moe.num_experts,
            num_experts_per_token: moe.num_experts_per_token,
            num_shared_experts: moe.num_shared_experts,
            routed_expert_hidden_size: moe.routed_expert_hidden_size,
            moe_intermediate_size: moe.moe_intermediate_size,
            routed_scaling_factor: moe.routed_scaling_factor,
            moe_renormalize: moe.moe_renormalize,
            latent_moe_use_norm: moe.latent_moe_use_norm,
            moe_router_activation_func: moe.moe_router_activation_func,
            num_expert_group: moe.num_expert_group,
            topk_group: moe.topk_group,
            moe_layer_freq: moe.moe_layer_freq,
            first_k_dense_replace: moe.first_k_dense_replace,
            intermediate_size: moe.intermediate_size,
            hidden_act: moe.hidden_act,
            situ_beta: moe.situ_beta,
            situ_linear_beta: moe.situ_linear_beta,
            attn_res_block_size,
            kda_num_heads: kda.kda_num_heads,
            kda_head_dim: kda.kda_head_dim,
            short_conv_kernel_size: kda.short_conv_kernel_size,
            gate_lower_bound: kda.gate_lower_bound,
            full_attn_layers: map.full_attn_layers,
            kda_layers: map.kda_layers,
            use_full_rank_gate,
            quantization_config,
            max_position_embeddings,
            bos_token_id,
            eos_token_id,
            pad_token_id,
            derived: Derived::default(),
            layer_kinds,
        };
        config.derived = derived::derive(&config).map_err(|p| problems_error(origin, &p))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> String {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tiny-k3/config.json"
        );
        std::fs::read_to_string(p).unwrap()
    }

    fn refused(text: &str) -> String {
        Config::from_json(text.as_bytes(), "c.json")
            .unwrap_err()
            .message
    }

    #[test]
    fn a_missing_kda_head_dim_names_only_linear_attn_config_as_searched() {
        let text = tiny().replacen("\"head_dim\"", "\"unused_head_dim\"", 1);
        let m = refused(&text);
        assert!(
            m.contains("missing required key text_config.linear_attn_config.head_dim (searched text_config.linear_attn_config only"),
            "{m}"
        );
        assert!(!m.contains("the root"), "{m}");
    }

    #[test]
    fn a_huge_number_literal_is_named_by_length_and_offset_not_echoed() {
        let digits = "9".repeat(100_001);
        let text = tiny().replacen(
            "\"hidden_size\": 128",
            &format!("\"hidden_size\": {digits}"),
            1,
        );
        let at = text.find(&digits).unwrap();
        let m = refused(&text);
        assert!(m.len() < 400, "message of {} bytes", m.len());
        assert!(
            m.contains(&format!(
                "integer <100001 characters at byte {at}> is out of range"
            )),
            "{m}"
        );
        let text = tiny().replacen(
            "\"hidden_act\": \"situ\"",
            &format!("\"hidden_act\": \"{digits}\""),
            1,
        );
        assert!(refused(&text).len() < 400);
    }
}
