//! The AVX2 path's products over several positions (prefill): tiled and register-blocked.
//!
//! A block of rows times T positions, in groups of at most `TB` positions. The inner
//! dimension is cut into chunks of `KC` columns. For each chunk the x of every position of
//! the group is widened once and each quad of weight rows is widened once (4·KC values,
//! L1-sized) and reused for every position of the group: every weight is read from memory and
//! converted once per group, and each MXFP4 block's E8M0 scale is looked up once per group
//! (its signed E2M1 table row then serves both 16-column halves of the block).
//!
//! Widened rows and x are stored *lane-group major*: of each 16-column block, the 4 columns
//! held by accumulator register q (q = 0..4) go to segment q of the chunk. MODEL.md §5.2
//! orders each of the 16 accumulators only along its own columns (i ≡ j mod 16, increasing
//! i), so register q of a (row, position) may run over all of its columns of the chunk
//! before register q + 1 starts: the micro-kernel keeps one register per (row, position)
//! live, 4 rows × 2 positions at a time (8 multiplies for 6 loads). Its
//! accumulators live in a scratch array between register passes and chunks, and carry
//! across chunks in increasing column order (exactly what §5.2 allows). Chunks are
//! zero-padded to whole 16-column blocks: a padded product is 0 × 0 = +0, and adding +0
//! leaves an accumulator unchanged (it starts at +0 and can never become −0).

use super::*;

/// Rows of the register block.
const RB: usize = 4;
/// Positions of the register block.
const PB: usize = 2;
/// Positions per pass over the weights: the accumulators of a 64-row task (64 × TB × 128
/// bytes) and the widened x chunk stay in L2; each weight is widened once per pass.
const TB: usize = 32;
/// Accumulator registers per 16 columns (4 × f64 each).
const GROUPS: usize = DOT_LANES / 4;

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

/// Columns per chunk (a multiple of 32; with the one-line padding of `matmul_group` the four
/// widened rows fit the scratch bound of `ops::thread_scratch_bytes`). Long chunks mean
/// fewer accumulator round trips per register pass; the widened x of a group (32 positions,
/// 120 KiB) stays in L2. Tuned on the development machine (bench/results); any value gives
/// the same bits.
const KC: usize = 480;

/// A weight matrix block whose rows can be widened to f64 one chunk at a time.
trait WideRows {
    /// Whether widened rows and x are in `MX_PERM` order per 16 columns.
    const PERMUTED: bool;
    /// Writes columns k0 .. k0 + n of row r widened to f64 at `dst` in lane-group-major
    /// order: column k0 + 16k + c (c the column's place in the block's order: c itself, or
    /// its `MX_PERM` index) goes to `dst[(c / 4) * 4 * nb + 4k + c % 4]`, nb = ⌈n / 16⌉;
    /// the padding of a last partial block is +0.
    ///
    /// # Safety: the CPU supports AVX2; `dst` is valid for 16·nb elements, any alignment;
    /// the columns read lie in the row.
    unsafe fn widen(&self, r: usize, k0: usize, n: usize, dst: *mut f64);
    /// Requests the bytes of columns k0 .. k0 + n of row r (the rows after the current
    /// quad are not adjacent to it in memory, so the hardware prefetcher misses their start).
    ///
    /// # Safety: the CPU supports AVX2.
    unsafe fn prefetch(&self, r: usize, k0: usize, n: usize);
}

/// Prefetches `bytes` bytes from `p` into L1, one request per 64-byte line.
///
/// # Safety: the CPU supports AVX2 (a prefetch never faults, whatever the address).
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

/// Stores the four registers of block k of a chunk in lane-group-major order.
///
/// # Safety: the CPU supports AVX2; `dst` is valid for 16·nb elements, k < nb.
#[inline(always)]
unsafe fn store_block(dst: *mut f64, nb: usize, k: usize, v: [__m256d; GROUPS]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        for (q, v) in v.into_iter().enumerate() {
            _mm256_storeu_pd(dst.add(q * 4 * nb + 4 * k), v);
        }
    }
}

/// Stores a block given as 16 f64 in the block's order, lane-group-major.
///
/// # Safety: as [`store_block`].
#[inline(always)]
unsafe fn store_block16(dst: *mut f64, nb: usize, k: usize, b: &[f64; DOT_LANES]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let p = b.as_ptr();
        let v = [
            _mm256_loadu_pd(p),
            _mm256_loadu_pd(p.add(4)),
            _mm256_loadu_pd(p.add(8)),
            _mm256_loadu_pd(p.add(12)),
        ];
        store_block(dst, nb, k, v);
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
            prefetch_bytes(
                self.w.as_ptr().wrapping_add(r * self.cols + k0) as *const u8,
                2 * n,
            );
        }
    }
    #[inline(always)]
    unsafe fn widen(&self, r: usize, k0: usize, n: usize, dst: *mut f64) {
        // SAFETY: this function's `# Safety` contract is the caller's promise.
        unsafe {
            let p = self.w.as_ptr().add(r * self.cols + k0);
            let nb = n.div_ceil(DOT_LANES);
            let whole = n / DOT_LANES;
            for k in 0..whole {
                let (a, b) = bf16x8(p.add(16 * k));
                let (c, d) = bf16x8(p.add(16 * k + 8));
                store_block(dst, nb, k, [a, b, c, d]);
            }
            if whole < nb {
                let mut b = [0.0f64; DOT_LANES];
                for (i, v) in b.iter_mut().enumerate().take(n - 16 * whole) {
                    *v = bf16_to_f32(*p.add(16 * whole + i)) as f64;
                }
                store_block16(dst, nb, whole, &b);
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
            prefetch_bytes(
                self.packed.as_ptr().wrapping_add((r * self.cols + k0) / 2),
                n / 2,
            );
            prefetch_bytes(
                self.scales
                    .as_ptr()
                    .wrapping_add((r * self.cols + k0) / GROUP),
                n / GROUP,
            );
        }
    }
    #[inline(always)]
    unsafe fn widen(&self, r: usize, k0: usize, n: usize, dst: *mut f64) {
        // SAFETY: this function's `# Safety` contract is the caller's promise (MXFP4 rows
        // have a multiple of 32 columns and chunks start at multiples of 32: whole blocks).
        unsafe {
            let pp = self.packed.as_ptr().add((r * self.cols + k0) / 2);
            let ps = self.scales.as_ptr().add((r * self.cols + k0) / GROUP);
            let nb = n / DOT_LANES;
            let mut k = 0;
            while k < nb {
                // One scale per 32 columns: its table row is loaded once for both blocks.
                let table = mx_table(*ps.add(k / 2));
                store_block(dst, nb, k, mx_decode16(pp.add(8 * k), table));
                store_block(dst, nb, k + 1, mx_decode16(pp.add(8 * k + 8), table));
                k += 2;
            }
        }
    }
}

/// The register block: for NR ≤ 4 rows and NP ≤ 2 positions, accumulator register q of each
/// (row, position) runs over its nb column quads of the chunk in increasing order.
/// `w` is row 0's segment q (rows `ws` apart), `x` position 0's segment q (positions `xs`
/// apart), `acc` the (row 0, position 0) accumulator register q (rows `ar`, positions 16
/// apart).
///
/// # Safety: the CPU supports AVX2; every pointer is valid for the elements named above.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn block<const NR: usize, const NP: usize>(
    w: *const f64,
    ws: usize,
    x: *const f64,
    xs: usize,
    nb: usize,
    acc: *mut f64,
    ar: usize,
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut a = [[_mm256_setzero_pd(); NP]; NR];
        for (r, ar_) in a.iter_mut().enumerate() {
            for (p, v) in ar_.iter_mut().enumerate() {
                *v = _mm256_loadu_pd(acc.add(r * ar + p * DOT_LANES));
            }
        }
        for k in 0..nb {
            let mut wv = [_mm256_setzero_pd(); NR];
            for (r, v) in wv.iter_mut().enumerate() {
                *v = _mm256_loadu_pd(w.add(r * ws + 4 * k));
            }
            for p in 0..NP {
                let xv = _mm256_loadu_pd(x.add(p * xs + 4 * k));
                for r in 0..NR {
                    a[r][p] = _mm256_add_pd(a[r][p], _mm256_mul_pd(wv[r], xv));
                }
            }
        }
        for (r, ar_) in a.iter().enumerate() {
            for (p, v) in ar_.iter().enumerate() {
                _mm256_storeu_pd(acc.add(r * ar + p * DOT_LANES), *v);
            }
        }
    }
}

/// Runs [`block`] for `nr` ≤ 4 rows over all `t_n` positions, two at a time, for every
/// register q. Arguments as [`block`], with `w`, `x` and `acc` at segment / register 0 and
/// `sq` the length of a segment (4·nb).
///
/// # Safety: as [`block`], for every row, position and register.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_pass<const NR: usize>(
    w: *const f64,
    ws: usize,
    x: *const f64,
    xs: usize,
    nb: usize,
    t_n: usize,
    acc: *mut f64,
    ar: usize,
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let sq = 4 * nb;
        for q in 0..GROUPS {
            let (wq, xq, aq) = (w.add(q * sq), x.add(q * sq), acc.add(4 * q));
            let mut t = 0;
            while t + PB <= t_n {
                let (xt, at) = (xq.add(t * xs), aq.add(t * DOT_LANES));
                block::<NR, PB>(wq, ws, xt, xs, nb, at, ar);
                t += PB;
            }
            let (xt, at) = (xq.add(t * xs), aq.add(t * DOT_LANES));
            if t < t_n {
                block::<NR, 1>(wq, ws, xt, xs, nb, at, ar);
            }
        }
    }
}

/// The tiled product of a block of `nr` rows (see above): x \[T, cols\] → out \[T, nr\],
/// in groups of at most `TB` positions (each output is one (row, position) pair's own sum,
/// so the grouping changes no bit).
///
/// # Safety: the CPU supports AVX2; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn matmul_tiled<W: WideRows>(src: &W, nr: usize, cols: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let t_n = x.len() / cols;
        let mut t0 = 0;
        while t0 < t_n {
            let t1 = t_n.min(t0 + TB);
            matmul_group(
                src,
                nr,
                cols,
                &x[t0 * cols..t1 * cols],
                &mut out[t0 * nr..t1 * nr],
            );
            t0 = t1;
        }
    }
}

/// [`matmul_tiled`] for one group of positions.
///
/// # Safety: as [`matmul_tiled`].
#[inline(always)]
unsafe fn matmul_group<W: WideRows>(src: &W, nr: usize, cols: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let t_n = x.len() / cols;
        let kc = KC;
        // Rows and positions are `st` apart in the scratch, one cache line more than a chunk,
        // so that a power-of-two chunk would not put all their streams into the same L1 sets.
        let st = kc + 8;
        let mut s = TILE.take();
        s.acc.clear();
        s.acc.resize(nr * t_n * DOT_LANES, 0.0);
        s.x.resize(t_n * st, 0.0);
        s.w.resize(RB * st, 0.0);
        let (acc, xs, ws) = (s.acc.as_mut_ptr(), s.x.as_mut_ptr(), s.w.as_mut_ptr());
        let ar = t_n * DOT_LANES;
        let mut k0 = 0;
        while k0 < cols {
            let n = kc.min(cols - k0);
            let nb = n.div_ceil(DOT_LANES);
            // x of every position for this chunk, lane-group major, zero-padded.
            for t in 0..t_n {
                let src_x = x.as_ptr().add(t * cols + k0);
                let dst = xs.add(t * st);
                for k in 0..nb {
                    let mut b = [0.0f64; DOT_LANES];
                    let m = DOT_LANES.min(n - 16 * k);
                    if W::PERMUTED {
                        for (o, &c) in b.iter_mut().zip(MX_PERM.iter()) {
                            *o = *src_x.add(16 * k + c) as f64;
                        }
                    } else if m == DOT_LANES {
                        let p = src_x.add(16 * k);
                        store_block(
                            dst,
                            nb,
                            k,
                            [f32x4(p), f32x4(p.add(4)), f32x4(p.add(8)), f32x4(p.add(12))],
                        );
                        continue;
                    } else {
                        for (i, o) in b.iter_mut().enumerate().take(m) {
                            *o = *src_x.add(16 * k + i) as f64;
                        }
                    }
                    store_block16(dst, nb, k, &b);
                }
            }
            let mut r = 0;
            while r < nr {
                let m = RB.min(nr - r);
                for q in r + RB..nr.min(r + 2 * RB) {
                    src.prefetch(q, k0, n);
                }
                for i in 0..m {
                    src.widen(r + i, k0, n, ws.add(i * st));
                }
                let a = acc.add(r * ar);
                match m {
                    4 => rows_pass::<4>(ws, st, xs, st, nb, t_n, a, ar),
                    3 => rows_pass::<3>(ws, st, xs, st, nb, t_n, a, ar),
                    2 => rows_pass::<2>(ws, st, xs, st, nb, t_n, a, ar),
                    _ => rows_pass::<1>(ws, st, xs, st, nb, t_n, a, ar),
                }
                r += m;
            }
            k0 += n;
        }
        for r in 0..nr {
            for t in 0..t_n {
                let l = std::slice::from_raw_parts(acc.add(r * ar + t * DOT_LANES), DOT_LANES);
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
