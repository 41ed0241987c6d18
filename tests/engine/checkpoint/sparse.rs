//! The released shape without its bytes (issue 16 item 4): `synth::generate_sparse` writes the
//! headers, index and config of a checkpoint at the released widths whose tensor data are file
//! holes; the engine indexes it, takes its census and plans it from the headers alone. Here at
//! 5 layers (4 MoE layers of 896 experts: 21,504 expert tensors) so that it takes a second;
//! the full 93-layer checkpoint (497,220 tensors, 1.56 TB apparent) is `cargo xtask synth
//! --sparse --released`, run in bench/ (bench/results/sparse-released-*.tsv).

use crate::support;

use k3::json::{self, Value};
use std::path::Path;
use support::{run_k3, scratch_dir};
use synth::{SparseOptions, SynthSpec};

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for k in path {
        cur = cur
            .get(k)
            .unwrap_or_else(|| panic!("lacks {}", path.join(".")));
    }
    cur.as_number().and_then(|n| n.as_u64()).unwrap()
}

#[test]
fn a_sparse_checkpoint_at_released_widths_is_indexed_and_planned_from_its_headers() {
    let dir = scratch_dir("sparse-k3-5");
    let spec = SynthSpec::k3(5, 896);
    let s = synth::generate_sparse(&spec, &dir, &SparseOptions::default()).unwrap();
    assert_eq!(s.real_tensors, 0);
    // Holes take no disk: the shards' allocated blocks are about their headers.
    let (mut apparent, mut allocated) = (0u64, 0u64);
    for e in std::fs::read_dir(&dir).unwrap() {
        let m = e.unwrap().metadata().unwrap();
        apparent += m.len();
        allocated += std::os::unix::fs::MetadataExt::blocks(&m) * 512;
    }
    assert!(
        apparent > s.apparent_bytes && s.apparent_bytes > 70_000_000_000,
        "{apparent}"
    );
    assert!(
        allocated < 100_000_000,
        "allocated {allocated} of {apparent}"
    );

    let out = run_k3([Path::new("inspect"), &dir, Path::new("--json")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json::parse(&out.stdout).unwrap();
    assert_eq!(
        v.get("census").unwrap().get("ok").unwrap().as_bool(),
        Some(true)
    );
    assert_eq!(
        u(&v, &["checkpoint", "tensors"]),
        s.plan.tensor_count() as u64
    );
    let trunk: u64 = (0..5)
        .map(|l| k3::plan::layer_run_bytes(&released_5(), l))
        .sum();
    assert_eq!(u(&v, &["ledger", "trunk_bytes"]), trunk);
    assert_eq!(u(&v, &["ledger", "model_table_bytes"]), 4_697_663_488);

    // The plan, from the headers alone: refused below its minimum (exit 3, before any weight
    // is read), and printed in full for a preset a faked 1 GB machine cannot hold.
    let ids = ["--ids", "1008,10484,318", "--gen", "2"];
    let dir_s = dir.to_str().unwrap();
    let o = run_k3([dir_s, "--mem-gb", "0.5"].iter().chain(&ids));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("0.5") || err.contains("500 MB"), "{err}");
    let meminfo = dir.join("meminfo.txt");
    std::fs::write(&meminfo, "MemAvailable: 1000000 kB\n").unwrap();
    let o = support::k3()
        .args([dir_s, "--preset", "laptop"])
        .args(ids)
        .env(k3::io::sys::TEST_MEMINFO_ENV, &meminfo)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("memory plan: total"), "{err}");
    assert!(err.contains("memory plan does not fit"), "{err}");
    assert!(o.stdout.is_empty());
    // Found on the sparse released checkpoint: peak RSS 66 MB above the plan at every budget,
    // because the expert location tables (82,432 experts × six heap names: 85 MB measured) were
    // in no item. The plan now counts them with the tensor index.
    let table = k3::bind::experts::location_table_bytes(&released_5(), 5);
    assert!(table > 3_000_000, "{table}");
    let at = err
        .find("tensor index ")
        .expect("the plan names the tensor index")
        + 13;
    let shown = err[at..].split(',').next().unwrap();
    let (num, unit) = shown.split_once(' ').unwrap();
    let bytes = num.parse::<f64>().unwrap() * if unit == "MB" { 1e6 } else { 1e3 };
    assert!(
        bytes >= table as f64,
        "tensor index {shown} < location tables {table}"
    );
}

/// The released config cut to 5 layers, for the catalogue's byte counts.
fn released_5() -> k3::config::Config {
    let dir = scratch_dir("sparse-k3-5-config");
    let spec = SynthSpec::k3(5, 896);
    std::fs::write(dir.join("config.json"), spec.config_json()).unwrap();
    k3::config::Config::from_file(&dir.join("config.json")).unwrap()
}

#[test]
fn the_released_sparse_plan_has_the_released_counts() {
    let opts = SparseOptions {
        released_vision: true,
        ..SparseOptions::default()
    };
    let plan = synth::sparse_plan(&SynthSpec::k3(93, 896), &opts).unwrap();
    assert_eq!(plan.shards.len(), 96);
    assert_eq!(plan.tensor_count(), 497_220);
    assert_eq!(plan.shard_bytes(), synth::RELEASED_CHECKPOINT_BYTES);
    // The data sections are the released ones; the headers are the generator's (its JSON
    // spelling, not the released files' byte for byte).
    assert_eq!(plan.shards[0].data_bytes(), 2_341_213_184);
    assert_eq!(plan.shards[93].data_bytes(), 4_697_663_488);
}
