//! The state every request handler shares ([`Server`]) and the responses built from it (JSON
//! with the CORS headers, errors in the OpenAI shape). Below both `handler` (routing) and
//! `run` (one request end to end), so neither needs the other's file for it.

use super::api::{self, ApiError};
use super::metrics::Metrics;
use super::sched::Queue;
use crate::http::{Request, Response};
use crate::tokenizer::Tokenizer;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Everything the request handlers share.
pub struct Server {
    /// The tokenizer (chat template, reply parsing, completions' prompts).
    pub tok: Arc<Tokenizer>,
    /// What requests are checked against (model id, `--ctx`, V, sampler defaults).
    pub limits: api::Limits,
    /// End ids (`[EOS]`, `<|end_of_msg|>`, `--stop-id`): not completion text.
    pub end_ids: Vec<u32>,
    /// The scheduler's queue.
    pub queue: Arc<Queue>,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Raised once the model is loaded (`/health` 200, generation endpoints open).
    pub loaded: AtomicBool,
    /// `--api-key` / `K3_API_KEY`: every route but `/health` needs `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// `--cors ORIGIN`: the `Access-Control-Allow-Origin` value (no CORS headers without it).
    pub cors: Option<String>,
    /// The address the listener is bound to: the `Host` values a keyless server accepts
    /// ([`super::guard`]).
    pub bound: std::net::SocketAddr,
    /// The chat page at `/` (off with `--no-ui`).
    pub ui: bool,
    /// `--log-prompts`: the request body goes into the log line.
    pub log_prompts: bool,
    /// Unix seconds at start (`/v1/models`' `created`).
    pub started: u64,
    /// Request counter (ids `chatcmpl-k3-N`, `cmpl-k3-N`, `req-N` in the log).
    pub counter: AtomicU64,
    /// Stored responses (`POST /v1/responses` with `store`), for `previous_response_id`.
    pub stored: super::store::Store,
}

/// 404 for a path no route of the API takes; `routes` lists those it has.
pub(super) fn no_route(req: &Request, routes: &str) -> ApiError {
    ApiError::other(
        404,
        "not_found_error",
        format!(
            "{} {}: no such route (routes: {routes})",
            req.method,
            req.path()
        ),
    )
}

/// 405 for a method the route does not take (the response says `Allow: allow`).
pub(super) fn not_allowed(req: &Request, allow: &str) -> ApiError {
    ApiError::other(
        405,
        "invalid_request_error",
        format!(
            "{} {}: method not allowed; use {allow}",
            req.method,
            req.path()
        ),
    )
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Server {
    /// `r` with the CORS headers when `--cors` named an origin.
    pub(super) fn with_cors(&self, r: Response) -> Response {
        match &self.cors {
            Some(o) => r
                .header("Access-Control-Allow-Origin", o)
                .header("Vary", "Origin"),
            None => r,
        }
    }

    /// A JSON response, CORS headers added.
    pub(super) fn json(&self, status: u16, body: String) -> Response {
        self.with_cors(Response::new(status, "application/json", body.into_bytes()))
    }

    /// 503 until the model is loaded (every generation route).
    pub(super) fn ready(&self) -> Result<(), ApiError> {
        if self.loaded.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        Err(ApiError::other(
            503,
            "overloaded_error",
            "the model is still loading; retry shortly (GET /health says when it is ready)",
        ))
    }

    /// An error response; 503 says when to retry.
    pub(super) fn error(&self, e: &ApiError) -> Response {
        let r = self.json(e.status, e.body());
        match e.status {
            503 => r.header("Retry-After", "1"),
            401 => r.header("WWW-Authenticate", "Bearer"),
            _ => r,
        }
    }

    /// The CORS headers for a streamed response.
    pub(super) fn cors_headers(&self) -> Vec<(String, String)> {
        match &self.cors {
            Some(o) => vec![
                ("Access-Control-Allow-Origin".into(), o.clone()),
                ("Vary".into(), "Origin".into()),
            ],
            None => Vec::new(),
        }
    }

    /// The headers of an SSE response (every API's stream): the event-stream type, no
    /// caching, and the CORS headers.
    pub(super) fn sse_headers(&self) -> Vec<(String, String)> {
        let mut h = vec![
            ("Content-Type".to_string(), "text/event-stream".to_string()),
            ("Cache-Control".to_string(), "no-cache".to_string()),
        ];
        h.extend(self.cors_headers());
        h
    }
}
