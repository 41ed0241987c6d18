//! One sort for the engine's bookkeeping lists (tensors, layers, shards, file names, JSON keys,
//! flags): a stable merge sort of positions, compiled once for every element type.
//!
//! Why not `slice::sort*`: the standard sorts are generic over the element and the comparator,
//! so each call site compiled its own copy (2 to 7 kB each; sorting code went from 139 kB to 62 kB
//! of the static binary when twenty-odd call sites moved here,
//! bench/results/binary-size-20261203.tsv). Here the generic part
//! per call site is a comparator thunk and an in-place permutation (a few hundred bytes); the
//! merge sort itself is one function behind `dyn FnMut`.
//!
//! The order is the stable order: equal elements keep their input order, so a call site that
//! sorted stably gets the same result, and one that sorted unstably by a total order (a key
//! ending in a distinct position or name, as every engine call site did) too. Lists here are
//! small or sorted once per open (the released checkpoint's 497,220 tensor names at most); the
//! hot per-token sorts (the sampler's candidates, the expert cache's reads) keep the standard
//! sorts.

use std::cmp::Ordering;

/// Sorts `v` stably by `cmp` (which must be a total preorder, as for `slice::sort_by`).
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let order = {
        let v: &[T] = v;
        sorted_positions(v.len(), &mut |a, b| cmp(&v[a], &v[b]))
    };
    permute(v, order);
}

/// Sorts `v` stably by the key `key` (as `slice::sort_by_key`).
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)))
}

/// Sorts `v` stably in ascending order (as `slice::sort`).
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, |a, b| a.cmp(b))
}

/// The positions `0..n` in stable ascending order of `cmp(i, j)`: a bottom-up merge sort,
/// O(n log n) comparisons, two buffers of `n` positions.
#[inline(never)]
fn sorted_positions(n: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut a: Vec<usize> = (0..n).collect();
    let mut b: Vec<usize> = vec![0; n];
    let mut width = 1;
    while width < n {
        let mut lo = 0;
        while lo < n {
            let mid = (lo + width).min(n);
            let hi = (lo + 2 * width).min(n);
            let (mut i, mut j, mut k) = (lo, mid, lo);
            while i < mid && j < hi {
                // Take from the right run only when strictly less: stability.
                if cmp(a[j], a[i]) == Ordering::Less {
                    b[k] = a[j];
                    j += 1;
                } else {
                    b[k] = a[i];
                    i += 1;
                }
                k += 1;
            }
            b[k..k + (mid - i)].copy_from_slice(&a[i..mid]);
            k += mid - i;
            b[k..hi].copy_from_slice(&a[j..hi]);
            lo = hi;
        }
        std::mem::swap(&mut a, &mut b);
        width *= 2;
    }
    a
}

/// Rearranges `v` so that position `k` holds the element that was at `order[k]` (`order` a
/// permutation of `0..v.len()`), by swaps along each cycle.
fn permute<T>(v: &mut [T], mut order: Vec<usize>) {
    for start in 0..v.len() {
        let mut k = start;
        loop {
            let src = order[k];
            order[k] = k; // done
            if src == start {
                break;
            }
            v.swap(k, src);
            k = src;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal to the standard stable sort on every length up to 70 and many orders, ties
    /// included (the payload tells tied elements apart).
    #[test]
    fn equals_the_standard_stable_sort() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for n in 0..70 {
            for round in 0..20 {
                let v: Vec<(u8, usize)> = (0..n)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Few distinct keys in some rounds: many ties.
                        ((x % if round % 2 == 0 { 4 } else { 251 }) as u8, i)
                    })
                    .collect();
                let mut ours = v.clone();
                sort_by_key(&mut ours, |e| e.0);
                let mut std_sorted = v.clone();
                std_sorted.sort_by_key(|e| e.0);
                assert_eq!(ours, std_sorted, "n {n} round {round}");
                let mut full = v.clone();
                sort(&mut full);
                std_sorted.sort();
                assert_eq!(full, std_sorted);
            }
        }
    }

    #[test]
    fn sorted_input_reversed_input_and_strings() {
        let mut v: Vec<u32> = (0..1000).rev().collect();
        sort(&mut v);
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
        sort(&mut v);
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
        let mut s = vec!["b", "a", "c", "a"];
        sort_by(&mut s, |a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(s, ["a", "a", "b", "c"]);
    }
}
