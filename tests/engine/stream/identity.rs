//! Bit-identical logits at every memory budget (ENGINE.md §2, §4–§5): from a base run with
//! everything resident, one dimension varies at a time — trunk streamed from the shards and
//! from a packed trunk, trunk budgets pinning none, some and all layers, a ring of 1 and of
//! 2+ slots, model tables streamed, a partly resident lm_head (rows 0..R resident, the rest
//! streamed) and a resident lm_head next to a streamed embedding, the expert cache from top-k
//! slots to every expert, every eviction policy, and (on tiny-k3) every preset; and a tied
//! table resident, partly resident and streamed. Every run's peak RSS is checked against
//! its plan plus a stated slack (support/stream.rs).

use crate::support::stream as stream_support;
use k3::plan::buffer_bytes;
use std::path::Path;
use stream_support::*;

/// Layer buffer costs (pinned or slot) and the expert-slot stride of a checkpoint.
struct Geometry {
    layers: Vec<u64>,
    /// A ring slot: the largest streamed piece's buffer (layers cut at their parts).
    slot: u64,
    stride: u64,
    top_k: usize,
    experts: usize,
}

/// The planner's table sizes of a checkpoint (the other fields are not used by
/// [`k3::plan::ModelSizes::tables_bytes`]).
fn table_sizes(model: &Path) -> k3::plan::ModelSizes {
    let cfg = k3::config::Config::from_file(&model.join("config.json")).unwrap();
    let d = k3::model::Dims::from_config(&cfg);
    let table = (d.v * d.h * 2) as u64;
    k3::plan::ModelSizes {
        embed: table,
        lm_head: if d.tied { 0 } else { table },
        row: (2 * d.h) as u64,
        vocab: d.v,
        table_vectors: (2 * d.h * 4) as u64,
        ..Default::default()
    }
}

/// `--mem-gb` budgets that hold the whole trunk, top-k cache slots and the model tables with
/// lm_head rows 0..`rows` and the embedding resident or not, from a probe run's plan (every
/// other item) and the planner's table sizes: flags for [`matrix`]'s runs.
fn table_budget(model: &Path, probe: &Run, rows: usize, embed: bool) -> Vec<String> {
    let plan = |k: &str| probe.u64(&["memory", "plan", k]);
    let others = plan("total") - plan("model_tables");
    let mem = others + table_sizes(model).tables_bytes(rows, embed);
    let trunk: u64 = geometry(model).layers.iter().sum();
    vec![
        "--trunk-gb".into(),
        gb_arg(trunk),
        "--cache-gb".into(),
        gb_arg(plan("expert_cache")),
        "--mem-gb".into(),
        gb_arg(mem),
    ]
}

/// A partly resident lm_head, a resident lm_head next to a streamed embedding, and the
/// teacher-forced rows through a partly resident lm_head give the base run's bits.
fn table_splits(model: &Path, tag: &str, ids: &str, gen: usize, base: &Run) {
    let g = geometry(model);
    let s = table_sizes(model);
    let v = s.vocab;
    let total: u64 = g.layers.iter().sum();
    let gen_s = gen.to_string();
    let go = |name: &str, gen: &str, extra: &[String]| {
        let mut a: Vec<&str> = vec!["--ids", ids, "--gen", gen];
        a.extend(extra.iter().map(|x| x.as_str()));
        let r = run(model, &format!("{tag}_{name}"), &a);
        check_ok(&r, &format!("{tag} {name} {extra:?}"));
        r
    };
    // Probe: whole trunk, top-k slots, every table resident (a budget far above the plan).
    let probe_flags = [
        "--trunk-gb".to_string(),
        gb_arg(total),
        "--cache-gb".into(),
        gb_arg(g.top_k as u64 * g.stride),
        "--mem-gb".into(),
        "1000".into(),
    ];
    let probe = go("tables_probe", &gen_s, &probe_flags);
    assert_eq!(probe.hash(), base.hash(), "{tag}: tables probe");
    assert_eq!(
        probe.u64(&["memory", "plan", "lm_head_resident_rows"]),
        v as u64
    );
    assert_eq!(probe.json()["memory"]["plan"]["embedding_resident"], true);
    let rows = |r: &Run| r.u64(&["memory", "plan", "lm_head_resident_rows"]) as usize;
    let row_bytes = s.row as usize;
    // The most rows a prefix holds for less than the whole head costs (which also frees the
    // chunk slots: on a tiny model, a prefix beyond about half the rows is not worth it).
    let full_extra = s.tables_bytes(v, false) - s.tables_streamed();
    let most = s.head_rows_within(full_extra - 1);
    assert!(most > v / 8, "{tag}: {most} rows");
    for (name, want) in [("head_one", 1), ("head_eighth", v / 8), ("head_most", most)] {
        let r = go(name, &gen_s, &table_budget(model, &probe, want, false));
        assert_eq!(r.hash(), base.hash(), "{tag} {name}: logits differ");
        assert_eq!(r.generated(), base.generated(), "{tag} {name}");
        // the resident prefix is at least what was asked (page rounding may add a few rows)
        let got = rows(&r);
        assert!(
            got >= want && got <= most.max(want) && got < v,
            "{tag} {name}: {got} rows resident, asked {want}"
        );
        assert_eq!(r.json()["memory"]["plan"]["embedding_resident"], false);
        assert_eq!(r.json()["io"]["model_tables_streamed"], true);
        // every forward read the streamed rows (device bytes: widened windows)
        let per_forward = ((v - got) * row_bytes) as u64;
        let read = r.u64(&["io", "lm_head_bytes_read"]);
        assert!(
            read >= gen as u64 * per_forward
                && read < gen as u64 * (per_forward + (v * row_bytes) as u64),
            "{tag} {name}: {read} lm_head bytes read for {gen} forwards of {per_forward}"
        );
    }
    if !s.tied() {
        let r = go(
            "head_embed_split",
            &gen_s,
            &table_budget(model, &probe, v, false),
        );
        assert_eq!(
            r.hash(),
            base.hash(),
            "{tag} resident lm_head, streamed embedding"
        );
        assert_eq!(rows(&r), v);
        assert_eq!(r.json()["memory"]["plan"]["embedding_resident"], false);
        assert_eq!(r.u64(&["io", "lm_head_bytes_read"]), 0);
        assert!(r.u64(&["io", "embedding_bytes_read"]) > 0);
    }
    // Every logits row of a teacher-forced forward through a partly resident lm_head.
    // (`--gen 0` keeps every logits row: a larger scratch item, so a probe of its own)
    let tf_base = go("tf_tables_base", "0", &probe_flags);
    let r = go(
        "tf_head_part",
        "0",
        &table_budget(model, &tf_base, v / 8, false),
    );
    assert!(rows(&r) > 0 && rows(&r) < v);
    assert_eq!(
        r.hash(),
        tf_base.hash(),
        "{tag}: teacher-forced rows, partly resident lm_head"
    );
}

fn geometry(model: &Path) -> Geometry {
    let cfg = k3::config::Config::from_file(&model.join("config.json")).unwrap();
    let index = k3::checkpoint::TensorIndex::open(model).unwrap();
    let prep = k3::stream::bind::prepare(&index, &cfg, cfg.num_hidden_layers).unwrap();
    let d = k3::model::Dims::from_config(&cfg);
    Geometry {
        layers: prep.layouts.iter().map(|l| buffer_bytes(l.bytes)).collect(),
        slot: prep
            .layouts
            .iter()
            .flat_map(|l| l.trunk_pieces(k3::stream::pieces::PieceMode::Part))
            .map(|p| buffer_bytes(p.len))
            .max()
            .unwrap(),
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
    let go = |name: &str, extra: &[&str]| checked_run(model, tag, &base_args, name, extra);
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
    let small_ring = gb_arg(2 * g.slot);

    // Trunk streamed from the shards, nothing pinned, ring 2 (read-ahead).
    let r = go("shards", &["--trunk-gb", &small_ring]);
    same(&r, "trunk streamed from the shards");
    assert_eq!(r.u64(&["trunk", "pinned_layers"]), 0);
    assert_eq!(r.u64(&["trunk", "ring_slots"]), 2);
    assert!(r.u64(&["trunk", "bytes_read"]) > 0);
    assert_eq!(r.json()["trunk"]["packed"], false);
    // every bind of a streamed piece paid a read, and all but the first were read ahead
    let binds = r.u64(&["trunk", "binds"]);
    assert_eq!(r.u64(&["trunk", "reads"]), binds);
    assert_eq!(r.u64(&["trunk", "reads_ahead"]), binds - 1);
    assert_eq!(r.u64(&["trunk", "hits"]), 0);

    // The same from a packed trunk.
    let packed = packed_trunk(model, &format!("stream_packed_{tag}"));
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
    assert_eq!(r.u64(&["memory", "plan", "lm_head_resident_rows"]), 0);

    // lm_head partly resident; lm_head resident and the embedding streamed.
    table_splits(model, tag, ids, gen, &base);

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
    // Full recompute re-walks the streamed trunk once per chunk and step.
    let r = go(
        "full_recompute",
        &[
            "--full-recompute",
            "--prefill-chunk",
            "4",
            "--trunk-gb",
            &small_ring,
        ],
    );
    same(&r, "full recompute over a streamed trunk");

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

/// Tied embeddings: the one table resident, with a resident prefix (which also serves the
/// embedding rows below it) and streamed.
#[test]
fn tied_table_logits_are_identical_resident_partly_resident_and_streamed() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stream_tied_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut spec = moderate_spec();
    spec.tie_word_embeddings = true;
    synth::generate(
        &spec,
        &dir,
        synth::Options {
            threads: 2,
            ..synth::Options::default()
        },
    )
    .unwrap();
    // ids on both sides of the resident prefixes (V = 1024)
    let ids = "5,900,17,256,3,77,1000,600";
    let base = run(&dir, "tied_base", &["--ids", ids, "--gen", "5"]);
    check_ok(&base, "tied base");
    assert_eq!(base.u64(&["memory", "plan", "lm_head_resident_rows"]), 1024);
    let r = run(
        &dir,
        "tied_ultra",
        &["--ids", ids, "--gen", "5", "--preset", "ultra"],
    );
    check_ok(&r, "tied ultra");
    assert_eq!(r.hash(), base.hash(), "tied table streamed");
    assert!(r.u64(&["io", "embedding_bytes_read"]) > 0);
    table_splits(&dir, "tied", ids, 5, &base);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The prefill chunk never changes a logit (ENGINE.md §3, MODEL.md §7): chunks of 1, 7, 64 and
/// 500 positions and `auto`, on a prompt longer than a sub-block (`k3::model::SUB_ROWS`), at
/// the resident plan and at each chunk's smallest accepted budget (a packed trunk streamed
/// through the smallest ring, top-k cache slots, tables streamed), incremental and with full
/// recompute; every run gives the resident chunk-1 run's hash and tokens.
#[test]
fn prefill_chunk_never_changes_a_logit_resident_or_at_the_floor() {
    let model = fixture("tiny-k3");
    let n = k3::model::SUB_ROWS + 30;
    let ids: Vec<String> = (0..n).map(|i| ((i * 37 + 11) % 512).to_string()).collect();
    let ids = ids.join(",");
    let base_args = ["--ids", ids.as_str(), "--gen", "3"];
    let go = |name: &str, extra: &[&str]| checked_run(&model, "chunks", &base_args, name, extra);
    let base = go("base", &["--prefill-chunk", "1"]);
    let packed = packed_trunk(&model, "stream_chunks_packed");
    let packed = packed.to_str().unwrap();
    for chunk in ["1", "7", "64", "500", "auto"] {
        let ck = ["--prefill-chunk", chunk];
        // The floor for this chunk: the smallest plan a refused tiny budget reports.
        let mut probe_args = base_args.to_vec();
        probe_args.extend_from_slice(&ck);
        probe_args.extend_from_slice(&["--trunk", packed, "--mem-gb", "0.000001"]);
        let probe = run(&model, &format!("chunks_probe_{chunk}"), &probe_args);
        assert_eq!(
            probe.code,
            Some(3),
            "chunk {chunk}: probe:\n{}",
            probe.stderr
        );
        let floor = gb_arg(probe.u64(&["memory", "plan", "total"]));
        let floor_args = ["--trunk", packed, "--mem-gb", floor.as_str()];
        for (plan, extra) in [("resident", &[][..]), ("floor", &floor_args[..])] {
            for full in [false, true] {
                let mut a = ck.to_vec();
                a.extend_from_slice(extra);
                if full {
                    a.push("--full-recompute");
                }
                let name = format!("{plan}_{chunk}_{}", if full { "full" } else { "inc" });
                let r = go(&name, &a);
                assert_eq!(
                    r.hash(),
                    base.hash(),
                    "chunk {chunk}, {name}: logits differ"
                );
                assert_eq!(r.generated(), base.generated(), "chunk {chunk}, {name}");
                if plan == "floor" {
                    assert_eq!(r.u64(&["trunk", "pinned_layers"]), 0, "{name}");
                }
            }
        }
    }
}
