//! `--help` works on every subcommand (ENGINE.md §3): usage on standard output, exit 0, even
//! among other flags.

use crate::support;

use support::run_k3;

/// Every subcommand of `k3 --help`'s list, and the run command both ways.
const SUBCOMMANDS: &[&str] = &[
    "run",
    "inspect",
    "tokenize",
    "detokenize",
    "pack-trunk",
    "sim-cache",
    "template",
    "serve",
];

#[test]
fn every_subcommand_prints_its_usage_on_help() {
    // the list above is the one k3 --help gives
    let top = run_k3(["--help"]);
    let top = String::from_utf8_lossy(&top.stdout).to_string();
    for cmd in SUBCOMMANDS {
        assert!(
            top.contains(&format!("k3 {cmd}")),
            "{cmd} missing from k3 --help:\n{top}"
        );
    }
    for cmd in SUBCOMMANDS {
        for args in [vec![*cmd, "--help"], vec![*cmd, "--bogus", "--help"]] {
            let o = run_k3(&args);
            let out = String::from_utf8_lossy(&o.stdout);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
            assert!(
                out.starts_with("usage: k3") && out.contains(cmd.trim_start_matches("run")),
                "{args:?}: {out}"
            );
        }
    }
}

/// A `--help` that is the value of a flag is that value, not a request for help.
#[test]
fn help_as_a_flag_value_is_a_value() {
    let tok = support::fixture("tiny-k3-text");
    let o = run_k3([
        "tokenize",
        "--tok",
        tok.to_str().unwrap(),
        "--text",
        "--help",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.contains("usage"), "{out}");
    assert!(
        out.trim().split(',').all(|t| t.parse::<u32>().is_ok()),
        "{out}"
    );
}

/// The usage, the presets and the version are output the user asked for: a full disk fails
/// them with exit 4 as it fails every other command's output (was exit 0 for `--help`).
#[test]
fn help_version_and_presets_to_a_full_disk_exit_4() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("SKIPPED: /dev/full is not available on this platform");
        return;
    };
    for args in [
        vec!["--help"],
        vec!["--version"],
        vec!["--list-presets"],
        vec!["run", "--help"],
        vec!["inspect", "--help"],
    ] {
        let o = support::k3_command(env!("CARGO_BIN_EXE_k3"))
            .args(&args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {err}");
        assert!(err.contains("standard output"), "{args:?}: {err}");
    }
}

/// `--help`, `--version` and `--list-presets` take no arguments: an extra one is exit 2 naming
/// it, not ignored (`k3 --version --bogus` once printed the version and exited 0).
#[test]
fn help_version_and_presets_refuse_extra_arguments() {
    for args in [
        &["--version", "--bogus"][..],
        &["-V", "extra"],
        &["--help", "extra"],
        &["-h", "--bogus"],
        &["--list-presets", "extra"],
        &["help", "verify", "extra"],
    ] {
        let o = run_k3(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        let extra = args.last().unwrap();
        assert!(err.contains(&format!("`{extra}`")), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // Alone they still work.
    for args in [["--version"], ["--help"], ["--list-presets"]] {
        assert_eq!(run_k3(args).status.code(), Some(0), "{args:?}");
    }
}
