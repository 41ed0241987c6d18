//! The model tables (`embed_tokens`, `lm_head`; MODEL.md §6.2, §6.8), resident or streamed
//! (ENGINE.md §4: at the smallest budgets the released model keeps its 4.70 GB of tables on
//! disk).
//!
//! Streamed, each embedding row is read when a token needs it (one widened `O_DIRECT` window
//! of H × 2 bytes), and the lm_head is multiplied chunk by chunk through two slots of
//! `chunk_rows` rows: chunk k+1 is read on the I/O thread while chunk k is multiplied. Each
//! logit is its own `dot`, so chunking the rows never changes a bit.

use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, IoFile, IoThreads};
use crate::model::weights::Bf16Mat;
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
    /// Bytes read for lm_head chunks (device bytes).
    pub lm_head_bytes_read: u64,
    /// Seconds spent in those reads.
    pub read_seconds: f64,
}

enum Store {
    Resident {
        embed: Vec<u16>,
        head: Option<Vec<u16>>,
    },
    Streamed {
        embed: TableLoc,
        /// None when tied (the head is the embedding table).
        head: Option<TableLoc>,
        chunk_rows: usize,
        row_buf: AlignedBuf,
        /// The two chunk slots (None only while a read holds one).
        chunks: [Option<AlignedBuf>; 2],
    },
}

/// The two [V, H] tables behind [`crate::model::TrunkSource::embed_row`] and
/// [`crate::model::TrunkSource::lm_head`].
pub struct Tables {
    h: usize,
    v: usize,
    store: Store,
    stats: TableStats,
}

impl Tables {
    /// Resident tables: `embed` [V, H] and `head` [V, H] (None when tied).
    pub fn resident(h: usize, v: usize, embed: Vec<u16>, head: Option<Vec<u16>>) -> Tables {
        Tables {
            h,
            v,
            store: Store::Resident { embed, head },
            stats: TableStats::default(),
        }
    }

    /// Streamed tables: a row window and two chunk slots of `chunk_rows` rows, allocated and
    /// faulted in now (exit 3 if refused).
    pub fn streamed(
        h: usize,
        v: usize,
        embed: TableLoc,
        head: Option<TableLoc>,
        chunk_rows: usize,
    ) -> Result<Tables> {
        let chunk_rows = chunk_rows.clamp(1, v.max(1));
        let cap = |n: usize| {
            window_capacity(n).ok_or_else(|| Error::resources("table chunk size overflows"))
        };
        let row_buf = AlignedBuf::new(cap(2 * h)?)?;
        let chunks = [
            Some(AlignedBuf::new(cap(2 * h * chunk_rows)?)?),
            Some(AlignedBuf::new(cap(2 * h * chunk_rows)?)?),
        ];
        Ok(Tables {
            h,
            v,
            store: Store::Streamed {
                embed,
                head,
                chunk_rows,
                row_buf,
                chunks,
            },
            stats: TableStats::default(),
        })
    }

    /// True when streamed.
    pub fn is_streamed(&self) -> bool {
        matches!(self.store, Store::Streamed { .. })
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
        match &mut self.store {
            Store::Resident { embed, .. } => Ok(&embed[id * h..(id + 1) * h]),
            Store::Streamed { embed, row_buf, .. } => {
                let t0 = Instant::now();
                let off = embed.offset + (id * 2 * h) as u64;
                let d = embed.file.read_window(off, 2 * h, row_buf)?;
                self.stats.read_seconds += t0.elapsed().as_secs_f64();
                self.stats.embedding_bytes_read += d.device_bytes;
                let pad = even_pad(row_buf, d.pad, 2 * h);
                row_buf
                    .u16s(pad, h)
                    .ok_or_else(|| Error::internal("embedding row: misaligned buffer"))
            }
        }
    }

    /// Calls `f(first_row, block)` over the lm_head in ascending row blocks (the whole table
    /// at once when resident). Errors: a read failure (exit 4) or `f`'s error.
    pub fn lm_head(
        &mut self,
        io: &IoThreads,
        f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>,
    ) -> Result<()> {
        let (h, v) = (self.h, self.v);
        match &mut self.store {
            Store::Resident { embed, head } => {
                let data = head.as_deref().unwrap_or(embed);
                f(
                    0,
                    Bf16Mat {
                        rows: v,
                        cols: h,
                        data,
                    },
                )
            }
            Store::Streamed {
                embed,
                head,
                chunk_rows,
                chunks,
                ..
            } => {
                let loc = head.as_ref().unwrap_or(embed).clone();
                let rows = *chunk_rows;
                let row = 2 * h;
                let n = v.div_ceil(rows);
                let span = |k: usize| {
                    let r0 = k * rows;
                    let nr = rows.min(v - r0);
                    (loc.offset + (r0 * row) as u64, nr * row, r0, nr)
                };
                let stats = &mut self.stats;
                let mut cur = chunks[0]
                    .take()
                    .ok_or_else(|| Error::internal("lm_head chunk slot lost"))?;
                let (off0, len0, ..) = span(0);
                let t0 = Instant::now();
                let first = loc.file.read_window(off0, len0, &mut cur);
                stats.read_seconds += t0.elapsed().as_secs_f64();
                let mut done = match first {
                    Ok(d) => d,
                    Err(e) => {
                        chunks[0] = Some(cur);
                        return Err(e);
                    }
                };
                stats.lm_head_bytes_read += done.device_bytes;
                for k in 0..n {
                    let (_, len, r0, nr) = span(k);
                    let ticket = if k + 1 < n {
                        let (off, l, ..) = span(k + 1);
                        let buf = chunks[1]
                            .take()
                            .ok_or_else(|| Error::internal("lm_head chunk slot lost"))?;
                        Some(io.submit(Arc::clone(&loc.file), off, l, buf))
                    } else {
                        None
                    };
                    let pad = even_pad(&mut cur, done.pad, len);
                    let r = match cur.u16s(pad, len / 2) {
                        Some(data) => f(
                            r0,
                            Bf16Mat {
                                rows: nr,
                                cols: h,
                                data,
                            },
                        ),
                        None => Err(Error::internal("lm_head chunk: misaligned buffer")),
                    };
                    let Some(ticket) = ticket else {
                        chunks[0] = Some(cur);
                        return r;
                    };
                    let (next, res) = ticket.wait_keep();
                    let Some(next) = next else {
                        chunks[0] = Some(cur);
                        return Err(res
                            .err()
                            .unwrap_or_else(|| Error::internal("I/O thread died")));
                    };
                    if let Err(e) = r {
                        chunks[0] = Some(cur);
                        chunks[1] = Some(next);
                        return Err(e);
                    }
                    match res {
                        Ok((d, secs)) => {
                            stats.read_seconds += secs;
                            stats.lm_head_bytes_read += d.device_bytes;
                            done = d;
                            chunks[1] = Some(cur);
                            cur = next;
                        }
                        Err(e) => {
                            chunks[0] = Some(cur);
                            chunks[1] = Some(next);
                            return Err(e);
                        }
                    }
                }
                chunks[0] = Some(cur);
                Ok(())
            }
        }
    }
}
