//! The incremental HTTP/1.1 request parser (RFC 9112): bytes in, [`Request`] or
//! [`HttpError`] out, no sockets.
//!
//! The caller keeps one buffer per connection holding every byte received since the current
//! request began, appends what it reads and calls [`RequestParser::advance`] again; the parser
//! remembers how far it got, so no byte is looked at twice. On [`Step::Done`] the caller drops
//! the `consumed` bytes from the front of its buffer (what follows is the next, pipelined
//! request) and the parser is ready for that next request.
//!
//! Rules (each refusal names what was wrong):
//! * Empty lines before the request line are skipped (RFC 9112 §2.2). Lines end in CRLF or a
//!   bare LF; a CR anywhere else is 400.
//! * Request line `method SP target SP version`: a request line longer than
//!   [`MAX_TARGET_BYTES`] + 64 or a target longer than [`MAX_TARGET_BYTES`] is 414; a version
//!   `HTTP/d.d` other than 1.0 and 1.1 is 505; the target is origin-form (`/path?query`),
//!   absolute-form (`http://host/path`, reduced to its path and query) or `*` (OPTIONS only).
//! * Header lines: a line without a colon, a name that is not a token (also whitespace before
//!   the colon), a line starting with whitespace (obs-fold), control bytes or non-UTF-8 in a
//!   value are 400. The request line, header lines and the empty line together may take
//!   [`crate::http::Limits::max_header_bytes`]; more is 431. Names are stored lower-cased.
//! * HTTP/1.1 needs exactly one `Host` (400).
//! * Body: `Content-Length` (all copies equal, digits only, else 400; over the body limit 413
//!   before any body byte); `Transfer-Encoding: chunked` is decoded (a `Content-Length` next
//!   to it, or `Transfer-Encoding` in HTTP/1.0, is 400; a coding other than `chunked` is 501);
//!   neither: no body.
//! * `Expect: 100-continue` (HTTP/1.1) makes [`RequestParser::expects_continue`] true until the
//!   body is complete; any other expectation is 417.

use super::{HttpError, Limits, Version};
use std::net::SocketAddr;

/// Longest request target accepted, in bytes (longer is 414).
pub const MAX_TARGET_BYTES: usize = 8192;
/// Longest request line: the target plus room for the method and version.
const MAX_REQUEST_LINE: usize = MAX_TARGET_BYTES + 64;
/// Longest chunk-size line (size and extensions) of a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

/// One parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method as sent (case-sensitive, RFC 9110 §9.1), e.g. `POST`.
    pub method: String,
    /// Path and query (`/v1/chat/completions?x=1`); `*` for `OPTIONS *`.
    pub target: String,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// Header fields in order, names lower-cased, values trimmed of surrounding whitespace.
    pub headers: Vec<(String, String)>,
    /// The body (decoded if it was chunked); empty when there was none.
    pub body: Vec<u8>,
    /// The client's address.
    pub peer: SocketAddr,
}

impl Request {
    /// The first value of header `name` (compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The target without its query (`/v1/models` of `/v1/models?x=1`).
    pub fn path(&self) -> &str {
        self.target
            .split_once('?')
            .map_or(self.target.as_str(), |(p, _)| p)
    }

    /// The query after `?`, if any.
    pub fn query(&self) -> Option<&str> {
        self.target.split_once('?').map(|(_, q)| q)
    }

    /// Whether the connection stays open after the response: HTTP/1.1 unless a `Connection`
    /// header lists `close`, HTTP/1.0 only when one lists `keep-alive` (RFC 9112 §9.3).
    pub fn keep_alive(&self) -> bool {
        let has = |token: &str| {
            self.headers
                .iter()
                .filter(|(k, _)| k == "connection")
                .any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        };
        match self.version {
            Version::Http11 => !has("close"),
            Version::Http10 => has("keep-alive") && !has("close"),
        }
    }
}

/// What [`RequestParser::advance`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The request is not complete: read more bytes and call again.
    NeedMore,
    /// A whole request; it took the first `consumed` bytes of the buffer.
    Done {
        /// The request (its `peer` is the parser's).
        request: Request,
        /// Bytes of the buffer the request took.
        consumed: usize,
    },
}

/// The request line and headers read so far.
#[derive(Debug, Default)]
struct Head {
    method: String,
    target: String,
    version: Option<Version>,
    headers: Vec<(String, String)>,
    expect_continue: bool,
}

/// Where a chunked body's decoding stands.
#[derive(Debug, Clone, Copy)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(usize),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty line; bytes of them so far.
    Trailer(usize),
}

#[derive(Debug)]
enum Phase {
    Head(Head),
    Length {
        head: Head,
        end: usize,
    },
    Chunked {
        head: Head,
        body: Vec<u8>,
        chunk: Chunk,
    },
}

/// The incremental parser of one connection's requests (see the module documentation).
#[derive(Debug)]
pub struct RequestParser {
    max_header_bytes: usize,
    max_body_bytes: usize,
    peer: SocketAddr,
    /// Bytes of the buffer already processed.
    pos: usize,
    phase: Phase,
}

impl RequestParser {
    /// A parser using `limits.max_header_bytes` and `limits.max_body_bytes`; requests carry
    /// `peer`.
    pub fn new(limits: &Limits, peer: SocketAddr) -> RequestParser {
        RequestParser {
            max_header_bytes: limits.max_header_bytes,
            max_body_bytes: limits.max_body_bytes,
            peer,
            pos: 0,
            phase: Phase::Head(Head::default()),
        }
    }

    /// Parses on in `buf`, every byte received since the request began (the previous call's
    /// buffer with more bytes appended). Errors are final for the connection: answer them and
    /// close.
    pub fn advance(&mut self, buf: &[u8]) -> Result<Step, HttpError> {
        if let Phase::Head(head) = &mut self.phase {
            let Some(end) = head_lines(head, buf, &mut self.pos, self.max_header_bytes)? else {
                return Ok(Step::NeedMore);
            };
            let head = std::mem::take(head);
            self.phase = framing(head, end, self.max_body_bytes)?;
        }
        let done = match &mut self.phase {
            Phase::Head(_) => unreachable!("the head phase ended above"),
            Phase::Length { end, .. } => buf.len() >= *end,
            Phase::Chunked { body, chunk, .. } => {
                let limits = (self.max_header_bytes, self.max_body_bytes);
                chunked(buf, &mut self.pos, body, chunk, limits)?
            }
        };
        if !done {
            return Ok(Step::NeedMore);
        }
        let (head, body, consumed) =
            match std::mem::replace(&mut self.phase, Phase::Head(Head::default())) {
                Phase::Length { head, end } => (head, buf[self.pos..end].to_vec(), end),
                Phase::Chunked { head, body, .. } => (head, body, self.pos),
                Phase::Head(_) => unreachable!("the head phase ended above"),
            };
        self.pos = 0;
        let request = Request {
            method: head.method,
            target: head.target,
            version: head.version.unwrap_or(Version::Http11),
            headers: head.headers,
            body,
            peer: self.peer,
        };
        Ok(Step::Done { request, consumed })
    }

    /// True while the request's head is complete, it asked `Expect: 100-continue` and its body
    /// is not: the server then sends `100 Continue` once before reading on.
    pub fn expects_continue(&self) -> bool {
        match &self.phase {
            Phase::Head(_) => false,
            Phase::Length { head, .. } | Phase::Chunked { head, .. } => head.expect_continue,
        }
    }

    /// The buffer length the current request needs in all, once its head has given a
    /// `Content-Length` (`None` before that, and for chunked bodies).
    pub fn wanted(&self) -> Option<usize> {
        match &self.phase {
            Phase::Length { end, .. } => Some(*end),
            _ => None,
        }
    }

    /// Whether any byte of the current request (beyond leading empty lines) has been seen.
    pub fn started(&self, buf: &[u8]) -> bool {
        !matches!(&self.phase, Phase::Head(h) if h.version.is_none())
            || buf[self.pos.min(buf.len())..]
                .iter()
                .any(|&b| b != b'\r' && b != b'\n')
    }
}

/// The next line of `buf` from `pos`: its bytes up to the LF (a CR before it included), and
/// where the next line starts; `None` when no LF follows yet. Limits are checked on these
/// bytes before [`strip_cr`] looks inside, so a refusal does not depend on how input is split.
fn next_line(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let lf = memchr::memchr(b'\n', &buf[pos..])?;
    Some((&buf[pos..pos + lf], pos + lf + 1))
}

/// A line without its CR; a CR anywhere else is 400.
fn strip_cr(raw: &[u8]) -> Result<&[u8], HttpError> {
    let line = raw.strip_suffix(b"\r").unwrap_or(raw);
    if memchr::memchr(b'\r', line).is_some() {
        return Err(HttpError::new(
            400,
            "a bare CR inside a line of the request",
        ));
    }
    Ok(line)
}

/// Reads the head's complete lines from `*pos` into `head`; `Some(end)` (the first body byte)
/// once the empty line ending the head has been read.
fn head_lines(
    head: &mut Head,
    buf: &[u8],
    pos: &mut usize,
    max: usize,
) -> Result<Option<usize>, HttpError> {
    loop {
        if head.version.is_none() {
            // The request line: its own length bound (414) applies before the head's (431).
            if line_len(buf, *pos) > MAX_REQUEST_LINE {
                return Err(HttpError::new(
                    414,
                    format!("request line longer than {MAX_REQUEST_LINE} bytes"),
                ));
            }
        }
        let Some((line, next)) = next_line(buf, *pos) else {
            // An unfinished request line is bounded by 414 alone, whatever the split.
            if head.version.is_some() && buf.len() > max {
                return Err(too_large_head(max));
            }
            return Ok(None);
        };
        if next > max {
            return Err(too_large_head(max));
        }
        let line = strip_cr(line)?;
        *pos = next;
        if head.version.is_none() {
            if !line.is_empty() {
                request_line(head, line)?;
            }
        } else if line.is_empty() {
            return Ok(Some(next));
        } else {
            let n = head.headers.len() + 1;
            head.headers.push(header_line(line, n, "header")?);
        }
    }
}

fn too_large_head(max: usize) -> HttpError {
    HttpError::new(
        431,
        format!("request line and headers exceed the limit of {max} bytes"),
    )
}

/// `line` quoted for a message: at most 64 bytes, lossy UTF-8.
fn quote(line: &[u8]) -> String {
    let cut = &line[..line.len().min(64)];
    let more = if line.len() > 64 { "…" } else { "" };
    format!("{:?}{more}", String::from_utf8_lossy(cut))
}

/// A token character (RFC 9110 §5.6.2).
pub(super) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn request_line(head: &mut Head, line: &[u8]) -> Result<(), HttpError> {
    let bad = || HttpError::new(400, format!("malformed request line {}", quote(line)));
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(bad());
    }
    if target.len() > MAX_TARGET_BYTES {
        return Err(HttpError::new(
            414,
            format!("request target longer than {MAX_TARGET_BYTES} bytes"),
        ));
    }
    head.version = Some(match version {
        b"HTTP/1.1" => Version::Http11,
        b"HTTP/1.0" => Version::Http10,
        [b'H', b'T', b'T', b'P', b'/', a, b'.', b] if a.is_ascii_digit() && b.is_ascii_digit() => {
            return Err(HttpError::new(
                505,
                format!(
                    "HTTP version {} is not supported (1.0 and 1.1 are)",
                    quote(version)
                ),
            ));
        }
        _ => return Err(bad()),
    });
    if target.is_empty() || !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return Err(bad());
    }
    // Checked ASCII above.
    let target = String::from_utf8_lossy(target).into_owned();
    head.method = String::from_utf8_lossy(method).into_owned();
    head.target = origin_form(&target, &head.method).ok_or_else(bad)?;
    Ok(())
}

/// The target as path and query: origin-form as is, absolute-form reduced, `*` for OPTIONS.
fn origin_form(target: &str, method: &str) -> Option<String> {
    if target.starts_with('/') {
        return Some(target.to_string());
    }
    if target == "*" {
        return (method == "OPTIONS").then(|| target.to_string());
    }
    let lower = target.to_ascii_lowercase();
    let rest = ["http://", "https://"]
        .iter()
        .find_map(|s| lower.strip_prefix(s).map(|_| &target[s.len()..]))?;
    let path_at = rest.find(['/', '?']).unwrap_or(rest.len());
    if path_at == 0 {
        return None;
    }
    let path = &rest[path_at..];
    Some(if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    })
}

/// One `name: value` line (`what` is `header` or `trailer`, `n` its 1-based number).
fn header_line(line: &[u8], n: usize, what: &str) -> Result<(String, String), HttpError> {
    if line[0] == b' ' || line[0] == b'\t' {
        return Err(HttpError::new(
            400,
            format!("{what} line {n} starts with whitespace (obs-fold is not accepted)"),
        ));
    }
    let Some(colon) = memchr::memchr(b':', line) else {
        return Err(HttpError::new(
            400,
            format!("{what} line {n} ({}) has no colon", quote(line)),
        ));
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::new(
            400,
            format!("{what} line {n}: field name {} is not a token", quote(name)),
        ));
    }
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    let value = value.trim_ascii();
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(HttpError::new(
            400,
            format!("{what} {name}: control byte in the value"),
        ));
    }
    let Ok(value) = std::str::from_utf8(value) else {
        return Err(HttpError::new(
            400,
            format!("{what} {name}: value is not UTF-8"),
        ));
    };
    Ok((name, value.to_string()))
}

/// Every value of header `name`, comma-separated list elements trimmed and non-empty.
fn list<'h>(head: &'h Head, name: &'h str) -> impl Iterator<Item = &'h str> {
    head.headers
        .iter()
        .filter(move |(k, _)| k == name)
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The body framing of a complete head ending at `end`: Content-Length, chunked or none.
fn framing(mut head: Head, end: usize, max_body: usize) -> Result<Phase, HttpError> {
    let version = head.version.unwrap_or(Version::Http11);
    let hosts = head.headers.iter().filter(|(k, _)| k == "host").count();
    if version == Version::Http11 && hosts != 1 {
        return Err(HttpError::new(
            400,
            format!("an HTTP/1.1 request needs exactly one Host header, found {hosts}"),
        ));
    }
    if let Some(e) = list(&head, "expect").find(|e| !e.eq_ignore_ascii_case("100-continue")) {
        return Err(HttpError::new(
            417,
            format!("expect: {e:?} is not supported (only 100-continue)"),
        ));
    }
    head.expect_continue = version == Version::Http11 && list(&head, "expect").next().is_some();
    let has_te = head.headers.iter().any(|(k, _)| k == "transfer-encoding");
    let has_cl = head.headers.iter().any(|(k, _)| k == "content-length");
    if has_te {
        if has_cl {
            return Err(HttpError::new(
                400,
                "both transfer-encoding and content-length",
            ));
        }
        if version == Version::Http10 {
            return Err(HttpError::new(
                400,
                "transfer-encoding in an HTTP/1.0 request",
            ));
        }
        let codings: Vec<&str> = list(&head, "transfer-encoding").collect();
        if codings.iter().any(|c| !c.eq_ignore_ascii_case("chunked")) {
            return Err(HttpError::new(
                501,
                format!(
                    "transfer-encoding {:?}: only chunked is supported",
                    codings.join(", ")
                ),
            ));
        }
        if codings.len() != 1 {
            return Err(HttpError::new(
                400,
                "transfer-encoding: chunked more than once",
            ));
        }
        return Ok(Phase::Chunked {
            head,
            body: Vec::new(),
            chunk: Chunk::Size,
        });
    }
    let mut length: Option<&str> = None;
    for v in list(&head, "content-length") {
        if !v.bytes().all(|b| b.is_ascii_digit()) || length.is_some_and(|l| l != v) {
            return Err(HttpError::new(
                400,
                format!("content-length {v:?} is not one decimal number"),
            ));
        }
        length = Some(v);
    }
    if has_cl && length.is_none() {
        return Err(HttpError::new(400, "content-length is empty"));
    }
    let length = match length {
        None => 0,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n <= max_body => n,
            _ => return Err(body_too_large(v, max_body)),
        },
    };
    if length == 0 {
        head.expect_continue = false;
    }
    Ok(Phase::Length {
        head,
        end: end + length,
    })
}

fn body_too_large(length: &str, max: usize) -> HttpError {
    HttpError::new(
        413,
        format!("request body of {length} bytes exceeds the limit of {max} bytes"),
    )
}

/// Decodes a chunked body on from `*pos` into `body`; true once the trailer section has ended
/// (`*pos` is then the end of the request). `limits` are (header bytes, body bytes).
fn chunked(
    buf: &[u8],
    pos: &mut usize,
    body: &mut Vec<u8>,
    chunk: &mut Chunk,
    limits: (usize, usize),
) -> Result<bool, HttpError> {
    loop {
        match *chunk {
            Chunk::Size => {
                if line_len(buf, *pos) > MAX_CHUNK_LINE {
                    return Err(HttpError::new(
                        400,
                        format!("chunk-size line longer than {MAX_CHUNK_LINE} bytes"),
                    ));
                }
                let Some((line, next)) = next_line(buf, *pos) else {
                    return Ok(false);
                };
                let size = chunk_size(strip_cr(line)?, body.len(), limits.1)?;
                *pos = next;
                *chunk = if size == 0 {
                    Chunk::Trailer(0)
                } else {
                    Chunk::Data(size)
                };
            }
            Chunk::Data(left) => {
                let take = left.min(buf.len() - *pos);
                body.extend_from_slice(&buf[*pos..*pos + take]);
                *pos += take;
                if take < left {
                    *chunk = Chunk::Data(left - take);
                    return Ok(false);
                }
                *chunk = Chunk::DataEnd;
            }
            Chunk::DataEnd => {
                let rest = &buf[*pos..];
                let eol = match rest {
                    [b'\r', b'\n', ..] => 2,
                    [b'\n', ..] => 1,
                    [] | [b'\r'] => return Ok(false),
                    _ => return Err(HttpError::new(400, "chunk data not followed by CRLF")),
                };
                *pos += eol;
                *chunk = Chunk::Size;
            }
            Chunk::Trailer(bytes) => {
                let Some((line, next)) = next_line(buf, *pos) else {
                    if bytes + buf.len() - *pos > limits.0 {
                        return Err(too_large_trailer(limits.0));
                    }
                    return Ok(false);
                };
                let bytes = bytes + next - *pos;
                if bytes > limits.0 {
                    return Err(too_large_trailer(limits.0));
                }
                let line = strip_cr(line)?;
                *pos = next;
                if line.is_empty() {
                    return Ok(true);
                }
                header_line(line, 0, "trailer")?;
                *chunk = Chunk::Trailer(bytes);
            }
        }
    }
}

/// Bytes from `pos` to the next LF (or to the end of `buf`).
fn line_len(buf: &[u8], pos: usize) -> usize {
    memchr::memchr(b'\n', &buf[pos..]).unwrap_or(buf.len() - pos)
}

fn too_large_trailer(max: usize) -> HttpError {
    HttpError::new(
        431,
        format!("chunked body trailer exceeds the limit of {max} bytes"),
    )
}

/// The size of a chunk-size line (`1a;ext=v`), checked against the body limit with `have`
/// bytes decoded so far.
fn chunk_size(line: &[u8], have: usize, max: usize) -> Result<usize, HttpError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = line[digits..].trim_ascii_start();
    if digits == 0 || !(rest.is_empty() || rest[0] == b';') {
        return Err(HttpError::new(
            400,
            format!("malformed chunk-size line {}", quote(line)),
        ));
    }
    let hex = &line[..digits];
    let size = std::str::from_utf8(hex)
        .ok()
        .and_then(|h| usize::from_str_radix(h, 16).ok());
    match size {
        Some(s) if s <= max - have.min(max) => Ok(s),
        _ => Err(HttpError::new(
            413,
            format!("chunked request body exceeds the limit of {max} bytes"),
        )),
    }
}

#[cfg(test)]
mod tests;
