//! Prompt-lookup drafts (ENGINE.md §10): the longest earlier occurrence of a sequence's most
//! recent ids proposes the ids that followed it.

use super::DraftSource;

/// Drafts from the sequence itself: for match lengths from `max_match` down to 1, the most
/// recent earlier occurrence of the last that many ids; the draft is what followed it, read
/// on periodically past the end (a repeating pattern keeps repeating). No match: no draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptLookup {
    /// The longest match length tried (at least 1).
    pub max_match: usize,
}

impl Default for PromptLookup {
    /// Match lengths 4 down to 1.
    fn default() -> PromptLookup {
        PromptLookup { max_match: 4 }
    }
}

impl PromptLookup {
    /// The start of the most recent earlier occurrence of the last `m` ids of `ids` (before
    /// the suffix itself starts), if any.
    fn find(ids: &[u32], m: usize) -> Option<usize> {
        let n = ids.len();
        if m == 0 || n <= m {
            return None;
        }
        let suffix = &ids[n - m..];
        (0..n - m).rev().find(|&j| &ids[j..j + m] == suffix)
    }
}

impl DraftSource for PromptLookup {
    fn draft(&mut self, ids: &[u32], max: usize, out: &mut Vec<u32>) {
        if max == 0 {
            return;
        }
        let n = ids.len();
        for m in (1..=self.max_match.max(1).min(n.saturating_sub(1))).rev() {
            if let Some(j) = Self::find(ids, m) {
                for t in 0..max {
                    let at = j + m + t;
                    // j + m < n, so past the end the draft reads its own earlier ids
                    let id = if at < n { ids[at] } else { out[at - n] };
                    out.push(id);
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(ids: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        PromptLookup::default().draft(ids, max, &mut out);
        out
    }

    #[test]
    fn longest_match_wins_over_a_more_recent_shorter_one() {
        // suffix [1, 2, 3]: the occurrence at 0 is followed by 4; [3] alone recurs later (→ 9)
        assert_eq!(draft(&[1, 2, 3, 4, 5, 3, 9, 1, 2, 3], 2), vec![4, 5]);
    }

    #[test]
    fn most_recent_occurrence_and_periodic_extension() {
        assert_eq!(draft(&[7, 1, 8, 1, 6, 1], 1), vec![6]);
        assert_eq!(draft(&[5, 5, 5], 4), vec![5, 5, 5, 5]);
        assert_eq!(draft(&[1, 2, 1, 2, 1], 5), vec![2, 1, 2, 1, 2]);
    }

    #[test]
    fn no_match_no_draft() {
        assert!(draft(&[1, 2, 3, 4], 3).is_empty());
        assert!(draft(&[1], 3).is_empty());
        assert!(draft(&[1, 1], 0).is_empty());
    }
}
