//! The arithmetic of the end-to-end benchmark (ENGINE.md §7): medians and spread of repeated
//! runs, the bytes one decode step multiplies (from `k3 inspect --json`), the bytes it reads
//! (from the run report of FORMATS.md §10), and the roofline ratio
//!
//! ```text
//! roofline time = max(bytes read per token / device bandwidth,
//!                     bytes multiplied per token / memory bandwidth)
//! roofline ratio = roofline time / measured s/token        (1.0 = at the machine's limit)
//! ```
//!
//! Both limits are measured in the same run as the engine (`device`, `membw`), so the ratio
//! means the same thing on a quiet and on a busy machine. Everything here is pure arithmetic
//! over parsed JSON, unit-tested without timing anything.

use serde_json::Value;

/// Median, minimum and maximum of repeated measurements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median (the mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Number of values.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`, or None when there are none or one is not finite.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// (max − min) / median: the relative spread, 0 for one value.
    pub fn relative(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }
}

/// The bytes one decode step multiplies, from the byte ledger of `k3 inspect --json`
/// (MODEL.md §9): every trunk tensor of every layer, the lm_head, one embedding row, and Kt
/// routed experts in each MoE layer. This is what must cross the memory bus at least once per
/// token wherever the bytes come from, so it sets the memory roofline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepBytes {
    /// All trunk runs (`ledger.trunk_bytes`).
    pub trunk: u64,
    /// `lm_head` (vocab × hidden × 2; the embedding table when tied).
    pub lm_head: u64,
    /// One BF16 embedding row (hidden × 2).
    pub embedding_row: u64,
    /// Routed experts per token: MoE layers × `num_experts_per_token`.
    pub experts_per_token: u64,
    /// Bytes of one routed expert (`ledger.experts.bytes_per_expert`).
    pub expert_bytes: u64,
    /// Every routed expert of the checkpoint (`ledger.experts.bytes`).
    pub all_expert_bytes: u64,
    /// The model tables (`ledger.model_table_bytes`).
    pub model_tables: u64,
}

impl StepBytes {
    /// Reads the ledger and config of `k3 inspect --json`; an error names the missing key.
    pub fn from_inspect(v: &Value) -> Result<StepBytes, String> {
        let hidden = u(v, &["config", "hidden_size"])?;
        let vocab = u(v, &["config", "vocab_size"])?;
        let topk = u(v, &["config", "num_experts_per_token"])?;
        let n_moe = u(v, &["config", "derived", "n_moe"])?;
        Ok(StepBytes {
            trunk: u(v, &["ledger", "trunk_bytes"])?,
            lm_head: vocab * hidden * 2,
            embedding_row: hidden * 2,
            experts_per_token: n_moe * topk,
            expert_bytes: u(v, &["ledger", "experts", "bytes_per_expert"])?,
            all_expert_bytes: u(v, &["ledger", "experts", "bytes"])?,
            model_tables: u(v, &["ledger", "model_table_bytes"])?,
        })
    }

    /// Routed expert bytes one token multiplies.
    pub fn experts(&self) -> u64 {
        self.experts_per_token * self.expert_bytes
    }

    /// Every byte one decode step multiplies.
    pub fn multiplied(&self) -> u64 {
        self.trunk + self.lm_head + self.embedding_row + self.experts()
    }

    /// Bytes of a fully resident model: trunk, model tables and every expert.
    pub fn resident_model(&self) -> u64 {
        self.trunk + self.model_tables + self.all_expert_bytes
    }
}

/// The figures of one run, from its `--out` JSON (FORMATS.md §10). Per-token byte figures are
/// decode-step figures: the first step also carries the prefill, so it is left out.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFigures {
    /// `timing.seconds_per_token` (decode steps).
    pub s_per_token: f64,
    /// `timing.load_seconds`, `prefill_seconds`, `wall_seconds`.
    pub load_s: f64,
    pub prefill_s: f64,
    pub wall_s: f64,
    /// `logits_hash`.
    pub logits_hash: String,
    /// `generated_ids.len()`.
    pub generated: usize,
    /// Expert bytes read per decode step (mean of `steps[1..].expert_bytes_read`, or of
    /// `bytes_read` in reports that count only experts per step).
    pub expert_bytes_per_token: f64,
    /// Trunk bytes read per decode step (see [`RunFigures::from_report`]).
    pub trunk_bytes_per_token: f64,
    /// Model-table bytes (`io.embedding_bytes_read` + `io.lm_head_bytes_read`) read per decode
    /// step (see [`RunFigures::from_report`]).
    pub table_bytes_per_token: f64,
    /// `io.io_share` (whole run, as the engine reports it).
    pub io_share: f64,
    /// Read seconds over the whole run: experts, trunk, model tables.
    pub expert_read_s: f64,
    pub trunk_read_s: f64,
    pub table_read_s: f64,
    /// Bytes read over the whole run: experts, trunk, model tables.
    pub expert_bytes_total: u64,
    pub trunk_bytes_total: u64,
    pub table_bytes_total: u64,
    /// `memory.peak_rss_bytes` and `memory.plan.total`.
    pub peak_rss: u64,
    pub plan_total: u64,
    /// `memory.plan.trunk_resident`, `trunk_ring`, `model_tables`, `expert_cache`.
    pub plan_trunk_resident: u64,
    pub plan_trunk_ring: u64,
    pub plan_model_tables: u64,
    pub plan_expert_cache: u64,
    /// `trunk.pinned_layers` of `layers`, `trunk.ring_slots`, `expert_cache.slots`.
    pub pinned_layers: u64,
    pub layers: u64,
    pub ring_slots: u64,
    pub cache_slots: u64,
    /// `expert_cache.true_resident_hit_rate`.
    pub expert_hit_rate: f64,
    /// `trunk.wait_seconds` (time the forward waited for trunk reads), `trunk.reads`,
    /// `trunk.reads_ahead` (reads issued ahead of their layer); 0 in reports without them.
    pub trunk_wait_s: f64,
    pub trunk_reads: u64,
    pub trunk_reads_ahead: u64,
    /// Forward passes of the run (see [`forwards`]).
    pub forwards: usize,
    /// Whether the per-token bytes come from per-step counters (exact) rather than run totals
    /// ÷ forward passes.
    pub per_step_bytes: bool,
}

/// Forward passes of a run: one per prefill chunk, then one per generated token after the
/// first (the first token comes from the prefill's last logits).
pub fn forwards(prompt_len: usize, chunk: usize, generated: usize) -> usize {
    prompt_len.div_ceil(chunk.max(1)) + generated.saturating_sub(1)
}

impl RunFigures {
    /// Reads a run report. `chunk` is the run's `--prefill-chunk`. An error names the missing
    /// or mistyped field.
    pub fn from_report(v: &Value, chunk: usize) -> Result<RunFigures, String> {
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            return Err(format!("the run failed: {e}"));
        }
        let steps = get(v, &["steps"])?
            .as_array()
            .ok_or("steps: expected an array")?;
        let generated = get(v, &["generated_ids"])?
            .as_array()
            .ok_or("generated_ids: expected an array")?
            .len();
        let prompt = get(v, &["prompt_ids"])?
            .as_array()
            .ok_or("prompt_ids: expected an array")?
            .len();
        if steps.len() < 2 {
            return Err(format!(
                "steps: {} step(s); per-token figures need at least 2 generated tokens (--gen 2)",
                steps.len()
            ));
        }
        let fw = forwards(prompt, chunk, generated).max(1) as f64;
        let trunk_total = u(v, &["trunk", "bytes_read"])?;
        let table_total =
            u(v, &["io", "embedding_bytes_read"])? + u(v, &["io", "lm_head_bytes_read"])?;
        let decode = &steps[1..];
        let mean = |key: &str| -> Result<f64, String> {
            let mut sum = 0u64;
            for (i, s) in decode.iter().enumerate() {
                sum += s.get(key).and_then(Value::as_u64).ok_or_else(|| {
                    format!("steps[{}].{key}: expected a non-negative integer", i + 1)
                })?;
            }
            Ok(sum as f64 / decode.len() as f64)
        };
        // Reports that split a step's reads (`expert_bytes_read`, and `trunk_bytes_read` =
        // trunk + model tables read during that forward) give exact decode figures; the
        // trunk/table split of the latter follows the run totals. Older reports count only
        // expert bytes per step: trunk and tables are then run totals ÷ forward passes.
        let per_step = decode[0].get("expert_bytes_read").is_some();
        let (expert_pt, trunk_pt, table_pt) = if per_step {
            let dense = mean("trunk_bytes_read")?;
            let all = (trunk_total + table_total) as f64;
            let trunk_share = if all > 0.0 {
                trunk_total as f64 / all
            } else {
                1.0
            };
            (
                mean("expert_bytes_read")?,
                dense * trunk_share,
                dense * (1.0 - trunk_share),
            )
        } else {
            (
                mean("bytes_read")?,
                trunk_total as f64 / fw,
                table_total as f64 / fw,
            )
        };
        Ok(RunFigures {
            s_per_token: f(v, &["timing", "seconds_per_token"])?,
            load_s: f(v, &["timing", "load_seconds"])?,
            prefill_s: f(v, &["timing", "prefill_seconds"])?,
            wall_s: f(v, &["timing", "wall_seconds"])?,
            logits_hash: get(v, &["logits_hash"])?
                .as_str()
                .ok_or("logits_hash: expected a string")?
                .to_string(),
            generated,
            expert_bytes_per_token: expert_pt,
            trunk_bytes_per_token: trunk_pt,
            table_bytes_per_token: table_pt,
            per_step_bytes: per_step,
            io_share: f(v, &["io", "io_share"])?,
            expert_read_s: f(v, &["expert_cache", "read_seconds"])?,
            trunk_read_s: f(v, &["trunk", "read_seconds"])?,
            table_read_s: f(v, &["io", "model_table_read_seconds"])?,
            expert_bytes_total: u(v, &["expert_cache", "bytes_read"])?,
            trunk_bytes_total: trunk_total,
            table_bytes_total: table_total,
            peak_rss: u(v, &["memory", "peak_rss_bytes"])?,
            plan_total: u(v, &["memory", "plan", "total"])?,
            plan_trunk_resident: u(v, &["memory", "plan", "trunk_resident"])?,
            plan_trunk_ring: u(v, &["memory", "plan", "trunk_ring"])?,
            plan_model_tables: u(v, &["memory", "plan", "model_tables"])?,
            plan_expert_cache: u(v, &["memory", "plan", "expert_cache"])?,
            pinned_layers: u(v, &["trunk", "pinned_layers"])?,
            layers: u(v, &["layers_bound"])?,
            ring_slots: u(v, &["trunk", "ring_slots"])?,
            cache_slots: u(v, &["expert_cache", "slots"])?,
            expert_hit_rate: f(v, &["expert_cache", "true_resident_hit_rate"])?,
            trunk_wait_s: v["trunk"]["wait_seconds"].as_f64().unwrap_or(0.0),
            trunk_reads: v["trunk"]["reads"].as_u64().unwrap_or(0),
            trunk_reads_ahead: v["trunk"]["reads_ahead"].as_u64().unwrap_or(0),
            forwards: fw as usize,
        })
    }

    /// All bytes read per decode token: trunk + experts + model tables.
    pub fn bytes_read_per_token(&self) -> f64 {
        self.trunk_bytes_per_token + self.expert_bytes_per_token + self.table_bytes_per_token
    }

    /// Read seconds of one decode token, estimated: each kind's read seconds over the run
    /// scaled by the share of its bytes that one decode token reads (the reports give read
    /// seconds for the whole run only). Compared with s/token it splits a step into time spent
    /// reading and the rest; reads that overlap compute make the two sum to more than the step.
    pub fn io_s_per_token(&self) -> f64 {
        let part = |secs: f64, per_token: f64, total: u64| {
            if total > 0 {
                secs * per_token / total as f64
            } else {
                0.0
            }
        };
        part(
            self.expert_read_s,
            self.expert_bytes_per_token,
            self.expert_bytes_total,
        ) + part(
            self.trunk_read_s,
            self.trunk_bytes_per_token,
            self.trunk_bytes_total,
        ) + part(
            self.table_read_s,
            self.table_bytes_per_token,
            self.table_bytes_total,
        )
    }

    /// The fastest kind of read (experts, trunk, model tables: bytes ÷ read seconds) in bytes/s,
    /// 0 when nothing was read. What the device delivered to the engine's best pattern.
    pub fn best_read_rate(&self) -> f64 {
        [
            (self.expert_bytes_total, self.expert_read_s),
            (self.trunk_bytes_total, self.trunk_read_s),
            (self.table_bytes_total, self.table_read_s),
        ]
        .iter()
        .filter(|(b, s)| *b > 0 && *s > 0.0)
        .map(|(b, s)| *b as f64 / s)
        .fold(0.0, f64::max)
    }

    /// Seconds per forward pass the forward waited for trunk reads.
    pub fn trunk_wait_per_token(&self) -> f64 {
        self.trunk_wait_s / self.forwards.max(1) as f64
    }

    /// The rate the engine's reads ran at while reading (bytes ÷ read seconds, all kinds), in
    /// bytes/s; None when it read nothing. Reads that overlap each other make this larger
    /// than one reader could achieve, as they should.
    pub fn read_rate(&self) -> Option<f64> {
        let b = (self.expert_bytes_total + self.trunk_bytes_total + self.table_bytes_total) as f64;
        let s = self.expert_read_s + self.trunk_read_s + self.table_read_s;
        (b > 0.0 && s > 0.0).then(|| b / s)
    }
}

/// The roofline of one budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    /// Seconds the bytes read per token take at the device bandwidth.
    pub t_device: f64,
    /// Seconds the bytes multiplied per token take at the memory bandwidth.
    pub t_memory: f64,
    /// max(t_device, t_memory) ÷ measured s/token.
    pub ratio: f64,
}

impl Roofline {
    /// `read_bytes` and `multiplied_bytes` per token; bandwidths in bytes/s; `s_per_token`
    /// measured.
    pub fn new(
        read_bytes: f64,
        device_bps: f64,
        multiplied_bytes: f64,
        memory_bps: f64,
        s_per_token: f64,
    ) -> Roofline {
        let t_device = read_bytes / device_bps;
        let t_memory = multiplied_bytes / memory_bps;
        Roofline {
            t_device,
            t_memory,
            ratio: t_device.max(t_memory) / s_per_token,
        }
    }

    /// The limit that binds: `device` or `memory`.
    pub fn bound(&self) -> &'static str {
        if self.t_device >= self.t_memory {
            "device"
        } else {
            "memory"
        }
    }

    /// The roofline time itself.
    pub fn t_limit(&self) -> f64 {
        self.t_device.max(self.t_memory)
    }
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Result<&'a Value, String> {
    let mut cur = v;
    for (i, k) in path.iter().enumerate() {
        cur = cur
            .get(*k)
            .ok_or_else(|| format!("{}: missing", path[..=i].join(".")))?;
    }
    Ok(cur)
}

fn u(v: &Value, path: &[&str]) -> Result<u64, String> {
    get(v, path)?.as_u64().ok_or_else(|| {
        format!(
            "{}: expected a non-negative integer, found {}",
            path.join("."),
            get(v, path).map_or(String::new(), |x| x.to_string())
        )
    })
}

fn f(v: &Value, path: &[&str]) -> Result<f64, String> {
    get(v, path)?.as_f64().ok_or_else(|| {
        format!(
            "{}: expected a number, found {}",
            path.join("."),
            get(v, path).map_or(String::new(), |x| x.to_string())
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spread_median_min_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.relative(), 3.0 / 2.5);
        assert_eq!(Spread::of(&[7.0]).unwrap().relative(), 0.0);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn roofline_takes_the_binding_limit() {
        // The anchors' floor run: 6.5 GB read at 2.5 GB/s = 2.6 s; 8.9 GB multiplied at
        // 13.6 GB/s = 0.654 s. The device binds; at 4.0 s/token the ratio is 0.65.
        let r = Roofline::new(6.5e9, 2.5e9, 8.9e9, 13.6e9, 4.0);
        assert!((r.t_device - 2.6).abs() < 1e-12);
        assert!((r.t_memory - 8.9 / 13.6).abs() < 1e-12);
        assert_eq!(r.bound(), "device");
        assert!((r.ratio - 0.65).abs() < 1e-12);
        // Resident: nothing read, the memory binds.
        let r = Roofline::new(0.0, 2.5e9, 8.9e9, 13.6e9, 1.4);
        assert_eq!(r.bound(), "memory");
        assert_eq!(r.t_limit(), r.t_memory);
        assert!((r.ratio - 8.9 / 13.6 / 1.4).abs() < 1e-12);
    }

    fn inspect() -> Value {
        json!({
            "config": {"hidden_size": 7168, "vocab_size": 163840, "num_experts_per_token": 16,
                       "derived": {"n_moe": 3}},
            "ledger": {"trunk_bytes": 5_685_244_672u64, "model_table_bytes": 4_697_663_488u64,
                       "experts": {"bytes_per_expert": 17_547_264u64, "bytes": 3_369_074_688u64}}
        })
    }

    #[test]
    fn step_bytes_of_the_default_synthetic_checkpoint() {
        let b = StepBytes::from_inspect(&inspect()).unwrap();
        assert_eq!(b.lm_head, 2_348_810_240);
        assert_eq!(b.experts(), 842_268_672);
        // The "8.9 GB a step touches" of the anchors.
        assert_eq!(b.multiplied(), 8_876_337_920);
        assert_eq!(b.resident_model(), 13_751_982_848);
        let mut v = inspect();
        v["ledger"].as_object_mut().unwrap().remove("trunk_bytes");
        assert_eq!(
            StepBytes::from_inspect(&v).unwrap_err(),
            "ledger.trunk_bytes: missing"
        );
    }

    fn report(trunk_read: u64, table_read: u64) -> Value {
        let step = |b: u64| json!({"bytes_read": b});
        json!({
            "error": null,
            "prompt_ids": [1, 2, 3, 4, 5],
            "generated_ids": [9, 9, 9, 9],
            "logits_hash": "00ff",
            "steps": [step(1000), step(10), step(20), step(30)],
            "timing": {"seconds_per_token": 2.0, "load_seconds": 1.0, "prefill_seconds": 3.0,
                       "wall_seconds": 10.0},
            "trunk": {"bytes_read": trunk_read, "read_seconds": 1.0, "pinned_layers": 2,
                      "ring_slots": 2},
            "layers_bound": 4,
            "io": {"embedding_bytes_read": table_read, "lm_head_bytes_read": 0,
                   "model_table_read_seconds": 0.5, "io_share": 0.25},
            "expert_cache": {"read_seconds": 0.5, "bytes_read": 1060, "slots": 16,
                             "true_resident_hit_rate": 0.5},
            "memory": {"peak_rss_bytes": 100, "plan": {"total": 120, "trunk_resident": 1,
                       "trunk_ring": 2, "model_tables": 3, "expert_cache": 4}}
        })
    }

    #[test]
    fn run_figures_per_decode_token() {
        // 5 prompt ids in chunks of 2 = 3 prefill forwards, + 3 decode forwards.
        assert_eq!(forwards(5, 2, 4), 6);
        assert_eq!(forwards(5, 64, 6), 6);
        assert_eq!(forwards(5, 64, 1), 1);
        let r = RunFigures::from_report(&report(600, 60), 2).unwrap();
        assert_eq!(r.expert_bytes_per_token, 20.0);
        assert_eq!(r.trunk_bytes_per_token, 100.0);
        assert_eq!(r.table_bytes_per_token, 10.0);
        assert_eq!(r.bytes_read_per_token(), 130.0);
        assert_eq!(r.read_rate(), Some((1060.0 + 600.0 + 60.0) / 2.0));
        assert_eq!(r.best_read_rate(), 2120.0);
        assert_eq!(r.forwards, 6);
        // experts 0.5 s x 20/1060 + trunk 1.0 s x 100/600 + tables 0.5 s x 10/60
        let want = 0.5 * 20.0 / 1060.0 + 1.0 / 6.0 + 0.5 / 6.0;
        assert!((r.io_s_per_token() - want).abs() < 1e-12);
        assert_eq!(r.logits_hash, "00ff");
        let r0 = RunFigures::from_report(&report(0, 0), 2).unwrap();
        assert_eq!(r0.bytes_read_per_token(), 20.0);
        assert!(!r0.per_step_bytes);
        // Per-step split: experts 7 per step, trunk + tables 99 per step, split 600:60.
        let mut v = report(600, 60);
        for s in v["steps"].as_array_mut().unwrap() {
            s["expert_bytes_read"] = json!(7);
            s["trunk_bytes_read"] = json!(99);
        }
        let r = RunFigures::from_report(&v, 2).unwrap();
        assert!(r.per_step_bytes);
        assert_eq!(r.expert_bytes_per_token, 7.0);
        assert!((r.trunk_bytes_per_token - 90.0).abs() < 1e-9);
        assert!((r.table_bytes_per_token - 9.0).abs() < 1e-9);
        v["steps"][2]["trunk_bytes_read"] = json!("x");
        assert_eq!(
            RunFigures::from_report(&v, 2).unwrap_err(),
            "steps[2].trunk_bytes_read: expected a non-negative integer"
        );
    }

    #[test]
    fn run_report_errors_name_the_field() {
        let mut v = report(0, 0);
        v["timing"]["seconds_per_token"] = json!("fast");
        let e = RunFigures::from_report(&v, 64).unwrap_err();
        assert!(
            e.starts_with("timing.seconds_per_token: expected a number"),
            "{e}"
        );
        let mut v = report(0, 0);
        v["error"] = json!({"kind": "io", "message": "short read", "exit_code": 4});
        assert!(RunFigures::from_report(&v, 64)
            .unwrap_err()
            .contains("short read"));
        let mut v = report(0, 0);
        v["steps"] = json!([{"bytes_read": 1}]);
        assert!(RunFigures::from_report(&v, 64)
            .unwrap_err()
            .contains("--gen 2"));
    }
}
