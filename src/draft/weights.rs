//! A DSpark draft directory's tensors (DRAFT.md §1) read and checked against its config:
//! every tensor by name (with or without the `model.` prefix), shape and dtype, refusals
//! naming the tensor (exit 2). `embed_tokens.weight` (a frozen copy of the target's, 2.35 GB
//! in the Inferact draft) is never read: the forward uses the target's embedding and lm_head.
//! The weights are held resident here; planning them against a budget (stream through the
//! ring when they do not fit) is the next step (DRAFT.md §5).

use super::config::DraftConfig;
use crate::bind::reader::{Dtype, Reader, TensorLookup, TensorMeta};
use crate::checkpoint::TensorIndex;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One draft decoder layer (DRAFT.md §1 `layers.{i}.`): BF16 matrices as raw bit patterns
/// `[out, in]` row-major, gains widened to fp32.
pub struct DraftLayer {
    /// `input_layernorm.weight` [H].
    pub input_layernorm: Vec<f32>,
    /// `self_attn.q_a_proj.weight` [Rq, H].
    pub q_a_proj: Vec<u16>,
    /// `self_attn.q_a_layernorm.weight` [Rq].
    pub q_a_layernorm: Vec<f32>,
    /// `self_attn.q_b_proj.weight` [Hd·(Dn+Dr), Rq].
    pub q_b_proj: Vec<u16>,
    /// `self_attn.kv_a_proj_with_mqa.weight` [Rkv+Dr, H].
    pub kv_a_proj_with_mqa: Vec<u16>,
    /// `self_attn.kv_a_layernorm.weight` [Rkv].
    pub kv_a_layernorm: Vec<f32>,
    /// `self_attn.kv_b_proj.weight` [Hd·(Dn+Dv), Rkv].
    pub kv_b_proj: Vec<u16>,
    /// `self_attn.o_proj.weight` [H, Hd·Dv].
    pub o_proj: Vec<u16>,
    /// `post_attention_layernorm.weight` [H].
    pub post_attention_layernorm: Vec<f32>,
    /// `mlp.gate_proj.weight` [F, H].
    pub gate_proj: Vec<u16>,
    /// `mlp.up_proj.weight` [F, H].
    pub up_proj: Vec<u16>,
    /// `mlp.down_proj.weight` [H, F].
    pub down_proj: Vec<u16>,
}

/// The confidence head (DRAFT.md §4): `confidence_head.proj.weight` [1, H (+ r)] widened, and
/// its bias (0 when the checkpoint has none).
pub struct ConfidenceHead {
    /// The projection row, H values (then r more with `confidence_head_with_markov`).
    pub weight: Vec<f32>,
    /// `confidence_head.proj.bias` [1].
    pub bias: f32,
}

/// Every tensor the draft forward uses (DRAFT.md §1), resident.
pub struct DraftWeights {
    /// Layers 0 … nL−1.
    pub layers: Vec<DraftLayer>,
    /// `context_proj.weight` [H, nT·Ht].
    pub context_proj: Vec<u16>,
    /// `context_norm.weight` [H].
    pub context_norm: Vec<f32>,
    /// `final_norm.weight` [H].
    pub final_norm: Vec<f32>,
    /// `fc_norm.{j}.weight` [Ht] per tap, with `fc_norm` (else empty).
    pub fc_norm: Vec<Vec<f32>>,
    /// `markov_head.markov_w1.weight` [V, r] (an embedding) and `markov_w2.weight` [V, r],
    /// when the config has a Markov head.
    pub markov: Option<(Vec<u16>, Vec<u16>)>,
    /// With `enable_confidence_head`.
    pub confidence: Option<ConfidenceHead>,
}

/// The draft's tensor index seen with the optional `model.` prefix: a name is found as written
/// or with `model.` in front (the published drafts use both spellings).
struct Prefixed<'a>(&'a TensorIndex);

impl TensorLookup for Prefixed<'_> {
    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.0
            .meta(name)
            .or_else(|| self.0.meta(&format!("model.{name}")))
    }
    fn shard_paths(&self) -> Vec<PathBuf> {
        self.0.shard_paths()
    }
}

/// A vector (gain or bias) in BF16 or F32, widened to fp32.
fn vector(r: &mut Reader<'_>, lk: &Prefixed<'_>, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    match lk.meta(name).map(|m| m.dtype) {
        Some(Dtype::F32) => r.f32(name, shape),
        _ => r.bf16_f32(name, shape),
    }
}

fn matrix(r: &mut Reader<'_>, name: &str, rows: usize, cols: usize) -> Result<Vec<u16>> {
    let mut v = Vec::new();
    r.bf16_into(name, &[rows, cols], &mut v)?;
    Ok(v)
}

impl DraftWeights {
    /// Reads the draft directory `dir` (its `model.safetensors`, or shards with an index) for
    /// `cfg`: every tensor of DRAFT.md §1 checked by shape and dtype (BF16 matrices; gains
    /// BF16 or F32). Errors (exit 2) start with the directory and name the tensor; an unknown
    /// tensor is ignored, `embed_tokens.weight` is never read.
    pub fn open(dir: &Path, cfg: &DraftConfig) -> Result<DraftWeights> {
        let index = TensorIndex::open(dir)?;
        Self::read(&index, cfg).map_err(|e| e.context(dir.display()))
    }

    fn read(index: &TensorIndex, c: &DraftConfig) -> Result<DraftWeights> {
        let lk = Prefixed(index);
        let mut r = Reader::new(&lk);
        let (h, f, hd) = (c.hidden_size, c.intermediate_size, c.num_attention_heads);
        let (rq, rkv) = (c.q_lora_rank, c.kv_lora_rank);
        let (dn, dr, dv) = (c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim);
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("layers.{i}.");
            let a = format!("{p}self_attn.");
            layers.push(DraftLayer {
                input_layernorm: vector(&mut r, &lk, &format!("{p}input_layernorm.weight"), &[h])?,
                q_a_proj: matrix(&mut r, &format!("{a}q_a_proj.weight"), rq, h)?,
                q_a_layernorm: vector(&mut r, &lk, &format!("{a}q_a_layernorm.weight"), &[rq])?,
                q_b_proj: matrix(&mut r, &format!("{a}q_b_proj.weight"), hd * (dn + dr), rq)?,
                kv_a_proj_with_mqa: matrix(
                    &mut r,
                    &format!("{a}kv_a_proj_with_mqa.weight"),
                    rkv + dr,
                    h,
                )?,
                kv_a_layernorm: vector(&mut r, &lk, &format!("{a}kv_a_layernorm.weight"), &[rkv])?,
                kv_b_proj: matrix(&mut r, &format!("{a}kv_b_proj.weight"), hd * (dn + dv), rkv)?,
                o_proj: matrix(&mut r, &format!("{a}o_proj.weight"), h, hd * dv)?,
                post_attention_layernorm: vector(
                    &mut r,
                    &lk,
                    &format!("{p}post_attention_layernorm.weight"),
                    &[h],
                )?,
                gate_proj: matrix(&mut r, &format!("{p}mlp.gate_proj.weight"), f, h)?,
                up_proj: matrix(&mut r, &format!("{p}mlp.up_proj.weight"), f, h)?,
                down_proj: matrix(&mut r, &format!("{p}mlp.down_proj.weight"), h, f)?,
            });
        }
        let nt = c.target_layer_ids.len();
        let ht = c.target_hidden_size;
        let context_proj = matrix(&mut r, "context_proj.weight", h, nt * ht)?;
        let context_norm = vector(&mut r, &lk, "context_norm.weight", &[h])?;
        let final_norm = vector(&mut r, &lk, "final_norm.weight", &[h])?;
        let mut fc_norm = Vec::new();
        if c.fc_norm {
            for j in 0..nt {
                fc_norm.push(vector(&mut r, &lk, &format!("fc_norm.{j}.weight"), &[ht])?);
            }
        }
        let markov = match c.markov_rank {
            Some(rank) => Some((
                matrix(&mut r, "markov_head.markov_w1.weight", c.vocab_size, rank)?,
                matrix(&mut r, "markov_head.markov_w2.weight", c.vocab_size, rank)?,
            )),
            None => None,
        };
        let confidence = if c.enable_confidence_head {
            let width = h + if c.confidence_head_with_markov {
                c.markov_rank.unwrap_or(0)
            } else {
                0
            };
            let weight = vector(&mut r, &lk, "confidence_head.proj.weight", &[1, width])?;
            let bias = if lk.meta("confidence_head.proj.bias").is_some() {
                vector(&mut r, &lk, "confidence_head.proj.bias", &[1])?[0]
            } else {
                0.0
            };
            Some(ConfidenceHead { weight, bias })
        } else {
            None
        };
        let w = DraftWeights {
            layers,
            context_proj,
            context_norm,
            final_norm,
            fc_norm,
            markov,
            confidence,
        };
        w.check_finite()?;
        Ok(w)
    }

    /// Refuses a non-finite gain (exit 2 naming it): gains are small and read whole, so they
    /// are checked here; a non-finite matrix value shows as a non-finite activation, which the
    /// forward refuses naming the row.
    fn check_finite(&self) -> Result<()> {
        let mut gains: Vec<(String, &[f32])> = vec![
            ("context_norm.weight".into(), &self.context_norm),
            ("final_norm.weight".into(), &self.final_norm),
        ];
        for (i, l) in self.layers.iter().enumerate() {
            gains.push((
                format!("layers.{i}.input_layernorm.weight"),
                &l.input_layernorm,
            ));
            gains.push((
                format!("layers.{i}.self_attn.q_a_layernorm.weight"),
                &l.q_a_layernorm,
            ));
            gains.push((
                format!("layers.{i}.self_attn.kv_a_layernorm.weight"),
                &l.kv_a_layernorm,
            ));
            gains.push((
                format!("layers.{i}.post_attention_layernorm.weight"),
                &l.post_attention_layernorm,
            ));
        }
        for (j, g) in self.fc_norm.iter().enumerate() {
            gains.push((format!("fc_norm.{j}.weight"), g));
        }
        for (name, g) in gains {
            if let Some(i) = g.iter().position(|x| !x.is_finite()) {
                return Err(Error::invalid(format!(
                    "{name}: element {i} is {} (weights must be finite)",
                    g[i]
                )));
            }
        }
        Ok(())
    }

    /// Bytes held: BF16 matrices at 2 bytes, gains at 4 (what the plan counts for a resident
    /// draft, DRAFT.md §5).
    pub fn resident_bytes(&self) -> u64 {
        let m = |v: &Vec<u16>| v.len() as u64 * 2;
        let g = |v: &Vec<f32>| v.len() as u64 * 4;
        let mut b = m(&self.context_proj) + g(&self.context_norm) + g(&self.final_norm);
        for l in &self.layers {
            b += g(&l.input_layernorm) + m(&l.q_a_proj) + g(&l.q_a_layernorm) + m(&l.q_b_proj);
            b += m(&l.kv_a_proj_with_mqa) + g(&l.kv_a_layernorm) + m(&l.kv_b_proj);
            b += m(&l.o_proj) + g(&l.post_attention_layernorm);
            b += m(&l.gate_proj) + m(&l.up_proj) + m(&l.down_proj);
        }
        b += self.fc_norm.iter().map(g).sum::<u64>();
        if let Some((w1, w2)) = &self.markov {
            b += m(w1) + m(w2);
        }
        b
    }
}
