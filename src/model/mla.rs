//! Gated multi-head latent attention without rotary embedding (MODEL.md §6.5), absorbed form
//! on every path. The chunk's cache rows `[normalised latent | k_pe]` are written at their
//! absolute slots first; query t then attends over slots 0 … t.

use super::state::MlaCache;
use super::weights::{MlaMats, MlaVecs};
use super::{Dims, Exec};

/// The MLA form this engine uses (part of the numerics identity, FORMATS.md §9.1).
pub const MLA_FORM: &str = "absorbed";

/// Runs the MLA layer on `x` ([T, H], RMS-normed) and writes `out` ([T, H]). The rows are
/// the batch's segments in order: `parts` gives each segment's cache, first position `pos0`
/// and row count `n` (the counts sum to T); a segment's rows are positions `pos0 … pos0+n−1`,
/// written to its own cache (which must hold `pos0 + n` rows) and attending over it alone.
/// Projections run over all rows; threads split heads.
pub fn forward(
    ex: &Exec,
    d: &Dims,
    m: &MlaMats<'_>,
    v: &MlaVecs,
    parts: &mut [(&mut MlaCache, usize, usize)],
    x: &[f32],
    out: &mut [f32],
) {
    let t = x.len() / d.h;
    let row = d.mla_row();
    let (hm, dq, dv) = (d.hm, d.dq, d.dv);
    // Projections of x: the query's low rank, [latent | k_pe] and the output gate, one job.
    let mut cq = vec![0f32; t * d.rq];
    let mut c = vec![0f32; t * row];
    let mut gl = vec![0f32; if m.g_proj.is_some() { t * hm * dv } else { 0 }];
    match &m.g_proj {
        Some(g) => ex.matmul_same_x(
            &[&m.q_a_proj, &m.kv_a_proj_with_mqa, g],
            x,
            &mut [&mut cq, &mut c, &mut gl],
        ),
        None => ex.matmul_same_x(
            &[&m.q_a_proj, &m.kv_a_proj_with_mqa],
            x,
            &mut [&mut cq, &mut c],
        ),
    }
    // 1. query: low rank, RMSNorm with eps 1e-6 (the official norm's default), up
    let mut cqn = vec![0f32; t * d.rq];
    ex.rmsnorm(&cq, &v.q_a_layernorm, 1e-6, &mut cqn);
    let mut qall = vec![0f32; t * hm * dq];
    ex.matmul(&m.q_b_proj, &cqn, &mut qall);

    // 2-4. per segment: its cache rows, then attention over its own cache
    let mut o = vec![0f32; t * hm * dv];
    let mut r0 = 0;
    for (cache, pos0, n) in parts.iter_mut() {
        let (rs, re) = (r0 * hm, (r0 + *n) * hm);
        attend(
            ex,
            d,
            m,
            v,
            cache,
            &c[r0 * row..(r0 + *n) * row],
            &qall[rs * dq..re * dq],
            *pos0,
            &mut o[rs * dv..re * dv],
        );
        r0 += *n;
    }

    // 5. output gate (no norm)
    if m.g_proj.is_some() {
        ex.sigmoid_gate(&mut o, &gl);
    }

    // 6. output projection
    ex.matmul(&m.o_proj, &o, out);
}

/// Steps 2–4 of §6.5 for one segment: `c` ([n, Rkv + Dr] projections) normed into the cache
/// at positions `pos0 …`, then each query of `qall` ([n, Hm, Dq]) attends over slots 0 … its
/// position; writes `o` [n, Hm, Dv]. Heads in parallel.
#[allow(clippy::too_many_arguments)]
fn attend(
    ex: &Exec,
    d: &Dims,
    m: &MlaMats<'_>,
    v: &MlaVecs,
    cache: &mut MlaCache,
    c: &[f32],
    qall: &[f32],
    pos0: usize,
    o: &mut [f32],
) {
    let row = d.mla_row();
    let (hm, dq, dn, dv, rkv) = (d.hm, d.dq, d.dn, d.dv, d.rkv);
    let t = c.len() / row;
    // 2. [latent | k_pe]; only the latent is normed (eps 1e-6); rows go to slots pos0 …
    for p in 0..t {
        let src = &c[p * row..(p + 1) * row];
        let dst = &mut cache.rows[(pos0 + p) * row..(pos0 + p + 1) * row];
        ex.rmsnorm(&src[..rkv], &v.kv_a_layernorm, 1e-6, &mut dst[..rkv]);
        dst[rkv..].copy_from_slice(&src[rkv..]);
    }

    // 3-4. attention per head (absorbed form), no rotation; heads in parallel
    let kvb = m.kv_b_proj.data;
    let rows = &cache.rows[..(pos0 + t) * row];
    let mut by_head = vec![0f32; hm * t * dv]; // [head][position][Dv]
    ex.pool().for_each_chunk(&mut by_head, t * dv, |h, oh| {
        let kb0 = h * (dn + dv) * rkv;
        let w_kb = &kvb[kb0..kb0 + dn * rkv];
        let w_v = &kvb[kb0 + dn * rkv..kb0 + (dn + dv) * rkv];
        let mut qcat = vec![0f32; row];
        let mut coef = vec![0f64; dn];
        let mut obar = vec![0f32; rkv];
        let mut scores = vec![0f64; pos0 + t];
        for p in 0..t {
            let n = pos0 + p + 1;
            let qh = &qall[(p * hm + h) * dq..(p * hm + h + 1) * dq];
            // q̂ = W_kb,hᵀ q_nope, summed over rows d ascending
            for (c, &q) in coef.iter_mut().zip(&qh[..dn]) {
                *c = q as f64;
            }
            ex.mix_rows_bf16(&coef, w_kb, rkv, &mut qcat[..rkv]);
            qcat[rkv..].copy_from_slice(&qh[dn..]);
            let sc = &mut scores[..n];
            ex.attn_scores(&qcat, rows, row, d.sq, sc);
            ex.softmax(sc);
            ex.mix_rows(sc, rows, row, &mut obar);
            ex.matmul_bf16(w_v, dv, rkv, &obar, &mut oh[p * dv..(p + 1) * dv]);
        }
    });
    for h in 0..hm {
        for p in 0..t {
            o[(p * hm + h) * dv..(p * hm + h + 1) * dv]
                .copy_from_slice(&by_head[(h * t + p) * dv..(h * t + p + 1) * dv]);
        }
    }
}
