//! The gate battery: every public operation of this crate on a fixed, deterministic set of
//! inputs chosen to break a path that deviates from MODEL.md §5 — every tail length of the
//! 16-lane `dot`, odd shapes, subnormals, ±0, huge exponent spread, exact cancellation,
//! values near fp32 overflow, both SiTU caps saturated, every branch boundary of the
//! transcendentals, E8M0 scales 0 and 254, shapes big enough to be split over threads.
//!
//! [`run`] computes the outputs on the path selected by `K3_ISA`; `kernels/tests/gate_battery.rs`
//! compares them bit for bit with the scalar path at thread counts 1, 2, 3 and the default and
//! writes them for `cargo xtask gates`, which compares paths across processes and machines
//! (NEON under qemu). Inputs avoid operations whose NaN *payload* is platform-defined
//! (inf − inf, 0 × inf): the engine refuses non-finite values, and their bits are not part of
//! the contract.

use crate::isa::Isa;
use crate::mxfp4::Mxfp4;
use crate::ops::Kernels;
use crate::{argmax, cast, find_e8m0_nan, first_non_finite, fnv1a64_f32, moe_select, moe_weights};

mod inputs;
pub mod order;
use inputs::*;

/// Positions of the order battery's batched products (`matmul_order_*`).
pub const ORDER_T: [usize; 7] = [1, 2, 7, 16, 17, 64, 600];

/// Operations whose outputs are integers (indices, hashes) rather than floats.
pub const INTEGER_OPS: [&str; 2] = ["moe_select", "argmax_hash_scan"];

/// Operations whose float outputs contain NaN by design: bit-exact copies of every pattern.
pub const NAN_COPY_OPS: [&str; 2] = ["widen_bf16", "cast"];

/// One operation's outputs, concatenated over all its battery cases, as little-endian bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatteryOutput {
    /// Operation name (also the file name in the gate output directory).
    pub op: &'static str,
    /// Bytes per output element (4 for fp32, 8 for f64 / u64), to report element indices.
    pub elem_bytes: usize,
    /// The outputs.
    pub bytes: Vec<u8>,
}

/// Runs the battery on the path named by `K3_ISA` (the best available when unset) with
/// `threads` threads.
///
/// Panics if `K3_ISA` is invalid or names a path this CPU lacks (the message names the
/// variable), or if `threads` is outside 1…1024: the battery is a test tool.
pub fn run(threads: usize) -> Vec<BatteryOutput> {
    let isa = Isa::from_env().unwrap_or_else(|e| panic!("{e}"));
    run_on(isa, threads)
}

/// Runs the battery on path `isa` with `threads` threads.
///
/// Panics if the path is not available or `threads` is outside 1…1024.
pub fn run_on(isa: Isa, threads: usize) -> Vec<BatteryOutput> {
    let k = Kernels::new(isa, threads).unwrap_or_else(|e| panic!("{e}"));
    run_with(&k)
}

/// Runs the battery with an existing [`Kernels`].
pub fn run_with(k: &Kernels) -> Vec<BatteryOutput> {
    let mut b = Battery { k, out: Vec::new() };
    b.dots();
    b.matmuls();
    b.batched_order();
    b.transcendentals();
    b.elementwise();
    b.norms();
    b.attention();
    b.kda();
    b.moe();
    b.misc();
    b.out
}

struct Battery<'a> {
    k: &'a Kernels,
    out: Vec<BatteryOutput>,
}

/// Output accumulator of one op.
struct Sink {
    elem_bytes: usize,
    bytes: Vec<u8>,
}

impl Sink {
    fn f32s(x: &[f32]) -> Self {
        let mut s = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        s.push_f32(x);
        s
    }
    fn push_f32(&mut self, x: &[f32]) {
        debug_assert_eq!(self.elem_bytes, 4);
        for v in x {
            self.bytes.extend_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    fn push_f64(&mut self, x: &[f64]) {
        debug_assert_eq!(self.elem_bytes, 8);
        for v in x {
            self.bytes.extend_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    fn push_u64(&mut self, x: u64) {
        debug_assert_eq!(self.elem_bytes, 8);
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
}

impl Battery<'_> {
    fn emit(&mut self, op: &'static str, s: Sink) {
        self.out.push(BatteryOutput {
            op,
            elem_bytes: s.elem_bytes,
            bytes: s.bytes,
        });
    }

    fn dots(&mut self) {
        let k = self.k;
        let mut r = Rng(1);
        let mut s32 = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        let mut s16 = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        // Every tail length 0…47, several sizes around the 16-lane block and a long one.
        let lens: Vec<usize> = (0..48)
            .chain([63, 64, 65, 100, 255, 256, 257, 1000, 7168])
            .collect();
        for (case, &n) in lens.iter().enumerate() {
            for kind in 0..Kind::COUNT {
                let (a, b) = r.pair(n, Kind::from(kind + case));
                s32.push_f64(&[k.dot_f32(&a, &b)]);
                let w: Vec<u16> = a.iter().map(|v| bf16_of(*v)).collect();
                s16.push_f64(&[k.dot_bf16(&w, &b)]);
            }
        }
        // Adversarial: exact cancellation across lanes, huge spread, all subnormal, ±0 only.
        for v in adversarial_pairs() {
            s32.push_f64(&[k.dot_f32(&v.0, &v.1)]);
            let w: Vec<u16> = v.0.iter().map(|x| bf16_of(*x)).collect();
            s16.push_f64(&[k.dot_bf16(&w, &v.1)]);
        }
        self.emit("dot_f32", s32);
        self.emit("dot_bf16", s16);
    }

    fn matmuls(&mut self) {
        let k = self.k;
        let mut r = Rng(2);
        let mut sb = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        let mut sf = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        // (rows, cols, T): odd shapes, every tail class, more rows than one task block.
        let shapes = [
            (1, 1, 1),
            (1, 17, 1),
            (2, 15, 2),
            (3, 16, 1),
            (5, 33, 3),
            (7, 31, 2),
            (16, 47, 1),
            (17, 64, 2),
            (37, 100, 1),
            (40, 129, 3),
            (33, 7, 5),
            (130, 33, 2),
            (67, 40, 1),
            // Several positions with the inner dimension cut into chunks (the tiled prefill
            // product): three chunks and a tail, and many positions with short chunks.
            (5, 2100, 3),
            (3, 200, 600),
        ];
        for (case, &(rows, cols, t)) in shapes.iter().enumerate() {
            let w32 = r.vec(rows * cols, Kind::from(case));
            let wb: Vec<u16> = r
                .vec(rows * cols, Kind::from(case + 1))
                .iter()
                .map(|v| bf16_of(*v))
                .collect();
            let x = r.vec(t * cols, Kind::from(case + 2));
            let mut y = vec![0.0f32; t * rows];
            k.matmul_bf16(&wb, rows, cols, &x, &mut y);
            sb.push_f32(&y);
            k.matmul_f32(&w32, rows, cols, &x, &mut y);
            sf.push_f32(&y);
        }
        self.emit("matmul_bf16", sb);
        self.emit("matmul_f32", sf);

        // MXFP4: every nibble code, scales 0 and 254 next to ordinary ones, x with huge and
        // subnormal values (products stay exact in f64; rounding may give ±inf, never NaN).
        let mut sm = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for (case, &(rows, cols, t)) in [
            (1, 32, 1),
            (3, 64, 2),
            (5, 96, 1),
            (18, 160, 3),
            (2, 32, 3),
            (70, 64, 2),
            (129, 32, 1),
            (3, 2080, 2),
            (4, 256, 600),
            (131, 96, 1),
        ]
        .iter()
        .enumerate()
        {
            let packed: Vec<u8> = (0..rows * cols / 2).map(|_| r.next() as u8).collect();
            let scales: Vec<u8> = (0..rows * cols / 32)
                .map(|i| match (i + case) % 5 {
                    0 => 0,
                    1 => 254,
                    2 => 127,
                    _ => 100 + (r.next() % 50) as u8,
                })
                .collect();
            let m = Mxfp4::new(&packed, &scales, rows, cols).expect("battery MXFP4 shape");
            let x = r.vec(t * cols, Kind::from(case + 3));
            let mut y = vec![0.0f32; t * rows];
            k.matmul_mxfp4(&m, &x, &mut y);
            sm.push_f32(&y);
        }
        self.emit("matmul_mxfp4", sm);
    }

    /// The batched products on inputs that expose the order of additions (`order`), at
    /// several T: each position's outputs must equal the one-position product's, on every
    /// path (kernels/tests/gate_battery.rs checks T = 1 in-process, the gates across paths).
    fn batched_order(&mut self) {
        let k = self.k;
        let mut sb = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        let mut sm = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for (i, &t) in ORDER_T.iter().enumerate() {
            let (rows, cols) = (70, 1000);
            let (w, x) = order::order_case_bf16(rows, cols, t, 40 + i as u64);
            let mut y = vec![0.0f32; t * rows];
            k.matmul_bf16(&w, rows, cols, &x, &mut y);
            sb.push_f32(&y);
            let (rows, cols) = (70, 1024);
            let (p, sc, x) = order::order_case_mxfp4(rows, cols, t, 50 + i as u64);
            let m = Mxfp4::new(&p, &sc, rows, cols).expect("battery MXFP4 shape");
            let mut y = vec![0.0f32; t * rows];
            k.matmul_mxfp4(&m, &x, &mut y);
            sm.push_f32(&y);
        }
        self.emit("matmul_order_bf16", sb);
        self.emit("matmul_order_mxfp4", sm);
    }

    fn transcendentals(&mut self) {
        let k = self.k;
        let mut x = branch_points();
        let mut r = Rng(3);
        for _ in 0..2000 {
            x.push(r.unit() * 40.0);
        }
        for _ in 0..500 {
            x.push(r.unit() * 1500.0);
        }
        let mut y = vec![0.0f64; x.len()];
        let put = |op: &'static str, y: &[f64], out: &mut Vec<BatteryOutput>| {
            let mut s = Sink {
                elem_bytes: 8,
                bytes: Vec::new(),
            };
            s.push_f64(y);
            out.push(BatteryOutput {
                op,
                elem_bytes: 8,
                bytes: s.bytes,
            });
        };
        k.exp64(&x, &mut y);
        put("exp64", &y, &mut self.out);
        k.tanh64(&x, &mut y);
        put("tanh64", &y, &mut self.out);
        k.sig64(&x, &mut y);
        put("sig64", &y, &mut self.out);
        // silu64(−inf) would be −inf × 0: keep silu's inputs finite.
        let xf: Vec<f64> = x.iter().copied().filter(|v| v.is_finite()).collect();
        let mut yf = vec![0.0f64; xf.len()];
        k.silu64(&xf, &mut yf);
        put("silu64", &yf, &mut self.out);
        // Long enough to be split over threads.
        let long: Vec<f64> = (0..20000).map(|i| (i as f64 - 10000.0) * 0.071).collect();
        let mut yl = vec![0.0f64; long.len()];
        k.exp64(&long, &mut yl);
        put("exp64_long", &yl, &mut self.out);
    }

    fn elementwise(&mut self) {
        let k = self.k;
        let mut r = Rng(4);
        // Finite inputs only: −inf × sig64(−inf) = −inf × 0 would be a NaN.
        let mut x: Vec<f32> = branch_points()
            .iter()
            .map(|&v| v as f32)
            .filter(|v| v.is_finite())
            .collect();
        x.extend(r.vec(3001, Kind::Mixed));
        x.extend((0..20011).map(|i| (i as f32 - 10005.0) * 0.013));
        let n = x.len();
        let mut g: Vec<f32> = r.vec(n, Kind::Normal).iter().map(|v| v * 300.0).collect();
        // Both SiTU caps saturated: gate and up inputs up to ±1000 and beyond.
        for (i, v) in g.iter_mut().enumerate().take(400) {
            *v = [1000.0, -1000.0, 8.0, -8.0, 50.0, -50.0, 1.0e30, -3.0e38][i % 8];
        }
        let mut y = vec![0.0f32; n];
        k.sigmoid(&x, &mut y);
        self.emit("sigmoid", Sink::f32s(&y));
        k.silu(&x, &mut y);
        self.emit("silu", Sink::f32s(&y));
        k.situ_glu(&g, &x, 4.0, 25.0, &mut y);
        self.emit("situ_glu", Sink::f32s(&y));
        k.situ_glu(&x, &g, 4.0, 25.0, &mut y);
        self.emit("situ_glu_swapped", Sink::f32s(&y));
        let mut o = x.clone();
        k.sigmoid_gate(&mut o, &g);
        self.emit("sigmoid_gate", Sink::f32s(&o));
        let mut p = x.clone();
        k.add(&mut p, &g);
        // f32::MAX + f32::MAX rounds to +inf: deterministic.
        let mut big = vec![f32::MAX, -f32::MAX, 1.0, f32::MIN_POSITIVE, -0.0];
        k.add(
            &mut big,
            &[f32::MAX, -f32::MAX, -1.0, -f32::MIN_POSITIVE, 0.0],
        );
        p.extend(big);
        self.emit("add", Sink::f32s(&p));
        // Exhaustive BF16 widening: all 65,536 patterns (NaN payloads included).
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut wide = vec![0.0f32; all.len()];
        k.widen_bf16(&all, &mut wide);
        self.emit("widen_bf16", Sink::f32s(&wide));
    }

    fn norms(&mut self) {
        let k = self.k;
        let mut r = Rng(5);
        let mut s = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for (case, &(t, n)) in [(1, 1), (2, 7), (3, 16), (1, 17), (3, 129), (5, 7168)]
            .iter()
            .enumerate()
        {
            let x = r.vec(t * n, Kind::from(case));
            let w = r.vec(n, Kind::Normal);
            let mut y = vec![0.0f32; t * n];
            k.rmsnorm(&x, &w, 1e-5, &mut y);
            s.push_f32(&y);
            k.rmsnorm(&x, &w, 1e-6, &mut y);
            s.push_f32(&y);
        }
        // A zero row: r = 1/sqrt(eps).
        let mut y = vec![0.0f32; 9];
        k.rmsnorm(&[0.0; 9], &[1.5; 9], 1e-5, &mut y);
        s.push_f32(&y);
        self.emit("rmsnorm", s);

        let mut s = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        let mut f = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        for (case, &(heads, d)) in [(1, 1), (3, 5), (4, 16), (2, 17), (96, 128)]
            .iter()
            .enumerate()
        {
            let mut x = r.vec(heads * d, Kind::from(case));
            x[..d].fill(0.0); // a zero head: factor 1/sqrt(1e-6)
            f.push_f64(&[k.l2norm_factor(&x[..d]), k.l2norm_factor(&x[d..])]);
            let mut q = x.clone();
            k.l2norm_heads(&mut q, d, 1.0 / (d as f64).sqrt());
            s.push_f32(&q);
            k.l2norm_heads(&mut x, d, 1.0);
            s.push_f32(&x);
        }
        self.emit("l2norm_heads", s);
        self.emit("l2norm_factor", f);
    }

    fn attention(&mut self) {
        let k = self.k;
        let mut r = Rng(6);
        let mut sc = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        let mut sm = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        let mut mx = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        let mut mb = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for (case, &(npos, width, stride)) in [
            (1, 1, 1),
            (2, 7, 9),
            (5, 33, 40),
            (17, 64, 64),
            (40, 576, 576),
        ]
        .iter()
        .enumerate()
        {
            let rows = r.vec((npos - 1) * stride + width, Kind::from(case));
            let q = r.vec(width, Kind::Normal);
            let mut s = vec![0.0f64; npos];
            k.attn_scores(&q, &rows, stride, 0.07216878364870323, &mut s);
            sc.push_f64(&s);
            k.softmax(&mut s);
            sm.push_f64(&s);
            let mut y = vec![0.0f32; width];
            k.mix_rows(&s, &rows, stride, &mut y);
            mx.push_f32(&y);
            let rb: Vec<u16> = rows.iter().map(|v| bf16_of(*v)).collect();
            let coef: Vec<f64> = r
                .vec(npos, Kind::from(case + 1))
                .iter()
                .map(|&v| v as f64)
                .collect();
            k.mix_rows_bf16(&coef, &rb, stride, &mut y);
            mb.push_f32(&y);
        }
        // Softmax over scores with a huge spread and ties.
        for v in [
            vec![0.0, 0.0, 0.0],
            vec![-1e300, 0.0, 1e300, 1e300],
            vec![-745.0, -700.0, 1.0, -0.0, 0.0],
            vec![3.5],
        ] {
            let mut s = v.clone();
            k.softmax(&mut s);
            sm.push_f64(&s);
        }
        self.emit("attn_scores", sc);
        self.emit("softmax", sm);
        self.emit("mix_rows", mx);
        self.emit("mix_rows_bf16", mb);

        // MoE-style mix of separate vectors and the AttnRes aggregation.
        let mut ms = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        let mut ag = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for (case, &(n, width)) in [(1, 1), (2, 5), (3, 64), (9, 7168), (16, 20000)]
            .iter()
            .enumerate()
        {
            let srcs: Vec<Vec<f32>> = (0..n).map(|i| r.vec(width, Kind::from(case + i))).collect();
            let refs: Vec<&[f32]> = srcs.iter().map(|v| &v[..]).collect();
            let coef: Vec<f64> = (0..n).map(|_| r.unit() * 2.0).collect();
            let mut y = vec![0.0f32; width];
            k.mix(&coef, &refs, &mut y);
            ms.push_f32(&y);
            let f = r.vec(width, Kind::Normal);
            k.attn_res_agg(&refs, &f, 1e-5, &mut y);
            ag.push_f32(&y);
        }
        self.emit("mix", ms);
        self.emit("attn_res_agg", ag);
    }

    fn kda(&mut self) {
        let k = self.k;
        let mut r = Rng(7);
        let mut sc = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for (case, &(t, c, kc)) in [
            (1, 1, 1),
            (1, 3, 2),
            (2, 5, 4),
            (5, 9, 4),
            (3, 64, 3),
            (7, 4, 4),
            (2, 1000, 4),
        ]
        .iter()
        .enumerate()
        {
            let u = r.vec(t * c, Kind::from(case));
            let taps = r.vec(c * kc, Kind::Normal);
            let mut hist = r.vec((kc - 1) * c, Kind::from(case + 1));
            let mut y = vec![0.0f32; t * c];
            k.kda_short_conv(&u, &taps, kc, &mut hist, &mut y);
            sc.push_f32(&y);
            sc.push_f32(&hist);
        }
        self.emit("kda_short_conv", sc);

        let mut sd = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for &(t, hk, dk) in &[(1, 1, 1), (2, 3, 5), (3, 4, 16), (1, 96, 128)] {
            let p = hk * dk;
            let mut z = r.vec(t * p, Kind::Normal);
            z.iter_mut().step_by(7).for_each(|v| *v *= 1e4);
            let mut a_log: Vec<f32> = (0..hk).map(|h| -0.4 + 0.3 * h as f32).collect();
            a_log.extend([0.0; 3]);
            let dt = r.vec(p, Kind::Normal);
            let mut alpha = vec![0.0f32; t * p];
            k.kda_decay(&z, &a_log, &dt, -5.0, dk, &mut alpha);
            sd.push_f32(&alpha);
        }
        self.emit("kda_decay", sd);

        let mut sr = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for &(t, hk, dk) in &[(1, 1, 1), (3, 2, 5), (4, 3, 16), (2, 3, 17), (2, 8, 128)] {
            let p = hk * dk;
            let mut q = r.vec(t * p, Kind::Normal);
            let mut kk = r.vec(t * p, Kind::Normal);
            k.l2norm_heads(&mut q, dk, 0.25);
            k.l2norm_heads(&mut kk, dk, 1.0);
            let mut v = r.vec(t * p, Kind::Normal);
            v.iter_mut().step_by(5).for_each(|x| *x = 1.0e-40); // subnormal values
            let alpha: Vec<f32> = (0..t * p)
                .map(|i| [1.0, 0.5, 0.0067379, 0.99999994][i % 4])
                .collect();
            let beta: Vec<f32> = (0..t * hk).map(|i| [0.0, 1.0, 0.25, 0.75][i % 4]).collect();
            let mut st = r.vec(hk * dk * dk, Kind::Normal);
            let mut o = vec![0.0f32; t * p];
            k.kda_recurrence(&mut st, &q, &kk, &v, &alpha, &beta, dk, &mut o);
            sr.push_f32(&o);
            sr.push_f32(&st);
        }
        self.emit("kda_recurrence", sr);
    }

    fn moe(&mut self) {
        let mut r = Rng(8);
        let mut sel = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        let mut wts = Sink {
            elem_bytes: 4,
            bytes: Vec::new(),
        };
        for &(e, kt) in &[(1, 1), (8, 2), (17, 5), (896, 16)] {
            let mut s: Vec<f32> = (0..e).map(|_| (r.unit() * 0.5 + 0.5) as f32).collect();
            if e > 4 {
                s[3] = s[1]; // an exact tie
            }
            let mut bias: Vec<f32> = (0..e).map(|i| ((i * 37) % 11) as f32 * 0.01).collect();
            if e > 4 {
                bias[3] = bias[1]; // with s[3] = s[1]: equal keys, the lower index wins
            }
            let chosen = moe_select(&s, &bias, kt).expect("no NaN in the battery");
            chosen.iter().for_each(|&i| sel.push_u64(i as u64));
            let mut w = vec![0.0f32; kt];
            for (renorm, rsf) in [(true, 1.0), (false, 2.5), (true, 2.446)] {
                moe_weights(&s, &chosen, renorm, rsf, &mut w);
                wts.push_f32(&w);
            }
        }
        self.emit("moe_select", sel);
        self.emit("moe_weights", wts);
    }

    fn misc(&mut self) {
        let mut r = Rng(9);
        let mut am = Sink {
            elem_bytes: 8,
            bytes: Vec::new(),
        };
        let cases: Vec<Vec<f32>> = vec![
            vec![],
            vec![1.0],
            vec![-0.0, 0.0],
            vec![1.0, 3.0, 3.0, 2.0],
            vec![f32::NEG_INFINITY, -f32::MAX],
            vec![0.5, f32::NAN, 9.0],
            r.vec(163840, Kind::Normal),
        ];
        for c in &cases {
            am.push_u64(argmax(c).map_or(u64::MAX, |i| i as u64));
            am.push_u64(first_non_finite(c).map_or(u64::MAX, |i| i as u64));
            am.push_u64(fnv1a64_f32(c));
        }
        // E8M0 scan: a clean tensor, a 255 at the start, the end and in the middle.
        for pos in [None, Some(0), Some(95), Some(37)] {
            let mut s = vec![127u8; 96];
            if let Some(p) = pos {
                s[p] = 255;
            }
            let (row, g) =
                find_e8m0_nan(&s, 12).map_or((u64::MAX, u64::MAX), |(a, b)| (a as u64, b as u64));
            am.push_u64(row);
            am.push_u64(g);
        }
        self.emit("argmax_hash_scan", am);
        let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut c = Sink::f32s(&cast::f32_vec(&bytes));
        c.push_f32(
            &cast::u16_vec(&bytes)
                .iter()
                .map(|&b| crate::bf16_to_f32(b))
                .collect::<Vec<_>>(),
        );
        self.emit("cast", c);
    }
}
