//! The operator fixtures of tests/fixtures/seed-ops (fp32 PyTorch reference of the
//! kimi-k3-in-c project), checked at MANIFEST.json's tolerance on every available path and
//! thread count. Composite fixtures (kda_layer1, moe) are composed from the kernels the way
//! the model composes them (MODEL.md §6.4, §6.7).

mod common;
use common::*;
use k3_kernels::{moe_select, moe_weights, Kernels};

fn tolerance() -> (f64, f64) {
    let m = load_json("seed-ops/MANIFEST.json");
    (
        m["tolerance"]["fp32_abs"].as_f64().unwrap(),
        m["tolerance"]["fp32_rel"].as_f64().unwrap(),
    )
}

fn for_each_config(f: impl Fn(&Kernels, &str)) {
    for (isa, t) in configs() {
        let k = kernels(isa, t);
        f(&k, &format!("{isa} t{t}"));
    }
}

#[test]
fn rmsnorm() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/rmsnorm.json");
    let eps = j["eps"].as_f64().unwrap();
    let (x, w) = (arr32(&j, "in"), arr32(&j, "weight"));
    let want = arr(&j, "out").1;
    for_each_config(|k, cfg| {
        let mut y = vec![0.0; x.len()];
        k.rmsnorm(&x, &w, eps, &mut y);
        check_close(&format!("rmsnorm {cfg}"), &y, &want, atol, rtol);
    });
}

#[test]
fn situ_glu_both_caps() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/situ_glu.json");
    let (b1, b2) = (
        j["beta"].as_f64().unwrap(),
        j["linear_beta"].as_f64().unwrap(),
    );
    let (shape, _) = arr(&j, "in");
    let x = arr32(&j, "in");
    let want = arr(&j, "out").1;
    let half = shape[1] / 2;
    // Each input row is [gate | up].
    let gate: Vec<f32> = x
        .chunks(shape[1])
        .flat_map(|r| r[..half].to_vec())
        .collect();
    let up: Vec<f32> = x
        .chunks(shape[1])
        .flat_map(|r| r[half..].to_vec())
        .collect();
    for_each_config(|k, cfg| {
        let mut y = vec![0.0; gate.len()];
        k.situ_glu(&gate, &up, b1, b2, &mut y);
        check_close(&format!("situ_glu {cfg}"), &y, &want, atol, rtol);
        assert!(y
            .iter()
            .all(|v| v.abs() < (b1 * b2) as f32 || v.abs() == 100.0));
    });
}

#[test]
fn short_conv_with_carried_history() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/shortconv.json");
    let kc = j["kernel"].as_u64().unwrap() as usize;
    let c = j["channels"].as_u64().unwrap() as usize;
    let taps = arr32(&j, "weight"); // [C, 1, kc] == [C, kc]
    let u = arr32(&j, "in");
    let want = arr(&j, "out").1;
    // [C, kc−1]; the history holds the fp32 inputs themselves, so compare exactly.
    let state_after: Vec<f64> = arr32(&j, "state_after").iter().map(|&v| v as f64).collect();
    let u_next = arr32(&j, "in_next");
    let want_next = arr(&j, "out_next").1;
    for_each_config(|k, cfg| {
        let mut hist = vec![0.0f32; (kc - 1) * c];
        let mut y = vec![0.0; u.len()];
        k.kda_short_conv(&u, &taps, kc, &mut hist, &mut y);
        check_close(&format!("shortconv {cfg}"), &y, &want, atol, rtol);
        // Our history is [slot][channel], the fixture's [channel][slot]; both oldest first.
        let hist_t: Vec<f32> = (0..c)
            .flat_map(|ch| (0..kc - 1).map(move |s| (s, ch)))
            .map(|(s, ch)| hist[s * c + ch])
            .collect();
        check_close(
            &format!("shortconv state {cfg}"),
            &hist_t,
            &state_after,
            0.0,
            0.0,
        );
        let mut y2 = vec![0.0; u_next.len()];
        k.kda_short_conv(&u_next, &taps, kc, &mut hist, &mut y2);
        check_close(
            &format!("shortconv continuation {cfg}"),
            &y2,
            &want_next,
            atol,
            rtol,
        );
    });
    // The same five positions one at a time give the same bits as one chunk of five.
    let k = kernels(k3_kernels::Isa::Scalar, 1);
    let (mut h1, mut h5) = (vec![0.0f32; (kc - 1) * c], vec![0.0f32; (kc - 1) * c]);
    let mut y5 = vec![0.0; u.len()];
    k.kda_short_conv(&u, &taps, kc, &mut h5, &mut y5);
    for (t, ut) in u.chunks(c).enumerate() {
        let mut yt = vec![0.0; c];
        k.kda_short_conv(ut, &taps, kc, &mut h1, &mut yt);
        assert_eq!(bits(&yt), bits(&y5[t * c..(t + 1) * c]), "position {t}");
    }
    assert_eq!(bits(&h1), bits(&h5));
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn kda_decay() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/kda_decay.json");
    let gmin = j["lower_bound"].as_f64().unwrap();
    let (z, a_log, dt) = (arr32(&j, "z"), arr32(&j, "A_log"), arr32(&j, "dt_bias"));
    let want = arr(&j, "alpha").1;
    let dk = arr(&j, "alpha").0[3];
    for_each_config(|k, cfg| {
        let mut alpha = vec![0.0; z.len()];
        k.kda_decay(&z, &a_log, &dt, gmin, dk, &mut alpha);
        check_close(&format!("kda_decay {cfg}"), &alpha, &want, atol, rtol);
    });
}

/// Runs the recurrence fixture: q is given L2-normalised; its scale (0.25) is applied here as
/// the model does in §6.4 step 4 (× 0.25 is exact). The fixture's state is S [h][key i][value j];
/// ours is Sᵀ [h][j][i].
fn recurrence(name: &str) {
    let (atol, rtol) = tolerance();
    let j = load_json(name);
    let (hk, dk) = (
        j["H"].as_u64().unwrap() as usize,
        j["d_k"].as_u64().unwrap() as usize,
    );
    let qs = j["q_scale"].as_f64().unwrap();
    let q: Vec<f32> = arr32(&j, "q")
        .iter()
        .map(|&v| (v as f64 * qs) as f32)
        .collect();
    let (kk, v, alpha, beta) = (
        arr32(&j, "k"),
        arr32(&j, "v"),
        arr32(&j, "alpha"),
        arr32(&j, "beta"),
    );
    let want_o = arr(&j, "out").1;
    let s = arr(&j, "state_out").1;
    let want_st: Vec<f64> = (0..hk * dk * dk)
        .map(|n| {
            let (h, jv, ik) = (n / (dk * dk), (n / dk) % dk, n % dk);
            s[h * dk * dk + ik * dk + jv]
        })
        .collect();
    for_each_config(|k, cfg| {
        let mut st = vec![0.0f32; hk * dk * dk];
        let mut o = vec![0.0; q.len()];
        k.kda_recurrence(&mut st, &q, &kk, &v, &alpha, &beta, dk, &mut o);
        check_close(&format!("{name} out {cfg}"), &o, &want_o, atol, rtol);
        check_close(&format!("{name} state {cfg}"), &st, &want_st, atol, rtol);
    });
}

#[test]
fn kda_recurrence_one_step() {
    recurrence("seed-ops/kda_recur1.json");
}

#[test]
fn kda_recurrence_eight_steps() {
    recurrence("seed-ops/kda_recur8.json");
}

#[test]
fn router_selection_and_weights() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/router.json");
    let m = load_json("seed-ops/MANIFEST.json")["config"].clone();
    let (e, kt) = (
        j["n_experts"].as_u64().unwrap() as usize,
        j["top_k"].as_u64().unwrap() as usize,
    );
    let (w, bias, x) = (arr32(&j, "gate_weight"), arr32(&j, "bias"), arr32(&j, "in"));
    let h = x.len() / arr(&j, "in").0[0];
    let want_idx = arr(&j, "topk_idx").1;
    let want_w = arr(&j, "topk_weight").1;
    let renorm = m["moe_renormalize"].as_bool().unwrap();
    let rsf = m["routed_scaling_factor"].as_f64().unwrap();
    for_each_config(|k, cfg| {
        let t = x.len() / h;
        let mut r = vec![0.0; t * e];
        k.matmul_f32(&w, e, h, &x, &mut r);
        let mut s = vec![0.0; t * e];
        k.sigmoid(&r, &mut s);
        for p in 0..t {
            let se = &s[p * e..(p + 1) * e];
            let sel = moe_select(se, &bias, kt).unwrap();
            let mut wts = vec![0.0; kt];
            moe_weights(se, &sel, renorm, rsf, &mut wts);
            // The fixture lists the selected experts in ascending index order; compare sets
            // and the weight of each expert.
            let mut pairs: Vec<(usize, f32)> = sel.iter().copied().zip(wts).collect();
            pairs.sort_by_key(|&(i, _)| i);
            let mut want: Vec<(usize, f64)> = (0..kt)
                .map(|i| (want_idx[p * kt + i] as usize, want_w[p * kt + i]))
                .collect();
            want.sort_by_key(|&(i, _)| i);
            let got_i: Vec<usize> = pairs.iter().map(|p| p.0).collect();
            let want_i: Vec<usize> = want.iter().map(|p| p.0).collect();
            assert_eq!(got_i, want_i, "router {cfg} position {p}");
            let got_w: Vec<f32> = pairs.iter().map(|p| p.1).collect();
            let want_wv: Vec<f64> = want.iter().map(|p| p.1).collect();
            check_close(
                &format!("router weights {cfg} position {p}"),
                &got_w,
                &want_wv,
                atol,
                rtol,
            );
        }
    });
}

struct Kda {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    o: Vec<f32>,
    fa: Vec<f32>,
    fb: Vec<f32>,
    b: Vec<f32>,
    qc: Vec<f32>,
    kc: Vec<f32>,
    vc: Vec<f32>,
    a_log: Vec<f32>,
    dt: Vec<f32>,
    o_norm: Vec<f32>,
}

/// One KDA layer for T positions from a fresh state (MODEL.md §6.4 steps 1–9).
#[allow(clippy::too_many_arguments)]
fn kda_layer(
    k: &Kernels,
    w: &Kda,
    x: &[f32],
    h: usize,
    hk: usize,
    dk: usize,
    conv: usize,
    gmin: f64,
    eps: f64,
) -> (Vec<f32>, Vec<f32>) {
    let p = hk * dk;
    let t = x.len() / h;
    let mm = |wt: &[f32], rows: usize, cols: usize, inp: &[f32]| {
        let mut y = vec![0.0; t * rows];
        k.matmul_f32(wt, rows, cols, inp, &mut y);
        y
    };
    let (q0, k0, v0) = (mm(&w.q, p, h, x), mm(&w.k, p, h, x), mm(&w.v, p, h, x));
    let fa = mm(&w.fa, dk, h, x);
    let z = mm(&w.fb, p, dk, &fa);
    let bl = mm(&w.b, hk, h, x);
    let gl = mm(&w.g, p, h, x);
    let conv_run = |u: &[f32], taps: &[f32]| {
        let mut hist = vec![0.0; (conv - 1) * p];
        let mut y = vec![0.0; u.len()];
        k.kda_short_conv(u, taps, conv, &mut hist, &mut y);
        y
    };
    let (mut q, mut kk, v) = (
        conv_run(&q0, &w.qc),
        conv_run(&k0, &w.kc),
        conv_run(&v0, &w.vc),
    );
    k.l2norm_heads(&mut q, dk, 1.0 / (dk as f64).sqrt());
    k.l2norm_heads(&mut kk, dk, 1.0);
    let mut beta = vec![0.0; bl.len()];
    k.sigmoid(&bl, &mut beta);
    let mut alpha = vec![0.0; z.len()];
    k.kda_decay(&z, &w.a_log, &w.dt, gmin, dk, &mut alpha);
    let mut st = vec![0.0; hk * dk * dk];
    let mut o = vec![0.0; t * p];
    k.kda_recurrence(&mut st, &q, &kk, &v, &alpha, &beta, dk, &mut o);
    let mut on = vec![0.0; o.len()];
    k.rmsnorm(&o, &w.o_norm, eps, &mut on);
    k.sigmoid_gate(&mut on, &gl);
    (mm(&w.o, h, p, &on), st)
}

#[test]
fn kda_layer_one_position() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/kda_layer1.json");
    let g = |key: &str| arr32(&j, key);
    let w = Kda {
        q: g("q_proj"),
        k: g("k_proj"),
        v: g("v_proj"),
        g: g("g_proj"),
        o: g("o_proj"),
        fa: g("f_a"),
        fb: g("f_b"),
        b: g("b_proj"),
        qc: g("q_conv"),
        kc: g("k_conv"),
        vc: g("v_conv"),
        a_log: g("A_log"),
        dt: g("dt_bias"),
        o_norm: g("o_norm"),
    };
    let (hk, dk, conv) = (
        j["H"].as_u64().unwrap() as usize,
        j["d_k"].as_u64().unwrap() as usize,
        j["conv_k"].as_u64().unwrap() as usize,
    );
    let (gmin, eps) = (
        j["lower_bound"].as_f64().unwrap(),
        j["rms_eps"].as_f64().unwrap(),
    );
    let x = g("in");
    let want = arr(&j, "out").1;
    let s = arr(&j, "state_out").1;
    let want_st: Vec<f64> = (0..hk * dk * dk)
        .map(|n| {
            let (h, jv, ik) = (n / (dk * dk), (n / dk) % dk, n % dk);
            s[h * dk * dk + ik * dk + jv]
        })
        .collect();
    for_each_config(|k, cfg| {
        let (out, st) = kda_layer(k, &w, &x, x.len(), hk, dk, conv, gmin, eps);
        check_close(&format!("kda_layer1 out {cfg}"), &out, &want, atol, rtol);
        check_close(
            &format!("kda_layer1 state {cfg}"),
            &st,
            &want_st,
            atol,
            rtol,
        );
    });
}

#[test]
fn moe_block() {
    let (atol, rtol) = tolerance();
    let j = load_json("seed-ops/moe.json");
    let u = |key: &str| j[key].as_u64().unwrap() as usize;
    let f = |key: &str| j[key].as_f64().unwrap();
    let (h, l, inter, e, kt, ns) = (
        u("hidden"),
        u("latent"),
        u("moe_inter"),
        u("n_experts"),
        u("top_k"),
        u("n_shared"),
    );
    let (rsf, eps, b1, b2) = (f("routed_scale"), f("rms_eps"), f("situ_b1"), f("situ_b2"));
    let renorm = u("renorm") == 1;
    assert_eq!(u("latent_norm"), 1);
    let x = arr32(&j, "in");
    let want = arr(&j, "out").1;
    let t = x.len() / h;
    let experts: Vec<[Vec<f32>; 3]> = (0..e)
        .map(|i| {
            [
                arr32(&j, &format!("experts_{i}_w1_weight")),
                arr32(&j, &format!("experts_{i}_w3_weight")),
                arr32(&j, &format!("experts_{i}_w2_weight")),
            ]
        })
        .collect();
    let (router, bias) = (
        arr32(&j, "gate_weight"),
        arr32(&j, "e_score_correction_bias"),
    );
    let (down, up, norm) = (
        arr32(&j, "down_weight"),
        arr32(&j, "up_weight"),
        arr32(&j, "norm_weight"),
    );
    let (sg, su, sd) = (
        arr32(&j, "shared_w1_weight"),
        arr32(&j, "shared_w3_weight"),
        arr32(&j, "shared_w2_weight"),
    );
    let sw = ns * inter;
    let max_out = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for_each_config(|k, cfg| {
        let mm = |w: &[f32], rows: usize, cols: usize, inp: &[f32]| {
            let mut y = vec![0.0; rows * inp.len() / cols];
            k.matmul_f32(w, rows, cols, inp, &mut y);
            y
        };
        let mut out = Vec::new();
        for p in 0..t {
            let xp = &x[p * h..(p + 1) * h];
            let mut s = vec![0.0; e];
            k.sigmoid(&mm(&router, e, h, xp), &mut s);
            let sel = moe_select(&s, &bias, kt).unwrap();
            let mut wts = vec![0.0; kt];
            moe_weights(&s, &sel, renorm, rsf, &mut wts);
            let zl = mm(&down, l, h, xp);
            let ys: Vec<Vec<f32>> = sel
                .iter()
                .map(|&ei| {
                    let [w1, w3, w2] = &experts[ei];
                    let mut hh = vec![0.0; inter];
                    k.situ_glu(
                        &mm(w1, inter, l, &zl),
                        &mm(w3, inter, l, &zl),
                        b1,
                        b2,
                        &mut hh,
                    );
                    mm(w2, l, inter, &hh)
                })
                .collect();
            let coef: Vec<f64> = wts.iter().map(|&w| w as f64).collect();
            let srcs: Vec<&[f32]> = ys.iter().map(|v| &v[..]).collect();
            let mut agg = vec![0.0; l];
            k.mix(&coef, &srcs, &mut agg);
            let mut agg_n = vec![0.0; l];
            k.rmsnorm(&agg, &norm, eps, &mut agg_n);
            let mut routed = mm(&up, h, l, &agg_n);
            let mut hs = vec![0.0; sw];
            k.situ_glu(&mm(&sg, sw, h, xp), &mm(&su, sw, h, xp), b1, b2, &mut hs);
            let shared = mm(&sd, h, sw, &hs);
            k.add(&mut routed, &shared);
            out.extend(routed);
        }
        // fixture README §4: the stored (7-decimal) weights are too rounded for one element to
        // meet the manifest tolerance; judge relative to max |out| and allow that one element.
        let strict_failures = out
            .iter()
            .zip(&want)
            .filter(|(&g, &w)| (g as f64 - w).abs() > atol + rtol * w.abs())
            .count();
        assert!(
            strict_failures <= 1,
            "moe {cfg}: {strict_failures} elements outside the manifest tolerance"
        );
        check_close(
            &format!("moe {cfg} (relative to max|out| {max_out})"),
            &out,
            &want,
            rtol * max_out,
            0.0,
        );
    });
}
