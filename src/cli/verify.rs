//! `k3 verify <model_dir> [--sums FILE] [--write-sums FILE]` (docs/verify.md): checks a
//! downloaded checkpoint.
//!
//! Always: the config, every shard's header and bounds and the tensor census (what `k3 inspect`
//! checks: a truncated or padded shard fails its header's tiling check; an absent shard that
//! holds a needed tensor is named once); a tensor byte total other than the index's `metadata.total_size` is
//! a warning (the field is informational; with shards absent that hold nothing k3 needs, a
//! total above the present bytes is only noted). Tokenizer files in the directory are loaded
//! as a run loads them.
//! With `--sums`: each listed file's SHA-256, streamed in 8 MiB reads through the I/O layer,
//! against a `sha256sum`-format list; the first mismatch stops with the file's name.
//! With `--write-sums`: the SHA-256 of every file in the directory, written in `sha256sum`
//! format (atomically, like every output), never over a file verify reads or lists (io::out).
//!
//! With `--trunk DIR [--against MODEL_DIR]`: a packed trunk's every byte, against the SHA-256
//! sums of its `trunk.json` and the shards (`stream::pack::verify`).
//!
//! Exit 0 when everything checks; exit 2 for a damaged, missing or mismatching file (the data
//! on disk is invalid input; the message says which one file to download again); exit 4 for a
//! read error.

use crate::census::Census;
use crate::checkpoint::{TensorIndex, INDEX_FILE};
use crate::cli::args::{Args, Spec};
use crate::config::Config;
use crate::digest::sha256::{to_hex, Sha256};
use crate::error::{Error, Result};
use crate::io::{IoFile, OutFile};
use crate::stream::pack::{has_sums, LayerChecked, PackedTrunk, TRUNK_JSON};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(crate) const SPECS: [Spec; 4] = [
    Spec::Value("sums"),
    Spec::Value("write-sums"),
    Spec::Value("trunk"),
    Spec::Value("against"),
];

const USAGE: &str = "\
usage: k3 verify <model_dir> [--sums FILE | --write-sums FILE]
       k3 verify --trunk DIR [--against MODEL_DIR]
  Checks a downloaded checkpoint: the config, every shard's header and bounds, the tensor
  census (a missing shard that holds a needed tensor is named), and the tensor bytes against
  the index's total_size. Exit 0 when all is well, 2 naming the damaged or missing file.
  Without --sums a byte flipped inside a tensor cannot be detected: give the checksums.
  --sums FILE        a sha256sum-format list (`<64 hex digits>  <file name>` per line); each
                     listed file's SHA-256 is computed and compared (progress on stderr)
  --write-sums FILE  write the SHA-256 of every file in <model_dir> in sha256sum format
                     (after a download you trust; `sha256sum -c FILE` accepts it too)
  --trunk DIR        check every byte of the packed trunk in DIR (k3 pack-trunk): each layer's
                     run (a coded run decoded, each block too) against the SHA-256 recorded in
                     DIR/trunk.json (progress on stderr); exit 2 naming the file, layer and
                     offset of the first mismatch. Opening a trunk checks only each run's edges
  --against MODEL_DIR  with --trunk: also compare every run byte for byte with the shards of
                     MODEL_DIR it was packed from; required for a trunk.json without sums
                     (packed by an older k3), which is then checked against the shards only
  See docs/verify.md.
";

/// Bytes per read while hashing: large sequential reads, one buffer per worker.
const CHUNK: usize = 8 << 20;
/// Files hashed at once, at most.
const MAX_WORKERS: usize = 8;

/// Runs `k3 verify` with the arguments after the subcommand name.
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(args) = Args::parse_or_help(argv, &SPECS, USAGE)? else {
        return Ok(());
    };
    if let Some(trunk) = args.value_os("trunk") {
        return run_trunk(&args, PathBuf::from(trunk));
    }
    if args.value_os("against").is_some() {
        return Err(Error::invalid(
            "verify: flag `--against`: only with --trunk DIR (the model directory a packed trunk is compared with)",
        ));
    }
    let dir = args.model_dir("verify", "see k3 verify -h")?;
    let sums = args.value_os("sums").map(PathBuf::from);
    let write = args.value_os("write-sums").map(PathBuf::from);
    if sums.is_some() && write.is_some() {
        return Err(Error::invalid(
            "verify: give --sums FILE or --write-sums FILE, not both",
        ));
    }
    // The headers are read first (seconds); the output is checked against every file verify
    // reads or lists, by any spelling or link (io::out, as a run's `--out`), and its temporary
    // created, before hours of hashing and before anything is written.
    let (mut text, inputs) = structure(&dir)?;
    let mut listed = Vec::new();
    let mut out_file = match &write {
        Some(p) => {
            listed = dir_files(&dir, p)?;
            let mut all = inputs;
            all.extend(listed.iter().map(|f| dir.join(f)));
            let all: Vec<&Path> = all.iter().map(PathBuf::as_path).collect();
            crate::io::out::check_outputs(&[("--write-sums", p.clone())], &[], &all)?;
            Some(OutFile::create("--write-sums", p, "the checksum list")?)
        }
        None => None,
    };
    match (&sums, &mut out_file) {
        (Some(list), _) => {
            let entries = parse_sums(list)?;
            text += &check_sums(&dir, list, &entries)?;
        }
        (None, Some(out)) => {
            let (body, summary) = write_sums(&dir, &listed)?;
            out.write_all(body.as_bytes())?;
            text += &summary;
        }
        (None, None) => text.push_str(
            "note: without --sums, a byte flipped inside a tensor cannot be detected from the files \
             alone: only headers, sizes and bounds were checked. Give --sums FILE (the published \
             SHA-256 list, or one written by --write-sums after a download you trust).\n",
        ),
    }
    if let Some(out) = out_file {
        let path = out.path().display().to_string();
        out.commit()?;
        let _ = writeln!(text, "wrote {path}");
    }
    crate::cli::write_stdout(text.as_bytes())
}

/// `k3 verify --trunk DIR [--against MODEL_DIR]`: every byte of a packed trunk against the
/// sums of its `trunk.json` and, with `--against`, the shards (stream::pack::verify).
fn run_trunk(args: &Args, dir: PathBuf) -> Result<()> {
    for flag in ["sums", "write-sums"] {
        if args.value_os(flag).is_some() {
            return Err(Error::invalid(format!(
                "verify: flag `--{flag}`: not with --trunk (it checks a model directory's files; run it as `k3 verify MODEL_DIR --{flag} FILE`)"
            )));
        }
    }
    if let Some(p) = args.positional.first() {
        return Err(Error::invalid(format!(
            "verify --trunk: unexpected argument `{}`: give the model directory to compare the trunk with as --against MODEL_DIR",
            p.to_string_lossy()
        )));
    }
    let against = args.value_os("against").map(PathBuf::from);
    let model = match &against {
        Some(m) => {
            if !m.is_dir() {
                return Err(Error::invalid(format!(
                    "flag `--against`: {} is not a model directory",
                    m.display()
                )));
            }
            let cfg = Config::from_file(&m.join("config.json"))?;
            Some((cfg, TensorIndex::open(m)?))
        }
        None => None,
    };
    let (trunk, bin) = match &model {
        Some((cfg, index)) => PackedTrunk::open(&dir, cfg, index)?,
        None => PackedTrunk::open_alone(&dir)?,
    };
    let json = dir.join(TRUNK_JSON);
    let sums = has_sums(&trunk);
    let mut text = String::new();
    match (&against, sums) {
        (None, false) => {
            return Err(Error::invalid(format!(
                "{}: no SHA-256 sums (packed by a k3 pack-trunk that did not record them): give --against MODEL_DIR to verify the trunk against the shards it was packed from, or pack it again",
                json.display()
            )))
        }
        (Some(m), false) => {
            let line = format!(
                "note: {}: no SHA-256 sums (packed by a k3 pack-trunk that did not record them): verifying against the shards of {} only; pack the trunk again to record them",
                json.display(),
                m.display()
            );
            crate::sayln!("{line}");
            text += &line;
            text.push('\n');
        }
        _ => {}
    }
    let show = |c: &LayerChecked| {
        crate::sayln!(
            "[{}/{}] layer {}: {} bytes, {}",
            c.done,
            c.layers,
            c.layer,
            c.run_bytes,
            rate(c.run_bytes, c.seconds)
        );
    };
    let v = crate::stream::pack::verify(&trunk, &bin, model.as_ref().map(|m| &m.1), &show)?;
    let what = match (&against, v.sums) {
        (Some(m), true) => format!(
            "every run matches its SHA-256 in trunk.json and the shards of {} byte for byte",
            m.display()
        ),
        (Some(m), false) => format!(
            "every run equals the shards of {} byte for byte",
            m.display()
        ),
        (None, _) => "every run matches its SHA-256 in trunk.json".to_string(),
    };
    let coded = match &trunk.codec {
        Some(c) => format!(
            " ({c}: {} bytes of trunk.bin read and decoded)",
            v.bin_bytes
        ),
        None => String::new(),
    };
    let _ = writeln!(
        text,
        "{}: {} layers, {} run bytes{coded}: {what}",
        dir.display(),
        v.layers,
        v.run_bytes
    );
    let _ = writeln!(text, "trunk: {}", throughput(v.run_bytes, v.seconds));
    crate::cli::write_stdout(text.as_bytes())
}

/// The checks that need no checksum; returns the report lines and the files read (the
/// config, the index, every shard the index lists, the tokenizer files), which no output may
/// replace.
fn structure(dir: &Path) -> Result<(String, Vec<PathBuf>)> {
    if !dir.is_dir() {
        return Err(Error::invalid(format!(
            "{}: not a directory (usage: k3 verify <model_dir>)",
            dir.display()
        )));
    }
    let cfg = Config::from_file(&dir.join("config.json"))?;
    let index = TensorIndex::open(dir)?;
    let mut inputs: Vec<PathBuf> = [
        "config.json",
        INDEX_FILE,
        crate::tokenizer::TIKTOKEN_FILE,
        crate::tokenizer::CONFIG_FILE,
    ]
    .iter()
    .map(|n| dir.join(n))
    .collect();
    inputs.extend(index.shards().iter().map(|s| s.path.clone()));
    let mut text = String::new();
    let absent: Vec<&str> = index
        .shards()
        .iter()
        .filter(|s| !s.present)
        .map(|s| s.file_name.as_str())
        .collect();
    // An absent shard holding a needed tensor is named (once) by the census; one holding
    // none (the vision tower) is only noted.
    Census::run(&cfg, &index).check(&dir.display().to_string())?;
    let mut tensor_bytes = 0u64;
    index.for_each(|_, _, t| tensor_bytes += t.nbytes);
    let n_shards = index.shards().len();
    let n_present = n_shards - absent.len();
    if let Some(total) = index_total_size(dir)? {
        total_size_line(&mut text, dir, total, tensor_bytes, &absent, n_present);
    }
    if !absent.is_empty() {
        let one = absent.len() == 1;
        let _ = writeln!(
            text,
            "note: {} listed in {INDEX_FILE} {} not present ({}); {} no tensor k3 needs",
            if one { "1 shard" } else { "shards" },
            if one { "is" } else { "are" },
            absent.join(", "),
            if one { "it holds" } else { "they hold" }
        );
    }
    // Tokenizer files in the model directory are loaded as a run would load them.
    if crate::tokenizer::looks_like_tokenizer_dir(dir) {
        let tok = crate::tokenizer::Tokenizer::load(dir)?;
        tok.check_vocab_size(cfg.vocab_size).map_err(|e| {
            Error::invalid(format!(
                "{}: {}; the tokenizer files do not belong to this model",
                dir.join(crate::tokenizer::TIKTOKEN_FILE).display(),
                e.message
            ))
        })?;
        let _ = writeln!(
            text,
            "tokenizer: {} and {} load ({} ranks + {} special ids = vocab_size)",
            crate::tokenizer::TIKTOKEN_FILE,
            crate::tokenizer::CONFIG_FILE,
            tok.num_ranks(),
            tok.vocab_size() - tok.num_ranks()
        );
    }
    let file_bytes: u64 = index.shards().iter().map(|s| s.file_size).sum();
    let shards = if absent.is_empty() {
        format!("{n_shards} shards")
    } else {
        format!("{n_present} of {n_shards} shards present")
    };
    let _ = writeln!(
        text,
        "{}: {shards}, {} tensors, {file_bytes} bytes: headers, bounds and census ok",
        dir.display(),
        index.len()
    );
    Ok((text, inputs))
}

/// The report line for the index's `metadata.total_size` against the `tensor_bytes` of the
/// present shards. `total_size` is informational (written by the exporter, not checked on
/// load): a difference is reported, not refused; each shard's own tiling check has already
/// passed. With shards `absent` (holding no needed tensor: the census passed), their tensors'
/// bytes cannot be known, so a total above the present bytes is only a note saying so.
fn total_size_line(
    text: &mut String,
    dir: &Path,
    total: u64,
    tensor_bytes: u64,
    absent: &[&str],
    n_present: usize,
) {
    if total == tensor_bytes {
        return;
    }
    let index = dir.join(INDEX_FILE);
    if !absent.is_empty() && total > tensor_bytes {
        let _ = writeln!(
            text,
            "note: {}: metadata.total_size is {total} bytes for all shards; the {n_present} \
             present shards' tensors hold {tensor_bytes} bytes, the other {} bytes are in the \
             absent {} (not checked)",
            index.display(),
            total - tensor_bytes,
            absent.join(", ")
        );
    } else {
        let _ = writeln!(
            text,
            "warning: {}: metadata.total_size is {total} bytes but the {}shards' tensors hold \
             {tensor_bytes} bytes: a shard may come from another release; --sums tells which",
            index.display(),
            if absent.is_empty() { "" } else { "present " }
        );
    }
}

/// `metadata.total_size` of the index file, when there is an index file that has one.
fn index_total_size(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(INDEX_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path)
        .map_err(|e| Error::io(format!("{}: cannot read: {e}", path.display())))?;
    let v = crate::json::parse(&bytes).map_err(|e| e.into_error(path.display(), 0))?;
    match v.get("metadata").and_then(|m| m.get("total_size")) {
        None => Ok(None),
        Some(t) => t
            .as_number()
            .and_then(|n| n.as_u64())
            .map(Some)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{}: metadata.total_size: expected a non-negative integer",
                    path.display()
                ))
            }),
    }
}

/// One line of a `sha256sum` list: the expected digest and the file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SumEntry {
    /// 64 lowercase hex digits.
    pub hex: String,
    /// The file name relative to the model directory.
    pub name: String,
}

/// Parses `sha256sum` output: `<64 hex>  <name>` or `<64 hex> *<name>` per line; blank lines
/// and `#` comments are skipped. A line starting with `\` has an escaped name (`\\` for a
/// backslash, `\n` for a newline, `\r` for a carriage return), as `sha256sum` writes for
/// such names. A file listed twice (the same name, also spelled with `./` or doubled `/`)
/// with the same digest is kept once.
///
/// Errors (exit 2): a malformed line, a name that leaves the directory (absolute or `..`), a
/// bad escape, or a file listed twice with different digests, naming the list file and the
/// line numbers.
pub fn parse_sums_text(label: &str, text: &str) -> Result<Vec<SumEntry>> {
    let mut out: Vec<SumEntry> = Vec::new();
    // (normalized name, line number) of each entry of `out`.
    let mut keys: Vec<(String, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            Error::invalid(format!(
                "{label}: line {}: {why} (expected `<64 hex digits>  <file name>`, as sha256sum writes)",
                i + 1
            ))
        };
        let (escaped, line) = match line.strip_prefix('\\') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let (hex, rest) = line.split_at_checked(64).ok_or_else(|| bad("too short"))?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("the digest is not 64 hex digits"));
        }
        let raw = rest
            .strip_prefix("  ")
            .or_else(|| rest.strip_prefix(" *"))
            .ok_or_else(|| bad("no two-character separator after the digest"))?;
        let name = if escaped {
            unescape_name(raw).ok_or_else(|| {
                bad("a backslash in the file name is not followed by `\\`, `n` or `r`")
            })?
        } else {
            raw.to_string()
        };
        if name.is_empty() || name.starts_with('/') || name.split('/').any(|c| c == "..") {
            return Err(bad(&format!(
                "file name `{name}` is empty or leaves the model directory"
            )));
        }
        let hex = hex.to_ascii_lowercase();
        let key = name_key(&name);
        if let Some(j) = keys.iter().position(|(k, _)| *k == key) {
            if out[j].hex != hex {
                return Err(Error::invalid(format!(
                    "{label}: lines {} and {} list `{name}` with different digests; keep the right one",
                    keys[j].1,
                    i + 1
                )));
            }
            continue;
        }
        keys.push((key, i + 1));
        out.push(SumEntry { hex, name });
    }
    if out.is_empty() {
        return Err(Error::invalid(format!("{label}: no checksum lines")));
    }
    Ok(out)
}

/// A sums-list name with `sha256sum`'s escapes undone; `None` for an unknown escape.
fn unescape_name(raw: &str) -> Option<String> {
    let mut name = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            name.push(c);
            continue;
        }
        name.push(match chars.next()? {
            '\\' => '\\',
            'n' => '\n',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(name)
}

/// One `sha256sum` line for `name`: escaped (a leading `\`) when the name holds a backslash,
/// newline or carriage return, as `sha256sum` writes it.
fn sums_line(hex: &str, name: &str) -> String {
    if !name.contains(['\\', '\n', '\r']) {
        return format!("{hex}  {name}\n");
    }
    let esc = name
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r");
    format!("\\{hex}  {esc}\n")
}

/// The name a list entry is compared by: `./` and empty components dropped.
fn name_key(name: &str) -> String {
    let parts: Vec<&str> = name
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    parts.join("/")
}

fn parse_sums(list: &Path) -> Result<Vec<SumEntry>> {
    let text = std::fs::read_to_string(list).map_err(|e| {
        Error::invalid(format!(
            "flag `--sums {}`: cannot read: {e}",
            list.display()
        ))
    })?;
    parse_sums_text(&list.display().to_string(), &text)
}

/// Hashes each listed file and compares; stops at the first mismatch (in list order).
fn check_sums(dir: &Path, list: &Path, entries: &[SumEntry]) -> Result<String> {
    for e in entries {
        let path = dir.join(&e.name);
        if !path.is_file() {
            return Err(Error::invalid(format!(
                "{}: listed in {} but not present; download this file",
                path.display(),
                list.display()
            )));
        }
    }
    let start = Instant::now();
    let paths: Vec<PathBuf> = entries.iter().map(|e| dir.join(&e.name)).collect();
    let digests = hash_files(&paths, |i, d| to_hex(d) == entries[i].hex)?;
    let mut total = 0u64;
    for ((e, path), (d, n)) in entries.iter().zip(&paths).zip(&digests) {
        let got = to_hex(d);
        if got != e.hex {
            return Err(Error::invalid(format!(
                "{}: SHA-256 mismatch: {} lists {}, the file has {got}: the file is damaged or \
                 incomplete; download this one file again",
                path.display(),
                list.display(),
                e.hex
            )));
        }
        total += n;
    }
    Ok(format!(
        "sha256: {} match {} ({})\n",
        files_word(entries.len()),
        list.display(),
        throughput(total, start.elapsed().as_secs_f64())
    ))
}

/// The regular, non-hidden files of `dir` in byte-wise name order, without `skip` (the list
/// being written) or its temporary.
fn dir_files(dir: &Path, skip: &Path) -> Result<Vec<String>> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("{}: cannot list: {e}", dir.display())))?;
    let skip = std::fs::canonicalize(skip.parent().unwrap_or(Path::new(".")))
        .ok()
        .map(|p| p.join(skip.file_name().unwrap_or_default()));
    let skip_tmp = skip.as_deref().map(crate::io::out::tmp_path);
    let mut names = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(format!("{}: cannot list: {e}", dir.display())))?;
        let Ok(name) = ent.file_name().into_string() else {
            continue;
        };
        let path = ent.path();
        let canon = std::fs::canonicalize(&path).ok();
        if name.starts_with('.')
            || !path.is_file()
            || (canon.is_some() && (canon == skip || canon == skip_tmp))
        {
            continue;
        }
        names.push(name);
    }
    crate::sort::sort_by(&mut names, |a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// The `sha256sum` list of `files` and a summary line.
fn write_sums(dir: &Path, files: &[String]) -> Result<(String, String)> {
    let start = Instant::now();
    let paths: Vec<PathBuf> = files.iter().map(|f| dir.join(f)).collect();
    let digests = hash_files(&paths, |_, _| true)?;
    let mut body = String::new();
    let mut total = 0u64;
    for (name, (d, n)) in files.iter().zip(&digests) {
        total += n;
        body += &sums_line(&to_hex(d), name);
    }
    let summary = format!(
        "sha256: {} hashed ({})\n",
        files_word(files.len()),
        throughput(total, start.elapsed().as_secs_f64())
    );
    Ok((body, summary))
}

/// A file's SHA-256 and its size in bytes.
type Hashed = ([u8; 32], u64);

/// SHA-256 and size of every file of `paths`, several files at once (one per core, at most
/// [`MAX_WORKERS`]: hashing runs at a few hundred MB/s per core, slower than a fast disk). `ok`
/// judges each digest as it lands; after the first it refuses, no new file is started (the
/// caller reports the first refused one in list order). Files not hashed get a zero digest.
fn hash_files(
    paths: &[PathBuf],
    ok: impl Fn(usize, &[u8; 32]) -> bool + Sync,
) -> Result<Vec<Hashed>> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WORKERS)
        .min(paths.len().max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<Hashed>>>> = Mutex::new(vec![None; paths.len()]);
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= paths.len() || stop.load(Ordering::Relaxed) {
                    break;
                }
                let t = Instant::now();
                let r = hash_file(&paths[i]);
                let good = match &r {
                    Ok((d, n)) => {
                        let k = done.fetch_add(1, Ordering::Relaxed) + 1;
                        crate::sayln!(
                            "[{k}/{}] {}: {n} bytes, {}",
                            paths.len(),
                            paths[i].display(),
                            rate(*n, t.elapsed().as_secs_f64())
                        );
                        ok(i, d)
                    }
                    Err(_) => false,
                };
                if !good {
                    stop.store(true, Ordering::Relaxed);
                }
                if let Ok(mut v) = results.lock() {
                    v[i] = Some(r);
                }
            });
        }
    });
    let v = results
        .into_inner()
        .map_err(|_| Error::internal("verify: a hashing thread panicked"))?;
    v.into_iter()
        .map(|r| r.unwrap_or(Ok(([0; 32], 0))))
        .collect()
}

/// SHA-256 of one file and its size, read in [`CHUNK`]-byte positioned reads that do not stay
/// in the page cache.
fn hash_file(path: &Path) -> Result<Hashed> {
    let f = IoFile::open(path)?;
    let len = f.len_at_open();
    let mut buf = vec![0u8; CHUNK.min(len as usize).max(1)];
    let mut h = Sha256::new();
    let mut off = 0u64;
    while off < len {
        let n = CHUNK.min((len - off) as usize);
        f.read_uncached_at(&mut buf[..n], off)?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok((h.finish(), len))
}

/// `1 file`, `2 files`.
fn files_word(n: usize) -> String {
    format!("{n} file{}", if n == 1 { "" } else { "s" })
}

/// `R MB/s` (decimal), or `-` for no measurable time.
fn rate(bytes: u64, secs: f64) -> String {
    if secs > 0.0 {
        format!("{:.0} MB/s", bytes as f64 / secs / 1e6)
    } else {
        "-".into()
    }
}

/// `N.NNN GB in S s, R MB/s` (decimal units).
fn throughput(bytes: u64, secs: f64) -> String {
    format!(
        "{:.3} GB in {secs:.1} s, {}",
        bytes as f64 / 1e9,
        rate(bytes, secs)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_lines_text_and_binary_mode() {
        let h = "a".repeat(64);
        let t = format!(
            "{h}  model.safetensors\n# c\n\n{} *config.json\n",
            "B".repeat(64)
        );
        let v = parse_sums_text("l", &t).unwrap();
        assert_eq!(v[0].name, "model.safetensors");
        assert_eq!(v[1].hex, "b".repeat(64));
        assert_eq!(v[1].name, "config.json");
        for bad in [
            "zz  x",
            &format!("{h}  ../x"),
            &format!("{h}  /etc/x"),
            &format!("{h} x"),
        ] {
            let e = parse_sums_text("l", bad).unwrap_err();
            assert!(e.message.starts_with("l: line 1:"), "{}", e.message);
        }
    }

    #[test]
    fn sums_lines_escaped_and_duplicated() {
        let h = "a".repeat(64);
        let t = format!("\\{h}  a\\\\b\\nc\n{h}  x\n{h}  ./x\n{h}  y//z\n{h}  y/z\n");
        let v = parse_sums_text("l", &t).unwrap();
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v[0].name, "a\\b\nc");
        assert_eq!(sums_line(&h, &v[0].name), format!("\\{h}  a\\\\b\\nc\n"));
        assert_eq!(sums_line(&h, "x"), format!("{h}  x\n"));
        let e = parse_sums_text("l", &format!("\\{h}  a\\qb")).unwrap_err();
        assert!(e.message.starts_with("l: line 1:"), "{}", e.message);
        let e = parse_sums_text("l", &format!("{h}  x\n\n{}  ./x\n", "b".repeat(64))).unwrap_err();
        assert!(e.message.contains("lines 1 and 3"), "{}", e.message);
    }
}
