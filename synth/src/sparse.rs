//! Sparse checkpoints (`cargo xtask synth --sparse`): the same files, names, headers, index
//! and config as [`generate`], but the tensor data are file holes — each shard is its 8-byte
//! header length and header, then `set_len` to its full size — so the released shape
//! (`SynthSpec::k3(93, 896)`, 96 shards, 497,220 tensors, 1.56 TB apparent) takes only its
//! headers on disk and reads as zeros.
//!
//! Tensors of at most [`SparseOptions::real_max_bytes`] bytes (the norm gains, biases, `A_log`,
//! the short-conv weights: kilobytes each) can be written with their real synthetic values
//! instead, so a run is not all zeros; everything larger stays a hole.

use crate::write::{prepare_dir, write_small};
use crate::*;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// Options of [`generate_sparse`].
#[derive(Clone, Debug, Default)]
pub struct SparseOptions {
    /// Replace an existing checkpoint in the directory (as [`Options::force`]).
    pub force: bool,
    /// Tensors of at most this many bytes are written with their values; 0 = every tensor is
    /// a hole.
    pub real_max_bytes: u64,
    /// `config.json` text to write instead of the spec's (the released file, for `--released`);
    /// it must describe the same shapes.
    pub config_json: Option<String>,
    /// Replace the two dummy vision shards by the released checkpoint's counts: 168
    /// `mm_projector.*` / `vision_tower.*` tensors (MODEL.md §4), sized so that the shards add
    /// up to the released 1,560,936,091,448 bytes (FORMATS.md §4). The engine never reads them.
    pub released_vision: bool,
}

/// Bytes of the released checkpoint's 96 shards (FORMATS.md §4).
pub const RELEASED_CHECKPOINT_BYTES: u64 = 1_560_936_091_448;
/// `mm_projector.*` and `vision_tower.*` tensors of the released checkpoint (MODEL.md §4).
pub const RELEASED_VISION_TENSORS: usize = 168;

/// Replaces the last two shards of `plan` (the vision dummies) by 6 `mm_projector.*` and 162
/// `vision_tower.*` tensors (27 blocks of 6), the last one sized so the whole checkpoint is
/// [`RELEASED_CHECKPOINT_BYTES`]. Names and shapes are placeholders: only the counts and the
/// total are the released ones. Errors when the plan has no vision shards or is too large.
fn released_vision(plan: &mut Plan) -> io::Result<()> {
    let n = plan.shards.len();
    if n < 2 || !plan.spec.vision_dummies {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "synth spec: released vision shards need the vision dummies",
        ));
    }
    let def = |name: String, len: u64| TensorDef {
        name,
        dtype: Dtype::U8,
        shape: vec![len as usize],
        init: Init::Nibbles,
    };
    let mm: Vec<TensorDef> = (0..6)
        .map(|i| def(format!("mm_projector.proj.{i}.weight"), 1 << 20))
        .collect();
    let parts = [
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.wo.weight",
        "mlp.fc0.weight",
        "mlp.fc1.weight",
        "norm0.weight",
    ];
    let vt = |last: u64| -> Vec<TensorDef> {
        let mut v: Vec<TensorDef> = (0..27)
            .flat_map(|b| parts.iter().map(move |p| (b, p)))
            .map(|(b, p)| def(format!("vision_tower.encoder.blocks.{b}.{p}"), 1 << 20))
            .collect();
        v.last_mut().expect("162 tensors").shape = vec![last as usize];
        v
    };
    let names = (
        plan.shards[n - 2].file_name.clone(),
        plan.shards[n - 1].file_name.clone(),
    );
    plan.shards[n - 2] = ShardPlan::new(names.0, mm);
    let mut last = 1u64 << 20;
    // The header length depends on the last size's digits: a few rounds reach the fixed point.
    for _ in 0..8 {
        plan.shards[n - 1] = ShardPlan::new(names.1.clone(), vt(last));
        let total = plan.shard_bytes();
        if total == RELEASED_CHECKPOINT_BYTES {
            return Ok(());
        }
        let want = (last + RELEASED_CHECKPOINT_BYTES)
            .checked_sub(total)
            .filter(|&w| w > 0);
        last = want.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("synth spec: the checkpoint already exceeds the released {RELEASED_CHECKPOINT_BYTES} bytes"),
            )
        })?;
    }
    Err(io::Error::other(
        "synth: released vision sizes did not converge",
    ))
}

/// What [`generate_sparse`] wrote.
#[derive(Clone, Debug)]
pub struct SparseSummary {
    /// The plan that was written.
    pub plan: Plan,
    /// Apparent bytes of the shard files (their lengths).
    pub apparent_bytes: u64,
    /// Bytes actually written to the shards (headers and real-valued tensors).
    pub written_bytes: u64,
    /// Tensors written with values (the rest are holes).
    pub real_tensors: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// The plan [`generate_sparse`] writes: `spec`'s, with the released vision shards when
/// `opts.released_vision`. Errors as [`generate_sparse`] (`InvalidInput`).
pub fn sparse_plan(spec: &SynthSpec, opts: &SparseOptions) -> io::Result<Plan> {
    let mut plan = spec
        .plan()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("synth spec: {e}")))?;
    if opts.released_vision {
        released_vision(&mut plan)?;
    }
    Ok(plan)
}

/// Writes the sparse checkpoint of `spec` into `dir`: every shard (to `<name>.partial`,
/// renamed when complete), then the index, `synth.json` and `config.json` last.
///
/// Errors: as [`generate`] (an invalid spec, a directory holding other files, any I/O error
/// naming the path).
pub fn generate_sparse(
    spec: &SynthSpec,
    dir: &Path,
    opts: &SparseOptions,
) -> io::Result<SparseSummary> {
    let plan = sparse_plan(spec, opts)?;
    prepare_dir(dir, opts.force)?;
    let t0 = Instant::now();
    let (mut written, mut real) = (0u64, 0usize);
    for s in &plan.shards {
        let partial = dir.join(format!("{}.partial", s.file_name));
        let err = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("{}: {what}: {e}", partial.display()))
        };
        let mut f = File::create(&partial).map_err(|e| err("cannot create", e))?;
        f.write_all(&(s.header.len() as u64).to_le_bytes())
            .and_then(|()| f.write_all(&s.header))
            .map_err(|e| err("write failed", e))?;
        written += s.data_start();
        for t in s
            .tensors
            .iter()
            .filter(|t| t.def.nbytes() <= opts.real_max_bytes)
        {
            let data = tensor_data(spec.seed, &t.def);
            f.write_all_at(&data, s.data_start() + t.begin)
                .map_err(|e| err("write failed", e))?;
            written += data.len() as u64;
            real += 1;
        }
        f.set_len(s.file_size())
            .map_err(|e| err("cannot set the length", e))?;
        drop(f);
        let path = dir.join(&s.file_name);
        fs::rename(&partial, &path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: cannot rename into place: {e}", path.display()),
            )
        })?;
    }
    let apparent = plan.shard_bytes();
    write_small(dir, "model.safetensors.index.json", &plan.index_json())?;
    write_small(dir, "synth.json", &spec.synth_json(apparent))?;
    let config = opts
        .config_json
        .clone()
        .unwrap_or_else(|| spec.config_json());
    write_small(dir, "config.json", &config)?;
    Ok(SparseSummary {
        plan,
        apparent_bytes: apparent,
        written_bytes: written,
        real_tensors: real,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
