//! Shared by the tokenizer tests: the fixture tokenizer and the reference tokenizer
//! (`tiktoken-rs` 0.12.1 with the real Kimi vocabulary from `splintr-vocab-kimi` and the
//! Kimi pattern), with the §5 windows applied by hand.

use k3::tokenizer::{self, Tokenizer};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

mod reference_data;
pub use reference_data::{splintr_ranks, KIMI_PATTERN};

pub const VOCAB_SHA256: &str = "b6c497a7469b33ced9c38afb1ad6e47f03f5e5dc05f15930799210ec050c5103";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::load(&root().join("tests/fixtures/tiny-k3-text")).unwrap())
}

pub fn reference() -> &'static CoreBPE {
    static R: OnceLock<CoreBPE> = OnceLock::new();
    R.get_or_init(|| {
        let ranks = splintr_ranks();
        assert_eq!(ranks.len(), 163_584);
        let t = tok();
        let special: HashMap<String, u32> = (0..256u32)
            .map(|i| {
                let id = 163_584 + i;
                (t.special().name(id).unwrap().to_string(), id)
            })
            .collect();
        CoreBPE::new(
            ranks.into_iter().collect(),
            special.into_iter().collect(),
            KIMI_PATTERN,
        )
        .unwrap()
    })
}

/// The reference with the §5 windows applied by hand (no run in the inputs exceeds 25,000).
pub fn reference_encode(text: &str, allow_special: bool) -> Vec<u32> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut w = 0;
    while w < chars.len() {
        let start = chars[w].0;
        let end = chars
            .get(w + tokenizer::slices::WINDOW)
            .map_or(text.len(), |c| c.0);
        let window = &text[start..end];
        if allow_special {
            out.extend(reference().encode_with_special_tokens(window));
        } else {
            out.extend(reference().encode_ordinary(window));
        }
        w += tokenizer::slices::WINDOW;
    }
    out
}

pub fn longest_run(text: &str) -> usize {
    let (mut best, mut run, mut last) = (0, 0, None);
    for c in text.chars() {
        let s = tokenizer::slices::sp(c as u32);
        run = if Some(s) == last { run + 1 } else { 1 };
        last = Some(s);
        best = best.max(run);
    }
    best
}

pub fn check(text: &str) {
    assert!(longest_run(text) <= 25_000);
    let ours = tok().encode(text, false);
    let want = reference_encode(text, false);
    assert_eq!(ours, want, "ordinary: {text:?}");
    assert_eq!(tok().decode(&ours).unwrap(), text.as_bytes());
    let ours_s = tok().encode(text, true);
    assert_eq!(
        ours_s,
        reference_encode(text, true),
        "allow_special: {text:?}"
    );
}
