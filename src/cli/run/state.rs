//! The generation settings of a run: the sampler (ENGINE.md §8; a sampled run without
//! `--seed` draws one from the OS and prints it), the stop rules (ENGINE.md §3), and the
//! session state files (`--load-state`, `--save-state`, FORMATS.md §9).

use super::{Inputs, Request};
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::config::MlaForm;
use crate::error::{Error, Result};
use crate::generate::sample::{os_seed, SamplerSettings};
use crate::generate::session::Sequence;
use crate::generate::state_file::{self, SequenceState, StateIdentity};
use crate::generate::stop::StopRules;
use crate::io::OutFile;
use crate::report::{RunReport, SamplingReport, StateReport};

/// The sampler settings (no `--seed` in a sampled run: one from the OS, printed) and the stop
/// rules of the run, into the report's `sampling`. Errors (exit 2): `--stop` without a
/// tokenizer; those of [`StopRules::new`]; exit 4 if the OS seed cannot be read.
pub(super) fn generation(
    req: &Request,
    inp: &Inputs,
    loaded: Option<&SequenceState>,
    rep: &mut RunReport,
    say: &dyn Fn(&str),
) -> Result<(SamplerSettings, StopRules)> {
    // a loaded state's settings stay unless the run gives its own (FORMATS.md §9.3)
    let base = loaded.map_or(SamplerSettings::greedy(), |st| st.sampler);
    let (mut settings, changed) = req.sampling.apply(&base);
    if let Some(s) = rep.state.as_mut() {
        s.sampler_changed = changed.iter().map(|c| c.key().to_string()).collect();
    }
    if !settings.is_greedy()
        && req.sampling.seed.is_none()
        && req.batch.is_none()
        && loaded.is_none()
    {
        settings.seed = os_seed()?;
        say(&format!(
            "seed: {} (from the OS; give --seed {} to repeat this run)",
            settings.seed, settings.seed
        ));
    }
    rep.sampling = SamplingReport {
        temperature: settings.temperature,
        top_p: settings.top_p,
        top_k: settings.top_k,
        min_p: settings.min_p,
        seed: (!settings.is_greedy()).then_some(settings.seed),
    };
    if !req.stop_texts.is_empty() && inp.tok.is_none() {
        return Err(Error::invalid(
            "flag `--stop`: needs a tokenizer to see the generated text (give --tok DIR, or use --stop-id)",
        ));
    }
    let rules = StopRules::new(
        inp.end_ids.clone(),
        req.stop_ids.clone(),
        req.stop_texts.clone(),
        req.gen as u64,
        inp.positions as u64,
        inp.d.v,
    )?;
    Ok((settings, rules))
}

/// The session-state flags that cannot go together (exit 2 saying why).
pub(super) fn check_flags(
    a: &crate::cli::args::Args,
    full_recompute: bool,
    gen: usize,
) -> Result<()> {
    let load = a.value_os("load-state").is_some();
    let save = a.value_os("save-state").is_some();
    let batch = a.value_os("batch").is_some();
    if load && full_recompute {
        return Err(Error::invalid(
            "flags `--load-state` and `--full-recompute`: a loaded state continues the sequence \
             incrementally; a full recompute would need the whole past re-run, which the state \
             replaces (give one of them)",
        ));
    }
    if load && batch {
        return Err(Error::invalid(
            "flags `--load-state` and `--batch`: a state file holds one sequence and the batch \
             file its own prompts (give one of them)",
        ));
    }
    if save && batch {
        return Err(Error::invalid(
            "flags `--save-state` and `--batch`: a state file holds one sequence (give one of them)",
        ));
    }
    if save && gen == 0 {
        return Err(Error::invalid(
            "flags `--save-state` and `--gen 0`: not supported yet (a state needs a pending id; \
             give --gen 1 or more)",
        ));
    }
    Ok(())
}

/// A loaded `--load-state` file: the identity it matched, the state, and the positions the
/// continued sequence may reach.
pub(super) struct Loaded {
    pub(super) id: StateIdentity,
    pub(super) st: SequenceState,
    pub(super) positions: usize,
}

/// The identity of this run's model for the state file (FORMATS.md §9.1).
pub(super) fn identity(
    inp: &Inputs,
    index: &TensorIndex,
    census: &Census,
) -> Result<StateIdentity> {
    let tag = index.weights_tag(&census.bound_shards())?;
    StateIdentity::from_config(&inp.cfg, MlaForm::Absorbed, tag)
}

/// Reads `--load-state` against this model (every refusal of FORMATS.md §9.3 names the
/// field; nothing is run) and sizes the continued sequence: `--ctx`, else the stored ids, the
/// pending id, the new input and `--gen`.
///
/// Errors (exit 2): those of [`state_file::load`]; `--ctx` below the continued sequence or
/// beyond max_position_embeddings.
pub(super) fn load(
    req: &Request,
    inp: &Inputs,
    index: &TensorIndex,
    census: &Census,
    rep: &mut RunReport,
) -> Result<Option<Loaded>> {
    let Some(path) = &req.load_state else {
        return Ok(None);
    };
    let id = identity(inp, index, census)?;
    let st = state_file::load("--load-state", path, &id)?;
    let have = st.ids.len() + 1 + inp.ids.len();
    let positions = match req.ctx {
        Some(c) if c < have => {
            return Err(Error::invalid(format!(
                "flag `--ctx {c}`: the loaded sequence and the new input hold {have} ids; give --ctx {have} or more"
            )))
        }
        Some(c) => c,
        // the sum may not saturate: it said the sequence needs 18446744073709551615 positions
        None => have.checked_add(req.gen).ok_or_else(|| {
            Error::invalid(format!(
                "flag `--gen {}`: the loaded sequence and the new input hold {have} ids, and \
                 {have} + --gen overflows; give --gen from 0 to {} (or --ctx)",
                req.gen,
                usize::MAX - have
            ))
        })?,
    };
    if let Some(m) = inp.cfg.max_position_embeddings {
        if positions as u64 > m && req.ctx.is_none() && (have as u64) < m {
            return Err(Error::invalid(format!(
                "flag `--gen {}`: the loaded sequence and the new input hold {have} ids, and \
                 {have} + --gen = {positions} positions is beyond max_position_embeddings {m}; \
                 give --gen from 0 to {}",
                req.gen,
                m - have as u64
            )));
        }
        if positions as u64 > m {
            return Err(Error::invalid(format!(
                "flag `--load-state {}`: the continued sequence needs {positions} positions, beyond max_position_embeddings {m}",
                path.display()
            )));
        }
    }
    rep.state = Some(StateReport {
        loaded: Some(path.display().to_string()),
        n_pos_loaded: st.ids.len() as u64,
        generated_before: st.generated,
        ..StateReport::default()
    });
    Ok(Some(Loaded { id, st, positions }))
}

/// Writes `--save-state` from the finished sequence (FORMATS.md §9: `.tmp`, sync, rename).
/// Never called after a failed step.
pub(super) fn save(
    out: OutFile,
    seq: &Sequence,
    id: &StateIdentity,
    generated_before: u64,
    rep: &mut RunReport,
) -> Result<()> {
    let path = out.path().display().to_string();
    let st = seq.to_state(generated_before)?;
    state_file::save_to(out, id, &st)?;
    rep.state.get_or_insert_with(StateReport::default).saved = Some(path);
    Ok(())
}
