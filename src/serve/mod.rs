//! `k3 serve` (ENGINE.md §11): an OpenAI-compatible HTTP server over one [`Session`]
//! (`crate::generate::session`). Request handlers (one thread per connection, [`crate::http`])
//! decode bodies ([`api`]), submit jobs to the scheduler's bounded queue ([`sched`]) and turn
//! its events into responses ([`run`], [`reply`], [`encode`]); the scheduler thread owns the
//! session, steps every active sequence in one forward and keeps the snapshot pool
//! ([`pool`]); [`metrics`] counts for `/metrics`; [`server`] holds what the handlers share;
//! [`handler`] routes, checks the API key and logs one line per request;
//! [`guard`] keeps other sites out of a keyless server; [`ui`] is the chat page at `/`.
//! [`messages`] is the Anthropic Messages face over the same conversation, scheduler and
//! reply parser (its request codec is [`api::messages`]).
//!
//! [`Session`]: crate::generate::session::Session

pub mod api;
pub mod encode;
pub mod guard;
pub mod handler;
pub mod messages;
pub mod metrics;
pub mod pool;
pub mod reply;
pub mod responses;
pub mod run;
pub mod sched;
pub mod server;
pub mod store;
pub mod ui;
