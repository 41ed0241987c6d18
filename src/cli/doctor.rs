//! `k3 doctor [DIR] [--json] [--probe-mb N]` (ENGINE.md §12): whether and how this machine
//! can run the released model. It reports the CPU, the ISA path and the cores; `MemAvailable`
//! and the cgroup limit (the same readers the memory plan uses, [`crate::io::sys`]); the read
//! bandwidth of the disk holding DIR measured the way the engine reads ([`crate::io::probe`]:
//! `O_DIRECT` windows of a trunk piece at queue depth 1 and of one expert at depth 1 and 4, on
//! fresh bytes of DIR's own model or packed-trunk files, else of a temporary file it writes and
//! removes); the budget that fits and its plan for the released model
//! ([`crate::plan::released`]); the bytes a decoded token reads under that plan (expert hit
//! rate from the recorded real trace) and the s/token they imply at the measured bandwidth
//! (a prediction: reads only); and the exact command to run next.
//!
//! Exit 0 when the model can run here, 3 when even its smallest plan does not fit in what is
//! available (the report is printed first), 2 for a bad DIR or flag, 3 when the disk lacks
//! room for the probe, 4 when the probe's reads or writes fail.

use crate::cli::args::{Args, Spec};
use crate::error::{Error, Result};
use crate::io::probe::{measure, FreshBytes, ProbeFile, ReadRate};
use crate::io::sys::{CgroupVersion, MemoryAvailable};
use crate::json::{Object, Value};
use crate::plan::released::{self, TokenBytes};
use crate::plan::{gb, minimum_plan, plan_run, Budget, ModelSizes, RunPlan, PRESETS};
use crate::units::count;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) const SPECS: [Spec; 2] = [Spec::Switch("json"), Spec::Value("probe-mb")];

const USAGE: &str = "\
usage: k3 doctor [DIR] [--json] [--probe-mb N]
  Says whether and how this machine can run the released Kimi K3: CPU, ISA path and cores,
  MemAvailable and the cgroup limit, the read bandwidth of the disk holding DIR (default: the
  current directory) measured as the engine reads (O_DIRECT, queue depth 1 and 4), the budget
  that fits, the bytes a token reads there and the s/token they imply, and the command to run
  next. DIR may be a model or packed-trunk directory (its own files are read, each byte once)
  or any directory on the target disk (a temporary file is written there and removed).
  Exit 0 when the model can run here, 3 when it cannot.
  --json         the same as one JSON document on standard output
  --probe-mb N   decimal MB the disk probe reads (default 2000; at most 8000)
";

/// Positions the plan is made for (prompt + generation): a short conversation.
pub const POSITIONS: usize = 1024;
/// Default and largest bytes of the disk probe (decimal MB).
const PROBE_MB_DEFAULT: u64 = 2000;
const PROBE_MB_MAX: u64 = 8000;
/// Window of the trunk pattern: a piece of a streamed layer, read by the one trunk reader.
const TRUNK_WINDOW: usize = 256 << 20;
/// Reader threads of an expert batch (ENGINE.md §5).
const EXPERT_DEPTH: usize = 4;
/// The prompt of the suggested command.
const NEXT_PROMPT: &str = "The capital of France is";

/// Runs `k3 doctor` with the arguments after the subcommand name.
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(args) = Args::parse_or_help(argv, &SPECS, USAGE)? else {
        return Ok(());
    };
    if args.positional.len() > 1 {
        return Err(Error::invalid(
            "doctor: takes at most one directory (usage: k3 doctor [DIR] [--json] [--probe-mb N])",
        ));
    }
    let dir = args
        .positional
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    if !dir.is_dir() {
        return Err(Error::invalid(format!(
            "{}: not a directory (usage: k3 doctor [DIR] [--json] [--probe-mb N])",
            dir.display()
        )));
    }
    let probe_mb = args.parsed::<u64>("probe-mb", "a whole number of MB")?;
    let probe_mb = probe_mb.unwrap_or(PROBE_MB_DEFAULT);
    if probe_mb == 0 || probe_mb > PROBE_MB_MAX {
        return Err(Error::invalid(format!(
            "flag `--probe-mb`: {probe_mb} is outside 1..={PROBE_MB_MAX}"
        )));
    }
    let isa = crate_isa()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = crate::io::sys::memory_available();
    let model = ModelFit::new(&mem, cores)?;
    let disk = Disk::measure(&dir, probe_mb * 1_000_000)?;
    let report = Report {
        dir: &dir,
        isa,
        cores,
        mem: &mem,
        model: &model,
        disk: &disk,
    };
    let text = if args.switch("json") {
        report.json().to_json_pretty() + "\n"
    } else {
        report.text()
    };
    crate::cli::write_stdout(text.as_bytes())?;
    match &model.fit {
        Some(_) => Ok(()),
        None => Err(Error::resources(format!(
            "the released model cannot run here: its smallest plan needs {} but {} is available (MemAvailable{}); free memory or raise the limit",
            gb(model.minimum),
            model.available.map_or("an unknown amount".to_string(), gb),
            if mem.cgroup.is_some() { " and the cgroup headroom" } else { "" }
        ))),
    }
}

/// The ISA path a run would use (`K3_ISA` or the best), and every path this CPU has.
fn crate_isa() -> Result<(k3_kernels::Isa, Vec<&'static str>)> {
    let isa = k3_kernels::Isa::from_env().map_err(|e| Error::invalid(e.to_string()))?;
    let all = k3_kernels::isa::ALL_ISAS
        .iter()
        .filter(|i| i.is_available())
        .map(|i| i.name())
        .collect();
    Ok((isa, all))
}

/// The released model against what is available.
struct ModelFit {
    sizes: ModelSizes,
    moe_layers: usize,
    available: Option<u64>,
    /// The smallest plan's total.
    minimum: u64,
    /// The presets whose plan fits.
    presets: Vec<&'static str>,
    /// The suggested budget, when the model can run.
    fit: Option<Fit>,
}

/// The suggested budget and its plan.
struct Fit {
    /// `--mem-gb` value, decimal GB with one decimal.
    mem_gb: String,
    plan: RunPlan,
    bytes: TokenBytes,
}

impl ModelFit {
    /// Plans the released model for [`POSITIONS`] positions on `threads` threads: the smallest
    /// plan, the presets that fit, and the suggested `--mem-gb` — `auto`'s budget (available
    /// less its margin) to 0.1 GB, or the smallest plan rounded up when that is larger and
    /// still fits. Unknown memory: the smallest budget.
    fn new(mem: &MemoryAvailable, threads: usize) -> Result<ModelFit> {
        let cfg = released::config()?;
        let mut sizes = released::run_sizes(&cfg, POSITIONS, threads);
        // As the run counts it: the index and the expert location tables.
        sizes.tensor_index +=
            crate::bind::experts::location_table_bytes(&cfg, cfg.num_hidden_layers);
        let available = mem.available();
        let minimum = minimum_plan(&sizes, available).total;
        let presets = PRESETS
            .iter()
            .filter(|p| {
                let b = Budget {
                    preset: Some(p),
                    ..Budget::default()
                };
                plan_run(&sizes, &b, available).is_ok_and(|rp| fits(&rp, available))
            })
            .map(|p| p.name)
            .collect();
        let tenth = |b: u64, up: bool| {
            let t = b as f64 / 1e8;
            (if up { t.ceil() } else { t.floor() }) as u64
        };
        let min_tenths = tenth(minimum, true);
        let tenths = match available {
            Some(a) => {
                let margin = ((a as f64 * crate::plan::AUTO_MARGIN_SHARE) as u64)
                    .max(crate::plan::AUTO_MARGIN_MIN);
                tenth(a.saturating_sub(margin), false).max(min_tenths)
            }
            None => min_tenths,
        };
        let mut fit = None;
        // The smallest plan rounded up may still miss by the rounding: try a few tenths up.
        for t in tenths..tenths + 3 {
            let b = Budget {
                mem: Some(t * 100_000_000),
                ..Budget::default()
            };
            if let Ok(rp) = plan_run(&sizes, &b, available) {
                if fits(&rp, available) {
                    let bytes = TokenBytes::of_plan(&rp, &sizes, released::moe_layers(&cfg));
                    fit = Some(Fit {
                        mem_gb: format!("{}.{}", t / 10, t % 10),
                        plan: rp,
                        bytes,
                    });
                    break;
                }
            }
        }
        Ok(ModelFit {
            sizes,
            moe_layers: released::moe_layers(&cfg),
            available,
            minimum,
            presets,
            fit,
        })
    }
}

/// The plan's total is within what is available (unknown: accepted, as the run does).
fn fits(rp: &RunPlan, available: Option<u64>) -> bool {
    available.is_none_or(|a| rp.memory.total <= a)
}

/// The disk probe's outcome.
struct Disk {
    /// Where the bytes came from.
    source: String,
    /// The temporary file (removed by now), if one was written, and its write rate.
    temp: Option<(PathBuf, f64)>,
    /// Files of DIR passed over (sparse).
    skipped: Vec<String>,
    rates: Vec<ReadRate>,
}

/// (pattern name, window, depth, share of the probe bytes).
const PATTERNS: [(&str, usize, usize, f64); 3] = [
    ("trunk", TRUNK_WINDOW, 1, 0.5),
    ("experts", 17_547_264, 1, 0.15),
    ("experts", 17_547_264, EXPERT_DEPTH, 0.35),
];

impl Disk {
    /// Measures the disk holding `dir` with about `bytes` of fresh reads: DIR's own model or
    /// packed-trunk files when they hold that many unread bytes of data, else a temporary file
    /// (written, synced, read, removed).
    fn measure(dir: &Path, bytes: u64) -> Result<Disk> {
        let plan: Vec<(&'static str, usize, usize, usize)> = PATTERNS
            .iter()
            .map(|&(name, w, depth, share)| {
                let part = ((bytes as f64 * share) as u64).max(crate::io::ALIGN as u64);
                let window = (w as u64).min(part).div_ceil(4096) as usize * 4096;
                let reads = ((part / window as u64) as usize).max(depth);
                (name, window, depth, reads)
            })
            .collect();
        let need: u64 = plan.iter().map(|p| (p.1 * p.3) as u64).sum();
        let (mut src, skipped) = FreshBytes::of_files(&data_files(dir))?;
        let mut temp = None;
        let mut probe_file = None;
        let source = if src.remaining() >= need {
            format!(
                "{} of {} (O_DIRECT reads at fresh offsets)",
                count(src.files().len() as u64, "file", "files"),
                dir.display()
            )
        } else {
            if let Some(free) = crate::io::sys::fs_available_bytes(dir) {
                let margin = 256 << 20;
                if free < need + (2 << 20) + margin {
                    return Err(Error::resources(format!(
                        "{}: {} free, the disk probe needs {} (+{} spare); pass a smaller --probe-mb or free space",
                        dir.display(),
                        gb(free),
                        gb(need),
                        gb(margin)
                    )));
                }
            }
            let f = ProbeFile::create(dir, need + (1 << 20))?;
            temp = Some((
                f.path().to_path_buf(),
                f.len as f64 / 1e6 / f.write_seconds.max(1e-9),
            ));
            src = FreshBytes::of_files(&[f.path().to_path_buf()])?.0;
            probe_file = Some(f);
            format!(
                "a temporary file in {} (written, synced, read once, removed)",
                dir.display()
            )
        };
        let mut rates = Vec::new();
        for (name, window, depth, reads) in plan {
            rates.push(measure(&mut src, name, window, depth, reads)?);
        }
        drop(src);
        drop(probe_file);
        Ok(Disk {
            source,
            temp,
            skipped,
            rates,
        })
    }

    /// Bytes per second of the trunk reader (depth 1) and of an expert batch (the deepest
    /// expert pattern).
    fn rates(&self) -> (f64, f64) {
        let of = |name: &str| {
            self.rates
                .iter()
                .filter(|r| r.name == name)
                .max_by_key(|r| r.depth)
                .map_or(0.0, ReadRate::bytes_per_s)
        };
        (of("trunk"), of("experts"))
    }
}

/// The data files of a model directory (its `*.safetensors`) or a packed trunk (`trunk.bin`),
/// sorted by name; empty for any other directory.
fn data_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.ends_with(".safetensors") || n == crate::stream::pack::TRUNK_BIN
                })
        })
        .collect();
    crate::sort::sort(&mut v);
    v
}

/// What DIR is, for the suggested command.
fn dir_kind(dir: &Path) -> &'static str {
    if dir.join("config.json").is_file() {
        "model"
    } else if dir.join(crate::stream::pack::TRUNK_JSON).is_file() {
        "trunk"
    } else {
        "other"
    }
}

/// `s` quoted for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

struct Report<'a> {
    dir: &'a Path,
    isa: (k3_kernels::Isa, Vec<&'static str>),
    cores: usize,
    mem: &'a MemoryAvailable,
    model: &'a ModelFit,
    disk: &'a Disk,
}

impl Report<'_> {
    /// The suggested command, or None when the model cannot run.
    fn next(&self) -> Option<String> {
        let fit = self.model.fit.as_ref()?;
        let d = shell_quote(&self.dir.display().to_string());
        let budget = format!("--mem-gb {}", fit.mem_gb);
        let prompt = shell_quote(NEXT_PROMPT);
        Some(match dir_kind(self.dir) {
            "model" => format!("k3 {d} {budget} --prompt {prompt}"),
            "trunk" => format!("k3 <model_dir> --trunk {d} {budget} --prompt {prompt}"),
            _ => format!("k3 <model_dir> {budget} --prompt {prompt}"),
        })
    }

    /// Predicted seconds per token at the measured bandwidth: trunk and tables at the trunk
    /// reader's rate, expert misses at the expert batches' rate (reads only).
    fn seconds_per_token(&self) -> Option<f64> {
        let b = self.model.fit.as_ref()?.bytes;
        let (seq, exp) = self.disk.rates();
        if seq <= 0.0 || exp <= 0.0 {
            return None;
        }
        Some(b.sequential() as f64 / seq + b.experts as f64 / exp)
    }

    fn text(&self) -> String {
        let mut s = String::new();
        let (isa, all) = &self.isa;
        let _ = writeln!(
            s,
            "cpu: {}, {}, ISA path {} (available: {})",
            std::env::consts::ARCH,
            count(self.cores as u64, "core", "cores"),
            isa.name(),
            all.join(", ")
        );
        let _ = writeln!(s, "memory: {}", self.memory_line());
        let _ = writeln!(s, "disk: {}", self.disk.source);
        if let Some((p, w)) = &self.disk.temp {
            let _ = writeln!(
                s,
                "  temporary file {} written at {w:.0} MB/s (buffered + fdatasync), removed",
                p.display()
            );
        }
        if let Some(first) = self.disk.skipped.first() {
            let n = self.disk.skipped.len();
            let more = if n > 1 {
                format!(" and {} more", n - 1)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "  not read: {first}{more} (holes read as zeros without touching the disk)"
            );
        }
        for r in &self.disk.rates {
            let _ =
                writeln!(
                s,
                "  {:<8} windows of {:>9}, queue depth {}: {} reads, {} in {:.2} s = {:.0} MB/s{}",
                r.name,
                gb(r.window as u64),
                r.depth,
                r.reads,
                gb(r.bytes),
                r.seconds,
                r.mb_per_s(),
                if r.direct { "" } else { " (buffered: O_DIRECT refused)" }
            );
        }
        self.model_text(&mut s);
        s
    }

    fn memory_line(&self) -> String {
        let m = self.mem;
        let mut s = format!(
            "MemAvailable {}",
            m.mem_available.map_or("unknown".to_string(), gb)
        );
        match &m.cgroup {
            Some(c) => {
                let _ = write!(
                    s,
                    "; cgroup {} {}: limit {}, usage {}, headroom {}",
                    if c.version == CgroupVersion::V2 {
                        "v2"
                    } else {
                        "v1"
                    },
                    c.dir.display(),
                    gb(c.limit),
                    gb(c.usage),
                    gb(c.headroom())
                );
            }
            None => s.push_str("; no cgroup memory limit"),
        }
        let _ = write!(
            s,
            "; available to k3: {}",
            m.available().map_or("unknown".to_string(), gb)
        );
        s
    }

    fn model_text(&self, s: &mut String) {
        let m = self.model;
        let _ = writeln!(
            s,
            "released Kimi K3 (93 layers, 896 experts, 1.56 TB), planned for {POSITIONS} positions: smallest plan {}; presets that fit here: {}",
            gb(m.minimum),
            if m.presets.is_empty() { "none".to_string() } else { m.presets.join(", ") }
        );
        let Some(fit) = &m.fit else {
            let _ = writeln!(
                s,
                "verdict: cannot run here: the smallest plan needs {}, {} is available",
                gb(m.minimum),
                m.available.map_or("an unknown amount".to_string(), gb)
            );
            return;
        };
        let p = &fit.plan;
        let _ = writeln!(
            s,
            "budget: --mem-gb {}: plan {}, trunk pinned {}/93 + ring {} x {}, {}, expert cache {} slots",
            fit.mem_gb,
            gb(p.memory.total),
            p.trunk.n_pinned(),
            p.trunk.ring_slots,
            gb(p.trunk.slot_bytes),
            p.memory.tables_desc(),
            p.cache_slots
        );
        let b = fit.bytes;
        let _ = writeln!(
            s,
            "per token (prediction): reads {} = trunk {} + tables {} + experts {} ({} requests, hit rate {:.1} % from the recorded real routing trace)",
            gb(b.total()),
            gb(b.trunk),
            gb(b.tables),
            gb(b.experts),
            b.expert_requests,
            b.hit_rate * 100.0
        );
        if let Some(t) = self.seconds_per_token() {
            let _ = writeln!(
                s,
                "predicted: {t:.1} s/token at the measured bandwidth (reads only; compute overlaps or adds)"
            );
        }
        if let Some(n) = self.next() {
            let _ = writeln!(s, "next: {n}");
        }
    }

    fn json(&self) -> Value {
        let (isa, all) = &self.isa;
        let cpu = Object::new()
            .with("arch", std::env::consts::ARCH)
            .with("cores", self.cores)
            .with("isa", isa.name())
            .with(
                "isas",
                Value::Array(all.iter().map(|&n| Value::from(n)).collect()),
            );
        let m = self.mem;
        let opt = |v: Option<u64>| v.map_or(Value::Null, Value::from);
        let cgroup = m.cgroup.as_ref().map_or(Value::Null, |c| {
            Value::Object(
                Object::new()
                    .with(
                        "version",
                        if c.version == CgroupVersion::V2 {
                            2u64
                        } else {
                            1
                        },
                    )
                    .with("dir", c.dir.display().to_string())
                    .with("limit", c.limit)
                    .with("usage", c.usage)
                    .with("headroom", c.headroom()),
            )
        });
        let memory = Object::new()
            .with("mem_available", opt(m.mem_available))
            .with("cgroup", cgroup)
            .with("available", opt(m.available()));
        Value::Object(
            Object::new()
                .with("dir", self.dir.display().to_string())
                .with("cpu", cpu)
                .with("memory", memory)
                .with("disk", self.disk_json())
                .with("model", self.model_json())
                .with("can_run", self.model.fit.is_some())
                .with("next", self.next().map_or(Value::Null, Value::from)),
        )
    }

    fn disk_json(&self) -> Object {
        let reads = self
            .disk
            .rates
            .iter()
            .map(|r| {
                Value::Object(
                    Object::new()
                        .with("pattern", r.name)
                        .with("window_bytes", r.window)
                        .with("queue_depth", r.depth)
                        .with("reads", r.reads)
                        .with("bytes", r.bytes)
                        .with("seconds", r.seconds)
                        .with("mb_per_s", r.mb_per_s())
                        .with("direct", r.direct),
                )
            })
            .collect();
        let (tp, tw) = match &self.disk.temp {
            Some((p, w)) => (Value::from(p.display().to_string()), Value::from(*w)),
            None => (Value::Null, Value::Null),
        };
        Object::new()
            .with("source", self.disk.source.as_str())
            .with("temporary_file", tp)
            .with("write_mb_per_s", tw)
            .with(
                "not_read",
                Value::Array(
                    self.disk
                        .skipped
                        .iter()
                        .map(|k| Value::from(k.as_str()))
                        .collect(),
                ),
            )
            .with("reads", Value::Array(reads))
    }

    fn model_json(&self) -> Object {
        let m = self.model;
        let mut o = Object::new()
            .with("name", "Kimi K3 (released)")
            .with("positions", POSITIONS)
            .with("moe_layers", m.moe_layers)
            .with("experts_total", m.sizes.experts_total)
            .with("minimum_plan_bytes", m.minimum)
            .with(
                "presets_fit",
                Value::Array(m.presets.iter().map(|&n| Value::from(n)).collect()),
            );
        if let Some(f) = &m.fit {
            let p = &f.plan;
            let b = f.bytes;
            o.insert("mem_gb", f.mem_gb.as_str());
            o.insert("plan_bytes", p.memory.total);
            o.insert("pinned_layers", p.trunk.n_pinned());
            o.insert("ring_slots", p.trunk.ring_slots);
            o.insert("ring_slot_bytes", p.trunk.slot_bytes);
            o.insert("lm_head_resident_rows", p.memory.lm_head_resident_rows);
            o.insert("embedding_resident", p.memory.embedding_resident);
            o.insert("cache_slots", p.cache_slots);
            let tb = Object::new()
                .with("trunk", b.trunk)
                .with("tables", b.tables)
                .with("experts", b.experts)
                .with("total", b.total())
                .with("expert_requests", b.expert_requests)
                .with("expert_hit_rate", b.hit_rate);
            o.insert("token_bytes", tb);
            o.insert(
                "predicted_seconds_per_token",
                self.seconds_per_token().map_or(Value::Null, Value::from),
            );
        }
        o
    }
}
