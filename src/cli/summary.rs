//! The run report's header (ENGINE.md §6): the model line (config and compute path) and the
//! memory plan in two lines (items, then the budget and the trunk size). The trunk line, the
//! expert-cache line and the summary are the report's own ([`crate::report::RunReport`]).

use crate::config::Config;
use crate::model::Dims;
use crate::plan::RunPlan;
use crate::report::RunReport;
use crate::units::{count, gb, trunk_size};

/// The model line: config shape, layers (KDA/MLA counts and map), hidden size, vocabulary,
/// experts, MLA latent, AttnRes block; the bound prefix with `--layers`; the ISA path and
/// threads.
pub fn model_line(rep: &RunReport, cfg: &Config, d: &Dims, layers: usize) -> String {
    format!(
        "model: {} config, {} ({} KDA, {} MLA; map {}){}, hidden {}, vocab {}, {} experts top-{} + {} shared, latent {}, AttnRes block {}; {} path, {}",
        rep.config_shape,
        count(d.nl as u64, "layer", "layers"),
        cfg.derived.n_kda,
        cfg.derived.n_mla,
        d.layer_map(),
        if layers < d.nl {
            format!(", binding the first {layers}")
        } else {
            String::new()
        },
        d.h,
        d.v,
        d.e,
        d.kt,
        cfg.num_shared_experts,
        d.l,
        d.bs,
        rep.isa,
        count(rep.threads as u64, "thread", "threads"),
    )
}

/// The plan in two lines: every item of the memory plan against what is available, then the
/// budget (its name, figure and why) and the trunk size (`trunk_runs`: the bound layers' trunk
/// run bytes, named as `inspect` and `pack-trunk` name it).
pub fn plan_lines(rp: &RunPlan, trunk_runs: u64, layers: usize) -> String {
    let name = &rp.budget_name;
    // A note explaining the budget ("auto: … available, … kept free, budget …") carries the
    // figure: the name is said once, the figure once.
    let prefix = format!("{name}: ");
    let explained = rp.notes.iter().any(|n| n.starts_with(&prefix));
    let budget = match rp.budget {
        Some(b) if !explained => format!(" {}", gb(b)),
        _ => String::new(),
    };
    let notes: Vec<&str> = rp
        .notes
        .iter()
        .map(|n| n.strip_prefix(&prefix).unwrap_or(n))
        .collect();
    format!(
        "{}\n  budget {name}{budget}{}{}; {}",
        rp.memory.lines(),
        if notes.is_empty() { "" } else { ": " },
        notes.join("; "),
        trunk_size(trunk_runs, layers)
    )
}
