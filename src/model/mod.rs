//! The Kimi K3 model: the typed weight views (weights.rs), the forward pass of MODEL.md §6 over
//! a chunk of positions, the trunk- and expert-source interfaces it reads weights through, and
//! the incremental decode state of §7 (state.rs). Binding a checkpoint to these views is
//! `crate::bind`'s work: nothing here reads a file.
//!
//! [`Model::forward`] reads top to bottom as §6.3: embedding, then per layer the pre-attention
//! aggregation, the boundary snapshot, KDA or MLA, the pre-FFN aggregation, dense FFN or MoE;
//! then the output aggregation, final norm and lm_head. Prefill of any chunk size, one-token
//! decode and full recompute all run this one function, so they give the same bits (§7).

pub mod attn_res;
pub mod experts;
pub mod ffn;
pub mod kda;
pub mod mla;
pub mod moe;
pub mod state;
pub mod weights;

use crate::error::{Error, Result};
use attn_res::Depth;
use experts::ExpertSource;
use k3_kernels::Kernels;
use state::{DecodeState, LayerState};
use weights::{AttnWeights, Bf16Mat, FfnWeights, LayerWeights, OutputVecs};

pub use crate::config::AttnKind;
use crate::config::Config;

/// Every width and constant the forward pass uses, resolved from the config (MODEL.md §1, §2.6).
#[derive(Debug, Clone, PartialEq)]
pub struct Dims {
    /// hidden_size H.
    pub h: usize,
    /// vocab_size V.
    pub v: usize,
    /// num_hidden_layers NL.
    pub nl: usize,
    /// KDA heads Hk, head dim Dk, projection width Pk = Hk·Dk, conv kernel Kc.
    pub hk: usize,
    pub dk: usize,
    pub pk: usize,
    pub kc: usize,
    /// MLA heads Hm, ranks Rq, Rkv, head dims Dn, Dr, Dv, Dq = Dn + Dr.
    pub hm: usize,
    pub rq: usize,
    pub rkv: usize,
    pub dn: usize,
    pub dr: usize,
    pub dv: usize,
    pub dq: usize,
    /// Experts E, top-k Kt, latent L, expert intermediate I, shared width Sw, dense width F.
    pub e: usize,
    pub kt: usize,
    pub l: usize,
    pub i: usize,
    pub sw: usize,
    pub f: usize,
    /// attn_res_block_size Bs.
    pub bs: usize,
    /// first_k_dense_replace: layers ℓ < this are dense.
    pub first_dense: usize,
    /// rms_norm_eps ε, SiTU caps β1 β2, gate_lower_bound gmin, routed_scaling_factor (f64).
    pub eps: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub gmin: f64,
    pub rsf: f64,
    /// sD = 1/sqrt(Dk), sQ = 1/sqrt(Dq) (f64, MODEL.md §5.1).
    pub sd: f64,
    pub sq: f64,
    pub renorm: bool,
    pub latent_norm: bool,
    pub out_gate: bool,
    pub tied: bool,
    /// Attention kind per zero-based layer.
    pub kinds: Vec<AttnKind>,
}

impl Dims {
    /// The dimensions of a validated config (every value already checked by `config`).
    pub fn from_config(c: &Config) -> Dims {
        Dims {
            h: c.hidden_size,
            v: c.vocab_size,
            nl: c.num_hidden_layers,
            hk: c.kda_num_heads,
            dk: c.kda_head_dim,
            pk: c.derived.kda_proj_width,
            kc: c.short_conv_kernel_size,
            hm: c.num_attention_heads,
            rq: c.q_lora_rank,
            rkv: c.kv_lora_rank,
            dn: c.qk_nope_head_dim,
            dr: c.qk_rope_head_dim,
            dv: c.v_head_dim,
            dq: c.derived.mla_head_width,
            e: c.num_experts,
            kt: c.num_experts_per_token,
            l: c.routed_expert_hidden_size,
            i: c.moe_intermediate_size,
            sw: c.derived.shared_width,
            f: c.intermediate_size,
            bs: c.attn_res_block_size,
            first_dense: c.first_k_dense_replace,
            eps: c.rms_norm_eps,
            beta1: c.situ_beta,
            beta2: c.situ_linear_beta,
            gmin: c.gate_lower_bound,
            rsf: c.routed_scaling_factor,
            sd: c.derived.kda_query_scale,
            sq: c.derived.mla_softmax_scale,
            renorm: c.moe_renormalize,
            latent_norm: c.latent_moe_use_norm,
            out_gate: c.mla_use_output_gate,
            tied: c.tie_word_embeddings,
            kinds: c.layer_kinds().to_vec(),
        }
    }

    /// Floats per MLA cache row: Rkv + Dr.
    pub fn mla_row(&self) -> usize {
        self.rkv + self.dr
    }
    /// The layer map as a string of `K`/`M`, zero-based order.
    pub fn layer_map(&self) -> String {
        self.kinds
            .iter()
            .map(|k| if *k == AttnKind::Kda { 'K' } else { 'M' })
            .collect()
    }
}

/// How the forward pass computes: the k3-kernels on one ISA path with one thread pool. Every
/// operation of the forward pass goes through these kernels (MODEL.md §5), so the ISA gates
/// cover the model. Dereferences to [`Kernels`].
#[derive(Debug)]
pub struct Exec {
    k: Kernels,
}

impl Exec {
    /// Wraps configured kernels.
    pub fn new(k: Kernels) -> Exec {
        Exec { k }
    }
    /// y[t][r] = rnd(dot(W[r], x[t])) for every row t of `x` ([T, cols]); y [T, rows].
    pub fn matmul(&self, w: &Bf16Mat<'_>, x: &[f32], y: &mut [f32]) {
        self.k.matmul_bf16(w.data, w.rows, w.cols, x, y);
    }
    /// Several products of one input in one parallel job: ys[j] = ws[j] x, each exactly as
    /// [`Exec::matmul`] computes it (no barrier between the projections of one input).
    pub fn matmul_same_x(&self, ws: &[&Bf16Mat<'_>], x: &[f32], ys: &mut [&mut [f32]]) {
        let mats: Vec<(&[u16], usize, usize)> =
            ws.iter().map(|w| (w.data, w.rows, w.cols)).collect();
        let xs = vec![x; ws.len()];
        self.k.matmul_bf16_many(&mats, &xs, ys);
    }
}

impl std::ops::Deref for Exec {
    type Target = Kernels;
    fn deref(&self) -> &Kernels {
        &self.k
    }
}

/// Supplies the dense weights to the forward pass: each bound layer's matrix buffer and the
/// two [V, H] model tables. Resident, ring slot or packed trunk, streamed or not: the forward
/// pass cannot tell (ENGINE.md §4–§5).
pub trait TrunkSource {
    /// The `u16` buffer holding layer `l`'s BF16 matrices at the offsets of its
    /// [`LayerWeights`] slots. The buffer stays valid (never refilled) while borrowed. An error
    /// fails the forward.
    fn layer_buf(&mut self, l: usize) -> Result<&[u16]>;

    /// Row `id` (< V) of `embed_tokens`: H BF16 values (MODEL.md §6.2). An error fails the
    /// forward.
    fn embed_row(&mut self, id: usize) -> Result<&[u16]>;

    /// A hint that [`TrunkSource::lm_head`] follows the layers of this forward: a source that
    /// streams the lm_head starts reading its first chunks now, so that they overlap the
    /// layers. Never changes a value; the default (resident) does nothing.
    fn prefetch_lm_head(&mut self) {}

    /// The lm_head (`embed_tokens` when tied) in row blocks covering rows 0 … V−1 in ascending
    /// order: calls `f(first_row, block)` with `block` [n, H]. Each logit is its own `dot`, so
    /// the blocking never changes a bit (MODEL.md §6.8). An error (from a read or from `f`)
    /// fails the forward.
    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()>;
}

/// Which logits rows a forward call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// None (a prefill chunk that is not the last).
    None,
    /// Only the last position of the chunk.
    Last,
    /// Every position of the chunk.
    All,
}

/// A bound model: dimensions, per-layer weights (bound layers only) and the output vectors.
#[derive(Debug)]
pub struct Model {
    pub dims: Dims,
    pub layers: Vec<LayerWeights>,
    pub output: OutputVecs,
}

impl Model {
    /// Runs positions `state.n_pos …` for `ids` through the bound layers, updating `state`,
    /// and returns the requested logits rows, `[rows, V]`.
    ///
    /// Errors: an id ≥ V or a non-finite layer output or logit (exit 2, naming layer and
    /// position), a failed trunk or expert read (from the sources). After an error the state is
    /// unusable.
    pub fn forward(
        &self,
        ex: &Exec,
        trunk: &mut dyn TrunkSource,
        experts: &mut dyn ExpertSource,
        state: &mut DecodeState,
        ids: &[u32],
        rows: LogitRows,
    ) -> Result<Vec<f32>> {
        let d = &self.dims;
        let (t, h, pos0) = (ids.len(), d.h, state.n_pos);
        if pos0 + t > state.capacity {
            return Err(Error::internal(format!(
                "positions {pos0}..{} exceed the planned capacity {}",
                pos0 + t,
                state.capacity
            )));
        }
        // §6.2 embedding
        let mut emb = vec![0f32; t * h];
        for (p, &id) in ids.iter().enumerate() {
            if id as usize >= d.v {
                return Err(Error::invalid(format!(
                    "token id {id} at position {} is outside the vocabulary (vocab_size {})",
                    pos0 + p,
                    d.v
                )));
            }
            let row = trunk.embed_row(id as usize)?;
            ex.widen_bf16(row, &mut emb[p * h..(p + 1) * h]);
        }

        // The lm_head's first streamed chunks are read while the layers compute.
        if rows != LogitRows::None {
            trunk.prefetch_lm_head();
        }

        // §6.3 decoder stack with Block AttnRes
        let mut depth = Depth::new(emb);
        let mut xa = vec![0f32; t * h];
        let mut xn = vec![0f32; t * h];
        let mut y = vec![0f32; t * h];
        for (l, lw) in self.layers.iter().enumerate() {
            let buf = trunk.layer_buf(l)?;
            // 1. pre-attention aggregation (skipped while B is empty)
            if depth.snapshots.is_empty() {
                xa.copy_from_slice(&depth.p);
            } else {
                depth.agg(ex, &lw.f_attn_res, d.eps, &mut xa);
            }
            // 2. boundary: snapshot, then clear
            if l % d.bs == 0 {
                depth.push_snapshot();
            }
            // 3. attention
            ex.rmsnorm(&xa, &lw.input_layernorm, d.eps, &mut xn);
            match (&lw.attn, &mut state.layers[l]) {
                (AttnWeights::Kda(w), LayerState::Kda(st)) => {
                    kda::forward(ex, d, &w.mats.view(buf), &w.vecs, st, &xn, &mut y)
                }
                (AttnWeights::Mla(w), LayerState::Mla(c)) => {
                    mla::forward(ex, d, &w.mats.view(buf), &w.vecs, c, &xn, pos0, &mut y)
                }
                _ => return Err(Error::internal(format!("layer {l}: state kind mismatch"))),
            }
            // 4. P = y or P + y
            depth.add(ex, &y);
            check_finite(&depth.p, h, pos0, |pos| {
                format!("the attention output of layer {l} at position {pos}")
            })?;
            // 5. pre-FFN aggregation
            depth.agg(ex, &lw.f_mlp_res, d.eps, &mut xa);
            // 6. FFN
            ex.rmsnorm(&xa, &lw.post_attention_layernorm, d.eps, &mut xn);
            match &lw.ffn {
                FfnWeights::Dense(s) => ffn::situ_mlp(ex, d, &s.view(buf), &xn, &mut y),
                FfnWeights::Moe(w) => {
                    let m = w.mats.view(buf);
                    moe::forward(ex, d, l, &m, &w.vecs, experts, &xn, pos0, &mut y)?;
                }
            }
            // 7. P += f
            depth.add(ex, &y);
            check_finite(&depth.p, h, pos0, |pos| {
                format!("the output of layer {l} at position {pos}")
            })?;
        }
        state.n_pos = pos0 + t;

        // §6.8 output aggregation, final norm, lm_head
        let (first, n_rows) = match rows {
            LogitRows::None => return Ok(Vec::new()),
            LogitRows::Last => (t - 1, 1),
            LogitRows::All => (0, t),
        };
        let mut fin = vec![0f32; t * h];
        depth.agg(ex, &self.output.f_output_attn_res, d.eps, &mut fin);
        let mut n = vec![0f32; n_rows * h];
        ex.rmsnorm(&fin[first * h..], &self.output.norm, d.eps, &mut n);
        let mut logits = vec![0f32; n_rows * d.v];
        let mut block_out = Vec::new();
        trunk.lm_head(&mut |v0, w| {
            if n_rows == 1 || (v0 == 0 && w.rows == d.v) {
                if n_rows == 1 {
                    ex.matmul(&w, &n, &mut logits[v0..v0 + w.rows]);
                } else {
                    ex.matmul(&w, &n, &mut logits);
                }
            } else {
                // rows × block, scattered into [rows, V]
                block_out.resize(n_rows * w.rows, 0f32);
                ex.matmul(&w, &n, &mut block_out);
                for r in 0..n_rows {
                    logits[r * d.v + v0..r * d.v + v0 + w.rows]
                        .copy_from_slice(&block_out[r * w.rows..(r + 1) * w.rows]);
                }
            }
            Ok(())
        })?;
        check_finite(&logits, d.v, pos0 + first, |pos| {
            format!("the logits at position {pos}")
        })?;
        Ok(logits)
    }
}

// The resident binding moved to `crate::bind`; kept at its old path for tests and bench.
pub use crate::bind::resident::{bind_resident, Bound};

/// Bytes of one routed expert (six tensors, FORMATS.md §5).
pub fn expert_bytes(d: &Dims) -> u64 {
    let m = (d.i * d.l) as u64;
    3 * (m / 2 + m / 32)
}

/// Refuses a non-finite value in `x` (`[rows, width]`, row r at position `pos0 + r`) with an
/// exit-2 error naming what and where (MODEL.md §5.6).
fn check_finite(
    x: &[f32],
    width: usize,
    pos0: usize,
    what: impl Fn(usize) -> String,
) -> Result<()> {
    if let Some(i) = k3_kernels::first_non_finite(x) {
        return Err(Error::invalid(format!(
            "non-finite value ({}) in {} (element {}): the checkpoint is not usable",
            x[i],
            what(pos0 + i / width),
            i % width
        )));
    }
    Ok(())
}
