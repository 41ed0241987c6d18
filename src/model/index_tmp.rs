//! TEMPORARY stand-in for `checkpoint::TensorIndex` (branch `foundations`) so the run command
//! can bind before that lands: every `*.safetensors` file of the directory, its header parsed
//! with the engine's JSON scanner, tensors checked to lie inside the file. To be replaced by
//! the real index (FORMATS.md §2.4, §3 validation) — not a second parser to keep.

use super::weights::{Dtype, TensorLookup, TensorMeta};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// name → meta over a directory's shards.
pub struct HeaderIndex {
    shards: Vec<PathBuf>,
    tensors: HashMap<String, TensorMeta>,
    /// The raw JSON header bytes of each shard (for the weights tag).
    pub headers: Vec<Vec<u8>>,
}

impl HeaderIndex {
    /// Indexes `dir`.
    pub fn open(dir: &Path) -> Result<HeaderIndex> {
        let rd = std::fs::read_dir(dir)
            .map_err(|e| Error::invalid(format!("{}: {e}", dir.display())))?;
        let mut shards: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().map(|x| x == "safetensors").unwrap_or(false))
            .collect();
        shards.sort();
        if shards.is_empty() {
            return Err(Error::invalid(format!(
                "{}: no *.safetensors shards",
                dir.display()
            )));
        }
        let mut tensors = HashMap::new();
        let mut headers = Vec::new();
        for (si, p) in shards.iter().enumerate() {
            let bad = |m: String| Error::invalid(format!("{}: {m}", p.display()));
            let mut f = std::fs::File::open(p).map_err(|e| bad(e.to_string()))?;
            let size = f.metadata().map_err(|e| bad(e.to_string()))?.len();
            let mut nb = [0u8; 8];
            f.read_exact(&mut nb)
                .map_err(|_| bad("file shorter than 8 bytes".into()))?;
            let n = u64::from_le_bytes(nb);
            if n > 100_000_000 || 8 + n > size {
                return Err(bad(format!("header length {n} exceeds the file")));
            }
            let mut h = vec![0u8; n as usize];
            f.read_exact(&mut h).map_err(|e| bad(e.to_string()))?;
            let v = crate::json::parse(&h).map_err(|e| e.into_error(p.display(), 8))?;
            let obj = v
                .as_object()
                .ok_or_else(|| bad("header is not an object".into()))?;
            let mut end_max = 0u64;
            for (name, t) in obj.iter() {
                if name == "__metadata__" {
                    continue;
                }
                let dtype = match t.get("dtype").and_then(|d| d.as_str()) {
                    Some("BF16") => Dtype::Bf16,
                    Some("F32") => Dtype::F32,
                    Some("U8") => Dtype::U8,
                    Some("F16") => Dtype::Other("F16"),
                    Some(_) => Dtype::Other("other"),
                    None => return Err(bad(format!("{name}: no dtype"))),
                };
                let shape: Vec<u64> = t
                    .get("shape")
                    .and_then(|s| s.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_number().and_then(|n| n.as_u64()))
                            .collect()
                    })
                    .unwrap_or_default();
                let off: Vec<u64> = t
                    .get("data_offsets")
                    .and_then(|s| s.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_number().and_then(|n| n.as_u64()))
                            .collect()
                    })
                    .unwrap_or_default();
                if off.len() != 2 || off[0] > off[1] {
                    return Err(bad(format!("{name}: bad data_offsets")));
                }
                end_max = end_max.max(off[1]);
                tensors.insert(
                    name.to_string(),
                    TensorMeta {
                        shard: si,
                        offset: 8 + n + off[0],
                        len: off[1] - off[0],
                        dtype,
                        shape,
                    },
                );
            }
            if 8 + n + end_max != size {
                return Err(bad(format!(
                    "data section is {} bytes but the tensors cover {end_max} (truncated or corrupt)",
                    size - 8 - n
                )));
            }
            headers.push(h);
        }
        Ok(HeaderIndex {
            shards,
            tensors,
            headers,
        })
    }
}

impl TensorLookup for HeaderIndex {
    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.tensors.get(name).cloned()
    }
    fn shard_paths(&self) -> Vec<PathBuf> {
        self.shards.clone()
    }
}
