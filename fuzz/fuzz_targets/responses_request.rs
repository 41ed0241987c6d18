//! The OpenAI Responses request decoder of `k3 serve` (`POST /v1/responses`): never panics on
//! any body; every refusal is a 4xx whose OpenAI-shape body parses (`error.message`,
//! `error.type`); an accepted request's prompt fits the context, its ids are below V, and its
//! stub is within the prompt.
#![no_main]
use k3::serve::api::{self, responses};
use k3_fuzz::{limits, refusal, tokenizer};
use libfuzzer_sys::fuzz_target;

fn check(e: &api::ApiError) {
    let v = refusal(e, &e.body());
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
    match responses::responses_job(&o, tok, &lim, &mut || 1) {
        Ok(j) => {
            assert!(j.ids.len() < lim.ctx && j.ids.iter().all(|&id| (id as usize) < lim.vocab));
            assert!(j.stub <= j.ids.len());
        }
        Err(e) => check(&e),
    }
});
