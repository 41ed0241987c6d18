//! The session (issue 12, ENGINE.md §3, §8–§10): a [`Session`] owns a bound model with its
//! trunk and expert sources and the compute; a [`Sequence`] owns one generation's ids, decode
//! state, sampler settings, stop rules, running logits hash and generated ids. One
//! [`Session::step`] advances every active sequence by one chosen id in one forward over all
//! their new rows ([`Model::forward_batch`]): each weight and each expert of the step's union
//! is read once, whatever the number of sequences, and a sequence's logits are the same bits
//! alone or in any batch.
//!
//! Test hook: `K3_TEST_FORCE_IDS=1,2,3` (read by [`Session::new`]) makes every sequence emit
//! those ids as its first generated ids (then it chooses as usual), while the model still runs
//! on every id and its logits are hashed; see DEVELOPERS.md.

use super::budget::{BudgetConstraint, ThinkBudget};
use super::guide::{Admitted, Guide};
use super::sample::{Sampler, SamplerSettings};
use super::spec::{SeqSpec, Speculation};
use super::stop::{StopReason, StopRules, StopText};
use crate::constrain::Constraint;
use crate::error::{Error, Result};
use crate::model::experts::{ExpertSource, ExpertStats};
use crate::model::state::{DecodeState, LayerState};
use crate::model::weights::{Bf16Mat, LayerPart, PartBuf};
use crate::model::{Exec, LogitRows, Model, TrunkSource};
use crate::tokenizer::stream::StreamDecoder;
use crate::tokenizer::Tokenizer;
use k3_kernels::Fnv1a64;
use std::time::Instant;

mod join;
mod prefix;
mod resume;
mod turn;
mod verify;

pub use join::PrefillProgress;

/// The environment variable of the forced-reply test hook (module docs).
pub const FORCE_IDS_ENV: &str = "K3_TEST_FORCE_IDS";

/// What one forward cost: wall seconds, the expert source's counter differences and the
/// trunk and model-table bytes read ([`TrunkSource::bytes_read`]). A batched step's figures
/// cover every sequence of it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepFigures {
    /// Seconds of the forward.
    pub seconds: f64,
    /// Expert requests, hits, reads and bytes during the forward.
    pub experts: ExpertStats,
    /// Trunk and model-table bytes read during the forward.
    pub dense_bytes: u64,
}

/// How a sequence generates.
#[derive(Debug, Clone)]
pub struct SequenceOptions {
    /// Sampler settings (ENGINE.md §8); greedy when the temperature is 0.
    pub settings: SamplerSettings,
    /// Stop rules: end ids, `--stop-id`, `--stop`, `--gen`, `--ctx` (ENGINE.md §3).
    pub rules: StopRules,
    /// Every prompt row's logits go to the prefill's sink, not only the last.
    pub all_rows: bool,
}

/// The id a step chose for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    /// The chosen id (now part of the sequence's generated ids).
    pub id: u32,
    /// Zero-based index among the sequence's generated ids.
    pub step: usize,
    /// FNV-1a-64 of the logits it was chosen from (FORMATS.md §10 per-step hash).
    pub logits_fnv1a64: u64,
    /// The figures of the forward that produced those logits (zeros for every id after the
    /// first chosen from one forward's rows, under speculation).
    pub figures: StepFigures,
    /// The index of the forward whose logits chose it (0 = the prefill; several ids share one
    /// under speculation; FORMATS.md §10 `sweep`).
    pub sweep: u64,
    /// Why the sequence stopped with this id, if it did.
    pub stop: Option<StopReason>,
    /// Generated text released by this id under `--stop` (only with a tokenizer and stop
    /// strings; never a part of a stop string).
    pub text: String,
    /// The ids the sequence's constraints admitted at this choice, when it asked to keep
    /// them ([`Sequence::keep_masks`]): logprobs are of the masked distribution.
    pub admitted: Option<Admitted>,
}

/// What a step tells its caller as it goes.
#[derive(Debug)]
pub enum StepEvent<'a> {
    /// Sequence `index` (of the step's slice) chose an id (told before the forward).
    Chosen(usize, &'a Chosen),
    /// The forward computed sequence `index`'s next logits (length V).
    Logits(usize, &'a [f32]),
}

/// One generation: ids (prompt then generated), decode state, sampler, stop rules, hash.
#[derive(Debug, Clone)]
pub struct Sequence {
    ids: Vec<u32>,
    prompt_len: usize,
    state: DecodeState,
    settings: SamplerSettings,
    sampler: Sampler,
    rules: StopRules,
    all_rows: bool,
    hash: Fnv1a64,
    hashed: usize,
    logits: Vec<f32>,
    figures: StepFigures,
    pending: Option<u32>,
    stop: Option<StopReason>,
    text: Option<(StreamDecoder, StopText)>,
    released: String,
    /// Forwards whose logits this sequence chose from, after the prefill (`Chosen::sweep`).
    sweeps: u64,
    /// An id was already chosen from the current logits' forward (its figures are told once).
    fig_taken: bool,
    spec: SeqSpec,
    /// The turn's constraints (ENGINE.md §8: thinking budget, schema, tool calls), if any.
    guide: Option<Guide>,
    /// V, the size of a constraint's mask.
    vocab: usize,
    /// Prefilling as rows of the steps (module `join`), until its prompt has run.
    join: Option<join::Joining>,
}

/// A copy of a sequence at one point (ids, KDA state and conv history, MLA rows, sampler
/// position, hash, pending logits) for prefix reuse and rollback ([`Sequence::restore`]).
#[derive(Debug, Clone)]
pub struct Snapshot {
    seq: Sequence,
}

impl Sequence {
    /// A sequence of `prompt` (at least one id) with room for `capacity` positions (the
    /// `--ctx`), nothing run yet. Allocates its decode state ([`DecodeState::new`]).
    ///
    /// Errors (exit 2): an empty prompt; a prompt longer than `--ctx` ([`StopRules::check_prompt`]).
    pub fn new(
        model: &Model,
        prompt: &[u32],
        capacity: usize,
        o: SequenceOptions,
    ) -> Result<Sequence> {
        if prompt.is_empty() {
            return Err(Error::invalid("a sequence needs at least one prompt id"));
        }
        o.rules.check_prompt(prompt.len() as u64)?;
        let state = DecodeState::new(&model.dims, model.layers.len(), capacity.max(1));
        let text = if o.rules.stop_texts().is_empty() {
            None
        } else {
            Some((StreamDecoder::new(), StopText::new(o.rules.stop_texts())))
        };
        Ok(Sequence {
            ids: prompt.to_vec(),
            prompt_len: prompt.len(),
            state,
            settings: o.settings,
            sampler: Sampler::new(),
            rules: o.rules,
            all_rows: o.all_rows,
            hash: Fnv1a64::new(),
            hashed: 0,
            logits: Vec::new(),
            figures: StepFigures::default(),
            pending: None,
            stop: None,
            text,
            released: String::new(),
            sweeps: 0,
            fig_taken: false,
            spec: SeqSpec::default(),
            guide: None,
            vocab: model.dims.v,
            join: None,
        })
    }

    /// Every id: the prompt, then the generated ids.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
    /// The generated ids.
    pub fn generated(&self) -> &[u32] {
        &self.ids[self.prompt_len..]
    }
    /// The sampler settings.
    pub fn settings(&self) -> &SamplerSettings {
        &self.settings
    }
    /// Why the sequence stopped, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }
    /// True until a stop rule fired (or a step failed).
    pub fn active(&self) -> bool {
        self.stop.is_none()
    }
    /// FNV-1a-64 over every logits vector chosen from (and, with `--gen 0`, every prompt
    /// row), in order: the report's `logits_hash` (FORMATS.md §10).
    pub fn logits_hash(&self) -> u64 {
        self.hash.finish()
    }
    /// Logits vectors hashed so far.
    pub fn logits_hashed(&self) -> usize {
        self.hashed
    }
    /// The logits of the last position run (length V; empty before the prefill).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }
    /// The figures of the forward that produced the pending logits (the prefill's, after it).
    pub fn figures(&self) -> StepFigures {
        self.figures
    }
    /// The prompt's length in ids.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }
    /// The decode state (positions run so far: `state().n_pos`).
    pub fn state(&self) -> &DecodeState {
        &self.state
    }
    /// With `--stop` strings: the generated text released so far (never a part of a stop
    /// string); empty without them.
    pub fn released_text(&self) -> &str {
        &self.released
    }

    /// The generated text held back by `--stop` when generation ended without a stop string
    /// (flushed: a later call returns nothing).
    pub fn finish_text(&mut self) -> String {
        match &mut self.text {
            Some((dec, st)) => {
                let tail = dec.finish();
                let r = st.push(&tail);
                let t = r.text + &st.finish();
                self.released.push_str(&t);
                t
            }
            None => String::new(),
        }
    }

    /// Sets (or clears) the turn's thinking budget ([`ThinkBudget`], ENGINE.md §8) as its
    /// only constraint: counted from the turn's first generated id.
    pub fn set_think_budget(&mut self, budget: Option<ThinkBudget>) {
        let list = budget
            .map(|b| vec![Box::new(BudgetConstraint::new(b)) as Box<dyn Constraint>])
            .unwrap_or_default();
        self.set_constraints(list);
    }

    /// Sets the turn's constraints (ENGINE.md §8 "Constraints"; none clears them): from the
    /// next choice on, only ids every one of them admits are candidates, and each advances
    /// past every chosen id. They start at the turn's first generated id: set them after
    /// [`Sequence::continue_with`] / [`Sequence::restart_turn`] and before the first step.
    pub fn set_constraints(&mut self, list: Vec<Box<dyn Constraint>>) {
        let keep = self.guide.as_ref().is_some_and(|g| g.keep_masks);
        self.guide = Guide::new(list, self.vocab);
        self.keep_masks(keep);
    }

    /// Sets the constraints as [`Sequence::set_constraints`] does, then advances them past
    /// `earlier`, the ids an earlier run of the same output already generated (a resumed
    /// state file: the constraint goes on where it stood, so the resumed ids are those of one
    /// uninterrupted run).
    ///
    /// Errors (exit 2): an id of `earlier` the constraints do not admit, naming its index.
    pub fn set_constraints_after(
        &mut self,
        list: Vec<Box<dyn Constraint>>,
        earlier: &[u32],
    ) -> Result<()> {
        self.set_constraints(list);
        if let Some(g) = &mut self.guide {
            for (i, &id) in earlier.iter().enumerate() {
                g.accept(id).map_err(|r| {
                    Error::invalid(format!(
                        "generated id {i} ({id}) of the earlier run does not fit the \
                         constraint: {}",
                        r.reason
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// With `keep` every [`Chosen`] carries the ids its constraints admitted (for logprobs).
    pub fn keep_masks(&mut self, keep: bool) {
        if let Some(g) = &mut self.guide {
            g.keep_masks = keep;
        }
    }

    /// True while the sequence has constraints and they are complete (or it has none).
    pub fn constraints_complete(&self) -> bool {
        self.guide.as_ref().is_none_or(|g| g.is_complete())
    }

    /// A copy of the constraints at this point (speculation checks drafts on it).
    pub(crate) fn guide_clone(&self) -> Option<Guide> {
        self.guide.clone()
    }

    /// Ids the sequence may still generate: `--gen` less the generated ones, and the
    /// positions left in `--ctx` (a constraint closes its output in time by it).
    pub fn remaining(&self) -> usize {
        let len = self.ids.len() as u64;
        let gen = self
            .rules
            .gen()
            .saturating_sub((self.ids.len() - self.prompt_len) as u64);
        let ctx = self.rules.ctx().saturating_sub(len);
        gen.min(ctx).min(usize::MAX as u64) as usize
    }

    /// A copy of the sequence now: ids, KDA state and conv history, the MLA rows of the
    /// positions run (the MLA length), sampler, hash and pending logits.
    pub fn snapshot(&self) -> Snapshot {
        let mut seq = self.clone_without_state();
        let n = self.state.n_pos;
        seq.state = DecodeState {
            n_pos: n,
            capacity: self.state.capacity,
            layers: self
                .state
                .layers
                .iter()
                .map(|l| match l {
                    LayerState::Kda(k) => LayerState::Kda(k.clone()),
                    LayerState::Mla(m) => {
                        let w = m.rows.len() / self.state.capacity.max(1);
                        LayerState::Mla(crate::model::state::MlaCache {
                            rows: m.rows[..n * w].to_vec(),
                        })
                    }
                })
                .collect(),
        };
        Snapshot { seq }
    }

    /// Back to `snap` (of this sequence or of another with the same capacity): everything
    /// the snapshot holds, the MLA rows of its positions copied in place (no allocation).
    ///
    /// Errors: a snapshot of another capacity or layer set (internal).
    pub fn restore(&mut self, snap: &Snapshot) -> Result<()> {
        let s = &snap.seq;
        if s.state.capacity != self.state.capacity
            || s.state.layers.len() != self.state.layers.len()
        {
            return Err(Error::internal(
                "restore: the snapshot's decode state has another capacity or layer set",
            ));
        }
        let n = s.state.n_pos;
        let mut state = std::mem::replace(&mut self.state, DecodeState::empty());
        for (dst, src) in state.layers.iter_mut().zip(&s.state.layers) {
            match (dst, src) {
                (LayerState::Kda(a), LayerState::Kda(b)) => {
                    a.st.copy_from_slice(&b.st);
                    a.conv.copy_from_slice(&b.conv);
                }
                (LayerState::Mla(a), LayerState::Mla(b)) => {
                    let w = a.rows.len() / s.state.capacity.max(1);
                    a.rows[..n * w].copy_from_slice(&b.rows[..n * w]);
                }
                _ => return Err(Error::internal("restore: layer kinds differ")),
            }
        }
        state.n_pos = n;
        *self = Sequence {
            state,
            ..s.clone_without_state()
        };
        Ok(())
    }

    fn clone_without_state(&self) -> Sequence {
        Sequence {
            ids: self.ids.clone(),
            prompt_len: self.prompt_len,
            state: DecodeState::empty(),
            settings: self.settings,
            sampler: Sampler::new(),
            rules: self.rules.clone(),
            all_rows: self.all_rows,
            hash: self.hash,
            hashed: self.hashed,
            logits: self.logits.clone(),
            figures: self.figures,
            pending: self.pending,
            stop: self.stop,
            text: self.text.clone(),
            released: self.released.clone(),
            sweeps: self.sweeps,
            fig_taken: self.fig_taken,
            spec: self.spec.light(),
            guide: self.guide.clone(),
            vocab: self.vocab,
            join: self.join.clone(),
        }
    }

    /// Chooses the next id from the pending logits (or the forced one), hashes the logits,
    /// appends the id and applies the stop rules.
    ///
    /// Constraints (ENGINE.md §8): the mask of the guide leaves only the admitted ids as
    /// candidates; a mask of one id is that id, with no draw. The test hook's forced ids come
    /// first; one the constraints do not admit ends them for the turn (a test forcing a reply
    /// no schema allows).
    fn choose(&mut self, forced: Option<u32>, tok: Option<&Tokenizer>) -> Result<Chosen> {
        let n = self.ids.len() as u64;
        let remaining = Some(self.remaining());
        let mut admitted = None;
        let id = match (forced, &mut self.guide) {
            (Some(id), _) => id,
            (None, None) => self
                .sampler
                .choose(&self.logits, &self.settings, n)
                .ok_or_else(|| Error::internal("sampling over empty or non-finite logits"))?,
            (None, Some(g)) => {
                g.mask(remaining);
                let mask = g.last_mask();
                let mut only = mask.iter();
                let id = match (only.next(), only.next()) {
                    (Some(id), None) => id,
                    (None, _) => {
                        return Err(Error::internal(
                            "a constraint admits no id while its output is incomplete",
                        ))
                    }
                    _ => self
                        .sampler
                        .choose_masked(&self.logits, &self.settings, n, Some(mask))
                        .ok_or_else(|| {
                            Error::internal("sampling over empty or non-finite logits")
                        })?,
                };
                if g.keep_masks {
                    admitted = Some(Admitted(std::sync::Arc::new(g.last_mask().clone())));
                }
                id
            }
        };
        if let Some(g) = &mut self.guide {
            if let Err(r) = g.accept(id) {
                if forced.is_none() {
                    return Err(Error::internal(format!(
                        "the constraint refused the id it admitted: {r}"
                    )));
                }
                self.guide = None;
            }
        }
        self.hash.update_f32(&self.logits);
        self.hashed += 1;
        self.ids.push(id);
        let step = self.ids.len() - self.prompt_len - 1;
        let mut stop = None;
        let mut text = String::new();
        if let (Some((dec, st)), Some(t)) = (&mut self.text, tok) {
            let r = st.push(&dec.push(t.token_bytes(id)?));
            text = r.text;
            self.released.push_str(&text);
            if r.stopped.is_some() {
                stop = Some(StopReason::StopText);
            }
        }
        let len = self.ids.len() as u64;
        let stop = stop.or_else(|| self.rules.after_id(id, (step + 1) as u64, len));
        self.stop = stop;
        self.pending = if stop.is_none() { Some(id) } else { None };
        let figures = if self.fig_taken {
            StepFigures::default()
        } else {
            self.figures
        };
        self.fig_taken = true;
        Ok(Chosen {
            id,
            step,
            logits_fnv1a64: k3_kernels::fnv1a64_f32(&self.logits),
            figures,
            sweep: self.sweeps,
            stop,
            text,
            admitted,
        })
    }
}

/// Progress of a prompt's forward (ENGINE.md §6): which layer is being bound, which chunk
/// finished.
pub trait Progress {
    /// The forward of chunk `chunk` (zero-based) of `n_chunks` asks for layer `layer`
    /// (zero-based) of `layers`.
    fn layer(&mut self, chunk: usize, n_chunks: usize, layer: usize, layers: usize);
    /// A prompt's forward starts: `base` positions ran before it, it runs `total` more.
    /// Default: nothing.
    fn started(&mut self, base: usize, total: usize) {
        let _ = (base, total);
    }
    /// Chunk `chunk` of `n_chunks` finished; `positions` have run (in all, `base` included).
    fn chunk_done(&mut self, chunk: usize, n_chunks: usize, positions: usize);
    /// The forward finished.
    fn done(&mut self);
    /// Asked after each chunk: true stops the prefill there with an error (a server whose
    /// client has gone frees the slot at the next chunk, not after the whole prompt).
    /// Default: never.
    fn cancelled(&self) -> bool {
        false
    }
}

/// A bound model with its trunk source `T`, expert source `E` and compute, and the
/// session-wide generation settings.
pub struct Session<'t, T: TrunkSource, E: ExpertSource> {
    /// The model's weights and dimensions.
    pub model: Model,
    /// The dense weights' source.
    pub trunk: T,
    /// The routed experts' source.
    pub experts: E,
    /// The kernels (ISA path, threads).
    pub ex: Exec,
    /// The tokenizer, for `--stop` text.
    pub tok: Option<&'t Tokenizer>,
    /// `--prefill-chunk`: prompt positions per forward.
    pub chunk: usize,
    /// Re-run every sequence's whole prefix each step instead of one position (diagnostic).
    pub full_recompute: bool,
    /// Speculative decoding (`--spec K`, ENGINE.md §10); off by default.
    pub spec: Speculation,
    /// Rows a step's forward may hold for joining sequences' prompts, less the decoding
    /// sequences' rows of the step ([`Session::join`]; [`crate::plan::join_slice`]); default:
    /// the prefill chunk.
    pub join_slice: usize,
    forced: Vec<u32>,
}

/// One sequence's rows of a step's forward: its new ids, how many of them are drafted (the
/// last ones), which logits rows it wants, and whether they are a joiner's prompt slice.
struct Rows {
    seq: usize,
    ids: Vec<u32>,
    drafted: usize,
    /// Positions run before the forward.
    n_pos0: usize,
    want: LogitRows,
    join: bool,
}

impl<'t, T: TrunkSource, E: ExpertSource> Session<'t, T, E> {
    /// A session over a bound model. Reads the forced-reply test hook ([`FORCE_IDS_ENV`]).
    ///
    /// Errors (exit 2): a malformed `K3_TEST_FORCE_IDS` or an id in it ≥ V, naming it.
    pub fn new(model: Model, trunk: T, experts: E, ex: Exec, chunk: usize) -> Result<Self> {
        let forced = match std::env::var(FORCE_IDS_ENV) {
            Ok(s) if !s.trim().is_empty() => parse_forced(&s, model.dims.v)?,
            _ => Vec::new(),
        };
        Ok(Session {
            model,
            trunk,
            experts,
            ex,
            tok: None,
            chunk: chunk.max(1),
            full_recompute: false,
            spec: Speculation::off(),
            join_slice: chunk.max(1),
            forced,
        })
    }

    /// A new sequence of `prompt` over this session's model ([`Sequence::new`]).
    pub fn sequence(
        &self,
        prompt: &[u32],
        capacity: usize,
        o: SequenceOptions,
    ) -> Result<Sequence> {
        Sequence::new(&self.model, prompt, capacity, o)
    }

    /// Runs the sequence's prompt in chunks of [`Session::chunk`] positions: every row goes to
    /// `sink` ([rows, V], one chunk at a time) when the sequence wants all rows, the last
    /// row's logits are kept for the first choice. With `--gen 0` every prompt row is hashed
    /// (teacher-forced); the stop rules that fire before any choice are applied.
    ///
    /// Errors: a failed read (exit 4), a non-finite value (exit 2), an error of `sink`, a
    /// cancel of `progress` ([`Progress::cancelled`], exit 2; the sequence is then unusable).
    pub fn prefill(
        &mut self,
        seq: &mut Sequence,
        progress: Option<&mut dyn Progress>,
        sink: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<()> {
        let t = Instant::now();
        let (s0, d0) = (self.experts.stats(), self.trunk.bytes_read());
        let teacher_forced = seq.rules.gen() == 0;
        let v = self.model.dims.v;
        // a fresh sequence runs its prompt; a resumed one its pending id and the new input
        let ids = seq.ids[seq.state.n_pos.min(seq.ids.len())..].to_vec();
        let (hash, hashed) = (&mut seq.hash, &mut seq.hashed);
        seq.logits = self.chunks(&mut seq.state, &ids, seq.all_rows, progress, &mut |rows| {
            sink(rows)?;
            if teacher_forced {
                for r in rows.chunks(v) {
                    hash.update_f32(r);
                    *hashed += 1;
                }
            }
            Ok(())
        })?;
        seq.figures = self.figures_since(t, s0, d0);
        // a continued sequence's prefill is a new forward to choose from
        seq.sweeps += seq.fig_taken as u64;
        seq.fig_taken = false;
        seq.stop = seq.rules.before_first(seq.ids.len() as u64);
        Ok(())
    }

    /// One step: every active sequence of `seqs` chooses its next id from its pending logits
    /// (`on` gets [`StepEvent::Chosen`] at once, before the forward), then one forward over
    /// the new id of every sequence that did not stop computes their next logits (`on` gets
    /// [`StepEvent::Logits`] for each). Returns the forward's figures.
    ///
    /// With speculation on ([`Speculation::max_draft`] > 0, not with `full_recompute`) a step
    /// is a sweep instead: each sequence's new id and its drafted ids run as rows of the one
    /// forward, and every id chosen from them is told after it (module `verify`).
    ///
    /// Errors: a failed read (exit 4), a non-finite value (exit 2), an error of `on`; every
    /// sequence of the step is then unusable.
    pub fn step(
        &mut self,
        seqs: &mut [&mut Sequence],
        on: &mut dyn FnMut(StepEvent<'_>) -> Result<()>,
    ) -> Result<StepFigures> {
        if self.spec.max_draft > 0 && !self.full_recompute {
            return self.sweep(seqs, on);
        }
        for (i, s) in seqs.iter_mut().enumerate() {
            if !s.active() || s.join.is_some() {
                continue;
            }
            let k = s.ids.len() - s.prompt_len;
            let forced = self.forced.get(k).copied();
            let c = s.choose(forced, self.tok)?;
            on(StepEvent::Chosen(i, &c))?;
        }
        self.advance(seqs, on)
    }

    /// The forward of a step over the pending ids and the joiners' slices (module `join`).
    fn advance(
        &mut self,
        seqs: &mut [&mut Sequence],
        on: &mut dyn FnMut(StepEvent<'_>) -> Result<()>,
    ) -> Result<StepFigures> {
        let t = Instant::now();
        let (s0, d0) = (self.experts.stats(), self.trunk.bytes_read());
        let going: Vec<usize> = (0..seqs.len())
            .filter(|&i| seqs[i].pending.is_some())
            .collect();
        let joins = if self.full_recompute {
            Vec::new()
        } else {
            self.join_rows(seqs, going.len())
        };
        let full_joins: Vec<usize> = (0..seqs.len())
            .filter(|&i| self.full_recompute && seqs[i].join.is_some())
            .collect();
        if going.is_empty() && joins.is_empty() && full_joins.is_empty() {
            return Ok(StepFigures::default());
        }
        let mut joined = Vec::new();
        if self.full_recompute {
            for &i in &going {
                let s = &mut *seqs[i];
                s.state.reset();
                let ids = s.ids.clone();
                s.logits = self.chunks(&mut s.state, &ids, false, None, &mut |_| Ok(()))?;
            }
            for &i in &full_joins {
                self.join_alone(seqs[i])?;
            }
        } else {
            let mut rows: Vec<Rows> = going
                .iter()
                .map(|&i| Rows {
                    seq: i,
                    ids: vec![seqs[i].pending.unwrap_or(0)],
                    drafted: 0,
                    n_pos0: seqs[i].state.n_pos,
                    want: LogitRows::Last,
                    join: false,
                })
                .chain(joins)
                .collect();
            rows.sort_by_key(|r| r.seq);
            let out = self.forward_rows(seqs, &rows)?;
            for (r, l) in rows.iter().zip(out) {
                if r.join {
                    joined.push((r.seq, l));
                } else {
                    seqs[r.seq].logits = l;
                }
            }
        }
        let f = self.figures_since(t, s0, d0);
        for (i, l) in joined {
            self.joined(seqs[i], l, f);
        }
        for &i in &going {
            let s = &mut *seqs[i];
            s.pending = None;
            s.figures = f;
            s.sweeps += 1;
            s.fig_taken = false;
            on(StepEvent::Logits(i, &s.logits))?;
        }
        Ok(f)
    }

    fn figures_since(&self, t: Instant, s0: ExpertStats, d0: u64) -> StepFigures {
        StepFigures {
            seconds: t.elapsed().as_secs_f64(),
            experts: diff(self.experts.stats(), s0),
            dense_bytes: self.trunk.bytes_read() - d0,
        }
    }

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
        if let Some(p) = progress.as_deref_mut() {
            p.started(state.n_pos, ids.len());
        }
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
                inner: &mut self.trunk,
                progress: progress.as_deref_mut(),
                chunk: ci,
                n_chunks,
                layers: self.model.layers.len(),
            };
            let rows =
                self.model
                    .forward(&self.ex, &mut trunk, &mut self.experts, state, ch, want)?;
            if all {
                sink(&rows)?;
            }
            if last {
                last_row = rows[rows.len() - v..].to_vec();
            }
            if let Some(p) = progress.as_deref_mut() {
                p.chunk_done(ci, n_chunks, state.n_pos);
                if !last && p.cancelled() {
                    return Err(Error::invalid(format!(
                        "the prefill was cancelled at position {} (nobody waits for it)",
                        state.n_pos
                    )));
                }
            }
        }
        if let Some(p) = progress {
            p.done();
        }
        Ok(last_row)
    }
}

/// Parses the forced-reply ids: decimal ids < `v`, comma-separated.
fn parse_forced(s: &str, v: usize) -> Result<Vec<u32>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<u32>()
                .ok()
                .filter(|&id| (id as usize) < v)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{FORCE_IDS_ENV}={s}: `{x}` is not a token id below vocab_size {v}"
                    ))
                })
        })
        .collect()
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
struct LayerProgress<'a, 'p, 'd, T: TrunkSource> {
    inner: &'a mut T,
    progress: Option<&'p mut (dyn Progress + 'd)>,
    chunk: usize,
    n_chunks: usize,
    layers: usize,
}

impl<T: TrunkSource> TrunkSource for LayerProgress<'_, '_, '_, T> {
    fn layer_part(&mut self, l: usize, part: LayerPart) -> Result<PartBuf<'_>> {
        if part == LayerPart::Attn {
            if let Some(p) = self.progress.as_deref_mut() {
                p.layer(self.chunk, self.n_chunks, l, self.layers);
            }
        }
        self.inner.layer_part(l, part)
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
    fn bytes_read(&self) -> u64 {
        self.inner.bytes_read()
    }
}
