//! Generation pieces that do not touch the model (issue 12): the sampler of ENGINE.md §8 (and its
//! thinking-budget constraint),
//! stop rules, the session state file of FORMATS.md §9, the `--batch` JSON lines of
//! ENGINE.md §10, and the logprobs of ENGINE.md §11. The session (which runs the model)
//! composes them.

pub mod batch;
pub mod batch_input;
pub mod budget;
pub mod defaults;
pub mod guide;
pub mod logprob;
pub mod prefix_cache;
pub mod sample;
pub mod session;
pub mod spec;
pub mod state_file;
pub mod stop;
