//! `cargo xtask bench [options]`: the end-to-end roofline benchmark (ENGINE.md §7). Builds
//! `k3` and the `roofline` harness (bench/src/harness.rs) in release mode, then runs the
//! harness with the options given, recording this command line in the result files under
//! bench/results/. `cargo xtask bench --help` lists the options.
//!
//! `cargo xtask bench batch [options]`: the batch benchmark (issue 12, ENGINE.md §10; the
//! `batch` binary, bench/src/batch.rs) the same way; `cargo xtask bench batch --help`.

use crate::{workspace_root, Failure};
use std::process::Command;

/// Runs the task; the harness's exit code is passed through.
pub fn main(args: &[String]) -> Result<(), Failure> {
    let (bin, args, task) = match args.first().map(String::as_str) {
        Some("batch") => ("batch", &args[1..], "bench batch"),
        _ => ("roofline", args, "bench"),
    };
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "k3",
            "--bin",
            "k3",
            "-p",
            "k3-bench",
            "--bin",
            bin,
        ])
        .status()
        .map_err(|e| Failure::Failed(format!("{cargo}: {e}")))?;
    if !status.success() {
        return Err(Failure::Failed(
            "cargo build --release -p k3 -p k3-bench failed".into(),
        ));
    }
    let release = root.join("target/release");
    let mut cmd = Command::new(release.join(bin));
    cmd.current_dir(&root);
    if !args.iter().any(|a| a == "--k3") {
        cmd.arg("--k3").arg(release.join("k3"));
    }
    if !args.iter().any(|a| a == "--command") {
        let quoted: Vec<String> = args.iter().map(|a| crate::gates::shell_quote(a)).collect();
        let line = format!("cargo xtask {task} {}", quoted.join(" "));
        cmd.arg("--command").arg(line.trim_end());
    }
    cmd.args(args);
    let status = cmd
        .status()
        .map_err(|e| Failure::Failed(format!("{}: {e}", release.join(bin).display())))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(c) => Err(Failure::Exit(u8::try_from(c).unwrap_or(1).max(1))),
        None => Err(Failure::Failed("the harness was killed by a signal".into())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting() {
        assert_eq!(crate::gates::shell_quote("--budgets"), "--budgets");
        assert_eq!(crate::gates::shell_quote("a b"), "'a b'");
        assert_eq!(crate::gates::shell_quote("it's"), "'it'\\''s'");
        assert_eq!(crate::gates::shell_quote(""), "''");
    }
}
