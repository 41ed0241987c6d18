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
use weights::{AttnWeights, Bf16Mat, FfnWeights, LayerPart, LayerWeights, OutputVecs, PartBuf};

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
    /// Rows go to the kernels in sub-blocks of at most [`SUB_ROWS`] (each output element is
    /// its own `dot`, so the blocking never changes a bit, MODEL.md §5.2), which bounds the
    /// kernels' per-thread scratch whatever the chunk.
    pub fn matmul(&self, w: &Bf16Mat<'_>, x: &[f32], y: &mut [f32]) {
        let (xs, ys) = (SUB_ROWS * w.cols, SUB_ROWS * w.rows);
        if x.len() <= xs || w.cols == 0 || w.rows == 0 {
            return self.k.matmul_bf16(w.data, w.rows, w.cols, x, y);
        }
        for (xb, yb) in x.chunks(xs).zip(y.chunks_mut(ys)) {
            self.k.matmul_bf16(w.data, w.rows, w.cols, xb, yb);
        }
    }
    /// Several products of one input in one parallel job: ys[j] = ws[j] x, each exactly as
    /// [`Exec::matmul`] computes it (no barrier between the projections of one input); rows
    /// in sub-blocks of at most [`SUB_ROWS`], as there.
    pub fn matmul_same_x(&self, ws: &[&Bf16Mat<'_>], x: &[f32], ys: &mut [&mut [f32]]) {
        let mats: Vec<(&[u16], usize, usize)> =
            ws.iter().map(|w| (w.data, w.rows, w.cols)).collect();
        let cols = ws.first().map_or(0, |w| w.cols);
        let t = x.len().checked_div(cols).unwrap_or(0);
        if t <= SUB_ROWS {
            let xs = vec![x; ws.len()];
            return self.k.matmul_bf16_many(&mats, &xs, ys);
        }
        for r0 in (0..t).step_by(SUB_ROWS) {
            let r1 = (r0 + SUB_ROWS).min(t);
            let xs = vec![&x[r0 * cols..r1 * cols]; ws.len()];
            let mut yb: Vec<&mut [f32]> = ys
                .iter_mut()
                .zip(ws)
                .map(|(y, w)| &mut y[r0 * w.rows..r1 * w.rows])
                .collect();
            self.k.matmul_bf16_many(&mats, &xs, &mut yb);
        }
    }
}

/// Positions per sub-block of a layer's wide intermediates (KDA and MLA projections, FFN and
/// expert activations) and rows per kernel call: only the per-position state that lives
/// across layers (the depth snapshots and running sum of MODEL.md §6.3, the layer's input and
/// output rows, the MoE's per-slot expert outputs) is held for a whole prefill chunk, so a
/// long chunk costs little more than that state (ENGINE.md §4). Rows are independent in
/// every product and activation, so the sub-blocking never changes a bit (MODEL.md §7).
pub const SUB_ROWS: usize = 64;

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
    /// A part of layer `l`'s buffer holding (at least) the BF16 matrices of `part`, at the
    /// offsets of its [`LayerWeights`] slots (ENGINE.md §5 pieces). The forward asks for the
    /// parts of each layer in forward order ([`LayerPart`]), one at a time: the part stays valid
    /// (never refilled) while borrowed, and the next call may recycle it. An error fails the
    /// forward.
    fn layer_part(&mut self, l: usize, part: LayerPart) -> Result<PartBuf<'_>>;

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

    /// Trunk and model-table bytes read from files so far (a step's dense "bytes read",
    /// ENGINE.md §6); a resident source reads none (the default).
    fn bytes_read(&self) -> u64 {
        0
    }
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

/// One sequence's part of a batched forward: its decode state, the ids of its new positions
/// (`state.n_pos …`) and which of their logits rows to return.
#[derive(Debug)]
pub struct Segment<'a> {
    /// The sequence's state: KDA state and conv history, MLA cache, positions so far.
    pub state: &'a mut DecodeState,
    /// The new positions' ids (at least one), each < V.
    pub ids: &'a [u32],
    /// The logits rows this segment wants.
    pub rows: LogitRows,
}

/// Where each row of a batched forward lies: its segment and absolute position, for messages
/// (a batch of one names only the position, as a single sequence always did).
struct RowPlaces {
    /// (segment, position) per row, rows in segment order.
    places: Vec<(usize, usize)>,
    batched: bool,
}

impl RowPlaces {
    fn at(&self, row: usize) -> String {
        let (s, p) = self.places[row];
        if self.batched {
            format!("position {p} of batch sequence {s}")
        } else {
            format!("position {p}")
        }
    }
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
    /// and returns the requested logits rows, `[rows, V]`: the batch of one of
    /// [`Model::forward_batch`].
    ///
    /// Errors: those of [`Model::forward_batch`].
    pub fn forward(
        &self,
        ex: &Exec,
        trunk: &mut dyn TrunkSource,
        experts: &mut dyn ExpertSource,
        state: &mut DecodeState,
        ids: &[u32],
        rows: LogitRows,
    ) -> Result<Vec<f32>> {
        let mut segs = [Segment { state, ids, rows }];
        let mut out = self.forward_batch(ex, trunk, experts, &mut segs)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// One forward over the new rows of several sequences (MODEL.md §6, §7): every matrix of a
    /// layer and every expert of the rows' union is read once for all rows; the KDA conv and
    /// recurrence and the MLA attention run per segment over its own state at its own
    /// positions; each row's MoE output sums its experts in its own top-k order. No reduction
    /// mixes rows, so a sequence's logits are the same bits alone or in any batch. Returns
    /// each segment's requested logits rows, `[rows, V]`, in segment order.
    ///
    /// Errors: an id ≥ V or a non-finite layer output or logit (exit 2, naming layer and
    /// position), a failed trunk or expert read (from the sources). After an error every
    /// segment's state is unusable.
    pub fn forward_batch(
        &self,
        ex: &Exec,
        trunk: &mut dyn TrunkSource,
        experts: &mut dyn ExpertSource,
        segs: &mut [Segment<'_>],
    ) -> Result<Vec<Vec<f32>>> {
        let d = &self.dims;
        let h = d.h;
        let mut places = Vec::new();
        for (si, s) in segs.iter().enumerate() {
            let (pos0, t) = (s.state.n_pos, s.ids.len());
            if t == 0 || pos0 + t > s.state.capacity {
                return Err(Error::internal(format!(
                    "segment {si}: positions {pos0}..{} exceed the planned capacity {} (or none)",
                    pos0 + t,
                    s.state.capacity
                )));
            }
            places.extend((pos0..pos0 + t).map(|p| (si, p)));
        }
        let places = RowPlaces {
            places,
            batched: segs.len() > 1,
        };
        let t = places.places.len();
        // §6.2 embedding
        let mut emb = vec![0f32; t * h];
        for (r, &id) in segs.iter().flat_map(|s| s.ids.iter()).enumerate() {
            if id as usize >= d.v {
                return Err(Error::invalid(format!(
                    "token id {id} at {} is outside the vocabulary (vocab_size {})",
                    places.at(r),
                    d.v
                )));
            }
            let row = trunk.embed_row(id as usize)?;
            ex.widen_bf16(row, &mut emb[r * h..(r + 1) * h]);
        }

        // The lm_head's first streamed chunks are read while the layers compute.
        if segs.iter().any(|s| s.rows != LogitRows::None) {
            trunk.prefetch_lm_head();
        }

        // §6.3 decoder stack with Block AttnRes
        let mut depth = Depth::new(emb);
        let mut xa = vec![0f32; t * h];
        let mut xn = vec![0f32; t * h];
        let mut y = vec![0f32; t * h];
        for (l, lw) in self.layers.iter().enumerate() {
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
            // 3. attention, per segment over its own state
            ex.rmsnorm(&xa, &lw.input_layernorm, d.eps, &mut xn);
            attention(
                ex,
                d,
                l,
                lw,
                trunk.layer_part(l, LayerPart::Attn)?,
                segs,
                &xn,
                &mut y,
            )?;
            // 4. P = y or P + y
            depth.add(ex, &y);
            check_finite(&depth.p, h, &places, |at| {
                format!("the attention output of layer {l} at {at}")
            })?;
            // 5. pre-FFN aggregation
            depth.agg(ex, &lw.f_mlp_res, d.eps, &mut xa);
            // 6. FFN
            ex.rmsnorm(&xa, &lw.post_attention_layernorm, d.eps, &mut xn);
            match &lw.ffn {
                FfnWeights::Dense(s) => {
                    // gate and up, then down: two parts, so the down projection's bytes may
                    // arrive while gate and up compute
                    let gu = trunk.layer_part(l, LayerPart::MlpGateUp)?;
                    let (gate, up) = (s.gate_proj.view(gu), s.up_proj.view(gu));
                    let hh = ffn::situ_gate_up(ex, d, &gate, &up, &xn);
                    let dn = trunk.layer_part(l, LayerPart::MlpDown)?;
                    ex.matmul(&s.down_proj.view(dn), &hh, &mut y);
                }
                FfnWeights::Moe(w) => {
                    let m = w.mats.view(trunk.layer_part(l, LayerPart::Moe)?);
                    let at = |r: usize| places.at(r);
                    moe::forward(ex, d, l, &m, &w.vecs, experts, &xn, &at, &mut y)?;
                }
            }
            // 7. P += f
            depth.add(ex, &y);
            check_finite(&depth.p, h, &places, |at| {
                format!("the output of layer {l} at {at}")
            })?;
        }
        for s in segs.iter_mut() {
            s.state.n_pos += s.ids.len();
        }
        self.logits(ex, trunk, &depth, segs, &places)
    }

    /// §6.8 output aggregation, final norm and lm_head over the rows the segments want; each
    /// segment's rows `[rows, V]`.
    fn logits(
        &self,
        ex: &Exec,
        trunk: &mut dyn TrunkSource,
        depth: &Depth,
        segs: &[Segment<'_>],
        places: &RowPlaces,
    ) -> Result<Vec<Vec<f32>>> {
        let (d, h) = (&self.dims, self.dims.h);
        // The wanted rows (global row indices), segment by segment.
        let mut wanted: Vec<usize> = Vec::new();
        let mut counts = Vec::with_capacity(segs.len());
        let mut r0 = 0;
        for s in segs {
            let t = s.ids.len();
            let rows: Vec<usize> = match s.rows {
                LogitRows::None => Vec::new(),
                LogitRows::Last => vec![r0 + t - 1],
                LogitRows::All => (r0..r0 + t).collect(),
            };
            counts.push(rows.len());
            wanted.extend(rows);
            r0 += t;
        }
        let n_rows = wanted.len();
        if n_rows == 0 {
            return Ok(vec![Vec::new(); segs.len()]);
        }
        // only the wanted rows are aggregated, normed and multiplied by the lm_head
        let mut picked = vec![0f32; n_rows * h];
        depth.agg_rows(
            ex,
            &self.output.f_output_attn_res,
            d.eps,
            &wanted,
            &mut picked,
        );
        let mut n = vec![0f32; n_rows * h];
        ex.rmsnorm(&picked, &self.output.norm, d.eps, &mut n);
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
        let at_wanted = RowPlaces {
            places: wanted.iter().map(|&r| places.places[r]).collect(),
            batched: places.batched,
        };
        check_finite(&logits, d.v, &at_wanted, |at| format!("the logits at {at}"))?;
        let mut out = Vec::with_capacity(segs.len());
        let mut rest = &logits[..];
        for c in counts {
            let (a, b) = rest.split_at(c * d.v);
            out.push(a.to_vec());
            rest = b;
        }
        Ok(out)
    }
}

/// Step 3 of §6.3 for layer `l`: KDA or MLA over the batch's rows `xn` ([T, H]), each segment
/// over its own state; writes `y` [T, H]. The rows run in sub-blocks of [`SUB_ROWS`] in order
/// (each weight still read once from its part): a KDA state and an MLA cache advance through
/// the sub-blocks exactly as through the whole chunk, so only one sub-block's projections are
/// ever held (MODEL.md §6.4, §6.5, §7).
#[allow(clippy::too_many_arguments)]
fn attention(
    ex: &Exec,
    d: &Dims,
    l: usize,
    lw: &LayerWeights,
    buf: PartBuf<'_>,
    segs: &mut [Segment<'_>],
    xn: &[f32],
    y: &mut [f32],
) -> Result<()> {
    let mismatch = || Error::internal(format!("layer {l}: state kind mismatch"));
    let h = d.h;
    let t = xn.len() / h;
    for a in (0..t).step_by(SUB_ROWS) {
        let b = (a + SUB_ROWS).min(t);
        let (xs, ys) = (&xn[a * h..b * h], &mut y[a * h..b * h]);
        // each segment's rows inside [a, b): (segment, first row within the segment, count)
        let mut r0 = 0;
        let mut spans = Vec::new();
        for (si, s) in segs.iter().enumerate() {
            let (lo, hi) = (a.max(r0), b.min(r0 + s.ids.len()));
            if lo < hi {
                spans.push((si, lo - r0, hi - lo));
            }
            r0 += s.ids.len();
        }
        match &lw.attn {
            AttnWeights::Kda(w) => {
                let mut parts = Vec::with_capacity(spans.len());
                for (s, &(_, _, n)) in segs
                    .iter_mut()
                    .enumerate()
                    .filter(|(si, _)| spans.iter().any(|x| x.0 == *si))
                    .map(|x| x.1)
                    .zip(&spans)
                {
                    match &mut s.state.layers[l] {
                        LayerState::Kda(st) => parts.push((st, n)),
                        _ => return Err(mismatch()),
                    }
                }
                kda::forward(ex, d, &w.mats.view(buf), &w.vecs, &mut parts, xs, ys);
            }
            AttnWeights::Mla(w) => {
                let mut parts = Vec::with_capacity(spans.len());
                for (s, &(_, off, n)) in segs
                    .iter_mut()
                    .enumerate()
                    .filter(|(si, _)| spans.iter().any(|x| x.0 == *si))
                    .map(|x| x.1)
                    .zip(&spans)
                {
                    let pos0 = s.state.n_pos + off;
                    match &mut s.state.layers[l] {
                        LayerState::Mla(c) => parts.push((c, pos0, n)),
                        _ => return Err(mismatch()),
                    }
                }
                mla::forward(ex, d, &w.mats.view(buf), &w.vecs, &mut parts, xs, ys);
            }
        }
    }
    Ok(())
}

/// Bytes of one routed expert (six tensors, FORMATS.md §5).
pub fn expert_bytes(d: &Dims) -> u64 {
    let m = (d.i * d.l) as u64;
    3 * (m / 2 + m / 32)
}

/// Refuses a non-finite value in `x` (`[rows, width]`, row r where `places` says) with an
/// exit-2 error naming what and where (MODEL.md §5.6).
fn check_finite(
    x: &[f32],
    width: usize,
    places: &RowPlaces,
    what: impl Fn(String) -> String,
) -> Result<()> {
    if let Some(i) = k3_kernels::first_non_finite(x) {
        return Err(Error::invalid(format!(
            "non-finite value ({}) in {} (element {}): the checkpoint is not usable",
            x[i],
            what(places.at(i / width)),
            i % width
        )));
    }
    Ok(())
}
