//! The cache simulator behind `k3 sim-cache`: replays a trace (FORMATS.md §8) through the
//! expert cache's own bookkeeping under each policy, and computes Belady's optimum and the
//! compulsory-miss ceiling for comparison.
//!
//! Replay follows the engine exactly: each maximal run of one layer in the trace is one batch
//! (one MoE layer of one forward step), split into sub-batches of at most `slots` distinct
//! experts when it does not fit (ENGINE.md §4). A request is a hit when it costs no read:
//! hit rate = 1 − reads / requests, where a batch reads each distinct missing expert once. So
//! infinite capacity reaches exactly the compulsory-miss ceiling 1 − distinct / requests.

use super::expert_cache::CacheCore;
use super::policy::new_policy;
use super::{ExpertKey, KeyMap, KeySet};
use crate::error::Result;
use std::collections::BTreeSet;
use std::ops::Range;

/// Counts of one replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimResult {
    /// Policy name, or `belady`.
    pub policy: String,
    /// Cache slots.
    pub slots: usize,
    /// Requests (records of the trace).
    pub requests: u64,
    /// Expert reads (misses: each distinct missing expert of a batch once).
    pub reads: u64,
    /// Evictions.
    pub evictions: u64,
    /// Requests whose expert was resident before its batch began.
    pub true_resident_hits: u64,
}

impl SimResult {
    /// 1 − reads / requests.
    pub fn hit_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            1.0 - self.reads as f64 / self.requests as f64
        }
    }
    /// true_resident_hits / requests.
    pub fn true_resident_hit_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.true_resident_hits as f64 / self.requests as f64
        }
    }
}

/// The batches of a trace for a cache of `slots` slots (≥ 1): maximal runs of one layer, each
/// cut into consecutive sub-batches of at most `slots` distinct experts.
pub fn batches(records: &[ExpertKey], slots: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut distinct = KeySet::default();
    for (i, k) in records.iter().enumerate() {
        let new_layer = i > start && k.layer != records[i - 1].layer;
        if new_layer || (!distinct.contains(k) && distinct.len() == slots.max(1)) {
            out.push(start..i);
            start = i;
            distinct.clear();
        }
        distinct.insert(*k);
    }
    if start < records.len() {
        out.push(start..records.len());
    }
    out
}

/// Replays `records` through a cache of `slots` slots evicting with `policy`.
///
/// Errors: exit 2 for an unknown policy or zero slots.
pub fn simulate(records: &[ExpertKey], slots: usize, policy: &str) -> Result<SimResult> {
    let mut core = CacheCore::new(slots, new_policy(policy, slots)?)?;
    for b in batches(records, slots) {
        let r = core.reserve(&records[b])?;
        core.publish(&r);
    }
    let s = core.stats;
    Ok(SimResult {
        policy: policy.to_string(),
        slots,
        requests: s.requests,
        reads: s.requests - s.hits,
        evictions: s.evictions,
        true_resident_hits: s.true_resident_hits,
    })
}

/// Belady's optimum (OPT, furthest next use) with the engine's batch semantics: a miss evicts
/// the resident expert, not in the current batch, whose next request lies furthest in the
/// future (never requested again first). No policy can read less.
pub fn belady(records: &[ExpertKey], slots: usize) -> SimResult {
    let slots = slots.max(1);
    let bs = batches(records, slots);
    // Distinct keys of each batch in request order.
    let distinct: Vec<Vec<ExpertKey>> = bs
        .iter()
        .map(|r| {
            let mut seen = KeySet::default();
            records[r.clone()]
                .iter()
                .filter(|k| seen.insert(**k))
                .copied()
                .collect()
        })
        .collect();
    // next[b][j] = index of the next batch after b that requests distinct[b][j].
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); bs.len()];
    let mut upcoming: KeyMap<usize> = KeyMap::default();
    for b in (0..bs.len()).rev() {
        next[b] = distinct[b]
            .iter()
            .map(|k| upcoming.get(k).copied().unwrap_or(usize::MAX))
            .collect();
        for k in &distinct[b] {
            upcoming.insert(*k, b);
        }
    }
    let mut resident: KeyMap<usize> = KeyMap::default();
    let mut by_next: BTreeSet<(usize, ExpertKey)> = BTreeSet::new();
    let mut res = SimResult {
        policy: "belady".to_string(),
        slots,
        requests: records.len() as u64,
        reads: 0,
        evictions: 0,
        true_resident_hits: 0,
    };
    for (b, r) in bs.iter().enumerate() {
        res.true_resident_hits += records[r.clone()]
            .iter()
            .filter(|k| resident.contains_key(k))
            .count() as u64;
        let batch: KeySet = distinct[b].iter().copied().collect();
        for (k, &nu) in distinct[b].iter().zip(&next[b]) {
            if let Some(old) = resident.insert(*k, nu) {
                by_next.remove(&(old, *k));
                by_next.insert((nu, *k));
                continue;
            }
            res.reads += 1;
            if resident.len() > slots {
                let victim = *by_next
                    .iter()
                    .rev()
                    .find(|(_, v)| !batch.contains(v))
                    .expect("a batch never exceeds the cache");
                by_next.remove(&victim);
                resident.remove(&victim.1);
                res.evictions += 1;
            }
            by_next.insert((nu, *k));
        }
    }
    res
}

/// Distinct keys of a trace and the compulsory-miss ceiling 1 − distinct / requests.
pub fn compulsory(records: &[ExpertKey]) -> (usize, f64) {
    let distinct = records.iter().copied().collect::<KeySet>().len();
    let ceiling = if records.is_empty() {
        0.0
    } else {
        1.0 - distinct as f64 / records.len() as f64
    };
    (distinct, ceiling)
}
