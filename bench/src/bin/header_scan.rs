//! Header scan and tensor index at the released scale (497,220 tensors, one 78 MB header).
//!
//! Measures, in the same run: memory copy bandwidth over the header bytes (the limit), the JSON
//! pull scan (`Scanner::skip_value`), the full safetensors validation (`parse_header`), building
//! the compact index, and the DOM parse for comparison; reports MB/s, the ratio to the copy
//! bandwidth, and the index's bytes per tensor. Usage:
//!
//! ```text
//! cargo run --release -p k3-bench --bin header_scan [-- --out bench/results/header_scan.json]
//! ```

use k3::catalogue;
use k3::checkpoint::IndexBuilder;
use k3::config::Config;
use k3::json::{self, Object, Scanner, Value};
use k3::safetensors;
use std::path::Path;
use std::time::Instant;

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(f());
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn released_header() -> (String, u64) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cfg = Config::from_file(&root.join("tests/fixtures/configs/k3-released-reserialised.json"))
        .expect("released-shape config");
    let mut specs: Vec<catalogue::TensorSpec> = Vec::new();
    for l in 0..cfg.num_hidden_layers {
        if cfg.is_moe(l) {
            for e in 0..cfg.num_experts {
                specs.extend(catalogue::expert_tensors(&cfg, l, e));
            }
        }
        specs.extend(catalogue::layer_tensors(&cfg, l));
    }
    specs.extend(catalogue::model_tensors(&cfg));
    for i in 0..84 {
        for (name, shape) in [
            (
                format!("vision_tower.encoder.blocks.{i}.weight"),
                vec![1152, 1152],
            ),
            (format!("mm_projector.proj.{i}.weight"), vec![7168]),
        ] {
            specs.push(catalogue::TensorSpec {
                name,
                shape,
                dtype: safetensors::Dtype::BF16,
            });
        }
    }
    let mut h = String::with_capacity(80 << 20);
    h.push('{');
    let mut off = 0u64;
    for (i, s) in specs.iter().enumerate() {
        let n = s.nbytes().expect("fits");
        let dims: Vec<String> = s.shape.iter().map(|d| d.to_string()).collect();
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(
            "\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            s.name,
            s.dtype,
            dims.join(","),
            off + n
        ));
        off += n;
    }
    h.push('}');
    (h, off)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = match args.as_slice() {
        [] => None,
        [f, p] if f == "--out" => Some(p.clone()),
        _ => {
            eprintln!("usage: header_scan [--out FILE]");
            std::process::exit(2);
        }
    };
    let (header, data_len) = released_header();
    let bytes = header.as_bytes();
    let file_size = 8 + bytes.len() as u64 + data_len;
    let mb = bytes.len() as f64 / 1e6;
    let runs = 5;

    let mut dst = vec![0u8; bytes.len()];
    let t_copy = best_of(runs, || {
        dst.copy_from_slice(bytes);
        dst[dst.len() / 2]
    });
    let t_scan = best_of(runs, || {
        let mut s = Scanner::new(bytes).expect("utf-8");
        s.skip_value().expect("valid");
        s.finish().expect("end");
    });
    let t_validate = best_of(runs, || {
        safetensors::parse_header("synthetic", bytes, file_size)
            .expect("valid")
            .len()
    });
    let mut index_bytes = 0usize;
    let mut n_tensors = 0usize;
    let t_index = best_of(runs, || {
        let h = safetensors::parse_header("synthetic", bytes, file_size).expect("valid");
        let mut b = IndexBuilder::new(Path::new("synthetic"));
        b.add_shard(
            "model.safetensors",
            "synthetic/model.safetensors".into(),
            file_size,
            &h,
        )
        .expect("indexes");
        let idx = b.finish();
        index_bytes = idx.heap_bytes();
        n_tensors = idx.len();
        idx.len()
    });
    let t_dom = best_of(3, || json::parse(bytes).expect("valid"));

    let rate = |t: f64| mb / t;
    let copy_rate = rate(t_copy);
    let entry = |t: f64| {
        Value::Object(
            Object::new()
                .with("seconds", t)
                .with("mb_per_s", rate(t))
                .with("ratio_to_copy_bandwidth", rate(t) / copy_rate),
        )
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|x| x.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let report = Value::Object(
        Object::new()
            .with(
                "command",
                "cargo run --release -p k3-bench --bin header_scan -- --out bench/results/header_scan.json",
            )
            .with(
                "machine",
                Object::new()
                    .with("cpu", cpu)
                    .with(
                        "threads",
                        std::thread::available_parallelism().map_or(0, |n| n.get()),
                    )
                    .with("note", "shared machine; best of 5 runs (DOM: 3)"),
            )
            .with("tensors", n_tensors)
            .with("header_bytes", bytes.len())
            .with("memcpy_mb_per_s", copy_rate)
            .with("pull_scan", entry(t_scan))
            .with("safetensors_validate", entry(t_validate))
            .with("validate_and_index", entry(t_index))
            .with("dom_parse", entry(t_dom))
            .with("index_heap_bytes", index_bytes)
            .with(
                "index_bytes_per_tensor",
                index_bytes as f64 / n_tensors.max(1) as f64,
            ),
    );
    let text = report.to_json_pretty() + "\n";
    print!("{text}");
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap_or_else(|e| {
            eprintln!("cannot write {p}: {e}");
            std::process::exit(4);
        });
    }
}
