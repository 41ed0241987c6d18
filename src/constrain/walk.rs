//! The mask walk: the vocabulary trie walked in preorder against the automaton's state, a
//! subtree skipped as soon as its prefix is not admitted; special ids stepped on their own.

use super::closing;
use super::grammar::{Edge, Grammar, FAR};
use super::mask::Mask;
use super::pda::{self, Level, Scratch, MAX_DEPTH};
use super::vocab::{Vocabulary, NO_ID};

/// Not on the fast path.
const SLOW: u32 = u32::MAX;

/// Reusable per-depth states of the walk.
#[derive(Debug, Default, Clone)]
pub(crate) struct Walker {
    levels: Vec<Level>,
    /// Per depth: the top node on the fast path, or [`SLOW`].
    tops: Vec<u32>,
    sc: Scratch,
    tmp: Level,
}

impl Walker {
    /// Sets in `mask` every id that may follow `state` (`mask` is cleared first); with
    /// `limit = Some(l)`, only the ids after which the closing distance is at most `l`
    /// (closing.rs). Returns the largest closing distance after an admitted id.
    pub(crate) fn walk(
        &mut self,
        g: &Grammar,
        v: &Vocabulary,
        state: &Level,
        limit: Option<u32>,
        mask: &mut Mask,
    ) -> u32 {
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
                        if dd != FAR && limit.is_none_or(|l| dd <= l) {
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
            self.tops.resize(v.max_len + 1, SLOW);
        }
        self.levels[0].clone_from(state);
        // Fast path: one stack reads bytes (others may wait for a special id) and its top
        // calls nothing. Its lower part stays as it is while a token's bytes move the top
        // from such node to such node, so a depth keeps just the top node (`tops[d]`); a
        // rule end is fine when what follows the rule reads no bytes (a raw argument before
        // `<|close|>`). Anything else takes the general step on whole levels.
        let reads_bytes = |s: &[u32]| {
            g.nodes[s[s.len() - 1] as usize]
                .edges
                .iter()
                .any(|e| matches!(e, Edge::Bytes { .. }))
        };
        let mut readers = state.stacks().filter(|s| reads_bytes(s));
        let single = match (readers.next(), readers.next()) {
            (Some(s), None) => Some(s),
            _ => None,
        };
        let mut pop_bytes = false;
        if let Some(s) = single {
            if s.len() > 1 {
                self.tmp.clear();
                pda::close(g, &s[..s.len() - 1], &mut self.tmp, &mut self.sc);
                pop_bytes = self.tmp.stacks().any(reads_bytes);
            }
        }
        let fast = |n: u32| g.nocall[n as usize] && (!g.nodes[n as usize].ret || !pop_bytes);
        let single = single.filter(|s| fast(s[s.len() - 1]));
        let (base, base_dist, base_need) = match single {
            Some(s) => {
                let b = &s[..s.len() - 1];
                (b, closing::stack_dist(g, b), closing::stack_need(g, b))
            }
            None => (&[][..], 0, 0),
        };
        self.tops[0] = single.map_or(SLOW, |s| s[s.len() - 1]);
        let trie = &v.trie;
        let mut i = 0usize;
        while i < trie.len() {
            let n = trie[i];
            let d = n.depth as usize;
            let parent = self.tops[d - 1];
            if parent != SLOW {
                let mut next = SLOW;
                let mut matches = 0;
                for e in &g.nodes[parent as usize].edges {
                    if let Edge::Bytes { lo, hi, to } = *e {
                        if lo <= n.byte && n.byte <= hi {
                            matches += 1;
                            next = to;
                        }
                    }
                }
                if matches == 0 {
                    i = n.end as usize;
                    continue;
                }
                if matches == 1 && fast(next) {
                    self.tops[d] = next;
                    if n.id != NO_ID {
                        let dd = base_dist.saturating_add(g.dist[next as usize]);
                        let need = base_need
                            .max((base.len() as u32 + 1).saturating_add(g.ext[next as usize]));
                        if need as usize <= MAX_DEPTH && limit.is_none_or(|l| dd <= l) {
                            mask.set(n.id);
                            d_max = d_max.max(dd);
                        }
                    }
                    i += 1;
                    continue;
                }
                // Leave the fast path: the parent as a whole level.
                let mut whole = base.to_vec();
                whole.push(parent);
                self.tmp.clear();
                pda::close(g, &whole, &mut self.tmp, &mut self.sc);
                std::mem::swap(&mut self.levels[d - 1], &mut self.tmp);
            }
            self.tops[d] = SLOW;
            let (lo, hi) = self.levels.split_at_mut(d);
            let out = &mut hi[0];
            pda::step_byte(g, &lo[d - 1], n.byte, out, &mut self.sc);
            if n.id != NO_ID && !out.is_dead() {
                let dd = closing::dist(g, out);
                if dd != FAR && limit.is_none_or(|l| dd <= l) {
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
