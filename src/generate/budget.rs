//! The thinking budget as a constraint (ENGINE.md §8 "Constraints"): once the think channel
//! holds `budget` generated ids and the model has not closed it, the mask admits only the next
//! id of the channel's closing as the template writes it (TOKENIZER.md §10: close(`think`) +
//! open(`response`)), so the reply continues in the response channel. A mask that admits one
//! id is that id whatever the logits say: the sampler's candidate step is skipped for it, and
//! the logits hash still sees the logits as computed. The forced id is a pure function of the
//! ids generated in the turn and the budget, so draws stay reproducible everywhere (a resumed
//! or speculative sequence computes the same mask).

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

#[cfg(test)]
mod tests {
    use super::ThinkBudget;

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
