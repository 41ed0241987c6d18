//! The numerics contract of MODEL.md §5 as plain scalar Rust: `rnd`, exact BF16 widening,
//! the 16-lane `dot` with its fixed reduction tree, `seqsum`, and the engine-owned
//! transcendentals `exp64`, `tanh64`, `sig64`, `silu64`.
//!
//! These functions are the definition every SIMD path is tested against bit for bit. They use
//! only IEEE +, −, ×, ÷, sqrt, comparisons and conversions; Rust never contracts `a * b + c`
//! into a fused multiply-add, and nothing here calls a platform math library.

/// `rnd`: f64 → f32 round-to-nearest-even, overflow to ±inf (MODEL.md §5.1).
///
/// Rust's `as` conversion is exactly this IEEE rounding (subnormal results are kept).
#[inline(always)]
pub fn rnd(x: f64) -> f32 {
    x as f32
}

/// Exact BF16 → fp32 widening: the 16 bits become the high half of the fp32 pattern
/// (MODEL.md §5.1). Subnormals, ±0, ±inf and NaN payloads are kept bit for bit.
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Number of f64 accumulators of the canonical `dot` (MODEL.md §5.2).
pub const DOT_LANES: usize = 16;

/// The fixed reduction tree of MODEL.md §5.2 step 3:
/// b_j = (acc\[j\] + acc\[j+4\]) + (acc\[j+8\] + acc\[j+12\]) for j = 0…3, then
/// (b_0 + b_1) + (b_2 + b_3).
#[inline(always)]
pub fn reduce16(acc: &[f64; DOT_LANES]) -> f64 {
    let b0 = (acc[0] + acc[4]) + (acc[8] + acc[12]);
    let b1 = (acc[1] + acc[5]) + (acc[9] + acc[13]);
    let b2 = (acc[2] + acc[6]) + (acc[10] + acc[14]);
    let b3 = (acc[3] + acc[7]) + (acc[11] + acc[15]);
    (b0 + b1) + (b2 + b3)
}

/// `dot(a, b)` of two fp32 vectors (MODEL.md §5.2): exact f64 products added into
/// accumulator `i mod 16` in increasing `i`, then [`reduce16`]. Returns f64 (callers `rnd`).
///
/// Panics if the lengths differ.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
    let mut acc = [0.0f64; DOT_LANES];
    let mut ca = a.chunks_exact(DOT_LANES);
    let mut cb = b.chunks_exact(DOT_LANES);
    for (xa, xb) in (&mut ca).zip(&mut cb) {
        for l in 0..DOT_LANES {
            acc[l] += xa[l] as f64 * xb[l] as f64;
        }
    }
    for (l, (&xa, &xb)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[l] += xa as f64 * xb as f64;
    }
    reduce16(&acc)
}

/// `dot(W[r], x)` for a BF16 weight row `w` (raw bit patterns) and an fp32 vector `x`
/// (MODEL.md §5.2; widening per §5.1). Returns f64.
///
/// Panics if the lengths differ.
pub fn dot_bf16(w: &[u16], x: &[f32]) -> f64 {
    assert_eq!(w.len(), x.len(), "dot_bf16: length mismatch");
    let mut acc = [0.0f64; DOT_LANES];
    let mut cw = w.chunks_exact(DOT_LANES);
    let mut cx = x.chunks_exact(DOT_LANES);
    for (xw, xx) in (&mut cw).zip(&mut cx) {
        for l in 0..DOT_LANES {
            acc[l] += bf16_to_f32(xw[l]) as f64 * xx[l] as f64;
        }
    }
    for (l, (&xw, &xx)) in cw.remainder().iter().zip(cx.remainder()).enumerate() {
        acc[l] += bf16_to_f32(xw) as f64 * xx as f64;
    }
    reduce16(&acc)
}

/// `seqsum` (MODEL.md §5.3): one f64 accumulator starting at +0.0, adding the terms in the
/// order the iterator yields them.
#[inline]
pub fn seqsum<I: IntoIterator<Item = f64>>(terms: I) -> f64 {
    let mut s = 0.0f64;
    for t in terms {
        s += t;
    }
    s
}

/// log2(e) as used by `exp64` step 2, spelled as MODEL.md §5.4 gives it (it is the f64
/// nearest log2(e), i.e. `std::f64::consts::LOG2_E`; a test checks that).
#[allow(clippy::approx_constant)]
pub(crate) const LOG2E: f64 = 1.4426950408889634;
/// High part of ln 2, bit pattern 0x3FE62E42FEE00000 (MODEL.md §5.4 step 3).
pub(crate) const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
/// Low part of ln 2, bit pattern 0x3DEA39EF35793C76.
pub(crate) const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// Horner coefficients c_j = 1/j! rounded to f64. Every j! here is exact in f64, so one
/// correctly rounded division (done by the compiler's IEEE constant evaluation) gives the
/// correctly rounded reciprocal.
pub(crate) const EXP_C: [f64; 14] = [
    1.0, // 1/0!
    1.0, // 1/1!
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362880.0,
    1.0 / 3628800.0,
    1.0 / 39916800.0,
    1.0 / 479001600.0,
    1.0 / 6227020800.0,
];
/// `exp64` returns +inf above this argument.
pub(crate) const EXP_HI: f64 = 709.0;
/// `exp64` returns +0.0 below this argument.
pub(crate) const EXP_LO: f64 = -708.0;
/// `tanh64` uses its odd Taylor branch below 2^-13.
pub(crate) const TANH_SMALL: f64 = 1.0 / 8192.0;
/// `tanh64` returns ±1 above 20.
pub(crate) const TANH_BIG: f64 = 20.0;

/// floor(t) for |t| < 2^62 using only a conversion and a comparison (no library call).
#[inline(always)]
fn floor_i64(t: f64) -> i64 {
    let i = t as i64; // truncation toward zero
    if (i as f64) > t {
        i - 1
    } else {
        i
    }
}

/// `exp64(x)` of MODEL.md §5.4, with exactly its constants and operation order:
/// NaN → NaN (the input itself); x > 709 → +inf; x < −708 → +0;
/// kk = floor(x·log2e + 0.5); r = (x − kk·LN2_HI) − kk·LN2_LO; 13th-order Horner without FMA;
/// result p·2^kk with 2^kk built from its bit pattern.
#[inline]
pub fn exp64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_HI {
        return f64::INFINITY;
    }
    if x < EXP_LO {
        return 0.0;
    }
    let kk = floor_i64(x * LOG2E + 0.5);
    let kf = kk as f64;
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    let mut p = EXP_C[13];
    let mut j = 13;
    while j > 0 {
        j -= 1;
        p = p * r + EXP_C[j];
    }
    p * f64::from_bits(((kk + 1023) as u64) << 52)
}

/// `tanh64(x)` of MODEL.md §5.4: NaN → NaN; |x| < 2^−13: x − (x·x·x)/3; |x| > 20: ±1;
/// else e = exp64(−(2|x|)), t = (1 − e)/(1 + e) with the sign of x.
#[inline]
pub fn tanh64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a < TANH_SMALL {
        let t = x * x;
        return x - (t * x) / 3.0;
    }
    if a > TANH_BIG {
        return if x < 0.0 { -1.0 } else { 1.0 };
    }
    let e = exp64(-(2.0 * a));
    let t = (1.0 - e) / (1.0 + e);
    // x is non-zero here, so "t with the sign of x" is a negation for negative x.
    if x < 0.0 {
        -t
    } else {
        t
    }
}

/// `sig64(x)` of MODEL.md §5.4: x ≥ 0: 1/(1 + exp64(−x)); otherwise e = exp64(x), e/(1 + e).
/// NaN takes the second branch and stays NaN.
#[inline]
pub fn sig64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + exp64(-x))
    } else {
        let e = exp64(x);
        e / (1.0 + e)
    }
}

/// `silu64(x) = x × sig64(x)` (MODEL.md §5.4).
#[inline]
pub fn silu64(x: f64) -> f64 {
    x * sig64(x)
}

/// `log64` uses its odd series on m / 2 above this (√2 as the f64 MODEL.md §5.4 spells).
#[allow(clippy::approx_constant)]
pub(crate) const LOG_SQRT2: f64 = 1.4142135623730951;
/// 2^54, the scale that makes a subnormal `log64` argument normal.
const TWO_54: f64 = 18014398509481984.0;
/// Series coefficients c_j = 1/(2j + 1) rounded to f64 (one correctly rounded division each).
pub(crate) const LOG_C: [f64; 11] = [
    1.0,
    1.0 / 3.0,
    1.0 / 5.0,
    1.0 / 7.0,
    1.0 / 9.0,
    1.0 / 11.0,
    1.0 / 13.0,
    1.0 / 15.0,
    1.0 / 17.0,
    1.0 / 19.0,
    1.0 / 21.0,
];

/// `log64(x)` of MODEL.md §5.4 (natural logarithm; used by the server's logprobs, never by the
/// forward pass): NaN or x < 0 → NaN; ±0 → −inf; +inf → +inf; a subnormal is scaled by 2^54
/// first. x = m·2^e with m in [1, 2), halved once above √2; f = m − 1, s = f/(2 + f), z = s²;
/// q = Σ c_j z^j by Horner (10th order, no FMA); result (e·LN2_HI) + ((e·LN2_LO) + (2s)·q).
#[inline]
pub fn log64(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x == f64::INFINITY {
        return x;
    }
    let (x, mut e) = if x < f64::MIN_POSITIVE {
        (x * TWO_54, -54i64)
    } else {
        (x, 0i64)
    };
    let bits = x.to_bits();
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | (1023u64 << 52));
    if m > LOG_SQRT2 {
        m /= 2.0;
        e += 1;
    }
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let mut q = LOG_C[10];
    let mut j = 10;
    while j > 0 {
        j -= 1;
        q = q * z + LOG_C[j];
    }
    let ef = e as f64;
    (ef * LN2_HI) + ((ef * LN2_LO) + (2.0 * s) * q)
}

// The fdlibm constants below are spelled as in its C source (the decimal literals parse to
// exactly its hex patterns; a test checks the reduction's), hence the precision allowances.
/// fdlibm's `__ieee754_rem_pio2` constants: 2/π and π/2 in three parts (33 + 33 + 53 bits).
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const INVPIO2: f64 = 6.36619772367581382433e-01;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const PIO2_1: f64 = 1.57079632673412561417e+00;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const PIO2_1T: f64 = 6.07710050650619224932e-11;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const PIO2_2: f64 = 6.07710050630396597660e-11;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const PIO2_2T: f64 = 2.02226624879595063154e-21;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const PIO2_3: f64 = 2.02226624871116645580e-21;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const PIO2_3T: f64 = 8.47842766036889956997e-32;
/// High words of n·π/2 for n = 1 … 32 (fdlibm's `npio2_hw`): the quick no-cancellation test.
const NPIO2_HW: [u32; 32] = [
    0x3FF921FB, 0x400921FB, 0x4012D97C, 0x401921FB, 0x401F6A7A, 0x4022D97C, 0x4025FDBB, 0x402921FB,
    0x402C463A, 0x402F6A7A, 0x4031475C, 0x4032D97C, 0x40346B9C, 0x4035FDBB, 0x40378FDB, 0x403921FB,
    0x403AB41B, 0x403C463A, 0x403DD85A, 0x403F6A7A, 0x40407E4C, 0x4041475C, 0x4042106C, 0x4042D97C,
    0x4043A28C, 0x40446B9C, 0x404534AC, 0x4045FDBB, 0x4046C6CB, 0x40478FDB, 0x404858EB, 0x404921FB,
];
/// `__kernel_sin` coefficients.
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const S1: f64 = -1.66666666666666324348e-01;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const S2: f64 = 8.33333333332248946124e-03;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const S3: f64 = -1.98412698298579493134e-04;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const S4: f64 = 2.75573137070700676789e-06;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const S5: f64 = -2.50507602534068634195e-08;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const S6: f64 = 1.58969099521155010221e-10;
/// `__kernel_cos` coefficients.
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const C1: f64 = 4.16666666666666019037e-02;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const C2: f64 = -1.38888888888741095749e-03;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const C3: f64 = 2.48015872894767294178e-05;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const C4: f64 = -2.75573143513906633035e-07;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const C5: f64 = 2.08757232129817482790e-09;
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const C6: f64 = -1.13596475577881948265e-11;

/// Largest |x| `cos64`/`sin64` reduce (fdlibm's medium case, |x| ≲ 2^19·π/2 ≈ 823,550);
/// beyond it they return NaN (the big case, `__kernel_rem_pio2`, is not part of the contract).
pub const TRIG_MAX: f64 = 823_549.6;

/// The high 32 bits of an f64 (fdlibm's `__HI`).
#[inline(always)]
fn hi(x: f64) -> u32 {
    (x.to_bits() >> 32) as u32
}

/// fdlibm's `__ieee754_rem_pio2` for |x| in the medium range: x = n·π/2 + (y0 + y1), returns
/// (n, y0, y1), in the written order of the C source (the |x| < 3π/4 special case, the quick
/// cancellation test, up to three rounds of the three-part π/2). Caller ensures
/// π/4 < |x| ≤ [`TRIG_MAX`].
fn rem_pio2(x: f64) -> (i32, f64, f64) {
    let hx = hi(x) as i32;
    let ix = (hx & 0x7fff_ffff) as u32;
    if ix < 0x4002_d97c {
        // |x| < 3π/4: n = ±1
        if hx > 0 {
            let mut z = x - PIO2_1;
            if ix != 0x3ff9_21fb {
                let y0 = z - PIO2_1T;
                return (1, y0, (z - y0) - PIO2_1T);
            }
            z -= PIO2_2;
            let y0 = z - PIO2_2T;
            return (1, y0, (z - y0) - PIO2_2T);
        }
        let mut z = x + PIO2_1;
        if ix != 0x3ff9_21fb {
            let y0 = z + PIO2_1T;
            return (-1, y0, (z - y0) + PIO2_1T);
        }
        z += PIO2_2;
        let y0 = z + PIO2_2T;
        return (-1, y0, (z - y0) + PIO2_2T);
    }
    let t = x.abs();
    let n = (t * INVPIO2 + 0.5) as i32;
    let fnn = n as f64;
    let mut r = t - fnn * PIO2_1;
    let mut w = fnn * PIO2_1T;
    let mut y0;
    if n < 32 && ix != NPIO2_HW[(n - 1) as usize] {
        y0 = r - w;
    } else {
        let j = (ix >> 20) as i32;
        y0 = r - w;
        let i = j - ((hi(y0) >> 20) & 0x7ff) as i32;
        if i > 16 {
            let t = r;
            w = fnn * PIO2_2;
            r = t - w;
            w = fnn * PIO2_2T - ((t - r) - w);
            y0 = r - w;
            let i = j - ((hi(y0) >> 20) & 0x7ff) as i32;
            if i > 49 {
                let t = r;
                w = fnn * PIO2_3;
                r = t - w;
                w = fnn * PIO2_3T - ((t - r) - w);
                y0 = r - w;
            }
        }
    }
    let y1 = (r - y0) - w;
    if hx < 0 {
        (-n, -y0, -y1)
    } else {
        (n, y0, y1)
    }
}

/// fdlibm's `__kernel_sin(x, y, iy)` on [−π/4, π/4] (y the tail of x; iy = 0 when y is 0).
fn kernel_sin(x: f64, y: f64, iy: bool) -> f64 {
    let ix = hi(x) & 0x7fff_ffff;
    if ix < 0x3e40_0000 && (x as i32) == 0 {
        return x; // |x| < 2^-27
    }
    let z = x * x;
    let v = z * x;
    let r = S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)));
    if !iy {
        x + v * (S1 + z * r)
    } else {
        x - ((z * (0.5 * y - v * r) - y) - v * S1)
    }
}

/// fdlibm's `__kernel_cos(x, y)` on [−π/4, π/4] (fdlibm 5.3, with its `qx` split).
fn kernel_cos(x: f64, y: f64) -> f64 {
    let ix = hi(x) & 0x7fff_ffff;
    if ix < 0x3e40_0000 && (x as i32) == 0 {
        return 1.0; // |x| < 2^-27
    }
    let z = x * x;
    let r = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))));
    if ix < 0x3FD3_3333 {
        // |x| < 0.3
        return 1.0 - (0.5 * z - (z * r - x * y));
    }
    let qx = if ix > 0x3fe9_0000 {
        0.28125
    } else {
        f64::from_bits(((ix - 0x0020_0000) as u64) << 32)
    };
    let hz = 0.5 * z - qx;
    let a = 1.0 - qx;
    a - (hz - (z * r - x * y))
}

/// `cos64(x)` (DRAFT.md "RoPE"; f64 → f64): fdlibm's `cos` — |x| ≤ π/4 straight to
/// `__kernel_cos`, else the medium-case `__ieee754_rem_pio2` and the kernel its quadrant
/// selects — one IEEE operation at a time, no FMA, so identical on every platform. Within
/// 1 ulp of the true cosine. NaN for NaN, ±inf and |x| > [`TRIG_MAX`].
pub fn cos64(x: f64) -> f64 {
    let ix = hi(x) & 0x7fff_ffff;
    if ix <= 0x3fe9_21fb {
        return kernel_cos(x, 0.0);
    }
    // NaN and ±inf fail the comparison too
    if x.is_nan() || x.abs() > TRIG_MAX {
        return f64::NAN;
    }
    let (n, y0, y1) = rem_pio2(x);
    match n & 3 {
        0 => kernel_cos(y0, y1),
        1 => -kernel_sin(y0, y1, true),
        2 => -kernel_cos(y0, y1),
        _ => kernel_sin(y0, y1, true),
    }
}

/// `sin64(x)`: fdlibm's `sin`, as [`cos64`].
pub fn sin64(x: f64) -> f64 {
    let ix = hi(x) & 0x7fff_ffff;
    if ix <= 0x3fe9_21fb {
        return kernel_sin(x, 0.0, false);
    }
    // NaN and ±inf fail the comparison too
    if x.is_nan() || x.abs() > TRIG_MAX {
        return f64::NAN;
    }
    let (n, y0, y1) = rem_pio2(x);
    match n & 3 {
        0 => kernel_sin(y0, y1, true),
        1 => kernel_cos(y0, y1),
        2 => -kernel_sin(y0, y1, true),
        _ => -kernel_cos(y0, y1),
    }
}

/// SiTU-GLU of one element pair (MODEL.md §6.1): A = (β1 × tanh64(a/β1)) × sig64(a);
/// Bv = β2 × tanh64(b/β2); returns rnd(A × Bv). The sigmoid sees the uncapped `a`.
#[inline]
pub fn situ_glu1(a: f32, b: f32, beta1: f64, beta2: f64) -> f32 {
    let a = a as f64;
    let b = b as f64;
    let big_a = (beta1 * tanh64(a / beta1)) * sig64(a);
    let big_b = beta2 * tanh64(b / beta2);
    rnd(big_a * big_b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_coefficients_are_reciprocal_factorials() {
        let mut f = 1.0f64;
        for (j, &c) in EXP_C.iter().enumerate() {
            if j > 0 {
                f *= j as f64;
            }
            assert_eq!(c, 1.0 / f, "c_{j}");
        }
        assert_eq!(LN2_HI, 0.6931471803691238);
        assert_eq!(LOG2E, std::f64::consts::LOG2_E);
        assert_eq!(LN2_LO, 1.9082149292705877e-10);
    }

    #[test]
    fn exp64_special_values() {
        assert_eq!(exp64(0.0), 1.0);
        assert_eq!(exp64(-0.0), 1.0);
        assert_eq!(exp64(709.5), f64::INFINITY);
        assert_eq!(exp64(-708.5).to_bits(), 0);
        assert!(exp64(f64::NAN).is_nan());
        assert!(exp64(709.0).is_finite());
        assert!(exp64(-708.0) > 0.0);
    }

    #[test]
    fn floor_matches_definition() {
        for &t in &[-1020.9, -0.5, -0.0, 0.0, 0.4, 1.0, -1.0, 1023.4, -3.0000001] {
            assert_eq!(floor_i64(t) as f64, t.floor(), "{t}");
        }
    }

    #[test]
    fn log64_special_values() {
        assert_eq!(log64(1.0).to_bits(), 0);
        assert_eq!(log64(0.0), f64::NEG_INFINITY);
        assert_eq!(log64(-0.0), f64::NEG_INFINITY);
        assert_eq!(log64(f64::INFINITY), f64::INFINITY);
        assert!(log64(-1.0).is_nan());
        assert!(log64(f64::NEG_INFINITY).is_nan());
        assert!(log64(f64::NAN).is_nan());
        assert_eq!(LOG_SQRT2, std::f64::consts::SQRT_2);
        for (j, &c) in LOG_C.iter().enumerate() {
            assert_eq!(c, 1.0 / (2 * j + 1) as f64, "c_{j}");
        }
    }

    /// Distance in units in the last place between two finite f64 of the same sign.
    fn ulps(a: f64, b: f64) -> u64 {
        let key = |v: f64| {
            let b = v.to_bits() as i64;
            if b < 0 {
                i64::MIN - b
            } else {
                b
            }
        };
        key(a).abs_diff(key(b))
    }

    #[test]
    fn log64_within_four_ulps_of_ln() {
        // Measured worst over these inputs: 3 ulps (near x = 1). xorshift64*: deterministic inputs over the whole positive range, subnormals
        // included, plus a dense sweep around 1 where the result is small.
        let mut st = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            st ^= st >> 12;
            st ^= st << 25;
            st ^= st >> 27;
            st.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut worst = 0;
        for i in 0..200_000u64 {
            let x = match i % 3 {
                0 => f64::from_bits(next() >> 1), // any positive pattern
                1 => 1.0 + (next() >> 11) as f64 * (1.0 / 9007199254740992.0) - 0.5,
                _ => f64::from_bits(next() >> 12), // subnormals
            };
            if !x.is_finite() || x <= 0.0 {
                continue;
            }
            let (got, want) = (log64(x), x.ln());
            if want == 0.0 {
                assert_eq!(got, 0.0, "log64({x:e})");
                continue;
            }
            let d = ulps(got, want);
            worst = worst.max(d);
            assert!(d <= 4, "log64({x:e}) = {got:e}, ln = {want:e}: {d} ulps");
        }
        // The series' own rounding (s, q, 2s·q) costs up to a few ulps of a result near 0,
        // away from 1 the e·ln2 term dominates and the result is within an ulp or so.
        assert!(
            worst >= 1,
            "the sweep should see at least one rounding difference"
        );
    }

    #[test]
    fn cos64_sin64_within_one_ulp_of_std() {
        // xorshift64*: angles over the whole RoPE range (position × inverse frequency), dense
        // near the multiples of π/2 where the reduction cancels, and small arguments.
        let mut st = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            st ^= st >> 12;
            st ^= st << 25;
            st ^= st >> 27;
            st.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let unit = |b: u64| (b >> 11) as f64 * (1.0 / 9007199254740992.0);
        let mut worst = 0;
        for i in 0..300_000u64 {
            let u = unit(next());
            let x = match i % 4 {
                0 => (u - 0.5) * 2.0 * TRIG_MAX,
                1 => (u - 0.5) * 20.0,
                2 => {
                    let k = (next() % 2000) as f64 - 1000.0;
                    k * std::f64::consts::FRAC_PI_2 + (u - 0.5) * 1e-6
                }
                _ => (u - 0.5) * 1e-7,
            };
            for (got, want, what) in [(cos64(x), x.cos(), "cos"), (sin64(x), x.sin(), "sin")] {
                if want == 0.0 || got.signum() != want.signum() {
                    assert!(
                        (got - want).abs() < 1e-300,
                        "{what}64({x:e}) = {got:e}, std {want:e}"
                    );
                    continue;
                }
                let d = ulps(got, want);
                worst = worst.max(d);
                assert!(d <= 1, "{what}64({x:e}) = {got:e}, std {want:e}: {d} ulps");
            }
        }
        assert!(worst <= 1);
    }

    #[test]
    fn cos64_sin64_special_values_and_exact_points() {
        assert_eq!(cos64(0.0), 1.0);
        assert_eq!(sin64(0.0).to_bits(), 0);
        assert_eq!(sin64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert!(cos64(f64::NAN).is_nan() && sin64(f64::INFINITY).is_nan());
        assert!(cos64(TRIG_MAX * 2.0).is_nan());
        // Reproducibility: the same bits every call (no state, no library).
        let xs = [1.0, 1e5 + 0.25, -3.0, 7.0e5, 0.785, 2.356];
        let a: Vec<u64> = xs
            .iter()
            .map(|&x| cos64(x).to_bits() ^ sin64(x).to_bits())
            .collect();
        let b: Vec<u64> = xs
            .iter()
            .map(|&x| cos64(x).to_bits() ^ sin64(x).to_bits())
            .collect();
        assert_eq!(a, b);
        // The three-part constants are fdlibm's bit patterns.
        assert_eq!(PIO2_1.to_bits(), 0x3FF921FB54400000);
        assert_eq!(PIO2_1T.to_bits(), 0x3DD0B4611A626331);
        assert_eq!(PIO2_2.to_bits(), 0x3DD0B4611A600000);
        assert_eq!(PIO2_2T.to_bits(), 0x3BA3198A2E037073);
        assert_eq!(PIO2_3.to_bits(), 0x3BA3198A2E000000);
        assert_eq!(PIO2_3T.to_bits(), 0x397B839A252049C1);
        assert_eq!(INVPIO2.to_bits(), 0x3FE45F306DC9C883);
    }
}
