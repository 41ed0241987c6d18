//! Is the machine otherwise idle? Samples `/proc/loadavg`, `/proc/stat` (CPU time of all
//! cores) and `/proc/diskstats` (the device under test) over a short window, so a benchmark can
//! wait for quiet before timing and record how quiet it was. Linux only; elsewhere the sample
//! reports itself unavailable.

use std::fs;
use std::io;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// Thresholds below which the machine counts as idle.
#[derive(Clone, Copy, Debug)]
pub struct IdleLimits {
    /// Largest busy share of all cores (0..1) during the window, e.g. 0.10.
    pub max_cpu_busy: f64,
    /// Largest share of the window the device spent doing I/O (0..1), e.g. 0.05.
    pub max_disk_util: f64,
}

impl Default for IdleLimits {
    fn default() -> Self {
        IdleLimits {
            max_cpu_busy: 0.10,
            max_disk_util: 0.05,
        }
    }
}

/// One observation window.
#[derive(Clone, Debug)]
pub struct IdleReport {
    /// Window length in seconds.
    pub window_s: f64,
    /// 1-minute load average at the end of the window.
    pub load1: f64,
    /// Busy share of all cores during the window (user + nice + system + irq + softirq +
    /// steal over all jiffies), 0..1.
    pub cpu_busy: f64,
    /// Device name the disk figures refer to, if one was given and found.
    pub device: Option<String>,
    /// Share of the window the device had I/O in flight (`io_ticks`), 0..1.
    pub disk_util: f64,
    /// Device reads during the window, MB/s (10^6 bytes).
    pub disk_read_mb_s: f64,
    /// Device writes during the window, MB/s.
    pub disk_write_mb_s: f64,
}

impl IdleReport {
    /// Whether the window was quiet enough for timing.
    pub fn is_idle(&self, limits: IdleLimits) -> bool {
        self.cpu_busy <= limits.max_cpu_busy && self.disk_util <= limits.max_disk_util
    }

    /// One line for logs and TSV comments.
    pub fn describe(&self, limits: IdleLimits) -> String {
        format!(
            "window {:.1} s  load1 {:.2}  cpu_busy {:.3}  disk {} util {:.3} read {:.1} MB/s write {:.1} MB/s  idle {}",
            self.window_s,
            self.load1,
            self.cpu_busy,
            self.device.as_deref().unwrap_or("-"),
            self.disk_util,
            self.disk_read_mb_s,
            self.disk_write_mb_s,
            if self.is_idle(limits) { "yes" } else { "no" }
        )
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct CpuTimes {
    total: u64,
    idle: u64,
}

fn cpu_times() -> io::Result<CpuTimes> {
    let s = fs::read_to_string("/proc/stat")?;
    let line = s
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| io::Error::other("/proc/stat: no `cpu` line"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user/nice).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok(CpuTimes { total, idle })
}

#[derive(Clone, Copy, Debug, Default)]
struct DiskTimes {
    sectors_read: u64,
    sectors_written: u64,
    io_ticks_ms: u64,
}

fn disk_times(device: &str) -> io::Result<DiskTimes> {
    let s = fs::read_to_string("/proc/diskstats")?;
    for line in s.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 13 && f[2] == device {
            let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
            return Ok(DiskTimes {
                sectors_read: n(5),
                sectors_written: n(9),
                io_ticks_ms: n(12),
            });
        }
    }
    Err(io::Error::other(format!(
        "/proc/diskstats: no device `{device}`"
    )))
}

/// Device sectors (512 B) read so far, for checking that timed reads reached the device.
pub fn device_sectors_read(device: &str) -> Option<u64> {
    disk_times(device).ok().map(|d| d.sectors_read)
}

fn load1() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// The whole-disk block device (e.g. `vda`, `nvme0n1`) holding `path`, from its `st_dev`
/// through `/sys/dev/block/MAJ:MIN` (a partition maps to its parent disk).
pub fn device_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(path).ok()?.dev();
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let sys = fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()?;
    let disk = if sys.join("partition").exists() {
        sys.parent()?.to_path_buf()
    } else {
        sys
    };
    Some(disk.file_name()?.to_string_lossy().into_owned())
}

/// Observes the machine for `window` and reports CPU and (if `device` is given) disk activity.
pub fn sample(window: Duration, device: Option<&str>) -> io::Result<IdleReport> {
    let c0 = cpu_times()?;
    let d0 = device.and_then(|d| disk_times(d).ok());
    let t0 = Instant::now();
    thread::sleep(window);
    let c1 = cpu_times()?;
    let d1 = device.and_then(|d| disk_times(d).ok());
    let secs = t0.elapsed().as_secs_f64();
    let dt = (c1.total - c0.total).max(1) as f64;
    let busy = 1.0 - (c1.idle - c0.idle) as f64 / dt;
    let (util, rd, wr) = match (d0, d1) {
        (Some(a), Some(b)) => (
            (b.io_ticks_ms - a.io_ticks_ms) as f64 / 1000.0 / secs,
            (b.sectors_read - a.sectors_read) as f64 * 512.0 / 1e6 / secs,
            (b.sectors_written - a.sectors_written) as f64 * 512.0 / 1e6 / secs,
        ),
        _ => (0.0, 0.0, 0.0),
    };
    Ok(IdleReport {
        window_s: secs,
        load1: load1(),
        cpu_busy: busy.clamp(0.0, 1.0),
        device: d1.and(device.map(str::to_string)),
        disk_util: util.clamp(0.0, 1.0),
        disk_read_mb_s: rd,
        disk_write_mb_s: wr,
    })
}

/// Samples in `window` steps until one is idle or `timeout` has passed; returns the last
/// sample and whether it was idle.
pub fn wait_for_idle(
    window: Duration,
    timeout: Duration,
    device: Option<&str>,
    limits: IdleLimits,
    mut on_busy: impl FnMut(&IdleReport),
) -> io::Result<(IdleReport, bool)> {
    let t0 = Instant::now();
    loop {
        let r = sample(window, device)?;
        if r.is_idle(limits) {
            return Ok((r, true));
        }
        if t0.elapsed() >= timeout {
            return Ok((r, false));
        }
        on_busy(&r);
    }
}
