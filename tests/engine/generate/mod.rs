//! The generation layer (ENGINE.md §8–§10): the sampler against independent implementations,
//! the stop rules, and the session with the run options on it — batch invariance of the
//! batched forward, sampled runs identical on every path, snapshot / restore, state files,
//! `--ctx`, `--batch`, the forced-reply test hook, and the refusals of issue 12's "Bad input"
//! list.

mod cli;
mod constrained;
mod join;
mod sample;
mod session;
mod spec;
mod stop;
