//! The memory plan (ENGINE.md §4): every byte the run will allocate, added up before anything
//! is allocated, compared with what the machine has (`MemAvailable`, and the cgroup headroom
//! when smaller). A plan that does not fit is refused with exit 3, naming the shortfall.
//!
//! [`plan_run`] turns a budget — `auto` (from what is available), a preset of ENGINE.md §4, or
//! `--mem-gb`, with `--trunk-gb`, `--cache-gb`, `--trunk-ring` overriding parts — into the
//! streaming configuration: which trunk layers are pinned and how many ring slots of what
//! size stream the rest ([`choose_trunk`], the fixed point), how many lm_head rows are resident
//! and whether the embedding table is ([`TablesPlan`]), and how many expert-cache slots there
//! are. [`MemoryPlan::resident`] is the plan of the plain resident engine.

use crate::error::{Error, Result};
use crate::model::state::DecodeState;
use crate::model::Dims;

/// Bytes per item of the plan (FORMATS.md §10 `memory.plan`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Pinned trunk layer buffers plus every bound layer's widened small vectors.
    pub trunk_resident: u64,
    /// Trunk ring slots (0 when every layer is pinned).
    pub trunk_ring: u64,
    /// `embed_tokens` + `lm_head` (+ the model-level vectors) when resident; the embedding row
    /// window and the lm_head chunk slots when streamed; a resident lm_head prefix (rows
    /// 0..[`MemoryPlan::lm_head_resident_rows`]) next to the chunk slots when partly resident.
    pub model_tables: u64,
    /// lm_head rows held resident (a prefix 0..R; tied: of the one table), of
    /// [`MemoryPlan::lm_head_rows`] = V.
    pub lm_head_resident_rows: u64,
    pub lm_head_rows: u64,
    /// `embed_tokens` resident (tied: exactly when the whole table is).
    pub embedding_resident: bool,
    /// Expert-cache slots (one routed expert each, with alignment slack).
    pub expert_cache: u64,
    /// KDA Sᵀ + conv history of the bound KDA layers (MODEL.md §7).
    pub kda_state: u64,
    /// MLA latent cache for prompt + generation (MODEL.md §8).
    pub mla_cache: u64,
    /// Per-chunk activations and logits rows (an upper bound), and in a streamed run's plan
    /// the [`PROCESS_BASELINE`].
    pub scratch: u64,
    /// Tokenizer tables (0 without a tokenizer).
    pub tokenizer: u64,
    /// The tensor index.
    pub tensor_index: u64,
    /// Sum of the items above.
    pub total: u64,
    /// What the machine has: min(MemAvailable, cgroup headroom); None if unknown.
    pub available: Option<u64>,
}

/// What a run needs, for [`MemoryPlan::resident`].
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    /// Layers bound (`--layers`, default all).
    pub layers: usize,
    /// Positions the state must hold: prompt + generation.
    pub positions: usize,
    /// Positions per prefill chunk.
    pub chunk: usize,
    /// Logits rows kept at once (the whole chunk when dumping or teacher-forcing, else 1).
    pub logits_rows: usize,
    /// Expert buffers of the expert source.
    pub expert_buffers: usize,
    /// Bytes of one routed expert (six tensors).
    pub expert_bytes: u64,
    /// Bytes of the tensor index in memory.
    pub tensor_index: u64,
    /// Bytes of the tokenizer tables.
    pub tokenizer: u64,
}

/// Bytes of the trunk of layer `l` as bound (BF16 matrices as BF16, small vectors as fp32).
pub fn layer_trunk_bytes(d: &Dims, l: usize) -> u64 {
    let (h, pk, dk, hk, kc) = (
        d.h as u64,
        d.pk as u64,
        d.dk as u64,
        d.hk as u64,
        d.kc as u64,
    );
    let mut bf16 = 0u64; // elements
    let mut f32s = 4 * h; // input/post norms, two folded AttnRes vectors
    match d.kinds[l] {
        crate::model::AttnKind::Kda => {
            bf16 += 4 * pk * h + dk * h + pk * dk + hk * h + h * pk;
            f32s += 3 * pk * kc + pk + dk + hk * 2;
        }
        crate::model::AttnKind::Mla => {
            let (hm, dq, rq, rkv, dr, dn, dv) = (
                d.hm as u64,
                d.dq as u64,
                d.rq as u64,
                d.rkv as u64,
                d.dr as u64,
                d.dn as u64,
                d.dv as u64,
            );
            bf16 += rq * h + hm * dq * rq + (rkv + dr) * h + hm * (dn + dv) * rkv + h * hm * dv;
            if d.out_gate {
                bf16 += hm * dv * h;
            }
            f32s += rq + rkv;
        }
    }
    if l < d.first_dense {
        bf16 += 3 * d.f as u64 * h;
    } else {
        let (e, lat, sw) = (d.e as u64, d.l as u64, d.sw as u64);
        bf16 += e * h + 2 * lat * h + 3 * sw * h;
        f32s += e + lat;
    }
    bf16 * 2 + f32s * 4
}

/// Upper bound of the forward pass's scratch for a chunk of `t` positions keeping `rows`
/// logits rows (activations of the widest layer, the depth state, expert outputs).
pub fn scratch_bytes(d: &Dims, t: usize, rows: usize) -> u64 {
    let kda = 12 * d.pk + d.dk + d.hk;
    let mla = 2 * d.rq + d.hm * d.dq + 2 * d.mla_row() + 3 * d.hm * d.dv;
    let ffn = 3 * d.f.max(d.sw).max(d.i);
    let moe = d.e + 3 * d.l + 2 * d.kt * d.l + 3 * d.i * d.kt;
    let snapshots = d.nl.div_ceil(d.bs) + 1;
    let depth = (snapshots + 6) * d.h;
    let per_pos = kda.max(mla) + ffn + moe + depth;
    4 * (t as u64 * per_pos as u64 + rows as u64 * d.v as u64 + (t as u64) * d.mla_row() as u64)
}

/// The kernels' per-thread scratch for chunks of `t` positions on `threads` threads
/// ([`k3_kernels::thread_scratch_bytes`]): the largest call prepares the top-k experts' gate
/// and up inputs (2·Kt of width max(latent, intermediate)) or one input of the widest
/// projection.
pub fn kernel_scratch_bytes(d: &Dims, t: usize, threads: usize) -> u64 {
    let widest = [d.h, d.f, d.sw, d.i, d.l, d.rq, d.hm * d.dv, d.hk * d.dk]
        .into_iter()
        .max()
        .unwrap_or(0);
    let x_elems = 2 * d.kt * d.l.max(d.i) + widest;
    threads as u64 * k3_kernels::thread_scratch_bytes(t, x_elems)
}

impl MemoryPlan {
    /// The sum of every item, saturating: a huge request (e.g. an MLA cache for 2^32
    /// positions) must read as "does not fit", never wrap to a small total.
    pub fn items_total(&self) -> u64 {
        [
            self.trunk_resident,
            self.trunk_ring,
            self.model_tables,
            self.expert_cache,
            self.kda_state,
            self.mla_cache,
            self.scratch,
            self.tokenizer,
            self.tensor_index,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
    /// The plan of a resident run (every bound layer and both tables in memory).
    pub fn resident(d: &Dims, inp: &PlanInput) -> MemoryPlan {
        let trunk_resident = (0..inp.layers).map(|l| layer_trunk_bytes(d, l)).sum();
        let heads = if d.tied { 1 } else { 2 };
        let model_tables = heads * d.v as u64 * d.h as u64 * 2 + 2 * d.h as u64 * 4;
        let kda_state = DecodeState::kda_bytes(d, inp.layers);
        let mla_cache = DecodeState::mla_bytes(d, inp.layers, inp.positions);
        let expert_cache = inp.expert_buffers as u64 * inp.expert_bytes;
        let scratch = scratch_bytes(d, inp.chunk, inp.logits_rows);
        let mut p = MemoryPlan {
            trunk_resident,
            trunk_ring: 0,
            model_tables,
            lm_head_resident_rows: d.v as u64,
            lm_head_rows: d.v as u64,
            embedding_resident: true,
            expert_cache,
            kda_state,
            mla_cache,
            scratch,
            tokenizer: inp.tokenizer,
            tensor_index: inp.tensor_index,
            total: 0,
            available: None,
        };
        p.total = p.items_total();
        p
    }

    /// Refuses the plan (exit 3) when it needs more than `available`, naming every large item
    /// and the shortfall. An unknown figure is accepted (the plan is printed either way).
    pub fn check(&self) -> Result<()> {
        if let Some(avail) = self.available {
            if self.total > avail {
                let (need, have) = gb_pair(self.total, avail);
                return Err(Error::resources(format!(
                    "memory plan does not fit: needs {} (trunk {}, model tables {}, experts {}, KDA state {}, MLA cache {}, scratch {}) but {} is available, short by {}; use fewer positions (--gen, a shorter prompt) or --layers, or free memory",
                    need,
                    gb(self.trunk_resident),
                    gb(self.model_tables),
                    gb(self.expert_cache),
                    gb(self.kda_state),
                    gb(self.mla_cache),
                    gb(self.scratch),
                    have,
                    gb(self.total - avail)
                )));
            }
        }
        Ok(())
    }

    /// What the model-tables item holds: `lm_head rows resident R/V, embedding streamed`.
    pub fn tables_desc(&self) -> String {
        format!(
            "lm_head rows resident {}/{}, embedding {}",
            self.lm_head_resident_rows,
            self.lm_head_rows,
            if self.embedding_resident {
                "resident"
            } else {
                "streamed"
            }
        )
    }

    /// The plan as report lines (ENGINE.md §6).
    pub fn lines(&self) -> String {
        let avail = match self.available {
            Some(a) => gb(a),
            None => "unknown".to_string(),
        };
        format!(
            "memory plan: total {} of {} available\n  trunk resident {}, trunk ring {}, model tables {} ({}), expert cache {}, KDA state {}, MLA cache {}, scratch {}, tensor index {}, tokenizer {}",
            gb(self.total),
            avail,
            gb(self.trunk_resident),
            gb(self.trunk_ring),
            gb(self.model_tables),
            self.tables_desc(),
            gb(self.expert_cache),
            gb(self.kda_state),
            gb(self.mla_cache),
            gb(self.scratch),
            gb(self.tensor_index),
            gb(self.tokenizer)
        )
    }
}

/// Decimal gigabytes with enough digits for tiny and huge figures: GB, MB, kB (decimal), and
/// below 10 kB the exact bytes, so a non-zero size never reads as zero.
pub fn gb(bytes: u64) -> String {
    let g = bytes as f64 / 1e9;
    if g >= 10.0 {
        format!("{g:.1} GB")
    } else if g >= 0.01 {
        format!("{g:.3} GB")
    } else if bytes >= 1_000_000 {
        format!("{:.1} MB", bytes as f64 / 1e6)
    } else if bytes >= 10_000 {
        format!("{:.1} kB", bytes as f64 / 1e3)
    } else {
        format!("{bytes} bytes")
    }
}

/// `a` and `b` as [`gb`] gives them, with more digits (down to the exact bytes) when two
/// different sizes would read the same: for messages that compare them ("the budget … is
/// below the minimum …").
pub fn gb_pair(a: u64, b: u64) -> (String, String) {
    let (x, y) = (gb(a), gb(b));
    if x != y || a == b {
        return (x, y);
    }
    // Large sizes: more decimals of GB; small ones (or still equal): the exact bytes.
    for digits in (4..=8).filter(|_| a.min(b) >= 10_000_000) {
        let f = |v: u64| format!("{:.digits$} GB", v as f64 / 1e9);
        let (x, y) = (f(a), f(b));
        if x != y {
            return (x, y);
        }
    }
    (format!("{a} bytes"), format!("{b} bytes"))
}

// ---------------------------------------------------------------------------------------------
// Budgets, presets and the streaming plan (ENGINE.md §4)
// ---------------------------------------------------------------------------------------------

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

/// Bytes a buffer for an `n`-byte payload takes (the widened direct-read window, FORMATS.md
/// §6): what a pinned layer or a ring slot really costs.
pub fn buffer_bytes(n: u64) -> u64 {
    crate::io::window_capacity(n as usize).unwrap_or(usize::MAX) as u64
}

/// Which trunk layers are pinned and how the rest stream (ENGINE.md §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrunkChoice {
    /// Per bound layer: true if pinned (resident).
    pub pinned: Vec<bool>,
    /// Ring slots (0 when every layer is pinned).
    pub ring_slots: usize,
    /// Bytes of each ring slot (the largest unpinned layer's buffer).
    pub slot_bytes: u64,
    /// Bytes of the pinned layers' buffers.
    pub pinned_bytes: u64,
    /// Run bytes read per forward pass (the unpinned layers).
    pub streamed_bytes: u64,
    /// Why this choice, for the report.
    pub reason: String,
}

impl TrunkChoice {
    /// Pinned layers.
    pub fn n_pinned(&self) -> usize {
        self.pinned.iter().filter(|p| **p).count()
    }
    /// pinned + ring bytes.
    pub fn bytes(&self) -> u64 {
        self.pinned_bytes + self.ring_slots as u64 * self.slot_bytes
    }
}

/// Compact list of layer indices: `0, 3-5, 9` (`none` when empty).
pub fn layer_list(ls: impl IntoIterator<Item = usize>) -> String {
    let v: Vec<usize> = ls.into_iter().collect();
    index_ranges(&v, "-", ", ")
}

/// Runs of consecutive indices of an ascending list, each `a{dash}b` (or `a` alone), joined by
/// `sep`; `none` when empty.
pub fn index_ranges(v: &[usize], dash: &str, sep: &str) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}{dash}{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(sep)
    }
}

/// The pinned set and ring of a trunk budget (the fixed point of ENGINE.md §4–§5).
///
/// `runs[l]` is layer l's run length; a pinned layer costs `buffer_bytes(run)`, and every ring
/// slot must hold the largest *unpinned* layer — which depends on what is pinned, hence the
/// fixed point. Among all pinned sets that fit `pinned + ring × slot ≤ budget`, the one
/// streaming the fewest bytes per forward pass is chosen (ties: less memory). Layers of equal
/// size are interchangeable for that count, so the search runs over how many of each size are
/// pinned, and the pinned ones of a size are spread evenly over the walk (so streamed layers
/// alternate with pinned ones and read-ahead has compute to hide behind).
///
/// `ring`: `Some(n)` forces n slots (≥ 1); `None` prefers 2 (read-ahead), else 1. When every
/// layer fits, all are pinned and there is no ring.
///
/// Errors (exit 3): the budget cannot hold even the ring slot(s) for the largest layer; the
/// message gives the minimum.
pub fn choose_trunk(runs: &[u64], budget: u64, ring: Option<usize>) -> Result<TrunkChoice> {
    let cost: Vec<u64> = runs.iter().map(|&r| buffer_bytes(r)).collect();
    let all: u64 = cost.iter().sum();
    let largest = cost.iter().copied().max().unwrap_or(0);
    if all <= budget {
        return Ok(TrunkChoice {
            pinned: vec![true; runs.len()],
            ring_slots: 0,
            slot_bytes: 0,
            pinned_bytes: all,
            streamed_bytes: 0,
            reason: format!(
                "all {} layers pinned ({}): the trunk budget {} holds the whole trunk",
                runs.len(),
                gb(all),
                gb(budget)
            ),
        });
    }
    // Size classes, largest first: (cost, run, layers ascending).
    let mut classes: Vec<(u64, u64, Vec<usize>)> = Vec::new();
    for (l, (&c, &r)) in cost.iter().zip(runs).enumerate() {
        match classes.iter_mut().find(|k| k.0 == c) {
            Some(k) => k.2.push(l),
            None => classes.push((c, r, vec![l])),
        }
    }
    classes.sort_by_key(|k| std::cmp::Reverse(k.0));
    let rings: Vec<usize> = match ring {
        Some(n) => vec![n.max(1)],
        None => vec![2, 1],
    };
    let combos: u128 = classes.iter().map(|k| k.2.len() as u128 + 1).product();
    for &r in &rings {
        // Best (streamed, memory, counts).
        let mut best: Option<(u64, u64, Vec<usize>)> = None;
        let mut consider = |counts: &[usize]| {
            let mut pinned = 0u64;
            let mut streamed = 0u64;
            let mut slot = 0u64;
            for (k, &c) in classes.iter().zip(counts) {
                pinned += c as u64 * k.0;
                streamed += (k.2.len() - c) as u64 * k.1;
                if c < k.2.len() {
                    slot = slot.max(k.0);
                }
            }
            if slot == 0 {
                return; // all pinned: does not fit (checked above)
            }
            let mem = pinned + r as u64 * slot;
            if mem > budget {
                return;
            }
            if best.as_ref().is_none_or(|b| (streamed, mem) < (b.0, b.1)) {
                best = Some((streamed, mem, counts.to_vec()));
            }
        };
        if combos <= 4_000_000 {
            let mut counts = vec![0usize; classes.len()];
            loop {
                consider(&counts);
                // odometer
                let mut i = 0;
                loop {
                    if i == counts.len() {
                        break;
                    }
                    if counts[i] < classes[i].2.len() {
                        counts[i] += 1;
                        break;
                    }
                    counts[i] = 0;
                    i += 1;
                }
                if i == counts.len() {
                    break;
                }
            }
        } else {
            // Many distinct sizes: for each possible slot class, pin greedily largest first.
            for j in 0..classes.len() {
                let mut counts: Vec<usize> = classes.iter().map(|k| k.2.len()).collect();
                counts[j] = 0;
                let mut left = budget.saturating_sub(
                    r as u64 * classes[j].0
                        + classes[..j]
                            .iter()
                            .map(|k| k.0 * k.2.len() as u64)
                            .sum::<u64>(),
                );
                for (i, k) in classes.iter().enumerate().skip(j) {
                    let n = if i == j { k.2.len() - 1 } else { k.2.len() };
                    let c = ((left / k.0) as usize).min(n);
                    counts[i] = c;
                    left -= c as u64 * k.0;
                }
                consider(&counts);
            }
        }
        if let Some((streamed, _, counts)) = best {
            let mut pinned = vec![false; runs.len()];
            let mut slot = 0u64;
            let mut slot_layer = 0usize;
            for (k, &c) in classes.iter().zip(&counts) {
                let n = k.2.len();
                for i in 0..c {
                    // spread c of n evenly
                    let idx = ((2 * i + 1) * n) / (2 * c);
                    pinned[k.2[idx.min(n - 1)]] = true;
                }
                if c < n && k.0 > slot {
                    slot = k.0;
                    slot_layer = *k.2.iter().find(|&&l| !pinned[l]).unwrap_or(&k.2[0]);
                }
            }
            let pinned_bytes: u64 = (0..runs.len())
                .filter(|&l| pinned[l])
                .map(|l| cost[l])
                .sum();
            let n_p = pinned.iter().filter(|p| **p).count();
            let mut reason = format!(
                "pinned {n_p}/{} layers ({}): {}; ring {r} × {} (slots sized to the largest streamed layer, {slot_layer}); streams {} per forward pass",
                runs.len(),
                gb(pinned_bytes),
                layer_list((0..runs.len()).filter(|&l| pinned[l])),
                gb(slot),
                gb(streamed)
            );
            let big = cost.iter().position(|&c| c == largest).unwrap_or(0);
            if pinned[big] && classes.len() > 1 {
                reason += &format!(
                    "; layer {big} pinned because it is the largest ({}): streaming it would make every ring slot that big",
                    gb(largest)
                );
            } else if !pinned[big] && n_p > 0 {
                reason += &format!(
                    "; the largest layer ({big}, {}) streams: pinning it does not fit next to the ring",
                    gb(largest)
                );
            }
            if ring.is_none() && r == 1 {
                reason += "; one slot only (two do not fit): reads are synchronous";
            } else if r >= 2 {
                reason += "; the next streamed layer is read while the current one computes";
            }
            return Ok(TrunkChoice {
                pinned,
                ring_slots: r,
                slot_bytes: slot,
                pinned_bytes,
                streamed_bytes: streamed,
                reason,
            });
        }
    }
    let r = rings.last().copied().unwrap_or(1) as u64;
    let (have, need) = gb_pair(budget, r * largest);
    Err(Error::resources(format!(
        "trunk budget {} is below the minimum {}: {} ring slot{} for the largest layer ({}); raise --trunk-gb or --mem-gb, or choose a larger preset",
        have,
        need,
        r,
        if r == 1 { "" } else { "s" },
        gb(largest)
    )))
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

/// The sizes of the model the planner needs (bytes unless said otherwise).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSizes {
    /// Run length of each bound layer (the layer buffer).
    pub layer_runs: Vec<u64>,
    /// Widened small vectors of all bound layers (always resident).
    pub layer_vectors: u64,
    /// `embed_tokens` bytes, and `lm_head` bytes (0 when tied).
    pub embed: u64,
    pub lm_head: u64,
    /// Bytes of one table row (H × 2), and V.
    pub row: u64,
    pub vocab: usize,
    /// Model-level vectors widened (norm, output AttnRes fold).
    pub table_vectors: u64,
    /// Bytes of one routed expert, the stride of a cache slot, experts of the bound MoE
    /// layers, and top-k (0 experts when no MoE layer is bound).
    pub expert: u64,
    pub expert_stride: u64,
    pub experts_total: usize,
    pub top_k: usize,
    /// KDA state, MLA cache, scratch (without the lm_head block), tokenizer, tensor index.
    pub kda_state: u64,
    pub mla_cache: u64,
    pub scratch: u64,
    pub tokenizer: u64,
    pub tensor_index: u64,
    /// Logits rows a forward keeps at once (for the lm_head block scratch).
    pub logits_rows: usize,
}

/// How the model tables are held (ENGINE.md §4; the tables line of §6): a prefix of lm_head
/// rows resident (possibly all V, possibly none), the rest streamed in chunks through slots,
/// and the embedding table resident or read row by row.
///
/// Why this order: a resident lm_head byte saves one byte read per decode token, an
/// expert-cache slot beyond top-k saves only its hit rate (0.2–0.4 measured), and a resident
/// embedding table saves 2·H bytes per token. Each logit is its own `dot`, so where a row comes
/// from never changes a bit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablesPlan {
    /// lm_head rows 0..R held resident (R = V: the whole table; tied: of the one table).
    pub head_resident_rows: usize,
    /// V.
    pub vocab: usize,
    /// `embed_tokens` resident. Tied: true exactly when the whole table is resident (rows
    /// below R are then served from the resident prefix, the others read per token).
    pub embed_resident: bool,
    /// `tie_word_embeddings`: the lm_head is `embed_tokens`.
    pub tied: bool,
    /// Rows per streamed lm_head chunk.
    pub chunk_rows: usize,
    /// Chunk slots (0 when the whole lm_head is resident).
    pub chunk_slots: usize,
    /// Bytes: the plan's `model_tables` item.
    pub bytes: u64,
    /// Why, for the report.
    pub reason: String,
}

impl TablesPlan {
    /// True when anything of the tables is read during the run.
    pub fn streamed(&self) -> bool {
        self.head_resident_rows < self.vocab || !self.embed_resident
    }
    /// The tables line of the report (ENGINE.md §6).
    pub fn line(&self) -> String {
        let r = self.head_resident_rows;
        let head = if r >= self.vocab {
            format!("lm_head resident (all {} rows)", self.vocab)
        } else if r == 0 {
            format!(
                "lm_head streamed (all {} rows, in chunks of {} rows through {} slots)",
                self.vocab, self.chunk_rows, self.chunk_slots
            )
        } else {
            format!(
                "lm_head rows 0..{r} resident, rows {r}..{} streamed (chunks of {} rows through {} slots)",
                self.vocab, self.chunk_rows, self.chunk_slots
            )
        };
        let embed = match (self.tied, self.embed_resident) {
            (true, true) => "embedding = lm_head (tied)".to_string(),
            (true, false) => format!(
                "embedding = lm_head (tied): rows below {r} from the resident prefix, the others read per token"
            ),
            (false, true) => "embedding resident".to_string(),
            (false, false) => "embedding rows read per token".to_string(),
        };
        format!(
            "model tables: {}; {head}; {embed}; {}",
            gb(self.bytes),
            self.reason
        )
    }
}

/// The streaming configuration of a run and its memory plan.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    /// The items (FORMATS.md §10 `memory.plan`).
    pub memory: MemoryPlan,
    /// `auto`, a preset name, or `mem-gb`.
    pub budget_name: String,
    /// The whole-process budget when one was given or derived (`--mem-gb`, auto).
    pub budget: Option<u64>,
    /// Trunk budget used for the pinned set.
    pub trunk_budget: u64,
    /// The pinned set and ring.
    pub trunk: TrunkChoice,
    /// The model tables: resident lm_head rows, chunk slots, embedding.
    pub tables: TablesPlan,
    /// Expert-cache slots and bytes per slot.
    pub cache_slots: usize,
    pub cache_slot_bytes: u64,
    /// Why this split, for the report.
    pub notes: Vec<String>,
}

/// Share of the available memory `auto` leaves free: max(this × available, [`AUTO_MARGIN_MIN`]).
pub const AUTO_MARGIN_SHARE: f64 = 0.10;
/// At least this much is left free by `auto`.
pub const AUTO_MARGIN_MIN: u64 = 500_000_000;
/// Resident memory of the process itself, counted in the plan's `scratch`: the binary's code and
/// data, libc, the stacks of the compute and I/O threads, allocator bookkeeping and load-time
/// transients (5–7 MB measured on the test checkpoints), so that a hard limit of the plan's
/// size holds the whole process (ENGINE.md §4).
pub const PROCESS_BASELINE: u64 = 12 << 20;
/// Target bytes of one lm_head chunk slot when the tables stream.
pub const HEAD_CHUNK_BYTES: u64 = 32 << 20;
/// lm_head chunk slots when some of the head streams: one chunk multiplied while the next is
/// read. More slots would only read further ahead, and a slot's bytes are worth more as
/// resident rows: a resident row is never read at all.
pub const HEAD_CHUNK_SLOTS: usize = 2;

impl ModelSizes {
    /// lm_head rows per chunk when streamed: about [`HEAD_CHUNK_BYTES`], and at most a quarter
    /// of the table (so that even a tiny model streams its head in several chunks).
    pub fn head_chunk_rows(&self) -> usize {
        let by_bytes = (HEAD_CHUNK_BYTES / self.row.max(1)) as usize;
        by_bytes.min(self.vocab.div_ceil(4)).max(1)
    }
    /// `tie_word_embeddings` (no separate lm_head).
    pub fn tied(&self) -> bool {
        self.lm_head == 0
    }
    /// Bytes of the lm_head table ([V, H] BF16; `embed_tokens` when tied).
    pub fn head_bytes(&self) -> u64 {
        if self.tied() {
            self.embed
        } else {
            self.lm_head
        }
    }
    /// Model tables with lm_head rows 0..`rows` resident (clamped to V) and the embedding
    /// resident or not (ignored when tied): the resident prefix in one buffer, the chunk
    /// slots unless every row is resident, the embedding table or a one-row window (tied: the
    /// window unless every row is resident), and the model-level vectors. Buffers count as
    /// [`buffer_bytes`] (they are read by widened direct reads).
    pub fn tables_bytes(&self, rows: usize, embed_resident: bool) -> u64 {
        let rows = rows.min(self.vocab);
        let full = rows == self.vocab;
        let head = if full {
            buffer_bytes(self.head_bytes())
        } else {
            let prefix = if rows > 0 {
                buffer_bytes(rows as u64 * self.row)
            } else {
                0
            };
            prefix
                + HEAD_CHUNK_SLOTS as u64 * buffer_bytes(self.row * self.head_chunk_rows() as u64)
        };
        let embed = match (self.tied(), full, embed_resident) {
            (true, true, _) => 0,
            (true, false, _) | (false, _, false) => buffer_bytes(self.row),
            (false, _, true) => buffer_bytes(self.embed),
        };
        head + embed + self.table_vectors
    }
    /// Model tables resident: both tables + the model-level vectors.
    pub fn tables_resident(&self) -> u64 {
        self.tables_bytes(self.vocab, true)
    }
    /// Model tables streamed: one embedding row window + the lm_head chunk slots + the
    /// model-level vectors.
    pub fn tables_streamed(&self) -> u64 {
        self.tables_bytes(0, false)
    }
    /// The most lm_head rows (< V) a resident prefix of at most `bytes` holds.
    pub fn head_rows_within(&self, bytes: u64) -> usize {
        if self.row == 0 || self.vocab == 0 {
            return 0;
        }
        let max = self.vocab - 1;
        let mut r = ((bytes.saturating_sub(3 * crate::io::ALIGN as u64)) / self.row) as usize;
        r = r.min(max);
        while r < max && buffer_bytes((r as u64 + 1) * self.row) <= bytes {
            r += 1;
        }
        while r > 0 && buffer_bytes(r as u64 * self.row) > bytes {
            r -= 1;
        }
        r
    }
    /// The tables plan for `rows` resident lm_head rows and the embedding resident or not.
    fn tables_plan(&self, rows: usize, embed_resident: bool, reason: String) -> TablesPlan {
        let rows = rows.min(self.vocab);
        let full = rows == self.vocab;
        TablesPlan {
            head_resident_rows: rows,
            vocab: self.vocab,
            embed_resident: if self.tied() { full } else { embed_resident },
            tied: self.tied(),
            chunk_rows: self.head_chunk_rows(),
            chunk_slots: if full { 0 } else { HEAD_CHUNK_SLOTS },
            bytes: self.tables_bytes(rows, embed_resident),
            reason,
        }
    }
    /// Scratch including the lm_head block (rows × chunk rows fp32) and the
    /// [`PROCESS_BASELINE`].
    pub fn scratch_with_head(&self) -> u64 {
        self.scratch
            + 4 * self.logits_rows as u64 * self.head_chunk_rows() as u64
            + PROCESS_BASELINE
    }
    /// The fixed items (independent of the budget split).
    pub fn fixed(&self) -> u64 {
        // saturating, as MemoryPlan::items_total
        [
            self.kda_state,
            self.mla_cache,
            self.scratch_with_head(),
            self.tokenizer,
            self.tensor_index,
            self.layer_vectors,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
    /// Minimum expert-cache bytes: top-k slots (0 without MoE layers).
    pub fn cache_min(&self) -> u64 {
        if self.experts_total == 0 {
            0
        } else {
            self.top_k.min(self.experts_total) as u64 * self.expert_stride
        }
    }
    /// Expert-cache bytes holding every bound expert.
    pub fn cache_max(&self) -> u64 {
        self.experts_total as u64 * self.expert_stride
    }
    /// The whole trunk pinned.
    pub fn trunk_all(&self) -> u64 {
        self.layer_runs.iter().map(|&r| buffer_bytes(r)).sum()
    }
    /// One ring slot for the largest layer.
    pub fn trunk_min(&self) -> u64 {
        self.layer_runs
            .iter()
            .map(|&r| buffer_bytes(r))
            .max()
            .unwrap_or(0)
    }
}

/// Expert-cache slots for a cache budget, clamped to every bound expert.
fn cache_slots(s: &ModelSizes, bytes: u64) -> usize {
    if s.experts_total == 0 || s.expert_stride == 0 {
        return 0;
    }
    ((bytes / s.expert_stride) as usize).min(s.experts_total)
}

/// Splits what a whole-process budget leaves after the fixed items, the trunk, the top-k cache
/// floor and the streamed-table minimum (`rest`): lm_head rows first, then expert-cache slots
/// (unless `--cache-gb` fixed the cache), then the embedding table (ENGINE.md §4; the reasons
/// in [`TablesPlan`]). Returns the tables plan and the cache bytes.
fn split_rest(
    s: &ModelSizes,
    mut rest: u64,
    cache_floor: u64,
    cache_fixed: bool,
) -> (TablesPlan, u64) {
    let v = s.vocab;
    // 1. lm_head rows: the whole head (which also frees the chunk slots), or a prefix.
    let full_extra = s.tables_bytes(v, false).saturating_sub(s.tables_streamed());
    let rows = if full_extra <= rest {
        rest -= full_extra;
        v
    } else {
        let r = s.head_rows_within(rest);
        if r > 0 {
            rest -= buffer_bytes(r as u64 * s.row);
        }
        r
    };
    // 2. expert-cache slots beyond top-k, up to every expert.
    let cache = if cache_fixed {
        cache_floor
    } else {
        let c = s.cache_max().max(cache_floor).min(cache_floor + rest);
        rest -= c - cache_floor;
        c
    };
    // 3. the embedding table (untied; tied it is the head).
    let embed_extra = s
        .tables_bytes(rows, true)
        .saturating_sub(s.tables_bytes(rows, false));
    let embed = !s.tied() && embed_extra <= rest;
    let head_gb = gb(s.head_bytes());
    let reason = if rows == v {
        if s.tied() || embed {
            "the budget holds both tables".to_string()
        } else {
            format!(
                "the lm_head comes before expert-cache slots (a resident lm_head byte saves a byte read per token) and the embedding last (a resident table saves {} B per token); resident it needs {} more than the budget leaves",
                s.row,
                gb(embed_extra - rest)
            )
        }
    } else {
        let missing = full_extra - (s.tables_bytes(rows, false) - s.tables_streamed());
        format!(
            "lm_head rows come before expert-cache slots beyond top-k (a resident row is never read again; a cache slot saves only its hit rate); the whole lm_head ({head_gb}) needs {} more than the budget leaves, so {} per token is read",
            gb(missing),
            gb((v - rows) as u64 * s.row)
        )
    };
    (s.tables_plan(rows, embed, reason), cache)
}

/// Plans a run (ENGINE.md §4): resolves the budget into a trunk budget, the model tables
/// ([`TablesPlan`]) and expert-cache slots, chooses the pinned set ([`choose_trunk`]) and adds
/// up every item. `available` is min(MemAvailable, cgroup headroom) when known.
///
/// * Preset: its trunk and cache budgets (overridable), tables resident except `ultra`
///   (streamed); everything else on top.
/// * `--mem-gb` or `auto` (available − max(10 %, 0.5 GB)): the fixed items first, then the
///   trunk until fully resident (keeping top-k cache slots and streamed tables), then lm_head
///   rows resident (a prefix, possibly all V), then the expert cache up to every expert, then
///   the embedding table. `--trunk-gb`/`--cache-gb` fix their parts.
///
/// Errors (exit 3, before anything is allocated): a budget below its minimum (naming the
/// minimum and the shortfall), a `--cache-gb` below top-k slots, a plan larger than the budget
/// or than what is available. Exit 2: `--mem-gb` with a fixed preset.
pub fn plan_run(s: &ModelSizes, b: &Budget, available: Option<u64>) -> Result<RunPlan> {
    let mut notes = Vec::new();
    if let Some(c) = b.cache {
        if c < s.cache_min() {
            let (have, need) = gb_pair(c, s.cache_min());
            return Err(Error::resources(format!(
                "flag `--cache-gb`: {} is below the expert cache's minimum of top-k = {} slots of {} bytes ({}), short by {}",
                have,
                s.top_k,
                s.expert_stride,
                need,
                gb(s.cache_min() - c)
            )));
        }
    }
    if let Some(0) = b.ring {
        return Err(Error::invalid("flag `--trunk-ring`: must be at least 1"));
    }
    // A trunk or cache budget above what the model can use means "all of it": plan that much,
    // not a budget the machine cannot give (which would be refused as if the model needed it).
    let clamped = Budget {
        trunk: b.trunk.map(|t| t.min(s.trunk_all())),
        cache: b.cache.map(|c| c.min(s.cache_max().max(s.cache_min()))),
        ..b.clone()
    };
    for (flag, asked, used, what) in [
        ("--trunk-gb", b.trunk, clamped.trunk, "the whole trunk"),
        ("--cache-gb", b.cache, clamped.cache, "every expert"),
    ] {
        if let (Some(a), Some(u)) = (asked, used) {
            if u < a {
                notes.push(format!(
                    "{flag} {} is more than {what} needs ({}); planning {}",
                    gb(a),
                    gb(u),
                    gb(u)
                ));
            }
        }
    }
    let b = &clamped;
    let (budget_name, budget, trunk_budget, preset_tables, cache_bytes) = match b.preset {
        Some(p) => {
            if b.mem.is_some() {
                return Err(Error::invalid(format!(
                    "flags `--preset {}` and `--mem-gb`: a fixed preset sets its own budgets; give one of them (or `--preset auto --mem-gb X`)",
                    p.name
                )));
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
                let (have, need) = gb_pair(m, min_total);
                return Err(Error::resources(format!(
                    "memory plan does not fit: the budget {} ({name}) is below the minimum {} this plan needs (fixed items {} incl. KDA state {} and MLA cache {}; trunk {}; streamed model tables {}; expert cache {}), short by {}; give a larger --mem-gb, fewer positions (--gen, a shorter prompt), or free memory",
                    have,
                    need,
                    gb(fixed),
                    gb(s.kda_state),
                    gb(s.mla_cache),
                    gb(b.trunk.unwrap_or(s.trunk_min())),
                    gb(s.tables_streamed()),
                    gb(b.cache.unwrap_or(s.cache_min())),
                    gb(min_total - m)
                )));
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
    let trunk = choose_trunk(&s.layer_runs, trunk_budget, b.ring)?;
    let (tables, cache_bytes) = match (budget, preset_tables) {
        (Some(m), _) => {
            let w = m - s.fixed();
            let cache_floor = b.cache.unwrap_or(s.cache_min());
            let rest = w.saturating_sub(trunk.bytes() + cache_floor + s.tables_streamed());
            split_rest(s, rest, cache_floor, b.cache.is_some())
        }
        (None, Some(t)) => (t, cache_bytes),
        (None, None) => return Err(Error::internal("a plan without a budget or a preset")),
    };
    if tables.head_resident_rows < s.vocab && budget.is_some() {
        notes.push(format!(
            "lm_head rows 0..{} of {} resident",
            tables.head_resident_rows, s.vocab
        ));
    }
    let slots = cache_slots(s, cache_bytes);
    let mut p = MemoryPlan {
        trunk_resident: trunk.pinned_bytes + s.layer_vectors,
        trunk_ring: trunk.ring_slots as u64 * trunk.slot_bytes,
        model_tables: tables.bytes,
        lm_head_resident_rows: tables.head_resident_rows as u64,
        lm_head_rows: s.vocab as u64,
        embedding_resident: tables.embed_resident,
        expert_cache: slots as u64 * s.expert_stride,
        kda_state: s.kda_state,
        mla_cache: s.mla_cache,
        scratch: s.scratch_with_head(),
        tokenizer: s.tokenizer,
        tensor_index: s.tensor_index,
        total: 0,
        available,
    };
    p.total = p.items_total();
    if let Some(m) = budget {
        if p.total > m {
            let (need, have) = gb_pair(p.total, m);
            return Err(Error::resources(format!(
                "memory plan {} exceeds the budget {} ({budget_name}), short by {}; lower --trunk-gb or --cache-gb, or raise --mem-gb",
                need,
                have,
                gb(p.total - m)
            )));
        }
    }
    Ok(RunPlan {
        memory: p,
        budget_name,
        budget,
        trunk_budget,
        trunk,
        tables,
        cache_slots: slots,
        cache_slot_bytes: s.expert_stride,
        notes,
    })
}

/// The smallest plan of a model (one ring slot for the largest layer, nothing pinned, model
/// tables streamed, top-k cache slots): what a refusal reports as the figures of the run.
pub fn minimum_plan(s: &ModelSizes, available: Option<u64>) -> MemoryPlan {
    let mut p = MemoryPlan {
        trunk_resident: s.layer_vectors,
        trunk_ring: s.trunk_min(),
        model_tables: s.tables_streamed(),
        lm_head_resident_rows: 0,
        lm_head_rows: s.vocab as u64,
        embedding_resident: false,
        expert_cache: s.cache_min(),
        kda_state: s.kda_state,
        mla_cache: s.mla_cache,
        scratch: s.scratch_with_head(),
        tokenizer: s.tokenizer,
        tensor_index: s.tensor_index,
        total: 0,
        available,
    };
    p.total = p.items_total();
    p
}

/// Run length of layer `l`'s trunk from the catalogue (MODEL.md §4, §9: 2,341,213,184 B for
/// the released layer 0): what the planner assumes before the checkpoint is indexed.
pub fn layer_run_bytes(cfg: &crate::config::Config, l: usize) -> u64 {
    crate::catalogue::layer_tensors(cfg, l)
        .iter()
        .map(|t| t.nbytes().unwrap_or(0))
        .sum()
}

/// Bytes of layer `l`'s small vectors as bound (fp32), which stay resident even when its
/// matrices stream.
pub fn layer_vector_bytes(d: &Dims, l: usize) -> u64 {
    let (h, pk, dk, hk, kc) = (
        d.h as u64,
        d.pk as u64,
        d.dk as u64,
        d.hk as u64,
        d.kc as u64,
    );
    let mut f = 4 * h;
    match d.kinds[l] {
        crate::model::AttnKind::Kda => f += 3 * pk * kc + pk + dk + hk,
        crate::model::AttnKind::Mla => f += d.rq as u64 + d.rkv as u64,
    }
    if l >= d.first_dense {
        f += d.e as u64 + d.l as u64;
    }
    4 * f
}
