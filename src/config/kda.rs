//! The KDA section of MODEL.md §2.3 (head count and head dim from their own scope only, §2.2)
//! and the layer map (§2.5 rules 3-5): `full_attn_layers`, optional `kda_layers`.

use super::lookup::Lookup;
use super::{AttnKind, ConfigShape};
use std::fmt::Write as _;

/// The KDA keys, validated.
pub(super) struct Kda {
    pub(super) kda_num_heads: usize,
    pub(super) kda_head_dim: usize,
    pub(super) short_conv_kernel_size: usize,
    pub(super) gate_lower_bound: f64,
}

/// A layer list as written: the path it was read from and its entries.
pub(super) type RawList = (String, Vec<i64>);

/// The layer lists as read, before they are checked against `num_hidden_layers`.
pub(super) struct RawLayers {
    /// `full_attn_layers` (`None`: missing or not an int list, recorded).
    full: Option<RawList>,
    /// `kda_layers`: `Some(None)` when absent, `None` when not an int list (recorded).
    kda: Option<Option<RawList>>,
    /// `use_full_rank_gate` (must be true).
    pub(super) use_full_rank_gate: Option<bool>,
}

/// Reads the KDA keys in table order; `None` when any failed (recorded).
pub(super) fn read(lk: &mut Lookup<'_>, shape: ConfigShape) -> Option<Kda> {
    let kda_num_heads = lk.req_kda("num_heads", "kda_num_heads", shape);
    let kda_head_dim = lk.req_kda("head_dim", "kda_head_dim", shape);
    let short_conv_kernel_size = lk.req_int("short_conv_kernel_size", "short_conv_kernel_size", 1);
    let gate_lower_bound = {
        let h = lk.find("gate_lower_bound", "gate_lower_bound");
        match lk.required(h, "gate_lower_bound") {
            Some(h) => match lk.as_float(&h) {
                Some(v) if v < 0.0 => Some(v),
                Some(v) => {
                    lk.bad(&h.path, format!("must be < 0, found {v}"));
                    None
                }
                None => None,
            },
            None => None,
        }
    };
    Some(Kda {
        kda_num_heads: kda_num_heads?,
        kda_head_dim: kda_head_dim?,
        short_conv_kernel_size: short_conv_kernel_size?,
        gate_lower_bound: gate_lower_bound?,
    })
}

/// Reads `full_attn_layers`, `kda_layers` and `use_full_rank_gate` as written.
pub(super) fn read_layer_lists(lk: &mut Lookup<'_>) -> RawLayers {
    let full_hit = lk.find("full_attn_layers", "full_attn_layers");
    let full = match lk.required(full_hit, "full_attn_layers") {
        Some(h) => lk.int_list(&h).map(|l| (h.path.clone(), l)),
        None => None,
    };
    let kda = match lk.find("kda_layers", "kda_layers") {
        Some(h) => lk.int_list(&h).map(|l| Some((h.path.clone(), l))),
        None => Some(None),
    };
    let use_full_rank_gate = lk.opt_bool("use_full_rank_gate", true, Some(true));
    RawLayers {
        full,
        kda,
        use_full_rank_gate,
    }
}

/// The layer map checked against `num_hidden_layers` (§2.5 rules 3-5).
pub(super) struct LayerMap {
    /// One kind per zero-based layer; `None` when a rule failed (recorded).
    pub(super) kinds: Option<Vec<AttnKind>>,
    /// One-based MLA layers as written (negative entries clamped to 0).
    pub(super) full_attn_layers: Vec<usize>,
    /// One-based KDA layers as written, when present.
    pub(super) kda_layers: Option<Vec<usize>>,
}

/// Marks the one-based layers of `list` in `seen`, recording out-of-range and duplicate
/// entries; false when one was found.
fn mark(lk: &mut Lookup<'_>, path: &str, list: &[i64], seen: &mut [bool]) -> bool {
    let nl = seen.len();
    let mut ok = true;
    for (i, &v) in list.iter().enumerate() {
        if v < 1 || v > nl as i64 {
            lk.bad(
                &format!("{path}[{i}]"),
                format!("one-based layer index {v} is outside 1..{nl} (num_hidden_layers {nl})"),
            );
            ok = false;
            continue;
        }
        let l = (v - 1) as usize;
        if seen[l] {
            lk.bad(&format!("{path}[{i}]"), format!("duplicate layer {v}"));
            ok = false;
        }
        seen[l] = true;
    }
    ok
}

fn list_str(v: &[usize]) -> String {
    let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", s.join(", "))
}

/// Builds the layer map of `num_hidden_layers` layers from the lists read (§2.5 rules 3-5).
pub(super) fn layer_map(
    lk: &mut Lookup<'_>,
    num_hidden_layers: Option<usize>,
    raw: &RawLayers,
) -> LayerMap {
    let mut map = LayerMap {
        kinds: None,
        full_attn_layers: Vec::new(),
        kda_layers: None,
    };
    let (Some(nl), Some((fpath, flist))) = (num_hidden_layers, &raw.full) else {
        return map;
    };
    let mut seen = vec![false; nl];
    let mut ok = mark(lk, fpath, flist, &mut seen);
    map.full_attn_layers = flist.iter().map(|&v| v.max(0) as usize).collect();
    if ok && seen.iter().all(|&m| m) {
        lk.bad(
            fpath,
            format!(
                "covers all {nl} layers: no KDA layer remains (a misread layer map, docs/formats.md#configjson-keys)"
            ),
        );
        ok = false;
    }
    if let Some(Some((kpath, klist))) = &raw.kda {
        let mut kseen = vec![false; nl];
        ok &= mark(lk, kpath, klist, &mut kseen);
        let both: Vec<usize> = (0..nl)
            .filter(|&l| seen[l] && kseen[l])
            .map(|l| l + 1)
            .collect();
        let neither: Vec<usize> = (0..nl)
            .filter(|&l| !seen[l] && !kseen[l])
            .map(|l| l + 1)
            .collect();
        if !both.is_empty() || !neither.is_empty() {
            let mut msg = format!(
                "is not the exact complement of {fpath} in 1..{nl} (docs/formats.md#configjson-keys):"
            );
            if !both.is_empty() {
                let _ = write!(msg, " in both lists: {}", list_str(&both));
            }
            if !neither.is_empty() {
                if !both.is_empty() {
                    msg.push(';');
                }
                let _ = write!(msg, " in neither list: {}", list_str(&neither));
            }
            lk.bad(kpath, msg);
            ok = false;
        }
        map.kda_layers = Some(klist.iter().map(|&v| v.max(0) as usize).collect());
    }
    if ok {
        let kinds = seen
            .iter()
            .map(|&m| if m { AttnKind::Mla } else { AttnKind::Kda })
            .collect();
        map.kinds = Some(kinds);
    }
    map
}
