//! Binding: the tensors of MODEL.md §4 for the bound layers, checked for shape and dtype, read
//! with positioned reads. Large matrices stay BF16 (`u16` bit patterns); small vectors (norm
//! gains, conv taps, A_log, dt_bias, router bias) are widened to fp32 once; each AttnRes pair
//! is folded into one fp32 vector (§4 "In-memory policy").
//!
//! A layer's BF16 matrices are addressed as [`MatSlot`]s (offset + shape) into one `u16`
//! buffer per layer, so a streaming trunk can hand the forward pass a ring slot instead of the
//! resident buffer without touching the layer code.

use super::experts::{ExpertLocation, Extent};
use super::{AttnKind, Dims};
use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

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
    /// The view of this matrix inside `buf`.
    pub fn view<'a>(&self, buf: &'a [u16]) -> Bf16Mat<'a> {
        Bf16Mat {
            rows: self.rows,
            cols: self.cols,
            data: &buf[self.off..self.off + self.rows * self.cols],
        }
    }
}

/// Element type of a bound tensor (FORMATS.md §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Bf16,
    F32,
    U8,
    /// Any dtype the engine never binds, by its safetensors name.
    Other(&'static str),
}

impl Dtype {
    /// The safetensors spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "BF16",
            Dtype::F32 => "F32",
            Dtype::U8 => "U8",
            Dtype::Other(n) => n,
        }
    }
}

/// What the binder needs to know about one tensor of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Index into [`TensorLookup::shards`].
    pub shard: usize,
    /// Absolute byte offset in the shard.
    pub offset: u64,
    /// Byte length.
    pub len: u64,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

/// The tensor index as the binder sees it.
pub trait TensorLookup {
    /// The tensor called `name`, if the checkpoint has it.
    fn meta(&self, name: &str) -> Option<TensorMeta>;
    /// Paths of the shard files, indexed by [`TensorMeta::shard`].
    fn shard_paths(&self) -> Vec<PathBuf>;
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

/// Small vectors of an MLA layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaVecs {
    pub q_a_layernorm: Vec<f32>,
    pub kv_a_layernorm: Vec<f32>,
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
    /// Shared experts (gate, up, down) when Sw > 0.
    pub shared: Option<(Bf16Mat<'a>, Bf16Mat<'a>, Bf16Mat<'a>)>,
}

/// Small vectors of a MoE block.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeVecs {
    /// `gate.e_score_correction_bias` [E].
    pub bias: Vec<f32>,
    /// `routed_expert_norm` [L] when `latent_moe_use_norm`.
    pub routed_expert_norm: Option<Vec<f32>>,
}

/// Attention matrices of a layer, as slots.
#[derive(Debug, Clone, PartialEq)]
pub enum AttnSlots {
    Kda([MatSlot; 8]),
    /// q_a, q_b, kv_a, kv_b, g (optional), o.
    Mla([MatSlot; 4], Option<MatSlot>, MatSlot),
}

/// FFN matrices of a layer, as slots.
#[derive(Debug, Clone, PartialEq)]
pub enum FfnSlots {
    /// gate, up, down.
    Dense([MatSlot; 3]),
    /// router, down_l, up_l, shared (gate, up, down).
    Moe([MatSlot; 3], Option<[MatSlot; 3]>),
}

/// Small vectors of a layer's attention.
#[derive(Debug, Clone, PartialEq)]
pub enum AttnVecs {
    Kda(KdaVecs),
    Mla(MlaVecs),
}

/// One bound decoder layer: where its matrices are, and its small vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    pub index: usize,
    pub kind: AttnKind,
    pub attn: AttnSlots,
    pub ffn: FfnSlots,
    pub attn_vecs: AttnVecs,
    /// MoE vectors (None for a dense layer).
    pub moe_vecs: Option<MoeVecs>,
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
    /// KDA matrix views in `buf` (panics if the layer is MLA: a binding bug).
    pub fn kda<'a>(&self, buf: &'a [u16]) -> KdaMats<'a> {
        match &self.attn {
            AttnSlots::Kda(s) => KdaMats {
                q_proj: s[0].view(buf),
                k_proj: s[1].view(buf),
                v_proj: s[2].view(buf),
                f_a_proj: s[3].view(buf),
                f_b_proj: s[4].view(buf),
                b_proj: s[5].view(buf),
                g_proj: s[6].view(buf),
                o_proj: s[7].view(buf),
            },
            AttnSlots::Mla(..) => unreachable!("layer {} is MLA", self.index),
        }
    }
    /// MLA matrix views in `buf`.
    pub fn mla<'a>(&self, buf: &'a [u16]) -> MlaMats<'a> {
        match &self.attn {
            AttnSlots::Mla(s, g, o) => MlaMats {
                q_a_proj: s[0].view(buf),
                q_b_proj: s[1].view(buf),
                kv_a_proj_with_mqa: s[2].view(buf),
                kv_b_proj: s[3].view(buf),
                g_proj: g.map(|g| g.view(buf)),
                o_proj: o.view(buf),
            },
            AttnSlots::Kda(..) => unreachable!("layer {} is KDA", self.index),
        }
    }
    /// MoE matrix views in `buf`.
    pub fn moe<'a>(&self, buf: &'a [u16]) -> MoeMats<'a> {
        match &self.ffn {
            FfnSlots::Moe(s, sh) => MoeMats {
                router: s[0].view(buf),
                down_l: s[1].view(buf),
                up_l: s[2].view(buf),
                shared: sh.map(|s| (s[0].view(buf), s[1].view(buf), s[2].view(buf))),
            },
            FfnSlots::Dense(..) => unreachable!("layer {} is dense", self.index),
        }
    }
}

/// The model-level tables (MODEL.md §4 "Model level").
#[derive(Debug, Clone, PartialEq)]
pub struct Tables {
    /// `embed_tokens` [V, H] BF16.
    pub embed: Vec<u16>,
    /// `lm_head` [V, H] BF16; None when tied (then the head is `embed`).
    pub lm_head: Option<Vec<u16>>,
    /// `norm` [H].
    pub norm: Vec<f32>,
    /// Folded `output_attn_res_norm` × `output_attn_res_proj` [H].
    pub f_output_attn_res: Vec<f32>,
}

/// Name prefix of layer `l` (MODEL.md §4).
pub fn layer_prefix(l: usize) -> String {
    format!("language_model.model.layers.{l}.")
}

/// Reads tensors for the binder, remembering the open shard files.
pub struct Reader<'a> {
    lookup: &'a dyn TensorLookup,
    paths: Vec<PathBuf>,
    files: Vec<Option<File>>,
}

impl<'a> Reader<'a> {
    /// A reader over `lookup`'s shards (opened lazily).
    pub fn new(lookup: &'a dyn TensorLookup) -> Reader<'a> {
        let paths = lookup.shard_paths();
        let files = paths.iter().map(|_| None).collect();
        Reader {
            lookup,
            paths,
            files,
        }
    }

    /// The open file of shard `i` (error naming the file: exit 2, it was indexed just now).
    pub fn file(&mut self, i: usize) -> Result<&File> {
        if self.files[i].is_none() {
            let f = File::open(&self.paths[i]).map_err(|e| {
                Error::invalid(format!("{}: cannot open: {e}", self.paths[i].display()))
            })?;
            self.files[i] = Some(f);
        }
        Ok(self.files[i].as_ref().unwrap())
    }

    /// Path of shard `i`.
    pub fn path(&self, i: usize) -> &Path {
        &self.paths[i]
    }

    /// Every shard opened (for the expert source), in shard order.
    pub fn into_files(mut self) -> Result<Vec<(PathBuf, File)>> {
        for i in 0..self.paths.len() {
            self.file(i)?;
        }
        Ok(self
            .paths
            .into_iter()
            .zip(self.files)
            .map(|(p, f)| (p, f.unwrap()))
            .collect())
    }

    /// The tensor `name`, checked to have exactly `shape` and `dtype` (error naming the tensor,
    /// expected and found: exit 2).
    pub fn meta(&self, name: &str, shape: &[usize], dtype: Dtype) -> Result<TensorMeta> {
        let m = self.lookup.meta(name).ok_or_else(|| {
            Error::invalid(format!(
                "{name}: required tensor is missing from the checkpoint"
            ))
        })?;
        let want: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
        if m.shape != want || m.dtype != dtype {
            return Err(Error::invalid(format!(
                "{name}: expected {} {:?}, found {} {:?}",
                dtype.name(),
                want,
                m.dtype.name(),
                m.shape
            )));
        }
        Ok(m)
    }

    fn bytes(&mut self, name: &str, m: &TensorMeta, dst: &mut [u8]) -> Result<()> {
        let path = self.paths[m.shard].clone();
        let f = self.file(m.shard)?;
        super::experts::read_exact_at(&path, f, m.offset, dst)
            .map_err(|e| Error::invalid(format!("{name}: {}", e.message)))
    }

    /// Reads BF16 tensor `name` of `shape`, appending its bit patterns to `out`.
    pub fn bf16_into(&mut self, name: &str, shape: &[usize], out: &mut Vec<u16>) -> Result<()> {
        let m = self.meta(name, shape, Dtype::Bf16)?;
        const CHUNK: usize = 1 << 22;
        let mut buf = vec![0u8; (m.len as usize).min(CHUNK)];
        out.reserve(m.len as usize / 2);
        let mut done = 0u64;
        while done < m.len {
            let n = ((m.len - done) as usize).min(CHUNK);
            let part = TensorMeta {
                offset: m.offset + done,
                ..m.clone()
            };
            self.bytes(name, &part, &mut buf[..n])?;
            out.extend(
                buf[..n]
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]])),
            );
            done += n as u64;
        }
        Ok(())
    }

    /// A BF16 vector or matrix widened to fp32.
    pub fn bf16_f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        self.bf16_into(name, shape, &mut v)?;
        Ok(v.into_iter().map(k3_kernels::bf16_to_f32).collect())
    }

    /// An F32 tensor.
    pub fn f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let m = self.meta(name, shape, Dtype::F32)?;
        let mut buf = vec![0u8; m.len as usize];
        self.bytes(name, &m, &mut buf)?;
        Ok(buf
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Extent of tensor `name` checked for shape/dtype.
    pub fn extent(&self, name: &str, shape: &[usize], dtype: Dtype) -> Result<(Extent, String)> {
        let m = self.meta(name, shape, dtype)?;
        Ok((
            Extent {
                shard: m.shard,
                offset: m.offset,
                len: m.len,
            },
            name.to_string(),
        ))
    }
}

/// Folds an AttnRes pair: f[d] = rnd(w_norm[d] × w_proj[0][d]) (MODEL.md §4).
pub fn fold(norm: &[f32], proj: &[f32]) -> Vec<f32> {
    norm.iter()
        .zip(proj)
        .map(|(&a, &b)| k3_kernels::rnd(a as f64 * b as f64))
        .collect()
}

fn push_mat(
    r: &mut Reader<'_>,
    buf: &mut Vec<u16>,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<MatSlot> {
    let off = buf.len();
    r.bf16_into(name, &[rows, cols], buf)?;
    Ok(MatSlot { off, rows, cols })
}

/// Binds layer `l`: checks and reads its trunk tensors. Returns the layer description and its
/// resident matrix buffer.
pub fn bind_layer(r: &mut Reader<'_>, d: &Dims, l: usize) -> Result<(LayerWeights, Vec<u16>)> {
    let p = layer_prefix(l);
    let h = d.h;
    let mut buf: Vec<u16> = Vec::new();
    let input_layernorm = r.bf16_f32(&format!("{p}input_layernorm.weight"), &[h])?;
    let post_attention_layernorm =
        r.bf16_f32(&format!("{p}post_attention_layernorm.weight"), &[h])?;
    let f_attn_res = fold(
        &r.bf16_f32(&format!("{p}self_attention_res_norm.weight"), &[h])?,
        &r.bf16_f32(&format!("{p}self_attention_res_proj.weight"), &[1, h])?,
    );
    let f_mlp_res = fold(
        &r.bf16_f32(&format!("{p}mlp_res_norm.weight"), &[h])?,
        &r.bf16_f32(&format!("{p}mlp_res_proj.weight"), &[1, h])?,
    );
    let a = format!("{p}self_attn.");
    let (attn, attn_vecs) = match d.kinds[l] {
        AttnKind::Kda => {
            let (pk, dk, hk, kc) = (d.pk, d.dk, d.hk, d.kc);
            let mut m =
                |n: &str, rows, cols| push_mat(r, &mut buf, &format!("{a}{n}.weight"), rows, cols);
            let slots = [
                m("q_proj", pk, h)?,
                m("k_proj", pk, h)?,
                m("v_proj", pk, h)?,
                m("f_a_proj", dk, h)?,
                m("f_b_proj", pk, dk)?,
                m("b_proj", hk, h)?,
                m("g_proj", pk, h)?,
                m("o_proj", h, pk)?,
            ];
            let a_log_name = format!("{a}A_log");
            let a_log = r.f32(&a_log_name, &[dk.max(hk)])?;
            // The checkpoint stores max(Dk, Hk) values for Hk heads: a non-zero tail would mean a
            // per-channel layout this engine does not implement (MODEL.md §4).
            if let Some(i) = (hk..a_log.len()).find(|&i| a_log[i] != 0.0) {
                return Err(Error::invalid(format!(
                    "{a_log_name}: entry {i} is {} but entries {hk}.. must be 0 (A_log is per head: only the first {hk} values are used)",
                    a_log[i]
                )));
            }
            let vecs = KdaVecs {
                q_conv: r.f32(&format!("{a}q_conv1d.weight"), &[pk, 1, kc])?,
                k_conv: r.f32(&format!("{a}k_conv1d.weight"), &[pk, 1, kc])?,
                v_conv: r.f32(&format!("{a}v_conv1d.weight"), &[pk, 1, kc])?,
                a_log: a_log[..hk].to_vec(),
                dt_bias: r.f32(&format!("{a}dt_bias"), &[pk])?,
                o_norm: r.f32(&format!("{a}o_norm.weight"), &[dk])?,
            };
            (AttnSlots::Kda(slots), AttnVecs::Kda(vecs))
        }
        AttnKind::Mla => {
            let (hm, dq, rq, rkv, dr, dn, dv) = (d.hm, d.dq, d.rq, d.rkv, d.dr, d.dn, d.dv);
            let mut m =
                |n: &str, rows, cols| push_mat(r, &mut buf, &format!("{a}{n}.weight"), rows, cols);
            let s4 = [
                m("q_a_proj", rq, h)?,
                m("q_b_proj", hm * dq, rq)?,
                m("kv_a_proj_with_mqa", rkv + dr, h)?,
                m("kv_b_proj", hm * (dn + dv), rkv)?,
            ];
            let g = if d.out_gate {
                Some(m("g_proj", hm * dv, h)?)
            } else {
                None
            };
            let o = m("o_proj", h, hm * dv)?;
            let vecs = MlaVecs {
                q_a_layernorm: r.bf16_f32(&format!("{a}q_a_layernorm.weight"), &[rq])?,
                kv_a_layernorm: r.bf16_f32(&format!("{a}kv_a_layernorm.weight"), &[rkv])?,
            };
            (AttnSlots::Mla(s4, g, o), AttnVecs::Mla(vecs))
        }
    };
    let (ffn, moe_vecs) = if l < d.first_dense {
        let f = format!("{p}mlp.");
        let mut m =
            |n: &str, rows, cols| push_mat(r, &mut buf, &format!("{f}{n}.weight"), rows, cols);
        let s = [
            m("gate_proj", d.f, h)?,
            m("up_proj", d.f, h)?,
            m("down_proj", h, d.f)?,
        ];
        (FfnSlots::Dense(s), None)
    } else {
        let f = format!("{p}block_sparse_moe.");
        let mut m = |n: &str, rows, cols| push_mat(r, &mut buf, &format!("{f}{n}"), rows, cols);
        let s = [
            m("gate.weight", d.e, h)?,
            m("routed_expert_down_proj.weight", d.l, h)?,
            m("routed_expert_up_proj.weight", h, d.l)?,
        ];
        let sh = if d.sw > 0 {
            Some([
                m("shared_experts.gate_proj.weight", d.sw, h)?,
                m("shared_experts.up_proj.weight", d.sw, h)?,
                m("shared_experts.down_proj.weight", h, d.sw)?,
            ])
        } else {
            None
        };
        let vecs = MoeVecs {
            bias: r.f32(&format!("{f}gate.e_score_correction_bias"), &[d.e])?,
            routed_expert_norm: if d.latent_norm {
                Some(r.bf16_f32(&format!("{f}routed_expert_norm.weight"), &[d.l])?)
            } else {
                None
            },
        };
        (FfnSlots::Moe(s, sh), Some(vecs))
    };
    let lw = LayerWeights {
        index: l,
        kind: d.kinds[l],
        attn,
        ffn,
        attn_vecs,
        moe_vecs,
        input_layernorm,
        post_attention_layernorm,
        f_attn_res,
        f_mlp_res,
        buf_len: buf.len(),
    };
    Ok((lw, buf))
}

/// Binds the model-level tables.
pub fn bind_tables(r: &mut Reader<'_>, d: &Dims) -> Result<Tables> {
    let (v, h) = (d.v, d.h);
    let mut embed = Vec::new();
    r.bf16_into(
        "language_model.model.embed_tokens.weight",
        &[v, h],
        &mut embed,
    )?;
    let lm_head = if d.tied {
        None
    } else {
        let mut w = Vec::new();
        r.bf16_into("language_model.lm_head.weight", &[v, h], &mut w)?;
        Some(w)
    };
    let norm = r.bf16_f32("language_model.model.norm.weight", &[h])?;
    let f_output_attn_res = fold(
        &r.bf16_f32("language_model.model.output_attn_res_norm.weight", &[h])?,
        &r.bf16_f32("language_model.model.output_attn_res_proj.weight", &[1, h])?,
    );
    Ok(Tables {
        embed,
        lm_head,
        norm,
        f_output_attn_res,
    })
}

/// Locations of every routed expert of MoE layer `l`, checked for shape and dtype (read later,
/// on demand).
pub fn locate_experts(r: &Reader<'_>, d: &Dims, l: usize) -> Result<Vec<ExpertLocation>> {
    let p = layer_prefix(l);
    let (i, lat) = (d.i, d.l);
    (0..d.e)
        .map(|e| {
            let base = format!("{p}block_sparse_moe.experts.{e}.");
            let mut parts = Vec::with_capacity(6);
            let mut names = Vec::with_capacity(6);
            for (w, rows, cols) in [("w1", i, lat), ("w2", lat, i), ("w3", i, lat)] {
                let (x, n) = r.extent(
                    &format!("{base}{w}.weight_packed"),
                    &[rows, cols / 2],
                    Dtype::U8,
                )?;
                parts.push(x);
                names.push(n);
                let (x, n) = r.extent(
                    &format!("{base}{w}.weight_scale"),
                    &[rows, cols / 32],
                    Dtype::U8,
                )?;
                parts.push(x);
                names.push(n);
            }
            Ok(ExpertLocation {
                parts: parts.try_into().unwrap(),
                names: names.try_into().unwrap(),
            })
        })
        .collect()
}
