//! The whole-header rules of FORMATS.md §2.4, checked once every tensor is parsed: unique
//! names, sizes, and an exact tiling of the data section. Errors (exit 2) name the file
//! (`file`), the tensor and the file byte offset.

use super::{product_bytes, shape_str, FastBuildHasher, RawTensor};
use crate::error::{Error, Result};
use std::collections::HashSet;

/// The file byte of header byte `off` (the header follows the 8-byte length).
fn at(off: usize) -> u64 {
    8 + off as u64
}

/// No tensor name twice (decoded names), reported at the second occurrence.
pub(super) fn unique_names(file: &str, tensors: &[RawTensor<'_>]) -> Result<()> {
    let mut seen: HashSet<&str, FastBuildHasher> =
        HashSet::with_capacity_and_hasher(tensors.len(), FastBuildHasher::default());
    for t in tensors {
        if !seen.insert(&t.name) {
            return Err(Error::invalid(format!(
                "{file}: byte {}: duplicate tensor name \"{}\"",
                at(t.key_offset),
                t.name
            )));
        }
    }

    Ok(())
}

/// Each tensor's `end − begin` is `product(shape) × dtype size` (§2.4 rule 3; `dims` holds the
/// shapes).
pub(super) fn sizes(file: &str, tensors: &[RawTensor<'_>], dims: &[u64]) -> Result<()> {
    for t in tensors {
        let s = t.dims_start as usize;
        let shape = &dims[s..s + t.ndim as usize];
        let want = product_bytes(shape, t.dtype).ok_or_else(|| {
            Error::invalid(format!(
                "{file}: byte {}: tensor \"{}\": shape {} × {} overflows 64 bits",
                at(t.key_offset),
                t.name,
                shape_str(shape),
                t.dtype
            ))
        })?;
        let have = t.end - t.begin;
        if have != want {
            return Err(Error::invalid(format!(
                "{file}: byte {}: tensor \"{}\": data_offsets [{}, {}] hold {have} bytes but shape {} × {} ({} bytes/element) needs {want}",
                at(t.key_offset),
                t.name,
                t.begin,
                t.end,
                shape_str(shape),
                t.dtype,
                t.dtype.size()
            )));
        }
    }

    Ok(())
}

/// The tensors tile the `data_len`-byte data section exactly (§2.4 rule 4): no overlap, no hole,
/// no trailing bytes; sorts `tensors` by offset. The header is `n` bytes of a `file_size`-byte
/// file. Out-of-range offsets are reported first: they are the cause, the hole or overlap they
/// leave is a symptom.
pub(super) fn tiling(
    file: &str,
    tensors: &mut [RawTensor<'_>],
    n: u64,
    file_size: u64,
    data_len: u64,
) -> Result<()> {
    let abs = |rel: u64| 8 + n + rel;
    for t in tensors.iter() {
        if t.begin > data_len || t.end > data_len {
            return Err(Error::invalid(format!(
                "{file}: byte {}: tensor \"{}\": data_offsets [{}, {}] run past the end of the {data_len}-byte data section (file byte {} > file size {file_size}; truncated?)",
                at(t.key_offset),
                t.name,
                t.begin,
                t.end,
                abs(t.end)
            )));
        }
    }
    // key_offset (parse order) last: the stable order.
    crate::sort::sort_by_key(tensors, |t| (t.begin, t.end, t.key_offset));
    let mut cursor: u64 = 0;
    let mut prev: Option<&RawTensor<'_>> = None;
    for t in tensors.iter() {
        if t.begin < cursor {
            let p = prev.expect("cursor > 0 implies a previous tensor");
            return Err(Error::invalid(format!(
                "{file}: byte {}: tensor \"{}\" (data_offsets [{}, {}]) overlaps tensor \"{}\" (data_offsets [{}, {}]) at file byte {}",
                at(t.key_offset),
                t.name,
                t.begin,
                t.end,
                p.name,
                p.begin,
                p.end,
                abs(t.begin)
            )));
        }
        if t.begin > cursor {
            let msg = match prev {
                None => format!(
                    "the data section starts with a hole of {} bytes before tensor \"{}\" (data_offsets [{}, {}])",
                    t.begin, t.name, t.begin, t.end
                ),
                Some(p) => format!(
                    "hole of {} bytes in the data section between tensor \"{}\" (ends at {}) and tensor \"{}\" (begins at {})",
                    t.begin - cursor,
                    p.name,
                    p.end,
                    t.name,
                    t.begin
                ),
            };
            return Err(Error::invalid(format!(
                "{file}: file byte {}: {msg} (docs/formats.md#safetensors-shards: holes are refused as corruption)",
                abs(cursor)
            )));
        }
        cursor = t.end;
        prev = Some(t);
    }
    if cursor != data_len {
        let after = match prev {
            Some(p) => format!("the last tensor \"{}\" (ends at {cursor})", p.name),
            None => "an empty header".to_string(),
        };
        return Err(Error::invalid(format!(
            "{file}: file byte {}: {} trailing bytes after {after}: the data section is {data_len} bytes (docs/formats.md#safetensors-shards)",
            abs(cursor),
            data_len - cursor
        )));
    }
    Ok(())
}
