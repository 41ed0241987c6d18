//! Expert-cache eviction policies behind one trait (ENGINE.md §5: pluggable, chosen by
//! measurement on the recorded real trace; see `k3 sim-cache` and bench/results/).
//!
//! A policy tracks which keys are resident and decides the victim when a miss finds the cache
//! full. The cache calls, for each distinct key of a batch, [`Policy::on_hit`] or
//! [`Policy::on_miss`] exactly once (hits of the batch first, then its misses in request order).
//! Keys of the batch being served are *pinned*: a policy never returns a pinned victim (the
//! slot is in use), it skips it as if it had just been used.
//!
//! Policies: `lru`, `fifo`, `sieve` (Zhang et al., NSDI '24), `s3-fifo` (Yang et al.,
//! SOSP '23), `arc` (Megiddo & Modha, FAST '03), `2q` (Johnson & Shasha, VLDB '94), `lfu-da`
//! (LFU with dynamic aging, Arlitt et al. 2000) and `lfu` (LFU over the whole request history
//! with periodic halving, the frequency estimate of TinyLFU, Einziger et al. 2017).

use super::ExpertKey;
use crate::error::{Error, Result};

mod frequency;
mod ghost;
mod lists;
mod recency;
#[cfg(test)]
mod tests;

use frequency::{Lfu, LfuDa};
use ghost::{ArcPolicy, S3Fifo, TwoQ};
use recency::{Lru, Sieve};

/// Every policy name accepted by [`new_policy`], `--cache-policy` and `k3 sim-cache --policy`.
pub const POLICY_NAMES: &[&str] = &[
    "lru", "fifo", "sieve", "s3-fifo", "arc", "2q", "lfu-da", "lfu",
];

/// The engine's default policy: the best mean hit rate over 8, 16, 32, 64 and 128 GB caches on
/// the incremental-decode trace derived from the recorded real trace, and the best at the
/// desktop and server presets' cache sizes (bench/results/sim-cache-real*.tsv; the test
/// `default_policy_is_the_best_on_the_real_incremental_trace` keeps this true).
pub const DEFAULT_POLICY: &str = "lfu";

/// An eviction policy over at most `capacity()` resident keys.
pub trait Policy: Send {
    /// The policy's name (one of [`POLICY_NAMES`]).
    fn name(&self) -> &'static str;
    /// Number of slots.
    fn capacity(&self) -> usize;
    /// Number of resident keys.
    fn resident(&self) -> usize;
    /// A resident key was requested.
    fn on_hit(&mut self, key: ExpertKey);
    /// A key that is not resident was requested: if `capacity()` keys are resident, evict one
    /// that is not pinned and return it; then make `key` resident.
    ///
    /// Errors: exit 1 if every resident key is pinned (the caller guarantees a batch fits).
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>>;
    /// Forgets a resident key without an eviction decision (its read failed; the slot is free).
    fn remove(&mut self, key: ExpertKey);
}

/// Creates the policy `name` for `capacity` slots.
///
/// Errors: exit 2 for an unknown name (the message lists the known ones) or a zero capacity.
pub fn new_policy(name: &str, capacity: usize) -> Result<Box<dyn Policy>> {
    if capacity == 0 {
        return Err(Error::invalid(format!(
            "cache policy `{name}`: capacity must be at least one slot"
        )));
    }
    Ok(match name {
        "lru" => Box::new(Lru::new(capacity, true)),
        "fifo" => Box::new(Lru::new(capacity, false)),
        "sieve" => Box::new(Sieve::new(capacity)),
        "s3-fifo" => Box::new(S3Fifo::new(capacity)),
        "arc" => Box::new(ArcPolicy::new(capacity)),
        "2q" => Box::new(TwoQ::new(capacity)),
        "lfu-da" => Box::new(LfuDa::new(capacity)),
        "lfu" => Box::new(Lfu::new(capacity)),
        _ => {
            return Err(Error::invalid(format!(
                "unknown cache policy `{name}` (known: {})",
                POLICY_NAMES.join(", ")
            )))
        }
    })
}

fn no_victim(name: &str) -> Error {
    Error::internal(format!(
        "cache policy {name}: every resident expert is pinned by the current batch (the batch \
         is larger than the cache)"
    ))
}
