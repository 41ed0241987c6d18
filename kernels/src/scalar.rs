//! The scalar path: every kernel as plain, portable Rust, one IEEE operation at a time in the
//! order MODEL.md writes it. This is the reference the AVX2 and NEON twins (same function
//! names and signatures in `x86_64::avx2` and `aarch64::neon`) must equal bit for bit.
//!
//! Functions here are serial and work on one block, row or head; [`crate::Kernels`] checks
//! shapes, splits the work over the thread pool and picks the path.

use crate::mxfp4::{e8m0_scale, E2M1, GROUP};
use crate::num::{bf16_to_f32, exp64 as e64, reduce16, rnd, sig64 as s64, DOT_LANES};
use crate::num::{silu64 as silu1, situ_glu1, tanh64 as t64};

pub(crate) use crate::num::{dot_bf16, dot_f32};

mod tiled;
pub(crate) use tiled::{matmul_bf16, matmul_mxfp4};

/// An input vector as the products see it: fp32 values widened exactly, or values already
/// widened to f64 (the same numbers).
pub(crate) trait XVals {
    fn at(&self, i: usize) -> f64;
}
impl XVals for [f32] {
    #[inline(always)]
    fn at(&self, i: usize) -> f64 {
        self[i] as f64
    }
}
impl XVals for [f64] {
    #[inline(always)]
    fn at(&self, i: usize) -> f64 {
        self[i]
    }
}

/// `dot` of one MXFP4 row (packed \[cols/2\], scales \[cols/32\]) with x \[cols\]: the exact
/// product (E2M1 × 2^(s−127)) × x\[c\] goes into lane c mod 16 (FORMATS.md §5).
pub(crate) fn dot_mxfp4<X: XVals + ?Sized>(packed: &[u8], scales: &[u8], x: &X) -> f64 {
    let mut acc = [0.0f64; DOT_LANES];
    for (g, &s) in scales.iter().enumerate() {
        let scale = e8m0_scale(s);
        let mut lut = [0.0f64; 16];
        for (code, v) in lut.iter_mut().enumerate() {
            *v = E2M1[code] as f64 * scale;
        }
        let bytes = &packed[g * GROUP / 2..(g + 1) * GROUP / 2];
        let x0 = g * GROUP;
        // A group is 32 columns, two whole 16-lane blocks: column c lands in lane c mod 16.
        for (j, &b) in bytes.iter().enumerate() {
            let c = 2 * j;
            acc[c % DOT_LANES] += lut[(b & 15) as usize] * x.at(x0 + c);
            acc[(c + 1) % DOT_LANES] += lut[(b >> 4) as usize] * x.at(x0 + c + 1);
        }
    }
    reduce16(&acc)
}

/// `dot` of a BF16 row with x given widened to f64 (the same products as [`dot_bf16`]).
fn dot_bf16_x64(w: &[u16], x: &[f64]) -> f64 {
    let mut acc = [0.0f64; DOT_LANES];
    for (i, (&w, &x)) in w.iter().zip(x).enumerate() {
        acc[i % DOT_LANES] += bf16_to_f32(w) as f64 * x;
    }
    reduce16(&acc)
}

/// Matrix-vector block (T = 1): w \[nr, cols\] BF16, x64 = x widened to f64 by
/// [`prep_x_bf16`] → out \[nr\].
pub(crate) fn matvec_bf16(w: &[u16], cols: usize, x64: &[f64], out: &mut [f32]) {
    let x64 = &x64[..cols];
    for (o, wr) in out.iter_mut().zip(w.chunks_exact(cols)) {
        *o = rnd(dot_bf16_x64(wr, x64));
    }
}

/// Appends x widened to f64 for [`matvec_bf16`] (column order).
pub(crate) fn prep_x_bf16(x: &[f32], out: &mut Vec<f64>) {
    out.extend(x.iter().map(|&v| v as f64));
}

/// Appends x widened to f64 for [`matvec_mxfp4`] (column order).
pub(crate) fn prep_x_mxfp4(x: &[f32], out: &mut Vec<f64>) {
    out.extend(x.iter().map(|&v| v as f64));
}

/// MXFP4 matrix-vector block (T = 1): packed \[nr, cols/2\], scales \[nr, cols/32\], x64 from
/// [`prep_x_mxfp4`] → out \[nr\].
pub(crate) fn matvec_mxfp4(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    x64: &[f64],
    out: &mut [f32],
) {
    let (pb, sb) = (cols / 2, cols / GROUP);
    for (r, o) in out.iter_mut().enumerate() {
        *o = rnd(dot_mxfp4(
            &packed[r * pb..(r + 1) * pb],
            &scales[r * sb..(r + 1) * sb],
            x64,
        ));
    }
}

/// Matrix block with fp32 weights; layout as `matmul_bf16`.
pub(crate) fn matmul_f32(w: &[f32], cols: usize, x: &[f32], out: &mut [f32]) {
    let nr = w.len() / cols;
    for (r, wr) in w.chunks_exact(cols).enumerate() {
        for (t, xt) in x.chunks_exact(cols).enumerate() {
            out[t * nr + r] = rnd(dot_f32(wr, xt));
        }
    }
}

/// y\[i\] = exp64(x\[i\]).
pub(crate) fn exp64(x: &[f64], y: &mut [f64]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = e64(x);
    }
}

/// y\[i\] = tanh64(x\[i\]).
pub(crate) fn tanh64(x: &[f64], y: &mut [f64]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = t64(x);
    }
}

/// y\[i\] = sig64(x\[i\]).
pub(crate) fn sig64(x: &[f64], y: &mut [f64]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = s64(x);
    }
}

/// y\[i\] = silu64(x\[i\]).
pub(crate) fn silu64(x: &[f64], y: &mut [f64]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = silu1(x);
    }
}

/// y\[i\] = rnd(sig64(x\[i\])).
pub(crate) fn sigmoid(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = rnd(s64(x as f64));
    }
}

/// y\[i\] = rnd(silu64(x\[i\])).
pub(crate) fn silu(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = rnd(silu1(x as f64));
    }
}

/// y\[i\] = SiTU-GLU(a\[i\], b\[i\]) (MODEL.md §6.1).
pub(crate) fn situ_glu(a: &[f32], b: &[f32], beta1: f64, beta2: f64, y: &mut [f32]) {
    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
        *y = situ_glu1(a, b, beta1, beta2);
    }
}

/// o\[i\] = rnd((f64)o\[i\] × sig64(g\[i\])) (MODEL.md §6.4 step 8, §6.5 step 5).
pub(crate) fn sigmoid_gate(o: &mut [f32], g: &[f32]) {
    for (o, &g) in o.iter_mut().zip(g) {
        *o = rnd(*o as f64 * s64(g as f64));
    }
}

/// p\[i\] = rnd((f64)p\[i\] + (f64)y\[i\]) (MODEL.md §6.3 steps 4 and 7, §6.7 step 10).
pub(crate) fn add(p: &mut [f32], y: &[f32]) {
    for (p, &y) in p.iter_mut().zip(y) {
        *p = rnd(*p as f64 + y as f64);
    }
}

/// y\[i\] = BF16 widening of w\[i\] (MODEL.md §5.1, §6.2).
pub(crate) fn widen_bf16(w: &[u16], y: &mut [f32]) {
    for (y, &w) in y.iter_mut().zip(w) {
        *y = bf16_to_f32(w);
    }
}

/// One row of RMSNorm (MODEL.md §6.1): ss = dot(x, x); r = 1/sqrt(ss/n + eps);
/// y\[i\] = rnd(((f64)x\[i\] × r) × (f64)w\[i\]).
pub(crate) fn rmsnorm(x: &[f32], w: &[f32], eps: f64, y: &mut [f32]) {
    let ss = dot_f32(x, x);
    let r = 1.0 / (ss / x.len() as f64 + eps).sqrt();
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = rnd((x as f64 * r) * w as f64);
    }
}

/// One head of L2Norm with a scale (MODEL.md §6.1, §6.4 steps 3–4):
/// r = 1/sqrt(dot(x, x) + 1e-6); x\[i\] = rnd(((f64)x\[i\] × r) × scale).
pub(crate) fn l2norm_scale(x: &mut [f32], scale: f64) {
    let r = 1.0 / (dot_f32(x, x) + 1e-6).sqrt();
    for x in x.iter_mut() {
        *x = rnd((*x as f64 * r) * scale);
    }
}

/// The two-pass softmax of MODEL.md §6.5 step 4, in place over f64 scores:
/// m = max; e = exp64(s − m); Z = seqsum(e) ascending; p = e / Z.
pub(crate) fn softmax(s: &mut [f64]) {
    let Some(&first) = s.first() else { return };
    let mut m = first;
    for &v in s.iter() {
        if v > m {
            m = v;
        }
    }
    let mut z = 0.0f64;
    for v in s.iter_mut() {
        *v = e64(*v - m);
        z += *v;
    }
    for v in s.iter_mut() {
        *v /= z;
    }
}

/// y\[c\] = rnd(seqsum_{i ascending}(coef\[i\] × (f64)rows\[i·stride + c\])) for c < y.len()
/// (MODEL.md §5.3: attention value mix over positions, §6.5).
pub(crate) fn mix_rows(coef: &[f64], rows: &[f32], stride: usize, y: &mut [f32]) {
    for (c, y) in y.iter_mut().enumerate() {
        let mut acc = 0.0f64;
        for (i, &p) in coef.iter().enumerate() {
            acc += p * rows[i * stride + c] as f64;
        }
        *y = rnd(acc);
    }
}

/// As [`mix_rows`] with BF16 rows (absorbed MLA query, MODEL.md §6.5).
pub(crate) fn mix_rows_bf16(coef: &[f64], rows: &[u16], stride: usize, y: &mut [f32]) {
    for (c, y) in y.iter_mut().enumerate() {
        let mut acc = 0.0f64;
        for (i, &p) in coef.iter().enumerate() {
            acc += p * bf16_to_f32(rows[i * stride + c]) as f64;
        }
        *y = rnd(acc);
    }
}

/// y\[c\] = rnd(seqsum_{i in order}(coef\[i\] × (f64)srcs\[i\]\[c\])) (MoE aggregate §6.7 step 6,
/// AttnRes mix §6.1).
pub(crate) fn mix_slices(coef: &[f64], srcs: &[&[f32]], y: &mut [f32]) {
    for (c, y) in y.iter_mut().enumerate() {
        let mut acc = 0.0f64;
        for (&p, src) in coef.iter().zip(srcs) {
            acc += p * src[c] as f64;
        }
        *y = rnd(acc);
    }
}

/// out\[s\] = dot(q, rows\[s·stride .. s·stride + q.len()\]) × scale (MODEL.md §6.5 scores).
pub(crate) fn attn_scores(q: &[f32], rows: &[f32], stride: usize, scale: f64, out: &mut [f64]) {
    for (s, o) in out.iter_mut().enumerate() {
        *o = dot_f32(q, &rows[s * stride..s * stride + q.len()]) * scale;
    }
}

/// KDA short causal depthwise conv + SiLU (MODEL.md §6.4 step 2) over T positions.
/// u \[T, C\] pre-conv inputs, taps \[C, kc\], hist \[(kc−1), C\] previous inputs oldest first,
/// y \[T, C\]: y\[t\]\[c\] = rnd(silu64(seqsum_{m=0…kc−1}((f64)taps\[c\]\[kc−1−m\] × (f64)u(t−m)))).
/// The history is read, not updated.
pub(crate) fn short_conv(u: &[f32], taps: &[f32], kc: usize, hist: &[f32], y: &mut [f32]) {
    let c_n = taps.len() / kc;
    let t_n = u.len() / c_n;
    for t in 0..t_n {
        for c in 0..c_n {
            let mut acc = 0.0f64;
            for m in 0..kc {
                // u(t − m): inside the chunk, or history slot (kc − 1) + (t − m).
                let v = if m <= t {
                    u[(t - m) * c_n + c]
                } else {
                    hist[(kc - 1 + t - m) * c_n + c]
                };
                acc += taps[c * kc + (kc - 1 - m)] as f64 * v as f64;
            }
            y[t * c_n + c] = rnd(silu1(acc));
        }
    }
}

/// KDA bounded decay for one position (MODEL.md §6.4 step 6): for head h and channel d,
/// a_h = exp64(A_log\[h\]); g = gmin × sig64(a_h × ((f64)z + (f64)dt_bias));
/// alpha = rnd(exp64(g)).
pub(crate) fn kda_decay(
    z: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    gmin: f64,
    head_dim: usize,
    alpha: &mut [f32],
) {
    for (h, ((zh, bh), ah)) in z
        .chunks_exact(head_dim)
        .zip(dt_bias.chunks_exact(head_dim))
        .zip(alpha.chunks_exact_mut(head_dim))
        .enumerate()
    {
        let a = e64(a_log[h] as f64);
        for ((o, &z), &b) in ah.iter_mut().zip(zh).zip(bh) {
            let g = gmin * s64(a * (z as f64 + b as f64));
            *o = rnd(e64(g));
        }
    }
}

/// One position of the KDA recurrence for one head (MODEL.md §6.4 step 7). `st` is Sᵀ,
/// \[Dk (value j)\]\[Dk (key i)\]; q, k, v, alpha \[Dk\]; o \[Dk\]. For each j: decay, read
/// u = dot(k, ST\[j\]), δ = rnd(β × ((f64)v\[j\] − u)), write ST\[j\]\[i\] += k\[i\]·δ (rounded),
/// o\[j\] = rnd(dot(q, ST\[j\])) from the updated row.
pub(crate) fn kda_step(
    st: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    alpha: &[f32],
    beta: f32,
    o: &mut [f32],
) {
    let dk = q.len();
    for (j, row) in st.chunks_exact_mut(dk).enumerate() {
        for (s, &a) in row.iter_mut().zip(alpha) {
            *s = rnd(a as f64 * *s as f64);
        }
        let u = dot_f32(k, row);
        let delta = rnd(beta as f64 * (v[j] as f64 - u));
        for (s, &ki) in row.iter_mut().zip(k) {
            *s = rnd(*s as f64 + ki as f64 * delta as f64);
        }
        o[j] = rnd(dot_f32(q, row));
    }
}
