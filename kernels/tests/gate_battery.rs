//! The gate battery (contract with `cargo xtask gates`): runs `k3_kernels::battery` on the path
//! selected by `K3_ISA` at 1, 2, 3 and the default number of threads, compares every
//! operation's outputs with the scalar path bit for bit (failing with the operation, path,
//! threads and first differing element index), and, when `K3_GATE_OUT` is set, writes
//! `$K3_GATE_OUT/<isa>-t<threads>/<op>.bin` plus a `manifest.tsv` (op, elem_bytes, fnv1a64 hex)
//! so the gate runner can compare paths across processes and machines.

use k3_kernels::battery::{self, BatteryOutput};
use k3_kernels::{fnv1a64, pool, Isa};
use std::fmt::Write as _;

fn thread_counts() -> Vec<usize> {
    let mut v = vec![1, 2, 3];
    let d = pool::default_threads();
    if !v.contains(&d) {
        v.push(d);
    }
    v
}

/// The first differing element of two outputs of the same op, if any.
fn first_difference(a: &BatteryOutput, b: &BatteryOutput) -> Option<usize> {
    if a.bytes.len() != b.bytes.len() {
        return Some(a.bytes.len().min(b.bytes.len()) / a.elem_bytes);
    }
    a.bytes
        .chunks(a.elem_bytes)
        .zip(b.bytes.chunks(b.elem_bytes))
        .position(|(x, y)| x != y)
}

fn write_outputs(dir: &std::path::Path, outs: &[BatteryOutput]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut manifest = String::from("op\telem_bytes\tfnv1a64\n");
    for o in outs {
        let p = dir.join(format!("{}.bin", o.op));
        std::fs::write(&p, &o.bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        writeln!(
            manifest,
            "{}\t{}\t{:016x}",
            o.op,
            o.elem_bytes,
            fnv1a64(&o.bytes)
        )
        .unwrap();
    }
    let p = dir.join("manifest.tsv");
    std::fs::write(&p, manifest).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
}

#[test]
fn battery_matches_scalar_at_every_thread_count() {
    let isa = Isa::from_env().unwrap_or_else(|e| panic!("{e}"));
    let reference = battery::run_on(Isa::Scalar, 1);
    let names: Vec<&str> = reference.iter().map(|o| o.op).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "battery op names must be unique");
    let out_dir = std::env::var_os("K3_GATE_OUT").map(std::path::PathBuf::from);
    let mut failures = Vec::new();
    for threads in thread_counts() {
        let outs = battery::run_on(isa, threads);
        assert_eq!(outs.len(), reference.len(), "{isa} t{threads}: op count");
        for (o, r) in outs.iter().zip(&reference) {
            assert_eq!(o.op, r.op);
            if let Some(i) = first_difference(o, r) {
                failures.push(format!(
                    "op {}: path {isa}, threads {threads}: first differing element {i} (of {})",
                    o.op,
                    r.bytes.len() / r.elem_bytes
                ));
            }
        }
        if let Some(dir) = &out_dir {
            write_outputs(&dir.join(format!("{isa}-t{threads}")), &outs);
        }
    }
    assert!(
        failures.is_empty(),
        "battery differs from scalar t1:\n{}",
        failures.join("\n")
    );
}

/// Arithmetic that produces a NaN has a platform-defined payload (x86's default NaN is
/// negative, AArch64's positive), so the battery must never produce one: a NaN output means
/// the inputs are wrong, and cross-machine comparison would fail for no kernel fault.
#[test]
fn battery_outputs_contain_no_arithmetic_nan() {
    for o in battery::run_on(Isa::Scalar, 1) {
        if battery::INTEGER_OPS.contains(&o.op) || battery::NAN_COPY_OPS.contains(&o.op) {
            continue;
        }
        let nan = match o.elem_bytes {
            4 => o
                .bytes
                .chunks(4)
                .position(|b| f32::from_le_bytes(b.try_into().unwrap()).is_nan()),
            8 => o
                .bytes
                .chunks(8)
                .position(|b| f64::from_le_bytes(b.try_into().unwrap()).is_nan()),
            n => panic!("op {}: unexpected element size {n}", o.op),
        };
        assert_eq!(nan, None, "op {}: NaN output at element {nan:?}", o.op);
    }
}

#[test]
fn every_available_path_matches_scalar() {
    // Independent of K3_ISA: in-process, every path this CPU has, two thread counts.
    let reference = battery::run_on(Isa::Scalar, 1);
    for &isa in k3_kernels::isa::available() {
        for threads in [1, 3] {
            for (o, r) in battery::run_on(isa, threads).iter().zip(&reference) {
                assert!(
                    first_difference(o, r).is_none(),
                    "op {}: path {isa}, threads {threads}: first differing element {:?}",
                    o.op,
                    first_difference(o, r)
                );
            }
        }
    }
}
