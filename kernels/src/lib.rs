//! k3-kernels: every numeric operation of the Kimi K3 forward pass, in a scalar path and
//! hand-written `std::arch` AVX2 and NEON paths chosen at run time, bit-identical to each
//! other (MODEL.md §5). This crate knows nothing of files.
