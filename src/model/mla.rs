//! Gated multi-head latent attention without rotary embedding (MODEL.md §6.5), absorbed form
//! on every path. The chunk's cache rows `[normalised latent | k_pe]` are written at their
//! absolute slots first; query t then attends over slots 0 … t.

use super::ops;
use super::state::MlaCache;
use super::weights::{MlaMats, MlaVecs};
use super::{Dims, Exec};

/// The MLA form this engine uses (part of the numerics identity, FORMATS.md §9.1).
pub const MLA_FORM: &str = "absorbed";

/// Runs the MLA layer on `x` ([T, H], RMS-normed) for positions `pos0 … pos0+T−1`, writing
/// those cache rows, and writes `out` ([T, H]). The cache must hold `pos0 + T` rows.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    ex: &Exec,
    d: &Dims,
    m: &MlaMats<'_>,
    v: &MlaVecs,
    cache: &mut MlaCache,
    x: &[f32],
    t: usize,
    pos0: usize,
    out: &mut [f32],
) {
    let row = d.mla_row();
    let (hm, dq, dn, dv, rkv) = (d.hm, d.dq, d.dn, d.dv, d.rkv);
    // 1. query: low-rank, norm (eps 1e-6), up
    let mut cq = vec![0f32; t * d.rq];
    ex.matmul(&m.q_a_proj, x, t, &mut cq);
    let mut cqn = vec![0f32; t * d.rq];
    ops::rmsnorm_rows(&cq, &v.q_a_layernorm, 1e-6, &mut cqn);
    let mut qall = vec![0f32; t * hm * dq];
    ex.matmul(&m.q_b_proj, &cqn, t, &mut qall);

    // 2. latent + k_pe; only the latent is normed (eps 1e-6); rows go to slots pos0 …
    let mut c = vec![0f32; t * row];
    ex.matmul(&m.kv_a_proj_with_mqa, x, t, &mut c);
    for p in 0..t {
        let src = &c[p * row..(p + 1) * row];
        let dst = &mut cache.rows[(pos0 + p) * row..(pos0 + p + 1) * row];
        ops::rmsnorm_rows(&src[..rkv], &v.kv_a_layernorm, 1e-6, &mut dst[..rkv]);
        dst[rkv..].copy_from_slice(&src[rkv..]);
    }

    // 4. attention per position and head (absorbed form)
    let kvb = m.kv_b_proj;
    let mut o = vec![0f32; t * hm * dv];
    let mut qcat = vec![0f32; row];
    let mut obar = vec![0f32; rkv];
    for p in 0..t {
        let n = pos0 + p + 1;
        let mut scores = vec![0f64; n];
        for h in 0..hm {
            let qh = &qall[p * hm * dq + h * dq..p * hm * dq + (h + 1) * dq];
            let kb0 = h * (dn + dv) * rkv;
            let w_kb = &kvb.data[kb0..kb0 + dn * rkv];
            ops::seqsum_rows_bf16(w_kb, rkv, &qh[..dn], &mut qcat[..rkv]);
            qcat[rkv..].copy_from_slice(&qh[dn..]);
            for (s, sc) in scores.iter_mut().enumerate() {
                *sc = ops::dot(&qcat, &cache.rows[s * row..(s + 1) * row]) * d.sq;
            }
            ops::softmax64(&mut scores);
            ops::weighted_rows(&scores, &cache.rows[..n * row], row, &mut obar);
            let wv0 = kb0 + dn * rkv;
            let w_v = &kvb.data[wv0..wv0 + dv * rkv];
            let oh = &mut o[p * hm * dv + h * dv..p * hm * dv + (h + 1) * dv];
            ops::matmul_bf16(w_v, dv, rkv, &obar, 1, oh);
        }
    }

    // 5. output gate (no norm)
    if let Some(g) = &m.g_proj {
        let mut gl = vec![0f32; t * hm * dv];
        ex.matmul(g, x, t, &mut gl);
        for (oc, g) in o.iter_mut().zip(&gl) {
            *oc = ops::rnd(*oc as f64 * ops::sig64(*g as f64));
        }
    }

    // 6. output projection
    ex.matmul(&m.o_proj, &o, t, out);
}
