//! A sequence's next turn (TOKENIZER.md §11, ENGINE.md §9): a conversation, or a server request
//! that reuses a held prefix, continues the same sequence instead of recomputing it. The ids
//! already generated stay in the history as they were generated; the new input (a user turn, a
//! tool result, a closing of an answer cut early) is appended and prefilled from the state left
//! by the previous turn, so only the new ids run.

use super::Sequence;
use crate::error::{Error, Result};
use crate::generate::stop::StopRules;
use crate::generate::stop::StopText;
use crate::tokenizer::stream::StreamDecoder;

impl Sequence {
    /// Appends `input` as the next turn's prompt and starts a new turn under `rules` (its
    /// `--gen` counts from here; `--ctx` still counts the whole sequence). Whatever the last
    /// turn chose but did not run (the id that stopped it, or the pending id of a turn cut
    /// short) runs in the next [`Session::prefill`](super::Session::prefill) together with
    /// `input`. The sampler settings, decode state and running logits hash carry on; the
    /// per-turn text state (`--stop` strings) starts afresh. After it the generated ids are
    /// this turn's; the whole history stays in [`Sequence::ids`].
    ///
    /// Errors (exit 2): the sequence would exceed its capacity or `rules`' `--ctx` (naming
    /// both counts); nothing to run (no input and nothing pending). The sequence is left
    /// unchanged on error.
    pub fn continue_with(&mut self, input: &[u32], rules: StopRules) -> Result<()> {
        let len = self.ids.len() + input.len();
        if len <= self.state.n_pos {
            return Err(Error::invalid(
                "continue a sequence: no new ids to run (give the next turn's ids)",
            ));
        }
        if len > self.state.capacity {
            return Err(Error::invalid(format!(
                "continue a sequence: {len} ids would exceed its context of {} ids",
                self.state.capacity
            )));
        }
        rules.check_prompt(len as u64)?;
        self.ids.extend_from_slice(input);
        self.prompt_len = self.ids.len();
        self.pending = None;
        self.stop = None;
        self.text = if rules.stop_texts().is_empty() {
            None
        } else {
            Some((StreamDecoder::new(), StopText::new(rules.stop_texts())))
        };
        self.rules = rules;
        self.released.clear();
        Ok(())
    }

    /// Makes the sequence hold `ids` with nothing run: the next
    /// [`Session::prefill`](super::Session::prefill) runs them all from a fresh decode state
    /// (a conversation re-encoded by `/think`, or undone past its held snapshot). The same
    /// ids give the same logits as before (ENGINE.md §9), only the work is done again. The
    /// running logits hash starts afresh; the capacity, sampler settings and stop rules stay.
    pub fn rewind(&mut self, ids: &[u32]) {
        self.ids = ids.to_vec();
        self.prompt_len = ids.len();
        // KDA state and conv history start from zero; the MLA rows need no clearing: a
        // position's row is written before any read of it (all of `reset` would touch
        // every row of the context)
        self.state.n_pos = 0;
        for l in &mut self.state.layers {
            if let crate::model::state::LayerState::Kda(k) = l {
                k.st.fill(0.0);
                k.conv.fill(0.0);
            }
        }
        self.hash = k3_kernels::Fnv1a64::new();
        self.hashed = 0;
        self.logits.clear();
        self.pending = None;
        self.stop = None;
        self.released.clear();
    }
}

impl Sequence {
    /// Replaces the sampler settings (a server request continuing a snapshot taken by another
    /// request: its own temperature, top-k/p, min-p and seed). A draw depends only on the
    /// logits, the settings and the position (ENGINE.md §8), so this gives the ids a fresh
    /// sequence with these settings would choose.
    pub fn set_settings(&mut self, settings: super::SamplerSettings) {
        self.settings = settings;
    }

    /// Starts a new turn with no new input, at the end of the ids as they stand: a snapshot
    /// taken at the end of a prompt, restored for a request of exactly those ids. The pending
    /// logits of the last position are chosen from next; nothing runs before the first
    /// [`Session::step`](super::Session::step) (do not prefill). The per-turn state is reset
    /// as [`Sequence::continue_with`] does and the stop rules that fire before any choice are
    /// applied.
    ///
    /// Errors (exit 2): no pending logits (the sequence's last position has not run, or its
    /// last id was chosen but not run); `rules`' `--ctx` below the ids.
    pub fn restart_turn(&mut self, rules: StopRules) -> Result<()> {
        if self.logits.is_empty() || self.state.n_pos != self.ids.len() || self.pending.is_some() {
            return Err(Error::invalid(
                "restart a turn: the sequence has no pending logits at the end of its ids",
            ));
        }
        rules.check_prompt(self.ids.len() as u64)?;
        self.prompt_len = self.ids.len();
        self.text = if rules.stop_texts().is_empty() {
            None
        } else {
            Some((StreamDecoder::new(), StopText::new(rules.stop_texts())))
        };
        self.stop = rules.before_first(self.ids.len() as u64);
        self.rules = rules;
        self.released.clear();
        Ok(())
    }
}
