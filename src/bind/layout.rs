//! Where a checkpoint's dense tensors are: each bound layer's trunk run (or its tensors one
//! by one) and the two [V, H] model tables (FORMATS.md §4, §7). Nothing is read here: the
//! planner sizes these layouts before anything large is allocated.

use super::reader::{Dtype, Reader, TensorMeta};
use crate::catalogue::{self, layer_tensor_name, SuffixSpec};
use crate::error::Result;
use crate::io::Extent;
use crate::model::weights::LayerPart;
use crate::model::Dims;
use crate::stream::pieces::{cut_layer, PieceMode, TrunkPiece};

/// Where the two [V, H] BF16 model tables are in the checkpoint (checked for shape and dtype).
#[derive(Debug, Clone, PartialEq)]
pub struct TableLayout {
    /// `embed_tokens` [V, H].
    pub embed: TensorMeta,
    /// `lm_head` [V, H]; None when tied (the head is `embed_tokens`).
    pub lm_head: Option<TensorMeta>,
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
    /// The pieces (each an extent in a shard: its file is the shard index), back to back in
    /// the buffer from byte 0.
    pub pieces: Vec<Extent<usize>>,
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

    /// The layer cut into ring pieces in forward order ([`cut_layer`]: at its parts'
    /// boundaries, or whole with [`PieceMode::Layer`]).
    pub fn trunk_pieces(&self, mode: PieceMode) -> Vec<TrunkPiece> {
        let prefix = layer_tensor_name(self.layer, "");
        let tensors: Vec<_> = self
            .tensors
            .iter()
            .map(|(n, off, len)| {
                let part = n.strip_prefix(&prefix).and_then(LayerPart::of_suffix);
                (part, *off, *len)
            })
            .collect();
        cut_layer(&tensors, self.bytes, mode)
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
    crate::sort::sort_by_key(&mut sorted, |&i| (metas[i].1.shard, metas[i].1.offset, i));
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
            pieces: vec![Extent {
                file: shard,
                offset: start,
                len: bytes as usize,
            }],
            run: Some((shard, start)),
            tensors,
        });
    }
    let mut dest = 0u64;
    let mut pieces = Vec::with_capacity(metas.len());
    let mut tensors = Vec::with_capacity(metas.len());
    for (n, m) in &metas {
        pieces.push(Extent {
            file: m.shard,
            offset: m.offset,
            len: m.len as usize,
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

/// Locates the two [V, H] BF16 model tables (names from the catalogue; shape and dtype checked,
/// exit 2 naming the tensor). Nothing is read.
pub fn table_layout(r: &Reader<'_>, d: &Dims) -> Result<TableLayout> {
    let embed = r.meta(catalogue::EMBED_TOKENS, &[d.v, d.h], Dtype::BF16)?;
    let lm_head = if d.tied {
        None
    } else {
        Some(r.meta(catalogue::LM_HEAD, &[d.v, d.h], Dtype::BF16)?)
    };
    Ok(TableLayout { embed, lm_head })
}
