//! A shard or `trunk.bin` opened for positioned reads (FORMATS.md §2.5 and §6, ENGINE.md §5).
//!
//! Each file is opened twice: buffered, for small reads (headers, single tensors), and with
//! `O_DIRECT`, for bulk weight reads that must not grow the page cache past the memory budget.
//! Direct reads are widened to 4096-byte boundaries and land in a 4096-aligned buffer with the
//! payload at `pad = offset − lo` inside it. Where the file system refuses `O_DIRECT` (at open, or
//! with `EINVAL` on a read) the file falls back to buffered reads followed by
//! `posix_fadvise(POSIX_FADV_DONTNEED)` for the rest of the run, with one notice per process.
//!
//! Every failure during a read is exit 4 ([`Error::io`]) with a message that starts with the file
//! path and names the byte offset: a read error (EIO, …), a short read (end of file before the
//! end of the request), a request past the end of the file, or a file whose size changed since it
//! was opened (rewritten or truncated after it was indexed). Nothing is ever zero-filled.

use crate::error::{Error, Result};
use crate::io::buf::{align_up, ALIGN};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static FALLBACK_NOTICE: std::sync::Once = std::sync::Once::new();
static FALLBACK_FILES: AtomicUsize = AtomicUsize::new(0);

/// Number of files in this process that fell back from `O_DIRECT` to buffered reads
/// (for the run report's `direct_io` figures).
pub fn buffered_fallback_count() -> usize {
    FALLBACK_FILES.load(Ordering::Relaxed)
}

/// The widened direct-read window of the byte range [offset, offset + len) (FORMATS.md §6):
/// `lo` = offset rounded down to 4096, the window length `hi − lo` with hi = offset + len rounded
/// up to 4096, and `pad = offset − lo`, where the payload starts inside the window.
///
/// `None` when the arithmetic overflows.
pub fn window(offset: u64, len: usize) -> Option<Window> {
    let lo = offset & !(ALIGN as u64 - 1);
    let end = offset.checked_add(len as u64)?;
    let hi = end.checked_add(ALIGN as u64 - 1)? & !(ALIGN as u64 - 1);
    Some(Window {
        lo,
        len: usize::try_from(hi - lo).ok()?,
        pad: (offset - lo) as usize,
    })
}

/// A widened read window (see [`window`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// File offset of the first byte read (a multiple of 4096).
    pub lo: u64,
    /// Bytes read (a multiple of 4096).
    pub len: usize,
    /// Offset of the payload inside the window.
    pub pad: usize,
}

/// Buffer capacity that holds the widened window of any `len`-byte payload, whatever its offset:
/// `len + 2 × 4096` rounded up to 4096 (FORMATS.md §6: capacity ≥ n + 8192; for a K3 expert,
/// 17,547,264 → 17,555,456 bytes, the expert-cache slot stride). `None` on overflow.
pub fn window_capacity(len: usize) -> Option<usize> {
    len.checked_add(2 * ALIGN).and_then(align_up)
}

/// Outcome of one read into a caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDone {
    /// Offset of the payload inside the destination buffer.
    pub pad: usize,
    /// Bytes transferred from the device (the widened window for direct reads, the payload for
    /// buffered ones), for the bytes-read and MB/s figures.
    pub device_bytes: u64,
    /// True if the read went through `O_DIRECT`.
    pub direct: bool,
}

/// A file opened for positioned reads, buffered and (where allowed) with `O_DIRECT`.
///
/// Safe to share between threads (`&IoFile` is `Sync`); every read is a positioned `pread`.
#[derive(Debug)]
pub struct IoFile {
    path: PathBuf,
    buffered: File,
    direct: Option<File>,
    direct_refused: AtomicBool,
    len_at_open: u64,
    id: u64,
    #[cfg(test)]
    pub(crate) faults: test_faults::Faults,
}

impl IoFile {
    /// Opens `path` for reading, twice: buffered and with `O_DIRECT` (on macOS the buffered
    /// descriptor gets `F_NOCACHE` instead). A refused `O_DIRECT` open is not an error: the file
    /// is read buffered with `POSIX_FADV_DONTNEED`, and one notice is printed per process.
    ///
    /// Errors (exit 2, before the run): the file cannot be opened or is not a regular file.
    pub fn open(path: &Path) -> Result<IoFile> {
        let buffered = File::open(path)
            .map_err(|e| Error::invalid(format!("{}: cannot open: {e}", path.display())))?;
        let meta = buffered
            .metadata()
            .map_err(|e| Error::invalid(format!("{}: cannot stat: {e}", path.display())))?;
        if !meta.is_file() {
            return Err(Error::invalid(format!(
                "{}: not a regular file",
                path.display()
            )));
        }
        let mut f = IoFile {
            path: path.to_path_buf(),
            buffered,
            direct: None,
            direct_refused: AtomicBool::new(false),
            len_at_open: meta.len(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            #[cfg(test)]
            faults: Default::default(),
        };
        match open_direct(path, &f.buffered) {
            Ok(d) => f.direct = d,
            Err(e) => f.refuse_direct(&format!("opening with O_DIRECT failed: {e}")),
        }
        Ok(f)
    }

    /// The path the file was opened with (used in every error message).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File size in bytes when it was opened.
    pub fn len_at_open(&self) -> u64 {
        self.len_at_open
    }

    /// A process-unique id, for ordering reads by (file, offset).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// True while bulk reads of this file go through `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some() && !self.direct_refused.load(Ordering::Relaxed)
    }

    /// Reads exactly `buf.len()` bytes at `offset` through the page cache (small reads: headers,
    /// single tensors). Short reads are continued and `EINTR` retried.
    ///
    /// Errors (exit 4): the range ends past the end of the file, the file changed size since it
    /// was opened, a read error, or end of file before the range was filled.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check_range(offset, buf.len())?;
        self.pread_exact(buf, offset)
    }

    /// [`read_exact_at`](Self::read_exact_at) followed by `posix_fadvise(POSIX_FADV_DONTNEED)`
    /// on the range, for bulk bytes that must not stay in the page cache (the buffered fallback,
    /// experts stored as several pieces).
    pub fn read_uncached_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read_exact_at(buf, offset)?;
        self.drop_cached(offset, buf.len());
        Ok(())
    }

    /// Reads the payload [offset, offset + len) into `buf` by one widened direct read
    /// (FORMATS.md §6), or buffered + `DONTNEED` where `O_DIRECT` is refused; the payload is at
    /// `buf[pad .. pad + len]` with `pad` from the returned [`ReadDone`] (the same `pad` either
    /// way). The last window of the file may extend past its end: that is accepted only if the
    /// bytes returned cover `pad + len`.
    ///
    /// `buf` must be 4096-aligned and hold the window ([`window_capacity`]`(len)` always does);
    /// otherwise exit 1 (a bug in the caller). Other errors as for `read_exact_at` (exit 4).
    pub fn read_window(&self, offset: u64, len: usize, buf: &mut [u8]) -> Result<ReadDone> {
        let w = window(offset, len).ok_or_else(|| self.overflow(offset, len))?;
        if buf.as_ptr() as usize % ALIGN != 0 || buf.len() < w.len {
            return Err(Error::internal(format!(
                "{}: read of {len} bytes at offset {offset}: destination buffer (address {:#x}, \
                 {} bytes) is not 4096-aligned or smaller than the {}-byte window",
                self.path.display(),
                buf.as_ptr() as usize,
                buf.len(),
                w.len
            )));
        }
        self.check_range(offset, len)?;
        if let (Some(direct), false) = (&self.direct, self.direct_refused.load(Ordering::Relaxed)) {
            match self.pread_direct(direct, &mut buf[..w.len], w.lo) {
                Ok(got) => {
                    if got < w.pad + len {
                        return Err(self.short_read(offset, len, got.saturating_sub(w.pad)));
                    }
                    return Ok(ReadDone {
                        pad: w.pad,
                        device_bytes: got as u64,
                        direct: true,
                    });
                }
                Err(DirectError::Refused(e)) => {
                    self.refuse_direct(&format!("a direct read failed with {e}"));
                }
                Err(DirectError::Failed(e)) => return Err(e),
            }
        }
        self.pread_exact(&mut buf[w.pad..w.pad + len], offset)?;
        self.drop_cached(offset, len);
        Ok(ReadDone {
            pad: w.pad,
            device_bytes: len as u64,
            direct: false,
        })
    }

    /// [`read_window`](Self::read_window) as up to `depth` concurrent reads (ENGINE.md §5 I/O
    /// depth): the window is cut at 4096-byte boundaries into `depth` nearly equal chunks, each
    /// read by its own scoped thread into its own disjoint part of `buf`, so the payload lands
    /// exactly where one read would put it (same `pad`). `depth` ≤ 1, or a window of one page,
    /// is one read.
    ///
    /// Errors: the first failing chunk's (as for `read_window`); exit 3 if the system refuses
    /// a thread.
    pub fn read_window_split(
        &self,
        offset: u64,
        len: usize,
        buf: &mut [u8],
        depth: usize,
    ) -> Result<ReadDone> {
        let w = window(offset, len).ok_or_else(|| self.overflow(offset, len))?;
        let pages = w.len / ALIGN;
        let n = depth.min(pages).max(1);
        if n == 1 || buf.len() < w.len {
            return self.read_window(offset, len, buf);
        }
        let per = pages.div_ceil(n) * ALIGN;
        let end = offset + len as u64;
        let results: Vec<Result<ReadDone>> = std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(n);
            let mut refused = None;
            let (mut rest, mut at) = (&mut buf[..w.len], 0usize);
            while !rest.is_empty() {
                let (chunk, r) = rest.split_at_mut(per.min(rest.len()));
                rest = r;
                // payload bytes [a, b) of this chunk: its window starts at the chunk's start
                let a = (w.lo + at as u64).max(offset);
                let b = (w.lo + (at + chunk.len()) as u64).min(end);
                at += chunk.len();
                let job = move || self.read_window(a, (b - a) as usize, chunk);
                match std::thread::Builder::new()
                    .name("k3-io-split".into())
                    .stack_size(64 * 1024)
                    .spawn_scoped(s, job)
                {
                    Ok(h) => handles.push(h),
                    Err(e) => refused = Some(e),
                }
            }
            let mut out: Vec<Result<ReadDone>> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::internal("an I/O thread panicked")))
                })
                .collect();
            if let Some(e) = refused {
                out.push(Err(Error::resources(format!(
                    "{}: cannot start an I/O thread for a read of {len} bytes at offset {offset}: {e}",
                    self.path.display()
                ))));
            }
            out
        });
        let mut device_bytes = 0u64;
        let mut direct = true;
        for r in results {
            let d = r?;
            device_bytes += d.device_bytes;
            direct &= d.direct;
        }
        Ok(ReadDone {
            pad: w.pad,
            device_bytes,
            direct,
        })
    }

    /// Switches this file to buffered reads for the rest of the run; one notice per process.
    fn refuse_direct(&self, reason: &str) {
        if !self.direct_refused.swap(true, Ordering::Relaxed) {
            FALLBACK_FILES.fetch_add(1, Ordering::Relaxed);
            FALLBACK_NOTICE.call_once(|| {
                crate::sayln!(
                    "k3: note: {}: O_DIRECT refused ({reason}); this file and any other that \
                     refuses it are read buffered with POSIX_FADV_DONTNEED (results unaffected)",
                    self.path.display()
                );
            });
        }
    }

    /// Refuses a range that does not lie inside the file as opened, and a file whose size
    /// changed since (rewritten or truncated after indexing): either would read other bytes
    /// than the index describes.
    fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        let end = offset
            .checked_add(len as u64)
            .ok_or_else(|| self.overflow(offset, len))?;
        if end > self.len_at_open {
            return Err(Error::io(format!(
                "{}: read of {len} bytes at offset {offset} ends past the end of the file \
                 ({} bytes): the file is shorter than its index says (truncated after it was \
                 indexed?)",
                self.path.display(),
                self.len_at_open
            )));
        }
        #[cfg(test)]
        if self.faults.skip_size_check.load(Ordering::Relaxed) {
            return Ok(());
        }
        let now = self
            .buffered
            .metadata()
            .map_err(|e| {
                Error::io(format!(
                    "{}: cannot stat before reading {len} bytes at offset {offset}: {e}",
                    self.path.display()
                ))
            })?
            .len();
        if now != self.len_at_open {
            return Err(Error::io(format!(
                "{}: file changed size since it was opened ({} bytes, now {now}); refusing to \
                 read {len} bytes at offset {offset}: the checkpoint was modified during the run",
                self.path.display(),
                self.len_at_open
            )));
        }
        Ok(())
    }

    /// pread loop on the buffered descriptor: continues short reads, retries EINTR.
    fn pread_exact(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut got = 0usize;
        while got < buf.len() {
            let at = offset + got as u64;
            match self.buffered.read_at(&mut buf[got..], at) {
                Ok(0) => return Err(self.short_read(offset, buf.len(), got)),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_error(at, buf.len() - got, &e)),
            }
        }
        Ok(())
    }

    /// pread loop on the direct descriptor over a whole aligned window; returns the bytes read.
    /// An unaligned count means end of file (nothing may follow it).
    fn pread_direct(
        &self,
        direct: &File,
        buf: &mut [u8],
        lo: u64,
    ) -> std::result::Result<usize, DirectError> {
        let mut got = 0usize;
        while got < buf.len() {
            let at = lo + got as u64;
            #[cfg(test)]
            let r = match self.faults.take_errno() {
                Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
                None => direct.read_at(&mut buf[got..], at),
            };
            #[cfg(not(test))]
            let r = direct.read_at(&mut buf[got..], at);
            match r {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    if n % ALIGN != 0 {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if got == 0 && e.raw_os_error() == Some(libc::EINVAL) => {
                    return Err(DirectError::Refused(e))
                }
                Err(e) => {
                    return Err(DirectError::Failed(self.read_error(
                        at,
                        buf.len() - got,
                        &e,
                    )))
                }
            }
        }
        Ok(got)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn drop_cached(&self, offset: u64, len: usize) {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is ours and
        // open. Its result is advisory, so a failure changes nothing but page-cache residency.
        unsafe {
            libc::posix_fadvise(
                self.buffered.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn drop_cached(&self, _offset: u64, _len: usize) {
        // macOS: the buffered descriptor carries F_NOCACHE (set in open_direct).
    }

    fn short_read(&self, offset: u64, len: usize, got: usize) -> Error {
        Error::io(format!(
            "{}: short read at offset {offset}: {len} bytes wanted, only {got} available \
             (file truncated after it was indexed?)",
            self.path.display()
        ))
    }

    fn read_error(&self, at: u64, len: usize, e: &std::io::Error) -> Error {
        Error::io(format!(
            "{}: read error at offset {at} ({len} bytes): {e}",
            self.path.display()
        ))
    }

    fn overflow(&self, offset: u64, len: usize) -> Error {
        Error::io(format!(
            "{}: read of {len} bytes at offset {offset} overflows the file offset range",
            self.path.display()
        ))
    }
}

enum DirectError {
    /// EINVAL on the first transfer: the file system refuses O_DIRECT (or its alignment).
    Refused(std::io::Error),
    /// Any other failure (exit 4).
    Failed(Error),
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_direct(path: &Path, _buffered: &File) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map(Some)
}

#[cfg(target_os = "macos")]
fn open_direct(_path: &Path, buffered: &File) -> std::io::Result<Option<File>> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl(F_NOCACHE) on our own open descriptor only sets a flag on it.
    let r = unsafe { libc::fcntl(buffered.as_raw_fd(), libc::F_NOCACHE, 1) };
    if r == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(None)
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
fn open_direct(_path: &Path, _buffered: &File) -> std::io::Result<Option<File>> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "no O_DIRECT on this platform",
    ))
}

#[cfg(test)]
pub(crate) mod test_faults {
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    /// Fault injection for this module's unit tests only.
    #[derive(Debug, Default)]
    pub(crate) struct Faults {
        /// Fail the next direct pread with this errno (0 = none).
        pub errno: AtomicI32,
        /// Skip the size-changed check, to reach the short-read path deterministically.
        pub skip_size_check: AtomicBool,
    }

    impl Faults {
        pub(crate) fn take_errno(&self) -> Option<i32> {
            match self.errno.swap(0, Ordering::Relaxed) {
                0 => None,
                e => Some(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::io::buf::AlignedBuf;
    use std::io::Write;

    fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("k3-io-unit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("data.bin");
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        p
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn window_math() {
        assert_eq!(
            window(5000, 100),
            Some(Window {
                lo: 4096,
                len: 4096,
                pad: 904
            })
        );
        assert_eq!(
            window(4095, 2),
            Some(Window {
                lo: 0,
                len: 8192,
                pad: 4095
            })
        );
        assert_eq!(window(8192, 0).unwrap().len, 0);
        assert_eq!(window(u64::MAX - 3, 10), None);
        assert_eq!(window_capacity(17_547_264), Some(17_555_456));
    }

    #[test]
    fn einval_on_a_direct_read_falls_back_once_with_identical_bytes() {
        let data = pattern(50_000);
        let p = temp_file("einval", &data);
        let f = IoFile::open(&p).unwrap();
        let mut buf = AlignedBuf::new(window_capacity(3000).unwrap()).unwrap();
        let direct_before = f.is_direct();
        f.faults.errno.store(libc::EINVAL, Ordering::Relaxed);
        let d = f.read_window(12_345, 3000, &mut buf).unwrap();
        assert_eq!(&buf[d.pad..d.pad + 3000], &data[12_345..15_345]);
        assert!(!d.direct);
        assert!(!f.is_direct());
        // Later reads stay buffered and still correct.
        let d2 = f.read_window(40_000, 3000, &mut buf).unwrap();
        assert!(!d2.direct);
        assert_eq!(d2.pad, window(40_000, 3000).unwrap().pad);
        assert_eq!(&buf[d2.pad..d2.pad + 3000], &data[40_000..43_000]);
        if direct_before {
            assert!(buffered_fallback_count() >= 1);
        }
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    #[test]
    fn eio_on_a_direct_read_is_exit_4_naming_file_and_offset() {
        let data = pattern(20_000);
        let p = temp_file("eio", &data);
        let f = IoFile::open(&p).unwrap();
        if !f.is_direct() {
            // The file system refuses O_DIRECT here; the buffered path is covered elsewhere.
            std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
            return;
        }
        let mut buf = AlignedBuf::new(window_capacity(1000).unwrap()).unwrap();
        f.faults.errno.store(libc::EIO, Ordering::Relaxed);
        let e = f.read_window(9000, 1000, &mut buf).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.starts_with(&p.display().to_string()), "{e}");
        assert!(e.message.contains("offset 8192"), "{e}");
        assert!(e.message.contains("Input/output error"), "{e}");
        assert!(f.is_direct(), "EIO must not switch to buffered reads");
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_split_read_lands_every_byte_where_one_read_puts_it() {
        let data = pattern(200_000);
        let p = temp_file("split", &data);
        let f = IoFile::open(&p).unwrap();
        // unaligned starts, a payload ending at the file's partial last page, tiny payloads
        for (off, len) in [
            (12_345u64, 150_000usize),
            (0, 200_000),
            (4096, 8192),
            (199_990, 10),
        ] {
            let one = {
                let mut b = AlignedBuf::new(window_capacity(len).unwrap()).unwrap();
                let d = f.read_window(off, len, &mut b).unwrap();
                (d.pad, b[d.pad..d.pad + len].to_vec())
            };
            assert_eq!(one.1, &data[off as usize..off as usize + len]);
            for depth in [1, 2, 3, 7, 64] {
                let mut b = AlignedBuf::new(window_capacity(len).unwrap()).unwrap();
                let d = f.read_window_split(off, len, &mut b, depth).unwrap();
                assert_eq!(d.pad, one.0, "{off}+{len} at depth {depth}");
                assert_eq!(
                    &b[d.pad..d.pad + len],
                    &one.1[..],
                    "{off}+{len} at depth {depth}"
                );
            }
        }
        // a failing chunk fails the read (exit 4)
        f.faults.skip_size_check.store(true, Ordering::Relaxed);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(100_000)
            .unwrap();
        let mut b = AlignedBuf::new(window_capacity(150_000).unwrap()).unwrap();
        let e = f.read_window_split(12_345, 150_000, &mut b, 4).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    #[test]
    fn truncation_between_check_and_read_is_a_short_read() {
        let data = pattern(30_000);
        let p = temp_file("short", &data);
        let f = IoFile::open(&p).unwrap();
        f.faults.skip_size_check.store(true, Ordering::Relaxed);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(21_000)
            .unwrap();
        let mut buf = AlignedBuf::new(window_capacity(5000).unwrap()).unwrap();
        // Window [16384, 24576) ends past the new end, and 21,000 < 18,000 + 5,000.
        let e = f.read_window(18_000, 5000, &mut buf).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("short read at offset 18000"), "{e}");
        assert!(e.message.contains("only 3000 available"), "{e}");
        let mut small = vec![0u8; 5000];
        let e = f.read_exact_at(&mut small, 18_000).unwrap_err();
        assert!(e.message.contains("short read at offset 18000"), "{e}");
        // A window that ends past the new end but covers its payload is fine.
        let d = f.read_window(16_000, 5000, &mut buf).unwrap();
        assert_eq!(&buf[d.pad..d.pad + 5000], &data[16_000..21_000]);
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}
