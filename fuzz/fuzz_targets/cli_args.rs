//! Shared flag parser (src/cli/args.rs): never panics on any argv. Arguments are the input
//! split at NUL bytes (invalid UTF-8 included).
#![no_main]
use k3::cli::args::{Args, Spec};
use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

const SPECS: [Spec; 5] = [
    Spec::Switch("json"),
    Spec::Value("gen"),
    Spec::Value("mem-gb"),
    Spec::Repeat("stop-id"),
    Spec::Switch("quiet"),
];

fuzz_target!(|data: &[u8]| {
    let argv: Vec<OsString> = data
        .split(|&b| b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    match Args::parse(&argv, &SPECS) {
        Ok(a) => {
            let _ = a.switch("json");
            let _ = a.value("gen");
            let _ = a.value_os("mem-gb");
            let _ = a.values("stop-id");
            let _ = a.parsed::<u32>("gen", "an integer");
            let _ = a.parsed::<f64>("mem-gb", "a number");
            let _ = a.present(&["json", "quiet", "gen"]);
            assert!(a.positional.len() <= argv.len());
        }
        Err(e) => assert_eq!(e.exit_code(), 2),
    }
});
