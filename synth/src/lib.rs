//! Synthetic Kimi K3 checkpoints in the released format, deterministic from a seed.
//!
//! Shared by `cargo xtask synth` (released widths, gigabytes, written at disk speed) and the
//! engine's integration tests (small and moderate widths, written to a temporary directory).
//! Include it with `#[path = "support/synth.rs"] mod synth;`. It depends on `std` only, so the
//! bytes it writes do not depend on any crate version: the PRNG, the value tables and the JSON
//! writers are all in this file.
//!
//! What is written (MODEL.md §2, §4; FORMATS.md §2–§5; tests/fixtures/README.md §1.2):
//! * `config.json` in the nested released shape (or the flat test shape), with the released key
//!   spellings, the one-based `full_attn_layers` / `kda_layers` pair and the MXFP4
//!   `quantization_config`;
//! * shards `model-00001-of-000NNN.safetensors` (released naming: five-digit index, six-digit
//!   total): shard 1 holds layer 0, then `layers_per_shard` layers per shard (each layer's
//!   routed experts followed by its trunk run), then one shard of model tables, then (optionally)
//!   one `mm_projector.*` and one `vision_tower.*` dummy shard; inside a shard the header keys are
//!   sorted and the data is in the same byte-wise name order, so each layer's trunk and each
//!   expert (`w1.weight_packed, w1.weight_scale, w2…, w3…`) is one gap-free run; the header is
//!   padded with spaces to a multiple of 8; no holes, no trailing bytes;
//! * `model.safetensors.index.json` (`metadata.total_size` + sorted `weight_map`);
//! * `synth.json`: the generator version, seed and every parameter (the engine ignores it).
//!
//! Values (see [`SynthSpec::layer_tensors`] for each tensor): matrices are BF16, uniform on
//! ±sqrt(3/fan_in) (variance 1/fan_in, so unit-RMS inputs give unit-RMS outputs through every
//! projection of MODEL.md §6); gains are uniform on [0.8, 1.2]; AttnRes projections have
//! variance 1/H so the depth softmax is neither uniform nor one-hot; routed experts are MXFP4
//! with uniformly random nibbles (all 16 E2M1 codes) and E8M0 scales in a two-value range chosen
//! so each logical matrix also has variance ≈ 1/fan_in (never 0, never 255); the router has
//! independent random rows and a small random bias, so the top-k spreads over the experts;
//! `A_log` has its first Hk entries in [0, 2.5] and an exactly zero tail.
//!
//! Determinism: every tensor is cut into 1 MiB blocks; block b of tensor `name` is drawn from a
//! xoshiro256** stream seeded from (seed, FNV-1a-64(name), b). The bytes therefore depend only
//! on the spec and the seed — not on the shard plan, the thread count or the write order — and
//! blocks can be generated in parallel. [`GENERATOR_VERSION`] changes whenever the bytes for a
//! given spec and seed change.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

/// Version of the value recipe; bumped whenever the bytes for a given spec and seed change.
pub const GENERATOR_VERSION: u32 = 1;

/// Tensors are generated in blocks of this many bytes (a multiple of every element size); the
/// block is the unit of the PRNG streams, so it is part of the byte recipe.
pub const BLOCK_BYTES: u64 = 1 << 20;

/// Every bound tensor name starts with this prefix (MODEL.md §4).
pub const PREFIX: &str = "language_model.";

// ---------------------------------------------------------------------------------------------
// Specification
// ---------------------------------------------------------------------------------------------

/// Everything that determines a synthetic checkpoint: the model config (MODEL.md §2.3, config
/// key names in the field names), the file layout and the seed.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// `hidden_size` H.
    pub hidden_size: usize,
    /// `vocab_size` V.
    pub vocab_size: usize,
    /// `num_hidden_layers` NL.
    pub num_hidden_layers: usize,
    /// `rms_norm_eps` ε.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`: true writes no `lm_head`.
    pub tie_word_embeddings: bool,
    /// `linear_attn_config.num_heads` Hk.
    pub kda_num_heads: usize,
    /// `linear_attn_config.head_dim` Dk.
    pub kda_head_dim: usize,
    /// `short_conv_kernel_size` Kc.
    pub short_conv_kernel_size: usize,
    /// `gate_lower_bound` gmin (< 0).
    pub gate_lower_bound: f64,
    /// `num_attention_heads` Hm (MLA).
    pub num_attention_heads: usize,
    /// `q_lora_rank` Rq.
    pub q_lora_rank: usize,
    /// `kv_lora_rank` Rkv.
    pub kv_lora_rank: usize,
    /// `qk_nope_head_dim` Dn.
    pub qk_nope_head_dim: usize,
    /// `qk_rope_head_dim` Dr.
    pub qk_rope_head_dim: usize,
    /// `v_head_dim` Dv.
    pub v_head_dim: usize,
    /// `mla_use_output_gate`: false writes no MLA `g_proj`.
    pub mla_use_output_gate: bool,
    /// `num_experts` E.
    pub num_experts: usize,
    /// `num_experts_per_token` Kt (top-k).
    pub num_experts_per_token: usize,
    /// `num_shared_experts` (0: no shared-expert tensors).
    pub num_shared_experts: usize,
    /// `routed_expert_hidden_size` L (latent width, multiple of 32).
    pub routed_expert_hidden_size: usize,
    /// `moe_intermediate_size` I (multiple of 32).
    pub moe_intermediate_size: usize,
    /// `routed_scaling_factor`.
    pub routed_scaling_factor: f64,
    /// `moe_renormalize`.
    pub moe_renormalize: bool,
    /// `latent_moe_use_norm`: false writes no `routed_expert_norm`.
    pub latent_moe_use_norm: bool,
    /// `first_k_dense_replace`: layers below it have a dense FFN, the others MoE.
    pub first_k_dense_replace: usize,
    /// `intermediate_size` F (dense FFN).
    pub intermediate_size: usize,
    /// `activation_situ_beta` β1.
    pub situ_beta: f64,
    /// `activation_situ_linear_beta` β2.
    pub situ_linear_beta: f64,
    /// `attn_res_block_size` Bs.
    pub attn_res_block_size: usize,
    /// `full_attn_layers`: the **one-based** MLA layers; `kda_layers` is written as the
    /// complement.
    pub full_attn_layers: Vec<usize>,
    /// `bos_token_id`, `eos_token_id`, `pad_token_id` (informational in the config).
    pub special_ids: [u64; 3],
    /// Nested (released) config shape if true, flat (test) shape otherwise (MODEL.md §2.1).
    pub nested_config: bool,
    /// Layers per shard after the first shard (which always holds layer 0 alone).
    pub layers_per_shard: usize,
    /// Digits of the shard index and of the total in shard names (released: 5 and 6).
    pub shard_name_digits: (usize, usize),
    /// Write the two dummy vision shards (`mm_projector.*`, `vision_tower.*`), which a text
    /// engine must ignore, as the released checkpoint has them.
    pub vision_dummies: bool,
    /// The seed of every value.
    pub seed: u64,
}

/// The released layer map rule: one-based layer l is MLA iff l is a multiple of 4, or l is
/// the last of at least 4 layers. For 93 layers this is the released
/// `[4, 8, …, 88, 92, 93]`; for 4 layers `[4]` (KDA, KDA, KDA, MLA); for 13 `[4, 8, 12, 13]`.
pub fn released_full_attn_layers(num_layers: usize) -> Vec<usize> {
    (1..=num_layers)
        .filter(|&l| l % 4 == 0 || (l == num_layers && num_layers >= 4))
        .collect()
}

impl SynthSpec {
    /// The released Kimi K3 widths (MODEL.md §1) with `layers` layers and `experts` routed
    /// experts per MoE layer: H 7168, V 163840, KDA 96 × 128, MLA 96 heads (Rq 1536, Rkv 512,
    /// Dn 128, Dr 64, Dv 128, output gate), latent L 3584, I 3072, 2 shared experts, top-16,
    /// dense layer 0 of F 33792, AttnRes block 12, the released layer map rule
    /// ([`released_full_attn_layers`]), nested config, one layer per shard, released shard
    /// naming, dummy vision shards, seed 0. `SynthSpec::k3(93, 896)` has the released tensor
    /// set and byte counts (MODEL.md §9).
    pub fn k3(layers: usize, experts: usize) -> SynthSpec {
        SynthSpec {
            hidden_size: 7168,
            vocab_size: 163_840,
            num_hidden_layers: layers,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            kda_num_heads: 96,
            kda_head_dim: 128,
            short_conv_kernel_size: 4,
            gate_lower_bound: -5.0,
            num_attention_heads: 96,
            q_lora_rank: 1536,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            mla_use_output_gate: true,
            num_experts: experts,
            num_experts_per_token: 16,
            num_shared_experts: 2,
            routed_expert_hidden_size: 3584,
            moe_intermediate_size: 3072,
            routed_scaling_factor: 1.0,
            moe_renormalize: true,
            latent_moe_use_norm: true,
            first_k_dense_replace: layers.min(1),
            intermediate_size: 33_792,
            situ_beta: 4.0,
            situ_linear_beta: 25.0,
            attn_res_block_size: 12,
            full_attn_layers: released_full_attn_layers(layers),
            special_ids: [163_584, 163_586, 163_839],
            nested_config: true,
            layers_per_shard: 1,
            shard_name_digits: (5, 6),
            vision_dummies: true,
            seed: 0,
        }
    }

    /// Small widths for fast tests, the shape of the `tiny-k3` fixture (README §1.6): H 128,
    /// V 512 (special ids 509, 510, 511), KDA 4 × 16, MLA 4 heads (Rq 64, Rkv 32, Dn 24, Dr 8,
    /// Dv 16), L 64, I 64, 2 shared, top-2, dense layer 0 of F 96, AttnRes block 3, the
    /// released layer map rule, nested config, 3 layers per shard, fixture-style shard names
    /// (5 and 5 digits), dummy vision shards, seed 0. Every field may be changed afterwards.
    pub fn small(layers: usize, experts: usize) -> SynthSpec {
        SynthSpec {
            hidden_size: 128,
            vocab_size: 512,
            num_hidden_layers: layers,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            kda_num_heads: 4,
            kda_head_dim: 16,
            short_conv_kernel_size: 4,
            gate_lower_bound: -5.0,
            num_attention_heads: 4,
            q_lora_rank: 64,
            kv_lora_rank: 32,
            qk_nope_head_dim: 24,
            qk_rope_head_dim: 8,
            v_head_dim: 16,
            mla_use_output_gate: true,
            num_experts: experts,
            num_experts_per_token: 2.min(experts),
            num_shared_experts: 2,
            routed_expert_hidden_size: 64,
            moe_intermediate_size: 64,
            routed_scaling_factor: 1.0,
            moe_renormalize: true,
            latent_moe_use_norm: true,
            first_k_dense_replace: layers.min(1),
            intermediate_size: 96,
            situ_beta: 4.0,
            situ_linear_beta: 25.0,
            attn_res_block_size: 3,
            full_attn_layers: released_full_attn_layers(layers),
            special_ids: [509, 510, 511],
            nested_config: true,
            layers_per_shard: 3,
            shard_name_digits: (5, 5),
            vision_dummies: true,
            seed: 0,
        }
    }

    /// Whether zero-based layer `l` is MLA (MODEL.md §3: (l+1) ∈ `full_attn_layers`).
    pub fn is_mla(&self, l: usize) -> bool {
        self.full_attn_layers.contains(&(l + 1))
    }

    /// Whether zero-based layer `l` has a dense FFN (l < `first_k_dense_replace`).
    pub fn is_dense(&self, l: usize) -> bool {
        l < self.first_k_dense_replace
    }

    /// The layer map as one character per layer, `K` (KDA) or `M` (MLA), as in FORMATS.md §9.1.
    pub fn layer_map(&self) -> String {
        (0..self.num_hidden_layers)
            .map(|l| if self.is_mla(l) { 'M' } else { 'K' })
            .collect()
    }

    /// Checks the rules of MODEL.md §2.3/§2.5 that a generated checkpoint must satisfy, plus
    /// the layout parameters. Errors name the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        let positive = [
            ("hidden_size", self.hidden_size),
            ("vocab_size", self.vocab_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("kda_num_heads", self.kda_num_heads),
            ("kda_head_dim", self.kda_head_dim),
            ("short_conv_kernel_size", self.short_conv_kernel_size),
            ("num_attention_heads", self.num_attention_heads),
            ("q_lora_rank", self.q_lora_rank),
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_nope_head_dim", self.qk_nope_head_dim),
            ("v_head_dim", self.v_head_dim),
            ("num_experts", self.num_experts),
            ("routed_expert_hidden_size", self.routed_expert_hidden_size),
            ("moe_intermediate_size", self.moe_intermediate_size),
            ("intermediate_size", self.intermediate_size),
            ("attn_res_block_size", self.attn_res_block_size),
            ("layers_per_shard", self.layers_per_shard),
        ];
        for (name, v) in positive {
            if v == 0 {
                bad.push(format!("{name}: must be >= 1"));
            }
        }
        for (name, v) in [
            ("routed_expert_hidden_size", self.routed_expert_hidden_size),
            ("moe_intermediate_size", self.moe_intermediate_size),
        ] {
            if v % 32 != 0 {
                bad.push(format!(
                    "{name}: {v} is not a multiple of 32 (MXFP4 groups)"
                ));
            }
        }
        if self.num_experts_per_token == 0 || self.num_experts_per_token > self.num_experts {
            bad.push(format!(
                "num_experts_per_token: {} must be in 1..={} (num_experts)",
                self.num_experts_per_token, self.num_experts
            ));
        }
        if self.first_k_dense_replace > self.num_hidden_layers {
            bad.push(format!(
                "first_k_dense_replace: {} exceeds num_hidden_layers {}",
                self.first_k_dense_replace, self.num_hidden_layers
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for &l in &self.full_attn_layers {
            if l == 0 || l > self.num_hidden_layers {
                bad.push(format!(
                    "full_attn_layers: {l} is outside 1..={} (one-based)",
                    self.num_hidden_layers
                ));
            }
            if !seen.insert(l) {
                bad.push(format!("full_attn_layers: {l} appears twice"));
            }
        }
        if self.num_hidden_layers > 0 && (0..self.num_hidden_layers).all(|l| self.is_mla(l)) {
            bad.push("full_attn_layers: covers every layer; no KDA layer remains".to_string());
        }
        let finite_pos = [
            ("rms_norm_eps", self.rms_norm_eps),
            ("situ_beta", self.situ_beta),
            ("situ_linear_beta", self.situ_linear_beta),
        ];
        for (name, v) in finite_pos {
            if !(v.is_finite() && v > 0.0) {
                bad.push(format!("{name}: {v} must be finite and > 0"));
            }
        }
        if !(self.gate_lower_bound.is_finite() && self.gate_lower_bound < 0.0) {
            bad.push(format!(
                "gate_lower_bound: {} must be finite and < 0",
                self.gate_lower_bound
            ));
        }
        if !self.routed_scaling_factor.is_finite() {
            bad.push("routed_scaling_factor: must be finite".to_string());
        }
        let (a, b) = self.shard_name_digits;
        if a == 0 || b == 0 || a > 12 || b > 12 {
            bad.push(format!("shard_name_digits: ({a}, {b}) must be in 1..=12"));
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    }

    fn layer_name(l: usize, suffix: &str) -> String {
        format!("{PREFIX}model.layers.{l}.{suffix}")
    }

    /// The model-level tensors (MODEL.md §4, "Model level"): `embed_tokens`, `lm_head` (unless
    /// tied), `norm`, `output_attn_res_norm`, `output_attn_res_proj`.
    pub fn model_tensors(&self) -> Vec<TensorDef> {
        let h = self.hidden_size;
        let v = self.vocab_size;
        let mut out = vec![
            // Unit-scale embedding rows: the first RMSNorm rescales them, and the residual
            // sum P starts at the same magnitude as the layer outputs.
            TensorDef::bf16(
                format!("{PREFIX}model.embed_tokens.weight"),
                &[v, h],
                -1.0,
                1.0,
            ),
            gain(format!("{PREFIX}model.norm.weight"), h),
            gain(format!("{PREFIX}model.output_attn_res_norm.weight"), h),
            matrix(format!("{PREFIX}model.output_attn_res_proj.weight"), 1, h),
        ];
        if !self.tie_word_embeddings {
            out.push(matrix(format!("{PREFIX}lm_head.weight"), v, h));
        }
        out
    }

    /// The trunk tensors of zero-based layer `l` (MODEL.md §4: every layer, KDA or MLA, dense
    /// FFN or MoE trunk), with their value recipes. Routed experts are in
    /// [`SynthSpec::expert_tensors`].
    pub fn layer_tensors(&self, l: usize) -> Vec<TensorDef> {
        let h = self.hidden_size;
        let n = |s: &str| Self::layer_name(l, s);
        let mut out = vec![
            gain(n("input_layernorm.weight"), h),
            gain(n("post_attention_layernorm.weight"), h),
            gain(n("self_attention_res_norm.weight"), h),
            matrix(n("self_attention_res_proj.weight"), 1, h),
            gain(n("mlp_res_norm.weight"), h),
            matrix(n("mlp_res_proj.weight"), 1, h),
        ];
        if self.is_mla(l) {
            let (hm, rq, rkv) = (
                self.num_attention_heads,
                self.q_lora_rank,
                self.kv_lora_rank,
            );
            let dq = self.qk_nope_head_dim + self.qk_rope_head_dim;
            let dv = self.v_head_dim;
            out.push(matrix(n("self_attn.q_a_proj.weight"), rq, h));
            out.push(gain(n("self_attn.q_a_layernorm.weight"), rq));
            out.push(matrix(n("self_attn.q_b_proj.weight"), hm * dq, rq));
            out.push(matrix(
                n("self_attn.kv_a_proj_with_mqa.weight"),
                rkv + self.qk_rope_head_dim,
                h,
            ));
            out.push(gain(n("self_attn.kv_a_layernorm.weight"), rkv));
            out.push(matrix(
                n("self_attn.kv_b_proj.weight"),
                hm * (self.qk_nope_head_dim + dv),
                rkv,
            ));
            if self.mla_use_output_gate {
                out.push(matrix(n("self_attn.g_proj.weight"), hm * dv, h));
            }
            out.push(matrix(n("self_attn.o_proj.weight"), h, hm * dv));
        } else {
            let (hk, dk, kc) = (
                self.kda_num_heads,
                self.kda_head_dim,
                self.short_conv_kernel_size,
            );
            let pk = hk * dk;
            for p in ["q", "k", "v"] {
                out.push(matrix(n(&format!("self_attn.{p}_proj.weight")), pk, h));
                // Taps of std ≈ 0.4 (the fixtures' choice): the conv mixes the current and
                // the previous inputs visibly without growing them.
                out.push(TensorDef::f32(
                    n(&format!("self_attn.{p}_conv1d.weight")),
                    &[pk, 1, kc],
                    -0.7,
                    0.7,
                ));
            }
            out.push(matrix(n("self_attn.f_a_proj.weight"), dk, h));
            out.push(matrix(n("self_attn.f_b_proj.weight"), pk, dk));
            out.push(matrix(n("self_attn.b_proj.weight"), hk, h));
            // A_log per head (a = e^A_log in [1, 12.2]), the tail exactly +0 (MODEL.md §4).
            out.push(TensorDef {
                name: n("self_attn.A_log"),
                dtype: Dtype::F32,
                shape: vec![dk.max(hk)],
                init: Init::F32HeadPrefix {
                    used: hk,
                    lo: 0.0,
                    hi: 2.5,
                },
            });
            // dt_bias spread so that the bounded decay α covers most of [e^gmin, 1].
            out.push(TensorDef::f32(n("self_attn.dt_bias"), &[pk], -2.0, 1.0));
            out.push(TensorDef::f32(
                n("self_attn.o_norm.weight"),
                &[dk],
                0.8,
                1.2,
            ));
            out.push(matrix(n("self_attn.g_proj.weight"), pk, h));
            out.push(matrix(n("self_attn.o_proj.weight"), h, pk));
        }
        if self.is_dense(l) {
            let f = self.intermediate_size;
            out.push(matrix(n("mlp.gate_proj.weight"), f, h));
            out.push(matrix(n("mlp.up_proj.weight"), f, h));
            out.push(matrix(n("mlp.down_proj.weight"), h, f));
        } else {
            let (e, lat) = (self.num_experts, self.routed_expert_hidden_size);
            // Independent random router rows (score logits of unit variance) and a small
            // bias: every token's top-k is its own, so selections spread over all experts.
            out.push(matrix(n("block_sparse_moe.gate.weight"), e, h));
            out.push(TensorDef::f32(
                n("block_sparse_moe.gate.e_score_correction_bias"),
                &[e],
                -0.02,
                0.02,
            ));
            out.push(matrix(
                n("block_sparse_moe.routed_expert_down_proj.weight"),
                lat,
                h,
            ));
            if self.latent_moe_use_norm {
                out.push(gain(n("block_sparse_moe.routed_expert_norm.weight"), lat));
            }
            out.push(matrix(
                n("block_sparse_moe.routed_expert_up_proj.weight"),
                h,
                lat,
            ));
            let sw = self.num_shared_experts * self.moe_intermediate_size;
            if sw > 0 {
                out.push(matrix(
                    n("block_sparse_moe.shared_experts.gate_proj.weight"),
                    sw,
                    h,
                ));
                out.push(matrix(
                    n("block_sparse_moe.shared_experts.up_proj.weight"),
                    sw,
                    h,
                ));
                out.push(matrix(
                    n("block_sparse_moe.shared_experts.down_proj.weight"),
                    h,
                    sw,
                ));
            }
        }
        out
    }

    /// The six MXFP4 tensors of routed expert `e` of MoE layer `l` (MODEL.md §4, FORMATS.md
    /// §5), in their fixed on-disk order: `w1` (gate, logical [I, L]), `w2` (down, [L, I]),
    /// `w3` (up, [I, L]), each `weight_packed` then `weight_scale`.
    pub fn expert_tensors(&self, l: usize, e: usize) -> Vec<TensorDef> {
        let (lat, i) = (self.routed_expert_hidden_size, self.moe_intermediate_size);
        let mut out = Vec::with_capacity(6);
        for (w, rows, cols) in [("w1", i, lat), ("w2", lat, i), ("w3", i, lat)] {
            let base = format!("block_sparse_moe.experts.{e}.{w}");
            out.push(TensorDef {
                name: Self::layer_name(l, &format!("{base}.weight_packed")),
                dtype: Dtype::U8,
                shape: vec![rows, cols / 2],
                init: Init::Nibbles,
            });
            let (lo, hi) = e8m0_range(cols);
            out.push(TensorDef {
                name: Self::layer_name(l, &format!("{base}.weight_scale")),
                dtype: Dtype::U8,
                shape: vec![rows, cols / 32],
                init: Init::E8M0 { lo, hi },
            });
        }
        out
    }

    /// The dummy multimodal tensors of the last two shards (ignored by a text engine).
    pub fn vision_tensors(&self) -> (Vec<TensorDef>, Vec<TensorDef>) {
        (
            vec![matrix("mm_projector.proj.0.weight".to_string(), 16, 16)],
            vec![gain(
                "vision_tower.encoder.final_layernorm.weight".to_string(),
                16,
            )],
        )
    }

    fn shard_name(&self, index: usize, total: usize) -> String {
        let (a, b) = self.shard_name_digits;
        format!("model-{index:0a$}-of-{total:0b$}.safetensors")
    }

    /// The shard plan: which tensors go to which file, in which byte order, with the exact
    /// header bytes. Deterministic. Errors: [`SynthSpec::validate`]'s.
    pub fn plan(&self) -> Result<Plan, String> {
        self.validate()?;
        let nl = self.num_hidden_layers;
        let mut groups: Vec<Vec<TensorDef>> = Vec::new();
        let mut layer = 0;
        while layer < nl {
            let end = if layer == 0 {
                1
            } else {
                (layer + self.layers_per_shard).min(nl)
            };
            let mut t = Vec::new();
            for l in layer..end {
                t.extend(self.layer_tensors(l));
                if !self.is_dense(l) {
                    for e in 0..self.num_experts {
                        t.extend(self.expert_tensors(l, e));
                    }
                }
            }
            groups.push(t);
            layer = end;
        }
        groups.push(self.model_tensors());
        if self.vision_dummies {
            let (mm, vt) = self.vision_tensors();
            groups.push(mm);
            groups.push(vt);
        }
        let total = groups.len();
        let shards = groups
            .into_iter()
            .enumerate()
            .map(|(i, t)| ShardPlan::new(self.shard_name(i + 1, total), t))
            .collect();
        Ok(Plan {
            spec: self.clone(),
            shards,
        })
    }

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

// ---------------------------------------------------------------------------------------------
// Tensors and value recipes
// ---------------------------------------------------------------------------------------------

/// The three dtypes the catalogue binds (FORMATS.md §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// bfloat16, 2 bytes.
    BF16,
    /// IEEE binary32, 4 bytes.
    F32,
    /// bytes (MXFP4 nibbles and E8M0 scales).
    U8,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::BF16 => 2,
            Dtype::F32 => 4,
            Dtype::U8 => 1,
        }
    }

    /// The safetensors dtype string.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BF16 => "BF16",
            Dtype::F32 => "F32",
            Dtype::U8 => "U8",
        }
    }
}

/// How a tensor's values are drawn. Uniform draws use the block's PRNG stream (see the module
/// doc); every recipe consumes whole 64-bit draws in element order.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// BF16 uniform on [lo, hi]: each element takes 16 bits of a draw (four per draw, low bits
    /// first) through a 65,536-entry table of lo + (hi − lo)·(r + ½)/65536, rounded to BF16
    /// (nearest even).
    Bf16Uniform {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// F32 uniform on [lo, hi]: each element takes 32 bits (two per draw, low half first), of
    /// which the top 24 give lo + (hi − lo)·(u + ½)/2^24, in f64 rounded to f32.
    F32Uniform {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// F32, the first `used` elements as [`Init::F32Uniform`], the rest exactly +0.0
    /// (`A_log`: one value per head, zero padding; MODEL.md §4).
    F32HeadPrefix {
        /// Number of leading non-zero elements (Hk).
        used: usize,
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// MXFP4 packed E2M1 nibbles: uniformly random bytes (all 16 codes in both nibbles).
    Nibbles,
    /// E8M0 scale bytes uniform on lo..=hi (1 ≤ lo ≤ hi ≤ 254), each from 8 bits of a draw.
    E8M0 {
        /// Smallest scale byte.
        lo: u8,
        /// Largest scale byte.
        hi: u8,
    },
}

/// One tensor of the checkpoint: its name, dtype, shape and value recipe.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDef {
    /// Full tensor name (MODEL.md §4).
    pub name: String,
    /// Dtype.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Value recipe.
    pub init: Init,
}

impl TensorDef {
    fn bf16(name: String, shape: &[usize], lo: f32, hi: f32) -> TensorDef {
        TensorDef {
            name,
            dtype: Dtype::BF16,
            shape: shape.to_vec(),
            init: Init::Bf16Uniform { lo, hi },
        }
    }

    fn f32(name: String, shape: &[usize], lo: f32, hi: f32) -> TensorDef {
        TensorDef {
            name,
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            init: Init::F32Uniform { lo, hi },
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.numel() * self.dtype.size()
    }
}

/// A BF16 `[rows, cols]` matrix uniform on ±sqrt(3/cols): variance 1/fan_in, so a unit-RMS
/// input gives unit-RMS outputs.
fn matrix(name: String, rows: usize, cols: usize) -> TensorDef {
    let a = (3.0f64 / cols as f64).sqrt() as f32;
    TensorDef::bf16(name, &[rows, cols], -a, a)
}

/// A BF16 RMSNorm gain of width n, uniform on [0.8, 1.2] (non-unit, so a missing gain shows).
fn gain(name: String, n: usize) -> TensorDef {
    TensorDef::bf16(name, &[n], 0.8, 1.2)
}

/// E8M0 scale range for an MXFP4 matrix with `fan_in` columns: two consecutive exponents
/// 2^k, 2^(k+1) with k chosen so the mean square of the decoded values,
/// E[E2M1²] · (4^k + 4^(k+1))/2 = 8.5625 · 2.5 · 4^k, is closest (in ratio) to 1/fan_in.
/// K3 (3584 and 3072 columns): bytes 119..=120. Clamped to 1..=254 (never 0, never 255).
pub fn e8m0_range(fan_in: usize) -> (u8, u8) {
    let target = 1.0 / fan_in as f64;
    let mut best = (f64::INFINITY, 0i32);
    for k in -120..=120i32 {
        let ms = 8.5625 * 2.5 * pow2(2 * k);
        let ratio = if ms > target {
            ms / target
        } else {
            target / ms
        };
        if ratio < best.0 {
            best = (ratio, k);
        }
    }
    let lo = (127 + best.1).clamp(1, 253) as u8;
    (lo, lo + 1)
}

/// 2^k as f64 for |k| ≤ 1000, by repeated exact doubling/halving (no library math).
fn pow2(k: i32) -> f64 {
    let mut v = 1.0f64;
    if k >= 0 {
        for _ in 0..k {
            v *= 2.0;
        }
    } else {
        for _ in 0..-k {
            v *= 0.5;
        }
    }
    v
}

// ---------------------------------------------------------------------------------------------
// PRNG and block generation
// ---------------------------------------------------------------------------------------------

/// FNV-1a-64 (FORMATS.md §1).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_update(0xcbf2_9ce4_8422_2325, bytes)
}

/// Continues an FNV-1a-64 hash `h` over `bytes`.
pub fn fnv1a64_update(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** (Blackman & Vigna), seeded through SplitMix64.
#[derive(Clone, Debug)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// A generator whose state is four successive SplitMix64 outputs from `seed`.
    pub fn new(seed: u64) -> Xoshiro256 {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Xoshiro256 { s }
    }

    /// The stream of block `block` of the tensor whose name hashes to `name_hash`.
    pub fn for_block(seed: u64, name_hash: u64, block: u64) -> Xoshiro256 {
        let mut sm = seed ^ 0x6b33_2d73_796e_7468; // "k3-synth"
        let a = splitmix64(&mut sm);
        let mut sm = a ^ name_hash;
        let b = splitmix64(&mut sm);
        let mut sm = b ^ block;
        Xoshiro256::new(splitmix64(&mut sm))
    }

    /// Next 64-bit draw.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}

/// f32 → BF16 bits, round to nearest even (finite inputs).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The 65,536-entry table of [`Init::Bf16Uniform`].
fn bf16_table(lo: f32, hi: f32) -> Vec<u16> {
    let (lo, hi) = (lo as f64, hi as f64);
    (0..65536u32)
        .map(|r| f32_to_bf16((lo + (hi - lo) * ((r as f64 + 0.5) / 65536.0)) as f32))
        .collect()
}

#[inline(always)]
fn f32_uniform(bits24: u32, lo: f64, span: f64) -> f32 {
    (lo + span * ((bits24 as f64 + 0.5) / 16_777_216.0)) as f32
}

/// Generation context: the plan's tensors with their name hashes and BF16 tables.
struct Generator<'a> {
    seed: u64,
    tensors: Vec<(&'a TensorDef, u64, Option<usize>)>,
    tables: Vec<Vec<u16>>,
}

impl<'a> Generator<'a> {
    fn new(seed: u64, defs: impl Iterator<Item = &'a TensorDef>) -> Generator<'a> {
        let mut keys: Vec<(u32, u32)> = Vec::new();
        let mut tables = Vec::new();
        let tensors = defs
            .map(|d| {
                let table = match d.init {
                    Init::Bf16Uniform { lo, hi } => {
                        let key = (lo.to_bits(), hi.to_bits());
                        Some(match keys.iter().position(|k| *k == key) {
                            Some(i) => i,
                            None => {
                                keys.push(key);
                                tables.push(bf16_table(lo, hi));
                                tables.len() - 1
                            }
                        })
                    }
                    _ => None,
                };
                (d, fnv1a64(d.name.as_bytes()), table)
            })
            .collect();
        Generator {
            seed,
            tensors,
            tables,
        }
    }

    /// Fills `out` with block `block` of tensor `t` (`out.len()` = that block's length).
    fn fill(&self, t: usize, block: u64, out: &mut [u8]) {
        let (def, hash, table) = self.tensors[t];
        let mut rng = Xoshiro256::for_block(self.seed, hash, block);
        match def.init {
            Init::Bf16Uniform { .. } => {
                let table = &self.tables[table.expect("BF16 tensors have a table")];
                let mut chunks = out.chunks_exact_mut(8);
                for c in &mut chunks {
                    let r = rng.next_u64();
                    let v = [
                        table[(r & 0xffff) as usize],
                        table[((r >> 16) & 0xffff) as usize],
                        table[((r >> 32) & 0xffff) as usize],
                        table[(r >> 48) as usize],
                    ];
                    let w = (v[0] as u64)
                        | ((v[1] as u64) << 16)
                        | ((v[2] as u64) << 32)
                        | ((v[3] as u64) << 48);
                    c.copy_from_slice(&w.to_le_bytes());
                }
                let rest = chunks.into_remainder();
                if !rest.is_empty() {
                    let r = rng.next_u64();
                    for (j, e) in rest.chunks_exact_mut(2).enumerate() {
                        let v = table[((r >> (16 * j)) & 0xffff) as usize];
                        e.copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            Init::F32Uniform { lo, hi } => {
                let first = block * BLOCK_BYTES / 4;
                fill_f32(&mut rng, out, first, usize::MAX, lo, hi);
            }
            Init::F32HeadPrefix { used, lo, hi } => {
                let first = block * BLOCK_BYTES / 4;
                fill_f32(&mut rng, out, first, used, lo, hi);
            }
            Init::Nibbles => {
                let mut chunks = out.chunks_exact_mut(8);
                for c in &mut chunks {
                    c.copy_from_slice(&rng.next_u64().to_le_bytes());
                }
                let rest = chunks.into_remainder();
                if !rest.is_empty() {
                    let r = rng.next_u64().to_le_bytes();
                    let n = rest.len();
                    rest.copy_from_slice(&r[..n]);
                }
            }
            Init::E8M0 { lo, hi } => {
                let n = (hi - lo) as u64 + 1;
                for c in out.chunks_mut(8) {
                    let r = rng.next_u64();
                    for (j, b) in c.iter_mut().enumerate() {
                        // Multiply-shift maps 8 random bits onto lo..=hi.
                        *b = lo + ((((r >> (8 * j)) & 0xff) * n) >> 8) as u8;
                    }
                }
            }
        }
    }
}

/// F32 uniform elements; element indices ≥ `used` (counted from the tensor start, `first` is
/// the index of out[0]) are +0.0 but still consume their draw bits.
fn fill_f32(rng: &mut Xoshiro256, out: &mut [u8], first: u64, used: usize, lo: f32, hi: f32) {
    let (lo, span) = (lo as f64, hi as f64 - lo as f64);
    let mut idx = first;
    for c in out.chunks_mut(8) {
        let r = rng.next_u64();
        for (j, e) in c.chunks_exact_mut(4).enumerate() {
            let bits = ((r >> (32 * j)) as u32) >> 8;
            let v = if idx < used as u64 {
                f32_uniform(bits, lo, span)
            } else {
                0.0
            };
            e.copy_from_slice(&v.to_le_bytes());
            idx += 1;
        }
    }
}

/// The full bytes of one tensor of `spec` (for tests: what the checkpoint holds for it).
pub fn tensor_data(seed: u64, def: &TensorDef) -> Vec<u8> {
    let g = Generator::new(seed, std::iter::once(def));
    let n = def.nbytes();
    let mut out = vec![0u8; n as usize];
    for (b, chunk) in out.chunks_mut(BLOCK_BYTES as usize).enumerate() {
        g.fill(0, b as u64, chunk);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------------------------

/// A tensor placed in a shard: `[begin, end)` relative to the data section (FORMATS.md §2.1).
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    /// The tensor.
    pub def: TensorDef,
    /// First byte, relative to the data section.
    pub begin: u64,
    /// One past the last byte, relative to the data section.
    pub end: u64,
}

/// One shard file: its name, header bytes and tensors in data order.
#[derive(Clone, Debug)]
pub struct ShardPlan {
    /// File name (no directory).
    pub file_name: String,
    /// The JSON header as written (sorted keys, space-padded so 8 + len is a multiple of 8).
    pub header: Vec<u8>,
    /// Tensors in byte-wise name order, which is also data order.
    pub tensors: Vec<PlannedTensor>,
}

impl ShardPlan {
    fn new(file_name: String, mut defs: Vec<TensorDef>) -> ShardPlan {
        defs.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let mut off = 0u64;
        let tensors: Vec<PlannedTensor> = defs
            .into_iter()
            .map(|def| {
                let begin = off;
                off += def.nbytes();
                PlannedTensor {
                    def,
                    begin,
                    end: off,
                }
            })
            .collect();
        let mut h = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        for t in &tensors {
            let shape: Vec<String> = t.def.shape.iter().map(|d| d.to_string()).collect();
            let _ = write!(
                h,
                ",{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                json_string(&t.def.name),
                t.def.dtype.name(),
                shape.join(","),
                t.begin,
                t.end
            );
        }
        h.push('}');
        while h.len() % 8 != 0 {
            h.push(' ');
        }
        ShardPlan {
            file_name,
            header: h.into_bytes(),
            tensors,
        }
    }

    /// Absolute file offset of the data section: 8 + header length.
    pub fn data_start(&self) -> u64 {
        8 + self.header.len() as u64
    }

    /// Bytes of the data section.
    pub fn data_bytes(&self) -> u64 {
        self.tensors.last().map_or(0, |t| t.end)
    }

    /// Size of the shard file in bytes.
    pub fn file_size(&self) -> u64 {
        self.data_start() + self.data_bytes()
    }
}

/// The complete layout of a synthetic checkpoint.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The spec it was made from.
    pub spec: SynthSpec,
    /// Shards in file-name order.
    pub shards: Vec<ShardPlan>,
}

impl Plan {
    /// Total bytes of all shard files.
    pub fn shard_bytes(&self) -> u64 {
        self.shards.iter().map(ShardPlan::file_size).sum()
    }

    /// Total tensor bytes (the index's `metadata.total_size`).
    pub fn tensor_bytes(&self) -> u64 {
        self.shards.iter().map(ShardPlan::data_bytes).sum()
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.shards.iter().map(|s| s.tensors.len()).sum()
    }

    /// Finds a tensor: (shard index, placed tensor).
    pub fn find(&self, name: &str) -> Option<(usize, &PlannedTensor)> {
        self.shards.iter().enumerate().find_map(|(i, s)| {
            s.tensors
                .binary_search_by(|t| t.def.name.as_bytes().cmp(name.as_bytes()))
                .ok()
                .map(|j| (i, &s.tensors[j]))
        })
    }

    /// Absolute location of a tensor: (shard file name, file offset, byte length).
    pub fn locate(&self, name: &str) -> Option<(&str, u64, u64)> {
        self.find(name).map(|(i, t)| {
            let s = &self.shards[i];
            (
                s.file_name.as_str(),
                s.data_start() + t.begin,
                t.end - t.begin,
            )
        })
    }

    /// `model.safetensors.index.json` text: `metadata.total_size` and the `weight_map` with
    /// sorted names (FORMATS.md §3).
    pub fn index_json(&self) -> String {
        let mut names: Vec<(&str, &str)> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.tensors
                    .iter()
                    .map(move |t| (t.def.name.as_str(), s.file_name.as_str()))
            })
            .collect();
        names.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut s = String::with_capacity(names.len() * 100);
        let _ = write!(
            s,
            "{{\n  \"metadata\": {{\n    \"total_size\": {}\n  }},\n  \"weight_map\": {{",
            self.tensor_bytes()
        );
        for (i, (n, f)) in names.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(s, "{sep}\n    {}: {}", json_string(n), json_string(f));
        }
        s.push_str("\n  }\n}\n");
        s
    }

    /// The bytes of one tensor (see [`tensor_data`]).
    pub fn tensor_data(&self, name: &str) -> Option<Vec<u8>> {
        self.find(name)
            .map(|(_, t)| tensor_data(self.spec.seed, &t.def))
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Bytes per write: shards are written in aligned writes of this size (the last one of a shard
/// padded to 4096 and the file then truncated to its exact size), so an opener may use
/// `O_DIRECT` and bypass the page cache. Not part of the byte recipe.
pub const STAGE_BYTES: usize = 64 << 20;

/// Alignment of every write's buffer address, offset and length.
pub const WRITE_ALIGN: usize = 4096;

/// Progress of [`generate`], reported after each write.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Shard bytes written so far (headers included).
    pub done_bytes: u64,
    /// Shard bytes in all.
    pub total_bytes: u64,
    /// Seconds since generation started.
    pub seconds: f64,
    /// Zero-based index of the shard being written.
    pub shard: usize,
    /// Number of shards.
    pub shards: usize,
}

/// Opens a new shard file for writing (created or truncated). The default is
/// `File::create`; the xtask passes one that adds `O_DIRECT` where the file system allows it.
pub type Opener = dyn Fn(&Path) -> io::Result<File> + Sync;

/// Options of [`generate`].
pub struct Options<'a> {
    /// Generator threads (≥ 1); the calling thread writes.
    pub threads: usize,
    /// Replace an existing checkpoint in the directory (only files a generator writes are
    /// removed; any other file makes [`generate`] fail).
    pub force: bool,
    /// `fdatasync` each shard before renaming it into place (honest timing, crash safety).
    pub sync: bool,
    /// Progress callback, called on the calling thread after each write.
    pub progress: Option<&'a mut dyn FnMut(&Progress)>,
    /// Shard opener; `None` = `File::create`.
    pub open: Option<&'a Opener>,
    /// Bytes per write and per generated unit (rounded up to 4096); `None` = [`STAGE_BYTES`]
    /// or the largest shard if smaller. Never changes the bytes written.
    pub stage_bytes: Option<usize>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            threads: 1,
            force: false,
            sync: false,
            progress: None,
            open: None,
            stage_bytes: None,
        }
    }
}

/// What [`generate`] wrote.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The plan that was written.
    pub plan: Plan,
    /// Shard bytes written.
    pub bytes: u64,
    /// Wall-clock seconds of the shard writing (including syncs).
    pub seconds: f64,
}

/// Files a generator writes into a model directory; `force` removes only these.
fn is_generated_file(name: &str) -> bool {
    name == "config.json"
        || name == "model.safetensors.index.json"
        || name == "synth.json"
        || (name.starts_with("model-")
            && (name.ends_with(".safetensors") || name.ends_with(".safetensors.partial")))
        || name.ends_with(".json.tmp")
}

fn io_err(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

fn prepare_dir(dir: &Path, force: bool) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, "cannot create directory", e))?;
    let mut foreign = Vec::new();
    let mut ours = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, "cannot list directory", e))? {
        let entry = entry.map_err(|e| io_err(dir, "cannot list directory", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if is_file && is_generated_file(&name) {
            ours.push(entry.path());
        } else {
            foreign.push(name);
        }
    }
    if !foreign.is_empty() {
        foreign.sort();
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{}: holds files a synthetic checkpoint does not write ({}); choose an empty \
                 directory",
                dir.display(),
                foreign.join(", ")
            ),
        ));
    }
    if !ours.is_empty() {
        if !force {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{}: already holds a checkpoint ({} files); pass --force to replace it",
                    dir.display(),
                    ours.len()
                ),
            ));
        }
        for p in ours {
            fs::remove_file(&p).map_err(|e| io_err(&p, "cannot remove", e))?;
        }
    }
    Ok(())
}

/// Writes `text` to `dir/name` through a temporary name and a rename.
fn write_small(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    fs::write(&tmp, text).map_err(|e| io_err(&tmp, "cannot write", e))?;
    fs::rename(&tmp, &path).map_err(|e| io_err(&path, "cannot rename into place", e))
}

/// One write unit: bytes `[start, end)` of a shard file, `start` a multiple of the stage size.
/// Units are generated in parallel and written in order.
struct Unit {
    shard: usize,
    start: u64,
    end: u64,
}

fn cut_units(plan: &Plan, stage: u64) -> Vec<Unit> {
    let mut units = Vec::new();
    for (si, s) in plan.shards.iter().enumerate() {
        let size = s.file_size();
        let mut start = 0;
        while start < size {
            let end = (start + stage).min(size);
            units.push(Unit {
                shard: si,
                start,
                end,
            });
            start = end;
        }
    }
    units
}

/// A buffer of `cap` bytes whose payload starts at a `WRITE_ALIGN`-aligned address (found
/// inside an over-allocated `Vec`, so no unsafe code is needed).
struct Stage {
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl Stage {
    fn new(cap: usize) -> Stage {
        let mem = vec![0u8; cap + WRITE_ALIGN];
        let addr = mem.as_ptr() as usize;
        let start = (WRITE_ALIGN - addr % WRITE_ALIGN) % WRITE_ALIGN;
        Stage { mem, start, len: 0 }
    }

    /// Sets the payload length to `len` rounded up to `WRITE_ALIGN` (zero padding past `len`)
    /// and returns the first `len` bytes for filling.
    fn prepare(&mut self, len: usize) -> &mut [u8] {
        let padded = len.div_ceil(WRITE_ALIGN) * WRITE_ALIGN;
        self.mem[self.start + len..self.start + padded].fill(0);
        self.len = padded;
        &mut self.mem[self.start..self.start + len]
    }

    fn payload(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }
}

/// Fills `out` with bytes `[start, start + out.len())` of shard `s`'s file: the 8-byte header
/// length, the header, then the tensors' blocks. A block cut by the unit boundary is generated
/// whole into `scratch` and the overlap copied.
fn fill_unit(
    gen: &Generator<'_>,
    s: &ShardPlan,
    tensor_base: usize,
    start: u64,
    out: &mut [u8],
    scratch: &mut Vec<u8>,
) {
    let end = start + out.len() as u64;
    let mut head = Vec::new();
    let data_start = s.data_start();
    if start < data_start {
        head.extend_from_slice(&(s.header.len() as u64).to_le_bytes());
        head.extend_from_slice(&s.header);
        let n = (data_start.min(end) - start) as usize;
        out[..n].copy_from_slice(&head[start as usize..start as usize + n]);
    }
    // First tensor ending after the unit start.
    let first = s.tensors.partition_point(|t| data_start + t.end <= start);
    for (ti, t) in s.tensors.iter().enumerate().skip(first) {
        let (tb, te) = (data_start + t.begin, data_start + t.end);
        if tb >= end {
            break;
        }
        let lo = tb.max(start);
        let hi = te.min(end);
        let mut k = (lo - tb) / BLOCK_BYTES;
        while tb + k * BLOCK_BYTES < hi {
            let bs = tb + k * BLOCK_BYTES;
            let be = (bs + BLOCK_BYTES).min(te);
            let (a, b) = (bs.max(start), be.min(end));
            let dst = &mut out[(a - start) as usize..(b - start) as usize];
            if a == bs && b == be {
                gen.fill(tensor_base + ti, k, dst);
            } else {
                scratch.resize((be - bs) as usize, 0);
                gen.fill(tensor_base + ti, k, scratch);
                dst.copy_from_slice(&scratch[(a - bs) as usize..(b - bs) as usize]);
            }
            k += 1;
        }
    }
}

/// Writes the checkpoint of `spec` into `dir`: every shard (to `<name>.partial`, renamed when
/// complete), then the index, `synth.json` and finally `config.json`, so an interrupted run
/// never leaves a loadable-looking directory. `opts.threads` threads generate the shard files
/// in aligned units of up to 64 MiB, straight into the buffers that are written; the calling
/// thread writes the units in order with large sequential writes, so generation overlaps the
/// disk.
///
/// Errors: an invalid spec (`InvalidInput`, naming the field), a directory holding other files
/// or (without `force`) an existing checkpoint (`AlreadyExists`), any I/O error (naming the
/// path).
pub fn generate(spec: &SynthSpec, dir: &Path, mut opts: Options<'_>) -> io::Result<Summary> {
    let plan = spec
        .plan()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("synth spec: {e}")))?;
    prepare_dir(dir, opts.force)?;
    let gen = Generator::new(
        spec.seed,
        plan.shards
            .iter()
            .flat_map(|s| s.tensors.iter().map(|t| &t.def)),
    );
    let mut tensor_base = Vec::with_capacity(plan.shards.len());
    let mut n = 0;
    for s in &plan.shards {
        tensor_base.push(n);
        n += s.tensors.len();
    }
    // Small checkpoints (tests) get small stages.
    let largest = plan
        .shards
        .iter()
        .map(ShardPlan::file_size)
        .max()
        .unwrap_or(0);
    let align = WRITE_ALIGN as u64;
    let stage_cap = match opts.stage_bytes {
        Some(n) => (n.max(1) as u64).div_ceil(align) * align,
        None => (STAGE_BYTES as u64).min(largest.div_ceil(align) * align),
    } as usize;
    let units = cut_units(&plan, stage_cap as u64);
    let threads = opts.threads.max(1);
    let start = Instant::now();

    let next_unit = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let (free_tx, free_rx) = mpsc::channel::<Stage>();
    for _ in 0..threads + 2 {
        let _ = free_tx.send(Stage::new(stage_cap));
    }
    let free_rx = Mutex::new(free_rx);
    let (done_tx, done_rx) = mpsc::channel::<(usize, Stage)>();

    std::thread::scope(|scope| -> io::Result<()> {
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            let (gen, units, plan, tensor_base) = (&gen, &units, &plan, &tensor_base);
            let (free_rx, next_unit, abort) = (&free_rx, &next_unit, &abort);
            scope.spawn(move || {
                let mut scratch = Vec::new();
                loop {
                    // Take a buffer before claiming a unit: the unit the writer waits for is
                    // then always held by a thread that can finish it.
                    let mut stage = match free_rx.lock().map(|rx| rx.recv()) {
                        Ok(Ok(b)) => b,
                        _ => return,
                    };
                    if abort.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next_unit.fetch_add(1, Ordering::Relaxed);
                    if i >= units.len() {
                        return;
                    }
                    let u = &units[i];
                    let out = stage.prepare((u.end - u.start) as usize);
                    let s = &plan.shards[u.shard];
                    fill_unit(gen, s, tensor_base[u.shard], u.start, out, &mut scratch);
                    if done_tx.send((i, stage)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        let written = write_units(&plan, dir, &units, done_rx, free_tx, &mut opts, start);
        if written.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        written
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let bytes = plan.shard_bytes();
    write_small(dir, "model.safetensors.index.json", &plan.index_json())?;
    write_small(dir, "synth.json", &spec.synth_json(bytes))?;
    write_small(dir, "config.json", &spec.config_json())?;
    Ok(Summary {
        plan,
        bytes,
        seconds,
    })
}

/// The writing loop (calling thread): receives generated units, writes them in order, opens
/// and closes shards, returns buffers to the pool. Dropping `free_tx` and `done_rx` on return
/// (also on error) ends the generator threads.
fn write_units(
    plan: &Plan,
    dir: &Path,
    units: &[Unit],
    done_rx: mpsc::Receiver<(usize, Stage)>,
    free_tx: mpsc::Sender<Stage>,
    opts: &mut Options<'_>,
    start: Instant,
) -> io::Result<()> {
    let default_open = |p: &Path| File::create(p);
    let open: &Opener = opts.open.unwrap_or(&default_open);
    let total = plan.shard_bytes();
    let mut pending: BTreeMap<usize, Stage> = BTreeMap::new();
    let mut next = 0usize;
    let mut done_bytes = 0u64;
    let mut cur: Option<(File, PathBuf)> = None;
    while next < units.len() {
        let (i, stage) = done_rx
            .recv()
            .map_err(|_| io::Error::other("synth: generator threads stopped early"))?;
        pending.insert(i, stage);
        while let Some(stage) = pending.remove(&next) {
            let u = &units[next];
            let s = &plan.shards[u.shard];
            if u.start == 0 {
                let partial = dir.join(format!("{}.partial", s.file_name));
                let f = open(&partial).map_err(|e| io_err(&partial, "cannot create", e))?;
                cur = Some((f, partial));
            }
            let (file, partial) = cur.as_mut().expect("a shard is open");
            file.write_all(stage.payload())
                .map_err(|e| io_err(partial, "write failed", e))?;
            if u.end == s.file_size() {
                let (file, partial) = cur.take().expect("a shard is open");
                // Drop the zero padding of the last aligned write.
                file.set_len(u.end)
                    .map_err(|e| io_err(&partial, "cannot truncate", e))?;
                if opts.sync {
                    file.sync_data()
                        .map_err(|e| io_err(&partial, "fdatasync failed", e))?;
                }
                drop(file);
                let path = dir.join(&s.file_name);
                fs::rename(&partial, &path)
                    .map_err(|e| io_err(&path, "cannot rename into place", e))?;
            }
            done_bytes += u.end - u.start;
            let _ = free_tx.send(stage);
            if let Some(p) = opts.progress.as_deref_mut() {
                p(&Progress {
                    done_bytes,
                    total_bytes: total,
                    seconds: start.elapsed().as_secs_f64(),
                    shard: u.shard,
                    shards: plan.shards.len(),
                });
            }
            next += 1;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A minimal JSON writer (std only, deterministic formatting)
// ---------------------------------------------------------------------------------------------

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
fn json_string(s: &str) -> String {
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
