//! The element-wise half of the SIMD paths, written once over a small vector trait (after the
//! `memchr` crate's design): each lane performs exactly the IEEE operations of the scalar
//! twin in `scalar.rs`/`num.rs`, in the same order, so every lane's result is bit-identical.
//! The `dot` kernels, whose lane layout is ISA-specific (MODEL.md §5.2), live in the ISA
//! modules and are reached through [`Simd::dot_f32`].
//!
//! Everything here is `#[inline(always)]` and is instantiated inside the ISA modules'
//! `#[target_feature]` entry points, so the intrinsics inline into code compiled for the
//! feature. All functions are `unsafe`: the caller guarantees the CPU has the ISA.

use crate::num::{
    exp64 as exp1, EXP_C, EXP_HI, EXP_LO, LN2_HI, LN2_LO, LOG2E, TANH_BIG, TANH_SMALL,
};

mod kernels;
pub(crate) use kernels::*;

/// Widest vector of any path (AVX2: 4 f64 lanes); tails are staged in arrays this long.
pub(crate) const MAX_LANES: usize = 4;

/// A vector of f64 lanes and the handful of IEEE operations the contract allows.
pub(crate) trait Simd {
    /// f64 lanes.
    type V: Copy;
    /// A per-lane comparison mask.
    type M: Copy;
    /// Number of lanes (≤ [`MAX_LANES`]).
    const N: usize;

    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn splat(x: f64) -> Self::V;
    /// # Safety: the CPU supports the implementing ISA; each pointer is valid for the elements read
    /// or written (the vector width or the count given), any alignment.
    unsafe fn load(p: *const f64) -> Self::V;
    /// # Safety: the CPU supports the implementing ISA; each pointer is valid for the elements read
    /// or written (the vector width or the count given), any alignment.
    unsafe fn store(p: *mut f64, v: Self::V);
    /// N fp32 values widened exactly.
    ///
    /// # Safety: the CPU supports the implementing ISA; each pointer is valid for the elements read
    /// or written (the vector width or the count given), any alignment.
    unsafe fn load_f32(p: *const f32) -> Self::V;
    /// N BF16 patterns widened exactly.
    ///
    /// # Safety: the CPU supports the implementing ISA; each pointer is valid for the elements read
    /// or written (the vector width or the count given), any alignment.
    unsafe fn load_bf16(p: *const u16) -> Self::V;
    /// `rnd` of each lane (round to nearest even) stored as N fp32 values.
    ///
    /// # Safety: the CPU supports the implementing ISA; each pointer is valid for the elements read
    /// or written (the vector width or the count given), any alignment.
    unsafe fn store_f32(p: *mut f32, v: Self::V);
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
    /// Exact round toward −inf (an IEEE conversion, equal to the scalar `floor`).
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn floor(a: Self::V) -> Self::V;
    /// Sign flip (exact).
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn neg(a: Self::V) -> Self::V;
    /// Clears the sign (exact).
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn abs(a: Self::V) -> Self::V;
    /// `t` with the sign bit of `x` OR-ed in (for non-negative `t` this is "t with the sign
    /// of x").
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn or_sign(t: Self::V, x: Self::V) -> Self::V;
    /// Ordered comparisons (false when a lane is NaN).
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn gt(a: Self::V, b: Self::V) -> Self::M;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn lt(a: Self::V, b: Self::V) -> Self::M;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn ge(a: Self::V, b: Self::V) -> Self::M;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn is_nan(a: Self::V) -> Self::M;
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn or_m(a: Self::M, b: Self::M) -> Self::M;
    /// Per lane: `m ? a : b`.
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn select(m: Self::M, a: Self::V, b: Self::V) -> Self::V;
    /// 2^k for integer-valued lanes k in −1022…1023, built from the bit pattern
    /// ((k + 1023) << 52) exactly as the scalar `exp64` does.
    ///
    /// # Safety: the CPU supports the implementing ISA.
    unsafe fn pow2i(k: Self::V) -> Self::V;
    /// The ISA's canonical 16-lane `dot` of two fp32 vectors (MODEL.md §5.2).
    ///
    /// # Safety: the CPU supports the implementing ISA; the slice lengths are those `Kernels` checks
    /// (the scalar twin's contract), so every index used is in bounds; any alignment.
    unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f64;
}

// ----- transcendentals (MODEL.md §5.4), one lane = the scalar function ---------------------

/// `exp64` per lane: special lanes (NaN, > 709, < −708) are computed on 0 and replaced at the
/// end with what the scalar function returns early.
///
/// # Safety: the CPU supports the ISA of `S`.
#[inline(always)]
pub(crate) unsafe fn exp_v<S: Simd>(x: S::V) -> S::V {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let hi = S::gt(x, S::splat(EXP_HI));
        let lo = S::lt(x, S::splat(EXP_LO));
        let nan = S::is_nan(x);
        let xs = S::select(S::or_m(S::or_m(hi, lo), nan), S::splat(0.0), x);
        let kk = S::floor(S::add(S::mul(xs, S::splat(LOG2E)), S::splat(0.5)));
        let r = S::sub(
            S::sub(xs, S::mul(kk, S::splat(LN2_HI))),
            S::mul(kk, S::splat(LN2_LO)),
        );
        let mut p = S::splat(EXP_C[13]);
        let mut j = 13;
        while j > 0 {
            j -= 1;
            p = S::add(S::mul(p, r), S::splat(EXP_C[j]));
        }
        let res = S::mul(p, S::pow2i(kk));
        let res = S::select(hi, S::splat(f64::INFINITY), res);
        let res = S::select(lo, S::splat(0.0), res);
        S::select(nan, x, res)
    }
}

/// `tanh64` per lane (all three branches computed, the scalar one selected).
///
/// # Safety: the CPU supports the ISA of `S`.
#[inline(always)]
pub(crate) unsafe fn tanh_v<S: Simd>(x: S::V) -> S::V {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let one = S::splat(1.0);
        let a = S::abs(x);
        let small = S::lt(a, S::splat(TANH_SMALL));
        let big = S::gt(a, S::splat(TANH_BIG));
        let nan = S::is_nan(x);
        let t = S::mul(x, x);
        let sm = S::sub(x, S::div(S::mul(t, x), S::splat(3.0)));
        let e = exp_v::<S>(S::neg(S::mul(S::splat(2.0), a)));
        let mid = S::or_sign(S::div(S::sub(one, e), S::add(one, e)), x);
        let res = S::select(small, sm, mid);
        let res = S::select(big, S::or_sign(one, x), res);
        S::select(nan, x, res)
    }
}

/// `sig64` per lane.
///
/// # Safety: the CPU supports the ISA of `S`.
#[inline(always)]
pub(crate) unsafe fn sig_v<S: Simd>(x: S::V) -> S::V {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let one = S::splat(1.0);
        let ge = S::ge(x, S::splat(0.0));
        let e = exp_v::<S>(S::select(ge, S::neg(x), x));
        let d = S::add(one, e);
        S::select(ge, S::div(one, d), S::div(e, d))
    }
}

/// `silu64` per lane.
///
/// # Safety: the CPU supports the ISA of `S`.
#[inline(always)]
pub(crate) unsafe fn silu_v<S: Simd>(x: S::V) -> S::V {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { S::mul(x, sig_v::<S>(x)) }
}

// ----- per-lane operations ---------------------------------------------------------------
//
// Closures would not reliably inline into the `#[target_feature]` entry points (and then the
// intrinsics inside them would become calls), so each lane operation is a small type whose
// `apply` is `#[inline(always)]`.

/// A one-input lane operation.
pub(crate) trait Op1<S: Simd> {
    /// # Safety: the CPU supports the ISA of `S`.
    unsafe fn apply(&self, x: S::V) -> S::V;
}

/// A two-input lane operation.
pub(crate) trait Op2<S: Simd> {
    /// # Safety: the CPU supports the ISA of `S`.
    unsafe fn apply(&self, a: S::V, b: S::V) -> S::V;
}

struct Exp;
impl<S: Simd> Op1<S> for Exp {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { exp_v::<S>(x) }
    }
}

struct Tanh;
impl<S: Simd> Op1<S> for Tanh {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { tanh_v::<S>(x) }
    }
}

struct Sig;
impl<S: Simd> Op1<S> for Sig {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { sig_v::<S>(x) }
    }
}
impl<S: Simd> Op2<S> for Sig {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V, _: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { sig_v::<S>(x) }
    }
}

struct Silu;
impl<S: Simd> Op1<S> for Silu {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { silu_v::<S>(x) }
    }
}
impl<S: Simd> Op2<S> for Silu {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V, _: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { silu_v::<S>(x) }
    }
}

/// SiTU-GLU (MODEL.md §6.1): ((β1 × tanh64(a/β1)) × sig64(a)) × (β2 × tanh64(b/β2)).
struct Situ<S: Simd> {
    b1: S::V,
    b2: S::V,
}
impl<S: Simd> Op2<S> for Situ<S> {
    #[inline(always)]
    unsafe fn apply(&self, a: S::V, b: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let big_a = S::mul(
                S::mul(self.b1, tanh_v::<S>(S::div(a, self.b1))),
                sig_v::<S>(a),
            );
            let big_b = S::mul(self.b2, tanh_v::<S>(S::div(b, self.b2)));
            S::mul(big_a, big_b)
        }
    }
}

/// o × sig64(g).
struct Gate;
impl<S: Simd> Op2<S> for Gate {
    #[inline(always)]
    unsafe fn apply(&self, o: S::V, g: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::mul(o, sig_v::<S>(g)) }
    }
}

/// p + y.
struct Add;
impl<S: Simd> Op2<S> for Add {
    #[inline(always)]
    unsafe fn apply(&self, p: S::V, y: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::add(p, y) }
    }
}

/// (x × r) × w (RMSNorm's scaling with the row factor r).
struct NormScale<S: Simd> {
    r: S::V,
}
impl<S: Simd> Op2<S> for NormScale<S> {
    #[inline(always)]
    unsafe fn apply(&self, x: S::V, w: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::mul(S::mul(x, self.r), w) }
    }
}

/// exp64(gmin × sig64(a × (z + dt))) (KDA decay).
struct Decay<S: Simd> {
    a: S::V,
    gmin: S::V,
}
impl<S: Simd> Op2<S> for Decay<S> {
    #[inline(always)]
    unsafe fn apply(&self, z: S::V, dt: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { exp_v::<S>(S::mul(self.gmin, sig_v::<S>(S::mul(self.a, S::add(z, dt))))) }
    }
}

/// α × s (KDA state decay; operands in that order).
struct DecayState;
impl<S: Simd> Op2<S> for DecayState {
    #[inline(always)]
    unsafe fn apply(&self, s: S::V, alpha: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::mul(alpha, s) }
    }
}

/// s + k × δ (KDA delta write).
struct DeltaWrite<S: Simd> {
    delta: S::V,
}
impl<S: Simd> Op2<S> for DeltaWrite<S> {
    #[inline(always)]
    unsafe fn apply(&self, s: S::V, k: S::V) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::add(s, S::mul(k, self.delta)) }
    }
}

// ----- slice drivers -------------------------------------------------------------------------

/// y\[i\] = f(x\[i\]) over f64 slices; the tail runs through the same vector code on a padded copy.
///
/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn map64<S: Simd, F: Op1<S>>(x: &[f64], y: &mut [f64], f: F) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = x.len().min(y.len());
        let mut i = 0;
        while i + S::N <= n {
            S::store(y.as_mut_ptr().add(i), f.apply(S::load(x.as_ptr().add(i))));
            i += S::N;
        }
        if i < n {
            let mut tx = [0.0f64; MAX_LANES];
            let mut ty = [0.0f64; MAX_LANES];
            tx[..n - i].copy_from_slice(&x[i..n]);
            S::store(ty.as_mut_ptr(), f.apply(S::load(tx.as_ptr())));
            y[i..n].copy_from_slice(&ty[..n - i]);
        }
    }
}

/// y\[i\] = rnd(f(a\[i\], b\[i\])) over fp32 slices (b may be `a` for one-input maps).
///
/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn map2<S: Simd, F: Op2<S>>(a: &[f32], b: &[f32], y: &mut [f32], f: F) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = y.len();
        let mut i = 0;
        while i + S::N <= n {
            let v = f.apply(
                S::load_f32(a.as_ptr().add(i)),
                S::load_f32(b.as_ptr().add(i)),
            );
            S::store_f32(y.as_mut_ptr().add(i), v);
            i += S::N;
        }
        if i < n {
            let mut ta = [0.0f32; MAX_LANES];
            let mut tb = [0.0f32; MAX_LANES];
            let mut ty = [0.0f32; MAX_LANES];
            ta[..n - i].copy_from_slice(&a[i..n]);
            tb[..n - i].copy_from_slice(&b[i..n]);
            S::store_f32(
                ty.as_mut_ptr(),
                f.apply(S::load_f32(ta.as_ptr()), S::load_f32(tb.as_ptr())),
            );
            y[i..n].copy_from_slice(&ty[..n - i]);
        }
    }
}

/// In place: y\[i\] = rnd(f(y\[i\], b\[i\])).
///
/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn map2_inplace<S: Simd, F: Op2<S>>(y: &mut [f32], b: &[f32], f: F) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = y.len();
        let mut i = 0;
        while i + S::N <= n {
            let p = y.as_mut_ptr().add(i);
            S::store_f32(p, f.apply(S::load_f32(p), S::load_f32(b.as_ptr().add(i))));
            i += S::N;
        }
        if i < n {
            let mut ta = [0.0f32; MAX_LANES];
            let mut tb = [0.0f32; MAX_LANES];
            ta[..n - i].copy_from_slice(&y[i..n]);
            tb[..n - i].copy_from_slice(&b[i..n]);
            S::store_f32(
                ta.as_mut_ptr(),
                f.apply(S::load_f32(ta.as_ptr()), S::load_f32(tb.as_ptr())),
            );
            y[i..n].copy_from_slice(&ta[..n - i]);
        }
    }
}

/// Declares the ISA module's `#[target_feature]` entry points for every kernel written in this
/// module, with the names and signatures of `scalar.rs`.
macro_rules! simd_entry_points {
    ($feature:literal, $S:ty) => {
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn exp64(x: &[f64], y: &mut [f64]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::exp64::<$S>(x, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn tanh64(x: &[f64], y: &mut [f64]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::tanh64::<$S>(x, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn sig64(x: &[f64], y: &mut [f64]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::sig64::<$S>(x, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn silu64(x: &[f64], y: &mut [f64]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::silu64::<$S>(x, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn sigmoid(x: &[f32], y: &mut [f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::sigmoid::<$S>(x, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn silu(x: &[f32], y: &mut [f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::silu::<$S>(x, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn situ_glu(a: &[f32], b: &[f32], beta1: f64, beta2: f64, y: &mut [f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::situ_glu::<$S>(a, b, beta1, beta2, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn sigmoid_gate(o: &mut [f32], g: &[f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::sigmoid_gate::<$S>(o, g) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn add(p: &mut [f32], y: &[f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::add::<$S>(p, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn rmsnorm(x: &[f32], w: &[f32], eps: f64, y: &mut [f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::rmsnorm::<$S>(x, w, eps, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn l2norm_scale(x: &mut [f32], scale: f64) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::l2norm_scale::<$S>(x, scale) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn softmax(s: &mut [f64]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::softmax::<$S>(s) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn mix_rows(coef: &[f64], rows: &[f32], stride: usize, y: &mut [f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::mix_rows::<$S>(coef, rows, stride, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn mix_rows_bf16(
            coef: &[f64],
            rows: &[u16],
            stride: usize,
            y: &mut [f32],
        ) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::mix_rows_bf16::<$S>(coef, rows, stride, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn mix_slices(coef: &[f64], srcs: &[&[f32]], y: &mut [f32]) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::mix_slices::<$S>(coef, srcs, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn attn_scores(
            q: &[f32],
            rows: &[f32],
            stride: usize,
            scale: f64,
            out: &mut [f64],
        ) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::attn_scores::<$S>(q, rows, stride, scale, out) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn short_conv(
            u: &[f32],
            taps: &[f32],
            kc: usize,
            hist: &[f32],
            y: &mut [f32],
        ) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::short_conv::<$S>(u, taps, kc, hist, y) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn kda_decay(
            z: &[f32],
            a_log: &[f32],
            dt_bias: &[f32],
            gmin: f64,
            head_dim: usize,
            alpha: &mut [f32],
        ) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::kda_decay::<$S>(z, a_log, dt_bias, gmin, head_dim, alpha) }
        }
        /// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
        /// (the scalar twin's contract), so every index used is in bounds; any alignment.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn kda_step(
            st: &mut [f32],
            q: &[f32],
            k: &[f32],
            v: &[f32],
            alpha: &[f32],
            beta: f32,
            o: &mut [f32],
        ) {
            // SAFETY: this function's `# Safety` contract is the caller's promise.
            unsafe { crate::simd::kda_step::<$S>(st, q, k, v, alpha, beta, o) }
        }
    };
}
pub(crate) use simd_entry_points;
