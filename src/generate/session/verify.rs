//! The speculative sweep (ENGINE.md §10): [`Session::step`] when [`Speculation::max_draft`]
//! is above 0. Each sequence with a chosen, not yet run id drafts up to K more ids
//! ([`DraftSource`]), and one forward runs every sequence's rows; then, row by row, the
//! sequence chooses from that row's logits exactly as a one-id step would (greedy, or the §8
//! draw at that absolute position) and keeps going while its choice equals the next drafted
//! id. So every sweep emits the accepted drafts plus the model's own next choice.
//!
//! Rollback (snapshot and recompute): before a drafted forward the KDA states and conv
//! histories are copied ([`KdaSave`]); when a row is rejected they are copied back and the
//! length cut to the sweep's first position, and the kept ids (the sweep's first id, the
//! accepted drafts and the model's choice) are the rows of the sequence's next forward, which
//! drafts nothing. A stop inside a draft rolls back the same way and the kept ids (all but the
//! stopping one, which stays pending as in a one-id step) run in one more forward at once.
//!
//! [`Speculation::max_draft`]: crate::generate::spec::Speculation::max_draft
//! [`DraftSource`]: crate::generate::spec::DraftSource
//! [`KdaSave`]: crate::generate::spec::KdaSave

use super::{Rows, Sequence, Session, StepEvent, StepFigures};
use crate::error::{Error, Result};
use crate::generate::spec::SpecStats;
use crate::model::experts::{ExpertSource, ExpertStats};
use crate::model::{LogitRows, Segment, TrunkSource};
use std::time::Instant;

impl Sequence {
    /// The speculation counters of this sequence (FORMATS.md §10 `speculation`).
    pub fn spec_stats(&self) -> SpecStats {
        self.spec.stats
    }
    /// Forwards whose logits this sequence chose from after its prefill: the `sweep` of the
    /// next id chosen.
    pub fn sweeps(&self) -> u64 {
        self.sweeps
    }

    /// Drafted ids that fit: positions up to the capacity, ids up to `--gen`, at most `k`.
    fn draft_room(&self, k: usize) -> usize {
        let len = self.ids.len();
        let generated = (len - self.prompt_len) as u64;
        let by_gen = self.rules.gen().saturating_sub(generated);
        let by_ctx = self.state.capacity.saturating_sub(len);
        k.min(by_ctx).min(by_gen.min(usize::MAX as u64) as usize)
    }

    /// Cuts `draft` at its first id the sequence's constraints would not admit there
    /// (ENGINE.md §8, §10): checked on a copy of the constraints advanced through the earlier
    /// drafted ids, so a draft no choice could agree with costs no row. Verification still
    /// chooses each row under the sequence's own mask, so this only saves work.
    fn trim_draft(&self, draft: &mut Vec<u32>) {
        let Some(mut g) = self.guide_clone() else {
            return;
        };
        let left = self.remaining();
        let mut keep = 0;
        for (j, &id) in draft.iter().enumerate() {
            if !g.mask(Some(left.saturating_sub(j))).allows(id) || g.accept(id).is_err() {
                break;
            }
            keep += 1;
        }
        draft.truncate(keep);
    }

    /// Back to the state saved before the sweep (KDA copied back, length cut).
    fn roll_back(&mut self) -> Result<()> {
        if self.spec.save.restore(&mut self.state) {
            Ok(())
        } else {
            Err(Error::internal(
                "speculation: a rollback without a saved state",
            ))
        }
    }
}

impl<T: TrunkSource, E: ExpertSource> Session<'_, T, E> {
    /// The speculative step (module docs). Returns the figures of the sweep's forwards.
    ///
    /// Errors: those of [`Session::step`].
    pub(super) fn sweep(
        &mut self,
        seqs: &mut [&mut Sequence],
        on: &mut dyn FnMut(StepEvent<'_>) -> Result<()>,
    ) -> Result<StepFigures> {
        // The first choice after a prefill (later ones are made right after each forward).
        for (i, s) in seqs.iter_mut().enumerate() {
            if s.active() && s.pending.is_none() && s.join.is_none() {
                let forced = self.forced.get(s.ids.len() - s.prompt_len).copied();
                let c = s.choose(forced, self.tok)?;
                on(StepEvent::Chosen(i, &c))?;
            }
        }
        let t = Instant::now();
        let (s0, d0) = (self.experts.stats(), self.trunk.bytes_read());
        let mut rows = Vec::new();
        for (i, s) in seqs.iter_mut().enumerate() {
            if s.pending.is_none() {
                continue;
            }
            let mut ids = s.ids[s.state.n_pos..].to_vec();
            let mut drafted = 0;
            // a sequence re-running kept ids after a rejection drafts nothing this time: its
            // saved state is of the sweep's first position
            if ids.len() == 1 {
                let k = s.draft_room(s.spec.len.get(self.spec.max_draft));
                if k > 0 {
                    let mut d = Vec::with_capacity(k);
                    self.spec.source.draft(&s.ids, k, &mut d);
                    d.truncate(k);
                    let v = self.model.dims.v as u32;
                    d.retain(|&id| id < v);
                    s.trim_draft(&mut d);
                    drafted = d.len();
                    ids.extend(d);
                }
            }
            if drafted > 0 {
                s.spec.save.save(&s.state);
            }
            let n_pos0 = s.state.n_pos;
            rows.push(Rows {
                seq: i,
                ids,
                drafted,
                n_pos0,
                want: if drafted > 0 {
                    LogitRows::All
                } else {
                    LogitRows::Last
                },
                join: false,
            });
        }
        let used = rows.iter().map(|r| r.ids.len()).sum();
        rows.extend(self.join_rows(seqs, used));
        rows.sort_by_key(|r| r.seq);
        if rows.is_empty() {
            return Ok(StepFigures::default());
        }
        let out = self.forward_rows(seqs, &rows)?;
        let f = self.figures_since(t, s0, d0);
        let mut settle = Vec::new();
        for (r, logits) in rows.iter().zip(out) {
            if r.join {
                self.joined(seqs[r.seq], logits, f);
            } else if let Some(keep) = self.verify(&mut *seqs[r.seq], r, &logits, f, on)? {
                settle.push(Rows {
                    seq: r.seq,
                    ids: seqs[r.seq].ids[r.n_pos0..r.n_pos0 + keep].to_vec(),
                    drafted: 0,
                    n_pos0: r.n_pos0,
                    want: LogitRows::None,
                    join: false,
                });
            }
        }
        if settle.is_empty() {
            return Ok(f);
        }
        // A stop inside a draft: the kept ids but the stopping one run now, so the stopped
        // sequence's state is the one a one-id decode leaves (its last id pending).
        let t2 = Instant::now();
        let (s1, d1) = (self.experts.stats(), self.trunk.bytes_read());
        self.forward_rows(seqs, &settle)?;
        let f2 = self.figures_since(t2, s1, d1);
        for r in &settle {
            seqs[r.seq].spec.stats.verify_seconds += f2.seconds;
        }
        Ok(StepFigures {
            seconds: f.seconds + f2.seconds,
            experts: sum(f.experts, f2.experts),
            dense_bytes: f.dense_bytes + f2.dense_bytes,
        })
    }

    /// One forward over every sequence's `rows` (in increasing sequence order; the logits rows
    /// each one's `want` says), each segment's rows `[n, V]` in `rows` order.
    pub(super) fn forward_rows(
        &mut self,
        seqs: &mut [&mut Sequence],
        rows: &[Rows],
    ) -> Result<Vec<Vec<f32>>> {
        let mut segs: Vec<Segment<'_>> = Vec::with_capacity(rows.len());
        let mut rest: &mut [&mut Sequence] = seqs;
        let mut base = 0;
        for r in rows {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(r.seq - base + 1);
            base = r.seq + 1;
            rest = tail;
            let s = &mut *head[head.len() - 1];
            segs.push(Segment {
                state: &mut s.state,
                ids: &r.ids,
                rows: r.want,
            });
        }
        self.model
            .forward_batch(&self.ex, &mut self.trunk, &mut self.experts, &mut segs)
    }

    /// Chooses from `s`'s rows of the sweep in order while the choice equals the next drafted
    /// id; rolls back after a rejected row or a stop before the last row. Returns the ids to
    /// run again at once (a stop inside a draft), counted from the sweep's first position.
    fn verify(
        &mut self,
        s: &mut Sequence,
        r: &Rows,
        logits: &[f32],
        f: StepFigures,
        on: &mut dyn FnMut(StepEvent<'_>) -> Result<()>,
    ) -> Result<Option<usize>> {
        let v = self.model.dims.v;
        let n_rows = logits.len() / v;
        let first_draft = r.ids.len() - r.drafted;
        s.sweeps += 1;
        s.figures = f;
        s.fig_taken = false;
        let mut accepted = 0;
        let mut settle = None;
        for j in 0..n_rows {
            s.logits.clear();
            s.logits.extend_from_slice(&logits[j * v..(j + 1) * v]);
            on(StepEvent::Logits(r.seq, &s.logits))?;
            let forced = self.forced.get(s.ids.len() - s.prompt_len).copied();
            let c = s.choose(forced, self.tok)?;
            on(StepEvent::Chosen(r.seq, &c))?;
            let draft = r.ids.get(first_draft + j).copied();
            let agrees = draft == Some(c.id);
            accepted += agrees as usize;
            if c.stop.is_some() {
                if j + 1 < n_rows {
                    // kept: the sweep's rows up to this one's input; the stopping id stays pending
                    s.roll_back()?;
                    settle = Some(r.ids.len() - r.drafted + j);
                }
                break;
            }
            if draft.is_some() && !agrees {
                s.roll_back()?;
                break;
            }
        }
        if r.drafted > 0 {
            let st = &mut s.spec.stats;
            st.verify_sweeps += 1;
            st.drafted += r.drafted as u64;
            st.accepted += accepted as u64;
            st.verify_seconds += f.seconds;
            if s.stop.is_none() {
                s.spec.len.update(self.spec.max_draft, r.drafted, accepted);
            }
        }
        Ok(settle)
    }
}

/// The counters of two forwards together.
fn sum(a: ExpertStats, b: ExpertStats) -> ExpertStats {
    ExpertStats {
        requests: a.requests + b.requests,
        resident_hits: a.resident_hits + b.resident_hits,
        reads: a.reads + b.reads,
        bytes_read: a.bytes_read + b.bytes_read,
        read_seconds: a.read_seconds + b.read_seconds,
    }
}
