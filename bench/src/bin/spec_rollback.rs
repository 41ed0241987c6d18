//! The two rollbacks of issue 15 item 3, measured: speculation's verify sweep must be able to
//! return a sequence's KDA states and conv histories to the last kept row.
//!
//! * **snapshot and recompute** (what k3 does, `generate::spec::KdaSave`): one copy of the
//!   KDA layers before every drafted sweep, one copy back after a rejection, and the kept
//!   rows run again as rows of the next forward (their cost is that of extra rows of a
//!   forward: `bench/results/spec-verify-*.tsv` measures it);
//! * **keep per row**: the forward writes the state after each of its K + 1 rows; a rejection
//!   picks one. Every sweep then writes K + 1 states (at least K + 1 copies of the state's
//!   bytes) and holds K + 1 of them per sequence.
//!
//! Both are copies of the same bytes, so one timed copy of the state prices both. This
//! program times `KdaSave::save` and `KdaSave::restore` on a real `DecodeState` of a config
//! (default: the released one) and prints each method's bytes held and seconds per sweep for
//! K = 1, 2, 4, 8, with the one-id step of a budget given by `--step-seconds` for the ratio.
//!
//! `cargo run --release -p k3-bench --bin spec_rollback -- [--config PATH] [--reps N]
//!  [--step-seconds S]...`

use k3::config::Config;
use k3::generate::spec::KdaSave;
use k3::model::state::DecodeState;
use k3::model::Dims;
use k3_bench::machine;
use std::path::PathBuf;
use std::time::Instant;

const DEFAULT_CONFIG: &str = "tests/fixtures/configs/k3-released-reserialised.json";

struct Opts {
    config: PathBuf,
    reps: usize,
    /// (label, seconds of a one-id step at that budget)
    steps: Vec<(String, f64)>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        config: PathBuf::from(DEFAULT_CONFIG),
        reps: 10,
        steps: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a}: needs a value"));
        match a.as_str() {
            "--config" => o.config = PathBuf::from(val()?),
            "--reps" => {
                let v = val()?;
                o.reps = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--reps {v}: expected a positive integer"))?
            }
            "--step-seconds" => {
                let v = val()?;
                let (label, s) = v
                    .split_once('=')
                    .ok_or(format!("--step-seconds {v}: expected LABEL=SECONDS"))?;
                let s: f64 = s
                    .parse()
                    .ok()
                    .filter(|x: &f64| *x > 0.0)
                    .ok_or(format!("--step-seconds {v}: expected a positive number"))?;
                o.steps.push((label.to_string(), s));
            }
            "--help" | "-h" => {
                println!(
                    "usage: spec_rollback [--config PATH] [--reps N] [--step-seconds LABEL=S]..."
                );
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument `{a}`")),
        }
    }
    Ok(o)
}

/// Best seconds of `reps` calls of `f`.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("spec_rollback: {e}");
            std::process::exit(2);
        }
    };
    let cfg = match Config::from_file(&o.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spec_rollback: {}: {}", o.config.display(), e.message);
            std::process::exit(2);
        }
    };
    let d = Dims::from_config(&cfg);
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "# command: cargo run --release -p k3-bench --bin spec_rollback -- {}",
        cmd.join(" ")
    );
    for (k, v) in machine::describe() {
        println!("# {k}: {v}");
    }
    println!("# load average before: {}", machine::loadavg());
    // MLA positions do not matter here (the MLA cache is cut, never copied): keep it small
    let mut state = DecodeState::new(&d, d.nl, 16);
    let bytes = DecodeState::kda_bytes(&d, d.nl);
    let mut save = KdaSave::default();
    save.save(&state); // allocates
    let save_s = best(o.reps, || save.save(&state));
    let restore_s = best(o.reps, || {
        save.restore(&mut state);
    });
    println!("# load average after: {}", machine::loadavg());
    println!(
        "# config {}: {} layers, KDA state + conv history {} bytes per sequence; one copy: save {:.4} s ({:.2} GB/s), restore {:.4} s ({:.2} GB/s), best of {}",
        o.config.display(),
        d.nl,
        bytes,
        save_s,
        bytes as f64 / save_s / 1e9,
        restore_s,
        bytes as f64 / restore_s / 1e9,
        o.reps
    );
    println!("method\tk\tstate_bytes_held\tcopy_seconds_per_sweep\tcopy_seconds_after_rejection\tstep_label\tone_id_step_seconds\tcopies_over_step");
    for k in [1usize, 2, 4, 8] {
        // snapshot: the live state plus one copy; a save per sweep, a restore per rejection
        // (the kept rows' recompute is extra rows of the next forward: spec-verify measures it)
        let snap = (2 * bytes, save_s, restore_s);
        // per row: the live state plus K + 1 row states written by every sweep
        let row = ((k as u64 + 2) * bytes, (k + 1) as f64 * save_s, 0.0);
        for (name, (held, per_sweep, after)) in [("snapshot", snap), ("per_row", row)] {
            if o.steps.is_empty() {
                println!("{name}\t{k}\t{held}\t{per_sweep:.4}\t{after:.4}\t-\t-\t-");
            }
            for (label, step) in &o.steps {
                println!(
                    "{name}\t{k}\t{held}\t{per_sweep:.4}\t{after:.4}\t{label}\t{step}\t{:.4}",
                    (per_sweep + after) / step
                );
            }
        }
    }
}
