//! The AVX2 path. `dot` keeps its 16 f64 accumulators in four 4×f64 registers, register r
//! lane j = acc\[4r + j\] (MODEL.md §5.2), and ends with the scalar reduction tree. Compiled
//! with `avx2` only (never `fma`), so the compiler cannot emit fused multiply-adds; a test
//! checks the disassembly.
//!
//! Every function is `unsafe`: callers guarantee the CPU supports AVX2 (`Kernels` checks).

use crate::mxfp4::{E2M1_SCALED_HI32, GROUP};
use crate::num::{bf16_to_f32, reduce16, DOT_LANES};
use crate::simd::{simd_entry_points, Simd};
use std::arch::x86_64::*;

/// The AVX2 lane set: 4 × f64 per register.
pub(crate) struct Avx2;

impl Simd for Avx2 {
    type V = __m256d;
    type M = __m256d;
    const N: usize = 4;

    #[inline(always)]
    unsafe fn splat(x: f64) -> __m256d {
        _mm256_set1_pd(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> __m256d {
        _mm256_loadu_pd(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f64, v: __m256d) {
        _mm256_storeu_pd(p, v)
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> __m256d {
        _mm256_cvtps_pd(_mm_loadu_ps(p))
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> __m256d {
        let v = _mm_loadl_epi64(p as *const __m128i);
        _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), v)))
    }
    #[inline(always)]
    unsafe fn store_f32(p: *mut f32, v: __m256d) {
        // vcvtpd2ps rounds with MXCSR (round to nearest even; FTZ is never set by k3).
        _mm_storeu_ps(p, _mm256_cvtpd_ps(v))
    }
    #[inline(always)]
    unsafe fn add(a: __m256d, b: __m256d) -> __m256d {
        _mm256_add_pd(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256d, b: __m256d) -> __m256d {
        _mm256_sub_pd(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256d, b: __m256d) -> __m256d {
        _mm256_mul_pd(a, b)
    }
    #[inline(always)]
    unsafe fn div(a: __m256d, b: __m256d) -> __m256d {
        _mm256_div_pd(a, b)
    }
    #[inline(always)]
    unsafe fn floor(a: __m256d) -> __m256d {
        _mm256_floor_pd(a)
    }
    #[inline(always)]
    unsafe fn neg(a: __m256d) -> __m256d {
        _mm256_xor_pd(a, _mm256_set1_pd(-0.0))
    }
    #[inline(always)]
    unsafe fn abs(a: __m256d) -> __m256d {
        _mm256_andnot_pd(_mm256_set1_pd(-0.0), a)
    }
    #[inline(always)]
    unsafe fn or_sign(t: __m256d, x: __m256d) -> __m256d {
        _mm256_or_pd(t, _mm256_and_pd(x, _mm256_set1_pd(-0.0)))
    }
    #[inline(always)]
    unsafe fn gt(a: __m256d, b: __m256d) -> __m256d {
        _mm256_cmp_pd::<_CMP_GT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn lt(a: __m256d, b: __m256d) -> __m256d {
        _mm256_cmp_pd::<_CMP_LT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn ge(a: __m256d, b: __m256d) -> __m256d {
        _mm256_cmp_pd::<_CMP_GE_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn is_nan(a: __m256d) -> __m256d {
        _mm256_cmp_pd::<_CMP_UNORD_Q>(a, a)
    }
    #[inline(always)]
    unsafe fn or_m(a: __m256d, b: __m256d) -> __m256d {
        _mm256_or_pd(a, b)
    }
    #[inline(always)]
    unsafe fn select(m: __m256d, a: __m256d, b: __m256d) -> __m256d {
        _mm256_blendv_pd(b, a, m)
    }
    #[inline(always)]
    unsafe fn pow2i(k: __m256d) -> __m256d {
        // k + (2^52 + 1023) is exact and puts k + 1023 in the low mantissa bits; shifting the
        // pattern left by 52 leaves exactly (k + 1023) << 52.
        let biased = _mm256_add_pd(k, _mm256_set1_pd(4503599627371519.0));
        _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_castpd_si256(biased)))
    }
    #[inline(always)]
    unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
        dot_f32_impl(a, b)
    }
}

/// Four accumulator registers: register r lane j holds acc\[4r + j\].
type Acc = [__m256d; 4];

#[inline(always)]
unsafe fn acc_zero() -> Acc {
    [_mm256_setzero_pd(); 4]
}

/// Stores the registers into the 16 canonical lanes (register r lane j → acc\[4r + j\]).
#[inline(always)]
unsafe fn acc_lanes(a: &Acc) -> [f64; DOT_LANES] {
    let mut l = [0.0f64; DOT_LANES];
    for (r, v) in a.iter().enumerate() {
        _mm256_storeu_pd(l.as_mut_ptr().add(4 * r), *v);
    }
    l
}

/// 8 BF16 values widened to two f64 registers (elements 0–3, 4–7).
#[inline(always)]
unsafe fn bf16x8(p: *const u16) -> (__m256d, __m256d) {
    let v = _mm_loadu_si128(p as *const __m128i);
    let z = _mm_setzero_si128();
    (
        _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(z, v))),
        _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(z, v))),
    )
}

#[inline(always)]
unsafe fn f32x4(p: *const f32) -> __m256d {
    _mm256_cvtps_pd(_mm_loadu_ps(p))
}

#[inline(always)]
unsafe fn dot_f32_impl(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = acc_zero();
    let mut i = 0;
    while i + DOT_LANES <= n {
        for (r, ar) in acc.iter_mut().enumerate() {
            let o = i + 4 * r;
            *ar = _mm256_add_pd(*ar, _mm256_mul_pd(f32x4(pa.add(o)), f32x4(pb.add(o))));
        }
        i += DOT_LANES;
    }
    let mut l = acc_lanes(&acc);
    for (j, (&x, &y)) in a[i..].iter().zip(&b[i..]).enumerate() {
        l[j] += x as f64 * y as f64;
    }
    reduce16(&l)
}

#[inline(always)]
unsafe fn dot_bf16_impl(w: &[u16], x: &[f32]) -> f64 {
    let n = w.len();
    let (pw, px) = (w.as_ptr(), x.as_ptr());
    let mut acc = acc_zero();
    let mut i = 0;
    while i + DOT_LANES <= n {
        let (w0, w1) = bf16x8(pw.add(i));
        let (w2, w3) = bf16x8(pw.add(i + 8));
        acc[0] = _mm256_add_pd(acc[0], _mm256_mul_pd(w0, f32x4(px.add(i))));
        acc[1] = _mm256_add_pd(acc[1], _mm256_mul_pd(w1, f32x4(px.add(i + 4))));
        acc[2] = _mm256_add_pd(acc[2], _mm256_mul_pd(w2, f32x4(px.add(i + 8))));
        acc[3] = _mm256_add_pd(acc[3], _mm256_mul_pd(w3, f32x4(px.add(i + 12))));
        i += DOT_LANES;
    }
    let mut l = acc_lanes(&acc);
    for (j, (&a, &b)) in w[i..].iter().zip(&x[i..]).enumerate() {
        l[j] += bf16_to_f32(a) as f64 * b as f64;
    }
    reduce16(&l)
}

/// Prefetch distance of the BF16 matrix-vector product, in elements (1 KiB per stream).
const PREFETCH: usize = 512;

/// `dot` of two BF16 rows with one vector x given already widened to f64, sharing the
/// loads of x. Two rows keep 8 accumulator registers live, leaving room for the operands in
/// the 16 ymm registers. Widening x once per block leaves one conversion per 4 weights.
#[inline(always)]
unsafe fn dot2_bf16(w0: &[u16], w1: &[u16], x: &[f64]) -> (f64, f64) {
    let n = x.len();
    let (p0, p1, px) = (w0.as_ptr(), w1.as_ptr(), x.as_ptr());
    let mut a = acc_zero();
    let mut b = acc_zero();
    let mut i = 0;
    while i + DOT_LANES <= n {
        // Software prefetch PREFETCH elements ahead in both weight streams; near the end of the
        // rows it runs on into the next pair (rows r+2, r+3 follow contiguously), so a new
        // pair starts with its first lines already requested. Prefetching never faults, even
        // past the end of the matrix.
        let ahead = i + PREFETCH + if i + PREFETCH >= n { n } else { 0 };
        _mm_prefetch::<_MM_HINT_T0>(p0.wrapping_add(ahead) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p1.wrapping_add(ahead) as *const i8);
        let x0 = _mm256_loadu_pd(px.add(i));
        let x1 = _mm256_loadu_pd(px.add(i + 4));
        let x2 = _mm256_loadu_pd(px.add(i + 8));
        let x3 = _mm256_loadu_pd(px.add(i + 12));
        let (u0, u1) = bf16x8(p0.add(i));
        let (u2, u3) = bf16x8(p0.add(i + 8));
        a[0] = _mm256_add_pd(a[0], _mm256_mul_pd(u0, x0));
        a[1] = _mm256_add_pd(a[1], _mm256_mul_pd(u1, x1));
        a[2] = _mm256_add_pd(a[2], _mm256_mul_pd(u2, x2));
        a[3] = _mm256_add_pd(a[3], _mm256_mul_pd(u3, x3));
        let (v0, v1) = bf16x8(p1.add(i));
        let (v2, v3) = bf16x8(p1.add(i + 8));
        b[0] = _mm256_add_pd(b[0], _mm256_mul_pd(v0, x0));
        b[1] = _mm256_add_pd(b[1], _mm256_mul_pd(v1, x1));
        b[2] = _mm256_add_pd(b[2], _mm256_mul_pd(v2, x2));
        b[3] = _mm256_add_pd(b[3], _mm256_mul_pd(v3, x3));
        i += DOT_LANES;
    }
    let mut la = acc_lanes(&a);
    let mut lb = acc_lanes(&b);
    for j in 0..n - i {
        let xv = x[i + j];
        la[j] += bf16_to_f32(w0[i + j]) as f64 * xv;
        lb[j] += bf16_to_f32(w1[i + j]) as f64 * xv;
    }
    (reduce16(&la), reduce16(&lb))
}

/// x widened exactly to f64.
#[inline(always)]
unsafe fn widen_f32(x: &[f32]) -> Vec<f64> {
    let n = x.len();
    let mut out = vec![0.0f64; n];
    let mut i = 0;
    while i + 4 <= n {
        _mm256_storeu_pd(out.as_mut_ptr().add(i), f32x4(x.as_ptr().add(i)));
        i += 4;
    }
    for j in i..n {
        out[j] = x[j] as f64;
    }
    out
}

/// `dot` of a row of f64 values (exactly widened weights) with an fp32 vector.
#[inline(always)]
unsafe fn dot_f64_f32(w: &[f64], x: &[f32]) -> f64 {
    let n = x.len();
    let (pw, px) = (w.as_ptr(), x.as_ptr());
    let mut acc = acc_zero();
    let mut i = 0;
    while i + DOT_LANES <= n {
        for (r, ar) in acc.iter_mut().enumerate() {
            let o = i + 4 * r;
            *ar = _mm256_add_pd(
                *ar,
                _mm256_mul_pd(_mm256_loadu_pd(pw.add(o)), f32x4(px.add(o))),
            );
        }
        i += DOT_LANES;
    }
    let mut l = acc_lanes(&acc);
    for j in 0..n - i {
        l[j] += w[i + j] * x[i + j] as f64;
    }
    reduce16(&l)
}

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
    dot_f32_impl(a, b)
}

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dot_bf16(w: &[u16], x: &[f32]) -> f64 {
    dot_bf16_impl(w, x)
}

/// Matrix block: w \[nr, cols\] BF16, x \[T, cols\] → out \[T, nr\]. One position: rows in pairs
/// sharing x. Several positions: each row is widened once to f64 and reused for every
/// position while it sits in cache.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matmul_bf16(w: &[u16], cols: usize, x: &[f32], out: &mut [f32]) {
    let nr = w.len() / cols;
    let t_n = x.len() / cols;
    if t_n == 1 {
        let x64 = widen_f32(x);
        let mut r = 0;
        while r + 2 <= nr {
            let (a, b) = dot2_bf16(
                &w[r * cols..(r + 1) * cols],
                &w[(r + 1) * cols..(r + 2) * cols],
                &x64,
            );
            out[r] = a as f32;
            out[r + 1] = b as f32;
            r += 2;
        }
        if r < nr {
            out[r] = dot_bf16_impl(&w[r * cols..], x) as f32;
        }
        return;
    }
    let mut row = vec![0.0f64; cols];
    for (r, wr) in w.chunks_exact(cols).enumerate() {
        widen_row_bf16(wr, &mut row);
        for (t, xt) in x.chunks_exact(cols).enumerate() {
            out[t * nr + r] = dot_f64_f32(&row, xt) as f32;
        }
    }
}

#[inline(always)]
unsafe fn widen_row_bf16(w: &[u16], out: &mut [f64]) {
    let n = w.len();
    let mut i = 0;
    while i + 8 <= n {
        let (a, b) = bf16x8(w.as_ptr().add(i));
        _mm256_storeu_pd(out.as_mut_ptr().add(i), a);
        _mm256_storeu_pd(out.as_mut_ptr().add(i + 4), b);
        i += 8;
    }
    for j in i..n {
        out[j] = bf16_to_f32(w[j]) as f64;
    }
}

/// Matrix block with fp32 weights; layout as [`matmul_bf16`].
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matmul_f32(w: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    let nr = w.len() / cols;
    for (r, wr) in w.chunks_exact(cols).enumerate() {
        for (t, xt) in x.chunks_exact(cols).enumerate() {
            out[t * nr + r] = dot_f32_impl(wr, xt) as f32;
        }
    }
}

/// Byte-shuffle controls that move nibble-code bytes k0 … k0+3 of a 16-byte column vector to
/// byte 4 of each 64-bit lane (bits 32–39), zeroing every other byte. Bytes of the 256-bit
/// shuffle are taken from the same 128-bit half, which holds a broadcast copy.
#[inline(always)]
unsafe fn nib_ctrl(k0: i8) -> __m256i {
    let z = -128i8; // 0x80: zero the byte
    _mm256_setr_epi8(
        z,
        z,
        z,
        z,
        k0,
        z,
        z,
        z,
        z,
        z,
        z,
        z,
        k0 + 1,
        z,
        z,
        z, //
        z,
        z,
        z,
        z,
        k0 + 2,
        z,
        z,
        z,
        z,
        z,
        z,
        z,
        k0 + 3,
        z,
        z,
        z,
    )
}

/// Decodes 4 columns to exact f64 values: `codes` holds each column's nibble code at bits
/// 32–35 of its 64-bit lane; `table` is the scale's row of `E2M1_SCALED_HI32` (high words of
/// the 8 magnitudes; entry 0 is 0, which also fills the low words).
#[inline(always)]
unsafe fn decode4(codes: __m256i, table: __m256i) -> __m256d {
    let mag = _mm256_permutevar8x32_epi32(table, codes);
    let sign = _mm256_slli_epi64::<28>(_mm256_and_si256(codes, _mm256_set1_epi64x(8 << 32)));
    _mm256_castsi256_pd(_mm256_xor_si256(mag, sign))
}

/// The 32 nibble codes of one group (16 packed bytes) as two byte vectors in column order:
/// columns 0–15 and 16–31, each broadcast to both 128-bit halves.
#[inline(always)]
unsafe fn group_codes(p: *const u8) -> (__m256i, __m256i) {
    let v = _mm_loadu_si128(p as *const __m128i);
    let m = _mm_set1_epi8(15);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m);
    (
        _mm256_broadcastsi128_si256(_mm_unpacklo_epi8(lo, hi)),
        _mm256_broadcastsi128_si256(_mm_unpackhi_epi8(lo, hi)),
    )
}

/// `dot` of one MXFP4 row with x: column c's exact product goes into lane c mod 16.
#[inline(always)]
unsafe fn dot_mxfp4_row(packed: &[u8], scales: &[u8], x: &[f64], ctrl: &[__m256i; 4]) -> f64 {
    let mut acc = acc_zero();
    let px = x.as_ptr();
    for (g, &s) in scales.iter().enumerate() {
        let table = _mm256_loadu_si256(E2M1_SCALED_HI32[s as usize].as_ptr() as *const __m256i);
        let (c0, c1) = group_codes(packed.as_ptr().add(g * GROUP / 2));
        let xg = px.add(g * GROUP);
        for (half, codes) in [c0, c1].into_iter().enumerate() {
            let xh = xg.add(16 * half);
            for (r, ar) in acc.iter_mut().enumerate() {
                let w = decode4(_mm256_shuffle_epi8(codes, ctrl[r]), table);
                *ar = _mm256_add_pd(*ar, _mm256_mul_pd(w, _mm256_loadu_pd(xh.add(4 * r))));
            }
        }
    }
    reduce16(&acc_lanes(&acc))
}

/// Decodes one MXFP4 row to exact f64 values (one row at a time, never a whole matrix).
#[inline(always)]
unsafe fn decode_row_mxfp4(packed: &[u8], scales: &[u8], ctrl: &[__m256i; 4], out: &mut [f64]) {
    for (g, &s) in scales.iter().enumerate() {
        let table = _mm256_loadu_si256(E2M1_SCALED_HI32[s as usize].as_ptr() as *const __m256i);
        let (c0, c1) = group_codes(packed.as_ptr().add(g * GROUP / 2));
        for (half, codes) in [c0, c1].into_iter().enumerate() {
            let o = out.as_mut_ptr().add(g * GROUP + 16 * half);
            for (r, c) in ctrl.iter().enumerate() {
                _mm256_storeu_pd(o.add(4 * r), decode4(_mm256_shuffle_epi8(codes, *c), table));
            }
        }
    }
}

/// MXFP4 block: packed \[nr, cols/2\], scales \[nr, cols/32\], x \[T, cols\] → out \[T, nr\].
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matmul_mxfp4(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let (pb, sb) = (cols / 2, cols / GROUP);
    let nr = packed.len() / pb;
    let t_n = x.len() / cols;
    let ctrl = [nib_ctrl(0), nib_ctrl(4), nib_ctrl(8), nib_ctrl(12)];
    if t_n == 1 {
        let x64 = widen_f32(x);
        for r in 0..nr {
            let v = dot_mxfp4_row(
                &packed[r * pb..(r + 1) * pb],
                &scales[r * sb..(r + 1) * sb],
                &x64,
                &ctrl,
            );
            out[r] = v as f32;
        }
        return;
    }
    let mut row = vec![0.0f64; cols];
    for r in 0..nr {
        decode_row_mxfp4(
            &packed[r * pb..(r + 1) * pb],
            &scales[r * sb..(r + 1) * sb],
            &ctrl,
            &mut row,
        );
        for (t, xt) in x.chunks_exact(cols).enumerate() {
            out[t * nr + r] = dot_f64_f32(&row, xt) as f32;
        }
    }
}

/// Exact BF16 → fp32 widening as an integer shift (no float conversion, so even NaN payloads
/// keep their bits, like the scalar `bits << 16`).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn widen_bf16(w: &[u16], y: &mut [f32]) {
    let n = y.len();
    let z = _mm_setzero_si128();
    let mut i = 0;
    while i + 8 <= n {
        let v = _mm_loadu_si128(w.as_ptr().add(i) as *const __m128i);
        let o = y.as_mut_ptr().add(i) as *mut __m128i;
        _mm_storeu_si128(o, _mm_unpacklo_epi16(z, v));
        _mm_storeu_si128(o.add(1), _mm_unpackhi_epi16(z, v));
        i += 8;
    }
    for j in i..n {
        y[j] = bf16_to_f32(w[j]);
    }
}

simd_entry_points!("avx2", Avx2);
