//! The prefix cache on disk (`--prefix-cache DIR`, ENGINE.md §9): the snapshots taken at the
//! end of a prompt, kept as ordinary session state files (FORMATS.md §9) so that a held
//! prefix — an agent's system prompt and tool list — survives a restart.
//!
//! **What a file holds.** A state file keeps its last id pending (n_ids = n_pos + 1), while a
//! snapshot at a prompt's end has run every id and holds the last logits. The disk copy of a
//! prompt of L ids is therefore written one position earlier: the state after L − 1
//! positions with the prompt's last id pending ([`prefill`] runs the prompt in two parts to
//! get it). The file is an ordinary state file (`k3 --load-state` reads it; no new format
//! version), and a hit runs the pending id together with the request's new ids: the reply is
//! bit-identical to a cold one, since the engine is bit-identical at any chunking. The price
//! is one extra one-position forward when a copy is written (a trunk pass when streaming);
//! an exact hit costs that one position again.
//!
//! **Names and identity.** `DIR/<key>.k3state`, the key = FNV-1a-64 over the config
//! fingerprint, the weights tag and the L ids (hex). At start every `*.k3state` file is
//! checked by its header and ids (no body read): a file of another config, weights or engine
//! version is skipped and left alone (DIR may be shared); a file of this model whose header,
//! size or ids are inconsistent is logged and removed. The body and its checksum are
//! verified when a file is used (a damaged one is then logged and removed, and the request
//! runs cold).
//!
//! **Bounds.** The files' total size stays within `--prefix-cache-gb`; the least recently
//! used go first (the start order is the files' modification times). Writes go to one writer
//! thread through a rendezvous channel: a copy is written only when the writer is idle (else
//! skipped — the snapshot is still held in memory), so at most one state waits in memory and
//! the scheduler's steps never wait for the disk. Each write is `<name>.tmp`, sync, rename: a
//! crash leaves no half file under a cache name.

use crate::error::{Error, ErrorKind, Result};
use crate::fnv::Fnv1a64;
use crate::generate::session::{Progress, Sequence, SequenceOptions, Session};
use crate::generate::state_file::{self, SequenceState, StateIdentity, FIXED_HEADER, MAGIC};
use crate::model::experts::ExpertSource;
use crate::model::{Model, TrunkSource};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// The file name suffix of a cache file.
pub const SUFFIX: &str = "k3state";
/// `--prefix-cache-gb` when not given (decimal GB).
pub const DEFAULT_GB: f64 = 20.0;

/// One file of this model held in the index.
#[derive(Debug)]
struct Entry {
    /// The L ids the file covers: L − 1 run, the last pending.
    ids: Vec<u32>,
    path: PathBuf,
    bytes: u64,
    used: u64,
    /// The writer has committed it (a file being written is never read).
    ready: bool,
}

/// What the writer thread reports back: the path and whether it was committed.
type Outcomes = Arc<Mutex<Vec<(PathBuf, bool)>>>;

/// The cache: the index of this model's files, the size bound, the writer thread.
pub struct PrefixCache {
    dir: PathBuf,
    id: StateIdentity,
    max_bytes: u64,
    entries: Vec<Entry>,
    clock: u64,
    /// Who logs (`k3 serve`, `k3 chat`).
    who: &'static str,
    writer: Option<SyncSender<(PathBuf, SequenceState)>>,
    outcomes: Outcomes,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("dir", &self.dir)
            .field("entries", &self.entries.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// How one file's header and ids compare with the running model.
enum Scan {
    /// This model's file: its ids.
    Ours(Vec<u32>),
    /// Another config, weights or engine version: left alone.
    Foreign(String),
    /// This model's, but inconsistent: removed.
    Damaged(String),
}

impl PrefixCache {
    /// Opens (creating it if missing) the cache directory `dir` for the model `id`, bounded
    /// to `max_bytes`, and indexes its files (module docs); `who` starts the log lines.
    /// Files beyond the bound are evicted at once (least recently modified first).
    ///
    /// Errors (exit 2, naming `--prefix-cache`): the directory cannot be created or read, or
    /// is not a directory; the writer thread cannot start (exit 1).
    pub fn open(
        dir: &Path,
        id: StateIdentity,
        max_bytes: u64,
        who: &'static str,
    ) -> Result<PrefixCache> {
        let flag = |e: String| {
            Error::invalid(format!(
                "flag `--prefix-cache {}`: {e}; give a writable directory",
                dir.display()
            ))
        };
        std::fs::create_dir_all(dir).map_err(|e| flag(format!("cannot create it: {e}")))?;
        if !dir.is_dir() {
            return Err(flag("not a directory".into()));
        }
        // a read-only directory would fail every write later, silently: refused now
        let probe = dir.join(format!(".k3-probe-{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(|e| flag(format!("cannot write in it: {e}")))?;
        let _ = std::fs::remove_file(&probe);
        let mut found = Vec::new();
        let rd = std::fs::read_dir(dir).map_err(|e| flag(format!("cannot list it: {e}")))?;
        for ent in rd.flatten() {
            let path = ent.path();
            if path.extension().and_then(|e| e.to_str()) != Some(SUFFIX) {
                continue;
            }
            let Ok(meta) = ent.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            match scan(&path, meta.len(), &id) {
                Ok(Scan::Ours(ids)) => {
                    let mtime = meta.modified().ok();
                    found.push((mtime, ids, path, meta.len()));
                }
                Ok(Scan::Foreign(why)) => {
                    crate::sayln!("{who}: prefix cache: skipping {} ({why})", path.display())
                }
                Ok(Scan::Damaged(why)) => {
                    crate::sayln!("{who}: prefix cache: removing {}: {why}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => crate::sayln!(
                    "{who}: prefix cache: skipping {}: {}",
                    path.display(),
                    e.message
                ),
            }
        }
        found.sort_by_key(|f| f.0);
        let entries = found
            .into_iter()
            .enumerate()
            .map(|(i, (_, ids, path, bytes))| Entry {
                ids,
                path,
                bytes,
                used: i as u64 + 1,
                ready: true,
            })
            .collect::<Vec<_>>();
        let outcomes: Outcomes = Arc::default();
        let (tx, rx) = sync_channel::<(PathBuf, SequenceState)>(0);
        let thread = {
            let (outcomes, id) = (Arc::clone(&outcomes), id.clone());
            std::thread::Builder::new()
                .name("k3-prefix-cache".into())
                .spawn(move || {
                    for (path, st) in rx {
                        let res = state_file::save("--prefix-cache", &path, &id, &st);
                        drop(st);
                        if let Err(e) = &res {
                            crate::sayln!("{who}: prefix cache: not written: {}", e.message);
                        }
                        outcomes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((path, res.is_ok()));
                    }
                })
                .map_err(|e| Error::internal(format!("prefix cache: no writer thread: {e}")))?
        };
        let mut c = PrefixCache {
            dir: dir.to_path_buf(),
            clock: entries.len() as u64,
            entries,
            id,
            max_bytes,
            who,
            writer: Some(tx),
            outcomes,
            thread: Some(thread),
        };
        c.evict_for(0);
        crate::sayln!(
            "{who}: prefix cache: {}, {} of this model ({} of {})",
            dir.display(),
            crate::units::count(c.len() as u64, "file", "files"),
            crate::units::gb(c.bytes()),
            crate::units::gb(max_bytes)
        );
        Ok(c)
    }

    /// Files indexed (written or being written).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no file is indexed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the indexed files.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    /// Whether a prompt of `ids` would be written ([`PrefixCache::store`]): no file of its ids
    /// is indexed and the writer runs. A caller then prefills all but the last id first.
    pub fn will_store(&self, ids: &[u32]) -> bool {
        !self.holds(ids) && self.writer.is_some()
    }

    /// Whether a file of exactly `ids` is indexed (written or being written).
    pub fn holds(&self, ids: &[u32]) -> bool {
        self.entries.iter().any(|e| e.ids == ids)
    }

    /// Takes in what the writer finished: committed files become readable, failed ones
    /// leave the index.
    fn sync(&mut self) {
        let done = std::mem::take(&mut *self.outcomes.lock().unwrap_or_else(|p| p.into_inner()));
        for (path, ok) in done {
            if ok {
                if let Some(e) = self.entries.iter_mut().find(|e| e.path == path) {
                    e.ready = true;
                }
            } else {
                self.entries.retain(|e| e.path != path);
            }
        }
    }

    /// Waits until the writer has finished every write handed to it (tests, and `k3 chat`
    /// before it exits); the cache takes no more writes after it.
    pub fn flush(&mut self) {
        self.writer = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.sync();
    }

    /// Evicts the least recently used files until `incoming` more bytes fit the bound.
    fn evict_for(&mut self, incoming: u64) {
        while !self.entries.is_empty() && self.bytes() + incoming > self.max_bytes {
            // a file being written is never removed under the writer
            let Some(i) = (0..self.entries.len())
                .filter(|&i| self.entries[i].ready)
                .min_by_key(|&i| self.entries[i].used)
            else {
                break;
            };
            let e = self.entries.swap_remove(i);
            let _ = std::fs::remove_file(&e.path);
        }
    }

    /// The path of the file for `ids`.
    fn path_for(&self, ids: &[u32]) -> PathBuf {
        let mut h = Fnv1a64::new();
        h.update(&self.id.fingerprint().to_le_bytes());
        h.update(&self.id.weights_tag.to_le_bytes());
        for i in ids {
            h.update(&i.to_le_bytes());
        }
        self.dir.join(format!("{:016x}.{SUFFIX}", h.finish()))
    }

    /// A sequence over `ids` continued from the longest file whose ids are a prefix of them
    /// and that covers more than `beat` positions (what the memory pool holds), with the ids
    /// it saved from the prefill (`cached`); `None` when no file does, or none could be used.
    /// A file that fails its checks is logged and removed (a read failure only leaves the
    /// index), and the next longest is tried.
    pub fn continue_from(
        &mut self,
        model: &Model,
        ids: &[u32],
        beat: usize,
        capacity: usize,
        o: &SequenceOptions,
    ) -> Option<(Sequence, usize)> {
        self.sync();
        loop {
            let i = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    e.ready
                        && e.ids.len() > beat + 1
                        && e.ids.len() <= ids.len()
                        && ids.starts_with(&e.ids)
                })
                .max_by_key(|(_, e)| e.ids.len())
                .map(|(i, _)| i)?;
            let path = self.entries[i].path.clone();
            match state_file::load("--prefix-cache", &path, &self.id) {
                Ok(st) => {
                    let n = st.ids.len();
                    let input = &ids[n + 1..];
                    match Sequence::from_state(model, &st, input, capacity, o.clone()) {
                        Ok(seq) => {
                            self.clock += 1;
                            self.entries[i].used = self.clock;
                            return Some((seq, n));
                        }
                        Err(e) => {
                            crate::sayln!(
                                "{}: prefix cache: {} not used: {}",
                                self.who,
                                path.display(),
                                e.message
                            );
                            return None;
                        }
                    }
                }
                Err(e) => {
                    self.entries.swap_remove(i);
                    if e.kind == ErrorKind::Invalid && path.exists() {
                        crate::sayln!(
                            "{}: prefix cache: removing a damaged file: {}",
                            self.who,
                            e.message
                        );
                        let _ = std::fs::remove_file(&path);
                    } else {
                        crate::sayln!("{}: prefix cache: {}", self.who, e.message);
                    }
                }
            }
        }
    }

    /// Hands the state of `seq` (its last id pending) to the writer, unless a file of its ids
    /// is held, it alone exceeds the bound, or the writer is busy (then skipped: nothing
    /// waits). Evicts least recently used files to make room first.
    pub fn store(&mut self, seq: &Sequence) {
        self.sync();
        if self.holds(seq.ids()) || self.writer.is_none() {
            return;
        }
        let n_pos = seq.state().n_pos as u64;
        let Some(bytes) = self.id.file_size(n_pos) else {
            return;
        };
        if bytes > self.max_bytes {
            return;
        }
        let Ok(st) = seq.to_state(0) else { return };
        let path = self.path_for(seq.ids());
        self.evict_for(bytes);
        let Some(w) = &self.writer else { return };
        match w.try_send((path.clone(), st)) {
            Ok(()) => {
                self.clock += 1;
                self.entries.push(Entry {
                    ids: seq.ids().to_vec(),
                    path,
                    bytes,
                    used: self.clock,
                    ready: false,
                });
            }
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => self.writer = None,
        }
    }
}

impl Drop for PrefixCache {
    fn drop(&mut self) {
        // the write under way finishes (its file is whole or absent); nothing else waits
        self.writer = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `seq`'s prefill ([`Session::prefill`]); with a cache, and no file yet of the prompt's
/// ids, in two parts (module docs) with the state between them handed to the writer.
///
/// Errors: those of [`Session::prefill`].
pub fn prefill<T: TrunkSource, E: ExpertSource>(
    cache: Option<&mut PrefixCache>,
    sess: &mut Session<'_, T, E>,
    seq: &mut Sequence,
    mut progress: Option<&mut dyn Progress>,
) -> Result<()> {
    let mut sink = |_: &[f32]| Ok(());
    let Some(cache) = cache.filter(|c| c.will_store(seq.ids())) else {
        return sess.prefill(seq, progress, &mut sink);
    };
    let Some(last) = seq.split_last() else {
        return sess.prefill(seq, progress, &mut sink);
    };
    if seq.state().n_pos < seq.ids().len() {
        let first: Option<&mut dyn Progress> = match progress.as_mut() {
            Some(p) => Some(&mut **p),
            None => None,
        };
        sess.prefill(seq, first, &mut sink)?;
    }
    seq.rejoin_last(last);
    cache.store(seq);
    sess.prefill(seq, progress, &mut sink)
}

/// The header and ids of the file at `path` (`len` bytes) against the running model.
fn scan(path: &Path, len: u64, id: &StateIdentity) -> Result<Scan> {
    use std::io::Read;
    let name = path.display().to_string();
    let mut f =
        std::fs::File::open(path).map_err(|e| Error::io(format!("{name}: cannot open: {e}")))?;
    let mut h = vec![0u8; FIXED_HEADER as usize];
    if f.read_exact(&mut h).is_err() {
        return Ok(Scan::Damaged(format!(
            "shorter than the {FIXED_HEADER}-byte header"
        )));
    }
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[o..o + 8]);
        u64::from_le_bytes(b)
    };
    if h[..8] != MAGIC {
        return Ok(Scan::Foreign("not a k3 state file".into()));
    }
    if u32_at(8) != state_file::VERSION {
        return Ok(Scan::Foreign(format!(
            "state version {}, this engine's is {}",
            u32_at(8),
            state_file::VERSION
        )));
    }
    if u64_at(16) != id.fingerprint() {
        return Ok(Scan::Foreign(format!(
            "another model: config fingerprint {:016x}, this model's is {:016x}",
            u64_at(16),
            id.fingerprint()
        )));
    }
    if u64_at(72) != id.weights_tag {
        return Ok(Scan::Foreign(format!(
            "other weights: weights tag {:016x}, this model's is {:016x}",
            u64_at(72),
            id.weights_tag
        )));
    }
    let dims = id.dims();
    if (0..8).any(|k| u32_at(24 + 4 * k) != dims[k]) || u32_at(12) as u64 != id.header_len() {
        return Ok(Scan::Damaged(
            "header fields differ from the model's".into(),
        ));
    }
    let (n_pos, n_ids) = (u64_at(56), u64_at(64));
    if n_pos.checked_add(1) != Some(n_ids) {
        return Ok(Scan::Damaged(format!("n_ids {n_ids} for n_pos {n_pos}")));
    }
    if id.file_size(n_pos) != Some(len) {
        return Ok(Scan::Damaged(format!(
            "{len} bytes, the format's size for {n_pos} positions is {}",
            id.file_size(n_pos)
                .map_or("beyond u64".into(), |s| s.to_string())
        )));
    }
    let mut rest = vec![0u8; (id.header_len() - FIXED_HEADER) as usize];
    let mut ids = vec![0u8; 4 * n_ids as usize];
    if f.read_exact(&mut rest).is_err() || f.read_exact(&mut ids).is_err() {
        return Ok(Scan::Damaged("truncated".into()));
    }
    if !rest.starts_with(id.canonical.as_bytes()) {
        return Ok(Scan::Damaged("the canonical config string differs".into()));
    }
    let ids: Vec<u32> = ids
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(x) = ids.iter().find(|&&x| x >= id.vocab_size) {
        return Ok(Scan::Damaged(format!(
            "id {x} ≥ the vocabulary's {}",
            id.vocab_size
        )));
    }
    Ok(Scan::Ours(ids))
}
