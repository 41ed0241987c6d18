//! A closed standard error or output (`k3 … 2>&1 | head -1`, a terminal that went away) must
//! not abort k3: the report text is dropped, the run finishes and writes its outputs. Before
//! the fix every `eprintln!` panicked on EPIPE and, with `panic = "abort"`, killed the run
//! (exit 134) — mid-pack for `pack-trunk`, and before `--out` was written for a run.

use crate::support;

use std::process::{Command, Stdio};
use support::{fixture, k3, scratch_dir};

/// The write end of a pipe whose read end is already closed: every write to it fails with
/// EPIPE. (The reader is a `true` process that has exited.)
fn closed_pipe() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("start `true`");
    let writer = reader.stdin.take().expect("pipe to `true`");
    reader.wait().expect("wait for `true`");
    Stdio::from(writer)
}

#[test]
fn a_run_with_closed_stderr_finishes_and_writes_its_report() {
    let dir = scratch_dir("closed_stderr_run");
    let out = dir.join("run.json");
    let status = k3()
        .arg(fixture("tiny-k3"))
        .args(["--ids", "1,2,3", "--gen", "3", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .expect("start k3");
    assert_eq!(
        status.code(),
        Some(0),
        "k3 with a closed stderr: {status:?}"
    );
    let json = std::fs::read_to_string(&out).expect("the --out report was written");
    assert!(json.contains("\"generated_ids\""), "{json}");
    assert!(json.contains("\"logits_hash\""), "{json}");
}

#[test]
fn pack_trunk_with_closed_stderr_finishes() {
    let dir = scratch_dir("closed_stderr_pack");
    let status = k3()
        .arg("pack-trunk")
        .arg(fixture("tiny-k3"))
        .arg(dir.join("trunk"))
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .expect("start k3");
    assert_eq!(
        status.code(),
        Some(0),
        "pack-trunk with a closed stderr: {status:?}"
    );
    assert!(dir.join("trunk/trunk.bin").is_file());
    assert!(dir.join("trunk/trunk.json").is_file());
}

#[test]
fn informational_output_to_a_closed_stdout_does_not_abort() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["--list-presets"],
        &["run", "--help"],
    ] {
        let status = k3()
            .args(args)
            .stdout(closed_pipe())
            .stderr(Stdio::null())
            .status()
            .expect("start k3");
        assert_eq!(
            status.code(),
            Some(0),
            "k3 {args:?} with a closed stdout: {status:?}"
        );
    }
}
