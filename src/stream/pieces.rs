//! Trunk pieces (ENGINE.md §5): the units a streamed layer goes through the ring in. A layer is
//! cut at its parts' boundaries ([`LayerPart`]: attention, the dense FFN's gate+up and down, the
//! MoE block's trunk), each piece one byte range of the layer buffer holding whole tensors, so
//! that piece i+1 is read while piece i computes. The forward computes on the same bytes at the
//! same offsets whatever the cut: only when they arrive changes.

use crate::error::{Error, Result};
use crate::io::Extent;
use crate::model::weights::LayerPart;

/// How streamed layers are cut (`--trunk-pieces`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PieceMode {
    /// One piece per [`LayerPart`] (the default): the ring slots hold the largest part.
    #[default]
    Part,
    /// One piece per layer (its whole run): the ring slots hold the largest layer.
    Layer,
}

impl PieceMode {
    /// Parses the `--trunk-pieces` value (`part` or `layer`). Errors: exit 2 naming the flag.
    pub fn parse(s: &str) -> Result<PieceMode> {
        match s {
            "part" => Ok(PieceMode::Part),
            "layer" => Ok(PieceMode::Layer),
            _ => Err(Error::invalid(format!(
                "flag `--trunk-pieces`: expected `part` or `layer`, found `{s}`"
            ))),
        }
    }
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            PieceMode::Part => "part",
            PieceMode::Layer => "layer",
        }
    }
}

/// One piece of a layer: bytes `start .. start + len` of its layer buffer, holding every
/// matrix of `parts` (in forward order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrunkPiece {
    pub parts: Vec<LayerPart>,
    /// Byte offset in the layer buffer (even: every trunk tensor is BF16 or F32).
    pub start: u64,
    /// Bytes.
    pub len: u64,
}

/// Cuts a layer buffer of `bytes` bytes into pieces in forward order. `tensors` gives each
/// trunk tensor's part (None: a vector the forward never reads from the buffer), byte offset
/// in the buffer and length. A part's piece spans its tensors (first byte to last); when two
/// parts' spans overlap (tensors interleaved), or with [`PieceMode::Layer`], the layer is one
/// piece: the whole buffer, holding every part it has.
pub fn cut_layer(
    tensors: &[(Option<LayerPart>, u64, u64)],
    bytes: u64,
    mode: PieceMode,
) -> Vec<TrunkPiece> {
    let mut spans: Vec<(LayerPart, u64, u64)> = Vec::new();
    for &(p, off, len) in tensors {
        let Some(p) = p else { continue };
        match spans.iter_mut().find(|s| s.0 == p) {
            Some(s) => {
                s.1 = s.1.min(off);
                s.2 = s.2.max(off + len);
            }
            None => spans.push((p, off, off + len)),
        }
    }
    crate::sort::sort_by_key(&mut spans, |s| s.0);
    let disjoint = spans
        .iter()
        .enumerate()
        .all(|(i, a)| spans[i + 1..].iter().all(|b| a.2 <= b.1 || b.2 <= a.1));
    if mode == PieceMode::Layer || !disjoint || spans.len() < 2 {
        return vec![TrunkPiece {
            parts: spans.iter().map(|s| s.0).collect(),
            start: 0,
            len: bytes,
        }];
    }
    spans
        .into_iter()
        .map(|(p, a, b)| TrunkPiece {
            parts: vec![p],
            start: a,
            len: b - a,
        })
        .collect()
}

/// The file ranges of bytes `start .. start + len` of a layer buffer filled by `extents`
/// (back to back from byte 0), each with its byte offset inside the piece.
pub fn piece_extents<F: Clone>(
    extents: &[Extent<F>],
    start: u64,
    len: u64,
) -> Vec<(Extent<F>, usize)> {
    let (end, mut dest) = (start + len, 0u64);
    let mut out = Vec::new();
    for e in extents {
        let (a, b) = (dest.max(start), (dest + e.len as u64).min(end));
        if a < b {
            out.push((
                Extent {
                    file: e.file.clone(),
                    offset: e.offset + (a - dest),
                    len: (b - a) as usize,
                },
                (a - start) as usize,
            ));
        }
        dest += e.len as u64;
    }
    out
}

/// The plan's text of a layer's pieces: `attn 887.1 MB, mlp.gate_up 968.8 MB, …` (a whole-layer
/// piece of several parts joins their names with `+`).
pub fn pieces_text(pieces: &[TrunkPiece]) -> String {
    pieces
        .iter()
        .map(|p| {
            let names: Vec<&str> = p.parts.iter().map(|x| x.name()).collect();
            let names = if names.is_empty() {
                "layer".to_string()
            } else {
                names.join("+")
            };
            format!("{names} {}", crate::units::gb(p.len))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use LayerPart::*;

    #[test]
    fn a_sorted_dense_layer_is_cut_into_attention_gate_up_and_down() {
        // shard order: mlp.down, mlp.gate, mlp.up, norms, self_attn.*
        let t = [
            (Some(MlpDown), 0, 100),
            (Some(MlpGateUp), 100, 100),
            (Some(MlpGateUp), 200, 100),
            (None, 300, 8),
            (Some(Attn), 308, 50),
            (Some(Attn), 358, 50),
        ];
        let p = cut_layer(&t, 408, PieceMode::Part);
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.parts.clone(), p.start, p.len))
            .collect();
        assert_eq!(
            got,
            vec![
                (vec![Attn], 308, 100),
                (vec![MlpGateUp], 100, 200),
                (vec![MlpDown], 0, 100)
            ]
        );
        let one = cut_layer(&t, 408, PieceMode::Layer);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].start, one[0].len), (0, 408));
        assert_eq!(one[0].parts, vec![Attn, MlpGateUp, MlpDown]);
    }

    #[test]
    fn interleaved_parts_make_one_whole_layer_piece() {
        let t = [
            (Some(Attn), 0, 10),
            (Some(Moe), 10, 10),
            (Some(Attn), 20, 10),
        ];
        let p = cut_layer(&t, 30, PieceMode::Part);
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].start, p[0].len), (0, 30));
        assert_eq!(p[0].parts, vec![Attn, Moe]);
    }

    #[test]
    fn piece_extents_slice_a_run_and_a_tensor_list() {
        let run = [Extent {
            file: 0usize,
            offset: 1000,
            len: 400,
        }];
        assert_eq!(
            piece_extents(&run, 100, 50),
            vec![(
                Extent {
                    file: 0,
                    offset: 1100,
                    len: 50
                },
                0
            )]
        );
        let list = [
            Extent {
                file: 0usize,
                offset: 500,
                len: 10,
            },
            Extent {
                file: 1,
                offset: 0,
                len: 20,
            },
            Extent {
                file: 0,
                offset: 90,
                len: 30,
            },
        ];
        let got = piece_extents(&list, 10, 30);
        assert_eq!(
            got,
            vec![
                (
                    Extent {
                        file: 1,
                        offset: 0,
                        len: 20
                    },
                    0
                ),
                (
                    Extent {
                        file: 0,
                        offset: 90,
                        len: 10
                    },
                    20
                )
            ]
        );
    }

    #[test]
    fn the_flag_is_part_or_layer() {
        assert_eq!(PieceMode::parse("part").unwrap(), PieceMode::Part);
        assert_eq!(PieceMode::parse("layer").unwrap(), PieceMode::Layer);
        let e = PieceMode::parse("tensor").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("--trunk-pieces"), "{e}");
    }
}
