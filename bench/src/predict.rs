//! Predicted batch gain of the released model (issue 12's Bench): how many distinct experts B
//! sequences request per MoE layer in one step, from the real routing trace (FORMATS.md §8),
//! and the bytes a disk-bound step of B sequences reads under the engine's own memory plan.
//! Predictions, not measurements: compute time is ignored.

use std::collections::BTreeSet;

/// Expert requests of one position: per MoE layer (index 0 = the trace's lowest layer), the
/// selected experts in selection order.
pub type PositionRoutes = Vec<Vec<i32>>;

/// The routing of each position once, derived from a full-recompute trace of forwards over
/// `first`, `first + 1`, … positions (the fixture: 8 forwards over 5..12 positions), `top_k`
/// experts per position and layer. Returns the positions of the last forward, and how many
/// positions of the earlier forwards routed differently from it (0 expected: re-run positions
/// route identically).
///
/// Errors: a length that is not a whole number of records or does not match the forwards,
/// negative layer or expert numbers.
pub fn positions_from_trace(
    bytes: &[u8],
    first: usize,
    forwards: usize,
    top_k: usize,
) -> Result<(Vec<PositionRoutes>, usize), String> {
    if bytes.len() % 8 != 0 {
        return Err(format!(
            "expert trace: {} bytes is not a whole number of 8-byte records",
            bytes.len()
        ));
    }
    let recs: Vec<(i32, i32)> = bytes
        .chunks_exact(8)
        .map(|c| {
            (
                i32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
        .collect();
    if let Some((l, e)) = recs.iter().find(|(l, e)| *l < 0 || *e < 0) {
        return Err(format!("expert trace: record ({l}, {e}) is negative"));
    }
    let layers: BTreeSet<i32> = recs.iter().map(|r| r.0).collect();
    let n_layers = layers.len();
    let positions: usize = (0..forwards).map(|f| first + f).sum();
    if recs.len() != positions * n_layers * top_k {
        return Err(format!(
            "expert trace: {} records, expected {positions} positions x {n_layers} layers x top-{top_k}",
            recs.len()
        ));
    }
    // Request order: forward, layer ascending, position ascending, top-k in selection order.
    let mut all: Vec<Vec<PositionRoutes>> = Vec::new();
    let mut at = 0;
    for f in 0..forwards {
        let t = first + f;
        let mut fw = vec![vec![Vec::new(); n_layers]; t];
        for layer in 0..n_layers {
            for p in fw.iter_mut() {
                p[layer] = recs[at..at + top_k].iter().map(|r| r.1).collect();
                at += top_k;
            }
        }
        all.push(fw);
    }
    let last = all.pop().unwrap_or_default();
    let differing = all
        .iter()
        .flat_map(|fw| fw.iter().enumerate())
        .filter(|(p, routes)| last.get(*p) != Some(routes))
        .count();
    Ok((last, differing))
}

/// Mean over MoE layers and over every choice of `b` distinct positions (drawn as `b`
/// different sequences) of the number of distinct experts they request in one layer.
pub fn mean_union(pos: &[PositionRoutes], b: usize) -> f64 {
    let n = pos.len();
    if b == 0 || b > n || pos.is_empty() {
        return 0.0;
    }
    let layers = pos[0].len();
    let (mut sum, mut count) = (0.0f64, 0u64);
    let mut pick: Vec<usize> = (0..b).collect();
    loop {
        let union = |l: usize| {
            let u: BTreeSet<i32> = pick
                .iter()
                .flat_map(|&p| pos[p][l].iter().copied())
                .collect();
            u.len()
        };
        sum += (0..layers).map(union).sum::<usize>() as f64;
        count += layers as u64;
        // Next combination in lexicographic order.
        let mut i = b;
        while i > 0 && pick[i - 1] == n - b + i - 1 {
            i -= 1;
        }
        if i == 0 {
            break;
        }
        pick[i - 1] += 1;
        for j in i..b {
            pick[j] = pick[j - 1] + 1;
        }
    }
    sum / count.max(1) as f64
}

/// Expected distinct experts of `b` independent uniform top-`k` choices among `e` experts.
pub fn uniform_union(e: usize, k: usize, b: usize) -> f64 {
    let miss = 1.0 - k as f64 / e as f64;
    e as f64 * (1.0 - miss.powi(b as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(forwards: &[Vec<Vec<Vec<i32>>>]) -> Vec<u8> {
        // forwards[f][position][layer] = experts
        let mut out = Vec::new();
        for fw in forwards {
            let layers = fw[0].len();
            for l in 0..layers {
                for p in fw {
                    for &e in &p[l] {
                        out.extend_from_slice(&(l as i32 + 1).to_le_bytes());
                        out.extend_from_slice(&e.to_le_bytes());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn positions_are_read_once_in_request_order() {
        let p0 = vec![vec![1, 2], vec![3, 4]];
        let p1 = vec![vec![2, 5], vec![3, 6]];
        let bytes = trace(&[vec![p0.clone()], vec![p0.clone(), p1.clone()]]);
        let (pos, differing) = positions_from_trace(&bytes, 1, 2, 2).unwrap();
        assert_eq!(pos, vec![p0.clone(), p1.clone()]);
        assert_eq!(differing, 0);
        let bytes = trace(&[vec![p1.clone()], vec![p0, p1]]);
        assert_eq!(positions_from_trace(&bytes, 1, 2, 2).unwrap().1, 1);
        assert!(positions_from_trace(&bytes[..12], 1, 2, 2)
            .unwrap_err()
            .contains("whole number"));
        assert!(positions_from_trace(&bytes, 2, 2, 2)
            .unwrap_err()
            .contains("expected 5 positions"));
    }

    #[test]
    fn unions_count_distinct_experts() {
        let pos = vec![vec![vec![1, 2]], vec![vec![2, 3]], vec![vec![4, 5]]];
        assert_eq!(mean_union(&pos, 1), 2.0);
        // pairs: {1,2,3} 3, {1,2,4,5} 4, {2,3,4,5} 4
        assert!((mean_union(&pos, 2) - 11.0 / 3.0).abs() < 1e-12);
        assert_eq!(mean_union(&pos, 3), 5.0);
        assert_eq!(mean_union(&pos, 4), 0.0);
        assert!((uniform_union(896, 16, 1) - 16.0).abs() < 1e-9);
        assert!(uniform_union(896, 16, 8) < 128.0);
    }
}
