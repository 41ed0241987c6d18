//! The forward pass on configurations the fixtures do not cover (MODEL.md §3: "test configs put
//! MLA at layer 0, several dense layers, odd block sizes"), built with the synthetic checkpoint
//! writer and checked against the independent float64 reference: MLA at layer 0 and at the
//! last two layers, three dense layers, AttnRes block 5, tied embeddings; and top-1 routing
//! (no renormalisation), no shared experts, no MLA output gate, no latent norm, a routed
//! scaling factor ≠ 1.

use crate::support;
use crate::support::model_ref;

use model_ref::{max_abs_diff, Ckpt, RefModel};
use std::path::{Path, PathBuf};
use support::{run_k3, scratch_dir};

fn generate(tag: &str, spec: &synth::SynthSpec) -> PathBuf {
    let dir = scratch_dir(&format!("configs_{tag}"));
    synth::generate(
        spec,
        &dir,
        synth::Options {
            force: true,
            ..Default::default()
        },
    )
    .unwrap();
    dir
}

fn dump(dir: &Path, ids: &str, gen: &str, extra: &[&str], tag: &str) -> (Vec<f32>, String) {
    let out = scratch_dir(&format!("configs_run_{tag}")).join("logits.f32");
    let mut args = vec![
        dir.to_str().unwrap(),
        "--ids",
        ids,
        "--gen",
        gen,
        "--quiet",
        "--dump-logits",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run_k3(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = std::fs::read(&out).unwrap();
    (
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

/// Engine teacher-forced logits within 1e-4 × max(1, max|logit|) of the reference.
fn check_against_reference(dir: &Path, tag: &str) {
    let ids: Vec<u32> = vec![5, 77, 300, 12, 498, 3, 256, 41, 9, 130, 77, 200];
    let ids_s = ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let model = RefModel::load(&Ckpt::open(dir));
    let (reference, _) = model.forward(&ids);
    let (engine, _) = dump(dir, &ids_s, "0", &[], tag);
    let engine = engine
        .chunks(model.v)
        .map(|r| r.to_vec())
        .collect::<Vec<_>>();
    let max_abs = reference.iter().flatten().fold(0f64, |m, v| m.max(v.abs()));
    let tol = 1e-4 * max_abs.max(1.0);
    let d = max_abs_diff(&reference, &engine);
    eprintln!("{tag}: engine vs reference {d:e}, tolerance {tol:e}");
    assert!(d <= tol, "{tag}: {d} > {tol}");
}

#[test]
fn mla_first_and_last_several_dense_layers_odd_block_tied_head() {
    let mut s = synth::SynthSpec::small(7, 6);
    s.full_attn_layers = vec![1, 6, 7];
    s.first_k_dense_replace = 3;
    s.attn_res_block_size = 5;
    s.tie_word_embeddings = true;
    s.seed = 11;
    let dir = generate("layer_map", &s);
    let cfg = k3::config::Config::from_file(&dir.join("config.json")).unwrap();
    assert_eq!(cfg.layer_map(), "MKKKKMM");
    check_against_reference(&dir, "layer_map");
    // incremental and full recompute give the same bits at every step here too
    let (inc, out_inc) = dump(&dir, "5,77,300", "6", &["--prefill-chunk", "2"], "lm_inc");
    let (full, out_full) = dump(&dir, "5,77,300", "6", &["--full-recompute"], "lm_full");
    assert_eq!(out_inc, out_full);
    assert_eq!(inc.len(), (3 + 6 - 1) * 512);
    assert!(inc
        .iter()
        .zip(&full)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn top1_no_shared_no_gate_no_latent_norm_scaled() {
    let mut s = synth::SynthSpec::small(4, 4);
    s.num_experts_per_token = 1;
    s.num_shared_experts = 0;
    s.mla_use_output_gate = false;
    s.latent_moe_use_norm = false;
    s.routed_scaling_factor = 2.5;
    s.seed = 12;
    let dir = generate("moe_variants", &s);
    check_against_reference(&dir, "moe_variants");
}
