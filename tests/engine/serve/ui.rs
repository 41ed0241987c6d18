//! The chat page (`GET /`, `/favicon.ico`; `--no-ui`) and the rules that keep other sites out
//! of a keyless server (`Host`: DNS rebinding; `Origin`: cross-site requests), with and
//! without `--api-key` (issue 27; docs/cli.md "The chat page", "Other sites"). The page in a
//! browser: tests/serve/chat_page.py.

use super::support::*;
use serde_json::json;

/// A request with the given `Host` (and extra headers), `Connection: close`.
fn with_host(
    s: &Server,
    method: &str,
    path: &str,
    host: &str,
    extra: &[&str],
    body: &[u8],
) -> Reply {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
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

#[test]
fn the_page_and_its_icon_are_served_and_announced() {
    let s = start(&[], &[]);
    let r = get(&s, "/");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = r.header("content-security-policy").expect("a CSP");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    let page = r.text();
    assert!(page.starts_with("<!doctype html>"));
    assert!(page.contains("/v1/chat/completions"));
    assert!(!page.contains("https://") && !page.contains("http://"));
    // no CORS headers on the page either
    assert!(r.header("access-control-allow-origin").is_none());
    let i = get(&s, "/favicon.ico");
    assert_eq!(
        (i.status, i.header("content-type")),
        (200, Some("image/x-icon"))
    );
    assert_eq!(&i.body[..4], &[0, 0, 1, 0]);
    assert_eq!(request(&s, "HEAD", "/", &[], b"").status, 200);
    let p = post(&s, "/", &json!({}));
    assert_eq!((p.status, p.header("allow")), (405, Some("GET")));
    // the ready line is followed by the page's URL
    let mut seen = Vec::new();
    let line = s.wait_log(&mut seen, |l| l.contains("chat page:"));
    assert!(line.contains(&format!("http://{}/", s.addr)), "{line}");
}

#[test]
fn no_ui_turns_the_page_off() {
    let s = start(&["--no-ui"], &[]);
    for path in ["/", "/favicon.ico"] {
        let r = get(&s, path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert_eq!(r.json()["error"]["type"], "not_found_error");
    }
    assert_eq!(get(&s, "/v1/models").status, 200);
    // the 404 of the page lists the routes without it
    let r = get(&s, "/nope");
    assert!(!r.text().contains("chat page"), "{}", r.text());
    assert!(s.log_lines().iter().all(|l| !l.contains("chat page:")));
}

#[test]
fn without_a_key_other_hosts_and_sites_get_403() {
    let s = start(&["--cors", "http://localhost:3000"], &[]);
    let port = s.addr.port();
    let chat = chat_body("hi", 2, 1).to_string();
    // the bound address, localhost and 127.0.0.1 with the port pass
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        assert_eq!(
            with_host(&s, "GET", "/v1/models", &host, &[], b"").status,
            200,
            "{host}"
        );
    }
    // DNS rebinding: another name, or the right name with another port, or none
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_string(),
        "localhost".to_string(),
        format!("localhost:{}", port.wrapping_add(1)),
        format!("127.0.0.1.evil.example:{port}"),
    ] {
        for (method, path, body) in [
            ("GET", "/", &b""[..]),
            ("GET", "/health", b""),
            ("GET", "/v1/models", b""),
            ("POST", "/v1/chat/completions", chat.as_bytes()),
        ] {
            let r = with_host(
                &s,
                method,
                path,
                &host,
                &["Content-Type: application/json"],
                body,
            );
            assert_eq!(r.status, 403, "{host} {method} {path}: {}", r.text());
            assert_eq!(r.json()["error"]["type"], "permission_error");
            assert!(r.header("access-control-allow-origin").is_none());
        }
    }
    let own = format!("127.0.0.1:{port}");
    // a cross-site POST a page can send without a preflight (text/plain): refused, not run
    let r = with_host(
        &s,
        "POST",
        "/v1/chat/completions",
        &own,
        &["Content-Type: text/plain", "Origin: https://evil.example"],
        chat.as_bytes(),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("evil.example"));
    assert!(r.header("access-control-allow-origin").is_none());
    for origin in ["null", "http://localhost:3001", "https://localhost:3000"] {
        let o = format!("Origin: {origin}");
        let r = with_host(&s, "GET", "/v1/models", &own, &[&o], b"");
        assert_eq!(r.status, 403, "{origin}");
    }
    // the page's own origin and the --cors origin pass
    for origin in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
    ] {
        let o = format!("Origin: {origin}");
        let h = ["Content-Type: application/json", o.as_str()];
        let r = with_host(
            &s,
            "POST",
            "/v1/chat/completions",
            &own,
            &h,
            chat.as_bytes(),
        );
        assert_eq!(r.status, 200, "{origin}: {}", r.text());
        // same-origin: no CORS headers but the --cors one
        let a = r.header("access-control-allow-origin");
        assert_eq!(a, Some("http://localhost:3000"));
    }
    let pre = with_host(
        &s,
        "OPTIONS",
        "/v1/chat/completions",
        &own,
        &["Origin: http://localhost:3000"],
        b"",
    );
    assert_eq!(pre.status, 204);
    // every refusal is logged, with no body
    let mut seen = Vec::new();
    let l = s.wait_log(&mut seen, |l| {
        l.contains(" 403 ") && l.contains("host/origin")
    });
    assert!(l.contains("GET /"), "{l}");
}

#[test]
fn with_a_key_the_key_is_the_guard_and_the_page_loads_without_it() {
    let s = start(&["--api-key", "sekrit"], &[]);
    let port = s.addr.port();
    // the page and icon need no key (a browser cannot send one when opening a URL)
    assert_eq!(
        with_host(&s, "GET", "/", &format!("localhost:{port}"), &[], b"").status,
        200
    );
    assert_eq!(get(&s, "/favicon.ico").status, 200);
    // the API does
    assert_eq!(get(&s, "/v1/models").status, 401);
    // any Host and Origin: a server behind a key is reached under names it cannot list
    let k = [
        "Authorization: Bearer sekrit",
        "Origin: http://my-box.lan:8000",
    ];
    let r = with_host(&s, "GET", "/v1/models", "my-box.lan:8000", &k, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("access-control-allow-origin").is_none());
    let r = with_host(&s, "GET", "/v1/models", "my-box.lan:8000", &k[1..], b"");
    assert_eq!(r.status, 401);
}
