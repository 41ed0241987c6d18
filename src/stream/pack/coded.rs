//! A packed trunk with a codec (docs/formats.md, "Packed trunk with a codec"): each layer's
//! run written as blocks (stored, or BF16 exponents Huffman-coded by `k3_kernels::codec`), every
//! coded block decoded again and compared with its source before it is written; and on open,
//! the block index checked against the run's tensors and `trunk.bin`, and the first and last
//! block decoded and compared with the shard.

use super::{PackedLayer, COPY_CHUNK};
use crate::digest::sha256::Sha256;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoFile, ALIGN};
use crate::safetensors::Dtype;
use crate::stream::coded::{CodedBlock, BLOCK_BYTES, MAX_BLOCK_BYTES};
use k3_kernels::codec::{encode_bf16, Decoder};
use std::os::unix::fs::FileExt;

/// The blocks of `l` against its tensors and `trunk.bin` (`bin_len` bytes, offsets aligned to
/// `align`): they tile the run from byte 0 to its end, each inside one tensor, at most
/// [`MAX_BLOCK_BYTES`], stored (`clen = len`) or coded (fewer bytes, a BF16 tensor, even
/// length), at aligned ascending offsets that do not overlap, inside the layer's
/// `[file_off, file_off + nbytes)` and inside `trunk.bin`; `block_sha256`, when present, holds
/// one sum per block.
///
/// Errors (exit 2) name the layer (`lp`), the block and what is wrong.
pub(super) fn check_blocks(l: &PackedLayer, align: u64, bin_len: u64, lp: &str) -> Result<()> {
    let run_len = l.run_len();
    let bad = |i: usize, b: &CodedBlock, what: String| {
        Error::invalid(format!(
            "{lp}: block {i} (run bytes {}..{}, trunk.bin offset {}): {what}",
            b.start,
            b.start.saturating_add(b.len),
            b.off
        ))
    };
    if l.blocks.is_empty() {
        if run_len == 0 {
            return Ok(());
        }
        return Err(Error::invalid(format!(
            "{lp}: no `blocks`, but the run has {run_len} bytes"
        )));
    }
    let mut next = 0u64;
    let mut prev_end = l.file_off;
    let mut t = 0usize;
    let layer_end = l.file_off.saturating_add(l.nbytes).min(bin_len);
    for (i, b) in l.blocks.iter().enumerate() {
        if b.start != next {
            return Err(bad(i, b, format!("expected to start at run byte {next}")));
        }
        if b.len == 0 || b.len > MAX_BLOCK_BYTES {
            return Err(bad(
                i,
                b,
                format!("a block holds 1 to {MAX_BLOCK_BYTES} bytes"),
            ));
        }
        if b.clen == 0 || b.clen > b.len {
            return Err(bad(
                i,
                b,
                format!("stored length {} (1 to {} expected)", b.clen, b.len),
            ));
        }
        next = b.end();
        while t < l.tensors.len() && l.tensors[t].off + l.tensors[t].nbytes <= b.start {
            t += 1;
        }
        let tensor = l
            .tensors
            .get(t)
            .filter(|x| x.off <= b.start && b.end() <= x.off + x.nbytes)
            .ok_or_else(|| bad(i, b, "does not lie inside one tensor".to_string()))?;
        if !b.is_stored() && (tensor.dtype != Dtype::BF16 || b.len % 2 != 0 || b.start % 2 != 0) {
            return Err(bad(
                i,
                b,
                format!(
                    "coded, but {} is {} (only whole BF16 values are coded)",
                    tensor.name, tensor.dtype
                ),
            ));
        }
        if b.off % align != 0 {
            return Err(bad(i, b, format!("offset is not a multiple of {align}")));
        }
        if b.off < prev_end {
            return Err(bad(
                i,
                b,
                format!("overlaps the bytes before it (which end at {prev_end})"),
            ));
        }
        prev_end = b.off.saturating_add(b.clen);
        if prev_end > layer_end {
            return Err(bad(
                i,
                b,
                format!(
                    "ends at {prev_end}, past the layer's bytes in trunk.bin (file_off {} + nbytes {}, file of {bin_len} bytes): trunk.bin is truncated or belongs to another layout",
                    l.file_off, l.nbytes
                ),
            ));
        }
    }
    if next != run_len {
        return Err(Error::invalid(format!(
            "{lp}: the blocks end at run byte {next}, but the run has {run_len} bytes"
        )));
    }
    if l.blocks[0].off != l.file_off {
        return Err(Error::invalid(format!(
            "{lp}: file_off {} is not the first block's offset {}",
            l.file_off, l.blocks[0].off
        )));
    }
    if !l.block_sha256.is_empty() && l.block_sha256.len() != l.blocks.len() {
        return Err(Error::invalid(format!(
            "{lp}: `block_sha256`: {} sums for {} blocks: expected one per block; pack the trunk again",
            l.block_sha256.len(),
            l.blocks.len()
        )));
    }
    Ok(())
}

/// The first and last block of `l`, read from `bin` and decoded, equal the same bytes of its
/// run in the shard `sfile`. Errors: exit 2 naming the block and the first differing byte, or a
/// block that does not decode.
pub(super) fn check_block_bytes(
    l: &PackedLayer,
    bin: &IoFile,
    sfile: &IoFile,
    lp: &str,
) -> Result<()> {
    let (Some(first), Some(last)) = (l.blocks.first(), l.blocks.last()) else {
        return Ok(());
    };
    let mut dec = Decoder::new();
    for b in if first == last {
        vec![first]
    } else {
        vec![first, last]
    } {
        let mut stored = vec![0u8; b.clen as usize];
        bin.read_exact_at(&mut stored, b.off)
            .map_err(|e| Error::invalid(e.message))?;
        let mut got = vec![0u8; b.len as usize];
        if b.is_stored() {
            got.copy_from_slice(&stored);
        } else {
            dec.decode_bf16(&stored, &mut got).map_err(|e| {
                Error::invalid(format!(
                    "{lp}: the block at trunk.bin offset {} does not decode: {e}; the packed trunk is corrupt: pack it again",
                    b.off
                ))
            })?;
        }
        let mut want = vec![0u8; b.len as usize];
        sfile
            .read_exact_at(&mut want, l.run_start + b.start)
            .map_err(|e| Error::invalid(e.message))?;
        if got != want {
            let i = got.iter().zip(&want).position(|(x, y)| x != y).unwrap_or(0) as u64;
            return Err(Error::invalid(format!(
                "{lp}: the block at trunk.bin offset {} decodes to other bytes than {} holds (first at run byte {}): the packed trunk is corrupt or was made from other weights; pack it again",
                b.off,
                l.shard,
                b.start + i
            )));
        }
    }
    Ok(())
}

/// Rounds `n` up to a multiple of [`ALIGN`].
fn aligned(n: u64) -> u64 {
    n.div_ceil(ALIGN as u64) * ALIGN as u64
}

/// What [`write_layer`] tells after each chunk: raw run bytes done.
pub(super) type Told<'a> = &'a mut dyn FnMut(u64);

/// Where [`write_layer`] writes: `trunk.bin`'s temporary file, the next free (4096-aligned)
/// offset, and how a failed write at an offset becomes an error (a full disk is exit 3).
pub(super) struct Sink<'a> {
    pub(super) out: &'a std::fs::File,
    pub(super) cur: u64,
    pub(super) error: &'a dyn Fn(u64, std::io::Error) -> Error,
}

/// A block as [`encode_chunk`] leaves it: coded bytes, or None to store it as it is.
type Coded = Option<Vec<u8>>;

/// A block coded by one of [`encode_chunk`]'s threads: its index in the chunk, what is stored,
/// and the SHA-256 of what is stored.
type Numbered = (usize, Coded, [u8; 32]);

/// Writes layer `l`'s run from `src` as blocks into `sink`, the first at `sink.cur` (a
/// multiple of 4096), each next one at the next multiple of 4096, and returns the blocks
/// (`sink.cur` ends after the last). A tensor is cut into blocks of [`BLOCK_BYTES`] (its last one shorter);
/// BF16 blocks are coded on `threads` threads when that makes them smaller, each decoded again
/// and compared with its source before it is written; F32 blocks are stored.
///
/// Also returns the SHA-256 of the run's raw bytes and of each block's stored bytes (the
/// `sha256` and `block_sha256` of `trunk.json`), hashed while the blocks are coded.
///
/// Errors: a read failure (exit 4 naming the shard and offset); a coded block that does not
/// decode to its source (exit 1: a bug in the codec, never written); a write failure or a full
/// disk (from `write_error`).
pub(super) fn write_layer(
    src: &IoFile,
    l: &PackedLayer,
    sink: &mut Sink<'_>,
    buf: &mut AlignedBuf,
    threads: usize,
    told: Told<'_>,
) -> Result<WrittenLayer> {
    let mut blocks = Vec::new();
    let mut block_sha256 = Vec::new();
    let mut run = Sha256::new();
    for t in &l.tensors {
        let mut rel = 0u64;
        while rel < t.nbytes {
            // COPY_CHUNK is a multiple of BLOCK_BYTES: blocks start at multiples of it in the
            // tensor
            let n = ((t.nbytes - rel) as usize).min(COPY_CHUNK);
            let r = src.read_window(l.run_start + t.off + rel, n, buf)?;
            let data = &buf[r.pad..r.pad + n];
            let coded = encode_chunk(data, t.dtype == Dtype::BF16, threads, &mut run)?;
            for (k, (c, sum)) in coded.iter().enumerate() {
                let raw = &data[k * BLOCK_BYTES..((k + 1) * BLOCK_BYTES).min(n)];
                let bytes = c.as_deref().unwrap_or(raw);
                block_sha256.push(*sum);
                let at = sink.cur;
                sink.out
                    .write_all_at(bytes, at)
                    .map_err(|e| (sink.error)(at, e))?;
                blocks.push(CodedBlock {
                    start: t.off + rel + (k * BLOCK_BYTES) as u64,
                    len: raw.len() as u64,
                    off: at,
                    clen: bytes.len() as u64,
                });
                sink.cur = aligned(at + bytes.len() as u64);
            }
            rel += n as u64;
            told(n as u64);
        }
    }
    Ok(WrittenLayer {
        blocks,
        sha256: run.finish(),
        block_sha256,
    })
}

/// What [`write_layer`] wrote for a layer.
pub(super) struct WrittenLayer {
    /// The blocks, in run order.
    pub(super) blocks: Vec<CodedBlock>,
    /// SHA-256 of the run's raw bytes.
    pub(super) sha256: [u8; 32],
    /// SHA-256 of each block's stored bytes.
    pub(super) block_sha256: Vec<[u8; 32]>,
}

/// `data` cut into blocks of [`BLOCK_BYTES`], each coded (`Some`) when `bf16` and coding makes
/// it smaller, else None (stored), with the SHA-256 of what is stored; `threads` threads take
/// every `threads`-th block. Each coded block is decoded again and must give its source back.
/// `run` is fed `data` meanwhile, on a thread of its own (hashing is as slow as coding).
fn encode_chunk(
    data: &[u8],
    bf16: bool,
    threads: usize,
    run: &mut Sha256,
) -> Result<Vec<(Coded, [u8; 32])>> {
    let n = data.len().div_ceil(BLOCK_BYTES);
    let raw = |k: usize| &data[k * BLOCK_BYTES..((k + 1) * BLOCK_BYTES).min(data.len())];
    if !bf16 {
        run.update(data);
        return Ok((0..n).map(|k| (None, Sha256::digest(raw(k)))).collect());
    }
    let threads = threads.clamp(1, n.max(1));
    let parts: Vec<Result<Vec<Numbered>>> = std::thread::scope(|s| {
        s.spawn(|| run.update(data));
        let hs: Vec<_> = (0..threads)
            .map(|w| {
                s.spawn(move || {
                    let mut dec = Decoder::new();
                    let mut back = vec![0u8; BLOCK_BYTES];
                    let mut got = Vec::new();
                    for k in (w..n).step_by(threads) {
                        let raw = &data[k * BLOCK_BYTES..((k + 1) * BLOCK_BYTES).min(data.len())];
                        let mut enc = Vec::new();
                        if !encode_bf16(raw, &mut enc) {
                            got.push((k, None, Sha256::digest(raw)));
                            continue;
                        }
                        let back = &mut back[..raw.len()];
                        if dec.decode_bf16(&enc, back).is_err() || back != raw {
                            return Err(Error::internal(format!(
                                "the codec does not give back block {k} of a {}-byte chunk; nothing was written for it",
                                data.len()
                            )));
                        }
                        let sum = Sha256::digest(&enc);
                        got.push((k, Some(enc), sum));
                    }
                    Ok(got)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal("an encode thread panicked")))
            })
            .collect()
    });
    let mut out = vec![(None, [0u8; 32]); n];
    for p in parts {
        for (k, c, sum) in p? {
            out[k] = (c, sum);
        }
    }
    Ok(out)
}
