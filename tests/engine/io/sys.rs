//! What the I/O layer reads from the system (ENGINE.md §4): peak RSS, MemAvailable and the
//! cgroup limit of the process (v2 and v1, the tightest of the cgroup and its ancestors), and
//! the pre-faulting of aligned buffers that makes RSS match the plan from the start.

use crate::support::io as io_support;

use io_support::TempDir;
use k3::io::sys::{cgroup_memory_in, memory_available, peak_rss_bytes, CgroupVersion};
use k3::io::AlignedBuf;
use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

const MOUNTINFO_V2: &str = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";

#[test]
fn cgroup_v2_takes_the_tightest_limit_among_the_cgroup_and_its_ancestors() {
    let t = TempDir::new("cg2");
    let root = t.path();
    let cg = "sys/fs/cgroup/user.slice/job.scope";
    // The process's own cgroup: no limit; its parent: 8 GB with 3 GB used; the root: none.
    write(root, &format!("{cg}/memory.max"), "max\n");
    write(root, &format!("{cg}/memory.current"), "1000\n");
    write(root, "sys/fs/cgroup/user.slice/memory.max", "8000000000\n");
    write(
        root,
        "sys/fs/cgroup/user.slice/memory.current",
        "3000000000\n",
    );
    let got = cgroup_memory_in("0::/user.slice/job.scope\n", MOUNTINFO_V2, root).unwrap();
    assert_eq!(got.version, CgroupVersion::V2);
    assert_eq!(got.limit, 8_000_000_000);
    assert_eq!(got.usage, 3_000_000_000);
    assert_eq!(got.headroom(), 5_000_000_000);
    assert!(got.dir.ends_with("user.slice"));

    // A tighter limit on the leaf wins.
    write(root, &format!("{cg}/memory.max"), "2000000000\n");
    write(root, &format!("{cg}/memory.current"), "500000000\n");
    let got = cgroup_memory_in("0::/user.slice/job.scope\n", MOUNTINFO_V2, root).unwrap();
    assert_eq!(got.headroom(), 1_500_000_000);

    // No limit anywhere: none.
    write(root, &format!("{cg}/memory.max"), "max\n");
    write(root, "sys/fs/cgroup/user.slice/memory.max", "max\n");
    assert_eq!(
        cgroup_memory_in("0::/user.slice/job.scope\n", MOUNTINFO_V2, root),
        None
    );
}

#[test]
fn cgroup_v1_memory_controller_and_its_unlimited_sentinel() {
    let t = TempDir::new("cg1");
    let root = t.path();
    // A hybrid host like this one: v2 mounted without the memory controller, v1 memory at
    // /sys/fs/cgroup/memory.
    let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    let cgroup = "8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n";
    let leaf = "sys/fs/cgroup/memory/process_api/abc";
    write(
        root,
        &format!("{leaf}/memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    write(
        root,
        &format!("{leaf}/memory.usage_in_bytes"),
        "2926465024\n",
    );
    assert_eq!(cgroup_memory_in(cgroup, mountinfo, root), None);
    write(
        root,
        &format!("{leaf}/memory.limit_in_bytes"),
        "4294967296\n",
    );
    let got = cgroup_memory_in(cgroup, mountinfo, root).unwrap();
    assert_eq!(got.version, CgroupVersion::V1);
    assert_eq!(got.headroom(), 4_294_967_296 - 2_926_465_024);
    // Usage above the limit: no headroom, not an underflow.
    write(
        root,
        &format!("{leaf}/memory.usage_in_bytes"),
        "5000000000\n",
    );
    assert_eq!(
        cgroup_memory_in(cgroup, mountinfo, root)
            .unwrap()
            .headroom(),
        0
    );
}

#[test]
fn cgroup_namespace_paths_relative_to_the_mount_root() {
    let t = TempDir::new("cgns");
    let root = t.path();
    // Mount root /docker/abc; /proc/self/cgroup shows the full path.
    let mountinfo = "30 22 0:26 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n";
    write(root, "sys/fs/cgroup/memory.max", "1073741824\n");
    write(root, "sys/fs/cgroup/memory.current", "73741824\n");
    let got = cgroup_memory_in("0::/docker/abc\n", mountinfo, root).unwrap();
    assert_eq!(got.headroom(), 1_000_000_000);
}

#[test]
fn this_machine_reports_mem_available() {
    let m = memory_available();
    if cfg!(target_os = "linux") {
        let a = m.mem_available.expect("MemAvailable on Linux");
        assert!(a > 0);
        assert!(m.available().unwrap() <= a);
    }
}

/// Current resident set size from /proc/self/statm (Linux), bytes.
fn current_rss() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = t.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[test]
fn aligned_buffers_are_resident_as_soon_as_they_are_allocated() {
    // RSS rises by the whole buffer at allocation, before any byte is written: reads into it
    // will never fault pages in. Peak RSS (getrusage) follows.
    let Some(before) = current_rss() else {
        return; // not Linux: no statm to compare with
    };
    let n = 96 << 20;
    let buf = AlignedBuf::new(n).unwrap();
    let after = current_rss().unwrap();
    assert!(
        after >= before + n as u64 - (4 << 20),
        "RSS {before} -> {after} after allocating {n} bytes"
    );
    assert!(peak_rss_bytes().unwrap() >= after - (4 << 20));
    assert_eq!(buf.as_ptr() as usize % 4096, 0);
    drop(buf);
}
