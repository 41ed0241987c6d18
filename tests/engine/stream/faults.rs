//! Fault injection for streamed runs (ENGINE.md §3, §5; MODEL.md §11 row 23): a truncated
//! shard, a truncated or corrupt packed trunk, an expert whose bytes changed size, and files
//! truncated after indexing so that a read comes up short. Found while indexing or opening:
//! exit 2 before the run; found during the run: exit 4 naming the file and offset, and no
//! token computed from partial data is printed.

use crate::support::stream as stream_support;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use stream_support::*;

const IDS: &str = "410,335,224,165,463,246";

fn fails(model: &Path, tag: &str, extra: &[&str]) -> Run {
    let mut a = vec!["--ids", IDS, "--gen", "3"];
    a.extend_from_slice(extra);
    let r = run(model, tag, &a);
    assert_ne!(r.code, Some(0), "{tag}: expected a failure:\n{}", r.stderr);
    assert!(r.stdout.is_empty(), "{tag}: printed {:?}", r.stdout);
    r
}

fn truncate(p: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn truncated_shard_is_refused_while_indexing_with_exit_2() {
    let dir = copy_dir(&fixture("tiny-k3"), "faults_trunc_shard");
    let shard = dir.join("model-00003-of-00007.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len();
    truncate(&shard, len - 100);
    let r = fails(&dir, "trunc_shard", &["--trunk-gb", "0.0005"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("model-00003-of-00007.safetensors"),
        "{}",
        r.stderr
    );
}

/// A packed trunk of tiny-k3 in a fresh directory.
fn packed_copy(name: &str) -> std::path::PathBuf {
    let dir = scratch_dir(name);
    let o = run_k3([
        "pack-trunk",
        fixture("tiny-k3").to_str().unwrap(),
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir
}

fn edit_json(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("trunk.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn corrupt_or_truncated_packed_trunk_is_refused_with_exit_2() {
    let model = fixture("tiny-k3");
    let check = |tag: &str, dir: &Path, want: &[&str]| {
        let r = fails(
            &model,
            tag,
            &["--trunk", dir.to_str().unwrap(), "--trunk-gb", "0.0005"],
        );
        assert_eq!(r.code, Some(2), "{tag}: {}", r.stderr);
        for w in want {
            assert!(
                r.stderr.contains(w),
                "{tag}: wanted {w:?} in:\n{}",
                r.stderr
            );
        }
    };
    // trunk.bin cut inside the last run
    let d = packed_copy("faults_pk_short");
    let bin = d.join("trunk.bin");
    truncate(&bin, std::fs::metadata(&bin).unwrap().len() - 5000);
    check("pk_short", &d, &["trunk.bin", "layer 12", "past the end"]);
    // trunk.json not valid JSON
    let d = packed_copy("faults_pk_json");
    let j = d.join("trunk.json");
    let t = std::fs::read(&j).unwrap();
    std::fs::write(&j, &t[..t.len() / 2]).unwrap();
    check("pk_json", &d, &["trunk.json", "invalid JSON"]);
    // a layer missing
    let d = packed_copy("faults_pk_missing");
    edit_json(&d, |v| {
        v["layers"].as_array_mut().unwrap().remove(4);
    });
    check("pk_missing", &d, &["trunk.json", "layer 4 is missing"]);
    // a tensor placed elsewhere than in the shard
    let d = packed_copy("faults_pk_off");
    let name = "language_model.model.layers.2.input_layernorm.weight";
    edit_json(&d, |v| {
        let t = &mut v["layers"][2]["tensors"][name];
        t["off"] = Value::from(t["off"].as_u64().unwrap() + 2);
    });
    check("pk_off", &d, &["trunk.json", "layer 2", name]);
    // an unaligned run
    let d = packed_copy("faults_pk_align");
    edit_json(&d, |v| {
        let l = &mut v["layers"][3];
        l["file_off"] = Value::from(l["file_off"].as_u64().unwrap() + 512);
    });
    check(
        "pk_align",
        &d,
        &["trunk.json", "layer 3", "not a multiple of align"],
    );
    // a quantised trunk tensor
    let d = packed_copy("faults_pk_dtype");
    edit_json(&d, |v| {
        let t = &mut v["layers"][1]["tensors"][name.replace(".2.", ".1.")];
        t["dtype"] = Value::from("F8_E4M3");
    });
    check("pk_dtype", &d, &["trunk.json", "F8_E4M3"]);
    // trunk.bin bytes that differ from the shard
    let d = packed_copy("faults_pk_bytes");
    let v: Value = serde_json::from_slice(&std::fs::read(d.join("trunk.json")).unwrap()).unwrap();
    let off = v["layers"][3]["file_off"].as_u64().unwrap();
    let bin = d.join("trunk.bin");
    let mut b = std::fs::read(&bin).unwrap();
    b[off as usize + 10] ^= 0x40;
    std::fs::write(&bin, b).unwrap();
    check("pk_bytes", &d, &["trunk.json", "layer 3", "differs"]);
    // another model's trunk
    let d = packed_copy("faults_pk_other");
    edit_json(&d, |v| v["n_layers"] = Value::from(12));
    check("pk_other", &d, &["n_layers 12", "13"]);
    // no trunk.json at all (only the temporary names of an unfinished pack)
    let d = packed_copy("faults_pk_tmp");
    std::fs::rename(d.join("trunk.json"), d.join("trunk.json.tmp")).unwrap();
    std::fs::rename(d.join("trunk.bin"), d.join("trunk.bin.tmp")).unwrap();
    check("pk_tmp", &d, &["trunk.json", "pack-trunk"]);
}

#[test]
fn expert_whose_bytes_changed_size_is_refused_naming_the_tensor() {
    let dir = copy_dir(&fixture("tiny-k3"), "faults_expert_size");
    let name = "language_model.model.layers.2.block_sparse_moe.experts.5.w2.weight_scale";
    let shard = shard_of(&dir, name);
    let mut ts = read_shard(&shard);
    let t = ts.iter_mut().find(|t| t.name == name).unwrap();
    // [L, I/32] = [64, 2] → one more group per row
    t.shape = vec![64, 3];
    t.data = vec![127u8; 64 * 3];
    write_shard(&shard, &ts);
    let r = fails(&dir, "expert_size", &["--cache-gb", "0.00004"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(name) && r.stderr.contains("[64, 3]") && r.stderr.contains("[64, 2]"),
        "{}",
        r.stderr
    );
}

/// Starts a long streamed run, waits for its first generated step, stops it, truncates
/// `victim`, resumes it: the next read of the file fails the token with exit 4 naming the
/// file and offset; every token printed is one of a good run's.
fn truncate_mid_run(model: &Path, tag: &str, victim: &Path, extra: &[&str]) {
    let good = run(model, &format!("{tag}_good"), &{
        let mut a = vec!["--ids", "5,900,17", "--gen", "4"];
        a.extend_from_slice(extra);
        a
    });
    check_ok(&good, tag);
    let out = scratch_dir(&format!("faults_run_{tag}")).join("r.json");
    let mut cmd = crate::support::k3_command(env!("CARGO_BIN_EXE_k3"));
    cmd.arg(model)
        .args([
            "--ids",
            "5,900,17",
            "--gen",
            "100000",
            "--no-progress",
            "--verbose",
            "--out",
        ])
        .arg(&out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().to_string();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("{tag}: k3 ended before its first step:\n{seen}");
        }
        seen += &line;
        if line.starts_with("step") {
            break;
        }
    }
    let _ = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status();
    let len = std::fs::metadata(victim).unwrap().len();
    truncate(victim, len / 2);
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let status = child.wait().unwrap();
    seen += &rest;
    assert_eq!(status.code(), Some(4), "{tag}:\n{seen}");
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(
        seen.contains(name) && seen.contains("offset"),
        "{tag}: the error must name {name} and the offset:\n{seen}"
    );
    // Printed tokens: only completed steps, each the good run's token at that step.
    let printed: Vec<u64> = stdout
        .trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["error"]["exit_code"], 4);
    // the failed run's report still carries its counters
    assert!(j["trunk"]["binds"].as_u64().unwrap() > 0, "{tag}");
    assert!(j["expert_cache"]["requests"].as_u64().unwrap() > 0, "{tag}");
    let in_json: Vec<u64> = j["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(printed, in_json, "{tag}: printed ids vs report");
    let g = good.generated();
    let k = printed.len().min(g.len());
    assert!(k >= 1, "{tag}");
    assert_eq!(
        printed[..k],
        g[..k],
        "{tag}: a token differs from the good run"
    );
}

#[test]
fn shard_truncated_mid_run_fails_the_token_with_exit_4() {
    let dir = copy_dir(&moderate(), "faults_mid_shard");
    let g = {
        let cfg = k3::config::Config::from_file(&dir.join("config.json")).unwrap();
        let index = k3::checkpoint::TensorIndex::open(&dir).unwrap();
        let prep = k3::stream::bind::prepare(&index, &cfg, cfg.num_hidden_layers).unwrap();
        prep.layouts
            .iter()
            .map(|l| k3::plan::buffer_bytes(l.bytes))
            .max()
            .unwrap()
    };
    let victim = shard_of(&dir, "language_model.model.layers.3.input_layernorm.weight");
    truncate_mid_run(
        &dir,
        "mid_shard",
        &victim,
        &["--trunk-gb", &gb_arg(2 * g), "--cache-gb", "0.0002"],
    );
}

/// The lm_head partly resident, the rest streamed through chunk slots read ahead while the
/// layers compute: its shard truncated mid-run fails the token (exit 4, file and offset).
#[test]
fn lm_head_shard_truncated_mid_run_fails_the_token_with_exit_4() {
    let dir = copy_dir(&moderate(), "faults_mid_lm_head");
    let victim = shard_of(&dir, "language_model.lm_head.weight");
    truncate_mid_run(&dir, "mid_lm_head", &victim, &["--preset", "ultra"]);
}

#[test]
fn packed_trunk_truncated_mid_run_fails_the_token_with_exit_4() {
    let model = moderate();
    let packed = scratch_dir("faults_mid_packed");
    let o = run_k3([
        "pack-trunk",
        model.to_str().unwrap(),
        packed.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success());
    let v: Value =
        serde_json::from_slice(&std::fs::read(packed.join("trunk.json")).unwrap()).unwrap();
    let largest = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["nbytes"].as_u64().unwrap())
        .max()
        .unwrap();
    truncate_mid_run(
        &model,
        "mid_packed",
        &packed.join("trunk.bin"),
        &[
            "--trunk",
            packed.to_str().unwrap(),
            "--trunk-gb",
            &gb_arg(2 * k3::plan::buffer_bytes(largest)),
        ],
    );
}

/// The expert cache: a short read while filling a batch fails the forward (exit 4) and
/// publishes nothing (library level, deterministic).
#[test]
fn short_expert_read_fails_the_forward_and_publishes_nothing() {
    use k3::model::*;
    use k3::stream::bind::{bind, prepare, StreamConfig};
    let dir = copy_dir(&fixture("tiny-k3"), "faults_lib_expert");
    let cfg = k3::config::Config::from_file(&dir.join("config.json")).unwrap();
    let d = Dims::from_config(&cfg);
    let index = k3::checkpoint::TensorIndex::open(&dir).unwrap();
    let prep = prepare(&index, &cfg, d.nl).unwrap();
    let pinned = vec![false; d.nl];
    let conf = StreamConfig {
        pinned: &pinned,
        ring_slots: 2,
        tables: k3::stream::tables::TablesConfig {
            head_resident_rows: 0,
            embed_resident: false,
            chunk_rows: 100,
            chunk_slots: 2,
        },
        cache_slots: 4,
        policy: "lru",
        packed: None,
        expert_io_threads: 2,
        loaded: None,
        pieces: k3::stream::pieces::PieceMode::Part,
        io_depth: 1,
        codec_threads: 1,
    };
    let mut b = bind(&index, &cfg, &prep, &conf).unwrap();
    // layer 1's experts are the first bytes of shard 2's data section: cut them off
    truncate(&dir.join("model-00002-of-00007.safetensors"), 4000);
    let ex = Exec::new(k3_kernels::Kernels::new(k3_kernels::Isa::Scalar, 1).unwrap());
    let mut st = state::DecodeState::new(&d, d.nl, 8);
    let r = b.model.forward(
        &ex,
        &mut b.trunk,
        &mut b.experts,
        &mut st,
        &[1, 2, 3],
        LogitRows::Last,
    );
    let e = r.expect_err("a short read must fail the forward");
    assert_eq!(e.exit_code(), 4, "{e}");
    assert!(
        e.message.contains("model-00002-of-00007.safetensors") && e.message.contains("offset"),
        "{e}"
    );
    assert_eq!(b.experts.cache_stats().requests, 0, "nothing was served");
}
