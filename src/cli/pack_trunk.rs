//! `k3 pack-trunk <model_dir> <out_dir> [--codec NAME] [--threads N] [--config PATH]
//! [--quiet]` (ENGINE.md §3, §5; FORMATS.md §7): writes `trunk.bin` + `trunk.json` once, so
//! that a run with `--trunk <out_dir>` streams each layer with one aligned sequential read;
//! with `--codec bf16-huffman` the runs are written as blocks whose BF16 exponents are
//! entropy-coded (fewer bytes to read; docs/formats.md). Shows progress (layers, GB, MB/s, ETA)
//! on standard error.

use crate::checkpoint::TensorIndex;
use crate::cli::args::{Args, Spec};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::stream::coded::CODEC_NAME;
use crate::stream::pack::{check_out_dir, pack, Codec, PackProgress, PackedTrunk, TRUNK_JSON};
use crate::units::gb;
use std::ffi::OsString;
use std::path::PathBuf;

const USAGE: &str = "\
usage: k3 pack-trunk <model_dir> <out_dir> [--codec NAME] [--threads N] [--config PATH] [--quiet]
  Copies each layer's trunk run into <out_dir>/trunk.bin at 4096-aligned offsets and writes
  <out_dir>/trunk.json (docs/formats.md); run with `k3 <model_dir> --trunk <out_dir>`.
  Files are written under .tmp names and renamed only when complete.
  --codec NAME    bf16-huffman: write the runs as blocks whose BF16 exponents are Huffman-coded
                  (lossless: every coded block is decoded and compared before it is written;
                  coded runs about 0.76 of their size, measured). A run then decodes them where
                  that beats reading raw bytes (`--trunk-codec`). Default: none (stored as in the shards)
  --threads N     threads that code blocks (default: the cores)
  --config PATH   config file (default: <model_dir>/config.json)
  --quiet         no progress
";

pub(crate) const SPECS: &[Spec] = &[
    Spec::Switch("help"),
    Spec::Value("config"),
    Spec::Value("codec"),
    Spec::Value("threads"),
    Spec::Switch("quiet"),
];

/// Runs the subcommand; `argv` excludes `pack-trunk` itself.
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(args) = Args::parse_or_help(argv, SPECS, USAGE)? else {
        return Ok(());
    };
    let (model_dir, out_dir) = match args.positional.as_slice() {
        [m, o] => (PathBuf::from(m), PathBuf::from(o)),
        _ => {
            return Err(Error::invalid(format!(
                "pack-trunk: expected <model_dir> <out_dir>, found {} positional arguments (see k3 pack-trunk --help)",
                args.positional.len()
            )))
        }
    };
    if !model_dir.is_dir() {
        return Err(Error::invalid(format!(
            "pack-trunk: {} is not a model directory",
            model_dir.display()
        )));
    }
    let config = args
        .value_os("config")
        .map(PathBuf::from)
        .unwrap_or_else(|| model_dir.join("config.json"));
    let quiet = args.switch("quiet");
    let codec = codec_flag(&args)?;
    // An unwritable output directory is invalid input, found before any shard is read; a
    // directory created for the output is removed again (if still empty) when the model turns
    // out to be unusable or the pack fails, so a failed pack leaves nothing behind.
    // The directories this pack creates, innermost first.
    let created: Vec<PathBuf> = out_dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(|d| d.to_path_buf())
        .collect();
    check_out_dir(&out_dir)?;
    let result = Config::from_file(&config).and_then(|cfg| {
        let index = TensorIndex::open(&model_dir)?;
        pack_into(&cfg, &index, &out_dir, codec, quiet)
    });
    if result.is_err() {
        for d in &created {
            let _ = std::fs::remove_dir(d); // only while empty
        }
    }
    result
}

/// Packs into a checked `out_dir`, with progress and the closing line unless `quiet`.
fn pack_into(
    cfg: &Config,
    index: &TensorIndex,
    out_dir: &std::path::Path,
    codec: Option<Codec>,
    quiet: bool,
) -> Result<()> {
    if !quiet {
        if let Some(line) = replacing_line(out_dir, &PackedTrunk::plan(cfg, index)?) {
            crate::sayln!("{line}");
        }
    }
    let terminal = crate::io::sys::stderr_is_terminal();
    let mut last_layers = usize::MAX;
    let mut show = |p: &PackProgress| {
        if quiet {
            return;
        }
        let eta = p
            .eta_seconds()
            .map(|s| format!("{s:.0} s"))
            .unwrap_or_else(|| "?".into());
        let line = format!(
            "pack-trunk: layer {}/{}, {} of {}, {:.1} MB/s, ETA {eta}",
            p.layers_done,
            p.layers,
            gb(p.bytes_done),
            gb(p.bytes),
            p.mb_per_s()
        );
        if terminal {
            crate::say!("\r\x1b[K{line}");
        } else if p.layers_done != last_layers {
            // one line per finished layer when not on a terminal
            crate::sayln!("{line}");
        }
        last_layers = p.layers_done;
    };
    let s = pack(cfg, index, out_dir, codec, &mut show)?;
    if !quiet {
        if terminal {
            crate::sayln!();
        }
        if s.trunk.codec.is_some() {
            let stored: u64 = s
                .trunk
                .layers
                .iter()
                .flat_map(|l| &l.blocks)
                .map(|b| b.clen)
                .sum();
            let coded = s
                .trunk
                .layers
                .iter()
                .flat_map(|l| &l.blocks)
                .filter(|b| !b.is_stored())
                .count();
            let blocks: usize = s.trunk.layers.iter().map(|l| l.blocks.len()).sum();
            crate::sayln!(
                "pack-trunk: codec {}: {} of runs stored as {} ({:.1} % of raw; {coded} of {blocks} blocks coded, each decoded and compared before it was written)",
                CODEC_NAME,
                gb(s.trunk.run_bytes()),
                gb(stored),
                100.0 * stored as f64 / s.trunk.run_bytes().max(1) as f64
            );
        }
        crate::sayln!(
            "pack-trunk: wrote {} ({}; the file {} bytes with alignment padding, largest run {} bytes) and {} in {:.2} s ({}; verified against the shards)",
            s.bin.display(),
            crate::units::trunk_size(s.trunk.run_bytes(), s.trunk.layers.len()),
            s.bin_len,
            s.trunk.layers.iter().map(|l| l.run_len()).max().unwrap_or(0),
            out_dir.join(TRUNK_JSON).display(),
            s.seconds,
            if s.direct { "read with O_DIRECT" } else { "read buffered" }
        );
    }
    Ok(())
}

/// The line saying that `out_dir` already holds a packed trunk that this pack replaces (not an
/// error), and whether it is of this model's layout; `None` when there is none.
fn replacing_line(out_dir: &std::path::Path, new: &PackedTrunk) -> Option<String> {
    let path = out_dir.join(TRUNK_JSON);
    if !path.exists() {
        return None;
    }
    // The sums are of the bytes, not the layout (a plan has none yet).
    let old = std::fs::read(&path)
        .ok()
        .and_then(|b| PackedTrunk::parse(&b, &path).ok())
        .map(|mut t| {
            for l in &mut t.layers {
                l.sha256 = None;
                l.block_sha256.clear();
            }
            t
        });
    let what = match old {
        Some(old) if old == *new => "of this model's layout".to_string(),
        Some(old) => format!(
            "of another model or layout: {} layers, {} bytes of runs; this model: {} layers, {} bytes",
            old.layers.len(),
            old.run_bytes(),
            new.layers.len(),
            new.run_bytes()
        ),
        None => "whose trunk.json does not parse".to_string(),
    };
    Some(format!(
        "pack-trunk: {} already holds a packed trunk ({what}); replacing it",
        out_dir.display()
    ))
}

/// `--codec NAME` (with `--threads N`): None without it or with `none`.
///
/// Errors (exit 2): a codec this k3 does not write, `--threads` that is not a positive integer
/// or given without `--codec`.
fn codec_flag(args: &Args) -> Result<Option<Codec>> {
    let threads = args.parsed::<usize>("threads", "a positive integer")?;
    if threads == Some(0) {
        return Err(Error::invalid("flag `--threads`: must be at least 1"));
    }
    match args.value("codec")?.as_deref() {
        None | Some("none") => {
            if threads.is_some() {
                return Err(Error::invalid(
                    "flag `--threads`: only with `--codec` (copying a run needs no threads)",
                ));
            }
            Ok(None)
        }
        Some(CODEC_NAME) => Ok(Some(Codec {
            threads: threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        })),
        Some(other) => Err(Error::invalid(format!(
            "flag `--codec`: unknown codec `{other}` (expected {CODEC_NAME} or none)"
        ))),
    }
}
