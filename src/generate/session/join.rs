//! Joining sequences (ENGINE.md §10, §11): a sequence that joins running ones prefills as rows
//! of their steps' forwards instead of alone before them. [`Session::join`] marks it; each
//! [`Session::step`] then runs up to [`Session::join_slice`] positions, less the decoding
//! sequences' rows of that step, of the joiners' prompts (first joined, first served) as
//! segments of the same [`Model::forward_batch`] as the
//! decoding sequences' new ids, so one read of each weight serves both and no decoder waits
//! for a whole prompt. A prompt run in slices gives the same bits as in chunks (MODEL.md §7),
//! and a row of a batched forward the same bits as alone, so the joiner's logits, ids and
//! hash are those of [`Session::prefill`]. The step that runs a joiner's last slice leaves
//! its pending logits as the prefill would; it chooses its first id at the next step.
//!
//! [`Model::forward_batch`]: crate::model::Model::forward_batch

use super::{Rows, Sequence, Session, StepFigures};
use crate::error::{Error, Result};
use crate::model::experts::ExpertSource;
use crate::model::{LogitRows, TrunkSource};
use std::fmt;
use std::time::Instant;

/// A prefill's progress (ENGINE.md §11): positions done and in all, seconds so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillProgress {
    /// Positions run so far in this prefill.
    pub done: usize,
    /// Positions this prefill runs.
    pub total: usize,
    /// Seconds since the prefill started (for a joiner: since it joined).
    pub seconds: f64,
}

impl PrefillProgress {
    /// Positions per second so far; None before any position ran.
    pub fn rate(&self) -> Option<f64> {
        (self.done > 0 && self.seconds > 0.0).then(|| self.done as f64 / self.seconds)
    }

    /// Seconds left at [`PrefillProgress::rate`]; None before any position ran.
    pub fn eta(&self) -> Option<f64> {
        let r = self.rate()?;
        Some(self.total.saturating_sub(self.done) as f64 / r)
    }
}

/// `prefill DONE/TOTAL RATE/s ETA s` (ENGINE.md §11; the SSE comment's text and the progress
/// line's start), rate and time left with one decimal and omitted until a chunk (or slice) has
/// run.
impl fmt::Display for PrefillProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "prefill {}/{}", self.done, self.total)?;
        if let (Some(r), Some(e)) = (self.rate(), self.eta()) {
            write!(f, " {r:.1}/s {e:.1} s")?;
        }
        Ok(())
    }
}

/// A joining sequence's prefill: where it started, how long it is.
#[derive(Debug, Clone)]
pub(super) struct Joining {
    started: Instant,
    /// Positions run before it joined (from a snapshot, or an earlier turn).
    base: usize,
    total: usize,
}

impl Sequence {
    /// While the sequence prefills as a joiner ([`Session::join`]): its progress; None once
    /// its prompt has run (or it never joined).
    pub fn prefilling(&self) -> Option<PrefillProgress> {
        let j = self.join.as_ref()?;
        Some(PrefillProgress {
            done: self.state.n_pos.saturating_sub(j.base).min(j.total),
            total: j.total,
            seconds: j.started.elapsed().as_secs_f64(),
        })
    }
}

impl<T: TrunkSource, E: ExpertSource> Session<'_, T, E> {
    /// Marks `seq` (fresh, or continued with new ids) to prefill its ids not yet run as rows of
    /// the next [`Session::step`]s, instead of alone ([`Session::prefill`]). Until its last
    /// slice has run, [`Sequence::prefilling`] tells its progress and a step chooses nothing
    /// for it.
    ///
    /// Errors: nothing to run (exit 2); a sequence that wants every prompt row's logits
    /// (`all_rows`: those go to a sink, only [`Session::prefill`] has one; internal).
    pub fn join(&self, seq: &mut Sequence) -> Result<()> {
        if seq.all_rows {
            return Err(Error::internal(
                "join: a sequence that wants every prompt row prefills alone (Session::prefill)",
            ));
        }
        let total = seq.ids.len().saturating_sub(seq.state.n_pos);
        if total == 0 {
            return Err(Error::invalid("join: the sequence has no ids to prefill"));
        }
        seq.join = Some(Joining {
            started: Instant::now(),
            base: seq.state.n_pos,
            total,
        });
        Ok(())
    }

    /// The joiners' rows of a step whose decoding sequences run `used` rows: up to
    /// [`Session::join_slice`] − `used` positions in all (at least 1), the first joiner of
    /// `seqs` first. Only the last slice of a prompt asks for a logits row,
    /// its last (a joiner wants no other: it has no sink).
    pub(super) fn join_rows(&self, seqs: &[&mut Sequence], used: usize) -> Vec<Rows> {
        let mut left = self.join_slice.saturating_sub(used).max(1);
        let mut rows = Vec::new();
        for (i, s) in seqs.iter().enumerate() {
            if s.join.is_none() || left == 0 {
                continue;
            }
            let from = s.state.n_pos;
            let n = left.min(s.ids.len().saturating_sub(from));
            if n == 0 {
                continue;
            }
            left -= n;
            let last = from + n == s.ids.len();
            let want = if last {
                LogitRows::Last
            } else {
                LogitRows::None
            };
            rows.push(Rows {
                seq: i,
                ids: s.ids[from..from + n].to_vec(),
                drafted: 0,
                n_pos0: from,
                want,
                join: true,
            });
        }
        rows
    }

    /// After a forward ran a joiner's slice (`logits`: its last row after the last slice,
    /// else nothing): after the last slice the sequence holds the prompt's last logits and is
    /// left as [`Session::prefill`] leaves it.
    pub(super) fn joined(&self, s: &mut Sequence, logits: Vec<f32>, f: StepFigures) {
        if s.state.n_pos == s.ids.len() {
            finish(s, logits, f);
        }
    }

    /// A joiner's whole remaining prompt alone, in chunks (the diagnostic full recompute,
    /// whose steps re-run every prefix: slicing would save nothing there).
    pub(super) fn join_alone(&mut self, s: &mut Sequence) -> Result<()> {
        let t = Instant::now();
        let (s0, d0) = (self.experts.stats(), self.trunk.bytes_read());
        let ids = s.ids[s.state.n_pos..].to_vec();
        let last = self.chunks(&mut s.state, &ids, false, None, &mut |_| Ok(()))?;
        let f = self.figures_since(t, s0, d0);
        finish(s, last, f);
        Ok(())
    }
}

/// The end of a joiner's prefill: its last logits pending, as [`Session::prefill`] leaves it.
fn finish(s: &mut Sequence, last: Vec<f32>, f: StepFigures) {
    s.join = None;
    s.logits = last;
    s.figures = f;
    s.sweeps += s.fig_taken as u64;
    s.fig_taken = false;
    s.stop = s.rules.before_first(s.ids.len() as u64);
}
