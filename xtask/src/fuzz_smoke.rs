//! `cargo xtask fuzz-smoke [--seconds N] [--target NAME]...`: runs every cargo-fuzz target of
//! `fuzz/` for N seconds each (default 30) on the stable toolchain (`--sanitizer none`) and
//! fails if any target finds a crash. Installs cargo-fuzz (`cargo install cargo-fuzz --locked`)
//! when it is missing, so a fresh CI machine can run it.
//!
//! Each target fuzzes `fuzz/corpus/<target>/` (kept between runs, not committed) seeded from
//! `fuzz/seeds/<target>/` (committed). A crash input lands in `fuzz/artifacts/<target>/`; turn it
//! into a regression test in the matching `tests/*.rs` before fixing the bug.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Every target in fuzz/Cargo.toml.
pub const TARGETS: [&str; 14] = [
    "json",
    "config",
    "safetensors_header",
    "cli_args",
    "tokenizer",
    "state_file",
    "batch_input",
    "chat_reply",
    "http_request",
    "serve_request",
    "messages_request",
    "responses_request",
    "constrain_schema",
    "constrain_mask",
];

const DEFAULT_SECONDS: u64 = 30;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the repository")
        .to_path_buf()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

fn ensure_cargo_fuzz() -> Result<(), String> {
    let ok = Command::new(cargo())
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return Ok(());
    }
    eprintln!(
        "fuzz-smoke: cargo-fuzz not found; installing it (cargo install cargo-fuzz --locked)"
    );
    let st = Command::new(cargo())
        .args(["install", "cargo-fuzz", "--locked"])
        .status()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err("cargo install cargo-fuzz failed".into())
    }
}

/// Runs the task with the arguments after `fuzz-smoke`; returns the process exit code.
pub fn run(args: &[String]) -> i32 {
    let mut seconds = DEFAULT_SECONDS;
    let mut targets: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let (flag, inline) = match args[i].split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (args[i].clone(), None),
        };
        let mut value = || -> Option<String> {
            if inline.is_some() {
                return inline.clone();
            }
            i += 1;
            args.get(i).cloned()
        };
        match flag.as_str() {
            "--seconds" => match value().and_then(|v| v.parse::<u64>().ok()) {
                Some(s) if s > 0 => seconds = s,
                _ => {
                    eprintln!("fuzz-smoke: --seconds needs a positive integer");
                    return 2;
                }
            },
            "--target" => match value() {
                Some(t) if TARGETS.contains(&t.as_str()) => targets.push(t),
                other => {
                    eprintln!(
                        "fuzz-smoke: --target must be one of {} (got {other:?})",
                        TARGETS.join(", ")
                    );
                    return 2;
                }
            },
            other => {
                eprintln!(
                    "fuzz-smoke: unknown argument `{other}` (usage: cargo xtask fuzz-smoke [--seconds N] [--target NAME]...)"
                );
                return 2;
            }
        }
        i += 1;
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|s| s.to_string()).collect();
    }
    if let Err(e) = ensure_cargo_fuzz() {
        eprintln!("fuzz-smoke: {e}");
        return 1;
    }
    let fuzz_dir = repo_root().join("fuzz");
    let mut failed = Vec::new();
    for t in &targets {
        let corpus = fuzz_dir.join("corpus").join(t);
        let seeds = fuzz_dir.join("seeds").join(t);
        if let Err(e) = std::fs::create_dir_all(&corpus) {
            eprintln!("fuzz-smoke: cannot create {}: {e}", corpus.display());
            return 1;
        }
        eprintln!("fuzz-smoke: {t}: {seconds} s");
        let start = Instant::now();
        let mut cmd = Command::new(cargo());
        cmd.current_dir(&fuzz_dir)
            .args(["fuzz", "run", t, "--sanitizer", "none"])
            .arg(&corpus)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-timeout=10")
            .arg("-rss_limit_mb=4096")
            .arg("-print_final_stats=1");
        let status = cmd.status();
        let secs = start.elapsed().as_secs_f64();
        match status {
            Ok(s) if s.success() => eprintln!("fuzz-smoke: {t}: ok ({secs:.0} s)"),
            Ok(s) => {
                eprintln!(
                    "fuzz-smoke: {t}: FAILED ({s}); crash inputs are in {}",
                    fuzz_dir.join("artifacts").join(t).display()
                );
                failed.push(t.clone());
            }
            Err(e) => {
                eprintln!("fuzz-smoke: {t}: cannot run cargo fuzz: {e}");
                failed.push(t.clone());
            }
        }
    }
    if failed.is_empty() {
        eprintln!(
            "fuzz-smoke: {} targets ran {seconds} s each without a crash",
            targets.len()
        );
        0
    } else {
        eprintln!("fuzz-smoke: crashes in {}", failed.join(", "));
        1
    }
}
