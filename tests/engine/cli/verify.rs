//! `k3 verify` end to end (docs/verify.md) and the engine's SHA-256 against the `sha2` crate
//! and the system's `sha256sum`: a clean fixture passes, a flipped byte is caught by the sums
//! naming the shard, a truncated shard is caught without sums, `--write-sums` output is what
//! `sha256sum` prints.

use crate::support::{copy_checkpoint, fixture, run_k3, scratch_dir};
use k3::digest::sha256::{to_hex, Sha256};
use sha2::Digest as _;
use std::path::Path;
use std::process::Command;

const SHARD3: &str = "model-00003-of-00007.safetensors";

fn k3(args: &[&str]) -> (i32, String, String) {
    let out = run_k3(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The `sha256sum` list of `dir`'s files, in byte-wise name order, computed with `sha2`.
fn sha2_list(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            let d = sha2::Sha256::digest(std::fs::read(dir.join(n)).unwrap());
            let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}  {n}\n")
        })
        .collect()
}

#[test]
fn engine_sha256_equals_sha2_on_fixture_files_and_odd_lengths() {
    let dir = fixture("tiny-k3");
    for e in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        let want: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        assert_eq!(Sha256::digest(&bytes), want);
    }
    let data: Vec<u8> = (0..300u32).map(|i| (i * 31 + 7) as u8).collect();
    for n in 0..data.len() {
        let want: [u8; 32] = sha2::Sha256::digest(&data[..n]).into();
        assert_eq!(
            to_hex(&Sha256::digest(&data[..n])),
            to_hex(&want),
            "length {n}"
        );
    }
}

#[test]
fn clean_fixture_passes_and_says_what_cannot_be_checked_without_sums() {
    let dir = fixture("tiny-k3");
    let (code, out, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("7 shards"), "{out}");
    assert!(out.contains("headers, bounds and census ok"), "{out}");
    assert!(
        out.contains("without --sums, a byte flipped inside a tensor cannot be detected"),
        "{out}"
    );
}

#[test]
fn write_sums_equals_sha256sum_and_checks_clean() {
    let dir = copy_checkpoint("tiny-k3", "verify_write");
    let list = scratch_dir("verify_write_out").join("SHA256SUMS");
    let (code, out, err) = k3(&["verify", s(&dir), "--write-sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote "), "{out}");
    assert!(err.contains("MB/s") || err.contains(", -\n"), "{err}");
    let written = std::fs::read_to_string(&list).unwrap();
    assert_eq!(written, sha2_list(&dir));
    // The system tool agrees, where it exists.
    match Command::new("sha256sum")
        .arg("-c")
        .arg(&list)
        .current_dir(&dir)
        .output()
    {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout)),
        Err(_) => eprintln!("SKIPPED: sha256sum not found"),
    }
    if let Ok(o) = Command::new("sh")
        .arg("-c")
        .arg("LC_ALL=C sha256sum $(LC_ALL=C ls)")
        .current_dir(&dir)
        .output()
    {
        if o.status.success() {
            assert_eq!(String::from_utf8(o.stdout).unwrap(), written);
        }
    }
    let (code, out, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sha256: 9 files match"), "{out}");
}

#[test]
fn a_flipped_byte_is_caught_by_the_sums_naming_the_shard() {
    let dir = copy_checkpoint("tiny-k3", "verify_flip");
    let list = scratch_dir("verify_flip_out").join("SHA256SUMS");
    std::fs::write(&list, sha2_list(&dir)).unwrap();
    let p = dir.join(SHARD3);
    let mut b = std::fs::read(&p).unwrap();
    let at = b.len() - 1000; // inside a tensor, far from the header
    b[at] ^= 0x10;
    std::fs::write(&p, b).unwrap();
    // The structure is still fine: only the sums can see it.
    let (code, _, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{SHARD3}: SHA-256 mismatch")),
        "{err}"
    );
    assert!(err.contains("download this one file again"), "{err}");
}

#[test]
fn a_truncated_shard_is_caught_without_sums() {
    let dir = copy_checkpoint("tiny-k3", "verify_cut");
    let p = dir.join(SHARD3);
    let b = std::fs::read(&p).unwrap();
    std::fs::write(&p, &b[..b.len() - 4096]).unwrap();
    let (code, _, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(SHARD3), "{err}");
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn a_missing_shard_is_named_once_and_an_unneeded_one_only_noted() {
    let dir = copy_checkpoint("tiny-k3", "verify_missing");
    std::fs::remove_file(dir.join(SHARD3)).unwrap();
    let (code, _, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "shard {SHARD3} is not present (the index file maps 228 required tensors to it"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches(SHARD3).count(), 1, "{err}");
    // Shard 7 holds only vision tensors, which k3 does not use.
    let dir = copy_checkpoint("tiny-k3", "verify_missing_vision");
    std::fs::remove_file(dir.join("model-00007-of-00007.safetensors")).unwrap();
    let (code, out, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("note: 1 shard listed in model.safetensors.index.json is not present (model-00007-of-00007.safetensors); it holds no tensor k3 needs"),
        "{out}"
    );
}

/// A file the sums list names but the directory lacks is named, with what to do.
#[test]
fn a_listed_file_that_is_missing_is_named() {
    let dir = copy_checkpoint("tiny-k3", "verify_listed_missing");
    let list = scratch_dir("verify_listed_missing_out").join("SHA256SUMS");
    std::fs::write(&list, sha2_list(&dir)).unwrap();
    std::fs::remove_file(dir.join("model-00007-of-00007.safetensors")).unwrap();
    let (code, _, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("model-00007-of-00007.safetensors: listed in")
            && err.contains("download this file"),
        "{err}"
    );
}

#[test]
fn bad_sums_lists_and_flag_combinations_are_usage_errors() {
    let dir = fixture("tiny-k3");
    let scratch = scratch_dir("verify_bad_list");
    let list = scratch.join("bad");
    std::fs::write(&list, "not a checksum line\n").unwrap();
    let (code, _, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 1:"), "{err}");
    let (code, _, err) = k3(&["verify", s(&dir), "--sums", s(&list), "--write-sums", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not both"), "{err}");
    let (code, _, err) = k3(&["verify"]);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = k3(&["verify", "-h"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("usage: k3 verify"), "{out}");
}

/// A list written into the model directory itself leaves out itself and its temporary, so
/// checking the directory against it later passes.
#[test]
fn write_sums_inside_the_model_dir_skips_itself() {
    let dir = copy_checkpoint("tiny-k3", "verify_inside");
    let list = dir.join("SHA256SUMS");
    let (code, _, err) = k3(&["verify", s(&dir), "--write-sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(&list).unwrap();
    assert_eq!(written.lines().count(), 9, "{written}");
    assert!(!written.contains("SHA256SUMS"), "{written}");
    let (code, out, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sha256: 9 files match"), "{out}");
}

/// `metadata.total_size` is informational: a difference is a warning naming both figures.
#[test]
fn a_total_size_other_than_the_tensor_bytes_is_a_warning() {
    let dir = copy_checkpoint("tiny-k3", "verify_total");
    let p = dir.join("model.safetensors.index.json");
    let t = std::fs::read_to_string(&p).unwrap();
    assert!(t.contains("\"total_size\": 3760928"));
    std::fs::write(
        &p,
        t.replace("\"total_size\": 3760928", "\"total_size\": 3760929"),
    )
    .unwrap();
    let (code, out, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("metadata.total_size is 3760929 bytes but the shards' tensors hold 3760928"),
        "{out}"
    );
}

/// The text fixture with its tokenizer files, copied to `scratch`.
fn text_copy(scratch: &str) -> std::path::PathBuf {
    let dir = copy_checkpoint("tiny-k3-text", scratch);
    std::fs::copy(
        fixture("tiny-k3-text/tiktoken.model"),
        dir.join("tiktoken.model"),
    )
    .unwrap();
    dir
}

/// `--write-sums` naming a file verify reads (a shard, the config, the index, a tokenizer
/// file), by any spelling, symlink or hard link, is exit 2 and writes nothing; a new name
/// inside the model directory, or the list it wrote before, stays allowed.
#[test]
fn write_sums_never_overwrites_an_input() {
    let dir = text_copy("verify_out_input");
    let outside = scratch_dir("verify_out_input_links");
    let shard = dir.join("model-00002-of-00005.safetensors");
    std::os::unix::fs::symlink(&shard, outside.join("sym")).unwrap();
    std::fs::hard_link(&shard, outside.join("hard")).unwrap();
    std::fs::hard_link(dir.join("tiktoken.model"), outside.join("hard_tok")).unwrap();
    let before = sha2_list(&dir);
    let dotted = format!("{}/../verify_out_input/./config.json", s(&dir));
    let targets = [
        shard.clone(),
        dir.join("model-00005-of-00005.safetensors"),
        dir.join("config.json"),
        dir.join("model.safetensors.index.json"),
        dir.join("tiktoken.model"),
        dir.join("tokenizer_config.json"),
        dotted.into(),
        outside.join("sym"),
        outside.join("hard"),
        outside.join("hard_tok"),
    ];
    for t in &targets {
        let (code, _, err) = k3(&["verify", s(&dir), "--write-sums", s(t)]);
        assert_eq!(code, 2, "{}: {err}", t.display());
        assert!(err.contains("--write-sums"), "{err}");
        assert!(err.contains("an input"), "{err}");
        assert_eq!(sha2_list(&dir), before, "{}", t.display());
    }
    // A new name inside the model directory, then the same list again, are fine.
    let list = dir.join("SHA256SUMS");
    for _ in 0..2 {
        let (code, _, err) = k3(&["verify", s(&dir), "--write-sums", s(&list)]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sha256: 9 files match"), "{out}");
}

/// Tokenizer files in the model directory are loaded as a run loads them: a damaged one is
/// exit 2 naming it.
#[test]
fn a_broken_tokenizer_in_the_model_dir_is_named() {
    let dir = text_copy("verify_tok_ok");
    let (code, out, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("tokenizer: tiktoken.model and tokenizer_config.json load"),
        "{out}"
    );
    let dir = text_copy("verify_tok_truncated");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("tiktoken.model"))
        .unwrap();
    f.set_len(1_000_000).unwrap();
    let (code, _, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tiktoken.model"), "{err}");
    let dir = text_copy("verify_tok_config");
    std::fs::write(dir.join("tokenizer_config.json"), "{\n").unwrap();
    let (code, _, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tokenizer_config.json"), "{err}");
    let dir = text_copy("verify_tok_half");
    std::fs::remove_file(dir.join("tokenizer_config.json")).unwrap();
    let (code, _, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tokenizer_config.json"), "{err}");
}

/// Without the vision-only shard, the total size is not called a sign of another release,
/// and the shard count says how many are present.
#[test]
fn an_absent_vision_shard_is_counted_and_not_a_total_size_warning() {
    let dir = text_copy("verify_no_vision");
    std::fs::remove_file(dir.join("model-00005-of-00005.safetensors")).unwrap();
    let (code, out, err) = k3(&["verify", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("warning"), "{out}");
    assert!(!out.contains("another release"), "{out}");
    assert!(out.contains("4 of 5 shards present"), "{out}");
    assert!(
        out.contains("bytes are in the absent model-00005-of-00005.safetensors (not checked)"),
        "{out}"
    );
}

/// A file listed twice is counted once, or refused with both line numbers when the digests
/// differ; sha256sum's escaped lines (names with a backslash or newline) are read and written.
#[test]
fn duplicate_and_escaped_sums_lines() {
    let dir = copy_checkpoint("tiny-k3", "verify_dup");
    let list = scratch_dir("verify_dup_out").join("SHA256SUMS");
    let good = sha2_list(&dir);
    let first = good.lines().next().unwrap();
    let name = &first[66..];
    std::fs::write(&list, format!("{good}{}  ./{name}\n", &first[..64])).unwrap();
    let (code, out, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sha256: 9 files match"), "{out}");
    std::fs::write(&list, format!("{good}{}  {name}\n", "0".repeat(64))).unwrap();
    let (code, _, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("lines 1 and 10"), "{err}");
    assert!(err.contains("different digests"), "{err}");
    // Names sha256sum escapes.
    std::fs::write(dir.join("a\\b"), b"backslash").unwrap();
    std::fs::write(dir.join("c\nd"), b"newline").unwrap();
    let (code, _, err) = k3(&["verify", s(&dir), "--write-sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(&list).unwrap();
    assert!(
        written.contains("  a\\\\b\n") && written.contains("  c\\nd\n"),
        "{written}"
    );
    if let Ok(o) = Command::new("sha256sum")
        .args(["a\\b", "c\nd"])
        .current_dir(&dir)
        .output()
    {
        if o.status.success() {
            for l in String::from_utf8(o.stdout).unwrap().lines() {
                assert!(written.contains(&format!("{l}\n")), "{l:?} in {written}");
            }
        }
    }
    let (code, out, err) = k3(&["verify", s(&dir), "--sums", s(&list)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sha256: 11 files match"), "{out}");
}

// --- `k3 verify --trunk DIR [--against MODEL_DIR]`: every byte of a packed trunk ---

/// Packs `model` into a fresh scratch directory `name` (with the codec when `coded`).
fn packed(model: &Path, name: &str, coded: bool) -> std::path::PathBuf {
    let out = scratch_dir(name).join("trunk");
    let mut args = vec!["pack-trunk", s(model), s(&out), "--quiet"];
    if coded {
        args.extend(["--codec", "bf16-huffman"]);
    }
    let (code, _, err) = k3(&args);
    assert_eq!(code, 0, "{err}");
    out
}

/// `trunk.json` of `trunk` as JSON.
fn layout(trunk: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(trunk.join("trunk.json")).unwrap()).unwrap()
}

/// XORs byte `at` of `path` with 0x10.
fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x10;
    std::fs::write(path, b).unwrap();
}

/// Layer 5's `(file_off, run_start, shard, run length)` in `trunk.json`.
fn layer5(trunk: &Path) -> (u64, u64, String, u64) {
    let j = layout(trunk);
    let l = &j["layers"][5];
    let run_len = l["tensors"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["off"].as_u64().unwrap() + t["nbytes"].as_u64().unwrap())
        .max()
        .unwrap();
    (
        l["file_off"].as_u64().unwrap(),
        l["run_start"].as_u64().unwrap(),
        l["shard"].as_str().unwrap().to_string(),
        run_len,
    )
}

/// `trunk.json` rewritten without its sums, as a k3 before them wrote it.
fn strip_sums(trunk: &Path) {
    let mut j = layout(trunk);
    for l in j["layers"].as_array_mut().unwrap() {
        let o = l.as_object_mut().unwrap();
        o.remove("sha256");
        o.remove("block_sha256");
    }
    std::fs::write(trunk.join("trunk.json"), j.to_string()).unwrap();
}

#[test]
fn a_clean_packed_trunk_matches_its_sums_and_the_shards() {
    let model = fixture("tiny-k3");
    for coded in [false, true] {
        let trunk = packed(&model, &format!("verify_trunk_clean_{coded}"), coded);
        let (code, out, err) = k3(&["verify", "--trunk", s(&trunk)]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("13 layers") && out.contains("every run matches its SHA-256"),
            "{out}"
        );
        // progress with throughput on stderr, the total on stdout
        assert!(
            err.contains("[13/13] layer ") && err.contains("MB/s"),
            "{err}"
        );
        assert!(out.contains("trunk: ") && out.contains(" GB in "), "{out}");
        if coded {
            assert!(out.contains("bf16-huffman"), "{out}");
        }
        let (code, out, err) = k3(&["verify", "--trunk", s(&trunk), "--against", s(&model)]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("and the shards of"), "{out}");
    }
}

#[test]
fn a_byte_flipped_in_the_middle_of_a_plain_run_names_the_layer_and_offset() {
    let model = fixture("tiny-k3");
    let trunk = packed(&model, "verify_trunk_flip", false);
    let (file_off, run_start, shard, run_len) = layer5(&trunk);
    // Far from the 4 KiB edges that opening a trunk checks: a run still opens and computes.
    let rel = run_len / 2;
    assert!(rel > 4096 && rel + 4096 < run_len);
    flip(&trunk.join("trunk.bin"), file_off + rel);
    let run = k3(&[
        s(&model),
        "--trunk",
        s(&trunk),
        "--ids",
        "1,2",
        "--gen",
        "1",
    ]);
    assert_eq!(run.0, 0, "opening checks only the edges: {}", run.2);
    let (code, _, err) = k3(&["verify", "--trunk", s(&trunk)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("trunk.bin: layer 5: the run")
            && err.contains(&format!("trunk.bin offsets {file_off}.."))
            && err.contains("does not match its SHA-256"),
        "{err}"
    );
    assert!(
        !err.contains("[13/13]"),
        "stops at the damaged layer: {err}"
    );
    // With the shards, the first differing byte itself.
    let (code, _, err) = k3(&["verify", "--trunk", s(&trunk), "--against", s(&model)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "layer 5: trunk.bin offset {} (run byte {rel}, tensor language_model.model.layers.5.",
            file_off + rel
        )) && err.contains(&format!(
            "differs from {shard} (offset {})",
            run_start + rel
        )) && err.contains("trunk.bin is damaged"),
        "{err}"
    );
}

#[test]
fn a_byte_flipped_in_a_coded_block_names_the_layer_block_and_offset() {
    let model = fixture("tiny-k3");
    let trunk = packed(&model, "verify_trunk_coded_flip", true);
    let j = layout(&trunk);
    let blocks = j["layers"][5]["blocks"].as_array().unwrap();
    // the largest coded block ([start, len, off, clen], clen < len)
    let b: Vec<u64> = blocks
        .iter()
        .map(|b| {
            let v: Vec<u64> = b
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            v
        })
        .filter(|b| b[3] < b[1])
        .max_by_key(|b| b[1])
        .expect("a coded block in layer 5");
    assert!(b[1] > 4096, "{b:?}");
    // a sign/mantissa byte: the block still decodes, only the sum sees it
    flip(&trunk.join("trunk.bin"), b[2] + 172 + 10);
    let (code, _, err) = k3(&["verify", "--trunk", s(&trunk)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("trunk.bin: layer 5: block ")
            && err.contains(&format!("at trunk.bin offset {}", b[2]))
            && err.contains(&format!("run bytes {}..{}", b[0], b[0] + b[1]))
            && err.contains("does not match its SHA-256"),
        "{err}"
    );
}

/// The bug: a damaged run sum in trunk.json was blamed on trunk.bin ("trunk.bin is damaged in
/// this run") although every coded block matched its own sum. Now trunk.json is named, by the
/// block sums alone, or by the shards with --against (coded or not).
#[test]
fn a_damaged_run_sum_names_trunk_json_not_trunk_bin() {
    let model = fixture("tiny-k3");
    for coded in [false, true] {
        let trunk = packed(&model, &format!("verify_trunk_sum_{coded}"), coded);
        let mut j = layout(&trunk);
        let sum = j["layers"][5]["sha256"].as_str().unwrap().to_string();
        let first = if sum.starts_with('0') { "1" } else { "0" };
        j["layers"][5]["sha256"] = serde_json::json!(format!("{first}{}", &sum[1..]));
        std::fs::write(trunk.join("trunk.json"), j.to_string()).unwrap();
        let json = s(&trunk.join("trunk.json")).to_string();
        let mut runs = vec![vec!["verify", "--trunk", s(&trunk), "--against", s(&model)]];
        if coded {
            runs.push(vec!["verify", "--trunk", s(&trunk)]);
        }
        for args in runs {
            let (code, _, err) = k3(&args);
            assert_eq!(code, 2, "{err}");
            assert!(
                err.contains(&format!("{json}: layer 5: the run"))
                    && err.contains("trunk.json is damaged")
                    && !err.contains("trunk.bin is damaged"),
                "{args:?}: {err}"
            );
        }
        if !coded {
            // one sum and no shards: either file may be at fault, and the message says both
            let (code, _, err) = k3(&["verify", "--trunk", s(&trunk)]);
            assert_eq!(code, 2, "{err}");
            assert!(err.contains("or trunk.json's sum of it is"), "{err}");
        }
    }
}

#[test]
fn against_a_shard_whose_byte_differs_names_the_shard() {
    let model = copy_checkpoint("tiny-k3", "verify_trunk_shard_ckpt");
    for coded in [false, true] {
        let trunk = packed(&model, &format!("verify_trunk_shard_{coded}"), coded);
        let (_, run_start, shard, run_len) = layer5(&trunk);
        let at = run_start + run_len / 2;
        flip(&model.join(&shard), at);
        let (code, _, err) = k3(&["verify", "--trunk", s(&trunk), "--against", s(&model)]);
        flip(&model.join(&shard), at); // back, for the next round
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("{shard}: byte at offset {at} (tensor ")),
            "{err}"
        );
        assert!(
            err.contains("layer 5")
                && err.contains("matches its SHA-256 in trunk.json")
                && err.contains("the shard changed"),
            "{err}"
        );
        // the trunk alone is fine
        let (code, _, err) = k3(&["verify", "--trunk", s(&trunk)]);
        assert_eq!(code, 0, "{err}");
    }
}

#[test]
fn an_old_manifest_without_sums_is_verified_against_the_shards_and_says_so() {
    let model = fixture("tiny-k3");
    for coded in [false, true] {
        let trunk = packed(&model, &format!("verify_trunk_old_{coded}"), coded);
        strip_sums(&trunk);
        let (code, _, err) = k3(&["verify", "--trunk", s(&trunk)]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("trunk.json: no SHA-256 sums") && err.contains("give --against MODEL_DIR"),
            "{err}"
        );
        let (code, out, err) = k3(&["verify", "--trunk", s(&trunk), "--against", s(&model)]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("no SHA-256 sums") && out.contains("against the shards of"),
            "{out}"
        );
        assert!(out.contains("every run equals the shards of"), "{out}");
        // A difference then names both files: nothing tells which one is damaged.
        let (file_off, _, shard, run_len) = layer5(&trunk);
        if !coded {
            flip(&trunk.join("trunk.bin"), file_off + run_len / 2);
            let (code, _, err) = k3(&["verify", "--trunk", s(&trunk), "--against", s(&model)]);
            assert_eq!(code, 2, "{err}");
            assert!(
                err.contains("layer 5: trunk.bin offset")
                    && err.contains(&format!("differs from {}", s(&model.join(&shard))))
                    && err.contains("no SHA-256 sums to tell which file is damaged"),
                "{err}"
            );
        }
    }
}

#[test]
fn bad_trunk_flags_are_refused_naming_the_flag() {
    let model = fixture("tiny-k3");
    let trunk = packed(&model, "verify_trunk_flags", false);
    let cases: [(&[&str], &str); 6] = [
        (
            &["verify", s(&model), "--against", s(&model)],
            "flag `--against`",
        ),
        (
            &["verify", "--trunk", s(&trunk), "--sums", "x"],
            "flag `--sums`",
        ),
        (
            &["verify", "--trunk", s(&trunk), "--write-sums", "x"],
            "flag `--write-sums`",
        ),
        (&["verify", "--trunk"], "flag `--trunk` needs a value"),
        (
            &["verify", "--trunk", "/nonexistent/trunk"],
            "flag `--trunk`: /nonexistent/trunk is not a directory",
        ),
        (
            &["verify", s(&model), "--trunk", s(&trunk)],
            "give the model directory to compare the trunk with as --against MODEL_DIR",
        ),
    ];
    for (args, want) in cases {
        let (code, _, err) = k3(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let (code, _, err) = k3(&[
        "verify",
        "--trunk",
        s(&trunk),
        "--against",
        "/nonexistent/m",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("flag `--against`"), "{err}");
    // A trunk packed from another model is refused against it, naming the layout.
    let (code, _, err) = k3(&[
        "verify",
        "--trunk",
        s(&trunk),
        "--against",
        s(&fixture("tiny-k3-text")),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("trunk.json"), "{err}");
    // `k3 help verify` documents both flags.
    let (code, out, _) = k3(&["help", "verify"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--trunk DIR") && out.contains("--against MODEL_DIR"),
        "{out}"
    );
}

#[test]
fn a_coded_trunk_json_with_a_block_sum_missing_is_refused_naming_the_key() {
    let model = fixture("tiny-k3");
    let trunk = packed(&model, "verify_trunk_block_sums", true);
    let mut j = layout(&trunk);
    j["layers"][3]["block_sha256"].as_array_mut().unwrap().pop();
    std::fs::write(trunk.join("trunk.json"), j.to_string()).unwrap();
    let (code, _, err) = k3(&["verify", "--trunk", s(&trunk)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("trunk.json: layer 3: `block_sha256`: ")
            && err.contains("expected one per block"),
        "{err}"
    );
}
