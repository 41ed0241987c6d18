//! Every command the README's "Set up", "Your first hour" and "Use" sections (with their chat
//! and serve examples) and docs/cli.md show in a ```sh block is run here, on the bundled tiny
//! models, and what the docs promise of its output is checked (the README's text and
//! `logits hash: 1509936851f30c78`, a `--prompt-file -` fed by `printf` printing the same).
//! Placeholders the docs use for "your model" (`<model_dir>`, `<dir>`, `DIR`) become
//! `tests/fixtures/tiny-k3-text`, an optional `[…]` group is left out and a count `N` is 2;
//! files the docs leave to the reader (`prompts.jsonl`, `edit-this.py`, `chat.json` and
//! `tools.json` as the README shows them) are written first. A command that cannot run here is listed in [`SKIP`]
//! with the reason; one that is neither run nor listed fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README's `## ` sections whose commands run (their `###` subsections included).
const README_SECTIONS: [&str; 3] = ["Set up", "Your first hour: `k3 doctor`", "Use"];

/// Commands that do not run here: (document, a fragment of the command, why).
const SKIP: &[(&str, &str, &str)] = &[
    ("README.md", "cargo test --workspace", "the test suite itself (this test is part of it)"),
    ("README.md", "cargo install --path .", "installs into ~/.cargo/bin; the binary under test is the same build"),
    ("README.md", "k3 doctor /data", "probes the user's /data disk (a 2 GB file); tests/engine/cli/doctor.rs runs the doctor on scratch directories"),
    ("README.md", "k3 sim-cache <expert_trace.bin>", "needs a routing trace from a run with --dump-cache-trace; tests/engine/stream/sim_cache.rs replays one"),
    ("README.md", "k3 serve tests/fixtures/tiny-k3-text --port 8000", "a server that runs until stopped, on a fixed port; tests/engine/serve/ runs it on a free port and tests/serve/openai_client.py runs the Python example"),
    ("README.md", "curl -s http://127.0.0.1:8000", "talks to the server above"),
    ("README.md", "k3 serve <model_dir> --port 8000", "the server for Claude Code: runs until stopped, on a fixed port; tests/engine/serve/messages.rs and tests/serve/anthropic_client.py run the Messages API on a free port"),
    ("README.md", "ANTHROPIC_BASE_URL=", "starts Claude Code, which is not installed here and talks to the server above"),
];

/// Files the docs' commands read that the docs leave to the reader.
fn inputs(dir: &Path, readme: &str) {
    // the README's tools.json example: the first ```json block after "`tools.json` is"
    let at = readme
        .find("`tools.json` is")
        .expect("README: the tools.json example");
    let rest = &readme[at..];
    let start = rest.find("```json\n").unwrap() + 8;
    let end = start + rest[start..].find("```").unwrap();
    std::fs::write(dir.join("tools.json"), &rest[start..end]).unwrap();
    // the Use section names chat.json before the section that writes it
    std::fs::write(
        dir.join("chat.json"),
        r#"[{"role": "user", "content": "Hi"}]"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("prompts.jsonl"),
        "{\"prompt\": \"Once\", \"gen\": 4}\n{\"ids\": [1, 2, 3], \"gen\": 3, \"temperature\": 0.8, \"seed\": 7}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("edit-this.py"),
        "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n",
    )
    .unwrap();
}

/// The commands of the ```sh blocks of `text` (only inside `sections` when given): a line
/// ending in `\` continues on the next, comments (`  # …`, whole `#` lines) are dropped.
fn sh_commands(text: &str, sections: Option<&[&str]>) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut in_sh = false;
    let mut fenced = false;
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if !fenced {
            if let Some(h) = line.strip_prefix("## ") {
                section = h.trim().to_string();
            }
        }
        if t.starts_with("```") {
            fenced = !fenced;
            in_sh = fenced && t == "```sh";
            continue;
        }
        let wanted = sections.is_none_or(|s| s.contains(&section.as_str()));
        if !in_sh || !wanted {
            continue;
        }
        let code = match t.find("  #") {
            Some(i) => &t[..i],
            None => t,
        };
        let code = code.trim_end();
        if code.is_empty() || code.starts_with('#') {
            continue;
        }
        match code.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head.trim_end());
                pending.push(' ');
            }
            None => {
                pending.push_str(code);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    out
}

/// The command as it runs here: the bundled model for the placeholders, optional groups left
/// out, `cargo run --release --` as the built `k3`.
fn runnable(cmd: &str) -> String {
    let mut s = String::new();
    let mut depth = 0;
    for c in cmd.chars() {
        match c {
            '[' if !cmd.contains("\"[") && !cmd.contains("'[") => depth += 1,
            ']' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            _ => s.push(c),
        }
    }
    let words: Vec<String> = s
        .split(' ')
        .map(|w| match w {
            "<model_dir>" | "<dir>" | "DIR" => "tests/fixtures/tiny-k3-text".to_string(),
            "N" => "2".to_string(),
            _ => w.to_string(),
        })
        .collect();
    words
        .join(" ")
        .replace("cargo run --release --", "k3")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("'  '", "' '")
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_sh(dir: &Path, cmd: &str) -> Ran {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_k3"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Bounded: a command that does not end (a server the skip list missed) fails the test
    // with exit 124 instead of hanging the suite.
    let o = Command::new("timeout")
        .args(["--kill-after=5", "300", "sh", "-c"])
        .arg(cmd)
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env_remove("K3_TEST_FORCE_IDS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Ran {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// A scratch directory where `tests/fixtures` is the repository's.
fn workdir(name: &str) -> PathBuf {
    let dir = crate::support::scratch_dir(name);
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::os::unix::fs::symlink(root().join("tests"), dir.join("tests")).unwrap();
    dir
}

/// Runs `cmds` of `doc` in order in one directory; returns what each printed, by command.
fn run_all(doc: &str, cmds: &[String], dir: &Path) -> Vec<(String, Ran)> {
    let mut used = vec![false; SKIP.len()];
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for cmd in cmds {
        if let Some(i) = SKIP
            .iter()
            .position(|(d, frag, _)| *d == doc && cmd.contains(frag))
        {
            used[i] = true;
            continue;
        }
        let r = runnable(cmd);
        let ran = run_sh(dir, &r);
        if ran.code != Some(0) {
            failed.push(format!(
                "{doc}: `{cmd}` (run as `{r}`): exit {:?}\n{}",
                ran.code, ran.stderr
            ));
        }
        out.push((cmd.clone(), ran));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    for (i, (d, frag, why)) in SKIP.iter().enumerate() {
        assert!(
            *d != doc || used[i],
            "{doc}: the skip list names `{frag}` ({why}), which no longer appears"
        );
    }
    out
}

fn ran<'a>(runs: &'a [(String, Ran)], starts: &str) -> &'a Ran {
    &runs
        .iter()
        .find(|(c, _)| c.starts_with(starts))
        .unwrap_or_else(|| panic!("no command starting `{starts}`"))
        .1
}

/// The README's promised output: the text on standard output and the hash on standard error.
fn promised(readme: &str) -> (String, String) {
    let at = readme.find("prints this text on standard output:").unwrap();
    let rest = &readme[at..];
    let start = rest.find("```\n").unwrap() + 4;
    let end = start + rest[start..].find("\n```").unwrap();
    let text = rest[start..end].to_string();
    let h = rest.find("`logits hash: ").unwrap() + 1;
    let hash = rest[h..h + rest[h..].find('`').unwrap()].to_string();
    (text, hash)
}

#[test]
fn the_readme_commands_run_and_print_what_it_promises() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let cmds = sh_commands(&readme, Some(&README_SECTIONS));
    assert!(cmds.len() >= 20, "{cmds:?}");
    let dir = workdir("docs-readme");
    inputs(&dir, &readme);
    let runs = run_all("README.md", &cmds, &dir);
    let (text, hash) = promised(&readme);
    assert_eq!(hash, "logits hash: 1509936851f30c78 (16 vectors)");
    let setup = ran(&runs, "cargo run --release -- tests/fixtures/tiny-k3-text");
    assert_eq!(setup.stdout.trim_end(), text, "{}", setup.stderr);
    assert!(setup.stderr.contains(&hash), "{}", setup.stderr);
    // the completions land where the README puts them
    let comp = dir.join("home/.local/share/bash-completion/completions/k3");
    assert!(std::fs::read_to_string(comp).unwrap().contains("k3"));
    // the saved state continues: `== one run of --gen 40`
    let forty = run_sh(
        &dir,
        "k3 tests/fixtures/tiny-k3-text --prompt \"Once upon\" --gen 40",
    );
    let first = ran(
        &runs,
        "k3 <model_dir> --prompt \"Once upon\" --gen 20 --save-state",
    );
    let second = ran(&runs, "k3 <model_dir> --load-state s.k3");
    assert_eq!(
        format!(
            "{}{}",
            first.stdout.trim_end_matches('\n'),
            second.stdout.trim_end_matches('\n')
        ),
        forty.stdout.trim_end_matches('\n'),
        "{}",
        second.stderr
    );
    let hash_of = |r: &Ran| {
        r.stderr
            .lines()
            .find_map(|l| l.split("logits hash: ").nth(1))
            .map(|h| h.chars().take(16).collect::<String>())
    };
    assert!(hash_of(second).is_some(), "{}", second.stderr);
    assert_eq!(hash_of(second), hash_of(&forty), "{}", second.stderr);
}

#[test]
fn the_cli_doc_commands_run_and_print_what_it_promises() {
    let cli = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    let cmds = sh_commands(&cli, None);
    assert!(cmds.iter().any(|c| c.starts_with("printf")), "{cmds:?}");
    let dir = workdir("docs-cli");
    let runs = run_all("docs/cli.md", &cmds, &dir);
    let piped = ran(
        &runs,
        "printf 'The capital of France is' | k3 DIR --prompt-file -",
    );
    let flag = ran(&runs, "k3 DIR --prompt \"The capital of France is\"");
    assert!(
        cli.contains("`logits hash: 1509936851f30c78`")
            && piped.stderr.contains("logits hash: 1509936851f30c78"),
        "{}",
        piped.stderr
    );
    assert_eq!(piped.stdout, flag.stdout);
    // what the doc warns of: `echo` adds a newline, another prompt, another hash
    let echoed = run_sh(
        &dir,
        "echo 'The capital of France is' | k3 tests/fixtures/tiny-k3-text --prompt-file - --gen 16",
    );
    assert_eq!(echoed.code, Some(0), "{}", echoed.stderr);
    assert!(
        !echoed.stderr.contains("1509936851f30c78"),
        "{}",
        echoed.stderr
    );
    for f in [
        "home/.local/share/bash-completion/completions/k3",
        "home/.zfunc/_k3",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
}

/// A flag a command does not have points to that command's own help (`k3 chat --gen` said
/// `see k3 --help`, whose run flags chat does not take).
#[test]
fn an_unknown_flag_points_to_its_commands_help() {
    for (args, help) in [
        (
            &["chat", "tests/fixtures/tiny-k3-text", "--gen", "3"][..],
            "k3 help chat",
        ),
        (&["serve", "x", "--gen", "3"][..], "k3 help serve"),
        (
            &["tests/fixtures/tiny-k3-text", "--bogus"][..],
            "k3 help run",
        ),
        (
            &["pack-trunk", "a", "b", "--bogus"][..],
            "k3 help pack-trunk",
        ),
    ] {
        let o = crate::support::k3()
            .args(args)
            .current_dir(root())
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(&format!("(see {help})")), "{args:?}: {e}");
        // and that help exists
        let h: Vec<&str> = help.split(' ').skip(1).collect();
        let o = crate::support::k3().args(&h).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{help}");
    }
}

/// The codec's saving is stated one way, as the ratio `k3 pack-trunk --codec` measures on the
/// bundled model (it prints `75.9 % of raw`): docs/formats.md and docs/cli.md say 0.759.
#[test]
fn the_codec_ratio_the_docs_state_is_the_measured_one() {
    let dir = crate::support::scratch_dir("docs-codec");
    let o = crate::support::run_k3([
        "pack-trunk",
        crate::support::fixture("tiny-k3-text").to_str().unwrap(),
        dir.join("t").to_str().unwrap(),
        "--codec",
        "bf16-huffman",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", crate::support::stderr(&o));
    let report = std::fs::read_to_string(dir.join("t/trunk.json")).unwrap();
    assert!(report.contains("bf16-huffman"), "{report}");
    let o = crate::support::run_k3([
        "pack-trunk",
        crate::support::fixture("tiny-k3-text").to_str().unwrap(),
        dir.join("u").to_str().unwrap(),
        "--codec",
        "bf16-huffman",
    ]);
    let e = crate::support::stderr(&o);
    assert!(e.contains("(75.9 % of raw;"), "{e}");
    for doc in ["docs/formats.md", "docs/cli.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        assert!(text.contains("0.759 on the bundled tiny-k3-text"), "{doc}");
        for other in ["a third fewer", "two thirds of", "a quarter fewer"] {
            assert!(!text.contains(other), "{doc}: {other}");
        }
    }
}
