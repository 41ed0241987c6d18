//! The DSpark draft (DRAFT.md): the directory reader and its refusals (§1), the checks against
//! a target, and the draft forward (§3) on the tiny synthetic draft of `tests/fixtures/tiny-draft`
//! (generated for `tiny-k3-text` by `cargo xtask synth --draft`): identical across thread
//! counts, chunkings and rollback, and equal to the committed `expected.json`, which
//! `tests/draft/reference.py` (float64, numpy) checks independently of the engine.

use crate::support::fixture;
use k3::bind::reader::{Reader, TensorLookup};
use k3::checkpoint::TensorIndex;
use k3::config::Config;
use k3::draft::{self, ContextCache, Draft, DraftConfig, TablesInMemory};
use k3_kernels::{fnv1a64_f32, Isa, Kernels};
use std::path::{Path, PathBuf};

fn target() -> Config {
    Config::from_file(&fixture("tiny-k3-text/config.json")).unwrap()
}

fn open_tiny() -> Draft {
    draft::open(&fixture("tiny-draft"), &target()).unwrap()
}

/// The target's embedding and lm_head of `tiny-k3-text`, resident.
fn tables(block_rows: usize) -> TablesInMemory {
    let idx = TensorIndex::open(&fixture("tiny-k3-text")).unwrap();
    let t = target();
    let (v, h) = (t.vocab_size, t.hidden_size);
    let mut r = Reader::new(&idx as &dyn TensorLookup);
    let mut embed = Vec::new();
    r.bf16_into(
        "language_model.model.embed_tokens.weight",
        &[v, h],
        &mut embed,
    )
    .unwrap();
    let mut lm_head = Vec::new();
    r.bf16_into("language_model.lm_head.weight", &[v, h], &mut lm_head)
        .unwrap();
    TablesInMemory {
        h,
        embed,
        lm_head,
        block_rows,
    }
}

/// The fixed taps of the reference check: position s, element i of the concatenated taps →
/// ((s·7919 + i·104729) mod 2003) / 1001.5 − 1, rounded to fp32 (tests/draft/reference.py
/// computes the same values).
fn taps(cfg: &DraftConfig, from: usize, to: usize) -> Vec<f32> {
    let w = cfg.target_layer_ids.len() * cfg.target_hidden_size;
    let mut t = Vec::with_capacity((to - from) * w);
    for s in from..to {
        for i in 0..w {
            t.push((((s * 7919 + i * 104729) % 2003) as f64 / 1001.5 - 1.0) as f32);
        }
    }
    t
}

/// Context positions and anchor of the reference check.
const CTX: usize = 12;
const ANCHOR: u32 = 1000;

fn run(k: &Kernels, d: &Draft, chunks: &[usize], block_rows: usize) -> draft::DraftOutput {
    let mut cache = ContextCache::new(&d.cfg);
    let mut s = 0;
    for &c in chunks {
        d.extend_context(k, &mut cache, &taps(&d.cfg, s, s + c))
            .unwrap();
        s += c;
    }
    assert_eq!(cache.len(), s);
    let before = cache.clone();
    let out = d
        .propose(k, &mut cache, ANCHOR, &mut tables(block_rows))
        .unwrap();
    assert_eq!(cache, before, "the block rows are transient");
    out
}

#[test]
fn tiny_draft_opens_against_its_target() {
    let d = open_tiny();
    assert_eq!(d.cfg.hidden_size, 32);
    assert_eq!(d.cfg.target_layer_ids, vec![0, 2, 4]);
    assert_eq!(d.cfg.block_size, 7);
    assert_eq!(d.cfg.markov_rank, Some(4));
    assert!(d.w.confidence.is_some());
    // σ = mscale(32, 1)² / sqrt(16), the rotation factor 1 (mscale = mscale_all_dim)
    let m = 0.1 * k3_kernels::log64(32.0) + 1.0;
    assert_eq!(d.rope.softmax_scale, (m * m) / 4.0);
    assert_eq!(d.rope.factor, 1.0);
    assert_eq!(d.cfg.cache_bytes_per_position(), 2 * 24 * 4);
}

#[test]
fn draft_forward_is_identical_across_threads_chunks_and_blocks() {
    let d = open_tiny();
    let k1 = Kernels::new(Isa::Scalar, 1).unwrap();
    let a = run(&k1, &d, &[CTX], 4096);
    let kd = Kernels::from_env().unwrap();
    let k3t = Kernels::new(kd.isa(), 3).unwrap();
    for (k, chunks, rows) in [
        (&kd, &[CTX][..], 163840),
        (&k3t, &[5, 1, 6][..], 1000),
        (&k1, &[1; CTX][..], 7),
    ] {
        let b = run(k, &d, chunks, rows);
        assert_eq!(a.ids, b.ids);
        assert_eq!(fnv1a64_f32(&a.logits), fnv1a64_f32(&b.logits));
        assert_eq!(a.confidence, b.confidence);
    }
}

#[test]
fn rollback_then_extend_equals_a_fresh_context() {
    let d = open_tiny();
    let k = Kernels::from_env().unwrap();
    let mut cache = ContextCache::new(&d.cfg);
    d.extend_context(&k, &mut cache, &taps(&d.cfg, 0, CTX))
        .unwrap();
    // positions 9 … 11 rejected, then run again with other taps: as if never seen
    cache.truncate(9);
    let mut fresh = ContextCache::new(&d.cfg);
    d.extend_context(&k, &mut fresh, &taps(&d.cfg, 0, 9))
        .unwrap();
    assert_eq!(cache, fresh);
    assert_eq!(cache.bytes(), 9 * d.cfg.cache_bytes_per_position());
}

/// `tests/fixtures/tiny-draft/expected.json`: the drafted ids, the logits hash, and the logits
/// of every row at the ids the reference compares (every 997th id and each row's top 4).
/// `K3_BLESS_DRAFT=1` rewrites it (only after the reference agreed with the new values).
#[test]
fn draft_forward_matches_the_committed_expected_values() {
    let d = open_tiny();
    let k = Kernels::from_env().unwrap();
    let out = run(&k, &d, &[CTX], 4096);
    let v = d.cfg.vocab_size;
    let mut rows = Vec::new();
    for r in 0..d.cfg.block_size {
        let lr = &out.logits[r * v..(r + 1) * v];
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| lr[b].total_cmp(&lr[a]).then(a.cmp(&b)));
        let mut ids: Vec<usize> = (0..v).step_by(997).collect();
        ids.extend_from_slice(&order[..4]);
        let pairs: Vec<String> = ids.iter().map(|&i| format!("[{i}, {:e}]", lr[i])).collect();
        rows.push(format!("    [{}]", pairs.join(", ")));
    }
    let conf: Vec<String> = out
        .confidence
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| format!("{c:e}"))
        .collect();
    let text = format!(
        "{{\n  \"context_positions\": {CTX},\n  \"anchor\": {ANCHOR},\n  \"ids\": {:?},\n  \"logits_fnv1a64\": \"{:016x}\",\n  \"confidence\": [{}],\n  \"logits_at\": [\n{}\n  ]\n}}\n",
        out.ids,
        fnv1a64_f32(&out.logits),
        conf.join(", "),
        rows.join(",\n")
    );
    let path = fixture("tiny-draft/expected.json");
    if std::env::var_os("K3_BLESS_DRAFT").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        want,
        "draft forward output differs from {}",
        path.display()
    );
}

/// A scratch copy of the tiny draft whose config.json is `edit`ed (a JSON object text).
fn with_config(name: &str, edit: impl Fn(&mut String)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("k3-draft-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixture("tiny-draft");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut cfg = std::fs::read_to_string(src.join("config.json")).unwrap();
    edit(&mut cfg);
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    dir
}

fn refusal(dir: &Path) -> String {
    let e = draft::open(dir, &target()).err().expect("refused");
    assert_eq!(e.exit_code(), 2, "{e}");
    let _ = std::fs::remove_dir_all(dir);
    e.message
}

fn set(cfg: &mut String, key: &str, value: &str) {
    let at = cfg.find(&format!("\"{key}\":")).unwrap();
    let end = at + cfg[at..].find(",\n").unwrap();
    cfg.replace_range(at..end, &format!("\"{key}\": {value}"));
}

#[test]
fn bad_drafts_are_refused_naming_the_key() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "eps",
            "rms_norm_eps",
            "\"x\"",
            "rms_norm_eps: expected a finite number",
        ),
        (
            "width",
            "target_hidden_size",
            "64",
            "target_hidden_size: 64 does not match the target's hidden_size (32)",
        ),
        (
            "tap",
            "target_layer_ids",
            "[0, 2, 5]",
            "target_layer_ids: layer 5 is outside",
        ),
        (
            "order",
            "target_layer_ids",
            "[2, 0, 4]",
            "target_layer_ids: must be strictly ascending",
        ),
        (
            "layers",
            "target_num_hidden_layers",
            "93",
            "target_num_hidden_layers: 93 does not match",
        ),
        (
            "stream",
            "mla_use_output_gate",
            "true",
            "mla_use_output_gate: must be false",
        ),
        (
            "gqa",
            "num_key_value_heads",
            "1",
            "GQA-attention DSpark draft",
        ),
        (
            "dvocab",
            "draft_vocab_size",
            "32000",
            "draft_vocab_size: must equal vocab_size",
        ),
        (
            "markov",
            "markov_head_type",
            "\"fir\"",
            "markov_head_type: unknown Markov head",
        ),
        (
            "ntl",
            "num_target_layers",
            "5",
            "num_target_layers: must equal",
        ),
        (
            "mask",
            "mask_token_id",
            "163840",
            "mask_token_id: must be < vocab_size",
        ),
        (
            "rope",
            "rope_scaling",
            "{\"type\": \"longrope\", \"factor\": 4}",
            "rope_scaling.rope_type: unsupported rope type \"longrope\"",
        ),
    ];
    for &(name, key, value, want) in cases {
        let dir = with_config(name, |c| set(c, key, value));
        let msg = refusal(&dir);
        assert!(msg.contains(want), "{name}: {msg}");
        assert!(msg.contains("config.json"), "{name}: names the file: {msg}");
    }
    let dir = with_config("missing", |c| {
        *c = c.replace("  \"kv_lora_rank\": 16,\n", "")
    });
    let msg = refusal(&dir);
    assert!(
        msg.contains("kv_lora_rank: required key is missing"),
        "{msg}"
    );
    let dir = with_config("aux", |c| {
        *c = c.replacen('{', "{\n  \"aux_hidden_stream\": \"final\",", 1)
    });
    let msg = refusal(&dir);
    assert!(
        msg.contains("aux_hidden_stream: unknown stream \"final\""),
        "{msg}"
    );
    // a draft for another vocabulary (checked against the target, not the file)
    let d = open_tiny();
    let mut other = target();
    other.vocab_size = 512;
    let e = d.cfg.check_target(&other, "draft/config.json").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message.contains(
            "draft/config.json: vocab_size: 163840 does not match the target's vocab_size (512)"
        ),
        "{e}"
    );
    // Block5's shape (3 layers, 3 taps) without a statement of its attention mode
    let dir = with_config("block5", |c| set(c, "num_hidden_layers", "3"));
    let msg = refusal(&dir);
    assert!(msg.contains("causal_block_attention"), "{msg}");
}

#[test]
fn a_misshaped_or_missing_tensor_is_refused_by_name() {
    // q_lora_rank 8 in the config: q_a_proj is [16, 32] in the file
    let dir = with_config("shape", |c| set(c, "q_lora_rank", "8"));
    let msg = refusal(&dir);
    assert!(
        msg.contains("layers.0.self_attn.q_a_proj.weight: expected BF16 [8, 32]"),
        "{msg}"
    );
    // a third layer the file does not have
    let dir = with_config("layer", |c| set(c, "num_hidden_layers", "4"));
    let msg = refusal(&dir);
    assert!(
        msg.contains("layers.2.input_layernorm.weight: required tensor is missing"),
        "{msg}"
    );
}

#[test]
fn the_embedding_copy_is_never_read_and_names_may_carry_model_prefix() {
    let target = target();
    let mut spec = synth::DraftSpec::tiny_for(target.hidden_size, target.num_hidden_layers, 512);
    spec.vocab_size = target.vocab_size;
    spec.mask_token_id = target.vocab_size - 3;
    spec.embed_copy = true;
    let dir = std::env::temp_dir().join(format!("k3-draft-{}-copy", std::process::id()));
    synth::write_draft(&spec, &dir, 0).unwrap();
    let d = draft::open(&dir, &target).unwrap();
    let tiny = open_tiny();
    assert_eq!(
        d.w.resident_bytes(),
        tiny.w.resident_bytes(),
        "embed_tokens not held"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_released_draft_layout_has_the_published_parameter_count() {
    // DRAFT.md §1: 3,562,312,961 parameters with the embedding copy.
    let spec = synth::DraftSpec::released();
    let with_copy = spec.parameters();
    let v_h = 163840u64 * 7168;
    assert_eq!(
        with_copy - v_h,
        3_562_312_961 - v_h,
        "without copy: {}",
        with_copy - v_h
    );
    let cfg = DraftConfig::from_json(spec.config_json().as_bytes(), "released.json").unwrap();
    assert_eq!(cfg.cache_bytes_per_position(), 11_520);
    let rope = k3::draft::Rope::new(&cfg);
    assert!(
        (rope.softmax_scale - 0.13086).abs() < 5e-6,
        "{}",
        rope.softmax_scale
    );
}
