//! A sequence's constraints (ENGINE.md §8 "Constraints"): the thinking budget, a response
//! schema, the tool-call syntax — each a [`Constraint`] over the turn's generated ids. The
//! guide intersects their masks at every choice and advances each past the chosen id, so
//! there is one mechanism whatever combination a request asks for. The mask is a pure
//! function of the ids accepted so far (and the ids left), so a batch, a resumed state and a
//! speculative sweep compute the same one.

use crate::constrain::{Constraint, Mask, Rejected};
use std::sync::Arc;

/// The constraints of one turn and the mask of the current choice.
#[derive(Debug)]
pub struct Guide {
    list: Vec<Box<dyn Constraint>>,
    mask: Mask,
    scratch: Mask,
    v: usize,
    /// A copy of each step's mask goes with the chosen id ([`Admitted`]), for logprobs of
    /// the masked distribution.
    pub keep_masks: bool,
}

impl Clone for Guide {
    fn clone(&self) -> Guide {
        Guide {
            list: self.list.iter().map(|c| c.boxed_clone()).collect(),
            mask: Mask::new(self.v),
            scratch: Mask::new(self.v),
            v: self.v,
            keep_masks: self.keep_masks,
        }
    }
}

impl Guide {
    /// A guide over a vocabulary of `v` ids; `None` for an empty list (nothing constrains).
    pub fn new(list: Vec<Box<dyn Constraint>>, v: usize) -> Option<Guide> {
        if list.is_empty() {
            return None;
        }
        Some(Guide {
            list,
            mask: Mask::new(v),
            scratch: Mask::new(v),
            v,
            keep_masks: false,
        })
    }

    /// The ids every constraint admits next; `remaining` ids may still be generated.
    pub fn mask(&mut self, remaining: Option<usize>) -> &Mask {
        for (i, c) in self.list.iter_mut().enumerate() {
            if i == 0 {
                self.mask.clear();
                c.mask(remaining, &mut self.mask);
            } else {
                self.scratch.clear();
                c.mask(remaining, &mut self.scratch);
                intersect(&mut self.mask, &self.scratch);
            }
        }
        &self.mask
    }

    /// The last mask computed.
    pub fn last_mask(&self) -> &Mask {
        &self.mask
    }

    /// Advances every constraint past `id`.
    ///
    /// Errors: the first constraint that did not admit it (the others may have advanced:
    /// the caller treats it as a bug or drops the guide).
    pub fn accept(&mut self, id: u32) -> Result<(), Rejected> {
        for c in &mut self.list {
            c.accept(id)?;
        }
        Ok(())
    }

    /// Every constraint is complete.
    pub fn is_complete(&self) -> bool {
        self.list.iter().all(|c| c.is_complete())
    }
}

/// `a` ∩ `b` into `a`. A mask that admits every id (a thinking budget that does not bind)
/// costs two counts; otherwise the smaller side is walked.
fn intersect(a: &mut Mask, b: &Mask) {
    let v = a.len();
    let nb = b.count();
    if nb == v {
        return;
    }
    if a.count() == v {
        a.copy_from(b);
        return;
    }
    let keep: Vec<u32> = a.iter().filter(|&id| b.allows(id)).collect();
    a.clear();
    for id in keep {
        a.set(id);
    }
}

/// The ids a constraint admitted when an id was chosen (for logprobs of the masked
/// distribution). Compares by the admitted ids.
#[derive(Clone)]
pub struct Admitted(pub Arc<Mask>);

impl PartialEq for Admitted {
    fn eq(&self, o: &Admitted) -> bool {
        self.0.iter().eq(o.0.iter())
    }
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Admitted({} ids)", self.0.count())
    }
}

/// Constraints to give a sequence at its turn's start (a batch line, a server job): a list
/// that clones by [`Constraint::boxed_clone`].
#[derive(Debug, Default)]
pub struct Constraints(pub Vec<Box<dyn Constraint>>);

impl Clone for Constraints {
    fn clone(&self) -> Constraints {
        Constraints(self.0.iter().map(|c| c.boxed_clone()).collect())
    }
}

/// Equal when they print the same (tests compare decoded requests; a constraint has no other
/// identity).
impl PartialEq for Constraints {
    fn eq(&self, o: &Constraints) -> bool {
        format!("{:?}", self.0) == format!("{:?}", o.0)
    }
}

impl Constraints {
    /// One constraint.
    pub fn one(c: Box<dyn Constraint>) -> Constraints {
        Constraints(vec![c])
    }
    /// True without any.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
