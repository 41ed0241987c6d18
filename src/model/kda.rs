//! Kimi Delta Attention layer (MODEL.md §6.4) over a chunk of T positions, carrying Sᵀ and the
//! conv history in [`KdaState`]. Projections are matrix products over the chunk (each weight
//! read once per chunk); the recurrence runs position by position, so any chunking gives the
//! same bits as one-token decode (§7).

use super::ops;
use super::state::KdaState;
use super::weights::{KdaMats, KdaVecs};
use super::{Dims, Exec};

/// Runs the KDA layer on `x` ([T, H], already RMS-normed) and writes `out` ([T, H]).
pub fn forward(
    ex: &Exec,
    d: &Dims,
    m: &KdaMats<'_>,
    v: &KdaVecs,
    st: &mut KdaState,
    x: &[f32],
    t: usize,
    out: &mut [f32],
) {
    let (pk, dk, hk) = (d.pk, d.dk, d.hk);
    // 1. projections
    let mut q = vec![0f32; t * pk];
    let mut k = vec![0f32; t * pk];
    let mut vv = vec![0f32; t * pk];
    let mut fa = vec![0f32; t * dk];
    let mut z = vec![0f32; t * pk];
    let mut b = vec![0f32; t * hk];
    let mut gl = vec![0f32; t * pk];
    ex.matmul(&m.q_proj, x, t, &mut q);
    ex.matmul(&m.k_proj, x, t, &mut k);
    ex.matmul(&m.v_proj, x, t, &mut vv);
    ex.matmul(&m.f_a_proj, x, t, &mut fa);
    ex.matmul(&m.f_b_proj, &fa, t, &mut z);
    ex.matmul(&m.b_proj, x, t, &mut b);
    ex.matmul(&m.g_proj, x, t, &mut gl);

    // 2. short causal depthwise conv + SiLU, history = pre-conv inputs, oldest first
    let hn = (d.kc - 1) * pk;
    let mut qc = vec![0f32; t * pk];
    let mut kc = vec![0f32; t * pk];
    let mut vc = vec![0f32; t * pk];
    let (hq, rest) = st.conv.split_at_mut(hn);
    let (hkk, hv) = rest.split_at_mut(hn);
    ops::conv_silu(&v.q_conv, d.kc, hq, &q, t, &mut qc);
    ops::conv_silu(&v.k_conv, d.kc, hkk, &k, t, &mut kc);
    ops::conv_silu(&v.v_conv, d.kc, hv, &vv, t, &mut vc);

    // 3-4. L2Norm per head on q and k, query scale on q only
    for p in 0..t {
        for h in 0..hk {
            let r0 = p * pk + h * dk;
            let qh = &mut qc[r0..r0 + dk];
            let rq = ops::l2norm_factor(qh);
            for e in qh.iter_mut() {
                *e = ops::rnd((*e as f64 * rq) * d.sd);
            }
            let kh = &mut kc[r0..r0 + dk];
            let rk = ops::l2norm_factor(kh);
            for e in kh.iter_mut() {
                *e = ops::rnd(*e as f64 * rk);
            }
        }
    }

    // 5. β per head
    let beta: Vec<f32> = b.iter().map(|&x| ops::rnd(ops::sig64(x as f64))).collect();

    // 6. bounded decay per (h, d), A_log indexed by head
    let mut alpha = vec![0f32; t * pk];
    for p in 0..t {
        for h in 0..hk {
            let a_h = v.a[h];
            for c in h * dk..(h + 1) * dk {
                let zc = z[p * pk + c] as f64 + v.dt_bias[c] as f64;
                let g = d.gmin * ops::sig64(a_h * zc);
                alpha[p * pk + c] = ops::rnd(ops::exp64(g));
            }
        }
    }

    // 7. recurrence, positions in order, each head independent
    let mut o = vec![0f32; t * pk];
    for p in 0..t {
        for h in 0..hk {
            let r0 = p * pk + h * dk;
            ops::kda_step(
                &mut st.st[h * dk * dk..(h + 1) * dk * dk],
                &qc[r0..r0 + dk],
                &kc[r0..r0 + dk],
                &vc[r0..r0 + dk],
                &alpha[r0..r0 + dk],
                beta[p * hk + h],
                &mut o[r0..r0 + dk],
            );
        }
    }

    // 8. head-wise RMSNorm with the shared Dk gain, then the output gate
    let mut on = vec![0f32; t * pk];
    ops::rmsnorm_rows(&o, &v.o_norm, d.eps, &mut on);
    for (oc, g) in on.iter_mut().zip(&gl) {
        *oc = ops::rnd(*oc as f64 * ops::sig64(*g as f64));
    }

    // 9. output projection
    ex.matmul(&m.o_proj, &on, t, out);
}
