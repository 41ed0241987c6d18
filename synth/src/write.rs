//! Writing a checkpoint to a directory: staged aligned writes on worker threads.

use crate::*;

/// Bytes per write: shards are written in aligned writes of this size (the last one of a shard
/// padded to 4096 and the file then truncated to its exact size), so an opener may use
/// `O_DIRECT` and bypass the page cache. Not part of the byte recipe.
pub const STAGE_BYTES: usize = 64 << 20;

/// Alignment of every write's buffer address, offset and length.
pub const WRITE_ALIGN: usize = 4096;

/// Progress of [`generate`], reported after each write.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Shard bytes written so far (headers included).
    pub done_bytes: u64,
    /// Shard bytes in all.
    pub total_bytes: u64,
    /// Seconds since generation started.
    pub seconds: f64,
    /// Zero-based index of the shard being written.
    pub shard: usize,
    /// Number of shards.
    pub shards: usize,
}

/// Opens a new shard file for writing (created or truncated). The default is
/// `File::create`; the xtask passes one that adds `O_DIRECT` where the file system allows it.
pub type Opener = dyn Fn(&Path) -> io::Result<File> + Sync;

/// Options of [`generate`].
pub struct Options<'a> {
    /// Generator threads (≥ 1); the calling thread writes.
    pub threads: usize,
    /// Replace an existing checkpoint in the directory (only files a generator writes are
    /// removed; any other file makes [`generate`] fail).
    pub force: bool,
    /// `fdatasync` each shard before renaming it into place (honest timing, crash safety).
    pub sync: bool,
    /// Progress callback, called on the calling thread after each write.
    pub progress: Option<&'a mut dyn FnMut(&Progress)>,
    /// Shard opener; `None` = `File::create`.
    pub open: Option<&'a Opener>,
    /// Bytes per write and per generated unit (rounded up to 4096); `None` = [`STAGE_BYTES`]
    /// or the largest shard if smaller. Never changes the bytes written.
    pub stage_bytes: Option<usize>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            threads: 1,
            force: false,
            sync: false,
            progress: None,
            open: None,
            stage_bytes: None,
        }
    }
}

/// What [`generate`] wrote.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The plan that was written.
    pub plan: Plan,
    /// Shard bytes written.
    pub bytes: u64,
    /// Wall-clock seconds of the shard writing (including syncs).
    pub seconds: f64,
}

/// Files a generator writes into a model directory; `force` removes only these.
fn is_generated_file(name: &str) -> bool {
    name == "config.json"
        || name == "model.safetensors.index.json"
        || name == "synth.json"
        // the tokenizer files `cargo xtask synth --tokenizer` copies in
        || name == "tiktoken.model"
        || name == "tokenizer_config.json"
        || (name.starts_with("model-")
            && (name.ends_with(".safetensors") || name.ends_with(".safetensors.partial")))
        || name.ends_with(".json.tmp")
}

fn io_err(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

pub(crate) fn prepare_dir(dir: &Path, force: bool) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, "cannot create directory", e))?;
    let mut foreign = Vec::new();
    let mut ours = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, "cannot list directory", e))? {
        let entry = entry.map_err(|e| io_err(dir, "cannot list directory", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if is_file && is_generated_file(&name) {
            ours.push(entry.path());
        } else {
            foreign.push(name);
        }
    }
    if !foreign.is_empty() {
        foreign.sort();
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{}: holds files a synthetic checkpoint does not write ({}); choose an empty \
                 directory",
                dir.display(),
                foreign.join(", ")
            ),
        ));
    }
    if !ours.is_empty() {
        if !force {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{}: already holds a checkpoint ({} files); pass --force to replace it",
                    dir.display(),
                    ours.len()
                ),
            ));
        }
        for p in ours {
            fs::remove_file(&p).map_err(|e| io_err(&p, "cannot remove", e))?;
        }
    }
    Ok(())
}

/// Writes `text` to `dir/name` through a temporary name and a rename.
pub(crate) fn write_small(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    fs::write(&tmp, text).map_err(|e| io_err(&tmp, "cannot write", e))?;
    fs::rename(&tmp, &path).map_err(|e| io_err(&path, "cannot rename into place", e))
}

/// One write unit: bytes `[start, end)` of a shard file, `start` a multiple of the stage size.
/// Units are generated in parallel and written in order.
struct Unit {
    shard: usize,
    start: u64,
    end: u64,
}

fn cut_units(plan: &Plan, stage: u64) -> Vec<Unit> {
    let mut units = Vec::new();
    for (si, s) in plan.shards.iter().enumerate() {
        let size = s.file_size();
        let mut start = 0;
        while start < size {
            let end = (start + stage).min(size);
            units.push(Unit {
                shard: si,
                start,
                end,
            });
            start = end;
        }
    }
    units
}

/// A buffer of `cap` bytes whose payload starts at a `WRITE_ALIGN`-aligned address (found
/// inside an over-allocated `Vec`, so no unsafe code is needed).
struct Stage {
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl Stage {
    fn new(cap: usize) -> Stage {
        let mem = vec![0u8; cap + WRITE_ALIGN];
        let addr = mem.as_ptr() as usize;
        let start = (WRITE_ALIGN - addr % WRITE_ALIGN) % WRITE_ALIGN;
        Stage { mem, start, len: 0 }
    }

    /// Sets the payload length to `len` rounded up to `WRITE_ALIGN` (zero padding past `len`)
    /// and returns the first `len` bytes for filling.
    fn prepare(&mut self, len: usize) -> &mut [u8] {
        let padded = len.div_ceil(WRITE_ALIGN) * WRITE_ALIGN;
        self.mem[self.start + len..self.start + padded].fill(0);
        self.len = padded;
        &mut self.mem[self.start..self.start + len]
    }

    fn payload(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }
}

/// Fills `out` with bytes `[start, start + out.len())` of shard `s`'s file: the 8-byte header
/// length, the header, then the tensors' blocks. A block cut by the unit boundary is generated
/// whole into `scratch` and the overlap copied.
fn fill_unit(
    gen: &Generator<'_>,
    s: &ShardPlan,
    tensor_base: usize,
    start: u64,
    out: &mut [u8],
    scratch: &mut Vec<u8>,
) {
    let end = start + out.len() as u64;
    let mut head = Vec::new();
    let data_start = s.data_start();
    if start < data_start {
        head.extend_from_slice(&(s.header.len() as u64).to_le_bytes());
        head.extend_from_slice(&s.header);
        let n = (data_start.min(end) - start) as usize;
        out[..n].copy_from_slice(&head[start as usize..start as usize + n]);
    }
    // First tensor ending after the unit start.
    let first = s.tensors.partition_point(|t| data_start + t.end <= start);
    for (ti, t) in s.tensors.iter().enumerate().skip(first) {
        let (tb, te) = (data_start + t.begin, data_start + t.end);
        if tb >= end {
            break;
        }
        let lo = tb.max(start);
        let hi = te.min(end);
        let mut k = (lo - tb) / BLOCK_BYTES;
        while tb + k * BLOCK_BYTES < hi {
            let bs = tb + k * BLOCK_BYTES;
            let be = (bs + BLOCK_BYTES).min(te);
            let (a, b) = (bs.max(start), be.min(end));
            let dst = &mut out[(a - start) as usize..(b - start) as usize];
            if a == bs && b == be {
                gen.fill(tensor_base + ti, k, dst);
            } else {
                scratch.resize((be - bs) as usize, 0);
                gen.fill(tensor_base + ti, k, scratch);
                dst.copy_from_slice(&scratch[(a - bs) as usize..(b - bs) as usize]);
            }
            k += 1;
        }
    }
}

/// Writes the checkpoint of `spec` into `dir`: every shard (to `<name>.partial`, renamed when
/// complete), then the index, `synth.json` and finally `config.json`, so an interrupted run
/// never leaves a loadable-looking directory. `opts.threads` threads generate the shard files
/// in aligned units of up to 64 MiB, straight into the buffers that are written; the calling
/// thread writes the units in order with large sequential writes, so generation overlaps the
/// disk.
///
/// Errors: an invalid spec (`InvalidInput`, naming the field), a directory holding other files
/// or (without `force`) an existing checkpoint (`AlreadyExists`), any I/O error (naming the
/// path).
pub fn generate(spec: &SynthSpec, dir: &Path, mut opts: Options<'_>) -> io::Result<Summary> {
    let plan = spec
        .plan()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("synth spec: {e}")))?;
    prepare_dir(dir, opts.force)?;
    let gen = Generator::new(
        spec.seed,
        plan.shards
            .iter()
            .flat_map(|s| s.tensors.iter().map(|t| &t.def)),
    );
    let mut tensor_base = Vec::with_capacity(plan.shards.len());
    let mut n = 0;
    for s in &plan.shards {
        tensor_base.push(n);
        n += s.tensors.len();
    }
    // Small checkpoints (tests) get small stages.
    let largest = plan
        .shards
        .iter()
        .map(ShardPlan::file_size)
        .max()
        .unwrap_or(0);
    let align = WRITE_ALIGN as u64;
    let stage_cap = match opts.stage_bytes {
        Some(n) => (n.max(1) as u64).div_ceil(align) * align,
        None => (STAGE_BYTES as u64).min(largest.div_ceil(align) * align),
    } as usize;
    let units = cut_units(&plan, stage_cap as u64);
    let threads = opts.threads.max(1);
    let start = Instant::now();

    let next_unit = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let (free_tx, free_rx) = mpsc::channel::<Stage>();
    for _ in 0..threads + 2 {
        let _ = free_tx.send(Stage::new(stage_cap));
    }
    let free_rx = Mutex::new(free_rx);
    let (done_tx, done_rx) = mpsc::channel::<(usize, Stage)>();

    std::thread::scope(|scope| -> io::Result<()> {
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            let (gen, units, plan, tensor_base) = (&gen, &units, &plan, &tensor_base);
            let (free_rx, next_unit, abort) = (&free_rx, &next_unit, &abort);
            scope.spawn(move || {
                let mut scratch = Vec::new();
                loop {
                    // Take a buffer before claiming a unit: the unit the writer waits for is
                    // then always held by a thread that can finish it.
                    let mut stage = match free_rx.lock().map(|rx| rx.recv()) {
                        Ok(Ok(b)) => b,
                        _ => return,
                    };
                    if abort.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next_unit.fetch_add(1, Ordering::Relaxed);
                    if i >= units.len() {
                        return;
                    }
                    let u = &units[i];
                    let out = stage.prepare((u.end - u.start) as usize);
                    let s = &plan.shards[u.shard];
                    fill_unit(gen, s, tensor_base[u.shard], u.start, out, &mut scratch);
                    if done_tx.send((i, stage)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        let written = write_units(&plan, dir, &units, done_rx, free_tx, &mut opts, start);
        if written.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        written
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let bytes = plan.shard_bytes();
    write_small(dir, "model.safetensors.index.json", &plan.index_json())?;
    write_small(dir, "synth.json", &spec.synth_json(bytes))?;
    write_small(dir, "config.json", &spec.config_json())?;
    Ok(Summary {
        plan,
        bytes,
        seconds,
    })
}

/// The writing loop (calling thread): receives generated units, writes them in order, opens
/// and closes shards, returns buffers to the pool. Dropping `free_tx` and `done_rx` on return
/// (also on error) ends the generator threads.
fn write_units(
    plan: &Plan,
    dir: &Path,
    units: &[Unit],
    done_rx: mpsc::Receiver<(usize, Stage)>,
    free_tx: mpsc::Sender<Stage>,
    opts: &mut Options<'_>,
    start: Instant,
) -> io::Result<()> {
    let default_open = |p: &Path| File::create(p);
    let open: &Opener = opts.open.unwrap_or(&default_open);
    let total = plan.shard_bytes();
    let mut pending: BTreeMap<usize, Stage> = BTreeMap::new();
    let mut next = 0usize;
    let mut done_bytes = 0u64;
    let mut cur: Option<(File, PathBuf)> = None;
    while next < units.len() {
        let (i, stage) = done_rx
            .recv()
            .map_err(|_| io::Error::other("synth: generator threads stopped early"))?;
        pending.insert(i, stage);
        while let Some(stage) = pending.remove(&next) {
            let u = &units[next];
            let s = &plan.shards[u.shard];
            if u.start == 0 {
                let partial = dir.join(format!("{}.partial", s.file_name));
                let f = open(&partial).map_err(|e| io_err(&partial, "cannot create", e))?;
                cur = Some((f, partial));
            }
            let (file, partial) = cur.as_mut().expect("a shard is open");
            file.write_all(stage.payload())
                .map_err(|e| io_err(partial, "write failed", e))?;
            if u.end == s.file_size() {
                let (file, partial) = cur.take().expect("a shard is open");
                // Drop the zero padding of the last aligned write.
                file.set_len(u.end)
                    .map_err(|e| io_err(&partial, "cannot truncate", e))?;
                if opts.sync {
                    file.sync_data()
                        .map_err(|e| io_err(&partial, "fdatasync failed", e))?;
                }
                drop(file);
                let path = dir.join(&s.file_name);
                fs::rename(&partial, &path)
                    .map_err(|e| io_err(&path, "cannot rename into place", e))?;
            }
            done_bytes += u.end - u.start;
            let _ = free_tx.send(stage);
            if let Some(p) = opts.progress.as_deref_mut() {
                p(&Progress {
                    done_bytes,
                    total_bytes: total,
                    seconds: start.elapsed().as_secs_f64(),
                    shard: u.shard,
                    shards: plan.shards.len(),
                });
            }
            next += 1;
        }
    }
    Ok(())
}
