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

mod builder;
mod open;
pub use builder::IndexBuilder;
use open::{open_with_index_file, open_without_index_file};

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
        crate::sort::sort(&mut ids);
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
