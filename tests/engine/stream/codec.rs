//! A packed trunk with a codec (`k3 pack-trunk --codec bf16-huffman`; docs/formats.md, "Packed
//! trunk with a codec"): the block index tiles every run, coded blocks are smaller and decode to
//! the shard's bytes, a run gives the same logits bits decoded (`--trunk-codec on`), read from
//! the shards instead (`off`) or as measured (`auto`), at every ring, piece and I/O-depth setting
//! and with pinned layers; a corrupt block or index is refused naming it; bad flags are exit 2;
//! today's uncompressed packed trunks load unchanged (tests/engine/stream/pack_trunk.rs).

use crate::support::stream as stream_support;
use k3::stream::pieces::PieceMode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use stream_support::*;

/// `k3 pack-trunk <model> <scratch name> --codec bf16-huffman [extra]`, which must succeed;
/// the directory and the pack's standard error.
fn pack_coded(model: &Path, name: &str, extra: &[&str]) -> (PathBuf, String) {
    let out = scratch_dir(name);
    let mut a = vec![
        "pack-trunk",
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        "--codec",
        "bf16-huffman",
    ];
    a.extend_from_slice(extra);
    let o = run_k3(a);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (out, err)
}

fn layout(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("trunk.json")).unwrap()).unwrap()
}

/// Every layer's blocks: `[start, len, off, clen]`.
fn blocks(l: &Value) -> Vec<[u64; 4]> {
    l["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let v: Vec<u64> = b
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            [v[0], v[1], v[2], v[3]]
        })
        .collect()
}

#[test]
fn coded_blocks_tile_every_run_and_stored_blocks_are_the_shard_bytes() {
    let model = moderate();
    let (out, err) = pack_coded(&model, "codec_layout", &["--threads", "2"]);
    assert!(
        err.contains("codec bf16-huffman") && err.contains("% of raw"),
        "{err}"
    );
    let j = layout(&out);
    assert_eq!(j["codec"], "bf16-huffman");
    let bin = std::fs::read(out.join("trunk.bin")).unwrap();
    let (mut raw, mut stored, mut coded) = (0u64, 0u64, 0usize);
    let mut prev_end = 0u64;
    for l in j["layers"].as_array().unwrap() {
        let bs = blocks(l);
        let shard = std::fs::read(model.join(l["shard"].as_str().unwrap())).unwrap();
        let run_start = l["run_start"].as_u64().unwrap();
        assert_eq!(l["file_off"].as_u64().unwrap(), bs[0][2]);
        let mut next = 0;
        for [start, len, off, clen] in bs {
            assert_eq!(start, next, "blocks tile the run");
            assert_eq!(off % 4096, 0);
            assert!(off >= prev_end, "blocks do not overlap");
            assert!(clen <= len && clen > 0);
            if clen == len {
                let s = (run_start + start) as usize;
                assert_eq!(
                    &bin[off as usize..(off + len) as usize],
                    &shard[s..s + len as usize],
                    "a stored block is the shard's bytes"
                );
            } else {
                coded += 1;
            }
            raw += len;
            stored += clen;
            next = start + len;
            prev_end = off + clen;
        }
    }
    assert!(coded > 0, "no block was coded");
    // Gaussian BF16 weights: the exponent carries under 4 of its 8 bits
    assert!(
        (stored as f64) < 0.85 * raw as f64,
        "stored {stored} of {raw} raw bytes"
    );
}

/// The identity matrix of one checkpoint: decoded (`on`), from the shards (`off`) and `auto`,
/// at rings of 1, 2 and 3 slots, cut at parts and whole layers, I/O depth 1 and 2, and with
/// every layer pinned (decoded once at load): the same logits and ids as the run without a
/// packed trunk, each run within its plan.
fn matrix(model: &Path, tag: &str, ids: &str) {
    let (packed, _) = pack_coded(model, &format!("codec_matrix_{tag}"), &[]);
    let packed = packed.to_str().unwrap().to_string();
    let base_args = ["--ids", ids, "--gen", "5"];
    let t = format!("codec_{tag}");
    let go = |name: &str, extra: &[&str]| checked_run(model, &t, &base_args, name, extra);
    let base = go("base", &[]);
    let same = |r: &Run, what: &str| {
        assert_eq!(r.hash(), base.hash(), "{tag} {what}: logits differ");
        assert_eq!(r.generated(), base.generated(), "{tag} {what}");
    };
    let trunk: &[&str] = &["--trunk", &packed];
    for use_ in ["on", "off", "auto"] {
        let mut f = trunk.to_vec();
        f.extend(["--trunk-codec", use_]);
        let r = go(&format!("resident_{use_}"), &f);
        same(&r, use_);
        let codec = &r.json()["trunk"]["codec"];
        match use_ {
            "on" => assert_eq!(codec, "bf16-huffman", "{tag}"),
            "off" => assert!(codec.is_null(), "{tag}"),
            _ => assert!(r.stderr.is_empty() || !r.stderr.contains("error"), "{tag}"),
        }
    }
    for ring in [1u64, 2, 3] {
        for (mode, pm) in [("part", PieceMode::Part), ("layer", PieceMode::Layer)] {
            for depth in ["1", "2"] {
                let name = format!("{mode}_r{ring}_d{depth}");
                let budget = gb_arg(ring * super::pieces::slot(model, pm));
                let ring_s = ring.to_string();
                let mut f = trunk.to_vec();
                f.extend([
                    "--trunk-codec",
                    "on",
                    "--trunk-gb",
                    &budget,
                    "--trunk-ring",
                    &ring_s,
                    "--trunk-pieces",
                    mode,
                    "--io-depth",
                    depth,
                ]);
                let r = go(&name, &f);
                same(&r, &name);
                assert_eq!(r.u64(&["trunk", "pinned_layers"]), 0, "{name}");
                if ring > 1 {
                    assert!(r.u64(&["trunk", "reads_ahead"]) > 0, "{name}: none ahead");
                }
            }
        }
    }
}

#[test]
fn tiny_k3_logits_are_identical_decoded_or_not_at_every_ring_piece_and_depth() {
    matrix(
        &fixture("tiny-k3"),
        "tiny",
        "410,335,224,165,463,246,467,2,368",
    );
}

#[test]
fn tiny_k3_text_logits_are_identical_decoded_or_not() {
    matrix(&fixture("tiny-k3-text"), "text", "2,400,17,900,5");
}

#[test]
fn moderate_logits_are_identical_decoded_or_not_at_every_ring_piece_and_depth() {
    matrix(&moderate(), "moderate", "5,900,17,256,3,77,1000");
}

/// A coded trunk reads fewer bytes than the uncompressed one, for the same logits.
#[test]
fn a_decoded_trunk_reads_fewer_bytes_per_token() {
    let model = moderate();
    let plain = packed_trunk(&model, "codec_bytes_plain");
    let (coded, _) = pack_coded(&model, "codec_bytes_coded", &[]);
    let args = |dir: &PathBuf| {
        vec![
            "--ids".to_string(),
            "5,900,17".into(),
            "--gen".into(),
            "4".into(),
            "--trunk-gb".into(),
            gb_arg(2 * super::pieces::slot(&model, PieceMode::Part)),
            "--trunk".into(),
            dir.display().to_string(),
        ]
    };
    let a = args(&plain);
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    let mut b = args(&coded);
    b.extend(["--trunk-codec".into(), "on".into()]);
    let b: Vec<&str> = b.iter().map(|s| s.as_str()).collect();
    let r1 = run(&model, "codec_bytes_a", &a);
    let r2 = run(&model, "codec_bytes_b", &b);
    check_ok(&r1, "plain");
    check_ok(&r2, "coded");
    assert_eq!(r1.hash(), r2.hash());
    let (x, y) = (
        r1.u64(&["trunk", "bytes_read"]),
        r2.u64(&["trunk", "bytes_read"]),
    );
    assert!((y as f64) < 0.9 * x as f64, "coded {y} vs plain {x}");
}

/// The first coded block of `layer` in the layout: (index, [start, len, off, clen]).
fn coded_block(j: &Value, layer: usize, from_end: bool) -> (usize, [u64; 4]) {
    let bs = blocks(&j["layers"][layer]);
    let mut it: Vec<(usize, [u64; 4])> = bs.into_iter().enumerate().collect();
    if from_end {
        it.reverse();
    }
    it.into_iter()
        .find(|(_, b)| b[3] < b[1])
        .expect("a coded block")
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x5a;
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_corrupt_block_is_refused_naming_it() {
    let model = moderate();
    // every layer streams (a read that fails while loading a pinned layer is exit 2 instead)
    let budget = gb_arg(2 * super::pieces::slot(&model, PieceMode::Part));
    let args = |dir: &Path| {
        vec![
            "--ids".to_string(),
            "5,900".into(),
            "--gen".into(),
            "2".into(),
            "--trunk-gb".into(),
            budget.clone(),
            "--trunk".into(),
            dir.display().to_string(),
            "--trunk-codec".into(),
            "on".into(),
        ]
    };
    let go = |dir: &Path, tag: &str| {
        let a = args(dir);
        let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
        run(&model, tag, &a)
    };
    // a block in the middle of a layer: found when the run reads it (exit 2: damaged input,
    // as an E8M0 scale of 255 found mid-run is; ENGINE.md §3)
    let (dir, _) = pack_coded(&model, "codec_corrupt_mid", &[]);
    let j = layout(&dir);
    let n = blocks(&j["layers"][3]).len();
    let (i, b) = (1..n - 1)
        .map(|i| (i, blocks(&j["layers"][3])[i]))
        .find(|(_, b)| b[3] < b[1])
        .expect("a coded block inside layer 3");
    // the header: a structural error every decoder must see
    flip(&dir.join("trunk.bin"), b[2] + 1);
    let r = go(&dir, "codec_corrupt_mid_run");
    assert_eq!(r.code, Some(2), "block {i}: {}", r.stderr);
    assert!(
        r.stderr.contains("does not decode")
            && r.stderr.contains(&format!("offset {}", b[2]))
            && r.stderr.contains("trunk layer 3"),
        "{}",
        r.stderr
    );
    // `--trunk-codec auto` decodes a sample when it opens: a damaged block it meets is the
    // same exit 2, naming the layer (it was exit 4 without one)
    let (dir, _) = pack_coded(&model, "codec_corrupt_probe", &[]);
    let j = layout(&dir);
    let bin = dir.join("trunk.bin");
    let mut bytes = std::fs::read(&bin).unwrap();
    for l in j["layers"].as_array().unwrap() {
        let bs = blocks(l);
        // every coded block but a layer's first and last (those are checked at open)
        for b in bs.iter().skip(1).take(bs.len().saturating_sub(2)) {
            if b[3] < b[1] {
                bytes[b[2] as usize + 1] ^= 0x5a;
            }
        }
    }
    std::fs::write(&bin, bytes).unwrap();
    let mut a = args(&dir);
    *a.last_mut().unwrap() = "auto".into();
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    let r = run(&model, "codec_corrupt_probe_run", &a);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("does not decode") && r.stderr.contains(" trunk: "),
        "{}",
        r.stderr
    );
    // the first coded block of a layer's run: found when the run opens (exit 2)
    let (dir, _) = pack_coded(&model, "codec_corrupt_first", &[]);
    let j = layout(&dir);
    let (_, b) = coded_block(&j, 2, false);
    if b[0] == 0 {
        flip(&dir.join("trunk.bin"), b[2] + 1);
        let r = go(&dir, "codec_corrupt_first_run");
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert!(r.stderr.contains("layer 2"), "{}", r.stderr);
    }
}

#[test]
fn a_bad_block_index_is_refused_naming_the_layer_and_block() {
    let model = fixture("tiny-k3");
    let (dir, _) = pack_coded(&model, "codec_index", &[]);
    let j = layout(&dir);
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "gap",
            Box::new(|j: &mut Value| {
                let b = &mut j["layers"][1]["blocks"][1][0];
                *b = Value::from(b.as_u64().unwrap() + 2);
            }),
            "expected to start at run byte",
        ),
        (
            "misaligned",
            Box::new(|j: &mut Value| {
                let b = &mut j["layers"][1]["blocks"][1][2];
                *b = Value::from(b.as_u64().unwrap() + 8);
            }),
            "not a multiple of 4096",
        ),
        (
            "overlap",
            Box::new(|j: &mut Value| {
                let prev = j["layers"][1]["blocks"][0][2].clone();
                j["layers"][1]["blocks"][1][2] = prev;
            }),
            "overlaps",
        ),
        (
            "short",
            Box::new(|j: &mut Value| {
                j["layers"][1]["blocks"].as_array_mut().unwrap().pop();
            }),
            "but the run has",
        ),
        (
            "shape",
            Box::new(|j: &mut Value| {
                j["layers"][1]["blocks"][0] = Value::from(vec![0, 1]);
            }),
            "expected [start, len, off, clen]",
        ),
        (
            "codec",
            Box::new(|j: &mut Value| {
                j["codec"] = Value::from("zstd");
            }),
            "`codec` zstd",
        ),
        (
            "no blocks",
            Box::new(|j: &mut Value| {
                j["layers"][0].as_object_mut().unwrap().remove("blocks");
            }),
            "`blocks`",
        ),
    ];
    for (name, edit, want) in cases {
        let d = copy_dir(&dir, &format!("codec_index_{}", name.replace(' ', "_")));
        let mut v = j.clone();
        edit(&mut v);
        std::fs::write(d.join("trunk.json"), serde_json::to_vec(&v).unwrap()).unwrap();
        let r = run(
            &model,
            &format!("codec_index_{}", name.replace(' ', "_")),
            &["--ids", "1,2", "--gen", "1", "--trunk", d.to_str().unwrap()],
        );
        assert_eq!(r.code, Some(2), "{name}: {}", r.stderr);
        assert!(
            r.stderr.contains(want) && r.stderr.contains("trunk.json"),
            "{name}: {}",
            r.stderr
        );
    }
    // a coded block claimed for an F32 tensor (a norm vector)
    let d = copy_dir(&dir, "codec_index_f32");
    let mut v = j.clone();
    let l = &mut v["layers"][0];
    let norm = l["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, t)| t["dtype"] == "F32")
        .map(|(_, t)| t["off"].as_u64().unwrap())
        .expect("an F32 tensor");
    let bs = l["blocks"].as_array_mut().unwrap();
    let b = bs
        .iter_mut()
        .find(|b| b[0].as_u64() == Some(norm))
        .expect("the norm's block");
    b[3] = Value::from(b[1].as_u64().unwrap() - 2);
    std::fs::write(d.join("trunk.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    let r = run(
        &model,
        "codec_index_f32",
        &["--ids", "1,2", "--gen", "1", "--trunk", d.to_str().unwrap()],
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("only whole BF16 values are coded"),
        "{}",
        r.stderr
    );
}

#[test]
fn codec_flags_are_refused_where_they_do_not_apply() {
    let model = fixture("tiny-k3");
    let m = model.to_str().unwrap();
    let out = scratch_dir("codec_flags");
    let o = out.to_str().unwrap();
    let plain = packed_trunk(&model, "codec_flags_plain");
    let p = plain.to_str().unwrap();
    for (args, want) in [
        (
            vec!["pack-trunk", m, o, "--codec", "zstd"],
            "unknown codec `zstd`",
        ),
        (
            vec![
                "pack-trunk",
                m,
                o,
                "--codec",
                "bf16-huffman",
                "--threads",
                "0",
            ],
            "--threads",
        ),
        (
            vec!["pack-trunk", m, o, "--threads", "2"],
            "only with `--codec`",
        ),
        (
            vec![m, "--ids", "1", "--trunk-codec", "on"],
            "only with `--trunk DIR`",
        ),
        (
            vec![m, "--ids", "1", "--trunk", p, "--trunk-codec", "on"],
            "has no codec",
        ),
        (
            vec![m, "--ids", "1", "--trunk", p, "--trunk-codec", "maybe"],
            "expected auto, on or off",
        ),
    ] {
        let r = run_k3(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `auto` says what it measured and what it decided.
#[test]
fn auto_says_what_it_measured() {
    let model = moderate();
    let (dir, _) = pack_coded(&model, "codec_auto", &[]);
    let o = run_k3([
        model.to_str().unwrap(),
        "--ids",
        "5,900",
        "--gen",
        "1",
        "--no-progress",
        "--trunk",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("trunk codec bf16-huffman")
            && err.contains("GB/s on")
            && err.contains("it must beat (1.5 × the disk's")
            && (err.contains(": decoded") || err.contains("not used")),
        "{err}"
    );
}

/// `auto` measures the codec with staging buffers before the plan is made, so the plan counts
/// them whatever it then decides: peak RSS keeps the measurement (CI's scalar path decided
/// against decoding on tiny-k3 and its run went 4 MB over a plan without them). The plan of
/// `auto` is the plan of `on`; `off` plans none.
#[test]
fn auto_plans_the_staging_whatever_it_decides() {
    let model = fixture("tiny-k3");
    let (dir, _) = pack_coded(&model, "codec_auto_plan", &[]);
    let dir = dir.to_str().unwrap().to_string();
    let plan = |use_: &str| {
        let r = checked_run(
            &model,
            "codec_auto_plan",
            &[
                "--ids",
                "5,9",
                "--gen",
                "2",
                "--trunk",
                &dir,
                "--trunk-codec",
                use_,
            ],
            use_,
            &[],
        );
        r.u64(&["memory", "plan", "total"])
    };
    let (on, auto, off) = (plan("on"), plan("auto"), plan("off"));
    assert_eq!(auto, on, "auto plans the staging as on does");
    assert!(off < on, "off {off} plans no staging (on {on})");
}
