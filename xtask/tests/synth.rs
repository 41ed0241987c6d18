//! Tests of the synthetic checkpoint generator (the `k3-synth` crate, synth/) and `cargo xtask synth`.
//! Formats are checked with an independent JSON parser (serde_json) against MODEL.md §2, §4,
//! §9 and FORMATS.md §2–§5.

use k3_synth as synth;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use synth::{Options, SynthSpec};

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("k3-synth-test")
        .tempdir()
        .expect("temp dir")
}

fn gen(spec: &SynthSpec, dir: &Path, threads: usize) -> synth::Summary {
    synth::generate(
        spec,
        dir,
        Options {
            threads,
            ..Options::default()
        },
    )
    .expect("generate")
}

/// Every file of a directory, sorted by name: (name, bytes).
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn dir_hash(dir: &Path) -> u64 {
    let mut h = synth::fnv1a64(b"");
    for (name, bytes) in files(dir) {
        h = synth::fnv1a64_update(h, name.as_bytes());
        h = synth::fnv1a64_update(h, &bytes);
    }
    h
}

/// A parsed shard: header JSON (tensor name → (dtype, shape, begin, end)), header length,
/// data section.
struct Shard {
    n: u64,
    tensors: BTreeMap<String, (String, Vec<u64>, u64, u64)>,
    key_order: Vec<String>,
    data: Vec<u8>,
}

fn read_shard(path: &Path) -> Shard {
    let bytes = fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let header = &bytes[8..8 + n as usize];
    let text = std::str::from_utf8(header).unwrap();
    assert!(
        text.starts_with('{'),
        "{}: header starts with {{",
        path.display()
    );
    let trimmed = text.trim_end_matches(' ');
    assert!(trimmed.ends_with('}'), "only spaces pad the header");
    let v: Value = serde_json::from_str(trimmed).unwrap();
    let obj = v.as_object().unwrap();
    let mut tensors = BTreeMap::new();
    let mut key_order = Vec::new();
    for (k, t) in obj {
        if k == "__metadata__" {
            assert_eq!(t["format"], "pt");
            continue;
        }
        let shape = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        let off = t["data_offsets"].as_array().unwrap();
        tensors.insert(
            k.clone(),
            (
                t["dtype"].as_str().unwrap().to_string(),
                shape,
                off[0].as_u64().unwrap(),
                off[1].as_u64().unwrap(),
            ),
        );
        key_order.push(k.clone());
    }
    Shard {
        n,
        tensors,
        key_order,
        data: bytes[8 + n as usize..].to_vec(),
    }
}

fn elem_size(dtype: &str) -> u64 {
    match dtype {
        "BF16" => 2,
        "F32" => 4,
        "U8" => 1,
        d => panic!("unexpected dtype {d}"),
    }
}

/// Validates one directory against FORMATS.md §2–§4 and returns every tensor with its shard.
fn validate_dir(dir: &Path) -> BTreeMap<String, (String, String, Vec<u64>, u64, u64)> {
    let index: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let weight_map = index["weight_map"].as_object().unwrap();
    let shards: BTreeSet<String> = weight_map
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // No file besides config, index, synth.json and the indexed shards.
    let mut expected: BTreeSet<String> = shards.clone();
    for f in ["config.json", "model.safetensors.index.json", "synth.json"] {
        expected.insert(f.to_string());
    }
    let present: BTreeSet<String> = files(dir).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        present, expected,
        "directory holds exactly the checkpoint files"
    );

    let mut all = BTreeMap::new();
    let mut total = 0u64;
    for s in &shards {
        let sh = read_shard(&dir.join(s));
        assert_eq!(sh.n % 8, 0, "{s}: header length multiple of 8");
        let mut sorted = sh.key_order.clone();
        sorted.sort();
        assert_eq!(sh.key_order, sorted, "{s}: header keys sorted");
        // Tiling: sorted by begin, gap-free from 0 to the end of the data section.
        let mut runs: Vec<(u64, u64, &String)> =
            sh.tensors.iter().map(|(k, t)| (t.2, t.3, k)).collect();
        runs.sort();
        let mut at = 0;
        for (b, e, k) in &runs {
            assert_eq!(*b, at, "{s}: {k} starts where the previous tensor ends");
            let (dtype, shape, _, _) = &sh.tensors[*k];
            assert_eq!(
                e - b,
                shape.iter().product::<u64>() * elem_size(dtype),
                "{s}: {k} size"
            );
            at = *e;
        }
        assert_eq!(at, sh.data.len() as u64, "{s}: no trailing bytes");
        // Data order is name order.
        let order: Vec<&String> = runs.iter().map(|r| r.2).collect();
        let mut by_name = order.clone();
        by_name.sort();
        assert_eq!(order, by_name, "{s}: data in ascending name order");
        for (k, (dtype, shape, b, e)) in sh.tensors {
            assert_eq!(
                weight_map[&k].as_str().unwrap(),
                s,
                "{k} indexed to its shard"
            );
            total += e - b;
            all.insert(k, (s.clone(), dtype, shape, b, e));
        }
    }
    assert_eq!(
        all.len(),
        weight_map.len(),
        "every indexed name is in a shard"
    );
    assert_eq!(index["metadata"]["total_size"].as_u64().unwrap(), total);
    all
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes_any_thread_count() {
    let mut spec = SynthSpec::small(5, 8);
    spec.vocab_size = 9000; // embed and head span several 1 MiB blocks
    let (a, b, c) = (tmp(), tmp(), tmp());
    gen(&spec, a.path(), 1);
    gen(&spec, b.path(), 3);
    assert_eq!(
        files(a.path()),
        files(b.path()),
        "bytes independent of threads"
    );
    // Units much smaller than a shard (blocks cut at unit boundaries): same bytes.
    let e = tmp();
    synth::generate(
        &spec,
        e.path(),
        Options {
            threads: 3,
            stage_bytes: Some(12_288),
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(
        files(a.path()),
        files(e.path()),
        "bytes independent of the write size"
    );
    let mut other = spec.clone();
    other.seed = 1;
    gen(&other, c.path(), 2);
    let fa = files(a.path());
    let fc = files(c.path());
    for ((na, ba), (nc, bc)) in fa.iter().zip(&fc) {
        assert_eq!(na, nc);
        if na.ends_with(".safetensors") {
            assert_eq!(ba.len(), bc.len());
            // Headers equal, data differs.
            let n = 8 + u64::from_le_bytes(ba[..8].try_into().unwrap()) as usize;
            assert_eq!(ba[..n], bc[..n]);
            assert_ne!(ba[n..], bc[n..], "{na}: another seed gives other values");
        }
    }
}

/// The bytes of a fixed spec and seed never change silently (GENERATOR_VERSION guards them):
/// tests and benchmarks that pin results on synthetic checkpoints rely on it.
#[test]
fn golden_hash_of_small_checkpoint() {
    let mut spec = SynthSpec::small(5, 8);
    spec.seed = 42;
    let d = tmp();
    gen(&spec, d.path(), 2);
    assert_eq!(synth::GENERATOR_VERSION, 1);
    assert_eq!(
        format!("{:016x}", dir_hash(d.path())),
        "e012b15490d5676a",
        "bytes of SynthSpec::small(5, 8) seed 42 changed: bump GENERATOR_VERSION and this hash"
    );
}

#[test]
fn small_preset_matches_the_tiny_fixture_layout() {
    // Same widths as tests/fixtures/tiny-k3: the same tensor set, shapes, dtypes, shard plan
    // and byte offsets (only the values differ).
    let spec = SynthSpec::small(13, 8);
    let d = tmp();
    gen(&spec, d.path(), 2);
    let ours = validate_dir(d.path());
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-k3");
    let theirs = validate_dir_fixture(&fixture);
    let strip = |m: &BTreeMap<String, (String, String, Vec<u64>, u64, u64)>| {
        // The fixture puts both vision dummies in one shard, the released checkpoint (and
        // the generator) one shard each.
        m.iter()
            .filter(|(k, _)| k.starts_with("language_model."))
            .map(|(k, v)| (k.clone(), (v.1.clone(), v.2.clone(), v.3, v.4)))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(strip(&ours), strip(&theirs));
    // Shard sizes equal too (headers are formatted the same way), up to the vision shards.
    let sizes = |p: &Path| -> Vec<u64> {
        files(p)
            .into_iter()
            .filter(|(n, _)| n.ends_with(".safetensors"))
            .map(|(_, b)| b.len() as u64)
            .take(6)
            .collect()
    };
    assert_eq!(sizes(d.path()), sizes(&fixture));
    // The config resolves to the same values as the fixture's.
    let a: Value =
        serde_json::from_str(&fs::read_to_string(d.path().join("config.json")).unwrap()).unwrap();
    let b: Value =
        serde_json::from_str(&fs::read_to_string(fixture.join("config.json")).unwrap()).unwrap();
    for k in [
        "hidden_size",
        "num_hidden_layers",
        "vocab_size",
        "rms_norm_eps",
        "num_attention_heads",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "num_experts",
        "num_experts_per_token",
        "num_shared_experts",
        "routed_expert_hidden_size",
        "moe_intermediate_size",
        "routed_scaling_factor",
        "first_k_dense_replace",
        "intermediate_size",
        "activation_situ_beta",
        "activation_situ_linear_beta",
        "attn_res_block_size",
        "tie_word_embeddings",
        "mla_use_output_gate",
        "latent_moe_use_norm",
        "moe_renormalize",
        "quantization_config",
        "linear_attn_config",
    ] {
        assert_eq!(a["text_config"][k], b["text_config"][k], "text_config.{k}");
    }
    assert_eq!(a["tie_word_embeddings"], b["tie_word_embeddings"]);
}

/// The fixture has the vision tensors in one shard; validate it the same way.
fn validate_dir_fixture(dir: &Path) -> BTreeMap<String, (String, String, Vec<u64>, u64, u64)> {
    let index: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let mut all = BTreeMap::new();
    let shards: BTreeSet<String> = index["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for s in shards {
        for (k, (dtype, shape, b, e)) in read_shard(&dir.join(&s)).tensors {
            all.insert(k, (s.clone(), dtype, shape, b, e));
        }
    }
    all
}

#[test]
fn layout_contiguity_and_catalogue_at_k3_widths() {
    // Released widths, 5 layers (KDA+dense, KDA, KDA, MLA, MLA) with 16 experts.
    let spec = SynthSpec::k3(5, 16);
    let plan = spec.plan().unwrap();
    assert_eq!(spec.layer_map(), "KKKMM");
    // One layer per shard, then the tables, then the two vision shards.
    let names: Vec<&str> = plan.shards.iter().map(|s| s.file_name.as_str()).collect();
    assert_eq!(names[0], "model-00001-of-000008.safetensors");
    assert_eq!(names.len(), 8);
    for (l, s) in plan.shards[..5].iter().enumerate() {
        let prefix = format!("language_model.model.layers.{l}.");
        assert!(s.tensors.iter().all(|t| t.def.name.starts_with(&prefix)));
        // Experts first (each a run in the fixed order), then the trunk as one run.
        let n_exp = if l == 0 { 0 } else { 16 * 6 };
        for (i, t) in s.tensors.iter().enumerate() {
            assert_eq!(
                i < n_exp,
                t.def.name.contains(".experts."),
                "{}",
                t.def.name
            );
        }
        for e in 0..(n_exp / 6) {
            let mut at = None;
            for (w, k) in [
                ("w1", "weight_packed"),
                ("w1", "weight_scale"),
                ("w2", "weight_packed"),
                ("w2", "weight_scale"),
                ("w3", "weight_packed"),
                ("w3", "weight_scale"),
            ] {
                let name = format!("{prefix}block_sparse_moe.experts.{e}.{w}.{k}");
                let (_, t) = plan.find(&name).unwrap();
                if let Some(a) = at {
                    assert_eq!(t.begin, a, "{name} follows the previous expert tensor");
                }
                at = Some(t.end);
            }
            let first = plan
                .find(&format!(
                    "{prefix}block_sparse_moe.experts.{e}.w1.weight_packed"
                ))
                .unwrap()
                .1
                .begin;
            // MODEL.md §9: 17,547,264 bytes per expert.
            assert_eq!(at.unwrap() - first, 17_547_264);
        }
    }
    let shape = |n: &str| plan.find(n).unwrap().1.def.shape.clone();
    let dtype = |n: &str| plan.find(n).unwrap().1.def.dtype;
    let l = |i: usize, s: &str| format!("language_model.model.layers.{i}.{s}");
    // MODEL.md §4 shapes at K3 widths.
    assert_eq!(shape(&l(0, "mlp.gate_proj.weight")), [33792, 7168]);
    assert_eq!(shape(&l(0, "mlp.down_proj.weight")), [7168, 33792]);
    assert_eq!(shape(&l(1, "self_attn.q_proj.weight")), [12288, 7168]);
    assert_eq!(shape(&l(1, "self_attn.q_conv1d.weight")), [12288, 1, 4]);
    assert_eq!(dtype(&l(1, "self_attn.q_conv1d.weight")), synth::Dtype::F32);
    assert_eq!(shape(&l(1, "self_attn.f_a_proj.weight")), [128, 7168]);
    assert_eq!(shape(&l(1, "self_attn.f_b_proj.weight")), [12288, 128]);
    assert_eq!(shape(&l(1, "self_attn.b_proj.weight")), [96, 7168]);
    assert_eq!(shape(&l(1, "self_attn.A_log")), [128]);
    assert_eq!(shape(&l(1, "self_attn.dt_bias")), [12288]);
    assert_eq!(shape(&l(1, "self_attn.o_norm.weight")), [128]);
    assert_eq!(dtype(&l(1, "self_attn.o_norm.weight")), synth::Dtype::F32);
    assert_eq!(shape(&l(3, "self_attn.q_a_proj.weight")), [1536, 7168]);
    assert_eq!(shape(&l(3, "self_attn.q_b_proj.weight")), [18432, 1536]);
    assert_eq!(
        shape(&l(3, "self_attn.kv_a_proj_with_mqa.weight")),
        [576, 7168]
    );
    assert_eq!(shape(&l(3, "self_attn.kv_a_layernorm.weight")), [512]);
    assert_eq!(shape(&l(3, "self_attn.kv_b_proj.weight")), [24576, 512]);
    assert_eq!(shape(&l(3, "self_attn.g_proj.weight")), [12288, 7168]);
    assert_eq!(shape(&l(3, "self_attn.o_proj.weight")), [7168, 12288]);
    assert_eq!(shape(&l(4, "block_sparse_moe.gate.weight")), [16, 7168]);
    assert_eq!(
        dtype(&l(4, "block_sparse_moe.gate.e_score_correction_bias")),
        synth::Dtype::F32
    );
    assert_eq!(
        shape(&l(4, "block_sparse_moe.routed_expert_down_proj.weight")),
        [3584, 7168]
    );
    assert_eq!(
        shape(&l(4, "block_sparse_moe.routed_expert_up_proj.weight")),
        [7168, 3584]
    );
    assert_eq!(
        shape(&l(4, "block_sparse_moe.shared_experts.down_proj.weight")),
        [7168, 6144]
    );
    assert_eq!(
        shape(&l(4, "block_sparse_moe.experts.15.w1.weight_packed")),
        [3072, 1792]
    );
    assert_eq!(
        shape(&l(4, "block_sparse_moe.experts.15.w2.weight_scale")),
        [3584, 96]
    );
    assert_eq!(
        shape("language_model.model.output_attn_res_proj.weight"),
        [1, 7168]
    );
    assert_eq!(shape("language_model.lm_head.weight"), [163840, 7168]);
}

/// At the released 93 layers × 896 experts the plan has the released tensor set and byte
/// counts of MODEL.md §9 (without writing anything).
#[test]
fn released_plan_matches_model_md_bytes() {
    let spec = SynthSpec::k3(93, 896);
    assert_eq!(
        spec.full_attn_layers,
        (1..=23).map(|i| 4 * i).chain([93]).collect::<Vec<_>>()
    );
    let plan = spec.plan().unwrap();
    assert_eq!(plan.shards.len(), 96);
    assert_eq!(
        plan.shards[95].file_name,
        "model-00096-of-000096.safetensors"
    );
    let mut trunk = 0u64;
    let mut experts = 0u64;
    let mut tables = 0u64;
    let mut runs = BTreeMap::new();
    let mut count = 0usize;
    for s in &plan.shards {
        for t in &s.tensors {
            let n = &t.def.name;
            let bytes = t.end - t.begin;
            if n.starts_with("vision_tower.") || n.starts_with("mm_projector.") {
                continue;
            }
            count += 1;
            if n.contains(".experts.") {
                experts += bytes;
            } else if let Some(rest) = n.strip_prefix("language_model.model.layers.") {
                trunk += bytes;
                let l: usize = rest.split('.').next().unwrap().parse().unwrap();
                *runs.entry(l).or_insert(0u64) += bytes;
            } else {
                tables += bytes;
            }
        }
    }
    assert_eq!(count, 497_220 - 168);
    assert_eq!(trunk, 108_811_877_376);
    assert_eq!(tables, 4_697_663_488);
    assert_eq!(experts, 1_446_456_066_048);
    assert_eq!(runs[&0], 2_341_213_184);
    assert_eq!(runs[&1], 1_267_744_256);
    assert_eq!(runs[&3], 844_335_616);
    assert_eq!(runs[&92], 844_335_616);
    // Shard 1 = layer 0 run + 8 + header; the model-table shard likewise.
    assert_eq!(plan.shards[0].data_bytes(), 2_341_213_184);
    assert_eq!(plan.shards[93].data_bytes(), 4_697_663_488);
}

#[test]
fn value_recipes() {
    let mut spec = SynthSpec::small(4, 8);
    spec.kda_num_heads = 6; // A_log has max(Dk, Hk) = 16 entries, 6 used
    spec.seed = 7;
    let plan = spec.plan().unwrap();
    let data = |n: &str| plan.tensor_data(n).unwrap();
    let l = |i: usize, s: &str| format!("language_model.model.layers.{i}.{s}");
    let f32s = |b: Vec<u8>| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let bf16s = |b: Vec<u8>| -> Vec<f32> {
        b.chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes(c.try_into().unwrap()) as u32) << 16))
            .collect()
    };
    // A_log: first Hk entries in [0, 2.5] and not all equal, the tail exactly +0.
    let a = f32s(data(&l(0, "self_attn.A_log")));
    assert_eq!(a.len(), 16);
    assert!(a[..6].iter().all(|v| (0.0..=2.5).contains(v)));
    assert!(a[..6].iter().any(|&v| v != a[0]));
    assert!(a[6..].iter().all(|v| v.to_bits() == 0));
    // Conv taps, dt_bias, router bias: finite, in range, spread.
    let taps = f32s(data(&l(0, "self_attn.k_conv1d.weight")));
    assert!(taps.iter().all(|v| v.abs() <= 0.7));
    let bias = f32s(data(&l(1, "block_sparse_moe.gate.e_score_correction_bias")));
    assert!(bias.iter().all(|v| v.abs() <= 0.02));
    // BF16 matrices: within ±sqrt(3/fan_in), mean square ≈ 1/fan_in.
    for (n, fan_in) in [
        (l(1, "self_attn.q_proj.weight"), 128.0),
        (l(1, "self_attn.o_proj.weight"), 96.0),
        (l(3, "self_attn.kv_b_proj.weight"), 32.0),
        ("language_model.lm_head.weight".to_string(), 128.0),
    ] {
        let v = bf16s(data(&n));
        let bound = (3.0f64 / fan_in).sqrt() * 1.004;
        assert!(
            v.iter()
                .all(|x| x.is_finite() && (*x as f64).abs() <= bound),
            "{n}"
        );
        let ms = v.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>() / v.len() as f64;
        assert!((ms * fan_in - 1.0).abs() < 0.05, "{n}: mean square {ms}");
    }
    // Gains in [0.8, 1.2].
    let g = bf16s(data(&l(2, "input_layernorm.weight")));
    assert!(g.iter().all(|x| (0.79..=1.21).contains(x)));
    // MXFP4: all 16 codes in both nibbles; scales in the planned two-value range.
    let packed = data(&l(1, "block_sparse_moe.experts.3.w2.weight_packed"));
    let lo: BTreeSet<u8> = packed.iter().map(|b| b & 15).collect();
    let hi: BTreeSet<u8> = packed.iter().map(|b| b >> 4).collect();
    assert_eq!((lo.len(), hi.len()), (16, 16));
    let scales: BTreeSet<u8> = data(&l(1, "block_sparse_moe.experts.3.w1.weight_scale"))
        .into_iter()
        .collect();
    let (slo, shi) = synth::e8m0_range(64);
    assert_eq!(scales, [slo, shi].into_iter().collect());
    assert!(slo >= 1 && shi <= 254);
    // Decoded expert values have mean square ≈ 1/fan_in (within the two-exponent spread).
    let e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let mean_code2 = e2m1.iter().map(|v| v * v).sum::<f64>() / 8.0;
    let two = |s: u8| 2f64.powi(s as i32 - 127);
    let ms = mean_code2 * (two(slo).powi(2) + two(shi).powi(2)) / 2.0;
    assert!((0.5..2.0).contains(&(ms * 64.0)), "expert mean square {ms}");
}

#[test]
fn e8m0_ranges_at_k3_widths() {
    // L = 3584 (w1/w3) and I = 3072 (w2): 2^-8 and 2^-7, like the real bytes 120..122 give
    // 2^-7..2^-5 for trained (larger) weights: never 0 or 255.
    assert_eq!(synth::e8m0_range(3584), (119, 120));
    assert_eq!(synth::e8m0_range(3072), (119, 120));
    assert_eq!(synth::e8m0_range(64), (122, 123));
    assert_eq!(synth::e8m0_range(1), (125, 126));
}

/// The router's top-k spreads over all experts: random unit-RMS inputs through the generated
/// router (released widths, 64 experts, top-16) select every expert, with no expert taking
/// more than 3× its fair share.
#[test]
fn routing_spreads_over_experts() {
    let spec = SynthSpec::k3(2, 64);
    let plan = spec.plan().unwrap();
    let l = |s: &str| format!("language_model.model.layers.1.block_sparse_moe.{s}");
    let w: Vec<f32> = plan
        .tensor_data(&l("gate.weight"))
        .unwrap()
        .chunks_exact(2)
        .map(|c| f32::from_bits((u16::from_le_bytes(c.try_into().unwrap()) as u32) << 16))
        .collect();
    let bias: Vec<f32> = plan
        .tensor_data(&l("gate.e_score_correction_bias"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (h, e, k) = (7168, 64, 16);
    let mut rng = synth::Xoshiro256::new(99);
    let mut counts = vec![0usize; e];
    let tokens = 256;
    for _ in 0..tokens {
        // Uniform on ±sqrt(3): unit RMS, like a normalised hidden state.
        let x: Vec<f64> = (0..h)
            .map(|_| {
                ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * 3f64.sqrt()
            })
            .collect();
        let mut keys: Vec<(f64, usize)> = (0..e)
            .map(|j| {
                let r: f64 = (0..h).map(|c| w[j * h + c] as f64 * x[c]).sum();
                (1.0 / (1.0 + (-r).exp()) + bias[j] as f64, j)
            })
            .collect();
        keys.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        for &(_, j) in &keys[..k] {
            counts[j] += 1;
        }
    }
    let fair = tokens * k / e;
    assert!(
        counts.iter().all(|&c| c > 0),
        "every expert selected: {counts:?}"
    );
    assert!(
        counts.iter().all(|&c| c <= 3 * fair),
        "no hot expert: {counts:?}"
    );
}

#[test]
fn tensor_data_equals_the_written_bytes() {
    let mut spec = SynthSpec::small(3, 4);
    spec.vocab_size = 5000; // 1.28 MB embedding: two blocks
    spec.seed = 3;
    let d = tmp();
    let summary = gen(&spec, d.path(), 2);
    for name in [
        "language_model.model.embed_tokens.weight",
        "language_model.model.layers.0.self_attn.A_log",
        "language_model.model.layers.2.block_sparse_moe.experts.1.w2.weight_scale",
        "language_model.model.layers.2.block_sparse_moe.gate.e_score_correction_bias",
    ] {
        let (file, off, len) = summary.plan.locate(name).unwrap();
        let bytes = fs::read(d.path().join(file)).unwrap();
        assert_eq!(
            bytes[off as usize..(off + len) as usize],
            summary.plan.tensor_data(name).unwrap()[..],
            "{name}"
        );
    }
}

#[test]
fn variants_write_the_right_tensor_sets() {
    let mut spec = SynthSpec::small(6, 4);
    spec.tie_word_embeddings = true;
    spec.mla_use_output_gate = false;
    spec.latent_moe_use_norm = false;
    spec.num_shared_experts = 0;
    spec.first_k_dense_replace = 2;
    spec.full_attn_layers = vec![1, 6];
    spec.nested_config = false;
    spec.vision_dummies = false;
    spec.layers_per_shard = 2;
    let d = tmp();
    gen(&spec, d.path(), 1);
    let all = validate_dir(d.path());
    let has = |n: &str| all.contains_key(n);
    let l = |i: usize, s: &str| format!("language_model.model.layers.{i}.{s}");
    assert!(!has("language_model.lm_head.weight"));
    assert!(has(&l(0, "self_attn.q_a_proj.weight")), "layer 0 is MLA");
    assert!(!has(&l(0, "self_attn.g_proj.weight")), "no MLA output gate");
    assert!(has(&l(1, "mlp.gate_proj.weight")), "layer 1 dense");
    assert!(!has(&l(1, "block_sparse_moe.gate.weight")));
    assert!(has(&l(2, "block_sparse_moe.gate.weight")));
    assert!(!has(&l(2, "block_sparse_moe.routed_expert_norm.weight")));
    assert!(!has(&l(
        2,
        "block_sparse_moe.shared_experts.up_proj.weight"
    )));
    assert!(has(&l(1, "self_attn.g_proj.weight")), "KDA keeps its gate");
    assert!(!all.keys().any(|k| k.starts_with("vision_tower.")));
    // Shards: layer 0 | 1-2 | 3-4 | 5 | tables.
    let shard_of = |n: &str| all[n].0.clone();
    assert_eq!(
        shard_of(&l(1, "input_layernorm.weight")),
        shard_of(&l(2, "input_layernorm.weight"))
    );
    assert_ne!(
        shard_of(&l(0, "input_layernorm.weight")),
        shard_of(&l(1, "input_layernorm.weight"))
    );
    // Flat config: every key at the root with the flat spellings.
    let c: Value =
        serde_json::from_str(&fs::read_to_string(d.path().join("config.json")).unwrap()).unwrap();
    assert!(c.get("text_config").is_none());
    assert_eq!(c["kda_num_heads"], 4);
    assert_eq!(c["kda_head_dim"], 16);
    assert_eq!(c["situ_beta"], 4.0);
    assert_eq!(c["situ_linear_beta"], 25.0);
    assert_eq!(c["full_attn_layers"], serde_json::json!([1, 6]));
    assert_eq!(c["kda_layers"], serde_json::json!([2, 3, 4, 5]));
    assert_eq!(c["tie_word_embeddings"], true);
}

#[test]
fn nested_config_is_the_released_shape() {
    let spec = SynthSpec::k3(4, 64);
    let c: Value = serde_json::from_str(&spec.config_json()).unwrap();
    let t = &c["text_config"];
    assert_eq!(c["model_type"], "kimi_k3");
    assert_eq!(t["hidden_size"], 7168);
    assert_eq!(t["rms_norm_eps"].as_f64(), Some(1e-5));
    assert_eq!(t["num_experts"], 64);
    assert_eq!(t["num_experts_per_token"], 16);
    assert_eq!(
        t["gate_lower_bound"],
        Value::Null,
        "lives in linear_attn_config"
    );
    let la = &t["linear_attn_config"];
    assert_eq!(la["num_heads"], 96);
    assert_eq!(la["head_dim"], 128);
    assert_eq!(la["gate_lower_bound"].as_f64(), Some(-5.0));
    assert_eq!(la["full_attn_layers"], serde_json::json!([4]));
    assert_eq!(la["kda_layers"], serde_json::json!([1, 2, 3]));
    assert!(t.get("head_dim").is_none() && t.get("num_heads").is_none());
    let q = &t["quantization_config"];
    assert_eq!(q["quant_method"], "compressed-tensors");
    assert_eq!(q["format"], "mxfp4-pack-quantized");
    let w = &q["config_groups"]["group_0"]["weights"];
    assert_eq!(
        (w["num_bits"].as_u64(), w["group_size"].as_u64()),
        (Some(4), Some(32))
    );
    assert_eq!(
        (w["type"].as_str(), w["symmetric"].as_bool()),
        (Some("float"), Some(true))
    );
    assert_eq!(c["quantization_config"], t["quantization_config"]);
    assert_eq!(t["bos_token_id"], 163584);
}

#[test]
fn invalid_specs_are_refused_naming_the_field() {
    let base = SynthSpec::small(4, 8);
    type Edit = Box<dyn Fn(&mut SynthSpec)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|s| s.num_experts_per_token = 9),
            "num_experts_per_token",
        ),
        (
            Box::new(|s| s.routed_expert_hidden_size = 48),
            "routed_expert_hidden_size",
        ),
        (
            Box::new(|s| s.moe_intermediate_size = 0),
            "moe_intermediate_size",
        ),
        (
            Box::new(|s| s.full_attn_layers = vec![1, 2, 3, 4]),
            "no KDA layer",
        ),
        (
            Box::new(|s| s.full_attn_layers = vec![0]),
            "full_attn_layers",
        ),
        (Box::new(|s| s.full_attn_layers = vec![2, 2]), "twice"),
        (
            Box::new(|s| s.first_k_dense_replace = 5),
            "first_k_dense_replace",
        ),
        (Box::new(|s| s.gate_lower_bound = 0.0), "gate_lower_bound"),
        (Box::new(|s| s.rms_norm_eps = f64::NAN), "rms_norm_eps"),
    ];
    for (edit, want) in cases {
        let mut s = base.clone();
        edit(&mut s);
        let e = s.validate().unwrap_err();
        assert!(e.contains(want), "{want}: {e}");
        let d = tmp();
        let err = synth::generate(&s, d.path(), Options::default()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(
            fs::read_dir(d.path()).unwrap().next().is_none(),
            "nothing written"
        );
    }
}

#[test]
fn existing_directories_are_protected() {
    let spec = SynthSpec::small(2, 4);
    let d = tmp();
    gen(&spec, d.path(), 1);
    let err = synth::generate(&spec, d.path(), Options::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(err.to_string().contains("--force"), "{err}");
    // --force replaces it, also with a different shard count.
    let mut other = spec.clone();
    other.layers_per_shard = 1;
    other.num_hidden_layers = 3;
    other.full_attn_layers = vec![];
    synth::generate(
        &other,
        d.path(),
        Options {
            force: true,
            ..Options::default()
        },
    )
    .unwrap();
    validate_dir(d.path());
    // A foreign file is never removed.
    fs::write(d.path().join("notes.txt"), "mine").unwrap();
    let err = synth::generate(
        &other,
        d.path(),
        Options {
            force: true,
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert!(d.path().join("notes.txt").exists());
}

fn xtask() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
}

#[test]
fn cli_writes_a_checkpoint_and_refuses_bad_flags() {
    let d = tmp();
    let out: PathBuf = d.path().join("ckpt");
    let r = xtask()
        .args(["synth"])
        .arg(&out)
        .args([
            "--preset",
            "small",
            "--layers",
            "5",
            "--experts",
            "8",
            "--seed",
            "9",
        ])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    validate_dir(&out);
    let mut spec = SynthSpec::small(5, 8);
    spec.seed = 9;
    let plan = spec.plan().unwrap();
    assert_eq!(
        fs::read(out.join(&plan.shards[1].file_name)).unwrap().len() as u64,
        plan.shards[1].file_size()
    );
    // The same command again without --force: refused, exit 2, nothing touched.
    let r = xtask()
        .args(["synth"])
        .arg(&out)
        .args(["--preset", "small", "--layers", "5", "--experts", "8"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    for (args, needle) in [
        (vec!["--layers", "x"], "--layers"),
        (vec!["--bogus"], "--bogus"),
        (vec!["--top-k", "99"], "num_experts_per_token"),
        (vec!["--preset", "huge"], "--preset"),
        (vec!["--full-attn-layers", "1,2,3,4"], "no KDA layer"),
    ] {
        let r = xtask()
            .args(["synth", "/nonexistent-k3-synth"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // --dry-run lists the plan and writes nothing.
    let r = xtask()
        .args(["synth", "/nonexistent-k3-synth", "--dry-run"])
        .output()
        .unwrap();
    assert!(r.status.success());
    let text = String::from_utf8_lossy(&r.stdout);
    assert_eq!(text.lines().count(), 7);
    assert!(text.starts_with("model-00001-of-000007.safetensors\t23\t"));
    assert!(!Path::new("/nonexistent-k3-synth").exists());
}
