//! Chat (TOKENIZER.md §10, §13): the reply parser never panics on any id sequence and gives
//! the same events fed one id at a time or all at once, with every text event non-empty, and
//! `closing()` always ends the turn; the
//! template never panics on any request JSON (odd first byte).
#![no_main]
use k3::chat::{self, ReplyEvent, ReplyParser, Request};
use k3::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn real() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-k3-text");
        Tokenizer::load(&dir).expect("fixture tokenizer")
    })
}

/// Ids that make markup: the structural specials and the words of tags and attributes.
fn alphabet() -> &'static Vec<u32> {
    static A: OnceLock<Vec<u32>> = OnceLock::new();
    A.get_or_init(|| {
        let t = real();
        let mut a = vec![chat::OPEN, chat::CLOSE, chat::SEP, chat::END_OF_MSG, chat::EOS, 163_584];
        for w in ["think", "response", "tools", "call", "argument", "json", "message", " tool", " key", " type", " index", "=\"", "\"", "f", "string", "number", "object", "array", "boolean", "null", "1", "{\"a\": 1}", "[1]", "&quot;", "你好"] {
            a.extend(t.encode(w, false));
        }
        a
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let t = real();
    if mode & 1 == 1 {
        if let Ok(v) = k3::json::parse(rest) {
            if let Ok(req) = Request::from_json(&v) {
                if let Ok(segs) = chat::render(&req, mode & 2 == 0) {
                    chat::encode(t, &segs).expect("fixture has the chat specials");
                }
            }
        }
        return;
    }
    // Each byte pair: high bit set → an alphabet id, else a raw id (any value, also past the vocabulary).
    let a = alphabet();
    let ids: Vec<u32> = rest
        .chunks(2)
        .map(|c| {
            let v = u16::from(c[0]) << 8 | u16::from(*c.get(1).unwrap_or(&0));
            if v & 0x8000 != 0 { a[usize::from(v & 0x7FFF) % a.len()] } else { u32::from(v) * 6 }
        })
        .collect();
    let thinking = mode & 2 != 0;
    let mut one = ReplyParser::new(thinking);
    let mut ev1 = Vec::new();
    for &id in &ids {
        one.push(t, id, &mut ev1);
    }
    one.finish(&mut ev1);
    for e in &ev1 {
        if let ReplyEvent::Reasoning(s) | ReplyEvent::Content(s) = e {
            assert!(!s.is_empty());
        }
    }
    let mut all = ReplyParser::new(thinking);
    let mut ev2 = Vec::new();
    all.push_all(t, &ids, &mut ev2);
    all.finish(&mut ev2);
    assert_eq!(chat::reply::coalesce(ev1), chat::reply::coalesce(ev2));
    // Closing a reply cut here always ends the turn.
    let mut cut = ReplyParser::new(thinking);
    let mut ev3 = Vec::new();
    cut.push_all(t, &ids, &mut ev3);
    let closing = chat::encode(t, &cut.closing()).expect("fixture has the chat specials");
    cut.push_all(t, &closing, &mut ev3);
    assert!(cut.done());
});
