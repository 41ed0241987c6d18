//! What the fuzz targets of `k3 serve`'s request decoders share (`serve_request`,
//! `messages_request`, `responses_request`): the fixture tokenizer, loaded once, the
//! server's limits over it, and the check that a refusal is a 4xx with a JSON body.

use k3::serve::api::{ApiError, Limits};
use k3::tokenizer::Tokenizer;
use std::sync::OnceLock;

/// The tokenizer of `tests/fixtures/tiny-k3-text`, loaded on the first call.
pub fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny-k3-text");
        Tokenizer::load(std::path::Path::new(dir)).expect("the fixture tokenizer")
    })
}

/// The limits a server of that model checks requests against: a context of 512 positions,
/// the checkpoint-less sampler defaults, a fixed signing key.
pub fn limits(tok: &Tokenizer) -> Limits {
    Limits {
        model_id: "tiny-k3-text".into(),
        ctx: 512,
        vocab: tok.vocab_size(),
        defaults: k3::generate::defaults::chat_defaults(std::path::Path::new("/nonexistent"))
            .expect("the fixed defaults"),
        sign_key: b"fuzz".to_vec(),
        vocabulary: vocab_cell(),
    }
}

/// One vocabulary of structured output for every input (built on the first that asks).
fn vocab_cell() -> k3::serve::api::constraint::VocabCell {
    static CELL: OnceLock<k3::serve::api::constraint::VocabCell> = OnceLock::new();
    CELL.get_or_init(Default::default).clone()
}

/// A refusal is a 4xx whose body (`body`, in the API's own shape) is JSON with
/// `error.message`; returns the parsed body for the API's further checks.
pub fn refusal(e: &ApiError, body: &str) -> k3::json::Value {
    assert!((400..500).contains(&e.status), "{e:?}");
    let v = k3::json::parse(body.as_bytes()).expect("the error body is JSON");
    assert!(v
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(|m| m.as_str())
        .is_some());
    v
}
