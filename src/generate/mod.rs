//! Generation pieces that do not touch the model (issue 12): the sampler of ENGINE.md §8,
//! stop rules, the session state file of FORMATS.md §9, and the `--batch` JSON lines of
//! ENGINE.md §10. The session (which runs the model) composes them.

pub mod batch_input;
pub mod sample;
pub mod state_file;
pub mod stop;
