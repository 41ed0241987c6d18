//! Trunk pieces and I/O depth (ENGINE.md §5): streamed layers cut at their parts
//! (`--trunk-pieces part`, the default) or whole (`layer`), through rings of 1, 2 and 3 slots,
//! at I/O depths 1, 2 and 4, from the shards and from a packed trunk: every setting gives the
//! resident run's logits bits. The plan prints the pieces and what overlaps; the released
//! model's floor does not grow; invalid flags are refused (exit 2).

use crate::support::released::k3_sizes;
use crate::support::stream as stream_support;
use k3::plan::buffer_bytes;
use k3::stream::pieces::PieceMode;
use std::path::Path;
use stream_support::*;

/// Each bound layer's piece lengths (forward order) under `mode`.
pub(super) fn pieces(model: &Path, mode: PieceMode) -> Vec<Vec<u64>> {
    let cfg = k3::config::Config::from_file(&model.join("config.json")).unwrap();
    let index = k3::checkpoint::TensorIndex::open(model).unwrap();
    let prep = k3::stream::bind::prepare(&index, &cfg, cfg.num_hidden_layers).unwrap();
    prep.layouts
        .iter()
        .map(|l| l.trunk_pieces(mode).iter().map(|p| p.len).collect())
        .collect()
}

/// The largest piece's buffer (a ring slot) under `mode`.
pub(super) fn slot(model: &Path, mode: PieceMode) -> u64 {
    pieces(model, mode)
        .iter()
        .flatten()
        .map(|&p| buffer_bytes(p))
        .max()
        .unwrap()
}

/// The identity matrix of one checkpoint. `all_ahead`: every layer is one run (so every piece
/// read but the first of a run is made ahead with two slots).
fn matrix(model: &Path, tag: &str, ids: &str, all_ahead: bool) {
    let base_args = ["--ids", ids, "--gen", "5"];
    let tag_p = format!("pieces_{tag}");
    let go = |name: &str, extra: &[&str]| checked_run(model, &tag_p, &base_args, name, extra);
    let base = go("base", &[]);
    let same = |r: &Run, what: &str| {
        assert_eq!(r.hash(), base.hash(), "{tag} {what}: logits differ");
        assert_eq!(r.generated(), base.generated(), "{tag} {what}");
    };
    let parts = pieces(model, PieceMode::Part);
    let n_parts: u64 = parts.iter().map(|p| p.len() as u64).sum();
    assert!(
        n_parts > parts.len() as u64,
        "{tag}: no layer was cut: {parts:?}"
    );
    let (ps, ls) = (slot(model, PieceMode::Part), slot(model, PieceMode::Layer));
    assert!(
        ps < ls,
        "{tag}: a part slot {ps} is not smaller than a layer slot {ls}"
    );
    let packed = packed_trunk(model, &format!("pieces_packed_{tag}"));
    let packed = packed.to_str().unwrap().to_string();
    for ring in [1u64, 2, 3] {
        for (mode, s) in [("part", ps), ("layer", ls)] {
            for depth in ["1", "2", "4"] {
                let name = format!("{mode}_r{ring}_d{depth}");
                let budget = gb_arg(ring * s);
                let ring_s = ring.to_string();
                let mut flags = vec![
                    "--trunk-gb",
                    &budget,
                    "--trunk-ring",
                    &ring_s,
                    "--trunk-pieces",
                    mode,
                    "--io-depth",
                    depth,
                ];
                if depth == "2" {
                    flags.extend(["--trunk", packed.as_str()]);
                }
                let r = go(&name, &flags);
                same(&r, &name);
                assert_eq!(r.u64(&["trunk", "pinned_layers"]), 0, "{name}");
                assert_eq!(r.u64(&["trunk", "ring_slots"]), ring, "{name}");
                assert_eq!(r.u64(&["trunk", "slot_bytes"]), s, "{name}");
                // one bind per part a forward walks; a part read once per forward (a whole
                // layer's other parts are then hits)
                let binds = r.u64(&["trunk", "binds"]);
                let reads = r.u64(&["trunk", "reads"]);
                assert_eq!(binds % n_parts, 0, "{name}: {binds} binds");
                let forwards = binds / n_parts;
                assert_eq!(reads + r.u64(&["trunk", "hits"]), binds, "{name}");
                let per = if mode == "part" {
                    n_parts
                } else {
                    parts.len() as u64
                };
                if ring < per {
                    assert_eq!(reads, forwards * per, "{name}");
                }
                let ahead = r.u64(&["trunk", "reads_ahead"]);
                if ring == 1 {
                    assert_eq!(ahead, 0, "{name}: one slot reads synchronously");
                } else if all_ahead && ring < per {
                    assert_eq!(ahead, reads - 1, "{name}: every read but the first ahead");
                }
            }
        }
    }
}

#[test]
fn tiny_k3_logits_are_identical_for_every_piece_ring_and_io_depth() {
    matrix(
        &fixture("tiny-k3"),
        "tiny",
        "410,335,224,165,463,246,467,2,368",
        false,
    );
}

#[test]
fn moderate_logits_are_identical_for_every_piece_ring_and_io_depth() {
    matrix(&moderate(), "moderate", "5,900,17,256,3,77,1000", true);
}

/// `k3 <model> --ids 5,900,17 --gen 1 --trunk-gb <budget> <extra>`: its standard error (the
/// plan lines), the run having succeeded.
fn plan_text(m: &Path, budget: &str, extra: &[&str]) -> String {
    let mut a = vec![m.to_str().unwrap(), "--ids", "5,900,17", "--gen", "1"];
    a.extend(["--trunk-gb", budget, "--no-progress"]);
    a.extend_from_slice(extra);
    let o = run_k3(a);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

/// The plan prints each streamed layer's pieces, the ring and what overlaps.
#[test]
fn the_plan_prints_the_pieces_and_what_overlaps() {
    let m = moderate();
    let err = plan_text(&m, &gb_arg(2 * slot(&m, PieceMode::Part)), &[]);
    let line = err
        .lines()
        .find(|l| l.contains("trunk pieces (part)"))
        .unwrap_or_else(|| panic!("no pieces line:\n{err}"));
    for want in [
        "layer 0: attn",
        "mlp.gate_up",
        "mlp.down",
        "moe",
        "ring 2 ×",
        "piece i+1 is read while piece i computes",
        "I/O depth 1",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
    // whole layers say so
    let budget = gb_arg(2 * slot(&m, PieceMode::Layer));
    let err = plan_text(&m, &budget, &["--trunk-pieces", "layer", "--io-depth", "3"]);
    assert!(err.contains("trunk pieces (layer)"), "{err}");
    assert!(err.contains("attn+mlp.gate_up+mlp.down"), "{err}");
    assert!(err.contains("I/O depth 3"), "{err}");
}

/// The released model: two part slots fit in the one layer slot the floor needed before, so
/// the smallest ring is those two slots (reading ahead), and the floor does not grow.
#[test]
fn the_released_floor_does_not_grow_and_two_pieces_fit_in_one_old_slot() {
    let s = k3_sizes(64);
    let layer0 = buffer_bytes(s.layer_runs[0]);
    assert_eq!(s.layer_runs[0], 2_341_213_184);
    let part = buffer_bytes(s.layer_pieces[0][1]);
    assert_eq!(s.trunk_min(), 2 * part);
    assert!(
        2 * part <= layer0,
        "two part slots {} > one layer slot {layer0}",
        2 * part
    );
    let whole = k3::plan::ModelSizes {
        layer_pieces: Vec::new(),
        ..s.clone()
    };
    assert_eq!(whole.trunk_min(), layer0);
    // layer 0: attention, gate+up, down; a MoE layer: attention, MoE
    assert_eq!(s.layer_pieces[0].len(), 3);
    assert_eq!(s.layer_pieces[1].len(), 2);
    assert_eq!(s.layer_pieces[0][1], 2 * s.layer_pieces[0][2]);
    // the planner gives two slots wherever one layer slot fitted
    let c = k3::plan::choose_trunk_pieces(&s.layer_runs, &s.pieces(), layer0, None).unwrap();
    assert_eq!(c.ring_slots, 2, "{}", c.reason);
    assert_eq!(c.slot_bytes, part);
    // below two slots: refused, naming the minimum (one synchronous slot only when asked)
    let e =
        k3::plan::choose_trunk_pieces(&s.layer_runs, &s.pieces(), 2 * part - 1, None).unwrap_err();
    assert_eq!(e.exit_code(), 3);
    assert!(
        e.message.contains("2 ring slots for the largest piece"),
        "{e}"
    );
    let c = k3::plan::choose_trunk_pieces(&s.layer_runs, &s.pieces(), part, Some(1)).unwrap();
    assert_eq!((c.ring_slots, c.n_pinned()), (1, 0));
}

#[test]
fn invalid_piece_and_depth_flags_are_refused() {
    let m = fixture("tiny-k3");
    for (flag, v, want) in [
        (
            "--trunk-pieces",
            "tensor",
            "`--trunk-pieces`: expected `part` or `layer`",
        ),
        ("--io-depth", "0", "`--io-depth 0`: expected 1 to 64"),
        ("--io-depth", "65", "`--io-depth 65`: expected 1 to 64"),
        (
            "--io-depth",
            "two",
            "`--io-depth`: `two` is not a positive integer",
        ),
    ] {
        let o = run_k3([m.to_str().unwrap(), "--ids", "1,2", "--gen", "1", flag, v]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {v}: {err}");
        assert!(err.contains(want), "{flag} {v}: {err}");
    }
}
