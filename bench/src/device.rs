//! Device read bandwidth measured with the engine's own read patterns (FORMATS.md §6,
//! ENGINE.md §5, §7): `O_DIRECT` positioned reads into 4096-aligned buffers, windows widened
//! to 4096-byte boundaries.
//!
//! * **random expert reads**: 17,547,264-byte expert payloads (MODEL.md §9) at random,
//!   unaligned offsets, each read as its widened aligned window, at queue depth 1 (one thread)
//!   and at the engine's batch depth 16 (16 threads, one synchronous `pread` each in flight);
//! * **sequential layer reads**: the files read front to back in whole-layer windows (default
//!   the K3 KDA+MoE run, 1,267,744,256 B) into one aligned buffer, each window one `pread`
//!   (continued on short reads), and the same windows split into 16 MiB pieces read by 4
//!   threads.
//!
//! The device figure is the best of these, so no ratio computed against it can flatter the
//! engine. Reads go through `std::os::unix::fs::FileExt::read_at` on an `O_DIRECT`
//! descriptor; the aligned buffers are carved out of over-allocated `Vec`s, so no unsafe code
//! is needed.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Bytes of one K3 routed expert (MODEL.md §9: 3 × (5,505,024 + 344,064)).
pub const EXPERT_BYTES: u64 = 17_547_264;
/// Bytes of a K3 KDA + MoE layer's trunk run (MODEL.md §9).
pub const KDA_LAYER_BYTES: u64 = 1_267_744_256;
/// Direct-I/O alignment of offsets, lengths and buffer addresses (FORMATS.md §6).
pub const ALIGN: u64 = 4096;
/// The expert batch depth of the engine: one MoE layer's top-k misses read in parallel.
pub const ENGINE_QUEUE_DEPTH: usize = 16;

/// A buffer whose payload starts at a 4096-aligned address: the engine's own
/// [`k3::io::AlignedBuf`] (an anonymous mapping with every page faulted in before use), so the
/// device is measured into the same kind of memory the engine reads into. How the buffer's
/// pages were allocated matters: a virtio disk takes at most `max_segments` (254 here)
/// physically discontiguous pieces per request, so scattered 4 KiB pages cap a request at
/// about 1 MiB while a freshly populated mapping usually gives far fewer, larger pieces.
pub struct AlignedBuf {
    buf: k3::io::AlignedBuf,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (rounded up to 4096) at an aligned address.
    ///
    /// Panics if the system refuses the memory (a benchmark cannot go on without it).
    pub fn new(len: usize) -> AlignedBuf {
        let a = ALIGN as usize;
        let len = len.div_ceil(a) * a;
        let buf = k3::io::AlignedBuf::new(len)
            .unwrap_or_else(|e| panic!("device: aligned buffer of {len} bytes: {}", e.message));
        AlignedBuf { buf }
    }

    /// The aligned payload.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }
}

/// One file under test, opened for direct reads.
pub struct Target {
    /// Path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    file: File,
    /// Whether the descriptor has `O_DIRECT` (false: the file system refused it).
    pub direct: bool,
}

/// Opens `path` with `O_DIRECT` where the OS and file system allow it (Linux), else buffered.
pub fn open_target(path: &Path) -> io::Result<Target> {
    let size = std::fs::metadata(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?
        .len();
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        if let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            return Ok(Target {
                path: path.to_path_buf(),
                size,
                file,
                direct: true,
            });
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(Target {
        path: path.to_path_buf(),
        size,
        file,
        direct: false,
    })
}

/// Reads exactly `buf.len()` bytes at `off` (continuing short reads), or up to end of file
/// when the aligned window passes it; returns the bytes read.
pub fn read_window(t: &Target, off: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match t.file.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{}: read at {}: {e}", t.path.display(), off + done as u64),
                ))
            }
        }
    }
    Ok(done)
}

/// The widened direct-I/O window of payload [off, off + n): (lo, hi) on 4096 boundaries.
pub fn widen(off: u64, n: u64) -> (u64, u64) {
    let lo = off / ALIGN * ALIGN;
    let hi = (off + n).div_ceil(ALIGN) * ALIGN;
    (lo, hi)
}

/// Result of one pattern.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Pattern name (`random_expert`, `sequential_layer`, `sequential_layer_split`).
    pub pattern: &'static str,
    /// Payload bytes per request (expert or layer window).
    pub block_bytes: u64,
    /// Requests in flight.
    pub queue_depth: usize,
    /// Whether every target used `O_DIRECT`.
    pub direct: bool,
    /// Requests completed.
    pub reads: usize,
    /// Bytes transferred (aligned windows).
    pub bytes: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Bytes the device reported reading meanwhile (`/proc/diskstats`), if known.
    pub device_bytes: Option<u64>,
}

impl Measurement {
    /// Throughput in MB/s (10^6 bytes per second).
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

/// SplitMix64, for reproducible offsets.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `count` random expert requests over `targets` (file chosen in proportion to its size,
/// offset uniform over the bytes where a whole expert fits; unaligned, like real expert
/// offsets): (target index, payload offset).
pub fn random_requests(targets: &[Target], count: usize, seed: u64) -> Vec<(usize, u64)> {
    let sizes: Vec<u64> = targets
        .iter()
        .map(|t| t.size.saturating_sub(EXPERT_BYTES))
        .collect();
    let total: u64 = sizes.iter().sum();
    let mut s = seed;
    (0..count)
        .map(|_| {
            let mut r = splitmix64(&mut s) % total.max(1);
            let mut i = 0;
            while i + 1 < sizes.len() && r >= sizes[i] {
                r -= sizes[i];
                i += 1;
            }
            (i, r)
        })
        .collect()
}

/// `batches` expert batches as the engine issues them for one MoE layer (ENGINE.md §5): a
/// layer's routed experts lie back to back (`span_experts` of them, EXPERT_BYTES each, from a
/// random 4096-aligned start in a file chosen in proportion to its size), `k` distinct ones
/// are chosen at random and read in file-offset order. Returns the requests batch after batch.
pub fn expert_batches(
    targets: &[Target],
    batches: usize,
    span_experts: u64,
    k: usize,
    seed: u64,
) -> Vec<(usize, u64)> {
    let span = span_experts.max(k as u64) * EXPERT_BYTES;
    let sizes: Vec<u64> = targets
        .iter()
        .map(|t| t.size.saturating_sub(span))
        .collect();
    let total: u64 = sizes.iter().sum();
    if total == 0 {
        // No file holds a whole layer: fall back to independent random reads.
        return random_requests(targets, batches * k, seed);
    }
    let mut s = seed;
    let mut out = Vec::with_capacity(batches * k);
    for _ in 0..batches {
        let mut r = splitmix64(&mut s) % total;
        let mut i = 0;
        while i + 1 < sizes.len() && r >= sizes[i] {
            r -= sizes[i];
            i += 1;
        }
        let start = r / ALIGN * ALIGN;
        let mut chosen: Vec<u64> = Vec::with_capacity(k);
        while chosen.len() < k {
            let e = splitmix64(&mut s) % span_experts.max(k as u64);
            if !chosen.contains(&e) {
                chosen.push(e);
            }
        }
        chosen.sort_unstable();
        out.extend(chosen.into_iter().map(|e| (i, start + e * EXPERT_BYTES)));
    }
    out
}

/// Random expert reads at queue depth `qd` (`qd` threads, each with one aligned buffer of
/// EXPERT_BYTES + 8192, taking requests in order).
pub fn random_expert(
    targets: &[Target],
    requests: &[(usize, u64)],
    qd: usize,
    device: Option<&str>,
) -> io::Result<Measurement> {
    let next = AtomicUsize::new(0);
    let bytes = AtomicUsize::new(0);
    let err: Mutex<Option<io::Error>> = Mutex::new(None);
    let sectors0 = device.and_then(crate::idle::device_sectors_read);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..qd.max(1) {
            s.spawn(|| {
                let mut buf = AlignedBuf::new((EXPERT_BYTES + 2 * ALIGN) as usize);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests.len() {
                        return;
                    }
                    let (ti, off) = requests[i];
                    let (lo, hi) = widen(off, EXPERT_BYTES);
                    let n = (hi - lo) as usize;
                    match read_window(&targets[ti], lo, &mut buf.as_mut_slice()[..n]) {
                        // The window may pass end of file; the payload must be covered.
                        Ok(got) if (got as u64) >= off - lo + EXPERT_BYTES => {
                            bytes.fetch_add(got, Ordering::Relaxed);
                        }
                        Ok(got) => {
                            *err.lock().unwrap() = Some(io::Error::other(format!(
                                "{}: short read at {lo}: {got} of {n} bytes",
                                targets[ti].path.display()
                            )));
                            return;
                        }
                        Err(e) => {
                            *err.lock().unwrap() = Some(e);
                            return;
                        }
                    }
                }
            });
        }
    });
    let seconds = t0.elapsed().as_secs_f64();
    if let Some(e) = err.into_inner().unwrap() {
        return Err(e);
    }
    let sectors1 = device.and_then(crate::idle::device_sectors_read);
    Ok(Measurement {
        pattern: "random_expert",
        block_bytes: EXPERT_BYTES,
        queue_depth: qd,
        direct: targets.iter().all(|t| t.direct),
        reads: requests.len(),
        bytes: bytes.into_inner() as u64,
        seconds,
        device_bytes: sectors0.zip(sectors1).map(|(a, b)| (b - a) * 512),
    })
}

/// Sequential whole-layer reads: the targets front to back in windows of `window` bytes
/// (rounded up to 4096), at most `max_bytes` in all. With `split` = 0 each window is one
/// `pread` into one aligned buffer (queue depth 1); with `split` = n > 0 each window is cut
/// into 16 MiB pieces read by n threads.
pub fn sequential_layer(
    targets: &[Target],
    window: u64,
    max_bytes: u64,
    split: usize,
    device: Option<&str>,
) -> io::Result<Measurement> {
    let window = window.div_ceil(ALIGN) * ALIGN;
    let mut buf = AlignedBuf::new(window as usize);
    let mut bytes = 0u64;
    let mut reads = 0usize;
    let sectors0 = device.and_then(crate::idle::device_sectors_read);
    let t0 = Instant::now();
    'outer: for t in targets {
        let mut off = 0u64;
        while off < t.size {
            if bytes >= max_bytes {
                break 'outer;
            }
            let n = window.min((t.size - off).div_ceil(ALIGN) * ALIGN) as usize;
            let slice = &mut buf.as_mut_slice()[..n];
            let got = if split == 0 {
                read_window(t, off, slice)?
            } else {
                read_split(t, off, slice, split)?
            };
            if (got as u64) < (t.size - off).min(n as u64) {
                return Err(io::Error::other(format!(
                    "{}: short read at {off}: {got} of {n} bytes",
                    t.path.display()
                )));
            }
            bytes += got as u64;
            reads += 1;
            off += n as u64;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let sectors1 = device.and_then(crate::idle::device_sectors_read);
    Ok(Measurement {
        pattern: if split == 0 {
            "sequential_layer"
        } else {
            "sequential_layer_split"
        },
        block_bytes: window,
        queue_depth: split.max(1),
        direct: targets.iter().all(|t| t.direct),
        reads,
        bytes,
        seconds,
        device_bytes: sectors0.zip(sectors1).map(|(a, b)| (b - a) * 512),
    })
}

/// Reads `buf` at `off` as 16 MiB pieces shared by `threads` threads; returns the bytes read
/// (the count up to the first short piece, which can only be the one at end of file).
fn read_split(t: &Target, off: u64, buf: &mut [u8], threads: usize) -> io::Result<usize> {
    const PIECE: usize = 16 << 20;
    let pieces: Vec<(usize, &mut [u8])> = buf.chunks_mut(PIECE).enumerate().collect();
    let queue = Mutex::new(pieces);
    let got = AtomicUsize::new(0);
    let err: Mutex<Option<io::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let item = queue.lock().unwrap().pop();
                let Some((i, piece)) = item else { return };
                match read_window(t, off + (i * PIECE) as u64, piece) {
                    Ok(n) => {
                        got.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        *err.lock().unwrap() = Some(e);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = err.into_inner().unwrap() {
        return Err(e);
    }
    Ok(got.into_inner())
}

/// The shard files of a model directory (`*.safetensors`, sorted), or the path itself when it
/// is a file.
pub fn expand_inputs(paths: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|q| q.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            v.sort();
            if v.is_empty() {
                return Err(io::Error::other(format!(
                    "{}: no *.safetensors files",
                    p.display()
                )));
            }
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_rounds_to_4096() {
        assert_eq!(widen(0, 4096), (0, 4096));
        assert_eq!(widen(1, 4096), (0, 8192));
        assert_eq!(widen(5000, EXPERT_BYTES), (4096, 17_555_456));
        // The widened window always fits the engine's slot stride (FORMATS.md §6).
        for off in [0u64, 1, 4095, 4097, 123_456_789] {
            let (lo, hi) = widen(off, EXPERT_BYTES);
            assert!(hi - lo <= EXPERT_BYTES + 8192);
        }
    }

    #[test]
    fn expert_batches_are_sorted_distinct_and_inside_one_span() {
        let dir = std::env::temp_dir().join(format!("k3-bench-batches-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.bin");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(10 * EXPERT_BYTES).unwrap();
        let t = vec![open_target(&path).unwrap()];
        let req = expert_batches(&t, 5, 8, 3, 7);
        assert_eq!(req.len(), 15);
        for b in req.chunks(3) {
            assert!(b.windows(2).all(|w| w[0].1 < w[1].1), "{b:?}");
            let lo = b[0].1 - (b[0].1 % ALIGN);
            assert!(b
                .iter()
                .all(|&(i, o)| i == 0 && o + EXPERT_BYTES <= lo + 8 * EXPERT_BYTES + ALIGN));
            assert!(b.iter().all(|&(_, o)| (o - b[0].1) % EXPERT_BYTES == 0));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn aligned_buffers() {
        for len in [1usize, 4096, 10_000] {
            let mut b = AlignedBuf::new(len);
            let s = b.as_mut_slice();
            assert_eq!(s.as_ptr() as usize % 4096, 0);
            assert!(s.len() >= len && s.len() % 4096 == 0);
        }
    }

    #[test]
    fn reads_a_file_in_every_pattern() {
        let dir = std::env::temp_dir().join(format!("k3-bench-device-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.bin");
        let size = 2 * EXPERT_BYTES as usize + 12_345;
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let t = vec![open_target(&path).unwrap()];
        let req = random_requests(&t, 5, 1);
        assert!(req
            .iter()
            .all(|&(i, o)| i == 0 && o + EXPERT_BYTES <= size as u64));
        let m = random_expert(&t, &req, 3, None).unwrap();
        assert_eq!(m.reads, 5);
        assert!(m.bytes >= 5 * EXPERT_BYTES);
        let m = sequential_layer(&t, 8 << 20, u64::MAX, 0, None).unwrap();
        assert_eq!(m.bytes, size as u64);
        let m = sequential_layer(&t, 40 << 20, u64::MAX, 4, None).unwrap();
        assert_eq!(m.bytes, size as u64);
        // The bytes arrive intact through the aligned windows.
        let mut buf = AlignedBuf::new(8192 + 4096);
        let (lo, hi) = widen(5000, 4000);
        let n = (hi - lo) as usize;
        read_window(&t[0], lo, &mut buf.as_mut_slice()[..n]).unwrap();
        let pad = (5000 - lo) as usize;
        assert_eq!(buf.as_mut_slice()[pad..pad + 4000], data[5000..9000]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
