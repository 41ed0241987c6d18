//! `k3 serve` startup refusals and the drain (ENGINE.md §11): a non-loopback host without a
//! key, a port in use (exit 2 naming the address), `--parallel` beyond the plan (exit 3 naming
//! the largest that fits), SIGTERM (exit 0).

use super::support::*;
use crate::support::{fixture, run_k3};

fn serve(args: &[&str]) -> std::process::Output {
    let dir = fixture(MODEL);
    let mut a = vec!["serve", dir.to_str().unwrap(), "--ctx", "64"];
    a.extend_from_slice(args);
    run_k3(a)
}

#[test]
fn a_non_loopback_host_needs_an_api_key() {
    let o = serve(&["--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--host 0.0.0.0") && e.contains("--api-key"),
        "{e}"
    );
    let o = serve(&["--host", "nowhere", "--port", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_port_in_use_is_exit_2_naming_the_address() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let o = serve(&["--port", &port]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains(&format!("127.0.0.1:{port}")) && e.contains("in use"),
        "{e}"
    );
}

#[test]
fn parallel_beyond_the_plan_is_exit_3_naming_what_fits() {
    let o = serve(&[
        "--port",
        "0",
        "--mem-gb",
        "0.08",
        "--ctx",
        "4096",
        "--parallel",
        "100000",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--parallel 100000") && e.contains("the largest --parallel that fits is"),
        "{e}"
    );
}

#[test]
fn sigterm_drains_and_exits_0() {
    let mut s = start(&[], &[]);
    assert_eq!(
        post(&s, "/v1/chat/completions", &chat_body("hi", 2, 1)).status,
        200
    );
    let pid = s.child.id().to_string();
    let k = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(k.success());
    let mut status = None;
    for _ in 0..600 {
        if let Some(st) = s.child.try_wait().unwrap() {
            status = Some(st);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    let log: Vec<String> = s.log.lock().unwrap().try_iter().collect();
    assert!(
        log.iter().any(|l| l.contains("k3 serve: stopped")),
        "{log:?}"
    );
    // the request line carries no prompt text
    assert!(log
        .iter()
        .any(|l| l.contains("POST /v1/chat/completions 200")));
    assert!(!log.iter().any(|l| l.contains("\"hi\"")), "{log:?}");
}
