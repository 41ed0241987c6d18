//! The disk measured the way the engine reads it (ENGINE.md §5, §12; `k3 doctor`): widened
//! `O_DIRECT` windows ([`IoFile::read_window`]) of the engine's sizes at queue depth 1 (the
//! trunk and lm_head reader) and deeper (the expert-batch readers), over bytes that were never
//! read before in this measurement — a cache below (a RAID controller, a network disk) would
//! otherwise serve the second read.
//!
//! The bytes come either from files that already hold data (a model's shards or a packed
//! `trunk.bin`: [`FreshBytes::of_files`]) or from a temporary file written for the purpose,
//! synced, dropped from the page cache and removed when dropped ([`ProbeFile`]).

use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, Extent, IoFile, ALIGN};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

/// Bytes not yet read of a list of files, handed out front to back ([`FreshBytes::take`]), so
/// no byte is read twice.
pub struct FreshBytes {
    files: Vec<IoFile>,
    /// Per file: the next unread offset (a multiple of 4096) and the end of the usable bytes.
    cursor: Vec<(u64, u64)>,
}

/// A file counts as holding data when at least this share of its length is allocated on disk;
/// a sparse file (holes read as zeros without touching the disk) would measure memory speed.
const ALLOCATED_SHARE: f64 = 0.9;

/// Files smaller than this are not read (headers and JSON: too small to measure anything).
const MIN_FILE_BYTES: u64 = 16 << 20;

impl FreshBytes {
    /// The data files of `paths` (each read from its second MiB on, past the header, to its
    /// end rounded down to 4096), skipping files smaller than 16 MiB and sparse files (less
    /// than 90 % of the length allocated), and their names with the reason.
    ///
    /// Errors: exit 2 when a file cannot be opened (naming it).
    pub fn of_files(paths: &[PathBuf]) -> Result<(FreshBytes, Vec<String>)> {
        let mut files = Vec::new();
        let mut cursor = Vec::new();
        let mut skipped = Vec::new();
        for p in paths {
            let meta = std::fs::metadata(p)
                .map_err(|e| Error::invalid(format!("{}: cannot stat: {e}", p.display())))?;
            let len = meta.len();
            if len < MIN_FILE_BYTES {
                continue;
            }
            if (allocated_bytes(&meta) as f64) < ALLOCATED_SHARE * len as f64 {
                skipped.push(format!("{} (sparse)", p.display()));
                continue;
            }
            files.push(IoFile::open(p)?);
            cursor.push((1 << 20, len & !(ALIGN as u64 - 1)));
        }
        Ok((FreshBytes { files, cursor }, skipped))
    }

    /// Bytes still unread.
    pub fn remaining(&self) -> u64 {
        self.cursor.iter().map(|&(a, b)| b.saturating_sub(a)).sum()
    }

    /// The next `len` unread bytes (`len` rounded up to 4096) as one extent inside one file,
    /// skipping a file's tail shorter than `len`; `None` when no file has `len` bytes left.
    pub fn take(&mut self, len: usize) -> Option<Extent<usize>> {
        let len = crate::io::buf::align_up(len)? as u64;
        for (i, c) in self.cursor.iter_mut().enumerate() {
            if c.1.saturating_sub(c.0) >= len {
                let e = Extent {
                    file: i,
                    offset: c.0,
                    len: len as usize,
                };
                c.0 += len;
                return Some(e);
            }
        }
        None
    }

    /// The open files, indexed by [`Extent::file`] of [`FreshBytes::take`].
    pub fn files(&self) -> &[IoFile] {
        &self.files
    }
}

/// Bytes of the file allocated on disk (`st_blocks` × 512; the length where unknown).
fn allocated_bytes(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.blocks().saturating_mul(512)
    }
    #[cfg(not(unix))]
    {
        meta.len()
    }
}

/// One measured read pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRate {
    /// What the pattern stands for (`trunk`, `experts`).
    pub name: &'static str,
    /// Payload bytes per read (the window is this, 4096-aligned).
    pub window: usize,
    /// Reads in flight (threads, each with its own buffer).
    pub depth: usize,
    /// Reads done.
    pub reads: usize,
    /// Bytes transferred from the device.
    pub bytes: u64,
    /// Wall-clock seconds from the first read to the last one landing.
    pub seconds: f64,
    /// Every read went through `O_DIRECT` (false: a buffered fallback, which may measure the
    /// page cache).
    pub direct: bool,
}

impl ReadRate {
    /// Decimal MB per second.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
    /// Bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9)
    }
}

/// Reads `count` windows of `window` fresh bytes of `src` (fewer when `src` runs out) with
/// `depth` reads in flight: `depth` threads take the windows in file-offset order, each into
/// its own aligned buffer allocated before the clock starts.
///
/// Errors: exit 4 for a failed or short read (naming the file and offset); exit 3 when the
/// buffers cannot be allocated; exit 2 when no fresh bytes are left.
pub fn measure(
    src: &mut FreshBytes,
    name: &'static str,
    window: usize,
    depth: usize,
    count: usize,
) -> Result<ReadRate> {
    let window = window.max(ALIGN);
    let reads: Vec<Extent<usize>> = (0..count).map_while(|_| src.take(window)).collect();
    if reads.is_empty() {
        return Err(Error::invalid(format!(
            "disk probe: no unread bytes left for {window}-byte windows"
        )));
    }
    let depth = depth.clamp(1, reads.len());
    let cap = window_capacity(window).ok_or_else(|| Error::resources("disk probe: window"))?;
    let mut bufs = (0..depth)
        .map(|_| AlignedBuf::new(cap))
        .collect::<Result<Vec<_>>>()?;
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let files = src.files();
    let t0 = Instant::now();
    let results: Vec<Result<(u64, bool)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bufs
            .iter_mut()
            .map(|buf| {
                let (next, failed, reads) = (&next, &failed, &reads);
                scope.spawn(move || -> Result<(u64, bool)> {
                    let (mut dev, mut direct) = (0u64, true);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= reads.len() || failed.load(Ordering::Relaxed) {
                            return Ok((dev, direct));
                        }
                        let e = &reads[i];
                        match files[e.file].read_window(e.offset, e.len, buf.as_mut_slice()) {
                            Ok(d) => {
                                dev += d.device_bytes;
                                direct &= d.direct;
                            }
                            Err(err) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(err);
                            }
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal("disk probe: a reader panicked")))
            })
            .collect()
    });
    let seconds = t0.elapsed().as_secs_f64();
    let (mut dev, mut direct) = (0u64, true);
    for r in results {
        let (d, dir) = r?;
        dev += d;
        direct &= dir;
    }
    Ok(ReadRate {
        name,
        window,
        depth,
        reads: reads.len(),
        bytes: dev,
        seconds,
        direct,
    })
}

/// A temporary file of pseudo-random bytes written for the probe, removed when dropped.
pub struct ProbeFile {
    path: PathBuf,
    /// Bytes written.
    pub len: u64,
    /// Seconds the write and its `fdatasync` took.
    pub write_seconds: f64,
}

/// Bytes per write of [`ProbeFile::create`].
const WRITE_CHUNK: usize = 8 << 20;

impl ProbeFile {
    /// Writes `len` bytes (rounded up to 8 MiB) of pseudo-random data to a new file
    /// `.k3-doctor-<pid>.tmp` in `dir`, syncs it and drops it from the page cache, so the
    /// reads that follow come from the device.
    ///
    /// Errors: exit 3 when the file system is full (the file is removed); exit 4 for any
    /// other failure to create or write it (naming the path).
    pub fn create(dir: &Path, len: u64) -> Result<ProbeFile> {
        let path = dir.join(format!(".k3-doctor-{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(format!("{}: cannot create: {e}", path.display())))?;
        let mut probe = ProbeFile {
            path,
            len: 0,
            write_seconds: 0.0,
        };
        let chunks = len.div_ceil(WRITE_CHUNK as u64).max(1);
        let mut block = vec![0u8; WRITE_CHUNK];
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
        for w in block.chunks_exact_mut(8) {
            // xorshift64: incompressible bytes, so a compressing file system reads them all.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        let t0 = Instant::now();
        for c in 0..chunks {
            // A distinct first word per chunk: no two chunks are identical (deduplication).
            block[..8].copy_from_slice(&c.to_le_bytes());
            f.write_all(&block).map_err(|e| {
                crate::io::out::write_error(&probe.path, "write", c * WRITE_CHUNK as u64, &e)
            })?;
            probe.len += WRITE_CHUNK as u64;
        }
        f.sync_data()
            .map_err(|e| crate::io::out::write_error(&probe.path, "fdatasync", 0, &e))?;
        probe.write_seconds = t0.elapsed().as_secs_f64();
        crate::io::sys::drop_file_cache(&f, 0, probe.len);
        Ok(probe)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_bytes_are_never_handed_out_twice_and_the_file_is_removed() {
        let dir = std::env::temp_dir().join(format!("k3-probe-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let probe = ProbeFile::create(&dir, 32 << 20).unwrap();
        let path = probe.path().to_path_buf();
        assert!(path.exists());
        let (mut src, skipped) = FreshBytes::of_files(std::slice::from_ref(&path)).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(src.remaining(), (32 << 20) - (1 << 20));
        let a = src.take(1 << 20).unwrap();
        let b = src.take(1 << 20).unwrap();
        assert_eq!(b.offset, a.offset + (1 << 20));
        let r = measure(&mut src, "experts", 1 << 20, 3, 8).unwrap();
        assert_eq!(r.reads, 8);
        assert!(r.bytes >= 8 << 20);
        assert_eq!(src.remaining(), (32 << 20) - (11 << 20));
        drop(src);
        drop(probe);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
