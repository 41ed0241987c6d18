//! The AVX2 path. `dot` keeps its 16 f64 accumulators in four 4×f64 registers, register r
//! lane j = acc\[4r + j\] (MODEL.md §5.2), and ends with the scalar reduction tree. The MXFP4
//! products hold the same 16 accumulators in another fixed order (`MX_PERM`, which their
//! decode produces) and restore the canonical order before the tree: every accumulator still
//! receives the same exact products in the same order, so the bits are those of §5.2.
//! Compiled with `avx2` only (never `fma`), so the compiler cannot emit fused multiply-adds;
//! a test checks the disassembly.
//!
//! Matrix-vector products (decode) take x widened once per call; products over several
//! positions (prefill) are tiled over the inner dimension (see `matmul_tiled`).
//!
//! Every function is `unsafe`: callers guarantee the CPU supports AVX2 (`Kernels` checks).

use crate::mxfp4::{E2M1_SCALED_HI32_SIGNX, GROUP};
use crate::num::{bf16_to_f32, reduce16, DOT_LANES};
use crate::simd::{simd_entry_points, Simd};
use std::arch::x86_64::*;

mod tiled;
pub(crate) use tiled::{matmul_bf16, matmul_mxfp4};

/// The AVX2 lane set: 4 × f64 per register.
pub(crate) struct Avx2;

impl Simd for Avx2 {
    type V = __m256d;
    type M = __m256d;
    const N: usize = 4;

    #[inline(always)]
    unsafe fn splat(x: f64) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_set1_pd(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_loadu_pd(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f64, v: __m256d) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_storeu_pd(p, v) }
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_cvtps_pd(_mm_loadu_ps(p)) }
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let v = _mm_loadl_epi64(p as *const __m128i);
            _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), v)))
        }
    }
    #[inline(always)]
    unsafe fn store_f32(p: *mut f32, v: __m256d) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            // vcvtpd2ps rounds with MXCSR (round to nearest even; FTZ is never set by k3).
            _mm_storeu_ps(p, _mm256_cvtpd_ps(v))
        }
    }
    #[inline(always)]
    unsafe fn add(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_add_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_sub_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_mul_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_div_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn floor(a: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_floor_pd(a) }
    }
    #[inline(always)]
    unsafe fn neg(a: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_xor_pd(a, _mm256_set1_pd(-0.0)) }
    }
    #[inline(always)]
    unsafe fn abs(a: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_andnot_pd(_mm256_set1_pd(-0.0), a) }
    }
    #[inline(always)]
    unsafe fn or_sign(t: __m256d, x: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_or_pd(t, _mm256_and_pd(x, _mm256_set1_pd(-0.0))) }
    }
    #[inline(always)]
    unsafe fn gt(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_cmp_pd::<_CMP_GT_OQ>(a, b) }
    }
    #[inline(always)]
    unsafe fn lt(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_cmp_pd::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    unsafe fn ge(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_cmp_pd::<_CMP_GE_OQ>(a, b) }
    }
    #[inline(always)]
    unsafe fn is_nan(a: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_cmp_pd::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    unsafe fn or_m(a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_or_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn select(m: __m256d, a: __m256d, b: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { _mm256_blendv_pd(b, a, m) }
    }
    #[inline(always)]
    unsafe fn pow2i(k: __m256d) -> __m256d {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            // k + (2^52 + 1023) is exact and puts k + 1023 in the low mantissa bits; shifting the
            // pattern left by 52 leaves exactly (k + 1023) << 52.
            let biased = _mm256_add_pd(k, _mm256_set1_pd(4503599627371519.0));
            _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_castpd_si256(biased)))
        }
    }
    #[inline(always)]
    unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { dot_f32_impl(a, b) }
    }
}

/// Four accumulator registers: register r lane j holds acc\[4r + j\].
type Acc = [__m256d; 4];

/// # Safety: the CPU supports AVX2.
#[inline(always)]
unsafe fn acc_zero() -> Acc {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { [_mm256_setzero_pd(); 4] }
}

/// Stores the registers into the 16 canonical lanes (register r lane j → acc\[4r + j\]).
///
/// # Safety: the CPU supports AVX2.
#[inline(always)]
unsafe fn acc_lanes(a: &Acc) -> [f64; DOT_LANES] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut l = [0.0f64; DOT_LANES];
        for (r, v) in a.iter().enumerate() {
            _mm256_storeu_pd(l.as_mut_ptr().add(4 * r), *v);
        }
        l
    }
}

/// 8 BF16 values widened to two f64 registers (elements 0–3, 4–7).
///
/// # Safety: the CPU supports AVX2; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn bf16x8(p: *const u16) -> (__m256d, __m256d) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let v = _mm_loadu_si128(p as *const __m128i);
        let z = _mm_setzero_si128();
        (
            _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(z, v))),
            _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(z, v))),
        )
    }
}

/// # Safety: the CPU supports AVX2; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn f32x4(p: *const f32) -> __m256d {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { _mm256_cvtps_pd(_mm_loadu_ps(p)) }
}

/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot_f32_impl(a: &[f32], b: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
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
}

/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot_bf16_impl(w: &[u16], x: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
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
}

/// Prefetch distance of the BF16 matrix-vector product, in elements (1 KiB per stream).
const PREFETCH: usize = 512;

/// `dot` of two BF16 rows with one vector x given already widened to f64, sharing the
/// loads of x. Two rows keep 8 accumulator registers live, leaving room for the operands in
/// the 16 ymm registers. The widening of x is done once per call, outside the rows.
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot2_bf16(w0: &[u16], w1: &[u16], x: &[f64]) -> (f64, f64) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
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
}

/// 2^896 and 2^−896 (f64): a BF16 value w has the f64 pattern of w × 2^−896 in a few integer
/// operations (see [`dot2_bf16_int`]), and x × 2^896 restores the product.
const SCALE_UP: f64 = f64::from_bits((1023 + 896) << 52);

/// [`dot2_bf16`] without float conversions of the weights, for rows with no exponent-255
/// (infinite or NaN) weight; the third result says whether such a weight was seen (then the
/// caller recomputes the pair with [`dot2_bf16`]).
///
/// Why it is exact: for a finite BF16 pattern b (sign s, exponent e, mantissa m) the 64-bit
/// word with s at bit 63, e at bits 52–59 and m at bits 45–51 is the f64 w × 2^−896 exactly —
/// for e ≥ 1 the exponent field e means 2^(e − 1023) = 2^(e − 127) × 2^−896 with the same
/// mantissa; for e = 0 (zero and subnormals) it is the f64 subnormal m × 2^−1029 =
/// (m × 2^−133) × 2^−896; ±0 stay ±0. `xs` holds x × 2^896 (exact: |x| < 2^128 gives at most
/// 2^1024 − 2^999, still finite; the smallest subnormal 2^−149 becomes 2^747). The product
/// (w × 2^−896) × (x × 2^896) is then w·x rounded once, and w·x has at most 8 + 24
/// significant bits within the f64 normal range, so it is exact: the same bits as
/// (f64)w × (f64)x, including the sign of zero, ±inf and NaN (with x's payload) for
/// non-finite x. Only e = 255 breaks the construction; it is detected, never computed.
///
/// The words are built from each dword (two weights): odd column = (v >>arith 3) & M, even
/// column = ((v << 16) >>arith 3) & M with M = 0x8FFF_E000 (sign kept at bit 31, its copies
/// at bits 28–30 cleared), then interleaved with zero low words — which leaves the columns
/// in `MX_PERM` order, as for MXFP4. `xs` is x × 2^896 in that order (whole 16-column
/// blocks); the tail columns use `x64` (canonical, unscaled) with the plain formula.
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot2_bf16_int(w0: &[u16], w1: &[u16], xs: &[f64], x64: &[f64]) -> (f64, f64, bool) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = x64.len();
        let (p0, p1, px) = (w0.as_ptr(), w1.as_ptr(), xs.as_ptr());
        let m = _mm256_set1_epi32(0x8FFF_E000u32 as i32);
        let z = _mm256_setzero_si256();
        let mut a = acc_zero();
        let mut b = acc_zero();
        // Max over (weight << 1) as u16: ≥ 0xFF00 exactly when some exponent is 255.
        let mut mx = _mm256_setzero_si256();
        let mut i = 0;
        while i + DOT_LANES <= n {
            let ahead = i + PREFETCH + if i + PREFETCH >= n { n } else { 0 };
            _mm_prefetch::<_MM_HINT_T0>(p0.wrapping_add(ahead) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(p1.wrapping_add(ahead) as *const i8);
            let v0 = _mm256_loadu_si256(p0.add(i) as *const __m256i);
            let v1 = _mm256_loadu_si256(p1.add(i) as *const __m256i);
            mx = _mm256_max_epu16(
                mx,
                _mm256_max_epu16(_mm256_add_epi16(v0, v0), _mm256_add_epi16(v1, v1)),
            );
            let x0 = _mm256_loadu_pd(px.add(i));
            let x1 = _mm256_loadu_pd(px.add(i + 4));
            let x2 = _mm256_loadu_pd(px.add(i + 8));
            let x3 = _mm256_loadu_pd(px.add(i + 12));
            let ho = _mm256_and_si256(_mm256_srai_epi32::<3>(v0), m);
            let he = _mm256_and_si256(_mm256_srai_epi32::<3>(_mm256_slli_epi32::<16>(v0)), m);
            a[0] = _mm256_add_pd(
                a[0],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpacklo_epi32(z, he)), x0),
            );
            a[1] = _mm256_add_pd(
                a[1],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpackhi_epi32(z, he)), x1),
            );
            a[2] = _mm256_add_pd(
                a[2],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpacklo_epi32(z, ho)), x2),
            );
            a[3] = _mm256_add_pd(
                a[3],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpackhi_epi32(z, ho)), x3),
            );
            let ho = _mm256_and_si256(_mm256_srai_epi32::<3>(v1), m);
            let he = _mm256_and_si256(_mm256_srai_epi32::<3>(_mm256_slli_epi32::<16>(v1)), m);
            b[0] = _mm256_add_pd(
                b[0],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpacklo_epi32(z, he)), x0),
            );
            b[1] = _mm256_add_pd(
                b[1],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpackhi_epi32(z, he)), x1),
            );
            b[2] = _mm256_add_pd(
                b[2],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpacklo_epi32(z, ho)), x2),
            );
            b[3] = _mm256_add_pd(
                b[3],
                _mm256_mul_pd(_mm256_castsi256_pd(_mm256_unpackhi_epi32(z, ho)), x3),
            );
            i += DOT_LANES;
        }
        let top = _mm256_set1_epi16(0xFF00u16 as i16);
        let special = _mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_max_epu16(mx, top), mx)) != 0;
        let mut la = mx_lanes(&a);
        let mut lb = mx_lanes(&b);
        for j in 0..n - i {
            let xv = x64[i + j];
            la[j] += bf16_to_f32(w0[i + j]) as f64 * xv;
            lb[j] += bf16_to_f32(w1[i + j]) as f64 * xv;
        }
        (reduce16(&la), reduce16(&lb), special)
    }
}

/// `dot` of one BF16 row with x given widened to f64.
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot_bf16_x64(w: &[u16], x: &[f64]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = x.len();
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut acc = acc_zero();
        let mut i = 0;
        while i + DOT_LANES <= n {
            let (w0, w1) = bf16x8(pw.add(i));
            let (w2, w3) = bf16x8(pw.add(i + 8));
            acc[0] = _mm256_add_pd(acc[0], _mm256_mul_pd(w0, _mm256_loadu_pd(px.add(i))));
            acc[1] = _mm256_add_pd(acc[1], _mm256_mul_pd(w1, _mm256_loadu_pd(px.add(i + 4))));
            acc[2] = _mm256_add_pd(acc[2], _mm256_mul_pd(w2, _mm256_loadu_pd(px.add(i + 8))));
            acc[3] = _mm256_add_pd(acc[3], _mm256_mul_pd(w3, _mm256_loadu_pd(px.add(i + 12))));
            i += DOT_LANES;
        }
        let mut l = acc_lanes(&acc);
        for j in 0..n - i {
            l[j] += bf16_to_f32(w[i + j]) as f64 * x[i + j];
        }
        reduce16(&l)
    }
}

/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { dot_f32_impl(a, b) }
}

/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dot_bf16(w: &[u16], x: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { dot_bf16_impl(w, x) }
}

/// Appends x prepared for [`matvec_bf16`]: x widened to f64 (cols values, column order),
/// then x × 2^896 in `MX_PERM` order for the whole 16-column blocks.
///
/// # Safety: the CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn prep_x_bf16(x: &[f32], out: &mut Vec<f64>) {
    out.reserve(2 * x.len());
    out.extend(x.iter().map(|&v| v as f64));
    for b in x.chunks_exact(DOT_LANES) {
        out.extend(MX_PERM.iter().map(|&c| b[c] as f64 * SCALE_UP));
    }
}

/// Matrix-vector block (T = 1): w \[nr, cols\] BF16, `xp` = x prepared by [`prep_x_bf16`]
/// (once per call, by the caller) → out \[nr\]. Rows in pairs sharing x; a pair holding an
/// infinite or NaN weight is recomputed with float conversions.
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matvec_bf16(w: &[u16], cols: usize, xp: &[f64], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let nr = w.len() / cols;
        let (x64, xs) = xp.split_at(cols);
        let mut r = 0;
        while r + 2 <= nr {
            let (w0, w1) = (
                &w[r * cols..(r + 1) * cols],
                &w[(r + 1) * cols..(r + 2) * cols],
            );
            let (mut a, mut b, special) = dot2_bf16_int(w0, w1, xs, x64);
            if special {
                (a, b) = dot2_bf16(w0, w1, x64);
            }
            out[r] = a as f32;
            out[r + 1] = b as f32;
            r += 2;
        }
        if r < nr {
            out[r] = dot_bf16_x64(&w[r * cols..], x64) as f32;
        }
    }
}

/// Matrix block with fp32 weights; w \[nr, cols\], x \[T, cols\] → out \[T, nr\].
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matmul_f32(w: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let nr = w.len() / cols;
        for (r, wr) in w.chunks_exact(cols).enumerate() {
            for (t, xt) in x.chunks_exact(cols).enumerate() {
                out[t * nr + r] = dot_f32_impl(wr, xt) as f32;
            }
        }
    }
}

// ----- MXFP4 -------------------------------------------------------------------------------
//
// Decode of 16 columns (8 packed bytes): `vpmovzxbd` puts byte k (columns 2k and 2k+1) in
// dword k; `vpermd` looks the low nibble's magnitude up in the scale's row of
// `E2M1_SCALED_HI32_SIGNX` (it reads index bits 0–2 only), and the byte shifted right by 4
// does the same for the high nibble. XOR-ing `code << 28` applies the sign (see the table).
// The eight high words of each half are then interleaved with zero low words into f64
// registers, which leaves the columns in the order of `MX_PERM`: register r lane j holds
// column MX_PERM[4r + j] of the 16. Each register lane still receives a fixed column mod 16
// in increasing column order, so it *is* one canonical accumulator lane (MODEL.md §5.2);
// x is permuted the same way once per call and the lanes are put back in canonical order
// before the reduction tree.

/// Column (mod 16) held by lane j of register r of the MXFP4 decode: MX_PERM\[4r + j\].
const MX_PERM: [usize; DOT_LANES] = [0, 2, 8, 10, 4, 6, 12, 14, 1, 3, 9, 11, 5, 7, 13, 15];

/// The exact f64 values of 16 columns from 8 packed bytes at `p` with the scale's signed
/// table row, in `MX_PERM` order.
///
/// # Safety: the CPU supports AVX2; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn mx_decode16(p: *const u8, table: __m256i) -> [__m256d; 4] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let d = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
        let d4 = _mm256_srli_epi32::<4>(d);
        // Shifting the dword by 28 keeps only the low nibble (the high one leaves the dword).
        let even = _mm256_xor_si256(
            _mm256_permutevar8x32_epi32(table, d),
            _mm256_slli_epi32::<28>(d),
        );
        let odd = _mm256_xor_si256(
            _mm256_permutevar8x32_epi32(table, d4),
            _mm256_slli_epi32::<28>(d4),
        );
        let z = _mm256_setzero_si256();
        [
            _mm256_castsi256_pd(_mm256_unpacklo_epi32(z, even)),
            _mm256_castsi256_pd(_mm256_unpackhi_epi32(z, even)),
            _mm256_castsi256_pd(_mm256_unpacklo_epi32(z, odd)),
            _mm256_castsi256_pd(_mm256_unpackhi_epi32(z, odd)),
        ]
    }
}

/// # Safety: the CPU supports AVX2.
#[inline(always)]
unsafe fn mx_table(s: u8) -> __m256i {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { _mm256_loadu_si256(E2M1_SCALED_HI32_SIGNX[s as usize].as_ptr() as *const __m256i) }
}

/// Accumulator registers in `MX_PERM` order → the 16 canonical lanes.
///
/// # Safety: the CPU supports AVX2.
#[inline(always)]
unsafe fn mx_lanes(a: &Acc) -> [f64; DOT_LANES] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let l = acc_lanes(a);
        let mut c = [0.0f64; DOT_LANES];
        for (k, &col) in MX_PERM.iter().enumerate() {
            c[col] = l[k];
        }
        c
    }
}

/// Appends x \[T, cols\] (cols a multiple of 32) widened to f64 with every 16 columns in
/// `MX_PERM` order, as [`matvec_mxfp4`] expects.
///
/// # Safety: the CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn prep_x_mxfp4(x: &[f32], out: &mut Vec<f64>) {
    out.reserve(x.len());
    for b in x.chunks_exact(DOT_LANES) {
        out.extend(MX_PERM.iter().map(|&c| b[c] as f64));
    }
}

/// `dot` of one MXFP4 row with x (permuted f64, see [`prep_x_mxfp4`]).
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot_mxfp4_row(packed: &[u8], scales: &[u8], xp: &[f64]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut acc = acc_zero();
        let (pp, px) = (packed.as_ptr(), xp.as_ptr());
        for (g, &s) in scales.iter().enumerate() {
            let table = mx_table(s);
            for half in 0..2 {
                let w = mx_decode16(pp.add(g * GROUP / 2 + 8 * half), table);
                let xh = px.add(g * GROUP + 16 * half);
                for (r, ar) in acc.iter_mut().enumerate() {
                    *ar = _mm256_add_pd(*ar, _mm256_mul_pd(w[r], _mm256_loadu_pd(xh.add(4 * r))));
                }
            }
        }
        reduce16(&mx_lanes(&acc))
    }
}

/// MXFP4 matrix-vector block (T = 1): packed \[nr, cols/2\], scales \[nr, cols/32\], `xp` = x
/// prepared by [`prep_x_mxfp4`] → out \[nr\].
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matvec_mxfp4(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    xp: &[f64],
    out: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let (pb, sb) = (cols / 2, cols / GROUP);
        for (r, o) in out.iter_mut().enumerate() {
            *o = dot_mxfp4_row(
                &packed[r * pb..(r + 1) * pb],
                &scales[r * sb..(r + 1) * sb],
                xp,
            ) as f32;
        }
    }
}

/// Exact BF16 → fp32 widening as an integer shift (no float conversion, so even NaN payloads
/// keep their bits, like the scalar `bits << 16`).
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn widen_bf16(w: &[u16], y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
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
}

simd_entry_points!("avx2", Avx2);
