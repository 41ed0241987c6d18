//! Bit-identical logits at every memory budget (ENGINE.md §2, §4–§5): from a base run with
//! everything resident, one dimension varies at a time — trunk streamed from the shards and
//! from a packed trunk, trunk budgets pinning none, some and all layers, a ring of 1 and of
//! 2+ slots, model tables streamed, the expert cache from top-k slots to every expert, every
//! eviction policy, and (on tiny-k3) every preset. Every run's peak RSS is checked against
//! its plan plus a stated slack (tests/stream_support).

mod stream_support;
use k3::plan::buffer_bytes;
use std::path::Path;
use stream_support::*;

/// Layer buffer costs (pinned or slot) and the expert-slot stride of a checkpoint.
struct Geometry {
    layers: Vec<u64>,
    stride: u64,
    top_k: usize,
    experts: usize,
}

fn geometry(model: &Path) -> Geometry {
    let cfg = k3::config::Config::from_file(&model.join("config.json")).unwrap();
    let index = k3::checkpoint::TensorIndex::open(model).unwrap();
    let prep = k3::stream::bind::prepare(&index, &cfg, cfg.num_hidden_layers).unwrap();
    let d = k3::model::Dims::from_config(&cfg);
    Geometry {
        layers: prep.layouts.iter().map(|l| buffer_bytes(l.bytes)).collect(),
        stride: buffer_bytes(k3::model::expert_bytes(&d)),
        top_k: d.kt,
        experts: (d.nl - d.first_dense) * d.e,
    }
}

/// The matrix for one checkpoint; `presets` adds every preset (tiny models, where all fit).
fn matrix(model: &Path, tag: &str, ids: &str, gen: usize, presets: bool) {
    let g = geometry(model);
    let gen_s = gen.to_string();
    let base_args = ["--ids", ids, "--gen", &gen_s];
    let go = |name: &str, extra: &[&str]| {
        let mut a: Vec<&str> = base_args.to_vec();
        a.extend_from_slice(extra);
        let r = run(model, &format!("{tag}_{name}"), &a);
        check_ok(&r, &format!("{tag} {name} {extra:?}"));
        r
    };
    let base = go("base", &[]);
    assert_eq!(
        base.u64(&["trunk", "pinned_layers"]) as usize,
        g.layers.len(),
        "base: all resident"
    );
    assert_eq!(base.generated().len(), gen);
    let same = |r: &Run, what: &str| {
        assert_eq!(r.hash(), base.hash(), "{tag} {what}: logits differ");
        assert_eq!(r.generated(), base.generated(), "{tag} {what}");
    };
    let largest = *g.layers.iter().max().unwrap();
    let total: u64 = g.layers.iter().sum();
    let small_ring = gb_arg(2 * largest);

    // Trunk streamed from the shards, nothing pinned, ring 2 (read-ahead).
    let r = go("shards", &["--trunk-gb", &small_ring]);
    same(&r, "trunk streamed from the shards");
    assert_eq!(r.u64(&["trunk", "pinned_layers"]), 0);
    assert_eq!(r.u64(&["trunk", "ring_slots"]), 2);
    assert!(r.u64(&["trunk", "bytes_read"]) > 0);
    assert_eq!(r.json()["trunk"]["packed"], false);
    // every bind of a streamed layer paid a read, and all but the first were read ahead
    let binds = r.u64(&["trunk", "binds"]);
    assert_eq!(r.u64(&["trunk", "reads"]), binds);
    assert_eq!(r.u64(&["trunk", "reads_ahead"]), binds - 1);
    assert_eq!(r.u64(&["trunk", "hits"]), 0);

    // The same from a packed trunk.
    let packed = scratch_dir(&format!("stream_packed_{tag}"));
    let p = run_k3([
        "pack-trunk",
        model.to_str().unwrap(),
        packed.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let r = go(
        "packed",
        &[
            "--trunk",
            packed.to_str().unwrap(),
            "--trunk-gb",
            &small_ring,
        ],
    );
    same(&r, "trunk streamed from a packed trunk");
    assert_eq!(r.json()["trunk"]["packed"], true);
    assert_eq!(r.u64(&["trunk", "pinned_layers"]), 0);
    // A packed trunk with every layer pinned (read from trunk.bin at load).
    let r = go("packed_all", &["--trunk", packed.to_str().unwrap()]);
    same(&r, "packed trunk, all pinned");

    // Trunk budgets pinning some and all layers.
    let some = 2 * largest + (total - largest) / 2;
    let r = go("pin_some", &["--trunk-gb", &gb_arg(some)]);
    same(&r, "some layers pinned");
    let n = r.u64(&["trunk", "pinned_layers"]) as usize;
    assert!(n > 0 && n < g.layers.len(), "pin_some pinned {n}");
    let r = go("pin_all", &["--trunk-gb", &gb_arg(total)]);
    same(&r, "all layers pinned by budget");
    assert_eq!(r.u64(&["trunk", "pinned_layers"]) as usize, g.layers.len());
    assert_eq!(r.u64(&["trunk", "ring_slots"]), 0);

    // Ring of 1 (synchronous) and of 3.
    let r = go(
        "ring1",
        &["--trunk-gb", &gb_arg(largest), "--trunk-ring", "1"],
    );
    same(&r, "ring of 1");
    assert_eq!(r.u64(&["trunk", "ring_slots"]), 1);
    assert_eq!(
        r.u64(&["trunk", "reads_ahead"]),
        0,
        "one slot: synchronous reads"
    );
    let r = go(
        "ring3",
        &["--trunk-gb", &gb_arg(3 * largest), "--trunk-ring", "3"],
    );
    same(&r, "ring of 3");
    assert_eq!(r.u64(&["trunk", "ring_slots"]), 3);

    // Model tables streamed (the ultra preset; the rest of a small model stays resident).
    let r = go("tables", &["--preset", "ultra"]);
    same(&r, "model tables streamed");
    assert_eq!(r.json()["io"]["model_tables_streamed"], true);
    assert!(r.u64(&["io", "lm_head_bytes_read"]) > 0);
    assert!(r.u64(&["io", "embedding_bytes_read"]) > 0);

    // Every logits row of a teacher-forced forward (`--gen 0`) through the streamed lm_head
    // chunks (rows × chunk blocks scattered into [rows, V]).
    let tf = |name: &str, extra: &[&str]| {
        let mut a = vec!["--ids", ids, "--gen", "0"];
        a.extend_from_slice(extra);
        let r = run(model, &format!("{tag}_{name}"), &a);
        check_ok(&r, name);
        r
    };
    let tf_base = tf("tf_base", &[]);
    let tf_tables = tf("tf_tables", &["--preset", "ultra"]);
    assert_eq!(
        tf_base.hash(),
        tf_tables.hash(),
        "{tag}: teacher-forced rows"
    );

    // Expert cache from top-k slots to every expert.
    for (name, slots) in [
        ("cache_min", g.top_k),
        ("cache_mid", (g.top_k + g.experts) / 2),
        ("cache_all", g.experts),
    ] {
        let r = go(name, &["--cache-gb", &gb_arg(slots as u64 * g.stride)]);
        same(&r, name);
        assert_eq!(r.u64(&["expert_cache", "slots"]) as usize, slots, "{name}");
        if name == "cache_min" {
            assert!(r.u64(&["expert_cache", "evictions"]) > 0, "{name}");
        }
    }
    // Every policy, with a cache small enough to evict.
    let small_cache = gb_arg((g.top_k as u64 + 3) * g.stride);
    for p in k3::stream::policy::POLICY_NAMES {
        let r = go(
            &format!("policy_{p}"),
            &["--cache-gb", &small_cache, "--cache-policy", p],
        );
        same(&r, &format!("policy {p}"));
        assert_eq!(r.json()["expert_cache"]["policy"], *p);
        assert!(r.u64(&["expert_cache", "evictions"]) > 0, "policy {p}");
    }
    // Everything small at once is not a dimension of the matrix, but it must hold too.
    let r = go(
        "all_small",
        &[
            "--trunk-gb",
            &small_ring,
            "--cache-gb",
            &gb_arg(g.top_k as u64 * g.stride),
            "--preset",
            "auto",
            "--prefill-chunk",
            "2",
        ],
    );
    same(&r, "smallest trunk and cache, chunked prefill");

    if presets {
        for p in k3::plan::PRESETS {
            let r = go(&format!("preset_{}", p.name), &["--preset", p.name]);
            same(&r, &format!("preset {}", p.name));
        }
    }
}

#[test]
fn tiny_k3_logits_are_identical_at_every_budget() {
    matrix(
        &fixture("tiny-k3"),
        "tiny",
        "410,335,224,165,463,246,467,2,368",
        6,
        true,
    );
}

#[test]
fn moderate_checkpoint_logits_are_identical_at_every_budget() {
    matrix(&moderate(), "moderate", "5,900,17,256,3,77,1000", 6, false);
}
