//! The NEON path. `dot` keeps its 16 f64 accumulators in eight 2×f64 registers, register r
//! lane j = acc\[2r + j\] (MODEL.md §5.2), and ends with the scalar reduction tree. Only
//! separate multiplies and adds are issued (never `fmla`/`fmadd`); a test checks the
//! disassembly.
//!
//! Every function is `unsafe`: callers guarantee the CPU supports NEON (`Kernels` checks).

use crate::mxfp4::{E2M1_SCALED_TOP16, GROUP};
use crate::num::{bf16_to_f32, reduce16, DOT_LANES};
use crate::simd::{simd_entry_points, Simd};
use std::arch::aarch64::*;

mod mxfp4;
pub(crate) use mxfp4::{matmul_mxfp4, matvec_mxfp4, prep_x_mxfp4};

/// The NEON lane set: 2 × f64 per register.
pub(crate) struct Neon;

const SIGN: u64 = 0x8000_0000_0000_0000;

impl Simd for Neon {
    type V = float64x2_t;
    type M = uint64x2_t;
    const N: usize = 2;

    #[inline(always)]
    unsafe fn splat(x: f64) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vdupq_n_f64(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vld1q_f64(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f64, v: float64x2_t) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vst1q_f64(p, v) }
    }
    #[inline(always)]
    unsafe fn load_f32(p: *const f32) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vcvt_f64_f32(vld1_f32(p)) }
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let pair = (p as *const u32).read_unaligned();
            let v = vreinterpret_u16_u32(vdup_n_u32(pair));
            vcvt_f64_f32(vreinterpret_f32_u32(vget_low_u32(vshll_n_u16::<16>(v))))
        }
    }
    #[inline(always)]
    unsafe fn store_f32(p: *mut f32, v: float64x2_t) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            // fcvtn rounds with FPCR (round to nearest even; flush-to-zero is never set by k3).
            vst1_f32(p, vcvt_f32_f64(v))
        }
    }
    #[inline(always)]
    unsafe fn add(a: float64x2_t, b: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vaddq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: float64x2_t, b: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vsubq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: float64x2_t, b: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vmulq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: float64x2_t, b: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vdivq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn floor(a: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vrndmq_f64(a) }
    }
    #[inline(always)]
    unsafe fn neg(a: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vnegq_f64(a) }
    }
    #[inline(always)]
    unsafe fn abs(a: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vabsq_f64(a) }
    }
    #[inline(always)]
    unsafe fn or_sign(t: float64x2_t, x: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let s = vandq_u64(vreinterpretq_u64_f64(x), vdupq_n_u64(SIGN));
            vreinterpretq_f64_u64(vorrq_u64(vreinterpretq_u64_f64(t), s))
        }
    }
    #[inline(always)]
    unsafe fn gt(a: float64x2_t, b: float64x2_t) -> uint64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vcgtq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn lt(a: float64x2_t, b: float64x2_t) -> uint64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vcltq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn ge(a: float64x2_t, b: float64x2_t) -> uint64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vcgeq_f64(a, b) }
    }
    #[inline(always)]
    unsafe fn is_nan(a: float64x2_t) -> uint64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            // x == x is false exactly for NaN.
            veorq_u64(vceqq_f64(a, a), vdupq_n_u64(u64::MAX))
        }
    }
    #[inline(always)]
    unsafe fn or_m(a: uint64x2_t, b: uint64x2_t) -> uint64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vorrq_u64(a, b) }
    }
    #[inline(always)]
    unsafe fn select(m: uint64x2_t, a: float64x2_t, b: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { vbslq_f64(m, a, b) }
    }
    #[inline(always)]
    unsafe fn pow2i(k: float64x2_t) -> float64x2_t {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            // k is integer-valued, so the conversion is exact.
            let e = vaddq_s64(vcvtq_s64_f64(k), vdupq_n_s64(1023));
            vreinterpretq_f64_s64(vshlq_n_s64::<52>(e))
        }
    }
    #[inline(always)]
    unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { dot_f32_impl(a, b) }
    }
}

/// Eight accumulator registers: register r lane j holds acc\[2r + j\].
type Acc = [float64x2_t; 8];

/// # Safety: the CPU supports NEON.
#[inline(always)]
unsafe fn acc_zero() -> Acc {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { [vdupq_n_f64(0.0); 8] }
}

/// Stores the registers into the 16 canonical lanes (register r lane j → acc\[2r + j\]).
///
/// # Safety: the CPU supports NEON.
#[inline(always)]
unsafe fn acc_lanes(a: &Acc) -> [f64; DOT_LANES] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut l = [0.0f64; DOT_LANES];
        for (r, v) in a.iter().enumerate() {
            vst1q_f64(l.as_mut_ptr().add(2 * r), *v);
        }
        l
    }
}

/// 4 fp32 values widened to two f64 registers (elements 0–1, 2–3).
///
/// # Safety: the CPU supports NEON; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn f32x4(p: *const f32) -> (float64x2_t, float64x2_t) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let v = vld1q_f32(p);
        (vcvt_f64_f32(vget_low_f32(v)), vcvt_high_f64_f32(v))
    }
}

/// 8 BF16 values widened to four f64 registers (elements 0–1, 2–3, 4–5, 6–7).
///
/// # Safety: the CPU supports NEON; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn bf16x8(p: *const u16) -> [float64x2_t; 4] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let v = vld1q_u16(p);
        let lo = vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(v)));
        let hi = vreinterpretq_f32_u32(vshll_high_n_u16::<16>(v));
        [
            vcvt_f64_f32(vget_low_f32(lo)),
            vcvt_high_f64_f32(lo),
            vcvt_f64_f32(vget_low_f32(hi)),
            vcvt_high_f64_f32(hi),
        ]
    }
}

/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
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
            for q in 0..4 {
                let (a0, a1) = f32x4(pa.add(i + 4 * q));
                let (b0, b1) = f32x4(pb.add(i + 4 * q));
                acc[2 * q] = vaddq_f64(acc[2 * q], vmulq_f64(a0, b0));
                acc[2 * q + 1] = vaddq_f64(acc[2 * q + 1], vmulq_f64(a1, b1));
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

/// Adds the 16 products of one block (weights already widened) into the accumulators.
///
/// # Safety: the CPU supports NEON; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment; the slice lengths are those
/// `Kernels` checks (the scalar twin's contract), so every index used is in bounds; any
/// alignment.
#[inline(always)]
unsafe fn acc_block(acc: &mut Acc, w: &[float64x2_t; 8], px: *const f32) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        for q in 0..4 {
            let (x0, x1) = f32x4(px.add(4 * q));
            acc[2 * q] = vaddq_f64(acc[2 * q], vmulq_f64(w[2 * q], x0));
            acc[2 * q + 1] = vaddq_f64(acc[2 * q + 1], vmulq_f64(w[2 * q + 1], x1));
        }
    }
}

/// As [`acc_block`] with x given widened to f64.
///
/// # Safety: the CPU supports NEON; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment; the slice lengths are those
/// `Kernels` checks (the scalar twin's contract), so every index used is in bounds; any
/// alignment.
#[inline(always)]
unsafe fn acc_block64(acc: &mut Acc, w: &[float64x2_t; 8], px: *const f64) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        for (r, (a, wr)) in acc.iter_mut().zip(w).enumerate() {
            *a = vaddq_f64(*a, vmulq_f64(*wr, vld1q_f64(px.add(2 * r))));
        }
    }
}

/// # Safety: the CPU supports NEON; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn bf16x16(p: *const u16) -> [float64x2_t; 8] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let [a, b, c, d] = bf16x8(p);
        let [e, f, g, h] = bf16x8(p.add(8));
        [a, b, c, d, e, f, g, h]
    }
}

/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
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
            acc_block(&mut acc, &bf16x16(pw.add(i)), px.add(i));
            i += DOT_LANES;
        }
        let mut l = acc_lanes(&acc);
        for (j, (&a, &b)) in w[i..].iter().zip(&x[i..]).enumerate() {
            l[j] += bf16_to_f32(a) as f64 * b as f64;
        }
        reduce16(&l)
    }
}

/// `dot` of two BF16 rows with one fp32 vector, sharing the loads of x (16 accumulator
/// registers of the 32).
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot2_bf16(w0: &[u16], w1: &[u16], x: &[f32]) -> (f64, f64) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = x.len();
        let (p0, p1, px) = (w0.as_ptr(), w1.as_ptr(), x.as_ptr());
        let mut a = acc_zero();
        let mut b = acc_zero();
        let mut i = 0;
        while i + DOT_LANES <= n {
            let u = bf16x16(p0.add(i));
            let v = bf16x16(p1.add(i));
            for q in 0..4 {
                let (x0, x1) = f32x4(px.add(i + 4 * q));
                a[2 * q] = vaddq_f64(a[2 * q], vmulq_f64(u[2 * q], x0));
                a[2 * q + 1] = vaddq_f64(a[2 * q + 1], vmulq_f64(u[2 * q + 1], x1));
                b[2 * q] = vaddq_f64(b[2 * q], vmulq_f64(v[2 * q], x0));
                b[2 * q + 1] = vaddq_f64(b[2 * q + 1], vmulq_f64(v[2 * q + 1], x1));
            }
            i += DOT_LANES;
        }
        let mut la = acc_lanes(&a);
        let mut lb = acc_lanes(&b);
        for j in 0..n - i {
            let xv = x[i + j] as f64;
            la[j] += bf16_to_f32(w0[i + j]) as f64 * xv;
            lb[j] += bf16_to_f32(w1[i + j]) as f64 * xv;
        }
        (reduce16(&la), reduce16(&lb))
    }
}

/// [`dot2_bf16`] with x given widened to f64 (the same products).
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot2_bf16_x64(w0: &[u16], w1: &[u16], x: &[f64]) -> (f64, f64) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = x.len();
        let (p0, p1, px) = (w0.as_ptr(), w1.as_ptr(), x.as_ptr());
        let mut a = acc_zero();
        let mut b = acc_zero();
        let mut i = 0;
        while i + DOT_LANES <= n {
            acc_block64(&mut a, &bf16x16(p0.add(i)), px.add(i));
            acc_block64(&mut b, &bf16x16(p1.add(i)), px.add(i));
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

/// Matrix-vector block (T = 1): w \[nr, cols\] BF16, x64 = x widened to f64 → out \[nr\].
/// Rows in pairs sharing x.
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn matvec_bf16(w: &[u16], cols: usize, x64: &[f64], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let x64 = &x64[..cols];
        let nr = w.len() / cols;
        let mut r = 0;
        while r + 2 <= nr {
            let (a, b) = dot2_bf16_x64(
                &w[r * cols..(r + 1) * cols],
                &w[(r + 1) * cols..(r + 2) * cols],
                x64,
            );
            out[r] = a as f32;
            out[r + 1] = b as f32;
            r += 2;
        }
        if r < nr {
            let (a, _) = dot2_bf16_x64(&w[r * cols..], &w[r * cols..], x64);
            out[r] = a as f32;
        }
    }
}

/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { dot_f32_impl(a, b) }
}

/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_bf16(w: &[u16], x: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { dot_bf16_impl(w, x) }
}

/// Matrix block: w \[nr, cols\] BF16, x \[T, cols\] → out \[T, nr\]. One position: rows in pairs
/// sharing x. Several positions: the portable tiled product (`scalar::tiled`: register
/// blocks of 4 rows × 2 positions over lane groups of two, each weight widened once per 32
/// positions).
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn matmul_bf16(w: &[u16], cols: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let nr = w.len() / cols;
        let t_n = x.len() / cols;
        if t_n == 1 {
            let mut r = 0;
            while r + 2 <= nr {
                let (a, b) = dot2_bf16(
                    &w[r * cols..(r + 1) * cols],
                    &w[(r + 1) * cols..(r + 2) * cols],
                    x,
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
        // Several positions: the portable tiled product, whose two-lane accumulator groups
        // are one NEON register each (the compiler vectorises the pairs; no fusing).
        crate::scalar::matmul_bf16(w, cols, x, out);
    }
}

/// Matrix block with fp32 weights; layout as [`matmul_bf16`].
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
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

/// Appends x widened to f64 for [`matvec_bf16`] (column order).
///
/// # Safety: the CPU supports NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn prep_x_bf16(x: &[f32], out: &mut Vec<f64>) {
    out.extend(x.iter().map(|&v| v as f64));
}

/// Exact BF16 → fp32 widening as an integer shift (NaN payloads keep their bits).
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn widen_bf16(w: &[u16], y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = y.len();
        let mut i = 0;
        while i + 4 <= n {
            let v = vshll_n_u16::<16>(vld1_u16(w.as_ptr().add(i)));
            vst1q_u32(y.as_mut_ptr().add(i) as *mut u32, v);
            i += 4;
        }
        for j in i..n {
            y[j] = bf16_to_f32(w[j]);
        }
    }
}

simd_entry_points!("neon", Neon);
