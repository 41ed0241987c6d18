//! k3: an inference engine for Kimi K3.
//!
//! Module map (one concept per module, one direction of dependency; see DEVELOPERS.md):
//! parsers (`json`, `config`, `safetensors`, `tokenizer`) know nothing of the model;
//! the numeric kernels live in the `k3-kernels` crate and know nothing of files;
//! the model composes kernels and reads no file; `bind` turns a checkpoint's bytes into the
//! model's views; streaming supplies bytes to the model; `run` opens a model with a plan and
//! decodes; `cli` parses flags, plans, prints and composes all.

// Standard error goes through `say!` and `sayln!`, which never panic; standard output through
// `cli::write_stdout`, whose failure is exit 4.
#![deny(clippy::print_stdout, clippy::print_stderr)]
// `unsafe` lives in the I/O layer only (DEVELOPERS.md); the kernels crate has its own.
#![deny(unsafe_code)]

/// `eprint!` that never panics: a closed or full standard error (`k3 … 2>&1 | head`) must not
/// abort a run that is still computing or writing its outputs; the text is dropped instead.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

/// `eprintln!` that never panics (see [`say!`]).
#[macro_export]
macro_rules! sayln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

pub mod bind;
pub mod catalogue;
pub mod census;
pub mod chat;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod constrain;
pub mod digest;
pub mod draft;
pub mod error;
pub mod generate;
pub mod http;
#[allow(unsafe_code)]
pub mod io;
pub mod json;
pub mod model;
pub mod plan;
pub mod report;
pub mod run;
pub mod safetensors;
pub mod serve;
pub mod sort;
pub mod stream;
pub mod tokenizer;
pub mod units;

pub use error::{Error, ErrorKind, Result};
/// FNV-1a-64 (FORMATS.md §1): the kernels' one, for the config fingerprint, the weights tag,
/// header checksums and logits hashes.
pub use k3_kernels::fnv;

/// Engine version and git commit, embedded by build.rs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Git commit the binary was built from (`unknown` outside a checkout).
pub const GIT_COMMIT: &str = env!("K3_GIT_COMMIT");
