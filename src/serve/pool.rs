//! The snapshot pool (ENGINE.md §9, §11): snapshots taken at the end of each request's prompt,
//! at most `capacity` of them (planned with the session, so the pool never grows past its
//! plan), the least recently used evicted. A request whose ids start with a held snapshot's
//! ids continues from the longest one instead of prefilling everything again.

use crate::generate::session::Snapshot;

/// One held snapshot: the ids it covers and when it was last used.
#[derive(Debug)]
struct Entry {
    ids: Vec<u32>,
    snap: Snapshot,
    used: u64,
}

/// A bounded LRU pool of snapshots keyed by their ids.
#[derive(Debug, Default)]
pub struct SnapshotPool {
    capacity: usize,
    entries: Vec<Entry>,
    clock: u64,
}

impl SnapshotPool {
    /// A pool of at most `capacity` snapshots (0: no reuse).
    pub fn new(capacity: usize) -> SnapshotPool {
        SnapshotPool {
            capacity,
            entries: Vec::new(),
            clock: 0,
        }
    }

    /// Snapshots held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The longest held snapshot whose ids are a prefix of `ids` (equal ids included), marked
    /// used; `None` when no snapshot is a prefix.
    pub fn longest_prefix(&mut self, ids: &[u32]) -> Option<(usize, &Snapshot)> {
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.ids.len() <= ids.len() && ids.starts_with(&e.ids))
            .max_by_key(|(_, e)| e.ids.len())
            .map(|(i, _)| i)?;
        self.clock += 1;
        let e = &mut self.entries[best];
        e.used = self.clock;
        Some((e.ids.len(), &e.snap))
    }

    /// Holds `snap` of `ids` (replacing one of the same ids), evicting the least recently
    /// used snapshot when the pool is full.
    pub fn insert(&mut self, ids: Vec<u32>, snap: Snapshot) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.ids == ids) {
            e.snap = snap;
            e.used = self.clock;
            return;
        }
        if self.entries.len() >= self.capacity {
            if let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) {
                self.entries.swap_remove(i);
            }
        }
        self.entries.push(Entry {
            ids,
            snap,
            used: self.clock,
        });
    }

    /// Whether a snapshot of exactly `ids` is held.
    pub fn holds(&self, ids: &[u32]) -> bool {
        self.entries.iter().any(|e| e.ids == ids)
    }
}
