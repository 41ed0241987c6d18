//! Shared helpers of the kernels' integration tests: fixture loading, a seeded PRNG and the
//! list of (path, threads) configurations to compare.
#![allow(dead_code)]

use k3_kernels::{isa, Isa, Kernels};
use serde_json::Value;

/// Path of a file under the repository's tests/fixtures (the repo copy, never ../shared).
pub fn fixture_path(rel: &str) -> String {
    format!("{}/../tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// Parses a JSON fixture.
pub fn load_json(rel: &str) -> Value {
    let p = fixture_path(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// A `{"shape": [...], "data": [...]}` array: (shape, values as f64).
pub fn arr(v: &Value, key: &str) -> (Vec<usize>, Vec<f64>) {
    let a = &v[key];
    let shape = a["shape"]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: no shape"))
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect::<Vec<_>>();
    let data = a["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: no data"))
        .iter()
        .map(|d| d.as_f64().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(
        data.len(),
        shape.iter().product::<usize>(),
        "{key}: data length"
    );
    (shape, data)
}

/// The array as fp32 values (the fixtures store 7-decimal numbers; we round once to fp32).
pub fn arr32(v: &Value, key: &str) -> Vec<f32> {
    arr(v, key).1.into_iter().map(|x| x as f32).collect()
}

/// Tolerance check of seed-ops/MANIFEST.json: |got − want| ≤ atol + rtol·|want|.
/// Returns the worst excess ratio and its index for the message.
pub fn check_close(what: &str, got: &[f32], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g as f64 - w).abs();
        assert!(
            d <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w} (|diff| {d:e} > {atol:e} + {rtol:e}·|want|)"
        );
    }
}

/// Every available path with 1, 2 and 3 threads and the default thread count.
pub fn configs() -> Vec<(Isa, usize)> {
    let mut v = Vec::new();
    for &i in isa::available() {
        for t in [1, 2, 3, k3_kernels::pool::default_threads()] {
            if !v.contains(&(i, t)) {
                v.push((i, t));
            }
        }
    }
    v
}

pub fn kernels(isa: Isa, threads: usize) -> Kernels {
    Kernels::new(isa, threads).expect("available ISA")
}

/// SplitMix64: a small deterministic generator for test inputs.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// A normal-ish fp32 value of magnitude about `scale`.
    pub fn f32s(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| (self.unit() * scale) as f32).collect()
    }
    /// Any finite fp32 bit pattern (subnormals, huge values, ±0 included).
    pub fn any_finite_f32(&mut self) -> f32 {
        loop {
            let v = f32::from_bits(self.next_u64() as u32);
            if v.is_finite() {
                return v;
            }
        }
    }
}
