//! `config.json` → a validated [`Config`] (MODEL.md §2, §3).
//!
//! Two shapes (§2.1): **nested** (the released checkpoint: `text_config` and
//! `text_config.linear_attn_config`) and **flat** (every key at the root). Each key is looked up
//! in the scopes of §2.2, released spelling before flat spelling, first hit wins, `null` counts
//! as absent; the KDA head count and head dim come only from `linear_attn_config` (nested) or
//! the root `kda_*` keys (flat), never from a stray `text_config.head_dim = 74`.
//!
//! Every problem is collected and reported together in one error (exit 2), each naming the key
//! and the scope it was read from (§2.5). Nothing required is ever defaulted: a missing required
//! key is an error, and only the O rows of §2.3 have defaults.

use crate::error::{Error, Result};
use crate::fnv::fnv1a64;
use crate::json::{self, Object, Value};
use std::fmt::Write as _;
use std::path::Path;

/// Largest `num_hidden_layers` accepted. The layer map is materialised (one entry per layer),
/// so an absurd count must be refused before allocating; K3 has 93.
pub const MAX_LAYERS: usize = 1 << 16;

/// Version of the numerics contract (MODEL.md §5) in the config fingerprint (FORMATS.md §9.1).
pub const NUMERICS_VERSION: u32 = 1;

/// Which of the two config shapes was read (MODEL.md §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigShape {
    /// Root with a `text_config` object (the released checkpoint).
    Nested,
    /// Every key at the root (test checkpoints).
    Flat,
}

impl ConfigShape {
    /// `nested` or `flat` (as in the run report's `config_shape`, FORMATS.md §10).
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigShape::Nested => "nested",
            ConfigShape::Flat => "flat",
        }
    }
}

/// Attention kind of one layer (MODEL.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    /// Kimi Delta Attention (linear attention with a recurrent state).
    Kda,
    /// Multi-head latent attention (full attention over a latent KV cache).
    Mla,
}

impl AttnKind {
    /// `K` or `M`, the layer-map character (FORMATS.md §9.1 `layer_map`).
    pub fn letter(self) -> char {
        match self {
            AttnKind::Kda => 'K',
            AttnKind::Mla => 'M',
        }
    }
}

/// The MLA evaluation form, part of the numerics identity (MODEL.md §6.5, FORMATS.md §9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlaForm {
    /// The absorbed form (recommended; the cache is never expanded).
    Absorbed,
    /// The re-expanded form (tests only).
    Expanded,
}

impl MlaForm {
    /// `absorbed` or `expanded`.
    pub fn as_str(self) -> &'static str {
        match self {
            MlaForm::Absorbed => "absorbed",
            MlaForm::Expanded => "expanded",
        }
    }
}

/// One validated `config_groups` entry of `quantization_config` (MODEL.md §2.4).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantGroup {
    /// The group's key (`group_0` in the release).
    pub name: String,
    /// `targets` (e.g. `["Linear"]`); empty when absent.
    pub targets: Vec<String>,
    /// `weights.num_bits`: always 4.
    pub num_bits: u32,
    /// `weights.type`: always `float`.
    pub weight_type: String,
    /// `weights.group_size`: always 32.
    pub group_size: u32,
    /// `weights.symmetric`: always true.
    pub symmetric: bool,
    /// `weights.strategy` when present (`group` in the release).
    pub strategy: Option<String>,
    /// `weights.scale_dtype` when present (`torch.uint8` in the release).
    pub scale_dtype: Option<String>,
}

/// A validated `quantization_config` (MODEL.md §2.4): MXFP4, group 32, routed experts only.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizationConfig {
    /// Where it was read from (`text_config.quantization_config` or `quantization_config`).
    pub scope: String,
    /// Always `compressed-tensors`.
    pub quant_method: String,
    /// Always `mxfp4-pack-quantized`.
    pub format: String,
    /// `quantization_status` when present (`compressed` in the release).
    pub quantization_status: Option<String>,
    /// The groups, in file order (at least one).
    pub groups: Vec<QuantGroup>,
    /// The `ignore` patterns (informational: the catalogue, not this list, decides encodings).
    pub ignore: Vec<String>,
}

/// Constants derived from the config (MODEL.md §2.6). All products are overflow-checked at load.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// Pk = Hk·Dk, the KDA projection width.
    pub kda_proj_width: usize,
    /// sD = 1/sqrt(Dk) (f64), the KDA query scale.
    pub kda_query_scale: f64,
    /// Length of `A_log`: max(Dk, Hk) (MODEL.md §4).
    pub a_log_len: usize,
    /// Dq = Dn + Dr, the MLA query/key head width.
    pub mla_head_width: usize,
    /// sQ = 1/sqrt(Dq) (f64), the MLA softmax scale.
    pub mla_softmax_scale: f64,
    /// Rows of `q_b_proj`: Hm·Dq.
    pub q_b_rows: usize,
    /// Rows of `kv_a_proj_with_mqa`: Rkv + Dr.
    pub kv_a_rows: usize,
    /// Rows of `kv_b_proj`: Hm·(Dn + Dv).
    pub kv_b_rows: usize,
    /// MLA attention output width: Hm·Dv.
    pub mla_out_width: usize,
    /// MLA cache row in floats: Rkv + Dr.
    pub mla_cache_row: usize,
    /// Sw = num_shared_experts·I, the fused shared-expert width (0: no shared experts).
    pub shared_width: usize,
    /// MXFP4 groups per row of w1/w3: L/32.
    pub groups_w13: usize,
    /// MXFP4 groups per row of w2: I/32.
    pub groups_w2: usize,
    /// Conv history per channel: Kc − 1.
    pub conv_history: usize,
    /// AttnRes snapshots after the last layer: ceil(NL / Bs).
    pub snapshots: usize,
    /// Maximum AttnRes aggregation sources: snapshots + 1.
    pub max_agg_sources: usize,
    /// Number of dense-FFN layers: first_k_dense_replace.
    pub n_dense: usize,
    /// Number of MoE layers: NL − first_k_dense_replace.
    pub n_moe: usize,
    /// Number of KDA layers.
    pub n_kda: usize,
    /// Number of MLA layers.
    pub n_mla: usize,
}

/// The validated model configuration: every key of MODEL.md §2.3 under its canonical name
/// (FORMATS.md §9.1), the layer map (§3) and the derived constants (§2.6).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Nested or flat (§2.1).
    pub shape: ConfigShape,
    /// H.
    pub hidden_size: usize,
    /// NL.
    pub num_hidden_layers: usize,
    /// V.
    pub vocab_size: usize,
    /// ε, the RMSNorm epsilon (> 0).
    pub rms_norm_eps: f64,
    /// Head = `embed_tokens` when true (`lm_head` must then be absent).
    pub tie_word_embeddings: bool,
    /// Hm, the MLA head count.
    pub num_attention_heads: usize,
    /// Rq.
    pub q_lora_rank: usize,
    /// Rkv.
    pub kv_lora_rank: usize,
    /// Dn.
    pub qk_nope_head_dim: usize,
    /// Dr (may be 0; never rotated).
    pub qk_rope_head_dim: usize,
    /// Dv.
    pub v_head_dim: usize,
    /// MLA output gate (`g_proj`) present.
    pub mla_use_output_gate: bool,
    /// Always true (validated).
    pub mla_use_nope: bool,
    /// E.
    pub num_experts: usize,
    /// Kt, the top-k (1 ≤ Kt ≤ E).
    pub num_experts_per_token: usize,
    /// Shared experts fused into one MLP of width Sw (may be 0).
    pub num_shared_experts: usize,
    /// L, the latent width (multiple of 32).
    pub routed_expert_hidden_size: usize,
    /// I (multiple of 32).
    pub moe_intermediate_size: usize,
    /// rsf (finite).
    pub routed_scaling_factor: f64,
    /// Renormalise the top-k weights.
    pub moe_renormalize: bool,
    /// RMSNorm (`routed_expert_norm`) on the latent aggregate.
    pub latent_moe_use_norm: bool,
    /// Always `sigmoid` (validated).
    pub moe_router_activation_func: String,
    /// Always 1 (validated).
    pub num_expert_group: usize,
    /// Always 1 (validated).
    pub topk_group: usize,
    /// Always 1 (validated).
    pub moe_layer_freq: usize,
    /// Layers ℓ < this value have a dense FFN (0 ≤ value ≤ NL).
    pub first_k_dense_replace: usize,
    /// F, the dense FFN width.
    pub intermediate_size: usize,
    /// Always `situ` (validated).
    pub hidden_act: String,
    /// β1, the SiTU gate cap (`activation_situ_beta`).
    pub situ_beta: f64,
    /// β2, the SiTU up cap (`activation_situ_linear_beta`).
    pub situ_linear_beta: f64,
    /// Bs.
    pub attn_res_block_size: usize,
    /// Hk (from `linear_attn_config.num_heads` or flat `kda_num_heads` only).
    pub kda_num_heads: usize,
    /// Dk (from `linear_attn_config.head_dim` or flat `kda_head_dim` only).
    pub kda_head_dim: usize,
    /// Kc.
    pub short_conv_kernel_size: usize,
    /// gmin (< 0).
    pub gate_lower_bound: f64,
    /// One-based MLA layers, as written.
    pub full_attn_layers: Vec<usize>,
    /// One-based KDA layers, as written, when present (validated as the exact complement).
    pub kda_layers: Option<Vec<usize>>,
    /// Always true (validated).
    pub use_full_rank_gate: bool,
    /// The validated quantization config, when present.
    pub quantization_config: Option<QuantizationConfig>,
    /// Informational (`max_position_embeddings`), when present.
    pub max_position_embeddings: Option<u64>,
    /// Informational (TOKENIZER.md is authoritative), when present.
    pub bos_token_id: Option<u64>,
    /// Informational: the stop id used when no tokenizer is loaded (ENGINE.md §3 `--stop-id`).
    pub eos_token_id: Option<u64>,
    /// Informational, when present.
    pub pad_token_id: Option<u64>,
    /// Derived constants (§2.6).
    pub derived: Derived,
    layer_kinds: Vec<AttnKind>,
}

// ---------------------------------------------------------------------------------------------
// Lookup (§2.2)
// ---------------------------------------------------------------------------------------------

struct Scope<'v> {
    /// Path prefix for messages: "" for the root, "text_config." etc.
    prefix: &'static str,
    obj: &'v Object,
}

struct Lookup<'v> {
    scopes: Vec<Scope<'v>>,
    /// The only scope the KDA head count/dim may come from (§2.2 exception).
    kda_scope: Option<Scope<'v>>,
    /// Whether the released spellings `num_heads`/`head_dim` may be read in `kda_scope`
    /// (nested: yes, then the `kda_*` fallback; flat: only `kda_num_heads`/`kda_head_dim`).
    kda_released_spelling: bool,
    problems: Vec<String>,
    missing: Vec<String>,
}

/// A found value and the full path it was read from.
struct Hit<'v> {
    path: String,
    value: &'v Value,
}

fn get_non_null<'v>(obj: &'v Object, key: &str) -> Option<&'v Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("number {}", n.lexeme()),
        Value::String(s) if s.len() <= 40 => format!("string \"{s}\""),
        other => other.type_name().to_string(),
    }
}

impl<'v> Lookup<'v> {
    fn find(&self, released: &str, flat: &str) -> Option<Hit<'v>> {
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

    fn find_kda(&self, released: &str, flat: &str) -> Option<Hit<'v>> {
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

    fn required(&mut self, hit: Option<Hit<'v>>, name: &str) -> Option<Hit<'v>> {
        if hit.is_none() {
            self.missing.push(name.to_string());
        }
        hit
    }

    fn bad(&mut self, path: &str, msg: impl std::fmt::Display) {
        self.problems.push(format!("{path}: {msg}"));
    }

    /// An *int* (no fraction or exponent) as i64.
    fn as_int(&mut self, hit: &Hit<'v>) -> Option<i64> {
        match hit.value {
            Value::Number(n) if n.is_integer() => match n.as_i64() {
                Some(v) => Some(v),
                None => {
                    self.bad(&hit.path, format!("integer {} is out of range", n.lexeme()));
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
    fn int_in(&mut self, hit: &Hit<'v>, min: i64, max: Option<i64>) -> Option<usize> {
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

    fn req_int(&mut self, released: &str, flat: &str, min: i64) -> Option<usize> {
        let hit = self.find(released, flat);
        let hit = self.required(hit, released)?;
        self.int_in(&hit, min, None)
    }

    /// A finite *float* (any JSON number).
    fn as_float(&mut self, hit: &Hit<'v>) -> Option<f64> {
        match hit.value {
            Value::Number(n) => {
                let v = n.as_f64();
                if v.is_finite() {
                    Some(v)
                } else {
                    self.bad(&hit.path, format!("{} is not finite", n.lexeme()));
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

    fn as_bool(&mut self, hit: &Hit<'v>) -> Option<bool> {
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

    fn as_str(&mut self, hit: &Hit<'v>) -> Option<String> {
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
    fn opt_bool(&mut self, key: &str, default: bool, must: Option<bool>) -> Option<bool> {
        match self.find(key, key) {
            None => Some(default),
            Some(hit) => {
                let b = self.as_bool(&hit)?;
                if let Some(m) = must {
                    if b != m {
                        self.bad(&hit.path, format!("must be {m}, found {b} (MODEL.md §2.3)"));
                        return None;
                    }
                }
                Some(b)
            }
        }
    }

    /// An optional int whose only allowed value is `must` (default `must`).
    fn opt_int_must(&mut self, key: &str, must: i64) -> Option<usize> {
        match self.find(key, key) {
            None => usize::try_from(must).ok(),
            Some(hit) => {
                let v = self.as_int(&hit)?;
                if v != must {
                    self.bad(
                        &hit.path,
                        format!("must be {must}, found {v} (MODEL.md §2.3)"),
                    );
                    return None;
                }
                usize::try_from(v).ok()
            }
        }
    }

    /// An optional string whose only allowed value is `must` (default `must`).
    fn opt_str_must(&mut self, key: &str, must: &str) -> Option<String> {
        match self.find(key, key) {
            None => Some(must.to_string()),
            Some(hit) => {
                let s = self.as_str(&hit)?;
                if s != must {
                    self.bad(
                        &hit.path,
                        format!("must be \"{must}\", found \"{s}\" (MODEL.md §2.3)"),
                    );
                    return None;
                }
                Some(s)
            }
        }
    }

    /// An optional informational non-negative int.
    fn opt_info_u64(&mut self, key: &str) -> Option<u64> {
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
    fn int_list(&mut self, hit: &Hit<'v>) -> Option<Vec<i64>> {
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
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

fn problems_error(origin: &str, problems: &[String]) -> Error {
    if problems.len() == 1 {
        return Error::invalid(format!("{origin}: {}", problems[0]));
    }
    let mut msg = format!("{origin}: {} problems:", problems.len());
    for p in problems {
        let _ = write!(msg, "\n  - {p}");
    }
    Error::invalid(msg)
}

fn checked(problems: &mut Vec<String>, what: &str, v: Option<usize>) -> usize {
    match v {
        Some(x) => x,
        None => {
            problems.push(format!(
                "derived width {what} overflows (MODEL.md §2.6): the config's widths are absurd"
            ));
            0
        }
    }
}

impl Config {
    /// Reads and validates `path` (a `config.json`). Errors (exit 2) name the file, the byte
    /// offset for JSON syntax errors, and every key problem at once.
    pub fn from_file(path: &Path) -> Result<Config> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::invalid(format!("{}: cannot read config: {e}", path.display())))?;
        Self::from_json(&bytes, &path.display().to_string())
    }

    /// Parses and validates JSON text; `origin` (usually the file path) prefixes every message.
    pub fn from_json(bytes: &[u8], origin: &str) -> Result<Config> {
        let root = json::parse(bytes).map_err(|e| e.into_error(origin, 0))?;
        Self::from_value(&root, origin)
    }

    /// Validates a parsed config (MODEL.md §2, §3). `origin` prefixes every message.
    pub fn from_value(root: &Value, origin: &str) -> Result<Config> {
        let root_obj = root.as_object().ok_or_else(|| {
            Error::invalid(format!(
                "{origin}: the config must be a JSON object, found {}",
                root.type_name()
            ))
        })?;

        // §2.1: nested iff the root has a `text_config` object.
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
                    "{origin}: text_config: expected object, found {} (MODEL.md §2.1)",
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

        let mut lk = Lookup {
            scopes,
            kda_scope,
            kda_released_spelling: shape == ConfigShape::Nested,
            problems,
            missing: Vec::new(),
        };

        // --- §2.3, in table order -----------------------------------------------------------
        let hidden_size = lk.req_int("hidden_size", "hidden_size", 1);
        let nl_hit = lk.find("num_hidden_layers", "num_hidden_layers");
        let num_hidden_layers = match lk.required(nl_hit, "num_hidden_layers") {
            Some(h) => lk.int_in(&h, 1, Some(MAX_LAYERS as i64)),
            None => None,
        };
        let vocab_size = lk.req_int("vocab_size", "vocab_size", 1);
        let rms_norm_eps = {
            let h = lk.find("rms_norm_eps", "rms_norm_eps");
            lk.required(h, "rms_norm_eps")
                .and_then(|h| positive_float(&mut lk, &h))
        };
        let tie_word_embeddings = lk.opt_bool("tie_word_embeddings", false, None);
        let num_attention_heads = lk.req_int("num_attention_heads", "num_attention_heads", 1);
        let q_lora_rank = lk.req_int("q_lora_rank", "q_lora_rank", 1);
        let kv_lora_rank = lk.req_int("kv_lora_rank", "kv_lora_rank", 1);
        let qk_nope_head_dim = lk.req_int("qk_nope_head_dim", "qk_nope_head_dim", 1);
        let qk_rope_head_dim = lk.req_int("qk_rope_head_dim", "qk_rope_head_dim", 0);
        let v_head_dim = lk.req_int("v_head_dim", "v_head_dim", 1);
        let mla_use_output_gate = lk.opt_bool("mla_use_output_gate", true, None);
        let mla_use_nope = lk.opt_bool("mla_use_nope", true, Some(true));
        let num_experts = lk.req_int("num_experts", "num_experts", 1);
        let topk_hit = lk.find("num_experts_per_token", "num_experts_per_token");
        let num_experts_per_token = match lk.required(topk_hit, "num_experts_per_token") {
            Some(h) => {
                let v = lk.int_in(&h, 1, None);
                match (v, num_experts) {
                    (Some(k), Some(e)) if k > e => {
                        lk.bad(
                            &h.path,
                            format!("top-k {k} exceeds num_experts {e} (must be 1 ≤ Kt ≤ E)"),
                        );
                        None
                    }
                    _ => v,
                }
            }
            None => None,
        };
        let num_shared_experts = lk.req_int("num_shared_experts", "num_shared_experts", 0);
        let routed_expert_hidden_size = req_mult32(&mut lk, "routed_expert_hidden_size");
        let moe_intermediate_size = req_mult32(&mut lk, "moe_intermediate_size");
        let routed_scaling_factor = {
            let h = lk.find("routed_scaling_factor", "routed_scaling_factor");
            lk.required(h, "routed_scaling_factor")
                .and_then(|h| lk.as_float(&h))
        };
        let moe_renormalize = lk.opt_bool("moe_renormalize", true, None);
        let latent_moe_use_norm = lk.opt_bool("latent_moe_use_norm", true, None);
        let moe_router_activation_func = lk.opt_str_must("moe_router_activation_func", "sigmoid");
        let num_expert_group = lk.opt_int_must("num_expert_group", 1);
        let topk_group = lk.opt_int_must("topk_group", 1);
        let moe_layer_freq = lk.opt_int_must("moe_layer_freq", 1);
        let fkd_hit = lk.find("first_k_dense_replace", "first_k_dense_replace");
        let first_k_dense_replace = match lk.required(fkd_hit, "first_k_dense_replace") {
            Some(h) => {
                let v = lk.int_in(&h, 0, None);
                match (v, num_hidden_layers) {
                    (Some(k), Some(nl)) if k > nl => {
                        lk.bad(
                            &h.path,
                            format!("{k} exceeds num_hidden_layers {nl} (must be 0 ≤ value ≤ NL)"),
                        );
                        None
                    }
                    _ => v,
                }
            }
            None => None,
        };
        let intermediate_size = lk.req_int("intermediate_size", "intermediate_size", 1);
        let hidden_act = lk.opt_str_must("hidden_act", "situ");
        let situ_beta = {
            let h = lk.find("activation_situ_beta", "situ_beta");
            lk.required(h, "activation_situ_beta")
                .and_then(|h| positive_float(&mut lk, &h))
        };
        let situ_linear_beta = {
            let h = lk.find("activation_situ_linear_beta", "situ_linear_beta");
            lk.required(h, "activation_situ_linear_beta")
                .and_then(|h| positive_float(&mut lk, &h))
        };
        let attn_res_block_size = lk.req_int("attn_res_block_size", "attn_res_block_size", 1);
        // §2.2 exception: KDA head count and head dim only from their own scope.
        let kda_num_heads = {
            let h = lk.find_kda("num_heads", "kda_num_heads");
            let name = match shape {
                ConfigShape::Nested => "text_config.linear_attn_config.num_heads",
                ConfigShape::Flat => "kda_num_heads",
            };
            lk.required(h, name).and_then(|h| lk.int_in(&h, 1, None))
        };
        let kda_head_dim = {
            let h = lk.find_kda("head_dim", "kda_head_dim");
            let name = match shape {
                ConfigShape::Nested => "text_config.linear_attn_config.head_dim",
                ConfigShape::Flat => "kda_head_dim",
            };
            lk.required(h, name).and_then(|h| lk.int_in(&h, 1, None))
        };
        let short_conv_kernel_size =
            lk.req_int("short_conv_kernel_size", "short_conv_kernel_size", 1);
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
        let full_hit = lk.find("full_attn_layers", "full_attn_layers");
        let full_attn_raw = match lk.required(full_hit, "full_attn_layers") {
            Some(h) => lk.int_list(&h).map(|l| (h.path.clone(), l)),
            None => None,
        };
        let kda_raw = match lk.find("kda_layers", "kda_layers") {
            Some(h) => lk.int_list(&h).map(|l| Some((h.path.clone(), l))),
            None => Some(None),
        };
        let use_full_rank_gate = lk.opt_bool("use_full_rank_gate", true, Some(true));
        let quantization_config = match lk.find("quantization_config", "quantization_config") {
            None => Some(None),
            Some(h) => read_quantization(&mut lk, &h).map(Some),
        };
        let max_position_embeddings = lk.opt_info_u64("max_position_embeddings");
        let bos_token_id = lk.opt_info_u64("bos_token_id");
        let eos_token_id = lk.opt_info_u64("eos_token_id");
        let pad_token_id = lk.opt_info_u64("pad_token_id");

        // --- §2.5 rules 3-5: the layer map ----------------------------------------------------
        let mut layer_kinds = None;
        let mut full_attn_layers = Vec::new();
        let mut kda_layers = None;
        if let (Some(nl), Some((fpath, flist))) = (num_hidden_layers, &full_attn_raw) {
            let mut kinds = vec![AttnKind::Kda; nl];
            let mut ok = true;
            let mut seen = vec![false; nl];
            for (i, &v) in flist.iter().enumerate() {
                if v < 1 || v > nl as i64 {
                    lk.bad(
                        &format!("{fpath}[{i}]"),
                        format!(
                            "one-based layer index {v} is outside 1..{nl} (num_hidden_layers {nl})"
                        ),
                    );
                    ok = false;
                    continue;
                }
                let l = (v - 1) as usize;
                if seen[l] {
                    lk.bad(&format!("{fpath}[{i}]"), format!("duplicate layer {v}"));
                    ok = false;
                }
                seen[l] = true;
                kinds[l] = AttnKind::Mla;
            }
            full_attn_layers = flist.iter().map(|&v| v.max(0) as usize).collect();
            if ok && kinds.iter().all(|k| *k == AttnKind::Mla) {
                lk.bad(
                    fpath,
                    format!(
                        "covers all {nl} layers: no KDA layer remains (a misread layer map, MODEL.md §2.5)"
                    ),
                );
                ok = false;
            }
            if let Some(Some((kpath, klist))) = &kda_raw {
                let mut kseen = vec![false; nl];
                for (i, &v) in klist.iter().enumerate() {
                    if v < 1 || v > nl as i64 {
                        lk.bad(
                            &format!("{kpath}[{i}]"),
                            format!(
                                "one-based layer index {v} is outside 1..{nl} (num_hidden_layers {nl})"
                            ),
                        );
                        ok = false;
                        continue;
                    }
                    let l = (v - 1) as usize;
                    if kseen[l] {
                        lk.bad(&format!("{kpath}[{i}]"), format!("duplicate layer {v}"));
                        ok = false;
                    }
                    kseen[l] = true;
                }
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
                        "is not the exact complement of {fpath} in 1..{nl} (MODEL.md §2.5 rule 4):"
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
                kda_layers = Some(klist.iter().map(|&v| v.max(0) as usize).collect());
            }
            if ok {
                layer_kinds = Some(kinds);
            }
        }

        // --- missing keys: one problem listing all ------------------------------------------
        let mut problems = std::mem::take(&mut lk.problems);
        if !lk.missing.is_empty() {
            let scopes: Vec<String> = lk
                .scopes
                .iter()
                .map(|s| {
                    if s.prefix.is_empty() {
                        "the root".to_string()
                    } else {
                        s.prefix.trim_end_matches('.').to_string()
                    }
                })
                .collect();
            problems.insert(
                0,
                format!(
                    "missing required key{} {} (searched {}; MODEL.md §2.3 has no default for {})",
                    if lk.missing.len() == 1 { "" } else { "s" },
                    lk.missing.join(", "),
                    scopes.join(", "),
                    if lk.missing.len() == 1 { "it" } else { "them" }
                ),
            );
        }

        // Every value is Some unless a problem was recorded; bail out before deriving.
        macro_rules! all {
            ($($x:ident),*) => {
                match ($($x,)*) {
                    ($(Some($x),)*) => ($($x,)*),
                    _ => return Err(problems_error(origin, &problems_or_internal(problems))),
                }
            };
        }
        let (
            hidden_size,
            num_hidden_layers,
            vocab_size,
            rms_norm_eps,
            tie_word_embeddings,
            num_attention_heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            mla_use_output_gate,
            mla_use_nope,
            num_experts,
            num_experts_per_token,
            num_shared_experts,
            routed_expert_hidden_size,
            moe_intermediate_size,
            routed_scaling_factor,
            moe_renormalize,
            latent_moe_use_norm,
            moe_router_activation_func,
            num_expert_group,
            topk_group,
            moe_layer_freq,
            first_k_dense_replace,
            intermediate_size,
            hidden_act,
            situ_beta,
            situ_linear_beta,
            attn_res_block_size,
            kda_num_heads,
            kda_head_dim,
            short_conv_kernel_size,
            gate_lower_bound,
            use_full_rank_gate,
            quantization_config,
            layer_kinds,
        ) = all!(
            hidden_size,
            num_hidden_layers,
            vocab_size,
            rms_norm_eps,
            tie_word_embeddings,
            num_attention_heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            mla_use_output_gate,
            mla_use_nope,
            num_experts,
            num_experts_per_token,
            num_shared_experts,
            routed_expert_hidden_size,
            moe_intermediate_size,
            routed_scaling_factor,
            moe_renormalize,
            latent_moe_use_norm,
            moe_router_activation_func,
            num_expert_group,
            topk_group,
            moe_layer_freq,
            first_k_dense_replace,
            intermediate_size,
            hidden_act,
            situ_beta,
            situ_linear_beta,
            attn_res_block_size,
            kda_num_heads,
            kda_head_dim,
            short_conv_kernel_size,
            gate_lower_bound,
            use_full_rank_gate,
            quantization_config,
            layer_kinds
        );
        if !problems.is_empty() {
            return Err(problems_error(origin, &problems));
        }

        // --- §2.6 derived constants, overflow-checked ----------------------------------------
        let p = &mut problems;
        let kda_proj_width = checked(p, "Pk = Hk·Dk", kda_num_heads.checked_mul(kda_head_dim));
        let mla_head_width = checked(
            p,
            "Dq = Dn + Dr",
            qk_nope_head_dim.checked_add(qk_rope_head_dim),
        );
        let q_b_rows = checked(p, "Hm·Dq", num_attention_heads.checked_mul(mla_head_width));
        let kv_a_rows = checked(p, "Rkv + Dr", kv_lora_rank.checked_add(qk_rope_head_dim));
        let kv_b_rows = checked(
            p,
            "Hm·(Dn + Dv)",
            qk_nope_head_dim
                .checked_add(v_head_dim)
                .and_then(|w| w.checked_mul(num_attention_heads)),
        );
        let mla_out_width = checked(p, "Hm·Dv", num_attention_heads.checked_mul(v_head_dim));
        let shared_width = checked(
            p,
            "Sw = num_shared_experts·I",
            num_shared_experts.checked_mul(moe_intermediate_size),
        );
        // Every stored tensor must have a byte size that fits in u64 (the widest: [V, H] and
        // the [out, in] matrices), else no checkpoint can match it.
        for (what, a, b) in [
            ("V·H", vocab_size, hidden_size),
            ("Pk·H", kda_proj_width, hidden_size),
            ("Hm·Dq·Rq", q_b_rows, q_lora_rank),
            ("Hm·(Dn+Dv)·Rkv", kv_b_rows, kv_lora_rank),
            ("Hm·Dv·H", mla_out_width, hidden_size),
            ("F·H", intermediate_size, hidden_size),
            ("E·H", num_experts, hidden_size),
            ("L·H", routed_expert_hidden_size, hidden_size),
            ("Sw·H", shared_width, hidden_size),
            ("I·L", moe_intermediate_size, routed_expert_hidden_size),
            ("Rq·H", q_lora_rank, hidden_size),
            ("(Rkv+Dr)·H", kv_a_rows, hidden_size),
        ] {
            if a.checked_mul(b).and_then(|x| x.checked_mul(4)).is_none() {
                p.push(format!(
                    "tensor size {what} overflows 64 bits (MODEL.md §4): the config's widths are absurd"
                ));
            }
        }
        if !problems.is_empty() {
            return Err(problems_error(origin, &problems));
        }
        let n_mla = layer_kinds.iter().filter(|k| **k == AttnKind::Mla).count();
        let snapshots = num_hidden_layers.div_ceil(attn_res_block_size);
        let derived = Derived {
            kda_proj_width,
            kda_query_scale: 1.0 / (kda_head_dim as f64).sqrt(),
            a_log_len: kda_head_dim.max(kda_num_heads),
            mla_head_width,
            mla_softmax_scale: 1.0 / (mla_head_width as f64).sqrt(),
            q_b_rows,
            kv_a_rows,
            kv_b_rows,
            mla_out_width,
            mla_cache_row: kv_a_rows,
            shared_width,
            groups_w13: routed_expert_hidden_size / 32,
            groups_w2: moe_intermediate_size / 32,
            conv_history: short_conv_kernel_size - 1,
            snapshots,
            max_agg_sources: snapshots + 1,
            n_dense: first_k_dense_replace,
            n_moe: num_hidden_layers - first_k_dense_replace,
            n_kda: num_hidden_layers - n_mla,
            n_mla,
        };

        Ok(Config {
            shape,
            hidden_size,
            num_hidden_layers,
            vocab_size,
            rms_norm_eps,
            tie_word_embeddings,
            num_attention_heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            mla_use_output_gate,
            mla_use_nope,
            num_experts,
            num_experts_per_token,
            num_shared_experts,
            routed_expert_hidden_size,
            moe_intermediate_size,
            routed_scaling_factor,
            moe_renormalize,
            latent_moe_use_norm,
            moe_router_activation_func,
            num_expert_group,
            topk_group,
            moe_layer_freq,
            first_k_dense_replace,
            intermediate_size,
            hidden_act,
            situ_beta,
            situ_linear_beta,
            attn_res_block_size,
            kda_num_heads,
            kda_head_dim,
            short_conv_kernel_size,
            gate_lower_bound,
            full_attn_layers,
            kda_layers,
            use_full_rank_gate,
            quantization_config,
            max_position_embeddings,
            bos_token_id,
            eos_token_id,
            pad_token_id,
            derived,
            layer_kinds,
        })
    }

    // --- layer map (§3) -----------------------------------------------------------------------

    /// Attention kind of zero-based layer `l`: MLA iff (l+1) ∈ `full_attn_layers`.
    /// Panics if `l ≥ num_hidden_layers` (a caller bug, not input).
    pub fn attn_kind(&self, l: usize) -> AttnKind {
        self.layer_kinds[l]
    }

    /// Attention kinds of all layers, zero-based order.
    pub fn layer_kinds(&self) -> &[AttnKind] {
        &self.layer_kinds
    }

    /// True when layer `l` has a dense FFN (l < first_k_dense_replace), false for MoE.
    pub fn is_dense(&self, l: usize) -> bool {
        l < self.first_k_dense_replace
    }

    /// True when layer `l` has a MoE FFN.
    pub fn is_moe(&self, l: usize) -> bool {
        !self.is_dense(l)
    }

    /// True when layer `l` is an AttnRes block boundary (l mod Bs = 0, MODEL.md §6.3).
    pub fn is_boundary(&self, l: usize) -> bool {
        l % self.attn_res_block_size == 0
    }

    /// Zero-based AttnRes boundaries (0, Bs, 2·Bs, … below NL).
    pub fn boundaries(&self) -> Vec<usize> {
        (0..self.num_hidden_layers)
            .step_by(self.attn_res_block_size)
            .collect()
    }

    /// Zero-based MLA layers, ascending.
    pub fn mla_layers(&self) -> Vec<usize> {
        self.layers_of(AttnKind::Mla)
    }

    /// Zero-based KDA layers, ascending.
    pub fn kda_layers_zero_based(&self) -> Vec<usize> {
        self.layers_of(AttnKind::Kda)
    }

    fn layers_of(&self, kind: AttnKind) -> Vec<usize> {
        (0..self.num_hidden_layers)
            .filter(|&l| self.layer_kinds[l] == kind)
            .collect()
    }

    /// The layer map as one character per zero-based layer, `K` (KDA) or `M` (MLA), e.g.
    /// `KKKMKKKMKKKMM` for tiny-k3.
    pub fn layer_map(&self) -> String {
        self.layer_kinds.iter().map(|k| k.letter()).collect()
    }

    // --- identity (FORMATS.md §9.1) --------------------------------------------------------------

    /// The canonical config string of FORMATS.md §9.1: `key=value;` for the listed keys in
    /// order, integers in decimal, floats as `0x` + 16 hex digits of the f64 bits, booleans
    /// 0/1, then `layer_map`, `numerics` (= [`NUMERICS_VERSION`]) and `mla_form`.
    pub fn canonical_string(&self, mla_form: MlaForm) -> String {
        fn f(v: f64) -> String {
            format!("0x{:016x}", v.to_bits())
        }
        fn b(v: bool) -> &'static str {
            if v {
                "1"
            } else {
                "0"
            }
        }
        let fields: [(&str, String); 32] = [
            ("hidden_size", self.hidden_size.to_string()),
            ("num_hidden_layers", self.num_hidden_layers.to_string()),
            ("vocab_size", self.vocab_size.to_string()),
            ("rms_norm_eps", f(self.rms_norm_eps)),
            ("tie_word_embeddings", b(self.tie_word_embeddings).into()),
            ("kda_num_heads", self.kda_num_heads.to_string()),
            ("kda_head_dim", self.kda_head_dim.to_string()),
            (
                "short_conv_kernel_size",
                self.short_conv_kernel_size.to_string(),
            ),
            ("gate_lower_bound", f(self.gate_lower_bound)),
            ("num_attention_heads", self.num_attention_heads.to_string()),
            ("q_lora_rank", self.q_lora_rank.to_string()),
            ("kv_lora_rank", self.kv_lora_rank.to_string()),
            ("qk_nope_head_dim", self.qk_nope_head_dim.to_string()),
            ("qk_rope_head_dim", self.qk_rope_head_dim.to_string()),
            ("v_head_dim", self.v_head_dim.to_string()),
            ("mla_use_output_gate", b(self.mla_use_output_gate).into()),
            ("num_experts", self.num_experts.to_string()),
            (
                "num_experts_per_token",
                self.num_experts_per_token.to_string(),
            ),
            ("num_shared_experts", self.num_shared_experts.to_string()),
            (
                "routed_expert_hidden_size",
                self.routed_expert_hidden_size.to_string(),
            ),
            (
                "moe_intermediate_size",
                self.moe_intermediate_size.to_string(),
            ),
            ("routed_scaling_factor", f(self.routed_scaling_factor)),
            ("moe_renormalize", b(self.moe_renormalize).into()),
            ("latent_moe_use_norm", b(self.latent_moe_use_norm).into()),
            (
                "first_k_dense_replace",
                self.first_k_dense_replace.to_string(),
            ),
            ("intermediate_size", self.intermediate_size.to_string()),
            ("attn_res_block_size", self.attn_res_block_size.to_string()),
            ("situ_beta", f(self.situ_beta)),
            ("situ_linear_beta", f(self.situ_linear_beta)),
            ("layer_map", self.layer_map()),
            ("numerics", NUMERICS_VERSION.to_string()),
            ("mla_form", mla_form.as_str().to_string()),
        ];
        let mut s = String::new();
        for (k, v) in fields {
            let _ = write!(s, "{k}={v};");
        }
        s
    }

    /// The config fingerprint: FNV-1a-64 of [`Config::canonical_string`] (FORMATS.md §9.1).
    pub fn fingerprint(&self, mla_form: MlaForm) -> u64 {
        fnv1a64(self.canonical_string(mla_form).as_bytes())
    }
}

fn problems_or_internal(p: Vec<String>) -> Vec<String> {
    if p.is_empty() {
        // Unreachable by construction: a None value always records a problem.
        vec!["internal error: a value was rejected without a recorded problem".to_string()]
    } else {
        p
    }
}

fn list_str(v: &[usize]) -> String {
    let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", s.join(", "))
}

fn positive_float<'v>(lk: &mut Lookup<'v>, h: &Hit<'v>) -> Option<f64> {
    let v = lk.as_float(h)?;
    if v > 0.0 {
        Some(v)
    } else {
        lk.bad(&h.path, format!("must be > 0, found {v}"));
        None
    }
}

fn req_mult32(lk: &mut Lookup<'_>, key: &str) -> Option<usize> {
    let v = lk.req_int(key, key, 1)?;
    if v % 32 != 0 {
        let path = lk.find(key, key).map(|h| h.path).unwrap_or_default();
        lk.bad(
            &path,
            format!("{v} is not a multiple of 32 (MXFP4 group size, FORMATS.md §5)"),
        );
        return None;
    }
    Some(v)
}

/// §2.4: `quant_method`, `format`, and each group's `num_bits`, `type`, `group_size` and
/// `symmetric` must have exactly the released values.
fn read_quantization(lk: &mut Lookup<'_>, hit: &Hit<'_>) -> Option<QuantizationConfig> {
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
                    format!("missing; must be \"{must}\" (MXFP4, MODEL.md §2.4)"),
                );
                None
            }
            Some(Value::String(s)) if s == must => Some(s.clone()),
            Some(other) => {
                lk.bad(
                    &p,
                    format!(
                        "must be \"{must}\" (only MXFP4 experts are supported, MODEL.md §2.4), found {}",
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
            "is empty; expected one MXFP4 group (MODEL.md §2.4)",
        ),
        Some(other) => lk.bad(
            &format!("{path}.config_groups"),
            format!("expected object, found {}", describe(other)),
        ),
        None => lk.bad(
            &format!("{path}.config_groups"),
            "missing; expected one MXFP4 group (MODEL.md §2.4)",
        ),
    }
    let mut ignore = Vec::new();
    match get_non_null(obj, "ignore") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, it) in items.iter().enumerate() {
                match it {
                    Value::String(s) => ignore.push(s.clone()),
                    other => lk.bad(
                        &format!("{path}.ignore[{i}]"),
                        format!("expected string, found {}", describe(other)),
                    ),
                }
            }
        }
        Some(other) => lk.bad(
            &format!("{path}.ignore"),
            format!("expected array of strings, found {}", describe(other)),
        ),
    }
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

fn read_group(lk: &mut Lookup<'_>, gp: &str, name: &str, gv: &Value) -> Option<QuantGroup> {
    let g = match gv {
        Value::Object(o) => o,
        other => {
            lk.bad(gp, format!("expected object, found {}", describe(other)));
            return None;
        }
    };
    let mut targets = Vec::new();
    match get_non_null(g, "targets") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, it) in items.iter().enumerate() {
                match it {
                    Value::String(s) => targets.push(s.clone()),
                    other => lk.bad(
                        &format!("{gp}.targets[{i}]"),
                        format!("expected string, found {}", describe(other)),
                    ),
                }
            }
        }
        Some(other) => lk.bad(
            &format!("{gp}.targets"),
            format!("expected array of strings, found {}", describe(other)),
        ),
    }
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
                "missing; expected the MXFP4 weight scheme (MODEL.md §2.4)",
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
                        "must be {must} (MXFP4, MODEL.md §2.4), found {}",
                        describe(other)
                    ),
                );
                None
            }
            None => {
                lk.bad(
                    &p,
                    format!("missing; must be {must} (MXFP4, MODEL.md §2.4)"),
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
                    "must be \"float\" (MXFP4, MODEL.md §2.4), found {}",
                    describe(other)
                ),
            );
            None
        }
        None => {
            lk.bad(
                &format!("{wp}.type"),
                "missing; must be \"float\" (MXFP4, MODEL.md §2.4)",
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
                    "must be true (MXFP4, MODEL.md §2.4), found {}",
                    describe(other)
                ),
            );
            None
        }
        None => {
            lk.bad(
                &format!("{wp}.symmetric"),
                "missing; must be true (MXFP4, MODEL.md §2.4)",
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

impl Config {
    /// The resolved config as a JSON object with canonical names (FORMATS.md §9.1 spellings),
    /// plus `config_shape`, `layer_map` and the derived constants; for `k3 inspect --json` and
    /// the run report.
    pub fn summary_json(&self) -> Value {
        let d = &self.derived;
        let ul = |v: &[usize]| Value::from(v.to_vec());
        let o = Object::new()
            .with("config_shape", self.shape.as_str())
            .with("hidden_size", self.hidden_size)
            .with("num_hidden_layers", self.num_hidden_layers)
            .with("vocab_size", self.vocab_size)
            .with("rms_norm_eps", self.rms_norm_eps)
            .with("tie_word_embeddings", self.tie_word_embeddings)
            .with("kda_num_heads", self.kda_num_heads)
            .with("kda_head_dim", self.kda_head_dim)
            .with("short_conv_kernel_size", self.short_conv_kernel_size)
            .with("gate_lower_bound", self.gate_lower_bound)
            .with("num_attention_heads", self.num_attention_heads)
            .with("q_lora_rank", self.q_lora_rank)
            .with("kv_lora_rank", self.kv_lora_rank)
            .with("qk_nope_head_dim", self.qk_nope_head_dim)
            .with("qk_rope_head_dim", self.qk_rope_head_dim)
            .with("v_head_dim", self.v_head_dim)
            .with("mla_use_output_gate", self.mla_use_output_gate)
            .with("num_experts", self.num_experts)
            .with("num_experts_per_token", self.num_experts_per_token)
            .with("num_shared_experts", self.num_shared_experts)
            .with("routed_expert_hidden_size", self.routed_expert_hidden_size)
            .with("moe_intermediate_size", self.moe_intermediate_size)
            .with("routed_scaling_factor", self.routed_scaling_factor)
            .with("moe_renormalize", self.moe_renormalize)
            .with("latent_moe_use_norm", self.latent_moe_use_norm)
            .with("first_k_dense_replace", self.first_k_dense_replace)
            .with("intermediate_size", self.intermediate_size)
            .with("attn_res_block_size", self.attn_res_block_size)
            .with("situ_beta", self.situ_beta)
            .with("situ_linear_beta", self.situ_linear_beta)
            .with("full_attn_layers", ul(&self.full_attn_layers))
            .with("layer_map", self.layer_map())
            .with("mla_layers_zero_based", ul(&self.mla_layers()))
            .with(
                "moe_layers_zero_based",
                Value::from(
                    (0..self.num_hidden_layers)
                        .filter(|&l| self.is_moe(l))
                        .collect::<Vec<_>>(),
                ),
            )
            .with("attn_res_boundaries_zero_based", ul(&self.boundaries()))
            .with("max_position_embeddings", self.max_position_embeddings)
            .with("bos_token_id", self.bos_token_id)
            .with("eos_token_id", self.eos_token_id)
            .with("pad_token_id", self.pad_token_id)
            .with(
                "derived",
                Object::new()
                    .with("kda_proj_width", d.kda_proj_width)
                    .with("kda_query_scale", d.kda_query_scale)
                    .with("mla_head_width", d.mla_head_width)
                    .with("mla_softmax_scale", d.mla_softmax_scale)
                    .with("q_b_rows", d.q_b_rows)
                    .with("kv_a_rows", d.kv_a_rows)
                    .with("kv_b_rows", d.kv_b_rows)
                    .with("mla_out_width", d.mla_out_width)
                    .with("mla_cache_row", d.mla_cache_row)
                    .with("shared_width", d.shared_width)
                    .with("groups_w13", d.groups_w13)
                    .with("groups_w2", d.groups_w2)
                    .with("conv_history", d.conv_history)
                    .with("snapshots", d.snapshots)
                    .with("max_agg_sources", d.max_agg_sources)
                    .with("n_dense", d.n_dense)
                    .with("n_moe", d.n_moe)
                    .with("n_kda", d.n_kda)
                    .with("n_mla", d.n_mla),
            );
        Value::Object(o)
    }
}
