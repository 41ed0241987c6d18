//! The run report as a user reads it (ENGINE.md §6, issue 17): the README main job's default
//! report fits in 12 lines, `--verbose` adds one line per step, counts agree with their
//! nouns, sizes use one style, and `inspect`, the plan and `pack-trunk` print the same trunk
//! size under the same name.

use crate::support::{self, fixture, scratch_dir, stderr};

/// The README main job with `extra` flags: (standard output, standard error).
fn main_job(extra: &[&str]) -> (String, String) {
    let model = fixture("tiny-k3-text");
    let mut args = vec![
        model.to_str().unwrap(),
        "--prompt",
        "The capital of France is",
        "--gen",
        "16",
    ];
    args.extend_from_slice(extra);
    let o = support::run_k3(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o))
}

#[test]
fn default_report_fits_in_twelve_lines_and_verbose_adds_the_steps() {
    let (out, err) = main_job(&[]);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() + out.lines().count() <= 12,
        "{} report lines + the text:\n{err}",
        lines.len()
    );
    for start in [
        "model: ",
        "memory plan: ",
        "trunk: ",
        "summary: ",
        "logits hash: ",
        "peak RSS: ",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(start)),
            "no `{start}` line:\n{err}"
        );
    }
    assert!(!lines.iter().any(|l| l.starts_with("step ")), "{err}");
    // no line repeats another
    let mut seen = std::collections::HashSet::new();
    for l in &lines {
        assert!(seen.insert(*l), "repeated line {l:?}");
    }
    assert!(
        err.contains("5 prompt tokens + 16 generated tokens"),
        "{err}"
    );
    assert!(
        err.contains("(16 vectors)") && err.contains("read per token"),
        "{err}"
    );
    assert!(err.contains("true resident hit rate"), "{err}");

    let (vout, verr) = main_job(&["--verbose"]);
    assert_eq!(vout, out, "--verbose changes no output");
    let steps: Vec<&str> = verr.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(steps.len(), 16, "{verr}");
    assert!(steps[0].starts_with("step    1: token "), "{verr}");
    assert!(
        verr.contains("prefill: 5 positions in 1 chunk of up to 5"),
        "{verr}"
    );
    let hash = |e: &str| {
        e.lines()
            .find(|l| l.starts_with("logits hash: "))
            .map(String::from)
    };
    assert_eq!(hash(&verr), hash(&err));

    let (qout, qerr) = main_job(&["--quiet"]);
    assert_eq!((qout, qerr), (out, String::new()), "--quiet: no report");
}

/// The `trunk weights <size> (<n> layers)` phrase of `line`.
fn trunk_size(line: &str) -> &str {
    let i = line
        .find("trunk weights ")
        .unwrap_or_else(|| panic!("no trunk size in {line:?}"));
    let j = i + line[i..].find(')').unwrap();
    &line[i..=j]
}

#[test]
fn inspect_the_plan_and_pack_trunk_print_the_same_trunk_size() {
    let model = fixture("tiny-k3-text");
    let m = model.to_str().unwrap();
    let o = support::run_k3(["inspect", m]);
    assert!(o.status.success(), "{}", stderr(&o));
    let inspect = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    let (_, run) = main_job(&[]);
    let dir = scratch_dir("report_trunk_size");
    let _ = std::fs::remove_dir_all(&dir);
    let o = support::run_k3(["pack-trunk", m, dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let pack = stderr(&o);
    let sizes: Vec<&str> = [&inspect, &run, &pack]
        .iter()
        .map(|t| trunk_size(t.lines().find(|l| l.contains("trunk weights ")).unwrap()))
        .collect();
    assert_eq!(sizes[0], "trunk weights 157 kB (5 layers)", "{inspect}");
    assert_eq!(sizes[1], sizes[0], "{run}");
    assert_eq!(sizes[2], sizes[0], "{pack}");
}

/// Standard output and standard error in one file (`> log 2>&1`): the generated text is one
/// whole line and the report (step lines included) starts on its own line after it; before the
/// fix the step lines were held back only on a terminal and broke into the text.
#[test]
fn one_file_for_both_streams_keeps_the_text_on_its_own_line() {
    let dir = scratch_dir("report_same_file");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let f = std::fs::File::create(&log).unwrap();
    let model = fixture("tiny-k3-text");
    let status = support::k3()
        .arg(&model)
        .args([
            "--prompt",
            "The capital of France is",
            "--gen",
            "16",
            "--verbose",
        ])
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    let (alone, _) = main_job(&[]);
    let i = text
        .lines()
        .position(|l| format!("{l}\n") == alone)
        .unwrap_or_else(|| panic!("the text {alone:?} is not a line of its own:\n{text}"));
    let after: Vec<&str> = text.lines().skip(i + 1).collect();
    assert_eq!(
        after.iter().filter(|l| l.starts_with("step ")).count(),
        16,
        "{text}"
    );
    assert!(after.iter().any(|l| l.starts_with("summary: ")), "{text}");
}
