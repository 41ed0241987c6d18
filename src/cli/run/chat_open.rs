//! The model of `k3 chat`, opened as the main job opens it (ENGINE.md §3, §4): the run
//! options parsed by the run's own parser, the inputs checked, the context sized (an explicit
//! `--ctx`, else the largest that fits the budget for the live sequence and one held
//! snapshot, at most `max_position_embeddings`, printed), the plan, the binding, the session,
//! and chat's sampling defaults (ENGINE.md §8).

use super::inputs::{check_inputs, compute};
use super::memory::{largest_ctx, plan_memory, PlanInputs};
use super::packed::open_packed;
use super::request_from_args;
use crate::bind::streamed as bind;
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::cli::args::Args;
use crate::error::{Error, Result};
use crate::generate::defaults::chat_defaults;
use crate::generate::sample::{os_seed, SamplerSettings};
use crate::generate::state_file::StateIdentity;
use crate::report::RunReport;
use crate::run::RunSession;
use crate::tokenizer::Tokenizer;

/// The chat plans one live sequence (the one that decodes, and drafts under `--spec`) and
/// one snapshot slot, held for `/undo`.
const CHAT_SNAPSHOTS: usize = 1;

/// A model opened for chat.
pub(crate) struct ChatModel {
    /// The session (no `--stop` text: the tokenizer is the chat's own).
    pub(crate) sess: RunSession<'static>,
    /// The tokenizer (chat needs one).
    pub(crate) tok: Tokenizer,
    /// The end-of-turn ids.
    pub(crate) end_ids: Vec<u32>,
    /// The context in positions.
    pub(crate) ctx: usize,
    /// The context was an explicit `--ctx` (a turn beyond it is exit 2, else 3).
    pub(crate) ctx_explicit: bool,
    /// The sampler settings: chat's defaults, the flags, the seed.
    pub(crate) settings: SamplerSettings,
    /// The seed came from the OS (no `--seed`).
    pub(crate) seed_from_os: bool,
    /// The model's identity for state files (FORMATS.md §9.1).
    pub(crate) identity: StateIdentity,
    /// V.
    pub(crate) vocab: usize,
    /// `--quiet`, `--no-progress`.
    pub(crate) quiet: bool,
    /// `--no-progress`.
    pub(crate) no_progress: bool,
}

/// Opens the model for chat from its parsed arguments (run options and chat flags).
///
/// Errors: those of the main job's checks and plan (exit 2, or 3 when nothing fits), no
/// tokenizer (exit 2), a bad `generation_config.json` (exit 2).
pub(crate) fn open(a: Args) -> Result<ChatModel> {
    // the prefix cache's state waiting for its writer and the one being read: two more
    let disk = if a.value_os("prefix-cache").is_some() {
        2
    } else {
        0
    };
    let mut req = request_from_args(a, "chat")?;
    req.parallel = 1;
    req.snapshots = Some(CHAT_SNAPSHOTS + disk);
    let quiet = req.quiet;
    let say = |s: &str| {
        if !quiet {
            crate::sayln!("{s}");
        }
    };
    let mut rep = RunReport::default();
    let mut inp = check_inputs(&req, &mut rep)?;
    let Some(tok) = inp.tok.take() else {
        return Err(Error::invalid(format!(
            "chat: no tokenizer in {} (tiktoken.model, tokenizer_config.json); give --tok DIR",
            req.model_dir.display()
        )));
    };
    tok.check_chat_specials()?;
    // A `generation_config.json` with a bad value is refused before any work.
    let base = chat_defaults(&req.model_dir)?;
    let ex = compute(&req, &mut rep)?;
    say(&crate::cli::summary::model_line(
        &rep, &inp.cfg, &inp.d, inp.layers,
    ));
    let index = TensorIndex::open(&req.model_dir)?;
    let census = Census::run(&inp.cfg, &index);
    if inp.layers == inp.d.nl {
        census.check(&req.model_dir.display().to_string())?;
    }
    let identity = super::state::identity(&inp, &index, &census)?;
    let prep = bind::prepare(&index, &inp.cfg, inp.layers)?;
    let (packed, coded) = open_packed(&req, &inp, &index, ex.threads())?;
    let ctx = match req.ctx {
        Some(c) => c,
        None => {
            let c = largest_ctx(
                &PlanInputs::last_rows(&req, &inp, &index, &prep, &ex, coded),
                1,
            )?;
            say(&format!(
                "context: {} (the largest that fits; give --ctx N for another)",
                crate::units::count(c as u64, "position", "positions")
            ));
            c
        }
    };
    inp.positions = ctx;
    let rp = plan_memory(
        &PlanInputs::last_rows(&req, &inp, &index, &prep, &ex, coded),
        &mut rep,
    )?;
    let bound = super::Bound {
        index: &index,
        census: &census,
        prep: &prep,
        packed: packed.as_ref(),
        rp: &rp,
    };
    let sess = super::open_session(&req, &mut inp, &bound, ex, &mut rep)?;
    say(&rep.trunk_line());
    say(&rep.cache_line());
    let (mut settings, _) = req.sampling.apply(&base);
    let seed_from_os = !settings.is_greedy() && req.sampling.seed.is_none();
    if seed_from_os {
        settings.seed = os_seed()?;
    }
    Ok(ChatModel {
        sess,
        tok,
        end_ids: inp.end_ids.clone(),
        ctx,
        ctx_explicit: req.ctx.is_some(),
        settings,
        seed_from_os,
        identity,
        vocab: inp.d.v,
        quiet,
        no_progress: req.no_progress,
    })
}
