//! `--trunk DIR` and `--trunk-codec auto|on|off`: the packed trunk a run streams from,
//! validated against the checkpoint, and — for a packed trunk with a codec — whether the run
//! decodes it or reads the same bytes raw from the shards (ENGINE.md §5): decoding pays only
//! where it outruns the disk, which `auto` measures when the run opens.

use super::{Inputs, Request};
use crate::checkpoint::TensorIndex;
use crate::cli::args::Args;
use crate::error::{Error, Result};
use crate::io::IoFile;
use crate::stream::coded::{probe, StagePool, CODEC_NAME, PROBE_MARGIN};
use crate::stream::pack::PackedTrunk;
use std::sync::Arc;

/// A packed trunk the run streams from, and its `trunk.bin` opened.
pub(super) type Packed = (PackedTrunk, Arc<IoFile>);

/// `--trunk-codec`: whether a packed trunk with a codec is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum CodecUse {
    /// Measure decoding against the disk when the run opens; decode when it is faster.
    #[default]
    Auto,
    /// Always decode.
    On,
    /// Never: read the trunk from the shards.
    Off,
}

impl CodecUse {
    /// `--trunk-codec auto|on|off`. Errors (exit 2): another value, naming the flag.
    pub(super) fn from_args(a: &Args) -> Result<CodecUse> {
        match a.value("trunk-codec")?.as_deref() {
            None | Some("auto") => Ok(CodecUse::Auto),
            Some("on") => Ok(CodecUse::On),
            Some("off") => Ok(CodecUse::Off),
            Some(v) => Err(Error::invalid(format!(
                "flag `--trunk-codec`: expected auto, on or off, found `{v}`"
            ))),
        }
    }
}

/// The `--trunk` packed trunk, validated against the checkpoint (exit 2), or None to read the
/// shards: without `--trunk`, or when its codec is not to be used (`--trunk-codec off`, or
/// `auto` measured decoding slower than the disk). `threads` decode threads are measured. The
/// decision is said on standard error unless `--quiet`.
///
/// The flag returned with it says whether the codec's staging buffers were or will be
/// allocated (decoding, or `auto`'s measurement, which uses fewer of them): the plan counts
/// them then, since peak RSS keeps what the measurement touched even when it decides against
/// decoding.
///
/// Errors: the packed trunk's (exit 2); `--trunk` with `--layers`; `--trunk-codec` given for
/// a packed trunk without a codec or without `--trunk` (exit 2); a read failure while measuring
/// (exit 4).
pub(super) fn open_packed(
    req: &Request,
    inp: &Inputs,
    index: &TensorIndex,
    threads: usize,
) -> Result<(Option<Packed>, bool)> {
    let (cfg, d, layers) = (&inp.cfg, &inp.d, inp.layers);
    let given = req.args.value("trunk-codec")?.is_some();
    let Some(dir) = &req.trunk_dir else {
        if given {
            return Err(Error::invalid(
                "flag `--trunk-codec`: only with `--trunk DIR` (a packed trunk with a codec)",
            ));
        }
        return Ok((None, false));
    };
    if layers < d.nl {
        return Err(Error::invalid(format!(
            "flags `--trunk` and `--layers {layers}`: a packed trunk covers the whole model; drop one of them"
        )));
    }
    let (pt, bin) = PackedTrunk::open(dir, cfg, index)?;
    let Some(codec) = pt.codec.clone() else {
        if given {
            return Err(Error::invalid(format!(
                "flag `--trunk-codec`: {} has no codec (packed without `--codec`); drop the flag",
                dir.display()
            )));
        }
        return Ok((Some((pt, Arc::new(bin))), false));
    };
    let say = |s: &str| {
        if !req.quiet {
            crate::sayln!("{s}");
        }
    };
    let raw = pt.run_bytes();
    let stored: u64 = pt
        .layers
        .iter()
        .flat_map(|l| &l.blocks)
        .map(|b| b.clen)
        .sum();
    let share = format!(
        "{:.1} % of the raw {}",
        100.0 * stored as f64 / raw.max(1) as f64,
        crate::units::gb(raw)
    );
    let use_it = match req.trunk_codec {
        CodecUse::On => {
            say(&format!(
                "trunk codec {codec}: {share}; decoded (--trunk-codec on)"
            ));
            true
        }
        CodecUse::Off => {
            say(&format!(
                "trunk codec {codec}: not used (--trunk-codec off): the trunk is read from the shards"
            ));
            false
        }
        CodecUse::Auto => {
            let pool = StagePool::new(threads, 1)?;
            let blocks: Vec<_> = pt
                .layers
                .iter()
                .flat_map(|l| l.blocks.iter().copied())
                .collect();
            let layer_of: Vec<usize> = pt
                .layers
                .iter()
                .flat_map(|l| std::iter::repeat_n(l.layer, l.blocks.len()))
                .collect();
            let sp = probe(&bin, &blocks, &layer_of, &pool)?;
            let speeds = format!(
                "decoding {:.2} GB/s on {} thread{} against the {:.2} GB/s it must beat ({PROBE_MARGIN} × the disk's {:.2} GB/s ÷ the {:.1} % the codec saves)",
                sp.decode_bytes_per_s / 1e9,
                sp.threads,
                if sp.threads == 1 { "" } else { "s" },
                sp.needed_bytes_per_s() / 1e9,
                sp.disk_bytes_per_s / 1e9,
                100.0 * (1.0 - sp.coded_ratio)
            );
            if sp.pays() {
                say(&format!("trunk codec {codec}: {share}; {speeds}: decoded"));
            } else {
                say(&format!(
                    "trunk codec {codec}: {share}; {speeds}: not used, the trunk is read from the shards (--trunk-codec on decodes anyway)"
                ));
            }
            sp.pays()
        }
    };
    debug_assert_eq!(codec, CODEC_NAME);
    let staged = req.trunk_codec != CodecUse::Off;
    Ok((use_it.then(|| (pt, Arc::new(bin))), staged))
}
