//! Router and Stable LatentMoE (MODEL.md §6.7) over a chunk of T positions. Each distinct
//! expert of the chunk is fetched once (in sub-batches no larger than the expert source
//! allows) and run over the positions that selected it; every position still sums its
//! experts in its own selection order, so chunking never changes a bit.

use super::experts::ExpertSource;
use super::ffn;
use super::weights::{MoeMats, MoeVecs};
use super::{Dims, Exec};
use crate::error::{Error, Result};

/// The experts chosen for one position, in selection order (key descending, ties to the lower
/// index), with their combine weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub experts: Vec<u32>,
    pub weights: Vec<f32>,
}

/// Router steps 2–3 of MODEL.md §6.7 for one position: `s` are the router scores
/// rnd(sig64(r_e)), `bias` the correction bias. Selection uses the biased keys, the weights
/// the unbiased scores. Errors on a NaN key (the caller names layer and position).
pub fn select(d: &Dims, s: &[f32], bias: &[f32]) -> std::result::Result<Selection, String> {
    let sel = k3_kernels::moe_select(s, bias, d.kt).map_err(|e| e.message)?;
    let mut weights = vec![0f32; sel.len()];
    k3_kernels::moe_weights(s, &sel, d.renorm, d.rsf, &mut weights);
    Ok(Selection {
        experts: sel.into_iter().map(|e| e as u32).collect(),
        weights,
    })
}

/// Runs the MoE block of layer `layer` on `x` ([T, H], RMS-normed) for positions starting at
/// `pos0`; writes `out` [T, H]. Errors: a NaN router key (exit 2) or a failed expert fetch
/// (whatever the source reports); no position is ever computed with an expert missing.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    ex: &Exec,
    d: &Dims,
    layer: usize,
    m: &MoeMats<'_>,
    v: &MoeVecs,
    experts: &mut dyn ExpertSource,
    x: &[f32],
    pos0: usize,
    out: &mut [f32],
) -> Result<()> {
    let t = x.len() / d.h;
    let (e_n, kt, l, inter) = (d.e, d.kt, d.l, d.i);
    // 1. router on the full width: independent sigmoids
    let mut r = vec![0f32; t * e_n];
    ex.matmul(&m.router, x, &mut r);
    let mut s = vec![0f32; t * e_n];
    ex.sigmoid(&r, &mut s);
    // 2-3. selection from biased keys, weights from unbiased scores
    let mut sel = Vec::with_capacity(t);
    for p in 0..t {
        let one = select(d, &s[p * e_n..(p + 1) * e_n], &v.bias).map_err(|msg| {
            Error::invalid(format!(
                "layer {layer}, position {}: {msg}: non-finite activation, the checkpoint is not usable",
                pos0 + p
            ))
        })?;
        sel.push(one);
    }
    let requests: Vec<u32> = sel.iter().flat_map(|s| s.experts.iter().copied()).collect();
    experts.note_requests(layer, &requests)?;

    // 4. latent down-projection
    let mut zl = vec![0f32; t * l];
    ex.matmul(&m.down_l, x, &mut zl);

    // 5. experts: each distinct expert once per chunk (first-request order), over the positions
    //    that selected it; outputs kept per (position, selection slot)
    let mut distinct: Vec<u32> = Vec::new();
    for &e in &requests {
        if !distinct.contains(&e) {
            distinct.push(e);
        }
    }
    let mut y = vec![0f32; t * kt * l]; // [position][slot k][L]
    let batch = experts.max_batch().max(1);
    for group in distinct.chunks(batch) {
        experts.with_experts(layer, group, &mut |views| {
            for (ev, &e) in views.iter().zip(group) {
                let users: Vec<(usize, usize)> = (0..t)
                    .filter_map(|p| sel[p].experts.iter().position(|&x| x == e).map(|k| (p, k)))
                    .collect();
                let n = users.len();
                let mut xe = vec![0f32; n * l];
                for (j, &(p, _)) in users.iter().enumerate() {
                    xe[j * l..(j + 1) * l].copy_from_slice(&zl[p * l..(p + 1) * l]);
                }
                let mut a = vec![0f32; n * inter];
                let mut b = vec![0f32; n * inter];
                ex.matmul_mxfp4(&ev.w1, &xe, &mut a);
                ex.matmul_mxfp4(&ev.w3, &xe, &mut b);
                let mut hh = vec![0f32; n * inter];
                ex.situ_glu(&a, &b, d.beta1, d.beta2, &mut hh);
                let mut ye = vec![0f32; n * l];
                ex.matmul_mxfp4(&ev.w2, &hh, &mut ye);
                for (j, &(p, k)) in users.iter().enumerate() {
                    let dst = (p * kt + k) * l;
                    y[dst..dst + l].copy_from_slice(&ye[j * l..(j + 1) * l]);
                }
            }
            Ok(())
        })?;
    }

    // 6-7. aggregate in latent space in selection order, then norm the aggregate (not each
    //      expert)
    let mut u = vec![0f32; t * l];
    for p in 0..t {
        let w: Vec<f64> = sel[p].weights.iter().map(|&w| w as f64).collect();
        let srcs: Vec<&[f32]> = (0..kt)
            .map(|k| &y[(p * kt + k) * l..(p * kt + k + 1) * l])
            .collect();
        ex.mix(&w, &srcs, &mut u[p * l..(p + 1) * l]);
    }
    if let Some(g) = &v.routed_expert_norm {
        let raw = u.clone();
        ex.rmsnorm(&raw, g, d.eps, &mut u);
    }

    // 8. up-projection
    ex.matmul(&m.up_l, &u, out);

    // 9-10. shared experts on the original x, unweighted
    if let Some((g, up, dn)) = &m.shared {
        let mut sh = vec![0f32; t * d.h];
        ffn::situ_mlp(ex, d, g, up, dn, x, &mut sh);
        ex.add(out, &sh);
    }
    Ok(())
}
