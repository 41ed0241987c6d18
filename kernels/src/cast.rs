//! Views of little-endian tensor bytes as BF16 / fp32 values. Here because reinterpreting a
//! byte buffer needs `unsafe`, which the engine keeps inside `kernels/` and `src/io/`.
//!
//! k3 runs on little-endian targets only (x86-64, AArch64), where a tensor's bytes are its
//! values' in-memory representation.

#[cfg(target_endian = "big")]
compile_error!(
    "k3 reads little-endian tensor bytes in place and supports little-endian targets only"
);

/// The BF16 bit patterns stored in `bytes` (2 bytes each, little-endian), borrowed in place.
/// `None` if `bytes` is not 2-byte aligned or its length is odd (copy with [`u16_vec`] then).
pub fn u16_slice(bytes: &[u8]) -> Option<&[u16]> {
    // SAFETY: every bit pattern is a valid u16; align_to only yields the properly aligned
    // middle part, and we accept the view only when nothing is left over on either side.
    let (pre, mid, post) = unsafe { bytes.align_to::<u16>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// The fp32 values stored in `bytes` (4 bytes each, little-endian), borrowed in place.
/// `None` if `bytes` is not 4-byte aligned or its length is not a multiple of 4.
pub fn f32_slice(bytes: &[u8]) -> Option<&[f32]> {
    // SAFETY: every bit pattern is a valid f32; see `u16_slice` for the alignment argument.
    let (pre, mid, post) = unsafe { bytes.align_to::<f32>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// Copies little-endian u16 values out of `bytes` (any alignment). Panics if the length is odd.
pub fn u16_vec(bytes: &[u8]) -> Vec<u16> {
    assert!(
        bytes.len() % 2 == 0,
        "u16_vec: odd byte count {}",
        bytes.len()
    );
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// Copies little-endian fp32 values out of `bytes` (any alignment). Panics if the length is
/// not a multiple of 4.
pub fn f32_vec(bytes: &[u8]) -> Vec<f32> {
    assert!(
        bytes.len() % 4 == 0,
        "f32_vec: byte count {} not a multiple of 4",
        bytes.len()
    );
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_and_copies_agree() {
        let v: Vec<u32> = vec![0x3f80_0000, 0x8000_0001, 0x7f7f_ffff];
        // SAFETY: test-only view of an aligned u32 buffer as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, 12) };
        let f = f32_slice(bytes).unwrap();
        assert_eq!(f.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), v);
        assert_eq!(
            f32_vec(bytes)
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>(),
            v
        );
        assert_eq!(u16_slice(bytes).unwrap(), &u16_vec(bytes)[..]);
        assert!(f32_slice(&bytes[1..9]).is_none());
        assert!(u16_slice(&bytes[1..3]).is_none());
    }
}
