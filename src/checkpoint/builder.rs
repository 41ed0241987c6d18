//! Building a [`TensorIndex`] shard by shard: interned name components and layouts, the
//! open-addressed name table.

use super::*;

/// Builds a [`TensorIndex`] shard by shard. [`TensorIndex::open`] uses it; tests and tools use
/// it to index headers without files.
pub struct IndexBuilder {
    pub(super) idx: TensorIndex,
    comp_ids: HashMap<Vec<u8>, u32, FastBuildHasher>,
    layout_ids: HashMap<(Dtype, Vec<u64>), u32, FastBuildHasher>,
    /// Recently used layouts (checkpoints cycle through a handful of shapes).
    recent_layouts: Vec<u32>,
}

impl IndexBuilder {
    /// An empty index for directory `dir`.
    pub fn new(dir: &Path) -> IndexBuilder {
        IndexBuilder {
            idx: TensorIndex {
                dir: dir.to_path_buf(),
                has_index_file: false,
                shards: Vec::new(),
                entries: Vec::new(),
                present: 0,
                codes: Vec::new(),
                comp_bytes: Vec::new(),
                comp_off: vec![0],
                layouts: Vec::new(),
                dims: Vec::new(),
                table: Vec::new(),
            },
            comp_ids: HashMap::default(),
            layout_ids: HashMap::default(),
            recent_layouts: Vec::new(),
        }
    }

    fn comp_id(&mut self, part: &[u8]) -> Result<u32> {
        if let Some(&c) = self.comp_ids.get(part) {
            return Ok(c);
        }
        let c = u32::try_from(self.comp_ids.len()).map_err(|_| too_big("name components"))?;
        self.idx.comp_bytes.extend_from_slice(part);
        let end = u32::try_from(self.idx.comp_bytes.len()).map_err(|_| too_big("name bytes"))?;
        self.idx.comp_off.push(end);
        self.comp_ids.insert(part.to_vec(), c);
        Ok(c)
    }

    fn layout_id(&mut self, dtype: Dtype, shape: &[u64], nbytes: u64) -> Result<u32> {
        for &l in &self.recent_layouts {
            let lay = &self.idx.layouts[l as usize];
            let s = lay.dims_start as usize;
            if lay.dtype == dtype && &self.idx.dims[s..s + lay.ndim as usize] == shape {
                return Ok(l);
            }
        }
        let l = self.layout_id_slow(dtype, shape, nbytes)?;
        if self.recent_layouts.len() == 16 {
            self.recent_layouts.remove(0);
        }
        self.recent_layouts.push(l);
        Ok(l)
    }

    fn layout_id_slow(&mut self, dtype: Dtype, shape: &[u64], nbytes: u64) -> Result<u32> {
        let key = (dtype, shape.to_vec());
        if let Some(&l) = self.layout_ids.get(&key) {
            return Ok(l);
        }
        let l = u32::try_from(self.idx.layouts.len())
            .ok()
            .filter(|&l| l != ABSENT)
            .ok_or_else(|| too_big("layouts"))?;
        let dims_start =
            u32::try_from(self.idx.dims.len()).map_err(|_| too_big("shape dimensions"))?;
        self.idx.dims.extend_from_slice(shape);
        self.idx.layouts.push(Layout {
            dtype,
            dims_start,
            ndim: shape.len() as u32,
            nbytes,
        });
        self.layout_ids.insert(key, l);
        Ok(l)
    }

    /// Rebuilds the table with room for at least `want` entries at load ≤ 1/2.
    fn grow_table(&mut self, want: usize) {
        let idx = &mut self.idx;
        let cap = (want * 2).next_power_of_two().max(1024);
        idx.table = vec![EMPTY; cap];
        let mask = cap - 1;
        let mut buf = String::new();
        for i in 0..idx.entries.len() {
            buf.clear();
            idx.write_name(i, &mut buf);
            let mut slot = (name_hash(&buf) as usize) & mask;
            while idx.table[slot] != EMPTY {
                slot = (slot + 1) & mask;
            }
            idx.table[slot] = i as u32;
        }
    }

    /// Adds one entry; returns `Err(existing index)` if the name is already indexed.
    fn insert(
        &mut self,
        name: &str,
        offset: u64,
        layout: u32,
        shard: u32,
    ) -> Result<std::result::Result<usize, usize>> {
        let h = name_hash(name);
        if let Some(i) = self.idx.find_hashed(name, h) {
            return Ok(Err(i));
        }
        if (self.idx.entries.len() + 1) * 2 > self.idx.table.len() {
            self.grow_table((self.idx.entries.len() + 1) * 2);
        }
        let i = self.idx.entries.len();
        let i32_ = u32::try_from(i)
            .ok()
            .filter(|&x| x != EMPTY)
            .ok_or_else(|| too_big("tensors"))?;
        let code_off = u32::try_from(self.idx.codes.len()).map_err(|_| too_big("name codes"))?;
        for part in name.as_bytes().split(|&c| c == b'.') {
            let c = self.comp_id(part)?;
            push_varint(&mut self.idx.codes, c);
        }
        self.idx.entries.push(Entry {
            offset,
            code_off,
            tag: (h >> 32) as u32,
            layout,
            shard,
        });
        let mask = self.idx.table.len() - 1;
        let mut slot = (h as usize) & mask;
        while self.idx.table[slot] != EMPTY {
            slot = (slot + 1) & mask;
        }
        self.idx.table[slot] = i32_;
        Ok(Ok(i))
    }

    /// Adds a present shard and all tensors of its validated header. Errors (exit 2): a tensor
    /// name already indexed from another shard, or (after absent names were added) a name the
    /// index file places elsewhere.
    pub fn add_shard(
        &mut self,
        file_name: &str,
        path: PathBuf,
        file_size: u64,
        header: &ShardHeader<'_>,
    ) -> Result<usize> {
        if self.idx.present != self.idx.entries.len() {
            return Err(Error::internal(
                "IndexBuilder: present shards must be added before absent names",
            ));
        }
        let shard = self.idx.shards.len();
        let shard32 = u32::try_from(shard).map_err(|_| too_big("shards"))?;
        let want = self.idx.entries.len() + header.len();
        if want * 2 > self.idx.table.len() {
            self.grow_table(want);
        }
        self.idx.entries.reserve(header.len());
        for t in header.iter() {
            let layout = self.layout_id(t.dtype, t.shape, t.nbytes())?;
            let offset = header.absolute(t.begin);
            if let Err(prev) = self.insert(t.name, offset, layout, shard32)? {
                let other = &self.idx.shards[self.idx.entries[prev].shard as usize];
                return Err(Error::invalid(format!(
                    "{}: tensor \"{}\" is also in shard {} (a tensor name found in two shards is refused, docs/formats.md#the-shard-index)",
                    path.display(),
                    t.name,
                    other.file_name
                )));
            }
        }
        self.idx.present = self.idx.entries.len();
        self.idx.shards.push(Shard {
            file_name: file_name.to_string(),
            path,
            present: true,
            file_size,
            header_len: header.header_len,
            header_fnv: header.fnv,
            n_tensors: header.len(),
        });
        Ok(shard)
    }

    /// Adds a shard listed by the index file whose file does not exist.
    pub fn add_absent_shard(&mut self, file_name: &str, path: PathBuf) -> usize {
        self.idx.shards.push(Shard {
            file_name: file_name.to_string(),
            path,
            present: false,
            file_size: 0,
            header_len: 0,
            header_fnv: 0,
            n_tensors: 0,
        });
        self.idx.shards.len() - 1
    }

    /// Records that the index file maps `name` to the absent shard `shard`.
    pub fn add_absent_name(&mut self, name: &str, shard: usize) -> Result<()> {
        let s32 = u32::try_from(shard).map_err(|_| too_big("shards"))?;
        match self.insert(name, 0, ABSENT, s32)? {
            Ok(_) => {
                self.idx.shards[shard].n_tensors += 1;
                Ok(())
            }
            Err(prev) => {
                let e = self.idx.entries[prev];
                if e.layout == ABSENT {
                    return Err(Error::invalid(format!(
                        "{}: duplicate weight_map entry \"{name}\"",
                        self.idx.dir.join(INDEX_FILE).display()
                    )));
                }
                let other = &self.idx.shards[e.shard as usize];
                Err(Error::invalid(format!(
                    "{}: maps tensor \"{name}\" to shard {}, which does not exist, but the tensor is in shard {}",
                    self.idx.dir.join(INDEX_FILE).display(),
                    self.idx.shards[shard].file_name,
                    other.file_name
                )))
            }
        }
    }

    /// The finished index, with spare capacity released.
    pub fn finish(mut self) -> TensorIndex {
        let idx = &mut self.idx;
        idx.entries.shrink_to_fit();
        idx.codes.shrink_to_fit();
        idx.comp_bytes.shrink_to_fit();
        idx.comp_off.shrink_to_fit();
        idx.layouts.shrink_to_fit();
        idx.dims.shrink_to_fit();
        idx.shards.shrink_to_fit();
        self.idx
    }
}

pub(super) fn too_big(what: &str) -> Error {
    Error::invalid(format!(
        "the checkpoint has more {what} than the tensor index can hold (2^32)"
    ))
}
