//! The memory plan of a run (ENGINE.md §4): the model's sizes for the planner — with
//! `--parallel N` every sequence's KDA state and MLA cache and a step's N rows —, the plan
//! shown and put in the report, and the refusal of a `--parallel` that does not fit.

use super::{Inputs, Request};
use crate::bind::streamed::Prepared;
use crate::checkpoint::TensorIndex;
use crate::cli::args::Args;
use crate::cli::tokenize::tokenizer_dir;
use crate::error::{Error, Result};
use crate::model::Exec;
use crate::plan::{
    gb, largest_fitting, layer_list, plan_run, plan_with_chunk, Limit, ModelSizes, Refusal,
    RunPlan, RunShape, Shortfall,
};
use crate::report::RunReport;
use crate::stream::pieces::pieces_text;
use std::path::{Path, PathBuf};

/// What the plan of a run is computed from.
pub(super) struct PlanInputs<'a> {
    pub(super) req: &'a Request,
    pub(super) inp: &'a Inputs,
    pub(super) index: &'a TensorIndex,
    pub(super) prep: &'a Prepared,
    pub(super) ex: &'a Exec,
    /// Every prompt row's logits are kept (`--dump-logits`, `--gen 0`).
    pub(super) want_all: bool,
    /// The packed trunk has a codec that is decoded or measured (`--trunk-codec` on or auto):
    /// its staging buffers are planned (the measurement's peak stays in peak RSS even when it
    /// decides against decoding).
    pub(super) coded: bool,
}

impl<'a> PlanInputs<'a> {
    /// The inputs of a plan that keeps only each step's last logits rows (chat, serve);
    /// `coded`: the packed trunk is decoded.
    pub(super) fn last_rows(
        req: &'a Request,
        inp: &'a Inputs,
        index: &'a TensorIndex,
        prep: &'a Prepared,
        ex: &'a Exec,
        coded: bool,
    ) -> PlanInputs<'a> {
        PlanInputs {
            req,
            inp,
            index,
            prep,
            ex,
            want_all: false,
            coded,
        }
    }
}

/// The memory plan of the run (ENGINE.md §4), shown and put in the report; exit 3 (with the
/// smallest plan in the report) when it does not fit.
pub(super) fn plan_memory(c: &PlanInputs<'_>, rep: &mut RunReport) -> Result<RunPlan> {
    let req = c.req;
    let say = |s: &str| {
        if !req.quiet {
            crate::sayln!("{s}");
        }
    };
    let sizes_for = |par: usize| model_sizes(c, par, c.inp.positions);
    let sizes = sizes_for(req.parallel);
    let available = crate::io::sys::memory_available().available();
    // `auto` sizes the chunk to the prompt when the run knows it (run, not chat or serve)
    let prompt = if req.chat || req.serve || req.batch.is_some() {
        0
    } else {
        c.inp.ids.len()
    };
    let at_chunk = |chunk: usize| model_sizes_at(c, req.parallel, c.inp.positions, chunk);
    let rp = match plan_with_chunk(&at_chunk, &req.budget, available, prompt, req.chunk) {
        Ok(p) => p,
        Err(e) => {
            // The report still carries the figures: the smallest plan of this model (with
            // `auto`, at the smallest chunk the plan could have chosen).
            let least = match (req.chunk, prompt) {
                (Some(_), _) | (None, 0) => sizes,
                (None, _) => at_chunk(1),
            };
            rep.plan = Some(crate::plan::minimum_plan(&least, available));
            return Err(parallel_shortfall(
                &sizes_for,
                req,
                available,
                e.into_error(|s| advice(req, s)),
            ));
        }
    };
    let plan = rp.memory.clone();
    let trunk_runs = c.prep.layouts.iter().map(|l| l.bytes).sum();
    say(&crate::cli::summary::plan_lines(
        &rp,
        trunk_runs,
        c.inp.layers,
    ));
    if rp.trunk.ring_slots > 0 {
        say(&pieces_line(c, &rp));
    }
    say(&format!("  {}", rp.chunk.line()));
    rep.plan = Some(plan.clone());
    rep.budget_name = rp.budget_name.clone();
    rep.budget = rp.budget;
    plan.check()
        .map_err(|s| Refusal::Short(s).into_error(|s| advice(req, s)))?;
    Ok(rp)
}

/// Positions a default context may have when the config names no `max_position_embeddings`.
const CTX_WITHOUT_LIMIT: usize = 1 << 20;

/// The largest `--ctx` (positions per sequence, at most the config's
/// `max_position_embeddings`, else [`CTX_WITHOUT_LIMIT`]) whose plan fits with `sequences`
/// sequences (and the run's snapshot slots; fitting is monotone in the positions). One rule
/// for `chat` and `serve`.
///
/// Errors (exit 3): not even one position fits: the plan's own refusal at one position.
pub(super) fn largest_ctx(c: &PlanInputs<'_>, sequences: usize) -> Result<usize> {
    let most = c
        .inp
        .cfg
        .max_position_embeddings
        .map_or(CTX_WITHOUT_LIMIT, |m| m.min(usize::MAX as u64) as usize)
        .max(1);
    let available = crate::io::sys::memory_available().available();
    let plan = |n: usize| plan_run(&model_sizes(c, sequences, n), &c.req.budget, available);
    match largest_fitting(most, &|n| plan(n).is_ok()) {
        Some(n) => Ok(n),
        None => plan(1)
            .map(|_| 1)
            .map_err(|e| e.into_error(|s| advice(c.req, s))),
    }
}

/// The sizes the planner needs for `par` sequences decoding together (each with its KDA
/// state and MLA cache for `positions`; a step's forward over `par` rows), plus the run's
/// snapshot slots (each planned as one more sequence: a snapshot holds at most that).
pub(super) fn model_sizes(c: &PlanInputs<'_>, par: usize, positions: usize) -> ModelSizes {
    let chunk = c.req.chunk.unwrap_or(crate::plan::SESSION_CHUNK);
    model_sizes_at(c, par, positions, chunk)
}

/// As [`model_sizes`] with prefill chunks of `chunk` positions.
pub(super) fn model_sizes_at(
    c: &PlanInputs<'_>,
    par: usize,
    positions: usize,
    chunk: usize,
) -> ModelSizes {
    let (req, inp, prep) = (c.req, c.inp, c.prep);
    ModelSizes::for_run(
        &inp.d,
        RunShape {
            layers: inp.layers,
            layer_runs: prep.layouts.iter().map(|l| l.bytes).collect(),
            layer_pieces: prep
                .layouts
                .iter()
                .map(|l| l.trunk_pieces(req.pieces).iter().map(|p| p.len).collect())
                .collect(),
            embed: prep.tables.embed.len,
            lm_head: prep.tables.lm_head.as_ref().map(|m| m.len).unwrap_or(0),
            positions,
            chunk,
            all_logits: c.want_all,
            threads: c.ex.threads(),
            // flags' counts: `--snapshots 18446744073709551615` wrapped the sum to fewer
            // sequences than the pool holds; saturated, the plan refuses it (exit 3)
            sequences: par.saturating_add(req.snapshots.unwrap_or(par)),
            decoding: par,
            spec: req.spec,
            codec_staging: if c.coded {
                crate::stream::coded::StagePool::bytes(
                    c.ex.threads(),
                    crate::bind::streamed::CODED_READS,
                )
            } else {
                0
            },
            tokenizer: tokenizer_bytes(&req.args, &req.model_dir),
            // The index and the expert location tables the binding keeps (82,432 experts'
            // names at the released widths: about 100 MB).
            tensor_index: c.index.heap_bytes() as u64
                + crate::bind::experts::location_table_bytes(&inp.cfg, inp.layers),
        },
    )
}

/// A `--parallel N` plan that does not fit: the error says so with the largest N that fits
/// (the sequences' KDA state and MLA cache scale with N; exit 3).
fn parallel_shortfall(
    sizes_for: &dyn Fn(usize) -> ModelSizes,
    req: &Request,
    available: Option<u64>,
    e: Error,
) -> Error {
    let par = req.parallel;
    // only --batch and serve have a --parallel to blame (chat plans its live sequence and a
    // snapshot)
    if par <= 1 || e.exit_code() != 3 || !(req.batch.is_some() || req.serve) {
        return e;
    }
    // the largest fitting N, by bisection (fitting is monotone in N)
    let fit = |n: usize| plan_run(&sizes_for(n), &req.budget, available).is_ok();
    // par itself does not fit: the answer is below it
    let fits = largest_fitting(par - 1, &fit);
    // serve plans --parallel 4 without the flag: say so rather than blame a flag never given
    let default = if req.serve && req.args.value_os("parallel").is_none() {
        " (the default)"
    } else {
        ""
    };
    Error::resources(format!(
        "flag `--parallel {par}`{default}: {}; {}",
        e.message,
        match fits {
            Some(n) => format!("the largest --parallel that fits is {n}"),
            None => "not even --parallel 1 fits".to_string(),
        }
    ))
}

/// The advice of a memory refusal in the command's own flags: what the user can change to
/// need less (ENGINE.md §4). A run's positions are its prompt and `--gen` (and a batch's
/// lines run `--parallel` at a time); chat's are `--ctx`; serve's are `--ctx` per sequence
/// times `--parallel` sequences.
fn advice(req: &Request, s: &Shortfall) -> String {
    let positions = if req.serve {
        "fewer positions (a smaller --ctx or --parallel)"
    } else if req.chat {
        "fewer positions (a smaller --ctx)"
    } else if req.batch.is_some() {
        "fewer positions (--gen, shorter prompts, a smaller --parallel)"
    } else {
        "fewer positions (--gen, a shorter prompt)"
    };
    match s.limit {
        Limit::Budget(_) => format!("give a larger --mem-gb, {positions}, or free memory"),
        Limit::Available => format!("use {positions} or --layers, or free memory"),
    }
}

/// Bytes the tokenizer tables take in memory (estimate: twice the rank file).
fn tokenizer_bytes(args: &Args, model_dir: &Path) -> u64 {
    let dir = tokenizer_dir(
        args.value_os("tok").map(PathBuf::from).as_deref(),
        model_dir,
    );
    dir.and_then(|d| std::fs::metadata(d.join(crate::tokenizer::TIKTOKEN_FILE)).ok())
        .map(|m| 2 * m.len())
        .unwrap_or(0)
}

/// The plan's line of the streamed pieces (ENGINE.md §5): each streamed layer's pieces in
/// forward order (layers with the same cut listed together), and what overlaps.
fn pieces_line(c: &PlanInputs<'_>, rp: &RunPlan) -> String {
    let mut groups: Vec<(Vec<usize>, String)> = Vec::new();
    for (l, layout) in c.prep.layouts.iter().enumerate() {
        if rp.trunk.pinned.get(l).copied().unwrap_or(true) {
            continue;
        }
        let text = pieces_text(&layout.trunk_pieces(c.req.pieces));
        match groups.iter_mut().find(|g| g.1 == text) {
            Some(g) => g.0.push(l),
            None => groups.push((vec![l], text)),
        }
    }
    let layers: Vec<String> = groups
        .iter()
        .map(|(ls, t)| {
            format!(
                "{} {}: {t}",
                if ls.len() == 1 { "layer" } else { "layers" },
                layer_list(ls.iter().copied())
            )
        })
        .collect();
    let overlap = if rp.trunk.ring_slots >= 2 {
        "piece i+1 is read while piece i computes"
    } else {
        "one slot: each piece is read when the forward reaches it"
    };
    format!(
        "  trunk pieces ({}): {}; ring {} × {}: {overlap}; I/O depth {}",
        c.req.pieces.name(),
        layers.join("; "),
        rp.trunk.ring_slots,
        gb(rp.trunk.slot_bytes),
        c.req.io_depth.unwrap_or(crate::run::DEFAULT_IO_DEPTH)
    )
}
