//! The command line as habits expect it (docs/cli.md): flags before or after the model
//! directory, `-p`/`-n`/`-h`, `k3 help <command>`, `--prompt-file -`, a quiet end on a closed
//! pipe, `sim-cache --model`/`--expert-bytes`, and the shell completions.

use crate::support::{fixture, k3_command, run_k3, scratch_dir};
use std::io::{Read as _, Write as _};
use std::process::Stdio;

/// Every subcommand but `help` itself.
const COMMANDS: &[&str] = k3::cli::SUBCOMMANDS.split_last().unwrap().1;

fn k3(args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = run_k3(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code().unwrap_or(-1), out.stdout, err)
}

fn text_model() -> String {
    fixture("tiny-k3-text").to_str().unwrap().to_string()
}

/// The generated text of a run (stdout), asserting exit 0.
fn run_ok(args: &[&str]) -> Vec<u8> {
    let (code, out, err) = k3(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

#[test]
fn flags_before_or_after_the_model_dir_and_short_prompt_and_gen() {
    let m = text_model();
    let p = "The capital of France is";
    let after = run_ok(&[&m, "--prompt", p, "--gen", "3", "--quiet"]);
    assert!(!after.is_empty());
    assert_eq!(run_ok(&["--prompt", p, "--gen", "3", "--quiet", &m]), after);
    assert_eq!(run_ok(&["--gen=3", &m, "--prompt", p, "--quiet"]), after);
    assert_eq!(run_ok(&["-p", p, "-n", "3", "--quiet", &m]), after);
    assert_eq!(run_ok(&[&m, "-p", p, "-n", "3", "--quiet"]), after);
    assert_eq!(run_ok(&["run", "-n", "3", &m, "-p", p, "--quiet"]), after);
    // An unknown flag first is still named.
    let (code, _, err) = k3(&["--bogus", &m]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--bogus"), "{err}");
}

#[test]
fn prompt_file_dash_reads_standard_input() {
    let m = text_model();
    let p = "The capital of France is";
    let want = run_ok(&[&m, "-p", p, "-n", "2", "--quiet"]);
    let mut child = k3_command(env!("CARGO_BIN_EXE_k3"))
        .args([m.as_str(), "--prompt-file", "-", "-n", "2", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(p.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, want);
}

#[test]
fn help_on_every_command_short_long_and_k3_help() {
    for c in COMMANDS {
        let (code, long, err) = k3(&[c, "--help"]);
        assert_eq!(code, 0, "{c}: {err}");
        let text = String::from_utf8(long.clone()).unwrap();
        assert!(text.starts_with("usage: k3"), "{c}: {text}");
        let (code, short, _) = k3(&[c, "-h"]);
        assert_eq!((code, &short), (0, &long), "{c} -h");
        let (code, via_help, _) = k3(&["help", c]);
        assert_eq!((code, &via_help), (0, &long), "k3 help {c}");
    }
    let (code, top, _) = k3(&["--help"]);
    assert_eq!(code, 0);
    assert_eq!(k3(&["-h"]).1, top);
    assert_eq!(k3(&["help"]).1, top);
    assert_eq!(k3(&["help", "-h"]).1, top);
    assert_eq!(k3(&["help", "help"]).1, top);
    let top = String::from_utf8(top).unwrap();
    for f in [
        "-p, --prompt",
        "-n, --gen",
        "--prompt-file",
        "--mem-gb",
        "--preset",
        "k3 help",
    ] {
        assert!(top.contains(f), "k3 --help lacks {f}:\n{top}");
    }
    for c in COMMANDS {
        assert!(top.contains(&format!("k3 {c}")) || *c == "run", "{c}");
    }
    let (code, _, err) = k3(&["help", "bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("`bogus`"), "{err}");
}

/// `k3 … | head -1`: the reader leaves; k3 ends with exit 0 and says nothing. The output
/// (ids of a 2 MB text) is larger than any pipe buffer, so the write fails however the two
/// processes are scheduled.
#[test]
fn a_closed_pipe_ends_quietly_with_exit_0() {
    let dir = scratch_dir("habits_pipe");
    let text = dir.join("big.txt");
    std::fs::write(&text, "the capital of France is Paris. ".repeat(64 * 1024)).unwrap();
    let mut child = k3_command(env!("CARGO_BIN_EXE_k3"))
        .args([
            "tokenize",
            "--tok",
            &text_model(),
            "--file",
            text.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    let mut stdout = child.stdout.take().unwrap();
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn sim_cache_takes_the_expert_size_from_the_model_or_the_flag() {
    let t = fixture("real/expert_trace.bin");
    let t = t.to_str().unwrap();
    let tiny = fixture("tiny-k3");
    let base = ["sim-cache", t, "--policy", "lru", "--capacity-gb", "0.001"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let (code, out, err) = k3(&a);
        assert_eq!(code, 0, "{err}");
        String::from_utf8(out).unwrap()
    };
    // tiny-k3's experts: 6528 bytes each (k3 inspect), so 0.001 GB = 153 slots.
    let out = with(&["--model", tiny.to_str().unwrap()]);
    assert!(out.contains("/ 6528 bytes per expert)"), "{out}");
    assert!(out.contains("      0.001    153"), "{out}");
    let out = with(&["--expert-bytes", "1000"]);
    assert!(out.contains("/ 1000 bytes per expert)"), "{out}");
    let (code, out, err) = k3(&["sim-cache", t, "--policy", "lru", "--slots", "4"]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("17547264 bytes per expert, K3's"), "{out}");
    let mut a = base.to_vec();
    a.extend_from_slice(&["--model", tiny.to_str().unwrap(), "--expert-bytes", "9"]);
    let (code, _, err) = k3(&a);
    assert_eq!(code, 2);
    assert!(err.contains("not both"), "{err}");
}

#[test]
fn completions_parse_and_name_every_subcommand_and_flag() {
    let (code, bash, err) = k3(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    let bash = String::from_utf8(bash).unwrap();
    let dir = scratch_dir("habits_completions");
    let f = dir.join("k3.bash");
    std::fs::write(&f, &bash).unwrap();
    let o = std::process::Command::new("bash")
        .arg("-n")
        .arg(&f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // And it completes: a subcommand, a subcommand's flag, a run flag after a directory.
    let script = format!(
        "source {}; for w in 'k3 ver' 'k3 verify --w' 'k3 dir --prompt-' 'k3 help si'; do \
         COMP_WORDS=($w); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _k3; echo \"${{COMPREPLY[*]}}\"; done",
        f.display()
    );
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "verify\n--write-sums\n--prompt-file\nsim-cache\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A flag's value is not the subcommand (`k3 -n 4 ver` completes `verify`), and
    // `--incremental`, accepted but doing nothing, is never offered.
    let script = format!(
        "source {}; for w in 'k3 -n 4 ver' 'k3 --gen 4 -p hi ver' 'k3 --gen=4 dir --prompt-' \
         'k3 -n 4 verify --w' 'k3 dir --inc'; do \
         COMP_WORDS=($w); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _k3; echo \"${{COMPREPLY[*]}}\"; done",
        f.display()
    );
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "verify\nverify\n--prompt-file\n--write-sums\n\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!bash.contains("--incremental"), "{bash}");
    let (code, zsh, _) = k3(&["completions", "zsh"]);
    assert_eq!(code, 0);
    let zsh = String::from_utf8(zsh).unwrap();
    assert!(zsh.starts_with("#compdef k3\n"), "{zsh}");
    match std::process::Command::new("zsh")
        .arg("-n")
        .arg("-c")
        .arg(&zsh)
        .output()
    {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => eprintln!("SKIPPED: zsh -n (zsh not installed)"),
    }
    assert!(!zsh.contains("--incremental"), "{zsh}");
    for script in [&bash, &zsh] {
        let words: Vec<&str> = script
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .collect();
        for c in COMMANDS.iter().chain(&["help"]) {
            assert!(words.contains(c), "{c} missing");
        }
        for flag in [
            "--prompt",
            "--gen",
            "--sums",
            "--write-sums",
            "--expert-bytes",
            "--json",
        ] {
            assert!(words.contains(&flag), "{flag} missing");
        }
    }
    let (code, _, err) = k3(&["completions", "fish"]);
    assert_eq!(code, 2);
    assert!(err.contains("bash"), "{err}");
}

/// A short flag takes `=VALUE` as its long form does: `-p=hi` is `--prompt=hi` (it was once a
/// second "model directory").
#[test]
fn short_flags_take_an_inline_value_like_long_ones() {
    let m = text_model();
    let long = k3(&[&m, "--prompt=hi", "--gen=2"]);
    assert_eq!(long.0, 0, "{}", long.2);
    let short = k3(&[&m, "-p=hi", "-n=2"]);
    assert_eq!(short.0, 0, "{}", short.2);
    assert_eq!(short.1, long.1);
}

/// An integer flag's value too large for it says so, with the limit, instead of "is not an
/// integer".
#[test]
fn integer_flags_too_large_name_the_range() {
    let m = text_model();
    for flag in ["-n", "--gen", "--threads", "--prefill-chunk", "--layers"] {
        let (code, _, err) = k3(&[&m, "-p", "hi", flag, "99999999999999999999"]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(
            err.contains("too large") && err.contains(&usize::MAX.to_string()),
            "{flag}: {err}"
        );
    }
    // Not a number at all is still that.
    let (code, _, err) = k3(&[&m, "-p", "hi", "-n", "4x"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not a non-negative integer"), "{err}");
}
