//! Binding one decoder layer and the model-level vectors (MODEL.md §4): every trunk tensor
//! checked against the catalogue; small vectors read and widened to fp32 now, AttnRes pairs
//! folded; each BF16 matrix placed at its offset in the layer buffer of its [`LayerLayout`].

use super::layout::{layer_layout, table_layout, LayerLayout, TableLayout};
use super::reader::{Dtype, Reader};
use crate::catalogue::{self, layer_tensor_name, SuffixSpec};
use crate::error::{Error, Result};
use crate::model::weights::{
    AttnWeights, FfnWeights, KdaSlots, KdaVecs, KdaWeights, LayerWeights, MatSlot, MlaSlots,
    MlaVecs, MlaWeights, MlpSlots, MoeSlots, MoeVecs, MoeWeights, OutputVecs,
};
use crate::model::{AttnKind, Dims};

/// Folds an AttnRes pair: f[d] = rnd(w_norm[d] × w_proj[0][d]) (MODEL.md §4).
pub fn fold(norm: &[f32], proj: &[f32]) -> Vec<f32> {
    norm.iter()
        .zip(proj)
        .map(|(&a, &b)| k3_kernels::rnd(a as f64 * b as f64))
        .collect()
}

/// The catalogue's shape and dtype of trunk tensor `suffix` of a layer (MODEL.md §4).
fn spec(specs: &[SuffixSpec], l: usize, suffix: &str) -> Result<(Vec<usize>, Dtype, String)> {
    let s = specs
        .iter()
        .find(|s| s.suffix == suffix)
        .ok_or_else(|| Error::internal(format!("layer {l}: `{suffix}` is not in the catalogue")))?;
    Ok((
        s.shape.iter().map(|&d| d as usize).collect(),
        s.dtype,
        layer_tensor_name(l, suffix),
    ))
}

/// Binds layer `l`: checks its trunk tensors against the catalogue (`specs` =
/// `catalogue::layer_suffixes(cfg, l)`) and reads them. Returns the layer description and its
/// resident matrix buffer (the layer buffer of [`layer_layout`] as `u16`).
pub fn bind_layer(
    r: &mut Reader<'_>,
    d: &Dims,
    specs: &[SuffixSpec],
    l: usize,
) -> Result<(LayerWeights, Vec<u16>)> {
    let layout = layer_layout(r, specs, l)?;
    let w = bind_layer_weights(r, d, specs, &layout)?;
    let buf = r.read_pieces_u16(&format!("layer {} trunk", layout.layer), &layout.pieces)?;
    Ok((w, buf))
}

/// The tensors of one layer as the binder reads them: matrices placed in the layer buffer,
/// small vectors read now.
struct LayerTensors<'s, 'l> {
    specs: &'s [SuffixSpec],
    layout: &'l LayerLayout,
}

impl LayerTensors<'_, '_> {
    /// BF16 matrix `suffix` → its slot in the layer buffer.
    fn mat(&self, suffix: &str) -> Result<MatSlot> {
        let (shape, _, name) = spec(self.specs, self.layout.layer, suffix)?;
        let dest = self
            .layout
            .dest_of(&name)
            .ok_or_else(|| Error::internal(format!("{name}: not in the layer layout")))?;
        Ok(MatSlot {
            off: (dest / 2) as usize,
            rows: shape[0],
            cols: shape[1],
        })
    }
    /// Small BF16 vector `suffix` → fp32.
    fn vec_bf16(&self, r: &mut Reader<'_>, suffix: &str) -> Result<Vec<f32>> {
        let (shape, _, name) = spec(self.specs, self.layout.layer, suffix)?;
        r.bf16_f32(&name, &shape)
    }
    /// F32 tensor `suffix`.
    fn vec_f32(&self, r: &mut Reader<'_>, suffix: &str) -> Result<Vec<f32>> {
        let (shape, _, name) = spec(self.specs, self.layout.layer, suffix)?;
        r.f32(&name, &shape)
    }
    /// The three matrices of a SiTU-GLU MLP under `prefix` (`mlp.` or the shared experts').
    fn mlp(&self, prefix: &str) -> Result<MlpSlots> {
        Ok(MlpSlots {
            gate_proj: self.mat(&format!("{prefix}gate_proj.weight"))?,
            up_proj: self.mat(&format!("{prefix}up_proj.weight"))?,
            down_proj: self.mat(&format!("{prefix}down_proj.weight"))?,
        })
    }

    fn kda(&self, r: &mut Reader<'_>, d: &Dims) -> Result<KdaWeights> {
        let mats = KdaSlots {
            q_proj: self.mat("self_attn.q_proj.weight")?,
            k_proj: self.mat("self_attn.k_proj.weight")?,
            v_proj: self.mat("self_attn.v_proj.weight")?,
            f_a_proj: self.mat("self_attn.f_a_proj.weight")?,
            f_b_proj: self.mat("self_attn.f_b_proj.weight")?,
            b_proj: self.mat("self_attn.b_proj.weight")?,
            g_proj: self.mat("self_attn.g_proj.weight")?,
            o_proj: self.mat("self_attn.o_proj.weight")?,
        };
        let a_log = self.vec_f32(r, "self_attn.A_log")?;
        let hk = d.hk;
        // The checkpoint stores max(Dk, Hk) values for Hk heads: a non-zero tail would mean a
        // per-channel layout this engine does not implement (MODEL.md §4).
        if let Some(i) = (hk..a_log.len()).find(|&i| a_log[i] != 0.0) {
            return Err(Error::invalid(format!(
                "{}: entry {i} is {} but entries {hk}.. must be 0 (A_log is per head: only the first {hk} values are used)",
                layer_tensor_name(self.layout.layer, "self_attn.A_log"),
                a_log[i]
            )));
        }
        let vecs = KdaVecs {
            q_conv: self.vec_f32(r, "self_attn.q_conv1d.weight")?,
            k_conv: self.vec_f32(r, "self_attn.k_conv1d.weight")?,
            v_conv: self.vec_f32(r, "self_attn.v_conv1d.weight")?,
            a_log: a_log[..hk].to_vec(),
            dt_bias: self.vec_f32(r, "self_attn.dt_bias")?,
            o_norm: self.vec_f32(r, "self_attn.o_norm.weight")?,
        };
        Ok(KdaWeights { mats, vecs })
    }

    fn mla(&self, r: &mut Reader<'_>, d: &Dims) -> Result<MlaWeights> {
        let mats = MlaSlots {
            q_a_proj: self.mat("self_attn.q_a_proj.weight")?,
            q_b_proj: self.mat("self_attn.q_b_proj.weight")?,
            kv_a_proj_with_mqa: self.mat("self_attn.kv_a_proj_with_mqa.weight")?,
            kv_b_proj: self.mat("self_attn.kv_b_proj.weight")?,
            g_proj: if d.out_gate {
                Some(self.mat("self_attn.g_proj.weight")?)
            } else {
                None
            },
            o_proj: self.mat("self_attn.o_proj.weight")?,
        };
        let vecs = MlaVecs {
            q_a_layernorm: self.vec_bf16(r, "self_attn.q_a_layernorm.weight")?,
            kv_a_layernorm: self.vec_bf16(r, "self_attn.kv_a_layernorm.weight")?,
        };
        Ok(MlaWeights { mats, vecs })
    }

    fn moe(&self, r: &mut Reader<'_>, d: &Dims) -> Result<MoeWeights> {
        let mats = MoeSlots {
            router: self.mat("block_sparse_moe.gate.weight")?,
            down_l: self.mat("block_sparse_moe.routed_expert_down_proj.weight")?,
            up_l: self.mat("block_sparse_moe.routed_expert_up_proj.weight")?,
            shared: if d.sw > 0 {
                Some(self.mlp("block_sparse_moe.shared_experts.")?)
            } else {
                None
            },
        };
        let vecs = MoeVecs {
            bias: self.vec_f32(r, "block_sparse_moe.gate.e_score_correction_bias")?,
            routed_expert_norm: if d.latent_norm {
                Some(self.vec_bf16(r, "block_sparse_moe.routed_expert_norm.weight")?)
            } else {
                None
            },
        };
        Ok(MoeWeights { mats, vecs })
    }
}

/// Binds layer `layout.layer` without reading its matrices: reads and widens its small vectors
/// (norm gains, AttnRes folds, conv taps, A_log, dt_bias, router bias) and places each BF16
/// matrix at its offset in the layer buffer of `layout`. The buffer itself is supplied later
/// by a [`crate::model::TrunkSource`] (resident, ring slot or packed trunk). Errors (exit 2)
/// name the tensor.
pub fn bind_layer_weights(
    r: &mut Reader<'_>,
    d: &Dims,
    specs: &[SuffixSpec],
    layout: &LayerLayout,
) -> Result<LayerWeights> {
    let l = layout.layer;
    let t = LayerTensors { specs, layout };
    let input_layernorm = t.vec_bf16(r, "input_layernorm.weight")?;
    let post_attention_layernorm = t.vec_bf16(r, "post_attention_layernorm.weight")?;
    let f_attn_res = fold(
        &t.vec_bf16(r, "self_attention_res_norm.weight")?,
        &t.vec_bf16(r, "self_attention_res_proj.weight")?,
    );
    let f_mlp_res = fold(
        &t.vec_bf16(r, "mlp_res_norm.weight")?,
        &t.vec_bf16(r, "mlp_res_proj.weight")?,
    );
    let attn = match d.kinds[l] {
        AttnKind::Kda => AttnWeights::Kda(t.kda(r, d)?),
        AttnKind::Mla => AttnWeights::Mla(t.mla(r, d)?),
    };
    let ffn = if l < d.first_dense {
        FfnWeights::Dense(t.mlp("mlp.")?)
    } else {
        FfnWeights::Moe(t.moe(r, d)?)
    };
    Ok(LayerWeights {
        index: l,
        attn,
        ffn,
        input_layernorm,
        post_attention_layernorm,
        f_attn_res,
        f_mlp_res,
        buf_len: (layout.bytes / 2) as usize,
    })
}

/// Binds the model-level output vectors and locates the two [V, H] tables (names from the
/// catalogue; shape and dtype checked, exit 2 naming the tensor). The tables are read by the
/// trunk source ([`Reader::read_table_u16`] when resident).
pub fn bind_output(r: &mut Reader<'_>, d: &Dims) -> Result<(OutputVecs, TableLayout)> {
    let tables = table_layout(r, d)?;
    let h = d.h;
    let norm = r.bf16_f32(catalogue::FINAL_NORM, &[h])?;
    let f_output_attn_res = fold(
        &r.bf16_f32(catalogue::OUTPUT_ATTN_RES_NORM, &[h])?,
        &r.bf16_f32(catalogue::OUTPUT_ATTN_RES_PROJ, &[1, h])?,
    );
    Ok((
        OutputVecs {
            norm,
            f_output_attn_res,
        },
        tables,
    ))
}
