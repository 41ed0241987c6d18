//! Kimi Delta Attention layer (MODEL.md §6.4) over a chunk of T positions, carrying Sᵀ and the
//! conv history in [`KdaState`]. Projections are matrix products over the chunk (each weight
//! read once per chunk); the recurrence runs position by position, so any chunking gives the
//! same bits as one-token decode (§7).

use super::state::KdaState;
use super::weights::{KdaMats, KdaVecs};
use super::{Dims, Exec};

/// Runs the KDA layer on `x` ([T, H], already RMS-normed) and writes `out` ([T, H]). The rows
/// are the batch's segments in order: `parts` gives each segment's state and row count (the
/// counts sum to T). Projections run over all rows; the conv and the recurrence run per
/// segment over its own history and state.
pub fn forward(
    ex: &Exec,
    d: &Dims,
    m: &KdaMats<'_>,
    v: &KdaVecs,
    parts: &mut [(&mut KdaState, usize)],
    x: &[f32],
    out: &mut [f32],
) {
    let t = x.len() / d.h;
    let (pk, dk, hk) = (d.pk, d.dk, d.hk);
    // 1. projections (each weight read once for the chunk)
    let mut q = vec![0f32; t * pk];
    let mut k = vec![0f32; t * pk];
    let mut vv = vec![0f32; t * pk];
    let mut fa = vec![0f32; t * dk];
    let mut z = vec![0f32; t * pk];
    let mut b = vec![0f32; t * hk];
    let mut gl = vec![0f32; t * pk];
    ex.matmul_same_x(
        &[
            &m.q_proj,
            &m.k_proj,
            &m.v_proj,
            &m.f_a_proj,
            &m.b_proj,
            &m.g_proj,
        ],
        x,
        &mut [&mut q, &mut k, &mut vv, &mut fa, &mut b, &mut gl],
    );
    ex.matmul(&m.f_b_proj, &fa, &mut z);

    // 2. short causal depthwise conv + SiLU; the history keeps pre-conv inputs, oldest first
    let hn = (d.kc - 1) * pk;
    let mut qc = vec![0f32; t * pk];
    let mut kc = vec![0f32; t * pk];
    let mut vc = vec![0f32; t * pk];
    let mut r0 = 0;
    for (st, n) in parts.iter_mut() {
        let r = r0 * pk..(r0 + *n) * pk;
        let (hq, rest) = st.conv.split_at_mut(hn);
        let (hkk, hv) = rest.split_at_mut(hn);
        ex.kda_short_conv(&q[r.clone()], &v.q_conv, d.kc, hq, &mut qc[r.clone()]);
        ex.kda_short_conv(&k[r.clone()], &v.k_conv, d.kc, hkk, &mut kc[r.clone()]);
        ex.kda_short_conv(&vv[r.clone()], &v.v_conv, d.kc, hv, &mut vc[r]);
        r0 += *n;
    }

    // 3-4. L2Norm per head on q and k; the query scale sD on q only
    ex.l2norm_heads(&mut qc, dk, d.sd);
    ex.l2norm_heads(&mut kc, dk, 1.0);

    // 5. β per head
    let mut beta = vec![0f32; t * hk];
    ex.sigmoid(&b, &mut beta);

    // 6. bounded decay per (h, d), A_log indexed by head
    let mut alpha = vec![0f32; t * pk];
    ex.kda_decay(&z, &v.a_log, &v.dt_bias, d.gmin, dk, &mut alpha);

    // 7. recurrence: positions in order, heads independent, output from the updated state
    let mut o = vec![0f32; t * pk];
    let mut r0 = 0;
    for (st, n) in parts.iter_mut() {
        let (r, rb) = (r0 * pk..(r0 + *n) * pk, r0 * hk..(r0 + *n) * hk);
        ex.kda_recurrence(
            &mut st.st,
            &qc[r.clone()],
            &kc[r.clone()],
            &vc[r.clone()],
            &alpha[r.clone()],
            &beta[rb],
            dk,
            &mut o[r],
        );
        r0 += *n;
    }

    // 8. head-wise RMSNorm with the shared Dk gain, then the output gate
    let mut on = vec![0f32; t * pk];
    ex.rmsnorm(&o, &v.o_norm, d.eps, &mut on);
    ex.sigmoid_gate(&mut on, &gl);

    // 9. output projection
    ex.matmul(&m.o_proj, &on, out);
}
