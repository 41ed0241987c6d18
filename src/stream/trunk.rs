//! The streamed trunk (ENGINE.md §4–§5): a pinned set of layers held resident and a ring of
//! slots, each sized to the largest streamed layer, through which the other layers cycle.
//!
//! * With two or more slots, when layer ℓ is handed to the forward pass the I/O thread is
//!   already reading the next streamed layer (in walk order, wrapping to the next forward
//!   pass) into a free slot, straight into its pre-faulted 4096-aligned buffer; with one slot
//!   reads are synchronous.
//! * A slot is never refilled while in use: the buffer returned by
//!   [`TrunkSource::layer_buf`] borrows the trunk, so the next call — which may recycle that
//!   slot — cannot happen while the forward pass still holds it.
//! * A half-loaded slot is never used: a slot becomes readable only when its read returned
//!   the whole payload; a failed read fails the forward (exit 4, naming file and offset) and
//!   the slot goes back to the free list.
//!
//! The bytes come from the shards (one run per layer, or tensor by tensor when a layer's trunk
//! is not contiguous) or from a packed `trunk.bin` (FORMATS.md §7): the layer buffer is the same
//! either way, so the forward pass cannot tell. The model tables come through [`Tables`].

use super::tables::{even_pad, TableStats, Tables};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{window_capacity, AlignedBuf, Extent, IoFile, IoThreads, ReadTicket};
use crate::model::weights::Bf16Mat;
use crate::model::TrunkSource;
use std::sync::Arc;
use std::time::Instant;

/// How to fill one layer's buffer.
#[derive(Debug, Clone)]
pub struct LayerRead {
    /// Zero-based layer (for messages).
    pub layer: usize,
    /// Bytes of the layer buffer.
    pub bytes: usize,
    /// The pieces, back to back in the buffer from byte 0; a single piece covering the buffer
    /// (a contiguous run, or a packed run) is one widened direct read and can be read ahead.
    pub pieces: Vec<Extent<Arc<IoFile>>>,
}

impl LayerRead {
    /// True when the buffer is one direct read (read-ahead capable).
    pub fn is_run(&self) -> bool {
        self.pieces.len() == 1 && self.pieces[0].len == self.bytes
    }

    /// Buffer capacity this layer needs (the widened window of its run).
    pub fn capacity(&self) -> usize {
        window_capacity(self.bytes).unwrap_or(usize::MAX)
    }

    /// Reads the layer into `buf` on the calling thread; returns the payload offset (even)
    /// and the device bytes.
    fn read_into(&self, buf: &mut AlignedBuf) -> Result<(usize, u64)> {
        if self.is_run() {
            let p = &self.pieces[0];
            let d = p.file.read_window(p.offset, p.len, buf)?;
            Ok((even_pad(buf, d.pad, p.len), d.device_bytes))
        } else {
            let mut dev = 0u64;
            let mut dest = 0usize;
            for p in &self.pieces {
                p.file
                    .read_uncached_at(&mut buf[dest..dest + p.len], p.offset)?;
                dest += p.len;
                dev += p.len as u64;
            }
            Ok((0, dev))
        }
    }
}

/// Counters of the trunk report (ENGINE.md §6, FORMATS.md §10 `trunk`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrunkStats {
    /// Layer buffers handed to the forward pass.
    pub binds: u64,
    /// Of those, served without a read made for them (pinned, or still in its slot).
    pub hits: u64,
    /// Layer reads.
    pub reads: u64,
    /// Of those, made ahead on the I/O thread while an earlier layer computed.
    pub reads_ahead: u64,
    /// Bytes transferred from the device for layers.
    pub bytes_read: u64,
    /// Seconds the reads took (on the I/O thread for read-ahead; may overlap compute).
    pub read_seconds: f64,
    /// Seconds the forward pass waited for layer reads.
    pub wait_seconds: f64,
}

enum Slot {
    /// No layer (buffer free).
    Free(AlignedBuf),
    /// A read-ahead in flight.
    Loading { layer: usize, ticket: ReadTicket },
    /// A complete layer at `pad`; `used` once handed to the forward pass (a later bind of the
    /// same layer from this slot is then a hit: no read was made for it).
    Ready {
        layer: usize,
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
    Streamed(LayerRead),
}

/// The trunk source of a streamed run: pinned layers, the ring, and the model tables.
pub struct StreamedTrunk {
    entries: Vec<Entry>,
    ring: Vec<Slot>,
    /// The slot handed out last (in use until the next call).
    current: Option<usize>,
    io: Arc<IoThreads>,
    tables: Tables,
    /// The tables' own reader: an lm_head chunk must not queue behind a layer read-ahead.
    table_io: Arc<IoThreads>,
    stats: TrunkStats,
    slot_bytes: usize,
}

impl StreamedTrunk {
    /// Builds the trunk: reads every pinned layer now into its own pre-faulted buffer, and
    /// allocates (and faults in) `ring_slots` slots of the largest streamed layer's buffer.
    /// Layer read-ahead runs on `io`; streamed model tables read on `table_io`.
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
        ring_slots: usize,
        tables: Tables,
        io: Arc<IoThreads>,
        table_io: Arc<IoThreads>,
        loaded: Option<fn(usize, usize, u64)>,
    ) -> Result<StreamedTrunk> {
        let slot_bytes = layers
            .iter()
            .zip(pinned)
            .filter(|(_, p)| !**p)
            .map(|(l, _)| l.capacity())
            .max()
            .unwrap_or(0);
        if slot_bytes > 0 && ring_slots == 0 {
            return Err(Error::internal("streamed trunk layers without a ring slot"));
        }
        let mut entries = Vec::with_capacity(layers.len());
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
                entries.push(Entry::Streamed(l));
            }
        }
        let ring = if slot_bytes > 0 {
            (0..ring_slots)
                .map(|_| AlignedBuf::new(slot_bytes).map(Slot::Free))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(StreamedTrunk {
            entries,
            ring,
            current: None,
            io,
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

    /// The streamed layers after `l` in walk order (wrapping), at most `n`.
    fn upcoming(&self, l: usize, n: usize) -> Vec<usize> {
        let nl = self.entries.len();
        (1..=nl)
            .map(|k| (l + k) % nl)
            .filter(|&x| matches!(self.entries[x], Entry::Streamed(_)))
            .take(n)
            .collect()
    }

    fn slot_of(&self, layer: usize) -> Option<usize> {
        self.ring.iter().position(|s| match s {
            Slot::Loading { layer: x, .. } | Slot::Ready { layer: x, .. } => *x == layer,
            _ => false,
        })
    }

    /// Waits for slot `i`'s read-ahead; leaves it Ready or Free (on error, returned).
    fn settle(&mut self, i: usize) -> Result<()> {
        if let Slot::Loading { .. } = self.ring[i] {
            let Slot::Loading { layer, ticket } = std::mem::replace(&mut self.ring[i], Slot::Gone)
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
                    let len = match &self.entries[layer] {
                        Entry::Streamed(lr) => lr.bytes,
                        Entry::Pinned { .. } => 0,
                    };
                    let pad = even_pad(&mut buf, done.pad, len);
                    self.ring[i] = Slot::Ready {
                        layer,
                        buf,
                        pad,
                        used: false,
                    };
                }
                Err(e) => {
                    self.ring[i] = Slot::Free(buf);
                    return Err(Error::new(
                        e.kind,
                        format!("{} (trunk layer {layer})", e.message),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A slot that may be (re)filled now: free, or holding a layer not among `keep`, never
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
                    Slot::Ready { layer, .. } | Slot::Loading { layer, .. } => {
                        !keep.contains(layer)
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

    /// Queues read-ahead of the streamed layers after `l` into free slots (ring ≥ 2).
    fn read_ahead(&mut self, l: usize) {
        let want = self.upcoming(l, self.ring.len().saturating_sub(1));
        for &x in &want {
            if self.slot_of(x).is_some() {
                continue;
            }
            let Entry::Streamed(lr) = &self.entries[x] else {
                continue;
            };
            if !lr.is_run() {
                continue; // read synchronously when asked
            }
            let (file, offset, len) = (
                Arc::clone(&lr.pieces[0].file),
                lr.pieces[0].offset,
                lr.pieces[0].len,
            );
            let Some(i) = self.take_slot(&want) else {
                return;
            };
            let Slot::Free(buf) = std::mem::replace(&mut self.ring[i], Slot::Gone) else {
                unreachable!()
            };
            let ticket = self.io.submit(file, offset, len, buf);
            self.ring[i] = Slot::Loading { layer: x, ticket };
        }
    }

    /// Makes layer `l` (streamed) Ready in some slot; returns the slot.
    fn load(&mut self, l: usize) -> Result<usize> {
        if let Some(i) = self.slot_of(l) {
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
        let keep = self.upcoming(l, self.ring.len().saturating_sub(1));
        let i = self
            .take_slot(&keep)
            .or_else(|| self.take_slot(&[]))
            .ok_or_else(|| Error::internal(format!("trunk layer {l}: no ring slot available")))?;
        let Slot::Free(mut buf) = std::mem::replace(&mut self.ring[i], Slot::Gone) else {
            unreachable!()
        };
        let Entry::Streamed(lr) = &self.entries[l] else {
            unreachable!()
        };
        let t0 = Instant::now();
        let r = lr.read_into(&mut buf);
        let secs = t0.elapsed().as_secs_f64();
        self.stats.read_seconds += secs;
        self.stats.wait_seconds += secs;
        match r {
            Ok((pad, dev)) => {
                self.stats.reads += 1;
                self.stats.bytes_read += dev;
                self.ring[i] = Slot::Ready {
                    layer: l,
                    buf,
                    pad,
                    used: true,
                };
                Ok(i)
            }
            Err(e) => {
                self.ring[i] = Slot::Free(buf);
                Err(Error::new(
                    e.kind,
                    format!("{} (trunk layer {l})", e.message),
                ))
            }
        }
    }
}

impl TrunkSource for StreamedTrunk {
    fn layer_buf(&mut self, l: usize) -> Result<&[u16]> {
        self.stats.binds += 1;
        let i = match self.entries.get(l) {
            None => return Err(Error::internal(format!("layer {l} is not bound"))),
            Some(Entry::Pinned { .. }) => {
                self.stats.hits += 1;
                None
            }
            Some(Entry::Streamed(_)) => {
                let i = self.load(l)?;
                self.current = Some(i);
                self.read_ahead(l);
                Some(i)
            }
        };
        let (buf, pad, n) = match (i, &self.entries[l]) {
            (None, Entry::Pinned { buf, pad, n }) => (buf, *pad, *n),
            (Some(i), Entry::Streamed(lr)) => match &self.ring[i] {
                Slot::Ready { buf, pad, .. } => (buf, *pad, lr.bytes / 2),
                _ => return Err(Error::internal(format!("trunk layer {l}: slot not ready"))),
            },
            _ => unreachable!(),
        };
        buf.u16s(pad, n)
            .ok_or_else(|| Error::internal(format!("trunk layer {l}: misaligned buffer")))
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
            .field("ring", &self.ring.len())
            .field("slot_bytes", &self.slot_bytes)
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` layers of `sizes[l]` bytes in one file, layer l filled with u16 value 1000·l + i.
    fn file_with_layers(name: &str, sizes: &[usize]) -> (Arc<IoFile>, Vec<LayerRead>) {
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
            .map(|(l, &n)| LayerRead {
                layer: l,
                bytes: n,
                pieces: vec![Extent {
                    file: Arc::clone(&f),
                    offset: offs[l],
                    len: n,
                }],
            })
            .collect();
        (f, reads)
    }

    fn trunk(name: &str, sizes: &[usize], pinned: &[bool], ring: usize) -> StreamedTrunk {
        let (_f, reads) = file_with_layers(name, sizes);
        let io = Arc::new(IoThreads::new(1).unwrap());
        let tio = Arc::new(IoThreads::new(1).unwrap());
        let tables = Tables::resident(1, 1, vec![0], None);
        StreamedTrunk::new(reads, pinned, ring, tables, io, tio, None).unwrap()
    }

    static LOADED: std::sync::Mutex<Vec<(usize, usize, u64)>> = std::sync::Mutex::new(Vec::new());
    fn record(done: usize, total: usize, bytes: u64) {
        LOADED.lock().unwrap().push((done, total, bytes));
    }

    #[test]
    fn each_pinned_layer_read_is_told_with_the_bytes_so_far() {
        let (_f, reads) = file_with_layers("loaded", &[4096, 8192, 2048]);
        let io = Arc::new(IoThreads::new(1).unwrap());
        let tio = Arc::new(IoThreads::new(1).unwrap());
        let tables = Tables::resident(1, 1, vec![0], None);
        let pinned = [true, false, true];
        StreamedTrunk::new(reads, &pinned, 1, tables, io, tio, Some(record)).unwrap();
        assert_eq!(*LOADED.lock().unwrap(), vec![(1, 2, 4096), (2, 2, 6144)]);
    }

    fn check(t: &mut StreamedTrunk, l: usize, n: usize) {
        let b = t.layer_buf(l).unwrap();
        assert_eq!(b.len(), n / 2, "layer {l}");
        assert!(
            b.iter()
                .enumerate()
                .all(|(i, &x)| x == (1000 * l + i) as u16),
            "layer {l} has another layer's bytes"
        );
    }

    #[test]
    fn walk_in_order_reads_ahead_and_any_order_gets_the_right_bytes() {
        let sizes = [4096 * 3 + 10, 2000, 7000, 50, 4096];
        let pinned = [true, false, false, true, false];
        for ring in [1, 2, 3] {
            let mut t = trunk(&format!("walk{ring}"), &sizes, &pinned, ring);
            for _ in 0..3 {
                for (l, &n) in sizes.iter().enumerate() {
                    check(&mut t, l, n);
                }
            }
            let s = t.stats();
            assert_eq!(s.binds, 15);
            assert_eq!(s.reads + s.hits, 15, "ring {ring}: {s:?}");
            if ring == 1 {
                assert_eq!(s.reads_ahead, 0);
            } else {
                assert_eq!(s.reads_ahead, s.reads - 1, "ring {ring}: {s:?}");
            }
            // out of order and repeated: stale read-ahead is discarded, never returned
            for &l in &[4, 1, 1, 2, 4, 0, 2, 1, 3, 4] {
                check(&mut t, l, sizes[l]);
            }
        }
    }

    #[test]
    fn a_failed_read_fails_the_bind_and_returns_the_slot() {
        let sizes = [1000, 1000, 1000];
        let (f, mut reads) = file_with_layers("fail", &sizes);
        // layer 1 points past the end of the file
        reads[1].pieces[0].offset = f.len_at_open() + 10;
        let io = Arc::new(IoThreads::new(1).unwrap());
        let tio = Arc::new(IoThreads::new(1).unwrap());
        let tables = Tables::resident(1, 1, vec![0], None);
        let mut t =
            StreamedTrunk::new(reads, &[false, false, false], 2, tables, io, tio, None).unwrap();
        check(&mut t, 0, 1000);
        let e = t.layer_buf(1).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        assert!(e.message.contains("trunk layer 1"), "{e}");
        // the ring still works for the other layers
        check(&mut t, 2, 1000);
        check(&mut t, 0, 1000);
    }
}
