//! Router and Stable LatentMoE (MODEL.md §6.7) over a chunk of T positions. Each distinct
//! expert of the chunk is fetched once (in sub-batches no larger than the expert source
//! allows) and run over the positions that selected it; every position still sums its
//! experts in its own selection order, so chunking never changes a bit.

use super::experts::ExpertSource;
use super::ffn;
use super::ops;
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

/// Router steps 1–3 of MODEL.md §6.7 for one position: `r` are the router logits
/// rnd(dot(W_router[e], x)), `bias` the correction bias. Errors on a NaN key (the caller
/// names layer and position).
pub fn select(d: &Dims, r: &[f32], bias: &[f32]) -> std::result::Result<Selection, String> {
    let s: Vec<f32> = r.iter().map(|&x| ops::rnd(ops::sig64(x as f64))).collect();
    let mut keys = Vec::with_capacity(s.len());
    for (e, (&se, &be)) in s.iter().zip(bias).enumerate() {
        let key = se as f64 + be as f64;
        if key.is_nan() {
            return Err(format!("router key of expert {e} is NaN"));
        }
        keys.push((key, e as u32));
    }
    // key descending, ties to the lower expert index; a stable full order, then the first Kt
    keys.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
    let experts: Vec<u32> = keys[..d.kt].iter().map(|k| k.1).collect();
    let weights = if d.renorm && d.kt > 1 {
        let mut z = 0f64;
        for &e in &experts {
            z += s[e as usize] as f64;
        }
        experts
            .iter()
            .map(|&e| ops::rnd((s[e as usize] as f64 / (z + 1e-20)) * d.rsf))
            .collect()
    } else {
        experts
            .iter()
            .map(|&e| ops::rnd(s[e as usize] as f64 * d.rsf))
            .collect()
    };
    Ok(Selection { experts, weights })
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
    t: usize,
    pos0: usize,
    out: &mut [f32],
) -> Result<()> {
    let (e_n, kt, l, inter) = (d.e, d.kt, d.l, d.i);
    // 1-3. router on the full width, selection, weights
    let mut r = vec![0f32; t * e_n];
    ex.matmul(&m.router, x, t, &mut r);
    let mut sel = Vec::with_capacity(t);
    for p in 0..t {
        let s = select(d, &r[p * e_n..(p + 1) * e_n], &v.bias).map_err(|msg| {
            Error::invalid(format!(
                "layer {layer}, position {}: {msg} (the checkpoint produced a non-finite activation)",
                pos0 + p
            ))
        })?;
        sel.push(s);
    }
    let requests: Vec<u32> = sel.iter().flat_map(|s| s.experts.iter().copied()).collect();
    experts.note_requests(layer, &requests);

    // 4. latent down-projection
    let mut zl = vec![0f32; t * l];
    ex.matmul(&m.down_l, x, t, &mut zl);

    // 5. experts: distinct experts in first-request order, each over its positions
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
            for (gi, &e) in group.iter().enumerate() {
                let ev = &views[gi];
                let users: Vec<(usize, usize)> = (0..t)
                    .flat_map(|p| sel[p].experts.iter().position(|&x| x == e).map(|k| (p, k)))
                    .collect();
                let n = users.len();
                let mut xe = vec![0f32; n * l];
                for (j, &(p, _)) in users.iter().enumerate() {
                    xe[j * l..(j + 1) * l].copy_from_slice(&zl[p * l..(p + 1) * l]);
                }
                let mut a = vec![0f32; n * inter];
                let mut b = vec![0f32; n * inter];
                ex.matmul_mxfp4(&ev.w1, &xe, n, &mut a);
                ex.matmul_mxfp4(&ev.w3, &xe, n, &mut b);
                let mut hh = vec![0f32; n * inter];
                ops::situ_glu(&a, &b, d.beta1, d.beta2, &mut hh);
                let mut ye = vec![0f32; n * l];
                ex.matmul_mxfp4(&ev.w2, &hh, n, &mut ye);
                for (j, &(p, k)) in users.iter().enumerate() {
                    let dst = (p * kt + k) * l;
                    y[dst..dst + l].copy_from_slice(&ye[j * l..(j + 1) * l]);
                }
            }
            Ok(())
        })?;
    }

    // 6-7. aggregate in latent space in selection order, then norm the aggregate
    let mut u = vec![0f32; t * l];
    for p in 0..t {
        let w: Vec<f64> = sel[p].weights.iter().map(|&w| w as f64).collect();
        ops::weighted_rows(
            &w,
            &y[p * kt * l..(p + 1) * kt * l],
            l,
            &mut u[p * l..(p + 1) * l],
        );
    }
    if let Some(g) = &v.routed_expert_norm {
        let un = u.clone();
        ops::rmsnorm_rows(&un, g, d.eps, &mut u);
    }

    // 8. up-projection
    ex.matmul(&m.up_l, &u, t, out);

    // 9-10. shared experts on the original x, unweighted
    if let Some((g, up, dn)) = &m.shared {
        let mut sh = vec![0f32; t * d.h];
        ffn::situ_mlp(ex, d, g, up, dn, x, t, &mut sh);
        for (o, s) in out.iter_mut().zip(&sh) {
            *o = ops::rnd(*o as f64 + *s as f64);
        }
    }
    Ok(())
}
