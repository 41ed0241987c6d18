//! FNV-1a-64 (FORMATS.md §1), used for the config fingerprint, the weights tag, safetensors
//! header checksums, state-file trailers and logits hashes.
//!
//! h = 0xcbf29ce484222325; for each byte b: h = (h XOR b) × 0x100000001b3 mod 2^64.

/// The FNV-1a-64 offset basis (the hash of no bytes).
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV-1a-64 prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a-64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_continue(FNV_OFFSET, bytes)
}

/// Continues an FNV-1a-64 state `h` over `bytes` (hashing a concatenation piece by piece).
pub fn fnv1a64_continue(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

/// A hash as written in JSON and reports: 16 lowercase hex digits.
pub fn hex(h: u64) -> String {
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Published FNV-1a-64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
        assert_eq!(
            fnv1a64_continue(fnv1a64(b"foo"), b"bar"),
            fnv1a64(b"foobar")
        );
        assert_eq!(hex(0xab), "00000000000000ab");
    }
}
