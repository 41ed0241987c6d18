//! `k3 pack-trunk` (FORMATS.md §7, ENGINE.md §5): the layout of trunk.bin and trunk.json, the
//! refusal of a layer that is not one gap-free run, an interrupted pack that leaves no trunk
//! that loads, and a packed trunk written by another tool with the same layout is accepted.

use crate::support;
use crate::support::stream as stream_support;
use serde_json::Value;
use std::path::Path;
use stream_support::*;

fn pack(model: &Path, out: &Path) -> std::process::Output {
    run_k3(["pack-trunk", model.to_str().unwrap(), out.to_str().unwrap()])
}

#[test]
fn packed_layout_is_aligned_verbatim_and_padded() {
    let model = fixture("tiny-k3");
    let out = scratch_dir("pack_layout");
    let o = pack(&model, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // progress: layers, GB, MB/s, ETA
    assert!(
        err.contains("layer 13/13") && err.contains("MB/s") && err.contains("ETA"),
        "{err}"
    );
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only trunk.bin and trunk.json remain: {names:?}"
    );
    let j: Value = serde_json::from_slice(&std::fs::read(out.join("trunk.json")).unwrap()).unwrap();
    assert_eq!(j["n_layers"], 13);
    assert_eq!(j["align"], 4096);
    let bin = std::fs::read(out.join("trunk.bin")).unwrap();
    let mut prev_end = 0u64;
    for (i, l) in j["layers"].as_array().unwrap().iter().enumerate() {
        assert_eq!(l["layer"], i);
        let file_off = l["file_off"].as_u64().unwrap();
        let nbytes = l["nbytes"].as_u64().unwrap();
        let run_start = l["run_start"].as_u64().unwrap();
        assert_eq!(file_off % 4096, 0);
        assert_eq!(nbytes % 4096, 0);
        assert_eq!(
            file_off,
            prev_end.div_ceil(4096) * 4096,
            "layer {i} packed tightly"
        );
        let shard = model.join(l["shard"].as_str().unwrap());
        let sb = std::fs::read(&shard).unwrap();
        let mut run_len = 0;
        for (name, t) in l["tensors"].as_object().unwrap() {
            let off = t["off"].as_u64().unwrap();
            let n = t["nbytes"].as_u64().unwrap();
            assert!(name.starts_with(&format!("language_model.model.layers.{i}.")));
            assert!(!name.contains(".experts."));
            run_len = run_len.max(off + n);
        }
        assert_eq!(nbytes, run_len.div_ceil(4096) * 4096);
        // the run copied verbatim, the tail zero
        let (a, b) = (file_off as usize, (file_off + run_len) as usize);
        assert!(
            bin[a..b] == sb[run_start as usize..(run_start + run_len) as usize],
            "layer {i} run differs from the shard"
        );
        assert!(bin[b..(file_off + nbytes) as usize].iter().all(|&x| x == 0));
        prev_end = file_off + run_len;
    }
    assert_eq!(bin.len() as u64, prev_end.div_ceil(4096) * 4096);
}

/// Puts expert 0 of `layer` between two of its trunk tensors.
fn break_trunk_run(dir: &Path, layer: usize) {
    let probe = format!("language_model.model.layers.{layer}.input_layernorm.weight");
    let shard = shard_of(dir, &probe);
    let mut ts = read_shard(&shard);
    let expert = format!("language_model.model.layers.{layer}.block_sparse_moe.experts.0.");
    let moved: Vec<ShardTensor> = {
        let (e, rest): (Vec<_>, Vec<_>) = ts.into_iter().partition(|t| t.name.starts_with(&expert));
        ts = rest;
        e
    };
    let at = ts.iter().position(|t| t.name == probe).unwrap() + 1;
    for (k, t) in moved.into_iter().enumerate() {
        ts.insert(at + k, t);
    }
    write_shard(&shard, &ts);
}

#[test]
fn a_layer_that_is_not_one_run_is_refused_and_streams_tensor_by_tensor() {
    let dir = copy_dir(&fixture("tiny-k3"), "pack_gap_ckpt");
    break_trunk_run(&dir, 2);
    let out = scratch_dir("pack_gap");
    let o = pack(&dir, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("layer 2") && err.contains("gap of") && err.contains("input_layernorm"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(&out).unwrap().next().is_none(),
        "nothing written"
    );
    // The run itself reads that layer tensor by tensor, with the same logits.
    let args = [
        "--ids",
        "410,335,224,165",
        "--gen",
        "4",
        "--trunk-gb",
        "0.0003",
    ];
    let a = run(&fixture("tiny-k3"), "pack_gap_ref", &args);
    let b = run(&dir, "pack_gap_run", &args);
    check_ok(&a, "reference");
    check_ok(&b, "non-contiguous trunk");
    assert_eq!(a.hash(), b.hash());
    assert_eq!(b.u64(&["trunk", "pinned_layers"]), 0);
}

#[test]
fn an_interrupted_pack_leaves_no_trunk_that_loads() {
    use k3::stream::pack::pack as pack_lib;
    let model = copy_dir(&fixture("tiny-k3"), "pack_int_ckpt");
    let cfg = k3::config::Config::from_file(&model.join("config.json")).unwrap();
    let index = k3::checkpoint::TensorIndex::open(&model).unwrap();
    let try_run = |out: &Path, tag: &str| {
        run(
            &model,
            tag,
            &[
                "--ids",
                "1,2",
                "--gen",
                "1",
                "--trunk",
                out.to_str().unwrap(),
            ],
        )
    };
    // 1. The process dies after the third layer (a panic in the progress callback stands for
    //    a kill): the .tmp files stay, nothing loads.
    let out = scratch_dir("pack_int_killed");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pack_lib(&cfg, &index, &out, None, &mut |p| {
            if p.layers_done == 3 {
                panic!("killed");
            }
        })
    }));
    assert!(r.is_err());
    assert!(out.join("trunk.bin.tmp").exists());
    assert!(!out.join("trunk.json").exists() && !out.join("trunk.bin").exists());
    let r = try_run(&out, "pack_int_killed_run");
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("trunk.json"), "{}", r.stderr);
    // 2. A shard truncated after indexing: the read fails (exit 4, naming shard and offset)
    //    and the temporary files are removed.
    let out = scratch_dir("pack_int_short");
    let shard = model.join("model-00004-of-00007.safetensors");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(5000)
        .unwrap();
    let e = pack_lib(&cfg, &index, &out, None, &mut |_| {}).unwrap_err();
    assert_eq!(e.exit_code(), 4, "{e}");
    assert!(
        e.message.contains("model-00004-of-00007.safetensors") && e.message.contains("offset"),
        "{e}"
    );
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
}

/// FORMATS.md §7: compatible with existing packed trunks of the same layout — other member
/// order, extra members, layers listed in another order.
#[test]
fn a_foreign_trunk_json_of_the_same_layout_is_accepted() {
    let model = fixture("tiny-k3");
    let out = scratch_dir("pack_foreign");
    assert!(pack(&model, &out).status.success());
    let p = out.join("trunk.json");
    let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let mut layers: Vec<Value> = v["layers"].as_array().unwrap().clone();
    layers.reverse();
    for l in &mut layers {
        l["writer_note"] = Value::from("packed elsewhere");
    }
    let foreign = serde_json::json!({
        "layers": layers,
        "align": 4096,
        "format": "kimi-trunk",
        "n_layers": 13,
    });
    std::fs::write(&p, serde_json::to_vec(&foreign).unwrap()).unwrap();
    let args = ["--ids", "410,335,224", "--gen", "3", "--trunk-gb", "0.0005"];
    let a = run(&model, "pack_foreign_ref", &args);
    let mut b_args = args.to_vec();
    b_args.extend(["--trunk", out.to_str().unwrap()]);
    let b = run(&model, "pack_foreign_run", &b_args);
    check_ok(&a, "shards");
    check_ok(&b, "foreign packed trunk");
    assert_eq!(a.hash(), b.hash());
    assert_eq!(b.json()["trunk"]["packed"], true);
}

/// ENGINE.md §3: an unwritable output directory is invalid input (exit 2) whether it exists or
/// must be created, found before any shard is read (so a broken model directory is not even
/// looked at). /sys refuses new files and directories even to root (Linux sysfs); elsewhere a
/// read-only directory stands in when not running as root.
#[test]
fn an_unwritable_output_directory_is_exit_2_before_any_shard_is_read() {
    let model = fixture("tiny-k3");
    // a model directory whose shards cannot be read at all: the output check comes first
    let broken = scratch_dir("pack_ro_broken_model");
    std::fs::write(broken.join("config.json"), "{").unwrap();
    let mut cases: Vec<std::path::PathBuf> = Vec::new();
    let sys = Path::new("/sys");
    if sys.is_dir() && std::fs::File::create(sys.join("k3-probe")).is_err() {
        cases.push(sys.to_path_buf()); // exists, read-only
        cases.push(sys.join("k3-new/out")); // to be created on a read-only file system
    }
    let ro = scratch_dir("pack_ro_dir");
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&ro, perm).unwrap();
    if std::fs::File::create(ro.join("probe")).is_err() {
        cases.push(ro.clone());
        cases.push(ro.join("new"));
    } else {
        let _ = std::fs::remove_file(ro.join("probe"));
        eprintln!("note: running as root, a read-only directory is writable: /sys cases only");
    }
    if cases.is_empty() {
        eprintln!("SKIPPED: no unwritable directory available (no /sys, and running as root)");
        return;
    }
    for out in &cases {
        for m in [&model, &broken] {
            let o = pack(m, out);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{}: {err}", out.display());
            assert!(
                err.contains("output directory") && err.contains(out.to_str().unwrap()),
                "{}: {err}",
                out.display()
            );
        }
    }
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(&ro, perm).unwrap();
}

/// Packing into a directory that holds another model's packed trunk replaces it, and says so
/// (not an error); the result is this model's trunk.
#[test]
fn packing_over_another_models_trunk_replaces_it_and_says_so() {
    let out = scratch_dir("pack_replace");
    let o = pack(&fixture("tiny-k3-text"), &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("replacing"));
    let o = pack(&fixture("tiny-k3"), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("already holds a packed trunk")
            && err.contains("another model or layout")
            && err.contains("replacing it"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(out.join("trunk.json")).unwrap()).unwrap();
    assert_eq!(v["n_layers"], 13);
    // the same model again: still said, as this model's layout
    let o = pack(&fixture("tiny-k3"), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.contains("of this model's layout"),
        "{err}"
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["trunk.bin", "trunk.json"]);
}

/// A full disk while packing is exit 3 naming the file and offset, and leaves nothing behind.
/// Simulated by making the temporary `trunk.bin.tmp` a link to /dev/full (Linux: ENOSPC).
#[test]
fn a_full_disk_while_packing_is_exit_3() {
    if !Path::new("/dev/full").exists() {
        eprintln!("SKIPPED: /dev/full (writes fail with ENOSPC) is not available on this platform");
        return;
    }
    let out = scratch_dir("pack_full");
    std::os::unix::fs::symlink("/dev/full", out.join("trunk.bin.tmp")).unwrap();
    let o = pack(&fixture("tiny-k3"), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("trunk.bin.tmp") && err.contains("offset 0") && err.contains("disk space"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
}

#[test]
fn a_failed_pack_trunk_leaves_no_output_directory() {
    let dir = scratch_dir("edge_pack_order");
    let out = dir.join("pk");
    // not a model directory (no config.json): nothing left behind (was: an empty `pk/`)
    let o = support::run_args(&["pack-trunk", dir.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", support::stderr(&o));
    assert!(!out.exists(), "no output directory left behind");
    // an output path that is a file: said so (was "cannot create the directory: File exists")
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = support::run_args(&["pack-trunk", &support::tiny(), file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", support::stderr(&o));
    assert!(
        support::stderr(&o).contains("not a directory"),
        "{}",
        support::stderr(&o)
    );
}

#[test]
fn a_failed_pack_trunk_removes_every_directory_it_created() {
    let dir = scratch_dir("edge_pack_nested");
    let o = support::run_args(&[
        "pack-trunk",
        dir.to_str().unwrap(),
        dir.join("n1/n2/n3").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", support::stderr(&o));
    assert!(!dir.join("n1").exists(), "n1/n2 left behind");
}

/// An output directory whose parent does not exist is refused like every other output path
/// (exit 2 naming the parent), and nothing is created (it used to create the whole tree).
#[test]
fn an_output_directory_under_a_missing_parent_is_refused() {
    let dir = scratch_dir("edge_pack_parent");
    let out = dir.join("missing/x/y");
    let o = support::run_args(&["pack-trunk", &support::tiny(), out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", support::stderr(&o));
    assert!(
        support::stderr(&o).contains("does not exist"),
        "{}",
        support::stderr(&o)
    );
    assert!(!dir.join("missing").exists(), "a directory was created");
}

/// `k3 pack-trunk` records each run's SHA-256 (`sha256`: the run's bytes as in the shard) and,
/// with a codec, each block's (`block_sha256`: its stored bytes), checked here with the `sha2`
/// crate; the blocks stay four-number arrays, so the sums change nothing an older reader reads.
#[test]
fn pack_trunk_records_the_sha256_of_every_run_and_block() {
    use sha2::Digest as _;
    let hex = |b: &[u8]| -> String {
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let model = fixture("tiny-k3");
    for coded in [false, true] {
        let out = scratch_dir(&format!("pack_sums_{coded}"));
        let mut args = vec!["pack-trunk", model.to_str().unwrap(), out.to_str().unwrap()];
        if coded {
            args.extend(["--codec", "bf16-huffman"]);
        }
        let o = run_k3(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: Value =
            serde_json::from_slice(&std::fs::read(out.join("trunk.json")).unwrap()).unwrap();
        let bin = std::fs::read(out.join("trunk.bin")).unwrap();
        for l in j["layers"].as_array().unwrap() {
            let run_start = l["run_start"].as_u64().unwrap() as usize;
            let run_len = l["tensors"]
                .as_object()
                .unwrap()
                .values()
                .map(|t| t["off"].as_u64().unwrap() + t["nbytes"].as_u64().unwrap())
                .max()
                .unwrap() as usize;
            let shard = std::fs::read(model.join(l["shard"].as_str().unwrap())).unwrap();
            assert_eq!(
                l["sha256"].as_str().unwrap(),
                hex(&shard[run_start..run_start + run_len]),
                "layer {}",
                l["layer"]
            );
            if !coded {
                assert!(l.get("block_sha256").is_none());
                continue;
            }
            let blocks = l["blocks"].as_array().unwrap();
            let sums = l["block_sha256"].as_array().unwrap();
            assert_eq!(blocks.len(), sums.len());
            for (b, sum) in blocks.iter().zip(sums) {
                let b = b.as_array().unwrap();
                assert_eq!(b.len(), 4, "[start, len, off, clen] as before");
                let (off, clen) = (
                    b[2].as_u64().unwrap() as usize,
                    b[3].as_u64().unwrap() as usize,
                );
                assert_eq!(sum.as_str().unwrap(), hex(&bin[off..off + clen]));
            }
        }
    }
}

/// A `trunk.json` without sums (packed before them) still loads and runs with the same
/// logits; a malformed sum is refused at open naming the layer and key.
#[test]
fn a_trunk_json_without_sums_still_loads_and_a_malformed_sum_is_named() {
    let model = fixture("tiny-k3");
    let out = scratch_dir("pack_nosums");
    assert!(pack(&model, &out).status.success());
    let p = out.join("trunk.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let args = ["--ids", "410,335,224", "--gen", "3", "--trunk-gb", "0.0005"];
    let mut b_args = args.to_vec();
    b_args.extend(["--trunk", out.to_str().unwrap()]);
    let with = run(&model, "pack_sums_with", &b_args);
    check_ok(&with, "packed trunk with sums");
    for l in v["layers"].as_array_mut().unwrap() {
        l.as_object_mut().unwrap().remove("sha256");
    }
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let without = run(&model, "pack_sums_without", &b_args);
    check_ok(&without, "packed trunk without sums");
    assert_eq!(with.hash(), without.hash());
    v["layers"][2]["sha256"] = Value::from("not hex");
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let bad = run(&model, "pack_sums_bad", &b_args);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(
        bad.stderr
            .contains("trunk.json: layer 2: `sha256`: expected a SHA-256 as 64 hex digits"),
        "{}",
        bad.stderr
    );
}
