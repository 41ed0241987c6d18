//! The expert source: an expert whose six tensors are not one contiguous run is read as six
//! pieces (FORMATS.md §4: not an error) and gives bit-identical logits.

use crate::support;
use crate::support::model_ref;

use model_ref::Ckpt;
use serde_json::Value;
use std::path::Path;
use support::{copy_dir, fixture, run_k3, scratch_dir};

/// Rewrites every shard holding a tensor of `layer`'s experts with its tensors in reverse
/// name order (so each expert's six tensors run backwards: never contiguous in order).
fn reverse_shard_of_layer(dir: &Path, layer: usize) {
    let c = Ckpt::open(dir);
    let probe =
        format!("language_model.model.layers.{layer}.block_sparse_moe.experts.0.w1.weight_packed");
    let si = c.tensors[&probe].shard;
    let mut names: Vec<&String> = c
        .tensors
        .iter()
        .filter(|(_, t)| t.shard == si)
        .map(|(n, _)| n)
        .collect();
    names.sort();
    names.reverse();
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for n in names {
        let t = &c.tensors[n];
        let b = c.bytes(n);
        header.insert(n.clone(), serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [data.len(), data.len() + b.len()]}));
        data.extend_from_slice(&b);
    }
    let h = serde_json::to_string(&Value::Object(header)).unwrap();
    std::fs::write(&c.shards[si], support::raw_safetensors(&h, &data)).unwrap();
}

fn hash_and_dump(dir: &Path, tag: &str) -> (Value, Vec<u8>) {
    let d = scratch_dir(&format!("experts_{tag}"));
    let out = d.join("r.json");
    let dump = d.join("l.f32");
    let o = run_k3([
        dir.to_str().unwrap(),
        "--ids",
        "410,335,224,165,463,246,467,2,368,223,302,236",
        "--gen",
        "6",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
        "--dump-logits",
        dump.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (j["logits_hash"].clone(), std::fs::read(&dump).unwrap())
}

#[test]
fn non_contiguous_experts_are_read_in_pieces_with_identical_logits() {
    let dir = copy_dir(&fixture("tiny-k3"), "experts_reversed_ckpt");
    reverse_shard_of_layer(&dir, 1); // shard 2: layers 1-3
    let c = Ckpt::open(&dir);
    let a = &c.tensors["language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed"];
    let b = &c.tensors["language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale"];
    assert_ne!(
        a.offset + a.len,
        b.offset,
        "the rewrite must break expert contiguity"
    );
    let (h0, d0) = hash_and_dump(&fixture("tiny-k3"), "orig");
    let (h1, d1) = hash_and_dump(&dir, "reversed");
    assert_eq!(h0, h1);
    assert_eq!(d0, d1);
}
