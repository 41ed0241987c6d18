//! `k3 inspect` end to end (the binary, optionally under $K3_TEST_RUNNER): both fixtures, the
//! JSON form, and exit 2 with a precise message for every kind of bad input — never a panic.

use crate::support;

use k3::json::{self, Value};
use std::path::Path;
use support::{copy_checkpoint, fixture, raw_safetensors, run_k3};

fn ok(args: &[&str]) -> String {
    let out = run_k3(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `k3 inspect <dir>` expecting exit 2 with every fragment on stderr and no panic.
fn exit2(dir: &Path, fragments: &[&str]) -> String {
    let out = run_k3([Path::new("inspect"), dir]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.starts_with("k3: error: "), "{stderr}");
    for f in fragments {
        assert!(stderr.contains(f), "stderr lacks {f:?}:\n{stderr}");
    }
    stderr
}

#[test]
fn inspect_tiny_k3() {
    let dir = fixture("tiny-k3");
    let out = ok(&["inspect", dir.to_str().unwrap()]);
    assert!(out.contains("config: nested, hidden 128, layers 13, vocab 512, KDA 9 (4 heads x 16), MLA 4 (4 heads), experts 8 top-2 shared 2, latent 64"), "{out}");
    assert!(out.contains("\nlayer map: KKKMKKKMKKKMM\n"), "{out}");
    assert!(
        out.contains("AttnRes boundaries: 0,3,6,9,12 (block 3, 5 snapshots)"),
        "{out}"
    );
    assert!(out.contains("dense layers: 0; MoE layers: 1..12"), "{out}");
    assert!(
        out.contains("trunk weights 2.87 MB (13 layers) = 2870784 bytes; contiguous runs 13/13"),
        "{out}"
    );
    assert!(
        out.contains("largest layer run: layer 1, 227360 bytes"),
        "{out}"
    );
    assert!(
        out.contains("experts: 96/96 present x 6528 bytes = 626688 bytes; contiguous 96/96"),
        "{out}"
    );
    assert!(
        out.contains("config fingerprint: efcb9cf199d2f7f5"),
        "{out}"
    );
    // FNV-1a-64 over the headers of shards 1-6, computed independently (Python).
    assert!(out.contains("weights tag: 308b2ffe03020781"), "{out}");
    assert!(out.contains("census: ok"), "{out}");
    assert!(!out.contains(" NO: "), "{out}");
}

#[test]
fn inspect_tiny_k3_text() {
    let dir = fixture("tiny-k3-text");
    let out = ok(&["inspect", dir.to_str().unwrap()]);
    assert!(out.contains("\nlayer map: KKMKM\n"), "{out}");
    assert!(
        out.contains("AttnRes boundaries: 0,2,4 (block 2, 3 snapshots)"),
        "{out}"
    );
    assert!(out.contains("vocab 163840"), "{out}");
    assert!(out.contains("contiguous runs 5/5"), "{out}");
    assert!(
        out.contains("experts: 32/32 present x 1632 bytes = 52224 bytes; contiguous 32/32"),
        "{out}"
    );
    assert!(out.contains("census: ok"), "{out}");
}

#[test]
fn inspect_json() {
    let dir = fixture("tiny-k3");
    let out = ok(&["inspect", dir.to_str().unwrap(), "--json"]);
    let v = json::parse(out.as_bytes()).unwrap();
    let cfg = v.get("config").unwrap();
    assert_eq!(
        cfg.get("layer_map").unwrap().as_str(),
        Some("KKKMKKKMKKKMM")
    );
    assert_eq!(cfg.get("config_shape").unwrap().as_str(), Some("nested"));
    let b: Vec<u64> = cfg
        .get("attn_res_boundaries_zero_based")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_number().unwrap().as_u64().unwrap())
        .collect();
    assert_eq!(b, [0, 3, 6, 9, 12]);
    let l = v.get("ledger").unwrap();
    assert_eq!(l.get("trunk_contiguous"), Some(&Value::Bool(true)));
    assert_eq!(
        l.get("experts").unwrap().get("all_contiguous"),
        Some(&Value::Bool(true))
    );
    assert_eq!(l.get("layers").unwrap().as_array().unwrap().len(), 13);
    assert_eq!(
        l.get("total_bytes").unwrap().as_number().unwrap().as_u64(),
        Some(3_760_928)
    );
    assert_eq!(v.get("census").unwrap().get("ok"), Some(&Value::Bool(true)));
    assert_eq!(
        v.get("checkpoint")
            .unwrap()
            .get("weights_tag")
            .unwrap()
            .as_str(),
        Some("308b2ffe03020781")
    );
    // A flag before the directory works too.
    let out2 = ok(&["inspect", "--json", dir.to_str().unwrap()]);
    assert_eq!(out, out2);
}

#[test]
fn usage_errors_exit_2() {
    for (args, frag) in [
        (vec!["inspect"], "inspect: missing <model_dir>"),
        (vec!["inspect", "a", "b"], "expected one <model_dir>, got 2"),
        (
            vec!["inspect", "/nonexistent/model"],
            "/nonexistent/model: not a directory",
        ),
        (vec!["inspect", ".", "--bogus"], "unknown flag `--bogus`"),
        (
            vec!["inspect", ".", "--json=1"],
            "flag `--json` takes no value",
        ),
    ] {
        let out = run_k3(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(frag), "{args:?}: {stderr}");
    }
}

const SHARD2: &str = "model-00002-of-00007.safetensors";

/// Replaces a shard's header text (the data section is kept).
fn rewrite_header(path: &Path, f: impl FnOnce(String) -> String) {
    let file = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let h = String::from_utf8(file[8..8 + n].to_vec()).unwrap();
    std::fs::write(path, raw_safetensors(&f(h), &file[8 + n..])).unwrap();
}

#[test]
fn malformed_config_exits_2_naming_file_and_key() {
    let dir = copy_checkpoint("tiny-k3", "insp_cfg");
    let cfg = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("\"hidden_size\": 128", "\"hidden_size\": \"128\""),
    )
    .unwrap();
    exit2(
        &dir,
        &[&format!(
            "{}: text_config.hidden_size: expected int, found string",
            cfg.display()
        )],
    );
    std::fs::write(&cfg, &text[..text.len() / 2]).unwrap();
    exit2(&dir, &[&format!("{}: invalid JSON at byte", cfg.display())]);
    std::fs::remove_file(&cfg).unwrap();
    exit2(&dir, &["config.json: cannot read config"]);
}

#[test]
fn malformed_headers_exit_2_with_precise_messages() {
    type Corrupt = fn(&Path);
    let cases: Vec<(&str, Corrupt, &str)> = vec![
        (
            "truncated",
            |p| {
                let f = std::fs::read(p).unwrap();
                std::fs::write(p, &f[..f.len() - 100]).unwrap();
            },
            "run past the end of the",
        ),
        (
            "truncated_prefix",
            |p| std::fs::write(p, [1u8, 2, 3]).unwrap(),
            "file is 3 bytes, too short",
        ),
        (
            "absurd_length",
            |p| {
                let mut f = std::fs::read(p).unwrap();
                f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                std::fs::write(p, f).unwrap();
            },
            "header length N = 18446744073709551615 exceeds the limit of 100000000 bytes",
        ),
        (
            "overlapping",
            |p| {
                rewrite_header(p, |h| {
                    h.replace(
                        "\"data_offsets\":[2048,2176]",
                        "\"data_offsets\":[2000,2128]",
                    )
                })
            },
            "overlaps tensor",
        ),
        (
            "out_of_range",
            |p| {
                rewrite_header(p, |h| {
                    h.replace(
                        "\"data_offsets\":[0,2048]",
                        "\"data_offsets\":[9000000,9002048]",
                    )
                })
            },
            "data_offsets [9000000, 9002048] run past the end",
        ),
        (
            "bad_dtype",
            |p| {
                rewrite_header(p, |h| {
                    h.replacen("\"dtype\":\"BF16\"", "\"dtype\":\"BF17\"", 1)
                })
            },
            "unknown dtype \"BF17\"",
        ),
        (
            "lone_surrogate",
            |p| {
                rewrite_header(p, |h| {
                    h.replacen("input_layernorm", "input_\\udc00layernorm", 1)
                })
            },
            "lone low surrogate escape \\uDC00",
        ),
        (
            "duplicate",
            |p| {
                rewrite_header(p, |h| {
                    h.replacen(
                        "layers.1.mlp_res_norm.weight",
                        "layers.1.input_layernorm.weight",
                        1,
                    )
                })
            },
            "duplicate tensor name \"language_model.model.layers.1.input_layernorm.weight\"",
        ),
        (
            "hole",
            |p| {
                let f = std::fs::read(p).unwrap();
                let n = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
                let mut data = f[8 + n..].to_vec();
                data.extend_from_slice(&[0; 16]);
                let h = String::from_utf8(f[8..8 + n].to_vec()).unwrap();
                std::fs::write(p, raw_safetensors(&h, &data)).unwrap();
            },
            "16 trailing bytes after the last tensor",
        ),
    ];
    for (name, corrupt, frag) in cases {
        let dir = copy_checkpoint("tiny-k3", &format!("insp_hdr_{name}"));
        let shard = dir.join(SHARD2);
        // Sanity: the data_offsets this test edits exist in the fixture's header text.
        corrupt(&shard);
        let stderr = exit2(&dir, &[frag]);
        assert!(
            stderr.contains(SHARD2),
            "{name}: message must name the shard: {stderr}"
        );
        assert!(
            stderr.contains("byte"),
            "{name}: message must give a byte offset: {stderr}"
        );
    }
}

#[test]
fn index_file_disagreement_and_two_shards_exit_2() {
    let dir = copy_checkpoint("tiny-k3", "insp_index");
    let idx = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&idx).unwrap();
    let needle = format!("\"language_model.model.layers.1.input_layernorm.weight\": \"{SHARD2}\"");
    assert!(text.contains(&needle), "fixture index format changed");
    std::fs::write(
        &idx,
        text.replace(
            &needle,
            "\"language_model.model.layers.1.input_layernorm.weight\": \"model-00003-of-00007.safetensors\"",
        ),
    )
    .unwrap();
    exit2(
        &dir,
        &[
            "model.safetensors.index.json",
            "but the tensor is in shard model-00002-of-00007.safetensors",
        ],
    );
    let dir = copy_checkpoint("tiny-k3", "insp_two");
    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    std::fs::copy(dir.join(SHARD2), dir.join("model-00002-copy.safetensors")).unwrap();
    exit2(&dir, &["is also in shard"]);
}

#[test]
fn census_problems_exit_2_after_printing_the_report() {
    let dir = copy_checkpoint("tiny-k3", "insp_census");
    let cfg = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("\"num_experts\": 8", "\"num_experts\": 16"),
    )
    .unwrap();
    let out = run_k3([Path::new("inspect"), &dir]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tensor census found"), "{stderr}");
    assert!(
        stderr.contains("block_sparse_moe.experts.8.w1.weight_packed: missing"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "gate.weight: shape [8, 128] but docs/formats.md#tensor-names requires [16, 128]"
        ),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("layer map: KKKMKKKMKKKMM"), "{stdout}");
    assert!(stdout.contains("census: "), "{stdout}");
}
