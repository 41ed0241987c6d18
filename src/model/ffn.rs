//! The SiTU-GLU MLP (MODEL.md §6.6): the dense FFN of the first `first_k_dense_replace`
//! layers and the fused shared experts of a MoE layer (§6.7 step 9).

use super::weights::{Bf16Mat, MlpMats};
use super::{Dims, Exec};

/// out = W_down · SiTU-GLU(W_gate x, W_up x) over T rows; `x` [T, H], `out` [T, H].
pub fn situ_mlp(ex: &Exec, d: &Dims, m: &MlpMats<'_>, x: &[f32], out: &mut [f32]) {
    let hh = situ_gate_up(ex, d, &m.gate_proj, &m.up_proj, x);
    ex.matmul(&m.down_proj, &hh, out);
}

/// SiTU-GLU(W_gate x, W_up x) over T rows, `[T, W]` (W = `gate.rows`): the first half of
/// [`situ_mlp`], so that a streamed trunk can hand the down projection over separately.
pub fn situ_gate_up(
    ex: &Exec,
    d: &Dims,
    gate: &Bf16Mat<'_>,
    up: &Bf16Mat<'_>,
    x: &[f32],
) -> Vec<f32> {
    let t = x.len() / d.h;
    let w = gate.rows;
    let mut a = vec![0f32; t * w];
    let mut b = vec![0f32; t * w];
    ex.matmul_same_x(&[gate, up], x, &mut [&mut a, &mut b]);
    let mut hh = vec![0f32; t * w];
    ex.situ_glu(&a, &b, d.beta1, d.beta2, &mut hh);
    hh
}
