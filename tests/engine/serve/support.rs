//! A `k3 serve` child on `127.0.0.1:0` over `tests/fixtures/tiny-k3-text`, and raw HTTP/1.1
//! over `TcpStream` (no client library: the tests see the bytes). Every wait is bounded; a
//! server is killed when its handle drops.

use crate::support::{fixture, k3};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

/// Longest wait for a server to listen and load, and for one response.
pub const WAIT: Duration = Duration::from_secs(120);

/// The model id of the fixture (its directory name).
pub const MODEL: &str = "tiny-k3-text";

/// A running server.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Standard-error lines after the listening line.
    pub log: std::sync::Mutex<Receiver<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `k3 serve tests/fixtures/tiny-k3-text --port 0 --ctx 256 ARGS` with `env`, and
/// waits until it listens and `/health` says 200.
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
    start_dir(&fixture(MODEL), args, env)
}

/// A reply with reasoning "Let me check.", content "Checking." and one tool call
/// (`get_weather`, city Paris), then `[EOS]`: the ids of `k3 tokenize --special` over its
/// markup (TOKENIZER.md §13), for [`start_forced`].
pub const TOOL_REPLY: &str = "9413,1019,2598,13,163588,39964,163589,163587,12092,163589,67772,13,\
163588,12092,163589,163587,25385,163589,163587,10257,4453,878,618,21055,2800,1,4002,878,16,1,\
163589,163587,47185,2355,878,37666,1,1798,878,2033,1,163589,113476,163588,47185,163589,163588,\
10257,163589,163588,25385,163589,163588,2778,163589,163585";

/// [`start`] with every request's reply forced to begin with `ids` (comma-separated; the
/// `K3_TEST_FORCE_IDS` hook, DEVELOPERS.md "Test hooks"), e.g. [`TOOL_REPLY`].
pub fn start_forced(args: &[&str], ids: &str) -> Server {
    start(args, &[("K3_TEST_FORCE_IDS", ids)])
}

/// [`start`] on the model directory `dir` (served as `tiny-k3-text` whatever its name).
pub fn start_dir(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let s = spawn(dir, args, env);
    wait_healthy(&s);
    s
}

/// Runs `k3 serve tests/fixtures/tiny-k3-text --port 0 --ctx 64 ARGS` with `env` (and
/// `K3_API_KEY` removed unless `env` sets it), expecting a refusal: its exit code and standard
/// error. A server that starts anyway is killed and the test fails (bounded by [`WAIT`]).
pub fn refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = serve_command(&fixture(MODEL), &["--ctx", "64"], args, env)
        .spawn()
        .expect("start k3 serve");
    let until = std::time::Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("k3 serve {args:?} started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("k3 serve's output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `k3 serve DIR --port 0 --threads 1 <base> <args>` with standard error piped, no
/// `K3_API_KEY` from the environment of the tests, and `env` set.
fn serve_command(
    dir: &std::path::Path,
    base: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Command {
    let mut cmd = k3();
    cmd.arg("serve")
        .arg(dir)
        .args(["--port", "0", "--threads", "1"])
        .args(base)
        .args(args)
        .env_remove("K3_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Waits (bounded) until `/health` says 200.
pub fn wait_healthy(s: &Server) {
    for _ in 0..1200 {
        if get(s, "/health").status == 200 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("k3 serve never became healthy");
}

/// Starts `k3 serve DIR` as [`start_dir`] does, returning once it listens (the model may
/// still be loading).
pub fn spawn(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let base = ["--model-id", MODEL, "--ctx", "256"];
    let mut child = serve_command(dir, &base, args, env)
        .spawn()
        .expect("start k3 serve");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let addr = loop {
        let line = rx
            .recv_timeout(WAIT)
            .expect("k3 serve did not print its listening line");
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let a = rest.split_whitespace().next().unwrap_or_default();
            break a.parse::<SocketAddr>().expect("listening address");
        }
    };
    Server {
        child,
        addr,
        log: std::sync::Mutex::new(rx),
    }
}

impl Server {
    /// The log lines printed since the last call (without waiting).
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().try_iter().collect()
    }

    /// Waits (bounded by [`WAIT`]) for a log line that `pred` accepts; returns it, and every
    /// line read on the way is appended to `seen`.
    pub fn wait_log(&self, seen: &mut Vec<String>, pred: impl Fn(&str) -> bool) -> String {
        let rx = self.log.lock().unwrap();
        let until = std::time::Instant::now() + WAIT;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no such log line; saw {seen:?}"));
            seen.push(line.clone());
            if pred(&line) {
                return line;
            }
        }
    }

    /// Waits (bounded) for the process to exit; its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        for _ in 0..1200 {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("k3 serve did not exit");
    }

    /// Sends `signal` (`-INT`, `-TERM`) to the server.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let k = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(k.success());
    }
}

/// The value of the metric line `name` (with its labels) in `/metrics`, if there is one.
pub fn metric(s: &Server, name: &str) -> Option<f64> {
    let t = get(s, "/metrics").text();
    t.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Sends a request of `body` to `path` on a fresh connection without reading the reply.
pub fn send_only(s: &Server, path: &str, body: &Value) -> TcpStream {
    let b = body.to_string();
    let host = s.addr;
    let mut c = connect(s);
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{b}",
        b.len()
    );
    c.write_all(req.as_bytes()).unwrap();
    c
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The SSE `data:` payloads, `[DONE]` included.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
}

pub fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(s.addr).expect("connect");
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.set_write_timeout(Some(WAIT)).unwrap();
    c
}

/// Starts a streamed chat request of `body` and returns its connection once the response has
/// begun (status 200 read): the request holds a slot until the connection drops.
pub fn open_stream(s: &Server, body: &Value) -> TcpStream {
    let mut body = body.clone();
    body["stream"] = serde_json::json!(true);
    let b = body.to_string();
    let host = s.addr;
    let mut c = connect(s);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    );
    c.write_all(req.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    c
}

/// Sends raw bytes on a fresh connection and reads the whole response (`Connection: close`).
pub fn raw(s: &Server, bytes: &[u8]) -> Reply {
    let mut c = connect(s);
    // the server may answer and close before it read everything (413, 431)
    let _ = c.write_all(bytes);
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    parse(&buf)
}

/// Parses a response: status line, headers, a Content-Length or chunked body.
pub fn parse(buf: &[u8]) -> Reply {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(p) = rest.windows(2).position(|w| w == b"\r\n") {
            let n = usize::from_str_radix(String::from_utf8_lossy(&rest[..p]).trim(), 16)
                .expect("chunk size");
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[p + 2..p + 2 + n]);
            rest = &rest[p + 2 + n + 2..];
        }
        body = out;
    }
    Reply {
        status,
        headers,
        body,
    }
}

/// A request with `Connection: close`.
pub fn request(s: &Server, method: &str, path: &str, extra: &[&str], body: &[u8]) -> Reply {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        s.addr,
        body.len()
    );
    for h in extra {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    raw(s, &bytes)
}

pub fn get(s: &Server, path: &str) -> Reply {
    request(s, "GET", path, &[], b"")
}

pub fn post(s: &Server, path: &str, body: &Value) -> Reply {
    post_with(s, path, &[], body)
}

pub fn post_with(s: &Server, path: &str, extra: &[&str], body: &Value) -> Reply {
    let mut h = vec!["Content-Type: application/json"];
    h.extend_from_slice(extra);
    request(s, "POST", path, &h, body.to_string().as_bytes())
}

/// A chat request body of one user message.
pub fn chat_body(text: &str, max_tokens: u64, seed: u64) -> Value {
    serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "seed": seed,
    })
}

/// A response with what may differ between identical requests removed: `id`, `created`,
/// `usage.prompt_tokens_details.cached_tokens` (ENGINE.md §11).
pub fn comparable(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
        o.remove("created");
        if let Some(d) = o
            .get_mut("usage")
            .and_then(|u| u.get_mut("prompt_tokens_details"))
            .and_then(|d| d.as_object_mut())
        {
            d.remove("cached_tokens");
        }
    }
    v
}

/// The message a stream's deltas add up to: `(reasoning, content, tool_calls, finish_reason)`.
pub fn concat_stream(r: &Reply) -> (String, String, Vec<Value>, String, Option<Value>) {
    let (mut reasoning, mut content, mut calls, mut finish, mut usage) = (
        String::new(),
        String::new(),
        Vec::new(),
        String::new(),
        None,
    );
    let events = r.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text()
    );
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).expect("chunk JSON");
        if let Some(u) = v.get("usage") {
            usage = Some(u.clone());
        }
        let Some(c) = v["choices"].get(0) else {
            continue;
        };
        let d = &c["delta"];
        reasoning += d["reasoning_content"].as_str().unwrap_or("");
        content += d["content"].as_str().unwrap_or("");
        if let Some(t) = d["tool_calls"].as_array() {
            calls.extend(t.iter().cloned());
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (reasoning, content, calls, finish, usage)
}
