//! A run of the main job (ENGINE.md §3, §6), in two steps: [`Run::open`] binds the model as a
//! memory plan decided (trunk ring, model tables, expert cache) and fills the report's binding
//! fields; [`Run::into_session`] makes it the [`Session`] that [`decode`] runs the prompt ids
//! through (prefill in chunks, then one chosen id per step as the sampler and stop rules say),
//! hashing the logits (FNV-1a-64, FORMATS.md §10) and filling the per-step report.
//! Everything the user sees (tokens, text, step lines, progress, logits dumps) goes through
//! [`RunOutput`] and [`Progress`], so the library prints nothing.

use crate::bind::streamed::{self, Prepared, StreamConfig};
use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::error::Result;
use crate::generate::guide::Constraints;
use crate::generate::sample::SamplerSettings;
pub use crate::generate::session::Progress;
use crate::generate::session::{Sequence, SequenceOptions, Session, StepEvent};
use crate::generate::state_file::SequenceState;
use crate::generate::stop::{StopReason, StopRules};
use crate::io::IoFile;
use crate::model::experts::ExpertSource;
use crate::model::{Exec, Model};
use crate::plan::RunPlan;
use crate::report::{RunReport, SpecReport, StepReport, TrunkReport};
use crate::stream::experts::CachedExperts;
use crate::stream::pack::PackedTrunk;
use crate::stream::pieces::PieceMode;
use crate::stream::tables::TablesConfig;
use crate::stream::trace::{TraceWriter, Traced};
use crate::stream::trunk::StreamedTrunk;
use std::sync::Arc;

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
    /// Told after each pinned trunk layer is read: (done, total pinned, bytes so far).
    pub loaded: Option<fn(usize, usize, u64)>,
    /// How streamed layers are cut into ring pieces (`--trunk-pieces`; the plan was sized
    /// with the same cut).
    pub pieces: PieceMode,
    /// `--io-depth N`: concurrent preads per trunk piece and lm_head chunk read, and expert
    /// reads in flight per batch; None: [`DEFAULT_IO_DEPTH`] and [`DEFAULT_EXPERT_IO_THREADS`].
    pub io_depth: Option<usize>,
    /// Decode threads per coded piece read when the packed trunk has a codec (the compute
    /// threads: decoding runs while the forward waits for the piece, or overlaps it).
    pub codec_threads: usize,
}

/// Concurrent preads per trunk piece and lm_head chunk read without `--io-depth`: one (on
/// this project's machine splitting a window over more threads was not faster: bench/README.md).
pub const DEFAULT_IO_DEPTH: usize = 1;
/// Expert reads in flight per batch without `--io-depth`.
pub const DEFAULT_EXPERT_IO_THREADS: usize = 4;

/// A model bound for a run: the weights, the streamed trunk and the (traced) expert cache.
pub struct Run {
    model: Model,
    trunk: StreamedTrunk,
    experts: Traced<CachedExperts>,
}

/// What the decode loop does with the ids (ENGINE.md §3).
#[derive(Debug, Clone)]
pub struct DecodeOptions<'a> {
    /// Every prompt row's logits are computed (and given to [`RunOutput::logits`]), not only
    /// the last (`--dump-logits`, `--gen 0`).
    pub all_rows: bool,
    /// The sampler settings (ENGINE.md §8).
    pub settings: SamplerSettings,
    /// The stop rules: end ids, `--stop-id`, `--stop`, `--gen` (0 hashes every
    /// teacher-forced row of the prompt), `--ctx`.
    pub rules: StopRules,
    /// Positions the sequence may reach (`--ctx`, planned up front).
    pub capacity: usize,
    /// A loaded state to continue (`--load-state`): its pending id and then `ids` run first.
    pub resume: Option<&'a SequenceState>,
    /// The constraints of the generated ids (ENGINE.md §8; `--json-schema`). Continuing a
    /// loaded state with no new ids, they are replayed over the ids its earlier runs
    /// generated, so the output goes on where it stood.
    pub constraints: Constraints,
}

/// The session of the main job: the bound model over the streamed trunk and the (traced)
/// expert cache.
pub type RunSession<'t> = Session<'t, StreamedTrunk, Traced<CachedExperts>>;

/// Where a run's results go as they are produced.
pub trait RunOutput {
    /// Logits rows (f32, row-major [rows, V]) in computation order: the prompt's rows when
    /// [`DecodeOptions::all_rows`], then each generated step's row. An error fails the run.
    fn logits(&mut self, rows: &[f32]) -> Result<()>;
    /// The prefill finished: `positions` in chunks of up to `chunk`, in `seconds`.
    fn prefilled(&mut self, positions: usize, chunk: usize, seconds: f64);
    /// Step `step` generated `id`; `rep` already holds its [`StepReport`]. `text` is the
    /// generated text `--stop` released with it (empty without `--stop`: the output decodes
    /// `id` itself). An error (a failed write of the output) fails the run.
    fn token(&mut self, rep: &RunReport, step: usize, id: u32, text: &str) -> Result<()>;
    /// The text `--stop` held back when generation ended without a stop string (empty
    /// without `--stop`). An error fails the run.
    fn text(&mut self, text: &str) -> Result<()>;
    /// The generation ended without error: flush the output, fill what the report needs from
    /// it (the generated text). An error fails the run.
    fn finish(&mut self, rep: &mut RunReport) -> Result<()>;
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
            expert_io_threads: o.io_depth.unwrap_or(DEFAULT_EXPERT_IO_THREADS),
            loaded: o.loaded,
            pieces: o.pieces,
            io_depth: o.io_depth.unwrap_or(DEFAULT_IO_DEPTH),
            codec_threads: o.codec_threads.max(1),
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
            codec: o.packed.and_then(|(pt, _)| pt.codec.clone()),
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

    /// The session over this binding, computing with `ex`, the prompt in chunks of `chunk`
    /// ([`Session::new`]).
    pub fn into_session<'t>(self, ex: Exec, chunk: usize) -> Result<RunSession<'t>> {
        Session::new(self.model, self.trunk, self.experts, ex, chunk)
    }
}

/// Runs `ids` (each < V, checked by the caller) as one sequence of `sess` and generates as
/// `o` says, filling `rep` (steps, generated ids, stop reason, logits hash, timings) and,
/// whether it succeeds or fails, the read counters of the trunk, model tables and expert
/// cache. `progress` shows the prompt's forward.
///
/// Errors: a failed trunk or expert read (exit 4), a non-finite value (exit 2), a failed
/// output (from `out`).
pub fn decode(
    sess: &mut RunSession<'_>,
    ids: &[u32],
    o: &DecodeOptions<'_>,
    out: &mut dyn RunOutput,
    progress: Option<&mut dyn Progress>,
    rep: &mut RunReport,
) -> Result<Sequence> {
    let res = (|| -> Result<Sequence> {
        let so = SequenceOptions {
            settings: o.settings,
            rules: o.rules.clone(),
            all_rows: o.all_rows,
        };
        let mut seq = match o.resume {
            Some(st) => Sequence::from_state(&sess.model, st, ids, o.capacity, so)?,
            None => sess.sequence(ids, o.capacity, so)?,
        };
        let list = o.constraints.clone().0;
        match o.resume {
            Some(st) if ids.is_empty() => {
                let all: Vec<u32> = st.ids.iter().copied().chain([st.pending]).collect();
                let n = (st.generated.min(all.len() as u64)) as usize;
                seq.set_constraints_after(list, &all[all.len() - n..])?;
            }
            _ => seq.set_constraints(list),
        }
        let prefilled = seq.ids().len() - seq.state().n_pos;
        sess.prefill(&mut seq, progress, &mut |rows| out.logits(rows))?;
        if let Some(s) = rep.state.as_mut() {
            s.prefilled_ids = prefilled as u64;
        }
        rep.timing.prefill_seconds = seq.figures().seconds;
        rep.layers_completed = sess.model.layers.len();
        out.prefilled(prefilled, sess.chunk, rep.timing.prefill_seconds);
        // Under speculation a sweep's ids are told once it is over, so that the step line
        // can say how many ids the sweep produced.
        let spec = sess.spec.max_draft > 0 && !sess.full_recompute;
        let mut told: Vec<(usize, u32, String)> = Vec::new();
        if spec {
            rep.speculation = Some(SpecReport {
                max_draft: sess.spec.max_draft as u64,
                ..SpecReport::default()
            });
        }
        while seq.active() {
            let f = sess.step(&mut [&mut seq], &mut |ev| match ev {
                StepEvent::Chosen(_, c) => {
                    rep.generated_ids.push(c.id);
                    rep.steps.push(StepReport {
                        token_id: c.id,
                        seconds: c.figures.seconds,
                        logits_fnv1a64: c.logits_fnv1a64,
                        experts: c.figures.experts,
                        dense_bytes_read: c.figures.dense_bytes,
                        sweep: c.sweep,
                        sweep_ids: 1,
                    });
                    if spec {
                        told.push((c.step, c.id, c.text.clone()));
                        Ok(())
                    } else {
                        out.token(rep, c.step, c.id, &c.text)
                    }
                }
                StepEvent::Logits(_, row) => out.logits(row),
            })?;
            rep.timing.decode_seconds += f.seconds;
            tell_sweep(rep, out, &mut told)?;
        }
        if let Some(p) = rep.speculation.as_mut() {
            let st = seq.spec_stats();
            p.sweeps = rep.steps.last().map_or(0, |s| s.sweep + 1);
            p.verify_sweeps = st.verify_sweeps;
            p.drafted = st.drafted;
            p.accepted = st.accepted;
            p.tokens = rep.generated_ids.len() as u64;
            p.verify_seconds = st.verify_seconds;
        }
        out.text(&seq.finish_text())?;
        rep.stop_reason = seq
            .stop_reason()
            .unwrap_or(StopReason::Length)
            .name()
            .to_string();
        rep.logits_hashed += seq.logits_hashed();
        rep.logits_hash = seq.logits_hash();
        out.finish(rep)?;
        sess.experts.finish_trace()?;
        Ok(seq)
    })();
    rep.experts = sess.experts.stats();
    rep.cache = sess.experts.inner.cache_stats();
    rep.trunk.stats = sess.trunk.stats();
    rep.tables = sess.trunk.table_stats();
    rep.trunk.direct_io = crate::io::file::buffered_fallback_count() == 0;
    res
}

/// Tells `out` the ids a speculative step chose (`told`, drained), each step report first
/// given the number of ids of its sweep.
fn tell_sweep(
    rep: &mut RunReport,
    out: &mut dyn RunOutput,
    told: &mut Vec<(usize, u32, String)>,
) -> Result<()> {
    // a sweep's ids are all chosen in one step (the prefill's one id with the first sweep's)
    let n = rep.steps.len();
    let new = &mut rep.steps[n - told.len()..];
    for i in 0..new.len() {
        let sweep = new[i].sweep;
        new[i].sweep_ids = new.iter().filter(|s| s.sweep == sweep).count() as u64;
    }
    for (step, id, text) in told.drain(..) {
        out.token(rep, step, id, &text)?;
    }
    Ok(())
}
