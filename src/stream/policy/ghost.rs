//! Policies with ghost queues of recently evicted keys: S3-FIFO, ARC and full 2Q.

use super::lists::{Lists, NIL};
use super::{no_victim, ExpertKey, Policy};
use crate::error::{Error, Result};

const S3_SMALL: usize = 0;
const S3_MAIN: usize = 1;
const S3_GHOST: usize = 2;

/// S3-FIFO: a small FIFO (10 % of the slots) that filters one-hit wonders, a main FIFO with
/// 2-bit frequencies (reinsertion while the frequency is non-zero, decremented each time), and
/// a ghost FIFO of keys recently evicted from the small queue (as many as the main queue holds).
/// A new key enters the small queue, or the main queue if it is in the ghost queue. An entry
/// leaving the small queue moves to the main queue if it was requested again while there.
pub(super) struct S3Fifo {
    cap: usize,
    small_cap: usize,
    ghost_cap: usize,
    q: Lists,
}

impl S3Fifo {
    pub(super) fn new(cap: usize) -> S3Fifo {
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
pub(super) struct ArcPolicy {
    cap: usize,
    p: usize,
    q: Lists,
}

impl ArcPolicy {
    pub(super) fn new(cap: usize) -> ArcPolicy {
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
pub(super) struct TwoQ {
    cap: usize,
    kin: usize,
    kout: usize,
    q: Lists,
}

impl TwoQ {
    pub(super) fn new(cap: usize) -> TwoQ {
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
