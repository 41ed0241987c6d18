//! `k3 <model_dir> [options]` / `k3 run <model_dir>`: the main job (ENGINE.md §3, §6).
//! Prompt ids in, greedy tokens out: plan the memory, bind the checkpoint, prefill in chunks,
//! decode incrementally (or by full recompute), print the report on standard error and the
//! generated ids on standard output, write `--out` JSON and `--dump-logits` rows.

use super::args::{Args, Spec};
use super::output::CliOutput;
use super::progress::TerminalProgress;
use crate::bind::streamed as bind;
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::error::{Error, Result};
use crate::generate::sample::{SamplerOverrides, Setting};
use crate::io::{IoFile, OutFile};
use crate::model::mla::MLA_FORM;
use crate::plan::Budget;
use crate::report::RunReport;
use crate::run::{decode, DecodeOptions, OpenOptions, Run};
use crate::stream::pieces::PieceMode;
use crate::stream::trace::{HIST_FILE, TRACE_FILE};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

mod batch;
pub(crate) mod chat_open;
mod flags;
mod inputs;
mod memory;
mod packed;
pub(crate) mod schema;
mod serve;
mod state;

use inputs::{check_inputs, compute, Inputs};
use memory::{plan_memory, PlanInputs};
use state::generation;

pub(crate) use flags::MAX_SEQUENCES;
pub(crate) use serve::prepare_serve;

pub(crate) const SPECS: &[Spec] = &[
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
    Spec::Value("trunk-pieces"),
    Spec::Value("trunk-codec"),
    Spec::Value("io-depth"),
    Spec::Value("cache-gb"),
    Spec::Switch("full-recompute"),
    Spec::Switch("incremental"),
    Spec::Value("prefill-chunk"),
    Spec::Value("cache-policy"),
    Spec::Value("temperature"),
    Spec::Value("top-p"),
    Spec::Value("top-k"),
    Spec::Value("min-p"),
    Spec::Value("seed"),
    Spec::Repeat("stop-id"),
    Spec::Repeat("stop"),
    Spec::Value("json-schema"),
    Spec::Value("ctx"),
    Spec::Value("batch"),
    Spec::Value("parallel"),
    Spec::Value("spec"),
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
    Spec::Switch("verbose"),
    Spec::Switch("help"),
];

const RUN_USAGE: &str = "\
usage: k3 <model_dir> [options]   (also: k3 run <model_dir> [options])
  --ids 1,2,3 | -p/--prompt TEXT | --prompt-file PATH (- = stdin)   the prompt (exactly one)
  --tok DIR            tokenizer directory (default: the model directory when it holds one)
  --config PATH        config file (default: <model_dir>/config.json)
  -n, --gen N          tokens to generate (default 16; 0 = teacher-forced forward only)
  --prefill-chunk N|auto  positions per prefill chunk (default auto: the whole prompt
                       if the budget allows, else as long as it allows; never changes a logit)
  --full-recompute     re-run the whole prefix every step (diagnostic; same logits)
  --stop-id ID         extra end id (repeatable); [EOS] and <|end_of_msg|> always end
  --stop TEXT          stop when the generated text contains TEXT (repeatable; not printed)
  --json-schema FILE   the generated text is one JSON value of this schema, then an end id
                       (docs/cli.md#structured-output); with --batch, every line's
  --ctx N              positions the sequence may reach (default: prompt + gen)
  --batch FILE         JSON lines {\"prompt\": TEXT} or {\"ids\": [...]} (+ gen, temperature, top_k,
                       top_p, min_p, seed, stop): one JSON line out per input, in input order
  --parallel N         sequences of --batch decoding together (default 1)
  --spec K             speculative decoding: up to K drafted ids per sweep (0 to 64; default 0 =
                       off); the same ids and logits hash as without it
  --temperature T      sampling (default 0 = greedy); --top-k K, --top-p P, --min-p M
  --seed S             the sampler's seed (default: from the OS, printed and in --out)
  --threads N, --isa scalar|avx2|neon   (also K3_THREADS, K3_ISA)
  --layers N           bind only the first N layers
  --out FILE           JSON report;  --dump-logits PATH  f32 rows [rows, vocab]
  --dump-cache-trace DIR   expert_trace.bin + expert_hist.json
  --quiet, --no-progress, --verbose   no report / no progress / the per-step lines too
Memory (decimal GB, fractions allowed; see k3 --list-presets):
  --preset NAME        auto (default), ultra, laptop, desktop, workstation, server, max
  --mem-gb X           whole-process budget (trunk first, then lm_head rows, then expert cache, then embedding)
  --trunk DIR          a packed trunk (k3 pack-trunk) to stream the trunk from
  --trunk-gb X         trunk budget: pinned layers + ring slots
  --trunk-ring N       ring slots (default 2; 1 only if two piece slots exceed a layer's)
  --trunk-pieces part|layer   stream layers cut at their parts (default) or whole
  --trunk-codec auto|on|off   a packed trunk with a codec: decode it where reading fewer bytes
                       and decoding them beats reading raw ones (auto, measured when the run
                       opens), always, or never (the trunk is then read from the shards)
  --io-depth N         reads in flight per trunk piece, lm_head chunk and expert batch
                       (1-64; default 1 for trunk and lm_head, 4 for experts)
  --cache-gb X         expert-cache budget (at least top-k experts)
  --cache-policy NAME  lru, fifo, sieve, s3-fifo, arc, 2q, lfu-da, lfu (default lfu)
Sessions:
  --save-state PATH    save the sequence at the end (docs/formats.md#session-state-file; the last id stays pending)
  --load-state PATH    continue a saved sequence (then --ids/--prompt append, optional)
";

/// The parsed run request (the prompt is resolved once the tokenizer is loaded).
#[derive(Debug)]
struct Request {
    args: Args,
    model_dir: PathBuf,
    config: PathBuf,
    gen: usize,
    full_recompute: bool,
    /// `--prefill-chunk N`; `None`: auto (the plan chooses, [`crate::plan::plan_with_chunk`]).
    chunk: Option<usize>,
    stop_ids: Vec<u32>,
    /// `--stop` strings.
    stop_texts: Vec<String>,
    /// `--json-schema FILE`, read and compiled.
    json_schema: Option<schema::SchemaFile>,
    /// `--ctx`.
    ctx: Option<usize>,
    /// `--batch FILE`.
    batch: Option<PathBuf>,
    /// `--parallel N` (1 without it).
    parallel: usize,
    /// `--spec K`: drafted ids per sweep at most (0 = off).
    spec: usize,
    /// `--load-state PATH`.
    load_state: Option<PathBuf>,
    /// `--save-state PATH`, opened (as its temporary) before any work.
    save_state: Option<OutFile>,
    /// The sampling flags given.
    sampling: SamplerOverrides,
    threads: Option<usize>,
    isa: Option<String>,
    layers: Option<usize>,
    /// `--out`, opened (as its temporary) before any work; written when the run ends.
    out: Option<OutFile>,
    /// `--dump-logits`, opened before any work.
    dump_logits: Option<OutFile>,
    quiet: bool,
    no_progress: bool,
    verbose: bool,
    trace_dir: Option<PathBuf>,
    budget: Budget,
    trunk_dir: Option<PathBuf>,
    policy: String,
    /// `--trunk-pieces`.
    pieces: PieceMode,
    /// `--io-depth`.
    io_depth: Option<usize>,
    /// `--trunk-codec`.
    trunk_codec: packed::CodecUse,
    /// Snapshot slots planned besides the `--parallel` sequences (`serve`'s prefix pool; 0
    /// for `run`); `None`: as many as `--parallel` (serve's default, so that the largest
    /// fitting `--parallel` is searched with its pool).
    snapshots: Option<usize>,
    /// `k3 serve`: `--parallel` plans its request slots.
    serve: bool,
    /// `k3 chat`: its positions are `--ctx` (no `--gen` or prompt flags).
    chat: bool,
}

fn parse_request(argv: &[OsString]) -> Result<Option<Request>> {
    let Some(a) = Args::parse_or_help(argv, SPECS, RUN_USAGE)? else {
        return Ok(None);
    };
    request_from_args(a, "run").map(Some)
}

/// The request of parsed arguments; `cmd` is `run`, `chat` (which has no prompt flags: its
/// messages come from standard input or `--messages`) or `serve` (no prompt either; it plans
/// `--parallel` sequences without `--batch`).
fn request_from_args(a: Args, cmd: &str) -> Result<Request> {
    let serve = cmd == "serve";
    if a.positional.len() != 1 {
        return Err(Error::invalid(format!(
            "{cmd}: expected one model directory, found {} positional argument{} (see k3 --help)",
            a.positional.len(),
            if a.positional.len() == 1 { "" } else { "s" }
        )));
    }
    let budget = flags::budget_flags(&a)?;
    let (pieces, io_depth) = flags::streaming_flags(&a)?;
    let trunk_codec = packed::CodecUse::from_args(&a)?;
    let policy = flags::cache_policy(&a)?;
    let trunk_dir = flags::trunk_dir(&a)?;
    let mut sampling = SamplerOverrides::default();
    for s in Setting::ALL {
        if let Some(v) = a.value(&s.flag()[2..])? {
            sampling.set_flag(s, &v)?;
        }
    }
    let model_dir = PathBuf::from(&a.positional[0]);
    if !model_dir.is_dir() {
        return Err(Error::invalid(format!(
            "`{}` is neither a subcommand nor a model directory (see k3 --help)",
            model_dir.display()
        )));
    }
    let (batch, load_state) = flags::prompt_source(&a, cmd)?;
    let parallel = flags::parallel(&a, serve || batch.is_some())?;
    let spec = flags::spec(&a)?;
    let gen = a
        .parsed::<usize>("gen", "a non-negative integer")?
        .unwrap_or(16);
    let (stop_ids, stop_texts) = flags::stop_flags(&a)?;
    let json_schema = match a.value_os("json-schema") {
        Some(p) => Some(schema::read(Path::new(&p))?),
        None => None,
    };
    let ctx = flags::positive(&a, "ctx")?;
    let (chunk, threads, layers) = flags::compute_flags(&a)?;
    let (full_recompute, quiet, isa) = (
        a.switch("full-recompute"),
        a.switch("quiet"),
        a.value("isa")?,
    );
    state::check_flags(&a, full_recompute, gen)?;
    let (out, dump_logits, trace_dir) = open_outputs(&a, &model_dir, trunk_dir.as_deref())?;
    let save_state = match a.value_os("save-state") {
        Some(p) => Some(OutFile::create(
            "--save-state",
            Path::new(&p),
            "the state file",
        )?),
        None => None,
    };
    Ok(Request {
        config: a
            .value_os("config")
            .map(PathBuf::from)
            .unwrap_or_else(|| model_dir.join("config.json")),
        model_dir,
        gen,
        full_recompute,
        chunk,
        stop_ids,
        stop_texts,
        json_schema,
        ctx,
        batch,
        parallel,
        spec,
        load_state,
        save_state,
        sampling,
        threads,
        isa,
        layers,
        out,
        dump_logits,
        quiet,
        no_progress: a.switch("no-progress"),
        verbose: a.switch("verbose"),
        trace_dir,
        budget,
        trunk_dir,
        policy,
        pieces,
        io_depth,
        trunk_codec,
        snapshots: Some(0),
        serve,
        chat: cmd == "chat",
        args: a,
    })
}

/// The output files (`--out`, `--dump-logits`, `--dump-cache-trace`), checked and their
/// temporaries created before any work; none may overwrite an input or another output
/// (exit 2 naming the flag).
fn open_outputs(
    a: &Args,
    model_dir: &Path,
    trunk_dir: Option<&Path>,
) -> Result<(Option<OutFile>, Option<OutFile>, Option<PathBuf>)> {
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
    let input_dirs: Vec<&Path> = [Some(model_dir), trunk_dir, tok_dir.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let load_state = a.value_os("load-state").map(PathBuf::from);
    let input_files: Vec<&Path> = [
        config_path.as_ref(),
        prompt_file.as_ref(),
        load_state.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| p.as_path())
    .collect();
    let mut outputs: Vec<(&str, PathBuf)> = Vec::new();
    outputs.extend(out_path.iter().map(|p| ("--out", p.clone())));
    outputs.extend(dump_path.iter().map(|p| ("--dump-logits", p.clone())));
    if let Some(p) = a.value_os("save-state") {
        outputs.push(("--save-state", PathBuf::from(p)));
    }
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
    Ok((out, dump_logits, trace_dir))
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
    let save = req.save_state.take();
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
    let res = execute(&req, dump, save, &mut rep, wall);
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

fn execute(
    req: &Request,
    dump: Option<OutFile>,
    save: Option<OutFile>,
    rep: &mut RunReport,
    wall: Instant,
) -> Result<()> {
    let quiet = req.quiet;
    let say = |s: &str| {
        if !quiet {
            crate::sayln!("{s}");
        }
    };
    let mut inp = check_inputs(req, rep)?;
    let ex = compute(req, rep)?;
    let (cfg, d, layers) = (&inp.cfg, &inp.d, inp.layers);
    say(&super::summary::model_line(rep, cfg, d, layers));

    // Index, plan (exit 3 before allocating), bind.
    let t_load = Instant::now();
    let index = TensorIndex::open(&req.model_dir)?;
    // The census checks every tensor the config requires (all problems at once). With
    // `--layers N` on a partial shard set only the bound prefix is checked, by the binder.
    let census = Census::run(cfg, &index);
    if layers == d.nl {
        census.check(&req.model_dir.display().to_string())?;
    }
    // A loaded state is checked against this model before anything is planned or run.
    let loaded = state::load(req, &inp, &index, &census, rep)?;
    if let Some(l) = &loaded {
        inp.positions = l.positions;
    }
    let save_id = match (&save, &loaded) {
        (None, _) => None,
        (Some(_), Some(l)) => Some(l.id.clone()),
        (Some(_), None) => Some(state::identity(&inp, &index, &census)?),
    };
    let generated_before = loaded.as_ref().map_or(0, |l| l.st.generated);
    let (settings, rules) = generation(req, &inp, loaded.as_ref().map(|l| &l.st), rep, &say)?;
    let want_all = dump.is_some() || req.gen == 0;
    // Layouts (no tensor read), the packed trunk (validated), then the plan: all before any
    // large allocation.
    let prep = bind::prepare(&index, cfg, layers)?;
    let (packed, coded) = packed::open_packed(req, &inp, &index, ex.threads())?;
    let pi = PlanInputs {
        req,
        inp: &inp,
        index: &index,
        prep: &prep,
        ex: &ex,
        want_all,
        coded,
    };
    let rp = plan_memory(&pi, rep)?;
    let bound = Bound {
        index: &index,
        census: &census,
        prep: &prep,
        packed: packed.as_ref(),
        rp: &rp,
    };
    let mut sess = open_session(req, &mut inp, &bound, ex, rep)?;
    sess.tok = inp.tok.as_ref();
    rep.timing.load_seconds = t_load.elapsed().as_secs_f64();
    say(&rep.trunk_line());
    say(&rep.cache_line());
    if req.verbose {
        say(&rp.tables.line());
    }

    // The generation; the counters land in the report whether it succeeds or fails.
    let mut out = CliOutput::new(inp.tok.as_ref(), dump, quiet);
    // Progress of a multi-chunk forward, on a terminal only (ENGINE.md §6).
    let mut progress = TerminalProgress::default();
    let show = !quiet && !req.no_progress && crate::io::sys::stderr_is_terminal();
    let constraints = match &req.json_schema {
        Some(f) => schema::plain(f, inp.tok.as_ref())?,
        None => Default::default(),
    };
    if req.batch.is_some() {
        let mut items = std::mem::take(&mut inp.batch);
        for it in items.iter_mut().flatten() {
            it.constraints = constraints.clone();
        }
        return batch::run(&mut sess, items, req.parallel, rep);
    }
    out.stop_text = !req.stop_texts.is_empty();
    if req.json_schema.is_some() {
        out.hide_ids = inp
            .tok
            .as_ref()
            .map_or_else(Vec::new, |t| t.end_of_turn_ids());
    }
    out.show(req.verbose, show, req.gen);
    let opts = DecodeOptions {
        all_rows: want_all,
        settings,
        rules,
        capacity: inp.positions.max(1),
        resume: loaded.as_ref().map(|l| &l.st),
        constraints,
    };
    let res = decode(
        &mut sess,
        &inp.ids,
        &opts,
        &mut out,
        if show { Some(&mut progress) } else { None },
        rep,
    );
    out.end_line();
    for line in out.deferred.drain(..) {
        crate::sayln!("{line}");
    }
    rep.timing.wall_seconds = wall.elapsed().as_secs_f64();
    let seq = res?;
    if let (Some(out), Some(id)) = (save, save_id) {
        state::save(out, &seq, &id, generated_before, rep)?;
    }
    Ok(())
}

/// What a session is bound from: the index, census, layouts, packed trunk and plan.
struct Bound<'a> {
    index: &'a TensorIndex,
    census: &'a Census,
    prep: &'a bind::Prepared,
    packed: Option<&'a (crate::stream::pack::PackedTrunk, Arc<IoFile>)>,
    rp: &'a crate::plan::RunPlan,
}

/// Binds the model as the plan says ([`Run::open`]) and makes it the session (computing with
/// `ex`; `--full-recompute` and `--spec` set). Pinning can read up to the whole trunk (109 GB at the
/// released widths) before the first token: on a terminal the progress says how far it is
/// (ENGINE.md §6).
///
/// Errors: those of [`Run::open`] and [`Run::into_session`].
fn open_session<'t>(
    req: &Request,
    inp: &mut Inputs,
    b: &Bound<'_>,
    ex: crate::model::Exec,
    rep: &mut RunReport,
) -> Result<crate::run::RunSession<'t>> {
    let show_loading = !req.quiet && !req.no_progress && crate::io::sys::stderr_is_terminal();
    let open = OpenOptions {
        plan: b.rp,
        policy: &req.policy,
        packed: b.packed,
        trace: inp.trace.take(),
        loaded: show_loading.then_some(super::progress::pinned_layers as fn(usize, usize, u64)),
        pieces: req.pieces,
        io_depth: req.io_depth,
        codec_threads: ex.threads(),
    };
    let run = Run::open(b.index, &inp.cfg, b.census, b.prep, open, rep)?;
    let mut sess = run.into_session(ex, crate::plan::prefill_slice(b.rp))?;
    sess.full_recompute = req.full_recompute;
    sess.spec.max_draft = req.spec;
    Ok(sess)
}
