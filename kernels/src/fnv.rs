//! FNV-1a-64 (FORMATS.md §9.1, §10): the logits hash over f32 bit patterns and the config
//! fingerprint over ASCII bytes.

/// FNV-1a 64-bit offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental FNV-1a-64. Hashing vectors one after another equals hashing their
/// concatenation, which is how the run's `logits_hash` covers every logits vector in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64::new()
    }
}

impl Fnv1a64 {
    /// A fresh hash (state = offset basis).
    pub fn new() -> Self {
        Fnv1a64(FNV_OFFSET)
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(FNV_PRIME);
        }
        self.0 = h;
    }

    /// Feeds fp32 values as their little-endian bit patterns (4 bytes each).
    pub fn update_f32(&mut self, x: &[f32]) {
        for v in x {
            self.update(&v.to_bits().to_le_bytes());
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }

    /// Continues a hash whose state so far is `state` (a [`Fnv1a64::finish`] value, e.g. the
    /// running logits hash of a saved session, FORMATS.md §9.2).
    pub fn resume(state: u64) -> Self {
        Fnv1a64(state)
    }
}

/// FNV-1a-64 of fp32 values' little-endian bit patterns (one logits vector, FORMATS.md §10).
pub fn fnv1a64_f32(x: &[f32]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update_f32(x);
    h.finish()
}

/// FNV-1a-64 of bytes.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update(bytes);
    h.finish()
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
        assert_eq!(fnv1a64_f32(&[1.0]), fnv1a64(&[0, 0, 0x80, 0x3f]));
        let mut h = Fnv1a64::new();
        h.update_f32(&[1.0, -0.0]);
        h.update_f32(&[2.5]);
        assert_eq!(h.finish(), fnv1a64_f32(&[1.0, -0.0, 2.5]));
    }
}
