//! Prints the README's predicted-speed table (docs/memory.md): for each machine size, the
//! released model's memory plan (the engine's own planner, fed the released config and tensor
//! sizes, so no checkpoint files are needed), the bytes read per decoded token, and the
//! seconds per token a disk of 0.5, 3 and 7 GB/s needs to read them.
//!
//! `cargo run --release --example hardware_table`. Predictions, not measurements: compute
//! time is ignored and the expert-cache hit rate is taken as slots / experts (uniform routing).

#[path = "../tests/engine/support/released.rs"]
mod released;

use k3::plan::{plan_run, preset, Budget};

/// Positions planned for (prompt + generation): a short conversation.
const POSITIONS: usize = 1024;
/// Expert requests per decoded token: 92 MoE layers x top-16.
const REQUESTS_PER_TOKEN: f64 = 92.0 * 16.0;
/// Disk read speeds, GB/s: SATA SSD, NVMe, fast NVMe.
const DISKS: [f64; 3] = [0.5, 3.0, 7.0];

fn main() {
    let s = released::k3_sizes(POSITIONS);
    println!(
        "| RAM | budget | plan | trunk pinned | expert cache | read / token | SATA 0.5 GB/s | NVMe 3 GB/s | fast NVMe 7 GB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let rows: [(u64, &str, Budget); 8] = [
        (8, "`--preset ultra`", budget(Some("ultra"), None)),
        (16, "`--mem-gb 14`", budget(None, Some(14.0))),
        (32, "`--mem-gb 28`", budget(None, Some(28.0))),
        (64, "`--mem-gb 56`", budget(None, Some(56.0))),
        (128, "`--mem-gb 120`", budget(None, Some(120.0))),
        (256, "`--mem-gb 240`", budget(None, Some(240.0))),
        (512, "`--mem-gb 480`", budget(None, Some(480.0))),
        (1024, "`--mem-gb 960`", budget(None, Some(960.0))),
    ];
    for (ram, flag, b) in rows {
        let p = match plan_run(&s, &b, Some(ram * 1_000_000_000)) {
            Ok(p) => p,
            Err(e) => {
                println!(
                    "| {ram} GB | {flag} | refused: {} | | | | | | |",
                    k3::Error::from(e).message
                );
                continue;
            }
        };
        let trunk = p.trunk.streamed_bytes as f64;
        let tables = p.tables.step_read_bytes(s.row, 1) as f64;
        let hit = (p.cache_slots as f64 / s.experts_total as f64).min(1.0);
        let experts = REQUESTS_PER_TOKEN * (1.0 - hit) * s.expert as f64;
        let read = trunk + tables + experts;
        let secs: Vec<String> = DISKS
            .iter()
            .map(|d| format!("{:.1} s", read / (d * 1e9)))
            .collect();
        println!(
            "| {ram} GB | {flag} | {:.1} GB | {}/93 | {} slots ({:.0} %) | {:.1} GB (trunk {:.1}, tables {:.2}, experts {:.1}) | {} |",
            p.memory.total as f64 / 1e9,
            p.trunk.n_pinned(),
            p.cache_slots,
            hit * 100.0,
            read / 1e9,
            trunk / 1e9,
            tables / 1e9,
            experts / 1e9,
            secs.join(" | ")
        );
    }
}

fn budget(name: Option<&str>, mem_gb: Option<f64>) -> Budget {
    Budget {
        preset: name.and_then(preset),
        mem: mem_gb.map(k3::plan::gb_to_bytes),
        ..Budget::default()
    }
}
