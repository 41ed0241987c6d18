//! The admitted ids of one step as a bitset over the vocabulary (ENGINE.md §8 "Constraints").

/// The admitted ids of one step: bit `id % 64` of word `id / 64`; ids ≥ `v` are never set.
#[derive(Clone, PartialEq, Eq)]
pub struct Mask {
    words: Vec<u64>,
    v: usize,
}

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mask {{ v: {}, admitted: {} }}", self.v, self.count())
    }
}

impl Mask {
    /// A mask over `v` ids with every id cleared.
    pub fn new(v: usize) -> Mask {
        Mask {
            words: vec![0; v.div_ceil(64)],
            v,
        }
    }

    /// The vocabulary size the mask covers.
    pub fn len(&self) -> usize {
        self.v
    }

    /// True when the mask covers no id at all (`v == 0`).
    pub fn is_empty(&self) -> bool {
        self.v == 0
    }

    /// Whether `id` may come next (false for ids ≥ `v`).
    #[inline]
    pub fn allows(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.v && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// Admits `id` (ignored when ≥ `v`).
    #[inline]
    pub fn set(&mut self, id: u32) {
        let i = id as usize;
        if i < self.v {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    /// Clears every id.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Copies `other` into `self` (the sizes must match; a smaller `other` fills a prefix).
    pub fn copy_from(&mut self, other: &Mask) {
        let n = self.words.len().min(other.words.len());
        self.words[..n].copy_from_slice(&other.words[..n]);
        self.words[n..].fill(0);
    }

    /// Number of admitted ids.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The admitted ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    /// The only admitted id, when exactly one is admitted (a forced id: no draw).
    pub fn single(&self) -> Option<u32> {
        let mut it = self.iter();
        let first = it.next()?;
        it.next().is_none().then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_allows_count_iter() {
        let mut m = Mask::new(130);
        assert_eq!(m.count(), 0);
        for id in [0, 63, 64, 129, 130, 500] {
            m.set(id);
        }
        assert!(m.allows(0) && m.allows(63) && m.allows(64) && m.allows(129));
        assert!(!m.allows(130) && !m.allows(1) && !m.allows(9999));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        assert_eq!(m.count(), 4);
        assert_eq!(m.single(), None);
        m.clear();
        m.set(7);
        assert_eq!(m.single(), Some(7));
    }
}
