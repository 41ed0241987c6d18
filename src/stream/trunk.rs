//! The streamed trunk (ENGINE.md §4–§5): a pinned set of layers held resident and a ring of
//! slots, each sized to the largest streamed piece, through which the other layers cycle in
//! pieces ([`super::pieces`]: a layer cut at its parts' boundaries, or whole).
//!
//! * With two or more slots, when piece i is handed to the forward pass the I/O thread is
//!   already reading the next streamed piece (in walk order, wrapping to the next forward
//!   pass) into a free slot, straight into its pre-faulted 4096-aligned buffer; with one slot
//!   reads are synchronous. Each read may be split into `io_depth` concurrent preads.
//! * A slot is never refilled while in use: the part returned by
//!   [`TrunkSource::layer_part`] borrows the trunk, so the next call — which may recycle that
//!   slot — cannot happen while the forward pass still holds it.
//! * A half-loaded slot is never used: a slot becomes readable only when its read returned
//!   the whole payload; a failed read fails the forward (exit 4, naming file and offset) and
//!   the slot goes back to the free list.
//!
//! The bytes come from the shards (one run per layer, or tensor by tensor when a layer's trunk
//! is not contiguous) or from a packed `trunk.bin` (FORMATS.md §7): a piece holds the same bytes
//! at the same offsets of the layer buffer either way, so the forward pass cannot tell. The
//! model tables come through [`Tables`].

mod read;

use super::pieces::TrunkPiece;
use super::tables::{even_pad, TableStats, Tables};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{AlignedBuf, IoThreads, ReadTicket};
use crate::model::weights::{Bf16Mat, LayerPart, PartBuf};
use crate::model::TrunkSource;
use read::Piece;
pub use read::{LayerBytes, LayerRead};
use std::sync::Arc;
use std::time::Instant;

/// Counters of the trunk report (ENGINE.md §6, FORMATS.md §10 `trunk`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrunkStats {
    /// Layer parts handed to the forward pass (one per [`LayerPart`] of each layer a forward
    /// walks).
    pub binds: u64,
    /// Of those, served without a read made for them (pinned, or still in its slot).
    pub hits: u64,
    /// Piece reads.
    pub reads: u64,
    /// Of those, made ahead on the I/O thread while an earlier piece computed.
    pub reads_ahead: u64,
    /// Bytes transferred from the device for the trunk.
    pub bytes_read: u64,
    /// Seconds the reads took (on the I/O thread for read-ahead; may overlap compute).
    pub read_seconds: f64,
    /// Seconds the forward pass waited for piece reads.
    pub wait_seconds: f64,
}

enum Slot {
    /// No piece (buffer free).
    Free(AlignedBuf),
    /// A read-ahead of piece `piece` in flight.
    Loading { piece: usize, ticket: ReadTicket },
    /// A complete piece at `pad`; `used` once handed to the forward pass (a later bind of the
    /// same piece from this slot is then a hit: no read was made for it).
    Ready {
        piece: usize,
        buf: AlignedBuf,
        pad: usize,
        used: bool,
    },
    /// Transient while changing state (or lost after an I/O thread died).
    Gone,
}

enum Entry {
    Pinned {
        buf: AlignedBuf,
        pad: usize,
        /// `u16` values of the layer.
        n: usize,
    },
    /// Pieces `first .. first + count` of the walk.
    Streamed { first: usize, count: usize },
}

/// How the ring reads (`--trunk-ring`, `--io-depth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Ring slots (at least 1 when any layer streams).
    pub slots: usize,
    /// Concurrent preads per piece read (at least 1).
    pub io_depth: usize,
}

/// The trunk source of a streamed run: pinned layers, the ring, and the model tables.
pub struct StreamedTrunk {
    entries: Vec<Entry>,
    /// Every streamed piece, in walk order.
    pieces: Vec<Piece>,
    ring: Vec<Slot>,
    /// The slot handed out last (in use until the next call).
    current: Option<usize>,
    io: Arc<IoThreads>,
    io_depth: usize,
    tables: Tables,
    /// The tables' own reader: an lm_head chunk must not queue behind a piece read-ahead.
    table_io: Arc<IoThreads>,
    stats: TrunkStats,
    slot_bytes: usize,
}

impl StreamedTrunk {
    /// Builds the trunk: reads every pinned layer now into its own pre-faulted buffer, and
    /// allocates (and faults in) `ring.slots` slots of the largest streamed piece's buffer.
    /// Piece read-ahead runs on `io`; streamed model tables read on `table_io`.
    ///
    /// `loaded(done, total, bytes)` is told after each pinned layer is read (`done` of `total`
    /// pinned layers, `bytes` read so far), so a caller can show progress: at the released
    /// widths pinning reads up to 109 GB before the first token.
    ///
    /// Errors: exit 3 if memory is refused; a read failure of a pinned layer is exit 2 (found
    /// while loading, before the run); exit 1 if a streamed layer exists without a ring slot.
    pub fn new(
        layers: Vec<LayerRead>,
        pinned: &[bool],
        ring: RingConfig,
        tables: Tables,
        io: Arc<IoThreads>,
        table_io: Arc<IoThreads>,
        loaded: Option<fn(usize, usize, u64)>,
    ) -> Result<StreamedTrunk> {
        let mut entries = Vec::with_capacity(layers.len());
        let mut pieces = Vec::new();
        let n_pinned = pinned.iter().filter(|p| **p).count();
        let (mut done, mut bytes) = (0usize, 0u64);
        for (l, &p) in layers.into_iter().zip(pinned) {
            if p {
                let mut buf = AlignedBuf::new(l.capacity())?;
                let (pad, _) = l.read_into(&mut buf).map_err(|e| {
                    if e.kind == ErrorKind::Io {
                        Error::invalid(format!("layer {} trunk: {}", l.layer, e.message))
                    } else {
                        e
                    }
                })?;
                done += 1;
                bytes += l.bytes as u64;
                if let Some(f) = loaded {
                    f(done, n_pinned, bytes);
                }
                entries.push(Entry::Pinned {
                    buf,
                    pad,
                    n: l.bytes / 2,
                });
            } else {
                let first = pieces.len();
                if l.pieces.is_empty() {
                    pieces.push(l.piece(&TrunkPiece {
                        parts: LayerPart::ALL.to_vec(),
                        start: 0,
                        len: l.bytes as u64,
                    }));
                } else {
                    pieces.extend(l.pieces.iter().map(|p| l.piece(p)));
                }
                entries.push(Entry::Streamed {
                    first,
                    count: pieces.len() - first,
                });
            }
        }
        let slot_bytes = pieces.iter().map(Piece::capacity).max().unwrap_or(0);
        if slot_bytes > 0 && ring.slots == 0 {
            return Err(Error::internal("streamed trunk layers without a ring slot"));
        }
        let slots = if slot_bytes > 0 {
            (0..ring.slots)
                .map(|_| AlignedBuf::new(slot_bytes).map(Slot::Free))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(StreamedTrunk {
            entries,
            pieces,
            ring: slots,
            current: None,
            io,
            io_depth: ring.io_depth.max(1),
            tables,
            table_io,
            stats: TrunkStats::default(),
            slot_bytes,
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> TrunkStats {
        self.stats
    }
    /// Model-table counters so far.
    pub fn table_stats(&self) -> TableStats {
        self.tables.stats()
    }
    /// Ring slots and bytes per slot.
    pub fn ring(&self) -> (usize, usize) {
        (self.ring.len(), self.slot_bytes)
    }
    /// Bound layers.
    pub fn layers(&self) -> usize {
        self.entries.len()
    }
    /// Streamed pieces per forward pass.
    pub fn streamed_pieces(&self) -> usize {
        self.pieces.len()
    }
    /// The streamed pieces after `p` in walk order (wrapping), at most `n`.
    fn upcoming(&self, p: usize, n: usize) -> Vec<usize> {
        let np = self.pieces.len();
        (1..=np).map(|k| (p + k) % np).take(n).collect()
    }

    fn slot_of(&self, piece: usize) -> Option<usize> {
        self.ring.iter().position(|s| match s {
            Slot::Loading { piece: x, .. } | Slot::Ready { piece: x, .. } => *x == piece,
            _ => false,
        })
    }

    /// Waits for slot `i`'s read-ahead; leaves it Ready or Free (on error, returned).
    fn settle(&mut self, i: usize) -> Result<()> {
        if let Slot::Loading { .. } = self.ring[i] {
            let Slot::Loading { piece, ticket } = std::mem::replace(&mut self.ring[i], Slot::Gone)
            else {
                unreachable!()
            };
            let t0 = Instant::now();
            let (buf, r) = ticket.wait_keep();
            self.stats.wait_seconds += t0.elapsed().as_secs_f64();
            let Some(mut buf) = buf else {
                return Err(r
                    .err()
                    .unwrap_or_else(|| Error::internal("I/O thread died")));
            };
            match r {
                Ok((done, secs)) => {
                    self.stats.reads += 1;
                    self.stats.reads_ahead += 1;
                    self.stats.bytes_read += done.device_bytes;
                    self.stats.read_seconds += secs;
                    let pad = even_pad(&mut buf, done.pad, self.pieces[piece].len);
                    self.ring[i] = Slot::Ready {
                        piece,
                        buf,
                        pad,
                        used: false,
                    };
                }
                Err(e) => {
                    self.ring[i] = Slot::Free(buf);
                    let what = self.pieces[piece].what();
                    return Err(Error::new(e.kind, format!("{} ({what})", e.message)));
                }
            }
        }
        Ok(())
    }

    /// A slot that may be (re)filled now: free, or holding a piece not among `keep`, never
    /// `current`. Waits for a stale read-ahead to finish first.
    fn take_slot(&mut self, keep: &[usize]) -> Option<usize> {
        let cur = self.current;
        if let Some(i) =
            (0..self.ring.len()).find(|&i| Some(i) != cur && matches!(self.ring[i], Slot::Free(_)))
        {
            return Some(i);
        }
        let i = (0..self.ring.len()).find(|&i| {
            Some(i) != cur
                && match &self.ring[i] {
                    Slot::Ready { piece, .. } | Slot::Loading { piece, .. } => {
                        !keep.contains(piece)
                    }
                    _ => false,
                }
        })?;
        // A stale read-ahead: let it land (its error, if any, no longer matters).
        let _ = self.settle(i);
        if let Slot::Ready { .. } = self.ring[i] {
            let Slot::Ready { buf, .. } = std::mem::replace(&mut self.ring[i], Slot::Gone) else {
                unreachable!()
            };
            self.ring[i] = Slot::Free(buf);
        }
        matches!(self.ring[i], Slot::Free(_)).then_some(i)
    }

    /// Queues read-ahead of the streamed pieces after `p` into free slots (ring ≥ 2).
    fn read_ahead(&mut self, p: usize) {
        let want = self.upcoming(p, self.ring.len().saturating_sub(1));
        for &x in &want {
            if self.slot_of(x).is_some() {
                continue;
            }
            if !self.pieces[x].is_window() {
                continue; // read synchronously when asked
            }
            let Some(i) = self.take_slot(&want) else {
                return;
            };
            let Slot::Free(buf) = std::mem::replace(&mut self.ring[i], Slot::Gone) else {
                unreachable!()
            };
            let ticket = self.pieces[x].submit(&self.io, buf, self.io_depth);
            self.ring[i] = Slot::Loading { piece: x, ticket };
        }
    }

    /// Makes piece `p` Ready in some slot; returns the slot.
    fn load(&mut self, p: usize) -> Result<usize> {
        if let Some(i) = self.slot_of(p) {
            self.settle(i)?;
            if let Slot::Ready { used, .. } = &mut self.ring[i] {
                if *used {
                    self.stats.hits += 1;
                }
                *used = true;
            }
            return Ok(i);
        }
        // Not read ahead: read it now into a slot (the previous current one is free to reuse:
        // its borrow ended when this call began).
        self.current = None;
        let keep = self.upcoming(p, self.ring.len().saturating_sub(1));
        let i = self
            .take_slot(&keep)
            .or_else(|| self.take_slot(&[]))
            .ok_or_else(|| {
                Error::internal(format!("{}: no ring slot available", self.pieces[p].what()))
            })?;
        let Slot::Free(mut buf) = std::mem::replace(&mut self.ring[i], Slot::Gone) else {
            unreachable!()
        };
        let t0 = Instant::now();
        let r = self.pieces[p].read_into(&mut buf, self.io_depth);
        let secs = t0.elapsed().as_secs_f64();
        self.stats.read_seconds += secs;
        self.stats.wait_seconds += secs;
        match r {
            Ok((pad, dev)) => {
                self.stats.reads += 1;
                self.stats.bytes_read += dev;
                self.ring[i] = Slot::Ready {
                    piece: p,
                    buf,
                    pad,
                    used: true,
                };
                Ok(i)
            }
            Err(e) => {
                self.ring[i] = Slot::Free(buf);
                let what = self.pieces[p].what();
                Err(Error::new(e.kind, format!("{} ({what})", e.message)))
            }
        }
    }
}

impl TrunkSource for StreamedTrunk {
    fn layer_part(&mut self, l: usize, part: LayerPart) -> Result<PartBuf<'_>> {
        self.stats.binds += 1;
        let p = match self.entries.get(l) {
            None => return Err(Error::internal(format!("layer {l} is not bound"))),
            Some(Entry::Pinned { .. }) => {
                self.stats.hits += 1;
                None
            }
            Some(&Entry::Streamed { first, count }) => {
                let p = (first..first + count)
                    .find(|&p| self.pieces[p].parts.contains(&part))
                    .ok_or_else(|| {
                        Error::internal(format!(
                            "trunk layer {l}: no piece holds part {}",
                            part.name()
                        ))
                    })?;
                let i = self.load(p)?;
                self.current = Some(i);
                self.read_ahead(p);
                Some((p, i))
            }
        };
        let (base, buf, pad, n) = match (p, &self.entries[l]) {
            (None, Entry::Pinned { buf, pad, n }) => (0, buf, *pad, *n),
            (Some((p, i)), Entry::Streamed { .. }) => match &self.ring[i] {
                Slot::Ready { buf, pad, .. } => {
                    let pc = &self.pieces[p];
                    (pc.start / 2, buf, *pad, pc.len / 2)
                }
                _ => return Err(Error::internal(format!("trunk layer {l}: slot not ready"))),
            },
            _ => unreachable!(),
        };
        let data = buf
            .u16s(pad, n)
            .ok_or_else(|| Error::internal(format!("trunk layer {l}: misaligned buffer")))?;
        Ok(PartBuf { base, data })
    }

    fn embed_row(&mut self, id: usize) -> Result<&[u16]> {
        self.tables.embed_row(&self.table_io, id)
    }

    fn bytes_read(&self) -> u64 {
        let ts = self.table_stats();
        self.stats().bytes_read + ts.embedding_bytes_read + ts.lm_head_bytes_read
    }

    fn prefetch_lm_head(&mut self) {
        self.tables.prefetch_lm_head(&self.table_io);
    }

    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()> {
        self.tables.lm_head(&self.table_io, f)
    }
}

impl std::fmt::Debug for StreamedTrunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedTrunk")
            .field("layers", &self.entries.len())
            .field("pieces", &self.pieces.len())
            .field("ring", &self.ring.len())
            .field("slot_bytes", &self.slot_bytes)
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{Extent, IoFile};
    use crate::model::weights::LayerPart::{Attn, Moe};

    /// Layers of `sizes[l]` bytes in one file, layer l filled with u16 value 1000·l + i; with
    /// `cut`, two pieces each in forward order: the second half (Attn), then the first (Moe).
    fn file_with_layers(name: &str, sizes: &[usize], cut: bool) -> (Arc<IoFile>, Vec<LayerRead>) {
        let path = std::env::temp_dir().join(format!("k3_trunk_{name}_{}", std::process::id()));
        let mut bytes = Vec::new();
        let mut offs = Vec::new();
        for (l, &n) in sizes.iter().enumerate() {
            bytes.resize(bytes.len() + 6, 0); // unaligned runs
            offs.push(bytes.len() as u64);
            for i in 0..n / 2 {
                bytes.extend_from_slice(&((1000 * l + i) as u16).to_le_bytes());
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let f = Arc::new(IoFile::open(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        let reads = sizes
            .iter()
            .enumerate()
            .map(|(l, &n)| {
                let half = (n as u64 / 4) * 2;
                LayerRead {
                    layer: l,
                    bytes: n,
                    bytes_at: LayerBytes::Raw(vec![Extent {
                        file: Arc::clone(&f),
                        offset: offs[l],
                        len: n,
                    }]),
                    pieces: if cut {
                        vec![
                            TrunkPiece {
                                parts: vec![Attn],
                                start: half,
                                len: n as u64 - half,
                            },
                            TrunkPiece {
                                parts: vec![Moe],
                                start: 0,
                                len: half,
                            },
                        ]
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect();
        (f, reads)
    }

    fn trunk(
        name: &str,
        sizes: &[usize],
        pinned: &[bool],
        ring: usize,
        cut: bool,
        depth: usize,
    ) -> StreamedTrunk {
        let (_f, reads) = file_with_layers(name, sizes, cut);
        let io = Arc::new(IoThreads::new(1).unwrap());
        let tio = Arc::new(IoThreads::new(1).unwrap());
        let tables = Tables::resident(1, 1, vec![0], None);
        let rc = RingConfig {
            slots: ring,
            io_depth: depth,
        };
        StreamedTrunk::new(reads, pinned, rc, tables, io, tio, None).unwrap()
    }

    static LOADED: std::sync::Mutex<Vec<(usize, usize, u64)>> = std::sync::Mutex::new(Vec::new());
    fn record(done: usize, total: usize, bytes: u64) {
        LOADED.lock().unwrap().push((done, total, bytes));
    }

    #[test]
    fn each_pinned_layer_read_is_told_with_the_bytes_so_far() {
        let (_f, reads) = file_with_layers("loaded", &[4096, 8192, 2048], false);
        let io = Arc::new(IoThreads::new(1).unwrap());
        let tio = Arc::new(IoThreads::new(1).unwrap());
        let tables = Tables::resident(1, 1, vec![0], None);
        let pinned = [true, false, true];
        let rc = RingConfig {
            slots: 1,
            io_depth: 1,
        };
        StreamedTrunk::new(reads, &pinned, rc, tables, io, tio, Some(record)).unwrap();
        assert_eq!(*LOADED.lock().unwrap(), vec![(1, 2, 4096), (2, 2, 6144)]);
    }

    /// Asks for layer `l`'s parts in forward order; every element must be its own.
    fn check(t: &mut StreamedTrunk, l: usize, n: usize) {
        let mut seen = vec![false; n / 2];
        for part in [Attn, Moe] {
            let b = t.layer_part(l, part).unwrap();
            assert!(b.base + b.data.len() <= n / 2, "layer {l} {part:?}");
            for (i, &x) in b.data.iter().enumerate() {
                assert_eq!(
                    x,
                    (1000 * l + b.base + i) as u16,
                    "layer {l} has other bytes"
                );
                seen[b.base + i] = true;
            }
        }
        assert!(
            seen.iter().all(|&s| s),
            "layer {l}: parts do not cover the layer"
        );
    }

    #[test]
    fn walk_in_order_reads_ahead_and_any_order_gets_the_right_bytes() {
        let sizes = [4096 * 3 + 10, 2000, 7000, 50, 4096 * 5];
        let pinned = [true, false, false, true, false];
        for (cut, depth) in [(false, 1), (true, 1), (true, 3)] {
            for ring in [1, 2, 3] {
                let tag = format!("walk{ring}{cut}{depth}");
                let mut t = trunk(&tag, &sizes, &pinned, ring, cut, depth);
                let per = if cut { 2 } else { 1 }; // pieces per streamed layer
                for _ in 0..3 {
                    for (l, &n) in sizes.iter().enumerate() {
                        check(&mut t, l, n);
                    }
                }
                let s = t.stats();
                assert_eq!(s.binds, 30, "{tag}");
                assert_eq!(s.reads + s.hits, 30, "{tag}: {s:?}");
                let walks = if ring >= 3 * per { 1 } else { 3 }; // all in the ring: no rereads
                assert_eq!(s.reads, (walks * 3 * per) as u64, "{tag}: {s:?}");
                if ring == 1 {
                    assert_eq!(s.reads_ahead, 0);
                } else {
                    assert_eq!(s.reads_ahead, s.reads - 1, "{tag}: {s:?}");
                }
                // out of order and repeated: stale read-ahead is discarded, never returned
                for &l in &[4, 1, 1, 2, 4, 0, 2, 1, 3, 4] {
                    check(&mut t, l, sizes[l]);
                }
            }
        }
    }

    #[test]
    fn a_failed_read_fails_the_bind_and_returns_the_slot() {
        let sizes = [1000, 1000, 1000];
        for cut in [false, true] {
            let (f, mut reads) = file_with_layers(&format!("fail{cut}"), &sizes, cut);
            // layer 1 points past the end of the file
            if let LayerBytes::Raw(x) = &mut reads[1].bytes_at {
                x[0].offset = f.len_at_open() + 10;
            }
            let io = Arc::new(IoThreads::new(1).unwrap());
            let tio = Arc::new(IoThreads::new(1).unwrap());
            let tables = Tables::resident(1, 1, vec![0], None);
            let rc = RingConfig {
                slots: 2,
                io_depth: 2,
            };
            let mut t = StreamedTrunk::new(reads, &[false; 3], rc, tables, io, tio, None).unwrap();
            check(&mut t, 0, 1000);
            let e = t.layer_part(1, Attn).unwrap_err();
            assert_eq!(e.exit_code(), 4, "{e}");
            assert!(e.message.contains("trunk layer 1"), "{e}");
            // the ring still works for the other layers
            check(&mut t, 2, 1000);
            check(&mut t, 0, 1000);
        }
    }
}
