//! The expert cache against real files (ENGINE.md §5, FORMATS.md §6): payload bytes at
//! unaligned offsets, pins, counters, sub-batch limits, failed reads and failed verification
//! that publish nothing, and a replay of the real routing trace through the cache that must
//! match the simulator's counts for every policy.

use crate::support::io as io_support;

use io_support::{fixture, Rng, TempDir};
use k3::io::{Extent, IoFile, IoThreads};
use k3::stream::expert_cache::{ExpertCache, ExpertPieces};
use k3::stream::policy::{new_policy, POLICY_NAMES};
use k3::stream::sim::{batches, simulate};
use k3::stream::trace::{derive_incremental, read_trace};
use k3::{Error, ErrorKind};
use std::path::PathBuf;
use std::sync::Arc;

/// Byte i of expert (layer, e): a hash of all three, so any mix-up shows.
fn byte(layer: u32, e: u32, i: usize) -> u8 {
    let mut h = (layer as u64) << 40 ^ (e as u64) << 20 ^ i as u64;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 56) as u8
}

fn expected(layer: u32, e: u32, n: usize) -> Vec<u8> {
    (0..n).map(|i| byte(layer, e, i)).collect()
}

/// A shard-like file: `header` bytes, then every expert of layers `first..first + layers`,
/// each `expert_bytes` long, layer-major (offsets deliberately not 4096-aligned).
struct Shard {
    _dir: TempDir,
    path: PathBuf,
    header: usize,
    first: u32,
    experts: u32,
    expert_bytes: usize,
}

impl Shard {
    fn new(tag: &str, first: u32, layers: u32, experts: u32, expert_bytes: usize) -> Shard {
        let dir = TempDir::new(tag);
        let header = 1234;
        let mut bytes = vec![b' '; header];
        for l in first..first + layers {
            for e in 0..experts {
                bytes.extend((0..expert_bytes).map(|i| byte(l, e, i)));
            }
        }
        let path = dir.file("model-00002-of-00003.safetensors", &bytes);
        Shard {
            _dir: dir,
            path,
            header,
            first,
            experts,
            expert_bytes,
        }
    }
    fn offset(&self, layer: u32, e: u32) -> u64 {
        (self.header
            + ((layer - self.first) as usize * self.experts as usize + e as usize)
                * self.expert_bytes) as u64
    }
}

fn io() -> Arc<IoThreads> {
    Arc::new(IoThreads::new(4).unwrap())
}

fn cache(slots: usize, bytes: usize, policy: &str) -> ExpertCache {
    ExpertCache::new(slots, bytes, new_policy(policy, slots).unwrap(), io()).unwrap()
}

/// Serves `experts` (requests, repeats allowed) with [`ExpertCache::fetch_each`] and returns
/// each request's payload, in request order, checking that every distinct expert was handed
/// over exactly once.
fn fetch_payloads<'f>(
    c: &mut ExpertCache,
    layer: u32,
    experts: &[u32],
    locate: impl FnMut(u32) -> k3::Result<ExpertPieces<'f>>,
    verify: impl FnMut(u32, &[u8]) -> k3::Result<()>,
) -> k3::Result<Vec<Vec<u8>>> {
    let mut got: Vec<(u32, Vec<u8>)> = Vec::new();
    c.fetch_each(layer, experts, locate, verify, &mut |ids, payloads| {
        for (&e, p) in ids.iter().zip(payloads) {
            assert!(got.iter().all(|g| g.0 != e), "expert {e} handed over twice");
            got.push((e, p.to_vec()));
        }
        Ok(())
    })?;
    let mut distinct: Vec<u32> = experts.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        got.len(),
        distinct.len(),
        "every distinct expert handed over"
    );
    Ok(experts
        .iter()
        .map(|e| got.iter().find(|g| g.0 == *e).unwrap().1.clone())
        .collect())
}

/// Fetches and checks every payload byte.
fn fetch(
    c: &mut ExpertCache,
    f: &IoFile,
    s: &Shard,
    layer: u32,
    experts: &[u32],
) -> k3::Result<()> {
    let n = s.expert_bytes;
    let b = fetch_payloads(
        c,
        layer,
        experts,
        |e| Ok(ExpertPieces::run(f, s.offset(layer, e), n)),
        |e, p| {
            assert_eq!(p, expected(layer, e, n), "verify sees the whole payload");
            Ok(())
        },
    )?;
    assert_eq!(b.len(), experts.len());
    for (i, &e) in experts.iter().enumerate() {
        assert!(
            b[i] == expected(layer, e, n),
            "payload of layer {layer} expert {e}"
        );
    }
    Ok(())
}

#[test]
fn slots_use_the_widened_window_stride_of_formats_6() {
    assert_eq!(ExpertCache::slot_stride(17_547_264), Some(17_555_456));
    let c = cache(3, 10_000, "lru");
    assert_eq!(c.stride(), 20_480);
    assert_eq!(c.slots(), 3);
    assert_eq!(c.slot_bytes(), 10_000);
    assert_eq!(c.policy_name(), "lru");
}

#[test]
fn a_batch_is_served_and_counted() {
    let s = Shard::new("ec-basic", 1, 2, 16, 10_000);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(8, 10_000, "lru");
    // Two positions of top-3 with one expert in common.
    fetch(&mut c, &f, &s, 1, &[3, 1, 4, 1, 5, 9]).unwrap();
    let st = c.stats();
    assert_eq!(st.requests, 6);
    assert_eq!(st.reads, 5);
    assert_eq!(st.hits, 1, "the repeat of expert 1 costs no read");
    assert_eq!(
        st.true_resident_hits, 0,
        "nothing was resident before the layer asked"
    );
    assert_eq!(st.evictions, 0);
    assert!(st.bytes_read >= 5 * 10_000);
    fetch(&mut c, &f, &s, 1, &[1, 9, 2]).unwrap();
    let st = c.stats();
    assert_eq!((st.requests, st.reads, st.true_resident_hits), (9, 6, 2));
    // Same expert index in another layer is another expert.
    fetch(&mut c, &f, &s, 2, &[1, 9]).unwrap();
    assert_eq!(c.stats().reads, 8);
    assert_eq!(c.stats().evictions, 0);
    assert!(c.contains(1, 3) && c.contains(2, 9) && !c.contains(2, 3));
}

#[test]
fn a_batch_never_evicts_or_refills_its_own_slots_under_any_policy() {
    let s = Shard::new("ec-pins", 1, 3, 40, 5000);
    let f = IoFile::open(&s.path).unwrap();
    for policy in POLICY_NAMES {
        for slots in [4usize, 5, 9] {
            let mut c = cache(slots, 5000, policy);
            let mut rng = Rng(0x1234 + slots as u64);
            for _ in 0..300 {
                let layer = 1 + rng.below(3) as u32;
                let k = 1 + rng.below(slots as u64) as usize; // up to exactly the cache size
                let mut set: Vec<u32> = Vec::new();
                while set.len() < k {
                    // Skewed: low experts are popular, so hits and misses mix.
                    let e = (rng.below(40) * rng.below(40) / 40) as u32;
                    if !set.contains(&e) {
                        set.push(e);
                    }
                }
                fetch(&mut c, &f, &s, layer, &set)
                    .unwrap_or_else(|e| panic!("{policy} slots {slots}: {e}"));
                for &e in &set {
                    assert!(c.contains(layer, e), "{policy}: {e} published");
                }
            }
            let st = c.stats();
            assert!(
                st.evictions > 0 && st.true_resident_hits > 0,
                "{policy}: {st:?}"
            );
        }
    }
}

#[test]
fn fifo_skips_a_pinned_oldest_slot() {
    let s = Shard::new("ec-fifo", 1, 1, 8, 3000);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(4, 3000, "fifo");
    fetch(&mut c, &f, &s, 1, &[0, 1, 2, 3]).unwrap();
    // Expert 0 is the oldest, but this batch uses it: 1 and 2 go instead.
    fetch(&mut c, &f, &s, 1, &[0, 4, 5]).unwrap();
    assert!(c.contains(1, 0) && c.contains(1, 3) && c.contains(1, 4) && c.contains(1, 5));
    assert!(!c.contains(1, 1) && !c.contains(1, 2));
}

#[test]
fn a_batch_larger_than_the_cache_is_refused_before_any_read() {
    let s = Shard::new("ec-big", 1, 1, 8, 3000);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(3, 3000, "lru");
    let e = fetch(&mut c, &f, &s, 1, &[0, 1, 2, 3]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("sub-batch"), "{e}");
    assert_eq!(c.stats().reads, 0);
    // Repeats do not count against the limit.
    fetch(&mut c, &f, &s, 1, &[0, 1, 2, 0, 1, 2]).unwrap();
}

#[test]
fn a_failed_read_fails_the_batch_with_exit_4_and_publishes_nothing() {
    let a = Shard::new("ec-fail-a", 1, 1, 8, 6000);
    let b = Shard::new("ec-fail-b", 2, 1, 8, 6000);
    let fa = IoFile::open(&a.path).unwrap();
    let fb = IoFile::open(&b.path).unwrap();
    let mut c = cache(6, 6000, "s3-fifo");
    fetch(&mut c, &fa, &a, 1, &[0, 1]).unwrap();
    fetch(&mut c, &fb, &b, 2, &[0]).unwrap();
    // b's file is truncated after it was indexed and opened: experts 5..7 of layer 2 are cut.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&b.path)
        .unwrap()
        .set_len(b.offset(2, 5) + 100)
        .unwrap();
    let before = c.stats();
    let e = fetch(&mut c, &fb, &b, 2, &[0, 1, 6, 2]).unwrap_err();
    assert_eq!(e.exit_code(), 4);
    assert!(e.message.starts_with(&b.path.display().to_string()), "{e}");
    assert!(
        e.message.contains(&format!("offset {}", b.offset(2, 1))),
        "{e}"
    );
    assert!(e.message.contains("layer 2 expert 1"), "{e}");
    // None of the batch's reads is published; the resident expert stays.
    assert!(c.contains(2, 0));
    for x in [1, 2, 6] {
        assert!(!c.contains(2, x), "expert {x} must not be published");
    }
    assert_eq!(
        c.stats().requests,
        before.requests,
        "a failed batch serves nothing"
    );
    // The freed slots serve later batches, and the evicted-for-nothing state is consistent.
    fetch(&mut c, &fa, &a, 1, &[2, 3, 4, 5]).unwrap();
    fetch(&mut c, &fa, &a, 1, &[0, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(c.stats().requests, before.requests + 10);
}

#[test]
fn a_failed_verification_publishes_nothing_and_the_expert_is_checked_again_next_time() {
    let s = Shard::new("ec-verify", 1, 1, 8, 4000);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(4, 4000, "arc");
    let mut calls = 0;
    let r = fetch_payloads(
        &mut c,
        1,
        &[2, 3],
        |e| Ok(ExpertPieces::run(&f, s.offset(1, e), 4000)),
        |e, _| {
            calls += 1;
            if e == 3 {
                Err(Error::invalid(
                    "layers.1.block_sparse_moe.experts.3.w2.weight_scale: row 0, group 0: E8M0 scale 255 (NaN)",
                ))
            } else {
                Ok(())
            }
        },
    );
    let e = r.unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("experts.3"), "{e}");
    assert!(calls >= 1);
    assert!(!c.contains(1, 2) && !c.contains(1, 3));
    fetch(&mut c, &f, &s, 1, &[2, 3]).unwrap();
    assert_eq!(c.stats().reads, 4, "both re-read");
}

#[test]
fn resident_experts_are_handed_over_first_and_each_miss_once_as_it_lands() {
    let n = 5000;
    let s = Shard::new("ec-each", 1, 1, 12, n);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(8, n, "lru");
    fetch(&mut c, &f, &s, 1, &[3, 7]).unwrap();
    // Requests with repeats: 7 and 3 resident, 1, 9 and 4 to be read.
    let requests = [1, 7, 9, 3, 7, 4, 1];
    let mut calls: Vec<Vec<u32>> = Vec::new();
    c.fetch_each(
        1,
        &requests,
        |e| Ok(ExpertPieces::run(&f, s.offset(1, e), n)),
        |_, _| Ok(()),
        &mut |ids, payloads| {
            assert_eq!(ids.len(), payloads.len());
            for (&e, p) in ids.iter().zip(payloads) {
                assert!(*p == expected(1, e, n).as_slice(), "payload of expert {e}");
            }
            calls.push(ids.to_vec());
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(
        calls[0],
        [7, 3],
        "the resident experts first, in request order"
    );
    let mut later: Vec<u32> = calls[1..].concat();
    later.sort_unstable();
    assert_eq!(later, [1, 4, 9], "every miss exactly once");
    assert!([1, 3, 4, 7, 9].iter().all(|&e| c.contains(1, e)));

    // A batch of hits only is one call; a failing read publishes nothing and ends the calls
    // with the read's error, though other experts may have been handed over.
    let mut calls = 0;
    c.fetch_each(
        1,
        &[9, 1],
        |_| unreachable!(),
        |_, _| Ok(()),
        &mut |ids, _| {
            calls += 1;
            assert_eq!(ids, [9, 1]);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(calls, 1);
    let short = Shard::new("ec-each-short", 1, 1, 2, n);
    let g = IoFile::open(&short.path).unwrap();
    let e = c
        .fetch_each(
            1,
            &[5, 11],
            |e| {
                Ok(if e == 11 {
                    ExpertPieces::run(&g, short.offset(1, 1) + 10, n)
                } else {
                    ExpertPieces::run(&f, s.offset(1, e), n)
                })
            },
            |_, _| Ok(()),
            &mut |ids, _| {
                assert!(!ids.contains(&11));
                Ok(())
            },
        )
        .unwrap_err();
    assert_eq!(e.exit_code(), 4);
    assert!(
        e.message.contains("(routed expert: layer 1 expert 11)"),
        "{e}"
    );
    assert!(
        !c.contains(1, 5) && !c.contains(1, 11),
        "a failed batch publishes nothing"
    );
}

#[test]
fn an_expert_larger_than_a_slot_is_exit_4() {
    let s = Shard::new("ec-size", 1, 1, 8, 4000);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(4, 3000, "lru");
    let e = fetch_payloads(
        &mut c,
        1,
        &[1],
        |e| Ok(ExpertPieces::run(&f, s.offset(1, e), 4000)),
        |_, _| Ok(()),
    )
    .unwrap_err();
    assert_eq!(e.exit_code(), 4);
    assert!(e.message.starts_with(&s.path.display().to_string()), "{e}");
    assert!(
        e.message.contains("4000 bytes") && e.message.contains("3000"),
        "{e}"
    );
    assert!(!c.contains(1, 1));
}

#[test]
fn an_expert_in_several_pieces_is_served_concatenated() {
    let s = Shard::new("ec-pieces", 1, 1, 8, 3000);
    let f = IoFile::open(&s.path).unwrap();
    let mut c = cache(2, 3000, "lru");
    let o = s.offset(1, 4);
    let b = fetch_payloads(
        &mut c,
        1,
        &[4],
        |_| {
            Ok(ExpertPieces {
                pieces: vec![
                    Extent {
                        file: &f,
                        offset: o,
                        len: 1000,
                    },
                    Extent {
                        file: &f,
                        offset: o + 1000,
                        len: 2000,
                    },
                ],
            })
        },
        |_, _| Ok(()),
    )
    .unwrap();
    assert_eq!(b[0], expected(1, 4, 3000));
}

#[test]
fn replaying_the_real_trace_through_the_cache_matches_the_simulator() {
    let records = read_trace(&fixture("real/expert_trace.bin")).unwrap();
    let inc = derive_incremental(&records).unwrap().records;
    // Enough of the trace for several thousand evictions, small enough to stay quick.
    let trace = &inc[..5000];
    let s = Shard::new("ec-replay", 1, 92, 896, 64);
    let f = IoFile::open(&s.path).unwrap();
    let slots = 300;
    for policy in POLICY_NAMES {
        let sim = simulate(trace, slots, policy).unwrap();
        let mut c = cache(slots, 64, policy);
        for b in batches(trace, slots) {
            let layer = trace[b.start].layer;
            let experts: Vec<u32> = trace[b].iter().map(|k| k.expert).collect();
            fetch(&mut c, &f, &s, layer, &experts).unwrap();
        }
        let st = c.stats();
        assert_eq!(st.requests, sim.requests, "{policy}");
        assert_eq!(st.reads, sim.reads, "{policy}");
        assert_eq!(st.evictions, sim.evictions, "{policy}");
        assert_eq!(st.true_resident_hits, sim.true_resident_hits, "{policy}");
        assert!(sim.evictions > 1000, "{policy}: {sim:?}");
    }
}
