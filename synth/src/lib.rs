//! Synthetic Kimi K3 checkpoints in the released format, deterministic from a seed.
//!
//! Shared by `cargo xtask synth` (released widths, gigabytes, written at disk speed) and the
//! engine's integration tests (small and moderate widths, written to a temporary directory) and
//! the `synth_write` benchmark. It depends on `std` only, so the bytes it writes do not depend on
//! any crate version: the PRNG, the value tables and the JSON writers are all in this crate
//! (`spec` the specification, `tensors` the tensor set and value recipes, `plan` the shard
//! layout, `values` the PRNG and block generator, `write` the writer, `sparse` the writer of checkpoints
//! whose tensor data are file holes, `config` the JSON files).
//!
//! What is written (MODEL.md §2, §4; FORMATS.md §2–§5; tests/fixtures/README.md §1.2):
//! * `config.json` in the nested released shape (or the flat test shape), with the released key
//!   spellings, the one-based `full_attn_layers` / `kda_layers` pair and the MXFP4
//!   `quantization_config`;
//! * shards `model-00001-of-000NNN.safetensors` (released naming: five-digit index, six-digit
//!   total): shard 1 holds layer 0, then `layers_per_shard` layers per shard (each layer's
//!   routed experts followed by its trunk run), then one shard of model tables, then (optionally)
//!   one `mm_projector.*` and one `vision_tower.*` dummy shard; inside a shard the header keys are
//!   sorted and the data is in the same byte-wise name order, so each layer's trunk and each
//!   expert (`w1.weight_packed, w1.weight_scale, w2…, w3…`) is one gap-free run; the header is
//!   padded with spaces to a multiple of 8; no holes, no trailing bytes;
//! * `model.safetensors.index.json` (`metadata.total_size` + sorted `weight_map`);
//! * `synth.json`: the generator version, seed and every parameter (the engine ignores it).
//!
//! Values (see [`SynthSpec::layer_tensors`] for each tensor): matrices are BF16, uniform on
//! ±sqrt(3/fan_in) (variance 1/fan_in, so unit-RMS inputs give unit-RMS outputs through every
//! projection of MODEL.md §6); gains are uniform on [0.8, 1.2]; AttnRes projections have
//! variance 1/H so the depth softmax is neither uniform nor one-hot; routed experts are MXFP4
//! with uniformly random nibbles (all 16 E2M1 codes) and E8M0 scales in a two-value range chosen
//! so each logical matrix also has variance ≈ 1/fan_in (never 0, never 255); the router has
//! independent random rows and a small random bias, so the top-k spreads over the experts;
//! `A_log` has its first Hk entries in [0, 2.5] and an exactly zero tail.
//!
//! Determinism: every tensor is cut into 1 MiB blocks; block b of tensor `name` is drawn from a
//! xoshiro256** stream seeded from (seed, FNV-1a-64(name), b). The bytes therefore depend only
//! on the spec and the seed — not on the shard plan, the thread count or the write order — and
//! blocks can be generated in parallel. [`GENERATOR_VERSION`] changes whenever the bytes for a
//! given spec and seed change.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

/// Version of the value recipe; bumped whenever the bytes for a given spec and seed change.
pub const GENERATOR_VERSION: u32 = 1;

/// Tensors are generated in blocks of this many bytes (a multiple of every element size); the
/// block is the unit of the PRNG streams, so it is part of the byte recipe.
pub const BLOCK_BYTES: u64 = 1 << 20;

/// Every bound tensor name starts with this prefix (MODEL.md §4).
pub const PREFIX: &str = "language_model.";

mod config;
mod draft;
mod plan;
mod sparse;
mod spec;
mod tensors;
mod values;
mod write;

pub use draft::*;
pub use plan::*;
pub use sparse::*;
pub use spec::*;
pub use tensors::*;
pub use values::*;
pub use write::*;
