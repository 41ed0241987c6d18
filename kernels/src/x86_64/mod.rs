//! x86-64 paths.

/// True when the CPU runs the AVX2 path (AVX and AVX2; the path never uses FMA).
pub(crate) fn detected() -> bool {
    false
}

/// Placeholder until the AVX2 kernels land: never selected (`detected` is false).
pub(crate) mod avx2 {
    pub(crate) use crate::scalar::*;
}
