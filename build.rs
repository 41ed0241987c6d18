//! Embeds the package version and the git commit into the binary for `k3 --version`.
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let commit = if dirty && commit != "unknown" {
        format!("{commit}-dirty")
    } else {
        commit
    };
    println!("cargo:rustc-env=K3_GIT_COMMIT={commit}");
    // Re-run when HEAD moves or a commit lands. Ask git for the paths: in a worktree `.git`
    // is a file and HEAD lives elsewhere; outside a checkout only build.rs is watched.
    for what in ["HEAD", "index"] {
        if let Some(path) = Command::new("git")
            .args(["rev-parse", "--git-path", what])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
        {
            println!("cargo:rerun-if-changed={}", path.trim());
        }
    }
    // `strip = true` leaves the C library's symbol table in a `+crt-static` release binary
    // (about 285 kB of .symtab/.strtab); the linker's own strip removes it.
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    if release && std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,--strip-all");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
