//! The NEON path's MXFP4 products (MODEL.md §5.2, FORMATS.md §5): the 16 nibble codes of a
//! group decoded to exact f64 values by table look-ups of the scale's E2M1 row, dotted with
//! the x row in the canonical 16-lane order, one row at a time (decode) or one decoded row
//! reused for every position (prefill).

use super::*;

/// The 16 nibble codes of 8 packed bytes → exact f64 element values (columns in order), via
/// table look-ups of the top 16 bits of each value (`tab_lo`/`tab_hi`: low and high bytes of
/// the scale's `E2M1_SCALED_TOP16` row).
///
/// # Safety: the CPU supports NEON.
#[inline(always)]
unsafe fn decode16(codes: uint8x16_t, tab_lo: uint8x16_t, tab_hi: uint8x16_t) -> [float64x2_t; 8] {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let lo = vqtbl1q_u8(tab_lo, codes);
        let hi = vqtbl1q_u8(tab_hi, codes);
        let w0 = vreinterpretq_u16_u8(vzip1q_u8(lo, hi)); // top words of columns 0–7
        let w1 = vreinterpretq_u16_u8(vzip2q_u8(lo, hi)); // columns 8–15
        let mut out = [vdupq_n_f64(0.0); 8];
        for (h, w) in [w0, w1].into_iter().enumerate() {
            let a = vshll_n_u16::<16>(vget_low_u16(w)); // columns 0–3 of this half, << 16
            let b = vshll_high_n_u16::<16>(w); // columns 4–7
            out[4 * h] = vreinterpretq_f64_u64(vshll_n_u32::<32>(vget_low_u32(a)));
            out[4 * h + 1] = vreinterpretq_f64_u64(vshll_high_n_u32::<32>(a));
            out[4 * h + 2] = vreinterpretq_f64_u64(vshll_n_u32::<32>(vget_low_u32(b)));
            out[4 * h + 3] = vreinterpretq_f64_u64(vshll_high_n_u32::<32>(b));
        }
        out
    }
}

/// One group (32 columns, 16 packed bytes): the codes of columns 0–15 and 16–31.
///
/// # Safety: the CPU supports NEON; each pointer is valid for the elements read or written
/// (the vector width or the count given), any alignment.
#[inline(always)]
unsafe fn group_codes(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let v = vld1q_u8(p);
        let lo = vandq_u8(v, vdupq_n_u8(15));
        let hi = vshrq_n_u8::<4>(v);
        (vzip1q_u8(lo, hi), vzip2q_u8(lo, hi))
    }
}

/// # Safety: the CPU supports NEON.
#[inline(always)]
unsafe fn scale_tables(s: u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let t = vld2q_u8(E2M1_SCALED_TOP16[s as usize].as_ptr() as *const u8);
        (t.0, t.1)
    }
}

/// `dot` of one MXFP4 row with x: column c's exact product goes into lane c mod 16.
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot_mxfp4_row(packed: &[u8], scales: &[u8], x: &[f32]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut acc = acc_zero();
        let px = x.as_ptr();
        for (g, &s) in scales.iter().enumerate() {
            let (tl, th) = scale_tables(s);
            let (c0, c1) = group_codes(packed.as_ptr().add(g * GROUP / 2));
            acc_block(&mut acc, &decode16(c0, tl, th), px.add(g * GROUP));
            acc_block(&mut acc, &decode16(c1, tl, th), px.add(g * GROUP + 16));
        }
        reduce16(&acc_lanes(&acc))
    }
}

/// [`dot_mxfp4_row`] with x given widened to f64.
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[inline(always)]
unsafe fn dot_mxfp4_row_x64(packed: &[u8], scales: &[u8], x: &[f64]) -> f64 {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let mut acc = acc_zero();
        let px = x.as_ptr();
        for (g, &s) in scales.iter().enumerate() {
            let (tl, th) = scale_tables(s);
            let (c0, c1) = group_codes(packed.as_ptr().add(g * GROUP / 2));
            acc_block64(&mut acc, &decode16(c0, tl, th), px.add(g * GROUP));
            acc_block64(&mut acc, &decode16(c1, tl, th), px.add(g * GROUP + 16));
        }
        reduce16(&acc_lanes(&acc))
    }
}

/// Appends x widened to f64 for [`matvec_mxfp4`] (column order).
///
/// # Safety: the CPU supports NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn prep_x_mxfp4(x: &[f32], out: &mut Vec<f64>) {
    out.extend(x.iter().map(|&v| v as f64));
}

/// MXFP4 matrix-vector block (T = 1): packed \[nr, cols/2\], scales \[nr, cols/32\], x64 from
/// [`prep_x_mxfp4`] → out \[nr\].
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn matvec_mxfp4(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    x64: &[f64],
    out: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let (pb, sb) = (cols / 2, cols / GROUP);
        for (r, o) in out.iter_mut().enumerate() {
            *o = dot_mxfp4_row_x64(
                &packed[r * pb..(r + 1) * pb],
                &scales[r * sb..(r + 1) * sb],
                x64,
            ) as f32;
        }
    }
}

/// MXFP4 block: packed \[nr, cols/2\], scales \[nr, cols/32\], x \[T, cols\] → out \[T, nr\].
///
/// # Safety: the CPU supports NEON; the slice lengths are those `Kernels` checks (the
/// scalar twin's contract), so every index used is in bounds; any alignment.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn matmul_mxfp4(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    x: &[f32],
    out: &mut [f32],
) {
    // SAFETY: this function's `# Safety` contract is the caller's promise.
    unsafe {
        let (pb, sb) = (cols / 2, cols / GROUP);
        let nr = packed.len() / pb;
        let t_n = x.len() / cols;
        if t_n == 1 {
            for r in 0..nr {
                out[r] = dot_mxfp4_row(
                    &packed[r * pb..(r + 1) * pb],
                    &scales[r * sb..(r + 1) * sb],
                    x,
                ) as f32;
            }
            return;
        }
        // Several positions: the portable tiled product (each 32-column block's E8M0 scale
        // widened once per 32 positions; two-lane accumulator groups, one NEON register each).
        crate::scalar::matmul_mxfp4(packed, scales, cols, x, out);
    }
}
