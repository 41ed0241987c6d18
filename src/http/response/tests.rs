use super::*;
use std::net::SocketAddr;

fn request(method: &str, version: Version) -> Request {
    Request {
        method: method.to_string(),
        target: "/".to_string(),
        version,
        headers: Vec::new(),
        body: Vec::new(),
        peer: SocketAddr::from(([127, 0, 0, 1], 1)),
    }
}

/// The bytes written and whether the connection stays reusable.
fn sent(req: &Request, keep_alive: bool, f: impl FnOnce(&mut Responder<'_>)) -> (String, bool) {
    let mut out: Vec<u8> = Vec::new();
    let mut r = Responder::new(&mut out, req, keep_alive, None);
    f(&mut r);
    let reusable = r.reusable();
    (String::from_utf8(out).unwrap(), reusable)
}

#[test]
fn whole_response_with_content_length() {
    let req = request("GET", Version::Http11);
    let (s, reusable) = sent(&req, true, |r| {
        let resp = Response::new(200, "text/plain", b"hi".to_vec())
            .header("Content-Length", "99")
            .header("Transfer-Encoding", "chunked")
            .header("X-A", "b");
        r.send(resp).unwrap();
        assert!(r.sent());
        let again = r.send(Response::new(200, "text/plain", Vec::new()));
        assert_eq!(again.unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    });
    assert_eq!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A: b\r\nContent-Length: 2\r\n\r\nhi"
    );
    assert!(reusable);
}

#[test]
fn connection_header_per_version_and_wish() {
    let resp = || Response::new(404, "application/json", b"{}".to_vec());
    let (s, reusable) = sent(&request("GET", Version::Http11), false, |r| {
        r.send(resp()).unwrap()
    });
    assert!(s.contains("\r\nConnection: close\r\n") && !reusable, "{s}");
    let (s, reusable) = sent(&request("GET", Version::Http10), true, |r| {
        r.send(resp()).unwrap()
    });
    assert!(
        s.contains("\r\nConnection: keep-alive\r\n") && reusable,
        "{s}"
    );
    let (s, reusable) = sent(&request("GET", Version::Http11), true, |r| {
        r.send(resp().header("connection", "Close")).unwrap()
    });
    assert_eq!(s.matches("Connection").count(), 1, "{s}");
    assert!(s.contains("\r\nConnection: close\r\n") && !reusable, "{s}");
}

#[test]
fn head_and_bodiless_statuses() {
    let (s, _) = sent(&request("HEAD", Version::Http11), true, |r| {
        r.send(Response::new(200, "text/plain", b"hello".to_vec()))
            .unwrap()
    });
    assert!(s.ends_with("Content-Length: 5\r\n\r\n"), "{s}");
    let (s, _) = sent(&request("GET", Version::Http11), true, |r| {
        r.send(Response::new(204, "text/plain", b"x".to_vec()))
            .unwrap()
    });
    assert_eq!(
        s,
        "HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\n\r\n"
    );
}

#[test]
fn header_injection_refused() {
    let req = request("GET", Version::Http11);
    let (s, _) = sent(&req, true, |r| {
        let bad = Response::new(200, "text/plain", Vec::new()).header("X", "a\r\nSet-Cookie: x");
        assert_eq!(r.send(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let bad = Response::new(200, "text/plain", Vec::new()).header("X Y", "a");
        assert_eq!(r.send(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert!(!r.sent());
    });
    assert!(s.is_empty());
}

#[test]
fn chunked_stream() {
    let req = request("GET", Version::Http11);
    let headers = vec![("Content-Type".to_string(), "text/event-stream".to_string())];
    let (s, reusable) = sent(&req, true, |r| {
        let mut st = r.stream(200, headers.clone()).unwrap();
        st.chunk(b"data: hello\n\n").unwrap();
        st.chunk(b"").unwrap();
        st.chunk(&[b'x'; 26]).unwrap();
        st.finish().unwrap();
    });
    let body = format!(
        "d\r\ndata: hello\n\n\r\n1a\r\n{}\r\n0\r\n\r\n",
        "x".repeat(26)
    );
    let expect =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(s, format!("{expect}{body}"));
    assert!(reusable);
    // Dropped unfinished: no terminator, the connection closes.
    let (s, reusable) = sent(&req, true, |r| {
        let mut st = r.stream(200, headers.clone()).unwrap();
        st.chunk(b"a").unwrap();
    });
    assert!(s.ends_with("1\r\na\r\n") && !reusable, "{s}");
}

#[test]
fn http10_stream_is_unframed_and_closes() {
    let req = request("GET", Version::Http10);
    let (s, reusable) = sent(&req, true, |r| {
        let mut st = r.stream(200, Vec::new()).unwrap();
        st.chunk(b"abc").unwrap();
        st.finish().unwrap();
    });
    assert_eq!(s, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc");
    assert!(!reusable);
}

#[test]
fn shutdown_closes_after_the_response_and_buffered_responder() {
    let req = request("GET", Version::Http11);
    let shutdown = Shutdown::new();
    let mut out: Vec<u8> = Vec::new();
    let mut r = Responder::new(&mut out, &req, true, Some(&shutdown));
    shutdown.request();
    r.send(Response::new(200, "text/plain", Vec::new()))
        .unwrap();
    assert!(!r.reusable());
    assert!(String::from_utf8(out)
        .unwrap()
        .contains("\r\nConnection: close\r\n"));
    let mut out: Vec<u8> = Vec::new();
    let mut r = Responder::buffered(&mut out, &req);
    assert!(!r.disconnected());
    r.send(Response::new(200, "text/plain", b"x".to_vec()))
        .unwrap();
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx"
    );
}
