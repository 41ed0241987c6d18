//! Every byte formula of the plan (ENGINE.md §4): a layer's trunk and vectors, the forward
//! pass's scratch, the kernels' per-thread scratch, buffer rounding, and [`ModelSizes`], the
//! sizes of one run's model the planner splits.

use crate::model::state::DecodeState;
use crate::model::Dims;

/// Bytes of the trunk of layer `l` as bound (BF16 matrices as BF16, small vectors as fp32).
pub fn layer_trunk_bytes(d: &Dims, l: usize) -> u64 {
    let (h, pk, dk, hk, kc) = (
        d.h as u64,
        d.pk as u64,
        d.dk as u64,
        d.hk as u64,
        d.kc as u64,
    );
    let mut bf16 = 0u64; // elements
    let mut f32s = 4 * h; // input/post norms, two folded AttnRes vectors
    match d.kinds[l] {
        crate::model::AttnKind::Kda => {
            bf16 += 4 * pk * h + dk * h + pk * dk + hk * h + h * pk;
            f32s += 3 * pk * kc + pk + dk + hk * 2;
        }
        crate::model::AttnKind::Mla => {
            let (hm, dq, rq, rkv, dr, dn, dv) = (
                d.hm as u64,
                d.dq as u64,
                d.rq as u64,
                d.rkv as u64,
                d.dr as u64,
                d.dn as u64,
                d.dv as u64,
            );
            bf16 += rq * h + hm * dq * rq + (rkv + dr) * h + hm * (dn + dv) * rkv + h * hm * dv;
            if d.out_gate {
                bf16 += hm * dv * h;
            }
            f32s += rq + rkv;
        }
    }
    if l < d.first_dense {
        bf16 += 3 * d.f as u64 * h;
    } else {
        let (e, lat, sw) = (d.e as u64, d.l as u64, d.sw as u64);
        bf16 += e * h + 2 * lat * h + 3 * sw * h;
        f32s += e + lat;
    }
    bf16 * 2 + f32s * 4
}

/// Upper bound of the forward pass's scratch for a chunk of `t` positions keeping `rows`
/// logits rows. Only what lives across a layer scales with the whole chunk (`cross_position_bytes`):
/// the depth snapshots and running sum, the layer's input, normed input and output rows, the
/// router scores, the latent rows and each position's Kt expert outputs (or the dense FFN's
/// activation row). The wide per-layer intermediates (KDA and MLA projections, FFN and expert
/// activations) are held for one sub-block of at most [`crate::model::SUB_ROWS`] positions
/// (`model::attention`, `model::ffn`, `model::moe`).
pub fn scratch_bytes(d: &Dims, t: usize, rows: usize) -> u64 {
    let sub = t.min(crate::model::SUB_ROWS) as u64;
    let kda = 12 * d.pk + d.dk + d.hk;
    let mla = 2 * d.rq + d.hm * d.dq + 2 * d.mla_row() + 4 * d.hm * d.dv;
    let ffn = 2 * d.f.max(d.sw) + d.sw;
    let experts = d.kt * (3 * d.i + 2 * d.l);
    let wide = (kda.max(mla) + ffn + experts) as u64;
    4 * (t as u64 * cross_position_floats(d) + sub * wide + rows as u64 * (d.v + d.h) as u64)
}

/// Floats per position held for a whole chunk (see [`scratch_bytes`]).
pub fn cross_position_floats(d: &Dims) -> u64 {
    let snapshots = d.nl.div_ceil(d.bs) + 1;
    let depth = (snapshots + 1 + 4) * d.h; // B, P, the embedding row, xa, xn, y
                                           // router scores, latent in, aggregate and its norm's input, the Kt slot outputs and
                                           // selections, the shared experts' output
    let moe = 2 * d.e + 3 * d.l + d.kt * (d.l + 2) + d.h;
    let ffn = moe.max(d.f);
    (depth + ffn + d.mla_row()) as u64
}

/// The kernels' per-thread scratch for chunks of `t` positions on `threads` threads
/// ([`k3_kernels::thread_scratch_bytes`]): the largest call prepares the top-k experts' gate
/// and up inputs (2·Kt of width max(latent, intermediate)) or one input of the widest
/// projection.
pub fn kernel_scratch_bytes(d: &Dims, t: usize, threads: usize) -> u64 {
    let widest = [d.h, d.f, d.sw, d.i, d.l, d.rq, d.hm * d.dv, d.hk * d.dk]
        .into_iter()
        .max()
        .unwrap_or(0);
    let x_elems = 2 * d.kt * d.l.max(d.i) + widest;
    threads as u64 * k3_kernels::thread_scratch_bytes(t, x_elems)
}

/// Bytes a buffer for an `n`-byte payload takes (the widened direct-read window, FORMATS.md
/// §6): what a pinned layer or a ring slot really costs.
pub fn buffer_bytes(n: u64) -> u64 {
    crate::io::window_capacity(n as usize).unwrap_or(usize::MAX) as u64
}

/// The sizes of the model the planner needs (bytes unless said otherwise).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSizes {
    /// Run length of each bound layer (the layer buffer).
    pub layer_runs: Vec<u64>,
    /// Bytes of each bound layer's ring pieces when it streams, in forward order
    /// (`crate::stream::pieces`); a layer missing here or with no pieces is one piece, its run.
    pub layer_pieces: Vec<Vec<u64>>,
    /// Widened small vectors of all bound layers (always resident).
    pub layer_vectors: u64,
    /// `embed_tokens` bytes, and `lm_head` bytes (0 when tied).
    pub embed: u64,
    pub lm_head: u64,
    /// Bytes of one table row (H × 2), and V.
    pub row: u64,
    pub vocab: usize,
    /// Model-level vectors widened (norm, output AttnRes fold).
    pub table_vectors: u64,
    /// Bytes of one routed expert, the stride of a cache slot, experts of the bound MoE
    /// layers, and top-k (0 experts when no MoE layer is bound).
    pub expert: u64,
    pub expert_stride: u64,
    pub experts_total: usize,
    pub top_k: usize,
    /// KDA state, MLA cache, scratch (without the lm_head block), tokenizer, tensor index.
    pub kda_state: u64,
    pub mla_cache: u64,
    pub scratch: u64,
    pub tokenizer: u64,
    pub tensor_index: u64,
    /// Logits rows a forward keeps at once (for the lm_head block scratch).
    pub logits_rows: usize,
}

/// What one run binds and keeps, for [`ModelSizes::for_run`] (ENGINE.md §3 flags).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunShape {
    /// Layers bound (`--layers`, default all).
    pub layers: usize,
    /// Run length of each bound layer's trunk in bytes (the layer buffer).
    pub layer_runs: Vec<u64>,
    /// Bytes of each bound layer's ring pieces (empty: whole layers), as [`ModelSizes`].
    pub layer_pieces: Vec<Vec<u64>>,
    /// `embed_tokens` bytes, and `lm_head` bytes (0 when tied).
    pub embed: u64,
    pub lm_head: u64,
    /// Positions the state holds (prompt + generation; 0 counts as 1).
    pub positions: usize,
    /// `--prefill-chunk`: positions per forward.
    pub chunk: usize,
    /// Every position's logits are kept (`--dump-logits`, or `--gen 0` teacher forcing).
    pub all_logits: bool,
    /// Compute threads.
    pub threads: usize,
    /// Sequences held (those decoding together, `--parallel`, and the snapshot slots): each
    /// has its KDA state and MLA cache for `positions`, and a step is one forward over one
    /// row of each.
    pub sequences: usize,
    /// Of [`RunShape::sequences`], those that decode (the others are snapshots): only they
    /// draft under `--spec` (0 counts as all).
    pub decoding: usize,
    /// Bytes of the tokenizer tables and of the tensor index in memory.
    pub tokenizer: u64,
    pub tensor_index: u64,
    /// `--spec K`: drafted ids per sweep at most (0 = off). A sweep runs up to K + 1 rows of
    /// each decoding sequence, all with logits, and each decoding sequence keeps a copy of its
    /// KDA state and conv history for the rollback (ENGINE.md §9, §10).
    pub spec: usize,
    /// Staging buffers of coded trunk reads (a packed trunk with a codec, decoded; 0
    /// otherwise), counted in the scratch.
    pub codec_staging: u64,
}

impl ModelSizes {
    /// The sizes of a run of the model of `d` shaped by `r`. A forward keeps the logits rows
    /// of one chunk of at most min(`chunk`, positions) positions (all rows with
    /// `all_logits`, else one), and the caller keeps one more row of V floats (the previous
    /// step's logits, or the copy of a chunk's last row) while the next forward computes.
    /// Under `--spec K` a step's rows are K + 1 per decoding sequence, each with logits, and
    /// each decoding sequence's KDA state is counted twice (the rollback copy).
    pub fn for_run(d: &Dims, r: RunShape) -> ModelSizes {
        let positions = r.positions.max(1);
        let seqs = r.sequences.max(1);
        let decoding = if r.decoding == 0 {
            seqs
        } else {
            r.decoding.min(seqs)
        };
        // a step's rows: one per sequence, K more per decoding one under speculation
        let step_rows = seqs + decoding * r.spec;
        let chunk = r.chunk.min(positions).max(step_rows);
        let logits_rows = if r.all_logits { chunk } else { step_rows };
        // and each decoding one's rollback copy of its KDA state
        let kda_states = seqs + if r.spec > 0 { decoding } else { 0 };
        let moe_bound = (0..r.layers).filter(|&l| l >= d.first_dense).count();
        let expert = crate::model::expert_bytes(d);
        let held_logits = 4 * d.v as u64 * seqs as u64;
        ModelSizes {
            layer_runs: r.layer_runs,
            layer_pieces: r.layer_pieces,
            layer_vectors: (0..r.layers).map(|l| layer_vector_bytes(d, l)).sum(),
            embed: r.embed,
            lm_head: r.lm_head,
            row: 2 * d.h as u64,
            vocab: d.v,
            table_vectors: 2 * d.h as u64 * 4,
            expert,
            expert_stride: buffer_bytes(expert),
            experts_total: moe_bound * d.e,
            top_k: d.kt,
            kda_state: DecodeState::kda_bytes(d, r.layers).saturating_mul(kda_states as u64),
            mla_cache: DecodeState::mla_bytes(d, r.layers, positions).saturating_mul(seqs as u64),
            scratch: scratch_bytes(d, chunk, logits_rows)
                + kernel_scratch_bytes(d, chunk.min(crate::model::SUB_ROWS), r.threads)
                + held_logits
                + r.codec_staging,
            tokenizer: r.tokenizer,
            tensor_index: r.tensor_index,
            logits_rows,
        }
    }
}

/// Resident memory of the process itself, counted in the plan's `scratch`: the binary's code and
/// data, libc, the stacks of the compute and I/O threads, allocator bookkeeping and load-time
/// transients (5–7 MB measured on the test checkpoints), so that a hard limit of the plan's
/// size holds the whole process (ENGINE.md §4).
pub const PROCESS_BASELINE: u64 = 12 << 20;
/// Target bytes of one lm_head chunk slot when the tables stream.
pub const HEAD_CHUNK_BYTES: u64 = 32 << 20;
/// lm_head chunk slots when some of the head streams: one chunk multiplied while the next is
/// read. More slots would only read further ahead, and a slot's bytes are worth more as
/// resident rows: a resident row is never read at all.
pub const HEAD_CHUNK_SLOTS: usize = 2;

impl ModelSizes {
    /// lm_head rows per chunk when streamed: about [`HEAD_CHUNK_BYTES`], and at most a quarter
    /// of the table (so that even a tiny model streams its head in several chunks).
    pub fn head_chunk_rows(&self) -> usize {
        let by_bytes = (HEAD_CHUNK_BYTES / self.row.max(1)) as usize;
        by_bytes.min(self.vocab.div_ceil(4)).max(1)
    }
    /// `tie_word_embeddings` (no separate lm_head).
    pub fn tied(&self) -> bool {
        self.lm_head == 0
    }
    /// Bytes of the lm_head table ([V, H] BF16; `embed_tokens` when tied).
    pub fn head_bytes(&self) -> u64 {
        if self.tied() {
            self.embed
        } else {
            self.lm_head
        }
    }
    /// Model tables with lm_head rows 0..`rows` resident (clamped to V) and the embedding
    /// resident or not (ignored when tied): the resident prefix in one buffer, the chunk
    /// slots unless every row is resident, the embedding table or a one-row window (tied: the
    /// window unless every row is resident), and the model-level vectors. Buffers count as
    /// [`buffer_bytes`] (they are read by widened direct reads).
    pub fn tables_bytes(&self, rows: usize, embed_resident: bool) -> u64 {
        let rows = rows.min(self.vocab);
        let full = rows == self.vocab;
        let head = if full {
            buffer_bytes(self.head_bytes())
        } else {
            let prefix = if rows > 0 {
                buffer_bytes(rows as u64 * self.row)
            } else {
                0
            };
            prefix
                + HEAD_CHUNK_SLOTS as u64 * buffer_bytes(self.row * self.head_chunk_rows() as u64)
        };
        let embed = match (self.tied(), full, embed_resident) {
            (true, true, _) => 0,
            (true, false, _) | (false, _, false) => buffer_bytes(self.row),
            (false, _, true) => buffer_bytes(self.embed),
        };
        head + embed + self.table_vectors
    }
    /// Model tables resident: both tables + the model-level vectors.
    pub fn tables_resident(&self) -> u64 {
        self.tables_bytes(self.vocab, true)
    }
    /// Model tables streamed: one embedding row window + the lm_head chunk slots + the
    /// model-level vectors.
    pub fn tables_streamed(&self) -> u64 {
        self.tables_bytes(0, false)
    }
    /// The most lm_head rows (< V) a resident prefix of at most `bytes` holds.
    pub fn head_rows_within(&self, bytes: u64) -> usize {
        if self.row == 0 || self.vocab == 0 {
            return 0;
        }
        let max = self.vocab - 1;
        let mut r = ((bytes.saturating_sub(3 * crate::io::ALIGN as u64)) / self.row) as usize;
        r = r.min(max);
        while r < max && buffer_bytes((r as u64 + 1) * self.row) <= bytes {
            r += 1;
        }
        while r > 0 && buffer_bytes(r as u64 * self.row) > bytes {
            r -= 1;
        }
        r
    }
    /// Scratch including the lm_head block (rows × chunk rows fp32) and the
    /// [`PROCESS_BASELINE`].
    pub fn scratch_with_head(&self) -> u64 {
        self.scratch
            + 4 * self.logits_rows as u64 * self.head_chunk_rows() as u64
            + PROCESS_BASELINE
    }
    /// The fixed items (independent of the budget split).
    pub fn fixed(&self) -> u64 {
        // saturating, as MemoryPlan::items_total
        [
            self.kda_state,
            self.mla_cache,
            self.scratch_with_head(),
            self.tokenizer,
            self.tensor_index,
            self.layer_vectors,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
    /// Minimum expert-cache bytes: top-k slots (0 without MoE layers).
    pub fn cache_min(&self) -> u64 {
        if self.experts_total == 0 {
            0
        } else {
            self.top_k.min(self.experts_total) as u64 * self.expert_stride
        }
    }
    /// Expert-cache bytes holding every bound expert.
    pub fn cache_max(&self) -> u64 {
        self.experts_total as u64 * self.expert_stride
    }
    /// The whole trunk pinned.
    pub fn trunk_all(&self) -> u64 {
        self.layer_runs.iter().map(|&r| buffer_bytes(r)).sum()
    }
    /// The smallest ring: two slots of the largest piece where they fit in one slot of the
    /// largest layer (pieces cut from layers), else one slot of it
    /// (`super::trunk::min_ring_bytes`).
    pub fn trunk_min(&self) -> u64 {
        let piece = self
            .pieces()
            .iter()
            .flatten()
            .map(|&p| buffer_bytes(p))
            .max()
            .unwrap_or(0);
        let layer = self
            .layer_runs
            .iter()
            .map(|&r| buffer_bytes(r))
            .max()
            .unwrap_or(0);
        super::trunk::min_ring_bytes(layer, piece)
    }
    /// Every bound layer's ring pieces in bytes (a layer without pieces: its run).
    pub fn pieces(&self) -> Vec<Vec<u64>> {
        self.layer_runs
            .iter()
            .enumerate()
            .map(|(l, &r)| match self.layer_pieces.get(l) {
                Some(p) if !p.is_empty() => p.clone(),
                _ => vec![r],
            })
            .collect()
    }
}

/// Run length of layer `l`'s trunk from the catalogue (MODEL.md §4, §9: 2,341,213,184 B for
/// the released layer 0): what the planner assumes before the checkpoint is indexed.
pub fn layer_run_bytes(cfg: &crate::config::Config, l: usize) -> u64 {
    crate::catalogue::layer_tensors(cfg, l)
        .iter()
        .map(|t| t.nbytes().unwrap_or(0))
        .sum()
}

/// Bytes of layer `l`'s ring pieces (cut at its parts, `crate::stream::pieces`) from the
/// catalogue, in forward order, assuming the released layout (each part's tensors adjacent
/// in the shard: MODEL.md §4, FORMATS.md §4): what the planner assumes before the checkpoint
/// is indexed (released layer 0: attention 887 MB, gate+up 969 MB, down 484 MB).
pub fn layer_piece_bytes(cfg: &crate::config::Config, l: usize) -> Vec<u64> {
    use crate::model::weights::LayerPart;
    let prefix = crate::catalogue::layer_tensor_name(l, "");
    let mut parts: Vec<(LayerPart, u64)> = Vec::new();
    for t in crate::catalogue::layer_tensors(cfg, l) {
        let part = t.name.strip_prefix(&prefix).and_then(LayerPart::of_suffix);
        if let Some(p) = part {
            let n = t.nbytes().unwrap_or(0);
            match parts.iter_mut().find(|x| x.0 == p) {
                Some(x) => x.1 += n,
                None => parts.push((p, n)),
            }
        }
    }
    crate::sort::sort_by_key(&mut parts, |x| x.0);
    parts.into_iter().map(|x| x.1).collect()
}

/// Bytes of layer `l`'s small vectors as bound (fp32), which stay resident even when its
/// matrices stream.
pub fn layer_vector_bytes(d: &Dims, l: usize) -> u64 {
    let (h, pk, dk, hk, kc) = (
        d.h as u64,
        d.pk as u64,
        d.dk as u64,
        d.hk as u64,
        d.kc as u64,
    );
    let mut f = 4 * h;
    match d.kinds[l] {
        crate::model::AttnKind::Kda => f += 3 * pk * kc + pk + dk + hk,
        crate::model::AttnKind::Mla => f += d.rq as u64 + d.rkv as u64,
    }
    if l >= d.first_dense {
        f += d.e as u64 + d.l as u64;
    }
    4 * f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dims {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tiny-k3/config.json"
        );
        Dims::from_config(&crate::config::Config::from_file(p.as_ref()).unwrap())
    }

    fn shape(d: &Dims, positions: usize, all_logits: bool) -> RunShape {
        RunShape {
            layers: d.nl,
            positions,
            chunk: 64,
            all_logits,
            threads: 1,
            ..RunShape::default()
        }
    }

    /// Speculation's rows and rollback copies are planned for the sequences that decode, not
    /// for the snapshot slots (serve's prefix pool, chat's `/undo`).
    #[test]
    fn spec_plans_rows_and_kda_copies_of_decoding_sequences_only() {
        let d = tiny();
        let with = |sequences, decoding, spec| RunShape {
            sequences,
            decoding,
            spec,
            ..shape(&d, 32, false)
        };
        let one = DecodeState::kda_bytes(&d, d.nl);
        // serve --parallel 4 with 4 snapshots: 8 states, 4 copies, 4 + 4 × 5 rows
        let s = ModelSizes::for_run(&d, with(8, 4, 4));
        assert_eq!(s.kda_state, 12 * one);
        assert_eq!(s.logits_rows, 8 + 4 * 4);
        // without --spec the snapshot slots keep their one row each, as before
        let s = ModelSizes::for_run(&d, with(8, 4, 0));
        assert_eq!((s.kda_state, s.logits_rows), (8 * one, 8));
        // decoding 0 counts as all
        assert_eq!(
            ModelSizes::for_run(&d, with(2, 0, 3)),
            ModelSizes::for_run(&d, with(2, 2, 3))
        );
    }

    #[test]
    fn gen_0_on_a_one_id_prompt_plans_one_logits_row_not_a_chunk() {
        let d = tiny();
        let s = ModelSizes::for_run(&d, shape(&d, 1, true));
        assert_eq!(s.logits_rows, 1);
        assert_eq!(ModelSizes::for_run(&d, shape(&d, 5, true)).logits_rows, 5);
        assert_eq!(
            ModelSizes::for_run(&d, shape(&d, 500, true)).logits_rows,
            64
        );
        assert_eq!(
            ModelSizes::for_run(&d, shape(&d, 500, false)).logits_rows,
            1
        );
    }

    #[test]
    fn the_logits_row_held_between_forwards_is_in_the_scratch() {
        let d = tiny();
        let s = ModelSizes::for_run(&d, shape(&d, 3, false));
        let forward = scratch_bytes(&d, 3, 1) + kernel_scratch_bytes(&d, 3, 1);
        assert_eq!(s.scratch - forward, 4 * d.v as u64);
    }
}
