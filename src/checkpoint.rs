//! A checkpoint directory → a compact [`TensorIndex`] (FORMATS.md §2.5, §3).
//!
//! The shard set comes from `model.safetensors.index.json` when present (cross-checked against
//! every present shard's header: a tensor missing from its shard, found in another shard, or
//! not listed is refused) or else from every regular `*.safetensors` file in the directory,
//! in byte-wise file-name order. A tensor name found in two shards is refused.
//!
//! The index must stay small at the released scale (497,220 tensors, names sharing long
//! prefixes). Layout:
//! * names are split at `.` into components; each distinct component is stored once, and a
//!   name is a sequence of LEB128 component ids (about 11 bytes for
//!   `language_model.model.layers.45.block_sparse_moe.experts.512.w1.weight_packed`);
//! * one fixed 24-byte record per tensor (absolute offset, name code, hash tag, layout id,
//!   shard), in (shard, offset) order, so iteration is file order;
//! * distinct (dtype, shape) pairs are interned once ("layouts");
//! * an open-addressed table of u32 entry indices (load ≤ 1/2), keyed by a hash that mixes
//!   every byte of the full name (8 bytes per multiply-rotate step, then an avalanche).
//!
//! About 44 bytes per tensor including names at the released scale (see
//! `tests/engine/checkpoint/`).

use crate::error::{Error, Result};
use crate::json::{Kind, Scanner};
use crate::safetensors::{self, Dtype, FastBuildHasher, FastHasher, ShardHeader};
use k3_kernels::{fnv1a64, Fnv1a64};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// The optional shard index file of a checkpoint directory (FORMATS.md §3).
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// One shard of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard's file name (as listed in the index file, or found in the directory).
    pub file_name: String,
    /// Full path.
    pub path: PathBuf,
    /// False when the index file lists the shard but the file does not exist; its tensors are
    /// then absent (an error only if one of them is needed, FORMATS.md §3).
    pub present: bool,
    /// File size in bytes (0 when absent).
    pub file_size: u64,
    /// N, the JSON header length.
    pub header_len: u64,
    /// FNV-1a-64 of the N header bytes (FORMATS.md §9.1 weights tag input).
    pub header_fnv: u64,
    /// Tensors in this shard's header (for an absent shard: names mapped to it by the index file).
    pub n_tensors: usize,
}

/// Where one tensor's bytes are: shard, absolute file offset, length, dtype and shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo<'i> {
    /// Index into [`TensorIndex::shards`].
    pub shard: usize,
    /// Absolute file offset (8 + N + begin; FORMATS.md §2.1).
    pub offset: u64,
    /// Byte length (= product(shape) × dtype size, validated).
    pub nbytes: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions (`[]` = scalar).
    pub shape: &'i [u64],
}

impl TensorInfo<'_> {
    /// One past the last byte (offset + nbytes).
    pub fn end(&self) -> u64 {
        self.offset + self.nbytes
    }
}

/// A fixed-size index record (24 bytes).
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Absolute file offset of the tensor (unused for absent entries).
    offset: u64,
    /// Start of this name's component code in `codes`; the code ends where the next entry's begins.
    code_off: u32,
    /// Upper 32 bits of the name hash (cheap filter before comparing names).
    tag: u32,
    /// Index into `layouts`, or `ABSENT` for a name listed under an absent shard.
    layout: u32,
    /// Index into `shards`.
    shard: u32,
}

const ABSENT: u32 = u32::MAX;
const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Layout {
    dtype: Dtype,
    dims_start: u32,
    ndim: u32,
    nbytes: u64,
}

/// The compact tensor index of a checkpoint directory (FORMATS.md §2.5): lookup by full name
/// → [`TensorInfo`], iteration in (shard, offset) order, and the shard table.
pub struct TensorIndex {
    dir: PathBuf,
    has_index_file: bool,
    shards: Vec<Shard>,
    entries: Vec<Entry>,
    /// Number of present tensors: `entries[..present]`; absent names follow.
    present: usize,
    codes: Vec<u8>,
    comp_bytes: Vec<u8>,
    /// comp_off[c]..comp_off[c+1] is component c in `comp_bytes`.
    comp_off: Vec<u32>,
    layouts: Vec<Layout>,
    dims: Vec<u64>,
    table: Vec<u32>,
}

fn name_hash(name: &str) -> u64 {
    // Names differ only deep inside long shared prefixes, so the hash must mix every byte:
    // eight bytes per multiply-rotate step, then a final avalanche into the low bits used
    // for the slot (see `FastHasher`).
    let mut h = FastHasher::default();
    h.write(name.as_bytes());
    h.finish()
}

fn read_varint(codes: &[u8], pos: &mut usize) -> u32 {
    let mut v: u32 = 0;
    let mut shift = 0;
    while let Some(&b) = codes.get(*pos) {
        *pos += 1;
        v |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    v
}

fn push_varint(out: &mut Vec<u8>, mut v: u32) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

impl TensorIndex {
    /// Indexes the checkpoint directory `dir` (FORMATS.md §3): reads and validates every
    /// present shard's header (FORMATS.md §2.4) and cross-checks the index file if there is one.
    ///
    /// Errors (exit 2) name the file and tensor: no shards, a bad header, a bad or disagreeing
    /// index file, a tensor in two shards, an unsafe shard file name.
    pub fn open(dir: &Path) -> Result<TensorIndex> {
        let index_path = dir.join(INDEX_FILE);
        if !dir.is_dir() {
            return Err(Error::invalid(format!(
                "{}: not a directory (expected a checkpoint directory)",
                dir.display()
            )));
        }
        if index_path.exists() {
            open_with_index_file(dir, &index_path)
        } else {
            open_without_index_file(dir)
        }
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True when the shard set came from `model.safetensors.index.json`.
    pub fn has_index_file(&self) -> bool {
        self.has_index_file
    }

    /// The shard table: present shards in byte-wise file-name order, then the shards the index
    /// file lists that do not exist (also in file-name order).
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Number of present tensors.
    pub fn len(&self) -> usize {
        self.present
    }

    /// True when no tensor is present.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    fn code_range(&self, i: usize) -> (usize, usize) {
        let a = self.entries[i].code_off as usize;
        let b = self
            .entries
            .get(i + 1)
            .map_or(self.codes.len(), |e| e.code_off as usize);
        (a, b)
    }

    fn comp(&self, c: u32) -> &[u8] {
        let c = c as usize;
        &self.comp_bytes[self.comp_off[c] as usize..self.comp_off[c + 1] as usize]
    }

    /// True when entry `i` is named `name` (compares component by component, no allocation).
    fn matches(&self, i: usize, name: &str) -> bool {
        let (a, b) = self.code_range(i);
        let codes = &self.codes[a..b];
        let mut pos = 0;
        for part in name.as_bytes().split(|&c| c == b'.') {
            if pos >= codes.len() {
                return false;
            }
            let c = read_varint(codes, &mut pos);
            if self.comp(c) != part {
                return false;
            }
        }
        pos == codes.len()
    }

    fn find_entry(&self, name: &str) -> Option<usize> {
        self.find_hashed(name, name_hash(name))
    }

    fn find_hashed(&self, name: &str, h: u64) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let tag = (h >> 32) as u32;
        let mask = self.table.len() - 1;
        let mut slot = (h as usize) & mask;
        loop {
            let e = self.table[slot];
            if e == EMPTY {
                return None;
            }
            let i = e as usize;
            if self.entries[i].tag == tag && self.matches(i, name) {
                return Some(i);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The present tensor named `name` (exact, decoded name).
    pub fn get(&self, name: &str) -> Option<TensorInfo<'_>> {
        let i = self.find_entry(name)?;
        (i < self.present).then(|| self.info(i))
    }

    /// Position of the present tensor `name` in iteration order (0..len).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.find_entry(name).filter(|&i| i < self.present)
    }

    /// When `name` is listed by the index file under a shard that does not exist: that shard.
    pub fn absent_shard_of(&self, name: &str) -> Option<&Shard> {
        let i = self.find_entry(name)?;
        (i >= self.present).then(|| &self.shards[self.entries[i].shard as usize])
    }

    /// Number of names the index file maps to absent shards.
    pub fn absent_len(&self) -> usize {
        self.entries.len() - self.present
    }

    /// Tensor `i` (0..len) in (shard, offset) order.
    pub fn info(&self, i: usize) -> TensorInfo<'_> {
        let e = &self.entries[i];
        let l = &self.layouts[e.layout as usize];
        let s = l.dims_start as usize;
        TensorInfo {
            shard: e.shard as usize,
            offset: e.offset,
            nbytes: l.nbytes,
            dtype: l.dtype,
            shape: &self.dims[s..s + l.ndim as usize],
        }
    }

    /// Appends the name of tensor `i` to `out`.
    pub fn write_name(&self, i: usize, out: &mut String) {
        let (a, b) = self.code_range(i);
        let codes = &self.codes[a..b];
        let mut pos = 0;
        let mut first = true;
        while pos < codes.len() {
            if !first {
                out.push('.');
            }
            first = false;
            let c = read_varint(codes, &mut pos);
            // Components are slices of valid UTF-8 names split at ASCII '.'.
            out.push_str(std::str::from_utf8(self.comp(c)).unwrap_or("\u{fffd}"));
        }
    }

    /// The name of tensor `i`.
    pub fn name(&self, i: usize) -> String {
        let mut s = String::new();
        self.write_name(i, &mut s);
        s
    }

    /// Calls `f(i, name, info)` for every present tensor in (shard, offset) order, reusing one
    /// name buffer.
    pub fn for_each(&self, mut f: impl FnMut(usize, &str, TensorInfo<'_>)) {
        let mut buf = String::new();
        for i in 0..self.present {
            buf.clear();
            self.write_name(i, &mut buf);
            f(i, &buf, self.info(i));
        }
    }

    /// Heap bytes held by the index (names, records, table, layouts, shard table).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.entries.capacity() * size_of::<Entry>()
            + self.codes.capacity()
            + self.comp_bytes.capacity()
            + self.comp_off.capacity() * 4
            + self.layouts.capacity() * size_of::<Layout>()
            + self.dims.capacity() * 8
            + self.table.capacity() * 4
            + self.shards.capacity() * size_of::<Shard>()
            + self
                .shards
                .iter()
                .map(|s| s.file_name.capacity() + s.path.as_os_str().len())
                .sum::<usize>()
    }

    /// The weights tag of FORMATS.md §9.1: FNV-1a-64 over the N header bytes of each shard in
    /// `shards` (indices into [`TensorIndex::shards`]), taken in byte-wise file-name order.
    /// Re-reads the headers; a header that changed since indexing is an I/O failure (exit 4).
    pub fn weights_tag(&self, shards: &[usize]) -> Result<u64> {
        let mut ids: Vec<usize> = shards.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut h = Fnv1a64::new();
        for id in ids {
            let s = self.shards.get(id).ok_or_else(|| {
                Error::internal(format!("weights_tag: shard index {id} out of range"))
            })?;
            let raw = safetensors::read_header(&s.path).map_err(|e| {
                Error::io(format!("{} (re-reading for the weights tag)", e.message))
            })?;
            if raw.bytes.len() as u64 != s.header_len || fnv1a64(&raw.bytes) != s.header_fnv {
                return Err(Error::io(format!(
                    "{}: the safetensors header changed after the checkpoint was indexed",
                    s.path.display()
                )));
            }
            h.update(&raw.bytes);
        }
        Ok(h.finish())
    }
}

// ---------------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------------

/// Builds a [`TensorIndex`] shard by shard. [`TensorIndex::open`] uses it; tests and tools use
/// it to index headers without files.
pub struct IndexBuilder {
    idx: TensorIndex,
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
                    "{}: tensor \"{}\" is also in shard {} (a tensor name found in two shards is refused, FORMATS.md §3)",
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

fn too_big(what: &str) -> Error {
    Error::invalid(format!(
        "the checkpoint has more {what} than the tensor index can hold (2^32)"
    ))
}

fn load_shard(b: &mut IndexBuilder, file_name: &str, path: PathBuf) -> Result<usize> {
    let raw = safetensors::read_header(&path)?;
    let label = path.display().to_string();
    let header = safetensors::parse_header(&label, &raw.bytes, raw.file_size)?;
    b.add_shard(file_name, path, raw.file_size, &header)
}

fn open_without_index_file(dir: &Path) -> Result<TensorIndex> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::invalid(format!("{}: cannot list directory: {e}", dir.display())))?;
    let mut files: Vec<(Vec<u8>, String, PathBuf)> = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| {
            Error::invalid(format!("{}: cannot list directory: {e}", dir.display()))
        })?;
        let os = ent.file_name();
        let bytes = os.as_encoded_bytes().to_vec();
        if !bytes.ends_with(b".safetensors") {
            continue;
        }
        let path = ent.path();
        // Regular files, following symlinks (hub caches link shards to blobs).
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            _ => continue,
        }
        files.push((bytes, os.to_string_lossy().into_owned(), path));
    }
    if files.is_empty() {
        return Err(Error::invalid(format!(
            "{}: no {INDEX_FILE} and no *.safetensors files (not a checkpoint directory?)",
            dir.display()
        )));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut b = IndexBuilder::new(dir);
    for (_, name, path) in files {
        load_shard(&mut b, &name, path)?;
    }
    Ok(b.finish())
}

fn valid_shard_file_name(s: &str) -> bool {
    !s.contains('/')
        && !s.contains('\\')
        && !s.contains("..")
        && !s.contains('\0')
        && s.ends_with(".safetensors")
}

fn open_with_index_file(dir: &Path, index_path: &Path) -> Result<TensorIndex> {
    let label = index_path.display().to_string();
    let bytes = std::fs::read(index_path)
        .map_err(|e| Error::invalid(format!("{label}: cannot read: {e}")))?;
    let jerr = |e: crate::json::JsonError| e.into_error(&label, 0);
    let mut sc = Scanner::new(&bytes).map_err(jerr)?;
    if sc.peek().map_err(jerr)? != Kind::Object {
        return Err(Error::invalid(format!(
            "{label}: expected a JSON object with a weight_map (FORMATS.md §3)"
        )));
    }
    // weight_map entries, borrowed from `bytes` where possible; shard names interned.
    let mut map: Vec<(Cow<'_, str>, u32, usize)> = Vec::new();
    let mut shard_names: Vec<String> = Vec::new();
    let mut shard_ids: HashMap<String, u32> = HashMap::new();
    let mut seen_weight_map = false;
    let mut seen_top: Vec<String> = Vec::new();
    sc.begin_object().map_err(jerr)?;
    while let Some(key) = sc.next_key().map_err(jerr)? {
        if seen_top.iter().any(|k| *k == key) {
            return Err(Error::invalid(format!(
                "{label}: byte {}: duplicate member \"{key}\"",
                sc.key_offset()
            )));
        }
        seen_top.push(key.to_string());
        match key.as_ref() {
            "weight_map" => {
                seen_weight_map = true;
                let off = sc.offset();
                if sc.peek().map_err(jerr)? != Kind::Object {
                    return Err(Error::invalid(format!(
                        "{label}: byte {off}: weight_map must be an object (tensor name → shard file name)"
                    )));
                }
                sc.begin_object().map_err(jerr)?;
                while let Some(name) = sc.next_key().map_err(jerr)? {
                    let name_at = sc.key_offset();
                    let voff = sc.offset();
                    if sc.peek().map_err(jerr)? != Kind::String {
                        return Err(Error::invalid(format!(
                            "{label}: byte {voff}: weight_map[\"{name}\"]: expected a shard file name string"
                        )));
                    }
                    let file = sc.string().map_err(jerr)?;
                    if !valid_shard_file_name(&file) {
                        return Err(Error::invalid(format!(
                            "{label}: byte {voff}: weight_map[\"{name}\"]: \"{file}\" is not a plain file name ending in .safetensors (no '/', '\\', '..'; FORMATS.md §3)"
                        )));
                    }
                    let id = match shard_ids.get(file.as_ref()) {
                        Some(&id) => id,
                        None => {
                            let id = shard_names.len() as u32;
                            shard_names.push(file.to_string());
                            shard_ids.insert(file.into_owned(), id);
                            id
                        }
                    };
                    map.push((name, id, name_at));
                }
            }
            "metadata" => {
                let off = sc.offset();
                if sc.peek().map_err(jerr)? != Kind::Object {
                    return Err(Error::invalid(format!(
                        "{label}: byte {off}: metadata must be an object"
                    )));
                }
                // Informational (total_size is not checked, FORMATS.md §3); still validated JSON.
                sc.skip_value().map_err(jerr)?;
            }
            _ => sc.skip_value().map_err(jerr)?,
        }
    }
    sc.finish().map_err(jerr)?;
    if !seen_weight_map {
        return Err(Error::invalid(format!(
            "{label}: missing the required weight_map object (FORMATS.md §3)"
        )));
    }

    // Shards in byte-wise file-name order.
    let mut order: Vec<u32> = (0..shard_names.len() as u32).collect();
    order.sort_by(|&a, &b| {
        shard_names[a as usize]
            .as_bytes()
            .cmp(shard_names[b as usize].as_bytes())
    });
    let mut b = IndexBuilder::new(dir);
    b.idx.has_index_file = true;
    // map-shard-id → final shard index (present ones first, in order; absent ones after).
    let mut final_id: Vec<usize> = vec![usize::MAX; shard_names.len()];
    let mut absent: Vec<u32> = Vec::new();
    for &s in &order {
        let name = &shard_names[s as usize];
        let path = dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {
                final_id[s as usize] = load_shard(&mut b, name, path)?;
            }
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{}: listed in {INDEX_FILE} but is not a regular file",
                    path.display()
                )))
            }
            Err(_) => absent.push(s),
        }
    }

    // Cross-check every mapping against the present shards.
    let present = b.idx.present;
    let mut mapped = vec![false; present];
    for (name, s, name_at) in &map {
        let fid = final_id[*s as usize];
        if fid == usize::MAX {
            continue;
        }
        match b.idx.find_entry(name) {
            Some(i) if b.idx.entries[i].shard as usize == fid => {
                if mapped[i] {
                    return Err(Error::invalid(format!(
                        "{label}: byte {name_at}: duplicate weight_map entry \"{name}\""
                    )));
                }
                mapped[i] = true;
            }
            Some(i) => {
                let actual = &b.idx.shards[b.idx.entries[i].shard as usize];
                return Err(Error::invalid(format!(
                    "{label}: byte {name_at}: maps tensor \"{name}\" to shard {}, but the tensor is in shard {} (FORMATS.md §3)",
                    shard_names[*s as usize], actual.file_name
                )));
            }
            None => {
                return Err(Error::invalid(format!(
                    "{label}: byte {name_at}: maps tensor \"{name}\" to shard {}, but that shard's header does not contain it (FORMATS.md §3)",
                    shard_names[*s as usize]
                )));
            }
        }
    }
    if let Some(i) = mapped.iter().position(|m| !m) {
        let shard = &b.idx.shards[b.idx.entries[i].shard as usize];
        let tensor = b.idx.name(i);
        // Listed, but under a shard file that does not exist: say so, not "not listed".
        if let Some((_, s, name_at)) = map.iter().find(|(n, _, _)| **n == *tensor) {
            return Err(Error::invalid(format!(
                "{label}: byte {name_at}: maps tensor \"{tensor}\" to shard {}, which does not exist in {}; the tensor is in shard {} (FORMATS.md §3: index and shards must agree)",
                shard_names[*s as usize],
                dir.display(),
                shard.file_name
            )));
        }
        return Err(Error::invalid(format!(
            "{}: tensor \"{}\" is not listed in {INDEX_FILE}'s weight_map (FORMATS.md §3: index and shards must agree)",
            shard.path.display(),
            b.idx.name(i)
        )));
    }

    // Names mapped to absent shards: kept so that a missing tensor can say where it should be.
    for &s in &absent {
        let name = &shard_names[s as usize];
        final_id[s as usize] = b.add_absent_shard(name, dir.join(name));
    }
    for (name, s, _) in &map {
        let fid = final_id[*s as usize];
        if !b.idx.shards[fid].present {
            b.add_absent_name(name, fid)?;
        }
    }
    Ok(b.finish())
}
