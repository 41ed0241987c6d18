//! Throughput of the BF16 block codec (`k3_kernels::codec`): N MiB of seeded BF16 weights in
//! 1 MiB blocks (524,288 values), coded block by block.
//!
//! ```text
//! cargo run --release -p k3-bench --bin codec -- [--mib N] [--threads T] [--reps R]
//!     [--dist gauss|uniform] [--sigma S] [--block-kib K]
//! ```
//! Prints the compression ratio (coded / raw bytes, stored blocks counted raw), the Shannon
//! entropy of the exponents, encode MB/s of source bytes on one thread, decode GB/s of output
//! bytes on one thread and on T threads (`std::thread::scope`, the blocks split into T
//! contiguous runs, one `Decoder` each), and the load before and after.
//!
//! Per-core figures sum each block's best time over R passes (each block timed alone), so a
//! busy machine's preemptions drop out; the whole-pass wall-clock figures (best of R) are
//! printed beside them. `gauss` draws N(0, σ²) by SplitMix64 + Box–Muller; `uniform` is
//! U(−σ√3, σ√3), the synthetic checkpoint's kind of weights. Every decoded block is compared
//! with its source once.

use k3_bench::machine;
use k3_kernels::codec::{self, Decoder};
use std::time::Instant;

struct Opts {
    mib: usize,
    threads: usize,
    reps: usize,
    dist: String,
    sigma: f64,
    block_kib: usize,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        mib: 64,
        threads: 2,
        reps: 10,
        dist: "gauss".into(),
        sigma: 0.02,
        block_kib: 1024,
    };
    let mut it = std::env::args().skip(1);
    let num = |flag: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or(format!("{flag}: missing value"))?;
        match v.parse::<usize>() {
            Ok(x) if x > 0 => Ok(x),
            _ => Err(format!("{flag} {v}: expected a positive whole number")),
        }
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--mib" => o.mib = num("--mib", it.next())?,
            "--threads" => o.threads = num("--threads", it.next())?,
            "--reps" => o.reps = num("--reps", it.next())?,
            "--block-kib" => o.block_kib = num("--block-kib", it.next())?,
            "--sigma" => {
                let v = it.next().ok_or("--sigma: missing value")?;
                o.sigma = match v.parse::<f64>() {
                    Ok(s) if s > 0.0 && s.is_finite() => s,
                    _ => return Err(format!("--sigma {v}: expected a positive number")),
                };
            }
            "--dist" => {
                let v = it.next().ok_or("--dist: missing value")?;
                if v != "gauss" && v != "uniform" {
                    return Err(format!("--dist {v}: expected gauss or uniform"));
                }
                o.dist = v;
            }
            "--help" | "-h" => {
                return Err("usage: codec [--mib N] [--threads T] [--reps R] [--dist gauss|uniform] [--sigma S] [--block-kib K]".into())
            }
            s => return Err(format!("unknown argument {s}")),
        }
    }
    Ok(o)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// f32 → BF16 bits, round to nearest even (finite inputs).
fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// `bytes` of seeded BF16 weights (little-endian).
fn weights(bytes: usize, dist: &str, sigma: f64, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut unit = || ((splitmix64(&mut s) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        let (a, b) = if dist == "gauss" {
            let (u1, u2) = (unit(), unit());
            let r = (-2.0 * u1.ln()).sqrt() * sigma;
            let t = std::f64::consts::TAU * u2;
            (r * t.cos(), r * t.sin())
        } else {
            let w = sigma * 3f64.sqrt();
            (w * (2.0 * unit() - 1.0), w * (2.0 * unit() - 1.0))
        };
        out.extend_from_slice(&bf16(a as f32).to_le_bytes());
        out.extend_from_slice(&bf16(b as f32).to_le_bytes());
    }
    out.truncate(bytes);
    out
}

/// One coded or stored block.
struct Block {
    raw: std::ops::Range<usize>,
    coded: Option<Vec<u8>>,
}

/// Decodes the coded blocks of `blocks` (stored ones would be a copy, not the codec's work)
/// into `out`, which starts at source byte `base`; keeps each block's best time in `best`.
/// Returns the output bytes decoded.
fn decode_run(
    dec: &mut Decoder,
    blocks: &[Block],
    out: &mut [u8],
    base: usize,
    best: &mut [f64],
) -> usize {
    let mut bytes = 0;
    for (b, best) in blocks.iter().zip(best.iter_mut()) {
        if let Some(c) = &b.coded {
            let dst = &mut out[b.raw.start - base..b.raw.end - base];
            let t = Instant::now();
            dec.decode_bf16(c, dst).expect("decode");
            *best = best.min(t.elapsed().as_secs_f64());
            bytes += dst.len();
        }
    }
    bytes
}

fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "unavailable".into())
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "# cargo run --release -p k3-bench --bin codec -- {}",
        cmd.join(" ")
    );
    for (k, v) in machine::describe() {
        println!("# {k}: {v}");
    }
    println!("# before: {}", uptime());
    let bytes = o.mib << 20;
    let block = (o.block_kib << 10).min(bytes);
    let src = weights(bytes, &o.dist, o.sigma, 0x6b33_636f_6465_6331);
    println!(
        "data: {} MiB of {} BF16 (sigma {}), {} blocks of {} KiB ({} values); {} streams, header {} bytes",
        o.mib,
        o.dist,
        o.sigma,
        bytes.div_ceil(block),
        block >> 10,
        block / 2,
        codec::STREAMS,
        codec::HEADER_BYTES
    );

    // Encode: each block's best of up to 3.
    let enc_reps = o.reps.min(3);
    let mut blocks: Vec<Block> = Vec::new();
    let mut enc_best = vec![f64::INFINITY; bytes.div_ceil(block)];
    let mut enc_pass = f64::INFINITY;
    for _ in 0..enc_reps {
        let pass = Instant::now();
        blocks.clear();
        for (i, c) in src.chunks(block).enumerate() {
            let mut out = Vec::new();
            let t = Instant::now();
            let coded = codec::encode_bf16(c, &mut out).then_some(out);
            enc_best[i] = enc_best[i].min(t.elapsed().as_secs_f64());
            blocks.push(Block {
                raw: i * block..i * block + c.len(),
                coded,
            });
        }
        enc_pass = enc_pass.min(pass.elapsed().as_secs_f64());
    }
    let coded_bytes: usize = blocks
        .iter()
        .map(|b| b.coded.as_ref().map_or(b.raw.len(), |c| c.len()))
        .sum();
    let stored = blocks.iter().filter(|b| b.coded.is_none()).count();
    let entropy = codec::exponent_entropy_bits(&src);
    let values = (bytes / 2) as f64;
    println!(
        "ratio coded/raw: {:.4} ({coded_bytes} / {bytes} bytes; {stored} of {} blocks stored)",
        coded_bytes as f64 / bytes as f64,
        blocks.len()
    );
    println!(
        "exponent entropy: {entropy:.3} bits/value (ratio {:.4} if coded at the entropy, no header); \
         coded exponent + header + padding: {:.3} bits/value",
        (8.0 + entropy) / 16.0,
        (coded_bytes as f64 * 8.0 - 8.0 * values) / values
    );
    let lens_of = |b: &Block| {
        b.coded
            .as_ref()
            .map(|c| c[codec::HEADER_BYTES - 128..codec::HEADER_BYTES].to_vec())
    };
    let changes = blocks
        .windows(2)
        .filter(|w| lens_of(&w[0]) != lens_of(&w[1]))
        .count();
    println!(
        "code lengths change between consecutive blocks {changes} times of {} (each change rebuilds the decoder's table)",
        blocks.len().saturating_sub(1)
    );
    println!(
        "encode 1 thread: {:.0} MB/s of source (each block's best of {enc_reps}); whole pass {:.0} MB/s",
        bytes as f64 / enc_best.iter().sum::<f64>() / 1e6,
        bytes as f64 / enc_pass / 1e6
    );

    // Check once.
    let mut out = vec![0u8; bytes];
    let mut dec = Decoder::new();
    let mut scratch = vec![f64::INFINITY; blocks.len()];
    decode_run(&mut dec, &blocks, &mut out, 0, &mut scratch);
    for b in &blocks {
        if b.coded.is_some() && out[b.raw.clone()] != src[b.raw.clone()] {
            eprintln!("block at byte {} does not round-trip", b.raw.start);
            std::process::exit(1);
        }
    }

    // One thread.
    let mut best = vec![f64::INFINITY; blocks.len()];
    let mut pass_best = f64::INFINITY;
    let mut dec_bytes = 0;
    for _ in 0..o.reps {
        let t = Instant::now();
        dec_bytes = decode_run(&mut dec, &blocks, &mut out, 0, &mut best);
        pass_best = pass_best.min(t.elapsed().as_secs_f64());
    }
    let per_core = |best: &[f64]| best.iter().filter(|t| t.is_finite()).sum::<f64>();
    println!(
        "decode 1 thread: {:.3} GB/s of output per core (each block's best of {}); whole pass {:.3} GB/s ({} MB per pass)",
        dec_bytes as f64 / per_core(&best) / 1e9,
        o.reps,
        dec_bytes as f64 / pass_best / 1e9,
        dec_bytes / 1_000_000
    );

    // T threads: contiguous runs of blocks, one Decoder each (the first pass warms them).
    let t_n = o.threads.min(blocks.len()).max(1);
    let per = blocks.len().div_ceil(t_n);
    let mut decoders: Vec<Decoder> = (0..t_n).map(|_| Decoder::new()).collect();
    let mut bests: Vec<Vec<f64>> = blocks
        .chunks(per)
        .map(|c| vec![f64::INFINITY; c.len()])
        .collect();
    let mut wall_best = f64::INFINITY;
    for _ in 0..o.reps + 1 {
        let t = Instant::now();
        std::thread::scope(|s| {
            let mut rest: &mut [u8] = &mut out;
            let mut base = 0;
            for ((bl, dec), best) in blocks
                .chunks(per)
                .zip(decoders.iter_mut())
                .zip(bests.iter_mut())
            {
                let len: usize = bl.iter().map(|b| b.raw.len()).sum();
                let (mine, tail) = rest.split_at_mut(len);
                rest = tail;
                let b0 = base;
                base += len;
                s.spawn(move || decode_run(dec, bl, mine, b0, best));
            }
        });
        wall_best = wall_best.min(t.elapsed().as_secs_f64());
    }
    let slowest = bests.iter().map(|b| per_core(b)).fold(0.0, f64::max);
    println!(
        "decode {t_n} threads: {:.3} GB/s of output in all (slowest thread's blocks at their best, \
         {:.3} GB/s per thread); whole pass {:.3} GB/s (best of {})",
        dec_bytes as f64 / slowest / 1e9,
        dec_bytes as f64 / slowest / 1e9 / t_n as f64,
        dec_bytes as f64 / wall_best / 1e9,
        o.reps + 1
    );
    println!("# after: {}", uptime());
}
