//! The typed weight views the forward pass computes on (MODEL.md §4 "In-memory policy"):
//! large matrices stay BF16 (`u16` bit patterns); small vectors (norm gains, conv taps, A_log,
//! dt_bias, router bias) are fp32; each AttnRes pair is one folded fp32 vector.
//!
//! A layer's BF16 matrices are addressed as [`MatSlot`]s (offset + shape) into one `u16`
//! buffer per layer, so a streaming trunk can hand the forward pass a ring slot instead of the
//! resident buffer without touching the layer code. One enum per layer part says which kind it
//! is ([`AttnWeights`]: KDA or MLA; [`FfnWeights`]: dense or MoE), each carrying its own named
//! matrices and vectors. Filling them from a checkpoint is `crate::bind`'s work.

use super::AttnKind;

/// A BF16 matrix view `[rows, cols]`, row-major, BF16 bit patterns.
#[derive(Debug, Clone, Copy)]
pub struct Bf16Mat<'a> {
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u16],
}

/// Where a BF16 matrix lives inside its layer's buffer (offset in `u16` units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatSlot {
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
}

impl MatSlot {
    /// The view of this matrix inside `buf`, a part of its layer buffer that holds it (a
    /// [`PartBuf`] from [`super::TrunkSource::layer_part`] for this matrix's [`LayerPart`]).
    pub fn view<'a>(&self, buf: PartBuf<'a>) -> Bf16Mat<'a> {
        let at = self.off - buf.base;
        Bf16Mat {
            rows: self.rows,
            cols: self.cols,
            data: &buf.data[at..at + self.rows * self.cols],
        }
    }
}

/// The parts of a decoder layer's trunk the forward pass asks for, in forward order (ENGINE.md
/// §5 "pieces"): a streamed trunk may hold each in a ring slot of its own, so that the next
/// part is read while this one computes. A part is a set of whole trunk tensors, cut at
/// projection boundaries: the dense FFN's gate and up projections (one job on the same input)
/// come before its down projection, which needs their output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LayerPart {
    /// Every `self_attn.*` tensor (KDA or MLA, MODEL.md §6.4–§6.5).
    Attn,
    /// `mlp.gate_proj`, `mlp.up_proj` of a dense layer (§6.6).
    MlpGateUp,
    /// `mlp.down_proj` of a dense layer (§6.6).
    MlpDown,
    /// Every trunk `block_sparse_moe.*` tensor: router, latent projections, shared experts (§6.7).
    Moe,
}

impl LayerPart {
    /// Every part, in forward order.
    pub const ALL: [LayerPart; 4] = [
        LayerPart::Attn,
        LayerPart::MlpGateUp,
        LayerPart::MlpDown,
        LayerPart::Moe,
    ];

    /// The part holding the trunk tensor with layer suffix `suffix` (the name after
    /// `layers.N.`, MODEL.md §4); `None` for the vectors the forward never reads from the
    /// layer buffer (layer norms and AttnRes pairs, widened at bind time).
    pub fn of_suffix(suffix: &str) -> Option<LayerPart> {
        if suffix.starts_with("self_attn.") {
            Some(LayerPart::Attn)
        } else if suffix == "mlp.gate_proj.weight" || suffix == "mlp.up_proj.weight" {
            Some(LayerPart::MlpGateUp)
        } else if suffix == "mlp.down_proj.weight" {
            Some(LayerPart::MlpDown)
        } else if suffix.starts_with("block_sparse_moe.") {
            Some(LayerPart::Moe)
        } else {
            None
        }
    }

    /// Short name for the plan and messages: `attn`, `mlp.gate_up`, `mlp.down`, `moe`.
    pub fn name(self) -> &'static str {
        match self {
            LayerPart::Attn => "attn",
            LayerPart::MlpGateUp => "mlp.gate_up",
            LayerPart::MlpDown => "mlp.down",
            LayerPart::Moe => "moe",
        }
    }
}

/// A part of a layer buffer: `data` holds its `u16` elements `base .. base + data.len()`. A
/// resident layer is one part at base 0; a ring slot may hold one [`LayerPart`] or several.
#[derive(Debug, Clone, Copy)]
pub struct PartBuf<'a> {
    /// Index in the layer buffer (`u16` units) of `data[0]`.
    pub base: usize,
    pub data: &'a [u16],
}

impl<'a> PartBuf<'a> {
    /// The whole layer buffer as one part.
    pub fn whole(data: &'a [u16]) -> PartBuf<'a> {
        PartBuf { base: 0, data }
    }
    /// True when `slot` lies inside this part.
    pub fn holds(&self, slot: &MatSlot) -> bool {
        slot.off >= self.base && slot.off + slot.rows * slot.cols <= self.base + self.data.len()
    }
}

/// BF16 matrices of a KDA layer.
#[derive(Debug, Clone, Copy)]
pub struct KdaMats<'a> {
    pub q_proj: Bf16Mat<'a>,
    pub k_proj: Bf16Mat<'a>,
    pub v_proj: Bf16Mat<'a>,
    pub f_a_proj: Bf16Mat<'a>,
    pub f_b_proj: Bf16Mat<'a>,
    pub b_proj: Bf16Mat<'a>,
    pub g_proj: Bf16Mat<'a>,
    pub o_proj: Bf16Mat<'a>,
}

/// Where the BF16 matrices of a KDA layer are in its layer buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KdaSlots {
    pub q_proj: MatSlot,
    pub k_proj: MatSlot,
    pub v_proj: MatSlot,
    pub f_a_proj: MatSlot,
    pub f_b_proj: MatSlot,
    pub b_proj: MatSlot,
    pub g_proj: MatSlot,
    pub o_proj: MatSlot,
}

impl KdaSlots {
    /// The matrix views in `buf`, the part of the layer buffer that holds them.
    pub fn view<'a>(&self, buf: PartBuf<'a>) -> KdaMats<'a> {
        KdaMats {
            q_proj: self.q_proj.view(buf),
            k_proj: self.k_proj.view(buf),
            v_proj: self.v_proj.view(buf),
            f_a_proj: self.f_a_proj.view(buf),
            f_b_proj: self.f_b_proj.view(buf),
            b_proj: self.b_proj.view(buf),
            g_proj: self.g_proj.view(buf),
            o_proj: self.o_proj.view(buf),
        }
    }
}

/// Small fp32 tensors of a KDA layer.
#[derive(Debug, Clone, PartialEq)]
pub struct KdaVecs {
    /// Conv taps `[Pk][Kc]` (tap Kc−1 multiplies the current input).
    pub q_conv: Vec<f32>,
    pub k_conv: Vec<f32>,
    pub v_conv: Vec<f32>,
    /// `A_log`, first Hk entries (per head, MODEL.md §6.4 step 6; the tail was checked to be 0).
    pub a_log: Vec<f32>,
    /// `[Pk]`.
    pub dt_bias: Vec<f32>,
    /// `[Dk]`, shared by all heads.
    pub o_norm: Vec<f32>,
}

/// A KDA attention: its matrices (in the layer buffer) and its vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct KdaWeights {
    pub mats: KdaSlots,
    pub vecs: KdaVecs,
}

/// BF16 matrices of an MLA layer.
#[derive(Debug, Clone, Copy)]
pub struct MlaMats<'a> {
    pub q_a_proj: Bf16Mat<'a>,
    pub q_b_proj: Bf16Mat<'a>,
    pub kv_a_proj_with_mqa: Bf16Mat<'a>,
    pub kv_b_proj: Bf16Mat<'a>,
    pub g_proj: Option<Bf16Mat<'a>>,
    pub o_proj: Bf16Mat<'a>,
}

/// Where the BF16 matrices of an MLA layer are in its layer buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaSlots {
    pub q_a_proj: MatSlot,
    pub q_b_proj: MatSlot,
    pub kv_a_proj_with_mqa: MatSlot,
    pub kv_b_proj: MatSlot,
    /// Present when `mla_use_output_gate`.
    pub g_proj: Option<MatSlot>,
    pub o_proj: MatSlot,
}

impl MlaSlots {
    /// The matrix views in `buf`, the part of the layer buffer that holds them.
    pub fn view<'a>(&self, buf: PartBuf<'a>) -> MlaMats<'a> {
        MlaMats {
            q_a_proj: self.q_a_proj.view(buf),
            q_b_proj: self.q_b_proj.view(buf),
            kv_a_proj_with_mqa: self.kv_a_proj_with_mqa.view(buf),
            kv_b_proj: self.kv_b_proj.view(buf),
            g_proj: self.g_proj.map(|g| g.view(buf)),
            o_proj: self.o_proj.view(buf),
        }
    }
}

/// Small vectors of an MLA layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaVecs {
    pub q_a_layernorm: Vec<f32>,
    pub kv_a_layernorm: Vec<f32>,
}

/// An MLA attention: its matrices (in the layer buffer) and its vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaWeights {
    pub mats: MlaSlots,
    pub vecs: MlaVecs,
}

/// A layer's attention, by kind (MODEL.md §6.4, §6.5).
#[derive(Debug, Clone, PartialEq)]
pub enum AttnWeights {
    Kda(KdaWeights),
    Mla(MlaWeights),
}

/// The three matrices of a SiTU-GLU MLP (MODEL.md §6.6): dense FFN or fused shared experts.
#[derive(Debug, Clone, Copy)]
pub struct MlpMats<'a> {
    pub gate_proj: Bf16Mat<'a>,
    pub up_proj: Bf16Mat<'a>,
    pub down_proj: Bf16Mat<'a>,
}

/// Where the three matrices of a SiTU-GLU MLP are in the layer buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpSlots {
    pub gate_proj: MatSlot,
    pub up_proj: MatSlot,
    pub down_proj: MatSlot,
}

impl MlpSlots {
    /// The matrix views in `buf`, the part of the layer buffer that holds them.
    pub fn view<'a>(&self, buf: PartBuf<'a>) -> MlpMats<'a> {
        MlpMats {
            gate_proj: self.gate_proj.view(buf),
            up_proj: self.up_proj.view(buf),
            down_proj: self.down_proj.view(buf),
        }
    }
}

/// BF16 matrices of a MoE block.
#[derive(Debug, Clone, Copy)]
pub struct MoeMats<'a> {
    /// `gate.weight` [E, H].
    pub router: Bf16Mat<'a>,
    /// `routed_expert_down_proj` [L, H].
    pub down_l: Bf16Mat<'a>,
    /// `routed_expert_up_proj` [H, L].
    pub up_l: Bf16Mat<'a>,
    /// Shared experts when Sw > 0.
    pub shared: Option<MlpMats<'a>>,
}

/// Where the BF16 matrices of a MoE block are in the layer buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSlots {
    pub router: MatSlot,
    pub down_l: MatSlot,
    pub up_l: MatSlot,
    pub shared: Option<MlpSlots>,
}

impl MoeSlots {
    /// The matrix views in `buf`, the part of the layer buffer that holds them.
    pub fn view<'a>(&self, buf: PartBuf<'a>) -> MoeMats<'a> {
        MoeMats {
            router: self.router.view(buf),
            down_l: self.down_l.view(buf),
            up_l: self.up_l.view(buf),
            shared: self.shared.map(|s| s.view(buf)),
        }
    }
}

/// Small vectors of a MoE block.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeVecs {
    /// `gate.e_score_correction_bias` [E].
    pub bias: Vec<f32>,
    /// `routed_expert_norm` [L] when `latent_moe_use_norm`.
    pub routed_expert_norm: Option<Vec<f32>>,
}

/// A MoE block: its matrices (in the layer buffer) and its vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeWeights {
    pub mats: MoeSlots,
    pub vecs: MoeVecs,
}

/// A layer's FFN, by kind (MODEL.md §6.6, §6.7).
#[derive(Debug, Clone, PartialEq)]
pub enum FfnWeights {
    Dense(MlpSlots),
    Moe(MoeWeights),
}

/// One bound decoder layer: its attention and FFN, by kind, and the vectors every layer has.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    pub index: usize,
    pub attn: AttnWeights,
    pub ffn: FfnWeights,
    /// `input_layernorm` [H].
    pub input_layernorm: Vec<f32>,
    /// `post_attention_layernorm` [H].
    pub post_attention_layernorm: Vec<f32>,
    /// Folded `self_attention_res_norm` × `self_attention_res_proj` [H].
    pub f_attn_res: Vec<f32>,
    /// Folded `mlp_res_norm` × `mlp_res_proj` [H].
    pub f_mlp_res: Vec<f32>,
    /// Total `u16` elements of the layer's matrix buffer.
    pub buf_len: usize,
}

impl LayerWeights {
    /// Every BF16 matrix slot of the layer with the part the forward asks for it by.
    pub fn part_slots(&self) -> Vec<(LayerPart, MatSlot)> {
        let mut v = Vec::new();
        match &self.attn {
            AttnWeights::Kda(w) => {
                let m = &w.mats;
                v.extend([
                    m.q_proj, m.k_proj, m.v_proj, m.f_a_proj, m.f_b_proj, m.b_proj, m.g_proj,
                    m.o_proj,
                ]);
            }
            AttnWeights::Mla(w) => {
                let m = &w.mats;
                v.extend([
                    m.q_a_proj,
                    m.q_b_proj,
                    m.kv_a_proj_with_mqa,
                    m.kv_b_proj,
                    m.o_proj,
                ]);
                v.extend(m.g_proj);
            }
        }
        let mut out: Vec<(LayerPart, MatSlot)> =
            v.into_iter().map(|s| (LayerPart::Attn, s)).collect();
        match &self.ffn {
            FfnWeights::Dense(s) => out.extend([
                (LayerPart::MlpGateUp, s.gate_proj),
                (LayerPart::MlpGateUp, s.up_proj),
                (LayerPart::MlpDown, s.down_proj),
            ]),
            FfnWeights::Moe(w) => {
                let m = &w.mats;
                out.extend([m.router, m.down_l, m.up_l].map(|s| (LayerPart::Moe, s)));
                if let Some(sh) = &m.shared {
                    out.extend(
                        [sh.gate_proj, sh.up_proj, sh.down_proj].map(|s| (LayerPart::Moe, s)),
                    );
                }
            }
        }
        out
    }

    /// The layer's attention kind.
    pub fn kind(&self) -> AttnKind {
        match self.attn {
            AttnWeights::Kda(_) => AttnKind::Kda,
            AttnWeights::Mla(_) => AttnKind::Mla,
        }
    }
}

/// The model-level vectors of the output (MODEL.md §4 "Model level", §6.8). The two [V, H]
/// tables (`embed_tokens`, `lm_head`) are supplied by the [`super::TrunkSource`], resident or
/// streamed.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputVecs {
    /// `norm` [H].
    pub norm: Vec<f32>,
    /// Folded `output_attn_res_norm` × `output_attn_res_proj` [H].
    pub f_output_attn_res: Vec<f32>,
}
