//! Lossless block codec for BF16 weight bytes: the 8-bit exponents are Huffman-coded, the
//! sign and mantissa bits are stored as they are.
//!
//! BF16 weights of trained models carry about 2.6–3 bits of entropy in their exponent
//! (Gaussian weights 2.55), while sign + mantissa are close to random, so coding the exponent
//! alone brings a run to about 0.76 of its bytes (measured: bench/README.md), at a decode cost
//! under a nanosecond per value on one core. The codec is pure compute: the caller owns files,
//! the block index and the choice between a coded and a stored block ([`encode_bf16`] says
//! when coding does not pay).
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

mod decode;
mod encode;

pub use decode::Decoder;
use encode::{canonical_codes, histogram};
pub use encode::{encode_bf16, encode_bf16_always};
