//! The HTTP/1.1 transport of `k3 serve` (ENGINE.md §11) over real loopback sockets: `serve`
//! on 127.0.0.1:0 with a toy handler, raw `TcpStream` clients. Every socket has a 30 s read
//! timeout and every server is shut down when its test ends, so each test stops by itself.

use k3::http::{serve, Handler, Limits, Request, Responder, Response, Shutdown};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(30);

/// `/echo`: the method, target and body back; `/stream`: chunks until the client is gone
/// (`?n=3`: three, `?big`: 64 KiB ones as fast as they go), then the chunk error's kind on
/// `gone`; `/silent`: no response; `/gate`: 200 once the test opens `gate` (at most `BOUND`
/// later); anything else 404.
struct Toy {
    gone: Mutex<Option<mpsc::Sender<std::io::ErrorKind>>>,
    /// The statuses the transport refused requests with, told through `Handler::refused`.
    refused: Arc<Mutex<Vec<u16>>>,
    /// `/gate`: (opened by the test, requests inside the handler); notified on each change.
    gate: Arc<(Mutex<(bool, usize)>, Condvar)>,
}

impl Toy {
    fn stream(&self, req: &Request, out: &mut Responder<'_>) {
        let sse = vec![("Content-Type".to_string(), "text/event-stream".to_string())];
        let Ok(mut s) = out.stream(200, sse) else {
            return;
        };
        let big = req.query() == Some("big");
        for i in 0..100_000 {
            let event = match big {
                true => format!("data: {}\n\n", "x".repeat(65536)),
                false => format!("data: {i}\n\n"),
            };
            if let Err(e) = s.chunk(event.as_bytes()) {
                if let Some(tx) = self.gone.lock().unwrap().as_ref() {
                    let _ = tx.send(e.kind());
                }
                return;
            }
            if req.query() == Some("n=3") && i == 2 {
                let _ = s.finish();
                return;
            }
            if !big {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl Handler for Toy {
    fn handle(&self, req: &Request, out: &mut Responder<'_>) {
        match req.path() {
            "/echo" => {
                let mut body = format!("{} {}\n", req.method, req.target).into_bytes();
                body.extend_from_slice(&req.body);
                let _ = out.send(Response::new(200, "text/plain", body));
            }
            "/stream" => self.stream(req, out),
            "/silent" => {}
            "/gate" => {
                let (state, cv) = &*self.gate;
                let mut g = state.lock().unwrap();
                g.1 += 1;
                cv.notify_all();
                let _ = cv.wait_timeout_while(g, BOUND, |o| !o.0).unwrap();
                let _ = out.send(Response::new(200, "text/plain", b"opened".to_vec()));
            }
            _ => {
                let _ = out.send(Response::new(404, "text/plain", b"no".to_vec()));
            }
        }
    }

    fn refused(&self, _peer: SocketAddr, status: u16, _message: &str) {
        self.refused.lock().unwrap().push(status);
    }
}

struct Server {
    addr: SocketAddr,
    shutdown: Shutdown,
    join: Option<JoinHandle<std::io::Result<()>>>,
}

impl Server {
    fn start(limits: Limits, toy: Toy) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        let join = std::thread::spawn(move || serve(listener, limits, Arc::new(toy), s));
        Server {
            addr,
            shutdown,
            join: Some(join),
        }
    }

    fn connect(&self) -> TcpStream {
        let c = TcpStream::connect(self.addr).unwrap();
        c.set_read_timeout(Some(BOUND)).unwrap();
        c.set_write_timeout(Some(BOUND)).unwrap();
        c
    }

    /// Requests shutdown and waits for `serve` to return.
    fn stop(&mut self) -> std::io::Result<()> {
        self.shutdown.request();
        self.join.take().map_or(Ok(()), |j| j.join().unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn toy() -> Toy {
    Toy {
        gone: Mutex::new(None),
        refused: Arc::default(),
        gate: Arc::default(),
    }
}

fn limits() -> Limits {
    Limits {
        drain_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

/// One response: status, headers (names lower-cased), body (Content-Length, chunked, or to EOF).
fn read_response(r: &mut impl BufRead) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split(' ')
        .nth(1)
        .expect("a status line")
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if let Some(n) = get("content-length") {
        body.resize(n.parse().unwrap(), 0);
        r.read_exact(&mut body).unwrap();
    } else if get("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim_end(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    (status, headers, body)
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The status and body of the response on a connection the server closes after it.
fn refused(mut c: TcpStream) -> (u16, String) {
    let (status, headers, body) = read_response(&mut BufReader::new(&mut c));
    assert_eq!(header(&headers, "connection"), Some("close"));
    let body = String::from_utf8(body).unwrap();
    assert!(body.starts_with("{\"error\":{\"message\":\""), "{body}");
    assert!(
        body.ends_with("\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}"),
        "{body}"
    );
    let mut rest = Vec::new();
    assert_eq!(
        c.read_to_end(&mut rest).unwrap(),
        0,
        "the server closes after a refusal"
    );
    (status, body)
}

#[test]
fn keep_alive_two_requests_and_pipelining() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(b"GET /echo?a=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (status, headers, body) = read_response(&mut r);
    assert_eq!((status, body.as_slice()), (200, &b"GET /echo?a=1\n"[..]));
    assert_eq!(header(&headers, "connection"), None);
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        .unwrap();
    assert_eq!(read_response(&mut r).2, b"POST /echo\nabc");
    // Two at once, then a chunked body; the last asks to close.
    c.write_all(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut r).0, 404);
    let (status, headers, body) = read_response(&mut r);
    assert_eq!((status, body.as_slice()), (200, &b"POST /echo\nhi"[..]));
    assert_eq!(header(&headers, "connection"), Some("close"));
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn http10_closes_unless_keep_alive() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    c.write_all(b"GET /echo HTTP/1.0\r\n\r\n").unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    assert!(all.starts_with(b"HTTP/1.1 200 OK\r\n") && all.ends_with(b"GET /echo\n"));
    let mut c = server.connect();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    assert_eq!(
        header(&read_response(&mut r).1, "connection"),
        Some("keep-alive")
    );
    c.write_all(b"GET /echo HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut r).0, 200);
}

#[test]
fn header_of_100_kib_is_431() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    let head = format!(
        "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    // The server answers after 16 KiB and reads the rest away; a write error would be fine too.
    let _ = c.write_all(head.as_bytes());
    assert_eq!(refused(c).0, 431);
}

#[test]
fn header_line_without_colon_is_400() {
    let t = toy();
    let told = Arc::clone(&t.refused);
    let server = Server::start(limits(), t);
    let mut c = server.connect();
    c.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
        .unwrap();
    let (status, body) = refused(c);
    assert_eq!(status, 400);
    assert!(
        body.contains("header line 2 (\\\"No colon here\\\") has no colon"),
        "{body}"
    );
    assert_eq!(*told.lock().unwrap(), [400]);
}

#[test]
fn pause_inside_a_request_is_408() {
    let l = Limits {
        read_timeout: Duration::from_millis(300),
        ..limits()
    };
    let server = Server::start(l, toy());
    let mut c = server.connect();
    c.write_all(b"GET /echo HTTP/1.1\r\nHo").unwrap();
    let (status, body) = refused(c);
    assert_eq!(status, 408);
    assert!(body.contains("no bytes of the request for 0.3 s"), "{body}");
}

#[test]
fn client_that_stops_reading_fails_the_stream() {
    let (tx, rx) = mpsc::channel();
    let l = Limits {
        write_timeout: Duration::from_millis(300),
        ..limits()
    };
    let server = Server::start(
        l,
        Toy {
            gone: Mutex::new(Some(tx)),
            ..toy()
        },
    );
    let mut c = server.connect();
    c.write_all(b"GET /stream?big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Never read: the socket buffers fill and a write blocks past the write timeout.
    let kind = rx.recv_timeout(BOUND).expect("the handler's chunk fails");
    assert!(
        matches!(
            kind,
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{kind:?}"
    );
    drop(c);
}

#[test]
fn body_of_20_mib_is_413_before_it_is_sent() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    let n = 20 * 1024 * 1024;
    c.write_all(
        format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let _ = c.write_all(&vec![b'x'; 65536]);
    let (status, body) = refused(c);
    assert_eq!(status, 413);
    assert!(
        body.contains("20971520 bytes exceeds the limit of 8000000 bytes"),
        "{body}"
    );
}

#[test]
fn expect_100_continue() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
    )
    .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "\r\n");
    c.write_all(b"ok").unwrap();
    assert_eq!(read_response(&mut r).2, b"POST /echo\nok");
}

#[test]
fn slow_drip_is_408_at_the_deadline() {
    let l = Limits {
        request_deadline: Duration::from_millis(500),
        read_timeout: Duration::from_secs(20),
        ..limits()
    };
    let server = Server::start(l, toy());
    let c = server.connect();
    let mut w = c.try_clone().unwrap();
    // One byte every 20 ms, each well inside the read timeout; stops when the server closes.
    let dripper = std::thread::spawn(move || {
        for b in b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Pad: "
            .iter()
            .chain(std::iter::repeat(&b'a'))
            .take(1500)
        {
            if w.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let (status, body) = refused(c);
    assert_eq!(status, 408);
    assert!(body.contains("not complete within 0.5 s"), "{body}");
    dripper.join().unwrap();
}

#[test]
fn idle_connection_closes_silently() {
    let l = Limits {
        idle_timeout: Duration::from_millis(200),
        ..limits()
    };
    let server = Server::start(l, toy());
    let mut c = server.connect();
    let mut all = Vec::new();
    assert_eq!(c.read_to_end(&mut all).unwrap(), 0);
}

#[test]
fn stream_chunks_and_disconnect_mid_stream() {
    let (tx, rx) = mpsc::channel();
    let server = Server::start(
        limits(),
        Toy {
            gone: Mutex::new(Some(tx)),
            ..toy()
        },
    );
    let mut c = server.connect();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(b"GET /stream?n=3 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (status, headers, body) = read_response(&mut r);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    assert_eq!(body, b"data: 0\n\ndata: 1\n\ndata: 2\n\n");
    // Same connection, a stream the client leaves after its first chunk.
    c.write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut line = String::new();
    while line != "data: 0\n" {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0);
    }
    drop(r);
    drop(c);
    let kind = rx
        .recv_timeout(BOUND)
        .expect("the handler sees the disconnect");
    assert!(
        matches!(
            kind,
            std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionReset
        ),
        "{kind:?}"
    );
}

#[test]
fn no_response_is_500() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    c.write_all(b"GET /silent HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (status, _, body) = read_response(&mut BufReader::new(&mut c));
    assert_eq!(status, 500);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("the handler sent no response"));
}

#[test]
fn connections_beyond_the_limit_get_503() {
    let l = Limits {
        max_connections: 2,
        ..limits()
    };
    let server = Server::start(l, toy());
    // Two connections the server holds (accepted in order, so the third is the one refused).
    let mut held: Vec<TcpStream> = (0..2).map(|_| server.connect()).collect();
    let third = server.connect();
    let mut r = BufReader::new(third);
    let (status, headers, body) = read_response(&mut r);
    assert_eq!(status, 503);
    assert_eq!(header(&headers, "retry-after"), Some("1"));
    assert_eq!(header(&headers, "connection"), Some("close"));
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("connection limit"));
    // A client that sends its request before reading gets the 503 too (the refused socket
    // lingers, so the unread request does not turn the close into a reset).
    let mut fourth = server.connect();
    let _ = fourth.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(read_response(&mut BufReader::new(fourth)).0, 503);
    // The held ones still work.
    let mut r0 = BufReader::new(held[0].try_clone().unwrap());
    held[0]
        .write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut r0).0, 200);
    held.clear();
}

#[test]
fn shutdown_returns_and_stops_accepting() {
    let mut server = Server::start(limits(), toy());
    let mut idle = server.connect();
    let mut r = BufReader::new(idle.try_clone().unwrap());
    idle.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut r).0, 200);
    // A kept-alive idle connection does not hold the shutdown up.
    server.stop().unwrap();
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap(), 0);
    assert!(TcpStream::connect(server.addr).is_err());
}

/// A body shorter than its Content-Length, then the client's write side closed: the client
/// still reads a 400 saying so (it got no answer at all before).
#[test]
fn a_request_cut_short_is_answered_400() {
    let server = Server::start(limits(), toy());
    let mut c = server.connect();
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nhello!!")
        .unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let (status, body) = refused(c);
    assert_eq!(status, 400);
    assert!(body.contains("before it was complete"), "{body}");
}

type Gate = Arc<(Mutex<(bool, usize)>, Condvar)>;

/// Waits (bounded) until a `/gate` request is inside the handler.
fn gate_entered(gate: &Gate) {
    let (state, cv) = &**gate;
    let g = state.lock().unwrap();
    let (g, _) = cv.wait_timeout_while(g, BOUND, |o| o.1 == 0).unwrap();
    assert!(g.1 > 0, "the /gate request never reached the handler");
}

/// Lets every `/gate` request answer.
fn open_gate(gate: &Gate) {
    let (state, cv) = &**gate;
    state.lock().unwrap().0 = true;
    cv.notify_all();
}

/// The drain race of `k3 serve`: the transport's drain limit (10 s) was shorter than the
/// scheduler's (30 s), so `serve` returned (and the process exited) before a connection wrote
/// a reply finished in between. With the drain held (`Shutdown::hold`, as `k3 serve` holds
/// it while its scheduler runs) `serve` waits past `drain_timeout` for the running
/// connection, and returns once it has written its reply.
#[test]
fn a_held_drain_waits_for_a_running_connection_past_drain_timeout() {
    let l = Limits {
        drain_timeout: Duration::from_millis(100),
        ..limits()
    };
    let toy = toy();
    let gate = Arc::clone(&toy.gate);
    let mut server = Server::start(l, toy);
    let hold = server.shutdown.hold();
    let mut c = server.connect();
    c.write_all(b"GET /gate HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    gate_entered(&gate);
    server.shutdown.request();
    // ten times the drain timeout: without the hold, `serve` has returned by now
    std::thread::sleep(Duration::from_secs(1));
    let join = server.join.take().unwrap();
    assert!(
        !join.is_finished(),
        "serve returned while its drain was held and a connection was running"
    );
    open_gate(&gate);
    let (status, _, body) = read_response(&mut BufReader::new(&mut c));
    assert_eq!((status, body.as_slice()), (200, &b"opened"[..]));
    // the connection ended: `serve` returns although the hold is still held
    join.join().unwrap().unwrap();
    drop(hold);
}

/// Released, a hold leaves `drain_timeout` for the connections still running, then `serve`
/// returns without them.
#[test]
fn a_released_hold_leaves_drain_timeout() {
    let l = Limits {
        drain_timeout: Duration::from_millis(200),
        ..limits()
    };
    let toy = toy();
    let gate = Arc::clone(&toy.gate);
    let mut server = Server::start(l, toy);
    let hold = server.shutdown.hold();
    let mut c = server.connect();
    c.write_all(b"GET /gate HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    gate_entered(&gate);
    server.shutdown.request();
    drop(hold);
    // the gate stays shut: `serve` returns on its own after the drain timeout
    server.join.take().unwrap().join().unwrap().unwrap();
    open_gate(&gate);
    // the connection thread still answers (left to finish on its own)
    assert_eq!(read_response(&mut BufReader::new(&mut c)).0, 200);
}
