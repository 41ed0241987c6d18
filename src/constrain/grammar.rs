//! The grammar IR: a recursive transition network over bytes and special ids.
//!
//! A grammar is a graph of nodes. Each edge reads one byte in a range, reads one special id
//! (a single symbol of its own, never bytes), moves without input (`Eps`), or calls a rule
//! (push the return node, go to the rule's start). A node marked `ret` ends the rule that
//! reached it (pop). The pushdown automaton of `pda.rs` runs it; nesting and `$ref` recursion
//! are calls. After building, [`Builder::finish`] drops every edge into a node that cannot
//! reach its rule's end (so every admitted prefix can be completed) and computes, per node,
//! the fewest symbols to its rule's end (the closing distance of `closing.rs`).

/// Bound on the nodes of one grammar (issue 25 "a bound on states"): a schema needing more
/// (long `maxLength`/`maxItems` unrolled, wide integer ranges, many tools) is refused.
pub const MAX_NODES: usize = 1 << 18;

/// No distance: the node cannot reach its rule's end.
pub(crate) const FAR: u32 = u32::MAX;

/// One edge of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// Reads one byte in `lo..=hi`.
    Bytes { lo: u8, hi: u8, to: u32 },
    /// Reads the special id `id`.
    Special { id: u32, to: u32 },
    /// Moves without input.
    Eps { to: u32 },
    /// Pushes `ret`, continues at the rule starting at `start`.
    Call { start: u32, ret: u32 },
}

/// A node: its edges, and whether reaching it ends its rule.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    pub edges: Vec<Edge>,
    pub ret: bool,
}

/// A finished grammar: trimmed, with closing distances.
#[derive(Debug, Clone)]
pub struct Grammar {
    pub(crate) nodes: Vec<Node>,
    pub(crate) start: u32,
    /// Fewest symbols (bytes or special ids) from the node to its rule's end.
    pub(crate) dist: Vec<u32>,
    /// Most frames a shortest completion from the node pushes above it.
    pub(crate) ext: Vec<u32>,
    /// The node has only byte/special edges and is not a rule end: the closure of a stack
    /// whose top it is, is the stack itself (the walk's fast path).
    pub(crate) plain: Vec<bool>,
    /// The node has no call edge (the walk's fast path may sit on it).
    pub(crate) nocall: Vec<bool>,
}

impl Grammar {
    /// Number of nodes (the state bound counts these).
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// Builds a grammar; errors when it outgrows [`MAX_NODES`].
#[derive(Debug, Default, Clone)]
pub(crate) struct Builder {
    pub nodes: Vec<Node>,
    pub overflow: bool,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    /// A new node without edges. Past [`MAX_NODES`] the builder records the overflow and
    /// hands out node 0 again, so the compiler can finish its walk and report once.
    pub fn node(&mut self) -> u32 {
        if self.nodes.len() >= MAX_NODES {
            self.overflow = true;
            return 0;
        }
        self.nodes.push(Node::default());
        (self.nodes.len() - 1) as u32
    }

    /// A new rule's start node and its end node (marked `ret`).
    pub fn rule(&mut self) -> (u32, u32) {
        let s = self.node();
        let e = self.node();
        self.nodes[e as usize].ret = true;
        (s, e)
    }

    pub fn edge(&mut self, from: u32, e: Edge) {
        if !self.overflow {
            self.nodes[from as usize].edges.push(e);
        }
    }

    pub fn bytes(&mut self, from: u32, lo: u8, hi: u8, to: u32) {
        self.edge(from, Edge::Bytes { lo, hi, to });
    }

    pub fn byte(&mut self, from: u32, b: u8, to: u32) {
        self.bytes(from, b, b, to);
    }

    pub fn special(&mut self, from: u32, id: u32, to: u32) {
        self.edge(from, Edge::Special { id, to });
    }

    pub fn eps(&mut self, from: u32, to: u32) {
        self.edge(from, Edge::Eps { to });
    }

    pub fn call(&mut self, from: u32, start: u32, ret: u32) {
        self.edge(from, Edge::Call { start, ret });
    }

    /// Reads `lit` from `from`; returns the node after it.
    pub fn lit(&mut self, from: u32, lit: &[u8]) -> u32 {
        let mut cur = from;
        for &b in lit {
            let n = self.node();
            self.byte(cur, b, n);
            cur = n;
        }
        cur
    }

    /// Reads `lit` from `from` ending exactly at `to`.
    pub fn lit_to(&mut self, from: u32, lit: &[u8], to: u32) {
        match lit.split_last() {
            None => self.eps(from, to),
            Some((&last, head)) => {
                let n = self.lit(from, head);
                self.byte(n, last, to);
            }
        }
    }

    /// Trims and finishes the grammar starting at `start`. `None` when the start cannot
    /// reach its end (the language is empty).
    pub fn finish(mut self, start: u32) -> Option<Grammar> {
        let n = self.nodes.len();
        // Closing distances by relaxation to a fixpoint (every cost is ≥ 0, so it converges;
        // a node that never gets a distance cannot finish its rule).
        let mut dist = vec![FAR; n];
        for (i, node) in self.nodes.iter().enumerate() {
            if node.ret {
                dist[i] = 0;
            }
        }
        loop {
            let mut changed = false;
            for i in (0..n).rev() {
                let mut best = dist[i];
                for e in &self.nodes[i].edges {
                    let d = match *e {
                        Edge::Bytes { to, .. } | Edge::Special { to, .. } => {
                            dist[to as usize].saturating_add(1)
                        }
                        Edge::Eps { to } => dist[to as usize],
                        Edge::Call { start, ret } => {
                            dist[start as usize].saturating_add(dist[ret as usize])
                        }
                    };
                    best = best.min(d);
                }
                if best < dist[i] {
                    dist[i] = best;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        if dist[start as usize] == FAR {
            return None;
        }
        // Extra stack depth along a shortest completion (calls push one frame each), so the
        // walk never admits a state whose shortest completion would need more than
        // `pda::MAX_DEPTH` frames (a dead end).
        let mut ext: Vec<u32> = self
            .nodes
            .iter()
            .map(|nd| if nd.ret { 0 } else { FAR })
            .collect();
        loop {
            let mut changed = false;
            for i in (0..n).rev() {
                if dist[i] == FAR {
                    continue;
                }
                let mut best = ext[i];
                for e in &self.nodes[i].edges {
                    let (cost, x) = match *e {
                        Edge::Bytes { to, .. } | Edge::Special { to, .. } => {
                            (dist[to as usize].saturating_add(1), ext[to as usize])
                        }
                        Edge::Eps { to } => (dist[to as usize], ext[to as usize]),
                        Edge::Call { start, ret } => (
                            dist[start as usize].saturating_add(dist[ret as usize]),
                            ext[start as usize].saturating_add(1).max(ext[ret as usize]),
                        ),
                    };
                    if cost == dist[i] {
                        best = best.min(x);
                    }
                }
                if best < ext[i] {
                    ext[i] = best;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Drop the edges into dead ends: a prefix that cannot complete is never admitted.
        for node in &mut self.nodes {
            node.edges.retain(|e| match *e {
                Edge::Bytes { to, .. } | Edge::Special { to, .. } | Edge::Eps { to } => {
                    dist[to as usize] != FAR
                }
                Edge::Call { start, ret } => {
                    dist[start as usize] != FAR && dist[ret as usize] != FAR
                }
            });
        }
        // `Eps` elimination: each node takes the edges (and the rule end) of every node it
        // reaches without input, so most nodes read input directly and a loop (a free
        // string) is one plain node: the walk's fast path.
        let n_nodes = self.nodes.len();
        let mut eliminated: Vec<Node> = Vec::with_capacity(n_nodes);
        let mut seen = vec![u32::MAX; n_nodes];
        let mut stack = Vec::new();
        for i in 0..n_nodes {
            let mut node = Node {
                edges: Vec::new(),
                ret: false,
            };
            stack.clear();
            stack.push(i as u32);
            seen[i] = i as u32;
            while let Some(j) = stack.pop() {
                let src = &self.nodes[j as usize];
                node.ret |= src.ret;
                for e in &src.edges {
                    match *e {
                        Edge::Eps { to } => {
                            if seen[to as usize] != i as u32 {
                                seen[to as usize] = i as u32;
                                stack.push(to);
                            }
                        }
                        other => {
                            if !node.edges.contains(&other) {
                                node.edges.push(other);
                            }
                        }
                    }
                }
            }
            eliminated.push(node);
        }
        self.nodes = eliminated;
        let plain = self
            .nodes
            .iter()
            .map(|nd| {
                !nd.ret
                    && nd
                        .edges
                        .iter()
                        .all(|e| matches!(e, Edge::Bytes { .. } | Edge::Special { .. }))
            })
            .collect();
        let nocall = self
            .nodes
            .iter()
            .map(|nd| !nd.edges.iter().any(|e| matches!(e, Edge::Call { .. })))
            .collect();
        Some(Grammar {
            nodes: self.nodes,
            start,
            dist,
            ext,
            plain,
            nocall,
        })
    }
}

/// Well-formed UTF-8 sequences of 2–4 bytes (RFC 3629 table 3-7) from `from` to `to`.
pub(crate) fn utf8_multibyte(b: &mut Builder, from: u32, to: u32) {
    let c1 = b.node();
    b.bytes(c1, 0x80, 0xbf, to);
    let c2 = b.node();
    b.bytes(c2, 0x80, 0xbf, c1);
    let c3 = b.node();
    b.bytes(c3, 0x80, 0xbf, c2);
    b.bytes(from, 0xc2, 0xdf, c1);
    let e0 = b.node();
    b.byte(from, 0xe0, e0);
    b.bytes(e0, 0xa0, 0xbf, c1);
    b.bytes(from, 0xe1, 0xec, c2);
    let ed = b.node();
    b.byte(from, 0xed, ed);
    b.bytes(ed, 0x80, 0x9f, c1);
    b.bytes(from, 0xee, 0xef, c2);
    let f0 = b.node();
    b.byte(from, 0xf0, f0);
    b.bytes(f0, 0x90, 0xbf, c2);
    b.bytes(from, 0xf1, 0xf3, c3);
    let f4 = b.node();
    b.byte(from, 0xf4, f4);
    b.bytes(f4, 0x80, 0x8f, c2);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_dead_branches_and_measures_distance() {
        let mut b = Builder::new();
        let (s, e) = b.rule();
        let dead = b.node();
        b.byte(s, b'x', dead); // `x` leads nowhere
        b.lit_to(s, b"ab", e);
        let g = b.finish(s).unwrap();
        assert_eq!(g.nodes[s as usize].edges.len(), 1);
        assert_eq!(g.dist[s as usize], 2);
    }

    #[test]
    fn empty_language_is_none() {
        let mut b = Builder::new();
        let (s, _e) = b.rule();
        let n = b.node();
        b.byte(s, b'a', n);
        assert!(b.finish(s).is_none());
    }

    #[test]
    fn call_distance_adds_rule_and_return() {
        let mut b = Builder::new();
        let (inner, inner_end) = b.rule();
        b.lit_to(inner, b"abc", inner_end);
        let (s, e) = b.rule();
        let mid = b.node();
        b.call(s, inner, mid);
        b.byte(mid, b'!', e);
        let g = b.finish(s).unwrap();
        assert_eq!(g.dist[s as usize], 4);
    }
}
