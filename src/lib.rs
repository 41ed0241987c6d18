//! k3: an inference engine for Kimi K3.
//!
//! Module map (one concept per module, one direction of dependency; see DEVELOPERS.md):
//! parsers (`json`, `config`, `safetensors`, `tokenizer`) know nothing of the model;
//! the numeric kernels live in the `k3-kernels` crate and know nothing of files;
//! the model composes kernels; streaming supplies bytes to the model; `cli` composes all.

pub mod catalogue;
pub mod census;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod error;
pub mod fnv;
pub mod json;
pub mod safetensors;

pub use error::{Error, ErrorKind, Result};

/// Engine version and git commit, embedded by build.rs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Git commit the binary was built from (`unknown` outside a checkout).
pub const GIT_COMMIT: &str = env!("K3_GIT_COMMIT");
