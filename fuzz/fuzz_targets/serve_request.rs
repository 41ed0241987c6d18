//! The request-JSON decoder of `k3 serve` (both endpoints): never panics on any body, and
//! every refusal is a 4xx in the OpenAI shape (its body parses as JSON with `error.message`);
//! an accepted chat request's prompt fits the context and its ids are below V.
#![no_main]
use k3::serve::api::{self, Limits};
use k3::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny-k3-text");
        Tokenizer::load(std::path::Path::new(dir)).expect("the fixture tokenizer")
    })
}

fn check(e: &api::ApiError) {
    assert!((400..500).contains(&e.status), "{e:?}");
    let v = k3::json::parse(e.body().as_bytes()).expect("the error body is JSON");
    assert!(v.get("error").and_then(|e| e.get("message")).is_some());
}

/// One vocabulary of structured output for every input (built on the first that asks).
fn vocab_cell() -> k3::serve::api::constraint::VocabCell {
    static CELL: std::sync::OnceLock<k3::serve::api::constraint::VocabCell> =
        std::sync::OnceLock::new();
    CELL.get_or_init(Default::default).clone()
}

fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let lim = Limits {
        model_id: "tiny-k3-text".into(),
        ctx: 512,
        vocab: tok.vocab_size(),
        defaults: k3::generate::defaults::chat_defaults(std::path::Path::new("/nonexistent"))
            .expect("the fixed defaults"),
        sign_key: b"fuzz".to_vec(),
        vocabulary: vocab_cell(),
    };
    let o = match api::parse_body(data) {
        Ok(o) => o,
        Err(e) => return check(&e),
    };
    match api::chat_job(&o, tok, &lim, &mut || 1) {
        Ok(j) => {
            assert!(j.ids.len() < lim.ctx && j.ids.iter().all(|&id| (id as usize) < lim.vocab));
        }
        Err(e) => check(&e),
    }
    match api::completion_job(&o, tok, &lim, &mut || 1) {
        Ok(j) => assert!(!j.ids.is_empty() && j.ids.len() < lim.ctx),
        Err(e) => check(&e),
    }
});
