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
use crate::catalogue::{self, layer_tensor_name, SuffixSpec};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, IoFile};
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

pub use crate::safetensors::Dtype;

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

impl TensorLookup for crate::checkpoint::TensorIndex {
    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.get(name).map(|i| TensorMeta {
            shard: i.shard,
            offset: i.offset,
            len: i.nbytes,
            dtype: i.dtype,
            shape: i.shape.to_vec(),
        })
    }
    fn shard_paths(&self) -> Vec<PathBuf> {
        self.shards().iter().map(|s| s.path.clone()).collect()
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

/// The model-level vectors (MODEL.md §4 "Model level"). The two [V, H] tables
/// (`embed_tokens`, `lm_head`) are supplied by the [`super::TrunkSource`], resident or
/// streamed; [`TableLayout`] says where they are.
#[derive(Debug, Clone, PartialEq)]
pub struct Tables {
    /// `norm` [H].
    pub norm: Vec<f32>,
    /// Folded `output_attn_res_norm` × `output_attn_res_proj` [H].
    pub f_output_attn_res: Vec<f32>,
}

/// Where the two [V, H] BF16 model tables are in the checkpoint (checked for shape and dtype).
#[derive(Debug, Clone, PartialEq)]
pub struct TableLayout {
    /// `embed_tokens` [V, H].
    pub embed: TensorMeta,
    /// `lm_head` [V, H]; None when tied (the head is `embed_tokens`).
    pub lm_head: Option<TensorMeta>,
}

/// One contiguous piece of a layer's trunk bytes: `len` bytes at absolute `offset` of shard
/// `shard`, landing at byte `dest` of the layer buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrunkPiece {
    pub shard: usize,
    pub offset: u64,
    pub len: u64,
    pub dest: u64,
}

/// Where a layer's trunk bytes come from and where each trunk tensor lies in the layer buffer
/// (FORMATS.md §4, §7).
///
/// When the layer's trunk tensors form one gap-free run in one shard (the released layout),
/// the buffer *is* the run: one piece, each tensor at its offset within the run, so a packed
/// trunk's run (FORMATS.md §7) and the shard's run fill the buffer identically. Otherwise the
/// tensors are laid out one after another in catalogue order and read one by one. Every
/// trunk tensor is BF16 or F32, so every offset in the buffer is even (a `u16` index).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerLayout {
    /// Zero-based layer.
    pub layer: usize,
    /// Bytes of the layer buffer (the run length when contiguous).
    pub bytes: u64,
    /// The pieces in buffer order.
    pub pieces: Vec<TrunkPiece>,
    /// (shard, absolute run start) when the layer is one contiguous run.
    pub run: Option<(usize, u64)>,
    /// Every trunk tensor: full name, byte offset in the buffer, byte length.
    pub tensors: Vec<(String, u64, u64)>,
}

impl LayerLayout {
    /// Byte offset of tensor `name` in the layer buffer.
    pub fn dest_of(&self, name: &str) -> Option<u64> {
        self.tensors.iter().find(|t| t.0 == name).map(|t| t.1)
    }
}

/// The layout of layer `l`'s trunk (`specs` = `catalogue::layer_suffixes(cfg, l)`): every
/// trunk tensor checked for shape and dtype (exit 2 naming the tensor), then one piece if they
/// form one gap-free run in one shard, else one piece per tensor.
pub fn layer_layout(r: &Reader<'_>, specs: &[SuffixSpec], l: usize) -> Result<LayerLayout> {
    let mut metas = Vec::with_capacity(specs.len());
    for s in specs {
        let name = layer_tensor_name(l, s.suffix);
        let shape: Vec<usize> = s.shape.iter().map(|&x| x as usize).collect();
        let m = r.meta(&name, &shape, s.dtype)?;
        metas.push((name, m));
    }
    let mut sorted: Vec<usize> = (0..metas.len()).collect();
    sorted.sort_by_key(|&i| (metas[i].1.shard, metas[i].1.offset));
    let contiguous = !sorted.is_empty()
        && sorted.windows(2).all(|w| {
            let (a, b) = (&metas[w[0]].1, &metas[w[1]].1);
            a.shard == b.shard && a.offset + a.len == b.offset
        });
    if contiguous {
        let first = &metas[sorted[0]].1;
        let (shard, start) = (first.shard, first.offset);
        let bytes: u64 = metas.iter().map(|m| m.1.len).sum();
        let tensors = metas
            .iter()
            .map(|(n, m)| (n.clone(), m.offset - start, m.len))
            .collect();
        return Ok(LayerLayout {
            layer: l,
            bytes,
            pieces: vec![TrunkPiece {
                shard,
                offset: start,
                len: bytes,
                dest: 0,
            }],
            run: Some((shard, start)),
            tensors,
        });
    }
    let mut dest = 0u64;
    let mut pieces = Vec::with_capacity(metas.len());
    let mut tensors = Vec::with_capacity(metas.len());
    for (n, m) in &metas {
        pieces.push(TrunkPiece {
            shard: m.shard,
            offset: m.offset,
            len: m.len,
            dest,
        });
        tensors.push((n.clone(), dest, m.len));
        dest += m.len;
    }
    Ok(LayerLayout {
        layer: l,
        bytes: dest,
        pieces,
        run: None,
        tensors,
    })
}

/// Reads tensors for the binder through the I/O layer (bulk bytes by widened `O_DIRECT`
/// windows, falling back to buffered reads + `DONTNEED`, so loading does not grow the page
/// cache: ENGINE.md §4), remembering the open shard files.
pub struct Reader<'a> {
    lookup: &'a dyn TensorLookup,
    paths: Vec<PathBuf>,
    files: Vec<Option<IoFile>>,
    /// Reused 4096-aligned window for bulk reads.
    window: Option<AlignedBuf>,
    /// Shards holding a located (not yet read) tensor: routed experts.
    needed: Vec<bool>,
}

impl<'a> Reader<'a> {
    /// A reader over `lookup`'s shards (opened lazily).
    pub fn new(lookup: &'a dyn TensorLookup) -> Reader<'a> {
        let paths = lookup.shard_paths();
        let files: Vec<Option<IoFile>> = paths.iter().map(|_| None).collect();
        Reader {
            lookup,
            paths,
            needed: vec![false; files.len()],
            files,
            window: None,
        }
    }

    /// The open file of shard `i` (error naming the file: exit 2, it was indexed just now).
    pub fn file(&mut self, i: usize) -> Result<&IoFile> {
        if self.files[i].is_none() {
            let f = IoFile::open(&self.paths[i]).map_err(load_error)?;
            self.files[i] = Some(f);
        }
        Ok(self.files[i].as_ref().unwrap())
    }

    /// Path of shard `i`.
    pub fn path(&self, i: usize) -> &Path {
        &self.paths[i]
    }

    /// The shard table for the expert source, in shard order: every shard a located tensor
    /// lives in is open; the others (absent shards of unbound layers) are `None`.
    pub fn into_files(mut self) -> Result<Vec<Option<IoFile>>> {
        for i in 0..self.paths.len() {
            if self.needed[i] {
                self.file(i)?;
            }
        }
        Ok(self.files)
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
                "{name}: expected {dtype} {want:?}, found {} {:?}",
                m.dtype, m.shape
            )));
        }
        Ok(m)
    }

    /// Reads tensor `name` at `m` in windows of at most 4 MiB, handing each piece to `f` in
    /// order. A read failure at load time is invalid input (exit 2) naming the tensor.
    fn each_piece(&mut self, name: &str, m: &TensorMeta, mut f: impl FnMut(&[u8])) -> Result<()> {
        const CHUNK: usize = 1 << 22;
        if self.window.is_none() {
            let cap = window_capacity(CHUNK).expect("constant window");
            self.window = Some(AlignedBuf::new(cap)?);
        }
        let mut win = self.window.take().expect("window allocated above");
        let res = (|| {
            let mut done = 0u64;
            while done < m.len {
                let n = ((m.len - done) as usize).min(CHUNK);
                let file = self.file(m.shard)?;
                let r = file
                    .read_window(m.offset + done, n, win.as_mut_slice())
                    .map_err(|e| Error::invalid(format!("{name}: {}", load_error(e).message)))?;
                f(&win.as_slice()[r.pad..r.pad + n]);
                done += n as u64;
            }
            Ok(())
        })();
        self.window = Some(win);
        res
    }

    /// The whole layer buffer of `layout` as `u16` values (resident trunk of
    /// [`super::ResidentTrunk`]). A read failure is exit 2 (found while binding).
    pub fn read_layer_u16(&mut self, layout: &LayerLayout) -> Result<Vec<u16>> {
        let mut out = vec![0u16; (layout.bytes / 2) as usize];
        let what = format!("layer {} trunk", layout.layer);
        for p in &layout.pieces {
            let m = TensorMeta {
                shard: p.shard,
                offset: p.offset,
                len: p.len,
                dtype: Dtype::BF16,
                shape: Vec::new(),
            };
            let mut at = (p.dest / 2) as usize;
            self.each_piece(&what, &m, |b| {
                for c in b.chunks_exact(2) {
                    out[at] = u16::from_le_bytes([c[0], c[1]]);
                    at += 1;
                }
            })?;
        }
        Ok(out)
    }

    /// A located BF16 table read whole into memory (resident model tables).
    pub fn read_table_u16(&mut self, name: &str, m: &TensorMeta) -> Result<Vec<u16>> {
        let mut out = Vec::with_capacity(m.len as usize / 2);
        self.each_piece(name, m, |b| {
            out.extend(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
        })?;
        Ok(out)
    }

    /// Marks shard `i` as needed by [`Reader::into_files`] (a streamed tensor lives there).
    pub fn need_shard(&mut self, i: usize) {
        self.needed[i] = true;
    }

    /// Reads BF16 tensor `name` of `shape`, appending its bit patterns to `out`.
    pub fn bf16_into(&mut self, name: &str, shape: &[usize], out: &mut Vec<u16>) -> Result<()> {
        let m = self.meta(name, shape, Dtype::BF16)?;
        out.reserve(m.len as usize / 2);
        self.each_piece(name, &m, |b| {
            out.extend(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
        })
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
        let mut buf = Vec::with_capacity(m.len as usize);
        self.each_piece(name, &m, |b| buf.extend_from_slice(b))?;
        Ok(buf
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Extent of tensor `name` checked for shape/dtype.
    pub fn extent(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: Dtype,
    ) -> Result<(Extent, String)> {
        let m = self.meta(name, shape, dtype)?;
        self.needed[m.shard] = true;
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

/// A read failure while binding is invalid input (exit 2): the checkpoint was indexed moments
/// ago, so a short read means a truncated or changing file, found before the run.
fn load_error(e: Error) -> Error {
    if e.kind == crate::error::ErrorKind::Io {
        Error::invalid(e.message)
    } else {
        e
    }
}

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
    let buf = r.read_layer_u16(&layout)?;
    Ok((w, buf))
}

/// Binds layer `layout.layer` without reading its matrices: reads and widens its small vectors
/// (norm gains, AttnRes folds, conv taps, A_log, dt_bias, router bias) and places each BF16
/// matrix at its offset in the layer buffer of `layout`. The buffer itself is supplied later
/// by a [`super::TrunkSource`] (resident, ring slot or packed trunk).
pub fn bind_layer_weights(
    r: &mut Reader<'_>,
    d: &Dims,
    specs: &[SuffixSpec],
    layout: &LayerLayout,
) -> Result<LayerWeights> {
    let l = layout.layer;
    // BF16 matrix → slot in the layer buffer
    let mat = |_: &mut Reader<'_>, suffix: &str| -> Result<MatSlot> {
        let (shape, _, name) = spec(specs, l, suffix)?;
        let dest = layout
            .dest_of(&name)
            .ok_or_else(|| Error::internal(format!("{name}: not in the layer layout")))?;
        Ok(MatSlot {
            off: (dest / 2) as usize,
            rows: shape[0],
            cols: shape[1],
        })
    };
    // small BF16 vector → fp32
    let vec_bf16 = |r: &mut Reader<'_>, suffix: &str| -> Result<Vec<f32>> {
        let (shape, _, name) = spec(specs, l, suffix)?;
        r.bf16_f32(&name, &shape)
    };
    let vec_f32 = |r: &mut Reader<'_>, suffix: &str| -> Result<Vec<f32>> {
        let (shape, _, name) = spec(specs, l, suffix)?;
        r.f32(&name, &shape)
    };
    let input_layernorm = vec_bf16(r, "input_layernorm.weight")?;
    let post_attention_layernorm = vec_bf16(r, "post_attention_layernorm.weight")?;
    let f_attn_res = fold(
        &vec_bf16(r, "self_attention_res_norm.weight")?,
        &vec_bf16(r, "self_attention_res_proj.weight")?,
    );
    let f_mlp_res = fold(
        &vec_bf16(r, "mlp_res_norm.weight")?,
        &vec_bf16(r, "mlp_res_proj.weight")?,
    );
    let (attn, attn_vecs) = match d.kinds[l] {
        AttnKind::Kda => {
            let slots = [
                mat(r, "self_attn.q_proj.weight")?,
                mat(r, "self_attn.k_proj.weight")?,
                mat(r, "self_attn.v_proj.weight")?,
                mat(r, "self_attn.f_a_proj.weight")?,
                mat(r, "self_attn.f_b_proj.weight")?,
                mat(r, "self_attn.b_proj.weight")?,
                mat(r, "self_attn.g_proj.weight")?,
                mat(r, "self_attn.o_proj.weight")?,
            ];
            let a_log = vec_f32(r, "self_attn.A_log")?;
            let hk = d.hk;
            // The checkpoint stores max(Dk, Hk) values for Hk heads: a non-zero tail would mean a
            // per-channel layout this engine does not implement (MODEL.md §4).
            if let Some(i) = (hk..a_log.len()).find(|&i| a_log[i] != 0.0) {
                return Err(Error::invalid(format!(
                    "{}: entry {i} is {} but entries {hk}.. must be 0 (A_log is per head: only the first {hk} values are used)",
                    layer_tensor_name(l, "self_attn.A_log"),
                    a_log[i]
                )));
            }
            let vecs = KdaVecs {
                q_conv: vec_f32(r, "self_attn.q_conv1d.weight")?,
                k_conv: vec_f32(r, "self_attn.k_conv1d.weight")?,
                v_conv: vec_f32(r, "self_attn.v_conv1d.weight")?,
                a_log: a_log[..hk].to_vec(),
                dt_bias: vec_f32(r, "self_attn.dt_bias")?,
                o_norm: vec_f32(r, "self_attn.o_norm.weight")?,
            };
            (AttnSlots::Kda(slots), AttnVecs::Kda(vecs))
        }
        AttnKind::Mla => {
            let s4 = [
                mat(r, "self_attn.q_a_proj.weight")?,
                mat(r, "self_attn.q_b_proj.weight")?,
                mat(r, "self_attn.kv_a_proj_with_mqa.weight")?,
                mat(r, "self_attn.kv_b_proj.weight")?,
            ];
            let g = if d.out_gate {
                Some(mat(r, "self_attn.g_proj.weight")?)
            } else {
                None
            };
            let o = mat(r, "self_attn.o_proj.weight")?;
            let vecs = MlaVecs {
                q_a_layernorm: vec_bf16(r, "self_attn.q_a_layernorm.weight")?,
                kv_a_layernorm: vec_bf16(r, "self_attn.kv_a_layernorm.weight")?,
            };
            (AttnSlots::Mla(s4, g, o), AttnVecs::Mla(vecs))
        }
    };
    let (ffn, moe_vecs) = if l < d.first_dense {
        let s = [
            mat(r, "mlp.gate_proj.weight")?,
            mat(r, "mlp.up_proj.weight")?,
            mat(r, "mlp.down_proj.weight")?,
        ];
        (FfnSlots::Dense(s), None)
    } else {
        let s = [
            mat(r, "block_sparse_moe.gate.weight")?,
            mat(r, "block_sparse_moe.routed_expert_down_proj.weight")?,
            mat(r, "block_sparse_moe.routed_expert_up_proj.weight")?,
        ];
        let sh = if d.sw > 0 {
            Some([
                mat(r, "block_sparse_moe.shared_experts.gate_proj.weight")?,
                mat(r, "block_sparse_moe.shared_experts.up_proj.weight")?,
                mat(r, "block_sparse_moe.shared_experts.down_proj.weight")?,
            ])
        } else {
            None
        };
        let vecs = MoeVecs {
            bias: vec_f32(r, "block_sparse_moe.gate.e_score_correction_bias")?,
            routed_expert_norm: if d.latent_norm {
                Some(vec_bf16(r, "block_sparse_moe.routed_expert_norm.weight")?)
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
        buf_len: (layout.bytes / 2) as usize,
    };
    Ok(lw)
}

/// Binds the model-level vectors and locates the two [V, H] tables (names from the catalogue;
/// shape and dtype checked, exit 2 naming the tensor). The tables are read by the trunk source
/// ([`Reader::read_table_u16`] when resident).
pub fn bind_tables(r: &mut Reader<'_>, d: &Dims) -> Result<(Tables, TableLayout)> {
    let (v, h) = (d.v, d.h);
    let embed = r.meta(catalogue::EMBED_TOKENS, &[v, h], Dtype::BF16)?;
    let lm_head = if d.tied {
        None
    } else {
        Some(r.meta(catalogue::LM_HEAD, &[v, h], Dtype::BF16)?)
    };
    let norm = r.bf16_f32(catalogue::FINAL_NORM, &[h])?;
    let f_output_attn_res = fold(
        &r.bf16_f32(catalogue::OUTPUT_ATTN_RES_NORM, &[h])?,
        &r.bf16_f32(catalogue::OUTPUT_ATTN_RES_PROJ, &[1, h])?,
    );
    Ok((
        Tables {
            norm,
            f_output_attn_res,
        },
        TableLayout { embed, lm_head },
    ))
}

/// Locations of every routed expert of MoE layer `l`, checked for shape and dtype against the
/// catalogue (read later, on demand).
pub fn locate_experts(r: &mut Reader<'_>, cfg: &Config, l: usize) -> Result<Vec<ExpertLocation>> {
    (0..cfg.num_experts)
        .map(|e| {
            let specs = catalogue::expert_tensors(cfg, l, e);
            let mut parts = Vec::with_capacity(6);
            for s in &specs {
                let shape: Vec<usize> = s.shape.iter().map(|&x| x as usize).collect();
                parts.push(r.extent(&s.name, &shape, s.dtype)?.0);
            }
            Ok(ExpertLocation {
                parts: parts.try_into().unwrap(),
                names: specs.map(|s| s.name),
            })
        })
        .collect()
}
