//! Output files of a run (`--out`, `--dump-logits`, `--dump-cache-trace`; ENGINE.md §3):
//! every output path is checked before any work (exit 2 naming the flag and the path), a full
//! disk while writing is exit 3 naming what was written and the offset, and no partial output
//! is ever left under the final name (nor a temporary beside it).
//!
//! A full disk is simulated without a small file system: outputs are written under
//! `<final>.tmp`, and the test makes that name a symbolic link to `/dev/full`, whose writes fail
//! with ENOSPC (Linux).

use crate::support;
use crate::support::model_ref;

use std::path::{Path, PathBuf};
use support::{copy_dir, fixture, run_k3, scratch_dir};

/// Runs a short generation on tiny-k3 with `extra` flags: (exit code, stdout, stderr).
fn run(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        fixture("tiny-k3").to_str().unwrap().to_string(),
        "--ids".into(),
        "1,2,3".into(),
        "--gen".into(),
        "2".into(),
        "--quiet".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let o = run_k3(&args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tmp_of(p: &Path) -> PathBuf {
    PathBuf::from(format!("{}.tmp", p.display()))
}

/// The files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// True when `/dev/full` exists and fails writes with ENOSPC (Linux); otherwise the caller
/// says why it skipped.
fn dev_full_works() -> bool {
    use std::io::Write;
    match std::fs::OpenOptions::new().write(true).open("/dev/full") {
        Ok(mut f) => {
            matches!(f.write_all(&[0u8; 8]).and_then(|_| f.flush()), Err(e) if e.raw_os_error() == Some(28))
        }
        Err(_) => false,
    }
}

/// Every output flag refuses a directory, a missing directory and a read-only file before
/// any work: exit 2, naming the flag and the path, nothing computed (no ids on stdout) and
/// nothing created.
#[test]
fn bad_output_paths_are_refused_before_the_run() {
    let dir = scratch_dir("out_bad_paths");
    let ro = dir.join("ro.json");
    std::fs::write(&ro, "old").unwrap();
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&ro, perm).unwrap();
    let missing = dir.join("no/such/dir/x");
    for flag in ["--out", "--dump-logits"] {
        for (path, why) in [
            (dir.clone(), "is a directory"),
            (missing.clone(), "does not exist"),
            (ro.clone(), "read-only"),
        ] {
            let (code, out, err) = run(&[flag, s(&path)]);
            assert_eq!(code, 2, "{flag} {}: {err}", path.display());
            assert!(
                err.contains(&format!("flag `{flag} {}`", path.display())) && err.contains(why),
                "{flag} {}: {err}",
                path.display()
            );
            assert!(out.is_empty(), "{flag}: the run went ahead: {out}");
        }
    }
    assert_eq!(std::fs::read_to_string(&ro).unwrap(), "old");
    // A trace directory that is a file.
    let (code, out, err) = run(&["--dump-cache-trace", s(&ro)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--dump-cache-trace") && err.contains(s(&ro)),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    assert_eq!(listing(&dir), vec!["ro.json"]);
}

/// A directory that cannot be written (here /sys, where even root cannot create files) is
/// refused up front for every output flag.
#[test]
fn unwritable_output_directories_are_refused_before_the_run() {
    let sys = Path::new("/sys");
    if !sys.is_dir() || std::fs::File::create(sys.join("k3-probe")).is_ok() {
        eprintln!("SKIPPED: needs a /sys directory that refuses new files (Linux sysfs)");
        return;
    }
    for (flag, path) in [
        ("--out", "/sys/k3-report.json"),
        ("--dump-logits", "/sys/k3-logits.f32"),
        ("--dump-cache-trace", "/sys/k3-trace"),
    ] {
        let (code, out, err) = run(&[flag, path]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(
            err.contains(&format!("flag `{flag} ")) && err.contains(path),
            "{err}"
        );
        assert!(out.is_empty(), "{flag}: the run went ahead: {out}");
    }
}

/// `--out` and `--dump-logits` naming one file would overwrite each other.
#[test]
fn out_and_dump_logits_on_the_same_file_are_refused() {
    let dir = scratch_dir("out_same");
    let p = dir.join("x");
    let (code, _, err) = run(&["--out", s(&p), "--dump-logits", s(&p)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--out") && err.contains("--dump-logits"),
        "{err}"
    );
}

/// A full disk while writing the logits dump or the report: exit 3 naming what was written
/// and the byte offset, and neither the final name nor the temporary is left.
#[test]
fn a_full_disk_is_exit_3_and_leaves_no_partial_output() {
    if !dev_full_works() {
        eprintln!("SKIPPED: /dev/full (writes fail with ENOSPC) is not available on this platform");
        return;
    }
    for (flag, name, what) in [
        ("--dump-logits", "l.f32", "the logits dump"),
        ("--out", "r.json", "the report"),
    ] {
        let dir = scratch_dir(&format!("out_full_{name}"));
        let p = dir.join(name);
        std::os::unix::fs::symlink("/dev/full", tmp_of(&p)).unwrap();
        let (code, _, err) = run(&[flag, s(&p)]);
        assert_eq!(code, 3, "{flag}: {err}");
        assert!(
            err.contains(s(&p))
                && err.contains(what)
                && err.contains("byte offset")
                && err.contains("No space left"),
            "{flag}: {err}"
        );
        assert!(listing(&dir).is_empty(), "{flag}: left {:?}", listing(&dir));
    }
}

/// The same for the two trace files, each in turn.
#[test]
fn a_full_disk_while_writing_the_trace_is_exit_3() {
    if !dev_full_works() {
        eprintln!("SKIPPED: /dev/full (writes fail with ENOSPC) is not available on this platform");
        return;
    }
    for (file, what) in [
        ("expert_trace.bin", "the expert trace"),
        ("expert_hist.json", "the expert histogram"),
    ] {
        let dir = scratch_dir(&format!("out_full_trace_{file}"));
        std::os::unix::fs::symlink("/dev/full", tmp_of(&dir.join(file))).unwrap();
        let (code, _, err) = run(&["--dump-cache-trace", s(&dir)]);
        assert_eq!(code, 3, "{file}: {err}");
        assert!(
            err.contains(file) && err.contains(what) && err.contains("byte offset"),
            "{file}: {err}"
        );
        // The trace is committed before the histogram is written: only a complete trace may
        // remain, never a temporary or a partial file.
        let left = listing(&dir);
        assert!(
            left.is_empty() || left == vec!["expert_trace.bin"],
            "{file}: left {left:?}"
        );
    }
}

/// A successful run leaves exactly the outputs asked for, under their final names, and no
/// temporaries.
#[test]
fn a_successful_run_leaves_no_temporaries() {
    let dir = scratch_dir("out_ok");
    let (l, r, t) = (dir.join("l.f32"), dir.join("r.json"), dir.join("trace"));
    let (code, _, err) = run(&[
        "--dump-logits",
        s(&l),
        "--out",
        s(&r),
        "--dump-cache-trace",
        s(&t),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(listing(&dir), vec!["l.f32", "r.json", "trace"]);
    assert_eq!(listing(&t), vec!["expert_hist.json", "expert_trace.bin"]);
    // every row: 3 prompt positions + 2 - 1 decode steps, of vocab_size 512 f32
    assert_eq!(std::fs::metadata(&l).unwrap().len(), 4 * 512 * 4);
}

/// A run that fails mid-run (an E8M0 scale of 255 in layer 2's experts, exit 2 at the
/// forward) leaves no logits dump or trace under the final names; the report of the failure
/// is written.
#[test]
fn a_failed_run_leaves_no_partial_dump_or_trace() {
    use std::os::unix::fs::FileExt;
    let model = copy_dir(&fixture("tiny-k3"), "out_failed_model");
    let c = model_ref::Ckpt::open(&model);
    for e in 0..8 {
        let name =
            format!("language_model.model.layers.2.block_sparse_moe.experts.{e}.w2.weight_scale");
        let t = &c.tensors[&name];
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&c.shards[t.shard])
            .unwrap();
        f.write_all_at(&[255], t.offset + 7).unwrap();
    }
    let dir = scratch_dir("out_failed");
    let (l, r, t) = (dir.join("l.f32"), dir.join("r.json"), dir.join("trace"));
    let o = run_k3([
        s(&model),
        "--ids",
        "410,335,224,165,463",
        "--gen",
        "3",
        "--quiet",
        "--dump-logits",
        s(&l),
        "--out",
        s(&r),
        "--dump-cache-trace",
        s(&t),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("E8M0 scale 255"), "{err}");
    assert_eq!(listing(&dir), vec!["r.json", "trace"]);
    assert!(listing(&t).is_empty(), "{:?}", listing(&t));
    let report = std::fs::read_to_string(&r).unwrap();
    assert!(report.contains("E8M0 scale 255"), "{report}");
}
