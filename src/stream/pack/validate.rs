//! Opening a packed trunk: `trunk.json` validated against the config, the shard headers and
//! `trunk.bin` (FORMATS.md §7.3).

use super::{overflow, PackedLayer, PackedTrunk, TRUNK_BIN, TRUNK_JSON};
use crate::catalogue::{layer_suffixes, layer_tensor_name};
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::IoFile;
use crate::safetensors::shape_str;
use std::path::Path;

impl PackedTrunk {
    /// Opens the packed trunk in `dir` for the model of `cfg` behind `index`: parses
    /// `trunk.json`, opens `trunk.bin` and validates everything FORMATS.md §7.3 lists — layer
    /// count and coverage, aligned non-overlapping runs inside `trunk.bin`, each layer's tensor
    /// set, dtype, shape and size against the catalogue, shard, run start and offsets against
    /// the shard headers, and the first and last min(4096, run length) bytes of every run
    /// against the shard. Layers come back in ascending order.
    ///
    /// Errors (exit 2, before the run) name the file, layer, tensor or key and what differs.
    pub fn open(dir: &Path, cfg: &Config, index: &TensorIndex) -> Result<(PackedTrunk, IoFile)> {
        let (mut t, bin, jpath) = read(dir)?;
        t.validate(cfg, index, &bin, &jpath)?;
        Ok((t, bin))
    }

    /// Opens the packed trunk in `dir` without its model (`k3 verify --trunk` without
    /// `--against`): parses `trunk.json`, opens `trunk.bin` and validates what needs no model —
    /// every layer of `n_layers` exactly once, aligned non-overlapping runs (and blocks) inside
    /// `trunk.bin`. Layers come back in ascending order.
    ///
    /// Errors (exit 2) as for [`PackedTrunk::open`].
    pub fn open_alone(dir: &Path) -> Result<(PackedTrunk, IoFile)> {
        let (mut t, bin, jpath) = read(dir)?;
        let p = jpath.display();
        check_layer_set(&t.layers, t.n_layers, &p)?;
        t.layers.sort_unstable_by_key(|l| l.layer);
        t.check_runs(&bin, &p)?;
        Ok((t, bin))
    }

    /// FORMATS.md §7.3 against the model and `bin` (see [`PackedTrunk::open`]); sorts the
    /// layers ascending.
    pub fn validate(
        &mut self,
        cfg: &Config,
        index: &TensorIndex,
        bin: &IoFile,
        jpath: &Path,
    ) -> Result<()> {
        let p = jpath.display();
        let nl = cfg.num_hidden_layers;
        if self.n_layers != nl {
            return Err(Error::invalid(format!(
                "{p}: n_layers {} but the config has num_hidden_layers {nl}: the packed trunk belongs to another model",
                self.n_layers
            )));
        }
        check_layer_set(&self.layers, nl, &p)?;
        // Distinct (checked above).
        crate::sort::sort_by_key(&mut self.layers, |l| l.layer);
        self.check_runs(bin, &p)?;
        // Tensors against the catalogue and the shard headers.
        for l in &self.layers {
            let lp = format!("{p}: layer {}", l.layer);
            let (shard, run_len) = check_tensors(l, cfg, index, &lp)?;
            // First and last min(4096, run length) bytes equal in trunk.bin and the shard.
            check_run_bytes(l, bin, index, shard, run_len, &lp)?;
        }
        Ok(())
    }

    /// Runs: aligned, inside `bin`, not overlapping (in file order; FORMATS.md §7.3). Errors
    /// (exit 2) name `trunk.json` (`p`), the layer and the offsets.
    fn check_runs(&self, bin: &IoFile, p: &dyn std::fmt::Display) -> Result<()> {
        let bin_len = bin.len_at_open();
        let bpath = bin.path().display().to_string();
        // Runs: aligned, inside trunk.bin, not overlapping (in file order).
        let mut by_off: Vec<&PackedLayer> = self.layers.iter().collect();
        crate::sort::sort_by_key(&mut by_off, |l| (l.file_off, l.layer));
        let mut prev_end = 0u64;
        let mut prev_layer = None;
        for l in &by_off {
            let lp = format!("{p}: layer {}", l.layer);
            if l.file_off % self.align != 0 {
                return Err(Error::invalid(format!(
                    "{lp}: file_off {} is not a multiple of align {}",
                    l.file_off, self.align
                )));
            }
            let run_len = l.run_len();
            if !l.blocks.is_empty() {
                // a coded run: its blocks are checked on their own; here its place
                super::coded::check_blocks(l, self.align, bin_len, &lp)?;
            } else if l.nbytes < run_len {
                return Err(Error::invalid(format!(
                    "{lp}: nbytes {} is shorter than its tensors ({run_len} bytes)",
                    l.nbytes
                )));
            }
            let end = l
                .file_off
                .checked_add(l.nbytes)
                .ok_or_else(|| overflow(&lp))?;
            let stored = if l.blocks.is_empty() {
                run_len
            } else {
                l.nbytes
            };
            if l.file_off.saturating_add(stored) > bin_len {
                return Err(Error::invalid(format!(
                    "{lp}: run [{}, {}) lies past the end of {bpath} ({bin_len} bytes): trunk.bin is truncated or belongs to another layout",
                    l.file_off,
                    l.file_off + stored
                )));
            }
            if l.file_off < prev_end {
                return Err(Error::invalid(format!(
                    "{lp}: run at file_off {} overlaps the run of layer {} (ends at {prev_end})",
                    l.file_off,
                    prev_layer.unwrap_or(0)
                )));
            }
            prev_end = end;
            prev_layer = Some(l.layer);
        }
        Ok(())
    }
}

/// `dir`'s `trunk.json` parsed, `trunk.bin` opened, and the layout's path. Errors (exit 2):
/// `dir` is not a directory (naming `--trunk`), `trunk.json` is unreadable or malformed;
/// `trunk.bin` missing.
fn read(dir: &Path) -> Result<(PackedTrunk, IoFile, std::path::PathBuf)> {
    let jpath = dir.join(TRUNK_JSON);
    let bpath = dir.join(TRUNK_BIN);
    if !dir.is_dir() {
        return Err(Error::invalid(format!(
            "flag `--trunk`: {} is not a directory",
            dir.display()
        )));
    }
    let text = std::fs::read(&jpath).map_err(|e| {
        Error::invalid(format!(
            "{}: cannot read the packed trunk layout: {e} (write one with `k3 pack-trunk <model_dir> {}`)",
            jpath.display(),
            dir.display()
        ))
    })?;
    let t = PackedTrunk::parse(&text, &jpath)?;
    let bin = IoFile::open(&bpath)?;
    Ok((t, bin, jpath))
}

/// Every layer `0..nl` exactly once (FORMATS.md §7.3). Errors (exit 2): a layer that does not
/// exist, appears twice or is missing, naming `trunk.json` (`p`).
fn check_layer_set(layers: &[PackedLayer], nl: usize, p: &dyn std::fmt::Display) -> Result<()> {
    let mut seen = vec![false; nl];
    for l in layers {
        if l.layer >= nl {
            return Err(Error::invalid(format!(
                "{p}: layer {} does not exist (n_layers {nl})",
                l.layer
            )));
        }
        if std::mem::replace(&mut seen[l.layer], true) {
            return Err(Error::invalid(format!(
                "{p}: layer {} appears twice",
                l.layer
            )));
        }
    }
    if let Some(m) = seen.iter().position(|s| !s) {
        return Err(Error::invalid(format!("{p}: layer {m} is missing")));
    }
    Ok(())
}

/// Layer `l`'s tensors against the catalogue (set, dtype, shape, size) and the shard headers
/// (shard, run start, offsets; FORMATS.md §7.3). Returns the shard's index and the run length.
/// Errors (exit 2) name the layer (`lp`), the tensor and what differs.
fn check_tensors(
    l: &PackedLayer,
    cfg: &Config,
    index: &TensorIndex,
    lp: &str,
) -> Result<(usize, u64)> {
    let specs = layer_suffixes(cfg, l.layer);
    if l.tensors.len() != specs.len() {
        return Err(Error::invalid(format!(
            "{lp}: {} tensors, but the catalogue has {} trunk tensors for this layer (docs/formats.md#tensor-names)",
            l.tensors.len(),
            specs.len()
        )));
    }
    let shard = index
        .shards()
        .iter()
        .position(|s| s.file_name == l.shard && s.present)
        .ok_or_else(|| {
            Error::invalid(format!(
                "{lp}: shard {} is not a shard of {}",
                l.shard,
                index.dir().display()
            ))
        })?;
    let run_len = l.run_len();
    for s in &specs {
        let name = layer_tensor_name(l.layer, s.suffix);
        let t = l.tensors.iter().find(|t| t.name == name).ok_or_else(|| {
            Error::invalid(format!(
                "{lp}: trunk tensor {name} is missing from `tensors`"
            ))
        })?;
        if t.dtype != s.dtype || t.shape != s.shape {
            return Err(Error::invalid(format!(
                "{lp}: {name}: {} {} but the model requires {} {}",
                t.dtype,
                shape_str(&t.shape),
                s.dtype,
                shape_str(&s.shape)
            )));
        }
        let want = s
            .shape
            .iter()
            .try_fold(s.dtype.size(), |a, &d| a.checked_mul(d))
            .ok_or_else(|| overflow(&name))?;
        if t.nbytes != want {
            return Err(Error::invalid(format!(
                "{lp}: {name}: nbytes {} but {} {} is {want} bytes",
                t.nbytes,
                t.dtype,
                shape_str(&t.shape)
            )));
        }
        let run_bytes = l.blocks.last().map_or(l.nbytes, |b| b.end());
        if t.off.checked_add(t.nbytes).is_none_or(|e| e > run_bytes) {
            return Err(Error::invalid(format!(
                "{lp}: {name}: [{}, {}) lies outside the run ({run_bytes} bytes)",
                t.off,
                t.off.saturating_add(t.nbytes),
            )));
        }
        let info = index
            .get(&name)
            .ok_or_else(|| Error::invalid(format!("{lp}: {name}: not in the checkpoint")))?;
        let at = l
            .run_start
            .checked_add(t.off)
            .ok_or_else(|| overflow(&name))?;
        if info.shard != shard || info.offset != at || info.nbytes != t.nbytes {
            return Err(Error::invalid(format!(
                "{lp}: {name}: trunk.json places it at byte {at} of {} ({} bytes), but the checkpoint has it at byte {} of {} ({} bytes): the packed trunk was made from another checkpoint",
                l.shard,
                t.nbytes,
                info.offset,
                index.shards()[info.shard].file_name,
                info.nbytes
            )));
        }
    }
    Ok((shard, run_len))
}

/// The first and last min(4096, `run_len`) bytes of layer `l`'s run equal in `bin` and its
/// shard (FORMATS.md §7.3). Errors: exit 2 naming the first differing byte, or a read failure.
fn check_run_bytes(
    l: &PackedLayer,
    bin: &IoFile,
    index: &TensorIndex,
    shard: usize,
    run_len: u64,
    lp: &str,
) -> Result<()> {
    let sfile = IoFile::open(&index.shards()[shard].path)?;
    if !l.blocks.is_empty() {
        return super::coded::check_block_bytes(l, bin, &sfile, lp);
    }
    let n = run_len.min(4096) as usize;
    let mut a = vec![0u8; n];
    let mut b = vec![0u8; n];
    for rel in [0, run_len - n as u64] {
        bin.read_exact_at(&mut a, l.file_off + rel)
            .map_err(|e| Error::invalid(e.message))?;
        sfile
            .read_exact_at(&mut b, l.run_start + rel)
            .map_err(|e| Error::invalid(e.message))?;
        if a != b {
            let i = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
            return Err(Error::invalid(format!(
                "{lp}: trunk.bin byte {} differs from {} byte {} (run byte {}): the packed trunk is corrupt or was made from other weights; pack it again",
                l.file_off + rel + i as u64,
                l.shard,
                l.run_start + rel + i as u64,
                rel + i as u64
            )));
        }
    }
    Ok(())
}
