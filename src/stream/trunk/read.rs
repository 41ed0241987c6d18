//! How a trunk layer's bytes are read: a [`LayerRead`] says where they are ([`LayerBytes`]: file
//! ranges as they lie in the shards or a packed `trunk.bin`, or a coded run's blocks), and a
//! [`Piece`] is one streamed piece of it, read on the calling thread or queued on the I/O
//! thread. Either way the piece's bytes land at the same offsets of the buffer.

use super::super::coded::{read_blocks, CodedBlock, StagePool};
use super::super::pieces::{piece_extents, TrunkPiece};
use crate::error::Result;
use crate::io::{window_capacity, AlignedBuf, Extent, IoFile, IoThreads, ReadDone, ReadTicket};
use crate::model::weights::LayerPart;
use std::sync::Arc;

/// Where a layer's bytes are.
#[derive(Debug, Clone)]
pub enum LayerBytes {
    /// File ranges, back to back in the buffer from byte 0; a single one covering the buffer
    /// (a contiguous run, or a packed run) is one widened direct read.
    Raw(Vec<Extent<Arc<IoFile>>>),
    /// The blocks of a coded run in `trunk.bin` (docs/formats.md, "Packed trunk with a
    /// codec"), decoded with the pool's staging buffers and threads.
    Coded {
        file: Arc<IoFile>,
        blocks: Arc<[CodedBlock]>,
        pool: Arc<StagePool>,
    },
}

/// How to fill one layer's buffer, and how it streams.
#[derive(Debug, Clone)]
pub struct LayerRead {
    /// Zero-based layer (for messages).
    pub layer: usize,
    /// Bytes of the layer buffer.
    pub bytes: usize,
    /// Where the bytes are.
    pub bytes_at: LayerBytes,
    /// The ring pieces of the layer when it streams, in forward order; empty: one piece, the
    /// whole buffer.
    pub pieces: Vec<TrunkPiece>,
}

impl LayerRead {
    /// Buffer capacity the whole layer needs (the widened window of its run).
    pub fn capacity(&self) -> usize {
        window_capacity(self.bytes).unwrap_or(usize::MAX)
    }

    /// Reads the whole layer into `buf` on the calling thread; returns the payload offset
    /// (even) and the device bytes.
    pub(super) fn read_into(&self, buf: &mut AlignedBuf) -> Result<(usize, u64)> {
        self.piece(&TrunkPiece {
            parts: LayerPart::ALL.to_vec(),
            start: 0,
            len: self.bytes as u64,
        })
        .read_into(buf, 1)
    }

    /// The streamed piece `p` of this layer. A coded run's piece is the blocks it covers (its
    /// ends are tensor boundaries, where blocks end too).
    pub(super) fn piece(&self, p: &TrunkPiece) -> Piece {
        let src = match &self.bytes_at {
            LayerBytes::Raw(extents) => PieceBytes::Raw(piece_extents(extents, p.start, p.len)),
            LayerBytes::Coded { file, blocks, pool } => {
                let a = blocks.partition_point(|b| b.start < p.start);
                let e = blocks.partition_point(|b| b.start < p.start + p.len);
                PieceBytes::Coded {
                    file: Arc::clone(file),
                    blocks: Arc::clone(blocks),
                    range: (a, e),
                    pool: Arc::clone(pool),
                }
            }
        };
        Piece {
            layer: self.layer,
            parts: p.parts.clone(),
            start: p.start as usize,
            len: p.len as usize,
            src,
        }
    }
}

/// Where a piece's bytes are.
#[derive(Debug)]
enum PieceBytes {
    /// File ranges and their byte offsets inside the piece.
    Raw(Vec<(Extent<Arc<IoFile>>, usize)>),
    /// Blocks `range` of a coded run.
    Coded {
        file: Arc<IoFile>,
        blocks: Arc<[CodedBlock]>,
        range: (usize, usize),
        pool: Arc<StagePool>,
    },
}

/// One streamed piece: bytes `start .. start + len` of layer `layer`'s buffer.
#[derive(Debug)]
pub(super) struct Piece {
    pub(super) layer: usize,
    pub(super) parts: Vec<LayerPart>,
    pub(super) start: usize,
    pub(super) len: usize,
    src: PieceBytes,
}

impl Piece {
    /// True when the piece can be read ahead on the I/O thread: one direct read, or coded
    /// blocks.
    pub(super) fn is_window(&self) -> bool {
        match &self.src {
            PieceBytes::Raw(x) => x.len() == 1 && x[0].0.len == self.len,
            PieceBytes::Coded { .. } => true,
        }
    }

    /// Buffer capacity of the piece's widened window.
    pub(super) fn capacity(&self) -> usize {
        window_capacity(self.len).unwrap_or(usize::MAX)
    }

    /// Reads the piece into `buf` on the calling thread (`depth` concurrent preads for one
    /// window); returns the payload offset (even) and the device bytes.
    pub(super) fn read_into(&self, buf: &mut AlignedBuf, depth: usize) -> Result<(usize, u64)> {
        match &self.src {
            PieceBytes::Raw(x) if self.is_window() => {
                let e = &x[0].0;
                let d = e.file.read_window_split(e.offset, e.len, buf, depth)?;
                Ok((
                    super::super::tables::even_pad(buf, d.pad, e.len),
                    d.device_bytes,
                ))
            }
            PieceBytes::Raw(x) => {
                let mut dev = 0u64;
                for (e, at) in x {
                    e.file
                        .read_uncached_at(&mut buf[*at..*at + e.len], e.offset)?;
                    dev += e.len as u64;
                }
                Ok((0, dev))
            }
            PieceBytes::Coded {
                file,
                blocks,
                range,
                pool,
            } => {
                let bs = &blocks[range.0..range.1];
                let r = read_blocks(file, bs, self.start as u64, &mut buf[..self.len], pool)?;
                Ok((0, r.device_bytes))
            }
        }
    }

    /// Queues the piece's read into `buf` on `io` (a piece for which [`Piece::is_window`]); the
    /// ticket gives the buffer back with the payload at the returned pad.
    pub(super) fn submit(&self, io: &IoThreads, buf: AlignedBuf, depth: usize) -> ReadTicket {
        match &self.src {
            PieceBytes::Raw(x) => {
                let e = &x[0].0;
                io.submit_split(Arc::clone(&e.file), e.offset, e.len, buf, depth)
            }
            PieceBytes::Coded {
                file,
                blocks,
                range,
                pool,
            } => {
                let (file, blocks, range, pool) = (
                    Arc::clone(file),
                    Arc::clone(blocks),
                    *range,
                    Arc::clone(pool),
                );
                let (start, len) = (self.start as u64, self.len);
                let what = format!("{}: coded blocks of {}", file.path().display(), self.what());
                io.submit_job(buf, what, move |buf| {
                    let bs = &blocks[range.0..range.1];
                    let r = read_blocks(&file, bs, start, &mut buf[..len], &pool)?;
                    Ok(ReadDone {
                        pad: 0,
                        device_bytes: r.device_bytes,
                        direct: file.is_direct(),
                    })
                })
            }
        }
    }

    /// "trunk layer 3 piece moe", for messages.
    pub(super) fn what(&self) -> String {
        let names: Vec<&str> = self.parts.iter().map(|p| p.name()).collect();
        format!("trunk layer {} piece {}", self.layer, names.join("+"))
    }
}
