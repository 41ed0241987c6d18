use super::*;

fn peer() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 4242))
}

fn small() -> Limits {
    Limits {
        max_header_bytes: 256,
        max_body_bytes: 100,
        ..Limits::default()
    }
}

/// Every request of `input`, each with the bytes it took, or the first error's status;
/// `feed` gives the lengths of the successive buffers the parser sees (growing by parts).
fn parse_fed(input: &[u8], limits: &Limits, cuts: &[usize]) -> Result<Vec<(Request, usize)>, u16> {
    let mut parser = RequestParser::new(limits, peer());
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        loop {
            match parser
                .advance(&input[start..cut.max(start)])
                .map_err(|e| e.status)?
            {
                Step::NeedMore => break,
                Step::Done { request, consumed } => {
                    out.push((request, consumed));
                    start += consumed;
                }
            }
        }
    }
    Ok(out)
}

fn parse(input: &[u8], limits: &Limits) -> Result<Vec<(Request, usize)>, u16> {
    parse_fed(input, limits, &[])
}

fn one(input: &str) -> Request {
    let mut all = parse(input.as_bytes(), &Limits::default()).expect("valid request");
    assert_eq!(all.len(), 1, "{input:?}");
    all.remove(0).0
}

fn status(input: &[u8], limits: &Limits) -> u16 {
    match parse(input, limits) {
        Err(s) => s,
        Ok(r) => panic!(
            "expected an error for {:?}, got {} requests",
            String::from_utf8_lossy(input),
            r.len()
        ),
    }
}

/// The same outcome split at every byte and fed one byte at a time.
fn check_splits(input: &[u8], limits: &Limits) {
    let whole = parse(input, limits);
    for k in 0..=input.len() {
        assert_eq!(
            parse_fed(input, limits, &[k]),
            whole,
            "split at {k} of {:?}",
            String::from_utf8_lossy(input)
        );
    }
    let bytes: Vec<usize> = (0..input.len()).collect();
    assert_eq!(parse_fed(input, limits, &bytes), whole, "byte by byte");
}

#[test]
fn request_line_headers_and_accessors() {
    let r = one("GET /v1/models?x=1&y HTTP/1.1\r\nHost: localhost\r\nX-Thing:  a b \t\r\nx-thing: 2\r\n\r\n");
    assert_eq!(r.method, "GET");
    assert_eq!(r.target, "/v1/models?x=1&y");
    assert_eq!(r.path(), "/v1/models");
    assert_eq!(r.query(), Some("x=1&y"));
    assert_eq!(r.version, Version::Http11);
    assert_eq!(r.header("X-THING"), Some("a b"));
    assert_eq!(r.headers[2], ("x-thing".to_string(), "2".to_string()));
    assert_eq!(r.header("absent"), None);
    assert!(r.body.is_empty());
    assert_eq!(r.peer, peer());
    assert!(r.keep_alive());
}

#[test]
fn bodies_by_length_and_chunked() {
    let r = one("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(r.body, b"hello");
    let r = one("POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1A \r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: t\r\n\r\n");
    assert_eq!(r.body, b"helloabcdefghijklmnopqrstuvwxyz");
    let r = one("POST /a HTTP/1.1\nHost: h\nTransfer-Encoding: Chunked\n\n3\nabc\n0\n\n");
    assert_eq!(r.body, b"abc");
}

#[test]
fn every_split_gives_the_same_result() {
    let cases: [&[u8]; 9] = [
        b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"\r\n\r\nGET / HTTP/1.0\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n2\r\nab\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nBad line\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n0123456789012345678901234567890123456789012345678901234567890123\r\n40\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
    ];
    for c in cases {
        check_splits(c, &small());
    }
    let big = format!(
        "GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
        "a".repeat(300)
    );
    check_splits(big.as_bytes(), &small());
    let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_LINE));
    assert_eq!(status(long_line.as_bytes(), &small()), 414);
    check_splits(long_line.as_bytes(), &small());
}

#[test]
fn pipelined_requests_in_one_buffer() {
    let input = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /2 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nokGET /3 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    let all = parse(input, &Limits::default()).unwrap();
    let targets: Vec<&str> = all.iter().map(|(r, _)| r.target.as_str()).collect();
    assert_eq!(targets, ["/1", "/2", "/3"]);
    assert_eq!(all.iter().map(|(_, n)| n).sum::<usize>(), input.len());
    assert_eq!(all[1].0.body, b"ok");
    assert!(all[1].0.keep_alive());
    assert!(!all[2].0.keep_alive());
}

#[test]
fn keep_alive_per_version_and_connection() {
    let ka = |s: &str| one(s).keep_alive();
    assert!(ka("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(!ka(
        "GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n"
    ));
    assert!(!ka(
        "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade, close\r\n\r\n"
    ));
    assert!(!ka("GET / HTTP/1.0\r\n\r\n"));
    assert!(ka("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    assert!(!ka(
        "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"
    ));
}

#[test]
fn header_limit_431() {
    let l = small();
    let head = |pad: usize| {
        format!(
            "GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
            "a".repeat(pad)
        )
    };
    let fits = 256 - head(0).len();
    assert_eq!(parse(head(fits).as_bytes(), &l).unwrap().len(), 1);
    assert_eq!(status(head(fits + 1).as_bytes(), &l), 431);
    // Also while the head is still incomplete, as soon as it passes the limit.
    let open = format!("GET / HTTP/1.1\r\nHost: h\r\nX: {}", "a".repeat(300));
    assert_eq!(status(open.as_bytes(), &l), 431);
    let hundred_k = format!(
        "GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    assert_eq!(status(hundred_k.as_bytes(), &Limits::default()), 431);
}

#[test]
fn body_limit_413_before_the_body() {
    let l = small();
    assert_eq!(
        one_with(
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n",
            &[b'x'; 100],
            &l
        )
        .body
        .len(),
        100
    );
    // The head alone is enough to refuse.
    assert_eq!(
        status(
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n",
            &l
        ),
        413
    );
    assert_eq!(
        status(
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            &l
        ),
        413
    );
    let chunked = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(one_with(chunked, b"32\r\n01234567890123456789012345678901234567890123456789\r\n32\r\n01234567890123456789012345678901234567890123456789\r\n0\r\n\r\n", &l).body.len(), 100);
    let mut over = chunked.to_vec();
    over.extend_from_slice(b"32\r\n01234567890123456789012345678901234567890123456789\r\n33\r\n");
    assert_eq!(status(&over, &l), 413);
    let mut huge = chunked.to_vec();
    huge.extend_from_slice(b"ffffffffffffffffffffffff\r\n");
    assert_eq!(status(&huge, &l), 413);
    let mut trailer = chunked.to_vec();
    trailer.extend_from_slice(format!("0\r\nT: {}\r\n\r\n", "t".repeat(300)).as_bytes());
    assert_eq!(status(&trailer, &l), 431);
}

fn one_with(head: &[u8], body: &[u8], l: &Limits) -> Request {
    let mut input = head.to_vec();
    input.extend_from_slice(body);
    let mut all = parse(&input, l).expect("valid request");
    assert_eq!(all.len(), 1);
    all.remove(0).0
}

#[test]
fn malformed_heads_400() {
    let l = Limits::default();
    let cases: [&[u8]; 16] = [
        b"GET / HTTP/1.1\r\nHost: h\r\nNo colon here\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n  folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX : a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\n: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX: \xff\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
        b"GET / FTP/1.1\r\nHost: h\r\n\r\n",
        b"GET nopath HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: h\r\n\r\n",
        b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n",
    ];
    for c in cases {
        assert_eq!(status(c, &l), 400, "{:?}", String::from_utf8_lossy(c));
    }
}

#[test]
fn framing_errors() {
    let l = Limits::default();
    let s = |x: &str| status(x.as_bytes(), &l);
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        501
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +2\r\n\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        400
    );
    assert_eq!(
        s("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"),
        400
    );
    assert_eq!(
        s("GET / HTTP/1.1\r\nHost: h\r\nExpect: something\r\n\r\n"),
        417
    );
    assert_eq!(s("GET / HTTP/2.0\r\n\r\n"), 505);
    assert_eq!(s("GET / HTTP/1.2\r\n\r\n"), 505);
    let target = format!(
        "GET /{} HTTP/1.1\r\nHost: h\r\n\r\n",
        "a".repeat(MAX_TARGET_BYTES)
    );
    assert_eq!(
        status(
            target.as_bytes(),
            &Limits {
                max_header_bytes: 100_000,
                ..l.clone()
            }
        ),
        414
    );
    // Equal copies of one Content-Length are one length.
    let r =
        one("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nab");
    assert_eq!(r.body, b"ab");
}

#[test]
fn target_forms() {
    assert_eq!(
        one("GET http://example.com:80/a/b?q HTTP/1.1\r\nHost: h\r\n\r\n").target,
        "/a/b?q"
    );
    assert_eq!(
        one("GET HTTPS://example.com HTTP/1.1\r\nHost: h\r\n\r\n").target,
        "/"
    );
    assert_eq!(
        one("GET http://example.com?q=1 HTTP/1.1\r\nHost: h\r\n\r\n").target,
        "/?q=1"
    );
    assert_eq!(one("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").target, "*");
}

#[test]
fn expect_continue_until_the_body_arrives() {
    let l = Limits::default();
    let head = b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n";
    let mut p = RequestParser::new(&l, peer());
    assert!(!p.expects_continue());
    assert_eq!(p.advance(&head[..10]).unwrap(), Step::NeedMore);
    assert!(!p.expects_continue());
    assert_eq!(p.wanted(), None);
    assert_eq!(p.advance(head).unwrap(), Step::NeedMore);
    assert!(p.expects_continue());
    assert_eq!(p.wanted(), Some(head.len() + 3));
    let mut all = head.to_vec();
    all.extend_from_slice(b"abc");
    assert!(
        matches!(p.advance(&all).unwrap(), Step::Done { consumed, .. } if consumed == all.len())
    );
    assert!(!p.expects_continue());
    // No body, nothing to continue; HTTP/1.0 does not know 100.
    let mut p = RequestParser::new(&l, peer());
    assert!(matches!(
        p.advance(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n")
            .unwrap(),
        Step::Done { .. }
    ));
    let mut p = RequestParser::new(&l, peer());
    assert_eq!(
        p.advance(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
            .unwrap(),
        Step::NeedMore
    );
    assert!(!p.expects_continue());
}

#[test]
fn started_ignores_leading_empty_lines() {
    let p = RequestParser::new(&Limits::default(), peer());
    assert!(!p.started(b""));
    assert!(!p.started(b"\r\n\r\n"));
    assert!(p.started(b"\r\nG"));
    let mut p = RequestParser::new(&Limits::default(), peer());
    assert_eq!(p.advance(b"\r\n\r\nGET / HT").unwrap(), Step::NeedMore);
    assert!(p.started(b"\r\n\r\nGET / HT"));
}

/// Fuzz find: a bare CR in a header line that also crosses the head limit was 400 when the
/// line arrived whole but 431 when it arrived in parts; limits now come first.
#[test]
fn limit_before_bare_cr_whatever_the_split() {
    let l = Limits {
        max_header_bytes: 40,
        ..Limits::default()
    };
    let input = b"POST /a HTTP/1.0\r\nHost: x\r\x0eTran\0\0\0\0\0\0\0\0\0\0\r\n\r\n";
    assert_eq!(status(input, &l), 431);
    check_splits(input, &l);
    // A chunk-size line past its bound is 400 however it ends.
    let mut long = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    long.extend_from_slice(&[b'f'; MAX_CHUNK_LINE + 1]);
    long.extend_from_slice(b"\r\n");
    assert_eq!(status(&long, &small()), 400);
    check_splits(&long, &small());
}
