//! Lossless block codec for BF16 weight bytes: the 8-bit exponents are Huffman-coded, the
//! sign and mantissa bits are stored as they are.
//!
//! BF16 weights of trained models carry about 2.6–3 bits of entropy in their exponent
//! (Gaussian weights 2.55), while sign + mantissa are close to random, so coding the exponent
//! alone saves about a third of the bytes, at a decode cost under a nanosecond per value on
//! one core. The codec is pure compute: the caller owns files, the block index and the choice
//! between a coded and a stored block ([`encode_bf16`] says when coding does not pay).
//!
//! ```
//! use k3_kernels::codec::{encode_bf16, Decoder};
//! let src: Vec<u8> = (0..4096u32).flat_map(|i| (0x3c00 + (i * 37 % 0x300) as u16).to_le_bytes()).collect();
//! let mut enc = Vec::new();
//! assert!(encode_bf16(&src, &mut enc)); // false: store `src` as it is
//! assert!(enc.len() < src.len());
//! let mut dec = Decoder::new(); // one per thread, reused across blocks
//! let mut dst = vec![0u8; src.len()]; // the block's size comes from the caller's index
//! dec.decode_bf16(&enc, &mut dst).unwrap();
//! assert_eq!(dst, src);
//! ```
//!
//! Blocks of up to a few MiB are the intended use (the decoder keeps `n` bytes of scratch
//! and 40 KiB of tables); the format allows `n` < 2^31 values. A block is always decoded
//! whole.
//!
//! # Values
//!
//! A BF16 value is two little-endian bytes `(b0, b1)`. Its exponent and its sign/mantissa
//! byte are
//!
//! ```text
//! e  = ((b1 & 0x7f) << 1) | (b0 >> 7)      // bits 14..7 of the u16
//! sm = (b1 & 0x80) | (b0 & 0x7f)          // sign in bit 7, mantissa in bits 6..0
//! ```
//!
//! and decoding puts them back: `b0 = (sm & 0x7f) | (e << 7)`, `b1 = (sm & 0x80) | (e >> 1)`.
//! Every 16-bit pattern (NaN, ±inf, subnormals, −0) round-trips bit for bit.
//!
//! # Coded block
//!
//! A coded block holds `n` values (`2n` source bytes, `n` < 2^31). All integers are
//! little-endian; offsets are from the start of the block. `S` = [`STREAMS`] = 4 and
//! `H` = [`HEADER_BYTES`] = 172.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `K3E1` ([`MAGIC`]) |
//! | 4 | 4 | `n`, u32: values in the block |
//! | 8 | 4 | `S`, u32: number of exponent streams (must be 4) |
//! | 12 | 4·S = 16 | `len[k]`, u32 each: byte length of stream `k`, padding included (each ≥ 8) |
//! | 28 | 8 | `sum`, u64: exponent checksum, below |
//! | 36 | 8 | `wsum`, u64: exponent checksum, below |
//! | 44 | 128 | code lengths: byte `i` holds the length of exponent `2i` in its low nibble and of `2i + 1` in its high nibble; 0 = exponent absent, 1–12 = length in bits, 13–15 invalid |
//! | H = 172 | n | the `sm` byte of every value, in order |
//! | H + n | len\[0\] | stream 0, then stream 1 at `H + n + len[0]`, …, each right after the previous |
//!
//! The block's length is exactly `H + n + len[0] + … + len[S-1]`.
//!
//! **Checksum.** Append zero bytes to the exponents `e[0..n]` up to `32·T` bytes,
//! `T = ceil(n / 32)`, and read them as little-endian u64 words `X[0..4T]`. Then, mod 2^64,
//! `sum = Σ X[j]` and `wsum = Σ (T − ⌊j/4⌋)·X[j]` (four Fletcher lanes, `j mod 4`, each
//! adding its running sum once per 32 exponents). The decoder computes both while it writes
//! the output and refuses a block whose exponents do not match: a corrupted stream that still
//! decodes (Huffman codes resynchronise, so the stream lengths alone catch only about a third
//! of them) is caught here. The `sm` bytes are not covered: a corrupted `sm` byte changes
//! that one value's sign and mantissa, as it would in a stored block.
//!
//! **Code.** The code lengths define a canonical Huffman code: codes are assigned in order of
//! (length, exponent), the first code is all zeros, and each next code is the previous plus
//! one, shifted left by the length difference (DEFLATE's rule). Lengths are at most
//! [`MAX_CODE_LEN`] = 12, and the Kraft sum Σ 2^−len over present exponents is at most 1. The
//! encoder always writes a complete code (Kraft sum = 1), except for a block with a single
//! distinct exponent, which gets a 1-bit code `0` (Kraft sum ½); a decoder must accept
//! incomplete codes and reject bits that match no code. A block with `n = 0` has no present
//! exponent.
//!
//! **Streams.** With `q = ceil(n / S)`, stream `k` holds the exponents of values
//! `k·q .. min((k+1)·q, n)` (empty when `k·q ≥ n`). Each stream is the concatenation of the
//! codes of its exponents, written most-significant bit first: the first code starts at bit 7
//! of the stream's first byte. The last data byte is filled with zero bits, and [`STREAM_PAD`]
//! = 8 zero bytes follow, so a stream of `b` code bits has `len = ceil(b / 8) + 8` bytes. The
//! padding lets a decoder load 8 bytes at any data byte of a stream without reading past the
//! stream; the decoder checks that each stream's codes end in its last data byte and that
//! every bit after them is zero.
//!
//! # Decoding
//!
//! [`Decoder::decode_bf16`] checks the header, builds a 4096-entry table indexed by the next
//! 12 bits of a stream, each entry holding up to four whole exponents (one 4-byte store),
//! their count and the bits they use, and decodes the four streams in one interleaved loop:
//! per stream and step, one unaligned 8-byte big-endian load serves two table lookups (up to
//! eight exponents). A second, vectorised pass merges exponents and `sm` bytes into the
//! output and computes the checksum. Any byte string gives a value or a [`CodecError`];
//! nothing panics and nothing is read outside `enc`.

use std::fmt;

/// The magic of a coded block.
pub const MAGIC: [u8; 4] = *b"K3E1";
/// Number of exponent streams of a coded block.
pub const STREAMS: usize = 4;
/// Longest code, in bits; also the width of the decoder's table index.
pub const MAX_CODE_LEN: usize = 12;
/// Zero bytes after the data of every stream.
pub const STREAM_PAD: usize = 8;
/// Bytes of a coded block's fixed header (magic, `n`, `S`, stream lengths, exponent
/// checksum, code lengths).
pub const HEADER_BYTES: usize = 12 + 4 * STREAMS + 16 + 128;

const TABLE: usize = 1 << MAX_CODE_LEN;
const CHECK_AT: usize = 12 + 4 * STREAMS;
const LENS_AT: usize = CHECK_AT + 16;
/// Exponent bytes per step of the checksum (four u64 lanes).
const CHECK_STEP: usize = 32;

/// A malformed coded block (or a destination of the wrong size). The message names the
/// field, stream and byte offset (from the start of the coded block) involved; the caller
/// prefixes the file and block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    message: String,
}

impl CodecError {
    fn new(message: String) -> Self {
        CodecError { message }
    }

    /// The message, e.g. `stream 2: no code matches the bits at byte offset 40961 (bit 3)`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CodecError {}

/// The exponent of the little-endian BF16 value `(b0, b1)`.
#[inline(always)]
fn exponent(b0: u8, b1: u8) -> u8 {
    ((b1 & 0x7f) << 1) | (b0 >> 7)
}

/// Values of stream `k` of a block of `n` values: `k·q .. min((k+1)·q, n)`, `q = ceil(n/S)`.
fn stream_range(n: usize, k: usize) -> (usize, usize) {
    let q = n.div_ceil(STREAMS);
    ((k * q).min(n), ((k + 1) * q).min(n))
}

/// Shannon entropy, in bits per value, of the exponent histogram of `src` (little-endian BF16
/// values; a trailing odd byte is ignored); 0 for no values.
pub fn exponent_entropy_bits(src: &[u8]) -> f64 {
    let hist = histogram(src);
    let n: u64 = hist.iter().sum();
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    hist.iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Exponent counts over all values of `src`, counted into four sub-histograms so that
/// repeated exponents do not serialise on one counter.
fn histogram(src: &[u8]) -> [u64; 256] {
    let mut h = [[0u32; 256]; 4];
    let mut total = [0u64; 256];
    // u32 sub-counters, flushed every 2^30 values.
    for big in src.chunks(1 << 31) {
        let mut it = big.chunks_exact(8);
        for c in &mut it {
            h[0][exponent(c[0], c[1]) as usize] += 1;
            h[1][exponent(c[2], c[3]) as usize] += 1;
            h[2][exponent(c[4], c[5]) as usize] += 1;
            h[3][exponent(c[6], c[7]) as usize] += 1;
        }
        for c in it.remainder().chunks_exact(2) {
            h[0][exponent(c[0], c[1]) as usize] += 1;
        }
        for sub in &mut h {
            for (t, c) in total.iter_mut().zip(sub.iter_mut()) {
                *t += *c as u64;
                *c = 0;
            }
        }
    }
    total
}

/// Code lengths (≤ [`MAX_CODE_LEN`]) of a Huffman code for the counts `freq`: 0 for absent
/// symbols, 1 for a lone symbol. Over-long codes are shortened with the JPEG rule (ITU T.81
/// Annex K.2), which keeps the code complete and changes the cost only slightly (the symbols
/// it moves are the rarest).
fn code_lengths(freq: &[u64; 256]) -> [u8; 256] {
    let mut lens = [0u8; 256];
    // Present symbols by increasing count (ties by symbol, for determinism).
    let mut syms: Vec<(u64, u8)> = (0..256)
        .filter(|&s| freq[s] > 0)
        .map(|s| (freq[s], s as u8))
        .collect();
    syms.sort_unstable();
    let m = syms.len();
    if m == 0 {
        return lens;
    }
    if m == 1 {
        lens[syms[0].1 as usize] = 1;
        return lens;
    }
    // Two-queue Huffman: leaves 0..m in increasing weight, internal nodes m..2m-1 are created
    // in non-decreasing weight, so the two smallest are always at the queue heads.
    let mut weight: Vec<u64> = syms.iter().map(|&(f, _)| f).collect();
    weight.resize(2 * m - 1, 0);
    let mut parent = vec![0usize; 2 * m - 1];
    let (mut leaf, mut inner) = (0usize, m);
    for node in m..2 * m - 1 {
        let mut pick = || {
            if leaf < m && (inner >= node || weight[leaf] <= weight[inner]) {
                leaf += 1;
                leaf - 1
            } else {
                inner += 1;
                inner - 1
            }
        };
        let (a, b) = (pick(), pick());
        weight[node] = weight[a] + weight[b];
        parent[a] = node;
        parent[b] = node;
    }
    // Depths: a parent has a larger index than its children; the root (2m-2) has depth 0.
    let mut depth = vec![0usize; 2 * m - 1];
    for node in (0..2 * m - 2).rev() {
        depth[node] = depth[parent[node]] + 1;
    }
    let mut count = vec![0usize; m]; // count[d]: leaves at depth d (d ≤ m-1)
    for &d in &depth[..m] {
        count[d] += 1;
    }
    // JPEG length limiting: take a pair at the deepest level i > 12; one moves up to their
    // parent's place (i-1), the other pairs with a leaf moved down from the deepest level j <
    // i-1 that has one.
    for i in (MAX_CODE_LEN + 1..m).rev() {
        while count[i] > 0 {
            let mut j = i - 2;
            while count[j] == 0 {
                j -= 1;
            }
            count[i] -= 2;
            count[i - 1] += 1;
            count[j + 1] += 2;
            count[j] -= 1;
        }
    }
    // The most frequent symbols get the shortest lengths.
    let mut next = syms.iter().rev();
    for (len, &c) in count.iter().enumerate().take(MAX_CODE_LEN + 1) {
        for _ in 0..c {
            if let Some(&(_, s)) = next.next() {
                lens[s as usize] = len as u8;
            }
        }
    }
    lens
}

/// Canonical codes (DEFLATE's rule) of valid lengths: `codes[s]` right-aligned.
fn canonical_codes(lens: &[u8; 256]) -> [u16; 256] {
    let mut count = [0u32; MAX_CODE_LEN + 1];
    for &l in lens {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let mut next = [0u32; MAX_CODE_LEN + 1];
    let mut code = 0u32;
    for len in 1..=MAX_CODE_LEN {
        code = (code + count[len - 1]) << 1;
        next[len] = code;
    }
    let mut codes = [0u16; 256];
    for (s, &l) in lens.iter().enumerate() {
        if l > 0 {
            codes[s] = next[l as usize] as u16;
            next[l as usize] += 1;
        }
    }
    codes
}

/// Encodes `src` (little-endian BF16 values) as a coded block into `out` (cleared first).
/// Returns false — and leaves `out` empty — when the coded block would not be strictly
/// smaller than `src` (the caller then stores the block as it is); a block of fewer than
/// 234 values never pays for its 204 bytes of header and padding.
///
/// Panics if `src.len()` is odd or over `u32::MAX` (2^31 values); the engine's blocks are at
/// most a few MiB.
pub fn encode_bf16(src: &[u8], out: &mut Vec<u8>) -> bool {
    encode(src, out, false)
}

/// [`encode_bf16`] without the size check: always writes the coded block, even when it is
/// larger than `src` (for tests and tools that need a coded block of any input).
///
/// Panics like [`encode_bf16`].
pub fn encode_bf16_always(src: &[u8], out: &mut Vec<u8>) {
    encode(src, out, true);
}

fn encode(src: &[u8], out: &mut Vec<u8>, always: bool) -> bool {
    out.clear();
    assert!(
        src.len() % 2 == 0,
        "encode_bf16: odd source length {}",
        src.len()
    );
    assert!(
        src.len() <= u32::MAX as usize,
        "encode_bf16: source of {} bytes is over u32::MAX",
        src.len()
    );
    let n = src.len() / 2;
    // Per-stream histograms give each stream's exact size before anything is written.
    let mut hists = [[0u64; 256]; STREAMS];
    for (k, h) in hists.iter_mut().enumerate() {
        let (a, b) = stream_range(n, k);
        *h = histogram(&src[2 * a..2 * b]);
    }
    let mut freq = [0u64; 256];
    for h in &hists {
        for (f, c) in freq.iter_mut().zip(h) {
            *f += c;
        }
    }
    let lens = code_lengths(&freq);
    let mut stream_len = [0usize; STREAMS];
    for (len, h) in stream_len.iter_mut().zip(&hists) {
        let bits: u64 = h.iter().zip(&lens).map(|(&c, &l)| c * l as u64).sum();
        *len = bits.div_ceil(8) as usize + STREAM_PAD;
    }
    let total = HEADER_BYTES + n + stream_len.iter().sum::<usize>();
    if !always && total >= src.len() {
        return false;
    }
    // Zero-filled: fill bits and padding are zero without further work.
    out.resize(total, 0);
    let buf = &mut out[..];
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&(n as u32).to_le_bytes());
    buf[8..12].copy_from_slice(&(STREAMS as u32).to_le_bytes());
    for (k, &len) in stream_len.iter().enumerate() {
        buf[12 + 4 * k..16 + 4 * k].copy_from_slice(&(len as u32).to_le_bytes());
    }
    for (b, p) in buf[LENS_AT..HEADER_BYTES]
        .iter_mut()
        .zip(lens.chunks_exact(2))
    {
        *b = p[0] | (p[1] << 4);
    }
    // Sign/mantissa bytes and the exponent checksum, in one pass.
    let (sum, wsum) = split_values(src, &mut buf[HEADER_BYTES..HEADER_BYTES + n]);
    buf[CHECK_AT..CHECK_AT + 8].copy_from_slice(&sum.to_le_bytes());
    buf[CHECK_AT + 8..CHECK_AT + 16].copy_from_slice(&wsum.to_le_bytes());
    // Streams. Code and length of each exponent in one u32: code << 8 | length.
    let codes = canonical_codes(&lens);
    let mut cl = [0u32; 256];
    for s in 0..256 {
        cl[s] = ((codes[s] as u32) << 8) | lens[s] as u32;
    }
    let mut start = HEADER_BYTES + n;
    for (k, &len) in stream_len.iter().enumerate() {
        let (a, b) = stream_range(n, k);
        write_stream(&cl, &src[2 * a..2 * b], &mut buf[start..start + len]);
        start += len;
    }
    true
}

/// Writes the sign/mantissa byte of each value of `src` into `sm` and returns the exponent
/// checksum (sum, wsum).
fn split_values(src: &[u8], sm: &mut [u8]) -> (u64, u64) {
    let mut c = Check::default();
    let mut e = [0u8; CHECK_STEP];
    let mut v = src.chunks_exact(2 * CHECK_STEP);
    let mut out = sm.chunks_exact_mut(CHECK_STEP);
    for (v, out) in (&mut v).zip(&mut out) {
        let v: &[u8; 2 * CHECK_STEP] = v.try_into().unwrap();
        for i in 0..CHECK_STEP {
            let x = u16::from_le_bytes([v[2 * i], v[2 * i + 1]]);
            e[i] = (x >> 7) as u8;
            out[i] = ((x >> 8) as u8 & 0x80) | (x as u8 & 0x7f);
        }
        c.add(&e);
    }
    let mut rest = [0u8; CHECK_STEP];
    let tail = v.remainder();
    for ((x, o), p) in rest
        .iter_mut()
        .zip(out.into_remainder())
        .zip(tail.chunks_exact(2))
    {
        *x = exponent(p[0], p[1]);
        *o = (p[1] & 0x80) | (p[0] & 0x7f);
    }
    c.finish(&rest[..tail.len() / 2])
}

/// Writes the codes of the exponents of `src` (`cl[e]` = code << 8 | length) into the
/// zero-filled stream `out`, whose length is its data bytes plus [`STREAM_PAD`].
fn write_stream(cl: &[u32; 256], src: &[u8], out: &mut [u8]) {
    // `acc` holds `nb` pending bits in its low end. Four codes (≤ 48 bits) join the < 8 bits
    // left by the previous flush (nb ≥ 4 then), and the whole bytes go out with one 8-byte
    // store whose tail is zero: it lands on later data or on the stream's own padding, as
    // `pos` never passes the data bytes.
    let (mut acc, mut nb, mut pos) = (0u64, 0u32, 0usize);
    let mut it = src.chunks_exact(8);
    for c in &mut it {
        for p in c.chunks_exact(2) {
            let x = cl[exponent(p[0], p[1]) as usize];
            acc = (acc << (x & 0xff)) | (x >> 8) as u64;
            nb += x & 0xff;
        }
        out[pos..pos + 8].copy_from_slice(&(acc << (64 - nb)).to_be_bytes());
        pos += (nb >> 3) as usize;
        nb &= 7;
    }
    for p in it.remainder().chunks_exact(2) {
        let x = cl[exponent(p[0], p[1]) as usize];
        acc = (acc << (x & 0xff)) | (x >> 8) as u64;
        nb += x & 0xff;
    }
    if nb > 0 {
        out[pos..pos + 8].copy_from_slice(&(acc << (64 - nb)).to_be_bytes());
    }
}

/// Reusable decode state: the lookup tables of the last block's code and the exponent
/// scratch. Keep one per thread; once warmed up to the largest block, decoding allocates
/// nothing, and consecutive blocks with the same code lengths skip the table build.
pub struct Decoder {
    /// Lookup tables of the code in `built`.
    t: Box<Tables>,
    /// Code lengths the tables were built for (`None`: not built).
    built: Option<[u8; 256]>,
    /// Decoded exponents of the current block.
    exp: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("scratch_values", &self.exp.capacity())
            .finish_non_exhaustive()
    }
}

/// The decoder's tables, indexed by the next 12 bits of a stream. Bits that start with no
/// code get `bits` 0 and `count` 1: the loops still end, and the stream, stalled there, fails
/// its end check (see `check_stream_end`), so the hot loop tests nothing.
///
/// Invariant (the unchecked loads and stores of `decode_streams` rely on it): every `count`
/// is 1–4 and every `bits` at most 12, in the initial tables as after `build_tables`.
struct Tables {
    /// Up to 4 exponents whose codes fit whole in the 12 bits, the first in the low byte.
    syms: [u32; TABLE],
    /// Bits those exponents use (0 when the bits start with no code).
    bits: [u8; TABLE],
    /// How many they are, 1–4.
    count: [u8; TABLE],
    /// The first exponent alone: exponent | length << 8 (0 when no code).
    single: [u16; TABLE],
}

impl Decoder {
    /// A decoder with empty tables (about 40 KiB) and no scratch.
    pub fn new() -> Self {
        Decoder {
            t: Box::new(Tables {
                syms: [0; TABLE],
                bits: [0; TABLE],
                count: [1; TABLE],
                single: [0; TABLE],
            }),
            built: None,
            exp: Vec::new(),
        }
    }

    /// Decodes the coded block `enc` into `dst`, which must be exactly the block's
    /// uncompressed size (`2n` bytes).
    ///
    /// Errors, never a panic, whatever the bytes: a block shorter than the header, bad magic,
    /// `n ≠ dst.len()/2` (or odd `dst`), a stream count other than [`STREAMS`], stream lengths
    /// under the padding or not adding up to `enc.len()`, code lengths over 12 or over-
    /// subscribed (Kraft sum over 1), no code although `n > 0`, bits that match no code, a
    /// stream whose codes do not end in its last data byte or whose padding is not zero, and
    /// decoded exponents that do not match the checksum. On error `dst` holds unspecified
    /// bytes.
    pub fn decode_bf16(&mut self, enc: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        let h = parse_header(enc, dst.len())?;
        let n = h.n;
        if self.built != Some(h.lens) {
            build_tables(&h.lens, &mut self.t);
            self.built = Some(h.lens);
        }
        if self.exp.len() < n {
            self.exp.resize(n, 0);
        }
        let exp = &mut self.exp[..n];
        let sm = &enc[HEADER_BYTES..HEADER_BYTES + n];

        let mut bo = [0usize; STREAMS]; // absolute bit offset in enc
        let mut o = [0usize; STREAMS]; // next value
        let mut end = [0usize; STREAMS];
        for k in 0..STREAMS {
            bo[k] = 8 * h.start[k];
            (o[k], end[k]) = stream_range(n, k);
        }
        if let Err((k, byte)) = decode_streams(&self.t, enc, &mut bo, &mut o, &end, exp) {
            return Err(self.diagnose(enc, &h, k).unwrap_or_else(|| {
                CodecError::new(format!(
                    "stream {k}: codes run past the end of the block at byte offset {byte}"
                ))
            }));
        }
        for (k, &end_bit) in bo.iter().enumerate() {
            if let Err(e) = check_stream_end(enc, &h, k, end_bit) {
                return Err(self.diagnose(enc, &h, k).unwrap_or(e));
            }
        }
        let check = merge(&self.exp[..n], sm, dst);
        if check != h.check {
            return Err(CodecError::new(format!(
                "exponent checksum mismatch: the block says sum {:#018x}, wsum {:#018x}; the \
                 decoded exponents give {:#018x}, {:#018x} (corrupt code lengths or streams)",
                h.check.0, h.check.1, check.0, check.1
            )));
        }
        Ok(())
    }

    /// Decodes stream `k` one exponent at a time with the single table and names the first
    /// code that is missing from the table or runs past the stream, if any.
    fn diagnose(&self, enc: &[u8], h: &Header, k: usize) -> Option<CodecError> {
        let (a, b) = stream_range(h.n, k);
        let stream = &enc[h.start[k]..h.start[k] + h.len[k]];
        let mut bit = 0usize;
        for i in a..b {
            let p = bit >> 3;
            let Some(w) = load_be(stream, p) else {
                return Some(CodecError::new(format!(
                    "stream {k}: the code of value {i} runs past the stream's end (byte offset {})",
                    h.start[k] + h.len[k]
                )));
            };
            let s = self.t.single[((w << (bit & 7)) >> 52) as usize];
            if s == 0 {
                return Some(CodecError::new(format!(
                    "stream {k}: no code matches the bits at byte offset {} (bit {}) for value {i}",
                    h.start[k] + p,
                    bit & 7
                )));
            }
            bit += (s >> 8) as usize;
        }
        None
    }
}

/// The checked header of a coded block.
struct Header {
    n: usize,
    lens: [u8; 256],
    /// The stored exponent checksum (sum, wsum).
    check: (u64, u64),
    /// Byte offset of each stream in the block, and its length.
    start: [usize; STREAMS],
    len: [usize; STREAMS],
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
}

fn parse_header(enc: &[u8], dst_len: usize) -> Result<Header, CodecError> {
    let err = |m: String| Err(CodecError::new(m));
    if enc.len() < HEADER_BYTES {
        return err(format!(
            "coded block of {} bytes is shorter than the {HEADER_BYTES}-byte header",
            enc.len()
        ));
    }
    if enc[..4] != MAGIC {
        return err(format!(
            "bad magic {:02x?} (expected {:02x?}, \"K3E1\")",
            &enc[..4],
            MAGIC
        ));
    }
    let n = u32_at(enc, 4);
    if dst_len % 2 != 0 || n != dst_len / 2 {
        return err(format!(
            "block holds {n} values ({} bytes) but the destination is {dst_len} bytes",
            2 * n as u64
        ));
    }
    let s = u32_at(enc, 8);
    if s != STREAMS {
        return err(format!("{s} streams at byte offset 8, expected {STREAMS}"));
    }
    let mut len = [0usize; STREAMS];
    let mut start = [0usize; STREAMS];
    let mut at = (HEADER_BYTES + n) as u64;
    for k in 0..STREAMS {
        len[k] = u32_at(enc, 12 + 4 * k);
        if len[k] < STREAM_PAD {
            return err(format!(
                "stream {k}: length {} (byte offset {}) is under the {STREAM_PAD}-byte padding",
                len[k],
                12 + 4 * k
            ));
        }
        start[k] = at.min(usize::MAX as u64) as usize;
        at += len[k] as u64;
    }
    if at != enc.len() as u64 {
        return err(format!(
            "lengths do not add up: {HEADER_BYTES}-byte header + {n} sign/mantissa bytes + \
             streams {len:?} = {at} bytes, but the block is {} bytes",
            enc.len()
        ));
    }
    let mut lens = [0u8; 256];
    for (i, &b) in enc[LENS_AT..LENS_AT + 128].iter().enumerate() {
        lens[2 * i] = b & 15;
        lens[2 * i + 1] = b >> 4;
    }
    let mut kraft = 0usize;
    for (s, &l) in lens.iter().enumerate() {
        if l as usize > MAX_CODE_LEN {
            return err(format!(
                "exponent {s}: code length {l} (byte offset {}) is over {MAX_CODE_LEN}",
                LENS_AT + s / 2
            ));
        }
        if l > 0 {
            kraft += TABLE >> l;
        }
    }
    if kraft > TABLE {
        return err(format!(
            "code lengths are over-subscribed: Kraft sum {kraft}/{TABLE} is over 1"
        ));
    }
    if n > 0 && kraft == 0 {
        return err(format!("block holds {n} values but no exponent has a code"));
    }
    let u64_at = |at: usize| u64::from_le_bytes(enc[at..at + 8].try_into().unwrap());
    Ok(Header {
        n,
        lens,
        check: (u64_at(CHECK_AT), u64_at(CHECK_AT + 8)),
        start,
        len,
    })
}

/// Fills the tables for valid code lengths (each ≤ 12, Kraft sum ≤ 1), keeping the
/// invariant of [`Tables`] (count 1–4, bits ≤ 12).
fn build_tables(lens: &[u8; 256], t: &mut Tables) {
    let codes = canonical_codes(lens);
    t.single.fill(0);
    for s in 0..256 {
        let l = lens[s] as usize;
        if l > 0 {
            let lo = (codes[s] as usize) << (MAX_CODE_LEN - l);
            let hi = (codes[s] as usize + 1) << (MAX_CODE_LEN - l);
            t.single[lo..hi].fill(s as u16 | (l as u16) << 8);
        }
    }
    for idx in 0..TABLE {
        let (mut syms, mut bits, mut count) = (0u32, 0usize, 0usize);
        while count < 4 {
            let s = t.single[(idx << bits) & (TABLE - 1)];
            let l = (s >> 8) as usize;
            if l == 0 || bits + l > MAX_CODE_LEN {
                break;
            }
            syms |= ((s & 0xff) as u32) << (8 * count);
            bits += l;
            count += 1;
        }
        t.syms[idx] = syms;
        t.bits[idx] = bits as u8;
        t.count[idx] = count.max(1) as u8;
    }
}

/// The 8 bytes of `b` at `p`, big-endian, if they are all inside `b`.
#[inline(always)]
fn load_be(b: &[u8], p: usize) -> Option<u64> {
    let w: [u8; 8] = b.get(p..p.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(w))
}

/// Decodes the exponents of all streams into `exp`: stream `k` starts at bit `bo[k]` of
/// `enc` and fills `exp[o[k]..end[k]]`. On return `bo` holds each stream's end bit (bits that
/// match no code stop a stream there: the end check catches it). Err((stream, byte offset))
/// when a load would leave `enc`.
#[inline(always)]
fn decode_streams(
    t: &Tables,
    enc: &[u8],
    bo: &mut [usize; STREAMS],
    o: &mut [usize; STREAMS],
    end: &[usize; STREAMS],
    exp: &mut [u8],
) -> Result<(), (usize, usize)> {
    // One 8-byte load serves PER_LOAD lookups: the i-th starts at most 7 + 12·i bits into
    // it and reads 12 bits, so up to 4 fit (2, 3 and 4 measured alike, about 10 % faster
    // than one lookup per load; 2 leaves the shortest tail).
    const PER_LOAD: usize = 2;
    // A load at bit offset ≤ `lim` stays inside `enc` (enc.len() ≥ HEADER_BYTES > 8).
    let lim = 8 * (enc.len() - 8);
    loop {
        // All streams in lockstep for `r` rounds, where `r` is small enough that no stream
        // can run out of room: each round stores at most PER_LOAD · 4 values per stream and
        // consumes at most PER_LOAD · 12 bits of it (table entries hold count ≤ 4 and bits
        // ≤ 12, see `build_tables`). Then no store passes `end[k]` (so none reaches the next
        // stream's values or leaves `exp`) and no load leaves `enc`: the rounds need no
        // bounds checks, which measured 12–20 % of the decode time.
        let mut r = usize::MAX;
        for k in 0..STREAMS {
            r = r.min((end[k] - o[k]) / (4 * PER_LOAD));
            r = r.min(match lim.checked_sub(bo[k]) {
                Some(room) => room / (12 * PER_LOAD) + 1,
                None => 0,
            });
        }
        if r == 0 {
            break;
        }
        for _ in 0..r {
            for k in 0..STREAMS {
                let p = bo[k] >> 3;
                // SAFETY: bo[k] ≤ lim by the choice of `r`, so p + 8 ≤ enc.len().
                let w = unsafe { load_be_unchecked(enc, p) };
                let mut sh = bo[k] & 7;
                for _ in 0..PER_LOAD {
                    let i = ((w << sh) >> 52) as usize;
                    // SAFETY: o[k] + 4 ≤ end[k] ≤ n = exp.len() by the choice of `r`.
                    unsafe { store4_unchecked(exp, o[k], t.syms[i]) };
                    o[k] += t.count[i] as usize;
                    sh += t.bits[i] as usize;
                }
                bo[k] = 8 * p + sh;
            }
        }
    }
    // Each stream's last values alone: whole entries while 4 values are left, then one
    // exponent per lookup.
    for k in 0..STREAMS {
        while o[k] < end[k] {
            let p = bo[k] >> 3;
            let Some(w) = load_be(enc, p) else {
                return Err((k, p));
            };
            let i = ((w << (bo[k] & 7)) >> 52) as usize;
            if end[k] - o[k] >= 4 {
                exp[o[k]..o[k] + 4].copy_from_slice(&t.syms[i].to_le_bytes());
                o[k] += t.count[i] as usize;
                bo[k] += t.bits[i] as usize;
            } else {
                let s = t.single[i];
                exp[o[k]] = s as u8;
                o[k] += 1;
                bo[k] += (s >> 8) as usize;
            }
        }
    }
    Ok(())
}

/// The 8 bytes of `b` at `p`, big-endian, without a bounds check.
///
/// # Safety
///
/// `p + 8 ≤ b.len()`.
#[inline(always)]
unsafe fn load_be_unchecked(b: &[u8], p: usize) -> u64 {
    debug_assert!(p + 8 <= b.len());
    // SAFETY: the caller guarantees the 8 bytes at p are inside `b`; read_unaligned needs no
    // alignment.
    u64::from_be(unsafe { b.as_ptr().add(p).cast::<u64>().read_unaligned() })
}

/// Stores `v` little-endian at `b[o..o + 4]` without a bounds check.
///
/// # Safety
///
/// `o + 4 ≤ b.len()`.
#[inline(always)]
unsafe fn store4_unchecked(b: &mut [u8], o: usize, v: u32) {
    debug_assert!(o + 4 <= b.len());
    // SAFETY: the caller guarantees the 4 bytes at o are inside `b`; write_unaligned needs
    // no alignment.
    unsafe {
        b.as_mut_ptr()
            .add(o)
            .cast::<[u8; 4]>()
            .write_unaligned(v.to_le_bytes())
    }
}

/// Checks that stream `k`, whose codes ended at absolute bit `end_bit` of `enc`, ends in its
/// last data byte and that every bit after its codes is zero.
fn check_stream_end(enc: &[u8], h: &Header, k: usize, end_bit: usize) -> Result<(), CodecError> {
    let data = h.len[k] - STREAM_PAD;
    let used = end_bit - 8 * h.start[k];
    let used_bytes = used.div_ceil(8);
    if used_bytes != data {
        return Err(CodecError::new(format!(
            "stream {k}: codes end at byte offset {} but the stream's data ends at byte offset {}",
            h.start[k] + used_bytes,
            h.start[k] + data
        )));
    }
    let stream = &enc[h.start[k]..h.start[k] + h.len[k]];
    if used % 8 != 0 && stream[used / 8] & (0xff >> (used % 8)) != 0 {
        return Err(CodecError::new(format!(
            "stream {k}: non-zero fill bits after the last code at byte offset {}",
            h.start[k] + used / 8
        )));
    }
    if let Some(i) = stream[data..].iter().position(|&b| b != 0) {
        return Err(CodecError::new(format!(
            "stream {k}: non-zero padding at byte offset {}",
            h.start[k] + data + i
        )));
    }
    Ok(())
}

/// Four Fletcher lanes over little-endian u64 words of exponents: word `j` goes to lane
/// `j mod 4`, `a[l]` sums the lane's words, `b[l]` sums `a[l]` after each step.
#[derive(Default)]
struct Check {
    a: [u64; 4],
    b: [u64; 4],
}

impl Check {
    #[inline(always)]
    fn add(&mut self, e: &[u8; CHECK_STEP]) {
        for l in 0..4 {
            let x = u64::from_le_bytes(e[8 * l..8 * l + 8].try_into().unwrap());
            self.a[l] = self.a[l].wrapping_add(x);
            self.b[l] = self.b[l].wrapping_add(self.a[l]);
        }
    }

    /// Adds the last `rest` (< 32) exponents, zero-padded to a step when not empty, and
    /// returns (sum, wsum).
    fn finish(mut self, rest: &[u8]) -> (u64, u64) {
        if !rest.is_empty() {
            let mut last = [0u8; CHECK_STEP];
            last[..rest.len()].copy_from_slice(rest);
            self.add(&last);
        }
        let sum = self.a.iter().fold(0u64, |s, &x| s.wrapping_add(x));
        let wsum = self.b.iter().fold(0u64, |s, &x| s.wrapping_add(x));
        (sum, wsum)
    }
}

/// `dst[2i], dst[2i+1]` = the BF16 value of exponent `exp[i]` and sign/mantissa `sm[i]`, in
/// fixed-size chunks so the compiler vectorises it; returns the exponent checksum, computed
/// on the way.
fn merge(exp: &[u8], sm: &[u8], dst: &mut [u8]) -> (u64, u64) {
    const C: usize = CHECK_STEP;
    let mut check = Check::default();
    let mut d = dst.chunks_exact_mut(2 * C);
    let mut e = exp.chunks_exact(C);
    let mut s = sm.chunks_exact(C);
    for ((d, e), s) in (&mut d).zip(&mut e).zip(&mut s) {
        let e: &[u8; C] = e.try_into().unwrap();
        merge_chunk::<C>(e, s.try_into().unwrap(), d);
        check.add(e);
    }
    let (d, e, s) = (d.into_remainder(), e.remainder(), s.remainder());
    for ((d, &e), &s) in d.chunks_exact_mut(2).zip(e).zip(s) {
        d[0] = (s & 0x7f) | (e << 7);
        d[1] = (s & 0x80) | (e >> 1);
    }
    check.finish(e)
}

#[inline(always)]
fn merge_chunk<const C: usize>(e: &[u8; C], s: &[u8; C], d: &mut [u8]) {
    let mut v = [0u16; C];
    for i in 0..C {
        let (e, s) = (e[i] as u16, s[i] as u16);
        v[i] = ((s & 0x80) << 8) | (e << 7) | (s & 0x7f);
    }
    for (d, v) in d.chunks_exact_mut(2).zip(v) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}
