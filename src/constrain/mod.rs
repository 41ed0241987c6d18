//! Placeholder of the interface agreed with `constrain-core` (issue 25): only the mask and the
//! constraint trait, so the session can be wired before the schema compiler lands. Replaced
//! by constrain-core's module on merge.

/// The admitted ids of one step: a bitset over the vocabulary (bit id%64 of word id/64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    words: Vec<u64>,
    v: usize,
}

impl Mask {
    /// All clear.
    pub fn new(v: usize) -> Mask {
        Mask {
            words: vec![0; v.div_ceil(64)],
            v,
        }
    }
    /// Is `id` admitted?
    pub fn allows(&self, id: u32) -> bool {
        (id as usize) < self.v && self.words[id as usize / 64] >> (id % 64) & 1 == 1
    }
    /// Admitted ids.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
    /// Admitted ids, ascending.
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
    /// Clears every id.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }
    /// Admits every id.
    pub fn fill(&mut self) {
        self.words.fill(u64::MAX);
        let r = self.v % 64;
        if r != 0 {
            if let Some(l) = self.words.last_mut() {
                *l = (1u64 << r) - 1;
            }
        }
    }
    /// Admits `id`.
    pub fn set(&mut self, id: u32) {
        if (id as usize) < self.v {
            self.words[id as usize / 64] |= 1 << (id % 64);
        }
    }
    /// Keeps only the ids `o` admits too.
    pub fn and(&mut self, o: &Mask) {
        for (a, b) in self.words.iter_mut().zip(&o.words) {
            *a &= b;
        }
    }
    /// The vocabulary size.
    pub fn len(&self) -> usize {
        self.v
    }
    /// True for an empty vocabulary.
    pub fn is_empty(&self) -> bool {
        self.v == 0
    }
}

/// Why an id was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected(pub String);

/// A constraint on one sequence's generated ids (ENGINE.md §8 "Constraints").
pub trait Constraint: Send + Sync + std::fmt::Debug {
    /// Writes into `mask` the ids that may come next.
    fn mask(&mut self, remaining: Option<usize>, mask: &mut Mask);
    /// Advances past `id`.
    fn accept(&mut self, id: u32) -> Result<(), Rejected>;
    /// The ids so far are a complete output.
    fn is_complete(&self) -> bool;
    /// A copy at the same point.
    fn boxed_clone(&self) -> Box<dyn Constraint>;
}
