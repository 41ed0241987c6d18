//! The run report's JSON document (FORMATS.md §10).

use super::RunReport;
use crate::json::{Object, Value};
use crate::model::experts::ExpertStats;
use crate::units::hex;

fn stats_obj(o: Object, s: &ExpertStats) -> Object {
    o.with("expert_requests", s.requests)
        .with("expert_resident_hits", s.resident_hits)
        .with("expert_reads", s.reads)
        .with("bytes_read", s.bytes_read)
}

impl RunReport {
    /// The JSON document of FORMATS.md §10.
    pub fn to_json(&self) -> Value {
        let n = self.generated_count();
        let spt = self.timing.seconds_per_token(n);
        let steps = self.steps_json();
        let mut full = self.prompt_ids.clone();
        full.extend(&self.generated_ids);
        let plan = self.plan_json();
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
                    .with("temperature", self.sampling.temperature)
                    .with("top_p", self.sampling.top_p)
                    .with("top_k", self.sampling.top_k)
                    .with("min_p", self.sampling.min_p)
                    .with("seed", self.sampling.seed.map_or(Value::Null, |s| s.into())),
            )
            .with(
                "batch",
                self.batch.map_or(Value::Null, |b| {
                    Object::new()
                        .with("sequences", b.sequences)
                        .with("parallel", b.parallel)
                        .with("sweeps", b.sweeps)
                        .with("tokens", b.tokens)
                        .with("tokens_per_second", b.tokens_per_second)
                        .into()
                }),
            )
            .with(
                "speculation",
                self.speculation.map_or(Value::Null, |p| {
                    Object::new()
                        .with("max_draft", p.max_draft)
                        .with("sweeps", p.sweeps)
                        .with("verify_sweeps", p.verify_sweeps)
                        .with("drafted", p.drafted)
                        .with("accepted", p.accepted)
                        .with("acceptance_rate", p.acceptance_rate())
                        .with("ids_per_sweep", p.ids_per_sweep())
                        .with("verify_seconds", p.verify_seconds)
                        .into()
                }),
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
            .with("trunk", self.trunk_json())
            .with("expert_cache", self.expert_cache_json())
            .with(
                "io",
                Object::new()
                    .with("embedding_bytes_read", self.tables.embedding_bytes_read)
                    .with("lm_head_bytes_read", self.tables.lm_head_bytes_read)
                    .with("model_table_read_seconds", self.tables.read_seconds)
                    .with("model_tables_streamed", self.tables_streamed)
                    .with("io_share", self.io_share()),
            )
            .with("state", {
                let st = self.state.clone().unwrap_or_default();
                Object::new()
                    .with("loaded", st.loaded.clone())
                    .with("saved", st.saved.clone())
                    .with("n_pos_loaded", st.n_pos_loaded)
                    .with("generated_before", st.generated_before)
                    .with(
                        "sampler_changed",
                        Value::Array(
                            st.sampler_changed
                                .iter()
                                .map(|k| Value::from(k.as_str()))
                                .collect(),
                        ),
                    )
                    .with("prefilled_ids", st.prefilled_ids)
            })
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

    /// FORMATS.md §10 `steps`: one object per generated token.
    fn steps_json(&self) -> Vec<Value> {
        self.steps
            .iter()
            .map(|s| {
                stats_obj(
                    Object::new()
                        .with("token_id", s.token_id)
                        .with("sweep", s.sweep)
                        .with("seconds", s.seconds)
                        .with("logits_fnv1a64", hex(s.logits_fnv1a64)),
                    &s.experts,
                )
                .with("bytes_read", s.experts.bytes_read + s.dense_bytes_read)
                .with("expert_bytes_read", s.experts.bytes_read)
                .with("trunk_bytes_read", s.dense_bytes_read)
                .into()
            })
            .collect()
    }

    /// FORMATS.md §10 `memory.plan`, or null without a plan.
    fn plan_json(&self) -> Option<Value> {
        self.plan.as_ref().map(|p| {
            Value::from(
                Object::new()
                    .with("trunk_resident", p.trunk_resident)
                    .with("trunk_ring", p.trunk_ring)
                    .with("model_tables", p.model_tables)
                    .with("lm_head_resident_rows", p.lm_head_resident_rows)
                    .with("lm_head_rows", p.lm_head_rows)
                    .with("embedding_resident", p.embedding_resident)
                    .with("expert_cache", p.expert_cache)
                    .with("kda_state", p.kda_state)
                    .with("mla_cache", p.mla_cache)
                    .with("scratch", p.scratch)
                    .with("tokenizer", p.tokenizer)
                    .with("tensor_index", p.tensor_index)
                    .with("total", p.total)
                    .with("available", p.available)
                    .with("budget", self.budget)
                    .with("budget_name", self.budget_name.as_str()),
            )
        })
    }

    /// FORMATS.md §10 `trunk`.
    fn trunk_json(&self) -> Value {
        let tr = &self.trunk;
        Object::new()
            .with("packed", tr.packed)
            .with("packed_bytes", tr.packed_bytes)
            .with(
                "codec",
                tr.codec.as_deref().map_or(Value::Null, Value::from),
            )
            .with("pinned_layers", tr.pinned.len())
            .with("pinned_bytes", tr.pinned_bytes)
            .with("ring_slots", tr.ring_slots)
            .with("slot_bytes", tr.slot_bytes)
            .with("direct_io", tr.direct_io)
            .with("deterministic_hit_rate", self.deterministic_hit_rate())
            .with("binds", tr.stats.binds)
            .with("hits", tr.stats.hits)
            .with("bytes_read", tr.stats.bytes_read)
            .with("read_seconds", tr.stats.read_seconds)
            .with("reads", tr.stats.reads)
            .with("reads_ahead", tr.stats.reads_ahead)
            .with("wait_seconds", tr.stats.wait_seconds)
            .with("pinned", tr.pinned.clone())
            .with("reason", tr.reason.as_str())
            .into()
    }

    /// FORMATS.md §10 `expert_cache`.
    fn expert_cache_json(&self) -> Value {
        let c = &self.cache;
        Object::new()
            .with("slots", self.expert_slots)
            .with("slot_bytes", self.expert_slot_bytes)
            .with("policy", self.cache_policy.as_str())
            .with("requests", c.requests)
            .with("hits", c.hits)
            .with("prefetch_reads", c.prefetch_reads)
            .with("true_resident_hits", c.true_resident_hits)
            .with("true_resident_hit_rate", c.true_resident_hit_rate())
            .with("reads", c.reads)
            .with("evictions", c.evictions)
            .with("bytes_read", c.bytes_read)
            .with("read_seconds", c.read_seconds)
            .into()
    }
}
