//! Synthetic checkpoint generation speed against the device's own sequential write speed,
//! measured back to back in the same run: (a) raw `O_DIRECT` writes of random bytes in 64 MiB
//! aligned writes with `fdatasync` (what `dd oflag=direct` does), (b) the `k3-synth` crate
//! writing the checkpoint of `cargo xtask synth` (same opener, same write size). Reports both
//! in MB/s and their ratio; writes a TSV under bench/results/ with the machine description and
//! the exact command. Outputs are deleted afterwards.
//!
//! `cargo run --release -p k3-bench --bin synth_write -- <scratch_dir> [options]`

use k3_synth as synth;

use k3_bench::{idle, machine};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: cargo run --release -p k3-bench --bin synth_write -- <scratch_dir> [options]

  --layers N        layers of the generated checkpoint (default 4)
  --experts E       experts per MoE layer (default 64)
  --threads T       generator threads (default: all cores)
  --rounds N        alternate raw/generator N times (default 2)
  --wait-idle SECS  wait up to SECS for an idle machine (default 60)
  --out PATH        TSV path (default bench/results/synth-write-<utc>.tsv)
";

/// Opens a shard for writing with `O_DIRECT` (Linux), so tens of GB bypass the page cache
/// and the generator writes at device speed. Some file systems refuse `O_DIRECT` at open
/// (tmpfs) and some only at the first write, so one aligned 4096-byte write probes it; on
/// any refusal the file is opened buffered instead.
fn open_direct(path: &Path) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        if let Ok(mut f) = direct {
            let mut mem = vec![0u8; 2 * 4096];
            let off = (4096 - mem.as_ptr() as usize % 4096) % 4096;
            let probe = f
                .write_all(&mem[off..off + 4096])
                .and_then(|()| f.seek(SeekFrom::Start(0)).map(drop))
                .and_then(|()| f.set_len(0));
            mem.clear();
            if probe.is_ok() {
                return Ok(f);
            }
        }
    }
    File::create(path)
}

/// Writes `total` bytes of pseudo-random data with 64 MiB aligned writes and fdatasync;
/// returns seconds. The data is produced before timing (one buffer, rewritten each time).
fn raw_write(path: &Path, total: u64) -> io::Result<f64> {
    let stage = synth::STAGE_BYTES;
    let mut mem = vec![0u8; stage + 4096];
    let off = (4096 - mem.as_ptr() as usize % 4096) % 4096;
    let buf = &mut mem[off..off + stage];
    let mut rng = synth::Xoshiro256::new(7);
    for c in buf.chunks_exact_mut(8) {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let mut f = open_direct(path)?;
    let t0 = Instant::now();
    let mut done = 0u64;
    while done < total {
        f.write_all(buf)?;
        done += stage as u64;
    }
    f.sync_data()?;
    let s = t0.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(path)?;
    Ok(s)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => {}
        Err((code, e)) => {
            eprintln!("synth_write: error: {e}");
            std::process::exit(code);
        }
    }
}

fn run(args: &[String]) -> Result<(), (i32, String)> {
    let mut dir: Option<PathBuf> = None;
    let (mut layers, mut experts, mut rounds, mut wait) = (4usize, 64usize, 2usize, 60u64);
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out: Option<PathBuf> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        i += 1;
        let mut val = || {
            i += 1;
            args.get(i - 1)
                .cloned()
                .ok_or((2, format!("{a}: expected a value")))
        };
        let num = |v: String| -> Result<u64, (i32, String)> {
            v.parse()
                .map_err(|_| (2, format!("{a}: expected an integer, found `{v}`")))
        };
        match a {
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(());
            }
            "--layers" => layers = num(val()?)? as usize,
            "--experts" => experts = num(val()?)? as usize,
            "--threads" => threads = num(val()?)? as usize,
            "--rounds" => rounds = num(val()?)? as usize,
            "--wait-idle" => wait = num(val()?)?,
            "--out" => out = Some(PathBuf::from(val()?)),
            s if s.starts_with("--") => return Err((2, format!("{s}: unknown flag"))),
            s => dir = Some(PathBuf::from(s)),
        }
    }
    let dir = dir.ok_or((2, "missing <scratch_dir> (see --help)".to_string()))?;
    std::fs::create_dir_all(&dir).map_err(|e| (4, format!("{}: {e}", dir.display())))?;
    let spec = synth::SynthSpec::k3(layers, experts);
    let plan = spec.plan().map_err(|e| (2, e))?;
    let total = plan.shard_bytes();
    let dev = idle::device_of(&dir);
    let limits = idle::IdleLimits::default();
    let (before, was_idle) = idle::wait_for_idle(
        Duration::from_secs(2),
        Duration::from_secs(wait),
        dev.as_deref(),
        limits,
        |r| {
            eprintln!(
                "synth_write: waiting for an idle machine: {}",
                r.describe(limits)
            )
        },
    )
    .map_err(|e| (4, e.to_string()))?;
    if !was_idle {
        eprintln!("synth_write: warning: machine busy; measuring anyway and recording it");
    }
    let mut rows = Vec::new();
    for round in 1..=rounds {
        let raw_path = dir.join("synth-write-raw.bin");
        let raw =
            raw_write(&raw_path, total).map_err(|e| (4, format!("{}: {e}", raw_path.display())))?;
        let ckpt = dir.join("synth-write-checkpoint");
        let opts = synth::Options {
            threads,
            force: true,
            sync: true,
            open: Some(&open_direct),
            ..synth::Options::default()
        };
        let t0 = Instant::now();
        synth::generate(&spec, &ckpt, opts).map_err(|e| (4, e.to_string()))?;
        let gen = t0.elapsed().as_secs_f64();
        std::fs::remove_dir_all(&ckpt).map_err(|e| (4, format!("{}: {e}", ckpt.display())))?;
        let (rm, gm) = (total as f64 / 1e6 / raw, total as f64 / 1e6 / gen);
        eprintln!(
            "synth_write: round {round}: raw O_DIRECT {rm:.0} MB/s, generator {gm:.0} MB/s, ratio {:.3}",
            gm / rm
        );
        rows.push((round, raw, gen));
    }
    let after =
        idle::sample(Duration::from_secs(2), dev.as_deref()).map_err(|e| (4, e.to_string()))?;

    let mut tsv = String::new();
    let _ = writeln!(tsv, "# k3 synthetic checkpoint write speed vs raw O_DIRECT writes (bench/src/bin/synth_write.rs)");
    let _ = writeln!(
        tsv,
        "# command\tcargo run --release -p k3-bench --bin synth_write -- {}",
        args.join(" ")
    );
    for (k, v) in machine::describe()
        .into_iter()
        .chain(machine::describe_storage(&dir))
    {
        let _ = writeln!(tsv, "# {k}\t{v}");
    }
    let _ = writeln!(
        tsv,
        "# checkpoint\tSynthSpec::k3({layers}, {experts}) seed 0, {} shards, {total} bytes; {threads} generator threads; generator version {}",
        plan.shards.len(),
        synth::GENERATOR_VERSION
    );
    let _ = writeln!(tsv, "# idle_before\t{}", before.describe(limits));
    let _ = writeln!(tsv, "# idle_after\t{}", after.describe(limits));
    let _ = writeln!(
        tsv,
        "round\tbytes\traw_seconds\traw_mb_per_s\tgen_seconds\tgen_mb_per_s\tgen_over_raw"
    );
    for (r, raw, gen) in &rows {
        let (rm, gm) = (total as f64 / 1e6 / raw, total as f64 / 1e6 / gen);
        let _ = writeln!(
            tsv,
            "{r}\t{total}\t{raw:.3}\t{rm:.1}\t{gen:.3}\t{gm:.1}\t{:.3}",
            gm / rm
        );
    }
    let out = out.unwrap_or_else(|| {
        let stamp = machine::utc_now().replace([':', '-'], "");
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("results")
            .join(format!("synth-write-{stamp}.tsv"))
    });
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p).map_err(|e| (4, format!("{}: {e}", p.display())))?;
    }
    std::fs::write(&out, &tsv).map_err(|e| (4, format!("{}: {e}", out.display())))?;
    print!("{tsv}");
    eprintln!("synth_write: wrote {}", out.display());
    Ok(())
}
