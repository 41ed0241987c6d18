//! `cargo xtask synth <dir>`: writes a synthetic checkpoint in the released Kimi K3 format at
//! the released widths (the generator itself is the `k3-synth` crate, synth/, shared with the
//! engine's tests). Progress (GB, MB/s, ETA) on stderr; exit 2 for bad flags, 3 when the disk
//! lacks space, 4 for an I/O failure while writing.

pub use k3_synth as gen;

use gen::{Options, SynthSpec};
use std::fs::File;
use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::time::Instant;

const USAGE: &str = "\
usage: cargo xtask synth <dir> [options]

Writes a deterministic synthetic Kimi K3 checkpoint (config.json, shards, index, synth.json).

  --layers N             decoder layers (default 4: dense+KDA, KDA, KDA, MLA)
  --experts E            routed experts per MoE layer (default 64)
  --seed S               seed of every value (default 0)
  --preset NAME          k3 (released widths, default) or small (tiny-k3 widths)
  --top-k K              num_experts_per_token (default: the preset's, 16 for k3)
  --full-attn-layers L   one-based MLA layers, comma-separated (default: every 4th and the last)
  --first-k-dense N      first_k_dense_replace (default 1)
  --layers-per-shard N   layers per shard after shard 1 (default: the preset's, 1 for k3)
  --tied                 tie_word_embeddings (no lm_head)
  --flat-config          flat config.json instead of the released nested shape
  --no-vision            omit the two dummy vision shards
  --threads T            generator threads (default: all cores)
  --force                replace a checkpoint already in <dir>
  --no-sync              skip fdatasync of each shard
  --dry-run              print the plan, write nothing
  --released             the released shape: 93 layers, 896 experts, preset k3 and the
                         released config.json (tests/fixtures/configs/k3-released-reserialised.json)
  --sparse               tensor data as file holes (reads return zeros, no disk): headers,
                         index and config only; `--sparse --released` is 1.56 TB apparent
  --sparse-real-max-bytes N   with --sparse: tensors of at most N bytes get their values
                         (default 0: every tensor a hole)
  --tokenizer DIR        copy DIR/tiktoken.model and DIR/tokenizer_config.json in

usage: cargo xtask synth --draft <dir> (--target <model dir> | --released) [--seed S]
                         [--embed-copy | --no-embed-copy]

Writes a deterministic synthetic DSpark draft (DRAFT.md §1: config.json + model.safetensors in
the published layout). --target: tiny widths fitting that model's hidden size, layer count and
vocabulary (no embed_tokens copy unless --embed-copy); --released: the Inferact K3 draft's
widths (4.77 GB, plus the 2.35 GB embed_tokens copy unless --no-embed-copy).
";

/// `cargo xtask synth --draft …` (see [`USAGE`]).
fn draft_main(args: &[String]) -> i32 {
    let mut dir = None;
    let (mut target, mut released, mut seed, mut copy) = (None, false, 0u64, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--target" => target = it.next().map(PathBuf::from),
            "--released" => released = true,
            "--embed-copy" => copy = Some(true),
            "--no-embed-copy" => copy = Some(false),
            "--seed" => match it.next().map(|v| v.parse::<u64>()) {
                Some(Ok(v)) => seed = v,
                _ => {
                    eprintln!(
                        "xtask synth --draft: error: --seed: expected a non-negative integer"
                    );
                    return 2;
                }
            },
            "-h" | "--help" => {
                print!("{USAGE}");
                return 0;
            }
            s if !s.starts_with('-') && dir.is_none() => dir = Some(PathBuf::from(s)),
            other => {
                eprintln!("xtask synth --draft: error: unknown argument `{other}`");
                return 2;
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!("xtask synth --draft: error: missing <dir>");
        return 2;
    };
    let mut spec = match (target, released) {
        (None, true) => gen::DraftSpec::released(),
        (Some(t), false) => match k3::config::Config::from_file(&t.join("config.json")) {
            Ok(c) => gen::DraftSpec::tiny_for(c.hidden_size, c.num_hidden_layers, c.vocab_size),
            Err(e) => {
                eprintln!("xtask synth --draft: error: {e}");
                return 2;
            }
        },
        _ => {
            eprintln!(
                "xtask synth --draft: error: give exactly one of --target DIR and --released"
            );
            return 2;
        }
    };
    if let Some(c) = copy {
        spec.embed_copy = c;
    }
    match gen::write_draft(&spec, &dir, seed) {
        Ok(bytes) => {
            eprintln!(
                "xtask synth --draft: wrote {} ({} parameters, model.safetensors {bytes} bytes)",
                dir.display(),
                spec.parameters()
            );
            0
        }
        Err(e) => {
            eprintln!("xtask synth --draft: error: {}: {e}", dir.display());
            if e.raw_os_error() == Some(libc::ENOSPC) {
                3
            } else {
                4
            }
        }
    }
}

struct Cli {
    dir: PathBuf,
    spec: SynthSpec,
    threads: usize,
    force: bool,
    sync: bool,
    dry_run: bool,
    /// `--sparse`: Some(real_max_bytes).
    sparse: Option<u64>,
    /// `--released`: the released config.json text.
    released_config: Option<String>,
    tokenizer: Option<PathBuf>,
}

fn usage_err(msg: String) -> (i32, String) {
    (2, msg)
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, (i32, String)> {
    v.parse::<T>().map_err(|_| {
        usage_err(format!(
            "{flag}: expected a non-negative integer, found `{v}`"
        ))
    })
}

fn parse(args: &[String]) -> Result<Option<Cli>, (i32, String)> {
    let mut dir = None;
    let mut preset = "k3".to_string();
    let mut layers: Option<usize> = None;
    let mut experts: Option<usize> = None;
    let (mut released, mut sparse, mut real_max) = (false, false, 0u64);
    let mut tokenizer = None;
    let mut seed = 0u64;
    let mut top_k: Option<usize> = None;
    let mut full: Option<Vec<usize>> = None;
    let mut dense: Option<usize> = None;
    let mut per_shard: Option<usize> = None;
    let (mut tied, mut flat, mut no_vision) = (false, false, false);
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (mut force, mut sync, mut dry_run) = (false, true, false);
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        i += 1;
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if a.starts_with("--") => (n, Some(v.to_string())),
            _ => (a, None),
        };
        let mut value = || -> Result<String, (i32, String)> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| usage_err(format!("{name}: expected a value")))?;
            i += 1;
            Ok(v)
        };
        match name {
            "--help" | "-h" => return Ok(None),
            "--layers" => layers = Some(parse_num(name, &value()?)?),
            "--experts" => experts = Some(parse_num(name, &value()?)?),
            "--sparse-real-max-bytes" => real_max = parse_num(name, &value()?)?,
            "--tokenizer" => tokenizer = Some(PathBuf::from(value()?)),
            "--seed" => seed = parse_num(name, &value()?)?,
            "--preset" => preset = value()?,
            "--top-k" => top_k = Some(parse_num(name, &value()?)?),
            "--full-attn-layers" => {
                let v = value()?;
                let list = if v.trim().is_empty() {
                    Vec::new()
                } else {
                    v.split(',')
                        .map(|s| parse_num(name, s.trim()))
                        .collect::<Result<Vec<usize>, _>>()?
                };
                full = Some(list);
            }
            "--first-k-dense" => dense = Some(parse_num(name, &value()?)?),
            "--layers-per-shard" => per_shard = Some(parse_num(name, &value()?)?),
            "--threads" => threads = parse_num(name, &value()?)?,
            "--tied" | "--flat-config" | "--no-vision" | "--force" | "--no-sync" | "--dry-run"
            | "--released" | "--sparse"
                if inline.is_some() =>
            {
                return Err(usage_err(format!("{name}: takes no value")));
            }
            "--tied" => tied = true,
            "--flat-config" => flat = true,
            "--no-vision" => no_vision = true,
            "--force" => force = true,
            "--no-sync" => sync = false,
            "--dry-run" => dry_run = true,
            "--released" => released = true,
            "--sparse" => sparse = true,
            _ if a.starts_with("--") => {
                return Err(usage_err(format!("{name}: unknown flag (see --help)")));
            }
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(usage_err(format!("unexpected argument `{a}`"))),
        }
    }
    let dir = dir.ok_or_else(|| usage_err("missing <dir> (see --help)".to_string()))?;
    if released && preset != "k3" {
        return Err(usage_err(format!(
            "--released: takes the k3 preset, not `{preset}`"
        )));
    }
    let layers = layers.unwrap_or(if released { 93 } else { 4 });
    let experts = experts.unwrap_or(if released { 896 } else { 64 });
    if real_max > 0 && !sparse {
        return Err(usage_err(
            "--sparse-real-max-bytes: only with --sparse".to_string(),
        ));
    }
    let released_config = if released {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/configs/k3-released-reserialised.json");
        Some(std::fs::read_to_string(&p).map_err(|e| (4, format!("{}: {e}", p.display())))?)
    } else {
        None
    };
    let mut spec = match preset.as_str() {
        "k3" => SynthSpec::k3(layers, experts),
        "small" => SynthSpec::small(layers, experts),
        other => {
            return Err(usage_err(format!(
                "--preset: unknown preset `{other}` (k3 or small)"
            )))
        }
    };
    spec.seed = seed;
    if let Some(k) = top_k {
        spec.num_experts_per_token = k;
    }
    if let Some(f) = full {
        spec.full_attn_layers = f;
    }
    if let Some(d) = dense {
        spec.first_k_dense_replace = d;
    }
    if let Some(p) = per_shard {
        spec.layers_per_shard = p;
    }
    spec.tie_word_embeddings = tied;
    spec.nested_config = !flat;
    spec.vision_dummies = !no_vision;
    if threads == 0 {
        return Err(usage_err("--threads: must be >= 1".to_string()));
    }
    spec.validate()
        .map_err(|e| usage_err(format!("invalid checkpoint spec: {e}")))?;
    Ok(Some(Cli {
        dir,
        spec,
        threads,
        force,
        sync,
        dry_run,
        sparse: sparse.then_some(real_max),
        released_config,
        tokenizer,
    }))
}

/// Runs `cargo xtask synth`; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    if args.first().map(String::as_str) == Some("--draft") {
        return draft_main(&args[1..]);
    }
    let cli = match parse(args) {
        Ok(Some(c)) => c,
        Ok(None) => {
            print!("{USAGE}");
            return 0;
        }
        Err((code, msg)) => {
            eprintln!("xtask synth: error: {msg}");
            return code;
        }
    };
    match run(&cli) {
        Ok(()) => 0,
        Err((code, msg)) => {
            eprintln!("xtask synth: error: {msg}");
            code
        }
    }
}

fn gb(b: u64) -> f64 {
    b as f64 / 1e9
}

fn run(cli: &Cli) -> Result<(), (i32, String)> {
    let spec = &cli.spec;
    let plan = spec.plan().map_err(|e| (2, e))?;
    let total = plan.shard_bytes();
    eprintln!(
        "synth: {} layers ({}), H {}, V {}, {} experts/layer top-{}, seed {}: {} shards, {} tensors, {:.2} GB",
        spec.num_hidden_layers,
        spec.layer_map(),
        spec.hidden_size,
        spec.vocab_size,
        spec.num_experts,
        spec.num_experts_per_token,
        spec.seed,
        plan.shards.len(),
        plan.tensor_count(),
        gb(total)
    );
    if cli.dry_run {
        for s in &plan.shards {
            println!("{}\t{}\t{}", s.file_name, s.tensors.len(), s.file_size());
        }
        return Ok(());
    }
    if let Some(real_max) = cli.sparse {
        run_sparse(cli, real_max)?;
        return copy_tokenizer(cli);
    }
    if let Some(free) = free_bytes(&cli.dir) {
        // Keep 1 GB spare so the machine stays usable for everyone else.
        if free < total + 1_000_000_000 {
            return Err((
                3,
                format!(
                    "{}: {:.2} GB free, the checkpoint needs {:.2} GB (+1 GB margin)",
                    cli.dir.display(),
                    gb(free),
                    gb(total)
                ),
            ));
        }
    }
    let mut printer = ProgressPrinter::new();
    let mut progress = |p: &gen::Progress| printer.update(p);
    let opts = Options {
        threads: cli.threads,
        force: cli.force,
        sync: cli.sync,
        progress: Some(&mut progress),
        open: Some(&open_direct),
        stage_bytes: None,
    };
    let t0 = Instant::now();
    let summary =
        gen::generate(spec, &cli.dir, opts).map_err(|e| (exit_code(&e), e.to_string()))?;
    let secs = t0.elapsed().as_secs_f64();
    printer.finish();
    eprintln!(
        "synth: wrote {} ({:.2} GB in {} shards) in {:.1} s: {:.0} MB/s ({} generator threads{}{})",
        cli.dir.display(),
        gb(summary.bytes),
        summary.plan.shards.len(),
        secs,
        summary.bytes as f64 / 1e6 / summary.seconds,
        cli.threads,
        if BUFFERED.load(std::sync::atomic::Ordering::Relaxed) {
            ", buffered: O_DIRECT refused by the file system"
        } else {
            ", O_DIRECT"
        },
        if cli.sync {
            ", fdatasync per shard"
        } else {
            ""
        }
    );
    copy_tokenizer(cli)
}

/// `--sparse`: headers, index and config; tensor data as holes (small ones real with
/// `--sparse-real-max-bytes`).
fn run_sparse(cli: &Cli, real_max: u64) -> Result<(), (i32, String)> {
    let plan = cli.spec.plan().map_err(|e| (2, e))?;
    let headers: u64 = plan.shards.iter().map(|s| s.data_start()).sum();
    if let Some(free) = free_bytes(&cli.dir) {
        // Headers + index + the real tensors, with 1 GB spare.
        if free < 3 * headers + 1_000_000_000 {
            return Err((
                3,
                format!(
                    "{}: {:.2} GB free, the sparse checkpoint's headers and index need about {:.2} GB (+1 GB margin)",
                    cli.dir.display(),
                    gb(free),
                    gb(3 * headers)
                ),
            ));
        }
    }
    let opts = gen::SparseOptions {
        force: cli.force,
        real_max_bytes: real_max,
        config_json: cli.released_config.clone(),
        released_vision: cli.released_config.is_some(),
    };
    let s = gen::generate_sparse(&cli.spec, &cli.dir, &opts)
        .map_err(|e| (exit_code(&e), e.to_string()))?;
    eprintln!(
        "synth: wrote sparse {} ({} shards, {} tensors, {:.2} GB apparent, {:.3} GB written: headers{}) in {:.1} s{}",
        cli.dir.display(),
        s.plan.shards.len(),
        s.plan.tensor_count(),
        gb(s.apparent_bytes),
        gb(s.written_bytes),
        if s.real_tensors > 0 {
            format!(" + {} tensors of at most {real_max} bytes with values", s.real_tensors)
        } else {
            String::new()
        },
        s.seconds,
        if cli.released_config.is_some() {
            ", released config.json"
        } else {
            ""
        }
    );
    Ok(())
}

/// The exit code of a generator error: 2 for a bad spec or directory, 4 for I/O.
fn exit_code(e: &io::Error) -> i32 {
    match e.kind() {
        io::ErrorKind::InvalidInput | io::ErrorKind::AlreadyExists => 2,
        _ => 4,
    }
}

/// `--tokenizer DIR`: copies the two tokenizer files into the checkpoint.
fn copy_tokenizer(cli: &Cli) -> Result<(), (i32, String)> {
    let Some(src) = &cli.tokenizer else {
        return Ok(());
    };
    for name in ["tiktoken.model", "tokenizer_config.json"] {
        let from = src.join(name);
        std::fs::copy(&from, cli.dir.join(name))
            .map_err(|e| (4, format!("--tokenizer: {}: {e}", from.display())))?;
    }
    Ok(())
}

struct ProgressPrinter {
    tty: bool,
    last: f64,
    printed: bool,
}

impl ProgressPrinter {
    fn new() -> Self {
        ProgressPrinter {
            tty: io::stderr().is_terminal(),
            last: 0.0,
            printed: false,
        }
    }

    fn update(&mut self, p: &gen::Progress) {
        let every = if self.tty { 0.5 } else { 10.0 };
        if p.seconds - self.last < every && p.done_bytes < p.total_bytes {
            return;
        }
        self.last = p.seconds;
        let rate = p.done_bytes as f64 / p.seconds.max(1e-9);
        let eta = (p.total_bytes - p.done_bytes) as f64 / rate.max(1.0);
        let line = format!(
            "synth: {:.2}/{:.2} GB  {:.0} MB/s  ETA {:.0} s  shard {}/{}",
            gb(p.done_bytes),
            gb(p.total_bytes),
            rate / 1e6,
            eta,
            p.shard + 1,
            p.shards
        );
        if self.tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        self.printed = true;
    }

    fn finish(&self) {
        if self.tty && self.printed {
            eprintln!();
        }
    }
}

/// Free bytes on the file system that will hold `dir` (its nearest existing ancestor).
fn free_bytes(dir: &Path) -> Option<u64> {
    let mut p = dir.to_path_buf();
    while !p.exists() {
        if !p.pop() {
            return None;
        }
    }
    if p.as_os_str().is_empty() {
        p = PathBuf::from(".");
    }
    k3::io::sys::fs_available_bytes(&p)
}

/// Opens a shard for writing with `O_DIRECT` (Linux), so tens of GB bypass the page cache
/// and the generator writes at device speed. Some file systems refuse `O_DIRECT` at open
/// (tmpfs) and some only at the first write, so one aligned 4096-byte write probes it; on
/// any refusal the file is opened buffered instead.
fn open_direct(path: &Path) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        if let Ok(mut f) = direct {
            let mut mem = vec![0u8; 2 * 4096];
            let off = (4096 - mem.as_ptr() as usize % 4096) % 4096;
            let probe = f
                .write_all(&mem[off..off + 4096])
                .and_then(|()| f.seek(SeekFrom::Start(0)).map(drop))
                .and_then(|()| f.set_len(0));
            mem.clear();
            if probe.is_ok() {
                return Ok(f);
            }
        }
    }
    BUFFERED.store(true, std::sync::atomic::Ordering::Relaxed);
    File::create(path)
}

/// Set when a shard had to be written buffered (O_DIRECT refused), for the summary line.
static BUFFERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
