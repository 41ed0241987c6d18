//! What the operating system says about memory and terminals (ENGINE.md §4, §6): peak RSS
//! from `getrusage`, `MemAvailable` from `/proc/meminfo`, and the memory headroom of the
//! process's own cgroup (v2 `memory.max − memory.current`, v1 `memory.limit_in_bytes −
//! memory.usage_in_bytes`), taking the tightest limit among the cgroup and its ancestors.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Peak resident set size of this process so far, in bytes: the figure to quote after a run.
///
/// On Linux this is `VmHWM` of `/proc/self/status`, the high-water mark of this program's own
/// address space. `getrusage`'s `ru_maxrss` is not used there because it survives `execve`: a
/// process started by a large parent (a test harness, an IDE) would report the parent's RSS at
/// the fork. Elsewhere, or if `/proc` is unreadable, `getrusage(RUSAGE_SELF)` `ru_maxrss` (KiB
/// on Linux, bytes on macOS).
///
/// Errors: exit 1 if `getrusage` fails (it cannot with these arguments).
pub fn peak_rss_bytes() -> Result<u64> {
    if let Some(v) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| parse_status_kib(&t, "VmHWM:"))
    {
        return Ok(v);
    }
    // SAFETY: rusage is plain old data; getrusage writes it fully on success.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live rusage, RUSAGE_SELF is always accepted.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if r != 0 {
        return Err(Error::internal(format!(
            "getrusage failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    let v = ru.ru_maxrss.max(0) as u64;
    if cfg!(target_os = "macos") {
        Ok(v)
    } else {
        Ok(v.saturating_mul(1024))
    }
}

/// A `kB` line of `/proc/<pid>/status` (e.g. `VmHWM:    9000 kB`), in bytes.
pub fn parse_status_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?;
        let mut it = rest.split_whitespace();
        let n: u64 = it.next()?.parse().ok()?;
        match it.next() {
            Some("kB") => n.checked_mul(1024),
            _ => None,
        }
    })
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes; `None` if absent or malformed.
pub fn parse_meminfo_available(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("MemAvailable:")?;
        let mut it = rest.split_whitespace();
        let n: u64 = it.next()?.parse().ok()?;
        match it.next() {
            Some("kB") => n.checked_mul(1024),
            None => Some(n),
            Some(_) => None,
        }
    })
}

/// Test hook (DEVELOPERS.md "Test hooks"): when set and non-empty, the path of a file read
/// instead of `/proc/meminfo` by [`mem_available_bytes`], so tests can fake a small machine
/// for the plan and `k3 doctor` alike.
pub const TEST_MEMINFO_ENV: &str = "K3_TEST_MEMINFO";

/// Test hook (DEVELOPERS.md "Test hooks"): when set and non-empty, a directory read instead
/// of the process's own cgroup by [`cgroup_memory`]: `memory.max` + `memory.current` (v2) or
/// `memory.limit_in_bytes` + `memory.usage_in_bytes` (v1); no limit when it holds neither.
pub const TEST_CGROUP_ENV: &str = "K3_TEST_CGROUP";

/// The value of a test-hook variable when set and non-empty.
fn test_hook(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `MemAvailable` of this machine in bytes (`None` where `/proc/meminfo` has no such line,
/// e.g. not Linux; the memory plan then says the figure is unknown). Reads the file named by
/// [`TEST_MEMINFO_ENV`] instead when that is set.
pub fn mem_available_bytes() -> Option<u64> {
    let path = test_hook(TEST_MEMINFO_ENV).unwrap_or_else(|| PathBuf::from("/proc/meminfo"));
    let text = std::fs::read_to_string(path).ok()?;
    parse_meminfo_available(&text)
}

/// Which cgroup hierarchy a limit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v2 (`memory.max`, `memory.current`).
    V2,
    /// cgroup v1 memory controller (`memory.limit_in_bytes`, `memory.usage_in_bytes`).
    V1,
}

/// The memory limit of one cgroup directory and its current usage, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMemory {
    /// v1 or v2.
    pub version: CgroupVersion,
    /// The cgroup directory that holds the tightest limit (the process's own or an ancestor).
    pub dir: PathBuf,
    /// `memory.max` / `memory.limit_in_bytes`.
    pub limit: u64,
    /// `memory.current` / `memory.usage_in_bytes`.
    pub usage: u64,
}

impl CgroupMemory {
    /// limit − usage (0 if usage exceeds the limit).
    pub fn headroom(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}

/// What the memory plan compares itself with (ENGINE.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryAvailable {
    /// `MemAvailable` from `/proc/meminfo`, bytes.
    pub mem_available: Option<u64>,
    /// The tightest cgroup memory limit of this process, if any.
    pub cgroup: Option<CgroupMemory>,
}

impl MemoryAvailable {
    /// The smaller of `MemAvailable` and the cgroup headroom; `None` if neither is known.
    pub fn available(&self) -> Option<u64> {
        let cg = self.cgroup.as_ref().map(CgroupMemory::headroom);
        match (self.mem_available, cg) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `MemAvailable` and this process's cgroup headroom, read now.
pub fn memory_available() -> MemoryAvailable {
    MemoryAvailable {
        mem_available: mem_available_bytes(),
        cgroup: cgroup_memory(),
    }
}

/// The tightest memory limit of this process's cgroup (v2 first, then the v1 memory
/// controller), read from `/proc/self/cgroup` and `/proc/self/mountinfo`. `None` if no
/// limit applies or the files are missing. Reads the directory named by [`TEST_CGROUP_ENV`]
/// instead when that is set.
pub fn cgroup_memory() -> Option<CgroupMemory> {
    if let Some(dir) = test_hook(TEST_CGROUP_ENV) {
        return read_limit(&dir, CgroupVersion::V2).or_else(|| read_limit(&dir, CgroupVersion::V1));
    }
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    cgroup_memory_in(&cgroup, &mountinfo, Path::new("/"))
}

/// [`cgroup_memory`] over given `/proc/self/cgroup` and `/proc/self/mountinfo` texts, with
/// mount points resolved under `root` (`/` in production; a test tree in tests).
///
/// For each hierarchy the process's cgroup directory and every ancestor up to the mount point
/// are examined; the directory with the least headroom (limit − usage) wins, because a parent's
/// limit binds its children. v2 is preferred when it sets any limit.
pub fn cgroup_memory_in(cgroup: &str, mountinfo: &str, root: &Path) -> Option<CgroupMemory> {
    let mut v2_path = None;
    let mut v1_path = None;
    for line in cgroup.lines() {
        // hierarchy-id:controller-list:path
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            v2_path = Some(path.to_string());
        } else if ctrls.split(',').any(|c| c == "memory") {
            v1_path = Some(path.to_string());
        }
    }
    let mounts = parse_mountinfo(mountinfo);
    if let Some(p) = v2_path {
        for m in mounts.iter().filter(|m| m.fstype == "cgroup2") {
            if let Some(found) = tightest(m, &p, root, CgroupVersion::V2) {
                return Some(found);
            }
        }
    }
    if let Some(p) = v1_path {
        for m in mounts
            .iter()
            .filter(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "memory"))
        {
            if let Some(found) = tightest(m, &p, root, CgroupVersion::V1) {
                return Some(found);
            }
        }
    }
    None
}

struct Mount {
    /// Root of the mount inside its file system (field 4).
    fs_root: String,
    /// Mount point (field 5).
    point: String,
    fstype: String,
    /// Super options (last field).
    options: String,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        // id parent major:minor root point options [optional...] - fstype source superopts
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        out.push(Mount {
            fs_root: unescape_mount(l[3]),
            point: unescape_mount(l[4]),
            fstype: r[0].to_string(),
            options: r[2].to_string(),
        });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as \ooo octal.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.len() >= i + 4 {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                out.push((oct[0] - b'0') * 64 + (oct[1] - b'0') * 8 + (oct[2] - b'0'));
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Walks from the process's cgroup directory up to the mount point; the least headroom wins.
fn tightest(m: &Mount, cg_path: &str, root: &Path, v: CgroupVersion) -> Option<CgroupMemory> {
    // Inside a cgroup namespace the path may already be relative to the mount's root.
    let rel = match cg_path.strip_prefix(m.fs_root.as_str()) {
        Some(r) if m.fs_root != "/" => r,
        _ => cg_path,
    };
    let mount_dir = root.join(m.point.trim_start_matches('/'));
    let mut dir = mount_dir.join(rel.trim_start_matches('/'));
    if !dir.is_dir() {
        dir = mount_dir.clone();
    }
    let mut best: Option<CgroupMemory> = None;
    loop {
        if let Some(c) = read_limit(&dir, v) {
            if best.as_ref().is_none_or(|b| c.headroom() < b.headroom()) {
                best = Some(c);
            }
        }
        if dir == mount_dir || !dir.starts_with(&mount_dir) {
            break;
        }
        match dir.parent() {
            Some(p) => dir = p.to_path_buf(),
            None => break,
        }
    }
    best
}

/// v1 reports "no limit" as a huge page-rounded number (PAGE_COUNTER_MAX × page size).
const V1_UNLIMITED: u64 = 1 << 62;

fn read_limit(dir: &Path, v: CgroupVersion) -> Option<CgroupMemory> {
    let (limit_file, usage_file) = match v {
        CgroupVersion::V2 => ("memory.max", "memory.current"),
        CgroupVersion::V1 => ("memory.limit_in_bytes", "memory.usage_in_bytes"),
    };
    let limit_text = std::fs::read_to_string(dir.join(limit_file)).ok()?;
    let limit_text = limit_text.trim();
    if limit_text == "max" {
        return None;
    }
    let limit: u64 = limit_text.parse().ok()?;
    if v == CgroupVersion::V1 && limit >= V1_UNLIMITED {
        return None;
    }
    let usage: u64 = std::fs::read_to_string(dir.join(usage_file))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(CgroupMemory {
        version: v,
        dir: dir.to_path_buf(),
        limit,
        usage,
    })
}

/// Tells the kernel that bytes [offset, offset + len) of `file` will not be needed again
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`), so writing or reading gigabytes (pack-trunk) does
/// not grow the page cache past the memory budget. Advisory: a failure changes nothing but
/// page-cache residency. Dirty pages must have been written back first (`sync_data`) for the
/// advice to drop them.
pub fn drop_file_cache(file: &std::fs::File, offset: u64, len: u64) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open for
        // the duration of the borrow.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (file, offset, len);
}

/// Bytes an unprivileged writer may still use on the file system holding `path` (an
/// existing file or directory): `statvfs` `f_bavail × f_frsize`. `None` when it cannot be
/// asked (a path with a NUL byte, a failed call, not Unix).
pub fn fs_available_bytes(path: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        // SAFETY: statvfs is plain old data; an all-zero value is valid and statvfs fills it.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path alive for the call and `st` a live out-value;
        // statvfs only writes into `st`.
        let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
        if rc != 0 {
            return None;
        }
        Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// True if standard error is a terminal (progress is shown only there, ENGINE.md §3).
pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// True if standard output is a terminal.
pub fn stdout_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
}

/// The width in columns of the terminal on standard error, when it is one and says (a
/// pseudo-terminal nobody sized answers 0: `None`). For the chat's live line, which must
/// know where the text wraps.
pub fn stderr_columns() -> Option<usize> {
    super::tty::columns(2)
}

/// True when standard input has data to read now (on a terminal in canonical mode: a whole
/// line typed). For the chat: a line typed before its prompt was echoed before it, so after
/// the prompt the cursor is not at the start of a row.
pub fn stdin_ready() -> bool {
    #[cfg(unix)]
    {
        let mut p = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live `pollfd`, count 1; timeout 0: poll only reports, never waits.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        rc > 0 && p.revents & libc::POLLIN != 0
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// True if standard output and standard error are the same open file (the same terminal,
/// or `> log 2>&1`): `fstat` device and inode of fds 1 and 2 agree. Then the report must not
/// break into the generated text (ENGINE.md §6). False when either cannot be asked.
pub fn stdout_is_stderr() -> bool {
    #[cfg(unix)]
    {
        let id = |fd: libc::c_int| {
            // SAFETY: `stat` is plain old data; an all-zero value is valid and fstat fills it.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `st` is a live out-value; fstat only writes into it and checks `fd`.
            let rc = unsafe { libc::fstat(fd, &mut st) };
            (rc == 0).then_some((st.st_dev, st.st_ino))
        };
        matches!((id(1), id(2)), (Some(a), Some(b)) if a == b)
    }
    #[cfg(not(unix))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24684084 kB\nMemFree:  1 kB\nMemAvailable:   23000000 kB\n";
        assert_eq!(parse_meminfo_available(t), Some(23_000_000 * 1024));
        assert_eq!(parse_meminfo_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_meminfo_available("MemAvailable: x kB\n"), None);
    }

    #[test]
    fn mount_unescape() {
        assert_eq!(unescape_mount("/a\\040b"), "/a b");
        assert_eq!(unescape_mount("/a\\\\"), "/a\\\\");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }

    #[test]
    fn status_lines() {
        let t = "VmPeak:\t  100 kB\nVmHWM:\t    9000 kB\n";
        assert_eq!(parse_status_kib(t, "VmHWM:"), Some(9000 * 1024));
        assert_eq!(parse_status_kib(t, "VmRSS:"), None);
        assert_eq!(parse_status_kib("VmHWM: 5 MB\n", "VmHWM:"), None);
    }

    #[test]
    fn peak_rss_is_positive() {
        assert!(peak_rss_bytes().unwrap() > 0);
    }
}
