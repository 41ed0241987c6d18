//! MXFP4 matrices (FORMATS.md §5): E2M1 nibbles packed two per byte with one E8M0 scale per
//! 32 consecutive columns of a row. The kernels multiply straight from these bytes; an
//! expert is never dequantised as a whole.

use crate::error::KernelError;

/// Columns per E8M0 scale group (FORMATS.md §5).
pub const GROUP: usize = 32;

/// E2M1 code → value: bit 3 is the sign, bits 0–2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
/// Code 8 is −0.
pub const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// The E8M0 byte that means NaN in the MX specification; the engine refuses it.
pub const E8M0_NAN: u8 = 255;

/// E8M0 scale byte `s` (0…254) → 2^(s − 127) as f64 (exact; s = 0 is 2^−127, not zero).
#[inline(always)]
pub fn e8m0_scale(s: u8) -> f64 {
    debug_assert!(s != E8M0_NAN);
    f64::from_bits(((s as u64) + 1023 - 127) << 52)
}

/// The decoded value of one element, E2M1(code) × 2^(s − 127), exact in f64.
#[inline(always)]
pub fn mxfp4_value(code: u8, scale: u8) -> f64 {
    E2M1[(code & 15) as usize] as f64 * e8m0_scale(scale)
}

/// Finds the first E8M0 scale byte 255 in a scale tensor laid out \[rows, groups_per_row\]
/// and returns its (row, group), both zero-based. `None` when every byte is valid.
///
/// The caller names the tensor: `{tensor}: row {row}, group {group}: E8M0 scale 255 (NaN)`
/// (FORMATS.md §5). Runs at memchr speed; meant to run every time expert bytes are read.
///
/// Panics if `groups_per_row` is 0.
pub fn find_e8m0_nan(scales: &[u8], groups_per_row: usize) -> Option<(usize, usize)> {
    assert!(groups_per_row > 0, "find_e8m0_nan: zero groups per row");
    memchr::memchr(E8M0_NAN, scales).map(|i| (i / groups_per_row, i % groups_per_row))
}

/// A borrowed MXFP4 matrix of logical shape \[rows, cols\]: `packed` is \[rows, cols/2\]
/// (low nibble = even column), `scales` is \[rows, cols/32\] E8M0 bytes (FORMATS.md §5).
///
/// Construction checks the shapes and scans the scales, so a value of this type never holds
/// an E8M0 byte 255.
#[derive(Debug, Clone, Copy)]
pub struct Mxfp4<'a> {
    packed: &'a [u8],
    scales: &'a [u8],
    rows: usize,
    cols: usize,
}

impl<'a> Mxfp4<'a> {
    /// Wraps and validates an MXFP4 matrix. Errors (the caller prefixes the tensor name):
    /// `cols` not a positive multiple of 32; `packed.len() != rows·cols/2`;
    /// `scales.len() != rows·cols/32`; an E8M0 byte 255 (`row R, group G: E8M0 scale 255
    /// (NaN)`).
    pub fn new(
        packed: &'a [u8],
        scales: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Mxfp4<'a>, KernelError> {
        if cols == 0 || cols % GROUP != 0 {
            return Err(KernelError::new(format!(
                "MXFP4 matrix with {cols} columns: expected a positive multiple of {GROUP}"
            )));
        }
        let want_packed = rows.checked_mul(cols / 2);
        if want_packed != Some(packed.len()) {
            return Err(KernelError::new(format!(
                "MXFP4 packed bytes: expected {rows} x {} = {} bytes, found {}",
                cols / 2,
                rows.saturating_mul(cols / 2),
                packed.len()
            )));
        }
        let groups = cols / GROUP;
        if rows.checked_mul(groups) != Some(scales.len()) {
            return Err(KernelError::new(format!(
                "MXFP4 scale bytes: expected {rows} x {groups} = {} bytes, found {}",
                rows.saturating_mul(groups),
                scales.len()
            )));
        }
        if let Some((row, group)) = find_e8m0_nan(scales, groups) {
            return Err(KernelError::new(format!(
                "row {row}, group {group}: E8M0 scale 255 (NaN)"
            )));
        }
        Ok(Mxfp4 {
            packed,
            scales,
            rows,
            cols,
        })
    }

    /// Logical rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Logical columns (input features), a multiple of 32.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The packed bytes, \[rows, cols/2\].
    pub fn packed(&self) -> &'a [u8] {
        self.packed
    }

    /// The E8M0 scale bytes, \[rows, cols/32\].
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }

    /// Rows `r0 .. r0 + n` as a matrix of their own.
    ///
    /// Panics if the range exceeds the matrix.
    pub fn row_block(&self, r0: usize, n: usize) -> Mxfp4<'a> {
        assert!(
            r0 <= self.rows && n <= self.rows - r0,
            "Mxfp4::row_block range"
        );
        let pb = self.cols / 2;
        let sb = self.cols / GROUP;
        Mxfp4 {
            packed: &self.packed[r0 * pb..(r0 + n) * pb],
            scales: &self.scales[r0 * sb..(r0 + n) * sb],
            rows: n,
            cols: self.cols,
        }
    }

    /// The decoded element W\[r\]\[c\] (exact, f64). For tests and diagnostics; the kernels
    /// never build a dequantised matrix.
    ///
    /// Panics if (r, c) is out of range.
    pub fn value(&self, r: usize, c: usize) -> f64 {
        assert!(r < self.rows && c < self.cols, "Mxfp4::value index");
        let byte = self.packed[r * (self.cols / 2) + c / 2];
        let code = if c % 2 == 0 { byte & 15 } else { byte >> 4 };
        mxfp4_value(code, self.scales[r * (self.cols / GROUP) + c / GROUP])
    }
}

/// For the AVX2 path: per scale byte s (row 255 unused), the high 32 bits of the f64
/// pattern of magnitude m × 2^(s − 127) for the eight E2M1 magnitudes m (j = code & 7), with
/// bits 28–30 of entry j XOR-ed with j. The low 32 bits of every such value are zero (at most
/// two significant bits), so the high word alone is the exact element. The decoder XORs `code << 28` (all four code bits) into the looked-up word:
/// bits 28–30 cancel back to the magnitude and bit 31 becomes the sign (code bit 3), so one
/// shift and one XOR apply the sign to eight columns at once. Entry 0 stays 0.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) static E2M1_SCALED_HI32_SIGNX: [[u32; 8]; 256] = build_signx_table();

const fn build_signx_table() -> [[u32; 8]; 256] {
    let mut t = build_scaled_table();
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            t[s][j] ^= (j as u32) << 28;
            j += 1;
        }
        s += 1;
    }
    t
}

/// For the NEON path: the top 16 bits of the f64 pattern of every signed E2M1 code (bit 3 =
/// sign) times 2^(s − 127), per scale byte s. The lower 48 bits of these values are zero.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) static E2M1_SCALED_TOP16: [[u16; 16]; 256] = build_top16_table();

const fn build_top16_table() -> [[u16; 16]; 256] {
    let hi = build_scaled_table();
    let mut t = [[0u16; 16]; 256];
    let mut s = 0;
    while s < 256 {
        let mut code = 0;
        while code < 16 {
            let sign = if code >= 8 { 0x8000 } else { 0 };
            t[s][code] = ((hi[s][code & 7] >> 16) as u16) | sign;
            code += 1;
        }
        s += 1;
    }
    t
}

/// The high words of m × 2^(s − 127) (no sign trick), built with integer exponent
/// arithmetic; a unit test checks them against [`mxfp4_value`].
const fn build_scaled_table() -> [[u32; 8]; 256] {
    // f64 high words of 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    const MAG_HI: [u32; 8] = [
        0x0000_0000,
        0x3FE0_0000,
        0x3FF0_0000,
        0x3FF8_0000,
        0x4000_0000,
        0x4008_0000,
        0x4010_0000,
        0x4018_0000,
    ];
    let mut t = [[0u32; 8]; 256];
    let mut s = 0;
    while s < 255 {
        let mut m = 1;
        while m < 8 {
            // Adding (s − 127) to the biased exponent (bits 20–30 of the high word); every
            // result stays a normal f64 (exponents −128 … 129).
            let e = (MAG_HI[m] >> 20) as i64 + s as i64 - 127;
            t[s][m] = ((e as u32) << 20) | (MAG_HI[m] & 0x000F_FFFF);
            m += 1;
        }
        s += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_table_matches_definition() {
        for s in 0..255u8 {
            for code in 0..8u8 {
                let v =
                    f64::from_bits((build_scaled_table()[s as usize][code as usize] as u64) << 32);
                assert_eq!(
                    v.to_bits(),
                    mxfp4_value(code, s).to_bits(),
                    "s {s} code {code}"
                );
            }
        }
    }

    #[test]
    fn signx_table_decodes_every_signed_code() {
        for s in 0..255u8 {
            for code in 0..16u32 {
                let hi = E2M1_SCALED_HI32_SIGNX[s as usize][(code & 7) as usize] ^ (code << 28);
                let v = f64::from_bits((hi as u64) << 32);
                assert_eq!(
                    v.to_bits(),
                    mxfp4_value(code as u8, s).to_bits(),
                    "s {s} code {code}"
                );
            }
        }
    }

    #[test]
    fn top16_table_matches_definition() {
        for s in 0..255u8 {
            for code in 0..16u8 {
                let v = f64::from_bits((E2M1_SCALED_TOP16[s as usize][code as usize] as u64) << 48);
                assert_eq!(
                    v.to_bits(),
                    mxfp4_value(code, s).to_bits(),
                    "s {s} code {code}"
                );
            }
        }
    }

    #[test]
    fn format_examples() {
        // FORMATS.md §5: byte 0x21 with scale 127 gives (0.5, 1.0); 0xF7 with 129 gives (24, −24).
        let m = Mxfp4::new(&[0x21; 16], &[127], 1, 32).unwrap();
        assert_eq!((m.value(0, 0), m.value(0, 1)), (0.5, 1.0));
        let m = Mxfp4::new(&[0xF7; 16], &[129], 1, 32).unwrap();
        assert_eq!((m.value(0, 0), m.value(0, 1)), (24.0, -24.0));
        assert_eq!(e8m0_scale(0), 2f64.powi(-127));
        assert_eq!(e8m0_scale(254), 2f64.powi(127));
    }

    #[test]
    fn scale_255_is_refused_with_row_and_group() {
        let mut scales = vec![127u8; 4 * 3];
        scales[2 * 3 + 1] = 255;
        let e = Mxfp4::new(&[0; 4 * 48], &scales, 4, 96).unwrap_err();
        assert_eq!(e.message, "row 2, group 1: E8M0 scale 255 (NaN)");
        assert_eq!(find_e8m0_nan(&scales, 3), Some((2, 1)));
    }

    #[test]
    fn shapes_are_checked() {
        assert!(Mxfp4::new(&[0; 16], &[1], 1, 31).is_err());
        assert!(Mxfp4::new(&[0; 15], &[1], 1, 32).is_err());
        assert!(Mxfp4::new(&[0; 16], &[1, 1], 1, 32).is_err());
    }
}
