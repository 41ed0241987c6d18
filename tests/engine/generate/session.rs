//! Library-level session tests on tests/fixtures/tiny-k3: a sequence's logits are the same bits
//! alone or in a batch of 3–8 sequences with other lengths, seeds, stop rules and positions,
//! joining and leaving at any step; snapshot + restore continues bit for bit.

use crate::support::fixture;
use k3::bind::bind_resident;
use k3::bind::experts::PreadExperts;
use k3::bind::resident::ResidentTrunk;
use k3::generate::sample::SamplerSettings;
use k3::generate::session::{Sequence, SequenceOptions, Session, StepEvent};
use k3::generate::stop::{StopReason, StopRules};
use k3::model::{Dims, Exec, LogitRows, Segment};

pub(super) type Tiny = Session<'static, ResidentTrunk, PreadExperts>;

pub(super) fn session(threads: usize) -> Tiny {
    let dir = fixture("tiny-k3");
    let cfg = k3::config::Config::from_file(&dir.join("config.json")).unwrap();
    let d = Dims::from_config(&cfg);
    let index = k3::checkpoint::TensorIndex::open(&dir).unwrap();
    let b = bind_resident(&index, &cfg, d.nl, d.kt).unwrap();
    let isa = k3_kernels::Isa::from_env().unwrap();
    let ex = Exec::new(k3_kernels::Kernels::new(isa, threads).unwrap());
    Session::new(b.model, b.trunk, b.experts, ex, 5).unwrap()
}

pub(super) fn opts(t: f64, seed: u64, gen: u64, stop_ids: Vec<u32>) -> SequenceOptions {
    let mut s = SamplerSettings::greedy();
    s.temperature = t;
    s.top_p = 0.95;
    s.seed = seed;
    SequenceOptions {
        settings: s,
        rules: StopRules::new(vec![], stop_ids, vec![], gen, 64, 512).unwrap(),
        all_rows: false,
    }
}

pub(super) fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + salt * 101 + 5) % 512)
        .collect()
}

/// (generated ids, per-step logits hashes, logits hash) of one sequence run alone.
fn alone(sess: &mut Tiny, p: &[u32], o: SequenceOptions) -> (Vec<u32>, Vec<u64>, u64) {
    let mut s = sess.sequence(p, 64, o).unwrap();
    sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
    let mut per = Vec::new();
    while s.active() {
        sess.step(&mut [&mut s], &mut |ev| {
            if let StepEvent::Chosen(_, c) = ev {
                per.push(c.logits_fnv1a64);
            }
            Ok(())
        })
        .unwrap();
    }
    (s.generated().to_vec(), per, s.logits_hash())
}

/// One forward over segments at different offsets, with different row counts and logits
/// wishes, gives every segment the bits it gets alone (and leaves the same states).
#[test]
fn batched_forward_rows_equal_each_segment_alone() {
    let mut sess = session(2);
    let d = sess.model.dims.clone();
    let fresh = || k3::model::state::DecodeState::new(&d, d.nl, 32);
    // three states at positions 7, 3 and 0
    let mut states = vec![fresh(), fresh(), fresh()];
    for (st, n) in states.iter_mut().zip([7usize, 3, 0]) {
        if n > 0 {
            let p = prompt(n, n as u32);
            sess.model
                .forward(
                    &sess.ex,
                    &mut sess.trunk,
                    &mut sess.experts,
                    st,
                    &p,
                    LogitRows::None,
                )
                .unwrap();
        }
    }
    let new_ids: [Vec<u32>; 3] = [vec![9], prompt(4, 2), prompt(2, 3)];
    let wants = [LogitRows::Last, LogitRows::All, LogitRows::Last];
    let mut alone_states = states.clone();
    let mut alone_rows = Vec::new();
    for i in 0..3 {
        alone_rows.push(
            sess.model
                .forward(
                    &sess.ex,
                    &mut sess.trunk,
                    &mut sess.experts,
                    &mut alone_states[i],
                    &new_ids[i],
                    wants[i],
                )
                .unwrap(),
        );
    }
    let mut it = states.iter_mut();
    let mut segs: Vec<Segment<'_>> = (0..3)
        .map(|i| Segment {
            state: it.next().unwrap(),
            ids: &new_ids[i],
            rows: wants[i],
        })
        .collect();
    let rows = sess
        .model
        .forward_batch(&sess.ex, &mut sess.trunk, &mut sess.experts, &mut segs)
        .unwrap();
    drop(segs);
    for i in 0..3 {
        let (a, b): (Vec<u32>, Vec<u32>) = (
            rows[i].iter().map(|x| x.to_bits()).collect(),
            alone_rows[i].iter().map(|x| x.to_bits()).collect(),
        );
        assert_eq!(a, b, "segment {i}: batched logits differ from alone");
        assert_eq!(states[i], alone_states[i], "segment {i}: state differs");
    }
}

/// 3–8 sequences of different prompt lengths, seeds, temperatures and stop rules stepped
/// together (finished ones leave; one joins late) give each the ids and per-step logits
/// hashes it gets alone.
#[test]
fn sequences_in_a_batch_equal_alone() {
    for (threads, n) in [(1usize, 3usize), (3, 8)] {
        let mut sess = session(threads);
        let specs: Vec<(Vec<u32>, SequenceOptions)> = (0..n)
            .map(|i| {
                let t = if i % 3 == 0 {
                    0.0
                } else {
                    0.5 + i as f64 * 0.2
                };
                let stop = if i == 1 {
                    vec![7, 100, 200, 300, 400]
                } else {
                    vec![]
                };
                (
                    prompt(1 + i * 3 % 11, i as u32),
                    opts(t, 40 + i as u64, 3 + i as u64, stop),
                )
            })
            .collect();
        let want: Vec<_> = specs
            .iter()
            .map(|(p, o)| alone(&mut sess, p, o.clone()))
            .collect();
        let mut seqs: Vec<Sequence> = Vec::new();
        let mut per: Vec<Vec<u64>> = vec![Vec::new(); n];
        // all but the last join at once; the last joins after two steps
        for (p, o) in &specs[..n - 1] {
            let mut s = sess.sequence(p, 64, o.clone()).unwrap();
            sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
            seqs.push(s);
        }
        let mut step = 0;
        while seqs.iter().any(|s| s.active()) || seqs.len() < n {
            if step == 2 && seqs.len() < n {
                let (p, o) = &specs[n - 1];
                let mut s = sess.sequence(p, 64, o.clone()).unwrap();
                sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
                seqs.push(s);
            }
            let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
            sess.step(&mut refs, &mut |ev| {
                if let StepEvent::Chosen(i, c) = ev {
                    per[i].push(c.logits_fnv1a64);
                }
                Ok(())
            })
            .unwrap();
            step += 1;
        }
        for (i, s) in seqs.iter().enumerate() {
            assert_eq!(
                s.generated(),
                &want[i].0[..],
                "threads {threads}, sequence {i}: ids"
            );
            assert_eq!(
                per[i], want[i].1,
                "threads {threads}, sequence {i}: per-step hashes"
            );
            assert_eq!(
                s.logits_hash(),
                want[i].2,
                "threads {threads}, sequence {i}: hash"
            );
        }
        assert_eq!(
            seqs[1].stop_reason(),
            want_reason(&want[1].0, &[7, 100, 200, 300, 400], 4)
        );
    }
}

fn want_reason(ids: &[u32], stops: &[u32], gen: usize) -> Option<StopReason> {
    if ids.last().is_some_and(|i| stops.contains(i)) {
        Some(StopReason::StopId)
    } else {
        assert_eq!(ids.len(), gen);
        Some(StopReason::Length)
    }
}

/// A snapshot after N steps, restored into the same and into a fresh sequence, continues
/// exactly as the uninterrupted sequence (ids, per-step hashes, logits hash).
#[test]
fn snapshot_and_restore_continue_bit_for_bit() {
    let mut sess = session(2);
    let p = prompt(6, 9);
    let o = opts(0.9, 1234, 10, vec![]);
    let (ids, _, hash) = alone(&mut sess, &p, o.clone());
    let mut s = sess.sequence(&p, 64, o.clone()).unwrap();
    sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
    for _ in 0..4 {
        sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
    }
    let snap = s.snapshot();
    // run on to the end, then roll back and run again
    while s.active() {
        sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
    }
    assert_eq!(s.generated(), &ids[..]);
    s.restore(&snap).unwrap();
    let mut other = sess.sequence(&prompt(3, 1), 64, o).unwrap();
    other.restore(&snap).unwrap();
    for q in [&mut s, &mut other] {
        while q.active() {
            sess.step(&mut [&mut *q], &mut |_| Ok(())).unwrap();
        }
        assert_eq!(q.generated(), &ids[..]);
        assert_eq!(q.logits_hash(), hash);
    }
}

/// A second turn continued on the same sequence (only the new ids prefilled) gives the same
/// logits bits as one fresh sequence over the concatenated ids: greedy and sampled, and when
/// the first turn stopped on a stop id (which then runs with the new input).
#[test]
fn continued_turn_equals_one_run_over_the_concatenated_ids() {
    let mut sess = session(2);
    for (t, stops) in [(0.0, vec![]), (0.9, vec![]), (0.0, vec![7u32])] {
        let p = prompt(5, 3);
        let mut s = sess
            .sequence(&p, 64, opts(t, 77, 4, stops.clone()))
            .unwrap();
        sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
        while s.active() {
            sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
        }
        let turn2 = prompt(4, 8);
        let ran_before = s.state().n_pos;
        s.continue_with(&turn2, opts(t, 77, 3, stops.clone()).rules)
            .unwrap();
        assert_eq!(s.generated(), &[] as &[u32]);
        let mut rows_run = 0;
        let mut one = opts(t, 77, 3, stops.clone());
        one.all_rows = false;
        sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
        rows_run += s.state().n_pos - ran_before;
        assert_eq!(rows_run, s.ids().len() - ran_before);
        assert!(
            rows_run <= turn2.len() + 1,
            "only the new ids (and the pending one) run"
        );
        let whole = s.ids().to_vec();
        let mut fresh = sess.sequence(&whole, 64, one).unwrap();
        sess.prefill(&mut fresh, None, &mut |_| Ok(())).unwrap();
        assert_eq!(s.logits(), fresh.logits(), "prefill logits at t={t}");
        let mut per = |q: &mut Sequence| {
            let mut v = Vec::new();
            while q.active() {
                sess.step(&mut [&mut *q], &mut |ev| {
                    if let StepEvent::Chosen(_, c) = ev {
                        v.push(c.logits_fnv1a64);
                    }
                    Ok(())
                })
                .unwrap();
            }
            (q.generated().to_vec(), v)
        };
        assert_eq!(per(&mut s), per(&mut fresh), "second turn at t={t}");
    }
}

/// A turn past the sequence's capacity is refused and leaves the sequence as it was.
#[test]
fn continued_turn_past_the_context_is_refused_unchanged() {
    let mut sess = session(1);
    let mut s = sess
        .sequence(&prompt(5, 1), 64, opts(0.0, 1, 2, vec![]))
        .unwrap();
    sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
    while s.active() {
        sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
    }
    let before = s.ids().to_vec();
    let e = s
        .continue_with(&prompt(60, 2), opts(0.0, 1, 2, vec![]).rules)
        .unwrap_err();
    assert!(e.to_string().contains("context"), "{e}");
    assert_eq!(s.ids(), &before[..]);
    assert!(!s.active());
}
