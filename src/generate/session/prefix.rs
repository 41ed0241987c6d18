//! The split a disk prefix cache needs (ENGINE.md §9, FORMATS.md §9): a state file keeps its
//! last id pending, so the copy written for a prompt of L ids is the state after L − 1
//! positions with the prompt's last id pending. The prompt's prefill is run in two parts —
//! up to the last id, then the last id — which changes no bit of the logits (the engine is
//! bit-identical at any chunking).

use super::Sequence;

impl Sequence {
    /// Takes the prompt's last id off (prefill then runs up to it); `None` when the sequence
    /// has generated ids or holds one id only. Give it back with [`Sequence::rejoin_last`].
    pub fn split_last(&mut self) -> Option<u32> {
        if self.ids.len() < 2 || self.prompt_len != self.ids.len() {
            return None;
        }
        let id = self.ids.pop()?;
        self.prompt_len = self.ids.len();
        Some(id)
    }

    /// Puts back the id [`Sequence::split_last`] took: it is pending (not run), so the
    /// sequence is then an ordinary state to save ([`Sequence::to_state`]) and the next
    /// prefill runs it.
    pub fn rejoin_last(&mut self, id: u32) {
        self.ids.push(id);
        self.prompt_len = self.ids.len();
        self.pending = None;
        self.stop = None;
    }
}
