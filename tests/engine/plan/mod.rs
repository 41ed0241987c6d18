//! The memory planner (ENGINE.md §4) on the released model's sizes, without files: byte
//! figures of MODEL.md §9, every preset, the 8 GB promise at the smallest budget, the
//! pinned-set fixed point, and refusals (exit 3) below the minimum; `cli`: the plan's flags
//! end to end.

mod cli;

use crate::support::released::{k3_config, k3_sizes};
use k3::plan::{
    buffer_bytes, choose_trunk, choose_trunk_pieces, gb_to_bytes, layer_run_bytes, plan_run,
    preset, Budget, ModelSizes, PRESETS,
};

const GB: f64 = 1e9;

fn preset_budget(name: &str) -> Budget {
    Budget {
        preset: preset(name),
        ..Budget::default()
    }
}

#[test]
fn released_layer_runs_match_model_md() {
    let cfg = k3_config();
    let runs: Vec<u64> = (0..93).map(|l| layer_run_bytes(&cfg, l)).collect();
    assert_eq!(runs[0], 2_341_213_184, "layer 0 run");
    assert_eq!(runs.iter().filter(|&&r| r == 1_267_744_256).count(), 68);
    assert_eq!(runs.iter().filter(|&&r| r == 844_335_616).count(), 24);
    assert_eq!(runs.iter().sum::<u64>(), 108_811_877_376);
    assert_eq!(buffer_bytes(17_547_264), 17_555_456, "expert slot stride");
}

/// ENGINE.md §4: the released model plans within 8 GB at the smallest budget, with its model
/// tables on disk.
#[test]
fn released_model_plans_within_8_gb_at_ultra() {
    for positions in [64, 4096] {
        let s = k3_sizes(positions);
        let p = plan_run(&s, &preset_budget("ultra"), Some(8_000_000_000)).unwrap();
        assert!(p.tables.streamed());
        assert_eq!(p.tables.head_resident_rows, 0);
        assert!(
            p.memory.total <= 8_000_000_000,
            "{positions} positions: {}",
            p.memory.total
        );
        p.memory.check().unwrap();
        // 2.5 GB of trunk: two slots of layer 0's gate+up piece (0.97 GB, the largest piece),
        // so every piece is read while the one before computes; nothing pinned
        assert_eq!(p.trunk.ring_slots, 2);
        assert_eq!(s.layer_pieces[0][1], 968_884_224);
        assert_eq!(p.trunk.slot_bytes, buffer_bytes(968_884_224));
        assert_eq!(p.trunk.n_pinned(), 0);
        // 0.31 GB of cache = 17 experts ≥ top-16
        assert_eq!(p.cache_slots, 17);
        assert_eq!(
            p.memory.total,
            p.memory.trunk_resident
                + p.memory.trunk_ring
                + p.memory.model_tables
                + p.memory.expert_cache
                + p.memory.kda_state
                + p.memory.mla_cache
                + p.memory.scratch
                + p.memory.tokenizer
                + p.memory.tensor_index
        );
    }
    // --mem-gb 8 (the engine splits it) fits too and uses the room it has
    let s = k3_sizes(4096);
    let p = plan_run(
        &s,
        &Budget {
            mem: Some(8_000_000_000),
            ..Budget::default()
        },
        None,
    )
    .unwrap();
    assert!(p.memory.total <= 8_000_000_000, "{}", p.memory.total);
    assert!(p.memory.total > 7_500_000_000, "{}", p.memory.total);
}

#[test]
fn presets_keep_their_split_and_pin_layer_0_when_it_pays() {
    let s = k3_sizes(4096);
    for pr in PRESETS {
        let p = plan_run(&s, &preset_budget(pr.name), None).unwrap();
        assert!(
            p.trunk.bytes() <= (pr.trunk_gb * GB) as u64,
            "{}: trunk {} over budget",
            pr.name,
            p.trunk.bytes()
        );
        let want_slots = (((pr.cache_gb * GB) as u64) / buffer_bytes(17_547_264)) as usize;
        assert_eq!(p.cache_slots, want_slots.min(92 * 896), "{}", pr.name);
        assert_eq!(p.tables.streamed(), pr.name == "ultra", "{}", pr.name);
    }
    // desktop: 16 GB of trunk. Layer 0 pinned (else every slot holds its 0.97 GB gate+up
    // piece); ring 2 × 0.89 GB (a KDA attention piece).
    let p = plan_run(&s, &preset_budget("desktop"), None).unwrap();
    assert!(p.trunk.pinned[0], "{}", p.trunk.reason);
    assert_eq!(p.trunk.ring_slots, 2);
    assert_eq!(p.trunk.slot_bytes, buffer_bytes(887_800_832));
    assert!(
        p.trunk.reason.contains("layer 0 pinned"),
        "{}",
        p.trunk.reason
    );
    // server and max: the whole trunk resident, no ring
    for name in ["server", "max"] {
        let p = plan_run(&s, &preset_budget(name), None).unwrap();
        assert_eq!(p.trunk.n_pinned(), 93, "{name}");
        assert_eq!(p.trunk.ring_slots, 0, "{name}");
        assert_eq!(p.trunk.streamed_bytes, 0, "{name}");
    }
    // laptop: 3 GB holds two slots of layer 0's largest piece and one MLA layer pinned
    let p = plan_run(&s, &preset_budget("laptop"), None).unwrap();
    assert_eq!(
        (p.trunk.ring_slots, p.trunk.n_pinned()),
        (2, 1),
        "{}",
        p.trunk.reason
    );
}

#[test]
fn below_the_minimum_is_refused_with_exit_3_and_the_shortfall() {
    let s = k3_sizes(4096);
    let e = plan_run(
        &s,
        &Budget {
            mem: Some(2_200_000_000),
            ..Budget::default()
        },
        None,
    )
    .map_err(k3::Error::from)
    .unwrap_err();
    assert_eq!(e.exit_code(), 3, "{e}");
    assert!(
        e.message.contains("below the minimum") && e.message.contains("short by"),
        "{e}"
    );
    // a trunk budget below one slot of the largest piece (layer 0's gate+up, 0.97 GB)
    let e = plan_run(
        &s,
        &Budget {
            preset: preset("desktop"),
            trunk: Some(900_000_000),
            ..Budget::default()
        },
        None,
    )
    .map_err(k3::Error::from)
    .unwrap_err();
    assert_eq!(e.exit_code(), 3, "{e}");
    assert!(e.message.contains("trunk budget"), "{e}");
    // a cache below top-k experts
    let e = plan_run(
        &s,
        &Budget {
            cache: Some(100_000_000),
            mem: Some(20_000_000_000),
            ..Budget::default()
        },
        None,
    )
    .map_err(k3::Error::from)
    .unwrap_err();
    assert_eq!(e.exit_code(), 3, "{e}");
    assert!(e.message.contains("top-k = 16"), "{e}");
    // a plan larger than what is available
    let p = plan_run(&s, &preset_budget("desktop"), Some(10_000_000_000)).unwrap();
    let e = k3::Error::from(p.memory.check().unwrap_err());
    assert_eq!(e.exit_code(), 3);
    assert!(e.message.contains("short by"), "{e}");
    // a fixed preset and --mem-gb together are a usage error
    let e = plan_run(
        &s,
        &Budget {
            preset: preset("laptop"),
            mem: Some(9_000_000_000),
            ..Budget::default()
        },
        None,
    )
    .map_err(k3::Error::from)
    .unwrap_err();
    assert_eq!(e.exit_code(), 2);
}

/// The fixed point: every ring slot holds the largest unpinned layer, so pinning a large layer
/// can free more than it costs.
#[test]
fn pinned_set_minimises_streamed_bytes() {
    // Sizes chosen as whole pages so buffer costs are run + 8192.
    let p = |n: u64| n * 4096;
    let slack = 8192;
    // One big layer (100 pages) and four of 40.
    let runs = [p(100), p(40), p(40), p(40), p(40)];
    let cost = |n: u64| p(n) + slack;
    // Budget: big pinned + 2 slots of 40 + one more 40 pinned = 100+40+80
    let budget = cost(100) + cost(40) + 2 * cost(40);
    let c = choose_trunk(&runs, budget, None).unwrap();
    assert!(c.pinned[0], "{}", c.reason);
    assert_eq!(c.n_pinned(), 2, "{}", c.reason);
    assert_eq!((c.ring_slots, c.slot_bytes), (2, cost(40)));
    assert_eq!(c.streamed_bytes, 3 * p(40));
    // No room for two slots: one slot. Pinning the big layer (streaming 4 × 40) beats a slot
    // of 100 next to one pinned 40 (streaming 100 + 3 × 40).
    let c = choose_trunk(&runs, cost(100) + cost(40), None).unwrap();
    assert_eq!(c.ring_slots, 1);
    assert!(c.pinned[0], "{}", c.reason);
    assert_eq!((c.n_pinned(), c.streamed_bytes), (1, 4 * p(40)));
    // Only one slot of the big layer fits: nothing pinned.
    let c = choose_trunk(&runs, cost(100) + cost(40) - 1, None).unwrap();
    assert_eq!((c.ring_slots, c.n_pinned()), (1, 0));
    // Forced ring of 3.
    let c = choose_trunk(&runs, cost(100) + 3 * cost(40), Some(3)).unwrap();
    assert_eq!((c.ring_slots, c.n_pinned()), (3, 1));
    assert!(c.pinned[0]);
    // Everything fits: all pinned, no ring.
    let all: u64 = runs.iter().map(|&r| r + slack).sum();
    let c = choose_trunk(&runs, all, Some(2)).unwrap();
    assert_eq!((c.ring_slots, c.n_pinned(), c.streamed_bytes), (0, 5, 0));
    // Below one slot of the largest layer: exit 3 naming the minimum.
    let e = choose_trunk(&runs, cost(100) - 1, None).unwrap_err();
    assert_eq!(e.exit_code(), 3);
    assert!(e.message.contains("below the minimum"), "{e}");
    // Pinned layers of one size are spread over the walk.
    let runs = [p(10); 8];
    let c = choose_trunk(&runs, 4 * (p(10) + slack), Some(1)).unwrap();
    assert_eq!(c.n_pinned(), 3);
    let pinned: Vec<usize> = (0..8).filter(|&l| c.pinned[l]).collect();
    assert_eq!(pinned, [1, 4, 6]);
}

/// `gb` never shows a non-zero size as zero, and `gb_pair` never shows two different sizes
/// the same (so a refusal never says "the budget X is below the minimum X" or "short by 0").
#[test]
fn size_formatting_never_hides_a_difference() {
    use k3::plan::{gb, gb_pair};
    assert_eq!(gb(0), "0 bytes");
    assert_eq!(gb(76), "76 bytes");
    assert_eq!(gb(24_576), "24.6 kB");
    assert_eq!(gb(5_300_000), "5.30 MB");
    assert_eq!(gb(24_000_000), "24.0 MB");
    assert_eq!(gb(1), "1 byte");
    assert_eq!(gb(999_999), "1.00 MB");
    assert_eq!(gb(9_996_000_000), "10.0 GB");
    assert_eq!(gb(108_810_000_000), "109 GB");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let scale = 10u64.pow((next() % 13) as u32);
        let a = next() % (10 * scale) + 1;
        let b = a + next() % (1 + scale / 1000).max(1) + 1;
        for v in [a, b, b - a] {
            let t = gb(v);
            let n: f64 = t.split_whitespace().next().unwrap().parse().unwrap();
            assert!(n > 0.0, "{v} bytes reads as {t}");
        }
        let (sa, sb) = gb_pair(a, b);
        assert_ne!(sa, sb, "{a} vs {b}");
        let (sb2, sa2) = gb_pair(b, a);
        assert_eq!((sa2, sb2), (sa, sb));
    }
    // the reported cases
    assert_eq!(
        gb_pair(24_000_000, 24_468_759),
        ("24.0 MB".to_string(), "24.5 MB".to_string())
    );
    assert_eq!(
        gb_pair(24_570, 24_576),
        ("24570 bytes".to_string(), "24576 bytes".to_string())
    );
}

/// `--mem-gb` with the trunk fixed, on the released sizes at 4096 positions.
fn mem_plan(s: &ModelSizes, mem: u64, trunk: u64, cache: Option<u64>) -> k3::plan::RunPlan {
    plan_run(
        s,
        &Budget {
            mem: Some(mem),
            trunk: Some(trunk),
            cache,
            ..Budget::default()
        },
        None,
    )
    .unwrap()
}

/// ENGINE.md §4 as k3 orders it: after the fixed items and the trunk, lm_head rows (a resident
/// row is never read again), then expert-cache slots beyond top-k (they save only their hit
/// rate), then the embedding table (2·H bytes per token). Swept over budgets: each later item
/// grows only once the earlier one is complete.
#[test]
fn budget_goes_to_lm_head_rows_then_expert_cache_then_embedding() {
    let s = k3_sizes(4096);
    // a trunk budget the pinned set and ring fill exactly
    let trunk = choose_trunk_pieces(&s.layer_runs, &s.pieces(), 10_000_000_000, None)
        .unwrap()
        .bytes();
    let used = trunk;
    let v = s.vocab;
    // The smallest budget with this trunk: nothing of the tables resident, top-k slots.
    let base = s.fixed() + used + s.cache_min() + s.tables_streamed();
    let p = mem_plan(&s, base, trunk, None);
    assert_eq!(p.tables.head_resident_rows, 0);
    assert!(!p.tables.embed_resident && p.tables.streamed());
    assert_eq!(p.cache_slots, 16);
    assert_eq!(p.tables.chunk_slots, 2);
    // Half a lm_head more: about half its rows resident, the cache still at top-k.
    let p = mem_plan(&s, base + s.lm_head / 2, trunk, None);
    let r = p.tables.head_resident_rows;
    assert!(r > v / 2 - 10 && r < v / 2, "{r}");
    assert_eq!(p.cache_slots, 16, "no cache slot before every lm_head row");
    assert!(!p.tables.embed_resident);
    assert_eq!(p.memory.lm_head_resident_rows, r as u64);
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains(&format!("0..{r} of {v}"))),
        "{:?}",
        p.notes
    );
    assert!(
        p.tables.line().contains("lm_head rows 0..")
            && p.tables.line().contains("before expert-cache slots")
    );
    assert!(p.memory.total <= base + s.lm_head / 2);
    // The whole lm_head plus 10 cache slots: the head resident (no chunk slots), the cache
    // grows, the embedding still streams.
    let full = base + s.tables_bytes(v, false) - s.tables_streamed();
    let p = mem_plan(&s, full + 10 * s.expert_stride, trunk, None);
    assert_eq!(p.tables.head_resident_rows, v);
    assert_eq!(p.tables.chunk_slots, 0);
    assert_eq!(p.cache_slots, 26);
    assert!(!p.tables.embed_resident);
    assert!(p.tables.streamed(), "embedding rows are still read");
    // One byte short of the whole head: every row but some resident, the cache at top-k.
    let p = mem_plan(&s, full - 1, trunk, None);
    assert!(p.tables.head_resident_rows < v && p.tables.head_resident_rows > v - 5000);
    assert_eq!(p.cache_slots, 16);
    // The cache fixed by --cache-gb: the rest goes to the lm_head, then the embedding.
    let cache = 20 * s.expert_stride;
    let both = s.fixed() + used + cache + s.tables_resident();
    let p = mem_plan(&s, both, trunk, Some(cache));
    assert_eq!(p.tables.head_resident_rows, v);
    assert!(p.tables.embed_resident && !p.tables.streamed());
    assert_eq!(p.memory.model_tables, s.tables_resident());
    assert_eq!(p.memory.total, both);
    let p = mem_plan(&s, both - 1, trunk, Some(cache));
    assert_eq!(p.tables.head_resident_rows, v);
    assert!(!p.tables.embed_resident, "the embedding comes last");
    // Every expert cached: only then the embedding table (a small model, where that fits).
    let mut small = s.clone();
    small.experts_total = 64;
    let all = small.fixed() + used + small.cache_max() + small.tables_resident();
    let p = mem_plan(&small, all, trunk, None);
    assert_eq!(p.cache_slots, 64);
    assert!(p.tables.embed_resident && !p.tables.streamed());
    let p = mem_plan(&small, all - 1, trunk, None);
    assert_eq!(p.cache_slots, 64, "cache slots before the embedding");
    assert!(!p.tables.embed_resident);
    let embed_extra = s.tables_bytes(v, true) - s.tables_bytes(v, false);
    let p = mem_plan(&small, all - embed_extra, trunk, None);
    assert_eq!(p.cache_slots, 64);
    assert!(!p.tables.embed_resident);
    let p = mem_plan(&small, all - embed_extra - 1, trunk, None);
    assert_eq!(p.cache_slots, 63);
    assert!(!p.tables.embed_resident);
    // Every plan's items add up, within the budget.
    for mem in [base, base + 1, full - 1, full, all - 1, all] {
        let p = mem_plan(
            &small,
            mem.max(small.fixed() + used + small.cache_min() + small.tables_streamed()),
            trunk,
            None,
        );
        assert_eq!(p.memory.model_tables, p.tables.bytes);
        assert_eq!(
            p.memory.total,
            p.memory.trunk_resident
                + p.memory.trunk_ring
                + p.memory.model_tables
                + p.memory.expert_cache
                + p.memory.kda_state
                + p.memory.mla_cache
                + p.memory.scratch
                + p.memory.tokenizer
                + p.memory.tensor_index
        );
    }
}

/// Tied embeddings (`tie_word_embeddings`): the one table is resident, or streamed with a
/// resident prefix that also serves the embedding rows below it.
#[test]
fn a_tied_table_is_resident_or_streamed_with_a_resident_prefix() {
    let mut s = k3_sizes(4096);
    s.lm_head = 0;
    assert!(s.tied());
    let v = s.vocab;
    // a trunk budget the pinned set and ring fill exactly
    let trunk = choose_trunk_pieces(&s.layer_runs, &s.pieces(), 10_000_000_000, None)
        .unwrap()
        .bytes();
    let used = trunk;
    let base = s.fixed() + used + s.cache_min() + s.tables_streamed();
    // Streamed: a row window and the chunk slots; nothing resident.
    let p = mem_plan(&s, base, trunk, None);
    assert_eq!(p.tables.head_resident_rows, 0);
    assert!(p.tables.tied && !p.tables.embed_resident);
    assert_eq!(
        p.memory.model_tables,
        buffer_bytes(s.row)
            + 2 * buffer_bytes(s.row * s.head_chunk_rows() as u64)
            + s.table_vectors
    );
    // A prefix.
    let p = mem_plan(&s, base + s.embed / 4, trunk, None);
    let r = p.tables.head_resident_rows;
    assert!(r > v / 4 - 10 && r < v / 4, "{r}");
    assert!(!p.tables.embed_resident);
    assert!(p.tables.line().contains("tied"), "{}", p.tables.line());
    // The whole table: one resident table, no window, no chunk slots; never counted twice.
    let full = s.fixed() + used + s.cache_min() + s.tables_resident();
    let p = mem_plan(&s, full, trunk, Some(s.cache_min()));
    assert_eq!(p.tables.head_resident_rows, v);
    assert!(p.tables.embed_resident && !p.tables.streamed());
    assert_eq!(
        p.memory.model_tables,
        buffer_bytes(s.embed) + s.table_vectors
    );
    // Presets: resident, or streamed at ultra.
    let p = plan_run(&s, &preset_budget("desktop"), None).unwrap();
    assert_eq!(
        p.memory.model_tables,
        buffer_bytes(s.embed) + s.table_vectors
    );
    let p = plan_run(&s, &preset_budget("ultra"), None).unwrap();
    assert_eq!(p.tables.head_resident_rows, 0);
}

/// A refusal's figures are those of the smallest plan: nothing of the tables resident.
#[test]
fn the_minimum_plan_streams_the_tables() {
    let s = k3_sizes(4096);
    let m = k3::plan::minimum_plan(&s, None);
    assert_eq!(m.lm_head_resident_rows, 0);
    assert_eq!(m.lm_head_rows, s.vocab as u64);
    assert!(!m.embedding_resident);
    assert_eq!(m.model_tables, s.tables_streamed());
    assert!(
        m.lines()
            .contains("lm_head rows resident 0/163840, embedding streamed"),
        "{}",
        m.lines()
    );
}

/// A budget written in decimal GB with up to nine decimals names an exact byte count, and a
/// plan whose total is exactly the budget fits. (`0.016150631` × 10^9 is 16150630.999… in
/// f64: truncating lost the one byte a plan that fit exactly needed, so the whole lm_head
/// became a 176-row prefix on one checkout path and not on another.)
#[test]
fn a_budget_in_decimal_gb_is_its_exact_byte_count_and_an_exact_fit_fits() {
    assert_eq!(gb_to_bytes(0.016150631), 16_150_631);
    let mut n: u64 = 1;
    while n < 100_000_000_000_000 {
        for d in [0, 1, 7, 999, 12_345, 999_999_999] {
            let b = n + d;
            let text = format!("{}.{:09}", b / 1_000_000_000, b % 1_000_000_000);
            assert_eq!(gb_to_bytes(text.parse().unwrap()), b, "--mem-gb {text}");
        }
        n = n * 3 + 1;
    }
    let s = k3_sizes(4096);
    let trunk = choose_trunk_pieces(&s.layer_runs, &s.pieces(), 10_000_000_000, None)
        .unwrap()
        .bytes();
    let full = s.fixed() + trunk + s.cache_min() + s.tables_bytes(s.vocab, false);
    let p = mem_plan(&s, full, trunk, Some(s.cache_min()));
    assert_eq!(p.tables.head_resident_rows, s.vocab);
    assert_eq!(p.memory.total, full);
    let p = mem_plan(&s, full - 1, trunk, Some(s.cache_min()));
    assert!(p.tables.head_resident_rows < s.vocab);
}
