//! The session (src/generate/session.rs) and the run options on it: batch invariance of the
//! batched forward, sampled runs identical on every path, snapshot / restore, stop rules,
//! `--ctx`, the forced-reply test hook, and the refusals of issue 12's "Bad input" list.

mod cli;
mod session;
