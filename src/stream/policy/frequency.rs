//! Frequency policies: LFU with dynamic aging, and LFU over the request history.

use super::{no_victim, ExpertKey, Policy};
use crate::error::Result;
use crate::stream::KeyMap;
use std::collections::BTreeSet;

/// LFU with dynamic aging (LFU-DA): priority = L + frequency, where L is the priority of the
/// last victim, so that once-popular entries age out; the lowest priority is evicted, the
/// least recently used first among equals.
pub(super) struct LfuDa {
    cap: usize,
    entries: KeyMap<(u64, u64, u64)>,
    order: BTreeSet<(u64, u64, ExpertKey)>,
    age: u64,
    tick: u64,
}

impl LfuDa {
    pub(super) fn new(cap: usize) -> LfuDa {
        LfuDa {
            cap,
            entries: KeyMap::default(),
            order: BTreeSet::new(),
            age: 0,
            tick: 0,
        }
    }
}

impl Policy for LfuDa {
    fn name(&self) -> &'static str {
        "lfu-da"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.entries.len()
    }
    fn on_hit(&mut self, key: ExpertKey) {
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(&key) {
            self.order.remove(&(e.0, e.1, key));
            e.2 += 1;
            e.0 = self.age + e.2;
            e.1 = self.tick;
            self.order.insert((e.0, e.1, key));
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        self.tick += 1;
        let mut victim = None;
        if self.entries.len() >= self.cap {
            let &(p, t, k) = self
                .order
                .iter()
                .find(|(_, _, k)| !pinned(*k))
                .ok_or_else(|| no_victim("lfu-da"))?;
            self.order.remove(&(p, t, k));
            self.entries.remove(&k);
            self.age = p;
            victim = Some(k);
        }
        let e = (self.age + 1, self.tick, 1);
        self.entries.insert(key, e);
        self.order.insert((e.0, e.1, key));
        Ok(victim)
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(e) = self.entries.remove(&key) {
            self.order.remove(&(e.0, e.1, key));
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// LFU over the request history: every key's request count is kept, also after its eviction
/// (at most one count per expert of the model: 82,432 for K3), and every count is halved after
/// each 10 × capacity requests (TinyLFU's reset, with Caffeine's sample size) so that
/// popularity from long ago fades. The victim is the resident key with the lowest count, the
/// least recently used among equals.
///
/// Why it suits expert routing: a decoded token requests its Kt experts in every MoE layer, a
/// loop over far more experts than a small cache holds, which makes recency policies evict
/// exactly what the next token needs; counts that outlive residency keep the experts the
/// router keeps choosing.
pub(super) struct Lfu {
    cap: usize,
    counts: KeyMap<u32>,
    /// (count, last request tick) of each resident key.
    resident: KeyMap<(u32, u64)>,
    order: BTreeSet<(u32, u64, ExpertKey)>,
    tick: u64,
    window: u64,
    since_halving: u64,
}

impl Lfu {
    pub(super) fn new(cap: usize) -> Lfu {
        Lfu {
            cap,
            counts: KeyMap::default(),
            resident: KeyMap::default(),
            order: BTreeSet::new(),
            tick: 0,
            window: 10 * cap as u64,
            since_halving: 0,
        }
    }

    /// Counts one request of `key` and returns its new count.
    fn count(&mut self, key: ExpertKey) -> u32 {
        self.tick += 1;
        self.since_halving += 1;
        if self.since_halving >= self.window {
            self.since_halving = 0;
            self.counts.retain(|_, c| {
                *c /= 2;
                *c > 0
            });
            self.order.clear();
            for (k, e) in self.resident.iter_mut() {
                e.0 /= 2;
                self.order.insert((e.0, e.1, *k));
            }
        }
        let c = self.counts.entry(key).or_insert(0);
        *c = c.saturating_add(1);
        *c
    }
}

impl Policy for Lfu {
    fn name(&self) -> &'static str {
        "lfu"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.resident.len()
    }
    fn on_hit(&mut self, key: ExpertKey) {
        let c = self.count(key);
        let tick = self.tick;
        if let Some(e) = self.resident.get_mut(&key) {
            self.order.remove(&(e.0, e.1, key));
            *e = (c, tick);
            self.order.insert((c, tick, key));
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        let c = self.count(key);
        let mut victim = None;
        if self.resident.len() >= self.cap {
            let &(vc, vt, v) = self
                .order
                .iter()
                .find(|(_, _, k)| !pinned(*k))
                .ok_or_else(|| no_victim("lfu"))?;
            self.order.remove(&(vc, vt, v));
            self.resident.remove(&v);
            victim = Some(v);
        }
        self.resident.insert(key, (c, self.tick));
        self.order.insert((c, self.tick, key));
        Ok(victim)
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(e) = self.resident.remove(&key) {
            self.order.remove(&(e.0, e.1, key));
        }
    }
}
