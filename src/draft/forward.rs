//! One DSpark draft forward (DRAFT.md §3): the context rows from the target's taps (step 1),
//! the K-row block (step 2) through the draft layers with non-causal block attention in
//! MODEL.md §6.5's absorbed form (step 3), logits with the target's lm_head (step 4), and the
//! Markov head choosing the drafted ids left to right (step 6). Numerics are MODEL.md §5 (f64
//! products, `dot`, `seqsum`, exp64, no FMA) through the project's kernels, so a draft's
//! proposals are the same on every ISA path and thread count.

use super::config::DraftConfig;
use super::rope::Rope;
use super::weights::{DraftLayer, DraftWeights};
use crate::error::{Error, Result};
use crate::model::weights::Bf16Mat;
use crate::model::TrunkSource;
use k3_kernels::{argmax, bf16_to_f32, first_non_finite, rnd, sig64, silu64, Kernels};

/// The target's tables a draft forward uses (DRAFT.md §1: never the draft's own copy): the
/// embedding rows of the block's ids and the lm_head. The same contract as the model's
/// [`TrunkSource`] `embed_row`/`lm_head` ([`TrunkTables`] adapts one).
pub trait TargetTables {
    /// The target's embedding row of `id` (H BF16 values). Errors fail the draft forward.
    fn embed_row(&mut self, id: usize) -> Result<&[u16]>;
    /// The target's lm_head in row blocks covering rows 0 … V−1 in ascending order:
    /// `f(first_row, block [n, H])`.
    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()>;
}

/// A model's [`TrunkSource`] as the draft's [`TargetTables`] (resident or streamed alike).
pub struct TrunkTables<'a>(pub &'a mut dyn TrunkSource);

impl TargetTables for TrunkTables<'_> {
    fn embed_row(&mut self, id: usize) -> Result<&[u16]> {
        self.0.embed_row(id)
    }
    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()> {
        self.0.lm_head(f)
    }
}

/// The target's embedding [V, H] and lm_head [V, H] held in memory (tests, the reference
/// check, and a caller that has them resident). lm_head blocks are `block_rows` rows.
pub struct TablesInMemory {
    /// Hidden width H.
    pub h: usize,
    /// BF16 `embed_tokens` [V, H].
    pub embed: Vec<u16>,
    /// BF16 `lm_head` [V, H].
    pub lm_head: Vec<u16>,
    /// Rows per lm_head block (any value gives the same logits).
    pub block_rows: usize,
}

impl TargetTables for TablesInMemory {
    fn embed_row(&mut self, id: usize) -> Result<&[u16]> {
        self.embed
            .get(id * self.h..(id + 1) * self.h)
            .ok_or_else(|| Error::invalid(format!("draft block id {id} is outside the vocabulary")))
    }
    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()> {
        let v = self.lm_head.len() / self.h;
        let mut r0 = 0;
        while r0 < v {
            let n = self.block_rows.max(1).min(v - r0);
            f(
                r0,
                Bf16Mat {
                    rows: n,
                    cols: self.h,
                    data: &self.lm_head[r0 * self.h..(r0 + n) * self.h],
                },
            )?;
            r0 += n;
        }
        Ok(())
    }
}

/// A sequence's draft context cache (DRAFT.md §3 "State"): per draft layer j, one row
/// [lat (Rkv, normalised) | k_pe (Dr, rotated)] per target position 0 … p, nL·(Rkv+Dr)·4 bytes
/// a position. It belongs to the sequence: extended after each target forward
/// ([`Draft::extend_context`]), truncated when verification rejects positions
/// ([`ContextCache::truncate`]), saved and restored with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextCache {
    /// `layers[j]` holds `len` rows of `row` floats (row-major).
    layers: Vec<Vec<f32>>,
    row: usize,
    len: usize,
}

impl ContextCache {
    /// An empty cache for `cfg`'s draft.
    pub fn new(cfg: &DraftConfig) -> ContextCache {
        ContextCache {
            layers: vec![Vec::new(); cfg.num_hidden_layers],
            row: cfg.cache_row(),
            len: 0,
        }
    }

    /// Positions held (p + 1).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held yet (the sequence has not run a target forward).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps positions 0 … n−1 (rollback after verification rejected the rest); `n` ≥ the
    /// length is a no-op.
    pub fn truncate(&mut self, n: usize) {
        if n < self.len {
            for l in &mut self.layers {
                l.truncate(n * self.row);
            }
            self.len = n;
        }
    }

    /// Layer `j`'s rows [len, Rkv + Dr].
    pub fn rows(&self, j: usize) -> &[f32] {
        &self.layers[j][..self.len * self.row]
    }

    /// Bytes of the rows held.
    pub fn bytes(&self) -> u64 {
        (self.layers.len() * self.len * self.row * 4) as u64
    }
}

/// What one draft forward proposes (DRAFT.md §3 steps 4–6, §4).
#[derive(Debug, Clone, PartialEq)]
pub struct DraftOutput {
    /// The K drafted ids, verified as rows 1 … K after the anchor.
    pub ids: Vec<u32>,
    /// logits_r (base + Markov term) [K, V].
    pub logits: Vec<f32>,
    /// n_r = RMSNorm(h_r; `final_norm`) [K, H]: the rows' hidden states after the norm.
    pub hidden: Vec<f32>,
    /// The confidence head's estimate per row (§4), when the draft has one.
    pub confidence: Option<Vec<f64>>,
}

/// A loaded draft: config, weights and its tabulated rotation.
pub struct Draft {
    /// The validated config.
    pub cfg: DraftConfig,
    /// The weights (resident).
    pub w: DraftWeights,
    /// The YaRN rotation and softmax scale.
    pub rope: Rope,
}

/// y = W x for every row of x ([T, cols] → [T, rows]) with a BF16 W.
fn mm(k: &Kernels, w: &[u16], rows: usize, x: &[f32], y: &mut [f32]) {
    let cols = w.len() / rows;
    k.matmul_bf16(w, rows, cols, x, y);
}

impl Draft {
    /// A draft from its parts (see [`super::open`]).
    pub fn new(cfg: DraftConfig, w: DraftWeights) -> Draft {
        let rope = Rope::new(&cfg);
        Draft { cfg, w, rope }
    }

    /// Step 1 for the target positions `cache.len() …` (one per row of `taps`): `taps` holds,
    /// per position, the nT tapped H_t-vectors concatenated in `target_layer_ids` order
    /// ([T, nT·Ht], fp32). c = RMSNorm(W_ctx · taps (each tap RMS-normed first with `fc_norm`);
    /// `context_norm`, ε); per layer [lat | k_pe] = W_kva c, lat RMS-normed with
    /// `kv_a_layernorm` (ε), k_pe rotated at its position. Errors (exit 2): a taps length that
    /// is not a whole number of positions, a non-finite context row.
    pub fn extend_context(
        &self,
        k: &Kernels,
        cache: &mut ContextCache,
        taps: &[f32],
    ) -> Result<()> {
        let c = &self.cfg;
        let width = c.target_layer_ids.len() * c.target_hidden_size;
        if taps.len() % width != 0 {
            return Err(Error::invalid(format!(
                "draft taps: {} values is not a whole number of positions of {width}",
                taps.len()
            )));
        }
        let t = taps.len() / width;
        if t == 0 {
            return Ok(());
        }
        let eps = c.rms_norm_eps;
        let normed;
        let x = if c.fc_norm {
            let mut v = vec![0f32; taps.len()];
            let ht = c.target_hidden_size;
            for p in 0..t {
                for (j, g) in self.w.fc_norm.iter().enumerate() {
                    let s = p * width + j * ht;
                    k.rmsnorm(&taps[s..s + ht], g, eps, &mut v[s..s + ht]);
                }
            }
            normed = v;
            &normed[..]
        } else {
            taps
        };
        let h = c.hidden_size;
        let mut proj = vec![0f32; t * h];
        mm(k, &self.w.context_proj, h, x, &mut proj);
        let mut ctx = vec![0f32; t * h];
        k.rmsnorm(&proj, &self.w.context_norm, eps, &mut ctx);
        if let Some(i) = first_non_finite(&ctx) {
            return Err(Error::invalid(format!(
                "draft context row of position {}: element {} is not finite",
                cache.len + i / h,
                i % h
            )));
        }
        let row = cache.row;
        for (j, l) in self.w.layers.iter().enumerate() {
            let mut kv = vec![0f32; t * row];
            mm(k, &l.kv_a_proj_with_mqa, row, &ctx, &mut kv);
            let rows = self.latent_rows(k, l, &mut kv, cache.len)?;
            cache.layers[j].extend_from_slice(&rows);
        }
        cache.len += t;
        Ok(())
    }

    /// [lat | k_pe] projections `kv` ([T, Rkv + Dr]) → cache rows: lat RMS-normed with
    /// `kv_a_layernorm` (the config's ε), k_pe rotated at positions `pos0 …`.
    fn latent_rows(
        &self,
        k: &Kernels,
        l: &DraftLayer,
        kv: &mut [f32],
        pos0: usize,
    ) -> Result<Vec<f32>> {
        let rkv = self.cfg.kv_lora_rank;
        let row = self.cfg.cache_row();
        let mut out = vec![0f32; kv.len()];
        for (p, (src, dst)) in kv
            .chunks_exact_mut(row)
            .zip(out.chunks_exact_mut(row))
            .enumerate()
        {
            k.rmsnorm(
                &src[..rkv],
                &l.kv_a_layernorm,
                self.cfg.rms_norm_eps,
                &mut dst[..rkv],
            );
            self.rope.rotate(&mut src[rkv..], pos0 + p)?;
            dst[rkv..].copy_from_slice(&src[rkv..]);
        }
        Ok(out)
    }

    /// Steps 2–6: the block [a, m, m, …] (K = `block_size` rows at positions p+1 … p+K, p + 1 =
    /// `cache.len()`) through the layers, attending over the context rows and all K block
    /// rows (or the rows up to its own with `causal_block_attention`), then the logits with the
    /// target's lm_head and the Markov head's greedy ids. The block rows' own latent rows are
    /// appended to `cache` for this forward only: on return (or error) the cache is as it was.
    ///
    /// Errors (exit 2): an anchor outside the vocabulary, a non-finite activation or logit
    /// (naming the layer or row), a table read failure from `tables`.
    pub fn propose(
        &self,
        k: &Kernels,
        cache: &mut ContextCache,
        anchor: u32,
        tables: &mut dyn TargetTables,
    ) -> Result<DraftOutput> {
        let n = cache.len;
        let res = self.propose_inner(k, cache, anchor, tables);
        for l in &mut cache.layers {
            l.truncate(n * cache.row);
        }
        res
    }

    fn propose_inner(
        &self,
        k: &Kernels,
        cache: &mut ContextCache,
        anchor: u32,
        tables: &mut dyn TargetTables,
    ) -> Result<DraftOutput> {
        let c = &self.cfg;
        let (h, kb, v) = (c.hidden_size, c.block_size, c.vocab_size);
        if anchor as usize >= v {
            return Err(Error::invalid(format!(
                "draft anchor id {anchor} is outside the vocabulary (V = {v})"
            )));
        }
        let p0 = cache.len; // position of block row 0
                            // 2. the block's rows: the anchor, then the mask id
        let mut hs = vec![0f32; kb * h];
        for r in 0..kb {
            let id = if r == 0 { anchor } else { c.mask_token_id };
            let e = tables.embed_row(id as usize)?;
            if e.len() != h {
                return Err(Error::invalid(format!(
                    "draft: the target's embedding row {id} has {} values, expected {h}",
                    e.len()
                )));
            }
            k.widen_bf16(e, &mut hs[r * h..(r + 1) * h]);
        }
        // 3. layers
        for (j, l) in self.w.layers.iter().enumerate() {
            self.layer(k, j, l, cache, p0, &mut hs)?;
            if let Some(i) = first_non_finite(&hs) {
                return Err(Error::invalid(format!(
                    "draft layer {j}: block row {} (position {}) element {} is not finite",
                    i / h,
                    p0 + i / h,
                    i % h
                )));
            }
        }
        // 4. logits with the target's lm_head
        let mut hidden = vec![0f32; kb * h];
        k.rmsnorm(&hs, &self.w.final_norm, c.rms_norm_eps, &mut hidden);
        let mut logits = vec![0f32; kb * v];
        let mut covered = 0usize;
        tables.lm_head(&mut |v0, w| {
            let mut y = vec![0f32; kb * w.rows];
            k.matmul_bf16(w.data, w.rows, w.cols, &hidden, &mut y);
            for r in 0..kb {
                logits[r * v + v0..r * v + v0 + w.rows]
                    .copy_from_slice(&y[r * w.rows..(r + 1) * w.rows]);
            }
            covered = v0 + w.rows;
            Ok(())
        })?;
        if covered != v {
            return Err(Error::internal(format!(
                "draft: the target's lm_head covered {covered} of {v} rows"
            )));
        }
        // 6. Markov head, left to right; the confidence estimate alongside (§4)
        let mut ids = Vec::with_capacity(kb);
        let mut conf = self.w.confidence.as_ref().map(|_| Vec::with_capacity(kb));
        let mut prev = anchor;
        for r in 0..kb {
            let lr = &mut logits[r * v..(r + 1) * v];
            let mut e = Vec::new();
            if let Some((w1, w2)) = &self.w.markov {
                let rank = w1.len() / v;
                e = w1[prev as usize * rank..(prev as usize + 1) * rank]
                    .iter()
                    .map(|&b| bf16_to_f32(b))
                    .collect();
                let mut m = vec![0f32; v];
                k.matmul_bf16(w2, v, rank, &e, &mut m);
                for (x, &mv) in lr.iter_mut().zip(&m) {
                    *x = rnd(*x as f64 + mv as f64);
                }
            }
            if let (Some(ch), Some(out)) = (&self.w.confidence, conf.as_mut()) {
                let hr = &hidden[r * h..(r + 1) * h];
                // [h_r ; e] as one dot (the lanes run on across the concatenation)
                let mut cat = hr.to_vec();
                cat.extend_from_slice(&e[..ch.weight.len() - h]);
                let z = k.dot_f32(&ch.weight, &cat);
                out.push(sig64(z + ch.bias as f64));
            }
            if let Some(i) = first_non_finite(lr) {
                return Err(Error::invalid(format!(
                    "draft logits row {r} (position {}): id {i} is not finite",
                    p0 + r
                )));
            }
            let id = argmax(lr).expect("finite, non-empty logits") as u32;
            ids.push(id);
            prev = id;
        }
        Ok(DraftOutput {
            ids,
            logits,
            hidden,
            confidence: conf,
        })
    }

    /// One draft layer over the K block rows `hs` ([K, H], updated in place), DRAFT.md §3
    /// step 3: MLA with rotated rope dims over the context rows of layer `j` then the block
    /// rows, no output gate; then the SwiGLU MLP. Threads split heads.
    fn layer(
        &self,
        k: &Kernels,
        j: usize,
        l: &DraftLayer,
        cache: &mut ContextCache,
        p0: usize,
        hs: &mut [f32],
    ) -> Result<()> {
        let c = &self.cfg;
        let (h, kb, eps) = (c.hidden_size, c.block_size, c.rms_norm_eps);
        let (hd, rq, rkv) = (c.num_attention_heads, c.q_lora_rank, c.kv_lora_rank);
        let (dn, dr, dv) = (c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim);
        let (dq, row) = (dn + dr, c.cache_row());
        let mut x = vec![0f32; kb * h];
        k.rmsnorm(hs, &l.input_layernorm, eps, &mut x);
        // query: low rank, RMSNorm (the config's ε), up; rope dims rotated at the row positions
        let mut cq = vec![0f32; kb * rq];
        let mut kv = vec![0f32; kb * row];
        k.matmul_bf16_many(
            &[(&l.q_a_proj, rq, h), (&l.kv_a_proj_with_mqa, row, h)],
            &[&x, &x],
            &mut [&mut cq, &mut kv],
        );
        let mut cqn = vec![0f32; kb * rq];
        k.rmsnorm(&cq, &l.q_a_layernorm, eps, &mut cqn);
        let mut q = vec![0f32; kb * hd * dq];
        mm(k, &l.q_b_proj, hd * dq, &cqn, &mut q);
        for r in 0..kb {
            for hh in 0..hd {
                let s = (r * hd + hh) * dq;
                self.rope.rotate(&mut q[s + dn..s + dq], p0 + r)?;
            }
        }
        // the block rows' own latent rows, after the context rows (transient)
        let own = self.latent_rows(k, l, &mut kv, p0)?;
        cache.layers[j].truncate(p0 * row);
        cache.layers[j].extend_from_slice(&own);
        let rows = &cache.layers[j][..(p0 + kb) * row];
        let kvb = &l.kv_b_proj;
        let sigma = self.rope.softmax_scale;
        let causal = c.causal_block_attention;
        let mut by_head = vec![0f32; hd * kb * dv]; // [head][row][Dv]
        k.pool().for_each_chunk(&mut by_head, kb * dv, |hh, oh| {
            let kb0 = hh * (dn + dv) * rkv;
            let w_kb = &kvb[kb0..kb0 + dn * rkv];
            let w_v = &kvb[kb0 + dn * rkv..kb0 + (dn + dv) * rkv];
            let mut qcat = vec![0f32; row];
            let mut coef = vec![0f64; dn];
            let mut obar = vec![0f32; rkv];
            let mut scores = vec![0f64; p0 + kb];
            for r in 0..kb {
                // non-causal: every block row; causal: rows 0 … r
                let nrows = if causal { p0 + r + 1 } else { p0 + kb };
                let qh = &q[(r * hd + hh) * dq..(r * hd + hh + 1) * dq];
                for (cf, &qv) in coef.iter_mut().zip(&qh[..dn]) {
                    *cf = qv as f64;
                }
                k.mix_rows_bf16(&coef, w_kb, rkv, &mut qcat[..rkv]);
                qcat[rkv..].copy_from_slice(&qh[dn..]);
                let sc = &mut scores[..nrows];
                k.attn_scores(&qcat, rows, row, sigma, sc);
                k.softmax(sc);
                k.mix_rows(sc, rows, row, &mut obar);
                k.matmul_bf16(w_v, dv, rkv, &obar, &mut oh[r * dv..(r + 1) * dv]);
            }
        });
        let mut o = vec![0f32; kb * hd * dv];
        for hh in 0..hd {
            for r in 0..kb {
                o[(r * hd + hh) * dv..(r * hd + hh + 1) * dv]
                    .copy_from_slice(&by_head[(hh * kb + r) * dv..(hh * kb + r + 1) * dv]);
            }
        }
        let mut out = vec![0f32; kb * h];
        mm(k, &l.o_proj, h, &o, &mut out);
        k.add(hs, &out);
        // MLP: x' = RMSNorm(h); h += W_down(rnd(silu64(W_gate x') × W_up x'))
        let f = c.intermediate_size;
        let mut xn = vec![0f32; kb * h];
        k.rmsnorm(hs, &l.post_attention_layernorm, eps, &mut xn);
        let mut g = vec![0f32; kb * f];
        let mut u = vec![0f32; kb * f];
        k.matmul_bf16_many(
            &[(&l.gate_proj, f, h), (&l.up_proj, f, h)],
            &[&xn, &xn],
            &mut [&mut g, &mut u],
        );
        let a: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&gv, &uv)| rnd(silu64(gv as f64) * uv as f64))
            .collect();
        let mut down = vec![0f32; kb * h];
        mm(k, &l.down_proj, h, &a, &mut down);
        k.add(hs, &down);
        Ok(())
    }
}
