//! The thinking budget as a constraint (ENGINE.md §8 "Constraints"): once the think channel
//! holds `budget` generated ids and the model has not closed it, the mask admits only the next
//! id of the channel's closing as the template writes it (TOKENIZER.md §10: close(`think`) +
//! open(`response`)), so the reply continues in the response channel. A mask that admits one
//! id is that id whatever the logits say: the sampler's candidate step is skipped for it, and
//! the logits hash still sees the logits as computed. The forced id is a pure function of the
//! ids generated in the turn and the budget, so draws stay reproducible everywhere (a resumed
//! or speculative sequence computes the same mask).

use crate::constrain::{Constraint, Mask, Rejected};

/// A think channel's budget and the ids that close it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkBudget {
    /// Think-channel ids the reply may hold (≥ 1).
    pub budget: usize,
    /// The closing ids as the template writes them, starting with `<|close|>`
    /// (`<|close|>think<|sep|><|open|>response<|sep|>`); never empty.
    pub close: Vec<u32>,
}

impl ThinkBudget {
    /// The id the mask admits after `generated` (the turn's ids so far), if the constraint
    /// binds: the model closed the channel itself within the budget (its first `<|close|>`
    /// at an index below `budget`) → never; else the closing ids from index `budget` on.
    pub fn forced(&self, generated: &[u32]) -> Option<u32> {
        let first = *self.close.first()?;
        let head = &generated[..generated.len().min(self.budget)];
        if head.contains(&first) {
            return None;
        }
        let k = generated.len().checked_sub(self.budget)?;
        self.close.get(k).copied()
    }
}

/// The budget as a [`Constraint`] on the turn's generated ids: one mechanism with the
/// response and tool constraints (the session intersects their masks), so a reply
/// constraint sees the budget's forced closing as ids it must admit (a free think channel
/// admits `<|close|>`).
#[derive(Debug, Clone)]
pub struct BudgetConstraint {
    b: ThinkBudget,
    /// Ids accepted in the turn.
    seen: usize,
    /// The model wrote `<|close|>` within the budget: the constraint never binds.
    closed: bool,
    /// Every id admitted (built once at the mask's size, then copied: the budget binds on
    /// a few ids of a turn and admits everything on all the others).
    all: Option<Mask>,
}

impl BudgetConstraint {
    /// The constraint of `b` at the turn's start.
    pub fn new(b: ThinkBudget) -> BudgetConstraint {
        BudgetConstraint {
            b,
            seen: 0,
            closed: false,
            all: None,
        }
    }

    /// [`ThinkBudget::forced`] at this point.
    fn forced(&self) -> Option<u32> {
        if self.closed {
            return None;
        }
        let k = self.seen.checked_sub(self.b.budget)?;
        self.b.close.get(k).copied()
    }
}

impl Constraint for BudgetConstraint {
    fn mask(&mut self, _remaining: Option<usize>, mask: &mut Mask) {
        match self.forced() {
            Some(id) => {
                mask.clear();
                mask.set(id);
            }
            None => {
                let v = mask.len();
                let all = self.all.get_or_insert_with(|| {
                    let mut m = Mask::new(v);
                    for id in 0..v as u32 {
                        m.set(id);
                    }
                    m
                });
                mask.copy_from(all);
            }
        }
    }
    fn accept(&mut self, id: u32) -> Result<(), Rejected> {
        if let Some(f) = self.forced() {
            if f != id {
                return Err(Rejected {
                    id,
                    reason: format!(
                        "the thinking budget of {} ids admits only id {f} here",
                        self.b.budget
                    ),
                });
            }
        }
        if self.seen < self.b.budget && self.b.close.first() == Some(&id) {
            self.closed = true;
        }
        self.seen += 1;
        Ok(())
    }
    fn is_complete(&self) -> bool {
        self.forced().is_none()
    }
    fn boxed_clone(&self) -> Box<dyn Constraint> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::{BudgetConstraint, ThinkBudget};
    use crate::constrain::{Constraint, Mask};

    /// The constraint admits exactly what [`ThinkBudget::forced`] says after the same ids
    /// (one id when it binds, every id otherwise).
    #[test]
    fn the_constraint_agrees_with_forced() {
        let b = ThinkBudget {
            budget: 3,
            close: vec![9, 1, 8],
        };
        for ids in [
            vec![5, 5, 5, 9, 1, 8, 4],
            vec![5, 9, 7, 7, 7, 7],
            vec![9, 9, 9],
        ] {
            let mut c = BudgetConstraint::new(b.clone());
            let mut m = Mask::new(10);
            for k in 0..=ids.len() {
                c.mask(None, &mut m);
                match b.forced(&ids[..k]) {
                    Some(f) => assert_eq!(m.iter().collect::<Vec<_>>(), [f]),
                    None => assert_eq!(m.count(), 10),
                }
                if k < ids.len() {
                    c.accept(ids[k]).unwrap();
                }
            }
        }
        let mut c = BudgetConstraint::new(b);
        for id in [5, 5, 5] {
            c.accept(id).unwrap();
        }
        assert!(!c.is_complete());
        assert!(c.accept(4).is_err());
    }

    #[test]
    fn forces_the_closing_once_the_budget_is_spent() {
        let b = ThinkBudget {
            budget: 3,
            close: vec![9, 1, 8],
        };
        assert_eq!(b.forced(&[]), None);
        assert_eq!(b.forced(&[5, 5]), None);
        assert_eq!(b.forced(&[5, 5, 5]), Some(9));
        assert_eq!(b.forced(&[5, 5, 5, 9]), Some(1));
        assert_eq!(b.forced(&[5, 5, 5, 9, 1]), Some(8));
        assert_eq!(b.forced(&[5, 5, 5, 9, 1, 8]), None);
        // closed by the model within the budget: never binds
        assert_eq!(b.forced(&[5, 9, 7]), None);
        assert_eq!(b.forced(&[5, 9, 7, 7, 7]), None);
    }
}
