//! Command line (ENGINE.md §3): subcommand dispatch. Each subcommand lives in its own
//! module and returns `Result<()>`; errors become the exit codes of ENGINE.md §3.

use crate::error::{Error, Result};
use std::ffi::OsString;

pub mod args;
pub mod chat;
pub mod completions;
pub mod doctor;
pub mod inspect;
pub mod output;
pub mod pack_trunk;
pub mod progress;
pub mod run;
pub mod serve;
pub mod sim_cache;
pub mod summary;
pub mod template;
pub mod tokenize;
pub mod verify;

const USAGE: &str = "\
usage:
  k3 <model_dir> [options]          run: prompt in, tokens out (also `k3 run <model_dir>`);
                                    flags may come before or after <model_dir>
  k3 verify <model_dir> [--sums F]  check a download: headers, sizes, census, SHA-256
  k3 verify --trunk DIR [--against MODEL_DIR]   check every byte of a packed trunk
  k3 inspect <model_dir> [--json]   config summary, layer map, tensor census, byte ledger
  k3 tokenize --tok DIR [--special] (--text T | --file F)
  k3 detokenize --tok DIR --ids 1,2,3
  k3 chat <model_dir> [--system TEXT] [--tools FILE] [--thinking E|off]   a conversation
  k3 template --tok DIR --messages FILE [--tools FILE] [--thinking E|off]   chat-template ids
  k3 serve <model_dir> [--port N] [--host ADDR] [--api-key KEY] [--parallel N]
                                    OpenAI-compatible HTTP server on 127.0.0.1 (k3 help serve)
  k3 pack-trunk <model_dir> <out>   pack the dense trunk for streaming from a fast disk
  k3 sim-cache <trace.bin> [--model DIR | --expert-bytes N] [--policy NAME]...
  k3 doctor [DIR] [--json]          this machine against the released model: ISA, memory,
                                    the disk under DIR as the engine reads it, the budget
                                    that fits, predicted s/token, the command to run next
  k3 completions bash|zsh           shell completion script on standard output
  k3 help <command>                 a command's usage (also `k3 <command> -h`)
  k3 --help | --version | --list-presets
Common run options (all of them: k3 help run):
  -p, --prompt TEXT | --prompt-file PATH (- = standard input) | --ids 1,2,3
  -n, --gen N          tokens to generate (default 16)
  --preset NAME | --mem-gb X   memory budget (k3 --list-presets)
  --trunk DIR          a packed trunk;  --out FILE  JSON report;  --quiet
Documentation: docs/README.md in the source tree.
";

/// The subcommands, for `k3 help` and the shell completions.
pub const SUBCOMMANDS: &[&str] = &[
    "run",
    "verify",
    "inspect",
    "tokenize",
    "detokenize",
    "pack-trunk",
    "sim-cache",
    "template",
    "chat",
    "serve",
    "doctor",
    "completions",
    "help",
];

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs the command line and returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    match dispatch(args) {
        Ok(()) => 0,
        // The reader of standard output went away (`k3 … | head -1`): it has what it wanted.
        Err(_) if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) => 0,
        Err(e) => {
            crate::sayln!("k3: error: {e}");
            e.exit_code()
        }
    }
}

fn dispatch(args: Vec<OsString>) -> Result<()> {
    let first = match args.first() {
        None => {
            crate::say!("{USAGE}");
            return Err(Error::invalid(
                "no model directory or subcommand given (see k3 --help)",
            ));
        }
        Some(a) => a.to_string_lossy().into_owned(),
    };
    // The usage, presets and version take no arguments: a stray one is a mistake, not ignored.
    if matches!(
        first.as_str(),
        "--help" | "-h" | "--list-presets" | "--version" | "-V"
    ) {
        no_extra(&first, &args[1..])?;
    }
    // A subcommand name always wins over a directory of the same name (ENGINE.md §3).
    match first.as_str() {
        // The usage, presets and version are what was asked for: a failed write is exit 4.
        "--help" | "-h" => write_stdout(USAGE.as_bytes()),
        "help" => help(&args[1..]),
        "verify" => verify::run(&args[1..]),
        "completions" => completions::run(&args[1..]),
        "inspect" => inspect::run(&args[1..]),
        "tokenize" => tokenize::run_tokenize(&args[1..]),
        "detokenize" => tokenize::run_detokenize(&args[1..]),
        "template" => template::run(&args[1..]),
        "chat" => chat::run(&args[1..]),
        "--list-presets" => write_stdout(crate::plan::presets_text().as_bytes()),
        "--version" | "-V" => {
            write_stdout(format!("k3 {} ({})\n", crate::VERSION, crate::GIT_COMMIT).as_bytes())
        }
        "run" => run::run(&args[1..]),
        "serve" => serve::run(&args[1..]),
        "sim-cache" => sim_cache::run(&args[1..]),
        "pack-trunk" => pack_trunk::run(&args[1..]),
        "doctor" => doctor::run(&args[1..]),
        // Anything else that is not a flag is the model directory of the main job.
        // Flags may come first (`k3 -n 4 DIR`): the run parser places the directory.
        _ => run::run(&args),
    }
}

/// Refuses (exit 2, naming them) the arguments after `what`, which takes none.
fn no_extra(what: &str, extra: &[OsString]) -> Result<()> {
    if extra.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = extra
        .iter()
        .map(|a| format!("`{}`", a.to_string_lossy()))
        .collect();
    Err(Error::invalid(format!(
        "{what} takes no arguments, found {} (see k3 --help)",
        named.join(" ")
    )))
}

/// `k3 help [command]`: the command's usage (as `k3 <command> --help`), or the overview.
///
/// Errors (exit 2): an unknown command, or more than one argument.
fn help(args: &[OsString]) -> Result<()> {
    let Some(cmd) = args.first() else {
        return write_stdout(USAGE.as_bytes());
    };
    no_extra(&format!("help {}", cmd.to_string_lossy()), &args[1..])?;
    let cmd = cmd.to_string_lossy();
    let h = [OsString::from("--help")];
    match cmd.as_ref() {
        "help" | "-h" | "--help" => write_stdout(USAGE.as_bytes()),
        c if SUBCOMMANDS.contains(&c) => {
            dispatch([OsString::from(c)].into_iter().chain(h).collect())
        }
        c => Err(Error::invalid(format!(
            "help: unknown command `{c}` (commands: {})",
            SUBCOMMANDS.join(", ")
        ))),
    }
}

/// Writes `bytes` of a command's output (ids, text, tables) to standard output and flushes.
///
/// Errors (exit 4, "standard output: …"): any failed write, such as a full disk: the output
/// is what the user asked for, so losing it is never a success (docs/cli.md). A closed pipe
/// (`k3 … | head -1`) is the reader's choice: the error still stops the command, but the
/// process then ends with exit 0 and no message. Report text on standard error goes through
/// `say!` instead, which drops it.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(stdout_error)
}

/// The error of a failed write to standard output (see [`write_stdout`]): exit 4, except that
/// a closed pipe makes the process end quietly with exit 0.
pub(crate) fn stdout_error(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Error::io(format!("standard output: {e}"))
}
