//! Tokenizer (TOKENIZER.md): the loaders never panic on any input; with the real Kimi
//! vocabulary, decode(encode(s)) == s for every valid UTF-8 s in both modes; the streaming
//! decoder, fed the bytes in arbitrary pieces, prints exactly the lossy decode; and BPE with an
//! arbitrary vocabulary (the 256 bytes plus tokens taken from the input) still round-trips.
#![no_main]
use k3::tokenizer::{special, StreamDecoder, Tokenizer, Vocab};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn real() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-k3-text");
        Tokenizer::load(&dir).expect("fixture tokenizer")
    })
}

fn b64(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let v = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            s.push(if k <= c.len() { A[(v >> (18 - 6 * k)) as usize & 63] as char } else { '=' });
        }
    }
    s
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 4 {
        // Loaders on arbitrary bytes: Ok or a clear error, never a panic.
        0 => {
            let _ = Vocab::parse(rest, "fuzz/tiktoken.model");
            if let Ok(named) = special::parse_added_tokens(rest, "fuzz/tokenizer_config.json") {
                let _ = special::SpecialTokens::new(163_584, &named, "fuzz/tokenizer_config.json");
            }
        }
        // The real vocabulary: exact round trips, streaming = lossy decode.
        1 => {
            let t = real();
            if let Ok(s) = std::str::from_utf8(rest) {
                for allow in [false, true] {
                    let ids = t.encode(s, allow);
                    assert_eq!(t.decode(&ids).unwrap(), rest, "round trip (allow_special {allow})");
                }
            }
            let _ = t.encode_bytes(rest, false);
            let mut d = StreamDecoder::new();
            let mut out = String::new();
            let mut i = 0;
            for (k, &b) in rest.iter().enumerate() {
                // chunk boundaries taken from the data itself
                if b % 3 == 0 {
                    out.push_str(&d.push(&rest[i..=k]));
                    i = k + 1;
                }
            }
            out.push_str(&d.push(&rest[i..]));
            out.push_str(&d.finish());
            assert_eq!(out, String::from_utf8_lossy(rest));
        }
        // An arbitrary vocabulary: the 256 bytes plus the 0xFF-separated parts of the first
        // half of the input as extra tokens; the second half (if UTF-8) must round-trip.
        _ => {
            let (vocab_part, text_part) = rest.split_at(rest.len() / 2);
            let mut lines: Vec<String> = (0..=255u8).map(|b| format!("{} {b}", b64(&[b]))).collect();
            let mut seen = std::collections::HashSet::new();
            for tok in vocab_part.split(|&b| b == 0xFF) {
                if tok.len() >= 2 && seen.insert(tok) {
                    lines.push(format!("{} {}", b64(tok), lines.len()));
                }
            }
            let v = Vocab::parse(lines.join("\n").as_bytes(), "fuzz").expect("constructed vocabulary is valid");
            let n = v.len() as u32;
            let sp = special::SpecialTokens::new(n, &[(n, "<|x|>".to_string())], "fuzz").unwrap();
            let t = Tokenizer::from_parts(v, sp).unwrap();
            if let Ok(s) = std::str::from_utf8(text_part) {
                for allow in [false, true] {
                    let ids = t.encode(s, allow);
                    assert_eq!(t.decode(&ids).unwrap(), text_part);
                }
            }
        }
    }
});
