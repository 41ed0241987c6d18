//! The policies' behaviour on small traces.

use super::*;

fn k(e: u32) -> ExpertKey {
    ExpertKey::new(1, e)
}

/// Replays single-key batches; returns the hit flags.
fn replay(p: &mut dyn Policy, keys: &[u32]) -> Vec<bool> {
    let mut resident = std::collections::HashSet::new();
    keys.iter()
        .map(|&e| {
            if resident.contains(&e) {
                p.on_hit(k(e));
                true
            } else {
                let pin = |x: ExpertKey| x == k(e);
                if let Some(v) = p.on_miss(k(e), &pin).unwrap() {
                    assert!(resident.remove(&v.expert));
                }
                resident.insert(e);
                false
            }
        })
        .collect()
}

#[test]
fn lru_and_fifo_textbook() {
    let seq = [1, 2, 3, 1, 4, 2, 5, 1];
    let mut lru = new_policy("lru", 3).unwrap();
    let h = replay(lru.as_mut(), &seq);
    // LRU: 1 2 3 | 1 hit | 4 evicts 2 | 2 evicts 3 | 5 evicts 1 | 1 evicts 4
    assert_eq!(h, [false, false, false, true, false, false, false, false]);
    let mut fifo = new_policy("fifo", 3).unwrap();
    let h = replay(fifo.as_mut(), &seq);
    // FIFO: 4 evicts 1, 2 hit, 5 evicts 2, 1 evicts 3
    assert_eq!(h, [false, false, false, true, false, true, false, false]);
}

/// Victims of a run of single-key batches.
fn victims(p: &mut dyn Policy, keys: &[u32]) -> Vec<u32> {
    let mut resident = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &e in keys {
        if resident.contains(&e) {
            p.on_hit(k(e));
        } else {
            let pin = |x: ExpertKey| x == k(e);
            if let Some(v) = p.on_miss(k(e), &pin).unwrap() {
                resident.remove(&v.expert);
                out.push(v.expert);
            }
            resident.insert(e);
        }
    }
    out
}

#[test]
fn lfu_counts_outlive_eviction() {
    // a is requested 3 times; b and c alternate. b and c keep their counts while evicted,
    // so each returns stronger, while a (count 3) stays; LRU evicts a at once.
    let mut p = new_policy("lfu", 2).unwrap();
    let v = victims(p.as_mut(), &[0, 0, 0, 1, 2, 1, 2, 1, 2, 1]);
    // c evicts b (1 < 3); b returns with 2 and evicts c (1); c returns with 2 and evicts
    // b (2, older); b returns with 3 and evicts c (2); c returns with 3 and ties a and b
    // at 3: the least recent of them, a, goes; the last b is a hit.
    assert_eq!(v, [1, 2, 1, 2, 0]);
    let mut lru = new_policy("lru", 2).unwrap();
    assert_eq!(victims(lru.as_mut(), &[0, 0, 0, 1, 2, 1, 2, 1, 2, 1]), [0]);
}

#[test]
fn lfu_halving_lets_stale_popularity_fade() {
    // a was requested 1000 times long ago; then only b and c. Without the periodic halving
    // a's count would keep it resident forever; with it, a is evicted within a few windows
    // (window = 10 × 2 slots = 20 requests): its count, about 20 when b and c start,
    // halves each window while theirs settle near 10.
    let mut p = new_policy("lfu", 2).unwrap();
    let mut keys = vec![0u32; 1000];
    for i in 0..300 {
        keys.push(1 + (i % 2));
    }
    let v = victims(p.as_mut(), &keys);
    let first_a = v.iter().position(|&x| x == 0).expect("a is evicted");
    assert!(
        first_a < 60,
        "a evicted only after {first_a} other evictions"
    );
}

#[test]
fn unknown_name_lists_the_known_ones() {
    let e = new_policy("mru", 4).err().unwrap();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("`mru`") && e.message.contains("s3-fifo"));
    assert_eq!(new_policy("lru", 0).err().unwrap().exit_code(), 2);
}
