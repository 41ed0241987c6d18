//! x86-64 paths.

pub(crate) mod avx2;

/// True when the CPU runs the AVX2 path (AVX and AVX2; the path never uses FMA).
pub(crate) fn detected() -> bool {
    is_x86_feature_detected!("avx") && is_x86_feature_detected!("avx2")
}
