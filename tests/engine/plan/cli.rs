//! The plan's flags end to end, as a new user tried them (each test failed before its fix):
//! position counts that overflow, budgets above what the model can use, budget flags too large
//! and a bad thread count naming the flag.

use crate::support::{run_args, scratch_dir, stderr, tiny, tiny_without_max_positions};
use std::path::Path;

fn hash_of(json: &Path) -> String {
    let text = std::fs::read_to_string(json).unwrap();
    let i = text.find("\"logits_hash\"").expect("logits_hash in --out");
    text[i..].split('"').nth(3).unwrap().to_string()
}

#[test]
fn positions_past_what_k3_can_count_are_invalid_input_not_a_crash() {
    // prompt + --gen wraps usize: was exit 1 after printing a token
    for (ids, gen) in [
        ("1", "18446744073709551615"),
        ("1,2", "18446744073709551614"),
    ] {
        let o = run_args(&[&tiny(), "--ids", ids, "--gen", gen]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("positions"), "{}", stderr(&o));
        assert!(o.stdout.is_empty(), "no token printed");
    }
    // Without max_position_embeddings: was an abort (capacity overflow, exit 134) or a plan
    // whose MLA cache size wrapped to a small figure. Now the plan refuses (exit 3) before
    // allocating, with the MLA cache at least as large as the positions need.
    let m = tiny_without_max_positions("edge_no_maxpos");
    let m = m.display().to_string();
    for gen in [
        "57646075230342348",
        "28823037615171174",
        "100000000000000000",
        "4000000000",
    ] {
        let o = run_args(&[&m, "--ids", "1", "--gen", gen]);
        assert_eq!(o.status.code(), Some(3), "--gen {gen}: {}", stderr(&o));
        assert!(stderr(&o).contains("MLA cache"), "{}", stderr(&o));
        let positions: f64 = gen.parse::<f64>().unwrap() + 1.0;
        // 4 MLA layers × 160 bytes per position (tiny-k3), in GB
        let need_gb = positions * 4.0 * 160.0 / 1e9;
        let err = stderr(&o);
        let i = err.find("MLA cache ").unwrap() + "MLA cache ".len();
        let shown: f64 = err[i..].split(' ').next().unwrap().parse().unwrap();
        assert!(
            shown >= need_gb.min(u64::MAX as f64 / 1e9) * 0.99,
            "MLA cache {shown} GB shown for {need_gb} GB: {err}"
        );
    }
}

#[test]
fn a_trunk_or_cache_budget_above_the_model_plans_all_of_it() {
    let dir = scratch_dir("edge_big_budgets");
    let base = dir.join("base.json");
    let o = run_args(&[
        &tiny(),
        "--ids",
        "1,2,3",
        "--gen",
        "3",
        "--out",
        base.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for flag in ["--trunk-gb", "--cache-gb"] {
        let out = dir.join(format!("{}.json", &flag[2..]));
        let o = run_args(&[
            &tiny(),
            "--ids",
            "1,2,3",
            "--gen",
            "3",
            flag,
            "1e6",
            "--out",
            out.to_str().unwrap(),
        ]);
        // was exit 3: "below the minimum 1000000.0 GB for this model (sizes now in three-digit style)"
        assert_eq!(o.status.code(), Some(0), "{flag} 1e6: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{flag} 1000000 GB is more than")),
            "{}",
            stderr(&o)
        );
        assert_eq!(hash_of(&out), hash_of(&base), "{flag} 1e6");
    }
}

#[test]
fn budget_flags_say_too_large_and_threads_name_the_flag() {
    for v in ["2e10", "1e300", "inf"] {
        let o = run_args(&[&tiny(), "--ids", "1", "--mem-gb", v]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("--mem-gb {v}`: too large")),
            "{}",
            stderr(&o)
        );
    }
    let o = run_args(&[&tiny(), "--ids", "1", "--threads", "1000000"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--threads 1000000"), "{}", stderr(&o));
}
