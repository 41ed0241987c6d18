//! The routes of `k3 serve` (ENGINE.md §11) on the HTTP transport: `/health` (503 until the
//! model is loaded), `/metrics`, `/v1/models`, `/v1/models/{id}` (the served model, else 404
//! `model_not_found`), `/v1/chat/completions`, `/v1/completions`,
//! and the chat page at `/` and `/favicon.ico` ([`ui`], without the key; `--no-ui` turns it
//! off); without an API key, the `Host` and `Origin` rules of [`guard`] (403: DNS rebinding,
//! other sites); the API key (Bearer, compared in constant time), CORS only when `--cors`
//! names an origin, and one log line per request (no prompt text unless `--log-prompts`; none for `/health`
//! probes, which only count in `/metrics`).

use super::api::ApiError;
use super::drive::Outcome;
use super::encode;
use super::guard;
use super::run;
use super::server::{no_route, not_allowed, Server};
use super::ui;
use crate::http::{Handler, Request, Responder, Response};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// `a == b` in time that depends only on the lengths (an API key never leaks by timing).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= (x ^ y) as u64;
    }
    std::hint::black_box(diff) == 0
}

/// `s` with its `%XX` escapes decoded (a model id in a URL path); an escape that is not two
/// hex digits, or a result that is not UTF-8, leaves `s` as it is.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(x) => {
                    out.push(x);
                    i += 3;
                    continue;
                }
                None => return s.to_string(),
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

impl Server {
    /// The API key check: `Authorization: Bearer KEY`, or Anthropic's `x-api-key: KEY`.
    pub(super) fn authorized(&self, req: &Request) -> Result<(), ApiError> {
        let Some(key) = &self.api_key else {
            return Ok(());
        };
        let given = req
            .header("authorization")
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .or_else(|| req.header("x-api-key"))
            .map(str::trim);
        match given {
            Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => Ok(()),
            Some(_) => Err(ApiError::other(
                401,
                "authentication_error",
                "Authorization: wrong API key",
            )),
            None => Err(ApiError::other(
                401,
                "authentication_error",
                "Authorization: missing; send `Authorization: Bearer <key>` or `x-api-key: <key>` (the server was started with an API key)",
            )),
        }
    }

    /// Without an API key: 403 for a `Host` that is not this server's address or an `Origin`
    /// of another site ([`guard`]); with a key, everything passes on to the key check.
    fn guarded(&self, req: &Request) -> Result<(), ApiError> {
        if self.api_key.is_some() {
            return Ok(());
        }
        let quoted = |v: Option<&str>| {
            let cut: String = v.unwrap_or("").chars().take(80).collect();
            format!("{cut:?}")
        };
        let host = req.header("host");
        if !guard::host_allowed(host, self.bound) {
            return Err(ApiError::other(
                403,
                "permission_error",
                format!(
                    "Host: {} is not this server's address (http://{}, http://localhost:{}); a server without --api-key answers only its own address (DNS rebinding)",
                    quoted(host),
                    self.bound,
                    self.bound.port()
                ),
            ));
        }
        let origin = req.header("origin");
        if !guard::origin_allowed(origin, self.bound, self.cors.as_deref()) {
            return Err(ApiError::other(
                403,
                "permission_error",
                format!(
                    "Origin: {} is another site; a server without --api-key serves only its own pages (and the --cors origin)",
                    quoted(origin)
                ),
            ));
        }
        Ok(())
    }

    fn route(&self, req: &Request, out: &mut Responder<'_>, n: u64) -> Outcome {
        let path = req.path();
        let method = req.method.as_str();
        if let Err(e) = self.guarded(req) {
            // no CORS headers for a refused Host or Origin, --cors or not; the Messages
            // routes answer in Anthropic's shape, as all their other refusals
            let body = if path == "/v1/messages" || path.starts_with("/v1/messages/") {
                super::api::messages::error_body(&e)
            } else {
                e.body()
            };
            let r = Response::new(e.status, "application/json", body.into_bytes());
            let mut o = Outcome::sent(out, r);
            o.error = Some("host/origin".into());
            return o;
        }
        if method == "OPTIONS" && self.cors.is_some() {
            let r = self
                .with_cors(Response::new(204, "text/plain", Vec::new()))
                .header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
                .header(
                    "Access-Control-Allow-Headers",
                    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta",
                )
                .header("Access-Control-Max-Age", "600");
            return Outcome::sent(out, r);
        }
        if path == "/health" {
            let loaded = self.loaded.load(Ordering::SeqCst);
            let (status, text) = if loaded {
                (200, "ok")
            } else {
                (503, "loading")
            };
            let mut r = self.json(status, format!("{{\"status\":\"{text}\"}}"));
            if !loaded {
                r = r.header("Retry-After", "1");
            }
            return Outcome::sent(out, r);
        }
        if self.ui && ui::is_ui_path(path) {
            if method != "GET" && method != "HEAD" {
                let e = not_allowed(req, "GET");
                return Outcome::sent(out, self.error(&e).header("Allow", "GET"));
            }
            return Outcome::sent(out, ui::response(req));
        }
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            return super::messages::route(self, req, out, n);
        }
        if path == "/v1/responses" || path.starts_with("/v1/responses/") {
            return super::responses::route(self, req, out, n);
        }
        if let Err(e) = self.authorized(req) {
            return Outcome::sent(out, self.error(&e));
        }
        let model = path.strip_prefix("/v1/models/");
        let allowed = match path {
            "/metrics" | "/v1/models" => "GET",
            _ if model.is_some() => "GET",
            "/v1/chat/completions" | "/v1/completions" => "POST",
            _ => {
                let routes = format!(
                    "/v1/chat/completions, /v1/completions, /v1/messages, /v1/responses, /v1/models, /v1/models/{{id}}, /health, /metrics{}",
                    if self.ui { ", / (the chat page)" } else { "" }
                );
                let e = no_route(req, &routes);
                return Outcome::sent(out, self.error(&e));
            }
        };
        if method != allowed && !(allowed == "GET" && method == "HEAD") {
            let e = not_allowed(req, allowed);
            let r = self.error(&e).header("Allow", allowed);
            return Outcome::sent(out, r);
        }
        match path {
            "/metrics" => {
                let body = self.metrics.render().into_bytes();
                let r = Response::new(200, "text/plain; version=0.0.4", body);
                Outcome::sent(out, self.with_cors(r))
            }
            "/v1/models" => {
                let body = encode::models(&self.limits.model_id, self.started).to_json();
                Outcome::sent(out, self.json(200, body))
            }
            _ if model.is_some() => {
                let id = percent_decoded(model.unwrap_or_default());
                if id == self.limits.model_id {
                    let body = encode::model(&id, self.started).to_json();
                    Outcome::sent(out, self.json(200, body))
                } else {
                    let e = ApiError::model_not_found(&id, &self.limits.model_id);
                    Outcome::sent(out, self.error(&e))
                }
            }
            _ => match self.ready() {
                Err(e) => Outcome::sent(out, self.error(&e)),
                Ok(()) if path == "/v1/chat/completions" => run::chat(self, req, out, n),
                Ok(()) => run::completion(self, req, out, n),
            },
        }
    }
}

impl Handler for Server {
    fn handle(&self, req: &Request, out: &mut Responder<'_>) {
        let t0 = Instant::now();
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let o = self.route(req, out, n);
        self.metrics.request(o.status);
        if req.path() == "/health" {
            // a probe every few seconds would bury the requests: counted, never logged
            return;
        }
        let mut line = format!(
            "k3 serve: req-{n} {} {} {} {} prompt={} completion={} cached={} {:.3}s",
            req.peer.ip(),
            req.method,
            req.path(),
            o.status,
            o.usage.prompt_tokens,
            o.usage.completion_tokens,
            o.usage.cached_tokens,
            t0.elapsed().as_secs_f64()
        );
        if let Some(e) = &o.error {
            line.push_str(&format!(" error={e:?}"));
        }
        if self.log_prompts && !req.body.is_empty() {
            let b = String::from_utf8_lossy(&req.body[..req.body.len().min(4096)]).into_owned();
            line.push_str(&format!(" body={b:?}"));
        }
        crate::sayln!("{line}");
    }

    fn refused(&self, peer: SocketAddr, status: u16, message: &str) {
        self.metrics.request(status);
        crate::sayln!("k3 serve: refused {} {status} {message:?}", peer.ip());
    }
}

#[cfg(test)]
mod tests {
    use super::{constant_time_eq, percent_decoded};

    #[test]
    fn model_ids_in_paths_are_percent_decoded() {
        assert_eq!(percent_decoded("tiny-k3-text"), "tiny-k3-text");
        assert_eq!(percent_decoded("org%2Fm%20x"), "org/m x");
        assert_eq!(percent_decoded("bad%zz"), "bad%zz");
        assert_eq!(percent_decoded("cut%4"), "cut%4");
        assert_eq!(percent_decoded("sign%+1"), "sign%+1");
        assert_eq!(percent_decoded("%E6%99%BA"), "智");
    }

    #[test]
    fn keys_compare_by_value_and_length() {
        assert!(constant_time_eq(b"sekrit", b"sekrit"));
        assert!(!constant_time_eq(b"sekrit", b"sekriT"));
        assert!(!constant_time_eq(b"sekrit", b"sekrit2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
