//! The packed trunk's lossless codec (docs/formats.md, "Packed trunk with a codec"): a layer's
//! run cut into blocks that never straddle a tensor, each stored as it is or — for BF16 tensors —
//! with its exponents entropy-coded (`k3_kernels::codec`), at a 4096-aligned offset of
//! `trunk.bin`, so any run of whole blocks is one direct read.
//!
//! * [`CodedBlock`]: one block's place in the run and in `trunk.bin` (the per-block index of
//!   `trunk.json`);
//! * [`read_blocks`]: a run of blocks read and decoded into a layer buffer by several threads,
//!   each reading its share in batches into a staging buffer and decoding while the others
//!   read, so the disk and the decoders work at once;
//! * [`StagePool`]: the staging buffers and decoders, allocated (and counted in the memory plan)
//!   up front;
//! * [`probe`]: the decoders' speed against the disk's, measured when a run opens, so that the
//!   engine uses the codec only where decoding outruns the disk (ENGINE.md §5).
//!
//! Every coded block decodes to exactly the bytes that were packed (checked when packing), so
//! the forward pass gets the same bytes whichever way they arrive and no logit changes.

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoFile, ALIGN};
use k3_kernels::codec::Decoder;
use std::sync::Mutex;
use std::time::Instant;

/// The codec's name in `trunk.json` and on the command line (`k3 pack-trunk --codec`): BF16
/// values with their exponents Huffman-coded, sign and mantissa stored.
pub const CODEC_NAME: &str = "bf16-huffman";

/// Raw bytes of a block when packing (a tensor's last block may be shorter; a tensor smaller
/// than this is one block).
pub const BLOCK_BYTES: usize = 1 << 20;

/// The largest block a packed trunk may hold (raw bytes); larger ones are refused on open, so
/// that one block always fits a staging buffer.
pub const MAX_BLOCK_BYTES: u64 = 4 << 20;

/// Bytes of one staging buffer: the compressed batch a decode thread reads at once.
pub const STAGE_BYTES: usize = 8 << 20;

/// One block of a layer's run (FORMATS.md: `trunk.json` `blocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodedBlock {
    /// Byte offset of the block in the layer's run (and layer buffer).
    pub start: u64,
    /// Raw bytes.
    pub len: u64,
    /// Absolute offset in `trunk.bin` (a multiple of 4096).
    pub off: u64,
    /// Stored bytes: `len` for a block stored as it is, fewer for a coded one.
    pub clen: u64,
}

impl CodedBlock {
    /// True when the block is stored as it is (not coded).
    pub fn is_stored(&self) -> bool {
        self.clen == self.len
    }
    /// One past the block's last byte in the run.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// A staging buffer and a decoder: what one decode thread works with.
pub struct Stage {
    buf: AlignedBuf,
    dec: Decoder,
}

/// The staging buffers of coded reads: `n` of [`STAGE_BYTES`] (+ one page), allocated and
/// faulted in when the pool is made, lent to reads and given back.
pub struct StagePool {
    free: Mutex<Vec<Stage>>,
    /// Decode threads per read.
    threads: usize,
}

impl StagePool {
    /// Bytes of a pool for `threads` decode threads per read and `reads` reads at once (the
    /// trunk's I/O thread reading ahead and the forward's own thread): what the plan counts.
    pub fn bytes(threads: usize, reads: usize) -> u64 {
        (threads.max(1) * reads.max(1)) as u64 * (STAGE_BYTES + ALIGN) as u64
    }

    /// A pool for `threads` decode threads per read and `reads` concurrent reads.
    ///
    /// Errors: exit 3 when the memory is refused.
    pub fn new(threads: usize, reads: usize) -> Result<StagePool> {
        let threads = threads.max(1);
        let free = (0..threads * reads.max(1))
            .map(|_| {
                Ok(Stage {
                    buf: AlignedBuf::new(STAGE_BYTES + ALIGN)?,
                    dec: Decoder::new(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(StagePool {
            free: Mutex::new(free),
            threads,
        })
    }

    /// Decode threads per read.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Up to `n` stages (at least one: allocated if the pool is empty, which the plan's count of
    /// concurrent reads rules out).
    fn take(&self, n: usize) -> Result<Vec<Stage>> {
        let mut got = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let k = n.min(free.len());
            let at = free.len() - k;
            free.split_off(at)
        };
        if got.is_empty() {
            got.push(Stage {
                buf: AlignedBuf::new(STAGE_BYTES + ALIGN)?,
                dec: Decoder::new(),
            });
        }
        Ok(got)
    }

    fn give(&self, stages: Vec<Stage>) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(stages);
    }
}

impl std::fmt::Debug for StagePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StagePool({} threads)", self.threads)
    }
}

/// What one [`read_blocks`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockRead {
    /// Bytes transferred from the device (the stored blocks and the padding between them).
    pub device_bytes: u64,
    /// Seconds the threads spent reading and decoding, summed over threads.
    pub read_seconds: f64,
    pub decode_seconds: f64,
}

/// Reads `blocks` (ascending, contiguous in the run, from `base` on) of `file` and decodes
/// them into `out[b.start - base ..]`: the blocks are shared among the pool's threads in
/// contiguous groups of about equal raw bytes; each thread reads its group in batches of at
/// most [`STAGE_BYTES`] (one direct read each: blocks sit at 4096-aligned offsets) and decodes
/// a batch before reading the next, while the other threads read.
///
/// Errors: a read failure (exit 4, naming the file and offset); a block that does not decode
/// (exit 2, naming the file, the block's offset and what is wrong); exit 1 when `out` is too
/// small or the blocks are not contiguous (a bug in the caller).
pub fn read_blocks(
    file: &IoFile,
    blocks: &[CodedBlock],
    base: u64,
    out: &mut [u8],
    pool: &StagePool,
) -> Result<BlockRead> {
    let Some(last) = blocks.last() else {
        return Ok(BlockRead::default());
    };
    let need = last.end() - base;
    if (out.len() as u64) < need || blocks[0].start != base {
        return Err(Error::internal(format!(
            "{}: blocks [{}, {}) into a {}-byte buffer from {base}",
            file.path().display(),
            blocks[0].start,
            last.end(),
            out.len()
        )));
    }
    let groups = split_groups(blocks, pool.threads());
    let mut stages = pool.take(groups.len())?;
    let groups = if stages.len() < groups.len() {
        split_groups(blocks, stages.len())
    } else {
        groups
    };
    let res = {
        let mut rest = &mut out[..need as usize];
        let mut at = base;
        let mut jobs: Vec<Job<'_, BlockRead>> = Vec::with_capacity(groups.len());
        for (g, stage) in groups.iter().zip(stages.iter_mut()) {
            let bs = &blocks[g.0..g.1];
            let end = bs[bs.len() - 1].end();
            let (mine, r) = std::mem::take(&mut rest).split_at_mut((end - at) as usize);
            rest = r;
            let from = at;
            at = end;
            jobs.push(Box::new(move || read_group(file, bs, from, mine, stage)));
        }
        run_jobs(jobs, file)
            .into_iter()
            .try_fold(BlockRead::default(), |mut t, r| {
                let r = r?;
                t.device_bytes += r.device_bytes;
                t.read_seconds += r.read_seconds;
                t.decode_seconds += r.decode_seconds;
                Ok(t)
            })
    };
    pool.give(stages);
    res
}

/// A job of [`run_jobs`].
type Job<'a, T> = Box<dyn FnOnce() -> Result<T> + Send + 'a>;

/// Runs `jobs` at once: the first on this thread, each other on a scoped thread of its own;
/// the results in job order (a thread the system refuses is an exit-3 error naming `file`).
fn run_jobs<T: Send>(mut jobs: Vec<Job<'_, T>>, file: &IoFile) -> Vec<Result<T>> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let first = jobs.remove(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|job| {
                std::thread::Builder::new()
                    .name("k3-decode".into())
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, job)
            })
            .collect();
        let mut out = vec![first()];
        for h in handles {
            out.push(match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(Error::internal("a decode thread panicked"))),
                Err(e) => Err(Error::resources(format!(
                    "{}: cannot start a decode thread: {e}",
                    file.path().display()
                ))),
            });
        }
        out
    })
}

/// `blocks` cut into at most `n` contiguous groups of about equal raw bytes, as index ranges.
fn split_groups(blocks: &[CodedBlock], n: usize) -> Vec<(usize, usize)> {
    let total: u64 = blocks.iter().map(|b| b.len).sum();
    let n = n.clamp(1, blocks.len().max(1));
    let per = total.div_ceil(n as u64).max(1);
    let mut out = Vec::with_capacity(n);
    let (mut from, mut acc) = (0usize, 0u64);
    for (i, b) in blocks.iter().enumerate() {
        acc += b.len;
        if acc >= per * (out.len() as u64 + 1) && out.len() + 1 < n {
            out.push((from, i + 1));
            from = i + 1;
        }
    }
    if from < blocks.len() {
        out.push((from, blocks.len()));
    }
    out
}

/// One thread's share: its blocks read in batches of at most [`STAGE_BYTES`] into its stage and
/// decoded into `out` (which starts at run byte `base`).
fn read_group(
    file: &IoFile,
    blocks: &[CodedBlock],
    base: u64,
    out: &mut [u8],
    stage: &mut Stage,
) -> Result<BlockRead> {
    let mut done = BlockRead::default();
    let mut i = 0;
    while i < blocks.len() {
        // the batch: blocks i..j, their stored bytes one range of the file
        let off = blocks[i].off;
        let mut j = i + 1;
        while j < blocks.len() && blocks[j].off + blocks[j].clen - off <= STAGE_BYTES as u64 {
            j += 1;
        }
        let len = (blocks[j - 1].off + blocks[j - 1].clen - off) as usize;
        let t0 = Instant::now();
        let r = file.read_window(off, len, &mut stage.buf)?;
        done.read_seconds += t0.elapsed().as_secs_f64();
        done.device_bytes += r.device_bytes;
        let t1 = Instant::now();
        for b in &blocks[i..j] {
            let src = &stage.buf[r.pad + (b.off - off) as usize..][..b.clen as usize];
            decode_block(
                file,
                b,
                src,
                &mut out[(b.start - base) as usize..],
                &mut stage.dec,
            )?;
        }
        done.decode_seconds += t1.elapsed().as_secs_f64();
        i = j;
    }
    Ok(done)
}

/// The decoders' and the disk's speed on a sample of a packed trunk, from [`probe`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodecSpeed {
    /// Raw bytes decoded per second by the pool's threads together.
    pub decode_bytes_per_s: f64,
    /// Bytes per second the disk delivered reading the sample (direct reads at fresh offsets).
    pub disk_bytes_per_s: f64,
    /// Decode threads.
    pub threads: usize,
    /// Stored bytes ÷ raw bytes over the whole trunk (coded blocks and stored ones).
    pub coded_ratio: f64,
}

impl CodecSpeed {
    /// The decode speed (raw bytes per second, all threads) above which the codec pays: the
    /// disk's speed ÷ the share of bytes the codec saves.
    pub fn break_even_bytes_per_s(&self) -> f64 {
        self.disk_bytes_per_s / (1.0 - self.coded_ratio)
    }

    /// The decode speed `auto` asks for: [`PROBE_MARGIN`] × the break-even.
    pub fn needed_bytes_per_s(&self) -> f64 {
        PROBE_MARGIN * self.break_even_bytes_per_s()
    }

    /// True when reading the coded bytes and then decoding them takes clearly less time than
    /// reading the raw bytes: c·B/disk + B/decode < B/disk, i.e. decode > disk ÷ (1 − c), by
    /// [`PROBE_MARGIN`]. Counted one after the other because the decode threads are the
    /// compute threads: on a machine with few cores the decoding does not hide under the reads
    /// (measured: bench/results/codec-floor-*.tsv: with the probe saying decode 1.3× the disk,
    /// decoded steps took 1.38× the raw ones).
    pub fn pays(&self) -> bool {
        self.coded_ratio < 1.0 && self.decode_bytes_per_s > self.needed_bytes_per_s()
    }
}

/// How far decoding must beat the break-even for `auto` to choose the codec. The probe's figures
/// come from a few small reads at open and swing between runs (on one 2-core VM within ten
/// minutes: disk 0.93 and 1.36 GB/s, decoding 2.28 and 3.93 GB/s), and the runs' own reads of
/// whole pieces went faster than its disk figure: with no margin, the second probe chose the
/// codec (3.93 against 3.85 GB/s) for steps that took 1.20× the plain ones
/// (bench/results/codec-floor-synth-k3-20261203c.tsv).
pub const PROBE_MARGIN: f64 = 1.5;

/// Raw bytes the [`probe`] decodes (in a few batches spread over the file).
pub const PROBE_BYTES: u64 = 48 << 20;

/// Measures the codec on `blocks` (every block of the packed trunk, in file order; block i
/// belongs to layer `layer_of[i]`): reads batches of coded blocks spread over the file (fresh
/// offsets, which no earlier read of this run served) and decodes them with the pool's
/// threads, timing both.
///
/// Errors: as [`read_blocks`], naming the layer.
pub fn probe(
    file: &IoFile,
    blocks: &[CodedBlock],
    layer_of: &[usize],
    pool: &StagePool,
) -> Result<CodecSpeed> {
    let coded: Vec<usize> = (0..blocks.len())
        .filter(|&i| !blocks[i].is_stored())
        .collect();
    let threads = pool.threads();
    if coded.is_empty() {
        return Ok(CodecSpeed {
            decode_bytes_per_s: f64::INFINITY,
            disk_bytes_per_s: 0.0,
            threads,
            coded_ratio: 1.0,
        });
    }
    // batches of contiguous coded blocks, at evenly spaced points of the file
    let per_batch = (STAGE_BYTES as u64 / 2).min(PROBE_BYTES);
    let batches = (PROBE_BYTES / per_batch).max(1) as usize;
    let mut stages = pool.take(threads)?;
    let mut out = AlignedBuf::new(0)?;
    let (mut read_bytes, mut read_s, mut raw, mut dec_s) = (0u64, 0f64, 0u64, 0f64);
    let res = (|| -> Result<()> {
        for k in 0..batches {
            let start = coded[coded.len() * k / batches];
            let mut j = start;
            let mut got = 0u64;
            while j < blocks.len()
                && !blocks[j].is_stored()
                && got + blocks[j].len <= per_batch
                && blocks[j].off + blocks[j].clen - blocks[start].off <= per_batch
            {
                got += blocks[j].len;
                j += 1;
            }
            let bs = &blocks[start..j.max(start + 1)];
            let off = bs[0].off;
            let len = (bs[bs.len() - 1].off + bs[bs.len() - 1].clen - off) as usize;
            let t0 = Instant::now();
            let r = file.read_window(off, len, &mut stages[0].buf)?;
            read_s += t0.elapsed().as_secs_f64();
            read_bytes += r.device_bytes;
            let raw_len = (bs[bs.len() - 1].end() - bs[0].start) as usize;
            if out.len() < raw_len {
                out = AlignedBuf::new(raw_len)?;
            }
            let (first, rest) = stages.split_at_mut(1);
            let src = &first[0].buf[r.pad..r.pad + len];
            let t1 = Instant::now();
            decode_parallel(file, bs, src, &mut out[..raw_len], rest, &mut first[0].dec).map_err(
                |e| {
                    let (a, b) = (layer_of[start], layer_of[start + bs.len() - 1]);
                    let layers = if a == b {
                        format!("layer {a}")
                    } else {
                        format!("layers {a}–{b}")
                    };
                    Error::new(e.kind, format!("{layers} trunk: {}", e.message))
                },
            )?;
            dec_s += t1.elapsed().as_secs_f64();
            raw += raw_len as u64;
        }
        Ok(())
    })();
    pool.give(stages);
    res?;
    let (stored, whole) = blocks
        .iter()
        .fold((0u64, 0u64), |(s, w), b| (s + b.clen, w + b.len));
    Ok(CodecSpeed {
        decode_bytes_per_s: raw as f64 / dec_s.max(1e-9),
        disk_bytes_per_s: read_bytes as f64 / read_s.max(1e-9),
        threads,
        coded_ratio: stored as f64 / whole.max(1) as f64,
    })
}

/// Decodes `blocks` (their stored bytes in `src`, which starts at the first block's offset)
/// into `out` with `dec` on this thread and one more thread per stage of `more`.
fn decode_parallel(
    file: &IoFile,
    blocks: &[CodedBlock],
    src: &[u8],
    out: &mut [u8],
    more: &mut [Stage],
    dec: &mut Decoder,
) -> Result<()> {
    let (off0, mut at) = (blocks[0].off, blocks[0].start);
    let groups = split_groups(blocks, more.len() + 1);
    let decoders = std::iter::once(dec).chain(more.iter_mut().map(|s| &mut s.dec));
    let mut rest = out;
    let mut jobs: Vec<Job<'_, ()>> = Vec::new();
    for (g, dec) in groups.into_iter().zip(decoders) {
        let bs = &blocks[g.0..g.1];
        let end = bs[bs.len() - 1].end();
        let (part, r) = std::mem::take(&mut rest).split_at_mut((end - at) as usize);
        rest = r;
        let base = at;
        at = end;
        jobs.push(Box::new(move || {
            for b in bs {
                let s = &src[(b.off - off0) as usize..][..b.clen as usize];
                decode_block(file, b, s, &mut part[(b.start - base) as usize..], dec)?;
            }
            Ok(())
        }));
    }
    run_jobs(jobs, file).into_iter().collect()
}

/// Block `b` from its stored bytes `src` into the front of `dst`: copied when stored, else
/// decoded. Errors: exit 2 (damaged input, as a corrupt shard is) naming the file, the block
/// and what does not decode.
fn decode_block(
    file: &IoFile,
    b: &CodedBlock,
    src: &[u8],
    dst: &mut [u8],
    dec: &mut Decoder,
) -> Result<()> {
    let dst = &mut dst[..b.len as usize];
    if b.is_stored() {
        dst.copy_from_slice(src);
        return Ok(());
    }
    dec.decode_bf16(src, dst).map_err(|e| {
        Error::invalid(format!(
            "{}: the coded block at offset {} ({} bytes, run bytes {}..{}) does not decode: {e}; the packed trunk is corrupt: pack it again",
            file.path().display(),
            b.off,
            b.clen,
            b.start,
            b.end()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(start: u64, len: u64) -> CodedBlock {
        CodedBlock {
            start,
            len,
            off: start,
            clen: len,
        }
    }

    /// The codec pays only when decoding beats the disk ÷ the share it saves, by the margin:
    /// decoding at 1.3× the disk lost on bench/results/codec-floor-synth-k3-20261203.tsv
    /// (64.6 % of raw), and at 1.02× the break-even on codec-floor-synth-k3-20261203c.tsv.
    #[test]
    fn the_codec_pays_only_above_the_break_even_decode_speed() {
        let sp = |decode: f64, ratio: f64| CodecSpeed {
            decode_bytes_per_s: decode * 1e9,
            disk_bytes_per_s: 1e9,
            threads: 2,
            coded_ratio: ratio,
        };
        assert!((sp(1.0, 0.646).break_even_bytes_per_s() / 1e9 - 2.825).abs() < 1e-3);
        assert!((sp(1.0, 0.646).needed_bytes_per_s() / 1e9 - 4.237).abs() < 1e-3);
        assert!(!sp(1.3, 0.646).pays());
        assert!(!sp(2.8, 0.646).pays());
        // just above the break-even is within the probe's noise: the measured case (decode
        // 3.93 GB/s, disk 1.36) lost 1.20× with the codec
        assert!(!sp(3.0, 0.646).pays());
        assert!(!sp(3.93 / 1.36, 0.646).pays());
        assert!(sp(4.3, 0.646).pays());
        // nothing saved (every block stored): never, however fast
        assert!(!sp(f64::INFINITY, 1.0).pays());
    }

    #[test]
    fn groups_are_contiguous_and_about_equal() {
        let bs: Vec<CodedBlock> = (0..10).map(|i| blk(i * 100, 100)).collect();
        assert_eq!(split_groups(&bs, 2), vec![(0, 5), (5, 10)]);
        assert_eq!(split_groups(&bs, 3), vec![(0, 4), (4, 7), (7, 10)]);
        assert_eq!(split_groups(&bs, 1), vec![(0, 10)]);
        assert_eq!(split_groups(&bs[..1], 4), vec![(0, 1)]);
        // one big block and small ones: never an empty group
        let mut odd = vec![blk(0, 1000)];
        odd.extend((0..3).map(|i| blk(1000 + i * 10, 10)));
        let g = split_groups(&odd, 2);
        assert_eq!(g, vec![(0, 1), (1, 4)]);
    }
}
