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
    /// Sets in `mask` every id that may follow `state` (`mask` is cleared first); with
    /// `limit = Some(l)`, only the ids after which the closing distance is at most `l`
    /// (closing.rs). Returns the largest closing distance after an admitted id.
    pub(crate) fn walk(&mut self, g: &Grammar, v: &Vocabulary, state: &Level, limit: Option<u32>, mask: &mut Mask) -> u32 {
        mask.clear();
        let mut d_max = 0u32;
        if !state.has_stacks() {
            return d_max;
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
                    if !self.tmp.is_dead() {
                        let dd = closing::dist(g, &self.tmp);
                        if limit.is_none_or(|l| dd <= l) {
                            mask.set(id);
                            d_max = d_max.max(dd);
                        }
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
            if n.id != NO_ID && !out.is_dead() {
                let dd = closing::dist(g, out);
                if limit.is_none_or(|l| dd <= l) {
                    mask.set(n.id);
                    d_max = d_max.max(dd);
                }
            }
            if !out.has_stacks() {
                i = n.end as usize;
                continue;
            }
            i += 1;
        }
        for &(a, b) in &v.aliases {
            if mask.allows(a) {
                mask.set(b);
            }
        }
        d_max
    }
}
