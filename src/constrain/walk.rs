//! The mask walk: the vocabulary trie walked in preorder against the automaton's state, a
//! subtree skipped as soon as its prefix is not admitted; special ids stepped on their own.

use super::closing;
use super::grammar::{Edge, Grammar};
use super::mask::Mask;
use super::pda::{self, Level, Scratch};
use super::vocab::{Vocabulary, NO_ID};

/// Reusable per-depth states of the walk.
#[derive(Debug, Default, Clone)]
pub(crate) struct Walker {
    levels: Vec<Level>,
    sc: Scratch,
    tmp: Level,
}

impl Walker {
    /// Sets in `mask` every id that may follow `state` (`mask` is cleared first). With
    /// `closing = Some(d)` (d the state's distance), only the ids on a shortest completion
    /// (closing.rs).
    pub(crate) fn walk(&mut self, g: &Grammar, v: &Vocabulary, state: &Level, closing: Option<u32>, mask: &mut Mask) {
        mask.clear();
        if !state.has_stacks() {
            return;
        }
        // Special ids: one symbol each.
        for s in state.stacks() {
            let top = s[s.len() - 1] as usize;
            for e in &g.nodes[top].edges {
                if let Edge::Special { id, .. } = *e {
                    if mask.allows(id) {
                        continue;
                    }
                    pda::step_special(g, state, id, &mut self.tmp, &mut self.sc);
                    if let Some(d) = closing {
                        closing::keep_at(g, &mut self.tmp, d.saturating_sub(1));
                    }
                    if !self.tmp.is_dead() {
                        mask.set(id);
                    }
                }
            }
        }
        // Ranks: the trie in preorder.
        if self.levels.len() < v.max_len + 1 {
            self.levels.resize(v.max_len + 1, Level::default());
        }
        self.levels[0].clone_from(state);
        let trie = &v.trie;
        let mut i = 0usize;
        while i < trie.len() {
            let n = trie[i];
            let d = n.depth as usize;
            let (lo, hi) = self.levels.split_at_mut(d);
            let out = &mut hi[0];
            pda::step_byte(g, &lo[d - 1], n.byte, out, &mut self.sc);
            if let Some(d0) = closing {
                if (d0 as usize) < d {
                    out.clear();
                } else {
                    closing::keep_at(g, out, d0 - d as u32);
                }
            }
            if !out.has_stacks() {
                if out.complete && n.id != NO_ID {
                    mask.set(n.id);
                }
                i = n.end as usize;
                continue;
            }
            if n.id != NO_ID {
                mask.set(n.id);
            }
            i += 1;
        }
        for &(a, b) in &v.aliases {
            if mask.allows(a) {
                mask.set(b);
            }
        }
    }
}
