//! Many sequences through one session (ENGINE.md §10): up to `parallel` sequences step together,
//! each step one forward over all of them ([`Session::step`]); the others wait in input order
//! and join (prefilled alone) as sequences finish. Each sequence's ids and logits are the bits
//! it gets alone.

use super::guide::Constraints;
use super::session::{Sequence, SequenceOptions, Session, StepEvent};
use crate::error::Result;
use crate::model::experts::ExpertSource;
use crate::model::TrunkSource;

/// One input of a batch.
#[derive(Debug, Clone)]
pub struct BatchItem {
    /// The input index (output order).
    pub index: u64,
    /// The prompt ids (at least one, each < V).
    pub prompt: Vec<u32>,
    /// Positions the sequence may reach (`--ctx`, or its prompt + gen).
    pub capacity: usize,
    /// Sampler settings and stop rules.
    pub opts: SequenceOptions,
    /// The constraints of its generated ids (ENGINE.md §8; `--json-schema`), maybe none.
    pub constraints: Constraints,
}

/// Totals of a batch run (the report's `batch` object, FORMATS.md §10).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchTotals {
    /// Sequences run.
    pub sequences: u64,
    /// Steps (one forward each) over the active sequences.
    pub sweeps: u64,
    /// Ids generated over every sequence.
    pub tokens: u64,
    /// Seconds of the joiners' prefills.
    pub prefill_seconds: f64,
    /// Seconds of the steps' forwards.
    pub decode_seconds: f64,
}

/// Runs `items` with at most `parallel` (≥ 1) sequences stepping together; `done(index,
/// sequence)` gets each as it finishes (a sequence that cannot be created, e.g. a prompt over
/// its `--ctx`, comes as its error).
///
/// Errors: a failed forward (a read, exit 4; a non-finite value, exit 2) ends the whole run;
/// an error of `done`.
pub fn run_batch<T: TrunkSource, E: ExpertSource>(
    sess: &mut Session<'_, T, E>,
    items: Vec<BatchItem>,
    parallel: usize,
    done: &mut dyn FnMut(u64, Result<Sequence>) -> Result<()>,
) -> Result<BatchTotals> {
    let mut tot = BatchTotals::default();
    let mut queue = items.into_iter();
    let mut active: Vec<(u64, Sequence)> = Vec::new();
    loop {
        while active.len() < parallel.max(1) {
            let Some(it) = queue.next() else { break };
            let mut s = match sess.sequence(&it.prompt, it.capacity, it.opts) {
                Ok(s) => s,
                Err(e) => {
                    done(it.index, Err(e))?;
                    continue;
                }
            };
            s.set_constraints(it.constraints.0);
            sess.prefill(&mut s, None, &mut |_| Ok(()))?;
            tot.prefill_seconds += s.figures().seconds;
            tot.sequences += 1;
            if s.active() {
                active.push((it.index, s));
            } else {
                done(it.index, Ok(s))?;
            }
        }
        if active.is_empty() {
            return Ok(tot);
        }
        let mut refs: Vec<&mut Sequence> = active.iter_mut().map(|(_, s)| s).collect();
        let mut chosen = 0u64;
        let f = sess.step(&mut refs, &mut |ev| {
            if let StepEvent::Chosen(..) = ev {
                chosen += 1;
            }
            Ok(())
        })?;
        tot.tokens += chosen;
        tot.sweeps += 1;
        tot.decode_seconds += f.seconds;
        let mut i = 0;
        while i < active.len() {
            if active[i].1.active() {
                i += 1;
            } else {
                let (index, s) = active.remove(i);
                done(index, Ok(s))?;
            }
        }
    }
}
