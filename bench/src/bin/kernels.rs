//! Kernel benchmarks: BF16 matrix-vector products at 7168 x 12288 and 12288 x 7168 (both
//! larger than the last-level cache), MXFP4 expert products 3584 -> 3072 and 3072 -> 3584
//! cycling through 16 experts (so the set exceeds the cache, like decode), one MoE layer's
//! 16 routed experts as the model runs them (gate and up of all experts in one job, down in
//! another: `matmul_mxfp4_many`), BF16 prefill products over 16 and 64 positions and an
//! MXFP4 prefill product over 16 positions, per ISA path and thread count. Each figure is weight bytes per
//! second and its ratio to the memory bandwidth measured in the same run (a streaming read of
//! a buffer 16x the last-level cache).
//!
//! ```text
//! cargo run --release -p k3-bench --bin kernels [-- --reps N] [--quick] [--prefill] [--out FILE]
//! ```
//! Results go to `bench/results/kernels-<YYYYMMDD>.tsv` (or FILE) with the machine description
//! and the command at the top. Every product also gets its multiply-adds per second as a ratio
//! to the compute roof of its path and thread count (`k3_bench::roof`), measured in the same run.
//!
//! `--prefill` runs the batched products only (issue 23): BF16 (7168 columns) and MXFP4 experts
//! (3584 → 3072) at T = 1, 16, 64 and 256 positions on every available path at 1 and 2
//! threads, against the roof (and T = 1 against memory bandwidth too), into
//! `bench/results/prefill-kernels-<YYYYMMDD>.tsv`.

use k3_bench::membw::{self, MemBw};
use k3_bench::roof;
use k3_kernels::{isa, Isa, Kernels, Mxfp4};
use std::fmt::Write as _;
use std::time::Instant;

struct Opts {
    reps: usize,
    quick: bool,
    prefill: bool,
    out: Option<String>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        reps: 7,
        quick: false,
        prefill: false,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--reps" => {
                let v = it.next().ok_or("--reps: missing value")?;
                o.reps = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--reps {v}: expected a positive integer"))?;
            }
            "--quick" => o.quick = true,
            "--prefill" => o.prefill = true,
            "--out" => o.out = Some(it.next().ok_or("--out: missing value")?),
            "--help" | "-h" => {
                return Err("usage: kernels [--reps N] [--quick] [--prefill] [--out FILE]".into());
            }
            _ => return Err(format!("{a}: unknown flag (see --help)")),
        }
    }
    Ok(o)
}

/// SplitMix64 for the synthetic weights.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn bf16_matrix(rows: usize, cols: usize, seed: u64) -> Vec<u16> {
    let mut r = Rng(seed);
    (0..rows * cols)
        .map(|_| ((r.unit() * 0.05).to_bits() >> 16) as u16)
        .collect()
}

fn vector(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..n).map(|_| r.unit()).collect()
}

/// Times `f` (one untimed warm-up) and returns (best, median) seconds.
fn time(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    (t[0], t[reps / 2])
}

struct Row {
    op: String,
    isa: Isa,
    threads: usize,
    rows: usize,
    cols: usize,
    t: usize,
    bytes: usize,
    /// Multiply-adds per repetition.
    macs: usize,
    best: f64,
    median: f64,
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn main() {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kernels: {e}");
            std::process::exit(2);
        }
    };
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (yr, mon, day) = civil(secs.div_euclid(86400));
    let out_path = opts.out.clone().unwrap_or_else(|| {
        format!(
            "{}/results/kernels-{yr:04}{mon:02}{day:02}.tsv",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    if opts.prefill {
        prefill(&opts, (yr, mon, day));
        return;
    }
    let load_before = k3_bench::machine::loadavg();
    let llc = membw::llc_bytes().unwrap_or(32 << 20);
    let paths: Vec<Isa> = if opts.quick {
        vec![Isa::best()]
    } else {
        isa::available().to_vec()
    };
    let thread_counts: Vec<usize> = if opts.quick {
        vec![1, 2]
    } else {
        vec![1, 2, 3]
    };

    // 1. Memory bandwidth (the limit), at every thread count used below.
    eprintln!(
        "memory bandwidth: streaming read of {} MB",
        (16 * llc) >> 20
    );
    let buf = membw::buffer(16 * llc);
    let mut bw: Vec<MemBw> = Vec::new();
    for &t in &thread_counts {
        let m = membw::measure(&buf, t, opts.reps);
        eprintln!(
            "  {t} threads: best {:.2} GB/s, median {:.2} GB/s",
            m.best_bytes_per_s / 1e9,
            m.median_bytes_per_s / 1e9
        );
        bw.push(m);
    }
    drop(buf);
    let bw_max = bw.iter().map(|m| m.best_bytes_per_s).fold(0.0, f64::max);

    // 1b. The compute roof of every path and thread count (k3_bench::roof).
    let mut roofs = Vec::new();
    for &isa in &paths {
        for &t in &thread_counts {
            let r = roof::measure(isa, t, opts.reps.min(5));
            eprintln!(
                "  roof {} t{t}: {:.2} G multiply-adds/s",
                isa.name(),
                r.best_macs_per_s / 1e9
            );
            roofs.push(r);
        }
    }

    let mut rows: Vec<Row> = Vec::new();
    let mut report = |r: Row| {
        let gbps = r.bytes as f64 / r.best / 1e9;
        let same = bw.iter().find(|m| m.threads == r.threads).unwrap();
        eprintln!(
            "  {:<22} {:<6} t{}  best {:>8.3} ms  {:>6.2} GB/s  {:>5.1}% of membw(t{}) {:>5.1}% of max",
            r.op,
            r.isa.name(),
            r.threads,
            r.best * 1e3,
            gbps,
            100.0 * gbps * 1e9 / same.best_bytes_per_s,
            r.threads,
            100.0 * gbps * 1e9 / bw_max
        );
        rows.push(r);
    };

    // 2. BF16 matrix-vector products larger than the LLC.
    for &(op, m, n) in &[
        ("bf16_matvec", 7168usize, 12288usize),
        ("bf16_matvec", 12288, 7168),
    ] {
        eprintln!("{op} {m} x {n} ({} MB)", (m * n * 2) >> 20);
        let w = bf16_matrix(m, n, 1);
        let x = vector(n, 2);
        let mut y = vec![0.0f32; m];
        for &isa in &paths {
            for &t in &thread_counts {
                let k = Kernels::new(isa, t).expect("available path");
                let (best, median) = time(opts.reps, || k.matmul_bf16(&w, m, n, &x, &mut y));
                report(Row {
                    op: op.into(),
                    isa,
                    threads: t,
                    rows: m,
                    cols: n,
                    t: 1,
                    bytes: m * n * 2,
                    macs: m * n,
                    best,
                    median,
                });
            }
        }
    }

    // 3. MXFP4 expert products, cycling through 16 experts per repetition (94 MB > LLC).
    const EXPERTS: usize = 16;
    for &(op, m, n) in &[
        ("mxfp4_matvec_up", 3072usize, 3584usize),
        ("mxfp4_matvec_down", 3584, 3072),
    ] {
        eprintln!("{op} {n} -> {m}, {EXPERTS} experts");
        let mut r = Rng(3);
        let packed: Vec<Vec<u8>> = (0..EXPERTS)
            .map(|_| (0..m * n / 2).map(|_| r.next() as u8).collect())
            .collect();
        let scales: Vec<Vec<u8>> = (0..EXPERTS)
            .map(|_| {
                (0..m * n / 32)
                    .map(|_| 115 + (r.next() % 13) as u8)
                    .collect()
            })
            .collect();
        let mats: Vec<Mxfp4> = (0..EXPERTS)
            .map(|e| Mxfp4::new(&packed[e], &scales[e], m, n).expect("valid MXFP4"))
            .collect();
        let x = vector(n, 4);
        let mut y = vec![0.0f32; m];
        for &isa in &paths {
            for &t in &thread_counts {
                let k = Kernels::new(isa, t).expect("available path");
                let (best, median) = time(opts.reps, || {
                    for w in &mats {
                        k.matmul_mxfp4(w, &x, &mut y);
                    }
                });
                report(Row {
                    op: op.into(),
                    isa,
                    threads: t,
                    rows: m,
                    cols: n,
                    t: 1,
                    bytes: EXPERTS * (m * n / 2 + m * n / 32),
                    macs: EXPERTS * m * n,
                    best,
                    median,
                });
            }
        }
    }

    // 3b. One MoE layer's routed experts as the model computes them: the gate and up products
    //     of all 16 experts in one job, then the 16 down products in another.
    {
        let (inter, lat) = (3072usize, 3584usize);
        eprintln!("mxfp4_moe_layer: {EXPERTS} experts x (gate, up {lat} -> {inter}; down {inter} -> {lat})");
        let mut r = Rng(7);
        let mut gen = |rows: usize, cols: usize| -> (Vec<u8>, Vec<u8>) {
            (
                (0..rows * cols / 2).map(|_| r.next() as u8).collect(),
                (0..rows * cols / 32)
                    .map(|_| 115 + (r.next() % 13) as u8)
                    .collect(),
            )
        };
        let up: Vec<(Vec<u8>, Vec<u8>)> = (0..2 * EXPERTS).map(|_| gen(inter, lat)).collect();
        let down: Vec<(Vec<u8>, Vec<u8>)> = (0..EXPERTS).map(|_| gen(lat, inter)).collect();
        let w13: Vec<Mxfp4> = up
            .iter()
            .map(|(p, s)| Mxfp4::new(p, s, inter, lat).expect("valid MXFP4"))
            .collect();
        let w2: Vec<Mxfp4> = down
            .iter()
            .map(|(p, s)| Mxfp4::new(p, s, lat, inter).expect("valid MXFP4"))
            .collect();
        let x = vector(lat, 8);
        let h: Vec<Vec<f32>> = (0..EXPERTS).map(|e| vector(inter, 9 + e as u64)).collect();
        let mut a = vec![0.0f32; 2 * EXPERTS * inter];
        let mut y = vec![0.0f32; EXPERTS * lat];
        let bytes = 3 * EXPERTS * (inter * lat / 2 + inter * lat / 32);
        for &isa in &paths {
            for &t in &thread_counts {
                let k = Kernels::new(isa, t).expect("available path");
                let (best, median) = time(opts.reps, || {
                    let xs = vec![&x[..]; 2 * EXPERTS];
                    let mut ys: Vec<&mut [f32]> = a.chunks_mut(inter).collect();
                    k.matmul_mxfp4_many(&w13, &xs, &mut ys);
                    let hs: Vec<&[f32]> = h.iter().map(|v| &v[..]).collect();
                    let mut ys: Vec<&mut [f32]> = y.chunks_mut(lat).collect();
                    k.matmul_mxfp4_many(&w2, &hs, &mut ys);
                });
                report(Row {
                    op: "mxfp4_moe_layer".into(),
                    isa,
                    threads: t,
                    rows: inter,
                    cols: lat,
                    t: 1,
                    bytes,
                    macs: 3 * EXPERTS * inter * lat,
                    best,
                    median,
                });
            }
        }
    }

    // 4. Prefill: one BF16 matrix over 16 and 64 positions (each weight read once per chunk),
    //    and MXFP4 expert matrices over 16 positions (cycling through the experts).
    let (m, n) = (12288usize, 7168usize);
    let w = bf16_matrix(m, n, 5);
    for t_pos in [16usize, 64] {
        eprintln!("bf16_prefill {m} x {n}, T = {t_pos}");
        let x = vector(t_pos * n, 6);
        let mut y = vec![0.0f32; t_pos * m];
        for &isa in &paths {
            for &t in &thread_counts {
                let k = Kernels::new(isa, t).expect("available path");
                let reps = if isa == Isa::Scalar {
                    2
                } else {
                    opts.reps.min(3)
                };
                let (best, median) = time(reps, || k.matmul_bf16(&w, m, n, &x, &mut y));
                report(Row {
                    op: if t_pos == 16 {
                        "bf16_prefill".into()
                    } else {
                        format!("bf16_prefill_t{t_pos}")
                    },
                    isa,
                    threads: t,
                    rows: m,
                    cols: n,
                    t: t_pos,
                    bytes: m * n * 2,
                    macs: m * n * t_pos,
                    best,
                    median,
                });
            }
        }
    }
    {
        let (m, n, t_pos) = (3072usize, 3584usize, 16usize);
        eprintln!("mxfp4_prefill {n} -> {m}, T = {t_pos}, {EXPERTS} experts");
        let mut r = Rng(10);
        let packed: Vec<Vec<u8>> = (0..EXPERTS)
            .map(|_| (0..m * n / 2).map(|_| r.next() as u8).collect())
            .collect();
        let scales: Vec<Vec<u8>> = (0..EXPERTS)
            .map(|_| {
                (0..m * n / 32)
                    .map(|_| 115 + (r.next() % 13) as u8)
                    .collect()
            })
            .collect();
        let mats: Vec<Mxfp4> = (0..EXPERTS)
            .map(|e| Mxfp4::new(&packed[e], &scales[e], m, n).expect("valid MXFP4"))
            .collect();
        let x = vector(t_pos * n, 11);
        let mut y = vec![0.0f32; t_pos * m];
        for &isa in &paths {
            for &t in &thread_counts {
                let k = Kernels::new(isa, t).expect("available path");
                let reps = if isa == Isa::Scalar {
                    1
                } else {
                    opts.reps.min(3)
                };
                let (best, median) = time(reps, || {
                    for w in &mats {
                        k.matmul_mxfp4(w, &x, &mut y);
                    }
                });
                report(Row {
                    op: "mxfp4_prefill".into(),
                    isa,
                    threads: t,
                    rows: m,
                    cols: n,
                    t: t_pos,
                    bytes: EXPERTS * (m * n / 2 + m * n / 32),
                    macs: EXPERTS * m * n * t_pos,
                    best,
                    median,
                });
            }
        }
    }

    // 5. The result file.
    let mut cmd = String::from("cargo run --release -p k3-bench --bin kernels --");
    for a in std::env::args().skip(1) {
        cmd.push(' ');
        cmd.push_str(&a);
    }
    let mut s = String::new();
    writeln!(s, "# k3 kernel benchmark: weight bytes per second vs memory bandwidth measured in the same run").unwrap();
    writeln!(s, "# command: {cmd}").unwrap();
    writeln!(s, "# date_utc: {yr:04}-{mon:02}-{day:02}").unwrap();
    writeln!(
        s,
        "# cpu: {} ({}), {} CPUs, last-level cache {} bytes",
        cpu_model(),
        std::env::consts::ARCH,
        k3_kernels::pool::default_threads(),
        llc
    )
    .unwrap();
    writeln!(
        s,
        "# loadavg before: {load_before}; after: {}",
        k3_bench::machine::loadavg()
    )
    .unwrap();
    writeln!(
        s,
        "# membw: streaming read of {} bytes, best of {} repetitions after a warm-up",
        16 * llc,
        opts.reps
    )
    .unwrap();
    writeln!(s, "# GB = 1e9 bytes; ratio = best GB/s / best membw at the same thread count; ratio_max = / best membw at any thread count").unwrap();
    writeln!(s, "# roof_macs_per_s: f64 multiply + add throughput of the path at the same thread count (k3_bench::roof); roof_ratio = macs_per_s / roof_macs_per_s").unwrap();
    writeln!(s, "kind\top\tisa\tthreads\trows\tcols\tT\tbytes\tbest_s\tmedian_s\tbest_GBps\tmedian_GBps\tmacs_per_s\tmembw_GBps\tratio\tmembw_max_GBps\tratio_max\troof_macs_per_s\troof_ratio").unwrap();
    for m in &bw {
        writeln!(
            s,
            "membw\tstream_read\t-\t{}\t-\t-\t-\t{}\t{:.6}\t{:.6}\t{:.3}\t{:.3}\t-\t{:.3}\t1.000\t{:.3}\t{:.3}\t-\t-",
            m.threads,
            m.bytes,
            m.bytes as f64 / m.best_bytes_per_s,
            m.bytes as f64 / m.median_bytes_per_s,
            m.best_bytes_per_s / 1e9,
            m.median_bytes_per_s / 1e9,
            m.best_bytes_per_s / 1e9,
            bw_max / 1e9,
            m.best_bytes_per_s / bw_max
        )
        .unwrap();
    }
    for r in &roofs {
        writeln!(
            s,
            "roof\tmul_add_f64\t{}\t{}\t-\t-\t-\t-\t-\t-\t-\t-\t{:.4e}\t-\t-\t-\t-\t{:.4e}\t1.000",
            r.isa.name(),
            r.threads,
            r.best_macs_per_s,
            r.best_macs_per_s
        )
        .unwrap();
    }
    for r in &rows {
        let same = bw.iter().find(|m| m.threads == r.threads).unwrap();
        let macs = r.macs as f64;
        let roof = roofs
            .iter()
            .find(|x| x.isa == r.isa && x.threads == r.threads)
            .map_or(f64::NAN, |x| x.best_macs_per_s);
        writeln!(
            s,
            "kernel\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.6}\t{:.6}\t{:.3}\t{:.3}\t{:.4e}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{:.4e}\t{:.3}",
            r.op,
            r.isa.name(),
            r.threads,
            r.rows,
            r.cols,
            r.t,
            r.bytes,
            r.best,
            r.median,
            r.bytes as f64 / r.best / 1e9,
            r.bytes as f64 / r.median / 1e9,
            macs / r.best,
            same.best_bytes_per_s / 1e9,
            r.bytes as f64 / r.best / same.best_bytes_per_s,
            bw_max / 1e9,
            r.bytes as f64 / r.best / bw_max,
            roof,
            macs / r.best / roof
        )
        .unwrap();
    }
    if let Err(e) = std::fs::write(&out_path, s) {
        eprintln!("kernels: {out_path}: {e}");
        std::process::exit(4);
    }
    eprintln!("wrote {out_path}");
}

/// The `--prefill` run: batched BF16 and MXFP4 products against the compute roof.
///
/// T = 1 streams matrices larger than the LLC (bandwidth-bound; a few long repetitions). For
/// T ≥ 16 the products are compute-bound, so each repetition is short (about 10 M
/// multiply-adds, one 64-row task per thread and position group, weights in L2) and the best
/// of many is taken, and the roof is measured right before each product with equally short
/// repetitions: on a busy machine both then see the same quiet time slices.
fn prefill(opts: &Opts, (yr, mon, day): (i64, i64, i64)) {
    let out_path = opts.out.clone().unwrap_or_else(|| {
        format!(
            "{}/results/prefill-kernels-{yr:04}{mon:02}{day:02}.tsv",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let load_before = k3_bench::machine::loadavg();
    let paths = isa::available().to_vec();
    let thread_counts = [1usize, 2];
    let short_reps = if opts.quick { 40 } else { 100 };
    let llc = membw::llc_bytes().unwrap_or(32 << 20);
    let buf = membw::buffer(16 * llc);
    let bw: Vec<MemBw> = thread_counts
        .iter()
        .map(|&t| membw::measure(&buf, t, opts.reps.min(5)))
        .collect();
    drop(buf);
    // (row, roof measured next to it)
    let mut rows: Vec<(Row, roof::Roof)> = Vec::new();
    let n_bf = 7168usize;
    let (m_mx, n_mx) = (3072usize, 3584usize);
    for t_pos in [1usize, 16, 64, 256] {
        let long = t_pos == 1;
        for &isa in &paths {
            for &t in &thread_counts {
                // Rows per product: the whole matrix for T = 1; else 64 rows per thread (or
                // more, about 10 M multiply-adds per repetition).
                let m_bf = if long {
                    12288
                } else {
                    (64 * t).max((10_000_000 / (t_pos * n_bf)) / 64 * 64)
                };
                let m_m = if long {
                    m_mx
                } else {
                    (64 * t).max((10_000_000 / (t_pos * n_mx)) / 64 * 64)
                };
                let experts = if long { 16 } else { 1 };
                let reps = if long { opts.reps.min(3) } else { short_reps };
                let w = bf16_matrix(m_bf, n_bf, 5);
                let x = vector(t_pos * n_bf, 6);
                let mut y = vec![0.0f32; t_pos * m_bf];
                let mut r = Rng(10);
                let packed: Vec<Vec<u8>> = (0..experts)
                    .map(|_| (0..m_m * n_mx / 2).map(|_| r.next() as u8).collect())
                    .collect();
                let scales: Vec<Vec<u8>> = (0..experts)
                    .map(|_| {
                        (0..m_m * n_mx / 32)
                            .map(|_| 115 + (r.next() % 13) as u8)
                            .collect()
                    })
                    .collect();
                let mats: Vec<Mxfp4> = (0..experts)
                    .map(|e| Mxfp4::new(&packed[e], &scales[e], m_m, n_mx).expect("valid MXFP4"))
                    .collect();
                let xm = vector(t_pos * n_mx, 11);
                let mut ym = vec![0.0f32; t_pos * m_m];
                let k = Kernels::new(isa, t).expect("available path");
                // Roof repetitions as long as a product repetition at the roof's speed.
                let roof_iters =
                    |macs: usize| (macs as u64 / (t as u64 * 12 * roof::lanes(isa))).max(10_000);
                let macs = m_bf * n_bf * t_pos;
                let rf = roof::measure_iters(isa, t, reps, roof_iters(macs));
                let (best, median) = time(reps, || k.matmul_bf16(&w, m_bf, n_bf, &x, &mut y));
                rows.push((
                    Row {
                        op: "bf16_matmul".into(),
                        isa,
                        threads: t,
                        rows: m_bf,
                        cols: n_bf,
                        t: t_pos,
                        bytes: m_bf * n_bf * 2,
                        macs,
                        best,
                        median,
                    },
                    rf,
                ));
                let macs = experts * m_m * n_mx * t_pos;
                let rf = roof::measure_iters(isa, t, reps, roof_iters(macs));
                let (best, median) = time(reps, || {
                    for m in &mats {
                        k.matmul_mxfp4(m, &xm, &mut ym);
                    }
                });
                rows.push((
                    Row {
                        op: "mxfp4_matmul".into(),
                        isa,
                        threads: t,
                        rows: m_m,
                        cols: n_mx,
                        t: t_pos,
                        bytes: experts * (m_m * n_mx / 2 + m_m * n_mx / 32),
                        macs,
                        best,
                        median,
                    },
                    rf,
                ));
                for (r, rf) in &rows[rows.len() - 2..] {
                    eprintln!(
                        "  {:<13} {:<6} t{} T{:<4} {:>7.2} G multiply-adds/s  roof {:>6.2}  {:.3} of roof",
                        r.op,
                        isa.name(),
                        t,
                        t_pos,
                        r.macs as f64 / r.best / 1e9,
                        rf.best_macs_per_s / 1e9,
                        r.macs as f64 / r.best / rf.best_macs_per_s
                    );
                }
            }
        }
    }
    let mut cmd = String::from("cargo run --release -p k3-bench --bin kernels --");
    for a in std::env::args().skip(1) {
        cmd.push(' ');
        cmd.push_str(&a);
    }
    let mut s = String::new();
    writeln!(s, "# k3 batched products (prefill) against the compute roof measured in the same run (issue 23)").unwrap();
    writeln!(s, "# command: {cmd}").unwrap();
    writeln!(s, "# date_utc: {yr:04}-{mon:02}-{day:02}").unwrap();
    writeln!(
        s,
        "# cpu: {} ({}), {} CPUs, last-level cache {} bytes",
        cpu_model(),
        std::env::consts::ARCH,
        k3_kernels::pool::default_threads(),
        llc
    )
    .unwrap();
    writeln!(
        s,
        "# loadavg before: {load_before}; after: {}",
        k3_bench::machine::loadavg()
    )
    .unwrap();
    writeln!(s, "# roof: f64 multiply + add (no FMA), 12 independent accumulators, operands in registers, per path and thread count (k3_bench::roof), measured right before each product with repetitions of the same length; best repetition after a warm-up (T = 1: {} repetitions of the whole matrix, T >= 16: {short_reps} short repetitions)", opts.reps.min(3)).unwrap();
    writeln!(s, "# macs_per_s = multiply-adds per second, best repetition; roof_ratio = macs_per_s / roof_macs_per_s (same path and threads); membw_ratio = weight bytes per second / streaming-read bandwidth (same threads); median columns: median repetition of each").unwrap();
    writeln!(s, "kind\top\tisa\tthreads\trows\tcols\tT\tbytes\tbest_s\tmedian_s\tmacs_per_s\troof_macs_per_s\troof_ratio\tmedian_macs_per_s\tmedian_roof_macs_per_s\tmedian_roof_ratio\tGBps\tmembw_GBps\tmembw_ratio").unwrap();
    for (r, rf) in &rows {
        let roof = rf.best_macs_per_s;
        let med = r.macs as f64 / r.median;
        let mb = bw.iter().find(|m| m.threads == r.threads).unwrap();
        let gbps = r.bytes as f64 / r.best / 1e9;
        writeln!(
            s,
            "kernel\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.6}\t{:.6}\t{:.4e}\t{:.4e}\t{:.3}\t{:.4e}\t{:.4e}\t{:.3}\t{:.3}\t{:.3}\t{:.3}",
            r.op,
            r.isa.name(),
            r.threads,
            r.rows,
            r.cols,
            r.t,
            r.bytes,
            r.best,
            r.median,
            r.macs as f64 / r.best,
            roof,
            r.macs as f64 / r.best / roof,
            med,
            rf.median_macs_per_s,
            med / rf.median_macs_per_s,
            gbps,
            mb.best_bytes_per_s / 1e9,
            gbps * 1e9 / mb.best_bytes_per_s
        )
        .unwrap();
    }
    if let Err(e) = std::fs::write(&out_path, s) {
        eprintln!("kernels: {out_path}: {e}");
        std::process::exit(4);
    }
    eprintln!("wrote {out_path}");
}
