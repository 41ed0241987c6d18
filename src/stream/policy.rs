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

use super::{ExpertKey, KeyMap};
use crate::error::{Error, Result};
use std::collections::BTreeSet;

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

// ---------------------------------------------------------------------------------------------
// Intrusive doubly linked lists over one node arena, several lists per policy (resident queues
// and ghost queues). Head = newest / most recently used, tail = oldest.

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node {
    key: ExpertKey,
    /// Neighbour toward the head (newer).
    prev: u32,
    /// Neighbour toward the tail (older).
    next: u32,
    list: u8,
    /// Per-policy bits: SIEVE visited, S3-FIFO frequency.
    meta: u8,
}

struct Lists {
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: Vec<u32>,
    tail: Vec<u32>,
    len: Vec<usize>,
    map: KeyMap<u32>,
}

impl Lists {
    fn new(lists: usize) -> Lists {
        Lists {
            nodes: Vec::new(),
            free: Vec::new(),
            head: vec![NIL; lists],
            tail: vec![NIL; lists],
            len: vec![0; lists],
            map: KeyMap::default(),
        }
    }

    fn find(&self, key: ExpertKey) -> Option<u32> {
        self.map.get(&key).copied()
    }
    fn list(&self, i: u32) -> usize {
        self.nodes[i as usize].list as usize
    }
    fn key(&self, i: u32) -> ExpertKey {
        self.nodes[i as usize].key
    }
    fn meta(&self, i: u32) -> u8 {
        self.nodes[i as usize].meta
    }
    fn set_meta(&mut self, i: u32, m: u8) {
        self.nodes[i as usize].meta = m;
    }
    fn len(&self, l: usize) -> usize {
        self.len[l]
    }
    fn tail(&self, l: usize) -> u32 {
        self.tail[l]
    }
    fn newer(&self, i: u32) -> u32 {
        self.nodes[i as usize].prev
    }

    fn unlink(&mut self, i: u32) {
        let Node {
            prev, next, list, ..
        } = self.nodes[i as usize];
        let l = list as usize;
        if prev == NIL {
            self.head[l] = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail[l] = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        self.len[l] -= 1;
    }

    fn link_front(&mut self, i: u32, l: usize) {
        let old = self.head[l];
        {
            let n = &mut self.nodes[i as usize];
            n.prev = NIL;
            n.next = old;
            n.list = l as u8;
        }
        if old == NIL {
            self.tail[l] = i;
        } else {
            self.nodes[old as usize].prev = i;
        }
        self.head[l] = i;
        self.len[l] += 1;
    }

    fn insert_front(&mut self, l: usize, key: ExpertKey, meta: u8) -> u32 {
        let node = Node {
            key,
            prev: NIL,
            next: NIL,
            list: l as u8,
            meta,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        self.link_front(i, l);
        i
    }

    fn move_front(&mut self, i: u32, l: usize) {
        self.unlink(i);
        self.link_front(i, l);
    }

    fn remove(&mut self, i: u32) -> ExpertKey {
        self.unlink(i);
        let key = self.nodes[i as usize].key;
        self.map.remove(&key);
        self.free.push(i);
        key
    }

    fn pop_back(&mut self, l: usize) -> Option<ExpertKey> {
        let t = self.tail[l];
        (t != NIL).then(|| self.remove(t))
    }

    /// The oldest node of list `l` that is not pinned.
    fn oldest_unpinned(&self, l: usize, pinned: &dyn Fn(ExpertKey) -> bool) -> Option<u32> {
        let mut i = self.tail[l];
        while i != NIL {
            if !pinned(self.key(i)) {
                return Some(i);
            }
            i = self.newer(i);
        }
        None
    }
}

// ---------------------------------------------------------------------------------------------

/// LRU (recency; `touch = true`) or FIFO (insertion order; `touch = false`).
struct Lru {
    cap: usize,
    touch: bool,
    q: Lists,
}

impl Lru {
    fn new(cap: usize, touch: bool) -> Lru {
        Lru {
            cap,
            touch,
            q: Lists::new(1),
        }
    }
}

impl Policy for Lru {
    fn name(&self) -> &'static str {
        if self.touch {
            "lru"
        } else {
            "fifo"
        }
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.q.len(0)
    }
    fn on_hit(&mut self, key: ExpertKey) {
        if self.touch {
            if let Some(i) = self.q.find(key) {
                self.q.move_front(i, 0);
            }
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        let victim = if self.q.len(0) >= self.cap {
            let i = self
                .q
                .oldest_unpinned(0, pinned)
                .ok_or_else(|| no_victim(self.name()))?;
            Some(self.q.remove(i))
        } else {
            None
        };
        self.q.insert_front(0, key, 0);
        Ok(victim)
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            self.q.remove(i);
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// SIEVE: one FIFO queue with a visited bit and a hand that moves from the oldest entry toward
/// the newest, clearing visited bits and evicting the first unvisited entry; hits only set the
/// bit (no reordering).
struct Sieve {
    cap: usize,
    q: Lists,
    hand: u32,
}

impl Sieve {
    fn new(cap: usize) -> Sieve {
        Sieve {
            cap,
            q: Lists::new(1),
            hand: NIL,
        }
    }
}

impl Policy for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.q.len(0)
    }
    fn on_hit(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            self.q.set_meta(i, 1);
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        let mut victim = None;
        if self.q.len(0) >= self.cap {
            let mut i = if self.hand == NIL {
                self.q.tail(0)
            } else {
                self.hand
            };
            // Two full turns clear every visited bit; an unpinned entry exists by contract.
            let mut steps = 2 * self.q.len(0) + 2;
            loop {
                if steps == 0 {
                    return Err(no_victim("sieve"));
                }
                steps -= 1;
                let newer = self.q.newer(i);
                if !pinned(self.q.key(i)) {
                    if self.q.meta(i) == 1 {
                        self.q.set_meta(i, 0);
                    } else {
                        self.hand = newer;
                        victim = Some(self.q.remove(i));
                        break;
                    }
                }
                i = if newer == NIL { self.q.tail(0) } else { newer };
            }
        }
        self.q.insert_front(0, key, 0);
        Ok(victim)
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            if self.hand == i {
                self.hand = self.q.newer(i);
            }
            self.q.remove(i);
        }
    }
}

// ---------------------------------------------------------------------------------------------

const S3_SMALL: usize = 0;
const S3_MAIN: usize = 1;
const S3_GHOST: usize = 2;

/// S3-FIFO: a small FIFO (10 % of the slots) that filters one-hit wonders, a main FIFO with
/// 2-bit frequencies (reinsertion while the frequency is non-zero, decremented each time), and
/// a ghost FIFO of keys recently evicted from the small queue (as many as the main queue holds).
/// A new key enters the small queue, or the main queue if it is in the ghost queue. An entry
/// leaving the small queue moves to the main queue if it was requested again while there.
struct S3Fifo {
    cap: usize,
    small_cap: usize,
    ghost_cap: usize,
    q: Lists,
}

impl S3Fifo {
    fn new(cap: usize) -> S3Fifo {
        let small_cap = (cap / 10).max(1);
        S3Fifo {
            cap,
            small_cap,
            ghost_cap: (cap - small_cap.min(cap)).max(1),
            q: Lists::new(3),
        }
    }

    fn evict(&mut self, pinned: &dyn Fn(ExpertKey) -> bool) -> Result<ExpertKey> {
        if self.q.len(S3_SMALL) >= self.small_cap || self.q.len(S3_MAIN) == 0 {
            if let Some(k) = self.evict_small(pinned) {
                return Ok(k);
            }
            self.evict_main(pinned).ok_or_else(|| no_victim("s3-fifo"))
        } else {
            if let Some(k) = self.evict_main(pinned) {
                return Ok(k);
            }
            // Every main entry is pinned: take the oldest unpinned small entry.
            let i = self
                .q
                .oldest_unpinned(S3_SMALL, pinned)
                .ok_or_else(|| no_victim("s3-fifo"))?;
            Ok(self.demote_to_ghost(i))
        }
    }

    fn demote_to_ghost(&mut self, i: u32) -> ExpertKey {
        let k = self.q.key(i);
        self.q.set_meta(i, 0);
        self.q.move_front(i, S3_GHOST);
        if self.q.len(S3_GHOST) > self.ghost_cap {
            self.q.pop_back(S3_GHOST);
        }
        k
    }

    fn evict_small(&mut self, pinned: &dyn Fn(ExpertKey) -> bool) -> Option<ExpertKey> {
        loop {
            let t = self.q.tail(S3_SMALL);
            if t == NIL {
                return None;
            }
            if self.q.meta(t) > 0 || pinned(self.q.key(t)) {
                self.q.move_front(t, S3_MAIN);
            } else {
                return Some(self.demote_to_ghost(t));
            }
        }
    }

    fn evict_main(&mut self, pinned: &dyn Fn(ExpertKey) -> bool) -> Option<ExpertKey> {
        // Stop after a full turn of nothing but pinned entries.
        let mut pinned_in_a_row = 0;
        loop {
            let t = self.q.tail(S3_MAIN);
            if t == NIL || pinned_in_a_row >= self.q.len(S3_MAIN) {
                return None;
            }
            if pinned(self.q.key(t)) {
                pinned_in_a_row += 1;
                self.q.move_front(t, S3_MAIN);
            } else if self.q.meta(t) > 0 {
                pinned_in_a_row = 0;
                let f = self.q.meta(t) - 1;
                self.q.set_meta(t, f);
                self.q.move_front(t, S3_MAIN);
            } else {
                return Some(self.q.remove(t));
            }
        }
    }
}

impl Policy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3-fifo"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.q.len(S3_SMALL) + self.q.len(S3_MAIN)
    }
    fn on_hit(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            let f = self.q.meta(i);
            self.q.set_meta(i, (f + 1).min(3));
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        let ghost = match self.q.find(key) {
            Some(i) if self.q.list(i) == S3_GHOST => {
                self.q.remove(i);
                true
            }
            Some(_) => {
                return Err(Error::internal(format!(
                    "s3-fifo: miss for resident key {key}"
                )))
            }
            None => false,
        };
        let victim = if self.resident() >= self.cap {
            Some(self.evict(pinned)?)
        } else {
            None
        };
        self.q
            .insert_front(if ghost { S3_MAIN } else { S3_SMALL }, key, 0);
        Ok(victim)
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            if self.q.list(i) != S3_GHOST {
                self.q.remove(i);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;

/// ARC: recency list T1, frequency list T2, their ghost lists B1 and B2, and the adaptive target
/// size p of T1 (raised by hits in B1, lowered by hits in B2).
struct ArcPolicy {
    cap: usize,
    p: usize,
    q: Lists,
}

impl ArcPolicy {
    fn new(cap: usize) -> ArcPolicy {
        ArcPolicy {
            cap,
            p: 0,
            q: Lists::new(4),
        }
    }

    /// REPLACE of the ARC paper: evict the LRU of T1 (to B1) or of T2 (to B2), skipping pinned
    /// entries and taking the other list if one has nothing unpinned.
    fn replace(&mut self, in_b2: bool, pinned: &dyn Fn(ExpertKey) -> bool) -> Result<ExpertKey> {
        let t1 = self.q.len(T1);
        let first = if t1 >= 1 && (t1 > self.p || (in_b2 && t1 == self.p)) {
            T1
        } else {
            T2
        };
        let other = if first == T1 { T2 } else { T1 };
        let (i, from) = match self.q.oldest_unpinned(first, pinned) {
            Some(i) => (i, first),
            None => (
                self.q
                    .oldest_unpinned(other, pinned)
                    .ok_or_else(|| no_victim("arc"))?,
                other,
            ),
        };
        let k = self.q.key(i);
        self.q.move_front(i, if from == T1 { B1 } else { B2 });
        Ok(k)
    }

    fn full(&self) -> bool {
        self.q.len(T1) + self.q.len(T2) >= self.cap
    }
}

impl Policy for ArcPolicy {
    fn name(&self) -> &'static str {
        "arc"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.q.len(T1) + self.q.len(T2)
    }
    fn on_hit(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            self.q.move_front(i, T2);
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        let (b1, b2) = (self.q.len(B1), self.q.len(B2));
        match self.q.find(key) {
            Some(i) if self.q.list(i) == B1 => {
                self.p = (self.p + (b2 / b1).max(1)).min(self.cap);
                let v = if self.full() {
                    Some(self.replace(false, pinned)?)
                } else {
                    None
                };
                self.q.move_front(i, T2);
                Ok(v)
            }
            Some(i) if self.q.list(i) == B2 => {
                self.p = self.p.saturating_sub((b1 / b2).max(1));
                let v = if self.full() {
                    Some(self.replace(true, pinned)?)
                } else {
                    None
                };
                self.q.move_front(i, T2);
                Ok(v)
            }
            Some(_) => Err(Error::internal(format!("arc: miss for resident key {key}"))),
            None => {
                let l1 = self.q.len(T1) + b1;
                let mut v = None;
                if l1 >= self.cap {
                    if self.q.len(T1) < self.cap {
                        self.q.pop_back(B1);
                        if self.full() {
                            v = Some(self.replace(false, pinned)?);
                        }
                    } else {
                        // T1 holds the whole cache: drop its LRU without a ghost.
                        let i = match self.q.oldest_unpinned(T1, pinned) {
                            Some(i) => i,
                            None => self
                                .q
                                .oldest_unpinned(T2, pinned)
                                .ok_or_else(|| no_victim("arc"))?,
                        };
                        v = Some(self.q.remove(i));
                    }
                } else {
                    let total = l1 + self.q.len(T2) + b2;
                    if total >= self.cap {
                        if total >= 2 * self.cap && self.q.pop_back(B2).is_none() {
                            self.q.pop_back(B1);
                        }
                        if self.full() {
                            v = Some(self.replace(false, pinned)?);
                        }
                    }
                }
                self.q.insert_front(T1, key, 0);
                Ok(v)
            }
        }
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            if matches!(self.q.list(i), T1 | T2) {
                self.q.remove(i);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

const A1IN: usize = 0;
const AM: usize = 1;
const A1OUT: usize = 2;

/// Full 2Q: new keys enter the FIFO A1in (25 % of the slots); keys evicted from it are
/// remembered in the ghost FIFO A1out (50 % of the slots); a miss that finds its key in A1out
/// goes to the LRU Am. Hits in A1in change nothing (correlated references).
struct TwoQ {
    cap: usize,
    kin: usize,
    kout: usize,
    q: Lists,
}

impl TwoQ {
    fn new(cap: usize) -> TwoQ {
        TwoQ {
            cap,
            kin: (cap / 4).max(1),
            kout: (cap / 2).max(1),
            q: Lists::new(3),
        }
    }

    fn reclaim(&mut self, pinned: &dyn Fn(ExpertKey) -> bool) -> Result<ExpertKey> {
        if self.q.len(A1IN) > self.kin {
            if let Some(i) = self.q.oldest_unpinned(A1IN, pinned) {
                return Ok(self.demote_to_ghost(i));
            }
        }
        if let Some(i) = self.q.oldest_unpinned(AM, pinned) {
            return Ok(self.q.remove(i));
        }
        let i = self
            .q
            .oldest_unpinned(A1IN, pinned)
            .ok_or_else(|| no_victim("2q"))?;
        Ok(self.demote_to_ghost(i))
    }

    fn demote_to_ghost(&mut self, i: u32) -> ExpertKey {
        let k = self.q.key(i);
        self.q.move_front(i, A1OUT);
        if self.q.len(A1OUT) > self.kout {
            self.q.pop_back(A1OUT);
        }
        k
    }
}

impl Policy for TwoQ {
    fn name(&self) -> &'static str {
        "2q"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn resident(&self) -> usize {
        self.q.len(A1IN) + self.q.len(AM)
    }
    fn on_hit(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            if self.q.list(i) == AM {
                self.q.move_front(i, AM);
            }
        }
    }
    fn on_miss(
        &mut self,
        key: ExpertKey,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Result<Option<ExpertKey>> {
        let ghost = match self.q.find(key) {
            Some(i) if self.q.list(i) == A1OUT => {
                self.q.remove(i);
                true
            }
            Some(_) => return Err(Error::internal(format!("2q: miss for resident key {key}"))),
            None => false,
        };
        let v = if self.resident() >= self.cap {
            Some(self.reclaim(pinned)?)
        } else {
            None
        };
        self.q.insert_front(if ghost { AM } else { A1IN }, key, 0);
        Ok(v)
    }
    fn remove(&mut self, key: ExpertKey) {
        if let Some(i) = self.q.find(key) {
            if self.q.list(i) != A1OUT {
                self.q.remove(i);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// LFU with dynamic aging (LFU-DA): priority = L + frequency, where L is the priority of the
/// last victim, so that once-popular entries age out; the lowest priority is evicted, the
/// least recently used first among equals.
struct LfuDa {
    cap: usize,
    entries: KeyMap<(u64, u64, u64)>,
    order: BTreeSet<(u64, u64, ExpertKey)>,
    age: u64,
    tick: u64,
}

impl LfuDa {
    fn new(cap: usize) -> LfuDa {
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
struct Lfu {
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
    fn new(cap: usize) -> Lfu {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn k(e: u32) -> ExpertKey {
        ExpertKey::new(1, e)
    }

    /// Replays single-key batches; returns the hit flags.
    fn replay(p: &mut dyn Policy, keys: &[u32]) -> Vec<bool> {
        let mut resident = std::collections::HashSet::new();
        keys.iter()
            .map(|&e| {
                if resident.contains(&e) {
                    p.on_hit(k(e));
                    true
                } else {
                    let pin = |x: ExpertKey| x == k(e);
                    if let Some(v) = p.on_miss(k(e), &pin).unwrap() {
                        assert!(resident.remove(&v.expert));
                    }
                    resident.insert(e);
                    false
                }
            })
            .collect()
    }

    #[test]
    fn lru_and_fifo_textbook() {
        let seq = [1, 2, 3, 1, 4, 2, 5, 1];
        let mut lru = new_policy("lru", 3).unwrap();
        let h = replay(lru.as_mut(), &seq);
        // LRU: 1 2 3 | 1 hit | 4 evicts 2 | 2 evicts 3 | 5 evicts 1 | 1 evicts 4
        assert_eq!(h, [false, false, false, true, false, false, false, false]);
        let mut fifo = new_policy("fifo", 3).unwrap();
        let h = replay(fifo.as_mut(), &seq);
        // FIFO: 4 evicts 1, 2 hit, 5 evicts 2, 1 evicts 3
        assert_eq!(h, [false, false, false, true, false, true, false, false]);
    }

    /// Victims of a run of single-key batches.
    fn victims(p: &mut dyn Policy, keys: &[u32]) -> Vec<u32> {
        let mut resident = std::collections::HashSet::new();
        let mut out = Vec::new();
        for &e in keys {
            if resident.contains(&e) {
                p.on_hit(k(e));
            } else {
                let pin = |x: ExpertKey| x == k(e);
                if let Some(v) = p.on_miss(k(e), &pin).unwrap() {
                    resident.remove(&v.expert);
                    out.push(v.expert);
                }
                resident.insert(e);
            }
        }
        out
    }

    #[test]
    fn lfu_counts_outlive_eviction() {
        // a is requested 3 times; b and c alternate. b and c keep their counts while evicted,
        // so each returns stronger, while a (count 3) stays; LRU evicts a at once.
        let mut p = new_policy("lfu", 2).unwrap();
        let v = victims(p.as_mut(), &[0, 0, 0, 1, 2, 1, 2, 1, 2, 1]);
        // c evicts b (1 < 3); b returns with 2 and evicts c (1); c returns with 2 and evicts
        // b (2, older); b returns with 3 and evicts c (2); c returns with 3 and ties a and b
        // at 3: the least recent of them, a, goes; the last b is a hit.
        assert_eq!(v, [1, 2, 1, 2, 0]);
        let mut lru = new_policy("lru", 2).unwrap();
        assert_eq!(victims(lru.as_mut(), &[0, 0, 0, 1, 2, 1, 2, 1, 2, 1]), [0]);
    }

    #[test]
    fn lfu_halving_lets_stale_popularity_fade() {
        // a was requested 1000 times long ago; then only b and c. Without the periodic halving
        // a's count would keep it resident forever; with it, a is evicted within a few windows
        // (window = 10 × 2 slots = 20 requests): its count, about 20 when b and c start,
        // halves each window while theirs settle near 10.
        let mut p = new_policy("lfu", 2).unwrap();
        let mut keys = vec![0u32; 1000];
        for i in 0..300 {
            keys.push(1 + (i % 2));
        }
        let v = victims(p.as_mut(), &keys);
        let first_a = v.iter().position(|&x| x == 0).expect("a is evicted");
        assert!(
            first_a < 60,
            "a evicted only after {first_a} other evictions"
        );
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let e = new_policy("mru", 4).err().unwrap();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("`mru`") && e.message.contains("s3-fifo"));
        assert_eq!(new_policy("lru", 0).err().unwrap().exit_code(), 2);
    }
}
