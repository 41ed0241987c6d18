//! Byte-level BPE of one piece (TOKENIZER.md §8): the whole-piece shortcut, then repeated
//! merging of the adjacent pair whose concatenation has the lowest rank (leftmost on ties).
//!
//! Short pieces use a flat array of parts (quadratic, but a few dozen bytes fit in cache);
//! long ones a binary heap of candidate merges over a linked list of parts with lazy
//! invalidation, O(n log n), so tens of thousands of repeats of one character stay linear-ish.
//! Both produce exactly the §8 result; the tests compare them with the literal algorithm.

use super::tiktoken::Vocab;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pieces up to this many bytes use the flat-array merge.
const SMALL: usize = 64;

const NONE: u32 = u32::MAX;

/// Reusable buffers for [`encode_piece`], so encoding a text allocates only its output.
#[derive(Default)]
pub struct Scratch {
    parts: Vec<(u32, u32)>,
    /// Candidate merges `rank << 32 | start`, smallest first (rank, then leftmost).
    heap: BinaryHeap<Reverse<u64>>,
    next: Vec<u32>,
    prev: Vec<u32>,
    rank: Vec<u32>,
    part: Vec<u32>,
}

/// Appends the ranks of `piece` (non-empty UTF-8 bytes of one pre-token) to `out` (§8).
pub fn encode_piece(vocab: &Vocab, piece: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
    if let Some(r) = vocab.rank(piece) {
        out.push(r);
        return;
    }
    if piece.len() <= SMALL {
        merge_small(vocab, piece, scratch, out);
    } else {
        merge_large(vocab, piece, scratch, out);
    }
}

/// The rank of `piece[a..b]`, or NONE.
#[inline]
fn rank_of(vocab: &Vocab, piece: &[u8], a: usize, b: usize) -> u32 {
    vocab.rank(&piece[a..b]).unwrap_or(NONE)
}

#[inline]
fn pair_rank(vocab: &Vocab, piece: &[u8], i: usize) -> u32 {
    vocab.pair(piece[i], piece[i + 1]).unwrap_or(NONE)
}

/// Flat-array merge: `parts[k] = (start of part k, rank of part k ++ part k+1)`, with a
/// sentinel entry at the end.
fn merge_small(vocab: &Vocab, piece: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
    let n = piece.len();
    let parts = &mut scratch.parts;
    parts.clear();
    for i in 0..n - 1 {
        parts.push((i as u32, pair_rank(vocab, piece, i)));
    }
    parts.push(((n - 1) as u32, NONE));
    parts.push((n as u32, NONE));
    loop {
        // Lowest rank, leftmost on ties (strict `<`).
        let mut best = (NONE, 0usize);
        for (k, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
            if r < best.0 {
                best = (r, k);
            }
        }
        if best.0 == NONE {
            break;
        }
        let k = best.1;
        // Part k absorbs part k+1; recompute the pair ranks at k−1 and k.
        let start = |j: usize| parts[j].0 as usize;
        let new_k = if k + 3 < parts.len() {
            rank_of(vocab, piece, start(k), start(k + 3))
        } else {
            NONE
        };
        if k > 0 {
            parts[k - 1].1 = rank_of(vocab, piece, start(k - 1), start(k + 2));
        }
        parts[k].1 = new_k;
        parts.remove(k + 1);
    }
    for w in parts.windows(2) {
        let (a, b) = (w[0].0 as usize, w[1].0 as usize);
        out.push(vocab.rank(&piece[a..b]).unwrap_or(NONE));
    }
}

/// Heap merge over a doubly linked list of parts. Part `i` starts at byte `i` and ends at
/// `next[i]`; `part[i]` is its own rank, `rank[i]` the rank of part i ++ its successor (NONE
/// if none). Heap entries `(rank, start)` order by rank then leftmost start; stale entries
/// (whose rank no longer matches `rank[start]`, or whose start was absorbed) are skipped.
fn merge_large(vocab: &Vocab, piece: &[u8], s: &mut Scratch, out: &mut Vec<u32>) {
    let n = piece.len();
    s.next.clear();
    s.prev.clear();
    s.rank.clear();
    s.part.clear();
    s.heap.clear();
    let entry = |r: u32, i: u32| Reverse(((r as u64) << 32) | i as u64);
    for i in 0..n {
        s.next.push(i as u32 + 1);
        s.prev.push(if i == 0 { NONE } else { i as u32 - 1 });
        s.part.push(vocab.single(piece[i]));
        let r = if i + 1 < n {
            pair_rank(vocab, piece, i)
        } else {
            NONE
        };
        s.rank.push(r);
        if r != NONE {
            s.heap.push(entry(r, i as u32));
        }
    }
    const DEAD: u32 = NONE - 1;
    while let Some(Reverse(e)) = s.heap.pop() {
        let (r, i) = ((e >> 32) as u32, e as u32);
        let iu = i as usize;
        if s.rank[iu] != r || s.next[iu] == DEAD {
            continue; // stale
        }
        // Merge part i with its successor j.
        let j = s.next[iu] as usize;
        let after = s.next[j] as usize; // end of the merged part
        s.next[iu] = after as u32;
        s.part[iu] = r;
        s.next[j] = DEAD;
        s.rank[j] = NONE;
        if after < n {
            s.prev[after] = i;
            let r2 = rank_of(vocab, piece, iu, s.next[after] as usize);
            s.rank[iu] = r2;
            if r2 != NONE {
                s.heap.push(entry(r2, i));
            }
        } else {
            s.rank[iu] = NONE;
        }
        let p = s.prev[iu];
        if p != NONE {
            let pu = p as usize;
            let r3 = rank_of(vocab, piece, pu, after);
            s.rank[pu] = r3;
            if r3 != NONE {
                s.heap.push(entry(r3, p));
            }
        }
    }
    let mut i = 0;
    while i < n {
        out.push(s.part[i]);
        i = s.next[i] as usize;
    }
}

/// The literal §8 algorithm without the shortcut (quadratic; for tests only).
#[doc(hidden)]
pub fn reference_merge(vocab: &Vocab, piece: &[u8]) -> Vec<u32> {
    let mut parts: Vec<Vec<u8>> = piece.iter().map(|&b| vec![b]).collect();
    loop {
        let mut best: Option<(u32, usize)> = None;
        for k in 0..parts.len().saturating_sub(1) {
            let cat = [parts[k].as_slice(), parts[k + 1].as_slice()].concat();
            if let Some(r) = vocab.rank(&cat) {
                if best.is_none_or(|(br, _)| r < br) {
                    best = Some((r, k));
                }
            }
        }
        match best {
            None => break,
            Some((_, k)) => {
                let right = parts.remove(k + 1);
                parts[k].extend_from_slice(&right);
            }
        }
    }
    parts
        .iter()
        .map(|p| vocab.rank(p).unwrap_or(NONE))
        .collect()
}

/// Runs the small or the large merge (no shortcut), for tests comparing the two paths.
#[doc(hidden)]
pub fn merge_with(vocab: &Vocab, piece: &[u8], large: bool) -> Vec<u32> {
    let mut s = Scratch::default();
    let mut out = Vec::new();
    if large {
        merge_large(vocab, piece, &mut s, &mut out);
    } else {
        merge_small(vocab, piece, &mut s, &mut out);
    }
    out
}
