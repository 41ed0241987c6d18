//! Intrusive doubly linked lists over one node arena, several lists per policy (resident queues
//! and ghost queues). Head = newest / most recently used, tail = oldest.

use super::ExpertKey;
use crate::stream::KeyMap;

pub(super) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
pub(super) struct Node {
    key: ExpertKey,
    /// Neighbour toward the head (newer).
    prev: u32,
    /// Neighbour toward the tail (older).
    next: u32,
    list: u8,
    /// Per-policy bits: SIEVE visited, S3-FIFO frequency.
    meta: u8,
}

pub(super) struct Lists {
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: Vec<u32>,
    tail: Vec<u32>,
    len: Vec<usize>,
    map: KeyMap<u32>,
}

impl Lists {
    pub(super) fn new(lists: usize) -> Lists {
        Lists {
            nodes: Vec::new(),
            free: Vec::new(),
            head: vec![NIL; lists],
            tail: vec![NIL; lists],
            len: vec![0; lists],
            map: KeyMap::default(),
        }
    }

    pub(super) fn find(&self, key: ExpertKey) -> Option<u32> {
        self.map.get(&key).copied()
    }
    pub(super) fn list(&self, i: u32) -> usize {
        self.nodes[i as usize].list as usize
    }
    pub(super) fn key(&self, i: u32) -> ExpertKey {
        self.nodes[i as usize].key
    }
    pub(super) fn meta(&self, i: u32) -> u8 {
        self.nodes[i as usize].meta
    }
    pub(super) fn set_meta(&mut self, i: u32, m: u8) {
        self.nodes[i as usize].meta = m;
    }
    pub(super) fn len(&self, l: usize) -> usize {
        self.len[l]
    }
    pub(super) fn tail(&self, l: usize) -> u32 {
        self.tail[l]
    }
    pub(super) fn newer(&self, i: u32) -> u32 {
        self.nodes[i as usize].prev
    }

    pub(super) fn unlink(&mut self, i: u32) {
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

    pub(super) fn link_front(&mut self, i: u32, l: usize) {
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

    pub(super) fn insert_front(&mut self, l: usize, key: ExpertKey, meta: u8) -> u32 {
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

    pub(super) fn move_front(&mut self, i: u32, l: usize) {
        self.unlink(i);
        self.link_front(i, l);
    }

    pub(super) fn remove(&mut self, i: u32) -> ExpertKey {
        self.unlink(i);
        let key = self.nodes[i as usize].key;
        self.map.remove(&key);
        self.free.push(i);
        key
    }

    pub(super) fn pop_back(&mut self, l: usize) -> Option<ExpertKey> {
        let t = self.tail[l];
        (t != NIL).then(|| self.remove(t))
    }

    /// The oldest node of list `l` that is not pinned.
    pub(super) fn oldest_unpinned(
        &self,
        l: usize,
        pinned: &dyn Fn(ExpertKey) -> bool,
    ) -> Option<u32> {
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
