//! Responses (RFC 9112 §4, §6): a whole [`Response`] sent with `Content-Length`, or a
//! [`Stream`] sent with `Transfer-Encoding: chunked` (Server-Sent Events), both through the
//! [`Responder`] the server hands to the handler of each request.
//!
//! The transport owns the framing headers: a handler's `Content-Length` and
//! `Transfer-Encoding` are dropped and replaced; its `Connection: close` is honoured (the
//! connection closes after the response). Header names must be tokens and values must not
//! contain CR, LF or NUL (else the send fails with `InvalidInput`: no header injection). No
//! `Date` header is sent (RFC 9110 §6.6.1 lets a server without a reliable clock omit it).

use super::request::is_tchar;
use super::{Request, Shutdown, Version};
use std::io::{self, Write};
use std::net::TcpStream;

/// A whole response: status, headers and a body sent with `Content-Length`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code, e.g. 200.
    pub status: u16,
    /// Header fields in order (the framing ones are the transport's, see the module docs).
    pub headers: Vec<(String, String)>,
    /// The body bytes (not sent for HEAD requests, 204 and 304).
    pub body: Vec<u8>,
}

impl Response {
    /// A response with a `Content-Type` header.
    pub fn new(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".to_string(), content_type.to_string())],
            body,
        }
    }

    /// This response with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// The reason phrase of a status code (RFC 9110 §15); `Unknown` for codes it does not list.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// What a response goes over: a socket, or a buffer in tests.
pub(crate) trait Conn: Write {
    /// Whether the client has closed its end (or reset the connection).
    fn peer_closed(&self) -> bool;
}

impl Conn for TcpStream {
    fn peer_closed(&self) -> bool {
        // A non-blocking peek: 0 bytes means the client sent FIN; WouldBlock means it is open.
        if self.set_nonblocking(true).is_err() {
            return true;
        }
        let closed = match self.peek(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => {
                e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted
            }
        };
        self.set_nonblocking(false).is_err() || closed
    }
}

impl Conn for Vec<u8> {
    fn peer_closed(&self) -> bool {
        false
    }
}

/// How a request's response went, for the connection loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Nothing,
    /// Sent in full; the connection may continue if keep-alive allows.
    Complete,
    /// Sent but the connection cannot continue (a stream not finished, a write failed,
    /// `Connection: close`, an unframed HTTP/1.0 stream).
    Close,
}

/// The handler's way to answer one request: exactly one [`Responder::send`] or
/// [`Responder::stream`]. A handler that returns without either gets a 500 sent for it.
pub struct Responder<'a> {
    conn: &'a mut dyn Conn,
    version: Version,
    head_only: bool,
    keep_alive: bool,
    shutdown: Option<&'a Shutdown>,
    sent: Sent,
}

impl<'a> Responder<'a> {
    /// A responder for `req` over `conn`; `keep_alive` is whether the connection may stay
    /// open afterwards (the request's wish), unless `shutdown` is requested before the
    /// response starts.
    pub(crate) fn new(
        conn: &'a mut dyn Conn,
        req: &Request,
        keep_alive: bool,
        shutdown: Option<&'a Shutdown>,
    ) -> Responder<'a> {
        Responder {
            conn,
            version: req.version,
            head_only: req.method == "HEAD",
            keep_alive,
            shutdown,
            sent: Sent::Nothing,
        }
    }

    /// A responder for `req` that writes into `out` (for tests of handlers: `out` then holds
    /// the response bytes exactly as a client would read them; the client never disconnects).
    pub fn buffered(out: &'a mut Vec<u8>, req: &Request) -> Responder<'a> {
        Responder::new(out, req, req.keep_alive(), None)
    }

    /// Sends `resp` with `Content-Length`. Errors: a second response (`AlreadyExists`), an
    /// invalid header (`InvalidInput`), a failed write (the client is gone).
    pub fn send(&mut self, resp: Response) -> io::Result<()> {
        self.check_unsent()?;
        let bodiless = resp.status < 200 || resp.status == 204 || resp.status == 304;
        let close = !self.may_keep() || wants_close(&resp.headers);
        let mut out = head(resp.status, &resp.headers, close, self.version)?;
        if !bodiless {
            out.extend_from_slice(format!("Content-Length: {}\r\n", resp.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if !bodiless && !self.head_only {
            out.extend_from_slice(&resp.body);
        }
        self.sent = Sent::Close;
        self.conn.write_all(&out)?;
        self.conn.flush()?;
        self.sent = if close { Sent::Close } else { Sent::Complete };
        Ok(())
    }

    /// Starts a streamed response (`Transfer-Encoding: chunked`; to an HTTP/1.0 client the body
    /// is unframed and the connection closes after it). For SSE pass `Content-Type:
    /// text/event-stream` and `Cache-Control: no-cache`. Errors as [`Responder::send`].
    pub fn stream(
        &mut self,
        status: u16,
        headers: Vec<(String, String)>,
    ) -> io::Result<Stream<'_>> {
        self.check_unsent()?;
        let chunked = self.version == Version::Http11;
        let close = !self.may_keep() || !chunked || wants_close(&headers);
        let mut out = head(status, &headers, close, self.version)?;
        if chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        self.sent = Sent::Close;
        self.conn.write_all(&out)?;
        self.conn.flush()?;
        let head_only = self.head_only;
        Ok(Stream {
            conn: &mut *self.conn,
            sent: &mut self.sent,
            chunked,
            head_only,
            close,
            finished: false,
            failed: false,
        })
    }

    /// Whether the client has closed the connection (a handler can stop working for it).
    pub fn disconnected(&self) -> bool {
        self.conn.peer_closed()
    }

    /// Whether a response has been started.
    pub fn sent(&self) -> bool {
        self.sent != Sent::Nothing
    }

    /// Whether the connection may carry another request after this response.
    pub(crate) fn reusable(&self) -> bool {
        self.sent == Sent::Complete
    }

    fn may_keep(&self) -> bool {
        self.keep_alive && !self.shutdown.is_some_and(Shutdown::requested)
    }

    fn check_unsent(&self) -> io::Result<()> {
        if self.sent != Sent::Nothing {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a response was already sent for this request",
            ));
        }
        Ok(())
    }
}

/// A streamed body in progress ([`Responder::stream`]). Dropped without [`Stream::finish`],
/// the body stays unterminated and the connection is closed, so the client sees it cut.
pub struct Stream<'a> {
    conn: &'a mut dyn Conn,
    sent: &'a mut Sent,
    chunked: bool,
    head_only: bool,
    close: bool,
    finished: bool,
    /// A write failed: the body is cut mid-chunk, nothing more may be sent.
    failed: bool,
}

impl Stream<'_> {
    /// Sends `b` as one chunk and flushes it (an empty `b` sends nothing). Errors: the client
    /// has closed the connection (`ConnectionAborted`, checked before writing) or a write
    /// failed or timed out ([`crate::http::Limits::write_timeout`]: a client that stopped
    /// reading); the stream is then dead and every later call fails too.
    pub fn chunk(&mut self, b: &[u8]) -> io::Result<()> {
        if self.failed || self.conn.peer_closed() {
            self.failed = true;
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the client closed the connection",
            ));
        }
        if b.is_empty() || self.head_only {
            return Ok(());
        }
        let mut out = Vec::with_capacity(b.len() + 12);
        if self.chunked {
            out.extend_from_slice(format!("{:x}\r\n", b.len()).as_bytes());
        }
        out.extend_from_slice(b);
        if self.chunked {
            out.extend_from_slice(b"\r\n");
        }
        let written = self.conn.write_all(&out).and_then(|()| self.conn.flush());
        self.failed = written.is_err();
        written
    }

    /// Whether the client has closed the connection.
    pub fn disconnected(&self) -> bool {
        self.conn.peer_closed()
    }

    /// Ends the body (the last, empty chunk). Errors: a failed write, now or in an earlier
    /// [`Stream::chunk`].
    pub fn finish(mut self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream failed earlier",
            ));
        }
        self.finished = true;
        if self.chunked && !self.head_only {
            self.conn.write_all(b"0\r\n\r\n")?;
            self.conn.flush()?;
        }
        *self.sent = if self.close {
            Sent::Close
        } else {
            Sent::Complete
        };
        Ok(())
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        if !self.finished {
            *self.sent = Sent::Close;
        }
    }
}

/// Whether `headers` hold `Connection: close`.
fn wants_close(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("connection"))
        .any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
}

/// The status line and headers (without the empty line): the handler's headers minus the
/// framing ones, then `Connection` as `close` requires and the version expects.
fn head(
    status: u16,
    headers: &[(String, String)],
    close: bool,
    version: Version,
) -> io::Result<Vec<u8>> {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status)).into_bytes();
    for (k, v) in headers {
        let framing = ["content-length", "transfer-encoding", "connection"];
        if framing.iter().any(|f| k.eq_ignore_ascii_case(f)) {
            continue;
        }
        let bad_name = k.is_empty() || !k.bytes().all(is_tchar);
        if bad_name || v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("response header {k:?}: invalid name or value"),
            ));
        }
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
