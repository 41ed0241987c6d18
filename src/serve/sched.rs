//! The scheduler (ENGINE.md §10, §11): one thread owns the [`Session`]; request handlers
//! submit [`Job`]s to a bounded [`Queue`] and receive [`Event`]s on their own channel. Up to
//! `parallel` sequences are active; each step is one forward over all of them
//! ([`Session::step`]), so a sequence's ids and logits are the bits it gets alone. A job joins
//! at the next step from the longest held snapshot of its prefix, and the rest of its prompt
//! runs as rows of the following steps, a slice of positions per step beside the decoding
//! jobs' ids ([`Session::join`]), so no decoding job waits for a whole prompt; a job whose
//! receiver is gone (the client disconnected, or the handler stopped at a `stop` string)
//! leaves at the next step (a prefilling one after its current slice), or is never started
//! when it left while queued. A failed step fails that step's jobs; the server stays up.

use super::metrics::Metrics;
use super::pool::SnapshotPool;
use super::reply::{token_logprob, TokenLogprob};
use crate::error::Result;
use crate::generate::budget::{BudgetConstraint, ThinkBudget};
use crate::generate::guide::Constraints;
use crate::generate::prefix_cache::PrefixCache;
use crate::generate::sample::SamplerSettings;
use crate::generate::session::{PrefillProgress, Sequence, SequenceOptions, Session, StepEvent};
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
    /// A slice of the prompt has run: positions done and in all, seconds since the job
    /// joined; its `Display` is the SSE comment's text (ENGINE.md §11).
    Progress {
        /// The prefill's progress.
        progress: PrefillProgress,
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
    /// The prefix cache on disk (`--prefix-cache`), if any.
    pub disk: Option<PrefixCache>,
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
    /// While its prompt prefills as rows of the steps: the prompt (snapshotted at its end),
    /// the ids reused from a held snapshot and when the job started.
    joining: Option<(Vec<u32>, usize, Instant)>,
    /// The prompt's last id, held back while the rest prefills so the prefix cache can store
    /// the state with it pending (`--prefix-cache`); run as one more joined row after.
    held_last: Option<u32>,
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

    /// Gives `job` a sequence: from the longest held snapshot of its prefix, else fresh; what
    /// is new joins the next steps ([`Session::join`]; [`Scheduler::joined`] snapshots the
    /// prompt's end). None when the job ended already: its client is gone (found by the
    /// `Started` event, before any prefill), or it could not start.
    fn start<T: TrunkSource, E: ExpertSource>(
        &mut self,
        sess: &mut Session<'_, T, E>,
        job: Job,
    ) -> Option<Active> {
        let t0 = Instant::now();
        let res = (|| -> Result<Option<(Sequence, usize, Option<u32>)>> {
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
            let mut seq = sess.sequence(&job.ids, self.ctx, o.clone())?;
            let mut cached = 0;
            let mut held_last = None;
            // a file on disk when it covers more than the pool's longest snapshot
            let held = self.pool.longest_prefix(&job.ids).map_or(0, |(len, _)| len);
            let disk = self.disk.as_mut();
            if let Some((s, len)) =
                disk.and_then(|d| d.continue_from(&sess.model, &job.ids, held, self.ctx, &o))
            {
                (seq, cached) = (s, len);
            } else if let Some((len, snap)) = self.pool.longest_prefix(&job.ids) {
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
            // the rest of the prompt runs as rows of the next steps
            if cached < job.ids.len() {
                // with a prefix cache that will store this prompt: up to its last id first,
                // so the file keeps that id pending (an ordinary state file, FORMATS.md §9);
                // `joined` then stores it and runs the last id
                if self.disk.as_ref().is_some_and(|d| d.will_store(&job.ids)) {
                    held_last = seq.split_last();
                }
                if seq.state().n_pos < seq.ids().len() {
                    sess.join(&mut seq)?;
                } else if let Some(last) = held_last.take() {
                    seq.rejoin_last(last);
                    if let Some(d) = self.disk.as_mut() {
                        d.store(&seq);
                    }
                    sess.join(&mut seq)?;
                }
            }
            Ok(Some((seq, cached, held_last)))
        })();
        match res {
            Ok(None) => None,
            Ok(Some((mut seq, cached, held_last))) => {
                // after any restore: a held snapshot carries the budget of the job that made it
                let mut list = job.constraints.0;
                if let Some(b) = job.think_budget {
                    list.insert(0, Box::new(BudgetConstraint::new(*b)));
                }
                seq.set_constraints(list);
                seq.keep_masks(job.logprobs.is_some());
                let mut a = Active {
                    seq,
                    events: job.events,
                    logprobs: job.logprobs,
                    joining: None,
                    held_last,
                };
                if cached < job.ids.len() {
                    a.joining = Some((job.ids, cached, t0));
                    return Some(a);
                }
                self.metrics
                    .prefilled(0, cached, t0.elapsed().as_secs_f64());
                if let Some(r) = a.seq.stop_reason() {
                    let _ = a.events.send(Event::Done(r));
                    return None;
                }
                Some(a)
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
                for (i, a) in active.iter_mut().enumerate() {
                    gone[i] = !self.joined(sess, a);
                }
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

    /// After a step, a job whose prompt prefills as rows of the steps: tells its progress,
    /// or, when its prompt has run, snapshots the prompt's end for prefix reuse and applies
    /// the stop rules that fire before any choice. False when the job has ended (its client
    /// is gone, or it stopped before its first id).
    fn joined<T: TrunkSource, E: ExpertSource>(
        &mut self,
        sess: &Session<'_, T, E>,
        a: &mut Active,
    ) -> bool {
        let Some((ids, cached, t0)) = a.joining.take() else {
            return true;
        };
        if let Some(progress) = a.seq.prefilling() {
            a.joining = Some((ids, cached, t0));
            // a failed send: the handler has gone, nobody waits for this prefill
            return a.events.send(Event::Progress { progress }).is_ok();
        }
        // all but the held-back last id ran: the state to store, then that id as a joiner
        if let Some(last) = a.held_last.take() {
            a.seq.rejoin_last(last);
            if let Some(d) = self.disk.as_mut() {
                d.store(&a.seq);
            }
            if let Err(e) = sess.join(&mut a.seq) {
                let _ = a.events.send(Event::Failed(e.message));
                return false;
            }
            a.joining = Some((ids, cached, t0));
            return true;
        }
        let n = ids.len() - cached;
        // the place a job's prompt becomes a held snapshot (prefix reuse, ENGINE.md §11)
        self.pool.insert(ids, a.seq.snapshot());
        self.metrics
            .prefilled(n, cached, t0.elapsed().as_secs_f64());
        match a.seq.stop_reason() {
            Some(r) => {
                let _ = a.events.send(Event::Done(r));
                false
            }
            None => true,
        }
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
