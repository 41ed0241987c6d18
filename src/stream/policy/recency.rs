//! Recency policies: LRU, FIFO and SIEVE.

use super::lists::{Lists, NIL};
use super::{no_victim, ExpertKey, Policy};
use crate::error::Result;

/// LRU (recency; `touch = true`) or FIFO (insertion order; `touch = false`).
pub(super) struct Lru {
    cap: usize,
    touch: bool,
    q: Lists,
}

impl Lru {
    pub(super) fn new(cap: usize, touch: bool) -> Lru {
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
pub(super) struct Sieve {
    cap: usize,
    q: Lists,
    hand: u32,
}

impl Sieve {
    pub(super) fn new(cap: usize) -> Sieve {
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
