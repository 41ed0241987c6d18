//! Every byte of a packed trunk checked (`k3 verify --trunk`, docs/verify.md): each layer's run
//! read whole from `trunk.bin` (a coded run's blocks decoded) and its SHA-256 compared with the
//! `sha256` that `k3 pack-trunk` recorded in `trunk.json`, each coded block's stored bytes with
//! its `block_sha256`, and, given the model directory, every run byte compared with the shard
//! it was copied from. Opening a trunk checks only each run's edges (FORMATS.md §7.3); this is
//! the check of the middle.
//!
//! A mismatch is damaged input (exit 2) naming the file at fault, the layer and the byte
//! offset: `trunk.bin` when its run no longer matches its recorded sum, `trunk.json` when the
//! run's bytes are vouched for (they equal the shard's, or every coded block matches its own
//! sum) and only the run's recorded sum differs, the shard when the trunk matches its sums but
//! the shard's byte differs. Without sums (a manifest written before
//! them) the shards are the only reference, and a difference names both files.

use super::{PackedLayer, PackedTrunk};
use crate::checkpoint::TensorIndex;
use crate::digest::sha256::{to_hex, Sha256};
use crate::error::{Error, Result};
use crate::io::IoFile;
use crate::stream::coded::{CodedBlock, MAX_BLOCK_BYTES};
use k3_kernels::codec::Decoder;
use std::time::Instant;

/// Bytes per read of a stored run (a coded run is read block by block).
const CHUNK: usize = 8 << 20;
/// Layers checked at once, at most (one per core: hashing is slower than a fast disk).
const MAX_WORKERS: usize = 8;

/// The shards a trunk is compared with (`--against MODEL_DIR`): the model's tensor index,
/// after [`PackedTrunk::open`] checked the layout against it.
pub type Against<'a> = &'a TensorIndex;

/// One layer checked, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerChecked {
    /// The layer.
    pub layer: usize,
    /// Layers checked so far (this one included).
    pub done: usize,
    /// Layers in all.
    pub layers: usize,
    /// The run's bytes (decoded length for a coded run).
    pub run_bytes: u64,
    /// Seconds this layer took.
    pub seconds: f64,
}

/// What [`verify`] checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verified {
    /// Layers checked.
    pub layers: usize,
    /// Run bytes checked (decoded).
    pub run_bytes: u64,
    /// Bytes read from `trunk.bin`.
    pub bin_bytes: u64,
    /// True when the runs were checked against the sums of `trunk.json`.
    pub sums: bool,
    /// True when the runs were compared with the shards.
    pub against: bool,
    /// Seconds in all.
    pub seconds: f64,
}

/// True when every layer of `trunk` carries its run's SHA-256 (and, with a codec, one per
/// block): a manifest written by a `k3 pack-trunk` that records them.
pub fn has_sums(trunk: &PackedTrunk) -> bool {
    trunk
        .layers
        .iter()
        .all(|l| l.sha256.is_some() && (l.blocks.is_empty() || !l.block_sha256.is_empty()))
}

/// Checks every run of `trunk` (already opened: its layout validated against `bin`, and
/// against the model when `against` is given) byte for byte: against its sums when
/// [`has_sums`], against the shards of `against` when given, both when both. Several layers
/// are checked at once; `progress` is called as each one ends. The first mismatch in layer
/// order is reported (no new layer is started after one is found).
///
/// Errors: exit 2 (damaged input) naming the file at fault, the layer and the byte offset (see
/// the module doc); exit 2 as well when there is nothing to check against (no sums, no
/// `against`); exit 4 for a read error.
pub fn verify(
    trunk: &PackedTrunk,
    bin: &IoFile,
    against: Option<Against<'_>>,
    progress: &(dyn Fn(&LayerChecked) + Sync),
) -> Result<Verified> {
    let sums = has_sums(trunk);
    if !sums && against.is_none() {
        return Err(Error::invalid(format!(
            "{}: trunk.json holds no SHA-256 sums (it was written by a k3 pack-trunk that did not record them): give --against MODEL_DIR to compare the trunk with the shards it was packed from, or pack the trunk again",
            bin.path().with_file_name(super::TRUNK_JSON).display()
        )));
    }
    let shards: Vec<Option<IoFile>> = match against {
        None => Vec::new(),
        Some(index) => index
            .shards()
            .iter()
            .map(|s| {
                let used = trunk.layers.iter().any(|l| l.shard == s.file_name);
                used.then(|| IoFile::open(&s.path)).transpose()
            })
            .collect::<Result<_>>()?,
    };
    let shard_of = |l: &PackedLayer| -> Option<&IoFile> {
        let index = against?;
        let i = index.shards().iter().position(|s| s.file_name == l.shard)?;
        shards.get(i)?.as_ref()
    };
    if against.is_some() {
        if let Some(l) = trunk.layers.iter().find(|l| shard_of(l).is_none()) {
            return Err(Error::invalid(format!(
                "layer {}: shard {} is not in the model directory given with --against",
                l.layer, l.shard
            )));
        }
    }

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let start = Instant::now();
    let n = trunk.layers.len();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WORKERS)
        .min(n.max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<u64>>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| {
                let mut work = Work::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let l = &trunk.layers[i];
                    let t = Instant::now();
                    let r = work.layer(l, bin, shard_of(l));
                    match &r {
                        Ok(_) => progress(&LayerChecked {
                            layer: l.layer,
                            done: done.fetch_add(1, Ordering::Relaxed) + 1,
                            layers: n,
                            run_bytes: l.run_len(),
                            seconds: t.elapsed().as_secs_f64(),
                        }),
                        Err(_) => stop.store(true, Ordering::Relaxed),
                    }
                    if let Ok(mut v) = results.lock() {
                        v[i] = Some(r);
                    }
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| Error::internal("verify: a checking thread panicked"))?;
    let mut bin_bytes = 0u64;
    for r in results.into_iter().flatten() {
        bin_bytes += r?;
    }
    Ok(Verified {
        layers: n,
        run_bytes: trunk.run_bytes(),
        bin_bytes,
        sums,
        against: against.is_some(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// One checking thread's buffers and decoder.
struct Work {
    stored: Vec<u8>,
    raw: Vec<u8>,
    shard: Vec<u8>,
    dec: Decoder,
}

impl Work {
    fn new() -> Work {
        Work {
            stored: Vec::new(),
            raw: Vec::new(),
            shard: Vec::new(),
            dec: Decoder::new(),
        }
    }

    /// Checks layer `l`'s run; returns the bytes read from `bin`.
    fn layer(&mut self, l: &PackedLayer, bin: &IoFile, shard: Option<&IoFile>) -> Result<u64> {
        let mut run = Sha256::new();
        // Run byte of the first difference from the shard.
        let mut first_diff: Option<u64> = None;
        let mut read = 0u64;
        if l.blocks.is_empty() {
            let run_len = l.run_len();
            let mut rel = 0u64;
            while rel < run_len {
                let n = ((run_len - rel) as usize).min(CHUNK);
                self.raw.resize(n, 0);
                bin.read_uncached_at(&mut self.raw, l.file_off + rel)?;
                read += n as u64;
                run.update(&self.raw);
                if first_diff.is_none() {
                    first_diff = self.compare(l, shard, rel)?;
                }
                rel += n as u64;
            }
        } else {
            for (i, b) in l.blocks.iter().enumerate() {
                self.block(l, i, b, bin)?;
                read += b.clen;
                run.update(&self.raw);
                if first_diff.is_none() {
                    first_diff = self.compare(l, shard, b.start)?;
                }
            }
        }
        let got = run.finish();
        let bin_name = bin.path().display();
        let at = |r: u64| place(l, r);
        match (l.sha256, first_diff) {
            (Some(want), Some(r)) if got != want => Err(Error::invalid(format!(
                "{bin_name}: layer {}: {} differs from {} (offset {}), and the run does not match its SHA-256 in trunk.json: trunk.bin is damaged; pack the trunk again",
                l.layer,
                at(r),
                l.shard,
                l.run_start + r
            ))),
            (Some(want), None) if got != want => {
                let range = if l.blocks.is_empty() {
                    format!("trunk.bin offsets {}..{}", l.file_off, l.file_off + l.run_len())
                } else {
                    format!("the blocks at trunk.bin offsets {}..{}", l.file_off, l.file_off + l.nbytes)
                };
                let json_name = bin.path().with_file_name("trunk.json");
                let json_name = json_name.display();
                // the bytes are vouched for by the shards, or by every block's own sum (each
                // checked in `block`): then it is the run's recorded sum that is wrong
                let vouched = if shard.is_some() {
                    Some(format!("equals the bytes of {}", l.shard))
                } else if !l.blocks.is_empty() && l.block_sha256.len() == l.blocks.len() {
                    Some("matches the SHA-256 of each of its blocks in trunk.json".to_string())
                } else {
                    None
                };
                Err(Error::invalid(match vouched {
                    Some(by) => format!(
                        "{json_name}: layer {}: the run ({range}) {by} but not its own SHA-256 in trunk.json (lists {}, the bytes hash to {}): trunk.json is damaged (the run's sha256), not trunk.bin; pack the trunk again",
                        l.layer, to_hex(&want), to_hex(&got)
                    ),
                    None => format!(
                        "{bin_name}: layer {}: the run ({range}, {} bytes) does not match its SHA-256 in trunk.json (lists {}, the bytes hash to {}): trunk.bin is damaged in this run, or trunk.json's sum of it is; give --against MODEL_DIR to tell which and find the first differing byte; pack the trunk again",
                        l.layer, l.run_len(), to_hex(&want), to_hex(&got)
                    ),
                }))
            }
            (Some(_), Some(r)) => Err(Error::invalid(format!(
                "{}: byte at offset {} ({}) differs from the packed trunk's layer {} ({}), whose run matches its SHA-256 in trunk.json: the shard changed since the trunk was packed from it; check the shards with `k3 verify MODEL_DIR --sums FILE`",
                shard.map_or(l.shard.clone(), |f| f.path().display().to_string()),
                l.run_start + r,
                tensor_at(l, r),
                l.layer,
                at(r)
            ))),
            (None, Some(r)) => Err(Error::invalid(format!(
                "{bin_name}: layer {}: {} differs from {} (offset {}); trunk.json holds no SHA-256 sums to tell which file is damaged: check the shards with `k3 verify MODEL_DIR --sums FILE`, then pack the trunk again",
                l.layer,
                at(r),
                shard.map_or(l.shard.clone(), |f| f.path().display().to_string()),
                l.run_start + r
            ))),
            _ => Ok(read),
        }
    }

    /// Reads block `i` of `l` into `self.stored`, checks its stored bytes against its sum
    /// (when recorded) and leaves its raw bytes in `self.raw`.
    fn block(&mut self, l: &PackedLayer, i: usize, b: &CodedBlock, bin: &IoFile) -> Result<()> {
        let bin_name = bin.path().display();
        if b.len > MAX_BLOCK_BYTES {
            return Err(Error::invalid(format!(
                "{bin_name}: layer {}: block {i} holds {} bytes (at most {MAX_BLOCK_BYTES})",
                l.layer, b.len
            )));
        }
        self.stored.resize(b.clen as usize, 0);
        bin.read_uncached_at(&mut self.stored, b.off)?;
        if let Some(want) = l.block_sha256.get(i) {
            let got = Sha256::digest(&self.stored);
            if got != *want {
                return Err(Error::invalid(format!(
                    "{bin_name}: layer {}: block {i} at trunk.bin offset {} ({} stored bytes; run bytes {}..{}, {}) does not match its SHA-256 in trunk.json (lists {}, the bytes hash to {}): trunk.bin is damaged in this block; pack the trunk again",
                    l.layer,
                    b.off,
                    b.clen,
                    b.start,
                    b.end(),
                    tensor_at(l, b.start),
                    to_hex(want),
                    to_hex(&got)
                )));
            }
        }
        self.raw.resize(b.len as usize, 0);
        if b.is_stored() {
            self.raw.copy_from_slice(&self.stored);
        } else {
            self.dec.decode_bf16(&self.stored, &mut self.raw).map_err(|e| {
                Error::invalid(format!(
                    "{bin_name}: layer {}: block {i} at trunk.bin offset {} does not decode: {e}; trunk.bin is damaged in this block; pack the trunk again",
                    l.layer, b.off
                ))
            })?;
        }
        Ok(())
    }

    /// The run byte of the first difference between `self.raw` (run bytes from `rel`) and the
    /// same bytes of the shard, if any.
    fn compare(
        &mut self,
        l: &PackedLayer,
        shard: Option<&IoFile>,
        rel: u64,
    ) -> Result<Option<u64>> {
        let Some(f) = shard else {
            return Ok(None);
        };
        self.shard.resize(self.raw.len(), 0);
        f.read_uncached_at(&mut self.shard, l.run_start + rel)?;
        Ok(self
            .raw
            .iter()
            .zip(&self.shard)
            .position(|(a, b)| a != b)
            .map(|i| rel + i as u64))
    }
}

/// Where run byte `r` of `l` is in `trunk.bin`, in words: its offset in a stored run, the
/// block holding it in a coded one; with its tensor.
fn place(l: &PackedLayer, r: u64) -> String {
    let tensor = tensor_at(l, r);
    if l.blocks.is_empty() {
        return format!(
            "trunk.bin offset {} (run byte {r}, {tensor})",
            l.file_off + r
        );
    }
    match l.blocks.iter().find(|b| b.start <= r && r < b.end()) {
        Some(b) => format!(
            "run byte {r} ({tensor}), in the block at trunk.bin offset {}",
            b.off
        ),
        None => format!("run byte {r} ({tensor})"),
    }
}

/// `tensor NAME byte K` for run byte `r` of `l`.
fn tensor_at(l: &PackedLayer, r: u64) -> String {
    match l
        .tensors
        .iter()
        .find(|t| t.off <= r && r < t.off + t.nbytes)
    {
        Some(t) => format!("tensor {} byte {}", t.name, r - t.off),
        None => "between tensors".to_string(),
    }
}
