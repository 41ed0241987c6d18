//! The BF16 block codec (`k3_kernels::codec`): bit-exact round trips, the documented byte
//! format (checked by an independent bit-by-bit reader), size, the 12-bit length limit, and
//! malformed blocks (errors, never a panic).

use k3_kernels::codec::{
    self, encode_bf16, encode_bf16_always, exponent_entropy_bits, CodecError, Decoder,
    HEADER_BYTES, MAGIC, MAX_CODE_LEN, STREAMS, STREAM_PAD,
};

/// Offset of the code lengths in the header.
const LENS_AT: usize = 12 + 4 * STREAMS + 16;

/// SplitMix64: a small seeded generator for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// f32 → BF16 bits, round to nearest even (finite inputs).
fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// `n` values of N(0, σ²) in BF16 (Box–Muller), little-endian.
fn gaussian(n: usize, sigma: f64, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    let mut out = Vec::with_capacity(2 * n + 2);
    while out.len() < 2 * n {
        let (u1, u2) = (r.unit(), r.unit());
        let m = (-2.0 * u1.ln()).sqrt() * sigma;
        let t = std::f64::consts::TAU * u2;
        out.extend_from_slice(&bf16((m * t.cos()) as f32).to_le_bytes());
        out.extend_from_slice(&bf16((m * t.sin()) as f32).to_le_bytes());
    }
    out.truncate(2 * n);
    out
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    (0..len).map(|_| r.next() as u8).collect()
}

fn exponent_of(b0: u8, b1: u8) -> u8 {
    ((b1 & 0x7f) << 1) | (b0 >> 7)
}

fn from_u16s(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode(dec: &mut Decoder, enc: &[u8], len: usize) -> Result<Vec<u8>, CodecError> {
    let mut dst = vec![0xa5u8; len];
    dec.decode_bf16(enc, &mut dst).map(|()| dst)
}

/// Round trip through `encode_bf16` (when it codes) and `encode_bf16_always`, each decoded
/// and checked against an independent reading of the format. Returns `encode_bf16`'s answer
/// and the size of the always-coded block.
fn round_trip(src: &[u8]) -> (bool, usize) {
    let mut dec = Decoder::new();
    let mut out = vec![1, 2, 3];
    let coded = encode_bf16(src, &mut out);
    if coded {
        assert!(
            out.len() < src.len(),
            "coded block not smaller than its source"
        );
        assert_eq!(decode(&mut dec, &out, src.len()).unwrap(), src);
        reference_check(&out, src);
    } else {
        assert!(
            out.is_empty(),
            "encode_bf16 returned false but left bytes in out"
        );
    }
    let mut always = Vec::new();
    encode_bf16_always(src, &mut always);
    if coded {
        assert_eq!(always, out, "encode_bf16 and encode_bf16_always differ");
    } else {
        assert!(always.len() >= src.len());
    }
    assert_eq!(decode(&mut dec, &always, src.len()).unwrap(), src);
    reference_check(&always, src);
    (coded, always.len())
}

/// Reads a coded block by the module documentation alone (bit by bit, canonical codes
/// rebuilt from the lengths) and checks every field against `src`.
fn reference_check(enc: &[u8], src: &[u8]) {
    let n = src.len() / 2;
    let u32_at = |at: usize| u32::from_le_bytes(enc[at..at + 4].try_into().unwrap()) as usize;
    assert_eq!(enc[..4], MAGIC);
    assert_eq!(u32_at(4), n);
    assert_eq!(u32_at(8), STREAMS);
    let lens_at = LENS_AT;
    assert_eq!(lens_at + 128, HEADER_BYTES);
    let len: Vec<usize> = (0..STREAMS).map(|k| u32_at(12 + 4 * k)).collect();
    // Checksum: sum and wsum over the zero-padded exponents as u64 words.
    let t = n.div_ceil(32);
    let mut e: Vec<u8> = (0..n)
        .map(|i| exponent_of(src[2 * i], src[2 * i + 1]))
        .collect();
    e.resize(32 * t, 0);
    let (mut sum, mut wsum) = (0u64, 0u64);
    for (j, w) in e.chunks_exact(8).enumerate() {
        let x = u64::from_le_bytes(w.try_into().unwrap());
        sum = sum.wrapping_add(x);
        wsum = wsum.wrapping_add(((t - j / 4) as u64).wrapping_mul(x));
    }
    let u64_at = |at: usize| u64::from_le_bytes(enc[at..at + 8].try_into().unwrap());
    assert_eq!(u64_at(12 + 4 * STREAMS), sum, "sum");
    assert_eq!(u64_at(20 + 4 * STREAMS), wsum, "wsum");
    assert_eq!(HEADER_BYTES + n + len.iter().sum::<usize>(), enc.len());
    let lens: Vec<u8> = enc[lens_at..lens_at + 128]
        .iter()
        .flat_map(|&b| [b & 15, b >> 4])
        .collect();
    assert!(lens.iter().all(|&l| l as usize <= MAX_CODE_LEN));
    // Canonical codes by (length, exponent).
    let mut order: Vec<usize> = (0..256).filter(|&s| lens[s] > 0).collect();
    order.sort_by_key(|&s| (lens[s], s));
    let mut codes = vec![(0u32, 0u8); 256];
    let (mut code, mut prev) = (0u32, 0u8);
    for (i, &s) in order.iter().enumerate() {
        if i > 0 {
            code = (code + 1) << (lens[s] - prev);
        } else {
            code <<= lens[s];
        }
        prev = lens[s];
        codes[s] = (code, lens[s]);
    }
    let kraft: f64 = order.iter().map(|&s| 0.5f64.powi(lens[s] as i32)).sum();
    assert!(kraft <= 1.0);
    if order.len() > 1 {
        assert_eq!(kraft, 1.0, "the encoder writes complete codes");
    }
    // Sign/mantissa bytes.
    for i in 0..n {
        let (b0, b1) = (src[2 * i], src[2 * i + 1]);
        assert_eq!(
            enc[HEADER_BYTES + i],
            (b1 & 0x80) | (b0 & 0x7f),
            "sm byte {i}"
        );
    }
    // Streams: codes MSB first, zero fill, then STREAM_PAD zero bytes.
    let q = n.div_ceil(STREAMS);
    let mut at = HEADER_BYTES + n;
    for (k, &len_k) in len.iter().enumerate() {
        let stream = &enc[at..at + len_k];
        let bit = |b: usize| (stream[b / 8] >> (7 - b % 8)) & 1;
        let mut pos = 0usize;
        for i in (k * q).min(n)..((k + 1) * q).min(n) {
            let e = exponent_of(src[2 * i], src[2 * i + 1]) as usize;
            let (c, l) = codes[e];
            assert!(l > 0, "exponent {e} has no code");
            for j in 0..l as usize {
                assert_eq!(
                    bit(pos + j) as u32,
                    (c >> (l as usize - 1 - j)) & 1,
                    "stream {k}, value {i}, code bit {j}"
                );
            }
            pos += l as usize;
        }
        assert_eq!(len_k, pos.div_ceil(8) + STREAM_PAD, "stream {k} length");
        for b in pos..8 * len_k {
            assert_eq!(bit(b), 0, "stream {k}: fill/padding bit {b}");
        }
        at += len_k;
    }
}

#[test]
fn header_constants() {
    assert_eq!(HEADER_BYTES, 172);
    assert_eq!(HEADER_BYTES, 12 + 4 * STREAMS + 16 + 128);
    assert_eq!(&MAGIC, b"K3E1");
    assert_eq!(MAX_CODE_LEN, 12);
}

#[test]
fn gaussian_round_trips_and_compresses() {
    for (i, &sigma) in [1e-3, 0.02, 0.5, 1.0, 300.0].iter().enumerate() {
        // Odd and not a multiple of the stream count.
        let src = gaussian(100_003, sigma, 7 + i as u64);
        let (coded, size) = round_trip(&src);
        assert!(coded, "sigma {sigma}: not coded");
        let ratio = size as f64 / src.len() as f64;
        assert!(ratio <= 0.75, "sigma {sigma}: ratio {ratio}");
        let h = exponent_entropy_bits(&src);
        assert!((2.0..3.5).contains(&h), "sigma {sigma}: entropy {h}");
        // Within 0.1 bit per value of the entropy, header and padding included.
        let ideal = (8.0 + h) / 16.0;
        assert!(
            ratio < ideal + 0.1 / 16.0,
            "sigma {sigma}: {ratio} vs {ideal}"
        );
    }
}

#[test]
fn one_mib_block() {
    let src = gaussian(1 << 19, 0.02, 99);
    let (coded, size) = round_trip(&src);
    assert!(coded);
    assert!(size as f64 <= 0.75 * src.len() as f64, "{size}");
}

#[test]
fn tiny_gaussian_near_subnormal() {
    // σ = 1e-38: many subnormal exponents (0) and both signs of zero.
    let src = gaussian(50_001, 1e-38, 3);
    round_trip(&src);
}

#[test]
fn uniform_random_bytes_are_not_coded() {
    for (len, seed) in [(2usize << 20, 1u64), (4096, 2), (1000, 3)] {
        let src = random_bytes(len, seed);
        let (coded, _) = round_trip(&src);
        assert!(!coded, "{len} random bytes were coded");
    }
}

#[test]
fn all_zeros() {
    for n in [1usize, 3, 100, 4097, 1 << 19] {
        let src = vec![0u8; 2 * n];
        let (coded, size) = round_trip(&src);
        if n >= 1000 {
            assert!(coded, "{n} zeros");
            // n sm bytes + one bit per value + header and padding.
            assert_eq!(
                size,
                HEADER_BYTES
                    + n
                    + (0..STREAMS)
                        .map(|k| stream_bits(n, k).div_ceil(8) + STREAM_PAD)
                        .sum::<usize>()
            );
        }
    }
}

/// Values in stream k (one bit each for a single-exponent block).
fn stream_bits(n: usize, k: usize) -> usize {
    let q = n.div_ceil(STREAMS);
    ((k + 1) * q).min(n) - (k * q).min(n)
}

#[test]
fn single_exponent() {
    let mut r = Rng(11);
    for e in [0u16, 1, 0x7f, 0x80, 0xfe, 0xff] {
        let v: Vec<u16> = (0..30_001)
            .map(|_| (e << 7) | (r.next() as u16 & 0x807f))
            .collect();
        let (coded, _) = round_trip(&from_u16s(&v));
        assert!(coded, "exponent {e}");
    }
}

#[test]
fn every_bf16_pattern() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    round_trip(&from_u16s(&all));
    let mut shuffled = all.clone();
    let mut r = Rng(5);
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, r.below(i + 1));
    }
    round_trip(&from_u16s(&shuffled));
    // Mostly Gaussian with every pattern sprinkled in: coded, and still exact.
    let mut src = gaussian(1 << 19, 0.02, 8);
    for (i, &v) in shuffled.iter().enumerate() {
        src[16 * i..16 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
    assert!(round_trip(&src).0);
}

#[test]
fn special_values() {
    let specials: [u16; 16] = [
        0x0000, 0x8000, // ±0
        0x0001, 0x8001, 0x007f, 0x807f, // subnormals
        0x0080, 0x0081, // smallest normals
        0x7f80, 0xff80, // ±inf
        0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x7fff, // NaNs
        0x7f7f, // largest finite
    ];
    let mut r = Rng(21);
    let v: Vec<u16> = (0..20_000).map(|_| specials[r.below(16)]).collect();
    round_trip(&from_u16s(&v));
    round_trip(&from_u16s(&specials));
    let mut src = gaussian(40_000, 1.0, 4);
    for (i, s) in specials.iter().cycle().take(4000).enumerate() {
        src[20 * i..20 * i + 2].copy_from_slice(&s.to_le_bytes());
    }
    assert!(round_trip(&src).0);
}

#[test]
fn small_and_odd_lengths() {
    for n in (0..=70).chain([99, 101, 255, 257, 1001, 4095, 4097, 10_007]) {
        let src = gaussian(n, 0.02, 1000 + n as u64);
        let (coded, size) = round_trip(&src);
        assert!(!coded || size < src.len());
        if n < (HEADER_BYTES + 4 * STREAM_PAD) / 2 {
            assert!(!coded, "{n} values coded");
        }
    }
    // Length 0: the always-coded block is the header plus empty padded streams.
    let mut out = Vec::new();
    assert!(!encode_bf16(&[], &mut out));
    encode_bf16_always(&[], &mut out);
    assert_eq!(out.len(), HEADER_BYTES + STREAMS * STREAM_PAD);
    assert_eq!(
        decode(&mut Decoder::new(), &out, 0).unwrap(),
        Vec::<u8>::new()
    );
}

#[test]
#[should_panic(expected = "odd source length")]
fn odd_source_length_panics() {
    encode_bf16(&[1, 2, 3], &mut Vec::new());
}

#[test]
fn length_limit_on_skewed_counts() {
    // Exponent 100 + k appears 2^(20-k) times for k = 0..=20, once for k = 21..30: plain
    // Huffman would give codes of up to 30 bits.
    let mut v = Vec::new();
    let mut r = Rng(9);
    for k in 0..30u16 {
        let count = 1usize << 20usize.saturating_sub(k as usize);
        for _ in 0..count {
            v.push(((100 + k) << 7) | (r.next() as u16 & 0x807f));
        }
    }
    for i in (1..v.len()).rev() {
        v.swap(i, r.below(i + 1));
    }
    let src = from_u16s(&v);
    let (coded, _) = round_trip(&src);
    assert!(coded);
    let mut enc = Vec::new();
    encode_bf16(&src, &mut enc);
    let lens: Vec<u8> = enc[LENS_AT..HEADER_BYTES]
        .iter()
        .flat_map(|&b| [b & 15, b >> 4])
        .collect();
    assert_eq!(lens.iter().filter(|&&l| l > 0).count(), 30);
    assert_eq!(*lens.iter().max().unwrap() as usize, MAX_CODE_LEN);
    // Fibonacci counts: the classic worst case for code length.
    let (mut a, mut b) = (1usize, 1usize);
    let mut v = Vec::new();
    for k in 0..27u16 {
        for _ in 0..a {
            v.push((k + 1) << 7);
        }
        (a, b) = (b, a + b);
    }
    let (coded, _) = round_trip(&from_u16s(&v));
    assert!(coded);
}

#[test]
fn all_256_exponents_equally_often() {
    // Flat histogram: every code 8 bits, so coding cannot pay.
    let v: Vec<u16> = (0..1 << 16).map(|i: u32| ((i % 256) << 7) as u16).collect();
    let (coded, size) = round_trip(&from_u16s(&v));
    assert!(!coded);
    assert!(size > 2 << 16);
}

#[test]
fn entropy() {
    assert_eq!(exponent_entropy_bits(&[]), 0.0);
    assert_eq!(
        exponent_entropy_bits(&[0x80, 0x3f, 0x80, 0x3f, 0x80, 0x3f]),
        0.0
    );
    let h = exponent_entropy_bits(&from_u16s(&[0x3f80, 0x4000, 0x3f80, 0x4000]));
    assert!((h - 1.0).abs() < 1e-12, "{h}");
    let h = exponent_entropy_bits(&random_bytes(1 << 20, 4));
    assert!(h > 7.99, "{h}");
    // A trailing odd byte is ignored.
    assert_eq!(exponent_entropy_bits(&[0x80, 0x3f, 0x00]), 0.0);
}

#[test]
fn one_decoder_many_blocks() {
    // Different codes, the same code twice in a row, and sizes up and down: the table cache
    // and the scratch must follow.
    let blocks = [
        gaussian(30_000, 0.02, 1),
        gaussian(30_000, 0.02, 1),
        gaussian(1000, 1.0, 2),
        vec![0u8; 20_000],
        gaussian(70_001, 1e-3, 3),
        gaussian(30_000, 0.02, 1),
    ];
    let mut dec = Decoder::new();
    for src in &blocks {
        let mut enc = Vec::new();
        encode_bf16_always(src, &mut enc);
        assert_eq!(&decode(&mut dec, &enc, src.len()).unwrap(), src);
    }
}

#[test]
fn wrong_destination_length() {
    let src = gaussian(10_001, 0.02, 6);
    let mut enc = Vec::new();
    assert!(encode_bf16(&src, &mut enc));
    let mut dec = Decoder::new();
    for len in [
        0,
        2,
        src.len() - 2,
        src.len() - 1,
        src.len() + 1,
        src.len() + 2,
    ] {
        let e = decode(&mut dec, &enc, len).unwrap_err();
        assert!(
            e.to_string().contains("10001 values") && e.to_string().contains("destination"),
            "{e}"
        );
    }
    assert_eq!(decode(&mut dec, &enc, src.len()).unwrap(), src);
}

#[test]
fn every_truncation_fails() {
    let src = gaussian(3001, 0.02, 12);
    let mut enc = Vec::new();
    assert!(encode_bf16(&src, &mut enc));
    let mut dec = Decoder::new();
    for cut in 0..enc.len() {
        let e = decode(&mut dec, &enc[..cut], src.len()).unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    // A byte too many fails as well.
    let mut longer = enc.clone();
    longer.push(0);
    assert!(decode(&mut dec, &longer, src.len()).is_err());
    assert_eq!(decode(&mut dec, &enc, src.len()).unwrap(), src);
}

/// Byte offsets of a coded block's regions.
struct Layout {
    sm: std::ops::Range<usize>,
    streams: Vec<std::ops::Range<usize>>,
}

fn layout(enc: &[u8]) -> Layout {
    let n = u32::from_le_bytes(enc[4..8].try_into().unwrap()) as usize;
    let mut at = HEADER_BYTES + n;
    let mut streams = Vec::new();
    for k in 0..STREAMS {
        let l = u32::from_le_bytes(enc[12 + 4 * k..16 + 4 * k].try_into().unwrap()) as usize;
        streams.push(at..at + l);
        at += l;
    }
    Layout {
        sm: HEADER_BYTES..HEADER_BYTES + n,
        streams,
    }
}

#[test]
fn single_byte_corruptions() {
    let src = gaussian(20_001, 0.02, 13);
    let n = src.len() / 2;
    let mut enc = Vec::new();
    assert!(encode_bf16(&src, &mut enc));
    let lay = layout(&enc);
    let mut dec = Decoder::new();
    let mut r = Rng(77);
    let q = n.div_ceil(STREAMS);
    // (region, trials, errors)
    let mut tally = [
        ("header", 0, 0),
        ("code lengths", 0, 0),
        ("sm", 0, 0),
        ("streams", 0, 0),
    ];
    for trial in 0..6000 {
        let pos = match trial % 6 {
            0 => r.below(LENS_AT),
            1 => LENS_AT + r.below(128),
            2 => lay.sm.start + r.below(n),
            _ => lay.streams[0].start + r.below(enc.len() - lay.streams[0].start),
        };
        let region = match pos {
            p if p < LENS_AT => 0,
            p if p < HEADER_BYTES => 1,
            p if lay.sm.contains(&p) => 2,
            _ => 3,
        };
        let mut bad = enc.clone();
        bad[pos] ^= 1 + r.below(255) as u8;
        tally[region].1 += 1;
        match decode(&mut dec, &bad, src.len()) {
            Err(e) => {
                assert!(region != 2, "sm corruption at {pos} rejected: {e}");
                assert!(!e.to_string().is_empty());
                tally[region].2 += 1;
            }
            Ok(out) => {
                let diff: Vec<usize> = (0..n)
                    .filter(|&i| out[2 * i..2 * i + 2] != src[2 * i..2 * i + 2])
                    .collect();
                match region {
                    2 => {
                        // Exactly the value whose sm byte changed, and only its sm bits.
                        let i = pos - lay.sm.start;
                        assert_eq!(diff, vec![i]);
                        let (a, b) = (
                            u16::from_le_bytes([out[2 * i], out[2 * i + 1]]),
                            u16::from_le_bytes([src[2 * i], src[2 * i + 1]]),
                        );
                        assert_eq!(a & 0x7f80, b & 0x7f80, "exponent changed");
                    }
                    0 => panic!("header corruption at byte {pos} not detected"),
                    _ => {
                        // Only exponent bits may differ; a stream's corruption stays in
                        // that stream's values.
                        for &i in &diff {
                            let (a, b) = (
                                u16::from_le_bytes([out[2 * i], out[2 * i + 1]]),
                                u16::from_le_bytes([src[2 * i], src[2 * i + 1]]),
                            );
                            assert_eq!(a & 0x807f, b & 0x807f, "sm bits of value {i} changed");
                            if region == 3 {
                                let k = lay.streams.iter().position(|s| s.contains(&pos)).unwrap();
                                assert_eq!(i / q, k, "value {i} outside stream {k}");
                            }
                        }
                    }
                }
            }
        }
    }
    for (name, trials, errors) in tally {
        eprintln!("{name}: {errors} of {trials} corruptions detected");
    }
    assert_eq!(
        tally[0].2, tally[0].1,
        "every header corruption is detected"
    );
    // The checksum catches the rest (an undetected one would need both 64-bit sums to
    // match by chance).
    assert_eq!(
        tally[1].2, tally[1].1,
        "every code-length corruption is detected"
    );
    assert_eq!(
        tally[3].2, tally[3].1,
        "every stream corruption is detected"
    );
}

#[test]
fn random_garbage_never_panics() {
    let mut dec = Decoder::new();
    let mut r = Rng(31);
    let src = gaussian(2000, 0.02, 14);
    let mut enc = Vec::new();
    assert!(encode_bf16(&src, &mut enc));
    for trial in 0..3000 {
        let mut bad = match trial % 3 {
            // Pure garbage with the magic.
            0 => random_bytes(r.below(600), trial),
            // A valid block with a run of garbage over it.
            _ => {
                let mut b = enc.clone();
                let at = r.below(b.len());
                let len = 1 + r.below(64);
                for x in b.iter_mut().skip(at).take(len) {
                    *x = r.next() as u8;
                }
                b
            }
        };
        if bad.len() >= 4 {
            bad[..4].copy_from_slice(&MAGIC);
        }
        let len = if r.below(2) == 0 {
            src.len()
        } else {
            2 * r.below(3000)
        };
        let _ = decode(&mut dec, &bad, len);
    }
    // Lengths that add up, with random code lengths and streams: exercises the decoder
    // past the header.
    for trial in 0..3000u64 {
        let n = r.below(300);
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&(n as u32).to_le_bytes());
        b.extend_from_slice(&(STREAMS as u32).to_le_bytes());
        let lens: Vec<usize> = (0..STREAMS).map(|_| STREAM_PAD + r.below(80)).collect();
        for &l in &lens {
            b.extend_from_slice(&(l as u32).to_le_bytes());
        }
        // Code lengths 0..=12 mostly, sparse, so the Kraft sum often stays ≤ 1.
        for _ in 0..128 {
            let lo = if r.below(8) == 0 { 1 + r.below(12) } else { 0 };
            let hi = if r.below(8) == 0 { 1 + r.below(12) } else { 0 };
            b.push((lo | hi << 4) as u8);
        }
        b.extend(random_bytes(n + lens.iter().sum::<usize>(), 500 + trial));
        let _ = decode(&mut dec, &b, 2 * n);
    }
}

#[test]
fn error_messages() {
    let src = gaussian(5000, 0.02, 15);
    let mut enc = Vec::new();
    assert!(encode_bf16(&src, &mut enc));
    let mut dec = Decoder::new();
    let msg = |dec: &mut Decoder, b: &[u8]| decode(dec, b, src.len()).unwrap_err().to_string();
    let lens_at = LENS_AT;

    let mut b = enc.clone();
    b[0] = b'X';
    assert!(msg(&mut dec, &b).contains("magic"));

    let m = msg(&mut dec, &enc[..100]);
    assert!(m.contains("shorter than the 172-byte header"), "{m}");

    let mut b = enc.clone();
    b[8] = 8;
    assert!(msg(&mut dec, &b).contains("8 streams"));

    let mut b = enc.clone();
    b[12..16].copy_from_slice(&3u32.to_le_bytes());
    let m = msg(&mut dec, &b);
    assert!(m.contains("stream 0") && m.contains("padding"), "{m}");

    let mut b = enc.clone();
    b[12] = b[12].wrapping_add(1);
    assert!(msg(&mut dec, &b).contains("do not add up"));

    // Stream 0 one byte longer, stream 1 one byte shorter: the sum holds, the ends do not.
    let mut b = enc.clone();
    let l0 = u32::from_le_bytes(b[12..16].try_into().unwrap());
    let l1 = u32::from_le_bytes(b[16..20].try_into().unwrap());
    b[12..16].copy_from_slice(&(l0 + 1).to_le_bytes());
    b[16..20].copy_from_slice(&(l1 - 1).to_le_bytes());
    let m = msg(&mut dec, &b);
    assert!(
        m.starts_with("stream 0:") || m.starts_with("stream 1:"),
        "{m}"
    );

    // A code length of 13.
    let mut b = enc.clone();
    let i = (0..128).find(|&i| b[lens_at + i] & 15 == 0).unwrap();
    b[lens_at + i] |= 13;
    let m = msg(&mut dec, &b);
    assert!(
        m.contains(&format!("exponent {}", 2 * i)) && m.contains("over 12"),
        "{m}"
    );

    // Kraft sum over 1.
    let mut b = enc.clone();
    b[lens_at..lens_at + 128].fill(0x11);
    assert!(msg(&mut dec, &b).contains("Kraft"));

    // No code at all.
    let mut b = enc.clone();
    b[lens_at..lens_at + 128].fill(0);
    assert!(msg(&mut dec, &b).contains("no exponent has a code"));

    // A single-exponent block has the one code `0`: a 1 bit in its stream matches nothing.
    let zeros = vec![0u8; 8000];
    let mut z = Vec::new();
    assert!(encode_bf16(&zeros, &mut z));
    let lay = layout(&z);
    let at = lay.streams[2].start + 100;
    z[at] = 0x10;
    let m = decode(&mut dec, &z, zeros.len()).unwrap_err().to_string();
    assert_eq!(
        m,
        format!(
            "stream 2: no code matches the bits at byte offset {at} (bit 3) for value {}",
            2000 + 803
        )
    );

    // Non-zero padding.
    let mut b = enc.clone();
    let lay = layout(&b);
    let last = lay.streams[3].end - 1;
    b[last] = 1;
    let m = msg(&mut dec, &b);
    assert_eq!(
        m,
        format!("stream 3: non-zero padding at byte offset {last}")
    );

    // The error type: Display, Error, Clone, PartialEq.
    let e = decode(&mut dec, &enc[..10], src.len()).unwrap_err();
    let boxed: Box<dyn std::error::Error> = Box::new(e.clone());
    assert_eq!(boxed.to_string(), e.to_string());
    assert_eq!(e, e.clone());
    assert_eq!(e.message(), e.to_string());
    assert!(format!("{e:?}").contains("CodecError"));
}

#[test]
fn decoder_is_reusable_after_errors() {
    let src = gaussian(9000, 0.5, 16);
    let mut enc = Vec::new();
    assert!(codec::encode_bf16(&src, &mut enc));
    let mut dec = Decoder::new();
    let mut b = enc.clone();
    let lens_at = LENS_AT;
    b[lens_at..lens_at + 128].fill(0x11);
    assert!(decode(&mut dec, &b, src.len()).is_err());
    let mut b = enc.clone();
    let last = b.len() - 20;
    b[last] ^= 0xff;
    let _ = decode(&mut dec, &b, src.len());
    assert_eq!(decode(&mut dec, &enc, src.len()).unwrap(), src);
}
