//! Learned drafts for exact speculation: the DSpark draft format (DRAFT.md). A draft reads
//! hidden states the target has computed (its taps, §2) and proposes a block of next ids in
//! one forward (§3); verification (ENGINE.md §10) keeps only what the target itself chooses,
//! so a draft changes how many ids a sweep yields, never an id or a logit.
//!
//! * `config`: `config.json` → [`DraftConfig`] (§1), checked against the target's config;
//! * `weights`: the tensors → [`DraftWeights`] (§1), `embed_tokens` never read;
//! * `rope`: the YaRN inverse frequencies, rotation factor and softmax scale ("RoPE", §3 step 5);
//! * `forward`: the context rows from taps, the block forward and the Markov head (§3), over a
//!   per-sequence [`ContextCache`].
//!
//! Depends on config, checkpoint, bind's reader (parsing and binding) and the kernels; the
//! target's embedding and lm_head come in through [`TargetTables`].

pub mod config;
pub mod forward;
pub mod rope;
pub mod weights;

pub use config::{AuxStream, DraftConfig, Yarn};
pub use forward::{ContextCache, Draft, DraftOutput, TablesInMemory, TargetTables};
pub use rope::Rope;
pub use weights::DraftWeights;

use crate::config::Config;
use crate::error::Result;
use std::path::Path;

/// A draft directory opened for a target: its config read and checked against `target`
/// (widths, vocabulary, layer count, tap range), then its weights read. Errors (exit 2) name
/// the file, key or tensor; nothing is half-loaded (an error returns no draft).
pub fn open(dir: &Path, target: &Config) -> Result<Draft> {
    let path = dir.join("config.json");
    let cfg = DraftConfig::from_file(&path)?;
    cfg.check_target(target, &path.display().to_string())?;
    let weights = DraftWeights::open(dir, &cfg)?;
    Ok(Draft::new(cfg, weights))
}
