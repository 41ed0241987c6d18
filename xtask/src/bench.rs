//! `cargo xtask bench [options]`: the end-to-end roofline benchmark (ENGINE.md §7). Builds
//! `k3` and the `roofline` harness (bench/src/harness.rs) in release mode, then runs the
//! harness with the options given, recording this command line in the result files under
//! bench/results/. `cargo xtask bench --help` lists the options.

use crate::{workspace_root, Failure};
use std::process::Command;

/// Runs the task; the harness's exit code is passed through.
pub fn main(args: &[String]) -> Result<(), Failure> {
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
            "roofline",
        ])
        .status()
        .map_err(|e| Failure::Failed(format!("{cargo}: {e}")))?;
    if !status.success() {
        return Err(Failure::Failed(
            "cargo build --release -p k3 -p k3-bench failed".into(),
        ));
    }
    let release = root.join("target/release");
    let mut cmd = Command::new(release.join("roofline"));
    cmd.current_dir(&root);
    if !args.iter().any(|a| a == "--k3") {
        cmd.arg("--k3").arg(release.join("k3"));
    }
    if !args.iter().any(|a| a == "--command") {
        let quoted: Vec<String> = args.iter().map(|a| crate::gates::shell_quote(a)).collect();
        let line = format!("cargo xtask bench {}", quoted.join(" "));
        cmd.arg("--command").arg(line.trim_end());
    }
    cmd.args(args);
    let status = cmd
        .status()
        .map_err(|e| Failure::Failed(format!("{}: {e}", release.join("roofline").display())))?;
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
