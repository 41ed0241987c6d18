//! `cargo xtask gates`: the bit-identity gates across ISA paths and thread counts
//! (DEVELOPERS.md, "Gates").
//!
//! For every path this machine can run (scalar and AVX2 natively on x86_64; NEON natively on
//! aarch64, or cross-built for `aarch64-unknown-linux-gnu` and run under qemu-user), it
//!
//! 1. runs the test suite with `K3_ISA=<path>` and `K3_GATE_OUT` set, so the kernels' battery
//!    test (`kernels/tests/gate_battery.rs`) writes `$K3_GATE_OUT/<isa>-t<threads>/<op>.bin`
//!    plus `manifest.tsv` (op, elem_bytes, fnv1a64 hex) for threads 1, 2, 3 and the default;
//! 2. compares every op's output of every (path, threads) run with the native scalar run at
//!    one thread, byte for byte, and fails naming the op, path, threads and first differing
//!    element index;
//! 3. runs `k3` on tests/fixtures/tiny-k3 per path at 1, 2 and 3 threads and requires one
//!    `logits_hash` across all runs (a failed run fails the gates).
//!
//! The xtask installs nothing: a path that cannot run is reported with what is missing and the
//! command that installs it, and fails the gates unless `--skip-missing` is given.

use crate::{workspace_root, Failure};
use k3_kernels::isa::{Isa, ALL_ISAS};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Thread counts of the tiny-k3 logits-hash check (issue 4: "at 1, 2 and 3 threads").
const MODEL_THREADS: [usize; 3] = [1, 2, 3];

/// Thread counts every battery run must contain (the battery also writes the default count).
const BATTERY_THREADS: [usize; 3] = [1, 2, 3];

/// The battery test the gates read outputs from, relative to the workspace root.
const BATTERY_TEST: &str = "kernels/tests/gate_battery.rs";

/// What runs under emulation, kept small for CI's 90 minutes (compiling for aarch64 and running
/// under qemu are both slow): every test of the kernels crate (with the battery), the engine's
/// unit tests, and the tests of the engine's integration crate ([`ENGINE_TEST`]) selected by
/// these libtest name filters (module paths of tests/engine/): the model on tiny-k3
/// (`model::`), the run command (`cli::run::`) and the budget bit-identity matrix (streamed
/// trunk, packed trunk, expert cache, streamed tables; `stream::identity::`) and the session
/// (sampling, batches, state, speculation; `generate::`), which execute
/// the `k3` binary through `K3_TEST_RUNNER`. Parsers, tokenizer and I/O tests do not touch the
/// kernels and run natively only. Each group is one emulated test binary run, so each has its
/// own bound ([`QEMU_TIMEOUT_SECS`]): one run of all of them outlasted a 1,200 s bound on CI's
/// machine.
const EMULATED_K3_TEST_FILTERS: &[&[&str]] = &[
    &["model::", "cli::run::", "stream::identity::"],
    &["generate::"],
];

/// The engine's one integration test crate (`[[test]]` in Cargo.toml, tests/engine/main.rs).
const ENGINE_TEST: &str = "engine";

/// The cross target of the NEON path on a non-aarch64 machine.
const CROSS_TRIPLE: &str = "aarch64-unknown-linux-gnu";
/// Debian's rustc-web: the only rustc here with an aarch64 std (rustup cannot download one).
const CROSS_RUSTC: &str = "/usr/bin/rustc";
const CROSS_RUSTDOC: &str = "/usr/bin/rustdoc";
const CROSS_LINKER: &str = "aarch64-linux-gnu-gcc";
const QEMU: &str = "qemu-aarch64-static";
/// Static glibc for aarch64 (libc6-dev-arm64-cross); static linking is required because a
/// dynamically linked aarch64 binary hangs under qemu-user as soon as it spawns a thread.
const CROSS_LIBC_A: &str = "/usr/aarch64-linux-gnu/lib/libc.a";
/// Separate target dir: Debian's rustc produces artifacts incompatible with rustup's.
const CROSS_TARGET_DIR: &str = "target/aarch64-gates";
/// Default bound, in seconds, on each emulated binary (`K3_QEMU_TIMEOUT` overrides it): a
/// hang's bound, well above the longest group's run.
const QEMU_TIMEOUT_SECS: u64 = 1800;

const USAGE: &str = "\
usage: cargo xtask gates [--paths scalar,avx2,neon] [--skip-missing] [--out DIR] [--root DIR]

Runs the test suite once per ISA path (scalar and AVX2 natively; NEON cross-built for
aarch64-unknown-linux-gnu and run under qemu-aarch64-static on x86_64), then compares every
kernel's battery outputs across paths and thread counts 1, 2, 3 and the default, and the
tiny-k3 logits hash across paths and 1, 2, 3 threads.

  --paths LIST     comma-separated subset of scalar,avx2,neon (default: all three;
                   scalar always runs, it is the reference)
  --skip-missing   a path this machine could run but lacks tools for (NEON without the
                   cross toolchain) is reported and skipped instead of failing
  --out DIR        where battery outputs and model runs go (default: target/gates)
  --root DIR       the workspace to gate (default: this one; used to test the runner)

Environment: K3_QEMU_TIMEOUT (seconds per emulated binary, default 1800).
Install the NEON toolchain with: bash .ci/install-cross.sh (root, apt; DEVELOPERS.md).
";

/// How a path's binaries execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// On this machine's CPU, built by the default toolchain into target/.
    Native,
    /// Cross-built for aarch64 by Debian's rustc and run under qemu-aarch64-static.
    Qemu,
}

/// One path the gates run.
#[derive(Clone, Copy, Debug)]
struct PathPlan {
    isa: Isa,
    runner: Runner,
}

impl PathPlan {
    /// Names the run in messages and directories: `scalar`, `avx2`, `neon` or `neon-qemu`.
    fn label(&self) -> String {
        match self.runner {
            Runner::Native => self.isa.name().to_string(),
            Runner::Qemu => format!("{}-qemu", self.isa.name()),
        }
    }
}

/// What the probe found for one requested path.
enum Probe {
    Run(PathPlan),
    /// This machine's architecture can never run the path (AVX2 on aarch64, or an x86 CPU
    /// without AVX2): reported, never a failure.
    NotApplicable(String),
    /// The path could run here but tools are missing: the items and how to install them.
    Missing(Vec<String>),
}

struct Options {
    paths: Vec<Isa>,
    skip_missing: bool,
    out: PathBuf,
    root: PathBuf,
}

fn parse_args(args: &[String]) -> Result<Option<Options>, Failure> {
    let root_default = workspace_root();
    let mut paths: Vec<Isa> = ALL_ISAS.to_vec();
    let mut skip_missing = false;
    let mut out: Option<PathBuf> = None;
    let mut root = root_default;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<String, Failure> {
            it.next()
                .cloned()
                .ok_or_else(|| Failure::Usage(format!("{flag}: expected a value\n{USAGE}")))
        };
        match a.as_str() {
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(None);
            }
            "--skip-missing" => skip_missing = true,
            "--paths" => {
                let v = value("--paths")?;
                let mut set = BTreeSet::new();
                for p in v.split(',').filter(|p| !p.is_empty()) {
                    let isa = Isa::parse(p).ok_or_else(|| {
                        Failure::Usage(format!(
                            "--paths: unknown path `{p}`, expected scalar, avx2 or neon"
                        ))
                    })?;
                    set.insert(isa);
                }
                // Scalar is the reference every other path is compared with.
                set.insert(Isa::Scalar);
                paths = set.into_iter().collect();
            }
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--root" => root = PathBuf::from(value("--root")?),
            other => {
                return Err(Failure::Usage(format!(
                    "unknown argument `{other}`\n{USAGE}"
                )))
            }
        }
    }
    let out = out.unwrap_or_else(|| root.join("target/gates"));
    Ok(Some(Options {
        paths,
        skip_missing,
        out,
        root,
    }))
}

/// Entry point of `cargo xtask gates`.
pub fn main(args: &[String]) -> Result<(), Failure> {
    let Some(opts) = parse_args(args)? else {
        return Ok(());
    };
    let started = Instant::now();
    let mut timings: Vec<(String, Duration)> = Vec::new();

    // 1. Which paths run here, and what is missing for the others.
    let mut plans = Vec::new();
    let mut missing_report = String::new();
    for isa in &opts.paths {
        match probe(*isa) {
            Probe::Run(plan) => plans.push(plan),
            Probe::NotApplicable(why) => println!("gates: {}: not applicable: {why}", isa.name()),
            Probe::Missing(items) => {
                let _ = writeln!(
                    missing_report,
                    "{}: cannot run on this machine; missing:",
                    isa.name()
                );
                for item in &items {
                    let _ = writeln!(missing_report, "  - {item}");
                }
                let _ = writeln!(
                    missing_report,
                    "  install them with: bash .ci/install-cross.sh   (as root; uses apt; \
                     see DEVELOPERS.md, \"NEON under qemu\")"
                );
            }
        }
    }
    let mut skipped: Vec<&str> = Vec::new();
    if !missing_report.is_empty() {
        if opts.skip_missing {
            skipped = opts
                .paths
                .iter()
                .filter(|i| !plans.iter().any(|p| p.isa == **i))
                .map(|i| i.name())
                .collect();
            print!("gates: SKIPPED (--skip-missing):\n{missing_report}");
        } else {
            return Err(Failure::Failed(format!(
                "a path cannot run (pass --skip-missing to skip it):\n{missing_report}"
            )));
        }
    }
    println!(
        "gates: paths: {}",
        plans
            .iter()
            .map(PathPlan::label)
            .collect::<Vec<_>>()
            .join(", ")
    );

    let battery = opts.root.join(BATTERY_TEST);
    if !battery.is_file() {
        return Err(Failure::Failed(format!(
            "{}: the kernels' gate battery test does not exist, so there is nothing to compare",
            battery.display()
        )));
    }

    if opts.out.exists() {
        std::fs::remove_dir_all(&opts.out)
            .map_err(|e| Failure::Failed(format!("{}: cannot clear: {e}", opts.out.display())))?;
    }

    // 2. The test suite per path, each writing its battery outputs to its own directory.
    let mut failures: Vec<String> = Vec::new();
    for plan in &plans {
        let gate_out = opts.out.join("battery").join(plan.label());
        mkdir(&gate_out)?;
        for (what, mut cmd) in suite_commands(&opts.root, plan) {
            cmd.env("K3_ISA", plan.isa.name())
                .env("K3_GATE_OUT", &gate_out);
            let step = format!("tests [{}] {what}", plan.label());
            let t = Instant::now();
            let ok = run_step(&step, &mut cmd);
            timings.push((step.clone(), t.elapsed()));
            if !ok {
                failures.push(format!("{step}: the test suite failed (output above)"));
            }
        }
    }

    // 3. Battery outputs across paths and thread counts.
    let t = Instant::now();
    let runs: Vec<(PathPlan, PathBuf)> = plans
        .iter()
        .map(|p| (*p, opts.out.join("battery").join(p.label())))
        .collect();
    match compare_battery(&runs) {
        Ok(summary) => println!("gates: battery: {summary}"),
        Err(problems) => {
            for p in &problems {
                eprintln!("gates: battery: {p}");
            }
            failures.push(format!(
                "battery outputs differ or are incomplete ({} problem(s); first: {})",
                problems.len(),
                problems[0]
            ));
        }
    }
    timings.push(("battery compare".into(), t.elapsed()));

    // 4. The model-level check on tiny-k3.
    let t = Instant::now();
    match model_check(&opts, &plans) {
        Ok(summary) => println!("gates: model: {summary}"),
        Err(e) => {
            eprintln!("gates: model: {e}");
            failures.push(format!("model: {e}"));
        }
    }
    timings.push(("model check".into(), t.elapsed()));

    println!("gates: timings:");
    for (step, d) in &timings {
        println!("  {step:<60} {:>8.1} s", d.as_secs_f64());
    }
    println!(
        "  {:<60} {:>8.1} s",
        "total",
        started.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        println!(
            "gates: PASSED on {}{}",
            plans
                .iter()
                .map(PathPlan::label)
                .collect::<Vec<_>>()
                .join(", "),
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" (SKIPPED, tools missing: {})", skipped.join(", "))
            }
        );
        Ok(())
    } else {
        Err(Failure::Failed(format!(
            "\n  - {}",
            failures.join("\n  - ")
        )))
    }
}

fn mkdir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::Failed(format!("{}: cannot create: {e}", dir.display())))
}

/// Runs `cmd`, echoing it; returns whether it exited 0.
fn run_step(step: &str, cmd: &mut Command) -> bool {
    println!("gates: ==> {step}: {}", describe(cmd));
    match cmd.status() {
        Ok(s) if s.success() => true,
        Ok(s) => {
            eprintln!("gates: {step}: exited with {s}");
            false
        }
        Err(e) => {
            eprintln!("gates: {step}: cannot start {:?}: {e}", cmd.get_program());
            false
        }
    }
}

/// The command line with the environment the gates set, for logs and for re-running by hand.
fn describe(cmd: &Command) -> String {
    let mut s = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            let _ = write!(
                s,
                "{}={} ",
                k.to_string_lossy(),
                shell_quote(&v.to_string_lossy())
            );
        }
    }
    s.push_str(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&shell_quote(&a.to_string_lossy()));
    }
    s
}

pub(crate) fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn probe(isa: Isa) -> Probe {
    let host_arch = std::env::consts::ARCH;
    match isa {
        Isa::Scalar => Probe::Run(PathPlan {
            isa,
            runner: Runner::Native,
        }),
        Isa::Avx2 => {
            if host_arch != "x86_64" {
                return Probe::NotApplicable(format!("this machine is {host_arch}"));
            }
            if !host_has_avx2() {
                return Probe::NotApplicable("this x86_64 CPU has no AVX2".into());
            }
            Probe::Run(PathPlan {
                isa,
                runner: Runner::Native,
            })
        }
        Isa::Neon => {
            if host_arch == "aarch64" {
                return Probe::Run(PathPlan {
                    isa,
                    runner: Runner::Native,
                });
            }
            let missing = cross_missing();
            if missing.is_empty() {
                Probe::Run(PathPlan {
                    isa,
                    runner: Runner::Qemu,
                })
            } else {
                Probe::Missing(missing)
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn host_has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(not(target_arch = "x86_64"))]
fn host_has_avx2() -> bool {
    false
}

/// What the NEON-under-qemu path lacks on this machine, each with its Debian package.
fn cross_missing() -> Vec<String> {
    let mut missing = Vec::new();
    if !Path::new(CROSS_RUSTC).is_file() {
        missing.push(format!(
            "{CROSS_RUSTC} (Debian package rustc-web: a rustc with an aarch64 std)"
        ));
    } else {
        let std_dir = cross_std_dir();
        if !std_dir.as_ref().is_some_and(|d| d.is_dir()) {
            missing.push(format!(
                "the aarch64 std for {CROSS_RUSTC}, {} (Debian package libstd-rust-web-dev:arm64, \
                 after dpkg --add-architecture arm64)",
                std_dir
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|| "<sysroot>/lib/rustlib/aarch64-unknown-linux-gnu/lib".into())
            ));
        }
    }
    if !Path::new(CROSS_RUSTDOC).is_file() {
        missing.push(format!("{CROSS_RUSTDOC} (Debian package rustc-web)"));
    }
    if which(CROSS_LINKER).is_none() {
        missing.push(format!(
            "{CROSS_LINKER} on PATH (Debian package gcc-aarch64-linux-gnu)"
        ));
    }
    if !Path::new(CROSS_LIBC_A).is_file() {
        missing.push(format!(
            "{CROSS_LIBC_A}, the static aarch64 glibc (Debian package libc6-dev-arm64-cross)"
        ));
    }
    if which(QEMU).is_none() {
        missing.push(format!("{QEMU} on PATH (Debian package qemu-user-static)"));
    }
    if which("timeout").is_none() {
        missing.push("timeout on PATH (Debian package coreutils)".into());
    }
    missing
}

/// `<sysroot of Debian's rustc>/lib/rustlib/aarch64-unknown-linux-gnu/lib`.
fn cross_std_dir() -> Option<PathBuf> {
    let out = Command::new(CROSS_RUSTC)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let sysroot = String::from_utf8(out.stdout).ok()?;
    Some(
        Path::new(sysroot.trim())
            .join("lib/rustlib")
            .join(CROSS_TRIPLE)
            .join("lib"),
    )
}

fn qemu_timeout_secs() -> u64 {
    std::env::var("K3_QEMU_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(QEMU_TIMEOUT_SECS)
}

/// `cargo <sub>` for a path's toolchain: the plain cargo natively; for qemu, the cross env of
/// DEVELOPERS.md ("NEON under qemu"; .ci/cargo-neon is the same recipe for humans).
fn cargo_command(root: &Path, runner: Runner, sub: &str) -> Command {
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root).arg(sub);
    // Defaults only: the gates choose ISA, threads and runner themselves.
    cmd.env_remove("K3_ISA")
        .env_remove("K3_THREADS")
        .env_remove("K3_TEST_RUNNER")
        .env_remove("K3_GATE_OUT");
    if runner == Runner::Qemu {
        // RUSTFLAGS would override the per-target flags below and drop +crt-static.
        cmd.env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            // No debuginfo: it dominates compile and link time of the aarch64 test binaries.
            .env("CARGO_PROFILE_TEST_DEBUG", "false")
            .env("CARGO_PROFILE_DEV_DEBUG", "false")
            .env("RUSTC", CROSS_RUSTC)
            .env("RUSTDOC", CROSS_RUSTDOC)
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                CROSS_LINKER,
            )
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
                "-C target-feature=+crt-static",
            )
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
                format!("timeout --kill-after=10 {} {QEMU}", qemu_timeout_secs()),
            )
            .args(["--target", CROSS_TRIPLE, "--target-dir"])
            .arg(root.join(CROSS_TARGET_DIR));
    }
    cmd
}

/// The test suite of one path, as cargo commands: the whole workspace natively; under qemu the
/// kernels crate, the engine's unit tests and, in a command of their own (the name filters
/// would also filter the unit tests), its integration tests selected by
/// [`EMULATED_K3_TEST_FILTERS`], where tests that execute the `k3` binary run it through qemu
/// too (`K3_TEST_RUNNER`).
fn suite_commands(root: &Path, plan: &PathPlan) -> Vec<(String, Command)> {
    let mut cmds = Vec::new();
    match plan.runner {
        Runner::Native => {
            let mut cmd = cargo_command(root, plan.runner, "test");
            cmd.args(["--workspace", "--no-fail-fast"]);
            cmds.push(("workspace".to_string(), cmd));
        }
        Runner::Qemu => {
            let mut kernels = cargo_command(root, plan.runner, "test");
            kernels.args(["-p", "k3-kernels", "--no-fail-fast"]);
            cmds.push(("k3-kernels".to_string(), kernels));
            let mut lib = cargo_command(root, plan.runner, "test");
            lib.args(["-p", "k3", "--no-fail-fast", "--lib"]);
            cmds.push(("k3: lib".to_string(), lib));
            for filters in EMULATED_K3_TEST_FILTERS {
                let mut engine = cargo_command(root, plan.runner, "test");
                engine.args(["-p", "k3", "--no-fail-fast", "--test", ENGINE_TEST, "--"]);
                engine.args(*filters);
                cmds.push((format!("k3: {ENGINE_TEST} {}", filters.join(" ")), engine));
            }
            for (_, cmd) in &mut cmds {
                // Bounded too: a hung child would outlive its killed test binary.
                cmd.env(
                    "K3_TEST_RUNNER",
                    format!("timeout --kill-after=10 {} {QEMU}", qemu_timeout_secs()),
                );
            }
        }
    }
    cmds
}

// ---------------------------------------------------------------------------------------------
// Battery comparison

/// One op's output of one battery run, from `manifest.tsv` and `<op>.bin`.
#[derive(Debug)]
struct OpOutput {
    elem_bytes: usize,
    hash: u64,
    file: PathBuf,
}

/// One `<isa>-t<threads>` directory.
#[derive(Debug)]
struct BatteryRun {
    /// `<label> t<threads>` for messages, e.g. `neon-qemu t3`.
    name: String,
    ops: BTreeMap<String, OpOutput>,
}

/// FNV-1a 64 over bytes (the manifest's hash).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Reads `dir/manifest.tsv` (columns op, elem_bytes, fnv1a64 hex; an optional header row
/// starting with `op`) and checks each `<op>.bin` exists and matches its hash.
fn read_manifest(dir: &Path) -> Result<BTreeMap<String, OpOutput>, Vec<String>> {
    let path = dir.join("manifest.tsv");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
    let mut ops = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if i == 0 && f.first() == Some(&"op") {
            continue;
        }
        let at = format!("{}:{}", path.display(), i + 1);
        if f.len() != 3 {
            problems.push(format!(
                "{at}: expected 3 tab-separated columns (op, elem_bytes, fnv1a64), found {}",
                f.len()
            ));
            continue;
        }
        let op = f[0].to_string();
        let Ok(elem_bytes) = f[1].parse::<usize>() else {
            problems.push(format!(
                "{at}: op {op}: elem_bytes `{}` is not an integer",
                f[1]
            ));
            continue;
        };
        if elem_bytes == 0 {
            problems.push(format!("{at}: op {op}: elem_bytes is 0"));
            continue;
        }
        let hex = f[2].trim_start_matches("0x");
        let Ok(hash) = u64::from_str_radix(hex, 16) else {
            problems.push(format!("{at}: op {op}: fnv1a64 `{}` is not hex", f[2]));
            continue;
        };
        let file = dir.join(format!("{op}.bin"));
        match std::fs::read(&file) {
            Err(e) => problems.push(format!("{}: cannot read: {e}", file.display())),
            Ok(bytes) => {
                if bytes.len() % elem_bytes != 0 {
                    problems.push(format!(
                        "{}: {} bytes is not a whole number of {elem_bytes}-byte elements",
                        file.display(),
                        bytes.len()
                    ));
                }
                let actual = fnv1a64(&bytes);
                if actual != hash {
                    problems.push(format!(
                        "{at}: op {op}: manifest says fnv1a64 {hash:016x}, {} hashes to {actual:016x}",
                        file.display()
                    ));
                }
            }
        }
        if ops.contains_key(&op) {
            problems.push(format!("{at}: op {op} listed twice"));
            continue;
        }
        ops.insert(
            op,
            OpOutput {
                elem_bytes,
                hash,
                file,
            },
        );
    }
    if ops.is_empty() && problems.is_empty() {
        problems.push(format!("{}: lists no ops", path.display()));
    }
    if problems.is_empty() {
        Ok(ops)
    } else {
        Err(problems)
    }
}

/// Reads every `<isa>-t<threads>` directory a path's battery wrote.
fn read_path_runs(plan: &PathPlan, dir: &Path) -> Result<Vec<BatteryRun>, Vec<String>> {
    let label = plan.label();
    let entries = std::fs::read_dir(dir).map_err(|e| {
        vec![format!(
            "{label}: {}: cannot list battery outputs: {e}",
            dir.display()
        )]
    })?;
    let prefix = format!("{}-t", plan.isa.name());
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut present = BTreeSet::new();
    for name in names {
        let Some(threads) = name.strip_prefix(&prefix) else {
            // The battery ran under another ISA than the one forced: K3_ISA was not honoured.
            problems.push(format!(
                "{label}: {}: expected only {prefix}<threads> directories (K3_ISA={}), found `{name}`",
                dir.display(),
                plan.isa.name()
            ));
            continue;
        };
        present.insert(threads.to_string());
        match read_manifest(&dir.join(&name)) {
            Ok(ops) => runs.push(BatteryRun {
                name: format!("{label} t{threads}"),
                ops,
            }),
            Err(p) => problems.extend(p),
        }
    }
    for t in BATTERY_THREADS {
        if !present.contains(&t.to_string()) {
            problems.push(format!(
                "{label}: no battery output for {t} thread(s): expected {}/{prefix}{t}/manifest.tsv \
                 (did {BATTERY_TEST} run with K3_GATE_OUT set?)",
                dir.display()
            ));
        }
    }
    if problems.is_empty() {
        Ok(runs)
    } else {
        Err(problems)
    }
}

/// Describes element `i` of a little-endian buffer for a mismatch message.
fn show_elem(bytes: &[u8], elem_bytes: usize, i: usize) -> String {
    let Some(e) = bytes.get(i * elem_bytes..(i + 1) * elem_bytes) else {
        return "(absent)".into();
    };
    match elem_bytes {
        4 => {
            let b = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            format!("0x{b:08x} ({:e})", f32::from_bits(b))
        }
        8 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(e);
            let b = u64::from_le_bytes(a);
            format!("0x{b:016x} ({:e})", f64::from_bits(b))
        }
        2 => format!("0x{:04x}", u16::from_le_bytes([e[0], e[1]])),
        _ => e.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// Compares one op of `run` with the reference; `None` when bitwise equal.
fn compare_op(op: &str, reference: (&str, &OpOutput), run: (&str, &OpOutput)) -> Option<String> {
    let (ref_name, r) = reference;
    let (run_name, o) = run;
    if r.elem_bytes != o.elem_bytes {
        return Some(format!(
            "op {op}: path {run_name}: elem_bytes {} but {ref_name} has {}",
            o.elem_bytes, r.elem_bytes
        ));
    }
    if r.hash == o.hash {
        // Both files were checked against their hashes when read.
        return None;
    }
    let (a, b) = match (std::fs::read(&r.file), std::fs::read(&o.file)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) => return Some(format!("{}: cannot read: {e}", r.file.display())),
        (_, Err(e)) => return Some(format!("{}: cannot read: {e}", o.file.display())),
    };
    let eb = r.elem_bytes;
    let (na, nb) = (a.len() / eb, b.len() / eb);
    let first = a
        .chunks(eb)
        .zip(b.chunks(eb))
        .position(|(x, y)| x != y)
        .unwrap_or(na.min(nb));
    let length = if na == nb {
        format!("{na} elements")
    } else {
        format!("{nb} elements vs {na} in {ref_name}")
    };
    Some(format!(
        "op {op}: path {run_name}: first differing element index {first} (of {length}): {} vs {ref_name} {}",
        show_elem(&b, eb, first),
        show_elem(&a, eb, first)
    ))
}

/// Compares every run of every path with the native scalar run at one thread.
fn compare_battery(paths: &[(PathPlan, PathBuf)]) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    let mut runs: Vec<BatteryRun> = Vec::new();
    for (plan, dir) in paths {
        match read_path_runs(plan, dir) {
            Ok(r) => runs.extend(r),
            Err(p) => problems.extend(p),
        }
    }
    let reference_name = "scalar t1";
    let Some(reference) = runs.iter().find(|r| r.name == reference_name) else {
        // A missing or unreadable scalar t1 is already among the problems.
        if problems.is_empty() {
            problems.push(format!(
                "no reference run ({reference_name}): nothing to compare against"
            ));
        }
        return Err(problems);
    };
    let mut compared = 0usize;
    for run in runs.iter().filter(|r| r.name != reference_name) {
        for op in reference.ops.keys() {
            if !run.ops.contains_key(op) {
                problems.push(format!("op {op}: path {}: missing output", run.name));
            }
        }
        for (op, o) in &run.ops {
            let Some(r) = reference.ops.get(op) else {
                problems.push(format!(
                    "op {op}: path {}: output not produced by {reference_name}",
                    run.name
                ));
                continue;
            };
            compared += 1;
            if let Some(p) = compare_op(op, (reference_name, r), (&run.name, o)) {
                problems.push(p);
            }
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "{} ops identical across {} runs ({}); {compared} comparisons against {reference_name}",
            reference.ops.len(),
            runs.len(),
            runs.iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        Err(problems)
    }
}

// ---------------------------------------------------------------------------------------------
// Model-level check

/// Builds `k3` for a runner (test profile: the binary the test suite already built) and
/// returns the executable's path.
fn build_k3(root: &Path, runner: Runner) -> Result<PathBuf, String> {
    let mut cmd = cargo_command(root, runner, "build");
    cmd.args([
        "--profile",
        "test",
        "-p",
        "k3",
        "--bin",
        "k3",
        "--message-format=json-render-diagnostics",
    ]);
    let shown = describe(&cmd);
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{shown}: cannot start: {e}"))?;
    if !out.status.success() {
        return Err(format!("{shown}: exited with {}", out.status));
    }
    let mut exe = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] == "compiler-artifact" && v["target"]["name"] == "k3" {
            if let Some(p) = v["executable"].as_str() {
                exe = Some(PathBuf::from(p));
            }
        }
    }
    exe.ok_or_else(|| format!("{shown}: reported no k3 executable"))
}

/// The prompt and step count of the tiny-k3 fixture's expected.json.
fn tiny_prompt(fixture: &Path) -> Result<(String, u64), String> {
    let path = fixture.join("expected.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let ids = v["prompt_ids"]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("{}: prompt_ids: expected a non-empty array", path.display()))?;
    let ids: Vec<String> = ids
        .iter()
        .map(|x| {
            x.as_u64()
                .map(|n| n.to_string())
                .ok_or_else(|| format!("{}: prompt_ids: expected integers", path.display()))
        })
        .collect::<Result<_, _>>()?;
    let gen = v["n_generate"]
        .as_u64()
        .ok_or_else(|| format!("{}: n_generate: expected an integer", path.display()))?;
    Ok((ids.join(","), gen))
}

/// One tiny-k3 run with `args` (the prompt and generation flags): `(logits_hash,
/// generated_ids)` from its `--out` JSON; a `--batch` run gives its standard output (one
/// line per input, each with `logits_hash` and `generated_ids`) as the first.
fn run_tiny(
    exe: &Path,
    runner: Runner,
    fixture: &Path,
    args: &[String],
    isa: Isa,
    threads: usize,
    out_json: &Path,
) -> Result<(serde_json::Value, serde_json::Value), String> {
    let mut cmd = match runner {
        Runner::Native => Command::new(exe),
        Runner::Qemu => {
            let mut c = Command::new("timeout");
            c.args(["--kill-after=10", &qemu_timeout_secs().to_string(), QEMU])
                .arg(exe);
            c
        }
    };
    let batch = args.iter().any(|a| a == "--batch");
    cmd.arg(fixture)
        .args(args)
        .args([
            "--isa",
            isa.name(),
            "--threads",
            &threads.to_string(),
            "--out",
        ])
        .arg(out_json)
        .env_remove("K3_ISA")
        .env_remove("K3_THREADS");
    let shown = describe(&cmd);
    let out = cmd
        .output()
        .map_err(|e| format!("{shown}: cannot start: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("{shown}: exited with {}: {first}", out.status));
    }
    if batch {
        let lines = String::from_utf8_lossy(&out.stdout).to_string();
        return Ok((serde_json::Value::String(lines), serde_json::Value::Null));
    }
    let text = std::fs::read_to_string(out_json)
        .map_err(|e| format!("{shown}: {}: cannot read: {e}", out_json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not JSON: {e}", out_json.display()))?;
    let hash = v.get("logits_hash").cloned().ok_or_else(|| {
        format!(
            "{}: has no logits_hash (FORMATS.md §10)",
            out_json.display()
        )
    })?;
    let ids = v
        .get("generated_ids")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    Ok((hash, ids))
}

/// Runs tiny-k3 on every path at [`MODEL_THREADS`] — greedy, sampled (issue 12) and a
/// `--batch` of three sequences with `--parallel 3` — and requires, per kind, one logits hash
/// (and one generated sequence; for the batch one output) across all runs.
fn model_check(opts: &Options, plans: &[PathPlan]) -> Result<String, String> {
    let fixture = opts.root.join("tests/fixtures/tiny-k3");
    let prompt = tiny_prompt(&fixture)?;
    let dir = opts.out.join("model");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let batch_file = dir.join("batch.jsonl");
    let first: Vec<&str> = prompt.0.split(',').take(5).collect();
    std::fs::write(
        &batch_file,
        format!(
            "{{\"ids\": [{}], \"gen\": {}}}\n{{\"ids\": [{}], \"gen\": 6, \"temperature\": 0.8, \"seed\": 3}}\n{{\"ids\": [7], \"gen\": 9, \"temperature\": 1.1, \"top_k\": 50, \"seed\": 11}}\n",
            prompt.0,
            prompt.1,
            first.join(",")
        ),
    )
    .map_err(|e| format!("{}: cannot write: {e}", batch_file.display()))?;
    let greedy: Vec<String> = ["--ids", &prompt.0, "--gen", &prompt.1.to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut sampled = greedy.clone();
    sampled.extend(
        [
            "--temperature",
            "0.8",
            "--top-p",
            "0.9",
            "--min-p",
            "0.01",
            "--seed",
            "7",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let batch = vec![
        "--batch".to_string(),
        batch_file.display().to_string(),
        "--parallel".to_string(),
        "3".to_string(),
    ];
    let mut summaries = Vec::new();
    for (kind, args) in [("greedy", greedy), ("sampled", sampled), ("batch", batch)] {
        let s = model_kind(opts, plans, &fixture, &dir, kind, &args)?;
        summaries.push(format!("{kind}: {s}"));
    }
    // Structured output (issue 25): a sampled run under a JSON schema on the text model
    // (the mask walks its tokenizer's vocabulary), so constrained ids are compared too.
    let text = opts.root.join("tests/fixtures/tiny-k3-text");
    let schema = dir.join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "additionalProperties": false, "required": ["n", "tags", "s"],
 "properties": {"n": {"type": "integer", "minimum": -3, "maximum": 250},
  "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
  "s": {"type": "string", "maxLength": 6}}}"#,
    )
    .map_err(|e| format!("{}: cannot write: {e}", schema.display()))?;
    let constrained: Vec<String> = [
        "--prompt",
        "JSON:",
        "--gen",
        "60",
        "--temperature",
        "0.8",
        "--seed",
        "7",
        "--json-schema",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([schema.display().to_string()])
    .collect();
    let s = model_kind(opts, plans, &text, &dir, "constrained", &constrained)?;
    summaries.push(format!("constrained: {s}"));
    Ok(summaries.join("; "))
}

/// The model check of one kind of run (`args`) on every path and thread count.
fn model_kind(
    opts: &Options,
    plans: &[PathPlan],
    fixture: &Path,
    dir: &Path,
    kind: &str,
    args: &[String],
) -> Result<String, String> {
    let mut exes: Vec<(Runner, PathBuf)> = Vec::new();
    let mut results: Vec<(String, serde_json::Value, serde_json::Value)> = Vec::new();
    for plan in plans {
        let exe = match exes.iter().find(|(r, _)| *r == plan.runner) {
            Some((_, e)) => e.clone(),
            None => {
                let e = build_k3(&opts.root, plan.runner)?;
                exes.push((plan.runner, e.clone()));
                e
            }
        };
        for t in MODEL_THREADS {
            let name = format!("{kind} {} t{t}", plan.label());
            let out_json = dir.join(format!("{kind}-{}-t{t}.json", plan.label()));
            println!("gates: model: {name}");
            match run_tiny(&exe, plan.runner, fixture, args, plan.isa, t, &out_json) {
                Ok((hash, ids)) => results.push((name, hash, ids)),
                Err(e) => return Err(format!("{name}: {e}")),
            }
        }
    }
    let (ref_name, ref_hash, ref_ids) = &results[0];
    let mut diffs = Vec::new();
    for (name, hash, ids) in &results[1..] {
        if hash != ref_hash {
            diffs.push(format!(
                "logits_hash differs: {name}: {hash} vs {ref_name}: {ref_hash}"
            ));
        }
        if ids != ref_ids {
            diffs.push(format!(
                "generated_ids differ: {name}: {ids} vs {ref_name}: {ref_ids}"
            ));
        }
    }
    if diffs.is_empty() {
        Ok(format!(
            "logits_hash {ref_hash} identical across {} runs ({})",
            results.len(),
            results
                .iter()
                .map(|r| r.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        Err(diffs.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "xtask-gates-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Writes a stand-in battery run `<dir>/<isa>-t<threads>/` the way the contract says.
    fn write_run(dir: &Path, isa: &str, threads: usize, ops: &[(&str, usize, Vec<u8>)]) {
        let d = dir.join(format!("{isa}-t{threads}"));
        std::fs::create_dir_all(&d).unwrap();
        let mut manifest = String::new();
        for (op, eb, bytes) in ops {
            std::fs::write(d.join(format!("{op}.bin")), bytes).unwrap();
            manifest.push_str(&format!("{op}\t{eb}\t{:016x}\n", fnv1a64(bytes)));
        }
        std::fs::write(d.join("manifest.tsv"), manifest).unwrap();
    }

    fn plan(isa: Isa, runner: Runner) -> PathPlan {
        PathPlan { isa, runner }
    }

    fn battery(dir: &Path, isa: &str, ops: &[(&str, usize, Vec<u8>)]) {
        for t in [1, 2, 3] {
            write_run(dir, isa, t, ops);
        }
    }

    fn good_ops() -> Vec<(&'static str, usize, Vec<u8>)> {
        vec![
            ("dot", 8, 1.5f64.to_le_bytes().to_vec()),
            ("rmsnorm", 4, f32s(&[1.0, -0.0, f32::from_bits(1), 3.0e38])),
        ]
    }

    #[test]
    fn fnv1a64_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn identical_paths_pass() {
        let tmp = TempDir::new();
        let (s, a, n) = (tmp.0.join("scalar"), tmp.0.join("avx2"), tmp.0.join("neon"));
        battery(&s, "scalar", &good_ops());
        battery(&a, "avx2", &good_ops());
        battery(&n, "neon", &good_ops());
        let summary = compare_battery(&[
            (plan(Isa::Scalar, Runner::Native), s),
            (plan(Isa::Avx2, Runner::Native), a),
            (plan(Isa::Neon, Runner::Qemu), n),
        ])
        .unwrap();
        assert!(
            summary.starts_with("2 ops identical across 9 runs"),
            "{summary}"
        );
    }

    #[test]
    fn a_differing_element_names_op_path_threads_and_index() {
        let tmp = TempDir::new();
        let (s, n) = (tmp.0.join("scalar"), tmp.0.join("neon"));
        battery(&s, "scalar", &good_ops());
        battery(&n, "neon", &good_ops());
        // Threads 3 on NEON flips the last bit of element 2 (a denormal).
        let mut bad = good_ops();
        bad[1].2 = f32s(&[1.0, -0.0, f32::from_bits(2), 3.0e38]);
        write_run(&n, "neon", 3, &bad);
        let problems = compare_battery(&[
            (plan(Isa::Scalar, Runner::Native), s),
            (plan(Isa::Neon, Runner::Qemu), n),
        ])
        .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert!(p.starts_with("op rmsnorm: path neon-qemu t3: first differing element index 2 (of 4 elements): 0x00000002"), "{p}");
        assert!(p.contains("vs scalar t1 0x00000001"), "{p}");
    }

    #[test]
    fn different_lengths_and_missing_ops_are_reported() {
        let tmp = TempDir::new();
        let (s, a) = (tmp.0.join("scalar"), tmp.0.join("avx2"));
        battery(&s, "scalar", &good_ops());
        battery(&a, "avx2", &good_ops());
        write_run(
            &a,
            "avx2",
            2,
            &[("rmsnorm", 4, f32s(&[1.0, -0.0, f32::from_bits(1)]))],
        );
        let problems = compare_battery(&[
            (plan(Isa::Scalar, Runner::Native), s),
            (plan(Isa::Avx2, Runner::Native), a),
        ])
        .unwrap_err();
        assert!(
            problems.contains(&"op dot: path avx2 t2: missing output".to_string()),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with(
                "op rmsnorm: path avx2 t2: first differing element index 3 (of 3 elements vs 4 in scalar t1)"
            )),
            "{problems:?}"
        );
    }

    #[test]
    fn a_manifest_that_disagrees_with_its_file_is_refused() {
        let tmp = TempDir::new();
        let s = tmp.0.join("scalar");
        battery(&s, "scalar", &good_ops());
        std::fs::write(s.join("scalar-t2/dot.bin"), 2.5f64.to_le_bytes()).unwrap();
        let problems = compare_battery(&[(plan(Isa::Scalar, Runner::Native), s)]).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("scalar-t2/manifest.tsv:1: op dot: manifest says fnv1a64"),
            "{problems:?}"
        );
    }

    #[test]
    fn missing_thread_counts_and_wrong_isa_are_reported() {
        let tmp = TempDir::new();
        let (s, a) = (tmp.0.join("scalar"), tmp.0.join("avx2"));
        battery(&s, "scalar", &good_ops());
        // K3_ISA=avx2 was ignored: the battery ran scalar and wrote scalar-t*.
        battery(&a, "scalar", &good_ops());
        let problems = compare_battery(&[
            (plan(Isa::Scalar, Runner::Native), s),
            (plan(Isa::Avx2, Runner::Native), a),
        ])
        .unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains(
                "expected only avx2-t<threads> directories (K3_ISA=avx2), found `scalar-t1`"
            )),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("avx2: no battery output for 3 thread(s)")),
            "{problems:?}"
        );
    }

    #[test]
    fn no_battery_output_at_all_is_a_failure() {
        let tmp = TempDir::new();
        let s = tmp.0.join("scalar");
        std::fs::create_dir_all(&s).unwrap();
        let problems = compare_battery(&[(plan(Isa::Scalar, Runner::Native), s)]).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.contains("no battery output for 1 thread(s)")),
            "{problems:?}"
        );
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn malformed_manifest_lines_name_file_and_line() {
        let tmp = TempDir::new();
        let d = tmp.0.join("scalar-t1");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("x.bin"), [0u8; 4]).unwrap();
        std::fs::write(
            d.join("manifest.tsv"),
            "op\telem_bytes\tfnv1a64\nx\tfour\tzz\ny\t4\n",
        )
        .unwrap();
        let problems = read_manifest(&d).unwrap_err();
        assert!(
            problems[0].ends_with("manifest.tsv:2: op x: elem_bytes `four` is not an integer"),
            "{problems:?}"
        );
        assert!(problems[1].ends_with("manifest.tsv:3: expected 3 tab-separated columns (op, elem_bytes, fnv1a64), found 2"), "{problems:?}");
    }

    #[test]
    fn paths_argument_always_keeps_the_scalar_reference() {
        let o = parse_args(&["--paths".into(), "neon".into()])
            .unwrap()
            .unwrap();
        assert_eq!(o.paths, vec![Isa::Scalar, Isa::Neon]);
        assert!(matches!(
            parse_args(&["--paths".into(), "sse".into()]),
            Err(Failure::Usage(m)) if m.contains("unknown path `sse`")
        ));
        assert!(matches!(
            parse_args(&["--out".into()]),
            Err(Failure::Usage(_))
        ));
    }

    #[test]
    fn tiny_prompt_comes_from_the_fixture() {
        let fixture = workspace_root().join("tests/fixtures/tiny-k3");
        let (ids, gen) = tiny_prompt(&fixture).unwrap();
        assert!(ids.split(',').all(|x| x.parse::<u32>().is_ok()), "{ids}");
        assert!(gen > 0);
    }
}
