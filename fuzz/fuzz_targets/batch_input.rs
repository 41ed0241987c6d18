//! `--batch` line parser (ENGINE.md §10): never panics; an accepted line's settings are in
//! range and its error-free lines write as one JSON line.
#![no_main]
use k3::generate::batch_input::{parse_line, BatchDefaults};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let d = BatchDefaults::default();
    match parse_line(data, 3, "fuzz.jsonl", &d) {
        Ok(Some(req)) => {
            assert!(req.sampler.validate("fuzz").is_ok());
            assert!(req.stop.iter().all(|s| !s.is_empty()));
        }
        Ok(None) => {}
        Err(e) => {
            assert_eq!(e.exit_code(), 2);
            assert!(e.message.starts_with("fuzz.jsonl: line 3: "), "{}", e.message);
        }
    }
});
