//! The AVX2 path's products over several positions (prefill): tiled.
//!
//! A block of rows times T positions. The inner dimension is cut into chunks of `kc` columns
//! (a multiple of 32); for each chunk the x of every position is widened once (T·kc values,
//! L2-sized) and each pair of weight rows is widened once (2·kc values, L1-sized) and reused
//! for every position. The 16 accumulators of each (row, position) live in a scratch array
//! and carry across chunks in increasing column order (MODEL.md §5.2 allows exactly this), so
//! every weight is read from memory once per call and converted once per call, and the inner
//! loop is loads, multiplies and adds only. Chunks are zero-padded to whole 16-column blocks:
//! a padded product is 0 × 0 = +0, and adding +0 leaves an accumulator unchanged (it starts
//! at +0 and can never become −0).

use super::*;

/// Scratch of the tiled products, per thread: accumulators, widened x chunk, widened rows.
#[derive(Default)]
struct TileScratch {
    acc: Vec<f64>,
    x: Vec<f64>,
    w: Vec<f64>,
}

thread_local! {
    static TILE: std::cell::Cell<TileScratch> = std::cell::Cell::new(TileScratch::default());
}

/// Columns per chunk for T positions (a multiple of 32). Up to 10 positions the widened x
/// chunk and the two widened rows fit in 24 KiB of L1 together; beyond that x is read from
/// L2 anyway and longer chunks (x chunk about 256 KiB) save accumulator traffic. Tuned on
/// the development machine (bench/results); any value gives the same bits.
fn chunk_cols(t_n: usize) -> usize {
    let t = t_n.max(1);
    if t <= 10 {
        ((24576 / 8 / (t + 2)) & !31).clamp(256, 1024)
    } else {
        ((262144 / 8 / (t + 2)) & !31).clamp(64, 1024)
    }
}

/// A weight matrix block whose rows can be widened to f64 one chunk at a time.
trait WideRows {
    /// Whether widened rows and x are in `MX_PERM` order per 16 columns.
    const PERMUTED: bool;
    /// Writes columns k0 .. k0 + n of row r widened to f64 at `dst` (n a multiple of 16 except
    /// at the end of the row; `dst` has room for n rounded up to 16, which the caller zeroes).
    ///
    /// # Safety: the CPU supports AVX2; each pointer is valid for the elements read or written
    /// (the vector width or the count given), any alignment.
    unsafe fn widen(&self, r: usize, k0: usize, n: usize, dst: *mut f64);
    /// Requests the bytes of columns k0 .. k0 + n of row r (the rows after the current pair
    /// are not adjacent to it in memory, so the hardware prefetcher misses their start).
    ///
    /// # Safety: the CPU supports AVX2.
    unsafe fn prefetch(&self, r: usize, k0: usize, n: usize);
}

/// Prefetches `bytes` bytes from `p` into L1, one request per 64-byte line.
///
/// # Safety: the CPU supports AVX2; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn prefetch_bytes(p: *const u8, bytes: usize) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut o = 0;
        while o < bytes {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8);
            o += 64;
        }
    }
}

struct Bf16Rows<'a> {
    w: &'a [u16],
    cols: usize,
}

impl WideRows for Bf16Rows<'_> {
    const PERMUTED: bool = false;
    #[inline(always)]
    unsafe fn prefetch(&self, r: usize, k0: usize, n: usize) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            prefetch_bytes(self.w.as_ptr().add(r * self.cols + k0) as *const u8, 2 * n);
        }
    }
    #[inline(always)]
    unsafe fn widen(&self, r: usize, k0: usize, n: usize, dst: *mut f64) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let p = self.w.as_ptr().add(r * self.cols + k0);
            let mut i = 0;
            while i + 8 <= n {
                let (a, b) = bf16x8(p.add(i));
                _mm256_storeu_pd(dst.add(i), a);
                _mm256_storeu_pd(dst.add(i + 4), b);
                i += 8;
            }
            while i < n {
                *dst.add(i) = bf16_to_f32(*p.add(i)) as f64;
                i += 1;
            }
        }
    }
}

struct Mxfp4Rows<'a> {
    packed: &'a [u8],
    scales: &'a [u8],
    cols: usize,
}

impl WideRows for Mxfp4Rows<'_> {
    const PERMUTED: bool = true;
    #[inline(always)]
    unsafe fn prefetch(&self, r: usize, k0: usize, n: usize) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            prefetch_bytes(self.packed.as_ptr().add((r * self.cols + k0) / 2), n / 2);
            prefetch_bytes(
                self.scales.as_ptr().add((r * self.cols + k0) / GROUP),
                n / GROUP,
            );
        }
    }
    #[inline(always)]
    unsafe fn widen(&self, r: usize, k0: usize, n: usize, dst: *mut f64) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let pp = self.packed.as_ptr().add(r * self.cols / 2);
            let ps = self.scales.as_ptr().add(r * self.cols / GROUP);
            let mut c = 0;
            while c < n {
                let col = k0 + c;
                let w = mx_decode16(pp.add(col / 2), mx_table(*ps.add(col / GROUP)));
                for (q, v) in w.iter().enumerate() {
                    _mm256_storeu_pd(dst.add(c + 4 * q), *v);
                }
                c += 16;
            }
        }
    }
}

/// Adds the products of two widened weight rows `wa`, `wb` with one widened x chunk `xc`
/// (all `n` long, n a multiple of 16) into the 16-lane accumulators at `acc_a`, `acc_b`.
///
/// # Safety: the CPU supports AVX2; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn acc_pair(
    wa: *const f64,
    wb: *const f64,
    xc: *const f64,
    n: usize,
    acc_a: *mut f64,
    acc_b: *mut f64,
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut a = [
            _mm256_loadu_pd(acc_a),
            _mm256_loadu_pd(acc_a.add(4)),
            _mm256_loadu_pd(acc_a.add(8)),
            _mm256_loadu_pd(acc_a.add(12)),
        ];
        let mut b = [
            _mm256_loadu_pd(acc_b),
            _mm256_loadu_pd(acc_b.add(4)),
            _mm256_loadu_pd(acc_b.add(8)),
            _mm256_loadu_pd(acc_b.add(12)),
        ];
        let mut i = 0;
        while i < n {
            for q in 0..4 {
                let xv = _mm256_loadu_pd(xc.add(i + 4 * q));
                a[q] = _mm256_add_pd(a[q], _mm256_mul_pd(_mm256_loadu_pd(wa.add(i + 4 * q)), xv));
                b[q] = _mm256_add_pd(b[q], _mm256_mul_pd(_mm256_loadu_pd(wb.add(i + 4 * q)), xv));
            }
            i += DOT_LANES;
        }
        for q in 0..4 {
            _mm256_storeu_pd(acc_a.add(4 * q), a[q]);
            _mm256_storeu_pd(acc_b.add(4 * q), b[q]);
        }
    }
}

/// The tiled product of a block of `nr` rows (see above): x \[T, cols\] → out \[T, nr\].
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn matmul_tiled<W: WideRows>(src: &W, nr: usize, cols: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let t_n = x.len() / cols;
        let kc = chunk_cols(t_n);
        let mut s = TILE.take();
        s.acc.clear();
        s.acc.resize(nr * t_n * DOT_LANES, 0.0);
        s.x.resize(t_n * kc, 0.0);
        s.w.resize(2 * kc, 0.0);
        let (acc, xs, ws) = (s.acc.as_mut_ptr(), s.x.as_mut_ptr(), s.w.as_mut_ptr());
        let mut k0 = 0;
        while k0 < cols {
            let n = kc.min(cols - k0);
            let np = n.div_ceil(DOT_LANES) * DOT_LANES;
            // x of every position for this chunk, zero-padded to whole 16-column blocks.
            for t in 0..t_n {
                let src_x = &x[t * cols + k0..t * cols + k0 + n];
                let dst = std::slice::from_raw_parts_mut(xs.add(t * kc), np);
                if W::PERMUTED {
                    for (d, b) in dst
                        .chunks_exact_mut(DOT_LANES)
                        .zip(src_x.chunks_exact(DOT_LANES))
                    {
                        for (o, &c) in d.iter_mut().zip(MX_PERM.iter()) {
                            *o = b[c] as f64;
                        }
                    }
                } else {
                    let mut i = 0;
                    while i + 4 <= n {
                        _mm256_storeu_pd(dst.as_mut_ptr().add(i), f32x4(src_x.as_ptr().add(i)));
                        i += 4;
                    }
                    for j in i..np {
                        dst[j] = if j < n { src_x[j] as f64 } else { 0.0 };
                    }
                }
            }
            let mut r = 0;
            while r < nr {
                let pair = r + 1 < nr;
                for q in r + 2..nr.min(r + 4) {
                    src.prefetch(q, k0, n);
                }
                // Both row buffers are zero-padded to np; a missing second row is all zero.
                src.widen(r, k0, n, ws);
                std::slice::from_raw_parts_mut(ws.add(n), np - n).fill(0.0);
                if pair {
                    src.widen(r + 1, k0, n, ws.add(kc));
                    std::slice::from_raw_parts_mut(ws.add(kc + n), np - n).fill(0.0);
                } else {
                    std::slice::from_raw_parts_mut(ws.add(kc), np).fill(0.0);
                }
                let rb = if pair { r + 1 } else { r };
                for t in 0..t_n {
                    let aa = acc.add((r * t_n + t) * DOT_LANES);
                    let ab = acc.add((rb * t_n + t) * DOT_LANES);
                    if pair {
                        acc_pair(ws, ws.add(kc), xs.add(t * kc), np, aa, ab);
                    } else {
                        // The lone last row: the second accumulator set is a throwaway copy.
                        let mut dummy = [0.0f64; DOT_LANES];
                        acc_pair(ws, ws.add(kc), xs.add(t * kc), np, aa, dummy.as_mut_ptr());
                    }
                }
                r += 2;
            }
            k0 += n;
        }
        for r in 0..nr {
            for t in 0..t_n {
                let l = std::slice::from_raw_parts(acc.add((r * t_n + t) * DOT_LANES), DOT_LANES);
                let mut lanes = [0.0f64; DOT_LANES];
                if W::PERMUTED {
                    for (k, &c) in MX_PERM.iter().enumerate() {
                        lanes[c] = l[k];
                    }
                } else {
                    lanes.copy_from_slice(l);
                }
                out[t * nr + r] = reduce16(&lanes) as f32;
            }
        }
        TILE.set(s);
    }
}

/// Matrix block, several positions: w \[nr, cols\] BF16, x \[T, cols\] → out \[T, nr\], tiled
/// (every weight read and widened once per call).
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matmul_bf16(w: &[u16], cols: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let nr = w.len() / cols;
        matmul_tiled(&Bf16Rows { w, cols }, nr, cols, x, out);
    }
}

/// MXFP4 block, several positions: packed \[nr, cols/2\], scales \[nr, cols/32\], x \[T, cols\]
/// → out \[T, nr\], tiled (every element decoded once per call).
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matmul_mxfp4(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    x: &[f32],
    out: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let nr = packed.len() / (cols / 2);
        matmul_tiled(
            &Mxfp4Rows {
                packed,
                scales,
                cols,
            },
            nr,
            cols,
            x,
            out,
        );
    }
}
