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

/// The batched products equal the one-position product bit for bit on the order battery
/// (inputs where any other order of additions gives other bits), on every path and at
/// several thread counts, and equal the scalar path's; so do the MoE's gathered experts
/// (`matmul_mxfp4_many`, products of different T in one job).
#[test]
fn batched_products_equal_one_position_on_the_order_battery() {
    use k3_kernels::battery::order::{order_case_bf16, order_case_mxfp4};
    use k3_kernels::{Kernels, Mxfp4};
    let scalar = Kernels::new(Isa::Scalar, 1).unwrap();
    for &isa in k3_kernels::isa::available() {
        for threads in [1, 2, 7] {
            let k = Kernels::new(isa, threads).unwrap();
            let mut mx = Vec::new();
            for &t in &battery::ORDER_T {
                let (rows, cols) = (70, 1000);
                let (w, x) = order_case_bf16(rows, cols, t, 7 + t as u64);
                let mut y = vec![0.0f32; t * rows];
                k.matmul_bf16(&w, rows, cols, &x, &mut y);
                let mut ys = vec![0.0f32; t * rows];
                scalar.matmul_bf16(&w, rows, cols, &x, &mut ys);
                let mut y1 = vec![0.0f32; rows];
                for p in 0..t {
                    k.matmul_bf16(&w, rows, cols, &x[p * cols..(p + 1) * cols], &mut y1);
                    let got = &y[p * rows..(p + 1) * rows];
                    for (r, (a, b)) in got.iter().zip(&y1).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "bf16 {isa} t{threads} T {t}: position {p} row {r}: {a} vs T = 1 {b}"
                        );
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&y),
                    bits(&ys),
                    "bf16 {isa} t{threads} T {t}: vs scalar"
                );

                let (rows, cols) = (70, 1024);
                let (pk, sc, x) = order_case_mxfp4(rows, cols, t, 9 + t as u64);
                let m = Mxfp4::new(&pk, &sc, rows, cols).unwrap();
                let mut y = vec![0.0f32; t * rows];
                k.matmul_mxfp4(&m, &x, &mut y);
                let mut ys = vec![0.0f32; t * rows];
                scalar.matmul_mxfp4(&m, &x, &mut ys);
                assert_eq!(
                    bits(&y),
                    bits(&ys),
                    "mxfp4 {isa} t{threads} T {t}: vs scalar"
                );
                for p in 0..t {
                    k.matmul_mxfp4(&m, &x[p * cols..(p + 1) * cols], &mut y1);
                    assert_eq!(
                        bits(&y[p * rows..(p + 1) * rows]),
                        bits(&y1),
                        "mxfp4 {isa} t{threads} T {t}: position {p} vs T = 1"
                    );
                }
                mx.push((pk, sc, x, y));
            }
            // The gathered experts: every T in one job, each equal to its own product.
            let ms: Vec<Mxfp4> = mx
                .iter()
                .map(|(pk, sc, _, _)| Mxfp4::new(pk, sc, 70, 1024).unwrap())
                .collect();
            let xs: Vec<&[f32]> = mx.iter().map(|(_, _, x, _)| &x[..]).collect();
            let mut outs: Vec<Vec<f32>> =
                mx.iter().map(|(_, _, _, y)| vec![0.0; y.len()]).collect();
            let mut ys: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[..]).collect();
            k.matmul_mxfp4_many(&ms, &xs, &mut ys);
            for (j, (o, (_, _, _, y))) in outs.iter().zip(&mx).enumerate() {
                assert!(
                    o.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "matmul_mxfp4_many {isa} t{threads}: product {j} (T {})",
                    battery::ORDER_T[j]
                );
            }
        }
    }
}

/// The order battery does expose the order: adding the same exact products in another
/// order (chunk 2 before chunk 1 of each lane, or lanes exchanged) changes the result.
#[test]
fn order_battery_detects_a_wrong_order() {
    use k3_kernels::battery::order::order_case_bf16;
    let (rows, cols, t) = (4, 1000, 3);
    let (w, x) = order_case_bf16(rows, cols, t, 1);
    let prod = |r: usize, p: usize, c: usize| {
        f32::from_bits((w[r * cols + c] as u32) << 16) as f64 * x[p * cols + c] as f64
    };
    let tree = |acc: &[f64; 16]| {
        let b: Vec<f64> = (0..4)
            .map(|j| (acc[j] + acc[j + 4]) + (acc[j + 8] + acc[j + 12]))
            .collect();
        ((b[0] + b[1]) + (b[2] + b[3])) as f32
    };
    let (mut differ_chunks, mut differ_lanes) = (0, 0);
    for r in 0..rows {
        for p in 0..t {
            let mut right = [0.0f64; 16];
            for c in 0..cols {
                right[c % 16] += prod(r, p, c);
            }
            // Columns from 480 on first, then the rest (a chunk order error).
            let mut chunks = [0.0f64; 16];
            for c in (480..cols).chain(0..480) {
                chunks[c % 16] += prod(r, p, c);
            }
            // Lane groups exchanged (a register pass error: lanes 4-7 and 8-11).
            let mut swapped = right;
            for j in 4..8 {
                swapped.swap(j, j + 4);
            }
            differ_chunks += usize::from(tree(&right).to_bits() != tree(&chunks).to_bits());
            differ_lanes += usize::from(tree(&right).to_bits() != tree(&swapped).to_bits());
        }
    }
    assert_eq!(
        differ_chunks,
        rows * t,
        "every output must expose a chunk order error"
    );
    assert_eq!(
        differ_lanes,
        rows * t,
        "every output must expose a lane error"
    );
}
