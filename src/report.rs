//! The run report (ENGINE.md §6): the text on standard error and the JSON written by `--out`
//! (FORMATS.md §10), carrying the same figures. The JSON is written through a temporary file
//! and a rename, also after a failure (with `error` set).

use crate::error::{Error, Result};
use crate::fnv::hex;
use crate::json::{Object, Value};
use crate::model::experts::ExpertStats;
use crate::plan::{gb, MemoryPlan};
use std::path::Path;

/// One generated token (FORMATS.md §10 `steps`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReport {
    /// The chosen id.
    pub token_id: u32,
    /// Seconds of the forward that produced the logits choosing this token (the whole prefill
    /// for the first token).
    pub seconds: f64,
    /// FNV-1a-64 of that logits vector alone.
    pub logits_fnv1a64: u64,
    /// Expert counters during that forward.
    pub experts: ExpertStats,
}

/// Timings in seconds (FORMATS.md §10 `timing`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timing {
    pub wall_seconds: f64,
    pub load_seconds: f64,
    /// The prompt's forward (all chunks; full recompute: the first step's forward).
    pub prefill_seconds: f64,
    /// Every later forward.
    pub decode_seconds: f64,
}

impl Timing {
    /// Seconds per generated token after the first: decode time ÷ decode steps; with one
    /// token, the prefill time; 0 without tokens.
    pub fn seconds_per_token(&self, n_generated: usize) -> f64 {
        match n_generated {
            0 => 0.0,
            1 => self.prefill_seconds,
            n => self.decode_seconds / (n - 1) as f64,
        }
    }
}

/// Everything a run reports.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    pub model_dir: String,
    /// `nested` or `flat`.
    pub config_shape: String,
    pub config_fingerprint: u64,
    pub weights_tag: Option<u64>,
    pub isa: String,
    pub threads: usize,
    pub mla_form: String,
    /// `incremental` or `full_recompute`.
    pub mode: String,
    pub layers: usize,
    pub layers_bound: usize,
    pub layers_completed: usize,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    pub generated_text: Option<String>,
    /// `length`, `end_of_turn`, `stop_id` or `error`.
    pub stop_reason: String,
    /// FNV-1a-64 over every logits vector used to choose a token (for `--gen 0`: every
    /// teacher-forced row), in order.
    pub logits_hash: u64,
    /// Number of logits vectors hashed.
    pub logits_hashed: usize,
    pub steps: Vec<StepReport>,
    pub timing: Timing,
    pub peak_rss_bytes: u64,
    pub plan: Option<MemoryPlan>,
    /// Expert buffers of the source and bytes per expert.
    pub expert_slots: usize,
    pub expert_slot_bytes: u64,
    pub experts: ExpertStats,
    /// Trunk bytes held resident.
    pub trunk_bytes: u64,
    pub error: Option<Error>,
}

fn stats_obj(o: Object, s: &ExpertStats) -> Object {
    o.with("expert_requests", s.requests)
        .with("expert_resident_hits", s.resident_hits)
        .with("expert_reads", s.reads)
        .with("bytes_read", s.bytes_read)
}

impl RunReport {
    /// The JSON document of FORMATS.md §10.
    pub fn to_json(&self) -> Value {
        let n = self.generated_ids.len();
        let spt = self.timing.seconds_per_token(n);
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                stats_obj(
                    Object::new()
                        .with("token_id", s.token_id)
                        .with("seconds", s.seconds)
                        .with("logits_fnv1a64", hex(s.logits_fnv1a64)),
                    &s.experts,
                )
                .into()
            })
            .collect();
        let mut full = self.prompt_ids.clone();
        full.extend(&self.generated_ids);
        let plan = self.plan.as_ref().map(|p| {
            Value::from(
                Object::new()
                    .with("trunk_resident", p.trunk_resident)
                    .with("trunk_ring", p.trunk_ring)
                    .with("model_tables", p.model_tables)
                    .with("expert_cache", p.expert_cache)
                    .with("kda_state", p.kda_state)
                    .with("mla_cache", p.mla_cache)
                    .with("scratch", p.scratch)
                    .with("tokenizer", p.tokenizer)
                    .with("tensor_index", p.tensor_index)
                    .with("total", p.total)
                    .with("available", p.available),
            )
        });
        let e = &self.experts;
        let wall = self.timing.wall_seconds;
        Object::new()
            .with("report_version", 1u64)
            .with("engine_version", crate::VERSION)
            .with("model_dir", self.model_dir.as_str())
            .with("config_shape", self.config_shape.as_str())
            .with("config_fingerprint", hex(self.config_fingerprint))
            .with("weights_tag", self.weights_tag.map(hex))
            .with(
                "numerics",
                Object::new()
                    .with("version", 1u64)
                    .with("isa", self.isa.as_str())
                    .with("threads", self.threads)
                    .with("mla_form", self.mla_form.as_str()),
            )
            .with("mode", self.mode.as_str())
            .with(
                "sampling",
                Object::new()
                    .with("temperature", 0.0)
                    .with("top_p", 1.0)
                    .with("top_k", 0u64)
                    .with("seed", Value::Null),
            )
            .with("layers", self.layers)
            .with("layers_bound", self.layers_bound)
            .with("layers_completed", self.layers_completed)
            .with("prompt_ids", self.prompt_ids.clone())
            .with("generated_ids", self.generated_ids.clone())
            .with("full_ids", full)
            .with("generated_text", self.generated_text.clone())
            .with("stop_reason", self.stop_reason.as_str())
            .with("logits_hash", hex(self.logits_hash))
            .with("logits_hashed_vectors", self.logits_hashed)
            .with("steps", Value::Array(steps))
            .with(
                "timing",
                Object::new()
                    .with("wall_seconds", wall)
                    .with("load_seconds", self.timing.load_seconds)
                    .with("prefill_seconds", self.timing.prefill_seconds)
                    .with("decode_seconds", self.timing.decode_seconds)
                    .with("seconds_per_token", spt)
                    .with("tokens_per_second", if spt > 0.0 { 1.0 / spt } else { 0.0 }),
            )
            .with(
                "memory",
                Object::new()
                    .with("peak_rss_bytes", self.peak_rss_bytes)
                    .with("plan", plan),
            )
            .with(
                "trunk",
                Object::new()
                    .with("packed", false)
                    .with("packed_bytes", 0u64)
                    .with("pinned_layers", self.layers_bound)
                    .with("pinned_bytes", self.trunk_bytes)
                    .with("ring_slots", 0u64)
                    .with("slot_bytes", 0u64)
                    .with("direct_io", false)
                    .with(
                        "deterministic_hit_rate",
                        if self.layers_bound > 0 { 1.0 } else { 0.0 },
                    )
                    .with("binds", 0u64)
                    .with("hits", 0u64)
                    .with("bytes_read", 0u64)
                    .with("read_seconds", 0.0),
            )
            .with(
                "expert_cache",
                Object::new()
                    .with("slots", self.expert_slots)
                    .with("slot_bytes", self.expert_slot_bytes)
                    .with("requests", e.requests)
                    .with("hits", e.resident_hits)
                    .with("prefetch_reads", 0u64)
                    .with("true_resident_hits", e.resident_hits)
                    .with(
                        "true_resident_hit_rate",
                        if e.requests > 0 {
                            e.resident_hits as f64 / e.requests as f64
                        } else {
                            0.0
                        },
                    )
                    .with("reads", e.reads)
                    .with("evictions", 0u64)
                    .with("bytes_read", e.bytes_read)
                    .with("read_seconds", e.read_seconds),
            )
            .with(
                "io",
                Object::new()
                    .with("embedding_bytes_read", 0u64)
                    .with("lm_head_bytes_read", 0u64)
                    .with("model_table_read_seconds", 0.0)
                    .with(
                        "io_share",
                        if wall > 0.0 {
                            e.read_seconds / wall
                        } else {
                            0.0
                        },
                    ),
            )
            .with(
                "state",
                Object::new()
                    .with("loaded", Value::Null)
                    .with("saved", Value::Null)
                    .with("n_pos_loaded", 0u64),
            )
            .with(
                "error",
                self.error.as_ref().map(|e| {
                    Value::from(
                        Object::new()
                            .with("kind", e.kind.name())
                            .with("message", e.message.as_str())
                            .with("exit_code", e.exit_code() as i64),
                    )
                }),
            )
            .into()
    }

    /// Writes the JSON to `path` via `<path>.tmp` and a rename (never a half-written report).
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let mut text = self.to_json().to_json_pretty();
        text.push('\n');
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| Error::io(format!("{}: cannot write the report: {e}", path.display())))
    }

    /// The per-step line (ENGINE.md §6).
    pub fn step_line(&self, i: usize) -> String {
        let s = &self.steps[i];
        let rate = if s.seconds > 0.0 {
            1.0 / s.seconds
        } else {
            0.0
        };
        format!(
            "step {:>4}: token {:>7}  {:>8.4} s  experts resident {} / read {}  {:.3} GB read  {:.2} tokens/s",
            i + 1,
            s.token_id,
            s.seconds,
            s.experts.resident_hits,
            s.experts.reads,
            s.experts.bytes_read as f64 / 1e9,
            rate
        )
    }

    /// The summary, cache, trunk, I/O, hash and RSS lines (ENGINE.md §6), in that order.
    pub fn summary_lines(&self) -> String {
        let n = self.generated_ids.len();
        let spt = self.timing.seconds_per_token(n);
        let e = &self.experts;
        let t = &self.timing;
        let mbs = if e.read_seconds > 0.0 {
            e.bytes_read as f64 / 1e6 / e.read_seconds
        } else {
            0.0
        };
        let io_share = if t.wall_seconds > 0.0 {
            e.read_seconds / t.wall_seconds
        } else {
            0.0
        };
        let mut s = String::new();
        s += &format!(
            "summary: {} prompt + {n} generated tokens, {:.3} s wall (load {:.3} s, prefill {:.3} s, decode {:.3} s), {:.4} s/token, {:.2} tokens/s, stop: {}\n",
            self.prompt_ids.len(),
            t.wall_seconds,
            t.load_seconds,
            t.prefill_seconds,
            t.decode_seconds,
            spt,
            if spt > 0.0 { 1.0 / spt } else { 0.0 },
            self.stop_reason
        );
        s += &format!(
            "experts: {} requests, {} true resident hits, {} reads, 0 evictions, {} read at {:.1} MB/s\n",
            e.requests,
            e.resident_hits,
            e.reads,
            gb(e.bytes_read),
            mbs
        );
        s += &format!(
            "trunk: resident, {} binds from memory, 0 GB read\n",
            self.layers_bound
        );
        s += &format!("I/O share of wall clock: {:.1} %\n", io_share * 100.0);
        s += &format!(
            "logits hash: {} ({} vectors)\n",
            hex(self.logits_hash),
            self.logits_hashed
        );
        s += &format!("peak RSS: {}", gb(self.peak_rss_bytes));
        s
    }
}
