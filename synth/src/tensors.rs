//! The tensor set of a spec and each tensor's dtype, shape and value recipe.

use crate::*;

impl SynthSpec {
    fn layer_name(l: usize, suffix: &str) -> String {
        format!("{PREFIX}model.layers.{l}.{suffix}")
    }

    /// The model-level tensors (MODEL.md §4, "Model level"): `embed_tokens`, `lm_head` (unless
    /// tied), `norm`, `output_attn_res_norm`, `output_attn_res_proj`.
    pub fn model_tensors(&self) -> Vec<TensorDef> {
        let h = self.hidden_size;
        let v = self.vocab_size;
        let mut out = vec![
            // Unit-scale embedding rows: the first RMSNorm rescales them, and the residual
            // sum P starts at the same magnitude as the layer outputs.
            TensorDef::bf16(
                format!("{PREFIX}model.embed_tokens.weight"),
                &[v, h],
                -1.0,
                1.0,
            ),
            gain(format!("{PREFIX}model.norm.weight"), h),
            gain(format!("{PREFIX}model.output_attn_res_norm.weight"), h),
            matrix(format!("{PREFIX}model.output_attn_res_proj.weight"), 1, h),
        ];
        if !self.tie_word_embeddings {
            out.push(matrix(format!("{PREFIX}lm_head.weight"), v, h));
        }
        out
    }

    /// The trunk tensors of zero-based layer `l` (MODEL.md §4: every layer, KDA or MLA, dense
    /// FFN or MoE trunk), with their value recipes. Routed experts are in
    /// [`SynthSpec::expert_tensors`].
    pub fn layer_tensors(&self, l: usize) -> Vec<TensorDef> {
        let h = self.hidden_size;
        let n = |s: &str| Self::layer_name(l, s);
        let mut out = vec![
            gain(n("input_layernorm.weight"), h),
            gain(n("post_attention_layernorm.weight"), h),
            gain(n("self_attention_res_norm.weight"), h),
            matrix(n("self_attention_res_proj.weight"), 1, h),
            gain(n("mlp_res_norm.weight"), h),
            matrix(n("mlp_res_proj.weight"), 1, h),
        ];
        if self.is_mla(l) {
            let (hm, rq, rkv) = (
                self.num_attention_heads,
                self.q_lora_rank,
                self.kv_lora_rank,
            );
            let dq = self.qk_nope_head_dim + self.qk_rope_head_dim;
            let dv = self.v_head_dim;
            out.push(matrix(n("self_attn.q_a_proj.weight"), rq, h));
            out.push(gain(n("self_attn.q_a_layernorm.weight"), rq));
            out.push(matrix(n("self_attn.q_b_proj.weight"), hm * dq, rq));
            out.push(matrix(
                n("self_attn.kv_a_proj_with_mqa.weight"),
                rkv + self.qk_rope_head_dim,
                h,
            ));
            out.push(gain(n("self_attn.kv_a_layernorm.weight"), rkv));
            out.push(matrix(
                n("self_attn.kv_b_proj.weight"),
                hm * (self.qk_nope_head_dim + dv),
                rkv,
            ));
            if self.mla_use_output_gate {
                out.push(matrix(n("self_attn.g_proj.weight"), hm * dv, h));
            }
            out.push(matrix(n("self_attn.o_proj.weight"), h, hm * dv));
        } else {
            let (hk, dk, kc) = (
                self.kda_num_heads,
                self.kda_head_dim,
                self.short_conv_kernel_size,
            );
            let pk = hk * dk;
            for p in ["q", "k", "v"] {
                out.push(matrix(n(&format!("self_attn.{p}_proj.weight")), pk, h));
                // Taps of std ≈ 0.4 (the fixtures' choice): the conv mixes the current and
                // the previous inputs visibly without growing them.
                out.push(TensorDef::f32(
                    n(&format!("self_attn.{p}_conv1d.weight")),
                    &[pk, 1, kc],
                    -0.7,
                    0.7,
                ));
            }
            out.push(matrix(n("self_attn.f_a_proj.weight"), dk, h));
            out.push(matrix(n("self_attn.f_b_proj.weight"), pk, dk));
            out.push(matrix(n("self_attn.b_proj.weight"), hk, h));
            // A_log per head (a = e^A_log in [1, 12.2]), the tail exactly +0 (MODEL.md §4).
            out.push(TensorDef {
                name: n("self_attn.A_log"),
                dtype: Dtype::F32,
                shape: vec![dk.max(hk)],
                init: Init::F32HeadPrefix {
                    used: hk,
                    lo: 0.0,
                    hi: 2.5,
                },
            });
            // dt_bias spread so that the bounded decay α covers most of [e^gmin, 1].
            out.push(TensorDef::f32(n("self_attn.dt_bias"), &[pk], -2.0, 1.0));
            out.push(TensorDef::f32(
                n("self_attn.o_norm.weight"),
                &[dk],
                0.8,
                1.2,
            ));
            out.push(matrix(n("self_attn.g_proj.weight"), pk, h));
            out.push(matrix(n("self_attn.o_proj.weight"), h, pk));
        }
        if self.is_dense(l) {
            let f = self.intermediate_size;
            out.push(matrix(n("mlp.gate_proj.weight"), f, h));
            out.push(matrix(n("mlp.up_proj.weight"), f, h));
            out.push(matrix(n("mlp.down_proj.weight"), h, f));
        } else {
            let (e, lat) = (self.num_experts, self.routed_expert_hidden_size);
            // Independent random router rows (score logits of unit variance) and a small
            // bias: every token's top-k is its own, so selections spread over all experts.
            out.push(matrix(n("block_sparse_moe.gate.weight"), e, h));
            out.push(TensorDef::f32(
                n("block_sparse_moe.gate.e_score_correction_bias"),
                &[e],
                -0.02,
                0.02,
            ));
            out.push(matrix(
                n("block_sparse_moe.routed_expert_down_proj.weight"),
                lat,
                h,
            ));
            if self.latent_moe_use_norm {
                out.push(gain(n("block_sparse_moe.routed_expert_norm.weight"), lat));
            }
            out.push(matrix(
                n("block_sparse_moe.routed_expert_up_proj.weight"),
                h,
                lat,
            ));
            let sw = self.num_shared_experts * self.moe_intermediate_size;
            if sw > 0 {
                out.push(matrix(
                    n("block_sparse_moe.shared_experts.gate_proj.weight"),
                    sw,
                    h,
                ));
                out.push(matrix(
                    n("block_sparse_moe.shared_experts.up_proj.weight"),
                    sw,
                    h,
                ));
                out.push(matrix(
                    n("block_sparse_moe.shared_experts.down_proj.weight"),
                    h,
                    sw,
                ));
            }
        }
        out
    }

    /// The six MXFP4 tensors of routed expert `e` of MoE layer `l` (MODEL.md §4, FORMATS.md
    /// §5), in their fixed on-disk order: `w1` (gate, logical [I, L]), `w2` (down, [L, I]),
    /// `w3` (up, [I, L]), each `weight_packed` then `weight_scale`.
    pub fn expert_tensors(&self, l: usize, e: usize) -> Vec<TensorDef> {
        let (lat, i) = (self.routed_expert_hidden_size, self.moe_intermediate_size);
        let mut out = Vec::with_capacity(6);
        for (w, rows, cols) in [("w1", i, lat), ("w2", lat, i), ("w3", i, lat)] {
            let base = format!("block_sparse_moe.experts.{e}.{w}");
            out.push(TensorDef {
                name: Self::layer_name(l, &format!("{base}.weight_packed")),
                dtype: Dtype::U8,
                shape: vec![rows, cols / 2],
                init: Init::Nibbles,
            });
            let (lo, hi) = e8m0_range(cols);
            out.push(TensorDef {
                name: Self::layer_name(l, &format!("{base}.weight_scale")),
                dtype: Dtype::U8,
                shape: vec![rows, cols / 32],
                init: Init::E8M0 { lo, hi },
            });
        }
        out
    }

    /// The dummy multimodal tensors of the last two shards (ignored by a text engine).
    pub fn vision_tensors(&self) -> (Vec<TensorDef>, Vec<TensorDef>) {
        (
            vec![matrix("mm_projector.proj.0.weight".to_string(), 16, 16)],
            vec![gain(
                "vision_tower.encoder.final_layernorm.weight".to_string(),
                16,
            )],
        )
    }
}

/// The three dtypes the catalogue binds (FORMATS.md §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// bfloat16, 2 bytes.
    BF16,
    /// IEEE binary32, 4 bytes.
    F32,
    /// bytes (MXFP4 nibbles and E8M0 scales).
    U8,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::BF16 => 2,
            Dtype::F32 => 4,
            Dtype::U8 => 1,
        }
    }

    /// The safetensors dtype string.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BF16 => "BF16",
            Dtype::F32 => "F32",
            Dtype::U8 => "U8",
        }
    }
}

/// How a tensor's values are drawn. Uniform draws use the block's PRNG stream (see the module
/// doc); every recipe consumes whole 64-bit draws in element order.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// BF16 uniform on [lo, hi]: each element takes 16 bits of a draw (four per draw, low bits
    /// first) through a 65,536-entry table of lo + (hi − lo)·(r + ½)/65536, rounded to BF16
    /// (nearest even).
    Bf16Uniform {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// F32 uniform on [lo, hi]: each element takes 32 bits (two per draw, low half first), of
    /// which the top 24 give lo + (hi − lo)·(u + ½)/2^24, in f64 rounded to f32.
    F32Uniform {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// F32, the first `used` elements as [`Init::F32Uniform`], the rest exactly +0.0
    /// (`A_log`: one value per head, zero padding; MODEL.md §4).
    F32HeadPrefix {
        /// Number of leading non-zero elements (Hk).
        used: usize,
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// MXFP4 packed E2M1 nibbles: uniformly random bytes (all 16 codes in both nibbles).
    Nibbles,
    /// E8M0 scale bytes uniform on lo..=hi (1 ≤ lo ≤ hi ≤ 254), each from 8 bits of a draw.
    E8M0 {
        /// Smallest scale byte.
        lo: u8,
        /// Largest scale byte.
        hi: u8,
    },
}

/// One tensor of the checkpoint: its name, dtype, shape and value recipe.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDef {
    /// Full tensor name (MODEL.md §4).
    pub name: String,
    /// Dtype.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Value recipe.
    pub init: Init,
}

impl TensorDef {
    fn bf16(name: String, shape: &[usize], lo: f32, hi: f32) -> TensorDef {
        TensorDef {
            name,
            dtype: Dtype::BF16,
            shape: shape.to_vec(),
            init: Init::Bf16Uniform { lo, hi },
        }
    }

    fn f32(name: String, shape: &[usize], lo: f32, hi: f32) -> TensorDef {
        TensorDef {
            name,
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            init: Init::F32Uniform { lo, hi },
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.numel() * self.dtype.size()
    }
}

/// A BF16 `[rows, cols]` matrix uniform on ±sqrt(3/cols): variance 1/fan_in, so a unit-RMS
/// input gives unit-RMS outputs.
fn matrix(name: String, rows: usize, cols: usize) -> TensorDef {
    let a = (3.0f64 / cols as f64).sqrt() as f32;
    TensorDef::bf16(name, &[rows, cols], -a, a)
}

/// A BF16 RMSNorm gain of width n, uniform on [0.8, 1.2] (non-unit, so a missing gain shows).
fn gain(name: String, n: usize) -> TensorDef {
    TensorDef::bf16(name, &[n], 0.8, 1.2)
}

/// E8M0 scale range for an MXFP4 matrix with `fan_in` columns: two consecutive exponents
/// 2^k, 2^(k+1) with k chosen so the mean square of the decoded values,
/// E[E2M1²] · (4^k + 4^(k+1))/2 = 8.5625 · 2.5 · 4^k, is closest (in ratio) to 1/fan_in.
/// K3 (3584 and 3072 columns): bytes 119..=120. Clamped to 1..=254 (never 0, never 255).
pub fn e8m0_range(fan_in: usize) -> (u8, u8) {
    let target = 1.0 / fan_in as f64;
    let mut best = (f64::INFINITY, 0i32);
    for k in -120..=120i32 {
        let ms = 8.5625 * 2.5 * pow2(2 * k);
        let ratio = if ms > target {
            ms / target
        } else {
            target / ms
        };
        if ratio < best.0 {
            best = (ratio, k);
        }
    }
    let lo = (127 + best.1).clamp(1, 253) as u8;
    (lo, lo + 1)
}

/// 2^k as f64 for |k| ≤ 1000, by repeated exact doubling/halving (no library math).
fn pow2(k: i32) -> f64 {
    let mut v = 1.0f64;
    if k >= 0 {
        for _ in 0..k {
            v *= 2.0;
        }
    } else {
        for _ in 0..-k {
            v *= 0.5;
        }
    }
    v
}
