//! The compute roof of the batched products (issue 23): the f64 multiply-and-add throughput
//! the numerics contract allows on an ISA path (MODEL.md §5.2: an exact f64 product, then a
//! separate f64 add into an accumulator; no FMA), measured per thread count in the same run
//! as the kernels, so every batched product figure is a ratio to it.
//!
//! The loop is the kernels' own instruction mix with nothing else: twelve independent
//! accumulators (enough to cover the add latency on both add pipes), operands in registers,
//! one vector multiply and one vector add per multiply-add vector, written in inline assembly
//! so that the compiler can neither hoist the loop-invariant products nor fuse them.
//!
//! | path | instructions | lanes |
//! |---|---|---|
//! | `avx2` | `vmulpd` + `vaddpd` on ymm | 4 |
//! | `scalar` on x86_64 | `mulpd` + `addpd` on xmm (SSE2, the baseline the generic kernels compile to) | 2 |
//! | `neon`, `scalar` on aarch64 | `fmul` + `fadd` on `.2d` | 2 |

use k3_kernels::Isa;
use std::time::Instant;

/// Iterations of the inner loop per call (12 multiply-add vectors each): about 60 ms per
/// thread at 8 multiply-adds per cycle and 3.7 GHz, long enough to see a busy machine's
/// time slices as the kernels do.
const ITERS: u64 = 30_000_000;
/// Independent accumulators of the loop.
const ACCS: u64 = 12;

/// One roof measurement.
#[derive(Debug, Clone, Copy)]
pub struct Roof {
    /// ISA path.
    pub isa: Isa,
    /// Threads running the loop at once.
    pub threads: usize,
    /// Multiply-adds (f64 lanes) per second of all threads, best repetition.
    pub best_macs_per_s: f64,
    /// Median repetition.
    pub median_macs_per_s: f64,
}

/// f64 lanes per vector of the path's loop.
pub fn lanes(isa: Isa) -> u64 {
    match isa {
        Isa::Avx2 => 4,
        Isa::Scalar | Isa::Neon => 2,
    }
}

/// Runs `iters` iterations of the path's loop on this thread.
fn spin(isa: Isa, iters: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx2 {
            // SAFETY: only reached for a path the caller's `Kernels::new` accepted, i.e. a CPU
            // with AVX2.
            unsafe { x86::spin_avx2(iters) };
        } else {
            x86::spin_sse2(iters);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = isa;
        arm::spin_neon(iters);
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (isa, iters);
        unimplemented!("roof: no loop for this architecture");
    }
}

/// Measures the roof of `isa` with `threads` threads at once (one untimed warm-up, then
/// `reps` repetitions). Panics if `threads` or `reps` is 0.
pub fn measure(isa: Isa, threads: usize, reps: usize) -> Roof {
    measure_iters(isa, threads, reps, ITERS)
}

/// As [`measure`] with `iters` loop iterations per thread and repetition: short repetitions
/// (about a millisecond) and many of them find the machine's quiet time slices when it is
/// busy, as the kernels' short repetitions do. Panics if an argument is 0.
pub fn measure_iters(isa: Isa, threads: usize, reps: usize, iters: u64) -> Roof {
    assert!(iters > 0, "roof::measure_iters: iters 0");
    assert!(
        threads > 0 && reps > 0,
        "roof::measure: threads {threads}, reps {reps}"
    );
    let run = || {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| spin(isa, iters));
            }
        });
        t0.elapsed().as_secs_f64()
    };
    run();
    let mut t: Vec<f64> = (0..reps).map(|_| run()).collect();
    t.sort_by(|a, b| a.total_cmp(b));
    let macs = (threads as u64 * iters * ACCS * lanes(isa)) as f64;
    Roof {
        isa,
        threads,
        best_macs_per_s: macs / t[0],
        median_macs_per_s: macs / t[reps / 2],
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;

    /// Twelve `vmulpd` + `vaddpd` pairs per iteration into ymm0–ymm11.
    ///
    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn spin_avx2(iters: u64) {
        // SAFETY: AVX instructions on registers only (the caller promises AVX2); every
        // register written is declared clobbered; the counter ends at 0.
        unsafe {
            asm!(
                "vxorpd ymm0, ymm0, ymm0", "vxorpd ymm1, ymm1, ymm1", "vxorpd ymm2, ymm2, ymm2",
                "vxorpd ymm3, ymm3, ymm3", "vxorpd ymm4, ymm4, ymm4", "vxorpd ymm5, ymm5, ymm5",
                "vxorpd ymm6, ymm6, ymm6", "vxorpd ymm7, ymm7, ymm7", "vxorpd ymm8, ymm8, ymm8",
                "vxorpd ymm9, ymm9, ymm9", "vxorpd ymm10, ymm10, ymm10", "vxorpd ymm11, ymm11, ymm11",
                "vbroadcastsd ymm12, xmm12",
                "vbroadcastsd ymm13, xmm13",
                "2:",
                "vmulpd ymm14, ymm12, ymm13", "vaddpd ymm0, ymm0, ymm14",
                "vmulpd ymm15, ymm12, ymm13", "vaddpd ymm1, ymm1, ymm15",
                "vmulpd ymm14, ymm12, ymm13", "vaddpd ymm2, ymm2, ymm14",
                "vmulpd ymm15, ymm12, ymm13", "vaddpd ymm3, ymm3, ymm15",
                "vmulpd ymm14, ymm12, ymm13", "vaddpd ymm4, ymm4, ymm14",
                "vmulpd ymm15, ymm12, ymm13", "vaddpd ymm5, ymm5, ymm15",
                "vmulpd ymm14, ymm12, ymm13", "vaddpd ymm6, ymm6, ymm14",
                "vmulpd ymm15, ymm12, ymm13", "vaddpd ymm7, ymm7, ymm15",
                "vmulpd ymm14, ymm12, ymm13", "vaddpd ymm8, ymm8, ymm14",
                "vmulpd ymm15, ymm12, ymm13", "vaddpd ymm9, ymm9, ymm15",
                "vmulpd ymm14, ymm12, ymm13", "vaddpd ymm10, ymm10, ymm14",
                "vmulpd ymm15, ymm12, ymm13", "vaddpd ymm11, ymm11, ymm15",
                "dec {n}",
                "jnz 2b",
                "vzeroupper",
                n = inout(reg) iters => _,
                inout("xmm12") 0.5f64 => _,
                inout("xmm13") 1.0e-9f64 => _,
                out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
                out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
                out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
                out("xmm14") _, out("xmm15") _,
                options(nostack, nomem),
            );
        }
    }

    /// Twelve `mulpd` + `addpd` pairs per iteration into xmm0–xmm11 (SSE2, baseline x86_64).
    pub(super) fn spin_sse2(iters: u64) {
        // SAFETY: SSE2 is part of the x86_64 baseline; register-only instructions, every
        // register written is declared clobbered; the counter ends at 0.
        unsafe {
            asm!(
                "xorpd xmm0, xmm0", "xorpd xmm1, xmm1", "xorpd xmm2, xmm2", "xorpd xmm3, xmm3",
                "xorpd xmm4, xmm4", "xorpd xmm5, xmm5", "xorpd xmm6, xmm6", "xorpd xmm7, xmm7",
                "xorpd xmm8, xmm8", "xorpd xmm9, xmm9", "xorpd xmm10, xmm10", "xorpd xmm11, xmm11",
                "unpcklpd xmm12, xmm12",
                "unpcklpd xmm13, xmm13",
                "2:",
                "movapd xmm14, xmm12", "mulpd xmm14, xmm13", "addpd xmm0, xmm14",
                "movapd xmm15, xmm12", "mulpd xmm15, xmm13", "addpd xmm1, xmm15",
                "movapd xmm14, xmm12", "mulpd xmm14, xmm13", "addpd xmm2, xmm14",
                "movapd xmm15, xmm12", "mulpd xmm15, xmm13", "addpd xmm3, xmm15",
                "movapd xmm14, xmm12", "mulpd xmm14, xmm13", "addpd xmm4, xmm14",
                "movapd xmm15, xmm12", "mulpd xmm15, xmm13", "addpd xmm5, xmm15",
                "movapd xmm14, xmm12", "mulpd xmm14, xmm13", "addpd xmm6, xmm14",
                "movapd xmm15, xmm12", "mulpd xmm15, xmm13", "addpd xmm7, xmm15",
                "movapd xmm14, xmm12", "mulpd xmm14, xmm13", "addpd xmm8, xmm14",
                "movapd xmm15, xmm12", "mulpd xmm15, xmm13", "addpd xmm9, xmm15",
                "movapd xmm14, xmm12", "mulpd xmm14, xmm13", "addpd xmm10, xmm14",
                "movapd xmm15, xmm12", "mulpd xmm15, xmm13", "addpd xmm11, xmm15",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                inout("xmm12") 0.5f64 => _,
                inout("xmm13") 1.0e-9f64 => _,
                out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
                out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
                out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
                out("xmm14") _, out("xmm15") _,
                options(nostack, nomem),
            );
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::asm;

    /// Twelve `fmul` + `fadd` (.2d) pairs per iteration into v0–v11.
    pub(super) fn spin_neon(iters: u64) {
        // SAFETY: Advanced SIMD is part of the aarch64 baseline; register-only instructions,
        // every register written is declared clobbered; the counter ends at 0.
        unsafe {
            asm!(
                "movi v0.2d, #0", "movi v1.2d, #0", "movi v2.2d, #0", "movi v3.2d, #0",
                "movi v4.2d, #0", "movi v5.2d, #0", "movi v6.2d, #0", "movi v7.2d, #0",
                "movi v8.2d, #0", "movi v9.2d, #0", "movi v10.2d, #0", "movi v11.2d, #0",
                "dup v12.2d, v12.d[0]",
                "dup v13.2d, v13.d[0]",
                "2:",
                "fmul v14.2d, v12.2d, v13.2d", "fadd v0.2d, v0.2d, v14.2d",
                "fmul v15.2d, v12.2d, v13.2d", "fadd v1.2d, v1.2d, v15.2d",
                "fmul v14.2d, v12.2d, v13.2d", "fadd v2.2d, v2.2d, v14.2d",
                "fmul v15.2d, v12.2d, v13.2d", "fadd v3.2d, v3.2d, v15.2d",
                "fmul v14.2d, v12.2d, v13.2d", "fadd v4.2d, v4.2d, v14.2d",
                "fmul v15.2d, v12.2d, v13.2d", "fadd v5.2d, v5.2d, v15.2d",
                "fmul v14.2d, v12.2d, v13.2d", "fadd v6.2d, v6.2d, v14.2d",
                "fmul v15.2d, v12.2d, v13.2d", "fadd v7.2d, v7.2d, v15.2d",
                "fmul v14.2d, v12.2d, v13.2d", "fadd v8.2d, v8.2d, v14.2d",
                "fmul v15.2d, v12.2d, v13.2d", "fadd v9.2d, v9.2d, v15.2d",
                "fmul v14.2d, v12.2d, v13.2d", "fadd v10.2d, v10.2d, v14.2d",
                "fmul v15.2d, v12.2d, v13.2d", "fadd v11.2d, v11.2d, v15.2d",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                n = inout(reg) iters => _,
                inout("v12") 0.5f64 => _,
                inout("v13") 1.0e-9f64 => _,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                out("v8") _, out("v9") _, out("v10") _, out("v11") _,
                out("v14") _, out("v15") _,
                options(nostack, nomem),
            );
        }
    }
}
