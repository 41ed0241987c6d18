//! The prefill chunk (ENGINE.md §3 `--prefill-chunk`, §4): how many prompt positions one
//! forward runs. Each chunk reads the trunk and every expert its positions select, so a prompt
//! of P positions reads the weights ⌈P / chunk⌉ times; `auto` (the default) makes the chunk
//! as long as the prompt when the budget allows, else as long as it allows. Only the
//! per-position state that lives across layers scales with the whole chunk
//! (`super::sizes::scratch_bytes`); at a whole-process budget its bytes come from what the
//! plan would otherwise give the resident lm_head rows and the expert-cache slots beyond top-k
//! (a chunk reads each selected expert once anyway), and the plan says what it displaced.

use super::{gb, plan_run, Budget, ModelSizes, Refusal, RunPlan};

/// The chunk a session uses when `auto` cannot see the prompt when planning (`k3 chat`,
/// `k3 serve`: prompts arrive later), and the old fixed default.
pub const SESSION_CHUNK: usize = 64;

/// The prefill chunk of a run and why (ENGINE.md §4; the chunk line of the plan report).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Positions per prefill forward.
    pub chunk: usize,
    /// Chosen by the plan (`--prefill-chunk auto`), not given.
    pub auto: bool,
    /// Prompt positions the run prefills (0: unknown when planning, chat and serve).
    pub prompt: usize,
    /// Passes over the weights the prompt takes: ⌈prompt / chunk⌉ (0 when unknown).
    pub passes: usize,
    /// What the chunk's scratch took from the plan of a one-position chunk: lm_head rows and
    /// expert-cache slots, and the scratch bytes more than that plan's.
    pub displaced_rows: u64,
    pub displaced_slots: usize,
    pub extra_scratch: u64,
}

impl ChunkPlan {
    /// The chunk line of the plan report.
    pub fn line(&self) -> String {
        let how = if self.auto { "auto" } else { "--prefill-chunk" };
        let passes = if self.prompt == 0 {
            "prompts are not known when planning".to_string()
        } else {
            format!(
                "a prompt of {} positions takes {} pass{} over the weights",
                self.prompt,
                self.passes,
                if self.passes == 1 { "" } else { "es" }
            )
        };
        let mut took = Vec::new();
        if self.displaced_rows > 0 {
            took.push(format!("{} resident lm_head rows", self.displaced_rows));
        }
        if self.displaced_slots > 0 {
            took.push(format!("{} expert-cache slots", self.displaced_slots));
        }
        let displaced = if took.is_empty() {
            "which displaced nothing".to_string()
        } else {
            format!("which displaced {}", took.join(" and "))
        };
        format!(
            "prefill chunk: {} position{} ({how}); {passes}; its scratch is {} more than one position's, {displaced}",
            self.chunk,
            if self.chunk == 1 { "" } else { "s" },
            gb(self.extra_scratch),
        )
    }
}

/// Passes over the weights a prompt of `prompt` positions takes in chunks of `chunk`.
pub fn passes(prompt: usize, chunk: usize) -> usize {
    prompt.div_ceil(chunk.max(1))
}

/// Plans a run with its prefill chunk (ENGINE.md §3, §4): `fixed` (`--prefill-chunk N`) or,
/// when `None`, the largest chunk of at most `prompt` positions whose plan fits the budget
/// and what is `available` (`prompt` 0, unknown: [`SESSION_CHUNK`]). `sizes_at(chunk)` are the
/// run's sizes with that chunk. The returned plan's `chunk` says the chunk, the passes and
/// what the chunk displaced against the plan of a one-position chunk.
///
/// Errors: those of [`plan_run`] for the chosen chunk (with `auto`, for one position when
/// not even that fits).
pub fn plan_with_chunk(
    sizes_at: &dyn Fn(usize) -> ModelSizes,
    b: &Budget,
    available: Option<u64>,
    prompt: usize,
    fixed: Option<usize>,
) -> std::result::Result<RunPlan, Refusal> {
    let fits =
        |c: usize| plan_run(&sizes_at(c), b, available).is_ok_and(|p| p.memory.check().is_ok());
    let chunk = match fixed {
        Some(c) => c.max(1),
        None if prompt == 0 => SESSION_CHUNK,
        None => largest_fitting(prompt, &fits).unwrap_or(1),
    };
    let mut rp = plan_run(&sizes_at(chunk), b, available)?;
    let mut cp = ChunkPlan {
        chunk,
        auto: fixed.is_none(),
        prompt,
        passes: passes(prompt, chunk),
        ..ChunkPlan::default()
    };
    if let Ok(one) = plan_run(&sizes_at(1), b, available) {
        cp.displaced_rows = one
            .memory
            .lm_head_resident_rows
            .saturating_sub(rp.memory.lm_head_resident_rows);
        cp.displaced_slots = one.cache_slots.saturating_sub(rp.cache_slots);
        cp.extra_scratch = rp.memory.scratch.saturating_sub(one.memory.scratch);
    }
    rp.chunk = cp;
    Ok(rp)
}

/// The largest n in 1..=`most` with `fit(n)`, by bisection (`fit` monotone: true up to some
/// n, false after), or `None` when `fit(1)` is false. Used for the prefill chunk and by the
/// CLI's searches for the most sequences a budget holds.
pub fn largest_fitting(most: usize, fit: &dyn Fn(usize) -> bool) -> Option<usize> {
    if !fit(1) {
        return None;
    }
    let (mut lo, mut hi) = (1usize, most.max(1));
    if fit(hi) {
        return Some(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fit(mid) {
            lo = mid
        } else {
            hi = mid
        }
    }
    Some(lo)
}

/// Prompt positions a server step may prefill as rows beside its decoding sequences (the
/// slice of ENGINE.md §11 / issue 23 item 5): the plan's prefill chunk, whose scratch the plan
/// holds (a step's rows never exceed what one chunk's forward was planned for).
pub fn prefill_slice(rp: &RunPlan) -> usize {
    rp.chunk.chunk.max(1)
}
