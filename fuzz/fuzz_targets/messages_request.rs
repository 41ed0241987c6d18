//! The Anthropic Messages request decoder of `k3 serve` (`POST /v1/messages` and
//! `/v1/messages/count_tokens`): never panics on any body; every refusal is a 4xx whose
//! Anthropic-shape body parses (`type: error`, `error.type`, `error.message`); an accepted
//! request's prompt fits the context, its ids are below V, its stub is within the prompt, and
//! count_tokens agrees with it.
#![no_main]
use k3::serve::api::{self, messages, Limits};
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
    let v = k3::json::parse(messages::error_body(e).as_bytes()).expect("the error body is JSON");
    assert_eq!(v.get("type").and_then(|t| t.as_str()), Some("error"));
    let err = v.get("error").expect("error");
    assert!(err.get("type").and_then(|t| t.as_str()).is_some());
    assert!(err.get("message").and_then(|t| t.as_str()).is_some());
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
    let count = messages::count_tokens(&o, tok, &lim);
    match messages::messages_job(&o, tok, &lim, &mut || 1) {
        Ok(j) => {
            assert!(j.ids.len() < lim.ctx && j.ids.iter().all(|&id| (id as usize) < lim.vocab));
            assert!(j.stub <= j.ids.len());
            assert_eq!(count.as_ref().ok(), Some(&(j.ids.len() - j.stub)));
            if let Some(b) = &j.think_budget {
                assert!(j.thinking && b.budget >= 1 && !b.close.is_empty());
            }
        }
        Err(e) => check(&e),
    }
    if let Err(e) = &count {
        check(e);
    }
});
