//! The memory plan (ENGINE.md §4): every byte the run will allocate, added up before anything
//! is allocated, compared with what the machine has (`MemAvailable`, and the cgroup headroom
//! when smaller). A plan that does not fit is refused with exit 3, naming the shortfall.
//!
//! This first plan covers the resident engine (every bound trunk layer and both model tables in
//! memory, experts read on demand into a few buffers); the streaming work adds budgets, the
//! trunk ring and the expert cache.

use crate::error::{Error, Result};
use crate::model::state::DecodeState;
use crate::model::Dims;

/// Bytes per item of the plan (FORMATS.md §10 `memory.plan`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Resident BF16 trunk matrices and small vectors of the bound layers.
    pub trunk_resident: u64,
    /// Trunk ring slots (0: no streaming yet).
    pub trunk_ring: u64,
    /// `embed_tokens` + `lm_head` (+ the model-level vectors).
    pub model_tables: u64,
    /// Expert buffers (one routed expert each).
    pub expert_cache: u64,
    /// KDA Sᵀ + conv history of the bound KDA layers (MODEL.md §7).
    pub kda_state: u64,
    /// MLA latent cache for prompt + generation (MODEL.md §8).
    pub mla_cache: u64,
    /// Per-chunk activations and logits rows (an upper bound).
    pub scratch: u64,
    /// Tokenizer tables (0 without a tokenizer).
    pub tokenizer: u64,
    /// The tensor index.
    pub tensor_index: u64,
    /// Sum of the items above.
    pub total: u64,
    /// What the machine has: min(MemAvailable, cgroup headroom); None if unknown.
    pub available: Option<u64>,
}

/// What a run needs, for [`MemoryPlan::resident`].
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    /// Layers bound (`--layers`, default all).
    pub layers: usize,
    /// Positions the state must hold: prompt + generation.
    pub positions: usize,
    /// Positions per prefill chunk.
    pub chunk: usize,
    /// Logits rows kept at once (the whole chunk when dumping or teacher-forcing, else 1).
    pub logits_rows: usize,
    /// Expert buffers of the expert source.
    pub expert_buffers: usize,
    /// Bytes of one routed expert (six tensors).
    pub expert_bytes: u64,
    /// Bytes of the tensor index in memory.
    pub tensor_index: u64,
    /// Bytes of the tokenizer tables.
    pub tokenizer: u64,
}

/// Bytes of the trunk of layer `l` as bound (BF16 matrices as BF16, small vectors as fp32).
pub fn layer_trunk_bytes(d: &Dims, l: usize) -> u64 {
    let (h, pk, dk, hk, kc) = (
        d.h as u64,
        d.pk as u64,
        d.dk as u64,
        d.hk as u64,
        d.kc as u64,
    );
    let mut bf16 = 0u64; // elements
    let mut f32s = 4 * h; // input/post norms, two folded AttnRes vectors
    match d.kinds[l] {
        crate::model::AttnKind::Kda => {
            bf16 += 4 * pk * h + dk * h + pk * dk + hk * h + h * pk;
            f32s += 3 * pk * kc + pk + dk + hk * 2;
        }
        crate::model::AttnKind::Mla => {
            let (hm, dq, rq, rkv, dr, dn, dv) = (
                d.hm as u64,
                d.dq as u64,
                d.rq as u64,
                d.rkv as u64,
                d.dr as u64,
                d.dn as u64,
                d.dv as u64,
            );
            bf16 += rq * h + hm * dq * rq + (rkv + dr) * h + hm * (dn + dv) * rkv + h * hm * dv;
            if d.out_gate {
                bf16 += hm * dv * h;
            }
            f32s += rq + rkv;
        }
    }
    if l < d.first_dense {
        bf16 += 3 * d.f as u64 * h;
    } else {
        let (e, lat, sw) = (d.e as u64, d.l as u64, d.sw as u64);
        bf16 += e * h + 2 * lat * h + 3 * sw * h;
        f32s += e + lat;
    }
    bf16 * 2 + f32s * 4
}

/// Upper bound of the forward pass's scratch for a chunk of `t` positions keeping `rows`
/// logits rows (activations of the widest layer, the depth state, expert outputs).
pub fn scratch_bytes(d: &Dims, t: usize, rows: usize) -> u64 {
    let kda = 12 * d.pk + d.dk + d.hk;
    let mla = 2 * d.rq + d.hm * d.dq + 2 * d.mla_row() + 3 * d.hm * d.dv;
    let ffn = 3 * d.f.max(d.sw).max(d.i);
    let moe = d.e + 3 * d.l + 2 * d.kt * d.l + 3 * d.i * d.kt;
    let snapshots = d.nl.div_ceil(d.bs) + 1;
    let depth = (snapshots + 6) * d.h;
    let per_pos = kda.max(mla) + ffn + moe + depth;
    4 * (t as u64 * per_pos as u64 + rows as u64 * d.v as u64 + (t as u64) * d.mla_row() as u64)
}

impl MemoryPlan {
    /// The plan of a resident run (every bound layer and both tables in memory).
    pub fn resident(d: &Dims, inp: &PlanInput) -> MemoryPlan {
        let trunk_resident = (0..inp.layers).map(|l| layer_trunk_bytes(d, l)).sum();
        let heads = if d.tied { 1 } else { 2 };
        let model_tables = heads * d.v as u64 * d.h as u64 * 2 + 2 * d.h as u64 * 4;
        let kda_state = DecodeState::kda_bytes(d, inp.layers);
        let mla_cache = DecodeState::mla_bytes(d, inp.layers, inp.positions);
        let expert_cache = inp.expert_buffers as u64 * inp.expert_bytes;
        let scratch = scratch_bytes(d, inp.chunk, inp.logits_rows);
        let mut p = MemoryPlan {
            trunk_resident,
            trunk_ring: 0,
            model_tables,
            expert_cache,
            kda_state,
            mla_cache,
            scratch,
            tokenizer: inp.tokenizer,
            tensor_index: inp.tensor_index,
            total: 0,
            available: None,
        };
        p.total = p.trunk_resident
            + p.trunk_ring
            + p.model_tables
            + p.expert_cache
            + p.kda_state
            + p.mla_cache
            + p.scratch
            + p.tokenizer
            + p.tensor_index;
        p
    }

    /// Refuses the plan (exit 3) when it needs more than `available`, naming every large item
    /// and the shortfall. An unknown figure is accepted (the plan is printed either way).
    pub fn check(&self) -> Result<()> {
        if let Some(avail) = self.available {
            if self.total > avail {
                return Err(Error::resources(format!(
                    "memory plan does not fit: needs {} (trunk {}, model tables {}, experts {}, KDA state {}, MLA cache {}, scratch {}) but {} is available, short by {}; use fewer positions (--gen, a shorter prompt) or --layers, or free memory",
                    gb(self.total),
                    gb(self.trunk_resident),
                    gb(self.model_tables),
                    gb(self.expert_cache),
                    gb(self.kda_state),
                    gb(self.mla_cache),
                    gb(self.scratch),
                    gb(avail),
                    gb(self.total - avail)
                )));
            }
        }
        Ok(())
    }

    /// The plan as report lines (ENGINE.md §6).
    pub fn lines(&self) -> String {
        let avail = match self.available {
            Some(a) => gb(a),
            None => "unknown".to_string(),
        };
        format!(
            "memory plan: total {} of {} available\n  trunk resident {}, model tables {}, expert buffers {}, KDA state {}, MLA cache {}, scratch {}, tensor index {}, tokenizer {}",
            gb(self.total),
            avail,
            gb(self.trunk_resident),
            gb(self.model_tables),
            gb(self.expert_cache),
            gb(self.kda_state),
            gb(self.mla_cache),
            gb(self.scratch),
            gb(self.tensor_index),
            gb(self.tokenizer)
        )
    }
}

/// Decimal gigabytes with enough digits for tiny and huge figures.
pub fn gb(bytes: u64) -> String {
    let g = bytes as f64 / 1e9;
    if g >= 10.0 {
        format!("{g:.1} GB")
    } else if g >= 0.01 {
        format!("{g:.3} GB")
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}
