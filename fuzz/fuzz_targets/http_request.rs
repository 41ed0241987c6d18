//! The HTTP/1.1 request parser (ENGINE.md §11): never panics on any bytes, gives the same
//! requests and the same refusal status whether the input arrives whole, split at one point or
//! one byte at a time, consumes exactly the bytes it parsed, and keeps every limit.
#![no_main]
use k3::http::{Limits, Request, RequestParser, Step};
use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;

/// Every request of `input` with the bytes it took, or the first refusal's status; the parser
/// sees the buffer grow to each of `cuts` and then to the whole input.
fn parse(input: &[u8], limits: &Limits, cuts: &mut dyn Iterator<Item = usize>) -> Result<Vec<(Request, usize)>, u16> {
    let mut parser = RequestParser::new(limits, SocketAddr::from(([127, 0, 0, 1], 1)));
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts.chain(std::iter::once(input.len())) {
        loop {
            match parser.advance(&input[start..cut.max(start)]).map_err(|e| e.status)? {
                Step::NeedMore => break,
                Step::Done { request, consumed } => {
                    assert!(consumed > 0 && start + consumed <= cut.max(start));
                    assert!(request.body.len() <= limits.max_body_bytes);
                    out.push((request, consumed));
                    start += consumed;
                }
            }
        }
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else { return };
    // Small limits so the fuzzer reaches them; the high bits choose where to split.
    let limits = Limits { max_header_bytes: 64 + usize::from(mode & 0x0f) * 16, max_body_bytes: usize::from(mode >> 4) * 8, ..Limits::default() };
    let whole = parse(input, &limits, &mut std::iter::empty());
    if let Err(s) = whole {
        assert!([400, 413, 414, 417, 431, 501, 505].contains(&s), "status {s}");
    }
    let at = usize::from(mode).wrapping_mul(7919) % (input.len() + 1);
    assert_eq!(parse(input, &limits, &mut std::iter::once(at)), whole);
    if input.len() <= 512 {
        assert_eq!(parse(input, &limits, &mut (0..input.len())), whole);
    }
});
