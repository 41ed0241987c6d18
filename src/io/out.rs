//! Output files a run writes (ENGINE.md §3: `--out`, `--dump-logits`, `--dump-cache-trace`;
//! `pack-trunk`): opened before any work, written under a temporary name, renamed into place
//! only when complete.
//!
//! Why: a bad output path found after an hour-long run wastes the hour, and a dump cut short
//! by a full disk must never be mistaken for a complete one. So [`OutFile::create`] creates the
//! temporary file up front (exit 2 naming the flag and the path when it cannot), writes go to
//! it, [`OutFile::commit`] renames it to the final name, and dropping an uncommitted `OutFile`
//! removes the temporary. A full disk or quota (ENOSPC, EDQUOT) is exit 3 ("disk space does not
//! fit"), any other write failure exit 4; both name what was being written and the offset.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Suffix of the temporary name an output is written under (`<final>.tmp`).
pub const TMP_SUFFIX: &str = ".tmp";

/// The temporary name of `path`: `<path>.tmp` in the same directory (so the rename is atomic).
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(TMP_SUFFIX);
    PathBuf::from(s)
}

/// True for a full disk or quota (ENOSPC, EDQUOT): exit 3, "disk space does not fit".
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Classifies a failed write of `what` (e.g. "the logits dump") to `path` at byte `offset`:
/// ENOSPC/EDQUOT are resources (exit 3), anything else I/O (exit 4).
pub fn write_error(path: &Path, what: &str, offset: u64, e: &std::io::Error) -> Error {
    let full = is_disk_full(e);
    let msg = format!(
        "{}: writing {what} failed at byte offset {offset}: {e}",
        path.display()
    );
    if full {
        Error::resources(format!(
            "{msg} (not enough disk space for {what}; free space or write it elsewhere)"
        ))
    } else {
        Error::io(msg)
    }
}

/// Checks that `path` can be an output file, for `flag` (e.g. `--out`): not a directory, its
/// directory exists, and an existing file there is writable.
///
/// Errors (exit 2): naming the flag and the path.
pub fn check_target(flag: &str, path: &Path) -> Result<()> {
    let bad = |why: String| {
        Error::invalid(format!(
            "flag `{flag} {}`: {why}; give a writable file path",
            path.display()
        ))
    };
    if path.as_os_str().is_empty() {
        return Err(bad("empty path".into()));
    }
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_dir() {
            return Err(bad("is a directory".into()));
        }
        if !m.is_file() {
            // A rename would replace a device or FIFO with a regular file.
            return Err(bad("exists and is not a regular file".into()));
        }
        if m.permissions().readonly() {
            return Err(bad("exists and is read-only".into()));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(bad(format!("directory {} does not exist", dir.display())));
    }
    Ok(())
}

/// `path` with symbolic links in its last component followed (a relative target read from
/// the link's directory): an output named through a link replaces the file the link points
/// at, as a shell's `>` writes through it, instead of replacing the link itself with a regular
/// file (`--out /dev/stdout` replaced the `/dev/stdout` link when run as root).
///
/// Errors (exit 2, naming `flag`): more than 40 links in a row (a loop), as the kernel's ELOOP.
pub fn resolve_links(flag: &str, path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(t) if t.is_absolute() => p = t,
            Ok(t) => {
                p = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.join(t),
                    _ => t,
                }
            }
            Err(_) => return Ok(p),
        }
    }
    Err(Error::invalid(format!(
        "flag `{flag} {}`: too many levels of symbolic links (a loop?); give a file path",
        path.display()
    )))
}

/// Where an output lands, for comparing outputs that may not exist yet: the canonical
/// directory (links and `..` resolved) joined with the file name, or the path as given when
/// its directory does not exist yet; plus device and inode when the file exists (hard links).
fn identity(path: &Path) -> (PathBuf, Option<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let place = match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(n)) => d.join(n),
        _ => path.to_path_buf(),
    };
    let inode = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    (place, inode)
}

/// Checks every output file of one command together, before any work (ENGINE.md §3): each
/// `(flag, path)` with links followed ([`resolve_links`]), and its temporary `<path>.tmp`,
/// must not be an input ([`check_not_input`]) and must not land on another output or its
/// temporary (compared by directory and name, or by device and inode), so that no output
/// overwrites an input or another output, whatever spelling, link or `..` names it.
///
/// Errors (exit 2): naming the flags and the file.
pub fn check_outputs(
    outputs: &[(&str, PathBuf)],
    input_dirs: &[&Path],
    input_files: &[&Path],
) -> Result<()> {
    type Seen = (String, (PathBuf, Option<(u64, u64)>));
    let mut seen: Vec<Seen> = Vec::new();
    for (flag, given) in outputs {
        let fin = resolve_links(flag, given)?;
        let tmp = tmp_path(&fin);
        let named = format!("{flag} {}", given.display());
        let mut mine: Vec<Seen> = Vec::new();
        for q in [&fin, &tmp] {
            check_not_input(flag, q, input_dirs, input_files)?;
            let id = identity(q);
            let clash = seen
                .iter()
                .find(|(_, (place, inode))| *place == id.0 || (inode.is_some() && *inode == id.1));
            if let Some((other, _)) = clash {
                return Err(Error::invalid(format!(
                    "flags `{other}` and `{named}` name the same file {} (or its temporary); give each output its own path",
                    id.0.display()
                )));
            }
            mine.push((named.clone(), id));
        }
        seen.extend(mine);
    }
    Ok(())
}

/// Refuses an output `path` that is one of the run's inputs: a file directly inside one of
/// `input_dirs` (model, packed trunk, tokenizer directory) or one of `input_files`, compared by
/// device and inode, so neither links nor `..` hide it. Writing there would replace a shard
/// or config with a logits dump.
///
/// Errors (exit 2): naming `flag`, the path and the input it would replace.
pub fn check_not_input(
    flag: &str,
    path: &Path,
    input_dirs: &[&Path],
    input_files: &[&Path],
) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return Ok(()); // a new file replaces nothing
    };
    let same =
        |q: &Path| std::fs::metadata(q).is_ok_and(|n| n.dev() == m.dev() && n.ino() == m.ino());
    let hit = input_files
        .iter()
        .map(|f| f.to_path_buf())
        .find(|f| same(f))
        .or_else(|| {
            input_dirs.iter().find_map(|d| {
                std::fs::read_dir(d)
                    .ok()?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .find(|f| same(f))
            })
        });
    match hit {
        Some(input) => Err(Error::invalid(format!(
            "flag `{flag} {}`: is {}, an input of this run; writing there would replace it, give another path",
            path.display(),
            input.display()
        ))),
        None => Ok(()),
    }
}

/// An output file being written under its temporary name (module docs).
#[derive(Debug)]
pub struct OutFile {
    path: PathBuf,
    tmp: PathBuf,
    what: &'static str,
    w: Option<BufWriter<File>>,
    written: u64,
}

impl OutFile {
    /// Follows links in `path` ([`resolve_links`]), checks it ([`check_target`]) and creates
    /// `<path>.tmp` (truncating an old one) for
    /// writing `what` (e.g. "the logits dump"), named in later errors.
    ///
    /// Errors (exit 2): the path is unusable or the temporary cannot be created, naming `flag`
    /// (e.g. `--dump-logits`) and the path; exit 3 if the disk is already full.
    pub fn create(flag: &str, path: &Path, what: &'static str) -> Result<OutFile> {
        let path = &resolve_links(flag, path)?;
        check_target(flag, path)?;
        let tmp = tmp_path(path);
        // A link at the temporary name is followed (the tests point one at /dev/full to
        // fill the disk); `check_outputs` has already refused one that reaches an input.
        let f = File::create(&tmp).map_err(|e| {
            if is_disk_full(&e) {
                write_error(&tmp, what, 0, &e)
            } else {
                Error::invalid(format!(
                    "flag `{flag} {}`: cannot create {} for {what}: {e}; give a writable file path",
                    path.display(),
                    tmp.display()
                ))
            }
        })?;
        Ok(OutFile {
            path: path.to_path_buf(),
            tmp,
            what,
            w: Some(BufWriter::with_capacity(1 << 16, f)),
            written: 0,
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends `bytes`. Errors: exit 3 on a full disk or quota, else exit 4 (module docs).
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        let w = self.w.as_mut().ok_or_else(|| {
            Error::internal(format!("{}: written after commit", self.path.display()))
        })?;
        // On failure the buffer keeps what did not reach the file: the offset is its start.
        let written = self.written;
        w.write_all(bytes).map_err(|e| {
            write_error(
                &self.path,
                self.what,
                written.saturating_sub(w.buffer().len() as u64),
                &e,
            )
        })?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Flushes, syncs and renames the temporary to the final name. On error the temporary
    /// is removed and the final name is untouched.
    pub fn commit(mut self) -> Result<()> {
        let w = self
            .w
            .take()
            .ok_or_else(|| Error::internal(format!("{}: committed twice", self.path.display())))?;
        // The offset of a failed flush is not known exactly: name where the buffer started.
        let buffered = w.buffer().len() as u64;
        let f = w
            .into_inner()
            .map_err(|e| write_error(&self.path, self.what, self.written - buffered, e.error()))?;
        f.sync_all()
            .map_err(|e| write_error(&self.path, self.what, self.written, &e))?;
        drop(f);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| {
            Error::io(format!(
                "{}: cannot rename {} into place ({}): {e}",
                self.path.display(),
                self.tmp.display(),
                self.what
            ))
        })?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        // Uncommitted (a failed write, or a failed run): leave nothing behind.
        if !self.tmp.as_os_str().is_empty() {
            self.w = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("k3-out-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn committed_output_appears_only_at_commit() {
        let d = scratch("commit");
        let p = d.join("x.bin");
        let mut f = OutFile::create("--x", &p, "the test output").unwrap();
        assert!(tmp_path(&p).is_file() && !p.exists());
        f.write_all(b"abc").unwrap();
        assert_eq!(f.written(), 3);
        f.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        assert!(!tmp_path(&p).exists());
        // dropped without commit: the temporary goes, the old final file stays
        let mut f = OutFile::create("--x", &p, "the test output").unwrap();
        f.write_all(b"partial").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        assert!(!tmp_path(&p).exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn full_disk_is_resources_other_write_errors_io() {
        let p = Path::new("/x/y.f32");
        for (errno, code) in [(libc::ENOSPC, 3), (libc::EDQUOT, 3), (libc::EIO, 4)] {
            let e = write_error(
                p,
                "the logits dump",
                4096,
                &std::io::Error::from_raw_os_error(errno),
            );
            assert_eq!(e.exit_code(), code, "{e}");
            assert!(
                e.message
                    .starts_with("/x/y.f32: writing the logits dump failed at byte offset 4096"),
                "{e}"
            );
        }
    }

    #[test]
    fn enospc_on_write_or_commit_removes_the_temporary() {
        if std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .is_err()
        {
            crate::sayln!("SKIPPED: /dev/full is not available on this platform");
            return;
        }
        let d = scratch("full");
        for big in [false, true] {
            let p = d.join(format!("x{big}"));
            std::os::unix::fs::symlink("/dev/full", tmp_path(&p)).unwrap();
            let mut f = OutFile::create("--x", &p, "the test output").unwrap();
            // a write larger than the buffer fails in write_all, a small one at commit
            let n = if big { 1 << 20 } else { 10 };
            let r = f.write_all(&vec![1u8; n]).and_then(|()| f.commit());
            let e = r.unwrap_err();
            assert_eq!(e.exit_code(), 3, "{e}");
            assert!(
                e.message.contains("the test output") && e.message.contains("byte offset 0"),
                "{e}"
            );
            assert!(!p.exists() && std::fs::symlink_metadata(tmp_path(&p)).is_err());
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
