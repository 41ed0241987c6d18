//! The one byte-range type of the engine: `len` bytes at absolute `offset` of a file.

/// One contiguous byte range of a file: `len` bytes at absolute byte `offset`.
///
/// `F` names the file the way its holder does: a shard index into a checkpoint's shard table
/// while binding (`Extent<usize>`), an open file for a read (`Extent<&IoFile>`), or a shared
/// open file held by a streamed source (`Extent<Arc<IoFile>>`). A list of extents filling a
/// buffer lies in it back to back, in list order, from byte 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent<F> {
    /// The file (a shard index or an open file).
    pub file: F,
    /// Absolute byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: usize,
}

impl<F> Extent<F> {
    /// The same range in file `g` (a shard index resolved to its open file).
    pub fn with_file<G>(&self, g: G) -> Extent<G> {
        Extent {
            file: g,
            offset: self.offset,
            len: self.len,
        }
    }

    /// Byte just past the range.
    pub fn end(&self) -> u64 {
        self.offset + self.len as u64
    }
}
