//! The engine's own thread pool (MODEL.md §5.5, ENGINE.md §3 `--threads` / `K3_THREADS`).
//!
//! A fixed set of workers plus the calling thread run the tasks 0…n−1 of a job. Kernels
//! cut their output into a *fixed* partition (constants of each kernel, never derived from
//! the thread count) and each task computes whole output elements, every sum in the order of
//! MODEL.md §5.2/§5.3. Which thread runs which task therefore never changes a result bit;
//! tasks are handed out dynamically so a busy core does not hold the others back.

use crate::error::KernelError;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Upper bound accepted for `--threads` / `K3_THREADS`.
pub const MAX_THREADS: usize = 1024;

/// How long an idle worker spins on the job counter before sleeping on the condition
/// variable. Kernel calls come in quick succession during a forward pass; a short spin saves
/// the futex wake-up latency without burning a core when the engine is idle.
const SPIN: Duration = Duration::from_micros(50);

/// How long the calling thread spins for the last tasks of a job before sleeping.
const WAIT_SPIN: Duration = Duration::from_micros(20);

thread_local! {
    /// Set while this thread executes tasks of some pool: a nested `run` then executes its
    /// tasks inline (in order) instead of waiting for workers that may all be busy.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

type TaskFn<'a> = dyn Fn(usize) + Sync + 'a;

/// The published job: its generation, closure and number of tasks.
#[derive(Clone, Copy)]
struct Job {
    generation: u32,
    f: *const TaskFn<'static>,
    tasks: usize,
}
// SAFETY: the closure behind `f` is `Sync`; it is only called for a task index claimed from
// `Shared::claim` with the job's generation, and `run` does not return before every claimed
// task of its generation has completed, so the closure outlives every call.
unsafe impl Send for Job {}

struct State {
    job: Option<Job>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Workers sleep here waiting for a new generation.
    work: Condvar,
    /// The caller sleeps here waiting for the last task.
    done: Condvar,
    /// The generation of the latest published job (idle workers spin on it).
    generation: AtomicU64,
    /// Task claims: generation in the high 32 bits, next task index in the low 32 bits. A
    /// worker that wakes late for an old job finds another generation here and claims nothing,
    /// so a job never waits for idle workers to check in.
    claims: AtomicU64,
    /// Tasks of the current job that have finished.
    completed: AtomicUsize,
    panicked: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state itself stays consistent
        // because every critical section is a few field updates.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims the next task of job `generation`, or `None` when it has none left (or a newer
    /// job has been published).
    fn claim(&self, generation: u32, tasks: usize) -> Option<usize> {
        let mut cur = self.claims.load(Ordering::Acquire);
        loop {
            let (g, i) = ((cur >> 32) as u32, (cur & 0xFFFF_FFFF) as usize);
            if g != generation || i >= tasks {
                return None;
            }
            match self.claims.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(i),
                Err(now) => cur = now,
            }
        }
    }

    /// Runs tasks of `job` until none is left to claim.
    fn execute(&self, job: Job) {
        while let Some(i) = self.claim(job.generation, job.tasks) {
            // SAFETY: see `Job`: a claimed task's job is still running, so its closure lives.
            let f = unsafe { &*job.f };
            if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            if self.completed.fetch_add(1, Ordering::AcqRel) + 1 == job.tasks {
                // The last task: wake the caller if it sleeps (under the lock, so the wake-up
                // cannot fall between its check and its wait).
                let _st = self.lock();
                self.done.notify_all();
            }
        }
    }
}

/// A fixed pool of `threads − 1` worker threads; the thread calling [`ThreadPool::run`] is
/// the remaining participant.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    run_lock: Mutex<u32>,
}

impl ThreadPool {
    /// A pool of `threads` participants (the caller plus `threads − 1` workers).
    ///
    /// Panics if `threads` is 0 or above [`MAX_THREADS`] (validate user input with
    /// [`threads_from_env`] / [`parse_threads`] first), or if the OS refuses to spawn a thread.
    pub fn new(threads: usize) -> ThreadPool {
        assert!(
            (1..=MAX_THREADS).contains(&threads),
            "ThreadPool::new: {threads} threads (expected 1..={MAX_THREADS})"
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                shutdown: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            completed: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        });
        let workers = (1..threads)
            .map(|n| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("k3-worker-{n}"))
                    .spawn(move || worker(&s))
                    .expect("spawning a k3 worker thread")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            threads,
            run_lock: Mutex::new(0),
        }
    }

    /// Number of participants (workers + the calling thread).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(0)`, `f(1)`, …, `f(tasks − 1)`, each exactly once, on the workers and the
    /// calling thread, and returns when all are done. Called from inside a task (of any
    /// pool), it runs the tasks inline in increasing order. Returns as soon as every task has
    /// finished, without waiting for workers that took none.
    ///
    /// If a task panics, the remaining tasks still run and `run` then panics.
    pub fn run<F: Fn(usize) + Sync>(&self, tasks: usize, f: F) {
        if tasks == 0 {
            return;
        }
        if tasks == 1 || self.workers.is_empty() || IN_POOL.with(Cell::get) {
            (0..tasks).for_each(f);
            return;
        }
        assert!(tasks < u32::MAX as usize, "ThreadPool::run: {tasks} tasks");
        // One job at a time per pool; a second thread calling `run` waits its turn. The lock
        // also holds the generation counter.
        let mut turn = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        *turn = turn.wrapping_add(1);
        let generation = *turn;
        let f: &TaskFn<'_> = &f;
        // SAFETY: only the lifetime bound is erased; this function does not return before
        // every claimed task has completed (completed == tasks below), and no task can be
        // claimed after that, so `f` outlives its use.
        let f: *const TaskFn<'static> =
            unsafe { std::mem::transmute::<&TaskFn<'_>, &'static TaskFn<'static>>(f) };
        let job = Job {
            generation,
            f,
            tasks,
        };
        let sh = &*self.shared;
        sh.completed.store(0, Ordering::Relaxed);
        sh.panicked.store(false, Ordering::Relaxed);
        {
            let mut st = sh.lock();
            st.job = Some(job);
            // Publishing the claims word opens the job; the Release orders the resets above.
            sh.claims
                .store((generation as u64) << 32, Ordering::Release);
            sh.generation.store(generation as u64, Ordering::Release);
            sh.work.notify_all();
        }
        IN_POOL.with(|c| c.set(true));
        sh.execute(job);
        IN_POOL.with(|c| c.set(false));
        // Wait for tasks still running on workers: spin briefly, then sleep.
        let start = Instant::now();
        let mut spins = 0u32;
        while sh.completed.load(Ordering::Acquire) < tasks {
            std::hint::spin_loop();
            spins += 1;
            if spins % 64 == 0 && start.elapsed() > WAIT_SPIN {
                let mut st = sh.lock();
                while sh.completed.load(Ordering::Acquire) < tasks {
                    st = sh.done.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                break;
            }
        }
        if sh.panicked.load(Ordering::Relaxed) {
            panic!("a k3 thread pool task panicked");
        }
    }

    /// Splits `out` into consecutive chunks of `chunk` elements (the last may be shorter)
    /// and runs `f(chunk_index, chunk)` for each, in parallel. The partition depends only on
    /// `out.len()` and `chunk`, never on the thread count.
    ///
    /// Panics if `chunk` is 0.
    pub fn for_each_chunk<T: Send, F>(&self, out: &mut [T], chunk: usize, f: F)
    where
        F: Fn(usize, &mut [T]) + Sync,
    {
        assert!(chunk > 0, "for_each_chunk: chunk of 0 elements");
        let n = out.len();
        let ptr = SyncPtr::new(out);
        self.run(n.div_ceil(chunk), |i| {
            let start = i * chunk;
            let len = chunk.min(n - start);
            // SAFETY: chunk i covers [i·chunk, i·chunk + len), disjoint from every other
            // task's range and inside `out`, which is borrowed mutably for the whole call.
            f(i, unsafe { ptr.slice(start, len) });
        });
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let mut st = self.shared.lock();
            st.shutdown = true;
            self.shared.work.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads)
            .finish()
    }
}

fn worker(shared: &Shared) {
    IN_POOL.with(|c| c.set(true));
    let mut seen = 0u64;
    loop {
        // Spin briefly on the generation counter, then sleep.
        let start = Instant::now();
        let mut spins = 0u32;
        while shared.generation.load(Ordering::Acquire) == seen {
            std::hint::spin_loop();
            spins += 1;
            if spins % 64 == 0 && start.elapsed() > SPIN {
                break;
            }
        }
        let job = {
            let mut st = shared.lock();
            while shared.generation.load(Ordering::Acquire) == seen && !st.shutdown {
                st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.shutdown {
                return;
            }
            seen = shared.generation.load(Ordering::Acquire);
            st.job.expect("a published generation carries a job")
        };
        shared.execute(job);
    }
}

/// A raw view of a mutable slice that tasks of one job write in disjoint parts.
pub(crate) struct SyncPtr<T> {
    ptr: *mut T,
    len: usize,
}
// SAFETY: callers of `slice` guarantee disjoint ranges; T: Send makes moving the elements'
// access to another thread sound.
unsafe impl<T: Send> Sync for SyncPtr<T> {}
unsafe impl<T: Send> Send for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    pub(crate) fn new(s: &mut [T]) -> Self {
        SyncPtr {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    /// The sub-slice \[start, start + len).
    ///
    /// # Safety
    /// The range must lie inside the original slice, the original borrow must still be live,
    /// and no other live reference (from any thread) may overlap the range.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "SyncPtr range"
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// Parses a thread count as given to `--threads` / `K3_THREADS`: a decimal integer in
/// 1…[`MAX_THREADS`]. `source` starts the error message (e.g. `K3_THREADS`).
pub fn parse_threads(source: &str, value: &str) -> Result<usize, KernelError> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(KernelError::new(format!(
            "{source} {value}: expected a whole number of threads from 1 to {MAX_THREADS}"
        ))),
    }
}

/// The default thread count: `K3_THREADS` when set (validated, error names `K3_THREADS`),
/// else the number of CPUs available to the process (at least 1).
pub fn threads_from_env() -> Result<usize, KernelError> {
    match std::env::var("K3_THREADS") {
        Ok(v) if !v.is_empty() => parse_threads("K3_THREADS", &v),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(default_threads()),
        Err(std::env::VarError::NotUnicode(_)) => Err(KernelError::new(
            "K3_THREADS: value is not valid UTF-8 (expected a whole number of threads)",
        )),
    }
}

/// The number of CPUs available to this process (`std::thread::available_parallelism`),
/// at least 1 and at most [`MAX_THREADS`].
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, MAX_THREADS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_task_runs_once() {
        for threads in 1..=4 {
            let pool = ThreadPool::new(threads);
            for tasks in [0usize, 1, 2, 3, 7, 100] {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                pool.run(tasks, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn many_short_jobs_run_every_task_once() {
        // Jobs in quick succession: late workers of one job must never claim a task of the
        // next one or run a finished job's closure.
        for threads in [2, 3, 5] {
            let pool = ThreadPool::new(threads);
            for job in 0..3000usize {
                let tasks = 1 + job % 7;
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                pool.run(tasks, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "{threads} threads, job {job}"
                );
            }
        }
    }

    #[test]
    fn nested_run_executes_inline() {
        let pool = ThreadPool::new(3);
        let total = AtomicUsize::new(0);
        pool.run(4, |_| {
            pool.run(5, |_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 20);
    }

    #[test]
    fn chunks_are_disjoint_and_complete() {
        let pool = ThreadPool::new(3);
        let mut v = vec![0usize; 1001];
        pool.for_each_chunk(&mut v, 64, |ci, c| {
            for (j, x) in c.iter_mut().enumerate() {
                *x = ci * 64 + j;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| i == x));
    }

    #[test]
    fn panic_in_task_propagates_and_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, |i| {
                if i == 5 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(8, |_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn thread_counts_parse() {
        assert_eq!(parse_threads("--threads", "3"), Ok(3));
        assert!(parse_threads("--threads", "0").is_err());
        assert!(parse_threads("K3_THREADS", "x")
            .unwrap_err()
            .message
            .starts_with("K3_THREADS x:"));
    }
}
