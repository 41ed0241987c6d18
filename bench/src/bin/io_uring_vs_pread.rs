//! I/O depth: the engine's pool of `pread` threads against io_uring, for the engine's own read
//! shapes, next to the device's best sequential pattern measured in the same run.
//!
//! `cargo run --release -p k3-bench --bin io_uring_vs_pread -- [options]`
//!
//! Writes a test file of non-zero data (O_DIRECT, `fsync`, `POSIX_FADV_DONTNEED`), then reads
//! it with `O_DIRECT` into 4096-aligned, pre-faulted buffers ([`k3::io::AlignedBuf`]) in four
//! shapes, each at several depths and with both methods:
//!
//! * `trunk`: one trunk piece (default 256 MiB) cut into `depth` concurrent chunks —
//!   [`k3::io::IoFile::read_window_split`] (the engine's code: one scoped thread per chunk)
//!   against `depth` io_uring SQEs in flight from one thread;
//! * `experts`: one MoE layer's batch of top-k (16) routed experts of the released size
//!   (17,547,264 B, at unaligned offsets, each read as its widened window into its own slot),
//!   `depth` in flight — [`k3::io::IoThreads::read_batch`] on a pool of `depth` threads (the
//!   engine's expert reader) against a ring kept `depth` deep;
//! * `lm_head`: consecutive lm_head chunks of the released size (2340 rows = 33,546,240 B,
//!   4096-aligned), read one after the other, each split `depth` ways, as the table reader does;
//! * `seq` (the device figure): large sequential reads, a 512 MiB window as one read at QD1 or
//!   as 16 MiB pieces with QD 2..32 in flight, by threads and by io_uring. The best of these,
//!   at the start and at the end of the run, is the device's best pattern; every other figure
//!   is given as a ratio to it.
//!
//! Every read goes to bytes not read before in the run: a cache below this VM serves re-reads
//! faster, which would flatter whichever method read second. The two methods alternate (ABAB
//! within a repetition, the leader swapped between repetitions), every point is repeated
//! (`--reps`, default 3), and each read is checked against the file's block tags, so a method
//! that read nothing (or the wrong bytes) cannot look fast. If io_uring cannot be set up
//! (disabled by `kernel.io_uring_disabled`, refused by seccomp, too old a kernel) the reason is
//! printed and recorded and the pread figures are measured alone.
//!
//! Linux only (io_uring, `O_DIRECT`); elsewhere the binary says so and exits 2.

#[cfg(target_os = "linux")]
fn main() {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("io_uring_vs_pread: io_uring and O_DIRECT reads are Linux only");
    std::process::exit(2);
}

/// Everything but `main`: `io-uring` is a Linux-only dependency (bench/Cargo.toml).
#[cfg(target_os = "linux")]
mod linux {
    use io_uring::{opcode, types, IoUring};
    use k3::io::{window, window_capacity, AlignedBuf, Extent, IoFile, IoThreads, ReadRequest};
    use k3_bench::{idle, machine};
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::marker::PhantomData;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    const USAGE: &str = "\
usage: cargo run --release -p k3-bench --bin io_uring_vs_pread -- [options]

Read throughput of the engine's read shapes (trunk piece split N ways, expert batch N in
flight, lm_head chunks split N ways) with the engine's pread threads and with io_uring,
against the device's best sequential O_DIRECT pattern (QD 1..32) measured in the same run.
Every read is of bytes not read before in the run.

  --dir DIR           where the test file is written and removed again (default: target/
                      io-uring-bench of this repository, the disk of /work)
  --gb X              test file size in GB (default and minimum: what the run reads, so no
                      byte is read twice; printed at the start)
  --reps N            repetitions of every point (default 3)
  --trunk-mib N       trunk piece size in MiB (default 256)
  --head-chunks N     lm_head chunks per point (default 8)
  --seq-mib N         sequential window of the device pattern in MiB (default 512)
  --seed S            seed of the expert offsets and the file's data (default 1)
  --out PATH          TSV path (default bench/results/io-uring-vs-pread-<utc date>.tsv)
";

    const MIB: u64 = 1 << 20;
    /// Direct-I/O alignment (FORMATS.md §6).
    const ALIGN: u64 = k3::io::ALIGN as u64;
    /// Depths of the trunk piece split (the brief's {1, 2, 4, 8}; `--io-depth` goes to 8 here).
    const TRUNK_DEPTHS: [usize; 4] = [1, 2, 4, 8];
    /// Reads in flight of an expert batch: from one at a time to the whole batch.
    const EXPERT_DEPTHS: [usize; 5] = [1, 2, 4, 8, 16];
    /// Depths of the lm_head chunk split.
    const HEAD_DEPTHS: [usize; 3] = [1, 2, 4];
    /// Queue depths of the device pattern.
    const SEQ_DEPTHS: [usize; 6] = [1, 2, 4, 8, 16, 32];
    /// Piece size of the device pattern above QD1 (as `bench/src/device.rs`).
    const SEQ_PIECE: u64 = 16 * MIB;
    /// Submission queue entries: the deepest point of the run.
    const RING_ENTRIES: u32 = 32;
    /// Write unit of the test file.
    const WRITE_CHUNK: u64 = 64 * MIB;
    /// Free space left on the disk after the test file is written (it is shared).
    const FREE_MARGIN: u64 = 4_000_000_000;

    /// What is read (see the module docs).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Shape {
        Trunk,
        Experts,
        LmHead,
        Seq,
    }

    impl Shape {
        fn name(self) -> &'static str {
            match self {
                Shape::Trunk => "trunk",
                Shape::Experts => "experts",
                Shape::LmHead => "lm_head",
                Shape::Seq => "seq",
            }
        }
    }

    /// How it is read.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Method {
        /// Blocking `pread`s on threads, through the engine's own `IoFile` / `IoThreads`.
        Pread,
        /// io_uring `IORING_OP_READ`s from one thread.
        Uring,
    }

    impl Method {
        fn name(self) -> &'static str {
            match self {
                Method::Pread => "pread",
                Method::Uring => "io_uring",
            }
        }

        fn other(self) -> Method {
            match self {
                Method::Pread => Method::Uring,
                Method::Uring => Method::Pread,
            }
        }
    }

    /// The released model's read sizes, from the engine's own plan inputs.
    struct Sizes {
        /// Bytes of one routed expert (17,547,264).
        expert: u64,
        /// Expert slot stride: the widened window of any expert fits (17,555,456).
        expert_stride: u64,
        /// Experts per MoE layer and token (16).
        top_k: usize,
        /// Bytes of one streamed lm_head chunk (2340 rows × 14,336 B).
        head_chunk: u64,
    }

    fn released_sizes() -> Result<Sizes, String> {
        let cfg = k3::plan::released::config().map_err(|e| e.message)?;
        let s = k3::plan::released::sizes(&cfg, 1);
        Ok(Sizes {
            expert: s.expert,
            expert_stride: s.expert_stride,
            top_k: s.top_k,
            head_chunk: s.head_chunk_rows() as u64 * s.row,
        })
    }

    struct Opts {
        dir: PathBuf,
        gb: Option<f64>,
        reps: usize,
        trunk_bytes: u64,
        head_chunks: usize,
        seq_bytes: u64,
        seed: u64,
        out: Option<PathBuf>,
    }

    fn parse(args: &[String]) -> Result<Option<Opts>, String> {
        let mut o = Opts {
            dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/io-uring-bench"),
            gb: None,
            reps: 3,
            trunk_bytes: 256 * MIB,
            head_chunks: 8,
            seq_bytes: 512 * MIB,
            seed: 1,
            out: None,
        };
        let mut i = 0;
        while i < args.len() {
            let a = args[i].clone();
            i += 1;
            let mut val = |name: &str| -> Result<String, String> {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("{name}: expected a value"))?;
                i += 1;
                Ok(v)
            };
            fn num<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String> {
                v.parse()
                    .map_err(|_| format!("{name}: expected a non-negative number, found `{v}`"))
            }
            match a.as_str() {
                "--help" | "-h" => return Ok(None),
                "--dir" => o.dir = PathBuf::from(val(&a)?),
                "--gb" => o.gb = Some(num(&a, val(&a)?)?),
                "--reps" => o.reps = num(&a, val(&a)?)?,
                "--trunk-mib" => o.trunk_bytes = num::<u64>(&a, val(&a)?)? * MIB,
                "--head-chunks" => o.head_chunks = num(&a, val(&a)?)?,
                "--seq-mib" => o.seq_bytes = num::<u64>(&a, val(&a)?)? * MIB,
                "--seed" => o.seed = num(&a, val(&a)?)?,
                "--out" => o.out = Some(PathBuf::from(val(&a)?)),
                s => return Err(format!("{s}: unknown argument (see --help)")),
            }
        }
        if o.reps == 0 || o.trunk_bytes == 0 || o.head_chunks == 0 || o.seq_bytes < SEQ_PIECE {
            return Err(
                "--reps, --trunk-mib and --head-chunks must be >= 1, --seq-mib >= 16".to_string(),
            );
        }
        // One SQE reads at most u32::MAX bytes, and the kernel caps one read at 2 GiB − 4 KiB.
        if o.trunk_bytes > 1024 * MIB || o.seq_bytes > 1024 * MIB {
            return Err("--trunk-mib and --seq-mib must be <= 1024".to_string());
        }
        Ok(Some(o))
    }

    /// One timed measurement: `reads` (file offset, payload bytes) of one shape, read with one
    /// method at one depth.
    struct Step {
        shape: Shape,
        method: Method,
        depth: usize,
        /// Repetition (the device pattern: 0 at the start of the run, 1 at the end).
        rep: usize,
        /// Whether this method ran first of the pair at this point.
        first: bool,
        reads: Vec<(u64, u64)>,
    }

    /// Hands out fresh, 4096-aligned byte ranges of the test file front to back.
    struct Alloc {
        next: u64,
    }

    impl Alloc {
        fn take(&mut self, len: u64) -> u64 {
            let at = self.next;
            self.next += len.div_ceil(ALIGN) * ALIGN;
            at
        }
    }

    /// SplitMix64, for reproducible expert offsets and file data.
    fn splitmix64(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The whole run in execution order, and the file bytes it needs. Each step's bytes are its
    /// own (never read by another step); the two methods of a point read neighbouring ranges, so
    /// a drift along the file hits both alike.
    fn plan(o: &Opts, s: &Sizes) -> (Vec<Step>, u64) {
        let mut a = Alloc { next: 0 };
        let mut rng = o.seed;
        let mut steps = Vec::new();
        let seq_round = |a: &mut Alloc, steps: &mut Vec<Step>, round: usize| {
            for (di, &depth) in SEQ_DEPTHS.iter().enumerate() {
                let lead = if (round + di) % 2 == 0 {
                    Method::Pread
                } else {
                    Method::Uring
                };
                for method in [lead, lead.other()] {
                    steps.push(Step {
                        shape: Shape::Seq,
                        method,
                        depth,
                        rep: round,
                        first: method == lead,
                        reads: vec![(a.take(o.seq_bytes), o.seq_bytes)],
                    });
                }
            }
        };
        seq_round(&mut a, &mut steps, 0);
        for rep in 0..o.reps {
            // ABAB within the repetition; the other method leads in the next one.
            let lead = if rep % 2 == 0 {
                Method::Pread
            } else {
                Method::Uring
            };
            let pair = [lead, lead.other()];
            for &depth in &TRUNK_DEPTHS {
                for method in pair {
                    steps.push(Step {
                        shape: Shape::Trunk,
                        method,
                        depth,
                        rep,
                        first: method == lead,
                        reads: vec![(a.take(o.trunk_bytes), o.trunk_bytes)],
                    });
                }
            }
            // Expert batches: the repetition's slots shuffled, top-k of them per batch in file
            // order (as the engine sorts its misses), each payload at an unaligned offset inside
            // its slot, like real experts in a shard (its widened window stays in the slot).
            let batches = EXPERT_DEPTHS.len() * 2;
            let n_slots = batches * s.top_k;
            let base = a.take(n_slots as u64 * s.expert_stride);
            let mut slots: Vec<u64> = (0..n_slots as u64).collect();
            for i in (1..slots.len()).rev() {
                slots.swap(i, (splitmix64(&mut rng) % (i as u64 + 1)) as usize);
            }
            let mut chunks = slots.chunks(s.top_k);
            for &depth in &EXPERT_DEPTHS {
                for method in pair {
                    let mut batch: Vec<u64> = chunks.next().expect("enough slots").to_vec();
                    batch.sort_unstable();
                    let reads = batch
                        .iter()
                        .map(|&k| {
                            let pad = splitmix64(&mut rng) % ALIGN;
                            (base + k * s.expert_stride + pad, s.expert)
                        })
                        .collect();
                    steps.push(Step {
                        shape: Shape::Experts,
                        method,
                        depth,
                        rep,
                        first: method == lead,
                        reads,
                    });
                }
            }
            for &depth in &HEAD_DEPTHS {
                for method in pair {
                    let reads = (0..o.head_chunks)
                        .map(|_| (a.take(s.head_chunk), s.head_chunk))
                        .collect();
                    steps.push(Step {
                        shape: Shape::LmHead,
                        method,
                        depth,
                        rep,
                        first: method == lead,
                        reads,
                    });
                }
            }
        }
        seq_round(&mut a, &mut steps, 1);
        (steps, a.next)
    }

    /// The tag at the start of every 4096-byte block of the test file: its block number, mixed
    /// so that no block is zero or equal to another.
    fn tag(block_offset: u64) -> u64 {
        (block_offset / ALIGN) ^ 0x6b33_5f75_7269_6e67
    }

    /// Checks the tags of the first and last block of a window read at file offset `lo`.
    fn check_window(buf: &[u8], lo: u64, len: usize) -> Result<(), String> {
        for at in [0, len - ALIGN as usize] {
            let got = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
            let want = tag(lo + at as u64);
            if got != want {
                return Err(format!(
                    "read at offset {lo}: block at +{at} holds tag {got:#x}, expected {want:#x}"
                ));
            }
        }
        Ok(())
    }

    /// Removes the test file when dropped (also on an error path).
    struct TestFile {
        path: PathBuf,
    }

    impl Drop for TestFile {
        fn drop(&mut self) {
            match std::fs::remove_file(&self.path) {
                Ok(()) => eprintln!("io_uring_vs_pread: removed {}", self.path.display()),
                Err(e) => eprintln!(
                    "io_uring_vs_pread: warning: could not remove {}: {e}",
                    self.path.display()
                ),
            }
        }
    }

    /// Bytes free for an unprivileged user on the file system of `dir`.
    fn free_bytes(dir: &Path) -> io::Result<u64> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path and `st` a valid, writable statvfs.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.f_bavail as u64 * st.f_frsize as u64)
    }

    /// Writes `size` bytes of tagged, non-zero data with O_DIRECT, `fsync`s them and drops the
    /// file's pages from the page cache, so every later read comes from the device. Returns the
    /// seconds the writing took.
    fn write_test_file(path: &Path, size: u64, seed: u64) -> Result<f64, String> {
        let err = |e: io::Error| format!("{}: {e}", path.display());
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| {
                format!(
                    "{}: cannot create with O_DIRECT ({e}); --dir must be on a disk file system",
                    path.display()
                )
            })?;
        let mut buf = AlignedBuf::new(WRITE_CHUNK as usize).map_err(|e| e.message)?;
        // Random bytes once: no block is zero, so nothing below the file system can skip it.
        let mut rng = seed ^ 0x5eed;
        for w in buf.as_mut_slice().chunks_exact_mut(8) {
            w.copy_from_slice(&(splitmix64(&mut rng) | 1).to_le_bytes());
        }
        let t0 = Instant::now();
        let mut off = 0u64;
        while off < size {
            let n = WRITE_CHUNK.min(size - off) as usize;
            let b = &mut buf.as_mut_slice()[..n];
            for (i, block) in b.chunks_exact_mut(ALIGN as usize).enumerate() {
                block[..8].copy_from_slice(&tag(off + i as u64 * ALIGN).to_le_bytes());
            }
            f.write_all_at(b, off).map_err(err)?;
            off += n as u64;
        }
        f.sync_all().map_err(err)?;
        let seconds = t0.elapsed().as_secs_f64();
        // SAFETY: plain syscall on a descriptor this function owns.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(format!(
                "{}: posix_fadvise(DONTNEED): {}",
                path.display(),
                io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(seconds)
    }

    /// One read of [`Uring::read_all`]: `len` bytes at file offset `off` into a caller's buffer,
    /// continued where a read returned short.
    struct Job<'a> {
        off: u64,
        ptr: *mut u8,
        len: usize,
        done: usize,
        /// The job holds its buffer exclusively for `'a`; the kernel writes through `ptr`.
        _buf: PhantomData<&'a mut [u8]>,
    }

    impl<'a> Job<'a> {
        fn new(off: u64, buf: &'a mut [u8]) -> Job<'a> {
            Job {
                off,
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
                done: 0,
                _buf: PhantomData,
            }
        }
    }

    /// An io_uring instance and the O_DIRECT descriptor it reads.
    struct Uring {
        ring: IoUring,
        file: File,
    }

    impl Uring {
        /// Sets up a ring of [`RING_ENTRIES`] and opens `path` with O_DIRECT; the error says which
        /// of the two failed (`io_uring_setup` is what a disabled kernel or seccomp refuses).
        fn new(path: &Path) -> Result<Uring, String> {
            let ring = IoUring::new(RING_ENTRIES).map_err(|e| {
                let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                    .map(|s| format!("kernel.io_uring_disabled = {}", s.trim()))
                    .unwrap_or_else(|_| "no kernel.io_uring_disabled sysctl".into());
                format!("io_uring_setup({RING_ENTRIES}) failed: {e} ({sysctl})")
            })?;
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .map_err(|e| format!("{}: open with O_DIRECT: {e}", path.display()))?;
            Ok(Uring { ring, file })
        }

        /// Reads every job, keeping up to `depth` reads in flight (short reads continued, `EINTR`
        /// and `EAGAIN` resubmitted), and returns the SQEs submitted. Returns only once no read is
        /// in flight, also on error, so the kernel never writes into a buffer after its borrow
        /// ends.
        fn read_all(&mut self, jobs: &mut [Job<'_>], depth: usize) -> io::Result<usize> {
            let fd = types::Fd(self.file.as_raw_fd());
            let depth = depth.clamp(1, RING_ENTRIES as usize);
            let (mut next, mut in_flight, mut sqes) = (0usize, 0usize, 0usize);
            let mut again: Vec<usize> = Vec::new();
            let mut done: Vec<(u64, i32)> = Vec::with_capacity(depth);
            let mut first_err: Option<io::Error> = None;
            loop {
                // After an error nothing new is queued: only the reads in flight are drained.
                while first_err.is_none() && in_flight < depth {
                    let i = match again.pop() {
                        Some(i) => i,
                        None if next < jobs.len() => {
                            next += 1;
                            next - 1
                        }
                        None => break,
                    };
                    let j = &jobs[i];
                    let len = u32::try_from(j.len - j.done).expect("reads are < 4 GiB");
                    // SAFETY: `ptr + done .. ptr + len` lies inside the job's buffer.
                    let dst = unsafe { j.ptr.add(j.done) };
                    let sqe = opcode::Read::new(fd, dst, len)
                        .offset(j.off + j.done as u64)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: the buffer is exclusively borrowed by the job for longer than this
                    // call, and this call returns only once every read it submitted has completed
                    // (a failing submit ends the process), so the kernel writes into live memory
                    // nothing else touches. The ring has RING_ENTRIES ≥ depth ≥ in-flight slots.
                    unsafe { self.ring.submission().push(&sqe) }
                        .expect("submission queue has room for `depth` reads");
                    in_flight += 1;
                    sqes += 1;
                }
                if in_flight == 0 {
                    break;
                }
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                        ) => {}
                    Err(e) => {
                        // Reads may still be in flight into buffers this process cannot keep
                        // alive past an unwind: stop here rather than return.
                        eprintln!("io_uring_vs_pread: error: io_uring_enter: {e}");
                        std::process::exit(4);
                    }
                }
                done.clear();
                done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
                for &(ud, res) in &done {
                    let i = ud as usize;
                    in_flight -= 1;
                    if res < 0 {
                        if matches!(-res, libc::EINTR | libc::EAGAIN) {
                            again.push(i);
                        } else {
                            first_err.get_or_insert(io::Error::other(format!(
                                "read of {} bytes at offset {}: {}",
                                jobs[i].len - jobs[i].done,
                                jobs[i].off + jobs[i].done as u64,
                                io::Error::from_raw_os_error(-res)
                            )));
                        }
                    } else if res == 0 {
                        first_err.get_or_insert(io::Error::other(format!(
                            "read at offset {}: end of file",
                            jobs[i].off + jobs[i].done as u64
                        )));
                    } else {
                        jobs[i].done += res as usize;
                        if jobs[i].done < jobs[i].len {
                            again.push(i);
                        }
                    }
                }
            }
            match first_err {
                Some(e) => Err(e),
                None => Ok(sqes),
            }
        }
    }

    /// Everything a step reads with: the engine's file and thread pools, the ring, the buffers.
    struct Readers {
        file: IoFile,
        /// `IoThreads` pools by thread count, started before any timing (the engine keeps its
        /// pools for the whole run).
        pools: BTreeMap<usize, IoThreads>,
        uring: Option<Uring>,
        /// Big enough for the widened window of the largest single read.
        buf: AlignedBuf,
        /// top-k expert slots of `expert_stride` bytes.
        slots: AlignedBuf,
    }

    /// Cuts the window [lo, lo + len) into at most `depth` chunks on 4096-byte boundaries, the
    /// way `IoFile::read_window_split` does; returns (offset, bytes) of each.
    fn split_window(lo: u64, len: usize, depth: usize) -> Vec<(u64, usize)> {
        let pages = len / ALIGN as usize;
        let n = depth.min(pages).max(1);
        let per = pages.div_ceil(n) * ALIGN as usize;
        (0..len)
            .step_by(per)
            .map(|at| (lo + at as u64, per.min(len - at)))
            .collect()
    }

    /// Runs one step; returns the requests issued (preads or SQEs, continuations included) and
    /// the bytes transferred (widened windows).
    fn run_step(r: &mut Readers, st: &Step, s: &Sizes) -> Result<(usize, u64), String> {
        let ioerr = |e: k3::Error| e.message;
        let mut reqs = 0usize;
        let mut bytes = 0u64;
        match (st.shape, st.method) {
            (Shape::Trunk | Shape::LmHead, Method::Pread) => {
                for &(off, len) in &st.reads {
                    let len = len as usize;
                    let d = r
                        .file
                        .read_window_split(off, len, &mut r.buf, st.depth)
                        .map_err(ioerr)?;
                    let w = window(off, len).expect("small read");
                    check_window(&r.buf, w.lo, w.len)?;
                    reqs += split_window(w.lo, w.len, st.depth).len();
                    bytes += d.device_bytes;
                }
            }
            (Shape::Trunk | Shape::LmHead, Method::Uring) => {
                let u = r
                    .uring
                    .as_mut()
                    .expect("io_uring steps run only with a ring");
                for &(off, len) in &st.reads {
                    let w = window(off, len as usize).expect("small read");
                    let pieces = split_window(w.lo, w.len, st.depth);
                    let mut rest = &mut r.buf.as_mut_slice()[..w.len];
                    let mut jobs = Vec::with_capacity(pieces.len());
                    for &(at, n) in &pieces {
                        let (head, tail) = rest.split_at_mut(n);
                        rest = tail;
                        jobs.push(Job::new(at, head));
                    }
                    reqs += u.read_all(&mut jobs, st.depth).map_err(|e| e.to_string())?;
                    drop(jobs);
                    check_window(&r.buf, w.lo, w.len)?;
                    bytes += w.len as u64;
                }
            }
            (Shape::Experts, Method::Pread) => {
                let pool = &r.pools[&st.depth];
                let file = &r.file;
                let mut batch: Vec<ReadRequest<'_>> = r
                    .slots
                    .as_mut_slice()
                    .chunks_exact_mut(s.expert_stride as usize)
                    .zip(&st.reads)
                    .map(|(dest, &(off, len))| ReadRequest {
                        pieces: vec![Extent {
                            file,
                            offset: off,
                            len: len as usize,
                        }],
                        dest,
                        outcome: None,
                    })
                    .collect();
                pool.read_batch(&mut batch);
                for q in &batch {
                    let d = match &q.outcome {
                        Some(Ok(d)) => d,
                        Some(Err(e)) => return Err(e.message.clone()),
                        None => return Err("an expert read did not finish".into()),
                    };
                    let p = q.pieces[0];
                    let w = window(p.offset, p.len).expect("small read");
                    check_window(q.dest, w.lo, w.len)?;
                    bytes += d.device_bytes;
                }
                reqs += batch.len();
            }
            (Shape::Experts, Method::Uring) => {
                let u = r
                    .uring
                    .as_mut()
                    .expect("io_uring steps run only with a ring");
                let mut wins = Vec::with_capacity(st.reads.len());
                let mut jobs: Vec<Job<'_>> = r
                    .slots
                    .as_mut_slice()
                    .chunks_exact_mut(s.expert_stride as usize)
                    .zip(&st.reads)
                    .map(|(dest, &(off, len))| {
                        let w = window(off, len as usize).expect("small read");
                        wins.push(w);
                        Job::new(w.lo, &mut dest[..w.len])
                    })
                    .collect();
                reqs += u.read_all(&mut jobs, st.depth).map_err(|e| e.to_string())?;
                drop(jobs);
                for (dest, w) in r
                    .slots
                    .as_slice()
                    .chunks_exact(s.expert_stride as usize)
                    .zip(&wins)
                {
                    check_window(dest, w.lo, w.len)?;
                    bytes += w.len as u64;
                }
            }
            (Shape::Seq, method) => {
                let (off, len) = st.reads[0];
                let len = len as usize;
                // QD1 is one read of the whole window; deeper, 16 MiB pieces with QD in flight.
                let pieces: Vec<(u64, usize)> = if st.depth == 1 {
                    vec![(off, len)]
                } else {
                    (0..len)
                        .step_by(SEQ_PIECE as usize)
                        .map(|at| (off + at as u64, (SEQ_PIECE as usize).min(len - at)))
                        .collect()
                };
                let mut rest = &mut r.buf.as_mut_slice()[..len];
                let mut parts = Vec::with_capacity(pieces.len());
                for &(at, n) in &pieces {
                    let (head, tail) = rest.split_at_mut(n);
                    rest = tail;
                    parts.push((at, head));
                }
                match method {
                    Method::Pread => {
                        let file = &r.file;
                        let mut batch: Vec<ReadRequest<'_>> = parts
                            .into_iter()
                            .map(|(at, dest)| ReadRequest {
                                pieces: vec![Extent {
                                    file,
                                    offset: at,
                                    len: dest.len(),
                                }],
                                dest,
                                outcome: None,
                            })
                            .collect();
                        r.pools[&st.depth].read_batch(&mut batch);
                        for q in &batch {
                            match &q.outcome {
                                Some(Ok(d)) => bytes += d.device_bytes,
                                Some(Err(e)) => return Err(e.message.clone()),
                                None => return Err("a sequential read did not finish".into()),
                            }
                        }
                        reqs += batch.len();
                    }
                    Method::Uring => {
                        let u = r
                            .uring
                            .as_mut()
                            .expect("io_uring steps run only with a ring");
                        let mut jobs: Vec<Job<'_>> = parts
                            .into_iter()
                            .map(|(at, dest)| Job::new(at, dest))
                            .collect();
                        reqs += u.read_all(&mut jobs, st.depth).map_err(|e| e.to_string())?;
                        bytes += len as u64;
                    }
                }
                for &(at, n) in &pieces {
                    let b = (at - off) as usize;
                    check_window(&r.buf[b..b + n], at, n)?;
                }
            }
        }
        Ok((reqs, bytes))
    }

    /// User + system CPU seconds of the whole process (every thread, finished ones included).
    fn cpu_seconds() -> f64 {
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }

    /// One measured step.
    struct Row {
        shape: Shape,
        method: Method,
        depth: usize,
        rep: usize,
        first: bool,
        reads: usize,
        requests: usize,
        bytes: u64,
        seconds: f64,
        cpu_s: f64,
        device_bytes: Option<u64>,
        load1: String,
    }

    impl Row {
        fn gbps(&self) -> f64 {
            self.bytes as f64 / 1e9 / self.seconds.max(1e-9)
        }
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let code = match parse(&args) {
            Ok(None) => {
                print!("{USAGE}");
                0
            }
            Err(e) => {
                eprintln!("io_uring_vs_pread: error: {e}");
                2
            }
            Ok(Some(o)) => match run(&o, &args) {
                Ok(()) => 0,
                Err((code, e)) => {
                    eprintln!("io_uring_vs_pread: error: {e}");
                    code
                }
            },
        };
        std::process::exit(code);
    }

    fn quote(a: &str) -> String {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+".contains(c))
        {
            a.to_string()
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    }

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    /// (median, min, max) of a non-empty list.
    fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
        let m = median(&mut v);
        (m, v[0], v[v.len() - 1])
    }

    fn run(o: &Opts, args: &[String]) -> Result<(), (i32, String)> {
        let sizes = released_sizes().map_err(|e| (1, e))?;
        let (steps, need) = plan(o, &sizes);
        let need = need.div_ceil(WRITE_CHUNK) * WRITE_CHUNK;
        let size = match o.gb {
            None => need,
            Some(gb) => {
                let b = ((gb * 1e9) as u64).div_ceil(WRITE_CHUNK) * WRITE_CHUNK;
                if b < need {
                    return Err((
                        2,
                        format!(
                            "--gb {gb}: this run reads {:.2} GB of fresh bytes, so the test file \
                         must hold at least that (fewer --reps, --head-chunks or a smaller \
                         --trunk-mib / --seq-mib read less)",
                            need as f64 / 1e9
                        ),
                    ));
                }
                b
            }
        };
        std::fs::create_dir_all(&o.dir).map_err(|e| (2, format!("{}: {e}", o.dir.display())))?;
        let dir =
            std::fs::canonicalize(&o.dir).map_err(|e| (2, format!("{}: {e}", o.dir.display())))?;
        let free = free_bytes(&dir).map_err(|e| (2, format!("{}: statvfs: {e}", dir.display())))?;
        if free < size + FREE_MARGIN {
            return Err((
                3,
                format!(
                "{}: {:.1} GB free; the test file needs {:.1} GB and {:.0} GB are left for others",
                dir.display(),
                free as f64 / 1e9,
                size as f64 / 1e9,
                FREE_MARGIN as f64 / 1e9
            ),
            ));
        }
        let dev = idle::device_of(&dir);
        let load_start = machine::loadavg();
        eprintln!(
            "io_uring_vs_pread: {} steps, test file {:.2} GB in {} (device {}), load {load_start}",
            steps.len(),
            size as f64 / 1e9,
            dir.display(),
            dev.as_deref().unwrap_or("?")
        );

        let path = dir.join(format!("io-uring-vs-pread-{}.bin", std::process::id()));
        let write_s = write_test_file(&path, size, o.seed).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            (4, e)
        })?;
        let guard = TestFile { path: path.clone() };
        eprintln!(
            "io_uring_vs_pread: wrote {:.2} GB in {write_s:.1} s ({:.0} MB/s), fsynced, DONTNEED",
            size as f64 / 1e9,
            size as f64 / 1e6 / write_s
        );

        let file = IoFile::open(&path).map_err(|e| (4, e.message))?;
        if !file.is_direct() {
            return Err((2, format!("{}: O_DIRECT refused", path.display())));
        }
        let (uring, uring_status) = match Uring::new(&path) {
            Ok(u) => (
                Some(u),
                format!("ok: {RING_ENTRIES} entries, IORING_OP_READ, no SQPOLL"),
            ),
            Err(e) => {
                eprintln!("io_uring_vs_pread: io_uring unavailable, measuring pread alone: {e}");
                (None, format!("unavailable: {e}"))
            }
        };
        let mut pools = BTreeMap::new();
        for d in EXPERT_DEPTHS.iter().chain(&SEQ_DEPTHS) {
            if !pools.contains_key(d) {
                pools.insert(*d, IoThreads::new(*d).map_err(|e| (3, e.message))?);
            }
        }
        let largest = o.trunk_bytes.max(o.seq_bytes).max(sizes.head_chunk) as usize;
        let mut readers = Readers {
            file,
            pools,
            uring,
            buf: AlignedBuf::new(window_capacity(largest).expect("small"))
                .map_err(|e| (3, e.message))?,
            slots: AlignedBuf::new(sizes.top_k * sizes.expert_stride as usize)
                .map_err(|e| (3, e.message))?,
        };

        let before = idle::sample(Duration::from_secs(2), dev.as_deref())
            .map_err(|e| (4, format!("idle check: {e}")))?;
        let limits = idle::IdleLimits::default();
        eprintln!("io_uring_vs_pread: before: {}", before.describe(limits));
        let mut rows: Vec<Row> = Vec::with_capacity(steps.len());
        let mut uring_failure: Option<String> = None;
        let t_all = Instant::now();
        for st in &steps {
            if st.method == Method::Uring && readers.uring.is_none() {
                continue;
            }
            let sectors0 = dev.as_deref().and_then(idle::device_sectors_read);
            let cpu0 = cpu_seconds();
            let t0 = Instant::now();
            let out = run_step(&mut readers, st, &sizes);
            let seconds = t0.elapsed().as_secs_f64();
            let cpu_s = cpu_seconds() - cpu0;
            let sectors1 = dev.as_deref().and_then(idle::device_sectors_read);
            let (requests, bytes) = match out {
                Ok(x) => x,
                Err(e) if st.method == Method::Uring => {
                    // A kernel that sets a ring up but refuses its reads: record why, go on.
                    eprintln!(
                        "io_uring_vs_pread: io_uring read failed, pread alone from here: {e}"
                    );
                    uring_failure = Some(e);
                    readers.uring = None;
                    continue;
                }
                Err(e) => return Err((4, e)),
            };
            let row = Row {
                shape: st.shape,
                method: st.method,
                depth: st.depth,
                rep: st.rep,
                first: st.first,
                reads: st.reads.len(),
                requests,
                bytes,
                seconds,
                cpu_s,
                device_bytes: sectors0.zip(sectors1).map(|(a, b)| (b - a) * 512),
                load1: machine::loadavg()
                    .split(' ')
                    .next()
                    .unwrap_or("?")
                    .to_string(),
            };
            eprintln!(
            "io_uring_vs_pread: {:<7} {:<8} depth {:<2} rep {} {:>6.0} MB {:>6.3} s {:>5.2} GB/s cpu {:.3} s load1 {}",
            row.shape.name(),
            row.method.name(),
            row.depth,
            row.rep,
            row.bytes as f64 / 1e6,
            row.seconds,
            row.gbps(),
            row.cpu_s,
            row.load1
        );
            rows.push(row);
        }
        let wall = t_all.elapsed().as_secs_f64();
        let after = idle::sample(Duration::from_secs(2), dev.as_deref())
            .map_err(|e| (4, format!("idle check: {e}")))?;
        eprintln!("io_uring_vs_pread: after: {}", after.describe(limits));
        drop(readers);
        drop(guard);
        let load_end = machine::loadavg();

        let tsv = report(
            o,
            args,
            &ReportHead {
                dir: &dir,
                size,
                write_s,
                uring_status: match &uring_failure {
                    Some(e) => format!("{uring_status}; then a read failed: {e}"),
                    None => uring_status,
                },
                before: before.describe(limits),
                after: after.describe(limits),
                load_start,
                load_end,
                wall,
                sizes: &sizes,
            },
            &rows,
        );
        let out = o.out.clone().unwrap_or_else(|| {
            let date: String = machine::utc_now()[..10].replace('-', "");
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("results")
                .join(format!("io-uring-vs-pread-{date}.tsv"))
        });
        if let Some(d) = out.parent() {
            std::fs::create_dir_all(d).map_err(|e| (4, format!("{}: {e}", d.display())))?;
        }
        std::fs::write(&out, &tsv).map_err(|e| (4, format!("{}: {e}", out.display())))?;
        print!("{tsv}");
        eprintln!("io_uring_vs_pread: wrote {}", out.display());
        Ok(())
    }

    /// The head lines of the result file besides the machine.
    struct ReportHead<'a> {
        dir: &'a Path,
        size: u64,
        write_s: f64,
        uring_status: String,
        before: String,
        after: String,
        load_start: String,
        load_end: String,
        wall: f64,
        sizes: &'a Sizes,
    }

    /// The TSV: command, machine, conditions; every step (`run` rows); per point the median and
    /// range of GB/s, its ratio to the device's best pattern, and the paired io_uring ÷ pread
    /// ratios of the same repetitions (`summary` rows); the device figure (`device` row).
    fn report(o: &Opts, args: &[String], h: &ReportHead<'_>, rows: &[Row]) -> String {
        let mut t = String::new();
        let cmd: Vec<String> = args.iter().map(|a| quote(a)).collect();
        let _ = writeln!(
            t,
            "# k3 I/O depth: pread threads vs io_uring (bench/src/bin/io_uring_vs_pread.rs)"
        );
        let _ = writeln!(
            t,
            "# command\tcargo run --release -p k3-bench --bin io_uring_vs_pread -- {}",
            cmd.join(" ")
        );
        for (k, v) in machine::describe()
            .into_iter()
            .chain(machine::describe_storage(h.dir))
        {
            let _ = writeln!(t, "# {k}\t{v}");
        }
        let _ = writeln!(
        t,
        "# test_file\t{} bytes in {}, written with O_DIRECT in {:.1} s ({:.0} MB/s), fsync, POSIX_FADV_DONTNEED; removed",
        h.size,
        h.dir.display(),
        h.write_s,
        h.size as f64 / 1e6 / h.write_s
    );
        let _ = writeln!(
        t,
        "# shapes\ttrunk piece {} B; expert batch {} x {} B (unaligned, widened; slot stride {}); lm_head {} chunks x {} B; seq window {} B (16 MiB pieces above QD1); {} reps; every byte read once",
        o.trunk_bytes,
        h.sizes.top_k,
        h.sizes.expert,
        h.sizes.expert_stride,
        o.head_chunks,
        h.sizes.head_chunk,
        o.seq_bytes,
        o.reps
    );
        let _ = writeln!(t, "# io_uring\t{}", h.uring_status);
        let _ = writeln!(t, "# loadavg_start\t{}", h.load_start);
        let _ = writeln!(t, "# loadavg_end\t{}", h.load_end);
        let _ = writeln!(t, "# idle_before\t{}", h.before);
        let _ = writeln!(t, "# idle_after\t{}", h.after);
        let _ = writeln!(t, "# measuring_wall_s\t{:.1}", h.wall);
        let _ = writeln!(
        t,
        "# columns run\tshape method depth rep first reads requests bytes seconds gb_per_s cpu_s device_bytes load1"
    );
        let _ = writeln!(
        t,
        "# columns summary\tshape method depth n median_gb_per_s min max median_vs_device_best median_vs_best_any uring_over_pread_median min max median_cpu_s"
    );
        let _ = writeln!(
        t,
        "# columns device\tbest_gb_per_s method depth rep best_pread_gb_per_s best_uring_gb_per_s (the best seq step: the device's best pattern)"
    );
        let _ = writeln!(
        t,
        "# columns best_any\tbest_gb_per_s shape method depth rep (the fastest step of any shape: the device figure when it beats the pattern, bench/README.md)"
    );
        for r in rows {
            let _ = writeln!(
                t,
                "run\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.4}\t{:.3}\t{:.3}\t{}\t{}",
                r.shape.name(),
                r.method.name(),
                r.depth,
                r.rep,
                u8::from(r.first),
                r.reads,
                r.requests,
                r.bytes,
                r.seconds,
                r.gbps(),
                r.cpu_s,
                r.device_bytes.map_or("-".into(), |b| b.to_string()),
                r.load1
            );
        }
        let seq: Vec<&Row> = rows.iter().filter(|r| r.shape == Shape::Seq).collect();
        let best = seq
            .iter()
            .max_by(|a, b| a.gbps().total_cmp(&b.gbps()))
            .expect("the device pattern always runs");
        let best_of = |m: Method| {
            seq.iter()
                .filter(|r| r.method == m)
                .map(|r| r.gbps())
                .fold(f64::NAN, f64::max)
        };
        // As in the roofline harness: when a shape read faster than every pattern, that rate is
        // the device figure too, so no ratio against it flatters either method.
        let any = rows
            .iter()
            .max_by(|a, b| a.gbps().total_cmp(&b.gbps()))
            .expect("the device pattern always runs");
        let mut points: BTreeMap<(Shape, usize, Method), Vec<&Row>> = BTreeMap::new();
        for r in rows {
            points
                .entry((r.shape, r.depth, r.method))
                .or_default()
                .push(r);
        }
        for ((shape, depth, method), rs) in &points {
            let (m, lo, hi) = spread(rs.iter().map(|r| r.gbps()).collect());
            let (cpu, _, _) = spread(rs.iter().map(|r| r.cpu_s).collect());
            // Paired by repetition: the two methods' reads of the same point, minutes apart at most.
            let ratio = if *method == Method::Uring {
                let pr = &points.get(&(*shape, *depth, Method::Pread));
                let v: Vec<f64> = rs
                    .iter()
                    .filter_map(|u| {
                        pr.and_then(|p| p.iter().find(|p| p.rep == u.rep))
                            .map(|p| u.gbps() / p.gbps())
                    })
                    .collect();
                if v.is_empty() {
                    "-\t-\t-".to_string()
                } else {
                    let (a, b, c) = spread(v);
                    format!("{a:.3}\t{b:.3}\t{c:.3}")
                }
            } else {
                "-\t-\t-".to_string()
            };
            let _ = writeln!(
            t,
            "summary\t{}\t{}\t{depth}\t{}\t{m:.3}\t{lo:.3}\t{hi:.3}\t{:.3}\t{:.3}\t{ratio}\t{cpu:.3}",
            shape.name(),
            method.name(),
            rs.len(),
            m / best.gbps(),
            m / any.gbps()
        );
        }
        let _ = writeln!(
            t,
            "device\t{:.3}\t{}\t{}\t{}\t{:.3}\t{:.3}",
            best.gbps(),
            best.method.name(),
            best.depth,
            best.rep,
            best_of(Method::Pread),
            best_of(Method::Uring)
        );
        let _ = writeln!(
            t,
            "best_any\t{:.3}\t{}\t{}\t{}\t{}",
            any.gbps(),
            any.shape.name(),
            any.method.name(),
            any.depth,
            any.rep
        );
        t
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn opts() -> Opts {
            parse(&[]).unwrap().unwrap()
        }

        #[test]
        fn every_byte_is_read_once() {
            let s = released_sizes().unwrap();
            assert_eq!(s.expert, 17_547_264);
            assert_eq!(s.head_chunk, 33_546_240);
            let (steps, need) = plan(&opts(), &s);
            let mut ranges: Vec<(u64, u64)> = steps
                .iter()
                .flat_map(|st| st.reads.iter())
                .map(|&(off, len)| {
                    let w = window(off, len as usize).unwrap();
                    (w.lo, w.lo + w.len as u64)
                })
                .collect();
            ranges.sort_unstable();
            assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "overlap");
            assert!(ranges.last().unwrap().1 <= need);
            // Each point has both methods in every repetition, and they alternate the lead.
            for rep in 0..3 {
                let leads: Vec<Method> = steps
                    .iter()
                    .filter(|st| st.rep == rep && st.first && st.shape == Shape::Trunk)
                    .map(|st| st.method)
                    .collect();
                let want = if rep % 2 == 0 {
                    Method::Pread
                } else {
                    Method::Uring
                };
                assert!(leads.len() == 4 && leads.iter().all(|&m| m == want));
            }
        }

        #[test]
        fn split_matches_the_engine() {
            assert_eq!(
                split_window(0, 8 * 4096, 3),
                vec![(0, 3 * 4096), (3 * 4096, 3 * 4096), (6 * 4096, 2 * 4096)]
            );
            assert_eq!(split_window(4096, 4096, 8), vec![(4096, 4096)]);
        }
    }
}
