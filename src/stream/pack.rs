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
use crate::digest::sha256::{from_hex, to_hex};
use crate::error::{Error, Result};
use crate::io::ALIGN;
use crate::json::{self, Object, Value};
use crate::safetensors::{shape_str, Dtype};
use crate::stream::coded::{CodedBlock, CODEC_NAME};
use std::path::Path;

mod coded;
mod validate;
mod verify;
mod write;
pub use verify::{has_sums, verify, Against, LayerChecked, Verified};
pub use write::{check_out_dir, pack, Codec, PackProgress, PackSummary};

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
    /// Offset of the run in `trunk.bin` (a multiple of `align`); with a codec, of its first
    /// block.
    pub file_off: u64,
    /// The run's tensors, in run order.
    pub tensors: Vec<PackedTensor>,
    /// With a codec: the run's blocks in run order (docs/formats.md, "Packed trunk with a
    /// codec"); empty without one.
    pub blocks: Vec<CodedBlock>,
    /// SHA-256 of the run's bytes as they lie in the shard (`run_len` bytes; for a coded run,
    /// the decoded bytes): `sha256` in `trunk.json`, written by `k3 pack-trunk` and checked by
    /// `k3 verify --trunk`. None in a manifest written before the sums (or by another tool).
    pub sha256: Option<[u8; 32]>,
    /// With a codec: SHA-256 of each block's stored bytes in `trunk.bin` (`clen` bytes at
    /// `off`), one per entry of `blocks` (`block_sha256`); empty when absent.
    pub block_sha256: Vec<[u8; 32]>,
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
    /// The codec of the runs ([`CODEC_NAME`]), or None: each run stored as it lies in its
    /// shard.
    pub codec: Option<String>,
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
                let at = ts.len();
                ts.push((
                    info.shard,
                    info.offset,
                    info.nbytes,
                    name,
                    s.dtype,
                    s.shape,
                    at,
                ));
            }
            // The catalogue position last: the stable order.
            crate::sort::sort_by_key(&mut ts, |t| (t.0, t.1, t.6));
            let shard = ts.first().map(|t| t.0).ok_or_else(|| {
                Error::internal(format!("layer {l} has no trunk tensors in the catalogue"))
            })?;
            if let Some(t) = ts.iter().find(|t| t.0 != shard) {
                return Err(Error::invalid(format!(
                    "{dir}: layer {l}: trunk split across shards {} and {} ({} is in the latter); a packed trunk needs one run per layer (docs/formats.md#packed-trunk)",
                    index.shards()[shard].file_name,
                    index.shards()[t.0].file_name,
                    t.3
                )));
            }
            for w in ts.windows(2) {
                let end = w[0].1 + w[0].2;
                if w[1].1 != end {
                    return Err(Error::invalid(format!(
                        "{dir}: layer {l}: trunk is not one gap-free run in {}: gap of {} bytes between {} (ends at byte {end}) and {} (begins at byte {}) (docs/formats.md#packed-trunk)",
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
                    .map(|(_, off, nb, name, dtype, shape, _)| PackedTensor {
                        name,
                        off: off - run_start,
                        nbytes: nb,
                        dtype,
                        shape,
                    })
                    .collect(),
                blocks: Vec::new(),
                sha256: None,
                block_sha256: Vec::new(),
            });
        }
        Ok(PackedTrunk {
            n_layers: cfg.num_hidden_layers,
            align: ALIGN as u64,
            layers,
            codec: None,
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
                let mut o = Object::new()
                    .with("layer", l.layer)
                    .with("shard", l.shard.as_str())
                    .with("run_start", l.run_start)
                    .with("nbytes", l.nbytes)
                    .with("file_off", l.file_off)
                    .with("tensors", tensors);
                if self.codec.is_some() {
                    let blocks: Vec<Value> = l
                        .blocks
                        .iter()
                        .map(|b| Value::from(vec![b.start, b.len, b.off, b.clen]))
                        .collect();
                    o.insert("blocks".to_string(), Value::Array(blocks));
                }
                // The sums are members of their own, so a reader that predates them (and
                // ignores unknown members, FORMATS.md §7) reads the layout unchanged.
                if let Some(d) = &l.sha256 {
                    o.insert("sha256".to_string(), Value::from(to_hex(d)));
                }
                if !l.block_sha256.is_empty() {
                    let sums: Vec<Value> = l
                        .block_sha256
                        .iter()
                        .map(|d| Value::from(to_hex(d)))
                        .collect();
                    o.insert("block_sha256".to_string(), Value::Array(sums));
                }
                o.into()
            })
            .collect();
        let mut top = Object::new()
            .with("n_layers", self.n_layers)
            .with("align", self.align);
        if let Some(c) = &self.codec {
            top.insert("codec".to_string(), Value::from(c.as_str()));
        }
        let mut s = Value::from(top.with("layers", Value::Array(layers))).to_json_pretty();
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
        let codec = match top.get("codec") {
            None | Some(Value::Null) => None,
            Some(c) => match c.as_str() {
                Some(CODEC_NAME) => Some(CODEC_NAME.to_string()),
                Some(other) => {
                    return Err(Error::invalid(format!(
                        "{p}: `codec` {other}: not a codec this k3 reads (it reads {CODEC_NAME}); pack the trunk again with this k3"
                    )))
                }
                None => return Err(Error::invalid(format!("{p}: `codec`: expected a string"))),
            },
        };
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
                            "{p}: {at}dtype {other}: a packed trunk holds BF16 and F32 tensors only (a quantised trunk is refused; docs/formats.md#packed-trunk)"
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
            crate::sort::sort_by_key(&mut tensors, |t| t.off);
            let blocks = match (&codec, lo.get("blocks")) {
                (None, _) => Vec::new(),
                (Some(_), b) => parse_blocks(b, &format!("{p}: {at}`blocks`"))?,
            };
            let sha256 = match lo.get("sha256") {
                None => None,
                Some(v) => Some(parse_sum(v, &format!("{p}: {at}`sha256`"))?),
            };
            let block_sha256 = match lo.get("block_sha256") {
                None => Vec::new(),
                Some(v) => {
                    let at = format!("{p}: {at}`block_sha256`");
                    let arr = v.as_array().ok_or_else(|| {
                        Error::invalid(format!("{at}: expected an array of SHA-256 hex strings"))
                    })?;
                    arr.iter()
                        .enumerate()
                        .map(|(i, v)| parse_sum(v, &format!("{at}[{i}]")))
                        .collect::<Result<Vec<_>>>()?
                }
            };
            layers.push(PackedLayer {
                layer,
                shard,
                run_start,
                nbytes,
                file_off,
                tensors,
                blocks,
                sha256,
                block_sha256,
            });
        }
        Ok(PackedTrunk {
            n_layers,
            align,
            layers,
            codec,
        })
    }
}

/// A SHA-256 member: 64 hex digits. Errors (exit 2) name `at`.
fn parse_sum(v: &Value, at: &str) -> Result<[u8; 32]> {
    v.as_str().and_then(from_hex).ok_or_else(|| {
        Error::invalid(format!(
            "{at}: expected a SHA-256 as 64 hex digits; trunk.json is damaged: pack the trunk again"
        ))
    })
}

/// A layer's `blocks`: an array of `[start, len, off, clen]` arrays of non-negative integers.
/// Errors (exit 2) name `at` and the block.
fn parse_blocks(v: Option<&Value>, at: &str) -> Result<Vec<CodedBlock>> {
    let arr = v.and_then(|x| x.as_array()).ok_or_else(|| {
        Error::invalid(format!(
            "{at}: expected an array (a packed trunk with a codec lists every block)"
        ))
    })?;
    arr.iter()
        .enumerate()
        .map(|(i, b)| {
            let n: Option<Vec<u64>> = b.as_array().and_then(|a| {
                a.iter()
                    .map(|x| x.as_number().and_then(|n| n.as_u64()))
                    .collect()
            });
            match n.as_deref() {
                Some(&[start, len, off, clen]) => Ok(CodedBlock {
                    start,
                    len,
                    off,
                    clen,
                }),
                _ => Err(Error::invalid(format!(
                    "{at}[{i}]: expected [start, len, off, clen], four non-negative integers"
                ))),
            }
        })
        .collect()
}
