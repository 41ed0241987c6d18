//! The accept loop and the connection threads (ENGINE.md §11).
//!
//! [`serve`] accepts on a non-blocking listener, polling the [`Shutdown`] flag every
//! `POLL` (10 ms). Each connection gets its own thread, at most
//! [`Limits::max_connections`] at once; a connection beyond that is answered 503 with
//! `Retry-After: 1` from the accept loop (which never blocks on it) and closed.
//!
//! A connection thread reads requests one after the other (pipelined bytes stay buffered for
//! the next one) and calls the [`Handler`] for each. Timeouts:
//! * before a request's first byte: [`Limits::idle_timeout`], then the connection closes
//!   silently (also when shutdown is requested while it waits);
//! * between bytes of a request: [`Limits::read_timeout`], and for the whole request (head and
//!   body): [`Limits::request_deadline`], however slowly the bytes trickle in; either → 408;
//! * every write: [`Limits::write_timeout`].
//!
//! A refused request (400, 408, 413, …) is answered, then the connection is half-closed and
//! what the client still sends is read and dropped for up to `LINGER` (2 s) before closing, so
//! a client still sending its 20 MB body reads the 413 instead of a reset.

use super::{HttpError, Limits, Request, RequestParser, Responder, Response, Step};
use std::io::{self, Read, Write};
use std::net::{Shutdown as Both, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the accept loop and idle connections look at the shutdown flag.
const POLL: Duration = Duration::from_millis(10);
/// Longest slice an idle connection sleeps in `read` before it looks at the shutdown flag.
const IDLE_SLICE: Duration = Duration::from_millis(100);
/// How long a refused connection's remaining input is read and dropped before closing.
const LINGER: Duration = Duration::from_secs(2);
/// Refused-at-capacity connections lingering in the accept loop at once (more are closed).
const MAX_LINGERING: usize = 256;

/// What `k3 serve` plugs into the transport: called once per request, on that connection's
/// thread (several at once, hence `Sync`).
pub trait Handler: Send + Sync + 'static {
    /// Answers `req` through `out` ([`Responder::send`] or [`Responder::stream`]); returning
    /// without an answer makes the transport send 500.
    fn handle(&self, req: &Request, out: &mut Responder<'_>);

    /// Told of each request the transport refused itself (`status` 400, 408, 413, 414, 417,
    /// 431, 501, 503 or 505, `message` as sent in the error body), for the request log. A 503
    /// at the connection limit is told on the accept loop's thread: return quickly. Default:
    /// nothing.
    fn refused(&self, peer: SocketAddr, status: u16, message: &str) {
        let _ = (peer, status, message);
    }
}

/// The shutdown flag of one [`serve`] call: cloned into whatever requests it (a signal
/// watcher) and into handlers that want to cut long work short. It also carries the drain's
/// holds ([`Shutdown::hold`]).
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    /// A process-wide flag also watched (set by a signal handler).
    global: Option<&'static AtomicBool>,
    /// Live [`DrainHold`]s: while any is held the drain has no deadline.
    holds: Arc<AtomicUsize>,
}

/// Keeps [`serve`]'s drain waiting for running connections ([`Shutdown::hold`]); released
/// when dropped (also by a panic).
#[derive(Debug)]
pub struct DrainHold(Arc<AtomicUsize>);

impl Drop for DrainHold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shutdown {
    /// A flag not yet raised.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// A handle on an existing shared flag.
    pub fn with_flag(flag: Arc<AtomicBool>) -> Shutdown {
        Shutdown {
            flag,
            ..Shutdown::default()
        }
    }

    /// A handle that also counts as requested once `global` is true: a `static` a signal
    /// handler sets (storing into an `AtomicBool` is async-signal-safe).
    pub fn with_static(global: &'static AtomicBool) -> Shutdown {
        Shutdown {
            global: Some(global),
            ..Shutdown::default()
        }
    }

    /// Makes the drain after a shutdown request wait, however long, for running connections
    /// while the returned hold lives; [`Limits::drain_timeout`] then counts from its release.
    /// For an application whose own work has a bound of its own (the scheduler of `k3 serve`
    /// finishing or cancelling requests): the transport then waits exactly that long plus
    /// the time to write the last replies, instead of a second, unrelated limit that could end
    /// the process before a reply finished inside the application's bound was written.
    pub fn hold(&self) -> DrainHold {
        self.holds.fetch_add(1, Ordering::SeqCst);
        DrainHold(Arc::clone(&self.holds))
    }

    fn held(&self) -> bool {
        self.holds.load(Ordering::SeqCst) > 0
    }

    /// Asks [`serve`] to stop accepting, let running requests finish and return.
    pub fn request(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown has been requested.
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::SeqCst) || self.global.is_some_and(|g| g.load(Ordering::SeqCst))
    }
}

/// Serves `listener` until `shutdown` is requested, then stops accepting (the listener is
/// closed), waits for the running connections to end — while a [`DrainHold`] is held, then up
/// to [`Limits::drain_timeout`] more — and returns (connection threads still running then are
/// left to finish on their own).
/// Errors: the listener cannot be made non-blocking or fails for good (EBADF, EINVAL,
/// ENOTSOCK); transient accept errors (EMFILE, aborted connections) are retried.
pub fn serve(
    listener: TcpListener,
    limits: Limits,
    handler: Arc<dyn Handler>,
    shutdown: Shutdown,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let active = Arc::new(AtomicUsize::new(0));
    let limits = Arc::new(limits);
    let mut lingering: Vec<(TcpStream, Instant)> = Vec::new();
    while !shutdown.requested() {
        match listener.accept() {
            Ok((stream, peer)) => {
                if active.load(Ordering::SeqCst) >= limits.max_connections {
                    refuse_busy(stream, peer, &*handler, &mut lingering);
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let guard = Active(Arc::clone(&active));
                let (limits, handler2, shutdown) =
                    (Arc::clone(&limits), Arc::clone(&handler), shutdown.clone());
                let spawned = std::thread::Builder::new().name("k3-http".into()).spawn({
                    let stream = stream.try_clone();
                    move || {
                        let _guard = guard;
                        if let Ok(stream) = stream {
                            connection(stream, peer, &limits, &*handler2, &shutdown);
                        }
                    }
                });
                if spawned.is_err() {
                    refuse_busy(stream, peer, &*handler, &mut lingering);
                }
            }
            Err(e) if fatal(&e) => return Err(e),
            Err(e) => {
                if e.kind() == io::ErrorKind::WouldBlock {
                    linger_tick(&mut lingering);
                }
                std::thread::sleep(POLL);
            }
        }
    }
    drop(listener);
    let mut until = Instant::now() + limits.drain_timeout;
    while active.load(Ordering::SeqCst) > 0 {
        if shutdown.held() {
            until = Instant::now() + limits.drain_timeout;
        } else if Instant::now() >= until {
            break;
        }
        linger_tick(&mut lingering);
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// Counts a connection thread; dropped (also by a panic) when it ends.
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An accept error that will not go away.
fn fatal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP)
    )
}

/// 503 from the accept loop: written without blocking (a fresh socket's buffer holds it), the
/// write side closed, the socket kept for `LINGER` so the client reads it before the close.
fn refuse_busy(
    mut stream: TcpStream,
    peer: SocketAddr,
    handler: &dyn Handler,
    lingering: &mut Vec<(TcpStream, Instant)>,
) {
    let message = "the server is at its connection limit; retry";
    handler.refused(peer, 503, message);
    let resp = HttpError::new(503, message)
        .to_response()
        .header("Retry-After", "1");
    let bytes = encode(resp);
    if stream.set_nonblocking(true).is_err() || stream.write_all(&bytes).is_err() {
        return;
    }
    let _ = stream.shutdown(Both::Write);
    if lingering.len() < MAX_LINGERING {
        lingering.push((stream, Instant::now() + LINGER));
    }
}

/// A whole response as bytes, `Connection: close` (for the accept loop, which has no request).
fn encode(resp: Response) -> Vec<u8> {
    let mut out = Vec::new();
    let req = Request {
        method: String::new(),
        target: String::new(),
        version: super::Version::Http11,
        headers: Vec::new(),
        body: Vec::new(),
        peer: SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let _ = Responder::new(&mut out, &req, false, None).send(resp);
    out
}

/// Reads and drops what lingering refused connections sent; closes those at EOF or past time.
fn linger_tick(lingering: &mut Vec<(TcpStream, Instant)>) {
    let now = Instant::now();
    let mut scratch = [0u8; 16384];
    lingering.retain_mut(|(s, until)| {
        if now >= *until {
            return false;
        }
        loop {
            match s.read(&mut scratch) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    });
}

/// One connection: requests until the client closes, keep-alive ends, a request is refused,
/// or shutdown is requested.
fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    limits: &Limits,
    handler: &dyn Handler,
    shutdown: &Shutdown,
) {
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_write_timeout(Some(limits.write_timeout))
            .is_err()
    {
        return;
    }
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut scratch = vec![0u8; READ_CHUNK];
    let mut parser = RequestParser::new(limits, peer);
    loop {
        if buf.capacity() > KEEP_BUFFER && buf.len() <= KEEP_BUFFER {
            // A large body's buffer is not kept for the rest of a kept-alive connection.
            buf.shrink_to(KEEP_BUFFER);
        }
        let mut conn = Reading {
            stream: &mut stream,
            buf: &mut buf,
            scratch: &mut scratch,
        };
        let req = match read_request(&mut conn, &mut parser, limits, shutdown) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(Refusal::Http(e)) => {
                handler.refused(peer, e.status, &e.message);
                let _ = stream.write_all(&encode(e.to_response()));
                linger_close(&mut stream);
                return;
            }
            Err(Refusal::Io) => return,
        };
        let mut out = Responder::new(&mut stream, &req, req.keep_alive(), Some(shutdown));
        let panicked = catch_unwind(AssertUnwindSafe(|| handler.handle(&req, &mut out))).is_err();
        if !out.sent() {
            let why = if panicked {
                "the handler failed"
            } else {
                "the handler sent no response"
            };
            let resp = Response::new(
                500,
                "application/json",
                super::error_json(why, "server_error").into_bytes(),
            );
            let _ = out.send(resp.header("Connection", "close"));
        }
        if panicked || !out.reusable() {
            linger_close(&mut stream);
            return;
        }
    }
}

/// Bytes read per `read` call.
const READ_CHUNK: usize = 65536;
/// Buffer capacity a connection keeps between requests.
const KEEP_BUFFER: usize = 1 << 20;

/// A connection's socket and its read buffers.
struct Reading<'a> {
    stream: &'a mut TcpStream,
    /// Bytes received and not yet consumed by a request.
    buf: &'a mut Vec<u8>,
    scratch: &'a mut [u8],
}

/// Why a request was not read.
enum Refusal {
    /// Answer this and close.
    Http(HttpError),
    /// The connection failed: close without an answer.
    Io,
}

impl From<HttpError> for Refusal {
    fn from(e: HttpError) -> Refusal {
        Refusal::Http(e)
    }
}

/// Reads until `parser` has a whole request; `None` when the connection ends (or idles out,
/// or shutdown is requested) before a request began. Sends `100 Continue` when asked.
fn read_request(
    conn: &mut Reading<'_>,
    parser: &mut RequestParser,
    limits: &Limits,
    shutdown: &Shutdown,
) -> Result<Option<Request>, Refusal> {
    let idle_since = Instant::now();
    let mut began: Option<Instant> = None;
    let mut last_byte = idle_since;
    let mut continued = false;
    let Reading {
        stream,
        buf,
        scratch,
    } = conn;
    loop {
        if let Step::Done { request, consumed } = parser.advance(buf)? {
            buf.drain(..consumed);
            return Ok(Some(request));
        }
        if parser.expects_continue() && !continued {
            continued = true;
            stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(|_| Refusal::Io)?;
        }
        if let Some(n) = parser.wanted() {
            // The body's length is known: one allocation of the right size, not doublings.
            buf.reserve_exact(n.saturating_sub(buf.len()));
        }
        let now = Instant::now();
        if began.is_none() && parser.started(buf) {
            began = Some(now);
        }
        let wait = match began {
            None => {
                let left = limits.idle_timeout.saturating_sub(now - idle_since);
                if left.is_zero() || shutdown.requested() {
                    return Ok(None);
                }
                left.min(IDLE_SLICE)
            }
            Some(t0) => {
                let deadline = limits.request_deadline.saturating_sub(now - t0);
                let gap = limits.read_timeout.saturating_sub(now - last_byte);
                if deadline.is_zero() {
                    let s = limits.request_deadline.as_secs_f64();
                    return Err(HttpError::new(
                        408,
                        format!("the request was not complete within {s} s"),
                    )
                    .into());
                }
                if gap.is_zero() {
                    let s = limits.read_timeout.as_secs_f64();
                    return Err(
                        HttpError::new(408, format!("no bytes of the request for {s} s")).into(),
                    );
                }
                deadline.min(gap)
            }
        };
        stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .map_err(|_| Refusal::Io)?;
        match stream.read(scratch) {
            // The client closed its side inside a request (a body shorter than its
            // Content-Length): it may still read, so tell it why instead of going silent.
            Ok(0) if began.is_some() => {
                return Err(HttpError::new(
                    400,
                    format!(
                        "the request ended after {} bytes, before it was complete (a body \
                         shorter than its Content-Length?)",
                        buf.len()
                    ),
                )
                .into())
            }
            Ok(0) => return Err(Refusal::Io),
            Ok(n) => {
                buf.extend_from_slice(&scratch[..n]);
                last_byte = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return Err(Refusal::Io),
        }
    }
}

/// Half-closes, then reads and drops the client's remaining input for up to `LINGER`.
fn linger_close(stream: &mut TcpStream) {
    let _ = stream.flush();
    let _ = stream.shutdown(Both::Write);
    let until = Instant::now() + LINGER;
    let mut scratch = [0u8; 16384];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
