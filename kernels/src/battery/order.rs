//! Inputs that make the order of a batched product's additions visible (issue 23): a product
//! that adds its exact products in any order other than MODEL.md §5.2's — another column
//! order within a lane, a column in the wrong lane, chunks or register passes out of order —
//! gives other bits on these inputs.
//!
//! Every lane j of every (row, position) gets a huge product ±B_j at columns j, 16·31 + j
//! (cancelling the first exactly), 16·32 + j and 16·61 + j (cancelling again), so the small
//! products in between are rounded at the huge magnitude (ulp(2^60) = 2^8) and lost, while
//! those after a cancellation are kept: moving a small product across a cancellation
//! changes the lane. From column 16·40 on, lanes 0–3 and 8–11 hold ±F (`LASTING`), which
//! only the reduction tree's own pairing of the lanes cancels last. These columns straddle chunk boundaries of every kernel (AVX2 chunks of
//! 480 columns, tiles of 256 or 512). B_j = 2^(44 + j) scaled per position, so the lanes
//! differ in magnitude and the reduction tree's order shows as well; the huge values sit in
//! x (exact in fp32), with weights of exactly 1 at those columns (BF16 0x3f80; MXFP4 code 2
//! with scale 127).

use super::inputs::{bf16_of, Kind, Rng};

/// Columns (mod 16 = the lane) of the huge products: (column base, sign).
const HUGE: [(usize, f32); 4] = [(0, 1.0), (16 * 31, -1.0), (16 * 32, 1.0), (16 * 61, -1.0)];

/// The huge x value of lane j at position t, times `sign`.
fn huge(j: usize, t: usize, sign: f32) -> f32 {
    let s = if t % 2 == 0 { sign } else { -sign };
    s * (2.0f32).powi(44 + j as i32) * (1.0 + (t % 5) as f32 / 8.0)
}

/// x \[T, cols\] with the huge values of every lane and ordinary values elsewhere.
fn x_order(r: &mut Rng, cols: usize, t_n: usize) -> Vec<f32> {
    let mut x = r.vec(t_n * cols, Kind::Normal);
    for t in 0..t_n {
        for j in (0..16).filter(|j| j % 8 < 4) {
            if LASTING + j < cols {
                x[t * cols + LASTING + j] = lasting(j, t);
            }
        }
        for &(base, sign) in &HUGE {
            for j in 0..16 {
                if base + j < cols {
                    x[t * cols + base + j] = huge(j, t, sign);
                }
            }
        }
    }
    x
}

/// Column base of the lasting huge products: lanes 0–3 get +F, lanes 8–11 get −F of the same
/// magnitude, so that the reduction tree's b_j = (acc[j] + acc[j+4]) + (acc[j+8] + acc[j+12])
/// rounds the small lanes 4–7 and 12–15 at F's magnitude, and any other pairing of the lanes
/// (a register pass or lane group out of place) cancels F first and keeps them exactly.
const LASTING: usize = 16 * 40;

/// The lasting huge x value of lane j (0–3 or 8–11) at position t.
fn lasting(j: usize, t: usize) -> f32 {
    let m = (2.0f32).powi(50) * (1.0 + (t % 5) as f32 / 8.0) * (1.0 + (j % 4) as f32 / 16.0);
    if j < 8 {
        m
    } else {
        -m
    }
}

/// Whether column c carries a huge product.
fn is_huge(c: usize) -> bool {
    HUGE.iter().any(|&(b, _)| (b..b + 16).contains(&c))
        || ((LASTING..LASTING + 16).contains(&c) && (c % 16) % 8 < 4)
}

/// BF16 weights \[rows, cols\] and x \[T, cols\] of the order battery (cols ≥ 992 to hold
/// every cancellation; any cols works).
pub fn order_case_bf16(rows: usize, cols: usize, t_n: usize, seed: u64) -> (Vec<u16>, Vec<f32>) {
    let mut r = Rng(seed);
    let mut w: Vec<u16> = r
        .vec(rows * cols, Kind::Normal)
        .iter()
        .map(|&v| bf16_of(v))
        .collect();
    for row in 0..rows {
        for c in (0..cols).filter(|&c| is_huge(c)) {
            w[row * cols + c] = 0x3f80;
        }
    }
    (w, x_order(&mut r, cols, t_n))
}

/// MXFP4 weights (packed \[rows, cols/2\], scales \[rows, cols/32\]) and x \[T, cols\] of the
/// order battery (cols a multiple of 32).
pub fn order_case_mxfp4(
    rows: usize,
    cols: usize,
    t_n: usize,
    seed: u64,
) -> (Vec<u8>, Vec<u8>, Vec<f32>) {
    let mut r = Rng(seed);
    let mut packed: Vec<u8> = (0..rows * cols / 2).map(|_| r.next() as u8).collect();
    let mut scales: Vec<u8> = (0..rows * cols / 32)
        .map(|_| 118 + (r.next() % 18) as u8)
        .collect();
    for row in 0..rows {
        for c in (0..cols).filter(|&c| is_huge(c)) {
            scales[(row * cols + c) / 32] = 127;
            let b = &mut packed[(row * cols + c) / 2];
            // E2M1 code 2 is +1.0: the low nibble is the even column.
            *b = if c % 2 == 0 {
                (*b & 0xf0) | 2
            } else {
                (*b & 0x0f) | 0x20
            };
        }
    }
    (packed, scales, x_order(&mut r, cols, t_n))
}
