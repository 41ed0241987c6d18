//! Which tensor goes in which shard, at which offset (FORMATS.md §2.1).

use crate::config::json_string;
use crate::*;

impl SynthSpec {
    fn shard_name(&self, index: usize, total: usize) -> String {
        let (a, b) = self.shard_name_digits;
        format!("model-{index:0a$}-of-{total:0b$}.safetensors")
    }

    /// The shard plan: which tensors go to which file, in which byte order, with the exact
    /// header bytes. Deterministic. Errors: [`SynthSpec::validate`]'s.
    pub fn plan(&self) -> Result<Plan, String> {
        self.validate()?;
        let nl = self.num_hidden_layers;
        let mut groups: Vec<Vec<TensorDef>> = Vec::new();
        let mut layer = 0;
        while layer < nl {
            let end = if layer == 0 {
                1
            } else {
                (layer + self.layers_per_shard).min(nl)
            };
            let mut t = Vec::new();
            for l in layer..end {
                t.extend(self.layer_tensors(l));
                if !self.is_dense(l) {
                    for e in 0..self.num_experts {
                        t.extend(self.expert_tensors(l, e));
                    }
                }
            }
            groups.push(t);
            layer = end;
        }
        groups.push(self.model_tensors());
        if self.vision_dummies {
            let (mm, vt) = self.vision_tensors();
            groups.push(mm);
            groups.push(vt);
        }
        let total = groups.len();
        let shards = groups
            .into_iter()
            .enumerate()
            .map(|(i, t)| ShardPlan::new(self.shard_name(i + 1, total), t))
            .collect();
        Ok(Plan {
            spec: self.clone(),
            shards,
        })
    }
}

/// A tensor placed in a shard: `[begin, end)` relative to the data section (FORMATS.md §2.1).
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    /// The tensor.
    pub def: TensorDef,
    /// First byte, relative to the data section.
    pub begin: u64,
    /// One past the last byte, relative to the data section.
    pub end: u64,
}

/// One shard file: its name, header bytes and tensors in data order.
#[derive(Clone, Debug)]
pub struct ShardPlan {
    /// File name (no directory).
    pub file_name: String,
    /// The JSON header as written (sorted keys, space-padded so 8 + len is a multiple of 8).
    pub header: Vec<u8>,
    /// Tensors in byte-wise name order, which is also data order.
    pub tensors: Vec<PlannedTensor>,
}

impl ShardPlan {
    pub(crate) fn new(file_name: String, mut defs: Vec<TensorDef>) -> ShardPlan {
        defs.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let mut off = 0u64;
        let tensors: Vec<PlannedTensor> = defs
            .into_iter()
            .map(|def| {
                let begin = off;
                off += def.nbytes();
                PlannedTensor {
                    def,
                    begin,
                    end: off,
                }
            })
            .collect();
        let mut h = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        for t in &tensors {
            let shape: Vec<String> = t.def.shape.iter().map(|d| d.to_string()).collect();
            let _ = write!(
                h,
                ",{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                json_string(&t.def.name),
                t.def.dtype.name(),
                shape.join(","),
                t.begin,
                t.end
            );
        }
        h.push('}');
        while h.len() % 8 != 0 {
            h.push(' ');
        }
        ShardPlan {
            file_name,
            header: h.into_bytes(),
            tensors,
        }
    }

    /// Absolute file offset of the data section: 8 + header length.
    pub fn data_start(&self) -> u64 {
        8 + self.header.len() as u64
    }

    /// Bytes of the data section.
    pub fn data_bytes(&self) -> u64 {
        self.tensors.last().map_or(0, |t| t.end)
    }

    /// Size of the shard file in bytes.
    pub fn file_size(&self) -> u64 {
        self.data_start() + self.data_bytes()
    }
}

/// The complete layout of a synthetic checkpoint.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The spec it was made from.
    pub spec: SynthSpec,
    /// Shards in file-name order.
    pub shards: Vec<ShardPlan>,
}

impl Plan {
    /// Total bytes of all shard files.
    pub fn shard_bytes(&self) -> u64 {
        self.shards.iter().map(ShardPlan::file_size).sum()
    }

    /// Total tensor bytes (the index's `metadata.total_size`).
    pub fn tensor_bytes(&self) -> u64 {
        self.shards.iter().map(ShardPlan::data_bytes).sum()
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.shards.iter().map(|s| s.tensors.len()).sum()
    }

    /// Finds a tensor: (shard index, placed tensor).
    pub fn find(&self, name: &str) -> Option<(usize, &PlannedTensor)> {
        self.shards.iter().enumerate().find_map(|(i, s)| {
            s.tensors
                .binary_search_by(|t| t.def.name.as_bytes().cmp(name.as_bytes()))
                .ok()
                .map(|j| (i, &s.tensors[j]))
        })
    }

    /// Absolute location of a tensor: (shard file name, file offset, byte length).
    pub fn locate(&self, name: &str) -> Option<(&str, u64, u64)> {
        self.find(name).map(|(i, t)| {
            let s = &self.shards[i];
            (
                s.file_name.as_str(),
                s.data_start() + t.begin,
                t.end - t.begin,
            )
        })
    }

    /// `model.safetensors.index.json` text: `metadata.total_size` and the `weight_map` with
    /// sorted names (FORMATS.md §3).
    pub fn index_json(&self) -> String {
        let mut names: Vec<(&str, &str)> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.tensors
                    .iter()
                    .map(move |t| (t.def.name.as_str(), s.file_name.as_str()))
            })
            .collect();
        names.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut s = String::with_capacity(names.len() * 100);
        let _ = write!(
            s,
            "{{\n  \"metadata\": {{\n    \"total_size\": {}\n  }},\n  \"weight_map\": {{",
            self.tensor_bytes()
        );
        for (i, (n, f)) in names.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(s, "{sep}\n    {}: {}", json_string(n), json_string(f));
        }
        s.push_str("\n  }\n}\n");
        s
    }

    /// The bytes of one tensor (see [`tensor_data`]).
    pub fn tensor_data(&self, name: &str) -> Option<Vec<u8>> {
        self.find(name)
            .map(|(_, t)| tensor_data(self.spec.seed, &t.def))
    }
}
