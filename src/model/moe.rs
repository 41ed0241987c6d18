//! Router and Stable LatentMoE (MODEL.md §6.7) over a chunk of T positions. Each distinct
//! expert of the chunk is fetched once (in sub-batches no larger than the expert source
//! allows) and run over the positions that selected it; the experts the source hands over
//! together (those it holds, then those whose reads landed) are computed together (one
//! parallel job for all gate/up products, one for all down products: threads split rows of
//! every expert, each output element still formed by one thread).
//! Every position sums its experts in its own selection order, so neither chunking nor the
//! batching changes a bit.

use super::experts::ExpertSource;
use super::ffn;
use super::weights::{MoeMats, MoeVecs};
use super::{Dims, Exec, SUB_ROWS};
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

/// Runs the MoE block of layer `layer` on `x` ([T, H], RMS-normed; `at(r)` names row r's
/// position in messages); writes `out` [T, H]. Errors: a NaN router key (exit 2) or a failed expert fetch
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
    at: &dyn Fn(usize) -> String,
    out: &mut [f32],
) -> Result<()> {
    let t = x.len() / d.h;
    let (e_n, kt, l) = (d.e, d.kt, d.l);
    // 1. router on the full width: independent sigmoids (with the latent down-projection of
    //    step 4, which reads the same x, in one job)
    let mut r = vec![0f32; t * e_n];
    let mut zl = vec![0f32; t * l];
    ex.matmul_same_x(&[&m.router, &m.down_l], x, &mut [&mut r, &mut zl]);
    let mut s = vec![0f32; t * e_n];
    ex.sigmoid(&r, &mut s);
    // 2-3. selection from biased keys, weights from unbiased scores
    let mut sel = Vec::with_capacity(t);
    for p in 0..t {
        let one = select(d, &s[p * e_n..(p + 1) * e_n], &v.bias).map_err(|msg| {
            Error::invalid(format!(
                "layer {layer}, {}: {msg}: non-finite activation, the checkpoint is not usable",
                at(p)
            ))
        })?;
        sel.push(one);
    }
    let requests: Vec<u32> = sel.iter().flat_map(|s| s.experts.iter().copied()).collect();
    experts.note_requests(layer, &requests)?;

    // 4. latent down-projection: computed with the router above

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
        // The source hands over the experts it holds first and the others as their reads
        // land; each output (position, slot) is formed by one expert whatever the grouping.
        experts.with_experts(layer, group, &mut |ids, views| {
            // The (position, slot) pairs of each expert, cut into pieces of at most
            // SUB_ROWS rows, and the pieces into runs of at most SUB_ROWS·Kt rows: one run's
            // activations are held at a time, whatever the chunk.
            let users: Vec<Vec<(usize, usize)>> = ids
                .iter()
                .map(|&e| {
                    (0..t)
                        .filter_map(|p| sel[p].experts.iter().position(|&x| x == e).map(|k| (p, k)))
                        .collect()
                })
                .collect();
            let pieces: Vec<(usize, &[(usize, usize)])> = users
                .iter()
                .enumerate()
                .flat_map(|(j, u)| u.chunks(SUB_ROWS).map(move |c| (j, c)))
                .collect();
            let cap = SUB_ROWS * kt;
            let mut start = 0;
            while start < pieces.len() {
                let (mut end, mut total) = (start, 0);
                while end < pieces.len() && (end == start || total + pieces[end].1.len() <= cap) {
                    total += pieces[end].1.len();
                    end += 1;
                }
                run_experts(ex, d, views, &pieces[start..end], &zl, &mut y);
                start = end;
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
    if let Some(shared) = &m.shared {
        let mut sh = vec![0f32; t * d.h];
        ffn::situ_mlp(ex, d, shared, x, &mut sh);
        ex.add(out, &sh);
    }
    Ok(())
}

/// Step 5 for one run of expert pieces: each piece `(j, users)` is expert `views[j]` over its
/// (position, slot) users; inputs gathered from `zl` ([T, L]), the gate and up products of
/// every piece in one parallel job, SiTU-GLU, every down product in one job, and each output
/// written to `y` at `[position][slot][L]`. Every output row is formed by its expert alone,
/// so the cut into pieces and runs never changes a bit.
fn run_experts(
    ex: &Exec,
    d: &Dims,
    views: &[super::experts::ExpertView<'_>],
    run: &[(usize, &[(usize, usize)])],
    zl: &[f32],
    y: &mut [f32],
) {
    let (l, inter, kt) = (d.l, d.i, d.kt);
    let counts: Vec<usize> = run.iter().map(|x| x.1.len()).collect();
    let total: usize = counts.iter().sum();
    let mut xe = vec![0f32; total * l];
    for (j, &(p, _)) in run.iter().flat_map(|x| x.1.iter()).enumerate() {
        xe[j * l..(j + 1) * l].copy_from_slice(&zl[p * l..(p + 1) * l]);
    }
    let xs = pieces(&xe, &counts, l);
    let mut a = vec![0f32; total * inter];
    let mut b = vec![0f32; total * inter];
    {
        let mut ws = Vec::with_capacity(2 * run.len());
        let mut xin = Vec::with_capacity(2 * run.len());
        let mut ys = Vec::with_capacity(2 * run.len());
        for ((&(j, _), x), (ya, yb)) in run.iter().zip(&xs).zip(
            split_rows(&mut a, &counts, inter)
                .into_iter()
                .zip(split_rows(&mut b, &counts, inter)),
        ) {
            ws.extend([views[j].w1, views[j].w3]);
            xin.extend([*x, *x]);
            ys.extend([ya, yb]);
        }
        ex.matmul_mxfp4_many(&ws, &xin, &mut ys);
    }
    let mut hh = vec![0f32; total * inter];
    ex.situ_glu(&a, &b, d.beta1, d.beta2, &mut hh);
    let mut ye = vec![0f32; total * l];
    {
        let w2: Vec<_> = run.iter().map(|&(j, _)| views[j].w2).collect();
        let hs = pieces(&hh, &counts, inter);
        let mut ys = split_rows(&mut ye, &counts, l);
        ex.matmul_mxfp4_many(&w2, &hs, &mut ys);
    }
    for (j, &(p, k)) in run.iter().flat_map(|x| x.1.iter()).enumerate() {
        let dst = (p * kt + k) * l;
        y[dst..dst + l].copy_from_slice(&ye[j * l..(j + 1) * l]);
    }
}

/// `v` cut into consecutive pieces of `counts[j] · width` values.
fn pieces<'a>(v: &'a [f32], counts: &[usize], width: usize) -> Vec<&'a [f32]> {
    let mut o = 0;
    counts
        .iter()
        .map(|&n| {
            let s = &v[o..o + n * width];
            o += n * width;
            s
        })
        .collect()
}

/// As [`pieces`], mutable.
fn split_rows<'a>(v: &'a mut [f32], counts: &[usize], width: usize) -> Vec<&'a mut [f32]> {
    let mut rest = v;
    counts
        .iter()
        .map(|&n| {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(n * width);
            rest = tail;
            head
        })
        .collect()
}
