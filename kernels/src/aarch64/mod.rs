//! AArch64 paths.

pub(crate) mod neon;

/// True when the CPU runs the NEON path (Advanced SIMD with f64 lanes, part of ARMv8-A; the
/// path never uses fused multiply-add).
pub(crate) fn detected() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}
