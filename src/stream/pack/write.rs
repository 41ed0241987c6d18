//! Writing a packed trunk (`k3 pack-trunk`, FORMATS.md §7.2): `trunk.bin.tmp` and
//! `trunk.json.tmp`, renamed into place only when complete.

use super::{PackedTrunk, COPY_CHUNK, FLUSH_EVERY, TRUNK_BIN, TRUNK_JSON};
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::digest::sha256::Sha256;
use crate::error::{Error, Result};
use crate::io::out::{is_disk_full, TMP_SUFFIX};
use crate::io::{AlignedBuf, IoFile, ALIGN};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Progress of [`pack`] after each copied chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PackProgress {
    /// Layers fully copied.
    pub layers_done: usize,
    /// Layers in all.
    pub layers: usize,
    /// Run bytes copied.
    pub bytes_done: u64,
    /// Run bytes in all.
    pub bytes: u64,
    /// Seconds since the copy started.
    pub seconds: f64,
}

impl PackProgress {
    /// Copy rate, MB/s (0 before any time has passed).
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes_done as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
    /// Estimated seconds left at the current rate (None before any byte was copied).
    pub fn eta_seconds(&self) -> Option<f64> {
        (self.bytes_done > 0)
            .then(|| (self.bytes - self.bytes_done) as f64 * self.seconds / self.bytes_done as f64)
    }
}

/// The codec [`pack`] codes the runs with (`k3 pack-trunk --codec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec {
    /// Threads that code blocks (each coded block is decoded again before it is written).
    pub threads: usize,
}

/// The paths [`pack`] writes.
struct Files<'a> {
    out_dir: &'a Path,
    bin_tmp: &'a Path,
    json_tmp: &'a Path,
}

/// What [`pack`] wrote.
#[derive(Debug, Clone)]
pub struct PackSummary {
    /// The layout written.
    pub trunk: PackedTrunk,
    /// `trunk.bin` path and length.
    pub bin: PathBuf,
    pub bin_len: u64,
    /// Seconds of copying.
    pub seconds: f64,
    /// True if every read went through O_DIRECT.
    pub direct: bool,
}

/// `k3 pack-trunk`: writes `out_dir/trunk.bin` and `out_dir/trunk.json` for the checkpoint
/// behind `index` (FORMATS.md §7.2). Each run is read with direct I/O and written at its
/// aligned offset (the gaps are zero), written back and dropped from the page cache every
/// 256 MiB; afterwards the first and last bytes of every run are compared with the shard.
/// Both files are written under `.tmp` names; only when everything is complete is an old
/// `trunk.json` removed, `trunk.bin` renamed into place and then `trunk.json`, so an
/// interrupted pack never leaves a trunk that loads.
///
/// Errors: the layout ([`PackedTrunk::plan`], exit 2); an unwritable `out_dir`
/// ([`check_out_dir`], exit 2); a read failure (exit 4, naming the shard and offset); a write
/// failure or a full disk (exit 4 / exit 3, naming the file). On error the temporary files are
/// removed.
pub fn pack(
    cfg: &Config,
    index: &TensorIndex,
    out_dir: &Path,
    codec: Option<Codec>,
    progress: &mut dyn FnMut(&PackProgress),
) -> Result<PackSummary> {
    let mut trunk = PackedTrunk::plan(cfg, index)?;
    check_out_dir(out_dir)?;
    let bin_tmp = out_dir.join(format!("{TRUNK_BIN}{TMP_SUFFIX}"));
    let json_tmp = out_dir.join(format!("{TRUNK_JSON}{TMP_SUFFIX}"));
    let files = Files {
        out_dir,
        bin_tmp: &bin_tmp,
        json_tmp: &json_tmp,
    };
    let res = write_files(cfg, index, &mut trunk, &files, codec, progress);
    if res.is_err() {
        let _ = std::fs::remove_file(&bin_tmp);
        let _ = std::fs::remove_file(&json_tmp);
    }
    let (seconds, direct) = res?;
    Ok(PackSummary {
        bin_len: trunk.bin_len(),
        trunk,
        bin: out_dir.join(TRUNK_BIN),
        seconds,
        direct,
    })
}

/// Creates `out_dir` if needed and checks that files can be created in it (by creating and
/// removing a probe file), so that an unwritable output directory is found before any
/// shard is read.
///
/// Errors (exit 2): the directory cannot be created or written, naming it; exit 3 if the disk
/// is already full.
pub fn check_out_dir(out_dir: &Path) -> Result<()> {
    let bad = |e: &std::io::Error, what: &str| {
        if is_disk_full(e) {
            Error::resources(format!(
                "{}: {what}: {e} (not enough disk space for the packed trunk)",
                out_dir.display()
            ))
        } else {
            Error::invalid(format!(
                "pack-trunk: output directory {}: {what}: {e}; give a writable directory",
                out_dir.display()
            ))
        }
    };
    if out_dir.exists() && !out_dir.is_dir() {
        return Err(Error::invalid(format!(
            "pack-trunk: output directory {}: exists and is not a directory; give a directory",
            out_dir.display()
        )));
    }
    // Like every other output, the directory's parent must exist: a typo in a path must not
    // create a tree of directories somewhere.
    if let Some(parent) = out_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !out_dir.exists() && !parent.is_dir() {
            return Err(Error::invalid(format!(
                "pack-trunk: output directory {}: directory {} does not exist; create it first",
                out_dir.display(),
                parent.display()
            )));
        }
    }
    if !out_dir.exists() {
        std::fs::create_dir(out_dir).map_err(|e| bad(&e, "cannot create the directory"))?;
    }
    let probe = out_dir.join(format!(".k3-probe-{}{TMP_SUFFIX}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| bad(&e, "cannot create files in it"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn write_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    let msg = format!("{}: {what}: {e}", path.display());
    if is_disk_full(&e) {
        Error::resources(format!(
            "{msg} (not enough disk space for the packed trunk)"
        ))
    } else {
        Error::io(msg)
    }
}

fn write_files(
    cfg: &Config,
    index: &TensorIndex,
    trunk: &mut PackedTrunk,
    files: &Files<'_>,
    codec: Option<Codec>,
    progress: &mut dyn FnMut(&PackProgress),
) -> Result<(f64, bool)> {
    let (bin_tmp, json_tmp, out_dir) = (files.bin_tmp, files.json_tmp, files.out_dir);
    let out =
        std::fs::File::create(bin_tmp).map_err(|e| write_error(bin_tmp, "cannot create", e))?;
    let total = trunk.run_bytes();
    let mut buf = AlignedBuf::new(COPY_CHUNK + 2 * ALIGN)?;
    let t0 = Instant::now();
    let mut done = 0u64;
    let mut direct = true;
    let mut flush = Flush::default();
    let mut shards: Vec<Option<IoFile>> = index.shards().iter().map(|_| None).collect();
    let n_layers = trunk.layers.len();
    let mut cur = 0u64;
    for li in 0..n_layers {
        let l = &trunk.layers[li];
        let si = index
            .shards()
            .iter()
            .position(|s| s.file_name == l.shard)
            .ok_or_else(|| Error::internal(format!("shard {} vanished", l.shard)))?;
        if shards[si].is_none() {
            shards[si] = Some(IoFile::open(&index.shards()[si].path)?);
        }
        let src = shards[si].as_ref().expect("opened above");
        let run_len = l.run_len();
        let mut told = |n: u64, rel: u64| {
            done += n;
            progress(&PackProgress {
                layers_done: li + usize::from(rel == run_len),
                layers: n_layers,
                bytes_done: done,
                bytes: total,
                seconds: t0.elapsed().as_secs_f64(),
            });
        };
        match codec {
            None => {
                let (d, sum) = copy_run(src, l, &out, &mut buf, &mut flush, bin_tmp, &mut told)?;
                direct &= d;
                trunk.layers[li].sha256 = Some(sum);
            }
            Some(c) => {
                let mut rel = 0u64;
                let error =
                    |at: u64, e| write_error(bin_tmp, &format!("write at offset {at} failed"), e);
                let mut sink = super::coded::Sink {
                    out: &out,
                    cur,
                    error: &error,
                };
                let w =
                    super::coded::write_layer(src, l, &mut sink, &mut buf, c.threads, &mut |n| {
                        rel += n;
                        told(n, rel)
                    })?;
                cur = sink.cur;
                let l = &mut trunk.layers[li];
                l.file_off = w.blocks.first().map_or(cur, |b| b.off);
                let end = w.blocks.last().map_or(cur, |b| b.off + b.clen);
                l.nbytes = (end - l.file_off).div_ceil(ALIGN as u64) * ALIGN as u64;
                l.blocks = w.blocks;
                l.sha256 = Some(w.sha256);
                l.block_sha256 = w.block_sha256;
                flush.written(&out, bin_tmp, cur, run_len)?;
            }
        }
    }
    if codec.is_some() {
        trunk.codec = Some(crate::stream::coded::CODEC_NAME.to_string());
    }
    // Zero padding of the last run's tail (and any gaps, which are already holes reading 0).
    out.set_len(trunk.bin_len())
        .map_err(|e| write_error(bin_tmp, "cannot set the length", e))?;
    out.sync_all()
        .map_err(|e| write_error(bin_tmp, "write-back failed", e))?;
    crate::io::sys::drop_file_cache(&out, 0, trunk.bin_len());
    drop(out);
    let seconds = t0.elapsed().as_secs_f64();
    // Read back and verify exactly what a runner will check (FORMATS.md §7.3).
    let mut check = (*trunk).clone();
    let bin = IoFile::open(bin_tmp)?;
    check
        .validate(cfg, index, &bin, json_tmp)
        .map_err(|e| Error::io(format!("verifying the packed trunk: {}", e.message)))?;
    drop(bin);
    std::fs::write(json_tmp, trunk.to_json())
        .map_err(|e| write_error(json_tmp, "cannot write", e))?;
    std::fs::File::open(json_tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| write_error(json_tmp, "write-back failed", e))?;
    // Only now touch the final names: old layout away first, then the data, then the layout.
    let json = out_dir.join(TRUNK_JSON);
    let bin_path = out_dir.join(TRUNK_BIN);
    match std::fs::remove_file(&json) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write_error(&json, "cannot replace", e)),
    }
    std::fs::rename(bin_tmp, &bin_path)
        .map_err(|e| write_error(&bin_path, "cannot rename into place", e))?;
    std::fs::rename(json_tmp, &json)
        .map_err(|e| write_error(&json, "cannot rename into place", e))?;
    if let Ok(d) = std::fs::File::open(out_dir) {
        let _ = d.sync_all();
    }
    Ok((seconds, direct))
}

/// Write-back every [`FLUSH_EVERY`] bytes: the written range synced and dropped from the page
/// cache, so packing 109 GB never fills memory with dirty pages.
#[derive(Default)]
struct Flush {
    unflushed: u64,
    flushed_to: u64,
}

impl Flush {
    /// `n` more bytes were written, the file now reaching `end`.
    fn written(&mut self, out: &std::fs::File, path: &Path, end: u64, n: u64) -> Result<()> {
        self.unflushed += n;
        if self.unflushed >= FLUSH_EVERY {
            out.sync_data()
                .map_err(|e| write_error(path, "write-back failed", e))?;
            crate::io::sys::drop_file_cache(out, self.flushed_to, end - self.flushed_to);
            self.flushed_to = end;
            self.unflushed = 0;
        }
        Ok(())
    }
}

/// Copies layer `l`'s run from `src` to its `file_off` in `out` as it lies in the shard, in
/// direct reads of [`COPY_CHUNK`]; `told(n, rel)` after each chunk. Returns whether every read
/// was direct, and the run's SHA-256 (`sha256` of `trunk.json`), hashed from the bytes read
/// while they are written.
fn copy_run(
    src: &IoFile,
    l: &super::PackedLayer,
    out: &std::fs::File,
    buf: &mut AlignedBuf,
    flush: &mut Flush,
    path: &Path,
    told: &mut dyn FnMut(u64, u64),
) -> Result<(bool, [u8; 32])> {
    let run_len = l.run_len();
    let mut direct = true;
    let mut rel = 0u64;
    let mut sha = Sha256::new();
    while rel < run_len {
        let n = ((run_len - rel) as usize).min(COPY_CHUNK);
        let r = src.read_window(l.run_start + rel, n, buf)?;
        direct &= r.direct;
        let at = l.file_off + rel;
        let data = &buf[r.pad..r.pad + n];
        // The hash on a thread of its own while the chunk is written: one core hashes at a
        // few hundred MB/s, slower than a fast disk.
        std::thread::scope(|s| {
            s.spawn(|| sha.update(data));
            out.write_all_at(data, at)
                .map_err(|e| write_error(path, &format!("write at offset {at} failed"), e))
        })?;
        rel += n as u64;
        flush.written(out, path, at + n as u64, n as u64)?;
        told(n as u64, rel);
    }
    Ok((direct, sha.finish()))
}
