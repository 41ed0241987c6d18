//! A run of the main job (ENGINE.md §3, §6), in two steps: [`Run::open`] binds the model as a
//! memory plan decided (trunk ring, model tables, expert cache) and fills the report's binding
//! fields; [`Run::decode`] runs the prompt ids through the prefill in chunks and generates
//! greedily, hashing the logits (FNV-1a-64, FORMATS.md §10) and filling the per-step report.
//! Everything the user sees (tokens, text, step lines, progress, logits dumps) goes through
//! [`RunOutput`] and [`Progress`], so the library prints nothing.

use crate::bind::streamed::{self, Prepared, StreamConfig};
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::IoFile;
use crate::model::experts::{ExpertSource, ExpertStats};
use crate::model::state::DecodeState;
use crate::model::weights::Bf16Mat;
use crate::model::{Exec, LogitRows, Model, TrunkSource};
use crate::plan::RunPlan;
use crate::report::{RunReport, StepReport, TrunkReport};
use crate::stream::experts::CachedExperts;
use crate::stream::pack::PackedTrunk;
use crate::stream::tables::TablesConfig;
use crate::stream::trace::{TraceWriter, Traced};
use crate::stream::trunk::StreamedTrunk;
use k3_kernels::Fnv1a64;
use std::sync::Arc;
use std::time::Instant;

/// How to open the model, besides the plan.
pub struct OpenOptions<'a> {
    /// The plan: pinned set, ring, model tables, expert-cache slots (ENGINE.md §4).
    pub plan: &'a RunPlan,
    /// Expert-cache eviction policy (a name of `stream::policy::POLICY_NAMES`).
    pub policy: &'a str,
    /// A validated packed trunk and its open `trunk.bin`, or None to read the shards.
    pub packed: Option<&'a (PackedTrunk, Arc<IoFile>)>,
    /// The `--dump-cache-trace` writer, created before any work.
    pub trace: Option<TraceWriter>,
}

/// A model bound for a run: the weights, the streamed trunk and the (traced) expert cache.
pub struct Run {
    model: Model,
    trunk: StreamedTrunk,
    experts: Traced<CachedExperts>,
}

/// What the decode loop does with the ids (ENGINE.md §3).
#[derive(Debug, Clone)]
pub struct DecodeOptions<'a> {
    /// `--gen`: tokens to generate; 0 hashes every teacher-forced row of the prompt.
    pub gen: usize,
    /// Re-run the whole sequence every step instead of one position.
    pub full_recompute: bool,
    /// `--chunk`: prefill positions per forward.
    pub chunk: usize,
    /// Every prompt row's logits are computed (and given to [`RunOutput::logits`]), not only
    /// the last (`--dump-logits`, `--gen 0`).
    pub all_rows: bool,
    /// Generation stops after one of these (end of turn).
    pub end_ids: &'a [u32],
    /// Generation stops after one of these (`--stop-id`).
    pub stop_ids: &'a [u32],
}

/// Where a run's results go as they are produced.
pub trait RunOutput {
    /// Logits rows (f32, row-major [rows, V]) in computation order: the prompt's rows when
    /// [`DecodeOptions::all_rows`], then each generated step's row. An error fails the run.
    fn logits(&mut self, rows: &[f32]) -> Result<()>;
    /// The prefill finished: `positions` in chunks of up to `chunk`, in `seconds`.
    fn prefilled(&mut self, positions: usize, chunk: usize, seconds: f64);
    /// Step `step` generated `id`; `rep` already holds its [`StepReport`]. An error (a failed
    /// write of the output) fails the run.
    fn token(&mut self, rep: &RunReport, step: usize, id: u32) -> Result<()>;
    /// The generation ended without error: flush the output, fill what the report needs from
    /// it (the generated text). An error fails the run.
    fn finish(&mut self, rep: &mut RunReport) -> Result<()>;
}

/// Progress of the prompt's forward (ENGINE.md §6): which layer is being bound, which chunk
/// finished.
pub trait Progress {
    /// The forward of chunk `chunk` (zero-based) of `n_chunks` asks for layer `layer`
    /// (zero-based) of `layers`.
    fn layer(&mut self, chunk: usize, n_chunks: usize, layer: usize, layers: usize);
    /// Chunk `chunk` of `n_chunks` finished; `positions` have run.
    fn chunk_done(&mut self, chunk: usize, n_chunks: usize, positions: usize);
    /// The forward finished.
    fn done(&mut self);
}

impl Run {
    /// Binds the model behind `index` as `o.plan` decided ([`streamed::bind`]) and fills the
    /// report's binding fields (weights tag, trunk, expert cache, model tables).
    ///
    /// Errors: those of [`streamed::bind`] (exit 2 for a tensor with the wrong shape or dtype
    /// or a read failure while loading, exit 3 if memory is refused) and of the weights tag.
    pub fn open(
        index: &TensorIndex,
        cfg: &Config,
        census: &Census,
        prep: &Prepared,
        o: OpenOptions<'_>,
        rep: &mut RunReport,
    ) -> Result<Run> {
        let rp = o.plan;
        let conf = StreamConfig {
            pinned: &rp.trunk.pinned,
            ring_slots: rp.trunk.ring_slots,
            tables: TablesConfig {
                head_resident_rows: rp.tables.head_resident_rows,
                embed_resident: rp.tables.embed_resident,
                chunk_rows: rp.tables.chunk_rows,
                chunk_slots: rp.tables.chunk_slots,
            },
            cache_slots: rp.cache_slots,
            policy: o.policy,
            packed: o.packed.map(|(pt, bin)| (pt, Arc::clone(bin))),
            expert_io_threads: 4,
        };
        let bound = streamed::bind(index, cfg, prep, &conf)?;
        let (slots, stride, policy) = bound.experts.geometry();
        let experts = Traced::new(bound.experts, o.trace);
        let d = &bound.model.dims;
        let layers = prep.layouts.len();
        rep.weights_tag = Some(index.weights_tag(&census.bound_shards())?);
        rep.trunk_bytes = rp.trunk.pinned_bytes;
        rep.trunk = TrunkReport {
            packed: o.packed.is_some(),
            packed_bytes: o.packed.map(|(_, b)| b.len_at_open()).unwrap_or(0),
            pinned: (0..layers).filter(|&l| rp.trunk.pinned[l]).collect(),
            pinned_bytes: rp.trunk.pinned_bytes,
            ring_slots: rp.trunk.ring_slots,
            slot_bytes: rp.trunk.slot_bytes,
            direct_io: crate::io::file::buffered_fallback_count() == 0,
            reason: rp.trunk.reason.clone(),
            stats: Default::default(),
        };
        rep.expert_slots = slots;
        rep.expert_slot_bytes = stride as u64;
        rep.cache_policy = policy.to_string();
        rep.experts_bound = (0..layers).filter(|&l| l >= d.first_dense).count() * d.e;
        rep.tables_streamed = rp.tables.streamed();
        Ok(Run {
            model: bound.model,
            trunk: bound.trunk,
            experts,
        })
    }

    /// Runs `ids` (each < V, checked by the caller) and generates as `o` says, filling `rep`
    /// (steps, generated ids, stop reason, logits hash, timings) and, whether it succeeds or
    /// fails, the read counters of the trunk, model tables and expert cache. `progress` shows
    /// the prompt's forward.
    ///
    /// Errors: a failed trunk or expert read (exit 4), a non-finite value (exit 2), a failed
    /// output (from `out`).
    pub fn decode(
        &mut self,
        ex: &Exec,
        ids: &[u32],
        o: &DecodeOptions<'_>,
        out: &mut dyn RunOutput,
        progress: Option<&mut dyn Progress>,
        rep: &mut RunReport,
    ) -> Result<()> {
        let res = (|| -> Result<()> {
            let d = &self.model.dims;
            let (v, layers) = (d.v, self.model.layers.len());
            let mut state = DecodeState::new(d, layers, ids.len().saturating_add(o.gen).max(1));
            let mut hash = Fnv1a64::new();
            let mut fwd = Forward {
                model: &self.model,
                ex,
                trunk: &mut self.trunk,
                experts: &mut self.experts,
                chunk: o.chunk,
            };

            // Prefill (the first full-recompute step is the same forward).
            let t_pre = Instant::now();
            let s0 = fwd.experts.stats();
            let dense0 = dense_bytes(fwd.trunk);
            let teacher_forced = o.gen == 0;
            let mut hashed = 0usize;
            let mut logits = fwd.chunks(&mut state, ids, o.all_rows, progress, &mut |rows| {
                out.logits(rows)?;
                if teacher_forced {
                    // --gen 0: every teacher-forced row is hashed (documented in the report)
                    for r in rows.chunks(v) {
                        hash.update_f32(r);
                        hashed += 1;
                    }
                }
                Ok(())
            })?;
            rep.timing.prefill_seconds = t_pre.elapsed().as_secs_f64();
            rep.layers_completed = layers;
            rep.logits_hashed += hashed;
            out.prefilled(ids.len(), o.chunk, rep.timing.prefill_seconds);
            if teacher_forced {
                rep.stop_reason = "length".to_string();
            }
            let mut step_secs = rep.timing.prefill_seconds;
            let mut step_stats = diff(fwd.experts.stats(), s0);
            let mut step_dense = dense_bytes(fwd.trunk) - dense0;
            let mut full = ids.to_vec();
            for step in 0..o.gen {
                // The forward refused non-finite logits, so the argmax is over finite values.
                let tok = k3_kernels::argmax(&logits)
                    .ok_or_else(|| Error::internal("argmax over empty or NaN logits"))?
                    as u32;
                hash.update_f32(&logits);
                rep.logits_hashed += 1;
                rep.generated_ids.push(tok);
                full.push(tok);
                rep.steps.push(StepReport {
                    token_id: tok,
                    seconds: step_secs,
                    logits_fnv1a64: k3_kernels::fnv1a64_f32(&logits),
                    experts: step_stats,
                    dense_bytes_read: step_dense,
                });
                out.token(rep, step, tok)?;
                if o.end_ids.contains(&tok) {
                    rep.stop_reason = "end_of_turn".to_string();
                    break;
                }
                if o.stop_ids.contains(&tok) {
                    rep.stop_reason = "stop_id".to_string();
                    break;
                }
                if step + 1 == o.gen {
                    rep.stop_reason = "length".to_string();
                    break;
                }
                let t = Instant::now();
                let s = fwd.experts.stats();
                let dense_s = dense_bytes(fwd.trunk);
                logits = if o.full_recompute {
                    state.reset();
                    fwd.chunks(&mut state, &full, false, None, &mut |_| Ok(()))?
                } else {
                    fwd.one(&mut state, tok)?
                };
                out.logits(&logits)?;
                step_secs = t.elapsed().as_secs_f64();
                rep.timing.decode_seconds += step_secs;
                step_stats = diff(fwd.experts.stats(), s);
                step_dense = dense_bytes(fwd.trunk) - dense_s;
            }
            out.finish(rep)?;
            self.experts.finish_trace()?;
            rep.logits_hash = hash.finish();
            Ok(())
        })();
        rep.experts = self.experts.stats();
        rep.cache = self.experts.inner.cache_stats();
        rep.trunk.stats = self.trunk.stats();
        rep.tables = self.trunk.table_stats();
        rep.trunk.direct_io = crate::io::file::buffered_fallback_count() == 0;
        res
    }
}

/// The forward pass over the run's sources.
struct Forward<'a> {
    model: &'a Model,
    ex: &'a Exec,
    trunk: &'a mut StreamedTrunk,
    experts: &'a mut Traced<CachedExperts>,
    chunk: usize,
}

impl Forward<'_> {
    /// Runs `ids` from a fresh or continued state in prefill chunks. With `all`, every chunk's
    /// rows go to `sink` as they are computed (never more than one chunk held); returns the
    /// last position's logits.
    fn chunks(
        &mut self,
        state: &mut DecodeState,
        ids: &[u32],
        all: bool,
        mut progress: Option<&mut dyn Progress>,
        sink: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<Vec<f32>> {
        let v = self.model.dims.v;
        let n_chunks = ids.len().div_ceil(self.chunk);
        let mut last_row = Vec::new();
        for (ci, ch) in ids.chunks(self.chunk).enumerate() {
            let last = ci + 1 == n_chunks;
            let want = if all {
                LogitRows::All
            } else if last {
                LogitRows::Last
            } else {
                LogitRows::None
            };
            let mut trunk = LayerProgress {
                inner: self.trunk,
                progress: progress.as_deref_mut(),
                chunk: ci,
                n_chunks,
                layers: self.model.layers.len(),
            };
            let rows = self
                .model
                .forward(self.ex, &mut trunk, self.experts, state, ch, want)?;
            if all {
                sink(&rows)?;
            }
            if last {
                last_row = rows[rows.len() - v..].to_vec();
            }
            if let Some(p) = progress.as_deref_mut() {
                p.chunk_done(ci, n_chunks, state.n_pos);
            }
        }
        if let Some(p) = progress {
            p.done();
        }
        Ok(last_row)
    }

    /// One decode position: the logits of `id` after the state.
    fn one(&mut self, state: &mut DecodeState, id: u32) -> Result<Vec<f32>> {
        self.model.forward(
            self.ex,
            self.trunk,
            self.experts,
            state,
            &[id],
            LogitRows::Last,
        )
    }
}

/// Trunk and model-table bytes read so far (the dense part of a step's "GB read").
fn dense_bytes(t: &StreamedTrunk) -> u64 {
    let ts = t.table_stats();
    t.stats().bytes_read + ts.embedding_bytes_read + ts.lm_head_bytes_read
}

fn diff(a: ExpertStats, b: ExpertStats) -> ExpertStats {
    ExpertStats {
        requests: a.requests - b.requests,
        resident_hits: a.resident_hits - b.resident_hits,
        reads: a.reads - b.reads,
        bytes_read: a.bytes_read - b.bytes_read,
        read_seconds: a.read_seconds - b.read_seconds,
    }
}

/// The trunk as the prompt's forward sees it: every layer asked for is reported to the
/// [`Progress`] (a forward over a streamed trunk can take minutes).
struct LayerProgress<'a, 'p, 'd> {
    inner: &'a mut StreamedTrunk,
    progress: Option<&'p mut (dyn Progress + 'd)>,
    chunk: usize,
    n_chunks: usize,
    layers: usize,
}

impl TrunkSource for LayerProgress<'_, '_, '_> {
    fn layer_buf(&mut self, l: usize) -> Result<&[u16]> {
        if let Some(p) = self.progress.as_deref_mut() {
            p.layer(self.chunk, self.n_chunks, l, self.layers);
        }
        self.inner.layer_buf(l)
    }
    fn embed_row(&mut self, id: usize) -> Result<&[u16]> {
        self.inner.embed_row(id)
    }
    fn prefetch_lm_head(&mut self) {
        self.inner.prefetch_lm_head()
    }
    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()> {
        self.inner.lm_head(f)
    }
}
