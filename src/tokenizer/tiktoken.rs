//! The BPE vocabulary: loader and validator for `tiktoken.model` (TOKENIZER.md §2) and the
//! byte-string → rank map the BPE looks tokens up in.
//!
//! The map is an open-addressing hash table over the token bytes (stored once, contiguously,
//! in rank order); a 65,536-entry side table answers two-byte lookups directly, since the BPE
//! asks for every adjacent byte pair of a piece.

use crate::error::{Error, Result};

/// Rank marking "no such token" in the pair table.
const NONE: u32 = u32::MAX;

/// A validated BPE vocabulary: N byte strings with ranks 0 … N−1.
pub struct Vocab {
    /// Token bytes concatenated in rank order.
    bytes: Vec<u8>,
    /// `offsets[r] .. offsets[r + 1]` are the bytes of rank r (N + 1 entries).
    offsets: Vec<u32>,
    /// Open-addressing hash slots (linear probing), see [`Slot`].
    slots: Vec<Slot>,
    mask: usize,
    /// Rank of every two-byte string (`b0 << 8 | b1`), or `NONE`.
    pairs: Vec<u32>,
    /// Rank of every single byte (all 256 exist, §2).
    singles: [u32; 256],
    max_len: usize,
}

/// One hash slot: the token's first eight bytes inline (zero-padded, little-endian), so that
/// tokens of up to 8 bytes, most of the vocabulary, compare without touching the byte arena;
/// `meta` = `rank + 1` (0: empty) | length << 32 | 16 hash bits << 48.
#[derive(Clone, Copy, Default)]
struct Slot {
    head: u64,
    meta: u64,
}

/// The first (up to) eight bytes of `b`, zero-padded, little-endian. Short strings are read
/// as two overlapping loads (no `memcpy` call: this runs for every BPE lookup).
#[inline(always)]
fn head(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 8 {
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    } else if n >= 4 {
        let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
        let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]) as u64;
        lo | (hi << (8 * (n - 4)))
    } else if n >= 2 {
        let lo = u16::from_le_bytes([b[0], b[1]]) as u64;
        let hi = u16::from_le_bytes([b[n - 2], b[n - 1]]) as u64;
        lo | (hi << (8 * (n - 2)))
    } else if n == 1 {
        b[0] as u64
    } else {
        0
    }
}

/// Hash of a byte string whose first eight bytes are `h0` (see [`head`]).
#[inline(always)]
fn hash(h0: u64, b: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = (h0 ^ (b.len() as u64).wrapping_mul(K)).wrapping_mul(K);
    if b.len() > 8 {
        let mut chunks = b[8..].chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ w).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            h = (h.rotate_left(5) ^ head(rest)).wrapping_mul(K);
        }
    }
    // Finaliser (murmur3 fmix64): the multiplies above leave the low bits weak.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// The length and tag part of a slot's `meta` (everything but the rank).
#[inline(always)]
fn meta_key(h: u64, len: usize) -> u64 {
    ((len as u64 & 0xFFFF) << 32) | ((h >> 48) << 48)
}

/// Byte equality of two slices, eight bytes at a time (for short keys a library `memcmp`
/// call costs more than the comparison).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        if x != y {
            return false;
        }
    }
    ca.remainder() == cb.remainder()
}

/// Decodes standard base64 (`A–Z a–z 0–9 + /`, `=` padding, length a multiple of 4).
fn base64_decode(s: &[u8]) -> std::result::Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    if s.is_empty() || s.len() % 4 != 0 {
        return Err(format!(
            "base64 length {} is not a positive multiple of 4",
            s.len()
        ));
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let quads = s.len() / 4;
    for (q, c) in s.chunks_exact(4).enumerate() {
        let last = q + 1 == quads;
        let pad = if last {
            c.iter().rev().take_while(|&&x| x == b'=').count()
        } else {
            0
        };
        if pad > 2 {
            return Err("base64 has more than two `=`".into());
        }
        let mut v = 0u32;
        for (k, &ch) in c[..4 - pad].iter().enumerate() {
            let d = val(ch).ok_or_else(|| {
                if ch == b'=' {
                    "base64 `=` before the end".to_string()
                } else {
                    format!(
                        "invalid base64 character {:?} at column {}",
                        ch as char,
                        q * 4 + k + 1
                    )
                }
            })?;
            v |= d << (18 - 6 * k);
        }
        let n = 3 - pad;
        // Non-canonical encodings (stray bits under the padding) are refused: the file is
        // machine-written and such bits mean corruption.
        if (pad == 1 && v & 0xFF != 0) || (pad == 2 && v & 0xFFFF != 0) {
            return Err("non-canonical base64 (bits set under the padding)".into());
        }
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        out.extend_from_slice(&bytes[..n]);
    }
    Ok(out)
}

impl Vocab {
    /// Parses and validates the text of a `tiktoken.model` file (TOKENIZER.md §2).
    ///
    /// `name` (the file path) starts every error message. Errors (exit 2) name the line: a line
    /// that is not `<base64> <rank>`, bad base64, an empty token, a rank that is
    /// not 1–10 ASCII digits or is ≥ 2^32, a duplicate byte string or rank (naming both lines),
    /// ranks that are not exactly 0 … N−1 (a gap), a missing single byte, or an empty file.
    pub fn parse(data: &[u8], name: &str) -> Result<Vocab> {
        let err = |line: usize, msg: String| Error::invalid(format!("{name}: line {line}: {msg}"));
        // (line number, rank, token bytes range in `raw`)
        let mut entries: Vec<(u32, u32, u32, u32)> = Vec::new();
        let mut raw: Vec<u8> = Vec::with_capacity(data.len() * 3 / 4);
        for (idx, line) in data.split(|&b| b == b'\n').enumerate() {
            let lineno = idx + 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let sp = line.iter().position(|&b| b == b' ').ok_or_else(|| {
                err(
                    lineno,
                    "expected `<base64 token> <rank>`, found no space".into(),
                )
            })?;
            let (tok, rank) = (&line[..sp], &line[sp + 1..]);
            if rank.is_empty() || rank.len() > 10 || !rank.iter().all(u8::is_ascii_digit) {
                return Err(err(
                    lineno,
                    format!(
                        "rank `{}` is not 1-10 ASCII digits",
                        String::from_utf8_lossy(rank)
                    ),
                ));
            }
            let rank_val: u64 = rank.iter().fold(0u64, |a, &d| a * 10 + (d - b'0') as u64);
            if rank_val >= 1 << 32 {
                return Err(err(lineno, format!("rank {rank_val} is not below 2^32")));
            }
            let bytes = base64_decode(tok).map_err(|m| err(lineno, m))?;
            if bytes.is_empty() {
                return Err(err(lineno, "empty token".into()));
            }
            if raw.len() + bytes.len() > u32::MAX as usize {
                return Err(err(lineno, "tokens exceed 4 GiB in total".into()));
            }
            let start = raw.len() as u32;
            raw.extend_from_slice(&bytes);
            entries.push((lineno as u32, rank_val as u32, start, bytes.len() as u32));
        }
        let n = entries.len();
        if n == 0 {
            return Err(Error::invalid(format!("{name}: no tokens (empty file)")));
        }
        // Ranks must be exactly {0 … N−1}.
        let mut line_of_rank = vec![0u32; n];
        for &(line, rank, _, _) in &entries {
            let r = rank as usize;
            if r >= n {
                return Err(err(
                    line as usize,
                    format!(
                        "rank {rank} out of range: the file has {n} tokens, so ranks must be \
                         exactly 0..{} (no gaps)",
                        n - 1
                    ),
                ));
            }
            if line_of_rank[r] != 0 {
                return Err(err(
                    line as usize,
                    format!("duplicate rank {rank} (also on line {})", line_of_rank[r]),
                ));
            }
            line_of_rank[r] = line;
        }
        // Lay the tokens out in rank order.
        let mut by_rank: Vec<(u32, u32)> = vec![(0, 0); n];
        for &(_, rank, start, len) in &entries {
            by_rank[rank as usize] = (start, len);
        }
        let mut bytes = Vec::with_capacity(raw.len());
        let mut offsets = Vec::with_capacity(n + 1);
        for &(start, len) in &by_rank {
            offsets.push(bytes.len() as u32);
            bytes.extend_from_slice(&raw[start as usize..(start + len) as usize]);
        }
        offsets.push(bytes.len() as u32);
        drop(raw);

        // Load factor 0.31–0.62 (0.62 for the released 163,584 ranks: a 4 MB table; lookups
        // are dominated by cache misses, so a smaller table beats shorter probe runs).
        let cap = (n + n / 2).next_power_of_two().max(16);
        let mut v = Vocab {
            bytes,
            offsets,
            slots: vec![Slot::default(); cap],
            mask: cap - 1,
            pairs: vec![NONE; 1 << 16],
            singles: [NONE; 256],
            max_len: 0,
        };
        for rank in 0..n as u32 {
            if let Some(other) = v.insert(rank) {
                return Err(err(
                    line_of_rank[rank as usize] as usize,
                    format!(
                        "duplicate token (the same bytes as rank {other} on line {})",
                        line_of_rank[other as usize]
                    ),
                ));
            }
        }
        if let Some(b) = (0..256).find(|&b| v.singles[b] == NONE) {
            return Err(Error::invalid(format!(
                "{name}: the single byte 0x{b:02X} has no token (all 256 bytes must be encodable)"
            )));
        }
        Ok(v)
    }

    /// Inserts rank `rank`; returns the rank already holding the same bytes, if any.
    fn insert(&mut self, rank: u32) -> Option<u32> {
        let (s, e) = (
            self.offsets[rank as usize] as usize,
            self.offsets[rank as usize + 1] as usize,
        );
        let h0 = head(&self.bytes[s..e]);
        let h = hash(h0, &self.bytes[s..e]);
        let key = meta_key(h, e - s);
        let mut i = h as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot.meta == 0 {
                self.slots[i] = Slot {
                    head: h0,
                    meta: key | (rank as u64 + 1),
                };
                break;
            }
            let other = (slot.meta as u32) - 1;
            if self.token(other) == &self.bytes[s..e] {
                return Some(other);
            }
            i = (i + 1) & self.mask;
        }
        let len = e - s;
        self.max_len = self.max_len.max(len);
        match len {
            1 => self.singles[self.bytes[s] as usize] = rank,
            2 => self.pairs[(self.bytes[s] as usize) << 8 | self.bytes[s + 1] as usize] = rank,
            _ => {}
        }
        None
    }

    /// Number of ranks N.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Always false: a valid vocabulary has at least the 256 single bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held (token arena, offsets, hash table, pair table), for the memory plan.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.offsets.capacity() * 4
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.pairs.capacity() * 4
    }

    /// Length in bytes of the longest token.
    pub fn max_token_len(&self) -> usize {
        self.max_len
    }

    /// The bytes of rank `rank` (`rank < len()`, else panics: callers check ids first).
    #[inline]
    pub fn token(&self, rank: u32) -> &[u8] {
        let r = rank as usize;
        &self.bytes[self.offsets[r] as usize..self.offsets[r + 1] as usize]
    }

    /// The rank of byte string `b`, if it is a token.
    #[inline]
    pub fn rank(&self, b: &[u8]) -> Option<u32> {
        match b.len() {
            0 => None,
            1 => Some(self.singles[b[0] as usize]),
            2 => self.pair(b[0], b[1]),
            l if l > self.max_len => None,
            _ => self.lookup(b),
        }
    }

    /// The rank of the two-byte string `a b`, if it is a token.
    #[inline]
    pub fn pair(&self, a: u8, b: u8) -> Option<u32> {
        let r = self.pairs[(a as usize) << 8 | b as usize];
        (r != NONE).then_some(r)
    }

    /// The rank of single byte `b` (every byte has one).
    #[inline]
    pub fn single(&self, b: u8) -> u32 {
        self.singles[b as usize]
    }

    #[inline]
    fn lookup(&self, b: &[u8]) -> Option<u32> {
        let h0 = head(b);
        let h = hash(h0, b);
        let key = meta_key(h, b.len());
        let mut i = h as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot.meta == 0 {
                return None;
            }
            if slot.meta & !0xFFFF_FFFF == key && slot.head == h0 {
                let r = (slot.meta as u32) - 1;
                if b.len() <= 8 || same_bytes(&self.token(r)[8..], &b[8..]) {
                    return Some(r);
                }
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(b: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in b.chunks(3) {
            let v = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for k in 0..4 {
                if k <= c.len() {
                    s.push(A[(v >> (18 - 6 * k)) as usize & 63] as char);
                } else {
                    s.push('=');
                }
            }
        }
        s
    }

    #[test]
    fn base64_roundtrip() {
        for len in 1..10 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 200) as u8).collect();
            assert_eq!(base64_decode(b64(&data).as_bytes()).unwrap(), data);
        }
        assert!(base64_decode(b"QQ").is_err());
        assert!(base64_decode(b"Q===").is_err());
        assert!(base64_decode(b"QR==").is_err()); // non-canonical
        assert!(base64_decode(b"Q=Q=").is_err());
        assert!(base64_decode(b"QQ-=").is_err());
    }

    #[test]
    fn head_is_the_zero_padded_prefix() {
        let data: Vec<u8> = (1..=12).collect();
        for n in 0..=12 {
            let mut buf = [0u8; 8];
            let k = n.min(8);
            buf[..k].copy_from_slice(&data[..k]);
            assert_eq!(head(&data[..n]), u64::from_le_bytes(buf), "n = {n}");
        }
    }

    #[test]
    fn lookup_finds_every_token() {
        let mut text = String::new();
        for b in 0..=255u8 {
            text.push_str(&format!("{} {}\n", b64(&[b]), b));
        }
        text.push_str(&format!("{} 256\n", b64(b"ab")));
        text.push_str(&format!("{} 257\n", b64(b"abcdefghijklmnop")));
        let v = Vocab::parse(text.as_bytes(), "t").unwrap();
        assert_eq!(v.len(), 258);
        assert_eq!(v.rank(b"ab"), Some(256));
        assert_eq!(v.rank(b"abcdefghijklmnop"), Some(257));
        assert_eq!(v.rank(b"abc"), None);
        assert_eq!(v.rank(b"x"), Some(b'x' as u32));
        assert_eq!(v.token(257), b"abcdefghijklmnop");
    }
}
