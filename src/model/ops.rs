//! The numeric operations the forward pass uses, as one thin layer over `k3-kernels`.
//!
//! TEMPORARY: until the kernels crate lands, this file holds scalar implementations written
//! to MODEL.md §5 so the model can be checked against the fixtures; each function will become
//! a one-line call into `k3-kernels` (one implementation of each operation, covered by the
//! ISA gates).

/// f64 → fp32 round to nearest even (MODEL.md §5.1).
#[inline]
pub fn rnd(x: f64) -> f32 {
    x as f32
}

/// The canonical 16-lane f64 inner product (MODEL.md §5.2) of two fp32 vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f64; 16];
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        acc[i & 15] += *x as f64 * *y as f64;
    }
    reduce16(&acc)
}

/// `dot` of a BF16 row (widened exactly) and an fp32 vector (MODEL.md §5.2).
pub fn dot_bf16(w: &[u16], x: &[f32]) -> f64 {
    debug_assert_eq!(w.len(), x.len());
    let mut acc = [0f64; 16];
    for (i, (a, b)) in w.iter().zip(x).enumerate() {
        acc[i & 15] += bf16(*a) as f64 * *b as f64;
    }
    reduce16(&acc)
}

fn reduce16(acc: &[f64; 16]) -> f64 {
    let b = |j: usize| (acc[j] + acc[j + 4]) + (acc[j + 8] + acc[j + 12]);
    (b(0) + b(1)) + (b(2) + b(3))
}

/// BF16 bits → fp32 (exact: `bits << 16`).
#[inline]
pub fn bf16(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// exp64 of MODEL.md §5.4.
pub fn exp64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    if x < -708.0 {
        return 0.0;
    }
    let kk = (x * 1.4426950408889634 + 0.5).floor();
    let ln2_hi = f64::from_bits(0x3FE62E42FEE00000);
    let ln2_lo = f64::from_bits(0x3DEA39EF35793C76);
    let r = (x - kk * ln2_hi) - kk * ln2_lo;
    let mut c = [0f64; 14];
    let mut f = 1f64;
    c[0] = 1.0;
    for (j, cj) in c.iter_mut().enumerate().skip(1) {
        f *= j as f64;
        *cj = 1.0 / f;
    }
    c[1] = 1.0;
    let mut p = c[13];
    for j in (0..13).rev() {
        p = p * r + c[j];
    }
    let k = kk as i64;
    p * f64::from_bits(((k + 1023) as u64) << 52)
}

/// tanh64 of MODEL.md §5.4.
pub fn tanh64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a < f64::from_bits(0x3F20000000000000) {
        let t = x * x;
        return x - (t * x) / 3.0;
    }
    if a > 20.0 {
        return if x < 0.0 { -1.0 } else { 1.0 };
    }
    let e = exp64(-(2.0 * a));
    let t = (1.0 - e) / (1.0 + e);
    if x < 0.0 {
        -t
    } else {
        t
    }
}

/// sig64 of MODEL.md §5.4.
pub fn sig64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + exp64(-x))
    } else {
        let e = exp64(x);
        e / (1.0 + e)
    }
}

/// silu64 = x × sig64(x) (MODEL.md §5.4).
pub fn silu64(x: f64) -> f64 {
    x * sig64(x)
}

/// y[t][r] = rnd(dot(W[r], x[t])) for a BF16 matrix W [rows, cols] and `t` input rows.
pub fn matmul_bf16(w: &[u16], rows: usize, cols: usize, x: &[f32], t: usize, y: &mut [f32]) {
    debug_assert_eq!(w.len(), rows * cols);
    debug_assert_eq!(x.len(), t * cols);
    debug_assert_eq!(y.len(), t * rows);
    for p in 0..t {
        let xr = &x[p * cols..(p + 1) * cols];
        for r in 0..rows {
            y[p * rows + r] = rnd(dot_bf16(&w[r * cols..(r + 1) * cols], xr));
        }
    }
}

/// RMSNorm of MODEL.md §6.1 on each row of width `w.len()`.
pub fn rmsnorm_rows(x: &[f32], w: &[f32], eps: f64, y: &mut [f32]) {
    let n = w.len();
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let ss = dot(xr, xr);
        let r = 1.0 / (ss / n as f64 + eps).sqrt();
        for i in 0..n {
            yr[i] = rnd((xr[i] as f64 * r) * w[i] as f64);
        }
    }
}

/// The L2Norm factor r = 1/sqrt(dot(x, x) + 1e-6) (MODEL.md §6.1).
pub fn l2norm_factor(x: &[f32]) -> f64 {
    1.0 / (dot(x, x) + 1e-6).sqrt()
}

/// SiTU-GLU of MODEL.md §6.1, element-wise.
pub fn situ_glu(a: &[f32], b: &[f32], beta1: f64, beta2: f64, y: &mut [f32]) {
    for i in 0..y.len() {
        let av = a[i] as f64;
        let bv = b[i] as f64;
        let big_a = (beta1 * tanh64(av / beta1)) * sig64(av);
        let big_b = beta2 * tanh64(bv / beta2);
        y[i] = rnd(big_a * big_b);
    }
}

/// E2M1 magnitudes (FORMATS.md §5).
const E2M1: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

fn e2m1(n: u8) -> f64 {
    let m = E2M1[(n & 7) as usize];
    if n & 8 != 0 {
        -m
    } else {
        m
    }
}

/// y[t][r] = rnd(dot(W[r], x[t])) for an MXFP4 matrix (FORMATS.md §5): `packed` [rows, cols/2],
/// `scales` [rows, cols/32]. Scales must have been scanned for 255 already.
pub fn matmul_mxfp4(
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    t: usize,
    y: &mut [f32],
) {
    for p in 0..t {
        let xr = &x[p * cols..(p + 1) * cols];
        for r in 0..rows {
            let mut acc = [0f64; 16];
            for c in 0..cols {
                let byte = packed[r * cols / 2 + c / 2];
                let nib = if c % 2 == 0 { byte & 15 } else { byte >> 4 };
                let s = scales[r * cols / 32 + c / 32] as i32 - 127;
                let wv = e2m1(nib) * 2f64.powi(s);
                acc[c & 15] += wv * xr[c] as f64;
            }
            y[p * rows + r] = rnd(reduce16(&acc));
        }
    }
}

/// First (row, group) whose E8M0 scale byte is 255, for a scale tensor of `groups` per row.
pub fn e8m0_scan(scales: &[u8], groups: usize) -> Option<(usize, usize)> {
    scales
        .iter()
        .position(|&s| s == 255)
        .map(|i| (i / groups, i % groups))
}

/// Agg of MODEL.md §6.1 over `sources` (each width H, in source order) with folded vector `f`.
pub fn agg(sources: &[&[f32]], f: &[f32], eps: f64, out: &mut [f32]) {
    let h = f.len();
    let n = sources.len();
    let mut s = vec![0f64; n];
    for (i, v) in sources.iter().enumerate() {
        let r = 1.0 / (dot(v, v) / h as f64 + eps).sqrt();
        s[i] = r * dot(v, f);
    }
    let mut m = s[0];
    for &x in &s[1..] {
        if x > m {
            m = x;
        }
    }
    let e: Vec<f64> = s.iter().map(|&x| exp64(x - m)).collect();
    let mut z = 0f64;
    for &x in &e {
        z += x;
    }
    let p: Vec<f64> = e.iter().map(|&x| x / z).collect();
    for d in 0..h {
        let mut acc = 0f64;
        for i in 0..n {
            acc += p[i] * sources[i][d] as f64;
        }
        out[d] = rnd(acc);
    }
}

/// Softmax of MODEL.md §6.5 step 4 over f64 scores, in place (two passes).
pub fn softmax64(s: &mut [f64]) {
    let mut m = s[0];
    for &x in &s[1..] {
        if x > m {
            m = x;
        }
    }
    let mut z = 0f64;
    for x in s.iter_mut() {
        *x = exp64(*x - m);
        z += *x;
    }
    for x in s.iter_mut() {
        *x /= z;
    }
}

/// KDA short conv + SiLU (MODEL.md §6.4 step 2) over `t` positions of `c` channels.
/// `taps` [c][kc]; `hist` [kc-1][c] pre-conv inputs, oldest first, updated in place.
pub fn conv_silu(taps: &[f32], kc: usize, hist: &mut [f32], x: &[f32], t: usize, y: &mut [f32]) {
    let c = taps.len() / kc;
    let hn = kc - 1;
    let input = |p: isize, ch: usize, hist: &[f32]| -> f32 {
        if p >= 0 {
            x[p as usize * c + ch]
        } else {
            hist[(hn as isize + p) as usize * c + ch]
        }
    };
    for p in 0..t {
        for ch in 0..c {
            let mut acc = 0f64;
            for m in 0..kc {
                acc += taps[ch * kc + kc - 1 - m] as f64
                    * input(p as isize - m as isize, ch, hist) as f64;
            }
            y[p * c + ch] = rnd(silu64(acc));
        }
    }
    let mut nh = vec![0f32; hn * c];
    for s in 0..hn {
        let p = t as isize - hn as isize + s as isize;
        for ch in 0..c {
            nh[s * c + ch] = input(p, ch, hist);
        }
    }
    hist.copy_from_slice(&nh);
}

/// One KDA recurrence step for one head (MODEL.md §6.4 step 7); `st` is Sᵀ [Dk][Dk].
pub fn kda_step(
    st: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    alpha: &[f32],
    beta: f32,
    o: &mut [f32],
) {
    let dk = q.len();
    for j in 0..dk {
        let row = &mut st[j * dk..(j + 1) * dk];
        for i in 0..dk {
            row[i] = rnd(alpha[i] as f64 * row[i] as f64);
        }
        let u = dot(k, row);
        let delta = rnd(beta as f64 * (v[j] as f64 - u));
        for i in 0..dk {
            row[i] = rnd(row[i] as f64 + k[i] as f64 * delta as f64);
        }
        o[j] = rnd(dot(q, row));
    }
}

/// out[c] = rnd(seqsum_{d ascending}((f64)q[d] × W[d][c])) for a BF16 W [q.len(), cols]
/// (the absorbed MLA query, MODEL.md §6.5).
pub fn seqsum_rows_bf16(w: &[u16], cols: usize, q: &[f32], out: &mut [f32]) {
    let mut acc = vec![0f64; cols];
    for (d, &qd) in q.iter().enumerate() {
        let row = &w[d * cols..(d + 1) * cols];
        for c in 0..cols {
            acc[c] += qd as f64 * bf16(row[c]) as f64;
        }
    }
    for c in 0..cols {
        out[c] = rnd(acc[c]);
    }
}

/// out[c] = rnd(seqsum_{s ascending}(p[s] × (f64)rows[s][c])) for c < out.len(), rows of
/// stride `stride` (MODEL.md §6.5 value mix, §6.7 step 6 expert mix).
pub fn weighted_rows(p: &[f64], rows: &[f32], stride: usize, out: &mut [f32]) {
    let n = out.len();
    let mut acc = vec![0f64; n];
    for (s, &ps) in p.iter().enumerate() {
        let row = &rows[s * stride..s * stride + n];
        for c in 0..n {
            acc[c] += ps * row[c] as f64;
        }
    }
    for c in 0..n {
        out[c] = rnd(acc[c]);
    }
}

/// Index of the first maximum (the caller has refused non-finite values).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for i in 1..x.len() {
        if x[i] > x[best] {
            best = i;
        }
    }
    best
}

/// FNV-1a-64 over the little-endian bit patterns of `x`, continuing from `h`.
pub fn fnv1a64_f32(mut h: u64, x: &[f32]) -> u64 {
    for v in x {
        for b in v.to_bits().to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// FNV-1a-64 offset basis.
pub const FNV_OFFSET: u64 = 0xcbf29ce484222325;
