//! `k3 serve --prefix-cache DIR` (ENGINE.md §9, issue 24 item 3): prompt snapshots kept as
//! state files survive a restart and give the replies a cold server gives; a damaged file is
//! removed, another model's file is left alone, the size bound evicts and a full disk leaves
//! no half file; bad flag values are exit 2 naming the flag.

use super::support::*;
use crate::support::{fixture, run_k3, scratch_dir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A request with a system prompt (the "preamble") and one user turn.
fn body(user: &str) -> Value {
    json!({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a careful assistant. Answer briefly; use the tools when asked; never guess file contents."},
            {"role": "user", "content": user},
        ],
        "max_tokens": 6,
        "temperature": 0,
    })
}

/// The cache files (`*.k3state`) and leftovers (anything else) in `dir`.
fn listing(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut files = Vec::new();
    let mut other = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "k3state") {
            files.push(p);
        } else {
            other.push(p);
        }
    }
    files.sort();
    (files, other)
}

/// Waits (bounded) until `dir` holds `n` cache files and nothing else (the writer is done).
fn wait_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    let until = Instant::now() + WAIT;
    loop {
        let (files, other) = listing(dir);
        if files.len() == n && other.is_empty() {
            return files;
        }
        assert!(
            Instant::now() < until,
            "{}: expected {n} cache files, found {files:?} and {other:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cached(r: &Value) -> u64 {
    r["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

fn ok(s: &Server, b: &Value) -> Value {
    let r = post(s, "/v1/chat/completions", b);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn with_cache(dir: &Path, extra: &[&str]) -> Server {
    let d = dir.to_str().unwrap();
    let mut args = vec!["--prefix-cache", d];
    args.extend_from_slice(extra);
    start(&args, &[])
}

#[test]
fn a_held_prefix_survives_a_restart_bit_identical() {
    let dir = scratch_dir("prefix-cache-restart");
    let first = body("Which files are in the repository?");
    let mut longer = first.clone();
    longer["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "I will look."}),
        json!({"role": "user", "content": "Go on."}),
    ]);
    let cold = start(&[], &[]);
    let (want_first, want_longer) = (ok(&cold, &first), ok(&cold, &longer));
    drop(cold);

    let s = with_cache(&dir, &[]);
    let a = ok(&s, &first);
    assert_eq!(cached(&a), 0);
    assert_eq!(comparable(a), comparable(want_first.clone()));
    let files = wait_files(&dir, 1);
    drop(s);

    // a new server: the first request is read from disk (all but the pending last id)
    let s = with_cache(&dir, &[]);
    let b = ok(&s, &first);
    assert!(cached(&b) > 0, "no disk hit: {b}");
    assert_eq!(comparable(b), comparable(want_first));
    // a longer conversation continues from the file as well
    let c = ok(&s, &longer);
    assert!(cached(&c) > 0, "no hit for the continuation: {c}");
    assert_eq!(comparable(c), comparable(want_longer));
    wait_files(&dir, 2);
    drop(s);

    // the file is an ordinary state file: `k3 run --load-state` continues it
    let out = run_k3([
        "run".as_ref(),
        fixture(MODEL).as_os_str(),
        "--load-state".as_ref(),
        files[0].as_os_str(),
        "--gen".as_ref(),
        "2".as_ref(),
        "--threads".as_ref(),
        "1".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies `src` to `dir/name` with `edit` applied to its bytes.
fn variant(src: &Path, dir: &Path, name: &str, edit: impl Fn(&mut Vec<u8>)) -> PathBuf {
    let mut b = std::fs::read(src).unwrap();
    edit(&mut b);
    let p = dir.join(name);
    std::fs::write(&p, b).unwrap();
    p
}

#[test]
fn damaged_files_are_removed_and_other_models_files_left_alone() {
    let dir = scratch_dir("prefix-cache-refusals");
    let req = body("Read the file src/main.rs.");
    let s = with_cache(&dir, &[]);
    let want = ok(&s, &req);
    let good = wait_files(&dir, 1).remove(0);
    drop(s);
    // another model (fingerprint), another engine version, other weights: left alone
    let foreign = variant(&good, &dir, "0000000000000001.k3state", |b| b[16] ^= 1);
    let version = variant(&good, &dir, "0000000000000002.k3state", |b| b[8] = 2);
    let weights = variant(&good, &dir, "0000000000000003.k3state", |b| b[72] ^= 1);
    // this model's, with a header that does not match its size: removed at start
    let short = variant(&good, &dir, "0000000000000004.k3state", |b| b.truncate(300));
    // this model's, with a flipped body byte: found at use by the checksum, removed
    let mut b = std::fs::read(&good).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    std::fs::write(&good, b).unwrap();

    let s = with_cache(&dir, &[]);
    let mut seen = Vec::new();
    s.wait_log(&mut seen, |l| l.contains("ready on"));
    let r = ok(&s, &req);
    assert_eq!(cached(&r), 0, "a damaged file was used: {r}");
    assert_eq!(comparable(r), comparable(want));
    s.wait_log(&mut seen, |l| l.contains("removing a damaged file"));
    let log = seen.join("\n");
    for (p, why) in [
        (&foreign, "another model"),
        (&version, "state version 2"),
        (&weights, "other weights"),
    ] {
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(
            log.lines().any(|l| l.contains(name) && l.contains(why)),
            "{name}: no `{why}` line in\n{log}"
        );
        assert!(p.exists(), "{name} was removed");
    }
    assert!(!short.exists(), "the truncated file is still there\n{log}");
    assert!(log.contains("0000000000000004.k3state"), "{log}");
    // the damaged file was replaced by a good one for the same prompt
    drop(s);
    let s = with_cache(&dir, &[]);
    let r = ok(&s, &req);
    assert!(cached(&r) > 0, "{r}");
}

#[test]
fn the_size_bound_evicts_and_a_full_disk_leaves_no_half_file() {
    // one file of these prompts is about 49 kB: 0.00008 GB holds one, not two
    let dir = scratch_dir("prefix-cache-bound");
    let s = with_cache(&dir, &["--prefix-cache-gb", "0.00008"]);
    let one = body("First question about the build.");
    let two = body("Second question, about the tests instead.");
    ok(&s, &one);
    let first = wait_files(&dir, 1);
    ok(&s, &two);
    let now = wait_files(&dir, 1);
    assert_ne!(first, now, "the older file was not evicted");
    drop(s);

    // a bound below one file: nothing is written, the replies stay
    let small = scratch_dir("prefix-cache-small");
    let s = with_cache(&small, &["--prefix-cache-gb", "0.00001"]);
    let r = ok(&s, &one);
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(listing(&small), (vec![], vec![]));
    drop(s);

    // a full disk: the temporary is a link to /dev/full; the write fails, nothing is left
    // under the cache name and the server goes on
    if !Path::new("/dev/full").exists() {
        return;
    }
    let full = scratch_dir("prefix-cache-full");
    let name = first[0].file_name().unwrap().to_str().unwrap().to_string();
    std::os::unix::fs::symlink("/dev/full", full.join(format!("{name}.tmp"))).unwrap();
    let s = with_cache(&full, &[]);
    let mut seen = Vec::new();
    ok(&s, &one);
    s.wait_log(&mut seen, |l| l.contains("prefix cache: not written"));
    assert_eq!(listing(&full), (vec![], vec![]), "{seen:?}");
    let r = ok(&s, &two);
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    wait_files(&full, 1);
}

#[test]
fn bad_prefix_cache_flags_are_refused_naming_the_flag() {
    let file = fixture(MODEL).join("config.json");
    let file = file.to_str().unwrap();
    let dir = scratch_dir("prefix-cache-flags");
    let d = dir.to_str().unwrap();
    for (args, flag) in [
        (
            vec!["--prefix-cache", d, "--prefix-cache-gb", "0"],
            "--prefix-cache-gb 0",
        ),
        (
            vec!["--prefix-cache", d, "--prefix-cache-gb", "-1"],
            "--prefix-cache-gb -1",
        ),
        (
            vec!["--prefix-cache", d, "--prefix-cache-gb", "lots"],
            "--prefix-cache-gb lots",
        ),
        (
            vec!["--prefix-cache", d, "--prefix-cache-gb", "nan"],
            "--prefix-cache-gb nan",
        ),
        (vec!["--prefix-cache-gb", "1"], "--prefix-cache-gb"),
        (vec!["--prefix-cache", ""], "--prefix-cache"),
        (vec!["--prefix-cache", file], "--prefix-cache"),
    ] {
        let (code, err) = refused(&args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("`{flag}")), "{args:?}: {err}");
    }
}
