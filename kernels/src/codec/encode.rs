//! The encoder: exponent histogram, length-limited canonical Huffman code, the block.

use super::*;

/// Exponent counts over all values of `src`, counted into four sub-histograms so that
/// repeated exponents do not serialise on one counter.
pub(super) fn histogram(src: &[u8]) -> [u64; 256] {
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
pub(super) fn canonical_codes(lens: &[u8; 256]) -> [u16; 256] {
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
