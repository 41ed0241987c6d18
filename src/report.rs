//! The run report (ENGINE.md §6): the text on standard error and the JSON written by `--out`
//! (FORMATS.md §10), carrying the same figures. The JSON is written through a temporary file
//! and a rename, also after a failure (with `error` set).

use crate::error::{Error, Result};
use crate::model::experts::ExpertStats;
use crate::plan::MemoryPlan;
use crate::stream::expert_cache::CacheStats;
use crate::stream::tables::TableStats;
use crate::stream::trunk::TrunkStats;
use crate::units::{count, gb, hex};

mod json;

/// The report's `state` object (FORMATS.md §10): the session state files of the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateReport {
    /// `--load-state` path.
    pub loaded: Option<String>,
    /// `--save-state` path, once saved.
    pub saved: Option<String>,
    /// Positions in the loaded state.
    pub n_pos_loaded: u64,
    /// Ids generated before (the loaded header's stats).
    pub generated_before: u64,
    /// Sampler settings the run replaced (JSON keys).
    pub sampler_changed: Vec<String>,
    /// Ids this run ran through the model before its first choice.
    pub prefilled_ids: u64,
}

/// The report's `batch` object (FORMATS.md §10) of a `--batch` run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchReport {
    /// Inputs of the batch file.
    pub sequences: u64,
    /// `--parallel`.
    pub parallel: u64,
    /// Steps (forwards) over the active sequences.
    pub sweeps: u64,
    /// Ids generated over every sequence.
    pub tokens: u64,
    /// tokens ÷ the steps' seconds.
    pub tokens_per_second: f64,
}

/// The report's `sampling` object (FORMATS.md §10): greedy is temperature 0, seed null.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingReport {
    /// T (0 = greedy).
    pub temperature: f64,
    /// P in (0, 1].
    pub top_p: f64,
    /// K (0 = off).
    pub top_k: u64,
    /// M in [0, 1).
    pub min_p: f64,
    /// The seed of a sampled run (given or from the OS); None when greedy.
    pub seed: Option<u64>,
}

impl Default for SamplingReport {
    fn default() -> SamplingReport {
        SamplingReport {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            seed: None,
        }
    }
}

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
    /// Trunk and model-table bytes read during that forward.
    pub dense_bytes_read: u64,
    /// Index of that forward (0 = the prefill); several ids share one under speculation.
    pub sweep: u64,
    /// Ids that forward produced (1 without speculation; the step line shows it under it).
    pub sweep_ids: u64,
}

/// The report's `speculation` object (FORMATS.md §10) of a `--spec K` run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecReport {
    /// `--spec K`.
    pub max_draft: u64,
    /// Forwards the generated ids were chosen from (the prefill included).
    pub sweeps: u64,
    /// Forwards that verified drafted ids.
    pub verify_sweeps: u64,
    /// Drafted ids run as rows.
    pub drafted: u64,
    /// Drafted ids the model chose too.
    pub accepted: u64,
    /// Ids generated.
    pub tokens: u64,
    /// Seconds of the verifying forwards (and of the recomputes after a stop in a draft).
    pub verify_seconds: f64,
}

impl SpecReport {
    /// accepted ÷ drafted (0 without drafts).
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
    /// Ids generated ÷ sweeps (1 without accepted drafts; 0 without ids).
    pub fn ids_per_sweep(&self) -> f64 {
        if self.sweeps == 0 {
            0.0
        } else {
            self.tokens as f64 / self.sweeps as f64
        }
    }
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
    /// The session state files (FORMATS.md §10 `state`); None when neither was given.
    pub state: Option<StateReport>,
    /// The `--batch` totals (FORMATS.md §10 `batch`); None for one sequence.
    pub batch: Option<BatchReport>,
    /// The `--spec K` counters (FORMATS.md §10 `speculation`); None without speculation.
    pub speculation: Option<SpecReport>,
    /// The sampler settings (FORMATS.md §10 `sampling`; ENGINE.md §8).
    pub sampling: SamplingReport,
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
    /// The trunk's configuration and counters.
    pub trunk: TrunkReport,
    /// The expert cache's policy and counters (evictions, hits, …).
    pub cache_policy: String,
    pub cache: CacheStats,
    /// Bound experts (the share of the pool the cache holds is `expert_slots` ÷ this).
    pub experts_bound: usize,
    /// Model tables streamed, and their counters.
    pub tables_streamed: bool,
    pub tables: TableStats,
    /// Budget name (`auto`, a preset, `mem-gb`) and the whole-process budget when known.
    pub budget_name: String,
    pub budget: Option<u64>,
    pub error: Option<Error>,
}

/// The trunk line and report (ENGINE.md §6; FORMATS.md §10 `trunk`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrunkReport {
    /// Read from a packed trunk, and `trunk.bin`'s length.
    pub packed: bool,
    pub packed_bytes: u64,
    /// The packed trunk's codec when its blocks are decoded (docs/formats.md), else None.
    pub codec: Option<String>,
    /// Pinned layers (indices) and their buffer bytes.
    pub pinned: Vec<usize>,
    pub pinned_bytes: u64,
    /// Ring slots and bytes per slot.
    pub ring_slots: usize,
    pub slot_bytes: u64,
    /// Bulk reads through O_DIRECT (false after a buffered fallback).
    pub direct_io: bool,
    /// Why this pinned set.
    pub reason: String,
    /// Counters.
    pub stats: TrunkStats,
}

impl RunReport {
    /// pinned ÷ bound layers (ENGINE.md §5: pinning hits exactly that share).
    pub fn deterministic_hit_rate(&self) -> f64 {
        if self.layers_bound == 0 {
            0.0
        } else {
            self.trunk.pinned.len() as f64 / self.layers_bound as f64
        }
    }

    /// (trunk + expert + model-table read seconds) ÷ wall seconds (FORMATS.md §10; may
    /// exceed 1 when reads overlap each other or compute).
    pub fn io_share(&self) -> f64 {
        let w = self.timing.wall_seconds;
        if w > 0.0 {
            (self.trunk.stats.read_seconds + self.cache.read_seconds + self.tables.read_seconds) / w
        } else {
            0.0
        }
    }

    /// The trunk line printed before the run (ENGINE.md §6): where the trunk lives (packed and
    /// its file size, or the shards), the ring, the read mode, the deterministic trunk hit rate
    /// and why this pinned set (the pinned count and bytes).
    pub fn trunk_line(&self) -> String {
        let tr = &self.trunk;
        format!(
            "trunk: {}, ring {} × {}, {}, deterministic trunk hit rate {}: {}",
            if tr.packed {
                match &tr.codec {
                    Some(c) => format!("packed trunk.bin ({}, codec {c})", gb(tr.packed_bytes)),
                    None => format!("packed trunk.bin ({})", gb(tr.packed_bytes)),
                }
            } else {
                "read from the shards (not packed)".to_string()
            },
            tr.ring_slots,
            gb(tr.slot_bytes),
            if tr.direct_io {
                "O_DIRECT"
            } else {
                "buffered + DONTNEED"
            },
            percent(self.deterministic_hit_rate()),
            tr.reason
        )
    }

    /// The expert-cache line printed before the run (ENGINE.md §6): slots × bytes, the share of
    /// the bound experts it holds, the policy.
    pub fn cache_line(&self) -> String {
        format!(
            "expert cache: {} × {} ({}), {} of the {} bound experts, policy {}",
            count(self.expert_slots as u64, "slot", "slots"),
            gb(self.expert_slot_bytes),
            gb(self.expert_slots as u64 * self.expert_slot_bytes),
            percent(if self.experts_bound > 0 {
                self.expert_slots as f64 / self.experts_bound as f64
            } else {
                0.0
            }),
            self.experts_bound,
            self.cache_policy
        )
    }

    /// The JSON report text (FORMATS.md §10), pretty-printed, ending in a newline.
    pub fn json_text(&self) -> String {
        let mut text = self.to_json().to_json_pretty();
        text.push('\n');
        text
    }

    /// Writes the JSON to `out` (opened before the run) and renames it into place (never a
    /// half-written report).
    ///
    /// Errors: exit 3 on a full disk, else exit 4 ([`crate::io::out`]).
    pub fn write_json(&self, mut out: crate::io::OutFile) -> Result<()> {
        out.write_all(self.json_text().as_bytes())?;
        out.commit()
    }

    /// The per-step line (ENGINE.md §6).
    pub fn step_line(&self, i: usize) -> String {
        let s = &self.steps[i];
        let rate = if s.seconds > 0.0 {
            1.0 / s.seconds
        } else {
            0.0
        };
        let line = format!(
            "step {:>4}: token {:>7}  {:>8.4} s  experts resident {} / read {}  {} read  {:.2} tokens/s",
            i + 1,
            s.token_id,
            s.seconds,
            s.experts.resident_hits,
            s.experts.reads,
            gb(s.experts.bytes_read + s.dense_bytes_read),
            rate
        );
        // under speculation: which sweep, and on its first id how many ids it produced
        match self.speculation {
            Some(_) if i > 0 && self.steps[i - 1].sweep == s.sweep => {
                format!("{line}  (sweep {}, same sweep)", s.sweep)
            }
            Some(_) => format!(
                "{line}  (sweep {}: {})",
                s.sweep,
                crate::units::count(s.sweep_ids, "id", "ids")
            ),
            None => line,
        }
    }

    /// Ids generated: the run's, or with `--batch` every sequence's together.
    pub fn generated_count(&self) -> usize {
        match &self.batch {
            Some(b) => b.tokens as usize,
            None => self.generated_ids.len(),
        }
    }

    /// Bytes read per generated token: every expert, trunk and model-table byte read during
    /// the run ÷ generated tokens (every sequence's with `--batch`; 0 without tokens).
    pub fn bytes_per_token(&self) -> u64 {
        let n = self.generated_count() as u64;
        let total = self.cache.bytes_read
            + self.trunk.stats.bytes_read
            + self.tables.embedding_bytes_read
            + self.tables.lm_head_bytes_read;
        total.checked_div(n).unwrap_or(0)
    }

    /// The summary (ENGINE.md §6), one line each: tokens and time, the expert cache, the
    /// trunk with the I/O share, the logits hash (`logits hash: <16 hex>`), peak RSS. Sizes
    /// in [`gb`]'s style; counts with their noun.
    pub fn summary_lines(&self) -> String {
        let n = self.generated_count();
        let spt = self.timing.seconds_per_token(n);
        let (c, t, tr) = (&self.cache, &self.timing, &self.trunk.stats);
        let rate = |b: u64, s: f64| gb(if s > 0.0 { (b as f64 / s) as u64 } else { 0 });
        // what ran, and how it ended (a batch: its totals; each sequence's ids, stop and hash
        // are on its own line)
        let (what, stop) = match &self.batch {
            Some(b) => (
                format!(
                    "batch of {} (--parallel {}), {} in {}",
                    count(b.sequences, "sequence", "sequences"),
                    b.parallel,
                    count(b.tokens, "generated token", "generated tokens"),
                    count(b.sweeps, "sweep", "sweeps"),
                ),
                String::new(),
            ),
            None => (
                format!(
                    "{} + {}",
                    count(
                        self.prompt_ids.len() as u64,
                        "prompt token",
                        "prompt tokens"
                    ),
                    count(n as u64, "generated token", "generated tokens"),
                ),
                format!(", stop: {}", self.stop_reason),
            ),
        };
        let mut s = format!(
            "summary: {what}, {:.3} s wall (load {:.3} s, prefill {:.3} s, decode {:.3} s), {:.4} s/token, {:.2} tokens/s, {} read per token{stop}\n",
            t.wall_seconds,
            t.load_seconds,
            t.prefill_seconds,
            t.decode_seconds,
            spt,
            if spt > 0.0 { 1.0 / spt } else { 0.0 },
            gb(self.bytes_per_token()),
        );
        if let Some(p) = &self.speculation {
            s += &format!(
                "speculation: --spec {}, {} of {} accepted ({}), {:.2} ids per sweep over {}, verify {:.3} s\n",
                p.max_draft,
                p.accepted,
                count(p.drafted, "drafted id", "drafted ids"),
                percent(p.acceptance_rate()),
                p.ids_per_sweep(),
                count(p.sweeps, "sweep", "sweeps"),
                p.verify_seconds
            );
        }
        s += &format!(
            "expert cache: true resident hit rate {} ({} of {} found their expert already in memory, not read for them), {} served by a read of the same batch, {}, {}, {} read in {:.3} s ({}/s)\n",
            percent(c.true_resident_hit_rate()),
            c.true_resident_hits,
            count(c.requests, "request", "requests"),
            c.hits - c.true_resident_hits.min(c.hits),
            count(c.reads, "read", "reads"),
            count(c.evictions, "eviction", "evictions"),
            gb(c.bytes_read),
            c.read_seconds,
            rate(c.bytes_read, c.read_seconds)
        );
        s += &format!(
            "trunk: {}, {}, {} ({} ahead), {} read in {:.3} s ({}/s), {:.3} s waited; I/O {} of wall clock\n",
            count(tr.binds, "bind", "binds"),
            count(tr.hits, "hit", "hits"),
            count(tr.reads, "read", "reads"),
            tr.reads_ahead,
            gb(tr.bytes_read),
            tr.read_seconds,
            rate(tr.bytes_read, tr.read_seconds),
            tr.wait_seconds,
            percent(self.io_share())
        );
        if self.tables_streamed {
            s += &format!(
                "model tables: streamed, embedding {} and lm_head {} read in {:.3} s\n",
                gb(self.tables.embedding_bytes_read),
                gb(self.tables.lm_head_bytes_read),
                self.tables.read_seconds
            );
        }
        if self.batch.is_some() {
            s += "logits hash: one per sequence, on its output line\n";
        } else {
            s += &format!(
                "logits hash: {} ({})\n",
                hex(self.logits_hash),
                count(self.logits_hashed as u64, "vector", "vectors")
            );
        }
        s += &format!("peak RSS: {}", gb(self.peak_rss_bytes));
        s
    }

    /// The one-line live status during decode (ENGINE.md §6, a terminal only): tokens so far
    /// of `gen`, the last step's seconds and bytes read, the true resident hit rate so far.
    pub fn status_line(&self, i: usize, gen: usize) -> String {
        let s = &self.steps[i];
        format!(
            "decode: token {}/{gen}, {:.4} s, {} read, experts resident {} / read {}",
            i + 1,
            s.seconds,
            gb(s.experts.bytes_read + s.dense_bytes_read),
            s.experts.resident_hits,
            s.experts.reads
        )
    }
}

/// A share as a percentage with one decimal: `71.9 %`.
fn percent(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}
