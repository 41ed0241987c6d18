//! `k3 doctor` end to end (ENGINE.md §12): its refusal when `MemAvailable` or the cgroup
//! headroom is below the released model's smallest plan — faked through the test hooks the
//! memory plan itself reads (`K3_TEST_MEMINFO`, `K3_TEST_CGROUP`) —, its JSON, the removal of
//! its temporary file, and a bad DIR. The disk probe is kept tiny (`--probe-mb 8`).

use crate::support::{self, fixture, scratch_dir};
use k3::json::{self, Value};
use std::path::Path;
use std::process::Output;

/// `MemAvailable` of the faked machines: a 64 GB machine and one of 2 GB.
const BIG_KB: u64 = 64_000_000;
const SMALL_KB: u64 = 2_000_000;

fn meminfo(dir: &Path, kb: u64) -> std::path::PathBuf {
    let p = dir.join("meminfo");
    std::fs::write(
        &p,
        format!("MemTotal:       {kb} kB\nMemFree:        {kb} kB\nMemAvailable:   {kb} kB\n"),
    )
    .unwrap();
    p
}

/// Runs `k3 doctor <args>` with `MemAvailable` faked to `kb` kB and, when given, the cgroup
/// directory `cgroup` instead of the process's own.
fn doctor(scratch: &Path, kb: u64, cgroup: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = support::k3();
    cmd.arg("doctor")
        .args(args)
        .env(k3::io::sys::TEST_MEMINFO_ENV, meminfo(scratch, kb));
    match cgroup {
        Some(c) => cmd.env(k3::io::sys::TEST_CGROUP_ENV, c),
        // An empty directory: no limit, whatever the test machine's own cgroup says.
        None => cmd.env(k3::io::sys::TEST_CGROUP_ENV, scratch.join("no-cgroup")),
    };
    std::fs::create_dir_all(scratch.join("no-cgroup")).unwrap();
    cmd.output().expect("failed to start the k3 binary")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// No `.k3-doctor-*` file is left in `dir`.
fn no_probe_file_left(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with(".k3-doctor-"), "left behind: {name}");
    }
}

#[test]
fn doctor_json_on_a_large_machine_names_a_budget_and_a_command() {
    let s = scratch_dir("doctor-json");
    let target = s.join("disk");
    std::fs::create_dir_all(&target).unwrap();
    let o = doctor(
        &s,
        BIG_KB,
        None,
        &[target.to_str().unwrap(), "--json", "--probe-mb", "8"],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    let v = json::parse(out.as_bytes()).unwrap();
    assert_eq!(v.get("can_run").and_then(Value::as_bool), Some(true));
    let mem = v.get("memory").unwrap();
    let avail = mem.get("available").and_then(Value::as_number).unwrap();
    assert_eq!(avail.as_u64(), Some(BIG_KB * 1024));
    assert!(mem.get("cgroup").unwrap().is_null());
    let cpu = v.get("cpu").unwrap();
    assert!(cpu.get("cores").and_then(Value::as_number).is_some());
    assert!(cpu.get("isa").and_then(Value::as_str).is_some());
    let disk = v.get("disk").unwrap();
    let reads = disk.get("reads").and_then(Value::as_array).unwrap();
    assert_eq!(reads.len(), 3);
    let depths: Vec<u64> = reads
        .iter()
        .map(|r| {
            r.get("queue_depth")
                .unwrap()
                .as_number()
                .unwrap()
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(depths, [1, 1, 4]);
    assert!(!disk.get("temporary_file").unwrap().is_null());
    let model = v.get("model").unwrap();
    let mem_gb = model
        .get("mem_gb")
        .and_then(Value::as_str)
        .unwrap()
        .to_string();
    let plan = model
        .get("plan_bytes")
        .unwrap()
        .as_number()
        .unwrap()
        .as_u64()
        .unwrap();
    let budget: f64 = mem_gb.parse().unwrap();
    assert!(
        plan as f64 <= budget * 1e9,
        "plan {plan} > budget {budget} GB"
    );
    assert!(plan <= BIG_KB * 1024);
    let tb = model.get("token_bytes").unwrap();
    assert!(
        tb.get("total")
            .unwrap()
            .as_number()
            .unwrap()
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(model
        .get("predicted_seconds_per_token")
        .unwrap()
        .as_number()
        .is_some());
    let next = v.get("next").and_then(Value::as_str).unwrap();
    assert!(next.contains(&format!("--mem-gb {mem_gb}")), "{next}");
    no_probe_file_left(&target);
}

#[test]
fn doctor_refuses_with_exit_3_below_the_smallest_plan_by_memavailable() {
    let s = scratch_dir("doctor-small-mem");
    let o = doctor(
        &s,
        SMALL_KB,
        None,
        &[s.to_str().unwrap(), "--probe-mb", "8"],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("verdict: cannot run here"), "{out}");
    assert!(out.contains("MemAvailable 2.05 GB"), "{out}");
    assert!(
        err.contains("the released model cannot run here: its smallest plan needs"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.contains("next:"), "{out}");
    no_probe_file_left(&s);
}

#[test]
fn doctor_refuses_with_exit_3_below_the_smallest_plan_by_the_cgroup() {
    let s = scratch_dir("doctor-small-cgroup");
    let cg = s.join("cgroup");
    std::fs::create_dir_all(&cg).unwrap();
    std::fs::write(cg.join("memory.max"), "3000000000\n").unwrap();
    std::fs::write(cg.join("memory.current"), "1000000000\n").unwrap();
    let o = doctor(
        &s,
        BIG_KB,
        Some(&cg),
        &[s.to_str().unwrap(), "--json", "--probe-mb", "8"],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "stderr: {err}");
    let v = json::parse(out.as_bytes()).unwrap();
    assert_eq!(v.get("can_run").and_then(Value::as_bool), Some(false));
    assert!(v.get("next").unwrap().is_null());
    let cgj = v.get("memory").unwrap().get("cgroup").unwrap();
    let headroom = cgj.get("headroom").unwrap().as_number().unwrap().as_u64();
    assert_eq!(headroom, Some(2_000_000_000));
    let avail = v.get("memory").unwrap().get("available").unwrap();
    assert_eq!(avail.as_number().unwrap().as_u64(), Some(2_000_000_000));
    assert!(err.contains("cgroup headroom"), "{err}");
}

#[test]
fn the_run_plan_reads_the_same_faked_memory() {
    // The hooks feed the run's own plan: tiny-k3 refused on a machine with 1 MB available.
    let s = scratch_dir("doctor-run-hook");
    let mut cmd = support::k3();
    cmd.arg(fixture("tiny-k3"))
        .args(["--ids", "1,2", "--gen", "1"])
        .env(k3::io::sys::TEST_MEMINFO_ENV, meminfo(&s, 1000));
    let o = cmd.output().unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "stderr: {err}");
    assert!(err.contains("memory plan does not fit"), "{err}");
}

#[test]
fn doctor_on_a_model_dir_suggests_running_that_dir() {
    let s = scratch_dir("doctor-model");
    let dir = support::copy_checkpoint("tiny-k3", "doctor-model-dir");
    let o = doctor(
        &s,
        BIG_KB,
        None,
        &[dir.to_str().unwrap(), "--probe-mb", "8"],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    assert!(
        out.contains(&format!("next: k3 {} --mem-gb ", dir.display())),
        "{out}"
    );
    // Its shards are too small to measure: a temporary file was written there, and removed.
    assert!(out.contains("temporary file"), "{out}");
    no_probe_file_left(&dir);
}

#[test]
fn doctor_bad_dir_or_flag_is_exit_2_naming_it() {
    let s = scratch_dir("doctor-bad");
    let missing = s.join("nowhere");
    let o = doctor(&s, BIG_KB, None, &[missing.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}: not a directory", missing.display())),
        "{err}"
    );
    let file = s.join("meminfo");
    let o = doctor(&s, BIG_KB, None, &[file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let o = doctor(&s, BIG_KB, None, &[s.to_str().unwrap(), "--probe-mb", "0"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--probe-mb"), "{err}");
}

#[cfg(unix)]
#[test]
fn doctor_in_an_unwritable_dir_is_exit_4_naming_the_file() {
    use std::os::unix::fs::PermissionsExt;
    let s = scratch_dir("doctor-readonly");
    let ro = s.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // root ignores permissions: nothing to test then.
    if std::fs::write(ro.join("probe"), b"x").is_ok() {
        let _ = std::fs::remove_file(ro.join("probe"));
        return;
    }
    let o = doctor(&s, BIG_KB, None, &[ro.to_str().unwrap(), "--probe-mb", "8"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("{}/.k3-doctor-", ro.display())),
        "{err}"
    );
    assert!(err.contains("cannot create"), "{err}");
}
