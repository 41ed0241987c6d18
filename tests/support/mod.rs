//! Code shared by the integration tests: fixture paths and running the `k3` binary.
//!
//! Include with `mod support;` from a test file. Not every test uses every helper.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Path of `tests/fixtures/<rel>` in this repository (never `../shared`).
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// A `Command` for the `k3` binary built for this test run. If `K3_TEST_RUNNER` is set (for
/// example `qemu-aarch64-static`), the binary runs under it, so the same tests run under
/// emulation. The runner string may carry arguments separated by spaces.
pub fn k3_command(bin: &str) -> Command {
    match std::env::var("K3_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut parts = runner.split_whitespace();
            let mut cmd = Command::new(parts.next().unwrap_or_default());
            cmd.args(parts);
            cmd.arg(bin);
            cmd
        }
        _ => Command::new(bin),
    }
}

/// Runs `k3 <args>` and returns its output (status, stdout, stderr).
pub fn run_k3<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    k3_command(env!("CARGO_BIN_EXE_k3"))
        .args(args)
        .output()
        .expect("failed to start the k3 binary")
}

/// A fresh scratch directory under the target directory, removed and recreated.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}
