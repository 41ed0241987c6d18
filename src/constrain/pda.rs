//! The pushdown automaton over bytes and special ids that runs a [`Grammar`]: a state is a
//! set of stacks (the grammar may be ambiguous, e.g. overlapping `anyOf` branches, so several
//! stacks can be alive); each stack holds return nodes with the current node on top.
//! Stacks in a [`Level`] are always closed: their top has a byte or special edge (rule ends,
//! `Eps` and calls are followed at once), or the whole input is complete.

use super::grammar::{Edge, Grammar};

/// Deepest stack (calls nested; JSON nesting through `$ref` recursion): a path deeper than
/// this is not followed (it is dropped from the state, never admitted).
pub const MAX_DEPTH: usize = 256;

/// A set of closed stacks (flattened) and whether the input so far is complete.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Level {
    data: Vec<u32>,
    ends: Vec<u32>,
    pub complete: bool,
}

impl Level {
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
        self.complete = false;
    }

    /// The stacks, each bottom … top.
    pub fn stacks(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let mut start = 0usize;
        self.ends.iter().map(move |&e| {
            let s = &self.data[start..e as usize];
            start = e as usize;
            s
        })
    }

    pub fn has_stacks(&self) -> bool {
        !self.ends.is_empty()
    }

    /// Neither a stack nor completion: nothing can follow and nothing is done.
    pub fn is_dead(&self) -> bool {
        self.ends.is_empty() && !self.complete
    }

    fn contains(&self, s: &[u32]) -> bool {
        self.stacks().any(|t| t == s)
    }

    fn push_unique(&mut self, s: &[u32]) {
        if !self.contains(s) {
            self.data.extend_from_slice(s);
            self.ends.push(self.data.len() as u32);
        }
    }

    /// A canonical key of the state (the stacks sorted), for the mask cache.
    pub fn key(&self) -> Vec<u32> {
        let mut stacks: Vec<&[u32]> = self.stacks().collect();
        stacks.sort();
        let mut k = Vec::with_capacity(self.data.len() + stacks.len() + 1);
        k.push(self.complete as u32);
        for s in stacks {
            k.push(s.len() as u32);
            k.extend_from_slice(s);
        }
        k
    }
}

/// Reusable buffers of the closure.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scratch {
    tmp: Vec<u32>,
    work: Vec<Vec<u32>>,
    seen: Vec<Vec<u32>>,
}

/// The start state of `g`: its start node's closure.
pub(crate) fn start(g: &Grammar) -> Level {
    let mut l = Level::default();
    let mut sc = Scratch::default();
    close(g, &[g.start], &mut l, &mut sc);
    l
}

/// Adds the closure of the stack `s` (its top just reached) to `out`: rule ends pop, `Eps`
/// edges move, calls push; stacks whose top reads input are kept; an empty stack is
/// completion.
pub(crate) fn close(g: &Grammar, s: &[u32], out: &mut Level, sc: &mut Scratch) {
    let top = s[s.len() - 1] as usize;
    if g.plain[top] {
        out.push_unique(s);
        return;
    }
    sc.work.clear();
    sc.seen.clear();
    sc.work.push(s.to_vec());
    while let Some(s) = sc.work.pop() {
        if sc.seen.contains(&s) {
            continue;
        }
        let top = s[s.len() - 1] as usize;
        let node = &g.nodes[top];
        if node.ret {
            let mut p = s.clone();
            p.pop();
            if p.is_empty() {
                out.complete = true;
            } else {
                sc.work.push(p);
            }
        }
        let mut reads = false;
        for e in &node.edges {
            match *e {
                Edge::Bytes { .. } | Edge::Special { .. } => reads = true,
                Edge::Eps { to } => {
                    let mut p = s.clone();
                    *p.last_mut().unwrap() = to;
                    sc.work.push(p);
                }
                Edge::Call { start, ret } => {
                    if s.len() < MAX_DEPTH {
                        let mut p = s.clone();
                        *p.last_mut().unwrap() = ret;
                        p.push(start);
                        sc.work.push(p);
                    }
                }
            }
        }
        if reads {
            out.push_unique(&s);
        }
        sc.seen.push(s);
    }
}

/// `out` = the state after reading byte `b` in `from`.
pub(crate) fn step_byte(g: &Grammar, from: &Level, b: u8, out: &mut Level, sc: &mut Scratch) {
    out.clear();
    for s in from.stacks() {
        let top = s[s.len() - 1] as usize;
        for e in &g.nodes[top].edges {
            if let Edge::Bytes { lo, hi, to } = *e {
                if lo <= b && b <= hi {
                    let mut tmp = std::mem::take(&mut sc.tmp);
                    tmp.clear();
                    tmp.extend_from_slice(s);
                    *tmp.last_mut().unwrap() = to;
                    close(g, &tmp, out, sc);
                    sc.tmp = tmp;
                }
            }
        }
    }
}

/// `out` = the state after reading the special id `id` in `from`.
pub(crate) fn step_special(g: &Grammar, from: &Level, id: u32, out: &mut Level, sc: &mut Scratch) {
    out.clear();
    for s in from.stacks() {
        let top = s[s.len() - 1] as usize;
        for e in &g.nodes[top].edges {
            if let Edge::Special { id: want, to } = *e {
                if want == id {
                    let mut tmp = s.to_vec();
                    *tmp.last_mut().unwrap() = to;
                    close(g, &tmp, out, sc);
                }
            }
        }
    }
}

/// Whether the grammar admits exactly the symbol string (test helper and fuzz oracle).
#[cfg(test)]
pub(crate) fn accepts(g: &Grammar, bytes: &[u8]) -> bool {
    let mut cur = start(g);
    let mut next = Level::default();
    let mut sc = Scratch::default();
    for &b in bytes {
        step_byte(g, &cur, b, &mut next, &mut sc);
        std::mem::swap(&mut cur, &mut next);
    }
    cur.complete
}

#[cfg(test)]
mod tests {
    use super::super::grammar::Builder;
    use super::*;

    /// balanced parentheses: S → "(" S ")" S | ε, as a recursive rule.
    #[test]
    fn recursion_through_calls() {
        let mut b = Builder::new();
        let (s, e) = b.rule();
        let a = b.node();
        let c = b.node();
        let d = b.node();
        b.eps(s, e);
        b.byte(s, b'(', a);
        b.call(a, s, c);
        b.byte(c, b')', d);
        b.call(d, s, e);
        let g = b.finish(s).unwrap();
        assert!(accepts(&g, b""));
        assert!(accepts(&g, b"(()())()"));
        assert!(!accepts(&g, b"(()"));
        assert!(!accepts(&g, b"())"));
    }
}
