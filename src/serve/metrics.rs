//! `/metrics` (ENGINE.md §11): Prometheus text exposition of the server's counters —
//! requests by status, prompt, cached and generated tokens, decode tokens per second, bytes
//! read (trunk and model tables, experts), the expert-cache hit rate, active and queued
//! requests.

use crate::generate::session::StepFigures;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The server's counters; every method is cheap and thread-safe.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<Vec<(u16, u64)>>,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    steps: AtomicU64,
    failed_steps: AtomicU64,
    /// Microseconds of decode steps and of prefills.
    decode_us: AtomicU64,
    prefill_us: AtomicU64,
    dense_bytes: AtomicU64,
    expert_bytes: AtomicU64,
    expert_requests: AtomicU64,
    expert_hits: AtomicU64,
    active: AtomicU64,
    queued: AtomicU64,
}

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

impl Metrics {
    /// A request answered with `status`.
    pub fn request(&self, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        match r.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => {
                r.push((status, 1));
                crate::sort::sort(&mut r);
            }
        }
    }

    /// A prefill of `run` new prompt ids (`cached` reused) in `seconds`.
    pub fn prefilled(&self, run: usize, cached: usize, seconds: f64) {
        add(&self.prompt_tokens, (run + cached) as u64);
        add(&self.cached_tokens, cached as u64);
        add(&self.prefill_us, (seconds * 1e6) as u64);
    }

    /// A decode step that chose `tokens` ids, with its figures.
    pub fn step(&self, f: &StepFigures, tokens: usize) {
        add(&self.steps, 1);
        add(&self.completion_tokens, tokens as u64);
        add(&self.decode_us, (f.seconds * 1e6) as u64);
        add(&self.dense_bytes, f.dense_bytes);
        add(&self.expert_bytes, f.experts.bytes_read);
        add(&self.expert_requests, f.experts.requests);
        add(&self.expert_hits, f.experts.resident_hits);
    }

    /// A step that failed (its requests got 500).
    pub fn failed_step(&self) {
        add(&self.failed_steps, 1);
    }

    /// Active sequences and queued requests now.
    pub fn set_active(&self, active: usize, queued: usize) {
        self.active.store(active as u64, Ordering::Relaxed);
        self.queued.store(queued as u64, Ordering::Relaxed);
    }

    /// The Prometheus text (version 0.0.4).
    pub fn render(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<(String, String)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        let reqs: Vec<(String, String)> = self
            .requests
            .lock()
            .map(|r| {
                r.iter()
                    .map(|(s, n)| (format!("{{status=\"{s}\"}}"), n.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        metric(
            "k3_requests_total",
            "counter",
            "Requests answered, by HTTP status.",
            reqs,
        );
        let one = |v: String| vec![(String::new(), v)];
        metric(
            "k3_prompt_tokens_total",
            "counter",
            "Prompt ids of started requests (cached ones included).",
            one(g(&self.prompt_tokens).to_string()),
        );
        metric(
            "k3_cached_tokens_total",
            "counter",
            "Prompt ids reused from held snapshots.",
            one(g(&self.cached_tokens).to_string()),
        );
        metric(
            "k3_completion_tokens_total",
            "counter",
            "Ids generated.",
            one(g(&self.completion_tokens).to_string()),
        );
        let decode_s = g(&self.decode_us) as f64 / 1e6;
        let tps = if decode_s > 0.0 {
            g(&self.completion_tokens) as f64 / decode_s
        } else {
            0.0
        };
        metric(
            "k3_decode_tokens_per_second",
            "gauge",
            "Ids generated per second of decode steps, since start.",
            one(format!("{tps:.3}")),
        );
        metric(
            "k3_steps_total",
            "counter",
            "Decode steps (one forward over every active sequence).",
            one(g(&self.steps).to_string()),
        );
        metric(
            "k3_failed_steps_total",
            "counter",
            "Steps that failed (their requests answered 500).",
            one(g(&self.failed_steps).to_string()),
        );
        metric(
            "k3_bytes_read_total",
            "counter",
            "Bytes read during decode steps, by source.",
            vec![
                (
                    "{source=\"trunk\"}".into(),
                    g(&self.dense_bytes).to_string(),
                ),
                (
                    "{source=\"experts\"}".into(),
                    g(&self.expert_bytes).to_string(),
                ),
            ],
        );
        let (req, hits) = (g(&self.expert_requests), g(&self.expert_hits));
        let rate = if req > 0 {
            hits as f64 / req as f64
        } else {
            0.0
        };
        metric(
            "k3_expert_cache_hit_rate",
            "gauge",
            "Expert requests served from memory during decode steps, since start.",
            one(format!("{rate:.6}")),
        );
        metric(
            "k3_active_sequences",
            "gauge",
            "Sequences decoding now.",
            one(g(&self.active).to_string()),
        );
        metric(
            "k3_queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            one(g(&self.queued).to_string()),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text() {
        let m = Metrics::default();
        m.request(200);
        m.request(503);
        m.request(200);
        m.prefilled(10, 5, 0.5);
        let f = StepFigures {
            seconds: 0.5,
            ..StepFigures::default()
        };
        m.step(&f, 4);
        m.set_active(2, 3);
        let t = m.render();
        for line in [
            "k3_requests_total{status=\"200\"} 2",
            "k3_requests_total{status=\"503\"} 1",
            "k3_prompt_tokens_total 15",
            "k3_cached_tokens_total 5",
            "k3_completion_tokens_total 4",
            "k3_decode_tokens_per_second 8.000",
            "k3_active_sequences 2",
            "k3_queue_depth 3",
            "# TYPE k3_steps_total counter",
        ] {
            assert!(t.lines().any(|l| l == line), "{line} not in\n{t}");
        }
    }
}
