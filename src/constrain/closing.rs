//! Termination steering (issue 25 item 4): the fewest symbols that close the output, and the
//! filter that keeps the walk on a shortest closing path.
//!
//! Choice: the distance of a state is the fewest *symbols* (bytes, or special ids) that
//! complete it — a sum over the stack of each node's distance to its rule's end
//! (`Grammar::dist`). Every byte is a token of the byte-level vocabulary, so a state at
//! distance D always closes within D ids. Once the ids the request may still generate
//! (`remaining`) are at most D, the mask admits only the ids whose every byte (or whose
//! special id) lies on a shortest completion: each such id shortens the distance by its
//! length, so the output closes within the budget when `remaining == D` at the switch, and
//! multi-byte tokens along the shortest path (e.g. `"}` or `false`) are still admitted. The
//! result never depends on logits, so it is as deterministic as any other mask. With less
//! budget than D the same rule still runs, and the reply ends with `length`.

use super::grammar::{Grammar, FAR};
use super::pda::Level;

/// Fewest symbols completing one stack (bottom … top).
pub(crate) fn stack_dist(g: &Grammar, s: &[u32]) -> u32 {
    s.iter().fold(0u32, |acc, &n| acc.saturating_add(g.dist[n as usize]))
}

/// Fewest symbols completing the state (0 when it is already complete; `FAR` for a dead one).
pub(crate) fn dist(g: &Grammar, l: &Level) -> u32 {
    let mut best = if l.complete { 0 } else { FAR };
    for s in l.stacks() {
        best = best.min(stack_dist(g, s));
    }
    best
}

/// Keeps in `l` only what lies at distance exactly `want` (a shortest path's next state).
pub(crate) fn keep_at(g: &Grammar, l: &mut Level, want: u32) {
    if l.complete && want != 0 {
        l.complete = false;
    }
    l.retain(|s| stack_dist(g, s) == want);
}

/// Whether steering applies: the remaining budget no longer exceeds the distance.
pub(crate) fn steering(remaining: Option<usize>, d: u32) -> bool {
    matches!(remaining, Some(r) if d != FAR && r <= d as usize)
}

#[cfg(test)]
mod tests {
    use super::super::grammar::Builder;
    use super::super::pda;
    use super::*;

    #[test]
    fn distance_of_a_nested_state() {
        // S → "[" S "]" | "x"
        let mut b = Builder::new();
        let (s, e) = b.rule();
        let a = b.node();
        let c = b.node();
        b.byte(s, b'x', e);
        b.byte(s, b'[', a);
        b.call(a, s, c);
        b.byte(c, b']', e);
        let g = b.finish(s).unwrap();
        let mut l = pda::start(&g);
        assert_eq!(dist(&g, &l), 1);
        let mut n = Level::default();
        let mut sc = pda::Scratch::default();
        for _ in 0..3 {
            pda::step_byte(&g, &l, b'[', &mut n, &mut sc);
            std::mem::swap(&mut l, &mut n);
        }
        assert_eq!(dist(&g, &l), 4); // x]]]
        assert!(steering(Some(4), 4) && !steering(Some(5), 4) && !steering(None, 4));
    }
}
