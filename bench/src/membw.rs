//! Memory bandwidth as the kernels see it: a streaming read of a buffer much larger than the
//! last-level cache, split over threads, best and median of several repetitions. The kernel
//! benchmarks report weight bytes per second as a ratio of this figure, measured in the same
//! run (ENGINE.md §7).

use std::time::Instant;

/// A streaming-read measurement.
#[derive(Debug, Clone, Copy)]
pub struct MemBw {
    /// Threads reading (each a contiguous share of the buffer).
    pub threads: usize,
    /// Bytes read per repetition (the whole buffer).
    pub bytes: usize,
    /// Repetitions timed (after one untimed warm-up).
    pub reps: usize,
    /// Best repetition, bytes per second.
    pub best_bytes_per_s: f64,
    /// Median repetition, bytes per second.
    pub median_bytes_per_s: f64,
}

/// A buffer for [`measure`]: `bytes` rounded down to whole 64-byte lines, every page written
/// (so the measurement reads memory, not the zero page).
pub fn buffer(bytes: usize) -> Vec<u64> {
    let words = bytes / 64 * 8;
    (0..words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect()
}

/// Reads `buf` once per repetition with `threads` threads (scoped threads, each XOR-folding
/// its contiguous share with independent accumulators so the loop streams at load
/// throughput) and returns the best and median rates.
///
/// Panics if `threads` or `reps` is 0.
pub fn measure(buf: &[u64], threads: usize, reps: usize) -> MemBw {
    assert!(
        threads > 0 && reps > 0,
        "membw::measure: threads {threads}, reps {reps}"
    );
    let share = buf.len().div_ceil(threads);
    let run = || {
        let t0 = Instant::now();
        let folded = std::thread::scope(|s| {
            let hs: Vec<_> = buf
                .chunks(share)
                .map(|part| s.spawn(move || fold(part)))
                .collect();
            hs.into_iter()
                .fold(0u64, |a, h| a ^ h.join().expect("membw reader"))
        });
        std::hint::black_box(folded);
        t0.elapsed().as_secs_f64()
    };
    run(); // warm-up: page tables, frequency
    let mut times: Vec<f64> = (0..reps).map(|_| run()).collect();
    times.sort_by(|a, b| a.total_cmp(b));
    let bytes = std::mem::size_of_val(buf);
    MemBw {
        threads,
        bytes,
        reps,
        best_bytes_per_s: bytes as f64 / times[0],
        median_bytes_per_s: bytes as f64 / times[reps / 2],
    }
}

fn fold(part: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = part.chunks_exact(8);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a ^= x;
        }
    }
    for (a, &x) in acc.iter_mut().zip(it.remainder()) {
        *a ^= x;
    }
    acc.iter().fold(0, |a, &x| a ^ x)
}

/// Size of the largest CPU cache of cpu0 in bytes (the last-level cache), from sysfs.
pub fn llc_bytes() -> Option<usize> {
    let mut best = None;
    for i in 0..8 {
        let base = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let Ok(size) = std::fs::read_to_string(format!("{base}/size")) else {
            continue;
        };
        let s = size.trim();
        let (num, mul) = match s.chars().last() {
            Some('K') => (&s[..s.len() - 1], 1024),
            Some('M') => (&s[..s.len() - 1], 1024 * 1024),
            Some('G') => (&s[..s.len() - 1], 1024 * 1024 * 1024),
            _ => (s, 1),
        };
        if let Ok(n) = num.parse::<usize>() {
            best = best.max(Some(n * mul));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_something_positive() {
        let b = buffer(1 << 20);
        let m = measure(&b, 2, 3);
        assert_eq!(m.bytes, 1 << 20);
        assert!(m.best_bytes_per_s >= m.median_bytes_per_s && m.median_bytes_per_s > 0.0);
    }
}
