//! AArch64 paths.

/// True when the CPU runs the NEON path (Advanced SIMD with f64 lanes, part of ARMv8-A).
pub(crate) fn detected() -> bool {
    false
}

/// Placeholder until the NEON kernels land: never selected (`detected` is false).
pub(crate) mod neon {
    pub(crate) use crate::scalar::*;
}
