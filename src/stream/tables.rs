//! The model tables (`embed_tokens`, `lm_head`; MODEL.md §6.2, §6.8), resident, partly
//! resident or streamed (ENGINE.md §4: at the smallest budgets the released model keeps its
//! 4.70 GB of tables on disk).
//!
//! * lm_head: rows 0..R are held resident in one buffer (R = V: the whole table, R = 0:
//!   nothing), rows R..V are multiplied chunk by chunk through a few slots of `chunk_rows`
//!   rows, read on the tables' I/O thread. While a chunk is multiplied the next ones are
//!   being read; [`Tables::prefetch_lm_head`] starts the first reads while the layers compute.
//!   Every chunk holds the same bytes in every forward pass, so a chunk read ahead is never
//!   stale; a slot is refilled only after its chunk has been multiplied.
//! * embedding: resident, or each row read when a token needs it (one widened `O_DIRECT`
//!   window of H × 2 bytes). Tied (`tie_word_embeddings`), the embedding is the head: rows
//!   below R come from the resident prefix.
//!
//! Each logit is its own `dot`, so where a row comes from never changes a bit. Resident parts
//! are read at bind time straight into their final pre-faulted buffers by one widened direct
//! read each.

use crate::error::{Error, ErrorKind, Result};
use crate::io::{window_capacity, AlignedBuf, IoFile, IoThreads, ReadTicket};
use crate::model::weights::Bf16Mat;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

/// Moves a payload that landed at an odd offset of `buf` down by one byte so it can be viewed
/// as `u16` (only for a checkpoint whose data section starts at an odd offset); returns the
/// new (even) offset.
pub(crate) fn even_pad(buf: &mut AlignedBuf, pad: usize, len: usize) -> usize {
    if pad % 2 == 0 {
        pad
    } else {
        buf.copy_within(pad..pad + len, pad - 1);
        pad - 1
    }
}

/// Where a table is: the file and the absolute offset of row 0.
#[derive(Debug, Clone)]
pub struct TableLoc {
    pub file: Arc<IoFile>,
    pub offset: u64,
}

/// Model-table counters (FORMATS.md §10 `io`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TableStats {
    /// Bytes read for embedding rows (device bytes).
    pub embedding_bytes_read: u64,
    /// Bytes read for lm_head chunks (device bytes; every chunk read, counted when it lands).
    pub lm_head_bytes_read: u64,
    /// Seconds spent in those reads (on the I/O thread for lm_head chunks: they may overlap
    /// compute).
    pub read_seconds: f64,
}

/// How [`Tables::open`] holds the tables (the plan's [`crate::plan::TablesPlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TablesConfig {
    /// lm_head rows 0..R resident (clamped to V; tied: of the one table).
    pub head_resident_rows: usize,
    /// `embed_tokens` resident (ignored when tied).
    pub embed_resident: bool,
    /// Rows per streamed lm_head chunk (≥ 1).
    pub chunk_rows: usize,
    /// Chunk slots (≥ 1; 2 lets one chunk be read while another is multiplied).
    pub chunk_slots: usize,
}

/// Resident rows of a table: a test's `Vec`, or a bind-time direct read.
enum Rows {
    Vec(Vec<u16>),
    Buf {
        buf: AlignedBuf,
        pad: usize,
        /// `u16` values.
        n: usize,
    },
}

impl Rows {
    fn as_slice(&self) -> &[u16] {
        match self {
            Rows::Vec(v) => v,
            // Checked at construction (`read_rows`): the window holds pad + 2n bytes, pad even.
            Rows::Buf { buf, pad, n } => buf.u16s(*pad, *n).unwrap_or(&[]),
        }
    }
}

/// Reads rows `r0 .. r0 + n` of the [_, H] table at `loc` into a new pre-faulted buffer with
/// one widened direct read. A read failure is exit 2 naming `tensor` (found while binding).
fn read_rows(loc: &TableLoc, tensor: &str, h: usize, r0: usize, n: usize) -> Result<Rows> {
    let len = n
        .checked_mul(2 * h)
        .ok_or_else(|| Error::resources(format!("{tensor}: {n} rows overflow")))?;
    let cap = window_capacity(len)
        .ok_or_else(|| Error::resources(format!("{tensor}: {len} bytes overflow")))?;
    let mut buf = AlignedBuf::new(cap)?;
    let d = loc
        .file
        .read_window(loc.offset + (r0 * 2 * h) as u64, len, &mut buf)
        .map_err(|e| {
            if e.kind == ErrorKind::Io {
                Error::invalid(format!("{tensor}: {}", e.message))
            } else {
                e
            }
        })?;
    let pad = even_pad(&mut buf, d.pad, len);
    if buf.u16s(pad, len / 2).is_none() {
        return Err(Error::internal(format!(
            "{tensor}: misaligned table buffer"
        )));
    }
    Ok(Rows::Buf {
        buf,
        pad,
        n: len / 2,
    })
}

enum Slot {
    Free(AlignedBuf),
    /// Chunk `chunk` being read.
    Loading {
        chunk: usize,
        ticket: ReadTicket,
    },
    /// Chunk `chunk` complete at `pad`.
    Ready {
        chunk: usize,
        buf: AlignedBuf,
        pad: usize,
    },
    /// Transient while changing state (or lost after an I/O thread died).
    Gone,
}

/// The streamed rows R..V of the lm_head and their chunk slots.
struct HeadStream {
    loc: TableLoc,
    /// First streamed row (R).
    first: usize,
    v: usize,
    h: usize,
    chunk_rows: usize,
    slots: Vec<Slot>,
}

impl HeadStream {
    fn n_chunks(&self) -> usize {
        (self.v - self.first).div_ceil(self.chunk_rows)
    }

    /// Chunk k: (file offset, bytes, first row, rows).
    fn span(&self, k: usize) -> (u64, usize, usize, usize) {
        let r0 = self.first + k * self.chunk_rows;
        let nr = self.chunk_rows.min(self.v - r0);
        let row = 2 * self.h;
        (self.loc.offset + (r0 * row) as u64, nr * row, r0, nr)
    }

    fn slot_of(&self, k: usize) -> Option<usize> {
        self.slots.iter().position(|s| match s {
            Slot::Loading { chunk, .. } | Slot::Ready { chunk, .. } => *chunk == k,
            _ => false,
        })
    }

    /// Waits for slot `i`'s read: Ready with its counters added, or Free and the error (exit 4,
    /// naming the file, offset and chunk).
    fn settle(&mut self, i: usize, stats: &mut TableStats) -> Result<()> {
        if !matches!(self.slots[i], Slot::Loading { .. }) {
            return Ok(());
        }
        let Slot::Loading { chunk, ticket } = std::mem::replace(&mut self.slots[i], Slot::Gone)
        else {
            unreachable!()
        };
        let (buf, r) = ticket.wait_keep();
        let Some(mut buf) = buf else {
            return Err(r
                .err()
                .unwrap_or_else(|| Error::internal("I/O thread died")));
        };
        match r {
            Ok((d, secs)) => {
                stats.read_seconds += secs;
                stats.lm_head_bytes_read += d.device_bytes;
                let (_, len, ..) = self.span(chunk);
                let pad = even_pad(&mut buf, d.pad, len);
                self.slots[i] = Slot::Ready { chunk, buf, pad };
                Ok(())
            }
            Err(e) => {
                self.slots[i] = Slot::Free(buf);
                let (_, _, r0, nr) = self.span(chunk);
                Err(Error::new(
                    e.kind,
                    format!(
                        "{} (lm_head chunk {chunk}, rows {r0}..{})",
                        e.message,
                        r0 + nr
                    ),
                ))
            }
        }
    }

    /// A free slot, freeing one that holds a chunk outside `keep` if needed (waiting for its
    /// read to land: its bytes are counted, its error no longer matters).
    fn take_free(&mut self, keep: &Range<usize>, stats: &mut TableStats) -> Option<usize> {
        if let Some(i) = self.slots.iter().position(|s| matches!(s, Slot::Free(_))) {
            return Some(i);
        }
        let i = self.slots.iter().position(|s| match s {
            Slot::Loading { chunk, .. } | Slot::Ready { chunk, .. } => !keep.contains(chunk),
            _ => false,
        })?;
        let _ = self.settle(i, stats);
        if let Slot::Ready { .. } = self.slots[i] {
            let Slot::Ready { buf, .. } = std::mem::replace(&mut self.slots[i], Slot::Gone) else {
                unreachable!()
            };
            self.slots[i] = Slot::Free(buf);
        }
        matches!(self.slots[i], Slot::Free(_)).then_some(i)
    }

    /// Queues the reads of chunks `from .. from + slots` (those not already in a slot) into
    /// free slots.
    fn fill(&mut self, io: &IoThreads, from: usize, stats: &mut TableStats) {
        let want = from..(from + self.slots.len()).min(self.n_chunks());
        for k in want.clone() {
            if self.slot_of(k).is_some() {
                continue;
            }
            let Some(i) = self.take_free(&want, stats) else {
                return;
            };
            self.issue(io, i, k);
        }
    }

    /// Submits chunk `k`'s read into free slot `i`.
    fn issue(&mut self, io: &IoThreads, i: usize, k: usize) {
        let Slot::Free(buf) = std::mem::replace(&mut self.slots[i], Slot::Gone) else {
            unreachable!("issue into a slot that is not free")
        };
        let (off, len, ..) = self.span(k);
        let ticket = io.submit(Arc::clone(&self.loc.file), off, len, buf);
        self.slots[i] = Slot::Loading { chunk: k, ticket };
    }

    /// Multiplies every streamed chunk in ascending order, reading ahead through the slots.
    fn run(
        &mut self,
        io: &IoThreads,
        stats: &mut TableStats,
        f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>,
    ) -> Result<()> {
        let n = self.n_chunks();
        self.fill(io, 0, stats);
        for k in 0..n {
            let i = match self.slot_of(k) {
                Some(i) => i,
                None => {
                    let keep = k..k + self.slots.len();
                    let i = self.take_free(&keep, stats).ok_or_else(|| {
                        Error::internal(format!("lm_head chunk {k}: no slot available"))
                    })?;
                    self.issue(io, i, k);
                    i
                }
            };
            self.settle(i, stats)?;
            let (_, len, r0, nr) = self.span(k);
            let r = match &self.slots[i] {
                Slot::Ready { buf, pad, .. } => match buf.u16s(*pad, len / 2) {
                    Some(data) => f(
                        r0,
                        Bf16Mat {
                            rows: nr,
                            cols: self.h,
                            data,
                        },
                    ),
                    None => Err(Error::internal("lm_head chunk: misaligned buffer")),
                },
                _ => Err(Error::internal(format!(
                    "lm_head chunk {k}: slot not ready"
                ))),
            };
            if let Slot::Ready { .. } = self.slots[i] {
                let Slot::Ready { buf, .. } = std::mem::replace(&mut self.slots[i], Slot::Gone)
                else {
                    unreachable!()
                };
                self.slots[i] = Slot::Free(buf);
            }
            r?;
            // The slot just multiplied takes the next chunk at once: the I/O thread always
            // has a read queued.
            self.fill(io, k + 1, stats);
        }
        Ok(())
    }
}

/// The two [V, H] tables behind [`crate::model::TrunkSource::embed_row`] and
/// [`crate::model::TrunkSource::lm_head`].
pub struct Tables {
    h: usize,
    v: usize,
    tied: bool,
    /// `embed_tokens` resident (untied only).
    embed: Option<Rows>,
    /// Where embedding rows are read from when not resident (tied: the head).
    embed_loc: Option<TableLoc>,
    row_buf: Option<AlignedBuf>,
    /// lm_head rows 0..`head_rows` resident (tied: of the one table).
    head: Option<Rows>,
    head_rows: usize,
    /// Rows `head_rows`..V, streamed (None when every row is resident).
    stream: Option<HeadStream>,
    stats: TableStats,
}

impl Tables {
    /// Resident tables: `embed` [V, H] and `head` [V, H] (None when tied).
    pub fn resident(h: usize, v: usize, embed: Vec<u16>, head: Option<Vec<u16>>) -> Tables {
        let tied = head.is_none();
        let (embed, head) = match head {
            Some(hd) => (Some(Rows::Vec(embed)), Rows::Vec(hd)),
            None => (None, Rows::Vec(embed)),
        };
        Tables {
            h,
            v,
            tied,
            embed,
            embed_loc: None,
            row_buf: None,
            head: Some(head),
            head_rows: v,
            stream: None,
            stats: TableStats::default(),
        }
    }

    /// Binds the tables as `conf` says: the resident lm_head prefix and (untied, if asked)
    /// the embedding table read now, each by one widened direct read into its own pre-faulted
    /// buffer; the chunk slots and the embedding row window allocated (and faulted in) now.
    /// `head` is None when tied (the head is `embed`).
    ///
    /// Errors: exit 3 if memory is refused; a read failure is exit 2 naming the tensor (found
    /// while loading, before the run).
    pub fn open(
        h: usize,
        v: usize,
        embed: TableLoc,
        head: Option<TableLoc>,
        conf: &TablesConfig,
    ) -> Result<Tables> {
        use crate::catalogue::{EMBED_TOKENS, LM_HEAD};
        let tied = head.is_none();
        let (head_loc, head_name) = match head {
            Some(l) => (l, LM_HEAD),
            None => (embed.clone(), EMBED_TOKENS),
        };
        let r = conf.head_resident_rows.min(v);
        let stream = if r < v {
            let chunk_rows = conf.chunk_rows.clamp(1, v - r);
            let cap = window_capacity(2 * h * chunk_rows)
                .ok_or_else(|| Error::resources("lm_head chunk size overflows"))?;
            let slots = (0..conf.chunk_slots.max(1))
                .map(|_| AlignedBuf::new(cap).map(Slot::Free))
                .collect::<Result<Vec<_>>>()?;
            Some(HeadStream {
                loc: head_loc.clone(),
                first: r,
                v,
                h,
                chunk_rows,
                slots,
            })
        } else {
            None
        };
        let head_rows = if r > 0 {
            Some(read_rows(&head_loc, head_name, h, 0, r)?)
        } else {
            None
        };
        let embed_res = if !tied && conf.embed_resident {
            Some(read_rows(&embed, EMBED_TOKENS, h, 0, v)?)
        } else {
            None
        };
        let reads_rows = embed_res.is_none() && !(tied && r == v);
        let row_buf = if reads_rows {
            let cap = window_capacity(2 * h)
                .ok_or_else(|| Error::resources("embedding row size overflows"))?;
            Some(AlignedBuf::new(cap)?)
        } else {
            None
        };
        Ok(Tables {
            h,
            v,
            tied,
            embed: embed_res,
            embed_loc: reads_rows.then_some(embed),
            row_buf,
            head: head_rows,
            head_rows: r,
            stream,
            stats: TableStats::default(),
        })
    }

    /// True when anything of the tables is read during the run.
    pub fn is_streamed(&self) -> bool {
        self.stream.is_some() || self.embed_loc.is_some()
    }

    /// lm_head rows held resident (a prefix; V when the whole table is).
    pub fn head_resident_rows(&self) -> usize {
        self.head_rows
    }

    /// Counters so far.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Row `id` of `embed_tokens` (H values). Errors: a read failure (exit 4), an id ≥ V
    /// (exit 1: the forward pass checks ids first).
    pub fn embed_row(&mut self, _io: &IoThreads, id: usize) -> Result<&[u16]> {
        let (h, v) = (self.h, self.v);
        if id >= v {
            return Err(Error::internal(format!(
                "embedding row {id} outside the table"
            )));
        }
        if let Some(e) = &self.embed {
            return Ok(&e.as_slice()[id * h..(id + 1) * h]);
        }
        if self.tied && id < self.head_rows {
            if let Some(hd) = &self.head {
                return Ok(&hd.as_slice()[id * h..(id + 1) * h]);
            }
        }
        let (Some(loc), Some(row_buf)) = (&self.embed_loc, &mut self.row_buf) else {
            return Err(Error::internal(format!(
                "embedding row {id}: neither resident nor readable"
            )));
        };
        let t0 = Instant::now();
        let off = loc.offset + (id * 2 * h) as u64;
        let d = loc
            .file
            .read_window(off, 2 * h, row_buf)
            .map_err(|e| Error::new(e.kind, format!("{} (embedding row {id})", e.message)))?;
        self.stats.read_seconds += t0.elapsed().as_secs_f64();
        self.stats.embedding_bytes_read += d.device_bytes;
        let pad = even_pad(row_buf, d.pad, 2 * h);
        row_buf
            .u16s(pad, h)
            .ok_or_else(|| Error::internal("embedding row: misaligned buffer"))
    }

    /// Starts reading the first streamed lm_head chunks (as many as there are slots) on `io`,
    /// so that they are in their slots when [`Tables::lm_head`] is called after the layers.
    /// A no-op when the whole lm_head is resident or the chunks are already on their way.
    /// Never changes a value: a chunk holds the same bytes in every forward pass.
    pub fn prefetch_lm_head(&mut self, io: &IoThreads) {
        if let Some(st) = &mut self.stream {
            st.fill(io, 0, &mut self.stats);
        }
    }

    /// Calls `f(first_row, block)` over the lm_head in ascending row blocks: the resident
    /// prefix as one block, then each streamed chunk. Errors: a read failure (exit 4, naming
    /// the file, offset and chunk) or `f`'s error.
    pub fn lm_head(
        &mut self,
        io: &IoThreads,
        f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>,
    ) -> Result<()> {
        // The first chunks are read while the resident prefix is multiplied.
        self.prefetch_lm_head(io);
        if let Some(hd) = &self.head {
            let data = hd.as_slice();
            f(
                0,
                Bf16Mat {
                    rows: self.head_rows,
                    cols: self.h,
                    data: &data[..self.head_rows * self.h],
                },
            )?;
        }
        match &mut self.stream {
            Some(st) => st.run(io, &mut self.stats, f),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A [V, H] table at an odd-ish offset of a temp file, value of (r, c) = 7·r + c (mod 2^16),
    /// preceded by `lead` bytes.
    fn table_file(name: &str, v: usize, h: usize, lead: usize) -> (TableLoc, Vec<u16>) {
        let path = std::env::temp_dir().join(format!("k3_tables_{name}_{}", std::process::id()));
        let mut bytes = vec![0xAB; lead];
        let mut vals = Vec::with_capacity(v * h);
        for r in 0..v {
            for c in 0..h {
                let x = (7 * r + c) as u16;
                vals.push(x);
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        bytes.extend_from_slice(&[0xCD; 100]);
        std::fs::write(&path, &bytes).unwrap();
        let file = Arc::new(IoFile::open(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        (
            TableLoc {
                file,
                offset: lead as u64,
            },
            vals,
        )
    }

    /// Collects the lm_head as the forward sees it: (first row, rows) blocks and the values.
    fn collect(t: &mut Tables, io: &IoThreads) -> (Vec<(usize, usize)>, Vec<u16>) {
        let mut blocks = Vec::new();
        let mut vals = Vec::new();
        t.lm_head(io, &mut |r0, w| {
            assert_eq!(r0 * w.cols, vals.len(), "blocks in ascending order");
            blocks.push((r0, w.rows));
            vals.extend_from_slice(w.data);
            Ok(())
        })
        .unwrap();
        (blocks, vals)
    }

    #[test]
    fn every_split_of_the_lm_head_gives_the_same_rows() {
        let (v, h) = (37, 12);
        let io = IoThreads::new(1).unwrap();
        for lead in [0usize, 6, 4096, 4097] {
            let (eloc, evals) = table_file(&format!("e{lead}"), v, h, lead);
            let (hloc, hvals) = table_file(&format!("h{lead}"), v, h, lead + 10);
            for tied in [false, true] {
                let want = if tied { &evals } else { &hvals };
                for r in [0, 1, 5, 36, 37] {
                    for (chunk_rows, slots) in [(4, 2), (5, 3), (37, 1), (1, 2)] {
                        for embed_resident in [false, true] {
                            let conf = TablesConfig {
                                head_resident_rows: r,
                                embed_resident,
                                chunk_rows,
                                chunk_slots: slots,
                            };
                            let head = (!tied).then(|| hloc.clone());
                            let mut t = Tables::open(h, v, eloc.clone(), head, &conf).unwrap();
                            let what = format!("lead {lead} tied {tied} R {r} chunk {chunk_rows}×{slots} embed {embed_resident}");
                            for pass in 0..3 {
                                if pass == 1 {
                                    t.prefetch_lm_head(&io);
                                }
                                let (blocks, vals) = collect(&mut t, &io);
                                assert_eq!(&vals, want, "{what} pass {pass}");
                                assert_eq!(blocks[0].0, 0, "{what}");
                                if r > 0 {
                                    assert_eq!(blocks[0], (0, r), "{what}");
                                }
                            }
                            // counters: every streamed byte read once per pass (device bytes
                            // are widened windows, so at least the payload)
                            let s = t.stats();
                            assert!(
                                s.lm_head_bytes_read >= 3 * ((v - r) * 2 * h) as u64,
                                "{what}: {s:?}"
                            );
                            if r == v {
                                assert_eq!(s.lm_head_bytes_read, 0, "{what}");
                            }
                            for id in [0, 4, 36] {
                                let row = t.embed_row(&io, id).unwrap().to_vec();
                                assert_eq!(row, evals[id * h..(id + 1) * h], "{what} row {id}");
                            }
                            let e = t.stats().embedding_bytes_read;
                            let reads_rows = if tied { r < v } else { !embed_resident };
                            assert_eq!(e > 0, reads_rows, "{what}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_failed_chunk_read_fails_the_lm_head_with_exit_4_and_the_next_call_recovers() {
        let (v, h) = (20, 8);
        let io = IoThreads::new(1).unwrap();
        let (eloc, evals) = table_file("fail", v, h, 0);
        let conf = TablesConfig {
            head_resident_rows: 6,
            embed_resident: false,
            chunk_rows: 4,
            chunk_slots: 2,
        };
        // A head "table" that runs past the end of the file: its last chunk cannot be read.
        let bad = TableLoc {
            file: Arc::clone(&eloc.file),
            offset: 2 * h as u64 * 10,
        };
        let mut t = Tables::open(h, v, eloc.clone(), Some(bad), &conf).unwrap();
        t.prefetch_lm_head(&io);
        let e = t.lm_head(&io, &mut |_, _| Ok(())).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        assert!(
            e.message.contains("offset") && e.message.contains("lm_head chunk"),
            "{e}"
        );
        // An error from the multiply leaves the slots usable.
        let mut t = Tables::open(h, v, eloc.clone(), Some(eloc.clone()), &conf).unwrap();
        let e = t
            .lm_head(&io, &mut |r0, _| {
                if r0 >= 10 {
                    Err(Error::invalid("stop"))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert_eq!(e.message, "stop");
        t.prefetch_lm_head(&io);
        let (_, vals) = collect(&mut t, &io);
        assert_eq!(vals, evals);
        // A streamed embedding row that cannot be read names the row as well as file and
        // offset, as a chunk names its rows.
        let bad = TableLoc {
            file: Arc::clone(&eloc.file),
            offset: 1 << 20,
        };
        let mut t = Tables::open(h, v, bad, Some(eloc.clone()), &conf).unwrap();
        let e = t.embed_row(&io, 15).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        assert!(
            e.message.contains("offset") && e.message.contains("(embedding row 15)"),
            "{e}"
        );
    }

    /// The direct read into one pre-faulted buffer gives the bytes the old element-by-element
    /// loader (`Reader::read_table_u16`) gave: the little-endian u16 of each pair.
    #[test]
    fn resident_tables_hold_the_file_bytes() {
        let (v, h) = (300, 64);
        let io = IoThreads::new(1).unwrap();
        for lead in [8usize, 4095, 12288] {
            let (eloc, evals) = table_file(&format!("res{lead}"), v, h, lead);
            let conf = TablesConfig {
                head_resident_rows: v,
                embed_resident: true,
                chunk_rows: 10,
                chunk_slots: 2,
            };
            let mut t = Tables::open(h, v, eloc.clone(), Some(eloc.clone()), &conf).unwrap();
            assert!(!t.is_streamed());
            let (blocks, vals) = collect(&mut t, &io);
            assert_eq!(blocks, [(0, v)]);
            assert_eq!(vals, evals);
            assert_eq!(t.embed_row(&io, 299).unwrap(), &evals[299 * h..]);
            assert_eq!(t.stats(), TableStats::default());
        }
    }
}
