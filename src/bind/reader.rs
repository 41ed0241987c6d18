//! The tensor reader of the binder: the checkpoint's tensors as the binder sees them
//! ([`TensorLookup`], [`TensorMeta`]) and [`Reader`], which checks each tensor's shape and dtype
//! and reads it with positioned reads through the I/O layer (FORMATS.md §2.5, ENGINE.md §4).

use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, Extent, IoFile};
use std::path::{Path, PathBuf};

pub use crate::safetensors::Dtype;

/// What the binder needs to know about one tensor of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Index into [`TensorLookup::shards`].
    pub shard: usize,
    /// Absolute byte offset in the shard.
    pub offset: u64,
    /// Byte length.
    pub len: u64,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

/// The tensor index as the binder sees it.
pub trait TensorLookup {
    /// The tensor called `name`, if the checkpoint has it.
    fn meta(&self, name: &str) -> Option<TensorMeta>;
    /// Paths of the shard files, indexed by [`TensorMeta::shard`].
    fn shard_paths(&self) -> Vec<PathBuf>;
}

impl TensorLookup for crate::checkpoint::TensorIndex {
    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.get(name).map(|i| TensorMeta {
            shard: i.shard,
            offset: i.offset,
            len: i.nbytes,
            dtype: i.dtype,
            shape: i.shape.to_vec(),
        })
    }
    fn shard_paths(&self) -> Vec<PathBuf> {
        self.shards().iter().map(|s| s.path.clone()).collect()
    }
}

/// Reads tensors for the binder through the I/O layer (bulk bytes by widened `O_DIRECT`
/// windows, falling back to buffered reads + `DONTNEED`, so loading does not grow the page
/// cache: ENGINE.md §4), remembering the open shard files.
pub struct Reader<'a> {
    lookup: &'a dyn TensorLookup,
    paths: Vec<PathBuf>,
    files: Vec<Option<IoFile>>,
    /// Reused 4096-aligned window for bulk reads.
    window: Option<AlignedBuf>,
    /// Shards holding a located (not yet read) tensor: routed experts.
    needed: Vec<bool>,
}

impl<'a> Reader<'a> {
    /// A reader over `lookup`'s shards (opened lazily).
    pub fn new(lookup: &'a dyn TensorLookup) -> Reader<'a> {
        let paths = lookup.shard_paths();
        let files: Vec<Option<IoFile>> = paths.iter().map(|_| None).collect();
        Reader {
            lookup,
            paths,
            needed: vec![false; files.len()],
            files,
            window: None,
        }
    }

    /// The open file of shard `i` (error naming the file: exit 2, it was indexed just now).
    pub fn file(&mut self, i: usize) -> Result<&IoFile> {
        if self.files[i].is_none() {
            let f = IoFile::open(&self.paths[i]).map_err(load_error)?;
            self.files[i] = Some(f);
        }
        Ok(self.files[i].as_ref().unwrap())
    }

    /// Path of shard `i`.
    pub fn path(&self, i: usize) -> &Path {
        &self.paths[i]
    }

    /// The shard table for the expert source, in shard order: every shard a located tensor
    /// lives in is open; the others (absent shards of unbound layers) are `None`.
    pub fn into_files(mut self) -> Result<Vec<Option<IoFile>>> {
        for i in 0..self.paths.len() {
            if self.needed[i] {
                self.file(i)?;
            }
        }
        Ok(self.files)
    }

    /// The tensor `name`, checked to have exactly `shape` and `dtype` (error naming the tensor,
    /// expected and found: exit 2).
    pub fn meta(&self, name: &str, shape: &[usize], dtype: Dtype) -> Result<TensorMeta> {
        let m = self.lookup.meta(name).ok_or_else(|| {
            Error::invalid(format!(
                "{name}: required tensor is missing from the checkpoint"
            ))
        })?;
        let want: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
        if m.shape != want || m.dtype != dtype {
            return Err(Error::invalid(format!(
                "{name}: expected {dtype} {want:?}, found {} {:?}",
                m.dtype, m.shape
            )));
        }
        Ok(m)
    }

    /// Reads tensor `name` at `m` in windows of at most 4 MiB, handing each piece to `f` in
    /// order. A read failure at load time is invalid input (exit 2) naming the tensor.
    fn each_piece(&mut self, name: &str, m: &TensorMeta, mut f: impl FnMut(&[u8])) -> Result<()> {
        const CHUNK: usize = 1 << 22;
        if self.window.is_none() {
            let cap = window_capacity(CHUNK).expect("constant window");
            self.window = Some(AlignedBuf::new(cap)?);
        }
        let mut win = self.window.take().expect("window allocated above");
        let res = (|| {
            let mut done = 0u64;
            while done < m.len {
                let n = ((m.len - done) as usize).min(CHUNK);
                let file = self.file(m.shard)?;
                let r = file
                    .read_window(m.offset + done, n, win.as_mut_slice())
                    .map_err(|e| Error::invalid(format!("{name}: {}", load_error(e).message)))?;
                f(&win.as_slice()[r.pad..r.pad + n]);
                done += n as u64;
            }
            Ok(())
        })();
        self.window = Some(win);
        res
    }

    /// BF16 `pieces` (extents in the shards, file = shard index) read back to back as one
    /// `u16` buffer: a layer's whole trunk for [`super::resident::ResidentTrunk`] (the
    /// pieces of its `LayerLayout`). `what` names it in errors ("layer 3 trunk"). A read
    /// failure is exit 2 (found while binding).
    pub fn read_pieces_u16(&mut self, what: &str, pieces: &[Extent<usize>]) -> Result<Vec<u16>> {
        let bytes: u64 = pieces.iter().map(|p| p.len as u64).sum();
        let mut out = vec![0u16; (bytes / 2) as usize];
        let mut at = 0usize;
        for p in pieces {
            let m = TensorMeta {
                shard: p.file,
                offset: p.offset,
                len: p.len as u64,
                dtype: Dtype::BF16,
                shape: Vec::new(),
            };
            self.each_piece(what, &m, |b| {
                for c in b.chunks_exact(2) {
                    out[at] = u16::from_le_bytes([c[0], c[1]]);
                    at += 1;
                }
            })?;
        }
        Ok(out)
    }

    /// A located BF16 table read whole into memory (resident model tables).
    pub fn read_table_u16(&mut self, name: &str, m: &TensorMeta) -> Result<Vec<u16>> {
        let mut out = Vec::with_capacity(m.len as usize / 2);
        self.each_piece(name, m, |b| {
            out.extend(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
        })?;
        Ok(out)
    }

    /// Marks shard `i` as needed by [`Reader::into_files`] (a streamed tensor lives there).
    pub fn need_shard(&mut self, i: usize) {
        self.needed[i] = true;
    }

    /// Reads BF16 tensor `name` of `shape`, appending its bit patterns to `out`.
    pub fn bf16_into(&mut self, name: &str, shape: &[usize], out: &mut Vec<u16>) -> Result<()> {
        let m = self.meta(name, shape, Dtype::BF16)?;
        out.reserve(m.len as usize / 2);
        self.each_piece(name, &m, |b| {
            out.extend(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
        })
    }

    /// A BF16 vector or matrix widened to fp32.
    pub fn bf16_f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        self.bf16_into(name, shape, &mut v)?;
        Ok(v.into_iter().map(k3_kernels::bf16_to_f32).collect())
    }

    /// An F32 tensor.
    pub fn f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let m = self.meta(name, shape, Dtype::F32)?;
        let mut buf = Vec::with_capacity(m.len as usize);
        self.each_piece(name, &m, |b| buf.extend_from_slice(b))?;
        Ok(buf
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Extent of tensor `name` (its file: the shard index) checked for shape/dtype; marks its
    /// shard as needed by [`Reader::into_files`].
    pub fn extent(&mut self, name: &str, shape: &[usize], dtype: Dtype) -> Result<Extent<usize>> {
        let m = self.meta(name, shape, dtype)?;
        self.needed[m.shard] = true;
        Ok(Extent {
            file: m.shard,
            offset: m.offset,
            len: m.len as usize,
        })
    }
}

/// A read failure while binding is invalid input (exit 2): the checkpoint was indexed moments
/// ago, so a short read means a truncated or changing file, found before the run.
fn load_error(e: Error) -> Error {
    if e.kind == crate::error::ErrorKind::Io {
        Error::invalid(e.message)
    } else {
        e
    }
}
