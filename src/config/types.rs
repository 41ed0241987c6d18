//! The validated config's types (MODEL.md §2.3, §2.4, §2.6) and the layer map (§3).

/// Which of the two config shapes was read (MODEL.md §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigShape {
    /// Root with a `text_config` object (the released checkpoint).
    Nested,
    /// Every key at the root (test checkpoints).
    Flat,
}

impl ConfigShape {
    /// `nested` or `flat` (as in the run report's `config_shape`, FORMATS.md §10).
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigShape::Nested => "nested",
            ConfigShape::Flat => "flat",
        }
    }
}

/// Attention kind of one layer (MODEL.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    /// Kimi Delta Attention (linear attention with a recurrent state).
    Kda,
    /// Multi-head latent attention (full attention over a latent KV cache).
    Mla,
}

impl AttnKind {
    /// `K` or `M`, the layer-map character (FORMATS.md §9.1 `layer_map`).
    pub fn letter(self) -> char {
        match self {
            AttnKind::Kda => 'K',
            AttnKind::Mla => 'M',
        }
    }
}

/// The MLA evaluation form, part of the numerics identity (MODEL.md §6.5, FORMATS.md §9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlaForm {
    /// The absorbed form (recommended; the cache is never expanded).
    Absorbed,
    /// The re-expanded form (tests only).
    Expanded,
}

impl MlaForm {
    /// `absorbed` or `expanded`.
    pub fn as_str(self) -> &'static str {
        match self {
            MlaForm::Absorbed => "absorbed",
            MlaForm::Expanded => "expanded",
        }
    }
}

/// One validated `config_groups` entry of `quantization_config` (MODEL.md §2.4).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantGroup {
    /// The group's key (`group_0` in the release).
    pub name: String,
    /// `targets` (e.g. `["Linear"]`); empty when absent.
    pub targets: Vec<String>,
    /// `weights.num_bits`: always 4.
    pub num_bits: u32,
    /// `weights.type`: always `float`.
    pub weight_type: String,
    /// `weights.group_size`: always 32.
    pub group_size: u32,
    /// `weights.symmetric`: always true.
    pub symmetric: bool,
    /// `weights.strategy` when present (`group` in the release).
    pub strategy: Option<String>,
    /// `weights.scale_dtype` when present (`torch.uint8` in the release).
    pub scale_dtype: Option<String>,
}

/// A validated `quantization_config` (MODEL.md §2.4): MXFP4, group 32, routed experts only.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizationConfig {
    /// Where it was read from (`text_config.quantization_config` or `quantization_config`).
    pub scope: String,
    /// Always `compressed-tensors`.
    pub quant_method: String,
    /// Always `mxfp4-pack-quantized`.
    pub format: String,
    /// `quantization_status` when present (`compressed` in the release).
    pub quantization_status: Option<String>,
    /// The groups, in file order (at least one).
    pub groups: Vec<QuantGroup>,
    /// The `ignore` patterns (informational: the catalogue, not this list, decides encodings).
    pub ignore: Vec<String>,
}

/// Constants derived from the config (MODEL.md §2.6). All products are overflow-checked at load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Derived {
    /// Pk = Hk·Dk, the KDA projection width.
    pub kda_proj_width: usize,
    /// sD = 1/sqrt(Dk) (f64), the KDA query scale.
    pub kda_query_scale: f64,
    /// Length of `A_log`: max(Dk, Hk) (MODEL.md §4).
    pub a_log_len: usize,
    /// Dq = Dn + Dr, the MLA query/key head width.
    pub mla_head_width: usize,
    /// sQ = 1/sqrt(Dq) (f64), the MLA softmax scale.
    pub mla_softmax_scale: f64,
    /// Rows of `q_b_proj`: Hm·Dq.
    pub q_b_rows: usize,
    /// Rows of `kv_a_proj_with_mqa`: Rkv + Dr.
    pub kv_a_rows: usize,
    /// Rows of `kv_b_proj`: Hm·(Dn + Dv).
    pub kv_b_rows: usize,
    /// MLA attention output width: Hm·Dv.
    pub mla_out_width: usize,
    /// MLA cache row in floats: Rkv + Dr.
    pub mla_cache_row: usize,
    /// Sw = num_shared_experts·I, the fused shared-expert width (0: no shared experts).
    pub shared_width: usize,
    /// MXFP4 groups per row of w1/w3: L/32.
    pub groups_w13: usize,
    /// MXFP4 groups per row of w2: I/32.
    pub groups_w2: usize,
    /// Conv history per channel: Kc − 1.
    pub conv_history: usize,
    /// AttnRes snapshots after the last layer: ceil(NL / Bs).
    pub snapshots: usize,
    /// Maximum AttnRes aggregation sources: snapshots + 1.
    pub max_agg_sources: usize,
    /// Number of dense-FFN layers: first_k_dense_replace.
    pub n_dense: usize,
    /// Number of MoE layers: NL − first_k_dense_replace.
    pub n_moe: usize,
    /// Number of KDA layers.
    pub n_kda: usize,
    /// Number of MLA layers.
    pub n_mla: usize,
}

/// The validated model configuration: every key of MODEL.md §2.3 under its canonical name
/// (FORMATS.md §9.1), the layer map (§3) and the derived constants (§2.6).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Nested or flat (§2.1).
    pub shape: ConfigShape,
    /// H.
    pub hidden_size: usize,
    /// NL.
    pub num_hidden_layers: usize,
    /// V.
    pub vocab_size: usize,
    /// ε, the RMSNorm epsilon (> 0).
    pub rms_norm_eps: f64,
    /// Head = `embed_tokens` when true (`lm_head` must then be absent).
    pub tie_word_embeddings: bool,
    /// Hm, the MLA head count.
    pub num_attention_heads: usize,
    /// Rq.
    pub q_lora_rank: usize,
    /// Rkv.
    pub kv_lora_rank: usize,
    /// Dn.
    pub qk_nope_head_dim: usize,
    /// Dr (may be 0; never rotated).
    pub qk_rope_head_dim: usize,
    /// Dv.
    pub v_head_dim: usize,
    /// MLA output gate (`g_proj`) present.
    pub mla_use_output_gate: bool,
    /// Always true (validated).
    pub mla_use_nope: bool,
    /// E.
    pub num_experts: usize,
    /// Kt, the top-k (1 ≤ Kt ≤ E).
    pub num_experts_per_token: usize,
    /// Shared experts fused into one MLP of width Sw (may be 0).
    pub num_shared_experts: usize,
    /// L, the latent width (multiple of 32).
    pub routed_expert_hidden_size: usize,
    /// I (multiple of 32).
    pub moe_intermediate_size: usize,
    /// rsf (finite).
    pub routed_scaling_factor: f64,
    /// Renormalise the top-k weights.
    pub moe_renormalize: bool,
    /// RMSNorm (`routed_expert_norm`) on the latent aggregate.
    pub latent_moe_use_norm: bool,
    /// Always `sigmoid` (validated).
    pub moe_router_activation_func: String,
    /// Always 1 (validated).
    pub num_expert_group: usize,
    /// Always 1 (validated).
    pub topk_group: usize,
    /// Always 1 (validated).
    pub moe_layer_freq: usize,
    /// Layers ℓ < this value have a dense FFN (0 ≤ value ≤ NL).
    pub first_k_dense_replace: usize,
    /// F, the dense FFN width.
    pub intermediate_size: usize,
    /// Always `situ` (validated).
    pub hidden_act: String,
    /// β1, the SiTU gate cap (`activation_situ_beta`).
    pub situ_beta: f64,
    /// β2, the SiTU up cap (`activation_situ_linear_beta`).
    pub situ_linear_beta: f64,
    /// Bs.
    pub attn_res_block_size: usize,
    /// Hk (from `linear_attn_config.num_heads` or flat `kda_num_heads` only).
    pub kda_num_heads: usize,
    /// Dk (from `linear_attn_config.head_dim` or flat `kda_head_dim` only).
    pub kda_head_dim: usize,
    /// Kc.
    pub short_conv_kernel_size: usize,
    /// gmin (< 0).
    pub gate_lower_bound: f64,
    /// One-based MLA layers, as written.
    pub full_attn_layers: Vec<usize>,
    /// One-based KDA layers, as written, when present (validated as the exact complement).
    pub kda_layers: Option<Vec<usize>>,
    /// Always true (validated).
    pub use_full_rank_gate: bool,
    /// The validated quantization config, when present.
    pub quantization_config: Option<QuantizationConfig>,
    /// Informational (`max_position_embeddings`), when present.
    pub max_position_embeddings: Option<u64>,
    /// Informational (TOKENIZER.md is authoritative), when present.
    pub bos_token_id: Option<u64>,
    /// Informational: the stop id used when no tokenizer is loaded (ENGINE.md §3 `--stop-id`).
    pub eos_token_id: Option<u64>,
    /// Informational, when present.
    pub pad_token_id: Option<u64>,
    /// Derived constants (§2.6).
    pub derived: Derived,
    pub(super) layer_kinds: Vec<AttnKind>,
}

impl Config {
    // --- layer map (§3) -----------------------------------------------------------------------

    /// Attention kind of zero-based layer `l`: MLA iff (l+1) ∈ `full_attn_layers`.
    /// Panics if `l ≥ num_hidden_layers` (a caller bug, not input).
    pub fn attn_kind(&self, l: usize) -> AttnKind {
        self.layer_kinds[l]
    }

    /// Attention kinds of all layers, zero-based order.
    pub fn layer_kinds(&self) -> &[AttnKind] {
        &self.layer_kinds
    }

    /// True when layer `l` has a dense FFN (l < first_k_dense_replace), false for MoE.
    pub fn is_dense(&self, l: usize) -> bool {
        l < self.first_k_dense_replace
    }

    /// True when layer `l` has a MoE FFN.
    pub fn is_moe(&self, l: usize) -> bool {
        !self.is_dense(l)
    }

    /// True when layer `l` is an AttnRes block boundary (l mod Bs = 0, MODEL.md §6.3).
    pub fn is_boundary(&self, l: usize) -> bool {
        l % self.attn_res_block_size == 0
    }

    /// Zero-based AttnRes boundaries (0, Bs, 2·Bs, … below NL).
    pub fn boundaries(&self) -> Vec<usize> {
        (0..self.num_hidden_layers)
            .step_by(self.attn_res_block_size)
            .collect()
    }

    /// Zero-based MLA layers, ascending.
    pub fn mla_layers(&self) -> Vec<usize> {
        self.layers_of(AttnKind::Mla)
    }

    /// Zero-based KDA layers, ascending.
    pub fn kda_layers_zero_based(&self) -> Vec<usize> {
        self.layers_of(AttnKind::Kda)
    }

    fn layers_of(&self, kind: AttnKind) -> Vec<usize> {
        (0..self.num_hidden_layers)
            .filter(|&l| self.layer_kinds[l] == kind)
            .collect()
    }

    /// The layer map as one character per zero-based layer, `K` (KDA) or `M` (MLA), e.g.
    /// `KKKMKKKMKKKMM` for tiny-k3.
    pub fn layer_map(&self) -> String {
        self.layer_kinds.iter().map(|k| k.letter()).collect()
    }
}
