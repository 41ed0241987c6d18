//! The run's flags read into typed values (ENGINE.md §3, §4, §5, §8, §10): each function
//! reads one group of flags of a parsed command line and refuses a bad value with exit 2
//! naming the flag. `request_from_args` (cli/run.rs) assembles them into the request.

use crate::cli::args::Args;
use crate::error::{Error, Result};
use crate::plan::{gb_to_bytes, Budget, GB};
use crate::stream::pieces::PieceMode;
use crate::stream::policy::{DEFAULT_POLICY, POLICY_NAMES};
use std::path::PathBuf;

/// The largest `--spec K`: a sweep's rows and the plan's scratch grow with K, and prompt
/// lookup rarely keeps more.
pub(super) const MAX_SPEC: usize = 64;

/// The most sequences `--parallel` (and serve's `--snapshots`) may plan: far beyond any
/// budget (each holds its KDA state and MLA cache), and small enough that the plan's sums
/// and products of a count cannot overflow (`--parallel 18446744073709551615` panicked in
/// the plan's arithmetic).
pub(crate) const MAX_SEQUENCES: usize = 4096;

/// The most reads in flight `--io-depth` accepts (each is a thread while it reads).
pub(super) const MAX_IO_DEPTH: usize = 64;

/// A budget flag in decimal GB: a finite number > 0 (fractions allowed), as bytes.
pub(super) fn gb_flag(a: &Args, name: &str) -> Result<Option<u64>> {
    match a.value(name)? {
        None => Ok(None),
        Some(v) => {
            let x: f64 = v.trim().parse().map_err(|_| {
                Error::invalid(format!(
                    "flag `--{name} {v}`: expected a number of decimal GB (fractions allowed)"
                ))
            })?;
            if x.is_nan() || x <= 0.0 {
                return Err(Error::invalid(format!(
                    "flag `--{name} {v}`: expected a positive number of decimal GB"
                )));
            }
            if !x.is_finite() || x * GB >= u64::MAX as f64 {
                return Err(Error::invalid(format!(
                    "flag `--{name} {v}`: too large; expected at most {} decimal GB",
                    (u64::MAX as f64 / GB).floor()
                )));
            }
            let bytes = gb_to_bytes(x);
            if bytes == 0 {
                // Positive but below one byte: it would read as a budget of 0 later.
                return Err(Error::invalid(format!(
                    "flag `--{name} {v}`: {v} GB is less than one byte; expected a positive number of decimal GB"
                )));
            }
            Ok(Some(bytes))
        }
    }
}

/// The memory budget flags (`--preset`, `--mem-gb`, `--trunk-gb`, `--cache-gb`,
/// `--trunk-ring`; ENGINE.md §4). Errors (exit 2): an unknown preset, a bad size, a ring of 0,
/// a fixed preset with `--mem-gb`.
pub(super) fn budget_flags(a: &Args) -> Result<Budget> {
    let preset = match a.value("preset")? {
        None => None,
        Some(p) if p == "auto" => None,
        Some(p) => Some(crate::plan::preset(&p).ok_or_else(|| {
            Error::invalid(format!(
                "flag `--preset {p}`: unknown preset (known: auto, {}; see k3 --list-presets)",
                crate::plan::PRESETS
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?),
    };
    let ring = a.parsed::<usize>("trunk-ring", "a positive integer")?;
    if ring == Some(0) {
        return Err(Error::invalid("flag `--trunk-ring`: must be at least 1"));
    }
    let budget = Budget {
        preset,
        mem: gb_flag(a, "mem-gb")?,
        trunk: gb_flag(a, "trunk-gb")?,
        cache: gb_flag(a, "cache-gb")?,
        ring,
    };
    if let (Some(p), Some(_)) = (preset, budget.mem) {
        return Err(Error::invalid(format!(
            "flags `--preset {}` and `--mem-gb`: a fixed preset sets its own budgets; give one of them",
            p.name
        )));
    }
    Ok(budget)
}

/// `--trunk-pieces part|layer` and `--io-depth N` (1 to [`MAX_IO_DEPTH`]; ENGINE.md §5).
/// Errors (exit 2): an unknown piece mode, a depth out of range.
pub(super) fn streaming_flags(a: &Args) -> Result<(PieceMode, Option<usize>)> {
    let pieces = match a.value("trunk-pieces")? {
        Some(v) => PieceMode::parse(&v)?,
        None => PieceMode::default(),
    };
    let io_depth = a.parsed::<usize>("io-depth", "a positive integer")?;
    if let Some(n) = io_depth {
        if !(1..=MAX_IO_DEPTH).contains(&n) {
            return Err(Error::invalid(format!(
                "flag `--io-depth {n}`: expected 1 to {MAX_IO_DEPTH} reads in flight"
            )));
        }
    }
    Ok((pieces, io_depth))
}

/// `--stop-id ID` and `--stop TEXT` (both repeatable). Errors (exit 2): an id that is not a
/// number, an empty stop string.
pub(super) fn stop_flags(a: &Args) -> Result<(Vec<u32>, Vec<String>)> {
    let mut stop_ids = Vec::new();
    for s in a.values("stop-id")? {
        stop_ids.push(
            s.trim().parse::<u32>().map_err(|_| {
                Error::invalid(format!("flag `--stop-id`: `{s}` is not a token id"))
            })?,
        );
    }
    let stop_texts = a.values("stop")?;
    if stop_texts.iter().any(|s| s.is_empty()) {
        return Err(Error::invalid(
            "flag `--stop \"\"`: a stop string must not be empty; give the text to stop at",
        ));
    }
    Ok((stop_ids, stop_texts))
}

/// `--cache-policy NAME` (default [`DEFAULT_POLICY`]). Errors (exit 2): an unknown policy.
pub(super) fn cache_policy(a: &Args) -> Result<String> {
    let policy = a
        .value("cache-policy")?
        .unwrap_or_else(|| DEFAULT_POLICY.to_string());
    if !POLICY_NAMES.contains(&policy.as_str()) {
        return Err(Error::invalid(format!(
            "flag `--cache-policy {policy}`: unknown policy (known: {})",
            POLICY_NAMES.join(", ")
        )));
    }
    Ok(policy)
}

/// `--trunk DIR` (a packed trunk). Errors (exit 2): not a directory.
pub(super) fn trunk_dir(a: &Args) -> Result<Option<PathBuf>> {
    let trunk_dir = a.value_os("trunk").map(PathBuf::from);
    if let Some(t) = &trunk_dir {
        if !t.is_dir() {
            return Err(Error::invalid(format!(
                "flag `--trunk {}`: not a directory (write a packed trunk with `k3 pack-trunk <model_dir> <out_dir>`)",
                t.display()
            )));
        }
    }
    Ok(trunk_dir)
}

/// Where the prompts come from: `--batch FILE` and `--load-state PATH` (the prompt flags
/// themselves are read once the tokenizer is loaded). Errors (exit 2): `run` without any
/// prompt, `--batch` with a prompt flag or `--dump-logits` (one sequence's).
pub(super) fn prompt_source(a: &Args, cmd: &str) -> Result<(Option<PathBuf>, Option<PathBuf>)> {
    let batch = a.value_os("batch").map(PathBuf::from);
    let prompts = a.present(&["prompt", "prompt-file", "ids"]);
    let load_state = a.value_os("load-state").map(PathBuf::from);
    match (&batch, prompts.first()) {
        (None, None) if load_state.is_none() && cmd == "run" => {
            return Err(Error::invalid(
                "no prompt: give one of `--prompt TEXT`, `--prompt-file PATH`, `--ids 1,2,3`, `--batch FILE`",
            ))
        }
        (Some(_), Some(p)) => {
            return Err(Error::invalid(format!(
                "flags `--batch` and `--{p}`: the batch file holds the prompts; give one of them"
            )))
        }
        _ => {}
    }
    if batch.is_some() && a.value_os("dump-logits").is_some() {
        return Err(Error::invalid(
            "flags `--dump-logits` and `--batch`: the dump holds one sequence's logits (give one of them)",
        ));
    }
    Ok((batch, load_state))
}

/// `--parallel N` (default 1); `several` is true where there are sequences to decode
/// together (`--batch`, `serve`). Errors (exit 2): 0, or the flag without `--batch` in a run.
pub(super) fn parallel(a: &Args, several: bool) -> Result<usize> {
    let parallel = a
        .parsed::<usize>("parallel", "a positive integer")?
        .unwrap_or(1);
    if !(1..=MAX_SEQUENCES).contains(&parallel) {
        return Err(Error::invalid(format!(
            "flag `--parallel {parallel}`: expected 1 to {MAX_SEQUENCES} sequences"
        )));
    }
    if !several && a.value("parallel")?.is_some() {
        return Err(Error::invalid(
            "flag `--parallel`: decodes the sequences of `--batch FILE` together; give --batch",
        ));
    }
    Ok(parallel)
}

/// `--spec K` (0 to [`MAX_SPEC`], default 0 = off; ENGINE.md §10). Errors (exit 2): out of
/// range, or with `--full-recompute`.
pub(super) fn spec(a: &Args) -> Result<usize> {
    let spec = a
        .parsed::<usize>("spec", "a non-negative integer")?
        .unwrap_or(0);
    if spec > MAX_SPEC {
        return Err(Error::invalid(format!(
            "flag `--spec {spec}`: expected 0 to {MAX_SPEC} drafted ids per sweep"
        )));
    }
    if spec > 0 && a.switch("full-recompute") {
        return Err(Error::invalid(
            "flags `--spec` and `--full-recompute`: speculation runs incrementally; give one of them",
        ));
    }
    Ok(spec)
}

/// A flag whose value is a positive integer, if given. Errors (exit 2): not a number, or 0.
pub(super) fn positive(a: &Args, name: &str) -> Result<Option<usize>> {
    let v = a.parsed::<usize>(name, "a positive integer")?;
    if v == Some(0) {
        return Err(Error::invalid(format!(
            "flag `--{name} 0`: must be at least 1"
        )));
    }
    Ok(v)
}

/// `--prefill-chunk N|auto` (default auto: `None`, the plan chooses, `crate::plan::plan_with_chunk`),
/// `--threads N` (1 to the pool's most), `--layers N`.
/// Errors (exit 2): 0, neither a number nor `auto`, or a thread count out of range.
pub(super) fn compute_flags(a: &Args) -> Result<(Option<usize>, Option<usize>, Option<usize>)> {
    let chunk = match a.value("prefill-chunk")? {
        Some(v) if v.trim() == "auto" => None,
        Some(_) => a.parsed::<usize>("prefill-chunk", "a positive integer or `auto`")?,
        None => None,
    };
    if chunk == Some(0) {
        return Err(Error::invalid("flag `--prefill-chunk`: must be at least 1"));
    }
    let threads = a.parsed::<usize>("threads", "a positive integer")?;
    if let Some(t) = threads {
        if !(1..=k3_kernels::pool::MAX_THREADS).contains(&t) {
            return Err(Error::invalid(format!(
                "flag `--threads {t}`: expected 1 to {}",
                k3_kernels::pool::MAX_THREADS
            )));
        }
    }
    let layers = a.parsed::<usize>("layers", "a positive integer")?;
    if layers == Some(0) {
        return Err(Error::invalid("flag `--layers`: must be at least 1"));
    }
    Ok((chunk, threads, layers))
}
