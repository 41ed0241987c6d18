//! The pinned set of the trunk (ENGINE.md §4-§5): which layers stay resident and how the
//! rest stream through ring slots, the fixed point of [`choose_trunk`].

use super::buffer_bytes;
use crate::error::{Error, Result};
use crate::units::{gb, gb_pair, layer_list};

/// Which trunk layers are pinned and how the rest stream (ENGINE.md §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrunkChoice {
    /// Per bound layer: true if pinned (resident).
    pub pinned: Vec<bool>,
    /// Ring slots (0 when every layer is pinned).
    pub ring_slots: usize,
    /// Bytes of each ring slot (the largest unpinned layer's buffer).
    pub slot_bytes: u64,
    /// Bytes of the pinned layers' buffers.
    pub pinned_bytes: u64,
    /// Run bytes read per forward pass (the unpinned layers).
    pub streamed_bytes: u64,
    /// Why this choice, for the report.
    pub reason: String,
}

impl TrunkChoice {
    /// Pinned layers.
    pub fn n_pinned(&self) -> usize {
        self.pinned.iter().filter(|p| **p).count()
    }
    /// pinned + ring bytes.
    pub fn bytes(&self) -> u64 {
        self.pinned_bytes + self.ring_slots as u64 * self.slot_bytes
    }
}

/// The pinned set and ring of a trunk budget with whole layers as ring pieces:
/// [`choose_trunk_pieces`] with each layer one piece.
pub fn choose_trunk(runs: &[u64], budget: u64, ring: Option<usize>) -> Result<TrunkChoice> {
    let pieces: Vec<Vec<u64>> = runs.iter().map(|&r| vec![r]).collect();
    choose_trunk_pieces(runs, &pieces, budget, ring)
}

/// The pinned set and ring of a trunk budget (the fixed point of ENGINE.md §4–§5).
///
/// `runs[l]` is layer l's run length and `pieces[l]` the bytes of its ring pieces when it
/// streams (forward order); a pinned layer costs `buffer_bytes(run)`, and every ring slot must
/// hold the largest piece of any *unpinned* layer — which depends on what is pinned, hence the
/// fixed point. Among all pinned sets that fit `pinned + ring × slot ≤ budget`, the one
/// streaming the fewest bytes per forward pass is chosen (ties: less memory). Layers of equal
/// size and largest piece are interchangeable for that count, so the search runs over how many
/// of each class are pinned, and the pinned ones of a class are spread evenly over the walk (so
/// streamed layers alternate with pinned ones and read-ahead has compute to hide behind).
///
/// `ring`: `Some(n)` forces n slots (≥ 1); `None` prefers 2 (read-ahead), else 1 — but only 2
/// when two slots of the largest piece fit in one of the largest layer (layers cut into
/// pieces: the smallest ring is then two slots, no larger than the one whole-layer slot it
/// replaces, [`min_ring_bytes`]). When every layer fits, all are pinned and there is no ring.
///
/// Errors (exit 3): the budget cannot hold even the ring slot(s) for the largest piece; the
/// message gives the minimum.
pub fn choose_trunk_pieces(
    runs: &[u64],
    pieces: &[Vec<u64>],
    budget: u64,
    ring: Option<usize>,
) -> Result<TrunkChoice> {
    let cost: Vec<u64> = runs.iter().map(|&r| buffer_bytes(r)).collect();
    let slot_of: Vec<u64> = (0..runs.len())
        .map(|l| match pieces.get(l) {
            Some(p) if !p.is_empty() => p.iter().map(|&x| buffer_bytes(x)).max().unwrap_or(0),
            _ => cost[l],
        })
        .collect();
    let read_of: Vec<u64> = (0..runs.len())
        .map(|l| match pieces.get(l) {
            Some(p) if !p.is_empty() => p.iter().sum(),
            _ => runs[l],
        })
        .collect();
    let all: u64 = cost.iter().sum();
    let largest = cost.iter().copied().max().unwrap_or(0);
    let largest_slot = slot_of.iter().copied().max().unwrap_or(0);
    if all <= budget {
        return Ok(TrunkChoice {
            pinned: vec![true; runs.len()],
            ring_slots: 0,
            slot_bytes: 0,
            pinned_bytes: all,
            streamed_bytes: 0,
            reason: format!(
                "all {} layers pinned ({}): the trunk budget {} holds the whole trunk",
                runs.len(),
                gb(all),
                gb(budget)
            ),
        });
    }
    // Classes, largest first: (cost, bytes read when streamed, layers ascending, slot).
    let mut classes: Vec<Class> = Vec::new();
    for l in 0..runs.len() {
        match classes
            .iter_mut()
            .find(|k| k.0 == cost[l] && k.3 == slot_of[l] && k.1 == read_of[l])
        {
            Some(k) => k.2.push(l),
            None => classes.push((cost[l], read_of[l], vec![l], slot_of[l])),
        }
    }
    crate::sort::sort_by_key(&mut classes, |k| {
        (std::cmp::Reverse(k.0), std::cmp::Reverse(k.3))
    });
    let rings: Vec<usize> = match ring {
        Some(n) => vec![n.max(1)],
        // Two slots of pieces that fit where one whole-layer slot did: never one (the floor
        // does not grow, and it reads ahead).
        None if 2 * largest_slot <= largest => vec![2],
        None => vec![2, 1],
    };
    for &r in &rings {
        let best = best_counts(&classes, budget, r);
        if let Some((streamed, _, counts)) = best {
            let mut pinned = vec![false; runs.len()];
            let mut slot = 0u64;
            let mut slot_layer = 0usize;
            for (k, &c) in classes.iter().zip(&counts) {
                let n = k.2.len();
                for i in 0..c {
                    // spread c of n evenly
                    let idx = ((2 * i + 1) * n) / (2 * c);
                    pinned[k.2[idx.min(n - 1)]] = true;
                }
                if c < n && k.3 > slot {
                    slot = k.3;
                    slot_layer = *k.2.iter().find(|&&l| !pinned[l]).unwrap_or(&k.2[0]);
                }
            }
            let pinned_bytes: u64 = (0..runs.len())
                .filter(|&l| pinned[l])
                .map(|l| cost[l])
                .sum();
            let reason = choice_reason(
                &cost,
                &pinned,
                r,
                ring,
                (slot, slot_layer),
                streamed,
                largest,
                classes.len(),
            );
            return Ok(TrunkChoice {
                pinned,
                ring_slots: r,
                slot_bytes: slot,
                pinned_bytes,
                streamed_bytes: streamed,
                reason,
            });
        }
    }
    let r = rings.last().copied().unwrap_or(1) as u64;
    let (have, need) = gb_pair(budget, r * largest_slot);
    Err(Error::resources(format!(
        "trunk budget {} is below the minimum {}: {} ring slot{} for the largest piece ({}); raise --trunk-gb or --mem-gb, or choose a larger preset",
        have,
        need,
        r,
        if r == 1 { "" } else { "s" },
        gb(largest_slot)
    )))
}

/// The smallest ring [`choose_trunk_pieces`] accepts without `--trunk-ring`: two slots of the
/// largest piece when they fit in one slot of the largest layer, else one slot. `layer` and
/// `piece` are the largest layer's and the largest piece's buffers.
pub fn min_ring_bytes(layer: u64, piece: u64) -> u64 {
    if 2 * piece <= layer {
        2 * piece
    } else {
        piece
    }
}

/// The report's reason of a [`TrunkChoice`]: what is pinned, the ring, what overlaps.
#[allow(clippy::too_many_arguments)]
fn choice_reason(
    cost: &[u64],
    pinned: &[bool],
    r: usize,
    ring: Option<usize>,
    (slot, slot_layer): (u64, usize),
    streamed: u64,
    largest: u64,
    n_classes: usize,
) -> String {
    let n = cost.len();
    let n_p = pinned.iter().filter(|p| **p).count();
    let pinned_bytes: u64 = (0..n).filter(|&l| pinned[l]).map(|l| cost[l]).sum();
    let mut reason = format!(
        "pinned {n_p}/{n} layers ({}): {}; ring {r} × {} (slots sized to the largest streamed piece, of layer {slot_layer}); streams {} per forward pass",
        gb(pinned_bytes),
        layer_list((0..n).filter(|&l| pinned[l])),
        gb(slot),
        gb(streamed)
    );
    let big = cost.iter().position(|&c| c == largest).unwrap_or(0);
    if pinned[big] && n_classes > 1 {
        reason += &format!(
            "; layer {big} pinned because it is the largest ({}): streaming it would make every ring slot bigger",
            gb(largest)
        );
    } else if !pinned[big] && n_p > 0 {
        reason += &format!(
            "; the largest layer ({big}, {}) streams: pinning it does not fit next to the ring",
            gb(largest)
        );
    }
    if ring.is_none() && r == 1 {
        reason += "; one slot only (two do not fit): reads are synchronous";
    } else if r >= 2 {
        reason += "; the next streamed piece is read while the current one computes";
    }
    reason
}

/// A size class of the trunk: (buffer cost, bytes read when streamed, layers ascending,
/// ring slot its largest piece needs).
type Class = (u64, u64, Vec<usize>, u64);

/// Size classes of the trunk, largest first.
type Classes = [Class];

/// The best pin counts per size class for `r` ring slots within `budget`: (bytes streamed
/// per forward pass, memory, counts), fewest streamed bytes first, then least memory; `None`
/// when even the ring does not fit.
fn best_counts(classes: &Classes, budget: u64, r: usize) -> Option<(u64, u64, Vec<usize>)> {
    let combos: u128 = classes.iter().map(|k| k.2.len() as u128 + 1).product();
    // Best (streamed, memory, counts).
    let mut best: Option<(u64, u64, Vec<usize>)> = None;
    let mut consider = |counts: &[usize]| {
        let mut pinned = 0u64;
        let mut streamed = 0u64;
        let mut slot = 0u64;
        for (k, &c) in classes.iter().zip(counts) {
            pinned += c as u64 * k.0;
            streamed += (k.2.len() - c) as u64 * k.1;
            if c < k.2.len() {
                slot = slot.max(k.3);
            }
        }
        if slot == 0 {
            return; // all pinned: does not fit (checked above)
        }
        let mem = pinned + r as u64 * slot;
        if mem > budget {
            return;
        }
        if best.as_ref().is_none_or(|b| (streamed, mem) < (b.0, b.1)) {
            best = Some((streamed, mem, counts.to_vec()));
        }
    };
    if combos <= 4_000_000 {
        let mut counts = vec![0usize; classes.len()];
        loop {
            consider(&counts);
            // odometer
            let mut i = 0;
            loop {
                if i == counts.len() {
                    break;
                }
                if counts[i] < classes[i].2.len() {
                    counts[i] += 1;
                    break;
                }
                counts[i] = 0;
                i += 1;
            }
            if i == counts.len() {
                break;
            }
        }
    } else {
        // Many distinct sizes: for each possible slot class, pin greedily largest first.
        for j in 0..classes.len() {
            let mut counts: Vec<usize> = classes.iter().map(|k| k.2.len()).collect();
            counts[j] = 0;
            let mut left = budget.saturating_sub(
                r as u64 * classes[j].3
                    + classes[..j]
                        .iter()
                        .map(|k| k.0 * k.2.len() as u64)
                        .sum::<u64>(),
            );
            for (i, k) in classes.iter().enumerate().skip(j) {
                let n = if i == j { k.2.len() - 1 } else { k.2.len() };
                let c = ((left / k.0) as usize).min(n);
                counts[i] = c;
                left -= c as u64 * k.0;
            }
            consider(&counts);
        }
    }
    best
}
