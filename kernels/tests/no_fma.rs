//! MODEL.md §5.1: no fused multiply-add anywhere. The compiler may not contract `a * b + c`
//! (Rust never does) and the AVX2 path is compiled with `avx2` but not `fma`; this test reads
//! the disassembly of this very test binary and fails if any k3_kernels function contains an
//! FMA instruction. It also checks that it actually looked at the SIMD code.
//!
//! A stripped test binary (`cargo test --release`: the release profile strips symbols) has no
//! function names; then every instruction of the binary counts as kernel code, which is
//! stricter (nothing else linked in uses FMA either), and the check for outlined intrinsics,
//! which needs names, is left to the unstripped builds.

use std::process::Command;

#[cfg(target_arch = "x86_64")]
const FMA: &[&str] = &[
    "vfmadd",
    "vfmsub",
    "vfnmadd",
    "vfnmsub",
    "vfmaddsub",
    "vfmsubadd",
];
#[cfg(target_arch = "aarch64")]
const FMA: &[&str] = &["fmadd", "fmsub", "fnmadd", "fnmsub", "fmla", "fmls"];
#[cfg(target_arch = "x86_64")]
const SIMD_MARK: (&str, &str) = ("k3_kernels::x86_64::avx2", "vmulpd");
#[cfg(target_arch = "aarch64")]
const SIMD_MARK: (&str, &str) = ("k3_kernels::aarch64::neon", "fmul");

fn disassemble(exe: &std::path::Path) -> String {
    // On aarch64 under qemu the host's objdump may not know the format; try the cross one.
    let mut tried = Vec::new();
    for tool in ["objdump", "aarch64-linux-gnu-objdump"] {
        match Command::new(tool)
            .args(["-d", "-C", "--no-show-raw-insn"])
            .arg(exe)
            .output()
        {
            Ok(o) if o.status.success() && !o.stdout.is_empty() => {
                return String::from_utf8_lossy(&o.stdout).into_owned();
            }
            Ok(o) => tried.push(format!(
                "{tool}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => tried.push(format!("{tool}: {e}")),
        }
    }
    panic!(
        "cannot disassemble {} (install binutils for this target): {}",
        exe.display(),
        tried.join("; ")
    );
}

#[test]
fn kernels_contain_no_fused_multiply_add() {
    // Make sure every kernel of every available path is linked into this binary.
    for &isa in k3_kernels::isa::available() {
        let _ = k3_kernels::battery::run_on(isa, 1);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let text = disassemble(&exe);
    let stripped = !text.contains("k3_kernels");
    let mut symbol = String::new();
    let mut offenders = Vec::new();
    let mut simd_multiplies = 0;
    let mut outlined = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_suffix(">:") {
            symbol = rest.split_once('<').map_or(rest, |(_, s)| s).to_string();
            // A vector intrinsic compiled as a function of its own means some kernel code ran
            // outside its `#[target_feature]` entry point: correct, but far too slow.
            let is_vector_intrinsic = ["::avx::", "::avx2::", "::sse", "::neon::"]
                .iter()
                .any(|m| symbol.contains("core_arch") && symbol.contains(m));
            if is_vector_intrinsic || symbol.starts_with("k3_kernels::simd::") {
                outlined.push(symbol.clone());
            }
            continue;
        }
        if !stripped && !symbol.contains("k3_kernels") {
            continue;
        }
        let insn = line.split('\t').nth(1).unwrap_or("").trim();
        let mnemonic = insn.split_whitespace().next().unwrap_or("");
        if FMA.iter().any(|f| mnemonic.starts_with(f)) {
            offenders.push(format!("{symbol}: {insn}"));
        }
        if (stripped || symbol.contains(SIMD_MARK.0)) && mnemonic.starts_with(SIMD_MARK.1) {
            simd_multiplies += 1;
        }
    }
    assert!(
        offenders.is_empty(),
        "FMA instructions in k3_kernels:\n{}",
        offenders.join("\n")
    );
    assert!(
        outlined.is_empty(),
        "vector code not inlined into its target-feature entry point:\n{}",
        outlined.join("\n")
    );
    let simd_compiled = k3_kernels::isa::available().len() > 1 || cfg!(target_arch = "x86_64");
    if simd_compiled {
        assert!(
            simd_multiplies > 20,
            "found only {simd_multiplies} `{}` in {} functions: the check did not see the SIMD code",
            SIMD_MARK.1,
            SIMD_MARK.0
        );
    }
}
