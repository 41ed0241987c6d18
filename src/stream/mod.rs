//! Streaming: supplies weight bytes to the model within the memory budget (ENGINE.md §4–§5).
//!
//! * [`trunk`]: the pinned set and the ring of slots with read-ahead of [`pieces`] (layers cut
//!   at their parts' boundaries) (the model's
//!   `TrunkSource`), from the shards or a packed trunk; [`tables`]: the model tables, resident or
//!   streamed; [`pack`]: `trunk.bin` + `trunk.json` (FORMATS.md §7).
//! * [`experts`]: the expert cache behind the model's `ExpertSource`. Binding a model for a
//!   streamed run as the memory plan decided is `crate::bind::streamed`'s work.
//! * [`expert_cache`]: whole-expert slots keyed by (layer, expert), filled a layer's top-k set at
//!   a time by parallel reads on the I/O threads (ENGINE.md §5, FORMATS.md §6).
//! * [`policy`]: the eviction policies behind one trait (LRU, FIFO, SIEVE, S3-FIFO, ARC, 2Q,
//!   LFU with dynamic aging).
//! * [`trace`]: `expert_trace.bin` / `expert_hist.json` (FORMATS.md §8) and the derivation of an
//!   incremental-decode trace from a full-recompute one.
//! * [`sim`]: replays a trace under each policy and capacity, next to Belady's optimum and the
//!   compulsory-miss ceiling (`k3 sim-cache`).

pub mod coded;
pub mod expert_cache;
pub mod experts;
pub mod pack;
pub mod pieces;
pub mod policy;
pub mod sim;
pub mod tables;
pub mod trace;
pub mod trunk;

/// The streamed binding moved to [`crate::bind::streamed`]; kept at its old path for tests.
pub use crate::bind::streamed as bind;

use std::hash::{BuildHasherDefault, Hasher};

/// A routed expert: (zero-based layer ℓ, expert index e). Ordered by layer, then expert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExpertKey {
    /// Zero-based decoder layer (an MoE layer).
    pub layer: u32,
    /// Expert index, 0 … num_experts − 1.
    pub expert: u32,
}

impl ExpertKey {
    /// The key of expert `expert` of layer `layer`.
    pub fn new(layer: u32, expert: u32) -> ExpertKey {
        ExpertKey { layer, expert }
    }

    /// The analysis key of FORMATS.md §8: `(layer << 20) | expert`.
    pub fn packed(self) -> u64 {
        ((self.layer as u64) << 20) | self.expert as u64
    }
}

impl std::fmt::Display for ExpertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "layer {} expert {}", self.layer, self.expert)
    }
}

/// A fast hasher for [`ExpertKey`] maps (two u32 words; multiplicative mixing of every word).
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        // Final avalanche so that the low bits used by the table depend on every input bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// A hash map keyed by [`ExpertKey`].
pub type KeyMap<V> = std::collections::HashMap<ExpertKey, V, BuildHasherDefault<KeyHasher>>;
/// A hash set of [`ExpertKey`].
pub type KeySet = std::collections::HashSet<ExpertKey, BuildHasherDefault<KeyHasher>>;
