//! `--batch FILE --parallel N` (ENGINE.md §10): the file's lines become sequences of one
//! session; one JSON line per input goes to standard output in input order (a line that could
//! not run: its error line, and exit 2 once every other line ran).

use super::Request;
use crate::cli::tokenize::read_file;
use crate::error::{Error, Result};
use crate::generate::batch::{run_batch, BatchItem};
use crate::generate::batch_input::{
    error_line, parse_file, result_line, BatchDefaults, BatchInput, BatchResult,
};
use crate::generate::sample::{os_seed, SamplerSettings};
use crate::generate::session::SequenceOptions;
use crate::generate::stop::{StopReason, StopRules};
use crate::model::experts::ExpertSource;
use crate::report::{BatchReport, RunReport, SpecReport};
use crate::run::RunSession;
use crate::tokenizer::Tokenizer;
use std::collections::BTreeMap;
use std::path::Path;

/// A batch file's inputs: each a runnable item or the error of its line.
pub(super) type Entries = Vec<std::result::Result<BatchItem, (u64, Error)>>;

/// Reads and checks the `--batch` file against the model: every line parsed, its prompt
/// encoded, its `--ctx`, stop rules and seed settled. Errors (exit 2): the file cannot be
/// read or holds no input line; a bad line is its own entry's error.
pub(super) fn entries(
    req: &Request,
    path: &Path,
    tok: Option<&Tokenizer>,
    end_ids: &[u32],
    v: usize,
    max_positions: Option<u64>,
) -> Result<Entries> {
    let bytes = read_file(path)?;
    let (base, _) = req.sampling.apply(&SamplerSettings::greedy());
    let d = BatchDefaults {
        gen: req.gen as u64,
        sampler: base,
        seed_given: req.sampling.seed.is_some(),
        stop: req.stop_texts.clone(),
        vocab_size: Some(v as u64),
        has_tokenizer: tok.is_some(),
    };
    let file = path.display().to_string();
    let mut out = Vec::new();
    for line in parse_file(&bytes, &file, &d) {
        let at = |e: Error| (line.index, e);
        let item = line.request.and_then(|r| {
            let prompt = match &r.input {
                BatchInput::Ids(ids) => ids.clone(),
                BatchInput::Prompt(t) => tok.map(|t2| t2.encode(t, false)).unwrap_or_default(),
            };
            let here = |why: String| Error::invalid(format!("{file}: line {}: {why}", line.line));
            if prompt.is_empty() {
                return Err(here("the prompt is empty (no ids)".into()));
            }
            // without --ctx a line needs prompt + gen positions: a sum that may not wrap or
            // saturate (it said "prompt + gen = 18446744073709551615 positions" for a gen
            // near 2^64); refused naming `gen` and its range
            let n = prompt.len();
            let gen_range = |limit: String, most: u64| {
                here(format!(
                    "key `gen`: the prompt ({n} ids) + gen ({}) exceeds {limit}; give gen from \
                     0 to {most}",
                    r.gen
                ))
            };
            let ctx = match req.ctx {
                Some(c) => c,
                None => usize::try_from(r.gen)
                    .ok()
                    .and_then(|g| n.checked_add(g))
                    .ok_or_else(|| {
                        gen_range(
                            "the positions a sequence can address".into(),
                            (usize::MAX - n) as u64,
                        )
                    })?,
            };
            if n > ctx {
                return Err(here(format!(
                    "the prompt has {n} ids, more than --ctx {ctx}"
                )));
            }
            if let Some(m) = max_positions.filter(|&m| ctx as u64 > m) {
                return Err(match req.ctx {
                    None if (n as u64) < m => {
                        gen_range(format!("max_position_embeddings {m}"), m - n as u64)
                    }
                    _ => here(format!(
                        "prompt + gen = {ctx} positions exceeds max_position_embeddings {m}"
                    )),
                });
            }
            let mut settings = r.sampler;
            if !settings.is_greedy() && !r.seed_given {
                settings.seed = os_seed()?;
            }
            let rules = StopRules::new(
                end_ids.to_vec(),
                req.stop_ids.clone(),
                r.stop.clone(),
                r.gen,
                ctx as u64,
                v,
            )
            .map_err(|e| here(e.message))?;
            if !r.stop.is_empty() && tok.is_none() {
                return Err(here("key `stop` needs a tokenizer".into()));
            }
            Ok(BatchItem {
                index: line.index,
                prompt,
                capacity: ctx.max(1),
                opts: SequenceOptions {
                    settings,
                    rules,
                    all_rows: false,
                },
                constraints: Default::default(),
            })
        });
        out.push(item.map_err(at));
    }
    if out.is_empty() {
        // nothing to run: an empty file (or only blank lines) is a mistake, not a batch
        return Err(Error::invalid(format!(
            "flag `--batch {file}`: no input lines (give one JSON object per line, \
             {{\"prompt\": TEXT}} or {{\"ids\": [...]}})"
        )));
    }
    Ok(out)
}

/// Runs the batch's items `parallel` at a time and prints one line per input in input order.
/// Errors: a failed forward or output (the run's error); exit 2 at the end when a line was
/// refused.
pub(super) fn run(
    sess: &mut RunSession<'_>,
    entries: Entries,
    parallel: usize,
    rep: &mut RunReport,
) -> Result<()> {
    let n = entries.len() as u64;
    let mut lines: BTreeMap<u64, String> = BTreeMap::new();
    let mut refused = Vec::new();
    let mut items = Vec::new();
    for e in entries {
        match e {
            Ok(it) => items.push(it),
            Err((i, e)) => {
                lines.insert(i, error_line(i, &e));
                refused.push(i);
            }
        }
    }
    // (seed, greedy, has --stop strings, constrained) per input
    let meta: BTreeMap<u64, (u64, bool, bool, bool)> = items
        .iter()
        .map(|it| {
            let s = &it.opts.settings;
            let stops = !it.opts.rules.stop_texts().is_empty();
            let constrained = !it.constraints.is_empty();
            (it.index, (s.seed, s.is_greedy(), stops, constrained))
        })
        .collect();
    let mut next = 0u64;
    let tok = sess.tok;
    let flush = |lines: &mut BTreeMap<u64, String>, next: &mut u64| -> Result<()> {
        while let Some(l) = lines.remove(next) {
            crate::cli::write_stdout(format!("{l}\n").as_bytes())?;
            *next += 1;
        }
        Ok(())
    };
    flush(&mut lines, &mut next)?;
    // the speculation counters over every sequence (sweeps: each one's own, prefill included)
    let mut spec = SpecReport {
        max_draft: sess.spec.max_draft as u64,
        ..SpecReport::default()
    };
    let res = run_batch(sess, items, parallel, &mut |i, s| {
        let line = match s {
            Err(e) => {
                refused.push(i);
                error_line(i, &e)
            }
            Ok(mut s) => {
                let st = s.spec_stats();
                spec.sweeps += s.sweeps() + 1;
                spec.verify_sweeps += st.verify_sweeps;
                spec.drafted += st.drafted;
                spec.accepted += st.accepted;
                spec.tokens += s.generated().len() as u64;
                spec.verify_seconds += st.verify_seconds;
                let (seed, greedy, stops, constrained) =
                    meta.get(&i).copied().unwrap_or((0, true, false, false));
                // without the stop string (TOKENIZER.md §9 lossy decode otherwise); under
                // `--json-schema` without the end id that closes the JSON, as a single run
                // prints it: the text is exactly the JSON
                let text = match tok {
                    Some(_) if stops => {
                        s.finish_text();
                        Some(s.released_text().to_string())
                    }
                    Some(t) => {
                        let mut ids = s.generated();
                        if constrained {
                            if let Some((last, head)) = ids.split_last() {
                                if t.end_of_turn_ids().contains(last) {
                                    ids = head;
                                }
                            }
                        }
                        Some(t.decode_lossy(ids)?)
                    }
                    None => None,
                };
                result_line(&BatchResult {
                    index: i,
                    generated_ids: s.generated().to_vec(),
                    generated_text: text,
                    stop_reason: s.stop_reason().unwrap_or(StopReason::Length),
                    seed: if greedy { 0 } else { seed },
                    logits_hash: s.logits_hash(),
                })
            }
        };
        lines.insert(i, line);
        flush(&mut lines, &mut next)
    });
    rep.experts = sess.experts.stats();
    rep.cache = sess.experts.inner.cache_stats();
    rep.trunk.stats = sess.trunk.stats();
    rep.tables = sess.trunk.table_stats();
    let tot = res?;
    sess.experts.finish_trace()?;
    rep.stop_reason = StopReason::Length.name().to_string();
    rep.timing.prefill_seconds = tot.prefill_seconds;
    rep.timing.decode_seconds = tot.decode_seconds;
    rep.layers_completed = sess.model.layers.len();
    if spec.max_draft > 0 {
        rep.speculation = Some(spec);
    }
    rep.batch = Some(BatchReport {
        sequences: n,
        parallel: parallel as u64,
        sweeps: tot.sweeps,
        tokens: tot.tokens,
        tokens_per_second: if tot.decode_seconds > 0.0 {
            tot.tokens as f64 / tot.decode_seconds
        } else {
            0.0
        },
    });
    if !refused.is_empty() {
        crate::sort::sort(&mut refused);
        return Err(Error::invalid(format!(
            "--batch: {} of {n} inputs could not run (index {}); the others ran",
            refused.len(),
            refused
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}
