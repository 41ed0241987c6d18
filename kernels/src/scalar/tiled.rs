//! The scalar path's products over several positions (prefill): the AVX2 path's tiling
//! (`x86_64::avx2::tiled`) in portable Rust, with accumulator groups of two lanes (one SSE2 or
//! NEON register when the compiler vectorises the pairs; two f64 otherwise).
//!
//! Positions run in groups of at most `TB`, the inner dimension in chunks of `KC` columns;
//! per chunk the x of every position of the group and each quad of weight rows are widened
//! once (MXFP4: each 32-column block's E8M0 scale widened once into its 16 E2M1 values and
//! used for every position), stored lane-group major: of each 16-column block, the two
//! columns of lane group g go to segment g. MODEL.md §5.2 orders each accumulator only
//! along its own columns, so lane group g of a (row, position) runs over all of its columns
//! of the chunk before group g + 1: 4 rows × 2 positions per register block. Chunks are
//! zero-padded to whole 16-column blocks (0 × 0 = +0 leaves an accumulator unchanged).

use crate::mxfp4::{e8m0_scale, E2M1, GROUP};
use crate::num::{bf16_to_f32, reduce16, DOT_LANES};

/// Lanes per accumulator group.
const SG: usize = 2;
/// Accumulator groups per 16 columns.
const GROUPS: usize = DOT_LANES / SG;
/// Columns per chunk (a multiple of 32).
const KC: usize = 480;
/// Positions per pass over the weights.
const TB: usize = 32;
/// Rows of the register block.
const RB: usize = 4;
/// Positions of the register block.
const PB: usize = 2;

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

/// Stores block k (16 values in column order) of a chunk of nb blocks lane-group major.
#[inline(always)]
fn store_block(dst: &mut [f64], nb: usize, k: usize, b: &[f64; DOT_LANES]) {
    for g in 0..GROUPS {
        let o = g * SG * nb + SG * k;
        dst[o..o + SG].copy_from_slice(&b[SG * g..SG * g + SG]);
    }
}

/// Widens columns k0 .. k0 + n of row r into `dst` (lane-group major, zero-padded).
trait WideRows {
    fn widen(&self, r: usize, k0: usize, n: usize, dst: &mut [f64]);
}

struct Bf16Rows<'a> {
    w: &'a [u16],
    cols: usize,
}

impl WideRows for Bf16Rows<'_> {
    #[inline(always)]
    fn widen(&self, r: usize, k0: usize, n: usize, dst: &mut [f64]) {
        let row = &self.w[r * self.cols + k0..r * self.cols + k0 + n];
        let nb = n.div_ceil(DOT_LANES);
        for (k, c) in row.chunks(DOT_LANES).enumerate() {
            let mut b = [0.0f64; DOT_LANES];
            for (o, &v) in b.iter_mut().zip(c) {
                *o = bf16_to_f32(v) as f64;
            }
            store_block(dst, nb, k, &b);
        }
    }
}

struct Mxfp4Rows<'a> {
    packed: &'a [u8],
    scales: &'a [u8],
    cols: usize,
}

impl WideRows for Mxfp4Rows<'_> {
    #[inline(always)]
    fn widen(&self, r: usize, k0: usize, n: usize, dst: &mut [f64]) {
        // Rows have a multiple of 32 columns and chunks start at multiples of 32.
        let base = r * self.cols + k0;
        let bytes = &self.packed[base / 2..(base + n) / 2];
        let scales = &self.scales[base / GROUP..(base + n) / GROUP];
        let nb = n / DOT_LANES;
        for (g, (&s, gb)) in scales.iter().zip(bytes.chunks_exact(GROUP / 2)).enumerate() {
            let scale = e8m0_scale(s);
            let mut lut = [0.0f64; 16];
            for (code, v) in lut.iter_mut().enumerate() {
                *v = E2M1[code] as f64 * scale;
            }
            for (h, hb) in gb.chunks_exact(DOT_LANES / 2).enumerate() {
                let mut b = [0.0f64; DOT_LANES];
                for (j, &byte) in hb.iter().enumerate() {
                    b[2 * j] = lut[(byte & 15) as usize];
                    b[2 * j + 1] = lut[(byte >> 4) as usize];
                }
                store_block(dst, nb, 2 * g + h, &b);
            }
        }
    }
}

/// The register block: NR rows × NP positions, accumulator group of each pair over its
/// columns of the chunk. `w[r]`, `x[p]` are the pairs' segments (equal lengths), `acc[r][p]`
/// the accumulator groups.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn block<const NR: usize, const NP: usize>(
    w: [&[f64]; NR],
    x: [&[f64]; NP],
    acc: &mut [[[f64; SG]; NP]; NR],
) {
    let n = w[0].len();
    let w: [&[f64]; NR] = std::array::from_fn(|r| &w[r][..n]);
    let x: [&[f64]; NP] = std::array::from_fn(|p| &x[p][..n]);
    let mut a = *acc;
    let mut i = 0;
    while i + SG <= n {
        let wv: [[f64; SG]; NR] = std::array::from_fn(|r| [w[r][i], w[r][i + 1]]);
        for p in 0..NP {
            let xv = [x[p][i], x[p][i + 1]];
            for r in 0..NR {
                for l in 0..SG {
                    a[r][p][l] += wv[r][l] * xv[l];
                }
            }
        }
        i += SG;
    }
    *acc = a;
}

/// Runs [`block`] for the `NR` rows at `ws` (row stride `st`) over every position of the
/// group and every accumulator group.
fn rows_pass<const NR: usize>(
    ws: &[f64],
    xs: &[f64],
    st: usize,
    nb: usize,
    t_n: usize,
    acc: &mut [f64],
) {
    let sq = SG * nb;
    let ar = t_n * DOT_LANES;
    for g in 0..GROUPS {
        let w: [&[f64]; NR] = std::array::from_fn(|r| &ws[r * st + g * sq..r * st + g * sq + sq]);
        let mut t = 0;
        while t < t_n {
            let np = PB.min(t_n - t);
            let ld = |acc: &[f64], r: usize, p: usize| -> [f64; SG] {
                let o = r * ar + (t + p) * DOT_LANES + g * SG;
                [acc[o], acc[o + 1]]
            };
            if np == PB {
                let x: [&[f64]; PB] =
                    std::array::from_fn(|p| &xs[(t + p) * st + g * sq..(t + p) * st + g * sq + sq]);
                let mut a: [[[f64; SG]; PB]; NR] =
                    std::array::from_fn(|r| std::array::from_fn(|p| ld(acc, r, p)));
                block::<NR, PB>(w, x, &mut a);
                for (r, ar_) in a.iter().enumerate() {
                    for (p, v) in ar_.iter().enumerate() {
                        let o = r * ar + (t + p) * DOT_LANES + g * SG;
                        acc[o..o + SG].copy_from_slice(v);
                    }
                }
            } else {
                let x: [&[f64]; 1] = [&xs[t * st + g * sq..t * st + g * sq + sq]];
                let mut a: [[[f64; SG]; 1]; NR] = std::array::from_fn(|r| [ld(acc, r, 0)]);
                block::<NR, 1>(w, x, &mut a);
                for (r, ar_) in a.iter().enumerate() {
                    let o = r * ar + t * DOT_LANES + g * SG;
                    acc[o..o + SG].copy_from_slice(&ar_[0]);
                }
            }
            t += np;
        }
    }
}

/// The tiled product of a block of `nr` rows: x \[T, cols\] → out \[T, nr\], in groups of at
/// most `TB` positions (each output is its own (row, position) sum: no bit depends on it).
fn matmul_tiled<W: WideRows>(src: &W, nr: usize, cols: usize, x: &[f32], out: &mut [f32]) {
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

fn matmul_group<W: WideRows>(src: &W, nr: usize, cols: usize, x: &[f32], out: &mut [f32]) {
    let t_n = x.len() / cols;
    // One cache line of padding between rows and positions (see the AVX2 twin).
    let st = KC + 8;
    let mut s = TILE.take();
    s.acc.clear();
    s.acc.resize(nr * t_n * DOT_LANES, 0.0);
    s.x.resize(t_n * st, 0.0);
    s.w.resize(RB * st, 0.0);
    let ar = t_n * DOT_LANES;
    let mut k0 = 0;
    while k0 < cols {
        let n = KC.min(cols - k0);
        let nb = n.div_ceil(DOT_LANES);
        for t in 0..t_n {
            let src_x = &x[t * cols + k0..t * cols + k0 + n];
            let dst = &mut s.x[t * st..t * st + DOT_LANES * nb];
            for (k, c) in src_x.chunks(DOT_LANES).enumerate() {
                let mut b = [0.0f64; DOT_LANES];
                for (o, &v) in b.iter_mut().zip(c) {
                    *o = v as f64;
                }
                store_block(dst, nb, k, &b);
            }
        }
        let mut r = 0;
        while r < nr {
            let m = RB.min(nr - r);
            for i in 0..m {
                src.widen(r + i, k0, n, &mut s.w[i * st..i * st + DOT_LANES * nb]);
            }
            let a = &mut s.acc[r * ar..(r + m) * ar];
            match m {
                4 => rows_pass::<4>(&s.w, &s.x, st, nb, t_n, a),
                3 => rows_pass::<3>(&s.w, &s.x, st, nb, t_n, a),
                2 => rows_pass::<2>(&s.w, &s.x, st, nb, t_n, a),
                _ => rows_pass::<1>(&s.w, &s.x, st, nb, t_n, a),
            }
            r += m;
        }
        k0 += n;
    }
    for r in 0..nr {
        for t in 0..t_n {
            let o = r * ar + t * DOT_LANES;
            let lanes: &[f64; DOT_LANES] = s.acc[o..o + DOT_LANES].try_into().expect("16 lanes");
            out[t * nr + r] = reduce16(lanes) as f32;
        }
    }
    TILE.set(s);
}

/// Matrix block: w \[nr, cols\] BF16, x \[T, cols\] → out \[T, nr\], out\[t\]\[r\] =
/// rnd(dot(w\[r\], x\[t\])), tiled (every weight widened once per group of positions).
pub(crate) fn matmul_bf16(w: &[u16], cols: usize, x: &[f32], out: &mut [f32]) {
    let nr = w.len() / cols;
    matmul_tiled(&Bf16Rows { w, cols }, nr, cols, x, out);
}

/// MXFP4 matrix block: packed \[nr, cols/2\], scales \[nr, cols/32\]; layout as
/// [`matmul_bf16`], tiled (every element decoded once per group of positions).
pub(crate) fn matmul_mxfp4(packed: &[u8], scales: &[u8], cols: usize, x: &[f32], out: &mut [f32]) {
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
