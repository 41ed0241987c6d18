//! k3-kernels: every numeric operation of the Kimi K3 forward pass, in a scalar path and
//! hand-written `std::arch` AVX2 and NEON paths chosen at run time, bit-identical to each
//! other (MODEL.md §5). This crate knows nothing of files.
//!
//! # The numerics contract (MODEL.md §5)
//!
//! * Activations are fp32; BF16 widens exactly (`bits << 16`); [`rnd`] rounds f64 → fp32
//!   to nearest even.
//! * Every inner product is the 16-lane f64 [`dot`](num::dot_f32): exact products into
//!   accumulator `i mod 16`, then one fixed reduction tree ([`num::reduce16`]). AVX2 holds the
//!   lanes in four 4×f64 registers, NEON in eight 2×f64 registers; both apply the same tree.
//! * Ordered sums over sources, positions, experts and taps use [`seqsum`].
//! * `exp64`, `tanh64`, `sig64`, `silu64` (and `log64`, for logprobs only) are the engine's
//!   own ([`num`]); no library math, no fused multiply-add anywhere, subnormals honoured.
//! * Threads split output elements only ([`ThreadPool`]); every sum is formed by one thread.
//!
//! # Use
//!
//! ```
//! use k3_kernels::{Isa, Kernels};
//! let k = Kernels::new(Isa::Scalar, 2).unwrap(); // or Kernels::from_env() for K3_ISA / K3_THREADS
//! let w: Vec<u16> = vec![0x3f80; 6]; // BF16 1.0, a 2 x 3 matrix
//! let x = [1.0f32, 2.0, 3.0];
//! let mut y = [0.0f32; 2];
//! k.matmul_bf16(&w, 2, 3, &x, &mut y);
//! assert_eq!(y, [6.0, 6.0]);
//! ```
//!
//! Layout after the `memchr` crate: the scalar path in `scalar`, one module per ISA
//! (`x86_64::avx2`, `aarch64::neon`) with the same function names, and the dispatch in
//! [`Kernels`], decided when the value is built (CPU detection runs once and is cached).

// Every unsafe operation inside an `unsafe fn` sits in its own `unsafe` block with its reason.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod argmax;
#[cfg(feature = "battery")]
pub mod battery;
pub mod cast;
pub mod codec;
mod error;
pub mod fnv;
pub mod isa;
pub mod mxfp4;
pub mod num;
mod ops;
pub mod pool;
pub mod route;
mod scalar;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod simd;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

pub use argmax::{argmax, first_non_finite};
pub use error::KernelError;
pub use fnv::{fnv1a64, fnv1a64_f32, Fnv1a64};
pub use isa::Isa;
pub use mxfp4::{find_e8m0_nan, Mxfp4};
pub use num::{bf16_to_f32, cos64, exp64, log64, rnd, seqsum, sig64, silu64, sin64, tanh64};
pub use ops::{thread_scratch_bytes, Kernels};
pub use pool::ThreadPool;
pub use route::{moe_select, moe_weights};
