//! `quantization_config` (MODEL.md §2.4): MXFP4, group 32, routed experts only.

use super::lookup::{describe, get_non_null, Hit, Lookup};
use super::{QuantGroup, QuantizationConfig};
use crate::json::{Object, Value};

/// §2.4: `quant_method`, `format`, and each group's `num_bits`, `type`, `group_size` and
/// `symmetric` must have exactly the released values.
pub(super) fn read_quantization(lk: &mut Lookup<'_>, hit: &Hit<'_>) -> Option<QuantizationConfig> {
    let path = hit.path.clone();
    let obj = match hit.value {
        Value::Object(o) => o,
        other => {
            lk.bad(&path, format!("expected object, found {}", describe(other)));
            return None;
        }
    };
    let before = lk.problems.len();
    let want_str = |lk: &mut Lookup<'_>, key: &str, must: &str| -> Option<String> {
        let p = format!("{path}.{key}");
        match get_non_null(obj, key) {
            None => {
                lk.bad(
                    &p,
                    format!("missing; must be \"{must}\" (MXFP4, docs/formats.md#configjson-keys)"),
                );
                None
            }
            Some(Value::String(s)) if s == must => Some(s.clone()),
            Some(other) => {
                lk.bad(
                    &p,
                    format!(
                        "must be \"{must}\" (only MXFP4 experts are supported, docs/formats.md#configjson-keys), found {}",
                        describe(other)
                    ),
                );
                None
            }
        }
    };
    let quant_method = want_str(lk, "quant_method", "compressed-tensors");
    let format = want_str(lk, "format", "mxfp4-pack-quantized");
    let quantization_status = match get_non_null(obj, "quantization_status") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            lk.bad(
                &format!("{path}.quantization_status"),
                format!("expected string, found {}", describe(other)),
            );
            None
        }
        None => None,
    };
    let mut groups = Vec::new();
    match get_non_null(obj, "config_groups") {
        Some(Value::Object(g)) if !g.is_empty() => {
            for (name, gv) in g.iter() {
                let gp = format!("{path}.config_groups.{name}");
                if let Some(q) = read_group(lk, &gp, name, gv) {
                    groups.push(q);
                }
            }
        }
        Some(Value::Object(_)) => lk.bad(
            &format!("{path}.config_groups"),
            "is empty; expected one MXFP4 group (docs/formats.md#configjson-keys)",
        ),
        Some(other) => lk.bad(
            &format!("{path}.config_groups"),
            format!("expected object, found {}", describe(other)),
        ),
        None => lk.bad(
            &format!("{path}.config_groups"),
            "missing; expected one MXFP4 group (docs/formats.md#configjson-keys)",
        ),
    }
    let ignore = string_list(lk, obj, &path, "ignore");
    if lk.problems.len() != before {
        return None;
    }
    Some(QuantizationConfig {
        scope: path,
        quant_method: quant_method?,
        format: format?,
        quantization_status,
        groups,
        ignore,
    })
}

/// The optional array of strings `obj[key]` (absent or null: empty); a wrong type is a
/// problem named `{scope}.{key}` or `{scope}.{key}[i]` (MODEL.md §2.4).
fn string_list(lk: &mut Lookup<'_>, obj: &Object, scope: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    match get_non_null(obj, key) {
        None => {}
        Some(Value::Array(items)) => {
            for (i, it) in items.iter().enumerate() {
                match it {
                    Value::String(s) => out.push(s.clone()),
                    other => lk.bad(
                        &format!("{scope}.{key}[{i}]"),
                        format!("expected string, found {}", describe(other)),
                    ),
                }
            }
        }
        Some(other) => lk.bad(
            &format!("{scope}.{key}"),
            format!("expected array of strings, found {}", describe(other)),
        ),
    }
    out
}

fn read_group(lk: &mut Lookup<'_>, gp: &str, name: &str, gv: &Value) -> Option<QuantGroup> {
    let g = match gv {
        Value::Object(o) => o,
        other => {
            lk.bad(gp, format!("expected object, found {}", describe(other)));
            return None;
        }
    };
    let targets = string_list(lk, g, gp, "targets");
    let w = match get_non_null(g, "weights") {
        Some(Value::Object(w)) => w,
        Some(other) => {
            lk.bad(
                &format!("{gp}.weights"),
                format!("expected object, found {}", describe(other)),
            );
            return None;
        }
        None => {
            lk.bad(
                &format!("{gp}.weights"),
                "missing; expected the MXFP4 weight scheme (docs/formats.md#configjson-keys)",
            );
            return None;
        }
    };
    let wp = format!("{gp}.weights");
    let int_must = |lk: &mut Lookup<'_>, key: &str, must: u32| -> Option<u32> {
        let p = format!("{wp}.{key}");
        match get_non_null(w, key) {
            Some(Value::Number(n)) if n.is_integer() && n.as_u64() == Some(u64::from(must)) => {
                Some(must)
            }
            Some(other) => {
                lk.bad(
                    &p,
                    format!(
                        "must be {must} (MXFP4, docs/formats.md#configjson-keys), found {}",
                        describe(other)
                    ),
                );
                None
            }
            None => {
                lk.bad(
                    &p,
                    format!("missing; must be {must} (MXFP4, docs/formats.md#configjson-keys)"),
                );
                None
            }
        }
    };
    let num_bits = int_must(lk, "num_bits", 4);
    let group_size = int_must(lk, "group_size", 32);
    let weight_type = match get_non_null(w, "type") {
        Some(Value::String(s)) if s == "float" => Some(s.clone()),
        Some(other) => {
            lk.bad(
                &format!("{wp}.type"),
                format!(
                    "must be \"float\" (MXFP4, docs/formats.md#configjson-keys), found {}",
                    describe(other)
                ),
            );
            None
        }
        None => {
            lk.bad(
                &format!("{wp}.type"),
                "missing; must be \"float\" (MXFP4, docs/formats.md#configjson-keys)",
            );
            None
        }
    };
    let symmetric = match get_non_null(w, "symmetric") {
        Some(Value::Bool(true)) => Some(true),
        Some(other) => {
            lk.bad(
                &format!("{wp}.symmetric"),
                format!(
                    "must be true (MXFP4, docs/formats.md#configjson-keys), found {}",
                    describe(other)
                ),
            );
            None
        }
        None => {
            lk.bad(
                &format!("{wp}.symmetric"),
                "missing; must be true (MXFP4, docs/formats.md#configjson-keys)",
            );
            None
        }
    };
    let opt_s = |key: &str| {
        get_non_null(w, key)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    Some(QuantGroup {
        name: name.to_string(),
        targets,
        num_bits: num_bits?,
        weight_type: weight_type?,
        group_size: group_size?,
        symmetric: symmetric?,
        strategy: opt_s("strategy"),
        scale_dtype: opt_s("scale_dtype"),
    })
}
