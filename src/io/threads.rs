//! The engine's I/O threads (ENGINE.md §5): a fixed set of workers that execute reads with
//! blocking `pread`, so a thread waiting for the device sleeps in the kernel and the compute
//! threads keep both cores. No busy polling anywhere.
//!
//! Two ways to use them:
//! * [`IoThreads::read_batch`]: a batch of reads into caller-owned buffers (e.g. expert-cache
//!   slots), queued in the given order (the caller sorts by file and offset) and executed up to
//!   `threads` at a time; returns when every read has finished. [`IoThreads::read_batch_landing`]
//!   is the same batch with the caller working while it is in flight, handed each read as it
//!   lands.
//! * [`IoThreads::submit`]: one read into an owned [`AlignedBuf`], returning a [`ReadTicket`]
//!   to wait on later (read-ahead: layer ℓ+1 read while layer ℓ computes).

use crate::error::{Error, Result};
use crate::io::buf::AlignedBuf;
use crate::io::extent::Extent;
use crate::io::file::{IoFile, ReadDone};
use std::collections::VecDeque;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    jobs: VecDeque<Job>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Jobs never run under the lock, so a poisoned lock can only come from a panic in this
    // module's own bookkeeping; the queue itself is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fixed pool of I/O threads. Dropping it finishes queued reads and joins the threads.
pub struct IoThreads {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Concurrent preads per [`IoThreads::submit`] read.
    depth: usize,
}

/// The caller's work during [`IoThreads::read_batch_landing`]: handed the requests that landed
/// since its last call (index in the batch, request).
pub type OnLanded<'w, 'r, 'a> = dyn FnMut(&[(usize, &'r ReadRequest<'a>)]) -> Result<()> + 'w;

/// One read of a batch: the pieces of one payload and the buffer it lands in.
///
/// A single piece is read with one widened direct read ([`IoFile::read_window`]): `dest` must be
/// 4096-aligned and hold `window_capacity(len)` bytes, and the payload lands at `pad`. Several
/// pieces (an expert whose six tensors are not contiguous, FORMATS.md §4) are read buffered with
/// `DONTNEED`, concatenated from `dest[0]` (pad 0).
#[derive(Debug)]
pub struct ReadRequest<'a> {
    /// The pieces, in payload order.
    pub pieces: Vec<Extent<&'a IoFile>>,
    /// Destination buffer.
    pub dest: &'a mut [u8],
    /// Set when the read has finished: where the payload landed, or the error (exit 4).
    pub outcome: Option<Result<ReadDone>>,
}

impl ReadRequest<'_> {
    /// Total payload bytes.
    pub fn payload_len(&self) -> usize {
        self.pieces.iter().map(|p| p.len).sum()
    }

    /// Performs the read on the calling thread.
    pub fn execute(&mut self) -> Result<ReadDone> {
        match self.pieces.as_slice() {
            [one] => one.file.read_window(one.offset, one.len, self.dest),
            pieces => {
                let total = self.payload_len();
                if self.dest.len() < total {
                    return Err(Error::internal(format!(
                        "read of {total} bytes in {} pieces into a {}-byte buffer",
                        pieces.len(),
                        self.dest.len()
                    )));
                }
                let mut at = 0;
                for p in pieces {
                    p.file
                        .read_uncached_at(&mut self.dest[at..at + p.len], p.offset)?;
                    at += p.len;
                }
                Ok(ReadDone {
                    pad: 0,
                    device_bytes: total as u64,
                    direct: false,
                })
            }
        }
    }
}

/// The finished requests of a batch (index, when) not yet handed to the caller.
struct Reports {
    done: Mutex<Vec<(usize, Instant)>>,
    cv: Condvar,
}

/// Reports one request of a batch finished when dropped: after the job's last use of the
/// request, also if the job panicked or was dropped unrun.
struct Landed {
    reports: Arc<Reports>,
    index: usize,
}

impl Drop for Landed {
    fn drop(&mut self) {
        lock(&self.reports.done).push((self.index, Instant::now()));
        self.reports.cv.notify_all();
    }
}

/// The reports of a batch still to come; dropping it waits for all of them, so that
/// `read_batch_landing` cannot return (or unwind) while a worker may still touch the caller's
/// requests.
struct Landing {
    reports: Arc<Reports>,
    left: usize,
}

impl Landing {
    /// Every request reported finished since the last call, waiting for at least one (call
    /// only while `left > 0`).
    fn next_group(&mut self) -> Vec<(usize, Instant)> {
        let mut done = lock(&self.reports.done);
        while done.is_empty() {
            done = self
                .reports
                .cv
                .wait(done)
                .unwrap_or_else(|e| e.into_inner());
        }
        let group = std::mem::take(&mut *done);
        self.left -= group.len();
        group
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        while self.left > 0 {
            self.next_group();
        }
    }
}

/// A request pointer handed to a worker. Accessed only through `get` so that closures capture
/// the whole wrapper (with its Send impl), not the raw field.
struct RequestPtr(*mut ReadRequest<'static>);

// SAFETY: the pointee is accessed by exactly one worker, and only while `read_batch_landing`
// (which owns the `&mut` borrow it came from) has not yet seen that worker's report.
unsafe impl Send for RequestPtr {}

impl RequestPtr {
    fn get(&self) -> *mut ReadRequest<'static> {
        self.0
    }
}

impl IoThreads {
    /// Starts `threads` I/O threads (at least 1): the number of reads in flight at once. Each
    /// thread has a small stack; they sleep on a condition variable while idle.
    ///
    /// Errors: exit 3 if the system refuses a thread.
    pub fn new(threads: usize) -> Result<IoThreads> {
        IoThreads::with_depth(threads, 1)
    }

    /// As [`IoThreads::new`], each [`IoThreads::submit`] read split into `depth` concurrent
    /// preads ([`IoFile::read_window_split`]; at least 1).
    pub fn with_depth(threads: usize, depth: usize) -> Result<IoThreads> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                shutdown: false,
            }),
            cv: Condvar::new(),
        });
        let mut pool = IoThreads {
            shared,
            workers: Vec::with_capacity(threads),
            depth: depth.max(1),
        };
        for i in 0..threads {
            let shared = Arc::clone(&pool.shared);
            let h = std::thread::Builder::new()
                .name(format!("k3-io-{i}"))
                .stack_size(256 * 1024)
                .spawn(move || worker(&shared))
                .map_err(|e| Error::resources(format!("cannot start I/O thread {i}: {e}")))?;
            pool.workers.push(h);
        }
        Ok(pool)
    }

    /// Number of I/O threads (reads in flight at most).
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Executes every request on the I/O threads, queued in slice order, and returns when all
    /// have finished; each request's `outcome` is then set. Independent requests: one failing
    /// does not stop the others (the caller decides what to publish). Call it from compute or
    /// main threads, never from a job running on these I/O threads (it would wait for itself).
    pub fn read_batch(&self, reqs: &mut [ReadRequest<'_>]) {
        // Work that cannot fail: the call cannot either (reads' errors are their outcomes).
        let _ = self.read_batch_landing(reqs, &mut |_| Ok(()));
    }

    /// As [`IoThreads::read_batch`], but the caller works while the reads are in flight (the
    /// MoE block computes the experts it holds, then each expert as its read lands): `work` is
    /// called once at once with no request, then with each group of requests finished since
    /// its last call (index in `reqs`, request), in landing order, until every request has. A
    /// request passed to `work` has its `outcome` set and is never touched again by an I/O
    /// thread. Returns the seconds from queueing the batch to its last read finishing: the
    /// batch's time in flight, however long `work` took.
    ///
    /// Errors: the first error `work` returns (no further call is made, but the call still
    /// waits for every queued read, which writes into the caller's buffers). A read's own error
    /// is its request's `outcome`.
    pub fn read_batch_landing<'r, 'a>(
        &self,
        reqs: &'r mut [ReadRequest<'a>],
        work: &mut OnLanded<'_, 'r, 'a>,
    ) -> Result<f64> {
        let n = reqs.len();
        let base = reqs.as_mut_ptr();
        let reports = Arc::new(Reports {
            done: Mutex::new(Vec::with_capacity(n)),
            cv: Condvar::new(),
        });
        // Declared before the jobs are queued: whatever happens below, its drop waits for all.
        let mut landing = Landing {
            reports: Arc::clone(&reports),
            left: n,
        };
        let t0 = Instant::now();
        {
            let mut st = lock(&self.shared.state);
            for i in 0..n {
                // SAFETY: i < n = reqs.len(), so the offset stays inside the slice.
                let ptr = RequestPtr(unsafe { base.add(i) }.cast::<ReadRequest<'static>>());
                let done = Landed {
                    reports: Arc::clone(&reports),
                    index: i,
                };
                st.jobs.push_back(Box::new(move || {
                    let _done = done;
                    // SAFETY: `ptr` points at element i of `reqs`, which stays mutably borrowed
                    // by this call; nothing else touches element i until `_done` (dropped after
                    // the last use of `req`) reports it finished, and the call does not return
                    // or unwind before every report arrived (`Landing`'s drop). The 'static
                    // lifetime is never observed beyond that point.
                    let req = unsafe { &mut *ptr.get() };
                    req.outcome = Some(req.execute());
                }));
            }
        }
        self.shared.cv.notify_all();
        work(&[])?;
        let mut last = t0;
        let mut group: Vec<(usize, &'r ReadRequest<'a>)> = Vec::with_capacity(n);
        while landing.left > 0 {
            group.clear();
            for (i, at) in landing.next_group() {
                last = last.max(at);
                // SAFETY: request i finished: its worker dropped `Landed` after its last use of
                // it, and no job refers to it any more; from here on it is only read, through
                // shared references, for the rest of the caller's borrow 'r.
                group.push((i, unsafe { &*base.add(i) }));
            }
            work(&group)?;
        }
        Ok(last.duration_since(t0).as_secs_f64())
    }

    /// Queues one read of [offset, offset + len) of `file` into `buf` (4096-aligned, at least
    /// `window_capacity(len)` bytes) and returns at once; [`ReadTicket::wait`] gives the buffer
    /// back with the payload at `pad`. The read is split into the pool's depth of concurrent
    /// preads ([`IoThreads::with_depth`]).
    pub fn submit(
        &self,
        file: Arc<IoFile>,
        offset: u64,
        len: usize,
        buf: AlignedBuf,
    ) -> ReadTicket {
        self.submit_split(file, offset, len, buf, self.depth)
    }

    /// As [`IoThreads::submit`], the window read as `depth` concurrent preads
    /// ([`IoFile::read_window_split`]): `depth` reads in flight for one payload.
    pub fn submit_split(
        &self,
        file: Arc<IoFile>,
        offset: u64,
        len: usize,
        buf: AlignedBuf,
        depth: usize,
    ) -> ReadTicket {
        let what = format!(
            "{}: read of {len} bytes at offset {offset}",
            file.path().display()
        );
        self.submit_job(buf, what, move |buf| {
            file.read_window_split(offset, len, buf, depth)
        })
    }

    /// Queues `job` (a read into `buf`, and whatever else fills it: a coded piece is read and
    /// decoded) on an I/O thread and returns at once; [`ReadTicket::wait`] gives the buffer back
    /// with the job's [`ReadDone`]. `what` names the read in the error when the thread dies.
    pub fn submit_job(
        &self,
        mut buf: AlignedBuf,
        what: String,
        job: impl FnOnce(&mut AlignedBuf) -> Result<ReadDone> + Send + 'static,
    ) -> ReadTicket {
        let (tx, rx) = mpsc::sync_channel(1);
        {
            let mut st = lock(&self.shared.state);
            st.jobs.push_back(Box::new(move || {
                let t0 = Instant::now();
                let r = job(&mut buf);
                let secs = t0.elapsed().as_secs_f64();
                // The receiver may be gone (a failed run dropped the ticket); nothing to do.
                let _ = tx.send((buf, r, secs));
            }));
        }
        self.shared.cv.notify_one();
        ReadTicket { rx, what }
    }
}

/// A read queued with [`IoThreads::submit`].
#[derive(Debug)]
pub struct ReadTicket {
    rx: mpsc::Receiver<(AlignedBuf, Result<ReadDone>, f64)>,
    what: String,
}

impl ReadTicket {
    /// Blocks until the read has finished; returns the buffer and where the payload is.
    ///
    /// Errors: the read's error (exit 4); exit 1 if the I/O thread died.
    pub fn wait(self) -> Result<(AlignedBuf, ReadDone)> {
        let (buf, r) = self.wait_keep();
        match (buf, r) {
            (Some(buf), Ok((done, _))) => Ok((buf, done)),
            (_, Err(e)) => Err(e),
            (None, Ok(_)) => Err(Error::internal("read finished without its buffer")),
        }
    }

    /// As [`ReadTicket::wait`], but hands the buffer back also when the read failed (so a
    /// ring slot is not lost), with the seconds the I/O thread spent in the read. The buffer
    /// is `None` only if the I/O thread died (then the result is an exit-1 error).
    pub fn wait_keep(self) -> (Option<AlignedBuf>, Result<(ReadDone, f64)>) {
        match self.rx.recv() {
            Ok((buf, Ok(done), secs)) => (Some(buf), Ok((done, secs))),
            Ok((buf, Err(e), _)) => (Some(buf), Err(e)),
            Err(_) => (
                None,
                Err(Error::internal(format!(
                    "{}: the I/O thread stopped before finishing",
                    self.what
                ))),
            ),
        }
    }
}

fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut st = lock(&shared.state);
            loop {
                if let Some(j) = st.jobs.pop_front() {
                    break j;
                }
                if st.shutdown {
                    return;
                }
                st = shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        // A panicking job must not take the thread (and every later batch) with it; its
        // `Landed` report still fires during unwinding. Release builds abort on panic anyway.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

impl Drop for IoThreads {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.cv.notify_all();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for IoThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoThreads({} threads)", self.workers.len())
    }
}
