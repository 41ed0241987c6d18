//! Instruction-set paths and their selection (ENGINE.md §2, §3: `--isa`, `K3_ISA`).
//!
//! CPU features are detected once and cached. The path actually used is chosen per
//! [`crate::Kernels`] value, so tests can run several paths side by side in one process.

use crate::error::KernelError;
use std::sync::OnceLock;

/// A kernel path. All paths produce bit-identical results (MODEL.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable scalar Rust: the reference every other path is compared against.
    Scalar,
    /// x86-64 AVX2 (four 4×f64 accumulator registers in `dot`; never FMA).
    Avx2,
    /// AArch64 NEON (eight 2×f64 accumulator registers in `dot`; never FMA).
    Neon,
}

/// Every path, in the order used for listings.
pub const ALL_ISAS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Neon];

impl Isa {
    /// The name used by `--isa`, `K3_ISA` and the run report (`scalar`, `avx2`, `neon`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
        }
    }

    /// Parses a name as accepted by `--isa` / `K3_ISA` (exact, lower case).
    pub fn parse(name: &str) -> Option<Isa> {
        match name {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "neon" => Some(Isa::Neon),
            _ => None,
        }
    }

    /// True when this CPU (and this build) can run the path. Detection runs once.
    pub fn is_available(self) -> bool {
        available().contains(&self)
    }

    /// The fastest available path (what is used when nothing is forced).
    pub fn best() -> Isa {
        *available().last().expect("scalar is always available")
    }

    /// Parses `value` and checks that the CPU supports it. `source` names where the value
    /// came from (`--isa` or `K3_ISA`) and starts the error message, e.g.
    /// `--isa neon: this CPU does not support neon (available: scalar, avx2)`.
    pub fn select(source: &str, value: &str) -> Result<Isa, KernelError> {
        let names = ALL_ISAS.map(Isa::name).join(", ");
        let isa = Isa::parse(value).ok_or_else(|| {
            KernelError::new(format!(
                "{source} {value}: unknown instruction set (expected one of {names})"
            ))
        })?;
        if !isa.is_available() {
            return Err(KernelError::new(format!(
                "{source} {value}: this CPU does not support {} (available: {})",
                isa.name(),
                available_names()
            )));
        }
        Ok(isa)
    }

    /// The path named by the environment variable `K3_ISA`, or [`Isa::best`] when it is
    /// unset or empty. An unknown name or one the CPU lacks is an error naming `K3_ISA`.
    pub fn from_env() -> Result<Isa, KernelError> {
        match std::env::var("K3_ISA") {
            Ok(v) if !v.is_empty() => Isa::select("K3_ISA", &v),
            Ok(_) => Ok(Isa::best()),
            Err(std::env::VarError::NotPresent) => Ok(Isa::best()),
            Err(std::env::VarError::NotUnicode(_)) => Err(KernelError::new(
                "K3_ISA: value is not valid UTF-8 (expected scalar, avx2 or neon)",
            )),
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The paths this CPU can run, slowest first (always starts with [`Isa::Scalar`]).
pub fn available() -> &'static [Isa] {
    static AVAILABLE: OnceLock<Vec<Isa>> = OnceLock::new();
    AVAILABLE.get_or_init(detect)
}

fn available_names() -> String {
    available()
        .iter()
        .map(|i| i.name())
        .collect::<Vec<_>>()
        .join(", ")
}

#[allow(unused_mut)]
fn detect() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        if crate::x86_64::detected() {
            v.push(Isa::Avx2);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if crate::aarch64::detected() {
            v.push(Isa::Neon);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips() {
        for isa in ALL_ISAS {
            assert_eq!(Isa::parse(isa.name()), Some(isa));
        }
        assert_eq!(Isa::parse("AVX2"), None);
        assert!(Isa::Scalar.is_available());
    }

    #[test]
    fn select_refuses_unknown_and_missing() {
        let e = Isa::select("--isa", "sse9").unwrap_err();
        assert!(
            e.message.starts_with("--isa sse9: unknown instruction set"),
            "{e}"
        );
        #[cfg(target_arch = "x86_64")]
        {
            let e = Isa::select("K3_ISA", "neon").unwrap_err();
            assert!(
                e.message
                    .starts_with("K3_ISA neon: this CPU does not support neon (available: scalar"),
                "{e}"
            );
        }
    }
}
