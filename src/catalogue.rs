//! The tensor catalogue (MODEL.md §4): the single source of tensor names, shapes and dtypes.
//!
//! Given a [`Config`], it lists what must be bound: the model-level tensors, each layer's trunk
//! tensors (attention kind, dense or MoE FFN) and each routed expert's six MXFP4 tensors in the
//! fixed order of FORMATS.md §4. [`classify`] maps any tensor name to its place (model level,
//! layer trunk, routed expert, ignored vision/projector, or unknown). The binding, the census
//! and the trunk packer all take names from here.

use crate::config::{AttnKind, Config};
use crate::safetensors::Dtype;

/// Prefix of every language-model tensor.
pub const LANGUAGE_MODEL_PREFIX: &str = "language_model.";
/// Prefix of every decoder-layer tensor; followed by the zero-based layer in decimal and `.`.
pub const LAYER_PREFIX: &str = "language_model.model.layers.";
/// Prefixes of tensors that are never read (MODEL.md §4 "Ignored").
pub const IGNORED_PREFIXES: [&str; 2] = ["vision_tower.", "mm_projector."];

/// `embed_tokens` [V, H] BF16.
pub const EMBED_TOKENS: &str = "language_model.model.embed_tokens.weight";
/// `lm_head` [V, H] BF16 (absent when `tie_word_embeddings`).
pub const LM_HEAD: &str = "language_model.lm_head.weight";
/// Final RMSNorm gain [H] BF16.
pub const FINAL_NORM: &str = "language_model.model.norm.weight";
/// Output AttnRes norm gain [H] BF16.
pub const OUTPUT_ATTN_RES_NORM: &str = "language_model.model.output_attn_res_norm.weight";
/// Output AttnRes projection [1, H] BF16.
pub const OUTPUT_ATTN_RES_PROJ: &str = "language_model.model.output_attn_res_proj.weight";

/// A model-level tensor (MODEL.md §4 "Model level").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelTensor {
    EmbedTokens,
    LmHead,
    Norm,
    OutputAttnResNorm,
    OutputAttnResProj,
}

impl ModelTensor {
    /// All five, in catalogue order.
    pub const ALL: [ModelTensor; 5] = [
        ModelTensor::EmbedTokens,
        ModelTensor::LmHead,
        ModelTensor::Norm,
        ModelTensor::OutputAttnResNorm,
        ModelTensor::OutputAttnResProj,
    ];

    /// The full tensor name.
    pub fn name(self) -> &'static str {
        match self {
            ModelTensor::EmbedTokens => EMBED_TOKENS,
            ModelTensor::LmHead => LM_HEAD,
            ModelTensor::Norm => FINAL_NORM,
            ModelTensor::OutputAttnResNorm => OUTPUT_ATTN_RES_NORM,
            ModelTensor::OutputAttnResProj => OUTPUT_ATTN_RES_PROJ,
        }
    }
}

/// The three matrices of a routed expert (MODEL.md §4, FORMATS.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExpertMatrix {
    /// Gate, logical [I, L].
    W1,
    /// Down, logical [L, I].
    W2,
    /// Up, logical [I, L].
    W3,
}

impl ExpertMatrix {
    /// `w1`, `w2` or `w3`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpertMatrix::W1 => "w1",
            ExpertMatrix::W2 => "w2",
            ExpertMatrix::W3 => "w3",
        }
    }
}

/// The two stored tensors of one MXFP4 matrix (FORMATS.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExpertPart {
    /// `weight_packed` [R, C/2]: E2M1 nibbles, low nibble = even column.
    Packed,
    /// `weight_scale` [R, C/32]: E8M0 bytes, one per 32 columns.
    Scale,
}

impl ExpertPart {
    /// `weight_packed` or `weight_scale`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpertPart::Packed => "weight_packed",
            ExpertPart::Scale => "weight_scale",
        }
    }
}

/// The fixed order of an expert's six tensors (FORMATS.md §4): w1 packed, w1 scale, w2 packed,
/// w2 scale, w3 packed, w3 scale.
pub const EXPERT_ORDER: [(ExpertMatrix, ExpertPart); 6] = [
    (ExpertMatrix::W1, ExpertPart::Packed),
    (ExpertMatrix::W1, ExpertPart::Scale),
    (ExpertMatrix::W2, ExpertPart::Packed),
    (ExpertMatrix::W2, ExpertPart::Scale),
    (ExpertMatrix::W3, ExpertPart::Packed),
    (ExpertMatrix::W3, ExpertPart::Scale),
];

/// Where a tensor name belongs (config-independent; the census checks it against the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorClass<'n> {
    /// One of the five model-level names.
    Model(ModelTensor),
    /// `language_model.model.layers.{layer}.{suffix}`, not a routed expert.
    Layer { layer: usize, suffix: &'n str },
    /// `language_model.model.layers.{layer}.block_sparse_moe.experts.{expert}.{w1|w2|w3}.{weight_packed|weight_scale}`.
    Expert {
        layer: usize,
        expert: usize,
        matrix: ExpertMatrix,
        part: ExpertPart,
    },
    /// `vision_tower.*` or `mm_projector.*`: never read.
    Ignored,
    /// Anything else: refused by the census (MODEL.md §4).
    Unknown,
}

/// Parses a decimal index without padding (`0`, `17`; not `07`, `+1`, `` or overflowing).
fn parse_index(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    s.parse().ok()
}

/// Classifies a tensor name (MODEL.md §4). Pure string parsing: whether the layer, expert or
/// suffix exists for a given config is the census's question.
pub fn classify(name: &str) -> TensorClass<'_> {
    if IGNORED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return TensorClass::Ignored;
    }
    if let Some(m) = ModelTensor::ALL.iter().find(|m| m.name() == name) {
        return TensorClass::Model(*m);
    }
    let rest = match name.strip_prefix(LAYER_PREFIX) {
        Some(r) => r,
        None => return TensorClass::Unknown,
    };
    let (idx, suffix) = match rest.split_once('.') {
        Some(x) => x,
        None => return TensorClass::Unknown,
    };
    let layer = match parse_index(idx) {
        Some(l) => l,
        None => return TensorClass::Unknown,
    };
    if suffix.is_empty() {
        return TensorClass::Unknown;
    }
    if let Some(e) = suffix.strip_prefix("block_sparse_moe.experts.") {
        let parsed = e.split_once('.').and_then(|(ei, tail)| {
            let expert = parse_index(ei)?;
            let (m, p) = tail.split_once('.')?;
            let matrix = match m {
                "w1" => ExpertMatrix::W1,
                "w2" => ExpertMatrix::W2,
                "w3" => ExpertMatrix::W3,
                _ => return None,
            };
            let part = match p {
                "weight_packed" => ExpertPart::Packed,
                "weight_scale" => ExpertPart::Scale,
                _ => return None,
            };
            Some((expert, matrix, part))
        });
        return match parsed {
            Some((expert, matrix, part)) => TensorClass::Expert {
                layer,
                expert,
                matrix,
                part,
            },
            // e.g. an unquantised `experts.3.w1.weight`: not in the catalogue.
            None => TensorClass::Unknown,
        };
    }
    TensorClass::Layer { layer, suffix }
}

/// One required tensor: full name, shape and dtype (MODEL.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: Dtype,
}

impl TensorSpec {
    fn new(name: String, shape: &[usize], dtype: Dtype) -> TensorSpec {
        TensorSpec {
            name,
            shape: shape.iter().map(|&d| d as u64).collect(),
            dtype,
        }
    }

    /// Byte size: product(shape) × dtype size, or None on overflow (impossible for a validated
    /// config, whose tensor sizes were checked to fit in 64 bits).
    pub fn nbytes(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))?
            .checked_mul(self.dtype.size())
    }
}

/// A trunk tensor of one layer, by suffix (after `layers.{ℓ}.`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuffixSpec {
    pub suffix: &'static str,
    pub shape: Vec<u64>,
    pub dtype: Dtype,
}

/// `language_model.model.layers.{layer}.{suffix}`.
pub fn layer_tensor_name(layer: usize, suffix: &str) -> String {
    format!("{LAYER_PREFIX}{layer}.{suffix}")
}

/// `language_model.model.layers.{layer}.block_sparse_moe.experts.{expert}.{matrix}.{part}`.
pub fn expert_tensor_name(
    layer: usize,
    expert: usize,
    matrix: ExpertMatrix,
    part: ExpertPart,
) -> String {
    format!(
        "{LAYER_PREFIX}{layer}.block_sparse_moe.experts.{expert}.{}.{}",
        matrix.as_str(),
        part.as_str()
    )
}

/// The model-level tensors a config requires: `embed_tokens`, `lm_head` (unless tied), `norm`,
/// `output_attn_res_norm`, `output_attn_res_proj`.
pub fn model_tensors(cfg: &Config) -> Vec<TensorSpec> {
    let (v, h) = (cfg.vocab_size, cfg.hidden_size);
    let mut out = vec![TensorSpec::new(EMBED_TOKENS.into(), &[v, h], Dtype::BF16)];
    if !cfg.tie_word_embeddings {
        out.push(TensorSpec::new(LM_HEAD.into(), &[v, h], Dtype::BF16));
    }
    out.push(TensorSpec::new(FINAL_NORM.into(), &[h], Dtype::BF16));
    out.push(TensorSpec::new(
        OUTPUT_ATTN_RES_NORM.into(),
        &[h],
        Dtype::BF16,
    ));
    out.push(TensorSpec::new(
        OUTPUT_ATTN_RES_PROJ.into(),
        &[1, h],
        Dtype::BF16,
    ));
    out
}

/// The trunk tensors (every non-expert tensor) of zero-based layer `l`, by suffix, in catalogue
/// order: the six AttnRes/norm vectors, the attention block (KDA or MLA), then the FFN (dense, or
/// the MoE router, latent projections and shared experts). Panics if `l ≥ num_hidden_layers`.
pub fn layer_suffixes(cfg: &Config, l: usize) -> Vec<SuffixSpec> {
    use Dtype::{BF16, F32};
    let h = cfg.hidden_size;
    let d = &cfg.derived;
    let mut out: Vec<SuffixSpec> = Vec::with_capacity(28);
    let mut add = |suffix: &'static str, shape: &[usize], dtype: Dtype| {
        out.push(SuffixSpec {
            suffix,
            shape: shape.iter().map(|&x| x as u64).collect(),
            dtype,
        })
    };
    add("input_layernorm.weight", &[h], BF16);
    add("post_attention_layernorm.weight", &[h], BF16);
    add("self_attention_res_norm.weight", &[h], BF16);
    add("self_attention_res_proj.weight", &[1, h], BF16);
    add("mlp_res_norm.weight", &[h], BF16);
    add("mlp_res_proj.weight", &[1, h], BF16);
    match cfg.attn_kind(l) {
        AttnKind::Kda => {
            let (pk, dk, hk, kc) = (
                d.kda_proj_width,
                cfg.kda_head_dim,
                cfg.kda_num_heads,
                cfg.short_conv_kernel_size,
            );
            add("self_attn.q_proj.weight", &[pk, h], BF16);
            add("self_attn.k_proj.weight", &[pk, h], BF16);
            add("self_attn.v_proj.weight", &[pk, h], BF16);
            add("self_attn.q_conv1d.weight", &[pk, 1, kc], F32);
            add("self_attn.k_conv1d.weight", &[pk, 1, kc], F32);
            add("self_attn.v_conv1d.weight", &[pk, 1, kc], F32);
            add("self_attn.f_a_proj.weight", &[dk, h], BF16);
            add("self_attn.f_b_proj.weight", &[pk, dk], BF16);
            add("self_attn.b_proj.weight", &[hk, h], BF16);
            add("self_attn.A_log", &[d.a_log_len], F32);
            add("self_attn.dt_bias", &[pk], F32);
            add("self_attn.o_norm.weight", &[dk], F32);
            add("self_attn.g_proj.weight", &[pk, h], BF16);
            add("self_attn.o_proj.weight", &[h, pk], BF16);
        }
        AttnKind::Mla => {
            let (rq, rkv) = (cfg.q_lora_rank, cfg.kv_lora_rank);
            add("self_attn.q_a_proj.weight", &[rq, h], BF16);
            add("self_attn.q_a_layernorm.weight", &[rq], BF16);
            add("self_attn.q_b_proj.weight", &[d.q_b_rows, rq], BF16);
            add(
                "self_attn.kv_a_proj_with_mqa.weight",
                &[d.kv_a_rows, h],
                BF16,
            );
            add("self_attn.kv_a_layernorm.weight", &[rkv], BF16);
            add("self_attn.kv_b_proj.weight", &[d.kv_b_rows, rkv], BF16);
            if cfg.mla_use_output_gate {
                add("self_attn.g_proj.weight", &[d.mla_out_width, h], BF16);
            }
            add("self_attn.o_proj.weight", &[h, d.mla_out_width], BF16);
        }
    }
    if cfg.is_dense(l) {
        let f = cfg.intermediate_size;
        add("mlp.gate_proj.weight", &[f, h], BF16);
        add("mlp.up_proj.weight", &[f, h], BF16);
        add("mlp.down_proj.weight", &[h, f], BF16);
    } else {
        let (e, lat, sw) = (
            cfg.num_experts,
            cfg.routed_expert_hidden_size,
            d.shared_width,
        );
        add("block_sparse_moe.gate.weight", &[e, h], BF16);
        add("block_sparse_moe.gate.e_score_correction_bias", &[e], F32);
        add(
            "block_sparse_moe.routed_expert_down_proj.weight",
            &[lat, h],
            BF16,
        );
        if cfg.latent_moe_use_norm {
            add("block_sparse_moe.routed_expert_norm.weight", &[lat], BF16);
        }
        add(
            "block_sparse_moe.routed_expert_up_proj.weight",
            &[h, lat],
            BF16,
        );
        if sw > 0 {
            add(
                "block_sparse_moe.shared_experts.gate_proj.weight",
                &[sw, h],
                BF16,
            );
            add(
                "block_sparse_moe.shared_experts.up_proj.weight",
                &[sw, h],
                BF16,
            );
            add(
                "block_sparse_moe.shared_experts.down_proj.weight",
                &[h, sw],
                BF16,
            );
        }
    }
    out
}

/// The trunk tensors of layer `l` with full names (see [`layer_suffixes`]).
pub fn layer_tensors(cfg: &Config, l: usize) -> Vec<TensorSpec> {
    layer_suffixes(cfg, l)
        .into_iter()
        .map(|s| TensorSpec {
            name: layer_tensor_name(l, s.suffix),
            shape: s.shape,
            dtype: s.dtype,
        })
        .collect()
}

/// Stored shape of one expert tensor: packed [R, C/2], scale [R, C/32] (MODEL.md §4), with
/// w1/w3 logical [I, L] and w2 logical [L, I].
pub fn expert_shape(cfg: &Config, matrix: ExpertMatrix, part: ExpertPart) -> [u64; 2] {
    let (i, l) = (
        cfg.moe_intermediate_size as u64,
        cfg.routed_expert_hidden_size as u64,
    );
    let (rows, cols) = match matrix {
        ExpertMatrix::W1 | ExpertMatrix::W3 => (i, l),
        ExpertMatrix::W2 => (l, i),
    };
    match part {
        ExpertPart::Packed => [rows, cols / 2],
        ExpertPart::Scale => [rows, cols / 32],
    }
}

/// The six tensors of expert `e` in layer `l`, in the fixed order [`EXPERT_ORDER`], all U8.
pub fn expert_tensors(cfg: &Config, l: usize, e: usize) -> [TensorSpec; 6] {
    EXPERT_ORDER.map(|(m, p)| TensorSpec {
        name: expert_tensor_name(l, e, m, p),
        shape: expert_shape(cfg, m, p).to_vec(),
        dtype: Dtype::U8,
    })
}

/// Bytes of one routed expert: 3 × (packed + scale) (K3: 17,547,264).
pub fn expert_bytes(cfg: &Config) -> u64 {
    EXPERT_ORDER
        .iter()
        .map(|&(m, p)| {
            let s = expert_shape(cfg, m, p);
            s[0] * s[1]
        })
        .sum()
}

/// Number of tensors the config requires (model level + trunk + 6 per routed expert).
pub fn required_count(cfg: &Config) -> u64 {
    let model = model_tensors(cfg).len() as u64;
    let trunk: u64 = (0..cfg.num_hidden_layers)
        .map(|l| layer_suffixes(cfg, l).len() as u64)
        .sum();
    let experts = cfg.derived.n_moe as u64 * cfg.num_experts as u64 * 6;
    model + trunk + experts
}
