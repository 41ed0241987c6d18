//! Bad input to the run command is refused with the exit code of ENGINE.md §3 and a message
//! naming the problem: ids outside the vocabulary, too many positions, truncated or missing
//! shards, tensors of the wrong shape or dtype, a non-zero A_log tail, an E8M0 scale of 255, a
//! non-finite activation (naming layer and position), flags of later work; and a shard that
//! shrinks after it was indexed fails the token with exit 4 (MODEL.md §11 row 23).

use crate::support;
use crate::support::model_ref;

use model_ref::Ckpt;
use std::path::{Path, PathBuf};
use support::{copy_dir, fixture, run_k3};

/// A private copy of a fixture checkpoint.
fn copy_fixture(name: &str, tag: &str) -> PathBuf {
    copy_dir(&fixture(name), &format!("refusal_{tag}"))
}

/// Overwrites bytes of tensor `name` at `off` (bytes from the tensor start).
fn patch_tensor(dir: &Path, name: &str, off: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let c = Ckpt::open(dir);
    let t = &c.tensors[name];
    assert!(off + bytes.len() as u64 <= t.len);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&c.shards[t.shard])
        .unwrap();
    f.write_all_at(bytes, t.offset + off).unwrap();
}

/// Replaces `from` by `to` (same length) in the header entry of tensor `name`.
fn patch_header(dir: &Path, name: &str, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let c = Ckpt::open(dir);
    let path = &c.shards[c.tensors[name].shard];
    let mut b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let h = String::from_utf8(b[8..8 + n].to_vec()).unwrap();
    let key = format!("\"{name}\":{{");
    let at = h.find(&key).unwrap() + key.len();
    let end = at + h[at..].find('}').unwrap();
    let entry = h[at..end].replacen(from, to, 1);
    assert_ne!(entry, h[at..end], "pattern {from} not in {name}");
    b[8 + at..8 + end].copy_from_slice(entry.as_bytes());
    std::fs::write(path, b).unwrap();
}

/// Runs k3 on `dir` and returns (exit code, stderr).
fn fails(dir: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        dir.to_str().unwrap(),
        "--ids",
        "410,335,224,165,463",
        "--gen",
        "3",
    ];
    args.extend_from_slice(extra);
    let o = run_k3(&args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    (o.status.code().unwrap_or(-1), err)
}

#[test]
fn id_outside_the_vocabulary() {
    let (code, err) = fails(&fixture("tiny-k3"), &["--ids", "1,2,512"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("512") && err.contains("outside the vocabulary") && err.contains("position 2"),
        "{err}"
    );
}

#[test]
fn prompt_plus_generation_beyond_max_position_embeddings() {
    let dir = copy_fixture("tiny-k3", "maxpos");
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let cfg = cfg.replace(
        "\"max_position_embeddings\": 1048576",
        "\"max_position_embeddings\": 7",
    );
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let (code, err) = fails(&dir, &["--gen", "3"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("max_position_embeddings 7") && err.contains("8 positions"),
        "{err}"
    );
    // exactly at the limit is fine
    let o = run_k3([dir.to_str().unwrap(), "--ids", "1,2,3,4,5", "--gen", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn missing_shard() {
    let dir = copy_fixture("tiny-k3", "missing");
    std::fs::remove_file(dir.join("model-00003-of-00007.safetensors")).unwrap();
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("layers.4."),
        "should name a tensor of layers 4-6: {err}"
    );
}

#[test]
fn truncated_shard() {
    let dir = copy_fixture("tiny-k3", "truncated");
    let p = dir.join("model-00004-of-00007.safetensors");
    let len = std::fs::metadata(&p).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("model-00004-of-00007.safetensors"), "{err}");
}

#[test]
fn tensor_of_the_wrong_shape() {
    let dir = copy_fixture("tiny-k3", "shape");
    let name = "language_model.model.layers.0.mlp.gate_proj.weight";
    patch_header(&dir, name, "[96,128]", "[128,96]");
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(name) && err.contains("[96, 128]") && err.contains("[128, 96]"),
        "{err}"
    );
}

#[test]
fn tensor_of_the_wrong_dtype() {
    let dir = copy_fixture("tiny-k3", "dtype");
    let name = "language_model.model.layers.5.self_attn.q_proj.weight";
    patch_header(&dir, name, "\"BF16\"", "\"F16\" ");
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(name) && err.contains("BF16") && err.contains("F16"),
        "{err}"
    );
}

/// MODEL.md §11 row 4: A_log is per head; a non-zero tail would mean a per-channel layout.
#[test]
fn a_log_with_a_non_zero_tail_is_refused() {
    let dir = copy_fixture("tiny-k3", "alog");
    let name = "language_model.model.layers.1.self_attn.A_log";
    // tiny-k3: 4 heads, head_dim 16 → entries 4..15 must be zero
    patch_tensor(&dir, name, 4 * 9, &0.25f32.to_le_bytes());
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(name) && err.contains("entry 9"), "{err}");
    // -0 is an allowed zero
    let dir = copy_fixture("tiny-k3", "alog_negzero");
    patch_tensor(&dir, name, 4 * 9, &(-0.0f32).to_le_bytes());
    let o = run_k3([dir.to_str().unwrap(), "--ids", "1,2", "--gen", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// FORMATS.md §5: an E8M0 byte of 255 fails the expert load naming tensor, row and group, and
/// (ENGINE.md §3) the shard file it was read from.
#[test]
fn e8m0_scale_255_names_file_tensor_row_and_group() {
    let dir = copy_fixture("tiny-k3", "e8m0");
    // every expert of layer 2: w2 scale [64 rows, 2 groups], row 3 group 1
    for e in 0..8 {
        let name =
            format!("language_model.model.layers.2.block_sparse_moe.experts.{e}.w2.weight_scale");
        patch_tensor(&dir, &name, 3 * 2 + 1, &[255]);
    }
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("layers.2.block_sparse_moe.experts.")
            && err.contains(".w2.weight_scale: row 3, group 1: E8M0 scale 255 (NaN)"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}/", dir.display())) && err.contains(".safetensors: "),
        "the shard file: {err}"
    );
}

/// MODEL.md §5.6: a non-finite layer output stops the run naming the layer and position.
#[test]
fn non_finite_activation_names_layer_and_position() {
    let dir = copy_fixture("tiny-k3", "nonfinite");
    // BF16 +inf in every entry of row 5 of layer 2's KDA o_proj [128, 64]
    let name = "language_model.model.layers.2.self_attn.o_proj.weight";
    let row: Vec<u8> = (0..64).flat_map(|_| 0x7f80u16.to_le_bytes()).collect();
    patch_tensor(&dir, name, 5 * 64 * 2, &row);
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("layer 2") && err.contains("position 0") && err.contains("non-finite"),
        "{err}"
    );
    // no token was printed
    let o = run_k3([dir.to_str().unwrap(), "--ids", "1,2", "--gen", "2"]);
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_flags_are_refused_not_ignored() {
    let model = fixture("tiny-k3");
    // (sampling, --stop, --ctx, --batch and the state files are implemented: generate/;
    // the budget flags --mem-gb, --trunk-gb, --cache-gb, --preset: stream/)
    let (code, err) = fails(&model, &["--load-state", "/nonexistent-dir/s.k3"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--load-state") && err.contains("/nonexistent-dir"),
        "{err}"
    );
    let (code, err) = fails(&model, &["--out", "/nonexistent-dir/r.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--out") && err.contains("/nonexistent-dir"),
        "{err}"
    );
    let (code, err) = fails(&model, &["--bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("--bogus"));
    // accepted no-ops
    let o = run_k3([
        model.to_str().unwrap(),
        "--ids",
        "1",
        "--gen",
        "1",
        "--incremental",
        "--preset",
        "auto",
        "--temperature",
        "0",
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// MODEL.md §11 row 23: a shard that shrinks after indexing fails the token (exit 4) and
/// never yields logits computed without the expert.
#[test]
fn expert_read_failure_fails_the_forward_with_exit_4() {
    use k3::bind::bind_resident;
    use k3::model::*;
    let dir = copy_fixture("tiny-k3", "shrink");
    let cfg = k3::config::Config::from_file(&dir.join("config.json")).unwrap();
    let d = Dims::from_config(&cfg);
    let index = k3::checkpoint::TensorIndex::open(&dir).unwrap();
    let mut b = bind_resident(&index, &cfg, d.nl, d.kt).unwrap();
    // layer 1's experts are the first bytes of shard 2's data section: cut them off
    let p = dir.join("model-00002-of-00007.safetensors");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(4000)
        .unwrap();
    let ex = Exec::new(k3_kernels::Kernels::new(k3_kernels::Isa::Scalar, 1).unwrap());
    let mut st = state::DecodeState::new(&d, d.nl, 8);
    let r = b.model.forward(
        &ex,
        &mut b.trunk,
        &mut b.experts,
        &mut st,
        &[1, 2, 3],
        LogitRows::Last,
    );
    let e = r.expect_err("a short expert read must fail the forward");
    assert_eq!(e.exit_code(), 4, "{e}");
    assert!(
        e.message.contains("model-00002-of-00007.safetensors") && e.message.contains("offset"),
        "{e}"
    );
}

/// `--layers N` runs on a partial shard set (the later layers' shard absent); without it the
/// census refuses the checkpoint naming the missing tensors.
#[test]
fn layers_prefix_runs_on_a_partial_shard_set() {
    let dir = copy_fixture("tiny-k3", "partial");
    std::fs::remove_file(dir.join("model-00005-of-00007.safetensors")).unwrap(); // layers 10-12
    let o = run_k3([
        dir.to_str().unwrap(),
        "--ids",
        "1,2,3",
        "--gen",
        "2",
        "--layers",
        "10",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim().split(',').count(),
        2
    );
    let (code, err) = fails(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("layers.10.") && err.contains("model-00005-of-00007.safetensors"),
        "{err}"
    );
    let (code, err) = fails(&dir, &["--layers", "11"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("layers.10."), "{err}");
}

/// MODEL.md §5.6: non-finite logits stop the run naming the position; no argmax is taken.
#[test]
fn non_finite_logits_name_the_position() {
    let dir = copy_fixture("tiny-k3", "nonfinite_logits");
    // lm_head [512, 128]: row 7 all +inf
    let row: Vec<u8> = (0..128).flat_map(|_| 0x7f80u16.to_le_bytes()).collect();
    patch_tensor(&dir, "language_model.lm_head.weight", 7 * 128 * 2, &row);
    let (code, err) = fails(&dir, &["--ids", "1,2,3"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("logits at position 2") && err.contains("element 7"),
        "{err}"
    );
    let o = run_k3([dir.to_str().unwrap(), "--ids", "1,2,3", "--gen", "2"]);
    assert!(o.stdout.is_empty(), "no token may be printed");
}

/// ENGINE.md §3: a `--stop-id` outside the vocabulary can never stop the run: refused (exit 2)
/// naming the flag, the value and the vocabulary size, before any work.
#[test]
fn stop_id_outside_the_vocabulary() {
    for id in ["512", "600", "99999999"] {
        let (code, err) = fails(&fixture("tiny-k3"), &["--stop-id", "5", "--stop-id", id]);
        assert_eq!(code, 2, "{id}: {err}");
        assert!(
            err.contains(&format!("flag `--stop-id {id}`"))
                && err.contains("outside the vocabulary")
                && err.contains("vocab_size 512"),
            "{id}: {err}"
        );
    }
    // the last id of the vocabulary is fine
    let o = run_k3([
        fixture("tiny-k3").to_str().unwrap(),
        "--ids",
        "1,2",
        "--gen",
        "1",
        "--stop-id",
        "511",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A tokenizer whose size differs from the config's vocab_size: the message names both the
/// tokenizer directory and the config file.
#[test]
fn tokenizer_of_another_vocabulary_names_both_sides() {
    let tok = fixture("tiny-k3-text");
    let o = run_k3([
        fixture("tiny-k3").to_str().unwrap(),
        "--prompt",
        "hi",
        "--tok",
        tok.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let cfg = fixture("tiny-k3").join("config.json");
    assert!(
        err.contains(cfg.to_str().unwrap())
            && err.contains(tok.to_str().unwrap())
            && err.contains("vocab_size 512")
            && err.contains("163840"),
        "{err}"
    );
}

/// Every figure of a budget refusal is printed with enough digits that the budget and its
/// minimum never read the same and a shortfall never reads as zero (sizes near the limits of
/// tiny-k3-text: the whole-process minimum, the expert cache's top-k slots, the trunk's ring).
#[test]
fn budget_refusals_never_read_as_equal_or_zero() {
    let text = fixture("tiny-k3-text");
    let sizes = |err: &str| -> Vec<String> {
        // "<number> <unit>" figures in the message
        let w: Vec<&str> = err.split_whitespace().collect();
        w.windows(2)
            .filter(|p| {
                ["GB", "MB", "kB", "bytes"].contains(&p[1].trim_end_matches([')', ',', ';', ':']))
                    && p[0].trim_start_matches('(').parse::<f64>().is_ok()
            })
            .map(|p| format!("{} {}", p[0].trim_start_matches('('), p[1]))
            .collect()
    };
    for flags in [
        ["--mem-gb", "0.024"],
        ["--cache-gb", "0.0000245"],
        ["--cache-gb", "0.00002457"],
        ["--trunk-gb", "0.0000286"],
    ] {
        let o = run_k3([
            text.to_str().unwrap(),
            "--ids",
            "1",
            "--gen",
            "1",
            "--quiet",
            flags[0],
            flags[1],
        ]);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(3), "{flags:?}: {err}");
        let short = err
            .split("short by ")
            .nth(1)
            .map(|t| t.split([';', ',', ')']).next().unwrap().to_string());
        if let Some(short) = &short {
            let n: f64 = short.split_whitespace().next().unwrap().parse().unwrap();
            assert!(n > 0.0, "{flags:?}: shortfall reads as zero: {err}");
        }
        let figs = sizes(&err);
        assert!(figs.len() >= 2, "{flags:?}: {figs:?} in {err}");
        // the first two figures are the budget and the minimum it is compared with
        assert_ne!(figs[0], figs[1], "{flags:?}: {err}");
        assert!(
            !err.contains(" 0.0 MB") && !err.contains(" 0.000 GB"),
            "{err}"
        );
    }
    // A positive flag value below one byte is refused as such, not shown as a budget of 0.
    let o = run_k3([text.to_str().unwrap(), "--ids", "1", "--cache-gb", "1e-12"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--cache-gb 1e-12") && err.contains("less than one byte"),
        "{err}"
    );
}

/// FORMATS.md §9.3: a state is never saved after a failed step; an earlier file at the path
/// stays as it was, and no temporary is left.
#[test]
fn a_failed_run_saves_no_state_and_keeps_the_earlier_file() {
    let dir = copy_fixture("tiny-k3", "nonfinite_state");
    let scratch = crate::support::scratch_dir("refusal_state_out");
    let st = scratch.join("s.k3");
    let o = run_k3([
        fixture("tiny-k3").to_str().unwrap(),
        "--ids",
        "1,2",
        "--gen",
        "2",
        "--save-state",
        st.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = std::fs::read(&st).unwrap();
    let name = "language_model.model.layers.2.self_attn.o_proj.weight";
    let row: Vec<u8> = (0..64).flat_map(|_| 0x7f80u16.to_le_bytes()).collect();
    patch_tensor(&dir, name, 5 * 64 * 2, &row);
    let (code, err) = fails(&dir, &["--save-state", st.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        std::fs::read(&st).unwrap(),
        before,
        "the earlier state was replaced"
    );
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "a temporary was left: {left:?}");
}
