//! Synthetic DSpark drafts (DRAFT.md §1) in the published layout: a flat `config.json` with the
//! Inferact K3 draft's keys and one `model.safetensors` whose tensors carry the published names
//! (no `model.` prefix), deterministic from a seed through the same per-block PRNG streams as
//! the checkpoints. [`DraftSpec::released`] has the released widths (4.77 GB without the
//! embedding copy); [`DraftSpec::tiny_for`] fits a small target (the tests' fixtures).

use crate::tensors::{Dtype, Init, TensorDef};
use crate::values::tensor_data;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Widths and options of a synthetic draft (the keys of DRAFT.md §1).
#[derive(Clone, Debug, PartialEq)]
pub struct DraftSpec {
    /// `hidden_size` H (= the target's and `target_hidden_size`).
    pub hidden_size: usize,
    /// `intermediate_size` F.
    pub intermediate_size: usize,
    /// `num_hidden_layers` nL.
    pub num_hidden_layers: usize,
    /// `num_attention_heads` (= `num_key_value_heads`).
    pub num_attention_heads: usize,
    /// `q_lora_rank` Rq.
    pub q_lora_rank: usize,
    /// `kv_lora_rank` Rkv.
    pub kv_lora_rank: usize,
    /// `qk_nope_head_dim` Dn.
    pub qk_nope_head_dim: usize,
    /// `qk_rope_head_dim` Dr.
    pub qk_rope_head_dim: usize,
    /// `v_head_dim` Dv.
    pub v_head_dim: usize,
    /// `vocab_size` V (= `draft_vocab_size`).
    pub vocab_size: usize,
    /// `target_num_hidden_layers`.
    pub target_num_hidden_layers: usize,
    /// `target_layer_ids`, ascending.
    pub target_layer_ids: Vec<usize>,
    /// `mask_token_id`.
    pub mask_token_id: usize,
    /// `markov_rank` r (`markov_head_type` `vanilla`).
    pub markov_rank: usize,
    /// `block_size` K.
    pub block_size: usize,
    /// Write the frozen `embed_tokens.weight` copy [V, H] (the published drafts carry it;
    /// the engine never reads it).
    pub embed_copy: bool,
}

impl DraftSpec {
    /// The Inferact K3 draft's widths (DRAFT.md §1): 5 layers at H = 7168, taps
    /// [2, 23, 47, 71, 89] of 93, Markov rank 256, block 7.
    pub fn released() -> DraftSpec {
        DraftSpec {
            hidden_size: 7168,
            intermediate_size: 14336,
            num_hidden_layers: 5,
            num_attention_heads: 64,
            q_lora_rank: 1536,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            vocab_size: 163840,
            target_num_hidden_layers: 93,
            target_layer_ids: vec![2, 23, 47, 71, 89],
            mask_token_id: 163837,
            markov_rank: 256,
            block_size: 7,
            embed_copy: true,
        }
    }

    /// A tiny draft for a target of hidden width `h`, `layers` layers and vocabulary `vocab`:
    /// 2 layers, 2 heads, ranks 16, head dims 8, three taps spread over the target's layers,
    /// Markov rank 4, block 7, no embedding copy (it would be [V, H]).
    pub fn tiny_for(h: usize, layers: usize, vocab: usize) -> DraftSpec {
        let last = layers - 1;
        let mut taps = vec![0, last / 2, last];
        taps.dedup();
        DraftSpec {
            hidden_size: h,
            intermediate_size: 2 * h,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            q_lora_rank: 16,
            kv_lora_rank: 16,
            qk_nope_head_dim: 8,
            qk_rope_head_dim: 8,
            v_head_dim: 8,
            vocab_size: vocab,
            target_num_hidden_layers: layers,
            target_layer_ids: taps,
            mask_token_id: vocab - 3,
            markov_rank: 4,
            block_size: 7,
            embed_copy: false,
        }
    }

    /// The flat `config.json` text (DRAFT.md §1, the Inferact draft's keys and values).
    pub fn config_json(&self) -> String {
        let ids: Vec<String> = self
            .target_layer_ids
            .iter()
            .map(|i| i.to_string())
            .collect();
        let mut s = String::from("{\n");
        let mut kv = |k: &str, v: String| {
            let _ = writeln!(s, "  \"{k}\": {v},");
        };
        kv("architectures", "[\"K3DSparkModel\"]".into());
        kv("model_type", "\"k3_dspark\"".into());
        kv("hidden_size", self.hidden_size.to_string());
        kv("intermediate_size", self.intermediate_size.to_string());
        kv("num_hidden_layers", self.num_hidden_layers.to_string());
        kv("num_attention_heads", self.num_attention_heads.to_string());
        kv("num_key_value_heads", self.num_attention_heads.to_string());
        kv("q_lora_rank", self.q_lora_rank.to_string());
        kv("kv_lora_rank", self.kv_lora_rank.to_string());
        kv("qk_nope_head_dim", self.qk_nope_head_dim.to_string());
        kv("qk_rope_head_dim", self.qk_rope_head_dim.to_string());
        kv("v_head_dim", self.v_head_dim.to_string());
        kv("rms_norm_eps", "1e-05".into());
        kv("mla_use_nope", "false".into());
        kv("mla_use_output_gate", "false".into());
        kv("hidden_act", "\"silu\"".into());
        kv("vocab_size", self.vocab_size.to_string());
        kv("draft_vocab_size", self.vocab_size.to_string());
        kv("target_hidden_size", self.hidden_size.to_string());
        kv(
            "target_num_hidden_layers",
            self.target_num_hidden_layers.to_string(),
        );
        kv("target_layer_ids", format!("[{}]", ids.join(", ")));
        kv("num_target_layers", self.target_layer_ids.len().to_string());
        kv("mask_token_id", self.mask_token_id.to_string());
        kv("markov_rank", self.markov_rank.to_string());
        kv("markov_head_type", "\"vanilla\"".into());
        kv("enable_confidence_head", "true".into());
        kv("confidence_head_with_markov", "true".into());
        kv("block_size", self.block_size.to_string());
        kv("rope_theta", "50000.0".into());
        kv(
            "rope_scaling",
            "{\"type\": \"yarn\", \"factor\": 32.0, \"original_max_position_embeddings\": 32768, \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}".into(),
        );
        kv("max_position_embeddings", "1048576".into());
        kv("tie_word_embeddings", "false".into());
        s.push_str("  \"torch_dtype\": \"bfloat16\"\n}\n");
        s
    }

    /// Every tensor with its value recipe: matrices uniform on ±sqrt(3/fan_in), gains on
    /// [0.8, 1.2], the Markov embedding on ±sqrt(3) (unit variance, so its term is as large
    /// as the base logits and changes some choices), the confidence head small.
    pub fn tensors(&self) -> Vec<TensorDef> {
        let (h, f, hd) = (
            self.hidden_size,
            self.intermediate_size,
            self.num_attention_heads,
        );
        let (rq, rkv) = (self.q_lora_rank, self.kv_lora_rank);
        let (dn, dr, dv) = (
            self.qk_nope_head_dim,
            self.qk_rope_head_dim,
            self.v_head_dim,
        );
        let (v, r) = (self.vocab_size, self.markov_rank);
        let bf = |name: String, shape: &[usize], a: f32, b: f32| TensorDef {
            name,
            dtype: Dtype::BF16,
            shape: shape.to_vec(),
            init: Init::Bf16Uniform { lo: a, hi: b },
        };
        let mat = |name: String, rows: usize, cols: usize| {
            let a = (3.0f64 / cols as f64).sqrt() as f32;
            bf(name, &[rows, cols], -a, a)
        };
        let gain = |name: String, n: usize| bf(name, &[n], 0.8, 1.2);
        let mut t = Vec::new();
        for i in 0..self.num_hidden_layers {
            let p = format!("layers.{i}.");
            let a = format!("{p}self_attn.");
            t.push(gain(format!("{p}input_layernorm.weight"), h));
            t.push(mat(format!("{a}q_a_proj.weight"), rq, h));
            t.push(gain(format!("{a}q_a_layernorm.weight"), rq));
            t.push(mat(format!("{a}q_b_proj.weight"), hd * (dn + dr), rq));
            t.push(mat(format!("{a}kv_a_proj_with_mqa.weight"), rkv + dr, h));
            t.push(gain(format!("{a}kv_a_layernorm.weight"), rkv));
            t.push(mat(format!("{a}kv_b_proj.weight"), hd * (dn + dv), rkv));
            t.push(mat(format!("{a}o_proj.weight"), h, hd * dv));
            t.push(gain(format!("{p}post_attention_layernorm.weight"), h));
            t.push(mat(format!("{p}mlp.gate_proj.weight"), f, h));
            t.push(mat(format!("{p}mlp.up_proj.weight"), f, h));
            t.push(mat(format!("{p}mlp.down_proj.weight"), h, f));
        }
        let nt = self.target_layer_ids.len();
        t.push(mat("context_proj.weight".into(), h, nt * h));
        t.push(gain("context_norm.weight".into(), h));
        t.push(gain("final_norm.weight".into(), h));
        let s3 = 3f32.sqrt();
        t.push(bf("markov_head.markov_w1.weight".into(), &[v, r], -s3, s3));
        t.push(mat("markov_head.markov_w2.weight".into(), v, r));
        t.push(bf(
            "confidence_head.proj.weight".into(),
            &[1, h + r],
            -0.05,
            0.05,
        ));
        t.push(bf("confidence_head.proj.bias".into(), &[1], -0.5, 0.5));
        if self.embed_copy {
            t.push(mat("embed_tokens.weight".into(), v, h));
        }
        t.sort_by(|a, b| a.name.cmp(&b.name));
        t
    }

    /// Parameters (with the embedding copy when `embed_copy`).
    pub fn parameters(&self) -> u64 {
        self.tensors().iter().map(|t| t.numel()).sum()
    }
}

/// Writes `config.json` and `model.safetensors` (header keys sorted, data in the same order,
/// header padded with spaces to a multiple of 8) of `spec` with values from `seed` into `dir`
/// (created if missing). Returns the bytes of `model.safetensors`.
pub fn write_draft(spec: &DraftSpec, dir: &Path, seed: u64) -> io::Result<u64> {
    fs::create_dir_all(dir)?;
    let tensors = spec.tensors();
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut off = 0u64;
    for t in &tensors {
        let dt = match t.dtype {
            Dtype::BF16 => "BF16",
            Dtype::F32 => "F32",
            Dtype::U8 => "U8",
        };
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        let _ = write!(
            header,
            ",\"{}\":{{\"dtype\":\"{dt}\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            t.name,
            shape.join(","),
            off + t.nbytes()
        );
        off += t.nbytes();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let path = dir.join("model.safetensors");
    let tmp = dir.join("model.safetensors.tmp");
    let mut w = BufWriter::with_capacity(1 << 22, File::create(&tmp)?);
    w.write_all(&(header.len() as u64).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    for t in &tensors {
        w.write_all(&tensor_data(seed, t))?;
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fs::rename(&tmp, &path)?;
    fs::write(dir.join("config.json"), spec.config_json())?;
    Ok(8 + header.len() as u64 + off)
}
