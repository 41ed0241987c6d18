//! The model side of `k3 serve` (ENGINE.md §11): the run's flags, inputs, compute path and
//! memory plan — with `--parallel N` sequence slots and the snapshot pool planned, and
//! `--ctx` by default the largest that fits (printed) — and then the binding, in two steps so
//! that the server can listen (answering `/health` with 503) while the weights load.

use super::inputs::{check_inputs, compute, Inputs};
use super::memory::{largest_ctx, plan_memory, PlanInputs};
use super::packed::open_packed;
use super::{open_session, request_from_args, Bound, Request};
use crate::bind::streamed::{self as bind, Prepared};
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::cli::args::Args;
use crate::error::{Error, Result};
use crate::io::IoFile;
use crate::model::Exec;
use crate::plan::RunPlan;
use crate::report::RunReport;
use crate::run::RunSession;
use crate::stream::pack::PackedTrunk;
use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// A served model, planned but not loaded ([`prepare_serve`]); [`ServePrepared::load`] binds it.
pub(crate) struct ServePrepared {
    req: Request,
    inp: Inputs,
    ex: Option<Exec>,
    index: TensorIndex,
    census: Census,
    prep: Prepared,
    packed: Option<(PackedTrunk, Arc<IoFile>)>,
    plan: RunPlan,
    /// The report the plan filled (budget, plan figures).
    pub(crate) rep: RunReport,
}

/// A served model, loaded: the session (one thread owns it) and what requests are checked
/// against.
pub(crate) struct ServeModel {
    /// The session over the bound model (no tokenizer: the server matches `stop` itself).
    pub(crate) sess: RunSession<'static>,
}

impl ServePrepared {
    /// The tokenizer (`--tok`, or the model directory's), shared with the request handlers.
    pub(crate) fn take_tokenizer(&mut self) -> Option<Tokenizer> {
        self.inp.tok.take()
    }
    /// Positions each sequence may reach (`--ctx`, or the largest that fits).
    pub(crate) fn ctx(&self) -> usize {
        self.inp.positions
    }
    /// The end ids: `[EOS]` and `<|end_of_msg|>` with a tokenizer (ENGINE.md §3), plus
    /// `--stop-id`.
    pub(crate) fn end_ids(&self) -> Vec<u32> {
        let mut e = self.inp.end_ids.clone();
        e.extend(&self.req.stop_ids);
        e
    }
    /// The vocabulary size V.
    pub(crate) fn vocab(&self) -> usize {
        self.inp.d.v
    }
    /// The model directory.
    pub(crate) fn model_dir(&self) -> &std::path::Path {
        &self.req.model_dir
    }
    /// `--parallel N`.
    pub(crate) fn parallel(&self) -> usize {
        self.req.parallel
    }
    /// The model's identity for state files (FORMATS.md §9.1): the prefix cache's key.
    ///
    /// Errors: a shard header that cannot be read for the weights tag (exit 4).
    pub(crate) fn state_identity(&self) -> Result<crate::generate::state_file::StateIdentity> {
        super::state::identity(&self.inp, &self.index, &self.census)
    }
    /// The key of the server's signatures (thinking blocks of `POST /v1/messages`): the
    /// canonical config string and the weights tag (FORMATS.md §9.1), the model's identity.
    ///
    /// Errors: a shard header that cannot be read for the weights tag (exit 4).
    pub(crate) fn signing_key(&self) -> Result<Vec<u8>> {
        let id = super::state::identity(&self.inp, &self.index, &self.census)?;
        let mut key = id.canonical.into_bytes();
        key.extend_from_slice(&id.weights_tag.to_le_bytes());
        Ok(key)
    }
    /// The plan's one-line summary for the startup line: budget name and total.
    pub(crate) fn plan_summary(&self) -> String {
        format!(
            "{} budget, {} planned",
            self.plan.budget_name,
            crate::units::gb(self.plan.memory.total)
        )
    }

    /// Binds the checkpoint as planned ([`Run::open`]) and makes the session.
    ///
    /// Errors: those of [`Run::open`] (exit 2 for a bad tensor, 3 if memory is refused, 4 for
    /// a failed read).
    pub(crate) fn load(mut self) -> Result<ServeModel> {
        let ex = self
            .ex
            .take()
            .ok_or_else(|| Error::internal("serve: the compute path was taken twice"))?;
        let bound = Bound {
            index: &self.index,
            census: &self.census,
            prep: &self.prep,
            packed: self.packed.as_ref(),
            rp: &self.plan,
        };
        let sess = open_session(&self.req, &mut self.inp, &bound, ex, &mut self.rep)?;
        Ok(ServeModel { sess })
    }
}

/// Checks `k3 serve`'s model flags (`a`, parsed against the serve specs), the config and
/// tokenizer, and plans memory for `parallel` sequences plus `snapshots` pool slots at
/// `--ctx` positions (default: the largest that fits, at most `max_position_embeddings`);
/// prints the plan unless `--quiet`.
///
/// Errors: the run's flag and input errors (exit 2); a plan that does not fit (exit 3, naming
/// the largest `--parallel` that does); no tokenizer (exit 2: the server speaks text).
pub(crate) fn prepare_serve(
    a: Args,
    parallel: usize,
    snapshots: Option<usize>,
) -> Result<ServePrepared> {
    let mut req = request_from_args(a, "serve")?;
    req.parallel = parallel;
    req.snapshots = snapshots;
    req.gen = 0;
    let mut rep = RunReport {
        model_dir: req.model_dir.display().to_string(),
        ..RunReport::default()
    };
    let mut inp = check_inputs(&req, &mut rep)?;
    if inp.tok.is_none() {
        return Err(Error::invalid(format!(
            "serve: {} holds no tokenizer ({}); give --tok DIR",
            req.model_dir.display(),
            crate::tokenizer::TIKTOKEN_FILE
        )));
    }
    // a context that holds no chat request would start a server that refuses every one
    let shortest = match &inp.tok {
        Some(t) => crate::serve::api::shortest_chat_prompt(t)?,
        None => 0,
    };
    let least_ctx = shortest + 1;
    if let Some(c) = req.ctx.filter(|&c| c < least_ctx) {
        return Err(Error::invalid(format!(
            "flag `--ctx {c}`: too small for any chat request: the shortest (one empty user \
             message and the generation prompt) takes {shortest} positions, and the reply at \
             least one more; give --ctx {least_ctx} or more"
        )));
    }
    let ex = compute(&req, &mut rep)?;
    let index = TensorIndex::open(&req.model_dir)?;
    let census = Census::run(&inp.cfg, &index);
    if inp.layers == inp.d.nl {
        census.check(&req.model_dir.display().to_string())?;
    }
    let prep = bind::prepare(&index, &inp.cfg, inp.layers)?;
    let (packed, coded) = open_packed(&req, &inp, &index, ex.threads())?;
    if req.ctx.is_none() {
        let fits = largest_ctx(
            &PlanInputs::last_rows(&req, &inp, &index, &prep, &ex, coded),
            req.parallel,
        );
        // none fits: plan one position (said nowhere) so that the plan's own error names the
        // shortfall
        inp.positions = fits.as_ref().map_or(1, |&c| c);
        if let Some(&c) = fits.as_ref().ok().filter(|&&c| c < least_ctx) {
            return Err(Error::resources(format!(
                "context: the memory budget fits {c} positions per sequence at --parallel {}, \
                 and the shortest chat request needs {least_ctx} ({shortest} prompt positions \
                 and one reply id); give a larger --mem-gb or a smaller --parallel",
                req.parallel
            )));
        }
        if let (Ok(c), false) = (fits, req.quiet) {
            crate::sayln!(
                "context: {} per sequence (the largest that fits; give --ctx N to choose)",
                crate::units::count(c as u64, "position", "positions")
            );
        }
    }
    let plan = plan_memory(
        &PlanInputs::last_rows(&req, &inp, &index, &prep, &ex, coded),
        &mut rep,
    )?;
    Ok(ServePrepared {
        req,
        inp,
        ex: Some(ex),
        index,
        census,
        prep,
        packed,
        plan,
        rep,
    })
}
