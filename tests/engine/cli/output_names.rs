//! Output paths and streams a new user found that k3 handled wrongly (each test failed before
//! its fix): outputs named through links or naming an input file, no output overwriting an
//! input or another output through any name, the cache histogram opened with the trace before
//! the run, and output written to a stream that fails.

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};
use support::{fixture, k3, run_args, scratch_dir, stderr, tiny, tiny_without_max_positions};

#[test]
fn an_output_named_through_a_link_is_written_through_it() {
    let dir = scratch_dir("edge_symlink_out");
    let target = dir.join("target.json");
    std::fs::write(&target, "old").unwrap();
    let link = dir.join("link.json");
    std::os::unix::fs::symlink("target.json", &link).unwrap();
    let o = run_args(&[
        &tiny(),
        "--ids",
        "1,2",
        "--gen",
        "2",
        "--out",
        link.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // was: the link replaced by a regular file, the target untouched
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(&target)
        .unwrap()
        .contains("\"logits_hash\""));
    // a dangling link: the file it names is created
    let link2 = dir.join("dangling.f32");
    std::os::unix::fs::symlink("new.f32", &link2).unwrap();
    let o = run_args(&[
        &tiny(),
        "--ids",
        "1,2",
        "--gen",
        "0",
        "--dump-logits",
        link2.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link2)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::metadata(dir.join("new.f32")).unwrap().len() > 0);
}

#[test]
fn an_output_that_names_an_input_file_is_refused() {
    let model = tiny_without_max_positions("edge_output_is_input");
    let shard = std::fs::read_dir(&model)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .unwrap();
    let before = std::fs::read(&shard).unwrap();
    let m = model.display().to_string();
    // directly, and through a link from elsewhere
    let elsewhere = scratch_dir("edge_output_is_input_link").join("dump.f32");
    std::os::unix::fs::symlink(&shard, &elsewhere).unwrap();
    for (flag, p) in [
        ("--dump-logits", shard.clone()),
        ("--dump-logits", elsewhere),
        ("--out", model.join("config.json")),
    ] {
        let o = run_args(&[&m, "--ids", "1,2", "--gen", "1", flag, p.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{flag} {}: {}",
            p.display(),
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("an input of this run"),
            "{}",
            stderr(&o)
        );
    }
    assert_eq!(
        std::fs::read(&shard).unwrap(),
        before,
        "the shard is intact"
    );
}

/// A writer whose writes all fail with ENOSPC.
fn dev_full() -> Option<Stdio> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .ok()
        .map(Stdio::from)
}

#[test]
fn generated_ids_and_the_sim_cache_table_fail_loudly_when_stdout_fails() {
    let Some(full) = dev_full() else {
        eprintln!("SKIPPED: /dev/full is not available on this platform");
        return;
    };
    // was exit 0 with the ids lost
    let o = k3()
        .args([&tiny(), "--ids", "1,2", "--gen", "5"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("standard output"), "{}", stderr(&o));
    let trace = fixture("real/expert_trace.bin");
    let o = k3()
        .args(["sim-cache", trace.to_str().unwrap(), "--capacity-gb", "8"])
        .stdout(dev_full().unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
}

/// Runs k3 in `dir` (so relative spellings of one file can be compared).
fn run_in(dir: &Path, args: &[&str]) -> Output {
    k3().current_dir(dir).args(args).output().expect("start k3")
}

#[test]
fn no_output_overwrites_an_input_or_another_output_through_any_name() {
    let model = tiny_without_max_positions("edge_any_name_model");
    let m = model.display().to_string();
    let shard = model.join("model-00004-of-00007.safetensors");
    let before = std::fs::read(&shard).unwrap();
    let dir = scratch_dir("edge_any_name");
    let d = |p: &str| dir.join(p);
    std::fs::create_dir_all(d("d1")).unwrap();
    std::fs::create_dir_all(d("d2")).unwrap();
    std::os::unix::fs::symlink("d2", d("ldir")).unwrap();
    // the cache trace through a link into the model (was: written into the shard, exit 0)
    std::fs::create_dir_all(d("trace")).unwrap();
    std::os::unix::fs::symlink(&shard, d("trace/expert_trace.bin")).unwrap();
    // a link left at the temporary name of --out (was: the shard truncated)
    std::os::unix::fs::symlink(&shard, d("evil.json.tmp")).unwrap();
    // a prompt file at the temporary name of --out (was: truncated, "the prompt file is empty")
    std::fs::write(d("r.json.tmp"), "hello").unwrap();
    // a symlink loop (was: replaced by a regular file)
    std::os::unix::fs::symlink("y", d("x")).unwrap();
    std::os::unix::fs::symlink("x", d("y")).unwrap();
    let pwd_z = d("z.bin").display().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--dump-cache-trace",
            "trace",
        ],
        vec![&m, "--ids", "1,2", "--gen", "2", "--out", "evil.json"],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--prompt-file",
            "r.json.tmp",
            "--out",
            "r.json",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--out",
            "q.bin",
            "--dump-logits",
            "./q.bin",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--out",
            &pwd_z,
            "--dump-logits",
            "z.bin",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--out",
            "d1/../w.bin",
            "--dump-logits",
            "w.bin",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--out",
            "ldir/v.bin",
            "--dump-logits",
            "d2/v.bin",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--out",
            "u.json",
            "--dump-logits",
            "u.json.tmp",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--dump-cache-trace",
            "t2",
            "--dump-logits",
            "t2/expert_hist.json",
        ],
        vec![
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--dump-cache-trace",
            "t3",
            "--out",
            "t3/expert_trace.bin",
        ],
        vec![&m, "--ids", "1,2", "--gen", "2", "--out", "x"],
    ];
    for args in &cases {
        let o = run_in(&dir, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}: refused before the run");
    }
    assert_eq!(
        std::fs::read(&shard).unwrap(),
        before,
        "the shard is intact"
    );
    assert_eq!(std::fs::read_to_string(d("r.json.tmp")).unwrap(), "hello");
    assert!(std::fs::symlink_metadata(d("x"))
        .unwrap()
        .file_type()
        .is_symlink());
    for gone in ["q.bin", "z.bin", "w.bin", "d2/v.bin", "u.json", "t2", "t3"] {
        assert!(!d(gone).exists(), "{gone} was not written");
    }
    // new names next to the model's files are fine
    let o = run_in(
        &dir,
        &[
            &m,
            "--ids",
            "1,2",
            "--gen",
            "2",
            "--out",
            &format!("{m}/run.json"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // sim-cache: the table never replaces the trace it replays
    let trace = d("tr.bin");
    std::fs::copy(fixture("real/expert_trace.bin"), &trace).unwrap();
    std::os::unix::fs::symlink("tr.bin", d("tl")).unwrap();
    for tsv in ["tr.bin", "tl", "./tr.bin"] {
        let o = run_in(
            &dir,
            &["sim-cache", "tr.bin", "--capacity-gb", "1", "--tsv", tsv],
        );
        assert_eq!(o.status.code(), Some(2), "--tsv {tsv}: {}", stderr(&o));
    }
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        std::fs::read(fixture("real/expert_trace.bin")).unwrap()
    );
}

#[test]
fn the_cache_histogram_is_opened_with_the_trace_before_the_run() {
    // A directory squatting on the histogram's temporary name: it cannot be created. Was: the
    // run went to the end, expert_trace.bin landed under its final name, then exit 2.
    let dir = scratch_dir("edge_hist_first");
    std::fs::create_dir_all(dir.join("expert_hist.json.tmp")).unwrap();
    let o = run_args(&[
        &tiny(),
        "--ids",
        "1,2",
        "--gen",
        "2",
        "--dump-cache-trace",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "refused before the run");
    assert!(!dir.join("expert_trace.bin").exists());
    assert!(!dir.join("expert_trace.bin.tmp").exists());
}
