//! `k3 serve` (ENGINE.md §11): an OpenAI-compatible HTTP server over one [`Session`]
//! (`crate::generate::session`). Request handlers (one thread per connection, [`crate::http`])
//! decode bodies ([`api`]), and the one reply driver ([`drive`]) submits their jobs to the
//! scheduler's bounded queue ([`sched`]) and turns its events into responses ([`reply`]) in
//! each API's encoding (chat completions: [`run`], [`encode`]); the scheduler thread owns the
//! session, steps every active sequence in one forward and keeps the snapshot pool
//! ([`pool`]); [`metrics`] counts for `/metrics`; [`server`] holds what the handlers share;
//! [`handler`] routes, checks the API key and logs one line per request;
//! [`guard`] keeps other sites out of a keyless server; [`ui`] is the chat page at `/`.
//! [`messages`] is the Anthropic Messages face and [`responses`] the OpenAI Responses face over
//! the same conversation, scheduler, driver and reply parser (their request codecs are
//! [`api::messages`] and [`api::responses`]).
//!
//! [`Session`]: crate::generate::session::Session

pub mod api;
pub mod drive;
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
