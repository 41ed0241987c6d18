//! The element-wise kernels over [`Simd`], with the names and contracts of `scalar.rs`; the
//! ISA modules instantiate them in their entry points (`simd_entry_points!`).

use super::*;

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn exp64<S: Simd>(x: &[f64], y: &mut [f64]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map64::<S, _>(x, y, Exp) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn tanh64<S: Simd>(x: &[f64], y: &mut [f64]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map64::<S, _>(x, y, Tanh) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn sig64<S: Simd>(x: &[f64], y: &mut [f64]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map64::<S, _>(x, y, Sig) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn silu64<S: Simd>(x: &[f64], y: &mut [f64]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map64::<S, _>(x, y, Silu) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn sigmoid<S: Simd>(x: &[f32], y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map2::<S, _>(x, x, y, Sig) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn silu<S: Simd>(x: &[f32], y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map2::<S, _>(x, x, y, Silu) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn situ_glu<S: Simd>(
    a: &[f32],
    b: &[f32],
    beta1: f64,
    beta2: f64,
    y: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let op = Situ::<S> {
            b1: S::splat(beta1),
            b2: S::splat(beta2),
        };
        map2::<S, _>(a, b, y, op)
    }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn sigmoid_gate<S: Simd>(o: &mut [f32], g: &[f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map2_inplace::<S, _>(o, g, Gate) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn add<S: Simd>(p: &mut [f32], y: &[f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { map2_inplace::<S, _>(p, y, Add) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn rmsnorm<S: Simd>(x: &[f32], w: &[f32], eps: f64, y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let ss = S::dot_f32(x, x);
        let r = S::splat(1.0 / (ss / x.len() as f64 + eps).sqrt());
        map2::<S, _>(x, w, y, NormScale::<S> { r })
    }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn l2norm_scale<S: Simd>(x: &mut [f32], scale: f64) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let r = S::splat(1.0 / (S::dot_f32(x, x) + 1e-6).sqrt());
        let sc = S::splat(scale);
        let n = x.len();
        let mut i = 0;
        while i + S::N <= n {
            let p = x.as_mut_ptr().add(i);
            S::store_f32(p, S::mul(S::mul(S::load_f32(p), r), sc));
            i += S::N;
        }
        if i < n {
            let mut t = [0.0f32; MAX_LANES];
            t[..n - i].copy_from_slice(&x[i..n]);
            S::store_f32(
                t.as_mut_ptr(),
                S::mul(S::mul(S::load_f32(t.as_ptr()), r), sc),
            );
            x[i..n].copy_from_slice(&t[..n - i]);
        }
    }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn softmax<S: Simd>(s: &mut [f64]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let Some(&first) = s.first() else { return };
        let mut m = first;
        for &v in s.iter() {
            if v > m {
                m = v;
            }
        }
        let mv = S::splat(m);
        let n = s.len();
        let mut i = 0;
        while i + S::N <= n {
            let p = s.as_mut_ptr().add(i);
            S::store(p, exp_v::<S>(S::sub(S::load(p), mv)));
            i += S::N;
        }
        for v in &mut s[i..] {
            *v = exp1(*v - m);
        }
        // Z is a seqsum in ascending order, one accumulator: never vectorised.
        let mut z = 0.0f64;
        for &v in s.iter() {
            z += v;
        }
        let zv = S::splat(z);
        let mut i = 0;
        while i + S::N <= n {
            let p = s.as_mut_ptr().add(i);
            S::store(p, S::div(S::load(p), zv));
            i += S::N;
        }
        for v in &mut s[i..] {
            *v /= z;
        }
    }
}

/// Sources of a mix: element c of source i, as a vector of N lanes or one widened value.
pub(crate) trait MixSrc<S: Simd> {
    /// # Safety: the CPU supports the ISA of `S`.
    unsafe fn load(&self, i: usize, c: usize) -> S::V;
    /// # Safety: the CPU supports the ISA of `S`.
    unsafe fn one(&self, i: usize, c: usize) -> f64;
}

struct RowsF32<'a> {
    rows: &'a [f32],
    stride: usize,
}
impl<S: Simd> MixSrc<S> for RowsF32<'_> {
    #[inline(always)]
    unsafe fn load(&self, i: usize, c: usize) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::load_f32(self.rows.as_ptr().add(i * self.stride + c)) }
    }
    #[inline(always)]
    unsafe fn one(&self, i: usize, c: usize) -> f64 {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { *self.rows.get_unchecked(i * self.stride + c) as f64 }
    }
}

struct RowsBf16<'a> {
    rows: &'a [u16],
    stride: usize,
}
impl<S: Simd> MixSrc<S> for RowsBf16<'_> {
    #[inline(always)]
    unsafe fn load(&self, i: usize, c: usize) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::load_bf16(self.rows.as_ptr().add(i * self.stride + c)) }
    }
    #[inline(always)]
    unsafe fn one(&self, i: usize, c: usize) -> f64 {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { crate::num::bf16_to_f32(*self.rows.get_unchecked(i * self.stride + c)) as f64 }
    }
}

struct Slices<'a, 'b> {
    srcs: &'a [&'b [f32]],
}
impl<S: Simd> MixSrc<S> for Slices<'_, '_> {
    #[inline(always)]
    unsafe fn load(&self, i: usize, c: usize) -> S::V {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { S::load_f32(self.srcs.get_unchecked(i).as_ptr().add(c)) }
    }
    #[inline(always)]
    unsafe fn one(&self, i: usize, c: usize) -> f64 {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe { *self.srcs.get_unchecked(i).get_unchecked(c) as f64 }
    }
}

/// y\[c\] = rnd(seqsum_i(coef\[i\] × src_i\[c\])) vectorised across c: every lane keeps its own
/// accumulator and adds the terms in the order of i, exactly like the scalar loop. Columns
/// past the last whole vector use the scalar formula (the same IEEE operations). The caller
/// (`Kernels`) has checked that every (i, c) is in bounds.
///
/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn mix_generic<S: Simd, M: MixSrc<S>>(coef: &[f64], y: &mut [f32], src: M) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let n = y.len();
        let mut c = 0;
        while c + 2 * S::N <= n {
            let (mut a0, mut a1) = (S::splat(0.0), S::splat(0.0));
            for (i, &p) in coef.iter().enumerate() {
                let pv = S::splat(p);
                a0 = S::add(a0, S::mul(pv, src.load(i, c)));
                a1 = S::add(a1, S::mul(pv, src.load(i, c + S::N)));
            }
            S::store_f32(y.as_mut_ptr().add(c), a0);
            S::store_f32(y.as_mut_ptr().add(c + S::N), a1);
            c += 2 * S::N;
        }
        while c + S::N <= n {
            let mut a0 = S::splat(0.0);
            for (i, &p) in coef.iter().enumerate() {
                a0 = S::add(a0, S::mul(S::splat(p), src.load(i, c)));
            }
            S::store_f32(y.as_mut_ptr().add(c), a0);
            c += S::N;
        }
        for (cc, yc) in y.iter_mut().enumerate().skip(c) {
            let mut acc = 0.0f64;
            for (i, &p) in coef.iter().enumerate() {
                acc += p * src.one(i, cc);
            }
            *yc = acc as f32;
        }
    }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn mix_rows<S: Simd>(coef: &[f64], rows: &[f32], stride: usize, y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { mix_generic::<S, _>(coef, y, RowsF32 { rows, stride }) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn mix_rows_bf16<S: Simd>(
    coef: &[f64],
    rows: &[u16],
    stride: usize,
    y: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { mix_generic::<S, _>(coef, y, RowsBf16 { rows, stride }) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn mix_slices<S: Simd>(coef: &[f64], srcs: &[&[f32]], y: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe { mix_generic::<S, _>(coef, y, Slices { srcs }) }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn attn_scores<S: Simd>(
    q: &[f32],
    rows: &[f32],
    stride: usize,
    scale: f64,
    out: &mut [f64],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        for (s, o) in out.iter_mut().enumerate() {
            *o = S::dot_f32(q, &rows[s * stride..s * stride + q.len()]) * scale;
        }
    }
}

/// KDA short conv + SiLU, vectorised across channels (the sum over taps stays in tap order
/// per lane: current input first). Lanes past the last channel are padded with zeros.
///
/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn short_conv<S: Simd>(
    u: &[f32],
    taps: &[f32],
    kc: usize,
    hist: &[f32],
    y: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let c_n = taps.len() / kc;
        let t_n = u.len() / c_n;
        let mut c0 = 0;
        while c0 < c_n {
            let lanes = S::N.min(c_n - c0);
            for t in 0..t_n {
                let mut acc = S::splat(0.0);
                for m in 0..kc {
                    let mut tv = [0.0f64; MAX_LANES];
                    let mut xv = [0.0f32; MAX_LANES];
                    for l in 0..lanes {
                        let c = c0 + l;
                        tv[l] = taps[c * kc + (kc - 1 - m)] as f64;
                        xv[l] = if m <= t {
                            u[(t - m) * c_n + c]
                        } else {
                            hist[(kc - 1 + t - m) * c_n + c]
                        };
                    }
                    acc = S::add(acc, S::mul(S::load(tv.as_ptr()), S::load_f32(xv.as_ptr())));
                }
                let mut out = [0.0f32; MAX_LANES];
                S::store_f32(out.as_mut_ptr(), silu_v::<S>(acc));
                y[t * c_n + c0..t * c_n + c0 + lanes].copy_from_slice(&out[..lanes]);
            }
            c0 += S::N;
        }
    }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn kda_decay<S: Simd>(
    z: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    gmin: f64,
    head_dim: usize,
    alpha: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        for (h, ((zh, bh), ah)) in z
            .chunks_exact(head_dim)
            .zip(dt_bias.chunks_exact(head_dim))
            .zip(alpha.chunks_exact_mut(head_dim))
            .enumerate()
        {
            let op = Decay::<S> {
                a: S::splat(exp1(a_log[h] as f64)),
                gmin: S::splat(gmin),
            };
            map2::<S, _>(zh, bh, ah, op);
        }
    }
}

/// # Safety: the CPU supports the ISA of `S`; the slice lengths are those `Kernels` checks
/// (the scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
pub(crate) unsafe fn kda_step<S: Simd>(
    st: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    alpha: &[f32],
    beta: f32,
    o: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let dk = q.len();
        for (j, row) in st.chunks_exact_mut(dk).enumerate() {
            map2_inplace::<S, _>(row, alpha, DecayState);
            let u = S::dot_f32(k, row);
            let delta = (beta as f64 * (v[j] as f64 - u)) as f32;
            map2_inplace::<S, _>(
                row,
                k,
                DeltaWrite::<S> {
                    delta: S::splat(delta as f64),
                },
            );
            o[j] = S::dot_f32(q, row) as f32;
        }
    }
}
