//! Structured output's cost per decode step (issue 25): the same sequence stepped with and
//! without a constraint on a resident model, each step timed whole (the choice under the
//! mask, the mask walk, the forward), and the mask computation alone.
//!
//! ```text
//! cargo run -p k3-bench --bin constrain_step -- <model_dir> [--gen N] [--reps R] [--threads N] [--out FILE]
//! ```
//! The model directory must hold a tokenizer (the mask walks its vocabulary). Three schemas:
//! an enum object (bounded, cached masks), free strings (long string runs) and a `$ref`
//! recursion. Per schema: median seconds of an unmasked step, of a masked step, their ratio,
//! and the median mask computation alone (a copy of the constraint replayed over the same
//! ids). Results are appended to FILE (default `bench/results/constrain-step-<YYYYMMDD>.tsv`)
//! with the command, machine and load at the top.

use k3::config::Config;
use k3::constrain::{self, JsonStyle, Mask, Schema, Vocabulary};
use k3::generate::sample::SamplerSettings;
use k3::generate::session::{SequenceOptions, Session};
use k3::generate::stop::StopRules;
use k3::model::{Dims, Exec};
use k3_kernels::{Isa, Kernels};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const SCHEMAS: [(&str, &str); 3] = [
    (
        "enum",
        r#"{"type":"object","additionalProperties":false,"required":["c","ok","n"],"properties":{"c":{"enum":["red","green","blue"]},"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":999}}}"#,
    ),
    (
        "strings",
        r#"{"type":"object","additionalProperties":false,"required":["a","b"],"properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"string"}}}}"#,
    ),
    (
        "recursion",
        r##"{"$defs":{"n":{"type":"object","additionalProperties":false,"required":["v","k"],"properties":{"v":{"type":"integer"},"k":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"}"##,
    ),
];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("constrain_step: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut dir = None;
    let (mut gen, mut reps, mut threads, mut out) = (64usize, 3usize, 2usize, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let num = |v: Option<&String>| -> Result<usize, String> {
            v.and_then(|v| v.parse().ok())
                .ok_or(format!("{a}: expected a whole number"))
        };
        match a.as_str() {
            "--gen" => gen = num(it.next())?,
            "--reps" => reps = num(it.next())?,
            "--threads" => threads = num(it.next())?,
            "--out" => out = it.next().cloned(),
            d if dir.is_none() => dir = Some(PathBuf::from(d)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let dir = dir.ok_or("give a model directory")?;
    let e = |e: k3::Error| e.message;
    let cfg = Config::from_file(&dir.join("config.json")).map_err(e)?;
    let d = Dims::from_config(&cfg);
    let tok = k3::tokenizer::Tokenizer::load(&dir).map_err(e)?;
    let t = Instant::now();
    let vocab = Arc::new(Vocabulary::new(&tok));
    let vocab_s = t.elapsed().as_secs_f64();
    let index = k3::checkpoint::TensorIndex::open(&dir).map_err(e)?;
    let b = k3::bind::bind_resident(&index, &cfg, d.nl, d.kt).map_err(e)?;
    let isa = Isa::from_env().map_err(|e| e.message)?;
    let ex = Exec::new(Kernels::new(isa, threads).map_err(|e| e.message)?);
    let mut sess = Session::new(b.model, b.trunk, b.experts, ex, 64).map_err(e)?;
    let prompt = tok.encode("JSON:", false);
    let end = tok.end_of_turn_ids();
    let opts = || SequenceOptions {
        settings: SamplerSettings::greedy(),
        rules: StopRules::new(
            end.clone(),
            vec![],
            vec![],
            gen as u64,
            (prompt.len() + gen) as u64,
            d.v,
        )
        .expect("rules"),
        all_rows: false,
    };
    let mut rows = String::new();
    for (name, text) in SCHEMAS {
        let schema = Arc::new(
            Schema::compile(
                &k3::json::parse(text.as_bytes()).map_err(|e| e.expected)?,
                JsonStyle::Compact,
            )
            .map_err(|e| e.to_string())?,
        );
        let (mut plain_s, mut masked_s, mut walk_s) = (Vec::new(), Vec::new(), Vec::new());
        let mut steps = 0;
        for _ in 0..reps {
            // masked
            let c = constrain::plain(schema.clone(), vocab.clone(), &end);
            let mut s = sess
                .sequence(&prompt, prompt.len() + gen, opts())
                .map_err(e)?;
            s.set_constraints(vec![c]);
            sess.prefill(&mut s, None, &mut |_| Ok(())).map_err(e)?;
            while s.active() {
                let t = Instant::now();
                sess.step(&mut [&mut s], &mut |_| Ok(())).map_err(e)?;
                masked_s.push(t.elapsed().as_secs_f64());
            }
            let ids = s.generated().to_vec();
            steps = ids.len();
            // the mask walk alone over the same ids, on a fresh constraint (no cache)
            let mut c = constrain::plain(schema.clone(), vocab.clone(), &end);
            let mut m = Mask::new(d.v);
            for (k, &id) in ids.iter().enumerate() {
                let t = Instant::now();
                c.mask(Some(gen - k), &mut m);
                walk_s.push(t.elapsed().as_secs_f64());
                c.accept(id).map_err(|r| r.to_string())?;
            }
            // unmasked, the same number of steps
            let mut s = sess
                .sequence(&prompt, prompt.len() + gen, opts())
                .map_err(e)?;
            sess.prefill(&mut s, None, &mut |_| Ok(())).map_err(e)?;
            for _ in 0..steps {
                if !s.active() {
                    break;
                }
                let t = Instant::now();
                sess.step(&mut [&mut s], &mut |_| Ok(())).map_err(e)?;
                plain_s.push(t.elapsed().as_secs_f64());
            }
        }
        let (p, m, w) = (
            median(&mut plain_s),
            median(&mut masked_s),
            median(&mut walk_s),
        );
        let _ = writeln!(
            rows,
            "{name}\t{steps}\t{p:.6}\t{m:.6}\t{:.3}\t{w:.6}\t{:.3}",
            m / p,
            w / p
        );
        eprintln!("{name}: {steps} steps, unmasked {p:.6} s, masked {m:.6} s ({:.3}x), mask walk alone {w:.6} s", m / p);
    }
    let mut head = format!(
        "# command: constrain_step {}\n# vocabulary build: {vocab_s:.3} s (once per tokenizer)\n# load: {}\n",
        args.join(" "),
        k3_bench::machine::loadavg()
    );
    for (k, v) in k3_bench::machine::describe() {
        let _ = writeln!(head, "# {k}: {v}");
    }
    head.push_str("schema\tsteps\tunmasked_step_s\tmasked_step_s\tmasked_over_unmasked\tmask_walk_s\twalk_over_unmasked\n");
    let path = out.unwrap_or_else(|| {
        format!(
            "bench/results/constrain-step-{}.tsv",
            k3_bench::machine::utc_now()[..10].replace('-', "")
        )
    });
    std::fs::write(&path, head + &rows).map_err(|e| format!("{path}: {e}"))?;
    eprintln!("written {path}");
    Ok(())
}
