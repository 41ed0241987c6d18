//! `k3 serve <model_dir> [options]`: the OpenAI-compatible server (ENGINE.md §11). Flags, the
//! security rule (a non-loopback `--host` needs an API key), the listener (`--port 0` prints
//! the port; a port in use is exit 2), the plan (exit 3 naming the largest `--parallel` that
//! fits), loading while `/health` says 503, the startup line, and the SIGINT/SIGTERM drain.

use super::args::{Args, Spec};
use crate::cli::run::MAX_SEQUENCES;
use crate::error::{Error, Result};
use crate::generate::defaults::chat_defaults;
use crate::generate::prefix_cache::PrefixCache;
use crate::http::{self, Shutdown};
use crate::serve::api;
use crate::serve::metrics::Metrics;
use crate::serve::pool::SnapshotPool;
use crate::serve::sched::{Queue, Scheduler};
use crate::serve::server::{unix_now, Server};
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long running requests may go on after SIGINT/SIGTERM: the scheduler then cancels them
/// at the end of the step that is running (ENGINE.md §11). `K3_TEST_DRAIN_MS` (tests only)
/// shortens it.
const DRAIN: Duration = Duration::from_secs(30);
/// Once the scheduler has ended every request, how long the connection threads get to write
/// the last replies before the process exits (the HTTP drain is held until then: one bound).
const REPLY_MARGIN: Duration = Duration::from_secs(5);
/// Longest wait of the `K3_TEST_LOAD_GATE` hook (tests only).
const LOAD_GATE_MAX: Duration = Duration::from_secs(120);

/// `serve`'s own flags.
const SERVE_SPECS: &[Spec] = &[
    Spec::Value("port"),
    Spec::Value("host"),
    Spec::Value("api-key"),
    Spec::Value("queue"),
    Spec::Value("snapshots"),
    Spec::Value("max-body-mb"),
    Spec::Value("cors"),
    Spec::Switch("log-prompts"),
    Spec::Switch("no-ui"),
    Spec::Value("model-id"),
    Spec::Value("prefix-cache"),
    Spec::Value("prefix-cache-gb"),
];

/// The run flags `serve` takes (memory, compute, tokenizer, context, slots).
const RUN_FLAGS: &[&str] = &[
    "tok",
    "config",
    "ctx",
    "parallel",
    "preset",
    "mem-gb",
    "trunk",
    "trunk-gb",
    "trunk-ring",
    "trunk-pieces",
    "trunk-codec",
    "io-depth",
    "cache-gb",
    "cache-policy",
    "prefill-chunk",
    "stop-id",
    "spec",
    "threads",
    "isa",
    "layers",
    "quiet",
    "help",
];

/// Every flag of `k3 serve`: its own and the run's of [`RUN_FLAGS`] (one table for both).
pub(crate) fn specs() -> Vec<Spec> {
    let run = super::run::SPECS
        .iter()
        .filter(|s| RUN_FLAGS.contains(&s.name()));
    SERVE_SPECS.iter().chain(run).copied().collect()
}

const USAGE: &str = "\
usage: k3 serve <model_dir> [options]
  An HTTP/1.1 server with the OpenAI and Anthropic APIs: POST /v1/chat/completions,
  POST /v1/completions, POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models,
  GET /health (503 until loaded), GET /metrics, and a chat page at http://ADDR:PORT/
  (docs/cli.md, README).
  --port N             port (default 8000; 0 picks a free one, printed)
  --host ADDR          address to bind (default 127.0.0.1; any other needs an API key)
  --api-key KEY        require `Authorization: Bearer KEY` or `x-api-key: KEY` (also
                       K3_API_KEY); without a key, requests for another Host or from
                       another site's page get 403
  --parallel N         sequences decoding together, planned up front (default 4)
  --queue N            requests waiting for a slot at most; more get 503 (default 64)
  --snapshots N        prompt snapshots kept for prefix reuse, planned (default: --parallel)
  --ctx N              positions per sequence (default: the largest that fits, printed)
  --max-body-mb X      request body limit in decimal MB (default 8)
  --cors ORIGIN        send Access-Control-Allow-Origin: ORIGIN (no CORS headers without it)
  --log-prompts        put request bodies in the log (never by default)
  --no-ui              no chat page at / (404, as any unknown route)
  --model-id ID        the model name clients use (default: the directory name)
  --prefix-cache DIR   also keep prompt snapshots as state files in DIR, so a held prefix
                       (an agent's system prompt and tools) survives a restart (docs/cli.md)
  --prefix-cache-gb X  the files' total size at most, decimal GB; least recently used
                       evicted (default 20)
  --stop-id ID         extra end id (repeatable)
  --spec K             speculative decoding in every slot: up to K drafted ids per sweep (0 to
                       64; default 0 = off); the same replies as without it (README)
  Memory and compute as for run: --preset, --mem-gb, --trunk, --trunk-gb, --trunk-ring,
  --trunk-pieces, --trunk-codec, --io-depth, --cache-gb, --cache-policy, --prefill-chunk,
  --threads, --isa, --tok, --config, --layers
  --quiet              no plan lines (the startup and request lines stay)
";

/// Settings of the server itself (not of the model).
struct ServeFlags {
    ip: IpAddr,
    port: u16,
    api_key: Option<String>,
    parallel: usize,
    queue: usize,
    /// `--snapshots`, else as many as `--parallel`.
    snapshots: Option<usize>,
    max_body: usize,
    cors: Option<String>,
    log_prompts: bool,
    model_id: Option<String>,
    /// The chat page at `/` (`--no-ui` turns it off).
    ui: bool,
    /// `--prefix-cache DIR` and `--prefix-cache-gb` in bytes.
    prefix_cache: Option<(std::path::PathBuf, u64)>,
}

fn count(a: &Args, name: &str, default: usize, min: usize, max: usize) -> Result<usize> {
    let v = a
        .parsed::<usize>(name, "a non-negative integer")?
        .unwrap_or(default);
    if v < min {
        return Err(Error::invalid(format!(
            "flag `--{name} {v}`: must be at least {min}"
        )));
    }
    if v > max {
        return Err(Error::invalid(format!(
            "flag `--{name} {v}`: expected {min} to {max}"
        )));
    }
    Ok(v)
}

fn serve_flags(a: &Args) -> Result<ServeFlags> {
    let host = a.value("host")?.unwrap_or_else(|| "127.0.0.1".to_string());
    let ip: IpAddr = match host.as_str() {
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .map_err(|_| {
                Error::invalid(format!(
                    "flag `--host {host}`: not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)"
                ))
            })?,
    };
    let port = a.parsed::<u16>("port", "a port number")?.unwrap_or(8000);
    // an empty key would start the server without authentication: refused, naming its source
    let api_key = match a.value("api-key")? {
        Some(k) => Some(("flag `--api-key`", "leave the flag out", k)),
        None => std::env::var("K3_API_KEY")
            .ok()
            .map(|k| ("K3_API_KEY", "unset it", k)),
    };
    if let Some((source, instead, "")) = api_key.as_ref().map(|(s, i, k)| (*s, *i, k.as_str())) {
        return Err(Error::invalid(format!(
            "{source}: empty; give a non-empty key (or {instead} to serve 127.0.0.1 without one)"
        )));
    }
    // HTTP trims a header value's surrounding whitespace (and the key check trims it too), so
    // a key with any could never be sent: every request would be 401
    if let Some((source, _, _)) = api_key.as_ref().filter(|(_, _, k)| k.trim() != k.as_str()) {
        return Err(Error::invalid(format!(
            "{source}: the key starts or ends with whitespace, which an HTTP header cannot carry \
             (every request would be refused); give the key without it"
        )));
    }
    let api_key = api_key.map(|(_, _, k)| k);
    if !ip.is_loopback() && api_key.is_none() {
        return Err(Error::invalid(format!(
            "flag `--host {host}`: a non-loopback address serves other machines; give an API key \
             with --api-key KEY or K3_API_KEY (or bind 127.0.0.1)"
        )));
    }
    let max_body = match a.value("max-body-mb")? {
        None => 8_000_000,
        Some(v) => {
            let x: f64 = v.trim().parse().map_err(|_| {
                Error::invalid(format!(
                    "flag `--max-body-mb {v}`: expected decimal megabytes"
                ))
            })?;
            if !(x.is_finite() && x > 0.0 && x * 1e6 < usize::MAX as f64) {
                return Err(Error::invalid(format!(
                    "flag `--max-body-mb {v}`: expected a positive number of decimal megabytes"
                )));
            }
            (x * 1e6) as usize
        }
    };
    let parallel = count(a, "parallel", 4, 1, MAX_SEQUENCES)?;
    // an empty id could never be named by a request (`model` is required): refused like an
    // empty key
    let model_id = a.value("model-id")?;
    if model_id.as_deref() == Some("") {
        return Err(Error::invalid(
            "flag `--model-id`: empty; give the name clients send as `model` (or leave the \
             flag out: the model directory's name)",
        ));
    }
    Ok(ServeFlags {
        ip,
        port,
        api_key,
        parallel,
        queue: count(a, "queue", 64, 0, usize::MAX)?,
        snapshots: match a.value("snapshots")? {
            None => None,
            Some(_) => Some(count(a, "snapshots", 0, 0, MAX_SEQUENCES)?),
        },
        max_body,
        cors: a.value("cors")?.filter(|c| !c.is_empty()),
        log_prompts: a.switch("log-prompts"),
        ui: !a.switch("no-ui"),
        model_id,
        prefix_cache: prefix_cache_flags(a)?,
    })
}

/// `--prefix-cache DIR` and `--prefix-cache-gb X` (serve and chat): the directory and the
/// bound in bytes, `None` without the cache.
///
/// Errors (exit 2, naming the flag): an empty directory name; a size that is not a positive
/// number of decimal GB; `--prefix-cache-gb` without `--prefix-cache`.
pub(crate) fn prefix_cache_flags(a: &Args) -> Result<Option<(std::path::PathBuf, u64)>> {
    let gb = match a.value("prefix-cache-gb")? {
        None => None,
        Some(v) => {
            let x: f64 = v.trim().parse().unwrap_or(f64::NAN);
            if !(x.is_finite() && x > 0.0 && x * 1e9 < u64::MAX as f64) {
                return Err(Error::invalid(format!(
                    "flag `--prefix-cache-gb {v}`: expected a positive number of decimal GB"
                )));
            }
            Some((x * 1e9) as u64)
        }
    };
    match a.value_os("prefix-cache") {
        Some(d) if d.is_empty() => Err(Error::invalid(
            "flag `--prefix-cache`: empty; give a directory for the cache's state files",
        )),
        Some(d) => Ok(Some((
            d.into(),
            gb.unwrap_or((crate::generate::prefix_cache::DEFAULT_GB * 1e9) as u64),
        ))),
        None if gb.is_some() => Err(Error::invalid(
            "flag `--prefix-cache-gb`: needs --prefix-cache DIR (the directory it bounds)",
        )),
        None => Ok(None),
    }
}

/// A duration in milliseconds from the test hook `var`, if set (tests only; DEVELOPERS.md).
///
/// Errors: a value that is not a whole number of milliseconds (exit 2 naming the variable).
fn test_ms(var: &str) -> Result<Option<Duration>> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|_| Error::invalid(format!("{var}={v}: expected milliseconds"))),
    }
}

/// The `K3_TEST_LOAD_GATE=PATH` hook (tests only): the model is loaded once PATH exists (at
/// most [`LOAD_GATE_MAX`] later), so a test sees `/health` answer 503 for as long as it needs.
fn wait_for_load_gate() {
    let Some(path) = std::env::var_os("K3_TEST_LOAD_GATE") else {
        return;
    };
    let until = std::time::Instant::now() + LOAD_GATE_MAX;
    while !std::path::Path::new(&path).exists() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Binds the listener: a port in use (or an address not of this machine) is exit 2 naming
/// the address.
fn bind(ip: IpAddr, port: u16) -> Result<TcpListener> {
    TcpListener::bind((ip, port)).map_err(|e| {
        let addr = std::net::SocketAddr::new(ip, port);
        match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::invalid(format!(
                "flag `--port {port}`: address {addr} is already in use; give another --port (0 picks a free one)"
            )),
            _ => Error::invalid(format!("flags `--host`/`--port`: cannot listen on {addr}: {e}")),
        }
    })
}

/// Runs `k3 serve`; returns after a SIGINT/SIGTERM drain (exit 0).
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(a) = Args::parse_or_help(argv, &specs(), USAGE)? else {
        return Ok(());
    };
    let f = serve_flags(&a)?;
    let listener = bind(f.ip, f.port)?;
    // the prefix cache's one state waiting for the writer and one being read are planned
    // like two more snapshots
    let planned = match &f.prefix_cache {
        Some(_) => Some(f.snapshots.unwrap_or(f.parallel).saturating_add(2)),
        None => f.snapshots,
    };
    let mut prep = crate::cli::run::prepare_serve(a, f.parallel, planned)?;
    let identity = match &f.prefix_cache {
        Some(_) => Some(prep.state_identity()?),
        None => None,
    };
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io(format!("the listening socket: {e}")))?;
    let model_dir = prep.model_dir().to_path_buf();
    let model_id = f.model_id.clone().unwrap_or_else(|| {
        model_dir
            .canonicalize()
            .unwrap_or_else(|_| model_dir.clone())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "k3".to_string())
    });
    let defaults = chat_defaults(&model_dir)?;
    let tok = prep
        .take_tokenizer()
        .ok_or_else(|| Error::internal("serve: no tokenizer after the checks"))?;
    crate::io::signal::install_terminate_handler()
        .map_err(|e| Error::internal(format!("serve: {e}")))?;
    let (ctx, parallel) = (prep.ctx(), prep.parallel());
    let snapshots = f.snapshots.unwrap_or(parallel);
    let queue = Arc::new(Queue::new(f.queue, parallel));
    let metrics = Arc::new(Metrics::default());
    let end_ids = prep.end_ids();
    let server = Arc::new(Server {
        tok: Arc::new(tok),
        limits: api::Limits {
            model_id: model_id.clone(),
            ctx,
            vocab: prep.vocab(),
            defaults,
            sign_key: prep.signing_key()?,
            vocabulary: Default::default(),
        },
        end_ids: end_ids.clone(),
        queue: Arc::clone(&queue),
        metrics: Arc::clone(&metrics),
        loaded: AtomicBool::new(false),
        api_key: f.api_key.clone(),
        cors: f.cors.clone(),
        bound: addr,
        ui: f.ui,
        log_prompts: f.log_prompts,
        started: unix_now(),
        counter: AtomicU64::new(0),
        stored: Default::default(),
    });
    crate::sayln!(
        "k3 serve: listening on http://{addr} (loading the model; /health is 503 until ready)"
    );
    // after the listening line: what the index skips and removes is logged where a
    // reader of the log looks
    let disk = match (&f.prefix_cache, identity) {
        (Some((dir, bytes)), Some(id)) => Some(PrefixCache::open(dir, id, *bytes, "k3 serve")?),
        _ => None,
    };
    let defaults = http::Limits::default();
    let limits = http::Limits {
        max_body_bytes: f.max_body,
        request_deadline: test_ms("K3_TEST_REQUEST_DEADLINE_MS")?
            .unwrap_or(defaults.request_deadline),
        drain_timeout: REPLY_MARGIN,
        ..defaults
    };
    let drain = test_ms("K3_TEST_DRAIN_MS")?.unwrap_or(DRAIN);
    let shutdown = Shutdown::new();
    // the transport's drain lasts while the scheduler runs (its own bound: `drain` and the
    // step then running), then REPLY_MARGIN for the last replies
    let hold = shutdown.hold();
    let http_thread = {
        let (server, shutdown) = (Arc::clone(&server), shutdown.clone());
        std::thread::Builder::new()
            .name("k3-accept".into())
            .spawn(move || http::serve(listener, limits, server, shutdown))
            .map_err(|e| Error::resources(format!("serve: cannot start the accept thread: {e}")))?
    };
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, shutdown, queue) = (Arc::clone(&stop), shutdown.clone(), Arc::clone(&queue));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if crate::io::signal::terminate_requested() {
                    crate::sayln!(
                        "k3 serve: signal received; draining (running requests finish, or are \
                         cancelled after {:.0} s)",
                        drain.as_secs_f64()
                    );
                    queue.close();
                    stop.store(true, Ordering::SeqCst);
                    shutdown.request();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let plan = prep.plan_summary();
    wait_for_load_gate();
    let loaded = prep.load();
    let res = loaded.map(|mut model| {
        server.loaded.store(true, Ordering::SeqCst);
        crate::sayln!(
            "k3 serve: ready on http://{addr}: model {model_id}, ctx {ctx}, {} (--parallel), queue {}, {}, {plan}{}",
            crate::units::count(parallel as u64, "slot", "slots"),
            f.queue,
            crate::units::count(snapshots as u64, "snapshot", "snapshots"),
            if f.api_key.is_some() { ", API key required" } else { "" }
        );
        if f.ui {
            crate::sayln!("k3 serve: chat page: http://{addr}/ (open it in a browser; --no-ui turns it off)");
        }
        let mut sched = Scheduler {
            queue: &queue,
            pool: SnapshotPool::new(snapshots),
            disk,
            ctx,
            end_ids,
            vocab: server.limits.vocab,
            metrics: &metrics,
            stop: &stop,
            drain,
        };
        // joining prompts run beside the decoders, in slices that fill the planned rows
        let sess = &mut model.sess;
        sess.join_slice = crate::plan::join_slice(sess.chunk, parallel, sess.spec.max_draft);
        sched.run(sess);
    });
    stop.store(true, Ordering::SeqCst);
    shutdown.request();
    drop(hold);
    let _ = watcher.join();
    let served = http_thread
        .join()
        .map_err(|_| Error::internal("serve: the accept thread panicked"))?;
    res?;
    served.map_err(|e| Error::io(format!("serve: the listener on {addr} failed: {e}")))?;
    crate::sayln!("k3 serve: stopped");
    Ok(())
}
