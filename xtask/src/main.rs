//! `cargo xtask <task> [args]`: developer tasks (gates, fuzz-smoke, synth, bench, table
//! generation). This file is only the dispatcher: each task lives in its own module and is one
//! line of [`TASKS`]; add a task by adding a `mod` line and a row.

use std::path::PathBuf;
use std::process::ExitCode;

mod bench;
mod fuzz_smoke;
mod gates;
mod synth;
mod unicode_tables;

/// How a task failed; decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad arguments (exit 2); the message says which argument and what was expected.
    Usage(String),
    /// The task ran and found a problem, or could not run (exit 1).
    Failed(String),
    /// The task already reported its failure and chose this exit code.
    Exit(u8),
}

/// Lets a task written as `fn run(&[String]) -> Result<(), String>` be a row:
/// `|a| Ok(module::run(a)?)`.
impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Failed(message)
    }
}

/// Lets a task written as `fn main(&[String]) -> i32` (its exit code) be a row:
/// `|a| exit_code(module::main(a))`.
pub fn exit_code(code: i32) -> Result<(), Failure> {
    match code {
        0 => Ok(()),
        c => Err(Failure::Exit(u8::try_from(c).unwrap_or(1).max(1))),
    }
}

/// A task's entry point: the arguments after the task name.
pub type TaskFn = fn(&[String]) -> Result<(), Failure>;

/// Every task: name, one-line summary, entry point. Add a task with a `mod` line above and a
/// row here.
const TASKS: &[(&str, &str, TaskFn)] = &[
    (
        "gates",
        "run the tests on every ISA path (scalar, AVX2, NEON under qemu) and compare kernel outputs",
        gates::main,
    ),
    (
        "fuzz-smoke",
        "run every cargo-fuzz target for a bounded time (--seconds N, --target NAME)",
        |a| exit_code(fuzz_smoke::run(a)),
    ),
    (
        "synth",
        "write a synthetic checkpoint in the released K3 format (<dir> --layers N --experts E --seed S), or a DSpark draft (--draft <dir> --target <model> | --released)",
        |a| exit_code(synth::main(a)),
    ),
    (
        "bench",
        "end-to-end roofline benchmark of k3 at several memory budgets (--model DIR --reps N --budgets ...); `bench batch`: B sequences per trunk sweep (--budgets floor,7.4,resident --bs 1,2,4,8)",
        bench::main,
    ),
    (
        "unicode-tables",
        "generate src/tokenizer/unicode_tables.rs from UCD 16.0.0 (--ucd DIR [--out PATH | --check])",
        |a| exit_code(unicode_tables::run(a)),
    ),
];

/// The workspace root (xtask/ is one level below it).
pub fn workspace_root() -> PathBuf {
    let xtask = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    xtask
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| xtask.clone())
}

fn usage() -> String {
    let mut s =
        String::from("usage: cargo xtask <task> [args]   (cargo xtask <task> --help)\ntasks:\n");
    for (name, summary, _) in TASKS {
        s.push_str(&format!("  {name:<16} {summary}\n"));
    }
    s
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    match name.as_str() {
        "--help" | "-h" | "help" => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        // One task name per line, for scripts (.ci/run) that enable steps by presence.
        "--list" => {
            for (name, _, _) in TASKS {
                println!("{name}");
            }
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let Some((_, _, run)) = TASKS.iter().find(|(n, _, _)| n == name) else {
        eprintln!("xtask: unknown task `{name}`");
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    match run(&args[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("xtask {name}: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Failed(msg)) => {
            eprintln!("xtask {name}: FAILED: {msg}");
            ExitCode::from(1)
        }
        Err(Failure::Exit(code)) => ExitCode::from(code),
    }
}
