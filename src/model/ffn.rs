//! The SiTU-GLU MLP (MODEL.md §6.6): the dense FFN of the first `first_k_dense_replace`
//! layers and the fused shared experts of a MoE layer (§6.7 step 9). Rows run in sub-blocks of
//! [`SUB_ROWS`], so the gate and up activations of only one sub-block are ever held.

use super::weights::{Bf16Mat, MlpMats};
use super::{Dims, Exec, SUB_ROWS};

/// out = W_down · SiTU-GLU(W_gate x, W_up x) over T rows; `x` [T, H], `out` [T, H]. Each
/// sub-block of rows goes through gate, up and down before the next (rows are independent).
pub fn situ_mlp(ex: &Exec, d: &Dims, m: &MlpMats<'_>, x: &[f32], out: &mut [f32]) {
    let h = d.h;
    for (xb, ob) in x.chunks(SUB_ROWS * h).zip(out.chunks_mut(SUB_ROWS * h)) {
        let hh = situ_gate_up(ex, d, &m.gate_proj, &m.up_proj, xb);
        ex.matmul(&m.down_proj, &hh, ob);
    }
}

/// SiTU-GLU(W_gate x, W_up x) over T rows, `[T, W]` (W = `gate.rows`): the first half of
/// [`situ_mlp`], so that a streamed trunk can hand the down projection over separately. The
/// gate and up products run in sub-blocks of [`SUB_ROWS`] rows.
pub fn situ_gate_up(
    ex: &Exec,
    d: &Dims,
    gate: &Bf16Mat<'_>,
    up: &Bf16Mat<'_>,
    x: &[f32],
) -> Vec<f32> {
    let t = x.len() / d.h;
    let w = gate.rows;
    let sub = t.min(SUB_ROWS);
    let mut a = vec![0f32; sub * w];
    let mut b = vec![0f32; sub * w];
    let mut hh = vec![0f32; t * w];
    for (xb, hb) in x.chunks(SUB_ROWS * d.h).zip(hh.chunks_mut(SUB_ROWS * w)) {
        let n = hb.len();
        ex.matmul_same_x(&[gate, up], xb, &mut [&mut a[..n], &mut b[..n]]);
        ex.situ_glu(&a[..n], &b[..n], d.beta1, d.beta2, hb);
    }
    hh
}
