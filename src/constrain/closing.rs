//! Termination steering (issue 25 item 4): the fewest symbols that close the output, and the
//! filter that keeps the walk on a shortest closing path.
//!
//! Choice: the distance of a state is the fewest *symbols* (bytes, or special ids) that
//! complete it — a sum over the stack of each node's distance to its rule's end
//! (`Grammar::dist`). Every byte is a token of the byte-level vocabulary, so a state at
//! distance D always closes within D ids. With R ids left (`remaining`), the mask admits only
//! the ids after which the distance is at most max(R, D) − 1. While the budget is ample this
//! removes nothing (the cached mask is used as is whenever no admitted id leads farther than
//! R − 1); near the end it removes exactly the ids that would open more than the budget can
//! close (a new call, a longer number, another array item), and once R = D only ids on a
//! shortest completion remain — each shortens the distance by its length, so the output
//! closes within the budget whenever the budget was at least the distance at any point.
//! With less budget than that from the start, the shortest completion is still followed and
//! the reply ends with `length`. The rule never looks at logits, so it is as deterministic
//! as any other mask.

use super::grammar::{Grammar, FAR};
use super::pda::{Level, MAX_DEPTH};

/// Fewest symbols completing one stack (bottom … top).
pub(crate) fn stack_dist(g: &Grammar, s: &[u32]) -> u32 {
    s.iter()
        .fold(0u32, |acc, &n| acc.saturating_add(g.dist[n as usize]))
}

/// Deepest stack a shortest completion of `s` reaches.
pub(crate) fn stack_need(g: &Grammar, s: &[u32]) -> u32 {
    s.iter().enumerate().fold(0u32, |acc, (i, &n)| {
        acc.max((i as u32 + 1).saturating_add(g.ext[n as usize]))
    })
}

/// Fewest symbols completing the state (0 when it is already complete; `FAR` for a dead one),
/// over the stacks whose shortest completion stays within `pda::MAX_DEPTH` frames (deeper
/// ones would be dead ends: the automaton does not follow calls past that depth).
pub(crate) fn dist(g: &Grammar, l: &Level) -> u32 {
    let mut best = if l.complete { 0 } else { FAR };
    for s in l.stacks() {
        if stack_need(g, s) as usize <= MAX_DEPTH {
            best = best.min(stack_dist(g, s));
        }
    }
    best
}

/// The distance limit after the next id with `remaining` ids left at distance `d`
/// (`None`: unbounded, no limit).
pub(crate) fn limit(remaining: Option<usize>, d: u32) -> Option<u32> {
    let r = remaining?;
    let r = u32::try_from(r).unwrap_or(u32::MAX);
    Some(r.max(d).saturating_sub(1))
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
        assert_eq!(limit(Some(10), 4), Some(9));
        assert_eq!(limit(Some(2), 4), Some(3));
        assert_eq!(limit(None, 4), None);
    }
}
