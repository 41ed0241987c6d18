//! The checked inputs of a run (ENGINE.md §3): the config, the `--dump-cache-trace` files,
//! the tokenizer and the prompt, checked against the model before any work (exit 2 naming the
//! flag and the file), and the compute path.

use super::Request;
use crate::cli::tokenize::{load_tokenizer, prompt_ids, tokenizer_dir};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::{Dims, Exec};
use crate::report::RunReport;
use crate::stream::trace::TraceWriter;
use crate::tokenizer::Tokenizer;
use k3_kernels::{Isa, Kernels};
use std::path::PathBuf;

/// The checked inputs of a run: config, tokenizer, prompt ids and where generation ends.
pub(super) struct Inputs {
    pub(super) cfg: Config,
    pub(super) d: Dims,
    /// Bound layers (`--layers`, else all).
    pub(super) layers: usize,
    pub(super) tok: Option<Tokenizer>,
    pub(super) ids: Vec<u32>,
    pub(super) end_ids: Vec<u32>,
    /// `--ctx`, else prompt ids + `--gen`: the positions the sequence may reach.
    pub(super) positions: usize,
    /// The `--dump-cache-trace` writer, created before any work.
    pub(super) trace: Option<TraceWriter>,
    /// The `--batch` inputs (empty without it).
    pub(super) batch: super::batch::Entries,
}

/// Reads the config, opens the trace files and the tokenizer, and checks the prompt, the
/// stop ids and the positions against the model (exit 2 naming the flag and the file).
pub(super) fn check_inputs(req: &Request, rep: &mut RunReport) -> Result<Inputs> {
    let cfg = Config::from_file(&req.config)?;
    let d = Dims::from_config(&cfg);
    // The trace files are created before any work, like every output (ENGINE.md §3).
    let trace = match &req.trace_dir {
        Some(dir) => Some(TraceWriter::create(dir, d.nl as u32, d.e as u32)?),
        None => None,
    };
    rep.config_shape = cfg.shape.as_str().to_string();
    rep.config_fingerprint = cfg.fingerprint(crate::config::MlaForm::Absorbed);
    rep.layers = d.nl;
    let layers = req.layers.unwrap_or(d.nl);
    if layers > d.nl {
        return Err(Error::invalid(format!(
            "flag `--layers {layers}`: the model has {} layers",
            d.nl
        )));
    }
    rep.layers_bound = layers;
    // The tokenizer (`--tok`, or the model directory when it holds the files) and the prompt.
    let tok = load_tokenizer(&req.args, &req.model_dir)?;
    if let Some(t) = &tok {
        // Name both sides: the tokenizer directory (and whether it came from --tok) and the
        // config file.
        t.check_vocab_size(d.v).map_err(|_| {
            let dir = tokenizer_dir(
                req.args.value_os("tok").map(PathBuf::from).as_deref(),
                &req.model_dir,
            )
            .unwrap_or_default();
            Error::invalid(format!(
                "{}: vocab_size {} does not match the tokenizer in {}{} ({} ids: {} ranks in {} + {} special); give the model's own tokenizer with --tok, or the prompt as --ids",
                req.config.display(),
                d.v,
                dir.display(),
                if req.args.value_os("tok").is_some() { " (--tok)" } else { "" },
                t.vocab_size(),
                t.num_ranks(),
                crate::tokenizer::TIKTOKEN_FILE,
                t.vocab_size() - t.num_ranks()
            ))
        })?;
    }
    let no_prompt = req
        .args
        .present(&["prompt", "prompt-file", "ids"])
        .is_empty();
    // --batch holds its prompts; after --load-state the new input is optional
    let ids = if req.batch.is_some() || no_prompt {
        Vec::new()
    } else {
        prompt_ids(&req.args, tok.as_ref())?
    };
    rep.prompt_ids = ids.clone();
    // Input checks before any work (exit 2).
    for &id in &req.stop_ids {
        if id as usize >= d.v {
            return Err(Error::invalid(format!(
                "flag `--stop-id {id}`: outside the vocabulary (ids 0 to {} for vocab_size {} in {})",
                d.v.saturating_sub(1),
                d.v,
                req.config.display()
            )));
        }
    }
    for (p, &id) in ids.iter().enumerate() {
        if id as usize >= d.v {
            return Err(Error::invalid(format!(
                "flag `--ids`: id {id} at position {p} is outside the vocabulary (vocab_size {} in {})",
                d.v,
                req.config.display()
            )));
        }
    }
    // A sum past usize is invalid input; a huge but countable one is left to the memory plan
    // (its MLA cache saturates, so it is refused with exit 3, never wrapped to a small size).
    let positions = ids.len().checked_add(req.gen).ok_or_else(|| {
        Error::invalid(format!(
            "prompt ({} ids) + --gen {} is more positions than this machine can count",
            ids.len(),
            req.gen
        ))
    })?;
    if let Some(ctx) = req.ctx {
        check_ctx(req, ctx, ids.len(), cfg.max_position_embeddings)?;
    }
    let positions = req.ctx.unwrap_or(positions);
    if let (None, Some(maxp)) = (req.ctx, cfg.max_position_embeddings) {
        if positions as u64 > maxp {
            return Err(Error::invalid(format!(
                "prompt ({} ids) + --gen {} = {positions} positions exceeds max_position_embeddings {maxp} of {}; give --gen from 0 to {}",
                ids.len(),
                req.gen,
                req.config.display(),
                maxp.saturating_sub(ids.len() as u64)
            )));
        }
    }
    // End ids (ENGINE.md §3): with a tokenizer [EOS] and <|end_of_msg|>; without one the
    // config's eos_token_id when it is inside the vocabulary; plus every --stop-id.
    let mut end_ids = Vec::new();
    match &tok {
        Some(t) => end_ids.extend(t.end_of_turn_ids()),
        None => {
            if let Some(eos) = cfg.eos_token_id {
                if (eos as usize) < d.v {
                    end_ids.push(eos as u32);
                }
            }
        }
    }
    let (batch, positions) = match &req.batch {
        Some(path) => {
            let b = super::batch::entries(
                req,
                path,
                tok.as_ref(),
                &end_ids,
                d.v,
                cfg.max_position_embeddings,
            )?;
            let most = b.iter().flatten().map(|it| it.capacity).max().unwrap_or(1);
            (b, most)
        }
        None => (Vec::new(), positions),
    };
    Ok(Inputs {
        cfg,
        d,
        layers,
        tok,
        ids,
        end_ids,
        positions,
        trace,
        batch,
    })
}

/// `--ctx N` against the prompt (at least its length) and the config's
/// `max_position_embeddings` (at most; ENGINE.md §3). Errors: exit 2 naming the flag.
fn check_ctx(req: &Request, ctx: usize, prompt: usize, maxp: Option<u64>) -> Result<()> {
    if ctx < prompt.max(1) {
        return Err(Error::invalid(format!(
            "flag `--ctx {ctx}`: the prompt has {prompt} ids, more than the context; give --ctx {} or more",
            prompt.max(1)
        )));
    }
    if let Some(m) = maxp {
        if ctx as u64 > m {
            return Err(Error::invalid(format!(
                "flag `--ctx {ctx}`: above max_position_embeddings {m} of {}; give --ctx {m} or less",
                req.config.display()
            )));
        }
    }
    Ok(())
}

/// The compute path: `--isa` / `--threads` win over K3_ISA / K3_THREADS (ENGINE.md §3).
pub(super) fn compute(req: &Request, rep: &mut RunReport) -> Result<Exec> {
    let isa = match &req.isa {
        Some(v) => Isa::select("--isa", v),
        None => Isa::from_env(),
    }
    .map_err(|e| Error::invalid(e.message))?;
    let threads = match req.threads {
        Some(n) => n,
        None => k3_kernels::pool::threads_from_env().map_err(|e| Error::invalid(e.message))?,
    };
    let ex = Exec::new(Kernels::new(isa, threads).map_err(|e| Error::invalid(e.message))?);
    rep.isa = ex.isa().name().to_string();
    rep.threads = ex.threads();
    Ok(ex)
}
