//! The sampler (ENGINE.md §8) against independent implementations written from the spec
//! text (tests/engine/generate/sample_ref.py, run when python3 is present, and a plain one here), on random logits vectors
//! with ties, −0, huge and tiny temperatures and every on/off combination of top-k, top-p and
//! min-p, and on logits dumped from the tiny model.

use crate::support::{fixture, run_k3, scratch_dir};
use k3::generate::sample::{splitmix64, Sampler, SamplerSettings};
use std::io::Write;
use std::process::{Command, Stdio};

struct Case {
    z: Vec<f32>,
    s: SamplerSettings,
    n: u64,
}

/// Random logits: values drawn from a few shapes so ties, both zeros, near-equal values and
/// wide ranges all occur.
fn logits(h: u64) -> Vec<f32> {
    let v = 1 + (h % 400) as usize;
    let shape = (h >> 20) % 5;
    (0..v)
        .map(|i| {
            let r = splitmix64(h, i as u64);
            let unit = (r >> 11) as f64 / 9_007_199_254_740_992.0; // [0, 1)
            match shape {
                0 => (unit * 20.0 - 10.0) as f32,
                1 => [0.0, -0.0, 1.0, -1.0, 0.5][(r % 5) as usize],
                2 => f32::from_bits(0x3f80_0000 + (r % 8) as u32), // 1.0 and its next 7 floats
                3 => (unit * 2e30 - 1e30) as f32,
                _ => ((r % 64) as f32 - 32.0) * 0.125,
            }
        })
        .collect()
}

const TEMPS: [f64; 10] = [1e-300, 5e-324, 1e-6, 0.3, 0.7, 1.0, 1.5, 10.0, 1e12, 1e300];
const TOP_P: [f64; 5] = [0.9, 0.5, 1e-9, 0.999999, 0.95];
const MIN_P: [f64; 5] = [0.05, 0.5, 0.999, 1e-12, 0.2];

/// Settings with top-k / top-p / min-p switched on by the bits of `mask`.
fn settings(h: u64, mask: u64, v: usize) -> SamplerSettings {
    let pick = |r: u64, n: usize| (splitmix64(h, r) % n as u64) as usize;
    let ks = [1, 2, 5, v as u64, v as u64 + 10, 40];
    SamplerSettings {
        temperature: TEMPS[pick(1, TEMPS.len())],
        top_k: if mask & 1 != 0 {
            ks[pick(2, ks.len())]
        } else {
            0
        },
        top_p: if mask & 2 != 0 {
            TOP_P[pick(3, TOP_P.len())]
        } else {
            1.0
        },
        min_p: if mask & 4 != 0 {
            MIN_P[pick(4, MIN_P.len())]
        } else {
            0.0
        },
        seed: splitmix64(h, 5),
    }
}

/// Runs the reference on `cases`; `None` when python3 is absent.
fn reference(cases: &[Case]) -> Option<Vec<u32>> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/engine/generate/sample_ref.py"
    );
    let mut child = match Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("python3 not available ({e}): the independent check is skipped");
            return None;
        }
    };
    let mut text = String::new();
    for c in cases {
        let s = &c.s;
        text += &format!(
            "{:x} {:x} {:x} {:x} {:x} {:x}",
            s.temperature.to_bits(),
            s.top_p.to_bits(),
            s.min_p.to_bits(),
            s.top_k,
            s.seed,
            c.n
        );
        for z in &c.z {
            text += &format!(" {:x}", z.to_bits());
        }
        text.push('\n');
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "reference failed");
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect(),
    )
}

fn check(cases: &[Case]) {
    let Some(want) = reference(cases) else { return };
    assert_eq!(want.len(), cases.len());
    let mut sm = Sampler::new();
    for (i, (c, &w)) in cases.iter().zip(&want).enumerate() {
        let got = sm.choose(&c.z, &c.s, c.n).unwrap();
        assert_eq!(
            got,
            w,
            "case {i}: V = {}, settings {:?}, n = {}",
            c.z.len(),
            c.s,
            c.n
        );
    }
}

#[test]
fn agrees_with_independent_implementation_on_random_logits() {
    let mut cases = Vec::new();
    for vec in 0..150u64 {
        let h = splitmix64(0xC0FFEE, vec);
        let z = logits(h);
        for mask in 0..8u64 {
            for rep in 0..3u64 {
                let hs = splitmix64(h, 100 + mask * 3 + rep);
                let mut s = settings(hs, mask, z.len());
                if rep == 0 && mask == 0 && vec % 10 == 0 {
                    s.temperature = 0.0; // greedy, too
                }
                cases.push(Case {
                    z: z.clone(),
                    s,
                    n: hs % 5000,
                });
            }
        }
    }
    check(&cases);
}

#[test]
fn agrees_with_independent_implementation_on_tiny_model_logits() {
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("tiny-k3").join("expected.json")).unwrap())
            .unwrap();
    let ids: Vec<String> = exp["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap().to_string())
        .collect();
    let dir = scratch_dir("generate_sample_dump");
    let dump = dir.join("logits.f32");
    let o = run_k3([
        fixture("tiny-k3").to_str().unwrap(),
        "--ids",
        &ids.join(","),
        "--gen",
        "0",
        "--dump-logits",
        dump.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all: Vec<f32> = std::fs::read(&dump)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let v = exp["config_summary"]["vocab_size"].as_u64().unwrap_or(512) as usize;
    assert_eq!(all.len() % v, 0);
    let mut cases = Vec::new();
    for (row, z) in all.chunks_exact(v).enumerate() {
        for mask in 0..8u64 {
            for rep in 0..4u64 {
                let h = splitmix64(row as u64, mask * 4 + rep);
                cases.push(Case {
                    z: z.to_vec(),
                    s: settings(h, mask, v),
                    n: row as u64 + 1,
                });
            }
        }
    }
    assert!(cases.len() >= 8 * 4 * 4);
    check(&cases);
}
