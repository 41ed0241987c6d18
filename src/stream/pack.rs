//! The packed trunk (FORMATS.md §7, ENGINE.md §5): `trunk.bin` holds every layer's trunk run
//! at a 4096-aligned offset, so that streaming a layer is one aligned sequential read, and
//! `trunk.json` says where each run and tensor is.
//!
//! * [`PackedTrunk::plan`] lays out the trunk of a checkpoint (refusing a layer whose trunk is
//!   not one gap-free run in one shard, naming the layer and the first gap);
//! * [`pack`] copies the runs (`k3 pack-trunk`), writing `trunk.bin.tmp` and `trunk.json.tmp`
//!   and renaming both only when complete, so an interrupted pack never leaves a trunk that
//!   loads;
//! * [`PackedTrunk::open`] reads `trunk.json` and validates it against the config, the shard
//!   headers and `trunk.bin` (FORMATS.md §7.3), accepting any packed trunk of the same layout.

use crate::catalogue::{layer_suffixes, layer_tensor_name};
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::out::{is_disk_full, TMP_SUFFIX};
use crate::io::{AlignedBuf, IoFile, ALIGN};
use crate::json::{self, Object, Value};
use crate::safetensors::{shape_str, Dtype};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// File name of the packed runs.
pub const TRUNK_BIN: &str = "trunk.bin";
/// File name of the layout.
pub const TRUNK_JSON: &str = "trunk.json";

/// Bytes per copy step of [`pack`] (one direct read, one write).
const COPY_CHUNK: usize = 64 << 20;
/// Written bytes between two write-backs + `DONTNEED` (keeps the page cache bounded).
const FLUSH_EVERY: u64 = 256 << 20;

/// One trunk tensor inside its layer's run (FORMATS.md §7.1 `tensors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTensor {
    /// Full tensor name.
    pub name: String,
    /// Byte offset within the run.
    pub off: u64,
    /// Exact tensor bytes.
    pub nbytes: u64,
    /// `BF16` or `F32`.
    pub dtype: Dtype,
    /// Dimensions.
    pub shape: Vec<u64>,
}

/// One layer's run (FORMATS.md §7.1 `layers[i]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedLayer {
    /// Zero-based layer.
    pub layer: usize,
    /// File name of the shard the run was copied from.
    pub shard: String,
    /// Absolute offset of the run in the shard.
    pub run_start: u64,
    /// Run length rounded up to 4096.
    pub nbytes: u64,
    /// Offset of the run in `trunk.bin` (a multiple of `align`).
    pub file_off: u64,
    /// The run's tensors, in run order.
    pub tensors: Vec<PackedTensor>,
}

impl PackedLayer {
    /// Exact run length: the end of its last tensor.
    pub fn run_len(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.off + t.nbytes)
            .max()
            .unwrap_or(0)
    }
}

/// A packed trunk's layout (`trunk.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTrunk {
    /// Layers of the model.
    pub n_layers: usize,
    /// Alignment of every `file_off` (4096 when written by k3).
    pub align: u64,
    /// One entry per layer, ascending.
    pub layers: Vec<PackedLayer>,
}

fn round_up(n: u64, a: u64) -> Option<u64> {
    n.checked_add(a - 1).map(|v| v / a * a)
}

fn overflow(what: &str) -> Error {
    Error::invalid(format!("{what}: offset arithmetic overflows"))
}

impl PackedTrunk {
    /// The packed layout of the checkpoint behind `index` for `cfg`: for each layer, its trunk
    /// tensors (MODEL.md §4) must lie in one shard and form one gap-free run (sorted by
    /// offset, each starting where the previous ends), copied at the next 4096-aligned offset
    /// of `trunk.bin` (FORMATS.md §7.2).
    ///
    /// Errors (exit 2): a missing trunk tensor or one with the wrong shape or dtype, a layer
    /// split across shards, a gap inside a run — naming the layer, tensors and bytes.
    pub fn plan(cfg: &Config, index: &TensorIndex) -> Result<PackedTrunk> {
        let dir = index.dir().display().to_string();
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        let mut cur = 0u64;
        for l in 0..cfg.num_hidden_layers {
            let mut ts = Vec::new();
            for s in layer_suffixes(cfg, l) {
                let name = layer_tensor_name(l, s.suffix);
                let info = index.get(&name).ok_or_else(|| {
                    Error::invalid(format!(
                        "{dir}: {name}: trunk tensor of layer {l} is missing"
                    ))
                })?;
                if info.dtype != s.dtype || info.shape != s.shape.as_slice() {
                    return Err(Error::invalid(format!(
                        "{dir}: {name}: expected {} {}, found {} {}",
                        s.dtype,
                        shape_str(&s.shape),
                        info.dtype,
                        shape_str(info.shape)
                    )));
                }
                ts.push((info.shard, info.offset, info.nbytes, name, s.dtype, s.shape));
            }
            ts.sort_by_key(|t| (t.0, t.1));
            let shard = ts.first().map(|t| t.0).ok_or_else(|| {
                Error::internal(format!("layer {l} has no trunk tensors in the catalogue"))
            })?;
            if let Some(t) = ts.iter().find(|t| t.0 != shard) {
                return Err(Error::invalid(format!(
                    "{dir}: layer {l}: trunk split across shards {} and {} ({} is in the latter); a packed trunk needs one run per layer (FORMATS.md §7.2)",
                    index.shards()[shard].file_name,
                    index.shards()[t.0].file_name,
                    t.3
                )));
            }
            for w in ts.windows(2) {
                let end = w[0].1 + w[0].2;
                if w[1].1 != end {
                    return Err(Error::invalid(format!(
                        "{dir}: layer {l}: trunk is not one gap-free run in {}: gap of {} bytes between {} (ends at byte {end}) and {} (begins at byte {}) (FORMATS.md §7.2)",
                        index.shards()[shard].file_name,
                        w[1].1 as i128 - end as i128,
                        w[0].3,
                        w[1].3,
                        w[1].1
                    )));
                }
            }
            let run_start = ts[0].1;
            let run_len: u64 = ts.iter().map(|t| t.2).sum();
            let file_off = round_up(cur, ALIGN as u64).ok_or_else(|| overflow("trunk.bin"))?;
            let nbytes = round_up(run_len, ALIGN as u64).ok_or_else(|| overflow("trunk.bin"))?;
            cur = file_off
                .checked_add(run_len)
                .ok_or_else(|| overflow("trunk.bin"))?;
            layers.push(PackedLayer {
                layer: l,
                shard: index.shards()[shard].file_name.clone(),
                run_start,
                nbytes,
                file_off,
                tensors: ts
                    .into_iter()
                    .map(|(_, off, nb, name, dtype, shape)| PackedTensor {
                        name,
                        off: off - run_start,
                        nbytes: nb,
                        dtype,
                        shape,
                    })
                    .collect(),
            });
        }
        Ok(PackedTrunk {
            n_layers: cfg.num_hidden_layers,
            align: ALIGN as u64,
            layers,
        })
    }

    /// Length of `trunk.bin`: the end of the last padded run.
    pub fn bin_len(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.file_off + l.nbytes)
            .max()
            .unwrap_or(0)
    }

    /// Sum of the exact run lengths.
    pub fn run_bytes(&self) -> u64 {
        self.layers.iter().map(PackedLayer::run_len).sum()
    }

    /// `trunk.json` text (FORMATS.md §7.1).
    pub fn to_json(&self) -> String {
        let layers: Vec<Value> = self
            .layers
            .iter()
            .map(|l| {
                let mut tensors = Object::new();
                for t in &l.tensors {
                    tensors.insert(
                        t.name.clone(),
                        Object::new()
                            .with("off", t.off)
                            .with("nbytes", t.nbytes)
                            .with("dtype", t.dtype.name())
                            .with("shape", t.shape.clone()),
                    );
                }
                Object::new()
                    .with("layer", l.layer)
                    .with("shard", l.shard.as_str())
                    .with("run_start", l.run_start)
                    .with("nbytes", l.nbytes)
                    .with("file_off", l.file_off)
                    .with("tensors", tensors)
                    .into()
            })
            .collect();
        let mut s = Value::from(
            Object::new()
                .with("n_layers", self.n_layers)
                .with("align", self.align)
                .with("layers", Value::Array(layers)),
        )
        .to_json_pretty();
        s.push('\n');
        s
    }

    /// Parses `trunk.json` text (structure only; [`PackedTrunk::open`] validates it against
    /// the model). Unknown members are ignored, so packed trunks written by other tools with
    /// the same layout are accepted.
    ///
    /// Errors (exit 2) name `path` and the key: invalid JSON, a missing or mistyped member, a
    /// dtype other than `BF16` or `F32`, an `align` that is not a positive power of two.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<PackedTrunk> {
        let p = path.display();
        let v = json::parse(bytes).map_err(|e| e.into_error(&p, 0))?;
        let top = v
            .as_object()
            .ok_or_else(|| Error::invalid(format!("{p}: expected a JSON object")))?;
        let uint = |o: &Object, key: &str, at: &str| -> Result<u64> {
            o.get(key)
                .and_then(|x| x.as_number())
                .and_then(|n| n.as_u64())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{p}: {at}`{key}`: expected a non-negative integer{}",
                        if o.get(key).is_none() {
                            " (missing)"
                        } else {
                            ""
                        }
                    ))
                })
        };
        let n_layers = uint(top, "n_layers", "")? as usize;
        let align = uint(top, "align", "")?;
        if align == 0 || !align.is_power_of_two() {
            return Err(Error::invalid(format!(
                "{p}: `align` {align}: expected a positive power of two"
            )));
        }
        let arr = top
            .get("layers")
            .and_then(|x| x.as_array())
            .ok_or_else(|| Error::invalid(format!("{p}: `layers`: expected an array")))?;
        let mut layers = Vec::with_capacity(arr.len());
        for (i, lv) in arr.iter().enumerate() {
            let at = format!("layers[{i}].");
            let lo = lv
                .as_object()
                .ok_or_else(|| Error::invalid(format!("{p}: layers[{i}]: expected an object")))?;
            let layer = uint(lo, "layer", &at)? as usize;
            let at = format!("layer {layer}: ");
            let shard = lo
                .get("shard")
                .and_then(|x| x.as_str())
                .ok_or_else(|| Error::invalid(format!("{p}: {at}`shard`: expected a string")))?
                .to_string();
            let run_start = uint(lo, "run_start", &at)?;
            let nbytes = uint(lo, "nbytes", &at)?;
            let file_off = uint(lo, "file_off", &at)?;
            let to = lo
                .get("tensors")
                .and_then(|x| x.as_object())
                .ok_or_else(|| Error::invalid(format!("{p}: {at}`tensors`: expected an object")))?;
            let mut tensors = Vec::with_capacity(to.len());
            for (name, tv) in to.iter() {
                let at = format!("layer {layer}: {name}: ");
                let o = tv
                    .as_object()
                    .ok_or_else(|| Error::invalid(format!("{p}: {at}expected an object")))?;
                let dname = o.get("dtype").and_then(|x| x.as_str()).ok_or_else(|| {
                    Error::invalid(format!("{p}: {at}`dtype`: expected a string"))
                })?;
                let dtype = match dname {
                    "BF16" => Dtype::BF16,
                    "F32" => Dtype::F32,
                    other => {
                        return Err(Error::invalid(format!(
                            "{p}: {at}dtype {other}: a packed trunk holds BF16 and F32 tensors only (a quantised trunk is refused; FORMATS.md §7.3)"
                        )))
                    }
                };
                let shape = o
                    .get("shape")
                    .and_then(|x| x.as_array())
                    .and_then(|a| {
                        a.iter()
                            .map(|d| d.as_number().and_then(|n| n.as_u64()))
                            .collect::<Option<Vec<u64>>>()
                    })
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "{p}: {at}`shape`: expected an array of non-negative integers"
                        ))
                    })?;
                tensors.push(PackedTensor {
                    name: name.to_string(),
                    off: uint(o, "off", &at)?,
                    nbytes: uint(o, "nbytes", &at)?,
                    dtype,
                    shape,
                });
            }
            tensors.sort_by_key(|t| t.off);
            layers.push(PackedLayer {
                layer,
                shard,
                run_start,
                nbytes,
                file_off,
                tensors,
            });
        }
        Ok(PackedTrunk {
            n_layers,
            align,
            layers,
        })
    }

    /// Opens the packed trunk in `dir` for the model of `cfg` behind `index`: parses
    /// `trunk.json`, opens `trunk.bin` and validates everything FORMATS.md §7.3 lists — layer
    /// count and coverage, aligned non-overlapping runs inside `trunk.bin`, each layer's tensor
    /// set, dtype, shape and size against the catalogue, shard, run start and offsets against
    /// the shard headers, and the first and last min(4096, run length) bytes of every run
    /// against the shard. Layers come back in ascending order.
    ///
    /// Errors (exit 2, before the run) name the file, layer, tensor or key and what differs.
    pub fn open(dir: &Path, cfg: &Config, index: &TensorIndex) -> Result<(PackedTrunk, IoFile)> {
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
        let mut t = PackedTrunk::parse(&text, &jpath)?;
        let bin = IoFile::open(&bpath)?;
        t.validate(cfg, index, &bin, &jpath)?;
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
        let mut seen = vec![false; nl];
        for l in &self.layers {
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
        self.layers.sort_by_key(|l| l.layer);
        let bin_len = bin.len_at_open();
        let bpath = bin.path().display().to_string();
        // Runs: aligned, inside trunk.bin, not overlapping (in file order).
        let mut by_off: Vec<&PackedLayer> = self.layers.iter().collect();
        by_off.sort_by_key(|l| l.file_off);
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
            if l.nbytes < run_len {
                return Err(Error::invalid(format!(
                    "{lp}: nbytes {} is shorter than its tensors ({run_len} bytes)",
                    l.nbytes
                )));
            }
            let end = l
                .file_off
                .checked_add(l.nbytes)
                .ok_or_else(|| overflow(&lp))?;
            if l.file_off.saturating_add(run_len) > bin_len {
                return Err(Error::invalid(format!(
                    "{lp}: run [{}, {}) lies past the end of {bpath} ({bin_len} bytes): trunk.bin is truncated or belongs to another layout",
                    l.file_off,
                    l.file_off + run_len
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
        // Tensors against the catalogue and the shard headers.
        for l in &self.layers {
            let lp = format!("{p}: layer {}", l.layer);
            let specs = layer_suffixes(cfg, l.layer);
            if l.tensors.len() != specs.len() {
                return Err(Error::invalid(format!(
                    "{lp}: {} tensors, but the catalogue has {} trunk tensors for this layer (MODEL.md §4)",
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
                if t.off.checked_add(t.nbytes).is_none_or(|e| e > l.nbytes) {
                    return Err(Error::invalid(format!(
                        "{lp}: {name}: [{}, {}) lies outside the run ({} bytes)",
                        t.off,
                        t.off.saturating_add(t.nbytes),
                        l.nbytes
                    )));
                }
                let info = index.get(&name).ok_or_else(|| {
                    Error::invalid(format!("{lp}: {name}: not in the checkpoint"))
                })?;
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
            // First and last min(4096, run length) bytes equal in trunk.bin and the shard.
            let sfile = IoFile::open(&index.shards()[shard].path)?;
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
        }
        Ok(())
    }
}

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
    progress: &mut dyn FnMut(&PackProgress),
) -> Result<PackSummary> {
    let trunk = PackedTrunk::plan(cfg, index)?;
    check_out_dir(out_dir)?;
    let bin_tmp = out_dir.join(format!("{TRUNK_BIN}{TMP_SUFFIX}"));
    let json_tmp = out_dir.join(format!("{TRUNK_JSON}{TMP_SUFFIX}"));
    let res = write_files(cfg, index, &trunk, out_dir, &bin_tmp, &json_tmp, progress);
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
    std::fs::create_dir_all(out_dir).map_err(|e| bad(&e, "cannot create the directory"))?;
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
    trunk: &PackedTrunk,
    out_dir: &Path,
    bin_tmp: &Path,
    json_tmp: &Path,
    progress: &mut dyn FnMut(&PackProgress),
) -> Result<(f64, bool)> {
    let out =
        std::fs::File::create(bin_tmp).map_err(|e| write_error(bin_tmp, "cannot create", e))?;
    let total = trunk.run_bytes();
    let mut buf = AlignedBuf::new(COPY_CHUNK + 2 * ALIGN)?;
    let t0 = Instant::now();
    let mut done = 0u64;
    let mut unflushed = 0u64;
    let mut flushed_to = 0u64;
    let mut direct = true;
    let mut shards: Vec<Option<IoFile>> = index.shards().iter().map(|_| None).collect();
    for (li, l) in trunk.layers.iter().enumerate() {
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
        let mut rel = 0u64;
        while rel < run_len {
            let n = ((run_len - rel) as usize).min(COPY_CHUNK);
            let r = src.read_window(l.run_start + rel, n, &mut buf)?;
            direct &= r.direct;
            let at = l.file_off + rel;
            out.write_all_at(&buf[r.pad..r.pad + n], at)
                .map_err(|e| write_error(bin_tmp, &format!("write at offset {at} failed"), e))?;
            rel += n as u64;
            done += n as u64;
            unflushed += n as u64;
            if unflushed >= FLUSH_EVERY {
                out.sync_data()
                    .map_err(|e| write_error(bin_tmp, "write-back failed", e))?;
                crate::io::sys::drop_file_cache(&out, flushed_to, at + n as u64 - flushed_to);
                flushed_to = at + n as u64;
                unflushed = 0;
            }
            progress(&PackProgress {
                layers_done: li + usize::from(rel == run_len),
                layers: trunk.layers.len(),
                bytes_done: done,
                bytes: total,
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
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
    let mut check = trunk.clone();
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
