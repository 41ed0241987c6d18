//! Expert traces (FORMATS.md §8): `expert_trace.bin` (records of two little-endian int32,
//! (layer ℓ zero-based, expert e), in request order: per forward step, per MoE layer ascending,
//! per position of the chunk ascending, the Kt selected experts in selection order) and
//! `expert_hist.json` (per-key counts), written by `--dump-cache-trace DIR`.
//!
//! Also the step structure of a trace, and the derivation of the incremental-decode trace from a
//! full-recompute one: a full-recompute engine re-runs the whole prefix every step, and positions
//! re-run route identically, so step s+1's run for a layer starts with step s's whole run for
//! that layer, followed by the new positions. An incremental engine requests each position once:
//! the first step (the prompt, one prefill chunk) as recorded, then, per later step, only the new
//! positions' records of each layer, in layer order.

use super::ExpertKey;
use crate::error::{Error, Result};
use crate::io::OutFile;
use crate::model::experts::{ExpertSource, ExpertStats, UseExperts};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Bytes per record.
pub const RECORD_BYTES: usize = 8;
/// File name of the trace inside the dump directory.
pub const TRACE_FILE: &str = "expert_trace.bin";
/// File name of the histogram inside the dump directory.
pub const HIST_FILE: &str = "expert_hist.json";

/// Decodes a trace. `path` only names the file in errors.
///
/// Errors (exit 2): a length that is not a whole number of records, an empty trace, a negative
/// layer or expert (naming the record index and byte offset).
pub fn parse_trace(bytes: &[u8], path: &Path) -> Result<Vec<ExpertKey>> {
    if bytes.len() % RECORD_BYTES != 0 {
        return Err(Error::invalid(format!(
            "{}: {} bytes is not a whole number of 8-byte (layer, expert) records: the record \
             at offset {} is cut short",
            path.display(),
            bytes.len(),
            bytes.len() - bytes.len() % RECORD_BYTES
        )));
    }
    if bytes.is_empty() {
        return Err(Error::invalid(format!(
            "{}: empty trace (no records)",
            path.display()
        )));
    }
    let mut out = Vec::with_capacity(bytes.len() / RECORD_BYTES);
    for (i, rec) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
        let layer = i32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let expert = i32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
        for (what, v) in [("layer", layer), ("expert", expert)] {
            if v < 0 {
                return Err(Error::invalid(format!(
                    "{}: record {i} at offset {}: negative {what} {v}",
                    path.display(),
                    i * RECORD_BYTES
                )));
            }
        }
        out.push(ExpertKey::new(layer as u32, expert as u32));
    }
    Ok(out)
}

/// Reads and decodes a trace file (see [`parse_trace`]).
///
/// Errors (exit 2): the file cannot be read, or is malformed.
pub fn read_trace(path: &Path) -> Result<Vec<ExpertKey>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid(format!("{}: cannot read trace: {e}", path.display())))?;
    parse_trace(&bytes, path)
}

/// Encodes records as `expert_trace.bin` bytes.
pub fn encode_trace(records: &[ExpertKey]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * RECORD_BYTES);
    for k in records {
        out.extend_from_slice(&(k.layer as i32).to_le_bytes());
        out.extend_from_slice(&(k.expert as i32).to_le_bytes());
    }
    out
}

/// `expert_hist.json` text: `{"n_layers": L, "n_experts": E, "counts": {"ℓ,e": count, ...}}`
/// with only non-zero counts, keys in (layer, expert) order.
pub fn hist_json(n_layers: u32, n_experts: u32, counts: &BTreeMap<ExpertKey, u64>) -> String {
    let mut s = format!("{{\"n_layers\": {n_layers}, \"n_experts\": {n_experts}, \"counts\": {{");
    let mut first = true;
    for (k, &c) in counts {
        if c == 0 {
            continue;
        }
        if !first {
            s.push_str(", ");
        }
        first = false;
        s.push_str(&format!("\"{},{}\": {c}", k.layer, k.expert));
    }
    s.push_str("}}\n");
    s
}

/// Writes `expert_trace.bin` as the run goes (under `expert_trace.bin.tmp`, renamed at
/// [`finish`](TraceWriter::finish); a failed run leaves no trace under the final name) and
/// `expert_hist.json` at `finish`. Both files are opened at [`create`](TraceWriter::create),
/// before the run, so a path that cannot take the histogram fails first, not after the run.
#[derive(Debug)]
pub struct TraceWriter {
    trace_path: PathBuf,
    out: OutFile,
    hist: OutFile,
    counts: BTreeMap<ExpertKey, u64>,
    n_layers: u32,
    n_experts: u32,
    records: u64,
}

impl TraceWriter {
    /// Creates `dir` if needed, `dir/expert_trace.bin` and `dir/expert_hist.json` (under their
    /// temporary names; old files are replaced at `finish`) for a model of
    /// `n_layers` layers and `n_experts` experts per MoE layer.
    ///
    /// Errors (exit 2, before the run): the directory or file cannot be created (naming
    /// `--dump-cache-trace`); exit 3 if the disk is full.
    pub fn create(dir: &Path, n_layers: u32, n_experts: u32) -> Result<TraceWriter> {
        if n_layers > i32::MAX as u32 || n_experts > i32::MAX as u32 {
            return Err(Error::invalid(format!(
                "{}: {n_layers} layers × {n_experts} experts do not fit the int32 trace records",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::invalid(format!(
                "flag `--dump-cache-trace {}`: cannot create the directory: {e}; give a writable directory",
                dir.display()
            ))
        })?;
        let trace_path = dir.join(TRACE_FILE);
        let out = OutFile::create("--dump-cache-trace", &trace_path, "the expert trace")?;
        let hist = OutFile::create(
            "--dump-cache-trace",
            &dir.join(HIST_FILE),
            "the expert histogram",
        )?;
        Ok(TraceWriter {
            trace_path,
            out,
            hist,
            counts: BTreeMap::new(),
            n_layers,
            n_experts,
            records: 0,
        })
    }

    /// Appends one MoE layer's requests of one step: `experts` in request order (per position
    /// ascending, its Kt experts in selection order).
    ///
    /// Errors: exit 1 for a layer or expert out of range (a bug in the caller); exit 3 if the
    /// disk is full, exit 4 if the write fails otherwise.
    pub fn record(&mut self, layer: u32, experts: &[u32]) -> Result<()> {
        let mut buf = Vec::with_capacity(experts.len() * RECORD_BYTES);
        for &e in experts {
            if layer >= self.n_layers || e >= self.n_experts {
                return Err(Error::internal(format!(
                    "{}: trace record (layer {layer}, expert {e}) outside {} layers × {} experts",
                    self.trace_path.display(),
                    self.n_layers,
                    self.n_experts
                )));
            }
            buf.extend_from_slice(&(layer as i32).to_le_bytes());
            buf.extend_from_slice(&(e as i32).to_le_bytes());
            *self.counts.entry(ExpertKey::new(layer, e)).or_insert(0) += 1;
        }
        self.out.write_all(&buf)?;
        self.records += experts.len() as u64;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Completes `expert_trace.bin` and writes `expert_hist.json` (each via a temporary name
    /// and a rename).
    ///
    /// Errors: exit 3 on a full disk, else exit 4, naming the file and the offset.
    pub fn finish(mut self) -> Result<()> {
        // the histogram is written before the trace is renamed: a full disk leaves neither
        self.hist
            .write_all(hist_json(self.n_layers, self.n_experts, &self.counts).as_bytes())?;
        self.out.commit()?;
        self.hist.commit()
    }
}

/// One forward step of a trace: its MoE layers' runs of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// (layer, record range) per MoE layer, layers strictly ascending.
    pub runs: Vec<(u32, Range<usize>)>,
}

/// Splits a trace into forward steps: a step ends where the layer goes down (the next step
/// starts again at the first MoE layer); inside a step, each maximal run of one layer is that
/// layer's batch. A trace of a model with a single MoE layer reads as one step.
pub fn split_steps(records: &[ExpertKey]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut runs: Vec<(u32, Range<usize>)> = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let layer = records[i].layer;
        let mut j = i + 1;
        while j < records.len() && records[j].layer == layer {
            j += 1;
        }
        if let Some((prev, _)) = runs.last() {
            if layer < *prev {
                steps.push(Step {
                    runs: std::mem::take(&mut runs),
                });
            }
        }
        runs.push((layer, i..j));
        i = j;
    }
    if !runs.is_empty() {
        steps.push(Step { runs });
    }
    steps
}

/// The shape of a full-recompute trace and the incremental-decode trace derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incremental {
    /// Forward steps of the full-recompute trace.
    pub steps: usize,
    /// MoE layers per step.
    pub moe_layers: usize,
    /// Records per position per layer (the top-k Kt): the gcd of every run length.
    pub top_k: usize,
    /// Positions of each full-recompute step (run length / Kt).
    pub positions: Vec<usize>,
    /// The incremental-decode trace: the first step as recorded (the prompt as one prefill
    /// chunk), then each later step's new positions only.
    pub records: Vec<ExpertKey>,
}

/// Recognises a full-recompute trace and derives its incremental-decode trace.
///
/// A trace is full recompute when it has at least two steps, every step has the same MoE
/// layers, within a step every layer has a run of the same length, each step's runs are longer
/// than the previous step's, and each run starts with the previous step's run for that layer
/// (re-run positions route identically). Returns `None` otherwise (the trace is then replayed
/// as recorded, e.g. one written by an incremental run).
pub fn derive_incremental(records: &[ExpertKey]) -> Option<Incremental> {
    let steps = split_steps(records);
    if steps.len() < 2 {
        return None;
    }
    let layers: Vec<u32> = steps[0].runs.iter().map(|(l, _)| *l).collect();
    let mut lens = Vec::with_capacity(steps.len());
    for st in &steps {
        if st.runs.len() != layers.len() || st.runs.iter().zip(&layers).any(|((l, _), m)| l != m) {
            return None;
        }
        let n = st.runs[0].1.len();
        if st.runs.iter().any(|(_, r)| r.len() != n) {
            return None;
        }
        lens.push(n);
    }
    for s in 1..steps.len() {
        if lens[s] <= lens[s - 1] {
            return None;
        }
        for ((_, prev), (_, cur)) in steps[s - 1].runs.iter().zip(&steps[s].runs) {
            let p = &records[prev.clone()];
            let c = &records[cur.start..cur.start + prev.len()];
            if p != c {
                return None;
            }
        }
    }
    let top_k = lens.iter().fold(0usize, |g, &n| gcd(g, n));
    let mut out = Vec::with_capacity(lens[lens.len() - 1] * layers.len());
    out.extend_from_slice(&records[steps[0].runs[0].1.start..steps[0].runs.last()?.1.end]);
    for s in 1..steps.len() {
        for (_, r) in &steps[s].runs {
            out.extend_from_slice(&records[r.start + lens[s - 1]..r.end]);
        }
    }
    Some(Incremental {
        steps: steps.len(),
        moe_layers: layers.len(),
        top_k,
        positions: lens.iter().map(|n| n / top_k).collect(),
        records: out,
    })
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// An expert source that also writes every request to the `--dump-cache-trace` files
/// (FORMATS.md §8: per chunk, per MoE layer ascending, positions ascending, selection order —
/// the order in which the MoE block reports its requests). Without a writer it only passes the
/// calls on.
pub struct Traced<S: ExpertSource> {
    /// The traced source.
    pub inner: S,
    trace: Option<TraceWriter>,
}

impl<S: ExpertSource> Traced<S> {
    /// `inner`, recording its requests to `trace` when given.
    pub fn new(inner: S, trace: Option<TraceWriter>) -> Traced<S> {
        Traced { inner, trace }
    }

    /// Writes the histogram and renames the trace files into place (see
    /// [`TraceWriter::finish`]); nothing without a writer. Errors: exit 4.
    pub fn finish_trace(&mut self) -> Result<()> {
        match self.trace.take() {
            Some(t) => t.finish(),
            None => Ok(()),
        }
    }
}

impl<S: ExpertSource> ExpertSource for Traced<S> {
    fn max_batch(&self) -> usize {
        self.inner.max_batch()
    }
    fn note_requests(&mut self, layer: usize, requests: &[u32]) -> Result<()> {
        if let Some(t) = &mut self.trace {
            t.record(layer as u32, requests)?;
        }
        self.inner.note_requests(layer, requests)
    }
    fn with_experts(
        &mut self,
        layer: usize,
        experts: &[u32],
        f: &mut UseExperts<'_>,
    ) -> Result<()> {
        self.inner.with_experts(layer, experts, f)
    }
    fn stats(&self) -> ExpertStats {
        self.inner.stats()
    }
}
