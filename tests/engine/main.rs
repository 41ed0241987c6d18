//! The engine's integration tests: one test crate (one binary to link), one module per concept
//! of `src/`. Each module holds the tests of its concept, including every fixed bug's test.
//!
//! `support` holds what several modules share: fixture paths and running `k3` (`support`), the
//! I/O helpers (`support::io`), the moderate streamed checkpoint (`support::stream`), the
//! reference tokenizer (`support::tokenizer`) and the float64 reference model
//! (`support::model_ref`). The synthetic-checkpoint writer is the `k3-synth` crate (`synth`).
//!
//! Select a concept with a name filter: `cargo test --test engine -- stream::` (the NEON gate
//! runs `model:: cli::run:: stream::identity::` under emulation, xtask/src/gates.rs).

mod chat;
mod checkpoint;
mod cli;
mod config;
mod docs;
mod docs_commands;
mod draft;
mod generate;
mod http;
mod io;
mod json;
mod model;
mod plan;
mod safetensors;
mod serve;
mod stream;
mod structure;
mod support;
mod tokenizer;
