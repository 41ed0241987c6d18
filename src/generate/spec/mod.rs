//! Exact speculative decoding (ENGINE.md §10, issue 15): a [`DraftSource`] guesses the next
//! few ids of a sequence, the session runs them as rows of one forward after the last chosen
//! id and keeps the agreeing prefix plus the model's own next choice
//! (`Session::step` with [`Speculation::max_draft`] > 0). The ids, and the logits of every
//! position that chose an emitted id, are the bits of decoding without it.
//!
//! Rollback is snapshot and recompute: before a drafted sweep the sequence's KDA states and
//! conv histories are copied ([`KdaSave`]); after a rejection they are copied back, the MLA
//! length is cut to the sweep's first position, and the kept ids run again as the rows of the
//! sequence's next forward (which drafts nothing), so a rejected row leaves nothing behind.

use crate::model::state::{DecodeState, LayerState};

pub mod draft;

pub use draft::PromptLookup;

/// A source of drafted ids: given a sequence's ids (prompt then generated, the last one chosen
/// but not yet run), proposes up to `max` ids that may follow. Verification never trusts a
/// draft, so any source is exact; a better one only keeps more rows.
pub trait DraftSource: Send + Sync {
    /// Appends at most `max` drafted ids (each < V) after `ids` to `out` (empty on entry).
    fn draft(&mut self, ids: &[u32], max: usize, out: &mut Vec<u32>);
}

/// The session's speculation settings (`--spec K`).
pub struct Speculation {
    /// Drafted ids per sweep at most (`--spec K`; 0 = off: `Session::step` is the one-id step).
    pub max_draft: usize,
    /// Where drafts come from (prompt lookup by default).
    pub source: Box<dyn DraftSource>,
}

impl Speculation {
    /// Off (`max_draft` 0), with prompt-lookup drafts ([`PromptLookup::default`]).
    pub fn off() -> Speculation {
        Speculation {
            max_draft: 0,
            source: Box::new(PromptLookup::default()),
        }
    }
}

impl std::fmt::Debug for Speculation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Speculation {{ max_draft: {} }}", self.max_draft)
    }
}

/// One sequence's speculation counters (FORMATS.md §10 `speculation`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecStats {
    /// Forwards that verified at least one drafted id.
    pub verify_sweeps: u64,
    /// Drafted ids run as rows.
    pub drafted: u64,
    /// Drafted ids the model chose too (emitted).
    pub accepted: u64,
    /// Seconds of the verifying forwards and of the recomputes after a stop inside a draft.
    pub verify_seconds: f64,
}

impl SpecStats {
    /// Adds `o`'s counters to these.
    pub fn add(&mut self, o: &SpecStats) {
        self.verify_sweeps += o.verify_sweeps;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.verify_seconds += o.verify_seconds;
    }
}

/// The adaptive draft length: starts at the maximum, is cut to one more than the ids a sweep
/// accepted after a rejection, and doubles (up to the maximum) after a sweep that accepted
/// every drafted id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdaptiveLen {
    cur: usize,
}

impl AdaptiveLen {
    /// The length to draft now, at most `max` (0 before any sweep: `max`).
    pub fn get(&self, max: usize) -> usize {
        if self.cur == 0 {
            max
        } else {
            self.cur.min(max)
        }
    }
    /// After a sweep that drafted `drafted` ids and accepted `accepted` of them.
    pub fn update(&mut self, max: usize, drafted: usize, accepted: usize) {
        let cur = self.get(max);
        self.cur = if accepted >= drafted {
            (cur * 2).clamp(1, max.max(1))
        } else {
            (accepted + 1).min(cur).max(1)
        };
    }
}

/// A copy of a sequence's KDA states and conv histories before a drafted sweep (the MLA rows
/// need no copy: a row depends only on earlier positions, and the length is cut instead).
/// Holds [`DecodeState::kda_bytes`] bytes once first used; reused by later sweeps.
#[derive(Debug, Clone, Default)]
pub struct KdaSave {
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    /// The positions run when saved (None: nothing saved).
    pub n_pos: Option<usize>,
}

impl KdaSave {
    /// Copies `state`'s KDA layers (allocating only the first time).
    pub fn save(&mut self, state: &DecodeState) {
        let kda = state.layers.iter().filter_map(|l| match l {
            LayerState::Kda(k) => Some(k),
            LayerState::Mla(_) => None,
        });
        if self.layers.is_empty() {
            self.layers = kda.map(|k| (k.st.clone(), k.conv.clone())).collect();
        } else {
            for ((st, conv), k) in self.layers.iter_mut().zip(kda) {
                st.copy_from_slice(&k.st);
                conv.copy_from_slice(&k.conv);
            }
        }
        self.n_pos = Some(state.n_pos);
    }

    /// Copies the saved KDA layers back into `state` and cuts its length to the saved one.
    /// Returns false (changing nothing) when nothing is saved.
    pub fn restore(&self, state: &mut DecodeState) -> bool {
        let Some(n) = self.n_pos else { return false };
        let kda = state.layers.iter_mut().filter_map(|l| match l {
            LayerState::Kda(k) => Some(k),
            LayerState::Mla(_) => None,
        });
        for ((st, conv), k) in self.layers.iter().zip(kda) {
            k.st.copy_from_slice(st);
            k.conv.copy_from_slice(conv);
        }
        state.n_pos = n;
        true
    }
}

/// A sequence's speculation state: the adaptive length, the KDA copy and the counters.
#[derive(Debug, Clone, Default)]
pub struct SeqSpec {
    /// The adaptive draft length.
    pub len: AdaptiveLen,
    /// The KDA copy of the current drafted sweep.
    pub save: KdaSave,
    /// The counters.
    pub stats: SpecStats,
}

impl SeqSpec {
    /// The same without the KDA copy (for snapshots: the copy is only used inside a step).
    pub fn light(&self) -> SeqSpec {
        SeqSpec {
            len: self.len,
            save: KdaSave::default(),
            stats: self.stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AdaptiveLen;

    #[test]
    fn adaptive_length_shortens_after_rejections_and_lengthens_after_full_acceptance() {
        let mut a = AdaptiveLen::default();
        assert_eq!(a.get(8), 8);
        a.update(8, 8, 2);
        assert_eq!(a.get(8), 3);
        a.update(8, 3, 0);
        assert_eq!(a.get(8), 1);
        a.update(8, 1, 1);
        assert_eq!(a.get(8), 2);
        a.update(8, 2, 2);
        a.update(8, 4, 4);
        a.update(8, 8, 8);
        assert_eq!(a.get(8), 8);
        assert_eq!(a.get(5), 5);
    }
}
