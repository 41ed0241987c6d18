//! Real MXFP4 bytes from the released checkpoint (tests/fixtures/real/mxfp4.json): the
//! decode convention of FORMATS.md §5 reproduces the expected values exactly, the
//! nibble-swapped decode differs, and the packed matrix product equals dequantise-then-`dot`
//! bit for bit on every path and thread count.

mod common;
use common::*;
use k3_kernels::mxfp4::E2M1;
use k3_kernels::num::reduce16;
use k3_kernels::{rnd, Mxfp4};

struct Real {
    rows: usize,
    cols: usize,
    packed: Vec<u8>,
    scales: Vec<u8>,
    expected: Vec<f64>,
    swapped_first64: Vec<f64>,
}

fn load() -> Real {
    let j = load_json("real/mxfp4.json");
    let bytes = |k: &str| -> Vec<u8> {
        j[k]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u8)
            .collect()
    };
    let lut: Vec<f64> = j["e2m1_lut"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // The fixture's table is the one FORMATS.md §5 defines (sign of −0 included).
    assert_eq!(lut.len(), 16);
    for (a, b) in lut.iter().zip(E2M1) {
        assert_eq!(a.to_bits(), (b as f64).to_bits());
    }
    let (shape, expected) = arr(&j, "expected");
    Real {
        rows: shape[0],
        cols: shape[1],
        packed: bytes("packed"),
        scales: bytes("scales"),
        expected,
        swapped_first64: j["expected_swapped_nibbles"]["first64"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect(),
    }
}

#[test]
fn real_bytes_decode_exactly() {
    let r = load();
    let m = Mxfp4::new(&r.packed, &r.scales, r.rows, r.cols).unwrap();
    let mut mismatches = 0;
    for row in 0..r.rows {
        for c in 0..r.cols {
            if m.value(row, c).to_bits() != r.expected[row * r.cols + c].to_bits() {
                mismatches += 1;
            }
        }
    }
    assert_eq!(mismatches, 0, "mismatches of {}", r.rows * r.cols);
}

#[test]
fn nibble_swapped_decode_differs() {
    let r = load();
    let m = Mxfp4::new(&r.packed, &r.scales, r.rows, r.cols).unwrap();
    // The wrong convention (high nibble = even column) reproduces the fixture's negative
    // example and differs from the expected values.
    let swapped: Vec<f64> = (0..64).map(|c| m.value(0, c ^ 1)).collect();
    assert_eq!(
        swapped.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        r.swapped_first64
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    );
    let differing = (0..64).filter(|&c| swapped[c] != r.expected[c]).count();
    assert!(differing > 32, "only {differing} of 64 values differ");
}

/// dequantise-then-dot reference: the canonical 16-lane dot over f64 element values.
fn dot_values(vals: &[f64], x: &[f32]) -> f64 {
    let mut acc = [0.0f64; 16];
    for (i, (&v, &xi)) in vals.iter().zip(x).enumerate() {
        acc[i % 16] += v * xi as f64;
    }
    reduce16(&acc)
}

#[test]
fn packed_product_equals_dequantised_dot_on_every_path() {
    let r = load();
    let m = Mxfp4::new(&r.packed, &r.scales, r.rows, r.cols).unwrap();
    let mut rng = Rng(7);
    let t = 3;
    let x = rng.f32s(t * r.cols, 2.0);
    let want: Vec<f32> = (0..t)
        .flat_map(|p| {
            let xp = &x[p * r.cols..(p + 1) * r.cols];
            let e = &r.expected;
            (0..r.rows).map(move |row| rnd(dot_values(&e[row * r.cols..(row + 1) * r.cols], xp)))
        })
        .collect();
    for (isa, threads) in configs() {
        let k = kernels(isa, threads);
        let mut y = vec![0.0; t * r.rows];
        k.matmul_mxfp4(&m, &x, &mut y);
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{isa} t{threads}: element {i}");
        }
    }
}

#[test]
fn e8m0_255_names_row_and_group() {
    let r = load();
    let mut scales = r.scales.clone();
    scales[37 * 112 + 5] = 255;
    let e = Mxfp4::new(&r.packed, &scales, r.rows, r.cols).unwrap_err();
    let msg = format!("layers.1.block_sparse_moe.experts.0.w1.weight_scale: {e}");
    assert_eq!(msg, "layers.1.block_sparse_moe.experts.0.w1.weight_scale: row 37, group 5: E8M0 scale 255 (NaN)");
    assert_eq!(k3_kernels::find_e8m0_nan(&scales, 112), Some((37, 5)));
    assert_eq!(k3_kernels::find_e8m0_nan(&r.scales, 112), None);
}
