//! One safetensors shard's header → a validated tensor list (FORMATS.md §2).
//!
//! Layout (§2.1): bytes 0..8 hold N (u64 LE), bytes 8..8+N the JSON header, the rest is the data
//! section of D = file_size − 8 − N bytes; `data_offsets` are relative to the data section.
//! Every rule of §2.4 is checked before any tensor data is used: the length bound, UTF-8 and
//! JSON validity (with duplicate names refused), known dtypes, `end − begin = product(shape) ×
//! dtype size` with overflow-checked arithmetic, and an exact tiling of the data section (no
//! overlap, no hole, no trailing bytes). Errors name the file, the tensor and a byte offset.
//!
//! This module reads headers with `std::fs` at index time only; tensor bytes are read by the
//! I/O layer (`io`) with positioned reads.

use crate::error::{Error, Result};
use crate::json::{JsonError, Kind, Scanner};
use k3_kernels::fnv1a64;
use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

mod check;

/// A fast multiplicative hasher for index-time maps and sets (8 bytes per step, every byte
/// mixed). Not DoS-resistant, which is fine for a local file read once.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59))
                .wrapping_mul(K);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        // Final avalanche so that the low bits used by the tables depend on every input bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
}

/// `BuildHasher` for [`FastHasher`].
pub type FastBuildHasher = BuildHasherDefault<FastHasher>;

/// Largest header length N accepted (FORMATS.md §2.4 rule 1).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// A safetensors dtype (FORMATS.md §2.3). Only BF16, F32 and U8 are ever bound; the others are
/// parsed so that a checkpoint holding them can still be indexed and refused precisely at binding.
/// Variants carry the safetensors spelling (see [`Dtype::name`] and [`Dtype::size`]).
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    BF16,
    F32,
    U8,
    BOOL,
    I8,
    F8_E4M3,
    F8_E5M2,
    F8_E8M0,
    I16,
    U16,
    F16,
    I32,
    U32,
    I64,
    U64,
    F64,
}

impl Dtype {
    /// Every dtype, in the order of FORMATS.md §2.3.
    pub const ALL: [Dtype; 16] = [
        Dtype::BF16,
        Dtype::F32,
        Dtype::U8,
        Dtype::BOOL,
        Dtype::I8,
        Dtype::F8_E4M3,
        Dtype::F8_E5M2,
        Dtype::F8_E8M0,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::I32,
        Dtype::U32,
        Dtype::I64,
        Dtype::U64,
        Dtype::F64,
    ];

    /// The dtype named `s` exactly as safetensors spells it (`BF16`, `F8_E4M3`, …).
    pub fn from_name(s: &str) -> Option<Dtype> {
        Dtype::ALL.iter().copied().find(|d| d.name() == s)
    }

    /// The safetensors spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BF16 => "BF16",
            Dtype::F32 => "F32",
            Dtype::U8 => "U8",
            Dtype::BOOL => "BOOL",
            Dtype::I8 => "I8",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
            Dtype::F64 => "F64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::U8
            | Dtype::BOOL
            | Dtype::I8
            | Dtype::F8_E4M3
            | Dtype::F8_E5M2
            | Dtype::F8_E8M0 => 1,
            Dtype::BF16 | Dtype::I16 | Dtype::U16 | Dtype::F16 => 2,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    /// Index of this dtype in [`Dtype::ALL`] (a compact code for tables).
    pub fn code(self) -> u8 {
        Dtype::ALL.iter().position(|d| *d == self).unwrap_or(0) as u8
    }

    /// The dtype with [`Dtype::code`] `c`.
    pub fn from_code(c: u8) -> Option<Dtype> {
        Dtype::ALL.get(usize::from(c)).copied()
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Formats a shape as `[a, b, c]`.
pub fn shape_str(shape: &[u64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A header's raw bytes as read from a file, with the file size (FORMATS.md §2.1).
#[derive(Debug, Clone)]
pub struct RawHeader {
    /// The N JSON header bytes (file bytes 8 … 8+N−1).
    pub bytes: Vec<u8>,
    /// The shard's size in bytes.
    pub file_size: u64,
}

/// Validates the 8-byte length prefix against the file size (§2.4 rule 1) and returns N.
pub fn header_len(file: &str, prefix: &[u8], file_size: u64) -> Result<u64> {
    if file_size < 8 || prefix.len() < 8 {
        return Err(Error::invalid(format!(
            "{file}: file is {file_size} bytes, too short for the 8-byte safetensors header length (truncated?)"
        )));
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&prefix[..8]);
    let n = u64::from_le_bytes(b);
    if n > MAX_HEADER_LEN {
        return Err(Error::invalid(format!(
            "{file}: byte 0: header length N = {n} exceeds the limit of {MAX_HEADER_LEN} bytes (docs/formats.md#safetensors-shards; not a safetensors file?)"
        )));
    }
    if 8 + n > file_size {
        return Err(Error::invalid(format!(
            "{file}: byte 0: header length N = {n} runs past the end of the file (8 + N = {} > file size {file_size}; truncated?)",
            8 + n
        )));
    }
    Ok(n)
}

/// Reads the length prefix and the N header bytes of `path` (std::fs; index time only).
/// Errors (exit 2) name the file: unreadable, too short, absurd or out-of-range N.
pub fn read_header(path: &Path) -> Result<RawHeader> {
    use std::io::Read;
    let file = path.display().to_string();
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::invalid(format!("{file}: cannot open shard: {e}")))?;
    let file_size = f
        .metadata()
        .map_err(|e| Error::invalid(format!("{file}: cannot stat shard: {e}")))?
        .len();
    let mut prefix = [0u8; 8];
    if file_size >= 8 {
        f.read_exact(&mut prefix)
            .map_err(|e| Error::invalid(format!("{file}: cannot read header length: {e}")))?;
    }
    let n = header_len(&file, &prefix, file_size)?;
    let mut bytes = vec![0u8; n as usize];
    f.read_exact(&mut bytes)
        .map_err(|e| Error::invalid(format!("{file}: cannot read the {n}-byte header: {e}")))?;
    Ok(RawHeader { bytes, file_size })
}

struct RawTensor<'a> {
    name: Cow<'a, str>,
    /// Offset of the tensor's name in the header JSON.
    key_offset: usize,
    dtype: Dtype,
    dims_start: u32,
    ndim: u32,
    begin: u64,
    end: u64,
}

/// One tensor of a validated header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorView<'h> {
    /// The decoded tensor name.
    pub name: &'h str,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions (`[]` = scalar).
    pub shape: &'h [u64],
    /// Start of the tensor, relative to the data section.
    pub begin: u64,
    /// End (exclusive), relative to the data section.
    pub end: u64,
}

impl TensorView<'_> {
    /// Byte length (end − begin = product(shape) × dtype size).
    pub fn nbytes(&self) -> u64 {
        self.end - self.begin
    }
}

/// A validated shard header (FORMATS.md §2.4): tensors sorted by `begin`, tiling the data section.
pub struct ShardHeader<'a> {
    /// N, the JSON header length.
    pub header_len: u64,
    /// D, the data section length (file_size − 8 − N).
    pub data_len: u64,
    /// FNV-1a-64 of the N header bytes (the weights tag input, FORMATS.md §9.1).
    pub fnv: u64,
    /// `__metadata__` members in order (all values are strings).
    pub metadata: Vec<(String, String)>,
    tensors: Vec<RawTensor<'a>>,
    dims: Vec<u64>,
}

impl<'a> ShardHeader<'a> {
    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the header holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Tensor `i` in data-section order (ascending `begin`).
    pub fn tensor(&self, i: usize) -> TensorView<'_> {
        let t = &self.tensors[i];
        let s = t.dims_start as usize;
        TensorView {
            name: &t.name,
            dtype: t.dtype,
            shape: &self.dims[s..s + t.ndim as usize],
            begin: t.begin,
            end: t.end,
        }
    }

    /// All tensors in data-section order.
    pub fn iter(&self) -> impl Iterator<Item = TensorView<'_>> + '_ {
        (0..self.len()).map(move |i| self.tensor(i))
    }

    /// Absolute file offset of data-section offset `rel` (8 + N + rel).
    pub fn absolute(&self, rel: u64) -> u64 {
        8 + self.header_len + rel
    }
}

fn json_err(file: &str, e: JsonError) -> Error {
    // Bytes after the JSON or a JSON cut short are what a wrong header length N produces
    // (tensor data read as header, or header left in the data): say so.
    let length_suspect = e.expected.starts_with("expected UTF-8")
        || e.expected.contains("after the top-level value")
        || e.expected.ends_with("found end of input");
    let mut err = e.into_error(file, 8);
    if length_suspect {
        err.message.push_str(
            "; the header length N in bytes 0..8 may be wrong (docs/formats.md#safetensors-shards)",
        );
    }
    err
}

fn product_bytes(shape: &[u64], dtype: Dtype) -> Option<u64> {
    let mut n: u64 = 1;
    for &d in shape {
        n = n.checked_mul(d)?;
    }
    n.checked_mul(dtype.size())
}

/// Parses and validates a header (FORMATS.md §2.2-§2.4). `file` names the shard in messages,
/// `header` is the N JSON bytes and `file_size` the shard's size (so D = file_size − 8 − N).
///
/// Errors (exit 2) name the file, the tensor and the file byte offset: invalid UTF-8 or JSON,
/// a first byte other than `{`, an unknown dtype, a malformed shape or `data_offsets`, a
/// duplicate or empty name, a size mismatch, overlap, a hole, or trailing bytes.
pub fn parse_header<'a>(file: &str, header: &'a [u8], file_size: u64) -> Result<ShardHeader<'a>> {
    let n = header.len() as u64;
    let data_len = file_size
        .checked_sub(8)
        .and_then(|x| x.checked_sub(n))
        .ok_or_else(|| {
            Error::invalid(format!(
                "{file}: header of {n} bytes does not fit in a {file_size}-byte file (truncated?)"
            ))
        })?;
    if header.first() != Some(&b'{') {
        return Err(Error::invalid(format!(
            "{file}: byte 8: the header must start with '{{' (docs/formats.md#safetensors-shards), found {}",
            match header.first() {
                None => "an empty header".to_string(),
                Some(b) => format!("byte 0x{b:02x}"),
            }
        )));
    }
    let mut sc = Scanner::new(header).map_err(|e| json_err(file, e))?;
    let mut tensors: Vec<RawTensor<'a>> = Vec::new();
    let mut dims: Vec<u64> = Vec::new();
    let mut metadata: Option<Vec<(String, String)>> = None;
    let at = |off: usize| 8 + off as u64;

    sc.begin_object().map_err(|e| json_err(file, e))?;
    while let Some(key) = sc.next_key().map_err(|e| json_err(file, e))? {
        let key_offset = sc.key_offset();
        if key == "__metadata__" {
            if metadata.is_some() {
                return Err(Error::invalid(format!(
                    "{file}: byte {}: duplicate member \"__metadata__\"",
                    at(key_offset)
                )));
            }
            metadata = Some(parse_metadata(file, &mut sc)?);
            continue;
        }
        if key.is_empty() {
            return Err(Error::invalid(format!(
                "{file}: byte {}: empty tensor name (docs/formats.md#safetensors-shards)",
                at(key_offset)
            )));
        }
        let t = parse_tensor(file, &mut sc, key, key_offset, &mut dims)?;
        tensors.push(t);
    }
    // Only JSON whitespace may follow the closing brace (writers pad with spaces).
    sc.finish().map_err(|e| json_err(file, e))?;

    // Duplicate names (decoded), reported at the second occurrence.
    check::unique_names(file, &tensors)?;
    // Sizes (§2.4 rule 3).
    check::sizes(file, &tensors, &dims)?;
    // Exact tiling of the data section (§2.4 rule 4).
    check::tiling(file, &mut tensors, n, file_size, data_len)?;

    Ok(ShardHeader {
        header_len: n,
        data_len,
        fnv: fnv1a64(header),
        metadata: metadata.unwrap_or_default(),
        tensors,
        dims,
    })
}

fn parse_metadata(file: &str, sc: &mut Scanner<'_>) -> Result<Vec<(String, String)>> {
    let off = sc.offset();
    if sc.peek().map_err(|e| json_err(file, e))? != Kind::Object {
        return Err(Error::invalid(format!(
            "{file}: byte {}: __metadata__ must be an object of strings (docs/formats.md#safetensors-shards)",
            8 + off as u64
        )));
    }
    sc.begin_object().map_err(|e| json_err(file, e))?;
    let mut out: Vec<(String, String)> = Vec::new();
    while let Some(k) = sc.next_key().map_err(|e| json_err(file, e))? {
        let koff = sc.key_offset();
        if out.iter().any(|(x, _)| *x == k) {
            return Err(Error::invalid(format!(
                "{file}: byte {}: duplicate member \"{k}\" in __metadata__",
                8 + koff as u64
            )));
        }
        let voff = sc.offset();
        if sc.peek().map_err(|e| json_err(file, e))? != Kind::String {
            return Err(Error::invalid(format!(
                "{file}: byte {}: __metadata__.{k}: expected a string value (docs/formats.md#safetensors-shards)",
                8 + voff as u64
            )));
        }
        let v = sc.string().map_err(|e| json_err(file, e))?;
        out.push((k.into_owned(), v.into_owned()));
    }
    Ok(out)
}

fn parse_tensor<'a>(
    file: &str,
    sc: &mut Scanner<'a>,
    name: Cow<'a, str>,
    key_offset: usize,
    dims: &mut Vec<u64>,
) -> Result<RawTensor<'a>> {
    let at = |off: usize| 8 + off as u64;
    let ctx = |off: usize, msg: String| -> Error {
        Error::invalid(format!(
            "{file}: byte {}: tensor \"{name}\": {msg}",
            at(off)
        ))
    };
    let off = sc.offset();
    let kind = sc.peek().map_err(|e| json_err(file, e))?;
    if kind != Kind::Object {
        return Err(ctx(
            off,
            format!(
                "expected an object {{dtype, shape, data_offsets}}, found {}",
                kind.name()
            ),
        ));
    }
    sc.begin_object().map_err(|e| json_err(file, e))?;
    let mut dtype: Option<Dtype> = None;
    let mut shape_range: Option<(u32, u32)> = None;
    let mut offsets: Option<(u64, u64)> = None;
    // Other members are rare; only they are remembered for the duplicate check.
    let mut other_members: Vec<Cow<'a, str>> = Vec::new();
    while let Some(k) = sc.next_key().map_err(|e| json_err(file, e))? {
        let moff = sc.key_offset();
        let dup = match k.as_ref() {
            "dtype" => dtype.is_some(),
            "shape" => shape_range.is_some(),
            "data_offsets" => offsets.is_some(),
            _ => {
                let d = other_members.contains(&k);
                other_members.push(k.clone());
                d
            }
        };
        if dup {
            return Err(ctx(moff, format!("duplicate member \"{k}\"")));
        }
        let voff = sc.offset();
        match k.as_ref() {
            "dtype" => {
                if sc.peek().map_err(|e| json_err(file, e))? != Kind::String {
                    return Err(ctx(voff, "dtype must be a string".into()));
                }
                let s = sc.string().map_err(|e| json_err(file, e))?;
                dtype = Some(Dtype::from_name(&s).ok_or_else(|| {
                    ctx(
                        voff,
                        format!(
                            "unknown dtype \"{s}\" (docs/formats.md#safetensors-shards lists BF16, F32, U8, BOOL, I8, F8_E4M3, F8_E5M2, F8_E8M0, I16, U16, F16, I32, U32, I64, U64, F64)"
                        ),
                    )
                })?);
            }
            "shape" => {
                let start = dims.len();
                read_u64_array(sc, file, &name, "shape", |v| dims.push(v))?;
                let nd = dims.len() - start;
                shape_range = Some((start as u32, nd as u32));
            }
            "data_offsets" => {
                let mut v = [0u64; 2];
                let mut count = 0usize;
                read_u64_array(sc, file, &name, "data_offsets", |x| {
                    if count < 2 {
                        v[count] = x;
                    }
                    count += 1;
                })?;
                if count != 2 {
                    return Err(ctx(
                        voff,
                        format!(
                            "data_offsets must hold exactly two integers [begin, end], found {count}"
                        ),
                    ));
                }
                if v[0] > v[1] {
                    return Err(ctx(
                        voff,
                        format!("data_offsets [{}, {}]: begin > end", v[0], v[1]),
                    ));
                }
                offsets = Some((v[0], v[1]));
            }
            _ => sc.skip_value().map_err(|e| json_err(file, e))?,
        }
    }
    let mut missing = Vec::new();
    if dtype.is_none() {
        missing.push("dtype");
    }
    if shape_range.is_none() {
        missing.push("shape");
    }
    if offsets.is_none() {
        missing.push("data_offsets");
    }
    if !missing.is_empty() {
        return Err(ctx(key_offset, format!("missing {}", missing.join(", "))));
    }
    let (dims_start, ndim) = shape_range.unwrap_or_default();
    let (begin, end) = offsets.unwrap_or_default();
    Ok(RawTensor {
        name,
        key_offset,
        dtype: dtype.unwrap_or(Dtype::U8),
        dims_start,
        ndim,
        begin,
        end,
    })
}

/// Reads an array of integers without sign, fraction or exponent that fit in u64.
fn read_u64_array(
    sc: &mut Scanner<'_>,
    file: &str,
    name: &str,
    what: &str,
    mut push: impl FnMut(u64),
) -> Result<()> {
    let off = sc.offset();
    let bad = |off: usize, msg: String| -> Error {
        Error::invalid(format!(
            "{file}: byte {}: tensor \"{name}\": {what}: {msg}",
            8 + off as u64
        ))
    };
    if sc.peek().map_err(|e| json_err(file, e))? != Kind::Array {
        return Err(bad(
            off,
            "expected an array of non-negative integers".into(),
        ));
    }
    sc.begin_array().map_err(|e| json_err(file, e))?;
    while sc.next_element().map_err(|e| json_err(file, e))? {
        let eoff = sc.offset();
        if sc.peek().map_err(|e| json_err(file, e))? != Kind::Number {
            return Err(bad(eoff, "expected a non-negative integer".into()));
        }
        let lex = sc.number().map_err(|e| json_err(file, e))?;
        match crate::json::lexeme_as_u64(lex) {
            Some(v) => push(v),
            None => {
                return Err(bad(
                    eoff,
                    format!(
                    "{lex} is not an integer without sign, fraction or exponent that fits in u64"
                ),
                ))
            }
        }
    }
    Ok(())
}
