//! The draft's rotary embedding: DeepSeek-V3's YaRN over interleaved pairs (DRAFT.md "RoPE",
//! §3 step 5), every value in f64 from the engine-owned `log64`, `exp64`, `cos64`, `sin64`,
//! one IEEE operation at a time in the written order, so a draft's proposals are the same on
//! every ISA path and thread count.

use super::config::DraftConfig;
use crate::error::{Error, Result};
use k3_kernels::{cos64, exp64, log64, rnd, sin64};

/// The tabulated rotation of one draft (DRAFT.md "RoPE").
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    /// inv_freq_i for i = 0 … Dr/2 − 1 (f64).
    pub inv_freq: Vec<f64>,
    /// The rotation's factor mscale(s, `mscale`) / mscale(s, `mscale_all_dim`) (1 without YaRN).
    pub factor: f64,
    /// The softmax scale σ = mscale(s, `mscale_all_dim`)² / sqrt(Dn + Dr) (§3 step 5;
    /// 1/sqrt(Dn + Dr) without YaRN).
    pub softmax_scale: f64,
}

/// mscale(s, m) = 0.1 × m × ln s + 1 for s > 1, else 1 (DeepSeek-V3's `yarn_get_mscale`).
pub fn mscale(s: f64, m: f64) -> f64 {
    if s > 1.0 {
        ((0.1 * m) * log64(s)) + 1.0
    } else {
        1.0
    }
}

impl Rope {
    /// The inverse frequencies, rotation factor and softmax scale of `c` (DRAFT.md "RoPE"):
    /// with d = Dr, b = `rope_theta`, s = factor, L = original_max_position_embeddings,
    /// corr(n) = (d × ln(L / (n × 2π))) / (2 × ln b); lo = max(floor(corr(beta_fast)), 0),
    /// hi = min(ceil(corr(beta_slow)), d − 1), hi += 0.001 when equal; extra_i = 1 / b^(2i/d)
    /// with b^(2i/d) = exp64((2i/d) × log64(b)), inter_i = extra_i / s, ramp_i =
    /// clamp((i − lo)/(hi − lo), 0, 1), keep_i = 1 − ramp_i, inv_freq_i = inter_i × (1 − keep_i)
    /// + extra_i × keep_i. Without YaRN inv_freq_i = extra_i.
    pub fn new(c: &DraftConfig) -> Rope {
        let d = c.qk_rope_head_dim;
        let df = d as f64;
        let ln_b = log64(c.rope_theta);
        let extra: Vec<f64> = (0..d / 2)
            .map(|i| 1.0 / exp64(((2 * i) as f64 / df) * ln_b))
            .collect();
        let head = (c.qk_nope_head_dim + c.qk_rope_head_dim) as f64;
        let Some(y) = c.yarn else {
            return Rope {
                inv_freq: extra,
                factor: 1.0,
                softmax_scale: 1.0 / head.sqrt(),
            };
        };
        let two_pi = 2.0 * std::f64::consts::PI;
        let corr =
            |n: f64| (df * log64(y.original_max_position_embeddings / (n * two_pi))) / (2.0 * ln_b);
        let lo = corr(y.beta_fast).floor().max(0.0);
        let mut hi = corr(y.beta_slow).ceil().min(df - 1.0);
        if lo == hi {
            hi += 0.001;
        }
        let inv_freq = extra
            .iter()
            .enumerate()
            .map(|(i, &e)| {
                let inter = e / y.factor;
                let ramp = ((i as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                inter * (1.0 - keep) + e * keep
            })
            .collect();
        let all = mscale(y.factor, y.mscale_all_dim);
        Rope {
            inv_freq,
            factor: mscale(y.factor, y.mscale) / all,
            softmax_scale: (all * all) / head.sqrt(),
        }
    }

    /// Rotates `x` (one head's Dr values, or k_pe) for `position` in place: for each pair i,
    /// angle = position × inv_freq_i, c = cos64(angle) × factor, n = sin64(angle) × factor,
    /// (x_{2i}, x_{2i+1}) → (rnd(x_{2i}·c − x_{2i+1}·n), rnd(x_{2i}·n + x_{2i+1}·c)).
    ///
    /// Errors (exit 2) when an angle leaves the range of `cos64`/`sin64` (positions beyond
    /// about 823,000 at the highest frequency).
    pub fn rotate(&self, x: &mut [f32], position: usize) -> Result<()> {
        debug_assert_eq!(x.len(), 2 * self.inv_freq.len());
        for (i, &f) in self.inv_freq.iter().enumerate() {
            let angle = position as f64 * f;
            let c = cos64(angle) * self.factor;
            let n = sin64(angle) * self.factor;
            if c.is_nan() || n.is_nan() {
                return Err(Error::invalid(format!(
                    "draft RoPE: position {position} is beyond the rotation's range"
                )));
            }
            let (a, b) = (x[2 * i] as f64, x[2 * i + 1] as f64);
            x[2 * i] = rnd(a * c - b * n);
            x[2 * i + 1] = rnd(a * n + b * c);
        }
        Ok(())
    }
}
