//! Joining sequences (ENGINE.md §10, §11; `Session::join`): a sequence whose prompt runs in
//! slices as rows of running sequences' steps gets the bits it gets alone, and so do the
//! running ones; they choose an id at every step while the joiner's prompt runs (counted in
//! steps); with and without speculation, greedy and sampled, `--gen 0` too.

use crate::support::fixture;
use k3::bind::bind_resident;
use k3::bind::experts::PreadExperts;
use k3::bind::resident::ResidentTrunk;
use k3::generate::sample::SamplerSettings;
use k3::generate::session::{PrefillProgress, Sequence, SequenceOptions, Session, StepEvent};
use k3::generate::spec::Speculation;
use k3::generate::stop::StopRules;
use k3::model::{Dims, Exec};

type Tiny = Session<'static, ResidentTrunk, PreadExperts>;

fn session(spec: usize) -> Tiny {
    let dir = fixture("tiny-k3");
    let cfg = k3::config::Config::from_file(&dir.join("config.json")).unwrap();
    let d = Dims::from_config(&cfg);
    let index = k3::checkpoint::TensorIndex::open(&dir).unwrap();
    let b = bind_resident(&index, &cfg, d.nl, d.kt).unwrap();
    let isa = k3_kernels::Isa::from_env().unwrap();
    let ex = Exec::new(k3_kernels::Kernels::new(isa, 2).unwrap());
    let mut s = Session::new(b.model, b.trunk, b.experts, ex, 8).unwrap();
    let mut sp = Speculation::off();
    sp.max_draft = spec;
    s.spec = sp;
    s
}

fn opts(t: f64, seed: u64, gen: u64) -> SequenceOptions {
    let mut s = SamplerSettings::greedy();
    s.temperature = t;
    s.top_p = 0.95;
    s.seed = seed;
    SequenceOptions {
        settings: s,
        rules: StopRules::new(vec![], vec![], vec![], gen, 96, 512).unwrap(),
        all_rows: false,
    }
}

/// A prompt that repeats itself (so prompt-lookup drafts are accepted now and then).
fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| ((i % 9) * 37 + salt * 101 + 5) % 512)
        .collect()
}

/// (generated ids, logits hash, logits vectors hashed) of `p` prefilled alone, then stepped.
fn alone(sess: &mut Tiny, p: &[u32], o: SequenceOptions) -> (Vec<u32>, u64, usize) {
    let mut s = sess.sequence(p, 96, o).unwrap();
    sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
    while s.active() {
        sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
    }
    (s.generated().to_vec(), s.logits_hash(), s.logits_hashed())
}

fn outcome(s: &Sequence) -> (Vec<u32>, u64, usize) {
    (s.generated().to_vec(), s.logits_hash(), s.logits_hashed())
}

/// Two decoders running, three joiners of 5, 23 and 41 positions arriving at once (slices of
/// 3 positions per step, first joined first), then one more joining a step later: every
/// sequence ends with the ids and hash it has alone; while any prompt runs, each decoder
/// chooses one id per step (no step of theirs waits for a prompt).
fn joiners_equal_alone(spec: usize) {
    let mut sess = session(spec);
    let cases: Vec<(Vec<u32>, SequenceOptions)> = vec![
        (prompt(4, 1), opts(0.0, 0, 40)),
        (prompt(6, 2), opts(0.8, 11, 40)),
        (prompt(5, 3), opts(0.0, 0, 6)),
        (prompt(23, 4), opts(0.9, 12, 7)),
        (prompt(41, 5), opts(0.0, 0, 5)),
        (prompt(17, 6), opts(0.7, 13, 0)),
    ];
    let solo: Vec<_> = cases
        .iter()
        .map(|(p, o)| alone(&mut sess, p, o.clone()))
        .collect();
    sess.join_slice = 3;
    let mut seqs: Vec<Sequence> = Vec::new();
    // the two decoders, prefilled alone and one step in
    for (p, o) in &cases[..2] {
        let mut s = sess.sequence(p, 96, o.clone()).unwrap();
        sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
        seqs.push(s);
    }
    let step = |sess: &mut Tiny, seqs: &mut Vec<Sequence>| -> Vec<usize> {
        let mut chose = vec![0usize; seqs.len()];
        let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
        sess.step(&mut refs, &mut |ev| {
            if let StepEvent::Chosen(i, _) = ev {
                chose[i] += 1;
            }
            Ok(())
        })
        .unwrap();
        chose
    };
    step(&mut sess, &mut seqs);
    for (p, o) in &cases[2..5] {
        let mut s = sess.sequence(p, 96, o.clone()).unwrap();
        sess.join(&mut s).unwrap();
        assert_eq!(
            s.prefilling().map(|p| (p.done, p.total)),
            Some((0, p.len()))
        );
        seqs.push(s);
    }
    let mut steps_while_prefilling = 0;
    let mut last_done = vec![0usize; cases.len()];
    for n in 0.. {
        if n == 1 {
            let (p, o) = &cases[5];
            let mut s = sess.sequence(p, 96, o.clone()).unwrap();
            sess.join(&mut s).unwrap();
            seqs.push(s);
        }
        if seqs.iter().all(|s| !s.active()) {
            break;
        }
        let prefilling = seqs.iter().any(|s| s.prefilling().is_some());
        let decoding: Vec<bool> = seqs[..2].iter().map(Sequence::active).collect();
        let chose = step(&mut sess, &mut seqs);
        if prefilling {
            steps_while_prefilling += 1;
            for i in 0..2 {
                if decoding[i] {
                    assert!(chose[i] >= 1, "decoder {i} chose nothing in step {n}");
                }
            }
        }
        // a joiner's slice per step at most, in order of joining
        let slices: usize = seqs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let done = s.prefilling().map_or(s.prompt_len(), |p| p.done);
                let d = done.saturating_sub(last_done[i]);
                if i >= 2 {
                    last_done[i] = done;
                }
                (i >= 2).then_some(d)
            })
            .sum();
        assert!(
            slices <= 3,
            "step {n} ran {slices} prompt positions (slice 3)"
        );
        assert!(n < 400, "the run does not end");
    }
    // 5 + 23 + 41 + 17 positions, 3 a step: at least 29 steps with a prompt running
    assert!(steps_while_prefilling >= 29, "{steps_while_prefilling}");
    for (i, (s, want)) in seqs.iter().zip(&solo).enumerate() {
        assert_eq!(
            &outcome(s),
            want,
            "sequence {i} (spec {spec}) differs from alone"
        );
    }
}

#[test]
fn joiners_prefill_beside_decoders_with_the_bits_they_get_alone() {
    joiners_equal_alone(0);
}

#[test]
fn joiners_prefill_beside_speculating_decoders_with_the_bits_they_get_alone() {
    joiners_equal_alone(3);
}

/// `prefill DONE/TOTAL RATE/s ETA s` (ENGINE.md §11), rate and time left once a slice ran.
#[test]
fn progress_reads_in_the_server_format() {
    let p = |done, total, seconds| {
        PrefillProgress {
            done,
            total,
            seconds,
        }
        .to_string()
    };
    assert_eq!(p(0, 512, 0.3), "prefill 0/512");
    assert_eq!(p(128, 512, 4.0), "prefill 128/512 32.0/s 12.0 s");
    assert_eq!(p(512, 512, 2.0), "prefill 512/512 256.0/s 0.0 s");
}

/// A sequence that wants every prompt row (a sink) cannot join; nor one with nothing to run.
#[test]
fn join_refuses_what_it_cannot_run() {
    let sess = session(0);
    let mut o = opts(0.0, 0, 3);
    o.all_rows = true;
    let mut s = sess.sequence(&prompt(3, 0), 96, o).unwrap();
    assert!(sess.join(&mut s).is_err());
}
