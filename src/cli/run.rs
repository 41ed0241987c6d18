//! `k3 <model_dir> [options]` / `k3 run <model_dir>`: the main job (ENGINE.md §3, §6).
//! Prompt ids in, greedy tokens out: plan the memory, bind the checkpoint, prefill in chunks,
//! decode incrementally (or by full recompute), print the report on standard error and the
//! generated ids on standard output, write `--out` JSON and `--dump-logits` rows.

use super::args::{Args, Spec};
use super::tokenize::{load_tokenizer, prompt_ids, tokenizer_dir, TextPrinter};
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::OutFile;
use crate::model::experts::{ExpertSource, ExpertStats};
use crate::model::state::DecodeState;
use crate::model::{self, mla::MLA_FORM, Dims, Exec, LogitRows};
use crate::plan::{gb_to_bytes, plan_run, Budget, ModelSizes, RunShape, GB};
use crate::report::{RunReport, StepReport};
use crate::stream::bind::{self, StreamConfig};
use crate::stream::pack::PackedTrunk;
use crate::stream::policy::{DEFAULT_POLICY, POLICY_NAMES};
use crate::stream::trace::{TraceWriter, HIST_FILE, TRACE_FILE};
use crate::stream::trunk::StreamedTrunk;
use k3_kernels::{Fnv1a64, Isa, Kernels};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

const SPECS: &[Spec] = &[
    Spec::Value("prompt"),
    Spec::Value("prompt-file"),
    Spec::Value("ids"),
    Spec::Value("tok"),
    Spec::Value("config"),
    Spec::Value("gen"),
    Spec::Value("preset"),
    Spec::Value("mem-gb"),
    Spec::Value("trunk"),
    Spec::Value("trunk-gb"),
    Spec::Value("trunk-ring"),
    Spec::Value("cache-gb"),
    Spec::Switch("full-recompute"),
    Spec::Switch("incremental"),
    Spec::Value("prefill-chunk"),
    Spec::Value("cache-policy"),
    Spec::Value("temperature"),
    Spec::Value("top-p"),
    Spec::Value("top-k"),
    Spec::Value("seed"),
    Spec::Repeat("stop-id"),
    Spec::Value("threads"),
    Spec::Value("isa"),
    Spec::Value("layers"),
    Spec::Value("save-state"),
    Spec::Value("load-state"),
    Spec::Value("out"),
    Spec::Value("dump-logits"),
    Spec::Value("dump-cache-trace"),
    Spec::Switch("quiet"),
    Spec::Switch("no-progress"),
    Spec::Switch("help"),
];

const RUN_USAGE: &str = "\
usage: k3 <model_dir> [options]   (also: k3 run <model_dir> [options])
  --ids 1,2,3 | --prompt TEXT | --prompt-file PATH   the prompt (exactly one)
  --tok DIR            tokenizer directory (default: the model directory when it holds one)
  --config PATH        config file (default: <model_dir>/config.json)
  --gen N              tokens to generate (default 16; 0 = teacher-forced forward only)
  --prefill-chunk N    positions per prefill chunk (default 64; never changes a logit)
  --full-recompute     re-run the whole prefix every step (diagnostic; same logits)
  --stop-id ID         extra end id (repeatable)
  --threads N, --isa scalar|avx2|neon   (also K3_THREADS, K3_ISA)
  --layers N           bind only the first N layers
  --out FILE           JSON report;  --dump-logits PATH  f32 rows [rows, vocab]
  --dump-cache-trace DIR   expert_trace.bin + expert_hist.json
  --quiet, --no-progress
Memory (decimal GB, fractions allowed; see k3 --list-presets):
  --preset NAME        auto (default), ultra, laptop, desktop, workstation, server, max
  --mem-gb X           whole-process budget (trunk first, then lm_head rows, then expert cache, then embedding)
  --trunk DIR          a packed trunk (k3 pack-trunk) to stream the trunk from
  --trunk-gb X         trunk budget: pinned layers + ring slots
  --trunk-ring N       ring slots (default 2 when streaming and they fit, else 1)
  --cache-gb X         expert-cache budget (at least top-k experts)
  --cache-policy NAME  lru, fifo, sieve, s3-fifo, arc, 2q, lfu-da, lfu (default lfu)
Not supported yet (refused): sampling (--temperature other than 0, --top-p, --top-k, --seed),
  --save-state, --load-state.
";

/// Flags of ENGINE.md §3 that belong to later work: refused, never silently ignored.
const NOT_YET: &[(&str, &str)] = &[
    ("top-p", "sampling"),
    ("top-k", "sampling"),
    ("seed", "sampling"),
    ("save-state", "session state files"),
    ("load-state", "session state files"),
];

/// The parsed run request (the prompt is resolved once the tokenizer is loaded).
#[derive(Debug)]
struct Request {
    args: Args,
    model_dir: PathBuf,
    config: PathBuf,
    gen: usize,
    full_recompute: bool,
    chunk: usize,
    stop_ids: Vec<u32>,
    threads: Option<usize>,
    isa: Option<String>,
    layers: Option<usize>,
    /// `--out`, opened (as its temporary) before any work; written when the run ends.
    out: Option<OutFile>,
    /// `--dump-logits`, opened before any work.
    dump_logits: Option<OutFile>,
    quiet: bool,
    no_progress: bool,
    trace_dir: Option<PathBuf>,
    budget: Budget,
    trunk_dir: Option<PathBuf>,
    policy: String,
}

/// A budget flag in decimal GB: a finite number > 0 (fractions allowed), as bytes.
fn gb_flag(a: &Args, name: &str) -> Result<Option<u64>> {
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

fn parse_request(argv: &[OsString]) -> Result<Option<Request>> {
    let Some(a) = Args::parse_or_help(argv, SPECS, RUN_USAGE)? else {
        return Ok(None);
    };
    if a.positional.len() != 1 {
        return Err(Error::invalid(format!(
            "run: expected one model directory, found {} positional argument{} (see k3 --help)",
            a.positional.len(),
            if a.positional.len() == 1 { "" } else { "s" }
        )));
    }
    for (flag, what) in NOT_YET {
        if a.present(&[flag]).len() == 1 {
            return Err(Error::invalid(format!(
                "flag `--{flag}`: not supported yet ({what} is later work)"
            )));
        }
    }
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
        mem: gb_flag(&a, "mem-gb")?,
        trunk: gb_flag(&a, "trunk-gb")?,
        cache: gb_flag(&a, "cache-gb")?,
        ring,
    };
    if let (Some(p), Some(_)) = (preset, budget.mem) {
        return Err(Error::invalid(format!(
            "flags `--preset {}` and `--mem-gb`: a fixed preset sets its own budgets; give one of them",
            p.name
        )));
    }
    let policy = a
        .value("cache-policy")?
        .unwrap_or_else(|| DEFAULT_POLICY.to_string());
    if !POLICY_NAMES.contains(&policy.as_str()) {
        return Err(Error::invalid(format!(
            "flag `--cache-policy {policy}`: unknown policy (known: {})",
            POLICY_NAMES.join(", ")
        )));
    }
    let trunk_dir = a.value_os("trunk").map(PathBuf::from);
    if let Some(t) = &trunk_dir {
        if !t.is_dir() {
            return Err(Error::invalid(format!(
                "flag `--trunk {}`: not a directory (write a packed trunk with `k3 pack-trunk <model_dir> <out_dir>`)",
                t.display()
            )));
        }
    }
    if let Some(t) = a.parsed::<f64>("temperature", "a number")? {
        if t != 0.0 {
            return Err(Error::invalid(format!(
                "flag `--temperature {t}`: not supported yet (sampling is later work; 0 = greedy)"
            )));
        }
    }
    let model_dir = PathBuf::from(&a.positional[0]);
    if !model_dir.is_dir() {
        return Err(Error::invalid(format!(
            "`{}` is neither a subcommand nor a model directory (see k3 --help)",
            model_dir.display()
        )));
    }
    if a.present(&["prompt", "prompt-file", "ids"]).is_empty() {
        return Err(Error::invalid(
            "no prompt: give one of `--prompt TEXT`, `--prompt-file PATH`, `--ids 1,2,3`",
        ));
    }
    let gen = a
        .parsed::<usize>("gen", "a non-negative integer")?
        .unwrap_or(16);
    let chunk = a
        .parsed::<usize>("prefill-chunk", "a positive integer")?
        .unwrap_or(64);
    if chunk == 0 {
        return Err(Error::invalid("flag `--prefill-chunk`: must be at least 1"));
    }
    let mut stop_ids = Vec::new();
    for s in a.values("stop-id")? {
        stop_ids.push(
            s.trim().parse::<u32>().map_err(|_| {
                Error::invalid(format!("flag `--stop-id`: `{s}` is not a token id"))
            })?,
        );
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
    // Output files go where the user said: every output path is checked (and its temporary
    // created) now, so that a bad path is a usage error before the run, not an I/O failure
    // after it (ENGINE.md §3).
    let out_path = a.value_os("out").map(PathBuf::from);
    let dump_path = a.value_os("dump-logits").map(PathBuf::from);
    let trace_dir = a.value_os("dump-cache-trace").map(PathBuf::from);
    if let Some(t) = &trace_dir {
        if t.exists() && !t.is_dir() {
            return Err(Error::invalid(format!(
                "flag `--dump-cache-trace {}`: not a directory; give a directory for expert_trace.bin and expert_hist.json",
                t.display()
            )));
        }
    }
    // No output may overwrite an input (a shard, the config, the prompt file, a tokenizer or
    // packed-trunk file) or another output, through any link or spelling (io::out).
    let config_path = a.value_os("config").map(PathBuf::from);
    let tok_dir = a.value_os("tok").map(PathBuf::from);
    let prompt_file = a.value_os("prompt-file").map(PathBuf::from);
    let input_dirs: Vec<&Path> = [Some(&model_dir), trunk_dir.as_ref(), tok_dir.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| p.as_path())
        .collect();
    let input_files: Vec<&Path> = [config_path.as_ref(), prompt_file.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| p.as_path())
        .collect();
    let mut outputs: Vec<(&str, PathBuf)> = Vec::new();
    outputs.extend(out_path.iter().map(|p| ("--out", p.clone())));
    outputs.extend(dump_path.iter().map(|p| ("--dump-logits", p.clone())));
    if let Some(t) = &trace_dir {
        for name in [TRACE_FILE, HIST_FILE] {
            outputs.push(("--dump-cache-trace", t.join(name)));
        }
    }
    crate::io::out::check_outputs(&outputs, &input_dirs, &input_files)?;
    let out = match &out_path {
        Some(p) => Some(OutFile::create("--out", p, "the report")?),
        None => None,
    };
    let dump_logits = match &dump_path {
        Some(p) => Some(OutFile::create("--dump-logits", p, "the logits dump")?),
        None => None,
    };
    let (full_recompute, quiet, isa) = (
        a.switch("full-recompute"),
        a.switch("quiet"),
        a.value("isa")?,
    );
    Ok(Some(Request {
        config: a
            .value_os("config")
            .map(PathBuf::from)
            .unwrap_or_else(|| model_dir.join("config.json")),
        model_dir,
        gen,
        full_recompute,
        chunk,
        stop_ids,
        threads,
        isa,
        layers,
        out,
        dump_logits,
        quiet,
        no_progress: a.switch("no-progress"),
        trace_dir,
        budget,
        trunk_dir,
        policy,
        args: a,
    }))
}

/// Runs the command; the report (and `--out`) is produced also when the run fails.
pub fn run(argv: &[OsString]) -> Result<()> {
    let wall = Instant::now();
    let mut req = match parse_request(argv)? {
        Some(r) => r,
        None => return Ok(()),
    };
    let out = req.out.take();
    let dump = req.dump_logits.take();
    let mut rep = RunReport {
        model_dir: req.model_dir.display().to_string(),
        mla_form: MLA_FORM.to_string(),
        mode: if req.full_recompute {
            "full_recompute"
        } else {
            "incremental"
        }
        .to_string(),
        stop_reason: "error".to_string(),
        ..RunReport::default()
    };
    let res = execute(&req, dump, &mut rep, wall);
    rep.timing.wall_seconds = wall.elapsed().as_secs_f64();
    rep.peak_rss_bytes = crate::io::sys::peak_rss_bytes().unwrap_or(0);
    if let Err(e) = &res {
        rep.error = Some(e.clone());
        rep.stop_reason = "error".to_string();
    } else if !req.quiet {
        crate::sayln!("{}", rep.summary_lines());
    }
    if let Some(out) = out {
        // A failed report write must not hide the run's own error.
        let w = rep.write_json(out);
        if res.is_ok() {
            w?;
        } else if let Err(we) = w {
            crate::sayln!("k3: {we}");
        }
    }
    res
}

/// Logits rows written by `--dump-logits` (little-endian f32, row-major [rows, V]), under a
/// temporary name until the run completes.
struct Dump {
    w: Option<OutFile>,
}

impl Dump {
    fn rows(&mut self, x: &[f32]) -> Result<()> {
        if let Some(w) = &mut self.w {
            let mut b = Vec::with_capacity(x.len() * 4);
            for v in x {
                b.extend_from_slice(&v.to_le_bytes());
            }
            w.write_all(&b)?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        match self.w.take() {
            Some(w) => w.commit(),
            None => Ok(()),
        }
    }
}

fn execute(req: &Request, dump: Option<OutFile>, rep: &mut RunReport, wall: Instant) -> Result<()> {
    let quiet = req.quiet;
    let say = |s: &str| {
        if !quiet {
            crate::sayln!("{s}");
        }
    };
    let cfg = Config::from_file(&req.config)?;
    let d = Dims::from_config(&cfg);
    // The trace files are created before any work, like every output (ENGINE.md §3).
    let mut trace = match &req.trace_dir {
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
    let ids = prompt_ids(&req.args, tok.as_ref())?;
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
    if let Some(maxp) = cfg.max_position_embeddings {
        if positions as u64 > maxp {
            return Err(Error::invalid(format!(
                "prompt ({} ids) + --gen {} = {positions} positions exceeds max_position_embeddings {maxp} of {}",
                ids.len(),
                req.gen,
                req.config.display()
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
    // --isa / --threads win over K3_ISA / K3_THREADS (ENGINE.md §3)
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

    say(&format!(
        "config: {}, hidden {}, {} layers ({} KDA, {} MLA; map {}), vocab {}, {} experts top-{} + {} shared, latent {}, AttnRes block {}{}",
        rep.config_shape,
        d.h,
        d.nl,
        cfg.derived.n_kda,
        cfg.derived.n_mla,
        d.layer_map(),
        d.v,
        d.e,
        d.kt,
        cfg.num_shared_experts,
        d.l,
        d.bs,
        if layers < d.nl {
            format!("; binding the first {layers} layers")
        } else {
            String::new()
        }
    ));
    say(&format!(
        "compute: {} path, {} threads",
        rep.isa, rep.threads
    ));

    // Index, plan (exit 3 before allocating), bind.
    let t_load = Instant::now();
    let index = TensorIndex::open(&req.model_dir)?;
    // The census checks every tensor the config requires (all problems at once). With
    // `--layers N` on a partial shard set only the bound prefix is checked, by the binder.
    let census = Census::run(&cfg, &index);
    if layers == d.nl {
        census.check(&req.model_dir.display().to_string())?;
    }
    let want_all = dump.is_some() || req.gen == 0;
    // Layouts (no tensor read), the packed trunk (validated), then the plan: all before any
    // large allocation.
    let prep = bind::prepare(&index, &cfg, layers)?;
    let packed = match &req.trunk_dir {
        Some(dir) => {
            if layers < d.nl {
                return Err(Error::invalid(format!(
                    "flags `--trunk` and `--layers {layers}`: a packed trunk covers the whole model; drop one of them"
                )));
            }
            let (pt, bin) = PackedTrunk::open(dir, &cfg, &index)?;
            Some((pt, std::sync::Arc::new(bin)))
        }
        None => None,
    };
    let sizes = ModelSizes::for_run(
        &d,
        RunShape {
            layers,
            layer_runs: prep.layouts.iter().map(|l| l.bytes).collect(),
            embed: prep.tables.embed.len,
            lm_head: prep.tables.lm_head.as_ref().map(|m| m.len).unwrap_or(0),
            positions,
            chunk: req.chunk,
            all_logits: want_all,
            threads: ex.threads(),
            tokenizer: tokenizer_bytes(&req.args, &req.model_dir),
            tensor_index: index.heap_bytes() as u64,
        },
    );
    let available = crate::io::sys::memory_available().available();
    let rp = match plan_run(&sizes, &req.budget, available) {
        Ok(p) => p,
        Err(e) => {
            // The report still carries the figures: the smallest plan of this model.
            rep.plan = Some(crate::plan::minimum_plan(&sizes, available));
            return Err(e);
        }
    };
    let plan = rp.memory.clone();
    say(&format!(
        "{}\n  budget: {}{}{}",
        plan.lines(),
        rp.budget_name,
        rp.budget
            .map(|b| format!(" {}", crate::plan::gb(b)))
            .unwrap_or_default(),
        rp.notes
            .iter()
            .map(|n| format!("; {n}"))
            .collect::<String>()
    ));
    rep.plan = Some(plan.clone());
    rep.budget_name = rp.budget_name.clone();
    rep.budget = rp.budget;
    plan.check()?;
    let conf = StreamConfig {
        pinned: &rp.trunk.pinned,
        ring_slots: rp.trunk.ring_slots,
        tables: crate::stream::tables::TablesConfig {
            head_resident_rows: rp.tables.head_resident_rows,
            embed_resident: rp.tables.embed_resident,
            chunk_rows: rp.tables.chunk_rows,
            chunk_slots: rp.tables.chunk_slots,
        },
        cache_slots: rp.cache_slots,
        policy: &req.policy,
        packed: packed
            .as_ref()
            .map(|(pt, bin)| (pt, std::sync::Arc::clone(bin))),
        expert_io_threads: 4,
    };
    let bound = bind::bind(&index, &cfg, &prep, &conf)?;
    let (model, mut trunk) = (bound.model, bound.trunk);
    let (slots, stride, policy) = bound.experts.geometry();
    let mut experts = Traced {
        inner: bound.experts,
        trace: trace.take(),
    };
    rep.weights_tag = Some(index.weights_tag(&census.bound_shards())?);
    rep.trunk_bytes = rp.trunk.pinned_bytes;
    rep.trunk = crate::report::TrunkReport {
        packed: packed.is_some(),
        packed_bytes: packed.as_ref().map(|(_, b)| b.len_at_open()).unwrap_or(0),
        pinned: (0..layers).filter(|&l| rp.trunk.pinned[l]).collect(),
        pinned_bytes: rp.trunk.pinned_bytes,
        ring_slots: rp.trunk.ring_slots,
        slot_bytes: rp.trunk.slot_bytes,
        direct_io: crate::io::file::buffered_fallback_count() == 0,
        reason: rp.trunk.reason.clone(),
        stats: Default::default(),
    };
    rep.expert_slots = slots;
    rep.expert_slot_bytes = stride as u64;
    rep.cache_policy = policy.to_string();
    rep.experts_bound = sizes.experts_total;
    rep.tables_streamed = rp.tables.streamed();
    rep.timing.load_seconds = t_load.elapsed().as_secs_f64();
    say(&rep.trunk_line());
    say(&rep.cache_line());
    say(&rp.tables.line());

    // The generation; the counters land in the report whether it succeeds or fails.
    let mut deferred: Vec<String> = Vec::new();
    let res = (|| -> Result<()> {
        let mut state = DecodeState::new(&d, layers, positions.max(1));
        let mut dump = Dump { w: dump };
        let mut hash = Fnv1a64::new();
        let mut printer = tok.as_ref().map(|t| TextPrinter::new(t, std::io::stdout()));
        let v = d.v;
        let m = &model;

        // Progress of a multi-chunk forward, on a terminal only (ENGINE.md §6).
        let progress = !quiet && !req.no_progress && crate::io::sys::stderr_is_terminal();
        // Runs `ids` from a fresh or continued state in prefill chunks. With `all`, every chunk's
        // rows go to `sink` as they are computed (never more than one chunk held); returns the last
        // position's logits.
        let forward_chunks = |state: &mut DecodeState,
                              trunk: &mut StreamedTrunk,
                              experts: &mut dyn ExpertSource,
                              ids: &[u32],
                              all: bool,
                              show: bool,
                              sink: &mut dyn FnMut(&[f32]) -> Result<()>|
         -> Result<Vec<f32>> {
            let n_chunks = ids.len().div_ceil(req.chunk);
            let mut last_row = Vec::new();
            // (only the prompt's forward shows progress: later ones would cut into the text)
            let progress = progress && show;
            let mut trunk = LayerProgress {
                inner: trunk,
                on: progress,
                chunk: 0,
                n_chunks,
                layers,
                shown: None,
            };
            let trunk = &mut trunk;
            for (ci, ch) in ids.chunks(req.chunk).enumerate() {
                trunk.chunk = ci;
                let last = ci + 1 == n_chunks;
                let want = if all {
                    LogitRows::All
                } else if last {
                    LogitRows::Last
                } else {
                    LogitRows::None
                };
                let rows = m.forward(&ex, trunk, experts, state, ch, want)?;
                if all {
                    sink(&rows)?;
                }
                if last {
                    last_row = rows[rows.len() - v..].to_vec();
                }
                if progress && n_chunks > 1 {
                    crate::say!(
                        "\rprefill: chunk {}/{n_chunks} ({} positions)",
                        ci + 1,
                        state.n_pos
                    );
                    if last {
                        crate::say!("\r\x1b[K");
                    }
                }
            }
            if trunk.shown.is_some() {
                crate::say!("\r\x1b[K");
            }
            Ok(last_row)
        };

        // Prefill (the first full-recompute step is the same forward).
        let t_pre = Instant::now();
        let s0 = experts.stats();
        let dense0 = dense_bytes(&trunk);
        let teacher_forced = req.gen == 0;
        let mut hashed = 0usize;
        let mut logits = forward_chunks(
            &mut state,
            &mut trunk,
            &mut experts,
            &ids,
            want_all,
            true,
            &mut |rows| {
                dump.rows(rows)?;
                if teacher_forced {
                    // --gen 0: every teacher-forced row is hashed (documented in the report)
                    for r in rows.chunks(v) {
                        hash.update_f32(r);
                        hashed += 1;
                    }
                }
                Ok(())
            },
        )?;
        rep.timing.prefill_seconds = t_pre.elapsed().as_secs_f64();
        rep.layers_completed = layers;
        rep.logits_hashed += hashed;
        say(&format!(
            "prefill: {} positions in {} chunks of up to {}, {:.3} s",
            ids.len(),
            ids.len().div_ceil(req.chunk),
            req.chunk,
            rep.timing.prefill_seconds
        ));
        if teacher_forced {
            rep.stop_reason = "length".to_string();
        }
        let mut step_secs = rep.timing.prefill_seconds;
        let mut step_stats = diff(experts.stats(), s0);
        let mut step_dense = dense_bytes(&trunk) - dense0;
        let mut full = ids.clone();
        let mut printed = false;
        // Text and step lines on the same terminal would interleave mid-line: then the step
        // lines follow the generated text (ENGINE.md §6 content, cleanly separated).
        let defer_steps = printer.is_some()
            && crate::io::sys::stdout_is_terminal()
            && crate::io::sys::stderr_is_terminal();
        for step in 0..req.gen {
            // The forward refused non-finite logits, so the argmax is over finite values.
            let tok = k3_kernels::argmax(&logits)
                .ok_or_else(|| Error::internal("argmax over empty or NaN logits"))?
                as u32;
            hash.update_f32(&logits);
            rep.logits_hashed += 1;
            rep.generated_ids.push(tok);
            full.push(tok);
            rep.steps.push(StepReport {
                token_id: tok,
                seconds: step_secs,
                logits_fnv1a64: k3_kernels::fnv1a64_f32(&logits),
                experts: step_stats,
                dense_bytes_read: step_dense,
            });
            match &mut printer {
                Some(p) => p.push(tok)?,
                None => {
                    // The generated ids are the run's output: a failed write (a full disk, a
                    // closed pipe) fails the run (exit 4) as it does for text.
                    let sep = if printed { "," } else { "" };
                    crate::cli::write_stdout(format!("{sep}{tok}").as_bytes())?;
                }
            }
            printed = true;
            if !quiet {
                if defer_steps {
                    deferred.push(rep.step_line(step));
                } else {
                    crate::sayln!("{}", rep.step_line(step));
                }
            }
            if end_ids.contains(&tok) {
                rep.stop_reason = "end_of_turn".to_string();
                break;
            }
            if req.stop_ids.contains(&tok) {
                rep.stop_reason = "stop_id".to_string();
                break;
            }
            if step + 1 == req.gen {
                rep.stop_reason = "length".to_string();
                break;
            }
            let t = Instant::now();
            let s = experts.stats();
            let dense_s = dense_bytes(&trunk);
            logits = if req.full_recompute {
                state.reset();
                forward_chunks(
                    &mut state,
                    &mut trunk,
                    &mut experts,
                    &full,
                    false,
                    false,
                    &mut |_| Ok(()),
                )?
            } else {
                m.forward(
                    &ex,
                    &mut trunk,
                    &mut experts,
                    &mut state,
                    &[tok],
                    LogitRows::Last,
                )?
            };
            dump.rows(&logits)?;
            step_secs = t.elapsed().as_secs_f64();
            rep.timing.decode_seconds += step_secs;
            step_stats = diff(experts.stats(), s);
            step_dense = dense_bytes(&trunk) - dense_s;
        }
        if let Some(p) = &mut printer {
            p.finish()?;
        }
        if printed || printer.is_some() {
            crate::cli::write_stdout(b"\n")?;
        }
        if let Some(t) = &tok {
            rep.generated_text = Some(t.decode_lossy(&rep.generated_ids)?);
        }
        dump.finish()?;
        if let Some(t) = experts.trace.take() {
            t.finish()?;
        }
        rep.logits_hash = hash.finish();
        Ok(())
    })();
    rep.experts = experts.stats();
    rep.cache = experts.inner.cache_stats();
    rep.trunk.stats = trunk.stats();
    rep.tables = trunk.table_stats();
    rep.trunk.direct_io = crate::io::file::buffered_fallback_count() == 0;
    for line in deferred {
        crate::sayln!("{line}");
    }
    rep.timing.wall_seconds = wall.elapsed().as_secs_f64();
    res
}

/// Trunk and model-table bytes read so far (the dense part of a step's "GB read").
fn dense_bytes(t: &StreamedTrunk) -> u64 {
    let ts = t.table_stats();
    t.stats().bytes_read + ts.embedding_bytes_read + ts.lm_head_bytes_read
}

fn diff(a: ExpertStats, b: ExpertStats) -> ExpertStats {
    ExpertStats {
        requests: a.requests - b.requests,
        resident_hits: a.resident_hits - b.resident_hits,
        reads: a.reads - b.reads,
        bytes_read: a.bytes_read - b.bytes_read,
        read_seconds: a.read_seconds - b.read_seconds,
    }
}

/// An expert source that also writes every request to the `--dump-cache-trace` files
/// (FORMATS.md §8: per chunk, per MoE layer ascending, positions ascending, selection order —
/// the order in which the MoE block reports its requests).
struct Traced<S: ExpertSource> {
    inner: S,
    trace: Option<TraceWriter>,
}

impl<S: ExpertSource> ExpertSource for Traced<S> {
    fn max_batch(&self) -> usize {
        self.inner.max_batch()
    }
    fn note_requests(&mut self, layer: usize, requests: &[u32]) -> Result<()> {
        if let Some(t) = &mut self.trace {
            t.record(layer as u32, requests)?;
        }
        self.inner.note_requests(layer, requests)
    }
    fn with_experts(
        &mut self,
        layer: usize,
        experts: &[u32],
        f: &mut dyn FnMut(&[model::experts::ExpertView<'_>]) -> Result<()>,
    ) -> Result<()> {
        self.inner.with_experts(layer, experts, f)
    }
    fn stats(&self) -> ExpertStats {
        self.inner.stats()
    }
}

/// Per-layer progress of a prefill forward on a terminal (ENGINE.md §6): a forward over a
/// streamed trunk can take minutes, so the layer being bound is shown, at most 5 times a second.
struct LayerProgress<'a> {
    inner: &'a mut StreamedTrunk,
    on: bool,
    chunk: usize,
    n_chunks: usize,
    layers: usize,
    shown: Option<Instant>,
}

impl model::TrunkSource for LayerProgress<'_> {
    fn layer_buf(&mut self, l: usize) -> Result<&[u16]> {
        if self.on && self.shown.is_none_or(|t| t.elapsed().as_millis() >= 200) {
            crate::say!(
                "\rprefill: chunk {}/{}, layer {}/{}\x1b[K",
                self.chunk + 1,
                self.n_chunks,
                l + 1,
                self.layers
            );
            self.shown = Some(Instant::now());
        }
        self.inner.layer_buf(l)
    }
    fn embed_row(&mut self, id: usize) -> Result<&[u16]> {
        self.inner.embed_row(id)
    }
    fn prefetch_lm_head(&mut self) {
        self.inner.prefetch_lm_head()
    }
    fn lm_head(
        &mut self,
        f: &mut dyn FnMut(usize, model::weights::Bf16Mat<'_>) -> Result<()>,
    ) -> Result<()> {
        self.inner.lm_head(f)
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
