//! Budgets (ENGINE.md §3-§4): decimal GB, the published presets, the `auto` margin, and
//! what the run was asked for, resolved into the parts of the plan.

use super::{Limit, ModelSizes, Refusal, Shortfall, TablesPlan};
use crate::error::Error;
use crate::units::gb;

/// One decimal gigabyte (ENGINE.md §3: sizes in GB are 10^9 bytes).
pub const GB: f64 = 1e9;

/// Decimal GB to bytes, to the nearest byte. A budget written with up to nine decimals names
/// an exact byte count, and `x * 1e9` in f64 can land a hair below it (0.016150631 × 10^9 =
/// 16150630.999…), so truncating would lose a byte and could tip a plan that fits exactly.
/// Caller ensures `x` is finite and non-negative; saturates at `u64::MAX`.
pub fn gb_to_bytes(x: f64) -> u64 {
    (x * GB).round() as u64
}

/// A published preset: trunk and expert-cache budgets; everything else is planned on top.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// `--preset` name.
    pub name: &'static str,
    /// Trunk budget, GB (pinned layers + ring slots).
    pub trunk_gb: f64,
    /// Expert-cache budget, GB.
    pub cache_gb: f64,
    /// Stream the embedding rows and the lm_head (the smallest budget: the released model
    /// then plans within 8 GB, ENGINE.md §4).
    pub stream_tables: bool,
    /// Who it is for.
    pub what: &'static str,
}

/// The presets of ENGINE.md §4, in ascending size.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "ultra",
        trunk_gb: 2.5,
        cache_gb: 0.31,
        stream_tables: true,
        what: "8 GB machines: model tables streamed too",
    },
    Preset {
        name: "laptop",
        trunk_gb: 3.0,
        cache_gb: 1.0,
        stream_tables: false,
        what: "16 GB laptops",
    },
    Preset {
        name: "desktop",
        trunk_gb: 16.0,
        cache_gb: 10.0,
        stream_tables: false,
        what: "32-64 GB desktops",
    },
    Preset {
        name: "workstation",
        trunk_gb: 60.0,
        cache_gb: 30.0,
        stream_tables: false,
        what: "128 GB workstations",
    },
    Preset {
        name: "server",
        trunk_gb: 110.0,
        cache_gb: 13.0,
        stream_tables: false,
        what: "trunk fully resident (released model), small expert cache",
    },
    Preset {
        name: "max",
        trunk_gb: 110.0,
        cache_gb: 109.0,
        stream_tables: false,
        what: "trunk fully resident and a large expert cache",
    },
];

/// The preset called `name` (not `auto`).
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The `--list-presets` text.
pub fn presets_text() -> String {
    let mut s = String::from(
        "presets (--preset NAME; budgets in decimal GB; everything else — model tables, KDA state, MLA cache, scratch, index, tokenizer — is planned on top and shown):\n  auto          default: derived from MemAvailable and the cgroup limit, keeping a margin; trunk first until fully resident, then lm_head rows, then the expert cache, then the embedding table\n",
    );
    for p in PRESETS {
        s += &format!(
            "  {:<13} trunk {:>5} GB, expert cache {:>6} GB{}  ({})\n",
            p.name,
            p.trunk_gb,
            p.cache_gb,
            if p.stream_tables {
                ", model tables streamed"
            } else {
                ""
            },
            p.what
        );
    }
    s += "  overrides: --mem-gb X (whole-process budget; not with a fixed preset), --trunk-gb X, --cache-gb X, --trunk-ring N, --cache-policy NAME\n";
    s
}

/// How the run was asked to budget memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// A fixed preset, or None for `auto`.
    pub preset: Option<&'static Preset>,
    /// `--mem-gb` in bytes.
    pub mem: Option<u64>,
    /// `--trunk-gb` in bytes.
    pub trunk: Option<u64>,
    /// `--cache-gb` in bytes.
    pub cache: Option<u64>,
    /// `--trunk-ring`.
    pub ring: Option<usize>,
}

/// Share of the available memory `auto` leaves free: max(this × available, [`AUTO_MARGIN_MIN`]).
pub const AUTO_MARGIN_SHARE: f64 = 0.10;
/// At least this much is left free by `auto`.
pub const AUTO_MARGIN_MIN: u64 = 500_000_000;

/// A budget resolved (ENGINE.md §4): its name, the whole-process budget when one applies, the
/// trunk budget, a preset's tables plan and a preset's cache bytes.
pub(super) type Resolved = (String, Option<u64>, u64, Option<TablesPlan>, u64);

/// Resolves `b` (already clamped to what the model can use) into a [`Resolved`] budget,
/// adding the why to `notes`. Errors: `--mem-gb` with a fixed preset (exit 2), a budget below
/// the minimum of this plan (exit 3, [`Refusal::Short`]).
pub(super) fn resolve(
    s: &ModelSizes,
    b: &Budget,
    available: Option<u64>,
    notes: &mut Vec<String>,
) -> std::result::Result<Resolved, Refusal> {
    let r = match b.preset {
        Some(p) => {
            if b.mem.is_some() {
                return Err(Error::invalid(format!(
                    "flags `--preset {}` and `--mem-gb`: a fixed preset sets its own budgets; give one of them (or `--preset auto --mem-gb X`)",
                    p.name
                ))
                .into());
            }
            let t = b.trunk.unwrap_or(gb_to_bytes(p.trunk_gb));
            let asked = b.cache.unwrap_or(gb_to_bytes(p.cache_gb));
            let c = asked.max(s.cache_min());
            if c > asked {
                notes.push(format!(
                    "preset {} cache {} raised to top-k = {} experts ({})",
                    p.name,
                    gb(asked),
                    s.top_k,
                    gb(c)
                ));
            }
            notes.push(format!(
                "preset {}: trunk {}, expert cache {}{}; everything else on top",
                p.name,
                gb(t),
                gb(c),
                if p.stream_tables {
                    ", model tables streamed"
                } else {
                    ""
                }
            ));
            let tables = if p.stream_tables {
                s.tables_plan(
                    0,
                    false,
                    format!("preset {} streams the model tables", p.name),
                )
            } else {
                s.tables_plan(
                    s.vocab,
                    true,
                    format!("preset {} keeps the model tables resident", p.name),
                )
            };
            (p.name.to_string(), None, t, Some(tables), c)
        }
        None => {
            let (name, m) = match (b.mem, available) {
                (Some(m), _) => ("mem-gb".to_string(), m),
                (None, Some(a)) => {
                    let margin = ((a as f64 * AUTO_MARGIN_SHARE) as u64).max(AUTO_MARGIN_MIN);
                    let m = a.saturating_sub(margin);
                    notes.push(format!(
                        "auto: {} available, {} kept free, budget {}",
                        gb(a),
                        gb(margin),
                        gb(m)
                    ));
                    ("auto".to_string(), m)
                }
                (None, None) => {
                    // Nothing known about the machine: plan the whole trunk, resident tables
                    // and the minimal cache (the plan is printed either way).
                    notes.push(
                        "auto: available memory unknown; planning the trunk and tables resident and the smallest expert cache".into(),
                    );
                    let m = s
                        .fixed()
                        .saturating_add(b.trunk.unwrap_or(s.trunk_all()))
                        .saturating_add(s.tables_resident())
                        .saturating_add(b.cache.unwrap_or(s.cache_min()));
                    ("auto".to_string(), m)
                }
            };
            let fixed = s.fixed();
            let min_total = fixed
                .saturating_add(b.trunk.unwrap_or(s.trunk_min()))
                .saturating_add(s.tables_streamed())
                .saturating_add(b.cache.unwrap_or(s.cache_min()));
            if m < min_total {
                let trunk = b.trunk.unwrap_or(s.trunk_min());
                let sequences = s.kda_state.saturating_add(s.mla_cache);
                return Err(Refusal::Short(Shortfall {
                    needed: min_total,
                    available: m,
                    limit: Limit::Budget(name),
                    parts: vec![
                        ("trunk", trunk),
                        ("streamed model tables", s.tables_streamed()),
                        ("expert cache", b.cache.unwrap_or(s.cache_min())),
                    ],
                    kda_state: s.kda_state,
                    mla_cache: s.mla_cache,
                    rest: vec![("other fixed items", fixed.saturating_sub(sequences))],
                }));
            }
            let w = m - fixed;
            let cache_floor = b.cache.unwrap_or(s.cache_min());
            let t = b.trunk.unwrap_or_else(|| {
                s.trunk_all()
                    .min(w.saturating_sub(cache_floor + s.tables_streamed()))
            });
            (name, Some(m), t, None, 0)
        }
    };
    Ok(r)
}
