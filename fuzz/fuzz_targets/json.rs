//! JSON scanner: never panics; a parsed document survives write → parse unchanged, and the
//! pull API accepts exactly what the DOM accepts.
#![no_main]
use k3::json::{self, Scanner};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dom = json::parse(data);
    // The pull API with skip_value agrees on validity except for duplicate names, which only
    // the DOM checks.
    let pulled = Scanner::new(data).and_then(|mut s| {
        s.skip_value()?;
        s.finish()
    });
    if dom.is_ok() {
        assert!(pulled.is_ok(), "DOM accepted what the pull API refused");
    } else if pulled.is_err() {
        let e = dom.as_ref().unwrap_err();
        assert!(e.offset <= data.len());
    }
    if let Ok(v) = dom {
        for text in [v.to_json(), v.to_json_pretty()] {
            let back = json::parse(text.as_bytes()).expect("writer output must parse");
            assert_eq!(back, v, "round trip changed the document");
        }
    }
});
