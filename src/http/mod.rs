//! The HTTP/1.1 transport of `k3 serve` (ENGINE.md §11; RFC 9112 message syntax): std::net
//! only, knowing nothing of models or JSON requests.
//!
//! * `request`: an incremental request parser over bytes ([`RequestParser`]): request line,
//!   headers, a `Content-Length` or `Transfer-Encoding: chunked` body, `Expect: 100-continue`,
//!   keep-alive. Pure, no sockets.
//! * `response`: [`Response`] (status + headers + body, sent with `Content-Length`), the
//!   [`Responder`] a handler answers through, and [`Stream`], a chunked body for Server-Sent
//!   Events.
//! * `server`: [`serve`], the accept loop: at most [`Limits::max_connections`] connection
//!   threads (beyond: 503 with `Retry-After: 1`), read, idle and whole-request timeouts, graceful
//!   [`Shutdown`] (its drain held by the application while its own work runs).
//!
//! Chunked request bodies are **read** (not refused with 411): RFC 9112 §7.1, chunk extensions
//! ignored, trailer fields read (they count towards [`Limits::max_header_bytes`]) and dropped;
//! the decoded body counts towards [`Limits::max_body_bytes`]. Any other transfer coding is 501.
//!
//! Errors the transport answers itself (400, 408, 413, 414, 417, 431, 501, 503, 505) carry an
//! OpenAI-shape JSON body ([`error_body`]) and `Connection: close`.

mod request;
mod response;
mod server;

pub use request::{Request, RequestParser, Step, MAX_TARGET_BYTES};
pub use response::{reason, Responder, Response, Stream};
pub use server::{serve, DrainHold, Handler, Shutdown};

use std::time::Duration;

/// The transport's limits. [`Limits::default`] gives the documented defaults; the `k3 serve`
/// flags override single fields (`Limits { max_body_bytes, ..Limits::default() }`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the request line, header lines and their terminating empty line (also of a
    /// chunked body's trailer section); more is 431. Default 16,384.
    pub max_header_bytes: usize,
    /// Bytes of a request body (decimal megabytes on the command line); a `Content-Length`
    /// over it is 413 before any body byte is read, a chunked body as soon as it passes it.
    /// Default 8,000,000.
    pub max_body_bytes: usize,
    /// Connection threads at once; a connection beyond it gets 503 with `Retry-After: 1` and
    /// is closed. Default 64.
    pub max_connections: usize,
    /// Longest wait for the next bytes of a request once its first byte has arrived (→ 408).
    /// Default 10 s.
    pub read_timeout: Duration,
    /// Longest wait for the first byte of a request on an open connection (the first request
    /// or the next one on a kept-alive connection); the connection is then closed without a
    /// response. Default 15 s.
    pub idle_timeout: Duration,
    /// Longest time from a request's first byte to its last body byte, however the bytes
    /// trickle in (→ 408): a client sending one byte a second cannot hold a worker. Default 30 s.
    pub request_deadline: Duration,
    /// Longest a write to the client may block (a client that stops reading); the write then
    /// fails as a disconnected client. Default 30 s.
    pub write_timeout: Duration,
    /// After [`Shutdown::request`] (or, when the drain is held, after the last
    /// [`Shutdown::hold`] is released), how long [`serve`] waits for running connections to
    /// end before it returns anyway. Default 10 s.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_header_bytes: 16_384,
            max_body_bytes: 8_000_000,
            max_connections: 64,
            read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            request_deadline: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// The HTTP version of a request (RFC 9112 §2.3); others are refused with 505.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: the connection closes after the response unless `Connection: keep-alive`;
    /// streamed bodies are sent unframed and end with the connection.
    Http10,
    /// HTTP/1.1: the connection stays open unless `Connection: close`.
    Http11,
}

impl Version {
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// A request the transport refuses: the status it answers and what was wrong (the error
/// body's `message`, naming the header or limit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpError {
    /// 400, 408, 413, 414, 417, 431, 501 or 505.
    pub status: u16,
    /// E.g. `header line 3 ("Host example") has no colon`.
    pub message: String,
}

impl HttpError {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> HttpError {
        HttpError {
            status,
            message: message.into(),
        }
    }

    /// This error as a response: [`error_body`] as `application/json`, `Connection: close`.
    pub fn to_response(&self) -> Response {
        Response::new(
            self.status,
            "application/json",
            error_body(&self.message).into_bytes(),
        )
        .header("Connection", "close")
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status,
            reason(self.status),
            self.message
        )
    }
}

impl std::error::Error for HttpError {}

/// The OpenAI error shape, `{"error":{"message":"…","type":"invalid_request_error",
/// "param":null,"code":null}}`, with `message` escaped as a JSON string (RFC 8259 §7; a
/// local escaper: this module does not use `json`).
pub fn error_body(message: &str) -> String {
    error_json(message, "invalid_request_error")
}

/// [`error_body`] with another `type` (`server_error` for a 500); both strings escaped.
pub fn error_json(message: &str, error_type: &str) -> String {
    let mut out = String::with_capacity(message.len() + 96);
    out.push_str("{\"error\":{\"message\":");
    push_json_string(&mut out, message);
    out.push_str(",\"type\":");
    push_json_string(&mut out, error_type);
    out.push_str(",\"param\":null,\"code\":null}}");
    out
}

/// Appends `s` as a JSON string literal (RFC 8259 §7: `\"`, `\\`, short escapes, `\u00XX`).
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_escapes() {
        assert_eq!(
            error_json("m", "server_\"error"),
            "{\"error\":{\"message\":\"m\",\"type\":\"server_\\\"error\",\"param\":null,\"code\":null}}"
        );
        assert_eq!(
            error_body("a \"b\"\\\n\u{1}"),
            "{\"error\":{\"message\":\"a \\\"b\\\"\\\\\\n\\u0001\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}"
        );
    }
}
