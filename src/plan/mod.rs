//! The memory plan (ENGINE.md §4): every byte the run will allocate, added up before anything
//! is allocated, compared with what the machine has (`MemAvailable`, and the cgroup headroom
//! when smaller). A plan that does not fit is refused with exit 3, naming the shortfall.
//!
//! [`plan_run`] turns a budget — `auto` (from what is available), a preset of ENGINE.md §4, or
//! `--mem-gb`, with `--trunk-gb`, `--cache-gb`, `--trunk-ring` overriding parts — into the
//! streaming configuration: which trunk layers are pinned and how many ring slots of what
//! size stream the rest ([`choose_trunk`], the fixed point), how many lm_head rows are resident
//! and whether the embedding table is ([`TablesPlan`]), and how many expert-cache slots there
//! are. [`MemoryPlan::resident`] is the plan of the plain resident engine.
//!
//! Layout: `sizes` (every byte formula), `budget` (presets, GB, the budget resolved), `trunk`
//! (the pinning solver), `tables` (the model tables' plan), and here the plan itself, built by
//! one constructor ([`MemoryPlan::of_run`]). Size formatting lives in [`crate::units`].

mod budget;
mod chunk;
mod join;
pub mod released;
mod shortfall;
mod sizes;
mod tables;
mod trunk;

pub use crate::units::{gb, gb_pair, index_ranges, layer_list};
pub use budget::{
    gb_to_bytes, preset, presets_text, Budget, Preset, AUTO_MARGIN_MIN, AUTO_MARGIN_SHARE, GB,
    PRESETS,
};
pub use chunk::{
    largest_fitting, passes, plan_with_chunk, prefill_slice, ChunkPlan, SESSION_CHUNK,
};
pub use join::join_slice;
pub use shortfall::{Limit, Refusal, Shortfall};
pub use sizes::{
    buffer_bytes, kernel_scratch_bytes, layer_piece_bytes, layer_run_bytes, layer_trunk_bytes,
    layer_vector_bytes, scratch_bytes, ModelSizes, RunShape, HEAD_CHUNK_BYTES, HEAD_CHUNK_SLOTS,
    PROCESS_BASELINE,
};
pub use tables::TablesPlan;

pub use trunk::{choose_trunk, choose_trunk_pieces, min_ring_bytes, TrunkChoice};

use crate::error::Error;
use crate::model::state::DecodeState;
use crate::model::Dims;
use tables::{cache_slots, split_rest};

/// Bytes per item of the plan (FORMATS.md §10 `memory.plan`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Pinned trunk layer buffers plus every bound layer's widened small vectors.
    pub trunk_resident: u64,
    /// Trunk ring slots (0 when every layer is pinned).
    pub trunk_ring: u64,
    /// `embed_tokens` + `lm_head` (+ the model-level vectors) when resident; the embedding row
    /// window and the lm_head chunk slots when streamed; a resident lm_head prefix (rows
    /// 0..[`MemoryPlan::lm_head_resident_rows`]) next to the chunk slots when partly resident.
    pub model_tables: u64,
    /// lm_head rows held resident (a prefix 0..R; tied: of the one table), of
    /// [`MemoryPlan::lm_head_rows`] = V.
    pub lm_head_resident_rows: u64,
    pub lm_head_rows: u64,
    /// `embed_tokens` resident (tied: exactly when the whole table is).
    pub embedding_resident: bool,
    /// Expert-cache slots (one routed expert each, with alignment slack).
    pub expert_cache: u64,
    /// KDA Sᵀ + conv history of the bound KDA layers (MODEL.md §7).
    pub kda_state: u64,
    /// MLA latent cache for prompt + generation (MODEL.md §8).
    pub mla_cache: u64,
    /// Per-chunk activations and logits rows (an upper bound), and in a streamed run's plan
    /// the [`PROCESS_BASELINE`].
    pub scratch: u64,
    /// Tokenizer tables (0 without a tokenizer).
    pub tokenizer: u64,
    /// The tensor index and the expert location tables (their names).
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

impl MemoryPlan {
    /// The sum of every item, saturating: a huge request (e.g. an MLA cache for 2^32
    /// positions) must read as "does not fit", never wrap to a small total.
    pub fn items_total(&self) -> u64 {
        [
            self.trunk_resident,
            self.trunk_ring,
            self.model_tables,
            self.expert_cache,
            self.kda_state,
            self.mla_cache,
            self.scratch,
            self.tokenizer,
            self.tensor_index,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
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
            lm_head_resident_rows: d.v as u64,
            lm_head_rows: d.v as u64,
            embedding_resident: true,
            expert_cache,
            kda_state,
            mla_cache,
            scratch,
            tokenizer: inp.tokenizer,
            tensor_index: inp.tensor_index,
            total: 0,
            available: None,
        };
        p.total = p.items_total();
        p
    }

    /// Refuses the plan (exit 3) when it needs more than `available`: the [`Shortfall`]
    /// names every large item (the command words the advice). An unknown figure is accepted
    /// (the plan is printed either way).
    pub fn check(&self) -> std::result::Result<(), Shortfall> {
        match self.available {
            Some(avail) if self.total > avail => Err(Shortfall {
                needed: self.total,
                available: avail,
                limit: Limit::Available,
                parts: vec![
                    ("trunk", self.trunk_resident),
                    ("model tables", self.model_tables),
                    ("experts", self.expert_cache),
                ],
                kda_state: self.kda_state,
                mla_cache: self.mla_cache,
                rest: vec![("scratch", self.scratch)],
            }),
            _ => Ok(()),
        }
    }

    /// What the model-tables item holds: `lm_head rows resident R/V, embedding streamed`.
    pub fn tables_desc(&self) -> String {
        format!(
            "lm_head rows resident {}/{}, embedding {}",
            self.lm_head_resident_rows,
            self.lm_head_rows,
            if self.embedding_resident {
                "resident"
            } else {
                "streamed"
            }
        )
    }

    /// The plan as one report line (ENGINE.md §6): the total against what is available, then
    /// every item.
    pub fn lines(&self) -> String {
        let avail = match self.available {
            Some(a) => gb(a),
            None => "unknown".to_string(),
        };
        format!(
            "memory plan: total {} of {} available: trunk resident {}, trunk ring {}, model tables {} ({}), expert cache {}, KDA state {}, MLA cache {}, scratch {}, tensor index {}, tokenizer {}",
            gb(self.total),
            avail,
            gb(self.trunk_resident),
            gb(self.trunk_ring),
            gb(self.model_tables),
            self.tables_desc(),
            gb(self.expert_cache),
            gb(self.kda_state),
            gb(self.mla_cache),
            gb(self.scratch),
            gb(self.tensor_index),
            gb(self.tokenizer)
        )
    }
}

/// The streaming configuration of a run and its memory plan.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    /// The items (FORMATS.md §10 `memory.plan`).
    pub memory: MemoryPlan,
    /// `auto`, a preset name, or `mem-gb`.
    pub budget_name: String,
    /// The whole-process budget when one was given or derived (`--mem-gb`, auto).
    pub budget: Option<u64>,
    /// Trunk budget used for the pinned set.
    pub trunk_budget: u64,
    /// The pinned set and ring.
    pub trunk: TrunkChoice,
    /// The model tables: resident lm_head rows, chunk slots, embedding.
    pub tables: TablesPlan,
    /// Expert-cache slots and bytes per slot.
    pub cache_slots: usize,
    pub cache_slot_bytes: u64,
    /// Why this split, for the report.
    pub notes: Vec<String>,
    /// The prefill chunk ([`plan_with_chunk`]; default from [`plan_run`] alone).
    pub chunk: ChunkPlan,
}

/// Plans a run (ENGINE.md §4): resolves the budget into a trunk budget, the model tables
/// ([`TablesPlan`]) and expert-cache slots, chooses the pinned set ([`choose_trunk`]) and adds
/// up every item. `available` is min(MemAvailable, cgroup headroom) when known.
///
/// * Preset: its trunk and cache budgets (overridable), tables resident except `ultra`
///   (streamed); everything else on top.
/// * `--mem-gb` or `auto` (available − max(10 %, 0.5 GB)): the fixed items first, then the
///   trunk until fully resident (keeping top-k cache slots and streamed tables), then lm_head
///   rows resident (a prefix, possibly all V), then the expert cache up to every expert, then
///   the embedding table. `--trunk-gb`/`--cache-gb` fix their parts.
///
/// Errors (exit 3, before anything is allocated): a budget below its minimum
/// ([`Refusal::Short`]: the minimum, the budget and the parts; the command words the advice), a `--cache-gb` below top-k slots, a plan larger than the budget
/// or than what is available. Exit 2: `--mem-gb` with a fixed preset.
pub fn plan_run(
    s: &ModelSizes,
    b: &Budget,
    available: Option<u64>,
) -> std::result::Result<RunPlan, Refusal> {
    let mut notes = Vec::new();
    if let Some(c) = b.cache {
        if c < s.cache_min() {
            let (have, need) = gb_pair(c, s.cache_min());
            return Err(Error::resources(format!(
                "flag `--cache-gb`: {} is below the expert cache's minimum of top-k = {} slots of {} bytes ({}), short by {}",
                have,
                s.top_k,
                s.expert_stride,
                need,
                gb(s.cache_min() - c)
            ))
            .into());
        }
    }
    if let Some(0) = b.ring {
        return Err(Error::invalid("flag `--trunk-ring`: must be at least 1").into());
    }
    // A trunk or cache budget above what the model can use means "all of it": plan that much,
    // not a budget the machine cannot give (which would be refused as if the model needed it).
    let clamped = Budget {
        trunk: b.trunk.map(|t| t.min(s.trunk_all())),
        cache: b.cache.map(|c| c.min(s.cache_max().max(s.cache_min()))),
        ..b.clone()
    };
    for (flag, asked, used, what) in [
        ("--trunk-gb", b.trunk, clamped.trunk, "the whole trunk"),
        ("--cache-gb", b.cache, clamped.cache, "every expert"),
    ] {
        if let (Some(a), Some(u)) = (asked, used) {
            if u < a {
                notes.push(format!(
                    "{flag} {} is more than {what} needs ({}); planning {}",
                    gb(a),
                    gb(u),
                    gb(u)
                ));
            }
        }
    }
    let b = &clamped;
    let (budget_name, budget, trunk_budget, preset_tables, cache_bytes) =
        budget::resolve(s, b, available, &mut notes)?;
    let trunk = choose_trunk_pieces(&s.layer_runs, &s.pieces(), trunk_budget, b.ring)?;
    let (tables, cache_bytes) = match (budget, preset_tables) {
        (Some(m), _) => {
            let w = m - s.fixed();
            let cache_floor = b.cache.unwrap_or(s.cache_min());
            let rest = w.saturating_sub(trunk.bytes() + cache_floor + s.tables_streamed());
            split_rest(s, rest, cache_floor, b.cache.is_some())
        }
        (None, Some(t)) => (t, cache_bytes),
        (None, None) => return Err(Error::internal("a plan without a budget or a preset").into()),
    };
    if tables.head_resident_rows < s.vocab && budget.is_some() {
        notes.push(format!(
            "lm_head rows 0..{} of {} resident",
            tables.head_resident_rows, s.vocab
        ));
    }
    let slots = cache_slots(s, cache_bytes);
    let p = MemoryPlan::of_run(
        s,
        (
            trunk.pinned_bytes,
            trunk.ring_slots as u64 * trunk.slot_bytes,
        ),
        &tables,
        slots as u64 * s.expert_stride,
        available,
    );
    if let Some(m) = budget {
        if p.total > m {
            let (need, have) = gb_pair(p.total, m);
            return Err(Error::resources(format!(
                "memory plan {} exceeds the budget {} ({budget_name}), short by {}; lower --trunk-gb or --cache-gb, or raise --mem-gb",
                need,
                have,
                gb(p.total - m)
            ))
            .into());
        }
    }
    Ok(RunPlan {
        memory: p,
        budget_name,
        budget,
        trunk_budget,
        trunk,
        tables,
        cache_slots: slots,
        cache_slot_bytes: s.expert_stride,
        notes,
        chunk: ChunkPlan::default(),
    })
}

/// The smallest plan of a model (the smallest ring, [`ModelSizes::trunk_min`], nothing pinned, model
/// tables streamed, top-k cache slots): what a refusal reports as the figures of the run.
pub fn minimum_plan(s: &ModelSizes, available: Option<u64>) -> MemoryPlan {
    let tables = s.tables_plan(0, false, String::new());
    MemoryPlan::of_run(s, (0, s.trunk_min()), &tables, s.cache_min(), available)
}

impl MemoryPlan {
    /// The plan of a streamed run of `s`: `trunk` = (pinned layer buffers, ring slots) in
    /// bytes, the model tables as `tables` holds them, `expert_cache` bytes, and the fixed
    /// items of `s` (state, cache, scratch with the [`PROCESS_BASELINE`], tokenizer, index).
    pub fn of_run(
        s: &ModelSizes,
        trunk: (u64, u64),
        tables: &TablesPlan,
        expert_cache: u64,
        available: Option<u64>,
    ) -> MemoryPlan {
        let mut p = MemoryPlan {
            trunk_resident: trunk.0 + s.layer_vectors,
            trunk_ring: trunk.1,
            model_tables: tables.bytes,
            lm_head_resident_rows: tables.head_resident_rows as u64,
            lm_head_rows: s.vocab as u64,
            embedding_resident: tables.embed_resident,
            expert_cache,
            kda_state: s.kda_state,
            mla_cache: s.mla_cache,
            scratch: s.scratch_with_head(),
            tokenizer: s.tokenizer,
            tensor_index: s.tensor_index,
            total: 0,
            available,
        };
        p.total = p.items_total();
        p
    }
}
