//! An independent float64 reference of the Kimi K3 forward pass (MODEL.md §6), written
//! naively from the spec for the model tests: its own checkpoint reader (serde_json), f64
//! everywhere, the *re-expanded* MLA form, one position at a time. It also implements the
//! wrong-but-plausible variants of MODEL.md §11 so each test can show that the fixture data
//! tells the right variant from the wrong one.

use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Wrong-but-plausible variants (MODEL.md §11); `None` is the specified model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    None,
    // 4
    ALogPerChannel,
    // 5
    KdaReadBeforeDecay,
    KdaOutputOldState,
    // 6
    L2NormMean,
    L2NormMaxEps,
    QScaleMissing,
    QScaleOnK,
    // 7
    ConvTapsReversed,
    // 8
    ConvHistoryPostConv,
    // 9
    KdaGateBeforeNorm,
    KdaPerHeadGain,
    KdaNormEps1e6,
    // 10
    MlaRotary,
    MlaScaleDn,
    MlaKpeNormed,
    MlaNormOverRow,
    // 11
    MlaEps1e5,
    // 12
    MlaGateNorm,
    // 13
    RouterSoftmax,
    BiasInWeights,
    // 14
    NormPerExpert,
    SharedWeighted,
    // 15
    SituSigmoidOfCapped,
    SituCapsSwapped,
    // 16
    AggNormalisedValues,
    AttnResNoClear,
    SnapshotAfterClear,
    NoOutputAgg,
    // 21
    MlaUnnormCached,
}

/// A tensor found in the checkpoint.
#[derive(Debug, Clone)]
pub struct TensorRec {
    pub shard: usize,
    pub offset: u64,
    pub len: u64,
    pub dtype: String,
    pub shape: Vec<u64>,
}

/// A checkpoint directory read with serde_json (independent of the engine's parsers).
pub struct Ckpt {
    pub shards: Vec<PathBuf>,
    pub tensors: HashMap<String, TensorRec>,
    pub config: Value,
}

impl Ckpt {
    pub fn open(dir: &Path) -> Ckpt {
        let config: Value =
            serde_json::from_slice(&fs::read(dir.join("config.json")).unwrap()).unwrap();
        let mut names: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().map(|e| e == "safetensors").unwrap_or(false))
            .collect();
        names.sort();
        let mut tensors = HashMap::new();
        for (si, p) in names.iter().enumerate() {
            let b = fs::read(p).unwrap();
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let h: Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
            for (k, v) in h.as_object().unwrap() {
                if k == "__metadata__" {
                    continue;
                }
                let off = v["data_offsets"].as_array().unwrap();
                let (b0, b1) = (off[0].as_u64().unwrap(), off[1].as_u64().unwrap());
                tensors.insert(
                    k.clone(),
                    TensorRec {
                        shard: si,
                        offset: 8 + n as u64 + b0,
                        len: b1 - b0,
                        dtype: v["dtype"].as_str().unwrap().to_string(),
                        shape: v["shape"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap())
                            .collect(),
                    },
                );
            }
        }
        Ckpt {
            shards: names,
            tensors,
            config,
        }
    }

    pub fn bytes(&self, name: &str) -> Vec<u8> {
        let t = self
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("missing {name}"));
        let f = fs::File::open(&self.shards[t.shard]).unwrap();
        let mut b = vec![0u8; t.len as usize];
        f.read_exact_at(&mut b, t.offset).unwrap();
        b
    }

    /// A BF16 or F32 tensor widened to f64.
    pub fn f64(&self, name: &str) -> Vec<f64> {
        let t = &self.tensors[name];
        let b = self.bytes(name);
        match t.dtype.as_str() {
            "BF16" => b
                .chunks_exact(2)
                .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) as f64)
                .collect(),
            "F32" => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            d => panic!("{name}: dtype {d}"),
        }
    }

    /// An MXFP4 matrix (prefix without `.weight_packed`) dequantised, `[rows][cols]` flat.
    pub fn mxfp4(&self, prefix: &str) -> Vec<f64> {
        let packed = self.bytes(&format!("{prefix}.weight_packed"));
        let scales = self.bytes(&format!("{prefix}.weight_scale"));
        let shape = &self.tensors[&format!("{prefix}.weight_packed")].shape;
        let (rows, cols) = (shape[0] as usize, shape[1] as usize * 2);
        let lut = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        let mut out = vec![0f64; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                let byte = packed[r * cols / 2 + c / 2];
                let nib = if c % 2 == 0 { byte & 15 } else { byte >> 4 };
                let mag = lut[(nib & 7) as usize];
                let v = if nib & 8 != 0 { -mag } else { mag };
                let s = scales[r * cols / 32 + c / 32] as i32;
                out[r * cols + c] = v * 2f64.powi(s - 127);
            }
        }
        out
    }

    /// A text_config key (nested fixtures), falling back to linear_attn_config.
    pub fn key(&self, k: &str) -> &Value {
        let tc = &self.config["text_config"];
        if k == "num_heads" || k == "head_dim" {
            // KDA head count/dim only from linear_attn_config (MODEL.md §2.2)
            return &tc["linear_attn_config"][k];
        }
        if !tc[k].is_null() {
            return &tc[k];
        }
        &tc["linear_attn_config"][k]
    }
    pub fn u(&self, k: &str) -> usize {
        self.key(k).as_u64().unwrap_or_else(|| panic!("key {k}")) as usize
    }
    pub fn f(&self, k: &str) -> f64 {
        self.key(k).as_f64().unwrap()
    }
    pub fn b(&self, k: &str) -> bool {
        self.key(k).as_bool().unwrap_or(true)
    }
}

// ---- numerics (plain f64) ----

fn matvec(w: &[f64], rows: usize, x: &[f64]) -> Vec<f64> {
    let cols = x.len();
    assert_eq!(w.len(), rows * cols);
    (0..rows)
        .map(|r| {
            w[r * cols..(r + 1) * cols]
                .iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect()
}

fn rms(x: &[f64], w: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter()
        .enumerate()
        .map(|(i, v)| v * r * w.map(|w| w[i]).unwrap_or(1.0))
        .collect()
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn softmax(s: &[f64]) -> Vec<f64> {
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
    let z: f64 = e.iter().sum();
    e.iter().map(|v| v / z).collect()
}

struct KdaW {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    qc: Vec<f64>,
    kc: Vec<f64>,
    vc: Vec<f64>,
    fa: Vec<f64>,
    fb: Vec<f64>,
    b: Vec<f64>,
    a_log: Vec<f64>,
    dt: Vec<f64>,
    onorm: Vec<f64>,
    g: Vec<f64>,
    o: Vec<f64>,
}

struct MlaW {
    qa: Vec<f64>,
    qan: Vec<f64>,
    qb: Vec<f64>,
    kva: Vec<f64>,
    kvan: Vec<f64>,
    kvb: Vec<f64>,
    g: Option<Vec<f64>>,
    o: Vec<f64>,
}

struct MoeW {
    router: Vec<f64>,
    bias: Vec<f64>,
    down_l: Vec<f64>,
    norm: Option<Vec<f64>>,
    up_l: Vec<f64>,
    shared: Option<(Vec<f64>, Vec<f64>, Vec<f64>)>,
    experts: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)>,
}

enum Attn {
    Kda(KdaW),
    Mla(MlaW),
}
enum Ffn {
    Dense(Vec<f64>, Vec<f64>, Vec<f64>),
    Moe(MoeW),
}

struct Layer {
    in_norm: Vec<f64>,
    post_norm: Vec<f64>,
    f_attn: Vec<f64>,
    f_mlp: Vec<f64>,
    attn: Attn,
    ffn: Ffn,
}

/// The reference model.
pub struct RefModel {
    pub h: usize,
    pub v: usize,
    hk: usize,
    dk: usize,
    kc: usize,
    hm: usize,
    rq: usize,
    rkv: usize,
    dn: usize,
    dr: usize,
    dv: usize,
    e: usize,
    kt: usize,
    l: usize,
    i: usize,
    bs: usize,
    eps: f64,
    b1: f64,
    b2: f64,
    gmin: f64,
    rsf: f64,
    renorm: bool,
    embed: Vec<f64>,
    head: Vec<f64>,
    norm: Vec<f64>,
    f_out: Vec<f64>,
    layers: Vec<Layer>,
    pub variant: Variant,
}

enum LState {
    Kda {
        s: Vec<Vec<f64>>,
        hist: Vec<Vec<Vec<f64>>>,
    },
    Mla {
        lat: Vec<Vec<f64>>,
        kpe: Vec<Vec<f64>>,
    },
}

impl RefModel {
    pub fn load(c: &Ckpt) -> RefModel {
        let nl = c.u("num_hidden_layers");
        let full: Vec<usize> = c
            .key("full_attn_layers")
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let first_dense = c.u("first_k_dense_replace");
        let p = |l: usize, s: &str| format!("language_model.model.layers.{l}.{s}");
        let mut layers = Vec::new();
        for l in 0..nl {
            let f = |s: &str| c.f64(&p(l, s));
            let fold = |a: Vec<f64>, b: Vec<f64>| {
                a.iter().zip(&b).map(|(x, y)| x * y).collect::<Vec<f64>>()
            };
            let attn = if full.contains(&(l + 1)) {
                Attn::Mla(MlaW {
                    qa: f("self_attn.q_a_proj.weight"),
                    qan: f("self_attn.q_a_layernorm.weight"),
                    qb: f("self_attn.q_b_proj.weight"),
                    kva: f("self_attn.kv_a_proj_with_mqa.weight"),
                    kvan: f("self_attn.kv_a_layernorm.weight"),
                    kvb: f("self_attn.kv_b_proj.weight"),
                    g: if c.b("mla_use_output_gate") {
                        Some(f("self_attn.g_proj.weight"))
                    } else {
                        None
                    },
                    o: f("self_attn.o_proj.weight"),
                })
            } else {
                Attn::Kda(KdaW {
                    q: f("self_attn.q_proj.weight"),
                    k: f("self_attn.k_proj.weight"),
                    v: f("self_attn.v_proj.weight"),
                    qc: f("self_attn.q_conv1d.weight"),
                    kc: f("self_attn.k_conv1d.weight"),
                    vc: f("self_attn.v_conv1d.weight"),
                    fa: f("self_attn.f_a_proj.weight"),
                    fb: f("self_attn.f_b_proj.weight"),
                    b: f("self_attn.b_proj.weight"),
                    a_log: f("self_attn.A_log"),
                    dt: f("self_attn.dt_bias"),
                    onorm: f("self_attn.o_norm.weight"),
                    g: f("self_attn.g_proj.weight"),
                    o: f("self_attn.o_proj.weight"),
                })
            };
            let ffn = if l < first_dense {
                Ffn::Dense(
                    f("mlp.gate_proj.weight"),
                    f("mlp.up_proj.weight"),
                    f("mlp.down_proj.weight"),
                )
            } else {
                let m = |s: &str| f(&format!("block_sparse_moe.{s}"));
                let e = c.u("num_experts");
                Ffn::Moe(MoeW {
                    router: m("gate.weight"),
                    bias: m("gate.e_score_correction_bias"),
                    down_l: m("routed_expert_down_proj.weight"),
                    norm: if c.b("latent_moe_use_norm") {
                        Some(m("routed_expert_norm.weight"))
                    } else {
                        None
                    },
                    up_l: m("routed_expert_up_proj.weight"),
                    shared: if c.u("num_shared_experts") > 0 {
                        Some((
                            m("shared_experts.gate_proj.weight"),
                            m("shared_experts.up_proj.weight"),
                            m("shared_experts.down_proj.weight"),
                        ))
                    } else {
                        None
                    },
                    experts: (0..e)
                        .map(|x| {
                            let q = |w: &str| {
                                c.mxfp4(&p(l, &format!("block_sparse_moe.experts.{x}.{w}")))
                            };
                            (q("w1"), q("w2"), q("w3"))
                        })
                        .collect(),
                })
            };
            layers.push(Layer {
                in_norm: f("input_layernorm.weight"),
                post_norm: f("post_attention_layernorm.weight"),
                f_attn: fold(
                    f("self_attention_res_norm.weight"),
                    f("self_attention_res_proj.weight"),
                ),
                f_mlp: fold(f("mlp_res_norm.weight"), f("mlp_res_proj.weight")),
                attn,
                ffn,
            });
        }
        let g = |s: &str| c.f64(&format!("language_model.{s}"));
        let tied = c.config["text_config"]["tie_word_embeddings"]
            .as_bool()
            .unwrap_or(false);
        let embed = g("model.embed_tokens.weight");
        RefModel {
            h: c.u("hidden_size"),
            v: c.u("vocab_size"),
            hk: c.u("num_heads"),
            dk: c.u("head_dim"),
            kc: c.u("short_conv_kernel_size"),
            hm: c.u("num_attention_heads"),
            rq: c.u("q_lora_rank"),
            rkv: c.u("kv_lora_rank"),
            dn: c.u("qk_nope_head_dim"),
            dr: c.u("qk_rope_head_dim"),
            dv: c.u("v_head_dim"),
            e: c.u("num_experts"),
            kt: c.u("num_experts_per_token"),
            l: c.u("routed_expert_hidden_size"),
            i: c.u("moe_intermediate_size"),
            bs: c.u("attn_res_block_size"),
            eps: c.f("rms_norm_eps"),
            b1: c.f("activation_situ_beta"),
            b2: c.f("activation_situ_linear_beta"),
            gmin: c.f("gate_lower_bound"),
            rsf: c.f("routed_scaling_factor"),
            renorm: c.b("moe_renormalize"),
            head: if tied {
                embed.clone()
            } else {
                g("lm_head.weight")
            },
            embed,
            norm: g("model.norm.weight"),
            f_out: g("model.output_attn_res_norm.weight")
                .iter()
                .zip(g("model.output_attn_res_proj.weight"))
                .map(|(a, b)| a * b)
                .collect(),
            layers,
            variant: Variant::None,
        }
    }

    fn var(&self, v: Variant) -> bool {
        self.variant == v
    }

    fn situ(&self, a: &[f64], b: &[f64]) -> Vec<f64> {
        let (b1, b2) = if self.var(Variant::SituCapsSwapped) {
            (self.b2, self.b1)
        } else {
            (self.b1, self.b2)
        };
        a.iter()
            .zip(b)
            .map(|(&a, &b)| {
                let capped = b1 * (a / b1).tanh();
                let s = if self.var(Variant::SituSigmoidOfCapped) {
                    sig(capped)
                } else {
                    sig(a)
                };
                capped * s * (b2 * (b / b2).tanh())
            })
            .collect()
    }

    fn agg(&self, src: &[&Vec<f64>], f: &[f64]) -> Vec<f64> {
        let h = self.h as f64;
        let s: Vec<f64> = src
            .iter()
            .map(|v| {
                let r = 1.0 / (v.iter().map(|x| x * x).sum::<f64>() / h + self.eps).sqrt();
                r * v.iter().zip(f).map(|(a, b)| a * b).sum::<f64>()
            })
            .collect();
        let p = softmax(&s);
        let mut out = vec![0f64; self.h];
        for (i, v) in src.iter().enumerate() {
            let r = if self.var(Variant::AggNormalisedValues) {
                1.0 / (v.iter().map(|x| x * x).sum::<f64>() / h + self.eps).sqrt()
            } else {
                1.0
            };
            for d in 0..self.h {
                out[d] += p[i] * v[d] * r;
            }
        }
        out
    }

    fn conv(&self, taps: &[f64], hist: &mut Vec<Vec<f64>>, x: &[f64]) -> Vec<f64> {
        let kc = self.kc;
        let c = x.len();
        let mut out = vec![0f64; c];
        for ch in 0..c {
            let mut acc = 0.0;
            for m in 0..kc {
                let u = if m == 0 { x[ch] } else { hist[kc - 1 - m][ch] };
                let tap = if self.var(Variant::ConvTapsReversed) {
                    taps[ch * kc + m]
                } else {
                    taps[ch * kc + kc - 1 - m]
                };
                acc += tap * u;
            }
            out[ch] = acc * sig(acc);
        }
        if kc > 1 {
            hist.remove(0);
            hist.push(if self.var(Variant::ConvHistoryPostConv) {
                out.clone()
            } else {
                x.to_vec()
            });
        }
        out
    }

    fn kda(&self, w: &KdaW, st: &mut LState, x: &[f64]) -> Vec<f64> {
        let (hk, dk) = (self.hk, self.dk);
        let pk = hk * dk;
        let (s, hist) = match st {
            LState::Kda { s, hist } => (s, hist),
            _ => unreachable!(),
        };
        let q0 = matvec(&w.q, pk, x);
        let k0 = matvec(&w.k, pk, x);
        let v0 = matvec(&w.v, pk, x);
        let fa = matvec(&w.fa, dk, x);
        let z = matvec(&w.fb, pk, &fa);
        let b = matvec(&w.b, hk, x);
        let gl = matvec(&w.g, pk, x);
        let mut q = self.conv(&w.qc, &mut hist[0], &q0);
        let mut k = self.conv(&w.kc, &mut hist[1], &k0);
        let v = self.conv(&w.vc, &mut hist[2], &v0);
        let sd = 1.0 / (dk as f64).sqrt();
        let mut o = vec![0f64; pk];
        for h in 0..hk {
            let r = h * dk..(h + 1) * dk;
            let l2 = |x: &[f64]| {
                let ss: f64 = x.iter().map(|v| v * v).sum();
                if self.var(Variant::L2NormMean) {
                    1.0 / (ss / x.len() as f64 + 1e-6).sqrt()
                } else if self.var(Variant::L2NormMaxEps) {
                    1.0 / ss.sqrt().max(1e-12)
                } else {
                    1.0 / (ss + 1e-6).sqrt()
                }
            };
            let rq = l2(&q[r.clone()]);
            let rk = l2(&k[r.clone()]);
            let qs = if self.var(Variant::QScaleMissing) || self.var(Variant::QScaleOnK) {
                1.0
            } else {
                sd
            };
            let ks = if self.var(Variant::QScaleOnK) {
                sd
            } else {
                1.0
            };
            for c in r.clone() {
                q[c] *= rq * qs;
                k[c] *= rk * ks;
            }
            let beta = sig(b[h]);
            let alpha: Vec<f64> = (0..dk)
                .map(|d| {
                    let al = if self.var(Variant::ALogPerChannel) {
                        w.a_log[d]
                    } else {
                        w.a_log[h]
                    };
                    (self.gmin * sig(al.exp() * (z[h * dk + d] + w.dt[h * dk + d]))).exp()
                })
                .collect();
            // mathematical S[i][j]: i key, j value
            let sh = &mut s[h];
            let old = sh.clone();
            let qh = &q[r.clone()];
            let kh = &k[r.clone()];
            let vh = &v[r.clone()];
            let mut u = vec![0f64; dk];
            if self.var(Variant::KdaReadBeforeDecay) {
                for j in 0..dk {
                    u[j] = (0..dk).map(|i| sh[i * dk + j] * kh[i]).sum();
                }
            }
            for i in 0..dk {
                for j in 0..dk {
                    sh[i * dk + j] *= alpha[i];
                }
            }
            if !self.var(Variant::KdaReadBeforeDecay) {
                for j in 0..dk {
                    u[j] = (0..dk).map(|i| sh[i * dk + j] * kh[i]).sum();
                }
            }
            for i in 0..dk {
                for j in 0..dk {
                    sh[i * dk + j] += kh[i] * beta * (vh[j] - u[j]);
                }
            }
            let src: &Vec<f64> = if self.var(Variant::KdaOutputOldState) {
                &old
            } else {
                sh
            };
            for j in 0..dk {
                o[h * dk + j] = (0..dk).map(|i| src[i * dk + j] * qh[i]).sum();
            }
        }
        let gate_first = self.var(Variant::KdaGateBeforeNorm);
        if gate_first {
            for c in 0..pk {
                o[c] *= sig(gl[c]);
            }
        }
        let eps = if self.var(Variant::KdaNormEps1e6) {
            1e-6
        } else {
            self.eps
        };
        let mut on = vec![0f64; pk];
        for h in 0..hk {
            let gain: Vec<f64> = if self.var(Variant::KdaPerHeadGain) {
                vec![w.onorm[h]; dk]
            } else {
                w.onorm.clone()
            };
            let n = rms(&o[h * dk..(h + 1) * dk], Some(&gain), eps);
            on[h * dk..(h + 1) * dk].copy_from_slice(&n);
        }
        if !gate_first {
            for c in 0..pk {
                on[c] *= sig(gl[c]);
            }
        }
        matvec(&w.o, self.h, &on)
    }

    fn rope(&self, x: &mut [f64], pos: usize) {
        let d = x.len();
        let half = d / 2;
        for i in 0..half {
            let th = pos as f64 / 10000f64.powf(2.0 * i as f64 / d as f64);
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * th.cos() - b * th.sin();
            x[i + half] = b * th.cos() + a * th.sin();
        }
    }

    fn mla(&self, w: &MlaW, st: &mut LState, x: &[f64], pos: usize) -> Vec<f64> {
        let (hm, dn, dr, rkv) = (self.hm, self.dn, self.dr, self.rkv);
        let dq = dn + dr;
        let (lats, kpes) = match st {
            LState::Mla { lat, kpe } => (lat, kpe),
            _ => unreachable!(),
        };
        let leps = if self.var(Variant::MlaEps1e5) {
            1e-5
        } else {
            1e-6
        };
        let cq = matvec(&w.qa, self.rq, x);
        let cqn = rms(&cq, Some(&w.qan), leps);
        let qall = matvec(&w.qb, hm * dq, &cqn);
        let c = matvec(&w.kva, rkv + dr, x);
        let (mut lat, mut kpe) = (c[..rkv].to_vec(), c[rkv..].to_vec());
        if self.var(Variant::MlaNormOverRow) {
            let ms = c.iter().map(|v| v * v).sum::<f64>() / c.len() as f64;
            let r = 1.0 / (ms + leps).sqrt();
            for (i, v) in lat.iter_mut().enumerate() {
                *v *= r * w.kvan[i];
            }
            for v in kpe.iter_mut() {
                *v *= r;
            }
        } else {
            let raw = lat.clone();
            lat = rms(&lat, Some(&w.kvan), leps);
            if self.var(Variant::MlaKpeNormed) {
                kpe = rms(&kpe, None, leps);
            }
            if self.var(Variant::MlaUnnormCached) {
                // this position sees its normalised latent; later positions see the raw one
                lats.push(raw);
                kpes.push(kpe.clone());
                let n = lats.len();
                let keep = std::mem::replace(&mut lats[n - 1], lat.clone());
                let out = self.mla_attend(w, lats, kpes, &qall, x, pos);
                lats[n - 1] = keep;
                return out;
            }
        }
        if self.var(Variant::MlaRotary) {
            self.rope(&mut kpe, pos);
        }
        lats.push(lat);
        kpes.push(kpe);
        self.mla_attend(w, lats, kpes, &qall, x, pos)
    }

    fn mla_attend(
        &self,
        w: &MlaW,
        lats: &[Vec<f64>],
        kpes: &[Vec<f64>],
        qall: &[f64],
        x: &[f64],
        pos: usize,
    ) -> Vec<f64> {
        let (hm, dn, dr, dv, rkv) = (self.hm, self.dn, self.dr, self.dv, self.rkv);
        let dq = dn + dr;
        let scale = if self.var(Variant::MlaScaleDn) {
            1.0 / (dn as f64).sqrt()
        } else {
            1.0 / (dq as f64).sqrt()
        };
        let mut o = vec![0f64; hm * dv];
        for h in 0..hm {
            let qh = &qall[h * dq..(h + 1) * dq];
            let mut qpe = qh[dn..].to_vec();
            if self.var(Variant::MlaRotary) {
                self.rope(&mut qpe, pos);
            }
            let kb = &w.kvb[h * (dn + dv) * rkv..];
            let scores: Vec<f64> = (0..lats.len())
                .map(|s| {
                    let kn = matvec(&kb[..dn * rkv], dn, &lats[s]);
                    let a: f64 = kn.iter().zip(&qh[..dn]).map(|(a, b)| a * b).sum();
                    let b: f64 = kpes[s].iter().zip(&qpe).map(|(a, b)| a * b).sum();
                    (a + b) * scale
                })
                .collect();
            let p = softmax(&scores);
            for s in 0..lats.len() {
                let vs = matvec(&kb[dn * rkv..(dn + dv) * rkv], dv, &lats[s]);
                for j in 0..dv {
                    o[h * dv + j] += p[s] * vs[j];
                }
            }
        }
        if self.var(Variant::MlaGateNorm) {
            for h in 0..hm {
                let n = rms(&o[h * dv..(h + 1) * dv], None, self.eps);
                o[h * dv..(h + 1) * dv].copy_from_slice(&n);
            }
        }
        if let Some(g) = &w.g {
            let gl = matvec(g, hm * dv, x);
            for c in 0..hm * dv {
                o[c] *= sig(gl[c]);
            }
        }
        matvec(&w.o, self.h, &o)
    }

    /// The selected experts (selection order) and weights; public for the router tests.
    pub fn route(&self, r: &[f64], bias: &[f64]) -> (Vec<usize>, Vec<f64>) {
        let s: Vec<f64> = if self.var(Variant::RouterSoftmax) {
            softmax(r)
        } else {
            r.iter().map(|&x| sig(x)).collect()
        };
        let mut idx: Vec<usize> = (0..s.len()).collect();
        idx.sort_by(|&a, &b| {
            (s[b] + bias[b])
                .partial_cmp(&(s[a] + bias[a]))
                .unwrap()
                .then(a.cmp(&b))
        });
        let sel = idx[..self.kt].to_vec();
        let base: Vec<f64> = sel
            .iter()
            .map(|&e| {
                if self.var(Variant::BiasInWeights) {
                    s[e] + bias[e]
                } else {
                    s[e]
                }
            })
            .collect();
        let w = if self.renorm && self.kt > 1 {
            let z: f64 = base.iter().sum();
            base.iter().map(|v| v / (z + 1e-20) * self.rsf).collect()
        } else {
            base.iter().map(|v| v * self.rsf).collect()
        };
        (sel, w)
    }

    fn moe(&self, w: &MoeW, x: &[f64], routing: &mut Vec<Vec<usize>>) -> Vec<f64> {
        let r = matvec(&w.router, self.e, x);
        let (sel, wt) = self.route(&r, &w.bias);
        routing.push(sel.clone());
        let zl = matvec(&w.down_l, self.l, x);
        let mut u = vec![0f64; self.l];
        for (k, &e) in sel.iter().enumerate() {
            let (w1, w2, w3) = &w.experts[e];
            let a = matvec(w1, self.i, &zl);
            let b = matvec(w3, self.i, &zl);
            let mut y = matvec(w2, self.l, &self.situ(&a, &b));
            if self.var(Variant::NormPerExpert) {
                y = rms(&y, w.norm.as_deref(), self.eps);
            }
            for c in 0..self.l {
                u[c] += wt[k] * y[c];
            }
        }
        if let Some(n) = &w.norm {
            if !self.var(Variant::NormPerExpert) {
                u = rms(&u, Some(n), self.eps);
            }
        }
        let mut out = matvec(&w.up_l, self.h, &u);
        if let Some((g, up, dn)) = &w.shared {
            let a = matvec(g, g.len() / self.h, x);
            let b = matvec(up, up.len() / self.h, x);
            let sh = matvec(dn, self.h, &self.situ(&a, &b));
            let f = if self.var(Variant::SharedWeighted) {
                wt.iter().sum::<f64>() / self.kt as f64
            } else {
                1.0
            };
            for d in 0..self.h {
                out[d] += f * sh[d];
            }
        }
        out
    }

    /// Teacher-forced forward over `ids`: logits per position, and the per-layer routing
    /// (`routing[layer][position]`, MoE layers only, empty for dense ones).
    pub fn forward(&self, ids: &[u32]) -> (Vec<Vec<f64>>, Vec<Vec<Vec<usize>>>) {
        let nl = self.layers.len();
        let mut states: Vec<LState> = self
            .layers
            .iter()
            .map(|l| match l.attn {
                Attn::Kda(_) => LState::Kda {
                    s: vec![vec![0f64; self.dk * self.dk]; self.hk],
                    hist: vec![vec![vec![0f64; self.hk * self.dk]; self.kc - 1]; 3],
                },
                Attn::Mla(_) => LState::Mla {
                    lat: vec![],
                    kpe: vec![],
                },
            })
            .collect();
        let mut routing = vec![Vec::new(); nl];
        let mut out = Vec::new();
        for (pos, &id) in ids.iter().enumerate() {
            let h = self.h;
            let emb = self.embed[id as usize * h..(id as usize + 1) * h].to_vec();
            let mut b: Vec<Vec<f64>> = vec![];
            let mut p: Option<Vec<f64>> = Some(emb);
            for (l, lw) in self.layers.iter().enumerate() {
                let xa = if b.is_empty() {
                    p.clone().unwrap()
                } else {
                    let mut src: Vec<&Vec<f64>> = b.iter().collect();
                    src.push(p.as_ref().unwrap());
                    self.agg(&src, &lw.f_attn)
                };
                if l % self.bs == 0 {
                    if self.var(Variant::SnapshotAfterClear) {
                        b.push(vec![0f64; h]);
                        p = None;
                    } else if self.var(Variant::AttnResNoClear) {
                        b.push(p.clone().unwrap());
                    } else {
                        b.push(p.take().unwrap());
                    }
                }
                let xn = rms(&xa, Some(&lw.in_norm), self.eps);
                let y = match &lw.attn {
                    Attn::Kda(w) => self.kda(w, &mut states[l], &xn),
                    Attn::Mla(w) => self.mla(w, &mut states[l], &xn, pos),
                };
                p = Some(match p {
                    None => y,
                    Some(pv) => pv.iter().zip(&y).map(|(a, b)| a + b).collect(),
                });
                let mut src: Vec<&Vec<f64>> = b.iter().collect();
                src.push(p.as_ref().unwrap());
                let xm = self.agg(&src, &lw.f_mlp);
                let xn = rms(&xm, Some(&lw.post_norm), self.eps);
                let f = match &lw.ffn {
                    Ffn::Dense(g, u, d) => {
                        let a = matvec(g, g.len() / h, &xn);
                        let bb = matvec(u, u.len() / h, &xn);
                        matvec(d, h, &self.situ(&a, &bb))
                    }
                    Ffn::Moe(w) => self.moe(w, &xn, &mut routing[l]),
                };
                p = Some(p.unwrap().iter().zip(&f).map(|(a, b)| a + b).collect());
            }
            let fin = if self.var(Variant::NoOutputAgg) {
                p.clone().unwrap()
            } else {
                let mut src: Vec<&Vec<f64>> = b.iter().collect();
                src.push(p.as_ref().unwrap());
                self.agg(&src, &self.f_out)
            };
            let n = rms(&fin, Some(&self.norm), self.eps);
            out.push(matvec(&self.head, self.v, &n));
        }
        (out, routing)
    }
}

/// Reads a little-endian f32 file as rows of `width`.
pub fn read_f32_rows(path: &Path, width: usize) -> Vec<Vec<f32>> {
    let b = fs::read(path).unwrap();
    let v: Vec<f32> = b
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    v.chunks(width).map(|r| r.to_vec()).collect()
}

/// max |a − b| over rows.
pub fn max_abs_diff(a: &[Vec<f64>], b: &[Vec<f32>]) -> f64 {
    let mut m = 0f64;
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.iter().zip(y) {
            m = m.max((p - *q as f64).abs());
        }
    }
    m
}
