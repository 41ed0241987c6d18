//! The I/O layer against real files (FORMATS.md §6, ENGINE.md §5): widened O_DIRECT reads at
//! unaligned offsets, the last window past end of file, and fault injection — a file shorter
//! than its index, a file truncated or rewritten after it was opened, a file that vanished, and
//! a file system that refuses O_DIRECT. Every failure is exit 4 naming file and offset.

use crate::support::io as io_support;

use io_support::{pattern, TempDir};
use k3::io::{window, window_capacity, AlignedBuf, Extent, IoFile, IoThreads, ReadRequest};
use k3::ErrorKind;
use std::sync::Arc;

fn read(f: &IoFile, off: u64, len: usize) -> k3::Result<Vec<u8>> {
    let mut buf = AlignedBuf::new(window_capacity(len).unwrap()).unwrap();
    let d = f.read_window(off, len, &mut buf)?;
    assert_eq!(d.pad, window(off, len).unwrap().pad);
    Ok(buf[d.pad..d.pad + len].to_vec())
}

#[test]
fn direct_reads_at_unaligned_offsets_return_exactly_the_payload() {
    let dir = TempDir::new("io-direct");
    let data = pattern(1, 300_000);
    let p = dir.file("shard.safetensors", &data);
    let f = IoFile::open(&p).unwrap();
    assert!(
        f.is_direct(),
        "{}: expected O_DIRECT to be accepted on the build directory's file system",
        p.display()
    );
    for (off, len) in [
        (0u64, 1usize),
        (1, 4095),
        (4095, 2),
        (4096, 4096),
        (12_345, 100_000),
        (8, 299_992),
    ] {
        let got = read(&f, off, len).unwrap();
        assert_eq!(
            got,
            &data[off as usize..off as usize + len],
            "off {off} len {len}"
        );
    }
    let mut buf = AlignedBuf::new(window_capacity(10).unwrap()).unwrap();
    let d = f.read_window(5000, 10, &mut buf).unwrap();
    assert!(d.direct);
    assert_eq!(d.device_bytes, 4096);
}

#[test]
fn last_window_past_end_of_file_is_accepted_when_it_covers_the_payload() {
    let dir = TempDir::new("io-eof");
    let data = pattern(2, 10_000);
    let p = dir.file("f.bin", &data);
    let f = IoFile::open(&p).unwrap();
    // Window [8192, 12288) ends past the 10,000-byte file; the payload ends exactly at the end.
    assert_eq!(read(&f, 9000, 1000).unwrap(), &data[9000..]);
    assert_eq!(read(&f, 9999, 1).unwrap(), &data[9999..]);
}

#[test]
fn misaligned_or_small_destination_is_refused_not_written() {
    let dir = TempDir::new("io-dest");
    let p = dir.file("f.bin", &pattern(3, 20_000));
    let f = IoFile::open(&p).unwrap();
    let mut buf = AlignedBuf::new(window_capacity(5000).unwrap() + 1).unwrap();
    let e = f.read_window(100, 5000, &mut buf[1..]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    let e = f.read_window(100, 5000, &mut buf[..4096]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
}

#[test]
fn a_file_shorter_than_its_index_fails_with_exit_4_naming_file_and_offset() {
    let dir = TempDir::new("io-short");
    let data = pattern(4, 50_000);
    let p = dir.file("model-00002-of-00007.safetensors", &data[..30_000]);
    let f = IoFile::open(&p).unwrap();
    // The index (made from the full file) places an expert at [25,000, 35,000).
    let e = read(&f, 25_000, 10_000).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert_eq!(e.exit_code(), 4);
    assert!(e.message.starts_with(&p.display().to_string()), "{e}");
    assert!(e.message.contains("offset 25000"), "{e}");
    assert!(e.message.contains("30000 bytes"), "{e}");
    let mut small = vec![0u8; 10_000];
    let e = f.read_exact_at(&mut small, 25_000).unwrap_err();
    assert_eq!(e.exit_code(), 4);
    assert!(e.message.contains("offset 25000"), "{e}");
}

#[test]
fn a_file_truncated_after_it_was_opened_fails_with_exit_4() {
    let dir = TempDir::new("io-trunc");
    let data = pattern(5, 80_000);
    let p = dir.file("f.bin", &data);
    let f = IoFile::open(&p).unwrap();
    assert_eq!(read(&f, 70_000, 5000).unwrap(), &data[70_000..75_000]);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(72_000)
        .unwrap();
    for (off, len) in [(70_000u64, 5000usize), (100, 100)] {
        let e = read(&f, off, len).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        assert!(e.message.starts_with(&p.display().to_string()), "{e}");
        assert!(e.message.contains(&format!("offset {off}")), "{e}");
        assert!(e.message.contains("changed size"), "{e}");
    }
}

#[test]
fn a_file_rewritten_with_an_expert_of_another_size_fails_with_exit_4() {
    let dir = TempDir::new("io-resize");
    let data = pattern(6, 60_000);
    let p = dir.file("f.bin", &data);
    let f = IoFile::open(&p).unwrap();
    // Rewritten in place: one 10,000-byte expert grew by 24 bytes, so the file is longer and
    // every later offset moved.
    let mut grown = data[..20_000].to_vec();
    grown.extend_from_slice(&pattern(7, 10_024));
    grown.extend_from_slice(&data[30_000..]);
    std::fs::write(&p, &grown).unwrap();
    let e = read(&f, 40_000, 10_000).unwrap_err();
    assert_eq!(e.exit_code(), 4);
    assert!(e.message.contains("offset 40000"), "{e}");
    assert!(e.message.contains("60000 bytes, now 60024"), "{e}");
}

#[test]
fn a_file_that_vanished_after_opening_still_reads_the_indexed_bytes() {
    // The engine holds its descriptors: deleting or replacing the path cannot make it read
    // other bytes than those it indexed.
    let dir = TempDir::new("io-vanish");
    let data = pattern(8, 40_000);
    let p = dir.file("f.bin", &data);
    let f = IoFile::open(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    std::fs::write(&p, pattern(9, 40_000)).unwrap();
    assert_eq!(read(&f, 33_333, 6000).unwrap(), &data[33_333..39_333]);
}

#[test]
fn open_refuses_a_missing_file_or_a_directory_with_exit_2() {
    let dir = TempDir::new("io-open");
    let e = IoFile::open(&dir.path().join("absent.safetensors")).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("absent.safetensors"), "{e}");
    let e = IoFile::open(dir.path()).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("not a regular file"), "{e}");
}

/// One single-piece read per `stride` bytes of `arena`: `len` bytes at each of `offsets`, of
/// the file `file_of(i)`.
fn one_read_each<'a>(
    arena: &'a mut [u8],
    stride: usize,
    offsets: &[u64],
    len: usize,
    file_of: impl Fn(usize) -> &'a IoFile,
) -> Vec<ReadRequest<'a>> {
    arena
        .chunks_exact_mut(stride)
        .zip(offsets)
        .enumerate()
        .map(|(i, (dest, &offset))| ReadRequest {
            pieces: vec![Extent {
                file: file_of(i),
                offset,
                len,
            }],
            dest,
            outcome: None,
        })
        .collect()
}

#[test]
fn io_threads_read_a_batch_in_parallel_and_report_each_outcome() {
    let dir = TempDir::new("io-threads");
    let data = pattern(10, 500_000);
    let p = dir.file("f.bin", &data);
    let f = IoFile::open(&p).unwrap();
    let q = dir.file("g.bin", &data[..1000]);
    let g = IoFile::open(&q).unwrap();
    let io = IoThreads::new(4).unwrap();
    let len = 17_000;
    let stride = window_capacity(len).unwrap();
    let n = 12;
    let mut arena = AlignedBuf::new(stride * n).unwrap();
    let offsets: Vec<u64> = (0..n as u64).map(|i| 1 + i * 37_001).collect();
    {
        // Request 5 reads past the end of g.bin: it alone must fail.
        let mut reqs = one_read_each(&mut arena, stride, &offsets, len, |i| {
            if i == 5 {
                &g
            } else {
                &f
            }
        });
        io.read_batch(&mut reqs);
        for (i, r) in reqs.iter().enumerate() {
            match r.outcome.as_ref().unwrap() {
                Ok(d) => {
                    assert_ne!(i, 5);
                    let off = offsets[i] as usize;
                    assert_eq!(&r.dest[d.pad..d.pad + len], &data[off..off + len]);
                }
                Err(e) => {
                    assert_eq!(i, 5);
                    assert_eq!(e.exit_code(), 4);
                    assert!(e.message.contains(&q.display().to_string()), "{e}");
                }
            }
        }
    }
    // Several pieces land concatenated at pad 0.
    let mut dest = vec![0u8; 3000];
    let mut reqs = vec![ReadRequest {
        pieces: vec![
            Extent {
                file: &f,
                offset: 10,
                len: 1000,
            },
            Extent {
                file: &f,
                offset: 400_000,
                len: 2000,
            },
        ],
        dest: &mut dest,
        outcome: None,
    }];
    io.read_batch(&mut reqs);
    assert_eq!(reqs[0].outcome.as_ref().unwrap().as_ref().unwrap().pad, 0);
    drop(reqs);
    assert_eq!(&dest[..1000], &data[10..1010]);
    assert_eq!(&dest[1000..], &data[400_000..402_000]);

    // Owned submission (read-ahead): several in flight, waited in any order.
    let f = Arc::new(f);
    let tickets: Vec<_> = (0..6u64)
        .map(|i| {
            let buf = AlignedBuf::new(stride).unwrap();
            io.submit(Arc::clone(&f), 3 + i * 50_000, len, buf)
        })
        .collect();
    for (i, t) in tickets.into_iter().enumerate().rev() {
        let (buf, d) = t.wait().unwrap();
        let off = 3 + i * 50_000;
        assert_eq!(&buf[d.pad..d.pad + len], &data[off..off + len]);
    }
    let e = io
        .submit(
            Arc::clone(&f),
            499_000,
            5000,
            AlignedBuf::new(stride).unwrap(),
        )
        .wait()
        .unwrap_err();
    assert_eq!(e.exit_code(), 4);
}

#[test]
fn a_landing_batch_hands_each_read_over_once_after_the_work_that_needs_none() {
    let dir = TempDir::new("io-landing");
    let data = pattern(11, 400_000);
    let p = dir.file("f.bin", &data);
    let f = IoFile::open(&p).unwrap();
    let io = IoThreads::new(3).unwrap();
    let len = 9_000;
    let stride = window_capacity(len).unwrap();
    let n = 10;
    let mut arena = AlignedBuf::new(stride * n).unwrap();
    let offsets: Vec<u64> = (0..n as u64).map(|i| 7 + i * 31_003).collect();
    let mut reqs = one_read_each(&mut arena, stride, &offsets, len, |_| &f);
    let mut calls = 0;
    let mut seen = vec![0; n];
    let secs = io
        .read_batch_landing(&mut reqs, &mut |group| {
            calls += 1;
            assert_eq!(
                group.is_empty(),
                calls == 1,
                "only the first call has no read"
            );
            for &(i, r) in group {
                seen[i] += 1;
                let d = r.outcome.as_ref().unwrap().as_ref().unwrap();
                let off = offsets[i] as usize;
                assert_eq!(
                    &r.dest[d.pad..d.pad + len],
                    &data[off..off + len],
                    "read {i}"
                );
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, vec![1; n], "every read is handed over exactly once");
    assert!(secs >= 0.0);

    // An error from the work stops the calls but not the reads: every request has finished
    // (its outcome set) when the call returns.
    for r in &mut reqs {
        r.outcome = None;
    }
    let mut calls = 0;
    let e = io
        .read_batch_landing(&mut reqs, &mut |_| {
            calls += 1;
            Err(k3::Error::invalid("stop here"))
        })
        .unwrap_err();
    assert_eq!(e.message, "stop here");
    assert_eq!(calls, 1);
    assert!(reqs.iter().all(|r| r.outcome.is_some()));
}

/// Runs inside a private mount namespace with a ramfs (which refuses O_DIRECT) mounted at
/// `$K3_RAMFS_CHILD`; see the test below.
fn ramfs_child(dir: &str) {
    eprintln!("K3-RAMFS-CHILD-RAN");
    let dir = std::path::Path::new(dir);
    let data = pattern(11, 200_000);
    let a = dir.join("a.bin");
    let b = dir.join("b.bin");
    std::fs::write(&a, &data).unwrap();
    std::fs::write(&b, &data[..50_000]).unwrap();
    let fa = IoFile::open(&a).unwrap();
    let fb = IoFile::open(&b).unwrap();
    assert!(!fa.is_direct() && !fb.is_direct());
    assert!(k3::io::file::buffered_fallback_count() >= 2);
    for (off, len) in [(0u64, 10usize), (12_345, 100_000), (199_000, 1000)] {
        let mut buf = AlignedBuf::new(window_capacity(len).unwrap()).unwrap();
        let d = fa.read_window(off, len, &mut buf).unwrap();
        assert!(!d.direct);
        assert_eq!(d.pad, window(off, len).unwrap().pad, "same slot layout");
        assert_eq!(
            &buf[d.pad..d.pad + len],
            &data[off as usize..off as usize + len]
        );
    }
    let mut buf = AlignedBuf::new(window_capacity(1000).unwrap()).unwrap();
    let e = fb.read_window(49_500, 1000, &mut buf).unwrap_err();
    assert_eq!(e.exit_code(), 4);
    eprintln!("K3-RAMFS-CHILD-OK");
}

#[test]
fn o_direct_refused_by_the_file_system_falls_back_to_buffered_reads_with_one_notice() {
    const NAME: &str =
        "o_direct_refused_by_the_file_system_falls_back_to_buffered_reads_with_one_notice";
    if let Ok(dir) = std::env::var("K3_RAMFS_CHILD") {
        ramfs_child(&dir);
        return;
    }
    let mnt = TempDir::new("io-ramfs");
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "mount -t ramfs none '{}' && exec '{}' --exact {NAME} --nocapture --test-threads 1",
        mnt.path().display(),
        exe.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .env("K3_RAMFS_CHILD", mnt.path())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("NOT RUN: cannot start unshare ({e}); the O_DIRECT fallback is covered by the unit test in src/io/file.rs only");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("K3-RAMFS-CHILD-RAN") {
        eprintln!(
            "NOT RUN: no private ramfs mount here ({}); the O_DIRECT fallback is covered by the \
             unit test in src/io/file.rs only",
            stderr.trim()
        );
        return;
    }
    assert!(out.status.success(), "child failed:\n{stderr}");
    assert!(stderr.contains("K3-RAMFS-CHILD-OK"), "{stderr}");
    assert_eq!(
        stderr.matches("O_DIRECT refused").count(),
        1,
        "one notice for two refusing files:\n{stderr}"
    );
    assert!(stderr.contains("POSIX_FADV_DONTNEED"), "{stderr}");
}
