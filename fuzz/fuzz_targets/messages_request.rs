//! The Anthropic Messages request decoder of `k3 serve` (`POST /v1/messages` and
//! `/v1/messages/count_tokens`): never panics on any body; every refusal is a 4xx whose
//! Anthropic-shape body parses (`type: error`, `error.type`, `error.message`); an accepted
//! request's prompt fits the context, its ids are below V, its stub is within the prompt, and
//! count_tokens agrees with it.
#![no_main]
use k3::serve::api::{self, messages};
use k3_fuzz::{limits, refusal, tokenizer};
use libfuzzer_sys::fuzz_target;

fn check(e: &api::ApiError) {
    let v = refusal(e, &messages::error_body(e));
    assert_eq!(v.get("type").and_then(|t| t.as_str()), Some("error"));
    let err = v.get("error").expect("error");
    assert!(err.get("type").and_then(|t| t.as_str()).is_some());
}


fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let lim = limits(tok);
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
