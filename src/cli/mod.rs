//! Command line (ENGINE.md §3): subcommand dispatch. Each subcommand lives in its own
//! module and returns `Result<()>`; errors become the exit codes of ENGINE.md §3.

use crate::error::{Error, Result};
use std::ffi::OsString;

pub mod args;
pub mod inspect;
pub mod pack_trunk;
pub mod run;
pub mod sim_cache;
pub mod template;
pub mod tokenize;

const USAGE: &str = "\
usage:
  k3 <model_dir> [options]          run: prompt in, tokens out (also `k3 run <model_dir>`)
  k3 run --help                     the run options: prompt, generation, memory budget, output
  k3 <subcommand> --help            any subcommand's usage
  k3 inspect <model_dir> [--json]   config summary, layer map, tensor census, byte ledger
  k3 tokenize --tok DIR [--special] (--text T | --file F)
  k3 detokenize --tok DIR --ids 1,2,3
  k3 template --tok DIR --messages FILE [--tools FILE] [--thinking E|off]   chat-template ids
  k3 pack-trunk <model_dir> <out>
  k3 sim-cache <trace.bin> [--policy NAME]... [--capacity-gb X]...
  k3 --help | --version | --list-presets
";

/// Runs the command line and returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    match dispatch(args) {
        Ok(()) => 0,
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
    // A subcommand name always wins over a directory of the same name (ENGINE.md §3).
    match first.as_str() {
        "--help" | "-h" | "help" => {
            crate::out!("{USAGE}");
            Ok(())
        }
        "inspect" => inspect::run(&args[1..]),
        "tokenize" => tokenize::run_tokenize(&args[1..]),
        "detokenize" => tokenize::run_detokenize(&args[1..]),
        "template" => template::run(&args[1..]),
        "--list-presets" => {
            crate::out!("{}", crate::plan::presets_text());
            Ok(())
        }
        "--version" | "-V" => {
            crate::out!("k3 {} ({})\n", crate::VERSION, crate::GIT_COMMIT);
            Ok(())
        }
        "run" => run::run(&args[1..]),
        "sim-cache" => sim_cache::run(&args[1..]),
        "pack-trunk" => pack_trunk::run(&args[1..]),
        // Anything else that is not a flag is the model directory of the main job.
        _ if !first.starts_with('-') => run::run(&args),
        _ => Err(Error::invalid(format!(
            "unknown subcommand or model directory `{first}` (see k3 --help)"
        ))),
    }
}

/// Writes `bytes` of a command's output (ids, text, tables) to standard output and flushes.
///
/// Errors (exit 4, "standard output: …"): any failed write, a full disk or a closed pipe
/// alike: the output is what the user asked for, so losing it is never a success (README
/// "Use"). Report text on standard error goes through `say!` instead, which drops it.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(|e| Error::io(format!("standard output: {e}")))
}
