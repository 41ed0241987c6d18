//! State-file reader (FORMATS.md §9): never panics, refuses with exit 2 naming the input, and
//! an accepted file writes back to exactly the same bytes.
#![no_main]
use k3::generate::state_file::{parse, to_bytes, StateIdentity};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A small model shape (the seed in fuzz/seeds/state_file matches it).
    let id = StateIdentity {
        canonical: "a=1;".into(),
        weights_tag: 7,
        n_layers: 2,
        n_kda: 1,
        n_mla: 1,
        hk: 1,
        dk: 2,
        kc: 2,
        mla_row: 2,
        vocab_size: 16,
    };
    match parse(data, "fuzz.state", &id) {
        Ok(st) => {
            let back = to_bytes(&id, &st).expect("a loaded state has the model's shape");
            assert_eq!(back, data, "an accepted state file must write back unchanged");
        }
        Err(e) => {
            assert!(matches!(e.exit_code(), 2 | 4), "{}", e.message);
            assert!(e.message.starts_with("fuzz.state: "), "{}", e.message);
        }
    }
});
