//! Who may use a keyless server through a browser (ENGINE.md §11, "Security"; issue 27).
//!
//! A server without `--api-key` binds a loopback address, so only this machine reaches it —
//! but any web page the user opens runs on this machine too. Two rules keep other sites out:
//!
//! * **Host** (DNS rebinding): a page on `evil.example` whose name is re-pointed at 127.0.0.1
//!   sends `Host: evil.example:PORT`. Only the bound address, `localhost` and `127.0.0.1`,
//!   each with the bound port, are accepted; anything else, or no `Host` at all, is 403.
//! * **Origin** (cross-site requests): a page on another origin can send a POST that needs no
//!   preflight (a `text/plain` body) and have the server generate even though it cannot read
//!   the reply. Browsers send `Origin` on every cross-origin request and on every POST, so a
//!   request whose `Origin` is not the server's own (`http://` + an accepted host) or the
//!   `--cors` origin is 403. Clients that are not browsers send no `Origin` and pass.
//!
//! With `--api-key` neither rule applies: a page on another site cannot know the key, and a
//! server on `0.0.0.0` is reached under names (the LAN address, the machine's name) that it
//! cannot list. CORS headers go only with `--cors`, naming that one origin, in either case.

use std::net::SocketAddr;

/// Whether `host` (the `Host` header's value) names the server bound at `bound`: the bound IP
/// address, `localhost` or `127.0.0.1` (ASCII case ignored; IPv6 in brackets), each with the
/// bound port (no port means 80).
pub fn host_allowed(host: Option<&str>, bound: SocketAddr) -> bool {
    let Some((name, port)) = host.and_then(split_host) else {
        return false;
    };
    if port != bound.port() {
        return false;
    }
    let ip = bound.ip().to_string();
    ["localhost", "127.0.0.1", ip.as_str()]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// Whether a request with this `Origin` header may use the server bound at `bound`: no
/// `Origin` (not a browser, or a same-origin GET), the server's own origin (`http://` and a
/// host [`host_allowed`] accepts), or `cors` (the `--cors` origin, compared exactly).
pub fn origin_allowed(origin: Option<&str>, bound: SocketAddr, cors: Option<&str>) -> bool {
    let Some(o) = origin.map(str::trim) else {
        return true;
    };
    if cors.is_some_and(|c| c == o) {
        return true;
    }
    let own = o
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &o[7..]);
    own.is_some_and(|h| !h.contains('/') && host_allowed(Some(h), bound))
}

/// `name[:port]` or `[v6][:port]` → (name without brackets, port; 80 when absent). `None` for
/// an empty name, a port that is not a number, or text after the brackets that is not a port.
fn split_host(h: &str) -> Option<(&str, u16)> {
    let h = h.trim();
    let (name, port) = if let Some(rest) = h.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        match after {
            "" => (v6, None),
            p => (v6, Some(p.strip_prefix(':')?)),
        }
    } else {
        match h.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (h, None),
        }
    };
    let port = match port {
        None => 80,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
    };
    (!name.is_empty()).then_some((name, port))
}

#[cfg(test)]
mod tests {
    use super::{host_allowed, origin_allowed};
    use std::net::SocketAddr;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn hosts_of_the_bound_address_with_its_port() {
        let b = at("127.0.0.1:8000");
        for ok in [
            "127.0.0.1:8000",
            "localhost:8000",
            "LocalHost:8000",
            " localhost:8000 ",
        ] {
            assert!(host_allowed(Some(ok), b), "{ok}");
        }
        for bad in [
            "evil.example:8000",
            "localhost",
            "localhost:8001",
            "127.0.0.1:80",
            "localhost.evil.example:8000",
            "127.0.0.1:8000:1",
            "127.0.0.1:+8000",
            "127.0.0.1:",
            ":8000",
            "[::1]:8000",
            "",
        ] {
            assert!(!host_allowed(Some(bad), b), "{bad}");
        }
        assert!(!host_allowed(None, b));
        // port 80 may be left out, as browsers do
        assert!(host_allowed(Some("localhost"), at("127.0.0.1:80")));
        // another loopback address or IPv6: its own spelling, in brackets
        assert!(host_allowed(Some("127.0.0.2:9"), at("127.0.0.2:9")));
        let v6 = at("[::1]:8000");
        assert!(host_allowed(Some("[::1]:8000"), v6));
        assert!(host_allowed(Some("localhost:8000"), v6));
        assert!(!host_allowed(Some("[::1]x"), v6));
        assert!(!host_allowed(Some("[::2]:8000"), v6));
    }

    #[test]
    fn origins_own_or_cors_only() {
        let b = at("127.0.0.1:8000");
        assert!(origin_allowed(None, b, None));
        assert!(origin_allowed(Some("http://127.0.0.1:8000"), b, None));
        assert!(origin_allowed(Some("http://localhost:8000"), b, None));
        for bad in [
            "https://evil.example",
            "http://evil.example:8000",
            "http://localhost:3000",
            "https://localhost:8000",
            "http://localhost:8000/x",
            "null",
            "",
        ] {
            assert!(!origin_allowed(Some(bad), b, None), "{bad}");
        }
        let cors = Some("http://localhost:3000");
        assert!(origin_allowed(Some("http://localhost:3000"), b, cors));
        assert!(!origin_allowed(Some("http://localhost:3001"), b, cors));
    }
}
