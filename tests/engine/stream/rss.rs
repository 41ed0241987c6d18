//! Peak RSS is the run's own (ENGINE.md §4: the number to quote, within the plan), and a
//! budget below the minimum is refused with exit 3 before anything large is allocated.

use crate::support::stream as stream_support;
use stream_support::*;

/// A k3 started by a large parent reports its own peak, not the parent's: `getrusage`'s
/// `ru_maxrss` survives `execve`, so it would report this test process's 256 MB.
#[test]
fn peak_rss_is_not_inherited_from_a_large_parent() {
    let mut ballast = vec![1u8; 256 << 20];
    for i in (0..ballast.len()).step_by(4096) {
        ballast[i] = i as u8;
    }
    let r = run(
        &fixture("tiny-k3"),
        "rss_parent",
        &["--ids", "1,2,3", "--gen", "2"],
    );
    check_ok(&r, "tiny-k3 from a 256 MB parent");
    if !emulated() {
        assert!(r.u64(&["memory", "peak_rss_bytes"]) < 64 << 20);
    }
    std::hint::black_box(&ballast);
}

#[test]
fn budget_below_the_minimum_is_refused_with_exit_3_before_allocating() {
    let m = moderate();
    let r = run(
        &m,
        "rss_refused",
        &["--ids", "1,2,3", "--gen", "2", "--mem-gb", "0.001"],
    );
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr.contains("--mem-gb") || r.stderr.contains("mem-gb"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("below the minimum") && r.stderr.contains("short by"),
        "{}",
        r.stderr
    );
    let j = r.json();
    assert_eq!(j["error"]["exit_code"], 3);
    // Nothing of the model was allocated: the process stayed within its baseline.
    if !emulated() {
        assert!(r.u64(&["memory", "peak_rss_bytes"]) < k3::plan::PROCESS_BASELINE);
    }
    // and the report carries the figures of the smallest plan that would have been needed
    assert!(r.u64(&["memory", "plan", "total"]) > 1_000_000);
    // A cache below top-k experts, and a trunk budget below one slot of the largest layer.
    for (flag, v, want) in [
        ("--cache-gb", "0.00001", "top-k"),
        ("--trunk-gb", "0.00001", "trunk budget"),
    ] {
        let r = run(
            &m,
            "rss_refused2",
            &["--ids", "1,2,3", "--gen", "2", flag, v],
        );
        assert_eq!(r.code, Some(3), "{flag}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{flag}: {}", r.stderr);
    }
}

/// Every kernel thread keeps its own scratch (widened inputs, the tiled prefill product's
/// accumulators and x chunk: about 1 MiB at 64 positions); the plan counts it per thread.
/// 16 threads multiplying 64-position chunks (`--gen 0` keeps every logits row, so the
/// lm_head's 1024 rows are 16 tasks) held 16 MiB the plan did not count before.
#[test]
fn the_kernels_scratch_of_every_thread_is_in_the_plan() {
    let ids: Vec<String> = (1..=64).map(|i| i.to_string()).collect();
    let ids = ids.join(",");
    let r = run(
        &moderate(),
        "rss_threads",
        &["--ids", &ids, "--gen", "0", "--threads", "16"],
    );
    check_ok(&r, "16 threads, 64-position chunks");
    let one = run(
        &moderate(),
        "rss_threads_1",
        &["--ids", &ids, "--gen", "0", "--threads", "1"],
    );
    check_ok(&one, "1 thread, 64-position chunks");
    assert_eq!(r.hash(), one.hash());
    let scratch = |r: &Run| r.u64(&["memory", "plan", "scratch"]);
    assert!(
        scratch(&r) >= scratch(&one) + 15 * k3_kernels::thread_scratch_bytes(64, 0),
        "plan scratch {} at 16 threads, {} at 1: the 15 more threads' kernel scratch is not counted",
        scratch(&r),
        scratch(&one)
    );
}
