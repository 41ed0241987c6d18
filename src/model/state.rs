//! Incremental decode state (MODEL.md §7): per KDA layer the recurrent state Sᵀ and the conv
//! history, per MLA layer the latent cache. Sized once, up front, for every position the run
//! will use; nothing grows during decode.

use super::{AttnKind, Dims};

/// State of one KDA layer between tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct KdaState {
    /// Sᵀ per head, fp32, `[Hk][Dk (value j)][Dk (key i)]` (MODEL.md §6.4 step 7).
    pub st: Vec<f32>,
    /// Pre-conv inputs of the previous Kc−1 positions, `[3 (q, k, v)][Kc−1 (oldest first)][Pk]`
    /// (the layout of FORMATS.md §9.2).
    pub conv: Vec<f32>,
}

/// Latent cache of one MLA layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaCache {
    /// `[capacity][Rkv + Dr]` fp32 rows `[normalised latent | k_pe]`; row t is position t.
    pub rows: Vec<f32>,
}

/// The state of one layer.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerState {
    Kda(KdaState),
    Mla(MlaCache),
}

/// Everything incremental decode carries between tokens (MODEL.md §7).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeState {
    /// Positions whose effect is in the state (the next position to run).
    pub n_pos: usize,
    /// Positions the MLA caches can hold.
    pub capacity: usize,
    /// One entry per bound layer, in layer order.
    pub layers: Vec<LayerState>,
}

impl DecodeState {
    /// A fresh sequence (zero S, zero conv history, empty caches) for `capacity` positions over
    /// the first `n_layers` layers. Allocates [`DecodeState::bytes`] bytes.
    pub fn new(d: &Dims, n_layers: usize, capacity: usize) -> DecodeState {
        let layers = (0..n_layers)
            .map(|l| match d.kinds[l] {
                AttnKind::Kda => LayerState::Kda(KdaState {
                    st: vec![0.0; d.hk * d.dk * d.dk],
                    conv: vec![0.0; 3 * (d.kc - 1) * d.pk],
                }),
                AttnKind::Mla => LayerState::Mla(MlaCache {
                    rows: vec![0.0; capacity * d.mla_row()],
                }),
            })
            .collect();
        DecodeState {
            n_pos: 0,
            capacity,
            layers,
        }
    }

    /// A state of no layers and no capacity (a placeholder; allocates nothing).
    pub fn empty() -> DecodeState {
        DecodeState {
            n_pos: 0,
            capacity: 0,
            layers: Vec::new(),
        }
    }

    /// Back to a fresh sequence without reallocating.
    pub fn reset(&mut self) {
        self.n_pos = 0;
        for l in &mut self.layers {
            match l {
                LayerState::Kda(k) => {
                    k.st.fill(0.0);
                    k.conv.fill(0.0);
                }
                LayerState::Mla(m) => m.rows.fill(0.0),
            }
        }
    }

    /// Bytes of KDA state for the first `n_layers` layers (fixed, MODEL.md §8).
    pub fn kda_bytes(d: &Dims, n_layers: usize) -> u64 {
        let per = (d.hk * d.dk * d.dk + 3 * (d.kc - 1) * d.pk) as u64 * 4;
        d.kinds[..n_layers]
            .iter()
            .filter(|k| **k == AttnKind::Kda)
            .count() as u64
            * per
    }

    /// Bytes of MLA cache for the first `n_layers` layers at `capacity` positions (MODEL.md §8).
    pub fn mla_bytes(d: &Dims, n_layers: usize, capacity: usize) -> u64 {
        let n_mla = d.kinds[..n_layers]
            .iter()
            .filter(|k| **k == AttnKind::Mla)
            .count() as u64;
        // saturating: a huge capacity must read as "does not fit" in the plan, not wrap
        n_mla
            .saturating_mul(capacity as u64)
            .saturating_mul(d.mla_row() as u64 * 4)
    }
}
