//! Property tests: on random shapes (odd lengths, every tail) and random bit patterns, every
//! available path at 1, 2, 3 and the default number of threads equals the scalar path at one
//! thread bit for bit, for every operation (MODEL.md §5.6). Seeded loops: a failure names the
//! seed, case and shape, and reruns identically.

mod common;
use common::*;
use k3_kernels::{Isa, Kernels, Mxfp4};

const CASES: usize = 60;

fn bits32(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn bits64(x: &[f64]) -> Vec<u64> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn assert_same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first differing element {i}: {:?} vs scalar {:?}",
            got[i], want[i]
        );
    }
}

/// A random finite BF16 pattern (any sign, exponent, subnormal, ±0).
fn finite_bf16(r: &mut Rng) -> u16 {
    loop {
        let b = r.next_u64() as u16;
        if b & 0x7f80 != 0x7f80 {
            return b;
        }
    }
}

/// Values of mixed character: mostly moderate, some subnormal, zero, huge.
fn mixed(r: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match r.below(10) {
            0 => r.any_finite_f32(),
            1 => 0.0,
            2 => f32::from_bits(r.below(0x80_0000) as u32),
            _ => (r.unit() * 4.0) as f32,
        })
        .collect()
}

/// Runs `f` on the scalar reference and on every configuration, comparing outputs.
fn check<T: PartialEq + std::fmt::Debug>(what: &str, f: impl Fn(&Kernels) -> Vec<T>) {
    let want = f(&kernels(Isa::Scalar, 1));
    for (isa, t) in configs() {
        let got = f(&kernels(isa, t));
        assert_same(&format!("{what} [{isa} t{t}]"), &got, &want);
    }
}

#[test]
fn matrix_products() {
    let mut r = Rng(11);
    for case in 0..CASES {
        // Now and then more rows than one task block (64), so threads split the product.
        let rows = if case % 6 == 5 {
            60 + r.below(150)
        } else {
            1 + r.below(40)
        };
        let cols = 1 + r.below(300);
        let t = 1 + r.below(4);
        let wb: Vec<u16> = (0..rows * cols).map(|_| finite_bf16(&mut r)).collect();
        let wf = mixed(&mut r, rows * cols);
        let x = mixed(&mut r, t * cols);
        let what = format!("case {case}: {rows} x {cols}, T {t}");
        check(&format!("matmul_bf16 {what}"), |k| {
            let mut y = vec![0.0; t * rows];
            k.matmul_bf16(&wb, rows, cols, &x, &mut y);
            bits32(&y)
        });
        check(&format!("matmul_f32 {what}"), |k| {
            let mut y = vec![0.0; t * rows];
            k.matmul_f32(&wf, rows, cols, &x, &mut y);
            bits32(&y)
        });
        check(&format!("dot {what}"), |k| {
            let n = cols;
            bits64(&[k.dot_f32(&wf[..n], &x[..n]), k.dot_bf16(&wb[..n], &x[..n])])
        });
        let mcols = 32 * (1 + r.below(6));
        let packed: Vec<u8> = (0..rows * mcols / 2).map(|_| r.next_u64() as u8).collect();
        let scales: Vec<u8> = (0..rows * mcols / 32).map(|_| r.below(255) as u8).collect();
        let xm = mixed(&mut r, t * mcols);
        let m = Mxfp4::new(&packed, &scales, rows, mcols).unwrap();
        check(
            &format!("matmul_mxfp4 case {case}: {rows} x {mcols}, T {t}"),
            |k| {
                let mut y = vec![0.0; t * rows];
                k.matmul_mxfp4(&m, &xm, &mut y);
                bits32(&y)
            },
        );
    }
}

/// Prefill-sized products: the inner dimension spans several tiles of the blocked product
/// (whose chunk length shrinks as T grows), with every tail class, odd row counts and rows
/// split over threads; T = 1 on the same matrices takes the matrix-vector path.
#[test]
fn tiled_products_across_chunks() {
    let mut r = Rng(13);
    for case in 0..12 {
        let rows = [1, 3, 7, 66, 129][case % 5];
        let t = [1, 2, 5, 70, 300][(case + 1) % 5];
        let cols = 1000 + r.below(1200);
        let mcols = 32 * (30 + r.below(40));
        let wb: Vec<u16> = (0..rows * cols).map(|_| finite_bf16(&mut r)).collect();
        let x = mixed(&mut r, t * cols);
        check(
            &format!("matmul_bf16 tiled case {case}: {rows} x {cols}, T {t}"),
            |k| {
                let mut y = vec![0.0; t * rows];
                k.matmul_bf16(&wb, rows, cols, &x, &mut y);
                bits32(&y)
            },
        );
        let packed: Vec<u8> = (0..rows * mcols / 2).map(|_| r.next_u64() as u8).collect();
        let scales: Vec<u8> = (0..rows * mcols / 32).map(|_| r.below(255) as u8).collect();
        let xm = mixed(&mut r, t * mcols);
        let m = Mxfp4::new(&packed, &scales, rows, mcols).unwrap();
        check(
            &format!("matmul_mxfp4 tiled case {case}: {rows} x {mcols}, T {t}"),
            |k| {
                let mut y = vec![0.0; t * rows];
                k.matmul_mxfp4(&m, &xm, &mut y);
                bits32(&y)
            },
        );
    }
}

/// Several MXFP4 products in one job (the routed experts of a layer) give exactly what each
/// product gives alone, on every path and thread count, for one and several positions.
#[test]
fn many_mxfp4_products_equal_single_ones() {
    let mut r = Rng(14);
    for case in 0..6 {
        let n = 1 + r.below(9);
        let mut data = Vec::new();
        for _ in 0..n {
            let rows = 1 + r.below(150);
            let cols = 32 * (1 + r.below(8));
            let t = if r.below(3) == 0 { 1 + r.below(4) } else { 1 };
            let packed: Vec<u8> = (0..rows * cols / 2).map(|_| r.next_u64() as u8).collect();
            let scales: Vec<u8> = (0..rows * cols / 32).map(|_| r.below(255) as u8).collect();
            let x = mixed(&mut r, t * cols);
            data.push((rows, cols, t, packed, scales, x));
        }
        let ms: Vec<Mxfp4> = data
            .iter()
            .map(|(rows, cols, _, p, s, _)| Mxfp4::new(p, s, *rows, *cols).unwrap())
            .collect();
        let xs: Vec<&[f32]> = data.iter().map(|d| &d.5[..]).collect();
        let singles = |k: &Kernels| -> Vec<u32> {
            let mut out = Vec::new();
            for (j, (rows, _, t, ..)) in data.iter().enumerate() {
                let mut y = vec![0.0; t * rows];
                k.matmul_mxfp4(&ms[j], xs[j], &mut y);
                out.extend(bits32(&y));
            }
            out
        };
        check(
            &format!("matmul_mxfp4_many case {case}: {n} products"),
            |k| {
                let mut ys: Vec<Vec<f32>> = data
                    .iter()
                    .map(|(rows, _, t, ..)| vec![0.0; t * rows])
                    .collect();
                let mut yr: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
                k.matmul_mxfp4_many(&ms, &xs, &mut yr);
                let many: Vec<u32> = ys.iter().flat_map(|y| bits32(y)).collect();
                assert_eq!(many, singles(k), "many vs single products on {:?}", k.isa());
                many
            },
        );
    }
}

/// Several BF16 products in one job (projections of one input) give exactly what each product
/// gives alone, on every path and thread count; some share an input vector, some have T > 1.
#[test]
fn many_bf16_products_equal_single_ones() {
    let mut r = Rng(15);
    for case in 0..6 {
        let n = 1 + r.below(7);
        let cols = 1 + r.below(400);
        let shared = mixed(&mut r, cols);
        let mut data = Vec::new();
        for _ in 0..n {
            let rows = 1 + r.below(200);
            let (t, x) = match r.below(3) {
                0 => (1, None),
                1 => (1, Some(mixed(&mut r, cols))),
                _ => {
                    let t = 2 + r.below(3);
                    (t, Some(mixed(&mut r, t * cols)))
                }
            };
            let w: Vec<u16> = (0..rows * cols).map(|_| finite_bf16(&mut r)).collect();
            data.push((rows, t, w, x));
        }
        let xs: Vec<&[f32]> = data
            .iter()
            .map(|d| d.3.as_deref().unwrap_or(&shared))
            .collect();
        let ws: Vec<(&[u16], usize, usize)> = data.iter().map(|d| (&d.2[..], d.0, cols)).collect();
        check(
            &format!("matmul_bf16_many case {case}: {n} products"),
            |k| {
                let mut ys: Vec<Vec<f32>> = data.iter().map(|d| vec![0.0; d.1 * d.0]).collect();
                let mut yr: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
                k.matmul_bf16_many(&ws, &xs, &mut yr);
                let many: Vec<u32> = ys.iter().flat_map(|y| bits32(y)).collect();
                let mut single = Vec::new();
                for (j, d) in data.iter().enumerate() {
                    let mut y = vec![0.0; d.1 * d.0];
                    k.matmul_bf16(&d.2, d.0, cols, xs[j], &mut y);
                    single.extend(bits32(&y));
                }
                assert_eq!(many, single, "many vs single products on {:?}", k.isa());
                many
            },
        );
    }
}

/// Infinite and NaN BF16 weights (exponent 255) among finite ones: every path gives the
/// scalar result (NaN wherever scalar gives NaN — NaN payloads are not part of the contract),
/// so an unusable weight can never turn into a finite output. The AVX2 matrix-vector product
/// builds weights with integer operations that only hold for finite values and must detect
/// these rows.
#[test]
fn non_finite_weights_give_the_scalar_result() {
    let mut r = Rng(16);
    for case in 0..20 {
        let rows = 1 + r.below(70);
        let cols = 1 + r.below(300);
        let t = if case % 3 == 0 { 2 } else { 1 };
        let mut w: Vec<u16> = (0..rows * cols).map(|_| finite_bf16(&mut r)).collect();
        for _ in 0..1 + r.below(3) {
            let i = r.below(rows * cols);
            w[i] = [0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81][r.below(5)];
        }
        let x = mixed(&mut r, t * cols);
        let want = {
            let mut y = vec![0.0; t * rows];
            kernels(Isa::Scalar, 1).matmul_bf16(&w, rows, cols, &x, &mut y);
            y
        };
        for (isa, th) in configs() {
            let mut y = vec![0.0; t * rows];
            kernels(isa, th).matmul_bf16(&w, rows, cols, &x, &mut y);
            for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "case {case}: {rows} x {cols}, T {t} [{isa} t{th}]: element {i}: {a} vs scalar {b}"
                );
            }
        }
    }
}

#[test]
fn elementwise_and_transcendentals() {
    let mut r = Rng(12);
    for case in 0..CASES {
        let n = if case % 10 == 9 {
            17000 + r.below(100)
        } else {
            r.below(70)
        };
        let x = mixed(&mut r, n);
        let g = mixed(&mut r, n);
        let x64: Vec<f64> = (0..n)
            .map(|_| match r.below(4) {
                0 => f64::from_bits(r.next_u64()).clamp(-1e300, 1e300),
                _ => r.unit() * 800.0,
            })
            .map(|v| if v.is_nan() { 0.5 } else { v })
            .collect();
        let what = format!("case {case}: n {n}");
        check(&format!("f32 maps {what}"), |k| {
            let mut out = Vec::new();
            let mut y = vec![0.0; n];
            k.sigmoid(&x, &mut y);
            out.extend(bits32(&y));
            k.silu(&x, &mut y);
            out.extend(bits32(&y));
            k.situ_glu(&x, &g, 4.0, 25.0, &mut y);
            out.extend(bits32(&y));
            let mut o = x.clone();
            k.sigmoid_gate(&mut o, &g);
            out.extend(bits32(&o));
            let mut p = x.clone();
            k.add(&mut p, &g);
            out.extend(bits32(&p));
            let w: Vec<u16> = x.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
            k.widen_bf16(&w, &mut y);
            out.extend(bits32(&y));
            out
        });
        check(&format!("f64 maps {what}"), |k| {
            let mut out = Vec::new();
            let mut y = vec![0.0; n];
            k.exp64(&x64, &mut y);
            out.extend(bits64(&y));
            k.tanh64(&x64, &mut y);
            out.extend(bits64(&y));
            k.sig64(&x64, &mut y);
            out.extend(bits64(&y));
            k.silu64(&x64, &mut y);
            out.extend(bits64(&y));
            out
        });
    }
}

#[test]
fn norms_softmax_attention_mixes() {
    let mut r = Rng(13);
    for case in 0..CASES {
        let n = 1 + r.below(200);
        let t = 1 + r.below(4);
        let x = mixed(&mut r, t * n);
        let w = mixed(&mut r, n);
        let what = format!("case {case}: T {t}, n {n}");
        check(&format!("rmsnorm/l2norm {what}"), |k| {
            let mut y = vec![0.0; t * n];
            k.rmsnorm(&x, &w, 1e-5, &mut y);
            let mut z = x.clone();
            k.l2norm_heads(&mut z, n, 0.125);
            let mut out = bits32(&y);
            out.extend(bits32(&z));
            out.push(k.l2norm_factor(&x[..n]).to_bits() as u32);
            out
        });
        let npos = 1 + r.below(30);
        let width = 1 + r.below(70);
        let stride = width + r.below(5);
        let rows = mixed(&mut r, (npos - 1) * stride + width);
        let q = mixed(&mut r, width);
        let rb: Vec<u16> = (0..rows.len()).map(|_| finite_bf16(&mut r)).collect();
        let coef: Vec<f64> = (0..npos).map(|_| r.unit() * 3.0).collect();
        check(
            &format!("attention {what}: {npos} positions, width {width}, stride {stride}"),
            |k| {
                let mut s = vec![0.0; npos];
                k.attn_scores(&q, &rows, stride, 0.0721, &mut s);
                let mut out = bits64(&s);
                k.softmax(&mut s);
                out.extend(bits64(&s));
                let mut y = vec![0.0; width];
                k.mix_rows(&s, &rows, stride, &mut y);
                out.extend(bits32(&y).iter().map(|&b| b as u64));
                k.mix_rows_bf16(&coef, &rb, stride, &mut y);
                out.extend(bits32(&y).iter().map(|&b| b as u64));
                out
            },
        );
        let nsrc = 1 + r.below(10);
        let h = 1 + r.below(300);
        let srcs: Vec<Vec<f32>> = (0..nsrc).map(|_| mixed(&mut r, h)).collect();
        let f = mixed(&mut r, h);
        check(&format!("mix/agg {what}: {nsrc} sources of {h}"), |k| {
            let refs: Vec<&[f32]> = srcs.iter().map(|v| &v[..]).collect();
            let mut y = vec![0.0; h];
            k.mix(&coef[..nsrc.min(npos)], &refs[..nsrc.min(npos)], &mut y);
            let mut out = bits32(&y);
            k.attn_res_agg(&refs, &f, 1e-5, &mut y);
            out.extend(bits32(&y));
            out
        });
    }
}

#[test]
fn kda_operations() {
    let mut r = Rng(14);
    for case in 0..CASES {
        let t = 1 + r.below(5);
        let c = 1 + r.below(40);
        let kc = 1 + r.below(5);
        let u = mixed(&mut r, t * c);
        let taps = mixed(&mut r, c * kc);
        let hist0 = mixed(&mut r, (kc - 1) * c);
        check(
            &format!("kda_short_conv case {case}: T {t}, C {c}, kc {kc}"),
            |k| {
                let mut hist = hist0.clone();
                let mut y = vec![0.0; t * c];
                k.kda_short_conv(&u, &taps, kc, &mut hist, &mut y);
                let mut out = bits32(&y);
                out.extend(bits32(&hist));
                out
            },
        );
        let hk = 1 + r.below(5);
        let dk = 1 + r.below(40);
        let p = hk * dk;
        let z = mixed(&mut r, t * p);
        let a_log: Vec<f32> = (0..hk).map(|_| (r.unit() * 2.0) as f32).collect();
        let dt = mixed(&mut r, p);
        let q = r.f32s(t * p, 1.0);
        let kk = r.f32s(t * p, 1.0);
        let v = mixed(&mut r, t * p);
        let alpha: Vec<f32> = (0..t * p).map(|_| (r.unit().abs()) as f32).collect();
        let beta: Vec<f32> = (0..t * hk).map(|_| (r.unit().abs()) as f32).collect();
        let st0 = r.f32s(hk * dk * dk, 1.0);
        check(
            &format!("kda decay/recurrence case {case}: T {t}, {hk} heads x {dk}"),
            |k| {
                let mut a = vec![0.0; t * p];
                k.kda_decay(&z, &a_log, &dt, -5.0, dk, &mut a);
                let (mut qn, mut kn) = (q.clone(), kk.clone());
                k.l2norm_heads(&mut qn, dk, 1.0 / (dk as f64).sqrt());
                k.l2norm_heads(&mut kn, dk, 1.0);
                let mut st = st0.clone();
                let mut o = vec![0.0; t * p];
                k.kda_recurrence(&mut st, &qn, &kn, &v, &alpha, &beta, dk, &mut o);
                let mut out = bits32(&a);
                out.extend(bits32(&o));
                out.extend(bits32(&st));
                out
            },
        );
    }
}

/// Prefill in chunks equals position-by-position decode: the conv and the recurrence give the
/// same bits whether T positions come in one call or one at a time (MODEL.md §7).
#[test]
fn chunked_equals_stepwise() {
    let mut r = Rng(15);
    for &isa in k3_kernels::isa::available() {
        let k = kernels(isa, 2);
        let (t, hk, dk, kc) = (7, 3, 16, 4);
        let p = hk * dk;
        let u = r.f32s(t * p, 2.0);
        let taps = r.f32s(p * kc, 0.5);
        let (mut h1, mut h7) = (vec![0.0; (kc - 1) * p], vec![0.0; (kc - 1) * p]);
        let mut y7 = vec![0.0; t * p];
        k.kda_short_conv(&u, &taps, kc, &mut h7, &mut y7);
        let mut y1 = Vec::new();
        for ut in u.chunks(p) {
            let mut y = vec![0.0; p];
            k.kda_short_conv(ut, &taps, kc, &mut h1, &mut y);
            y1.extend(y);
        }
        assert_same(
            &format!("{isa} conv chunk vs steps"),
            &bits32(&y1),
            &bits32(&y7),
        );
        assert_same(&format!("{isa} conv history"), &bits32(&h1), &bits32(&h7));
        let (q, kk, v) = (r.f32s(t * p, 0.3), r.f32s(t * p, 0.3), r.f32s(t * p, 1.0));
        let alpha: Vec<f32> = (0..t * p).map(|_| r.unit().abs() as f32).collect();
        let beta: Vec<f32> = (0..t * hk).map(|_| r.unit().abs() as f32).collect();
        let (mut s1, mut s7) = (vec![0.0; hk * dk * dk], vec![0.0; hk * dk * dk]);
        let mut o7 = vec![0.0; t * p];
        k.kda_recurrence(&mut s7, &q, &kk, &v, &alpha, &beta, dk, &mut o7);
        let mut o1 = Vec::new();
        for i in 0..t {
            let sl = i * p..(i + 1) * p;
            let mut o = vec![0.0; p];
            k.kda_recurrence(
                &mut s1,
                &q[sl.clone()],
                &kk[sl.clone()],
                &v[sl.clone()],
                &alpha[sl.clone()],
                &beta[i * hk..(i + 1) * hk],
                dk,
                &mut o,
            );
            o1.extend(o);
        }
        assert_same(
            &format!("{isa} recurrence chunk vs steps"),
            &bits32(&o1),
            &bits32(&o7),
        );
        assert_same(
            &format!("{isa} recurrence state"),
            &bits32(&s1),
            &bits32(&s7),
        );
        // A matrix product over T rows equals T single-row products.
        let (rows, cols) = (23, 77);
        let w: Vec<u16> = (0..rows * cols).map(|_| finite_bf16(&mut r)).collect();
        let x = r.f32s(t * cols, 1.0);
        let mut yt = vec![0.0; t * rows];
        k.matmul_bf16(&w, rows, cols, &x, &mut yt);
        for (i, xt) in x.chunks(cols).enumerate() {
            let mut y = vec![0.0; rows];
            k.matmul_bf16(&w, rows, cols, xt, &mut y);
            assert_same(
                &format!("{isa} matmul row {i}"),
                &bits32(&y),
                &bits32(&yt[i * rows..(i + 1) * rows]),
            );
        }
    }
}

/// MODEL.md §11 row 25: BF16 widening is `bits << 16` (never rounding, never f16): generated
/// patterns — subnormal, largest finite, negative zero — widen exactly on every path, inside
/// the matrix product as well.
#[test]
fn bf16_widening_of_generated_patterns() {
    let cases: [(u16, f32); 6] = [
        (0x0001, f32::from_bits(0x0001_0000)), // smallest subnormal BF16 = 2^-133
        (0x007f, f32::from_bits(0x007f_0000)), // largest subnormal
        (0x7f7f, f32::from_bits(0x7f7f_0000)), // largest finite BF16
        (0x8000, -0.0),
        (0x3f80, 1.0),
        (0xc2f7, -123.5),
    ];
    assert_eq!(f32::from_bits(0x0001_0000), 2f32.powi(-133));
    for (isa, t) in configs() {
        let k = kernels(isa, t);
        let w: Vec<u16> = cases.iter().map(|c| c.0).collect();
        let mut y = vec![0.0f32; w.len()];
        k.widen_bf16(&w, &mut y);
        for (c, v) in cases.iter().zip(&y) {
            assert_eq!(v.to_bits(), c.1.to_bits(), "{isa} t{t}: widen {:#06x}", c.0);
        }
        // As a 6 x 1 matrix times x = 2^100 (each product exact, then rounded once). The
        // accumulators start at +0, so the −0 weight gives +0 (+0 + −0 = +0, MODEL.md §5.2).
        let x = [2f32.powi(100)];
        k.matmul_bf16(&w, 6, 1, &x, &mut y);
        for (c, v) in cases.iter().zip(&y) {
            let want = ((0.0 + c.1 as f64 * x[0] as f64) + 0.0) as f32;
            assert_eq!(
                v.to_bits(),
                want.to_bits(),
                "{isa} t{t}: matmul {:#06x}",
                c.0
            );
        }
        assert_eq!(y[0], 2f32.powi(-33));
    }
}
