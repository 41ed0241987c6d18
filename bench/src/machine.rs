//! The machine description written at the head of every result file: CPU, cores, memory,
//! kernel, host, and the device and file system under a path.

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn first_line_with(path: &str, key: &str) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn read_trim(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// (key, value) lines describing the machine: `cpu`, `cores`, `memory_bytes`, `kernel`,
/// `host`, `date_utc`.
pub fn describe() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let cpu = first_line_with("/proc/cpuinfo", "model name")
        .or_else(|| {
            first_line_with("/proc/cpuinfo", "CPU implementer").map(|v| format!("implementer {v}"))
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    out.push(("cpu".into(), format!("{cpu} ({})", std::env::consts::ARCH)));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    out.push(("cores".into(), cores.to_string()));
    let mem = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or("unknown".to_string(), |kb| (kb * 1024).to_string());
    out.push(("memory_bytes".into(), mem));
    out.push((
        "kernel".into(),
        read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
    ));
    out.push((
        "host".into(),
        read_trim("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
    ));
    out.push(("date_utc".into(), utc_now()));
    out
}

/// (key, value) lines for the storage under `path`: `device` (name, rotational, model,
/// scheduler) and `filesystem` (type and source from /proc/mounts).
pub fn describe_storage(path: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(dev) = crate::idle::device_of(path) {
        let q = |f: &str| read_trim(&format!("/sys/block/{dev}/{f}"));
        let mut d = dev.clone();
        if let Some(r) = q("queue/rotational") {
            d.push_str(&format!(" rotational {r}"));
        }
        if let Some(m) = q("device/model") {
            d.push_str(&format!(" model {m}"));
        }
        if let Some(s) = q("queue/scheduler") {
            d.push_str(&format!(" scheduler {s}"));
        }
        if let Some(s) = q("size") {
            if let Ok(n) = s.parse::<u64>() {
                d.push_str(&format!(" size {:.1} GB", n as f64 * 512.0 / 1e9));
            }
        }
        out.push(("device".into(), d));
    }
    if let (Ok(abs), Ok(mounts)) = (fs::canonicalize(path), fs::read_to_string("/proc/mounts")) {
        let best = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && abs.starts_with(f[1])).then(|| (f[1].len(), f[2], f[0], f[1]))
            })
            .max_by_key(|x| x.0);
        if let Some((_, fstype, src, mnt)) = best {
            out.push(("filesystem".into(), format!("{fstype} {src} on {mnt}")));
        }
    }
    out
}

/// The 1-, 5- and 15-minute load averages from /proc/loadavg ("unknown" elsewhere).
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (no time crates).
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formatting() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::format_utc(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
