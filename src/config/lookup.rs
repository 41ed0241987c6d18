//! The key lookup of MODEL.md §2.2: the scopes of each shape, released spelling before flat
//! spelling, first hit wins, `null` counts as absent; typed reads that record every problem.

use super::ConfigShape;
use crate::error::{Error, Result};
use crate::json::{Object, Value};

pub(super) struct Scope<'v> {
    /// Path prefix for messages: "" for the root, "text_config." etc.
    prefix: &'static str,
    obj: &'v Object,
}

pub(super) struct Lookup<'v> {
    scopes: Vec<Scope<'v>>,
    /// The only scope the KDA head count/dim may come from (§2.2 exception).
    kda_scope: Option<Scope<'v>>,
    /// Whether the released spellings `num_heads`/`head_dim` may be read in `kda_scope`
    /// (nested: yes, then the `kda_*` fallback; flat: only `kda_num_heads`/`kda_head_dim`).
    kda_released_spelling: bool,
    pub(super) problems: Vec<String>,
    missing: Vec<String>,
    /// Missing KDA keys, searched only in `kda_scope` (§2.2 exception).
    missing_kda: Vec<String>,
}

/// A found value and the full path it was read from.
pub(super) struct Hit<'v> {
    pub(super) path: String,
    pub(super) value: &'v Value,
}

pub(super) fn get_non_null<'v>(obj: &'v Object, key: &str) -> Option<&'v Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("number {}", n.quoted()),
        Value::String(s) if s.len() <= 40 => format!("string \"{s}\""),
        other => other.type_name().to_string(),
    }
}

impl<'v> Lookup<'v> {
    pub(super) fn find(&self, released: &str, flat: &str) -> Option<Hit<'v>> {
        for s in &self.scopes {
            for key in [released, flat] {
                if let Some(v) = get_non_null(s.obj, key) {
                    return Some(Hit {
                        path: format!("{}{key}", s.prefix),
                        value: v,
                    });
                }
            }
        }
        None
    }

    pub(super) fn find_kda(&self, released: &str, flat: &str) -> Option<Hit<'v>> {
        let s = self.kda_scope.as_ref()?;
        let keys: &[&str] = if self.kda_released_spelling {
            &[released, flat]
        } else {
            &[flat]
        };
        for &key in keys {
            if let Some(v) = get_non_null(s.obj, key) {
                return Some(Hit {
                    path: format!("{}{key}", s.prefix),
                    value: v,
                });
            }
        }
        None
    }

    pub(super) fn required(&mut self, hit: Option<Hit<'v>>, name: &str) -> Option<Hit<'v>> {
        if hit.is_none() {
            self.missing.push(name.to_string());
        }
        hit
    }

    pub(super) fn bad(&mut self, path: &str, msg: impl std::fmt::Display) {
        self.problems.push(format!("{path}: {msg}"));
    }

    /// An *int* (no fraction or exponent) as i64.
    pub(super) fn as_int(&mut self, hit: &Hit<'v>) -> Option<i64> {
        match hit.value {
            Value::Number(n) if n.is_integer() => match n.as_i64() {
                Some(v) => Some(v),
                None => {
                    self.bad(&hit.path, format!("integer {} is out of range", n.quoted()));
                    None
                }
            },
            other => {
                self.bad(
                    &hit.path,
                    format!("expected int, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// An int checked against `min` (and `max` when given), as usize.
    pub(super) fn int_in(&mut self, hit: &Hit<'v>, min: i64, max: Option<i64>) -> Option<usize> {
        let v = self.as_int(hit)?;
        if v < min {
            self.bad(&hit.path, format!("must be ≥ {min}, found {v}"));
            return None;
        }
        if let Some(m) = max {
            if v > m {
                self.bad(&hit.path, format!("must be ≤ {m}, found {v}"));
                return None;
            }
        }
        usize::try_from(v).ok()
    }

    pub(super) fn req_int(&mut self, released: &str, flat: &str, min: i64) -> Option<usize> {
        let hit = self.find(released, flat);
        let hit = self.required(hit, released)?;
        self.int_in(&hit, min, None)
    }

    /// A finite *float* (any JSON number).
    pub(super) fn as_float(&mut self, hit: &Hit<'v>) -> Option<f64> {
        match hit.value {
            Value::Number(n) => {
                let v = n.as_f64();
                if v.is_finite() {
                    Some(v)
                } else {
                    self.bad(&hit.path, format!("{} is not finite", n.quoted()));
                    None
                }
            }
            other => {
                self.bad(
                    &hit.path,
                    format!("expected float, found {}", describe(other)),
                );
                None
            }
        }
    }

    pub(super) fn as_bool(&mut self, hit: &Hit<'v>) -> Option<bool> {
        match hit.value {
            Value::Bool(b) => Some(*b),
            other => {
                self.bad(
                    &hit.path,
                    format!("expected bool (true/false), found {}", describe(other)),
                );
                None
            }
        }
    }

    pub(super) fn as_str(&mut self, hit: &Hit<'v>) -> Option<String> {
        match hit.value {
            Value::String(s) => Some(s.clone()),
            other => {
                self.bad(
                    &hit.path,
                    format!("expected string, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// An optional bool with its O default; `must` forces a value.
    pub(super) fn opt_bool(
        &mut self,
        key: &str,
        default: bool,
        must: Option<bool>,
    ) -> Option<bool> {
        match self.find(key, key) {
            None => Some(default),
            Some(hit) => {
                let b = self.as_bool(&hit)?;
                if let Some(m) = must {
                    if b != m {
                        self.bad(
                            &hit.path,
                            format!("must be {m}, found {b} (docs/formats.md#configjson-keys)"),
                        );
                        return None;
                    }
                }
                Some(b)
            }
        }
    }

    /// An optional int whose only allowed value is `must` (default `must`).
    pub(super) fn opt_int_must(&mut self, key: &str, must: i64) -> Option<usize> {
        match self.find(key, key) {
            None => usize::try_from(must).ok(),
            Some(hit) => {
                let v = self.as_int(&hit)?;
                if v != must {
                    self.bad(
                        &hit.path,
                        format!("must be {must}, found {v} (docs/formats.md#configjson-keys)"),
                    );
                    return None;
                }
                usize::try_from(v).ok()
            }
        }
    }

    /// An optional string whose only allowed value is `must` (default `must`).
    pub(super) fn opt_str_must(&mut self, key: &str, must: &str) -> Option<String> {
        match self.find(key, key) {
            None => Some(must.to_string()),
            Some(hit) => {
                let s = self.as_str(&hit)?;
                if s != must {
                    self.bad(
                        &hit.path,
                        format!(
                            "must be \"{must}\", found {} (docs/formats.md#configjson-keys)",
                            crate::json::quote_str(&s)
                        ),
                    );
                    return None;
                }
                Some(s)
            }
        }
    }

    /// An optional informational non-negative int.
    pub(super) fn opt_info_u64(&mut self, key: &str) -> Option<u64> {
        let hit = self.find(key, key)?;
        let v = self.as_int(&hit)?;
        match u64::try_from(v) {
            Ok(u) => Some(u),
            Err(_) => {
                self.bad(&hit.path, format!("must be ≥ 0, found {v}"));
                None
            }
        }
    }

    /// An *int list* (array of ints); entries are checked by the caller.
    pub(super) fn int_list(&mut self, hit: &Hit<'v>) -> Option<Vec<i64>> {
        let items = match hit.value {
            Value::Array(a) => a,
            other => {
                self.bad(
                    &hit.path,
                    format!("expected int list, found {}", describe(other)),
                );
                return None;
            }
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let sub = Hit {
                path: format!("{}[{i}]", hit.path),
                value: item,
            };
            match self.as_int(&sub) {
                Some(v) => out.push(v),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// The scopes of `root` (§2.1, §2.2): nested iff the root has a `text_config` object.
    /// A non-object `text_config` is refused at once (exit 2, naming `origin`).
    pub(super) fn new(root_obj: &'v Object, origin: &str) -> Result<(ConfigShape, Lookup<'v>)> {
        let mut problems = Vec::new();
        let (shape, scopes, kda_scope) = match get_non_null(root_obj, "text_config") {
            Some(Value::Object(tc)) => {
                let lac = match get_non_null(tc, "linear_attn_config") {
                    Some(Value::Object(l)) => Some(l),
                    Some(other) => {
                        problems.push(format!(
                            "text_config.linear_attn_config: expected object, found {}",
                            other.type_name()
                        ));
                        None
                    }
                    None => None,
                };
                let mut scopes = vec![Scope {
                    prefix: "text_config.",
                    obj: tc,
                }];
                if let Some(l) = lac {
                    scopes.push(Scope {
                        prefix: "text_config.linear_attn_config.",
                        obj: l,
                    });
                }
                scopes.push(Scope {
                    prefix: "",
                    obj: root_obj,
                });
                let kda = lac.map(|l| Scope {
                    prefix: "text_config.linear_attn_config.",
                    obj: l,
                });
                (ConfigShape::Nested, scopes, kda)
            }
            Some(other) => {
                return Err(Error::invalid(format!(
                    "{origin}: text_config: expected object, found {} (docs/formats.md#configjson-keys)",
                    other.type_name()
                )));
            }
            None => {
                let mut scopes = vec![Scope {
                    prefix: "",
                    obj: root_obj,
                }];
                match get_non_null(root_obj, "linear_attn_config") {
                    Some(Value::Object(l)) => scopes.push(Scope {
                        prefix: "linear_attn_config.",
                        obj: l,
                    }),
                    Some(other) => problems.push(format!(
                        "linear_attn_config: expected object, found {}",
                        other.type_name()
                    )),
                    None => {}
                }
                let kda = Some(Scope {
                    prefix: "",
                    obj: root_obj,
                });
                (ConfigShape::Flat, scopes, kda)
            }
        };
        let lk = Lookup {
            scopes,
            kda_scope,
            kda_released_spelling: shape == ConfigShape::Nested,
            problems,
            missing: Vec::new(),
            missing_kda: Vec::new(),
        };
        Ok((shape, lk))
    }

    /// A required KDA key (§2.2 exception): looked up in `kda_scope` only, and reported as
    /// missing with that scope alone.
    pub(super) fn req_kda(
        &mut self,
        released: &str,
        flat: &str,
        shape: ConfigShape,
    ) -> Option<usize> {
        let Some(h) = self.find_kda(released, flat) else {
            self.missing_kda.push(match shape {
                ConfigShape::Nested => format!("text_config.linear_attn_config.{released}"),
                ConfigShape::Flat => flat.to_string(),
            });
            return None;
        };
        self.int_in(&h, 1, None)
    }

    /// A required float > 0.
    pub(super) fn req_positive_float(&mut self, released: &str, flat: &str) -> Option<f64> {
        let h = self.find(released, flat);
        let h = self.required(h, released)?;
        self.positive_float(&h)
    }

    /// A float > 0.
    pub(super) fn positive_float(&mut self, h: &Hit<'v>) -> Option<f64> {
        let v = self.as_float(h)?;
        if v > 0.0 {
            Some(v)
        } else {
            self.bad(&h.path, format!("must be > 0, found {v}"));
            None
        }
    }

    /// A required int ≥ 1 that is a multiple of the MXFP4 group size.
    pub(super) fn req_mult32(&mut self, key: &str) -> Option<usize> {
        let v = self.req_int(key, key, 1)?;
        if v % 32 != 0 {
            let path = self.find(key, key).map(|h| h.path).unwrap_or_default();
            self.bad(
                &path,
                format!(
                    "{v} is not a multiple of 32 (MXFP4 group size, docs/formats.md#mxfp4-experts)"
                ),
            );
            return None;
        }
        Some(v)
    }

    /// Every problem recorded, the missing keys first (one problem listing them and the
    /// scopes searched), then the missing KDA keys (searched in their own scope only).
    pub(super) fn into_problems(self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.missing.is_empty() {
            let scopes: Vec<String> = self.scopes.iter().map(scope_name).collect();
            problems.push(missing_problem(&self.missing, &scopes.join(", ")));
        }
        if !self.missing_kda.is_empty() {
            let scope = match &self.kda_scope {
                Some(s) => scope_name(s),
                None => "text_config.linear_attn_config".to_string(),
            };
            problems.push(missing_problem(
                &self.missing_kda,
                &format!("{scope} only, docs/formats.md#configjson-keys"),
            ));
        }
        problems.extend(self.problems);
        problems
    }
}

fn scope_name(s: &Scope<'_>) -> String {
    if s.prefix.is_empty() {
        "the root".to_string()
    } else {
        s.prefix.trim_end_matches('.').to_string()
    }
}

fn missing_problem(missing: &[String], searched: &str) -> String {
    let one = missing.len() == 1;
    format!(
        "missing required key{} {} (searched {searched}; docs/formats.md#configjson-keys: no default for {})",
        if one { "" } else { "s" },
        missing.join(", "),
        if one { "it" } else { "them" }
    )
}
