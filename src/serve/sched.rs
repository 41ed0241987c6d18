//! The scheduler (ENGINE.md §10, §11): one thread owns the [`Session`]; request handlers
//! submit [`Job`]s to a bounded [`Queue`] and receive [`Event`]s on their own channel. Up to
//! `parallel` sequences are active; each step is one forward over all of them
//! ([`Session::step`]), so a sequence's ids and logits are the bits it gets alone. A job joins
//! at the next step (prefilled alone, from the longest held snapshot of its prefix); a job
//! whose receiver is gone (the client disconnected, or the handler stopped at a `stop`
//! string) leaves at the next step, is cut at the next prefill chunk, or is never started
//! when it left while queued. A failed step fails that step's jobs; the server stays up.

use super::metrics::Metrics;
use super::pool::SnapshotPool;
use super::reply::{token_logprob, TokenLogprob};
use crate::error::Result;
use crate::generate::budget::{BudgetConstraint, ThinkBudget};
use crate::generate::guide::Constraints;
use crate::generate::sample::SamplerSettings;
use crate::generate::session::{Progress, Sequence, SequenceOptions, Session, StepEvent};
use crate::generate::stop::{StopReason, StopRules};
use crate::model::experts::ExpertSource;
use crate::model::TrunkSource;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// One generation asked of the scheduler.
#[derive(Debug)]
pub struct Job {
    /// The prompt ids (each < V; fewer than `--ctx`).
    pub ids: Vec<u32>,
    /// Sampler settings, seed resolved.
    pub settings: SamplerSettings,
    /// Ids to generate at most (the request's `max_tokens`, else up to the context).
    pub max_tokens: u64,
    /// With `logprobs`: each chosen id's log-probability and this many best alternatives
    /// (`top_logprobs`) are sent with it.
    pub logprobs: Option<usize>,
    /// Where the job's events go; a failed send ends the job.
    pub events: Sender<Event>,
    /// The thinking budget (Messages' `thinking.budget_tokens`), a constraint of the turn
    /// (boxed: a queue refusal hands the job back by value).
    pub think_budget: Option<Box<ThinkBudget>>,
    /// The reply's constraints (ENGINE.md §8: `response_format`, tools per `tool_choice`),
    /// composed with the budget's.
    pub constraints: Box<Constraints>,
}

/// What a job's handler is told, in order: `Started`, `Progress`…, `Token`…, then `Done` or
/// `Failed`.
#[derive(Debug, Clone)]
pub enum Event {
    /// The job has a slot: `cached` prompt ids came from a held snapshot.
    Started {
        /// Prompt ids reused (`usage.prompt_tokens_details.cached_tokens`).
        cached: usize,
    },
    /// `done` of `total` prompt ids to prefill have run.
    Progress {
        /// Positions run so far in this prefill.
        done: usize,
        /// Positions this prefill runs.
        total: usize,
    },
    /// The next generated id, with the logits it was chosen from when asked.
    Token {
        /// The id.
        id: u32,
        /// Its log-probability and best alternatives, from the logits it was chosen from
        /// (`logprobs`; computed here, so a slow client holds a few numbers per id, not V
        /// floats, and the memory plan stays whole).
        logprob: Option<TokenLogprob>,
    },
    /// Generation ended: an end id, `max_tokens` or the context.
    Done(StopReason),
    /// The job failed (a read failure in its step, exit-4 class): no further events.
    Failed(String),
}

#[derive(Debug, Default)]
struct State {
    waiting: VecDeque<Job>,
    /// Jobs holding a slot (told by the scheduler).
    active: usize,
    shutdown: bool,
}

/// The bounded queue between the handlers and the scheduler thread.
#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    wake: Condvar,
    /// Jobs waiting at most (`--queue`); beyond it [`Queue::submit`] refuses.
    pub max_waiting: usize,
    /// Jobs that may be active at once (`--parallel`).
    pub parallel: usize,
}

/// One id a step chose for a slot: (the slot's index among the active ones, the id, the stop
/// it made, its log-probability when the slot asked for logprobs).
type ChosenId = (usize, u32, Option<StopReason>, Option<TokenLogprob>);

impl Queue {
    /// A queue of at most `max_waiting` waiting jobs for `parallel` slots.
    pub fn new(max_waiting: usize, parallel: usize) -> Queue {
        Queue {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            max_waiting,
            parallel: parallel.max(1),
        }
    }

    /// Queues `job`; gives it back when every slot is taken and `max_waiting` jobs already
    /// wait, or the server is shutting down (the handler answers 503 with `Retry-After`).
    pub fn submit(&self, job: Job) -> std::result::Result<(), Job> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // `--queue` may be any count: the sum saturates instead of wrapping to a full queue
        let room = self.parallel.saturating_add(self.max_waiting);
        if st.shutdown || st.waiting.len() + st.active >= room {
            return Err(job);
        }
        st.waiting.push_back(job);
        self.wake.notify_one();
        Ok(())
    }

    /// Jobs waiting now.
    pub fn depth(&self) -> usize {
        self.state.lock().map(|s| s.waiting.len()).unwrap_or(0)
    }

    /// The scheduler tells how many jobs hold a slot.
    fn set_active(&self, n: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.active = n;
    }

    /// Refuses new jobs from now on and wakes the scheduler.
    pub fn close(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.shutdown = true;
        self.wake.notify_all();
    }

    /// The next waiting job (it then counts as active); waits up to `wait` when `block`
    /// (None on timeout or when none).
    fn next(&self, block: bool, wait: Duration) -> Option<Job> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if block && st.waiting.is_empty() && !st.shutdown {
            st = self
                .wake
                .wait_timeout(st, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        let job = st.waiting.pop_front();
        st.active += job.is_some() as usize;
        job
    }
}

/// What the scheduler needs besides the session.
pub struct Scheduler<'a> {
    /// The job queue.
    pub queue: &'a Queue,
    /// The snapshot pool (prefix reuse).
    pub pool: SnapshotPool,
    /// Positions per sequence (`--ctx`).
    pub ctx: usize,
    /// End ids (`[EOS]`, `<|end_of_msg|>`, `--stop-id`).
    pub end_ids: Vec<u32>,
    /// V, for the stop rules.
    pub vocab: usize,
    /// Counters for `/metrics`.
    pub metrics: &'a Metrics,
    /// Raised by SIGINT/SIGTERM: finish the active jobs (within `drain`), take no new ones.
    pub stop: &'a AtomicBool,
    /// How long active jobs may run after `stop` before they are cancelled.
    pub drain: Duration,
}

/// An active job.
struct Active {
    seq: Sequence,
    events: Sender<Event>,
    logprobs: Option<usize>,
}

impl Scheduler<'_> {
    /// Runs jobs until `stop` is raised and the active jobs finished (or `drain` passed).
    ///
    /// Errors: none from jobs (each failure goes to its job); an internal error of the loop.
    pub fn run<T: TrunkSource, E: ExpertSource>(&mut self, sess: &mut Session<'_, T, E>) {
        let mut active: Vec<Active> = Vec::new();
        let mut draining: Option<Instant> = None;
        loop {
            if self.stop.load(Ordering::SeqCst) && draining.is_none() {
                self.queue.close();
                draining = Some(Instant::now());
            }
            // jobs queued before a shutdown still run, within the drain bound
            while active.len() < self.queue.parallel {
                let block = active.is_empty() && draining.is_none();
                let Some(job) = self.queue.next(block, Duration::from_millis(100)) else {
                    break;
                };
                if let Some(a) = self.start(sess, job) {
                    active.push(a);
                }
            }
            self.queue.set_active(active.len());
            self.metrics.set_active(active.len(), self.queue.depth());
            if active.is_empty() {
                if draining.is_some() && self.queue.depth() == 0 {
                    return;
                }
                continue;
            }
            if draining.is_some_and(|t| t.elapsed() > self.drain) {
                for a in active.drain(..) {
                    let _ = a.events.send(Event::Failed(
                        "the server is shutting down; the request was cancelled".to_string(),
                    ));
                }
                continue;
            }
            self.step(sess, &mut active);
        }
    }

    /// Gives `job` a sequence: from the longest held snapshot of its prefix, else fresh;
    /// prefills what is new and snapshots the prompt's end. None when the job ended already:
    /// its client is gone (found by the `Started` event, before any prefill, or by a progress
    /// event between prefill chunks, which cuts the prefill short), or its prefill failed.
    fn start<T: TrunkSource, E: ExpertSource>(
        &mut self,
        sess: &mut Session<'_, T, E>,
        job: Job,
    ) -> Option<Active> {
        let t0 = Instant::now();
        let res = (|| -> Result<Option<(Sequence, usize)>> {
            let rules = StopRules::new(
                self.end_ids.clone(),
                Vec::new(),
                Vec::new(),
                job.max_tokens,
                self.ctx as u64,
                self.vocab,
            )?;
            let o = SequenceOptions {
                settings: job.settings,
                rules: rules.clone(),
                all_rows: false,
            };
            let mut seq = sess.sequence(&job.ids, self.ctx, o)?;
            let mut cached = 0;
            if let Some((len, snap)) = self.pool.longest_prefix(&job.ids) {
                seq.restore(snap)?;
                seq.set_settings(job.settings);
                cached = len;
                if len == job.ids.len() {
                    seq.restart_turn(rules)?;
                } else {
                    seq.continue_with(&job.ids[len..], rules)?;
                }
            }
            // a send fails once the handler dropped its receiver: a client that left while
            // queued costs no prefill
            if job.events.send(Event::Started { cached }).is_err() {
                return Ok(None);
            }
            if cached < job.ids.len() {
                let mut prog = ToEvents {
                    events: &job.events,
                    base: cached,
                    total: job.ids.len() - cached,
                    gone: false,
                };
                sess.prefill(&mut seq, Some(&mut prog), &mut |_| Ok(()))?;
                self.pool.insert(job.ids.clone(), seq.snapshot());
            }
            Ok(Some((seq, cached)))
        })();
        match res {
            Ok(None) => None,
            Ok(Some((mut seq, cached))) => {
                // after any restore: a held snapshot carries the budget of the job that made it
                let mut list = job.constraints.0;
                if let Some(b) = job.think_budget {
                    list.insert(0, Box::new(BudgetConstraint::new(*b)));
                }
                seq.set_constraints(list);
                seq.keep_masks(job.logprobs.is_some());
                self.metrics
                    .prefilled(job.ids.len() - cached, cached, t0.elapsed().as_secs_f64());
                if let Some(r) = seq.stop_reason() {
                    let _ = job.events.send(Event::Done(r));
                    return None;
                }
                Some(Active {
                    seq,
                    events: job.events,
                    logprobs: job.logprobs,
                })
            }
            Err(e) => {
                let _ = job.events.send(Event::Failed(e.message));
                None
            }
        }
    }

    /// One step over every active job; finished, failed and abandoned jobs leave.
    fn step<T: TrunkSource, E: ExpertSource>(
        &mut self,
        sess: &mut Session<'_, T, E>,
        active: &mut Vec<Active>,
    ) {
        // The logits each id is chosen from, for the slots that asked for logprobs: the
        // pending ones for a step's first id; under speculation each later id of a sweep is
        // chosen from its row's logits, told (`Logits`) just before it.
        let tops: Vec<Option<usize>> = active.iter().map(|a| a.logprobs).collect();
        let mut current: Vec<Option<Vec<f32>>> = active
            .iter()
            .map(|a| a.logprobs.map(|_| a.seq.logits().to_vec()))
            .collect();
        let mut chosen: Vec<ChosenId> = Vec::new();
        let res = {
            let mut refs: Vec<&mut Sequence> = active.iter_mut().map(|a| &mut a.seq).collect();
            sess.step(&mut refs, &mut |ev| {
                match ev {
                    StepEvent::Chosen(i, c) => {
                        let lp = match (&current[i], tops[i]) {
                            (Some(z), Some(top)) => {
                                token_logprob(z, c.id, top, c.admitted.as_ref().map(|a| &*a.0))
                            }
                            _ => None,
                        };
                        chosen.push((i, c.id, c.stop, lp))
                    }
                    StepEvent::Logits(i, l) => {
                        if let Some(z) = current[i].as_mut() {
                            z.clear();
                            z.extend_from_slice(l);
                        }
                    }
                }
                Ok(())
            })
        };
        match res {
            Err(e) => {
                for a in active.drain(..) {
                    let _ = a.events.send(Event::Failed(e.message.clone()));
                }
                self.metrics.failed_step();
            }
            Ok(f) => {
                self.metrics.step(&f, chosen.len());
                // the slots free before the handlers hear of it: a client's next request
                // must find its slot free
                let ending = chosen.iter().filter(|c| c.2.is_some()).count();
                self.queue.set_active(active.len() - ending);
                let mut gone = vec![false; active.len()];
                for (i, id, stop, logprob) in chosen {
                    let a = &active[i];
                    let tok = Event::Token { id, logprob };
                    let mut ok = a.events.send(tok).is_ok();
                    if let Some(r) = stop {
                        ok = ok && a.events.send(Event::Done(r)).is_ok();
                        gone[i] = true;
                    }
                    gone[i] |= !ok;
                }
                let mut i = 0;
                active.retain(|_| {
                    i += 1;
                    !gone[i - 1]
                });
            }
        }
    }
}

/// A prefill's progress as [`Event::Progress`], sent to every job: a streaming handler writes
/// it as an SSE comment, and every handler looks at its client when an event comes, so a
/// failed send (the handler has gone) cancels the prefill at the end of the chunk.
struct ToEvents<'a> {
    events: &'a Sender<Event>,
    /// Positions already run (from a snapshot).
    base: usize,
    total: usize,
    /// A send failed: nobody waits for this prefill.
    gone: bool,
}

impl Progress for ToEvents<'_> {
    fn layer(&mut self, _: usize, _: usize, _: usize, _: usize) {}
    fn chunk_done(&mut self, chunk: usize, n_chunks: usize, positions: usize) {
        if chunk + 1 < n_chunks {
            let sent = self.events.send(Event::Progress {
                done: positions.saturating_sub(self.base).min(self.total),
                total: self.total,
            });
            self.gone |= sent.is_err();
        }
    }
    fn done(&mut self) {}
    fn cancelled(&self) -> bool {
        self.gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            ids: vec![1],
            settings: SamplerSettings::greedy(),
            max_tokens: 1,
            logprobs: None,
            think_budget: None,
            constraints: Default::default(),
            events: std::sync::mpsc::channel().0,
        }
    }

    /// `--queue 18446744073709551615`: `parallel + max_waiting` overflowed (a panic in a
    /// debug build; wrapped to `parallel - 1` in a release one, refusing every request).
    #[test]
    fn a_queue_of_any_size_takes_jobs() {
        let q = Queue::new(usize::MAX, 4);
        for _ in 0..3 {
            assert!(q.submit(job()).is_ok());
        }
        assert_eq!(q.depth(), 3);
        let q = Queue::new(0, 1);
        assert!(q.submit(job()).is_ok());
        assert!(q.submit(job()).is_err(), "one slot, no queue");
    }
}
