//! The generation settings of a run: the sampler (ENGINE.md §8; a sampled run without
//! `--seed` draws one from the OS and prints it) and the stop rules (ENGINE.md §3).

use super::{Inputs, Request};
use crate::error::{Error, Result};
use crate::generate::sample::{os_seed, SamplerSettings};
use crate::generate::stop::StopRules;
use crate::report::{RunReport, SamplingReport};

/// The sampler settings (no `--seed` in a sampled run: one from the OS, printed) and the stop
/// rules of the run, into the report's `sampling`. Errors (exit 2): `--stop` without a
/// tokenizer; those of [`StopRules::new`]; exit 4 if the OS seed cannot be read.
pub(super) fn generation(
    req: &Request,
    inp: &Inputs,
    rep: &mut RunReport,
    say: &dyn Fn(&str),
) -> Result<(SamplerSettings, StopRules)> {
    let (mut settings, _) = req.sampling.apply(&SamplerSettings::greedy());
    if !settings.is_greedy() && req.sampling.seed.is_none() && req.batch.is_none() {
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

