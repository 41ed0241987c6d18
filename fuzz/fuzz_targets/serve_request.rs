//! The request-JSON decoder of `k3 serve` (both endpoints): never panics on any body, and
//! every refusal is a 4xx in the OpenAI shape (its body parses as JSON with `error.message`);
//! an accepted chat request's prompt fits the context and its ids are below V.
#![no_main]
use k3::serve::api;
use k3_fuzz::{limits, refusal, tokenizer};
use libfuzzer_sys::fuzz_target;

fn check(e: &api::ApiError) {
    refusal(e, &e.body());
}


fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let lim = limits(tok);
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
