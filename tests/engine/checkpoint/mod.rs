//! Checkpoint directory → TensorIndex (FORMATS.md §3), the compact index at released scale,
//! the catalogue classifier, and the binding census with its byte ledger.

mod sparse;
mod synthetic;

use crate::support;

use k3::catalogue::{self, classify, ExpertMatrix, ExpertPart, ModelTensor, TensorClass};
use k3::census::Census;
use k3::checkpoint::{IndexBuilder, TensorIndex, INDEX_FILE};
use k3::config::Config;
use k3::json::{self, Value};
use k3::safetensors::{self, Dtype};
use std::path::Path;
use support::{copy_checkpoint, fixture, raw_safetensors};

const L1: &str = "language_model.model.layers.1.";

fn open_err(dir: &Path, fragments: &[&str]) -> String {
    let e = match TensorIndex::open(dir) {
        Ok(_) => panic!("{} should be refused", dir.display()),
        Err(e) => e,
    };
    assert_eq!(e.exit_code(), 2, "{}", e.message);
    for f in fragments {
        assert!(e.message.contains(f), "message lacks {f:?}: {}", e.message);
    }
    e.message
}

/// Rewrites a shard's header through `edit` (on the JSON DOM), keeping the data section.
fn edit_shard(path: &Path, edit: impl FnOnce(&mut Value)) {
    let file = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let mut h = json::parse(&file[8..8 + n]).unwrap();
    edit(&mut h);
    std::fs::write(path, raw_safetensors(&h.to_json(), &file[8 + n..])).unwrap();
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v = json::parse(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, v.to_json()).unwrap();
}

fn rename(h: &mut Value, from: &str, to: &str) {
    let o = h.as_object_mut().unwrap();
    let v = o
        .remove(from)
        .unwrap_or_else(|| panic!("{from} not in header"));
    o.insert(to, v);
}

fn weight_map(v: &mut Value) -> &mut json::Object {
    v.get_mut("weight_map").unwrap().as_object_mut().unwrap()
}

const SHARD2: &str = "model-00002-of-00007.safetensors";
const SHARD3: &str = "model-00003-of-00007.safetensors";
const SHARD6: &str = "model-00006-of-00007.safetensors";

#[test]
fn tiny_k3_index() {
    let idx = TensorIndex::open(&fixture("tiny-k3")).unwrap();
    assert!(idx.has_index_file());
    assert_eq!(idx.len(), 918);
    assert_eq!(idx.shards().len(), 7);
    assert!(idx.shards().iter().all(|s| s.present));
    let names: Vec<&str> = idx.shards().iter().map(|s| s.file_name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    // Shard 1's layout (see the fixture README): input_layernorm first, at 8 + N.
    let s0 = &idx.shards()[0];
    let t = idx
        .get("language_model.model.layers.0.input_layernorm.weight")
        .unwrap();
    assert_eq!((t.shard, t.offset, t.nbytes), (0, 8 + s0.header_len, 256));
    assert_eq!((t.dtype, t.shape), (Dtype::BF16, &[128u64][..]));
    let t = idx
        .get("language_model.model.layers.0.self_attn.A_log")
        .unwrap();
    assert_eq!(
        (t.dtype, t.shape, t.offset - 8 - s0.header_len),
        (Dtype::F32, &[16u64][..], 75264)
    );
    assert!(idx
        .get("language_model.model.layers.0.self_attn.A_lo")
        .is_none());
    assert!(idx
        .get("language_model.model.layers.0.self_attn.A_log.")
        .is_none());
    assert!(idx.get("").is_none());
    // Every name round-trips, iteration is (shard, offset) order and lookups agree.
    let mut prev = (0usize, 0u64);
    let mut count = 0;
    idx.for_each(|i, name, info| {
        assert_eq!(idx.position(name), Some(i));
        assert_eq!(idx.get(name), Some(info));
        assert!((info.shard, info.offset) >= prev);
        prev = (info.shard, info.offset);
        count += 1;
    });
    assert_eq!(count, 918);
}

#[test]
fn directory_without_index_file_gives_the_same_index() {
    let dir = copy_checkpoint("tiny-k3", "ck_noindex");
    std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a shard").unwrap();
    let a = TensorIndex::open(&fixture("tiny-k3")).unwrap();
    let b = TensorIndex::open(&dir).unwrap();
    assert!(!b.has_index_file());
    assert_eq!(a.len(), b.len());
    a.for_each(|_, name, info| assert_eq!(b.get(name), Some(info), "{name}"));
}

#[test]
fn single_model_safetensors_is_the_one_shard_case() {
    let dir = support::scratch_dir("ck_single");
    std::fs::write(
        dir.join("model.safetensors"),
        support::safetensors_file(&[("a.b", "U8", &[2]), ("a.c", "F32", &[1])]),
    )
    .unwrap();
    let idx = TensorIndex::open(&dir).unwrap();
    assert_eq!(idx.len(), 2);
    assert_eq!(idx.shards()[0].file_name, "model.safetensors");
}

#[test]
fn refuse_a_tensor_in_two_shards() {
    let dir = copy_checkpoint("tiny-k3", "ck_two_shards");
    std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
    std::fs::copy(
        dir.join(SHARD6),
        dir.join("model-00008-of-00007.safetensors"),
    )
    .unwrap();
    open_err(
        &dir,
        &[
            "model-00008-of-00007.safetensors: tensor \"language_model.lm_head.weight\" is also in shard model-00006-of-00007.safetensors",
        ],
    );
}

#[test]
fn refuse_index_file_disagreeing_with_shards() {
    // Listed in the wrong (present) shard.
    let dir = copy_checkpoint("tiny-k3", "ck_wrong_shard");
    edit_json(&dir.join(INDEX_FILE), |v| {
        weight_map(v).insert(format!("{L1}input_layernorm.weight"), SHARD3);
    });
    open_err(
        &dir,
        &[
            INDEX_FILE,
            &format!("maps tensor \"{L1}input_layernorm.weight\" to shard {SHARD3}, but the tensor is in shard {SHARD2}"),
        ],
    );
    // Listed but missing from its shard.
    let dir = copy_checkpoint("tiny-k3", "ck_listed_missing");
    edit_json(&dir.join(INDEX_FILE), |v| {
        weight_map(v).insert(format!("{L1}extra.weight"), SHARD2);
    });
    open_err(
        &dir,
        &[&format!("maps tensor \"{L1}extra.weight\" to shard {SHARD2}, but that shard's header does not contain it")],
    );
    // In a shard but not listed.
    let dir = copy_checkpoint("tiny-k3", "ck_unlisted");
    edit_json(&dir.join(INDEX_FILE), |v| {
        weight_map(v).remove(&format!("{L1}mlp_res_norm.weight"));
    });
    open_err(
        &dir,
        &[&format!(
            "{SHARD2}: tensor \"{L1}mlp_res_norm.weight\" is not listed in {INDEX_FILE}"
        )],
    );
    // Listed under an absent shard while present in another.
    let dir = copy_checkpoint("tiny-k3", "ck_absent_dup");
    edit_json(&dir.join(INDEX_FILE), |v| {
        weight_map(v).insert(
            "language_model.lm_head.weight",
            "model-00099-of-00099.safetensors",
        );
    });
    // (it is listed: the message says under which shard, and that the shard does not exist)
    let m = open_err(
        &dir,
        &[
            INDEX_FILE,
            "maps tensor \"language_model.lm_head.weight\" to shard model-00099-of-00099.safetensors, which does not exist",
            "the tensor is in shard model-0000",
        ],
    );
    assert!(!m.contains("not listed"), "{m}");
}

#[test]
fn refuse_bad_index_files() {
    for (edit, frag) in [
        (
            (|v: &mut Value| {
                weight_map(v).insert("x", "../model-00001-of-00007.safetensors");
            }) as fn(&mut Value),
            "is not a plain file name ending in .safetensors",
        ),
        (
            |v| {
                weight_map(v).insert("x", "sub/dir.safetensors");
            },
            "not a plain file name",
        ),
        (
            |v| {
                weight_map(v).insert("x", "model.bin");
            },
            "not a plain file name",
        ),
        (
            |v| {
                weight_map(v).insert("x", 3u64);
            },
            "weight_map[\"x\"]: expected a shard file name string",
        ),
        (
            |v| {
                v.as_object_mut().unwrap().remove("weight_map");
            },
            "missing the required weight_map object",
        ),
        (
            |v| {
                v.as_object_mut()
                    .unwrap()
                    .insert("weight_map", Value::Array(vec![]));
            },
            "weight_map must be an object",
        ),
    ] {
        let dir = copy_checkpoint("tiny-k3", "ck_bad_index");
        edit_json(&dir.join(INDEX_FILE), edit);
        open_err(&dir, &[INDEX_FILE, frag]);
    }
    let dir = copy_checkpoint("tiny-k3", "ck_bad_index_json");
    std::fs::write(
        dir.join(INDEX_FILE),
        "{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"x.safetensors\"}}",
    )
    .unwrap();
    open_err(&dir, &["duplicate weight_map entry \"a\""]);
    std::fs::write(dir.join(INDEX_FILE), "{\"weight_map\": {").unwrap();
    open_err(&dir, &["invalid JSON at byte 16"]);
}

#[test]
fn refuse_empty_or_missing_directories() {
    let dir = support::scratch_dir("ck_empty");
    open_err(
        &dir,
        &["no model.safetensors.index.json and no *.safetensors files"],
    );
    open_err(&dir.join("nope"), &["not a directory"]);
}

#[test]
fn absent_shard_makes_its_tensors_absent_and_the_census_says_where() {
    let dir = copy_checkpoint("tiny-k3", "ck_absent");
    std::fs::remove_file(dir.join(SHARD3)).unwrap();
    let idx = TensorIndex::open(&dir).unwrap();
    let absent: Vec<_> = idx.shards().iter().filter(|s| !s.present).collect();
    assert_eq!(absent.len(), 1);
    assert_eq!(absent[0].file_name, SHARD3);
    assert!(idx.absent_len() > 0);
    let name = "language_model.model.layers.5.input_layernorm.weight";
    assert!(idx.get(name).is_none());
    assert_eq!(idx.absent_shard_of(name).unwrap().file_name, SHARD3);
    let cfg = Config::from_file(&dir.join("config.json")).unwrap();
    let c = Census::run(&cfg, &idx);
    let e = c.check("m").unwrap_err();
    // One line for the shard with the count of its required tensors, not one per tensor.
    let line = format!("shard {SHARD3} is not present (the index file maps ");
    assert_eq!(e.message.matches(&line).count(), 1, "{}", e.message);
    assert!(
        e.message
            .contains("required tensors to it, first language_model."),
        "{}",
        e.message
    );
    assert!(
        !e.message.contains(&format!("{name}: missing")),
        "{}",
        e.message
    );
    assert!(e.message.lines().count() <= 3, "{}", e.message);
}

#[test]
fn classifier() {
    assert_eq!(
        classify(catalogue::LM_HEAD),
        TensorClass::Model(ModelTensor::LmHead)
    );
    assert_eq!(
        classify("language_model.model.layers.12.self_attn.q_proj.weight"),
        TensorClass::Layer {
            layer: 12,
            suffix: "self_attn.q_proj.weight"
        }
    );
    assert_eq!(
        classify("language_model.model.layers.3.block_sparse_moe.experts.10.w2.weight_scale"),
        TensorClass::Expert {
            layer: 3,
            expert: 10,
            matrix: ExpertMatrix::W2,
            part: ExpertPart::Scale
        }
    );
    for unknown in [
        "language_model.model.layers.03.input_layernorm.weight",
        "language_model.model.layers.+1.input_layernorm.weight",
        "language_model.model.layers.1",
        "language_model.model.layers.1.",
        "language_model.model.layers.99999999999999999999999.x",
        "language_model.model.layers.1.block_sparse_moe.experts.3.w1.weight",
        "language_model.model.layers.1.block_sparse_moe.experts.3.w4.weight_packed",
        "language_model.model.layers.1.block_sparse_moe.experts.03.w1.weight_packed",
        "language_model.model.embed_tokens.weight_zero_point",
        "model.embed_tokens.weight",
        "lm_head.weight",
    ] {
        assert_eq!(classify(unknown), TensorClass::Unknown, "{unknown}");
    }
    assert_eq!(classify("vision_tower.x"), TensorClass::Ignored);
    assert_eq!(classify("mm_projector.proj.0.weight"), TensorClass::Ignored);
}

#[test]
fn catalogue_counts_and_bytes_at_released_scale() {
    let cfg = Config::from_file(&fixture("configs/k3-released-reserialised.json")).unwrap();
    // MODEL.md §4: 23 (layer 0), 28 (KDA + MoE), 22 (MLA + MoE) trunk tensors; 6 × 82,432 experts.
    assert_eq!(catalogue::layer_suffixes(&cfg, 0).len(), 23);
    assert_eq!(catalogue::layer_suffixes(&cfg, 1).len(), 28);
    assert_eq!(catalogue::layer_suffixes(&cfg, 3).len(), 22);
    assert_eq!(catalogue::required_count(&cfg), 497_220 - 168);
    assert_eq!(catalogue::expert_bytes(&cfg), 17_547_264);
    // MODEL.md §9 byte figures from the catalogue shapes.
    let bytes = |specs: Vec<catalogue::TensorSpec>| -> u64 {
        specs.iter().map(|s| s.nbytes().unwrap()).sum()
    };
    assert_eq!(bytes(catalogue::layer_tensors(&cfg, 0)), 2_341_213_184);
    assert_eq!(bytes(catalogue::layer_tensors(&cfg, 1)), 1_267_744_256);
    assert_eq!(bytes(catalogue::layer_tensors(&cfg, 3)), 844_335_616);
    let trunk: u64 = (0..93)
        .map(|l| bytes(catalogue::layer_tensors(&cfg, l)))
        .sum();
    assert_eq!(trunk, 108_811_877_376);
    assert_eq!(bytes(catalogue::model_tensors(&cfg)), 4_697_663_488);
    let e = catalogue::expert_tensors(&cfg, 1, 0);
    assert_eq!(e[0].shape, [3072, 1792]);
    assert_eq!(e[3].shape, [3584, 96]);
    assert!(e[5].name.ends_with("experts.0.w3.weight_scale"));
}

/// Builds the released checkpoint's 497,220 names, shapes and dtypes (MODEL.md §4, from the
/// catalogue with the real K3 config, plus 168 vision/projector tensors) as one safetensors
/// header, indexes it, and measures the index's bytes per tensor including names.
#[test]
fn index_is_compact_at_released_scale() {
    let cfg = Config::from_file(&fixture("configs/k3-released-reserialised.json")).unwrap();
    let mut specs: Vec<(String, &'static str, Vec<u64>)> = Vec::new();
    let dn = |d: Dtype| d.name();
    for l in 0..93 {
        if cfg.is_moe(l) {
            for e in 0..cfg.num_experts {
                for s in catalogue::expert_tensors(&cfg, l, e) {
                    specs.push((s.name, dn(s.dtype), s.shape));
                }
            }
        }
        for s in catalogue::layer_tensors(&cfg, l) {
            specs.push((s.name, dn(s.dtype), s.shape));
        }
    }
    for s in catalogue::model_tensors(&cfg) {
        specs.push((s.name, dn(s.dtype), s.shape));
    }
    for i in 0..84 {
        specs.push((
            format!("vision_tower.encoder.blocks.{i}.weight"),
            "BF16",
            vec![1152, 1152],
        ));
        specs.push((format!("mm_projector.proj.{i}.weight"), "BF16", vec![7168]));
    }
    assert_eq!(specs.len(), 497_220);
    let mut header = String::with_capacity(80 << 20);
    header.push('{');
    let mut off = 0u64;
    for (i, (name, dtype, shape)) in specs.iter().enumerate() {
        let n = shape.iter().product::<u64>() * support::dtype_size(dtype);
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            dims.join(","),
            off + n
        ));
        off += n;
    }
    header.push('}');
    let file_size = 8 + header.len() as u64 + off;
    let hdr = safetensors::parse_header("synthetic", header.as_bytes(), file_size).unwrap();
    assert_eq!(hdr.len(), 497_220);
    let mut b = IndexBuilder::new(Path::new("synthetic"));
    b.add_shard(
        "model.safetensors",
        "synthetic/model.safetensors".into(),
        file_size,
        &hdr,
    )
    .unwrap();
    drop(hdr);
    let idx = b.finish();
    assert_eq!(idx.len(), 497_220);
    let name_bytes: usize = specs.iter().map(|s| s.0.len()).sum();
    let bytes = idx.heap_bytes();
    let per = bytes as f64 / 497_220.0;
    println!(
        "tensor index at released scale: 497,220 tensors, header {:.1} MB, names {:.1} MB, index {} bytes = {:.1} bytes/tensor (names alone average {:.1} bytes)",
        header.len() as f64 / 1e6,
        name_bytes as f64 / 1e6,
        bytes,
        per,
        name_bytes as f64 / 497_220.0
    );
    // Compactness is the point: well under the plain names alone.
    assert!(per < 64.0, "{per} bytes per tensor");
    // Every name is found, with the right data; near misses are not.
    for (name, dtype, shape) in &specs {
        let t = idx.get(name).unwrap_or_else(|| panic!("{name} not found"));
        assert_eq!(t.dtype.name(), *dtype);
        assert_eq!(t.shape, &shape[..]);
    }
    assert!(idx
        .get("language_model.model.layers.92.block_sparse_moe.experts.896.w1.weight_packed")
        .is_none());
    assert!(idx
        .get("language_model.model.layers.9.block_sparse_moe.experts.89.w1.weight_packe")
        .is_none());
    // The census of the released shapes is clean and reproduces the MODEL.md §9 ledger.
    let c = Census::run(&cfg, &idx);
    c.check("synthetic").unwrap();
    let l = &c.ledger;
    assert_eq!(l.trunk_bytes, 108_811_877_376);
    assert_eq!(l.largest_run, Some((0, 2_341_213_184)));
    assert_eq!(l.model_table_bytes, 4_697_663_488);
    assert_eq!(l.experts.present, 82_432);
    assert_eq!(l.experts.bytes, 1_446_456_066_048);
    assert!(l.trunk_contiguous() && l.experts_contiguous());
    assert_eq!(c.counts.ignored, 168);
}

// ------------------------------------------------------------------------------------------
// Census
// ------------------------------------------------------------------------------------------

fn census_of(dir: &Path) -> Census {
    let cfg = Config::from_file(&dir.join("config.json")).unwrap();
    let idx = TensorIndex::open(dir).unwrap();
    Census::run(&cfg, &idx)
}

fn census_err(dir: &Path, fragments: &[&str]) -> String {
    let c = census_of(dir);
    let e = c.check(&dir.display().to_string()).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    for f in fragments {
        assert!(e.message.contains(f), "message lacks {f:?}:\n{}", e.message);
    }
    e.message
}

#[test]
fn census_of_both_fixtures_is_clean_with_contiguous_runs() {
    for (name, layers, experts) in [("tiny-k3", 13, 96u64), ("tiny-k3-text", 5, 32)] {
        let c = census_of(&fixture(name));
        c.check(name).unwrap();
        let l = &c.ledger;
        assert_eq!(l.layers.len(), layers);
        assert!(l.trunk_contiguous(), "{name}");
        assert_eq!(l.experts.present, experts);
        assert_eq!(l.experts.contiguous, experts);
        assert_eq!(c.counts.unknown, 0);
        assert_eq!(c.counts.ignored, 2);
    }
    let c = census_of(&fixture("tiny-k3"));
    let l = &c.ledger;
    assert_eq!(l.total_bytes, 3_760_928); // expected.json checkpoint.total_tensor_bytes
    assert_eq!(
        l.trunk_bytes + l.model_table_bytes + l.experts.bytes + l.ignored_bytes,
        l.total_bytes
    );
    assert_eq!(l.layers[0].bytes, 167_808);
    assert_eq!(l.experts.bytes_per_expert, 6528);
    assert_eq!(
        c.bound_shards(),
        [0, 1, 2, 3, 4, 5],
        "the vision shard holds no bound tensor"
    );
}

#[test]
fn census_reports_every_problem_together() {
    let dir = copy_checkpoint("tiny-k3", "census_many");
    edit_shard(&dir.join(SHARD2), |h| {
        // Missing + unknown (renamed), wrong shape, wrong dtype, unquantised expert.
        rename(
            h,
            &format!("{L1}self_attn.q_proj.weight"),
            &format!("{L1}self_attn.q_projection.weight"),
        );
        let k = h.get_mut(&format!("{L1}self_attn.k_proj.weight")).unwrap();
        k.as_object_mut()
            .unwrap()
            .insert("shape", Value::from(vec![128u64, 64]));
        let v = h.get_mut(&format!("{L1}self_attn.v_proj.weight")).unwrap();
        v.as_object_mut().unwrap().insert("dtype", "F16");
        rename(
            h,
            &format!("{L1}block_sparse_moe.experts.3.w1.weight_packed"),
            &format!("{L1}block_sparse_moe.experts.3.w1.weight"),
        );
        let s = h
            .get_mut(&format!("{L1}block_sparse_moe.experts.4.w2.weight_scale"))
            .unwrap();
        s.as_object_mut().unwrap().insert("dtype", "F8_E8M0");
    });
    std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
    census_err(
        &dir,
        &[
            "tensor census found 7 problems",
            &format!("{L1}self_attn.q_projection.weight (in {SHARD2}): not in the tensor catalogue (docs/formats.md#tensor-names) for layer 1 (KDA, MoE)"),
            &format!("{L1}self_attn.q_proj.weight: missing"),
            &format!("{L1}self_attn.k_proj.weight: shape [128, 64] but docs/formats.md#tensor-names requires [64, 128]"),
            &format!("{L1}self_attn.v_proj.weight: dtype F16 but docs/formats.md#tensor-names requires BF16"),
            &format!("{L1}block_sparse_moe.experts.3.w1.weight (in {SHARD2}): not in the tensor catalogue (docs/formats.md#tensor-names) (routed experts must be MXFP4"),
            &format!("{L1}block_sparse_moe.experts.3.w1.weight_packed: missing"),
            &format!("{L1}block_sparse_moe.experts.4.w2.weight_scale: dtype F8_E8M0 but docs/formats.md#tensor-names requires U8 (a routed expert in another encoding is refused"),
        ],
    );
}

#[test]
fn census_refuses_a_tied_head_that_is_also_stored() {
    let dir = copy_checkpoint("tiny-k3", "census_tied");
    edit_json(&dir.join("config.json"), |v| {
        v.get_mut("text_config")
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("tie_word_embeddings", true);
    });
    census_err(&dir, &["language_model.lm_head.weight (in model-00006-of-00007.safetensors): stored although tie_word_embeddings is true"]);
}

#[test]
fn census_refuses_names_outside_the_prefixes_and_layers_or_experts_that_do_not_exist() {
    let dir = copy_checkpoint("tiny-k3", "census_outside");
    std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
    edit_shard(&dir.join("model-00007-of-00007.safetensors"), |h| {
        rename(h, "mm_projector.proj.0.weight", "projector.proj.0.weight");
    });
    census_err(&dir, &["projector.proj.0.weight (in model-00007-of-00007.safetensors): outside language_model., vision_tower. and mm_projector."]);
    // A config with fewer layers / experts than the checkpoint holds.
    let dir = copy_checkpoint("tiny-k3", "census_fewer");
    edit_json(&dir.join("config.json"), |v| {
        let tc = v.get_mut("text_config").unwrap().as_object_mut().unwrap();
        tc.insert("num_hidden_layers", 12u64);
        tc.insert("num_experts", 7u64);
        let lac = tc
            .get_mut("linear_attn_config")
            .unwrap()
            .as_object_mut()
            .unwrap();
        lac.insert("full_attn_layers", Value::from(vec![4u64, 8, 12]));
        lac.remove("kda_layers");
    });
    census_err(
        &dir,
        &[
            "language_model.model.layers.12.input_layernorm.weight (in model-00005-of-00007.safetensors): layer 12 does not exist (num_hidden_layers = 12)",
            "experts.7.w1.weight_packed (in model-00002-of-00007.safetensors): expert 7 does not exist (num_experts = 7)",
            "gate.weight: shape [8, 128] but docs/formats.md#tensor-names requires [7, 128]",
        ],
    );
    // Experts on a dense layer.
    let dir = copy_checkpoint("tiny-k3", "census_dense");
    edit_json(&dir.join("config.json"), |v| {
        v.get_mut("text_config")
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("first_k_dense_replace", 2u64);
    });
    census_err(&dir, &["(in model-00002-of-00007.safetensors): layer 1 has a dense FFN (first_k_dense_replace = 2) and no routed experts", "layers.1.mlp.gate_proj.weight: missing"]);
}

#[test]
fn ledger_reports_broken_contiguity_without_refusing() {
    let dir = copy_checkpoint("tiny-k3", "census_noncontig");
    std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
    // Swap the byte ranges of a 2048-byte trunk tensor and a 2048-byte expert tensor.
    edit_shard(&dir.join(SHARD2), |h| {
        let a = format!("{L1}self_attn.f_b_proj.weight");
        let b = format!("{L1}block_sparse_moe.experts.0.w1.weight_packed");
        let oa = h.get(&a).unwrap().get("data_offsets").unwrap().clone();
        let ob = h.get(&b).unwrap().get("data_offsets").unwrap().clone();
        h.get_mut(&a)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("data_offsets", ob);
        h.get_mut(&b)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("data_offsets", oa);
    });
    let c = census_of(&dir);
    c.check("x").unwrap();
    let l = &c.ledger;
    assert!(!l.layers[1].contiguous);
    assert!(
        l.layers[1]
            .break_reason
            .as_ref()
            .unwrap()
            .contains("gap of"),
        "{:?}",
        l.layers[1].break_reason
    );
    assert!(l.layers[2].contiguous);
    assert_eq!(l.experts.contiguous, 95);
    assert_eq!(l.experts.non_contiguous_examples, [(1, 0)]);
}

#[test]
fn weights_tag_covers_bound_shards_and_detects_changed_headers() {
    let dir = copy_checkpoint("tiny-k3", "ck_tag");
    let idx = TensorIndex::open(&dir).unwrap();
    let cfg = Config::from_file(&dir.join("config.json")).unwrap();
    let bound = Census::run(&cfg, &idx).bound_shards();
    // FNV-1a-64 over the headers of shards 1-6 in file-name order (independently computed).
    assert_eq!(idx.weights_tag(&bound).unwrap(), 0x308b2ffe03020781);
    // Order and duplicates of the argument do not matter.
    let mut rev = bound.clone();
    rev.reverse();
    rev.push(0);
    assert_eq!(idx.weights_tag(&rev).unwrap(), 0x308b2ffe03020781);
    // A header rewritten after indexing (same length) is an I/O failure during the run.
    let p = dir.join(SHARD2);
    let mut f = std::fs::read(&p).unwrap();
    let pos = f.windows(4).position(|w| w == b"\"pt\"").unwrap();
    f[pos + 1] = b'q';
    std::fs::write(&p, f).unwrap();
    let e = idx.weights_tag(&bound).unwrap_err();
    assert_eq!(e.exit_code(), 4);
    assert!(
        e.message
            .contains("header changed after the checkpoint was indexed"),
        "{}",
        e.message
    );
}
