//! A DSpark draft's `config.json` → validated [`DraftConfig`] (DRAFT.md §1), and the checks of
//! a draft against the target it is to draft for. Keys are flat; each follows its rule of the
//! §1 table: R (required: refused without it), O (optional, with the default given), I (read
//! and ignored, any value), C (must have the value shown). Every problem is reported at once,
//! each naming its key (exit 2), as the target's config does (MODEL.md §2.5).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::json::{self, Object, Value};
use std::path::Path;

/// Which target state is tapped after each layer of `target_layer_ids` (DRAFT.md §2,
/// `aux_hidden_stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuxStream {
    /// The running residual without attention residuals (the default).
    Prefix,
    /// x_a of the next layer (its AttnRes aggregate before the norm).
    AttnRes,
}

impl AuxStream {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AuxStream::Prefix => "prefix",
            AuxStream::AttnRes => "attn_res",
        }
    }
}

/// DeepSeek-V3's YaRN parameters (DRAFT.md "RoPE"): `rope_parameters` (or `rope_scaling`)
/// with `rope_type`/`type` = `yarn`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// `factor` s (> 0).
    pub factor: f64,
    /// `original_max_position_embeddings` L.
    pub original_max_position_embeddings: f64,
    /// `beta_fast` (default 32, DeepSeek-V3's).
    pub beta_fast: f64,
    /// `beta_slow` (default 1).
    pub beta_slow: f64,
    /// `mscale` (default 1).
    pub mscale: f64,
    /// `mscale_all_dim` (default 0).
    pub mscale_all_dim: f64,
}

/// The validated draft config (DRAFT.md §1). Widths use the symbols of §3: H, F, nL, Hd,
/// Rq, Rkv, Dn, Dr, Dv, V, nT, r.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftConfig {
    /// `hidden_size` H (must equal the target's).
    pub hidden_size: usize,
    /// `intermediate_size` F (SwiGLU width).
    pub intermediate_size: usize,
    /// `num_hidden_layers` nL.
    pub num_hidden_layers: usize,
    /// `num_attention_heads` Hd (= `num_key_value_heads`: MLA).
    pub num_attention_heads: usize,
    /// `q_lora_rank` Rq.
    pub q_lora_rank: usize,
    /// `kv_lora_rank` Rkv.
    pub kv_lora_rank: usize,
    /// `qk_nope_head_dim` Dn.
    pub qk_nope_head_dim: usize,
    /// `qk_rope_head_dim` Dr (even: rotated in pairs).
    pub qk_rope_head_dim: usize,
    /// `v_head_dim` Dv.
    pub v_head_dim: usize,
    /// `rms_norm_eps` ε of every draft norm, the MLA latent norms included.
    pub rms_norm_eps: f64,
    /// `vocab_size` V (= the target's; `draft_vocab_size`, when present, equals it).
    pub vocab_size: usize,
    /// `target_hidden_size` Ht.
    pub target_hidden_size: usize,
    /// `target_num_hidden_layers` NL of the target.
    pub target_num_hidden_layers: usize,
    /// `target_layer_ids`: 0-based target layers tapped, strictly ascending (nT of them).
    pub target_layer_ids: Vec<usize>,
    /// `mask_token_id` m: the id of the block rows after the anchor.
    pub mask_token_id: u32,
    /// `markov_rank` r when the Markov head is present (`markov_head_type` `vanilla`).
    pub markov_rank: Option<usize>,
    /// `enable_confidence_head` (absent = false: no confidence tensors are read).
    pub enable_confidence_head: bool,
    /// `confidence_head_with_markov` (default true): the confidence input is [h ; W_m1[prev]].
    pub confidence_head_with_markov: bool,
    /// `fc_norm` (default false): an RMSNorm per tap before `context_proj`.
    pub fc_norm: bool,
    /// `aux_hidden_stream` (default `prefix`).
    pub aux_hidden_stream: AuxStream,
    /// `rope_theta` b.
    pub rope_theta: f64,
    /// YaRN scaling, or `None` for plain RoPE (`rope_type` `default`, or no scaling object).
    pub yarn: Option<Yarn>,
    /// `block_size` K (default 7): rows of one draft forward.
    pub block_size: usize,
    /// `causal_block_attention` (default false): rows attend to earlier block rows only.
    pub causal_block_attention: bool,
}

/// Typed reads of one flat object, collecting every problem (each "key: message").
struct Keys<'v> {
    obj: &'v Object,
    problems: Vec<String>,
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("number {}", n.quoted()),
        Value::String(s) if s.len() <= 40 => format!("string \"{s}\""),
        other => other.type_name().to_string(),
    }
}

impl<'v> Keys<'v> {
    fn get(&self, key: &str) -> Option<&'v Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }
    fn bad(&mut self, key: &str, msg: impl std::fmt::Display) {
        self.problems.push(format!("{key}: {msg}"));
    }
    fn int_value(&mut self, key: &str, v: &Value, min: u64) -> Option<usize> {
        match v
            .as_number()
            .filter(|n| n.is_integer())
            .and_then(|n| n.as_u64())
        {
            Some(x) if x >= min => usize::try_from(x).ok(),
            Some(x) => {
                self.bad(key, format!("must be ≥ {min}, found {x}"));
                None
            }
            None => {
                self.bad(
                    key,
                    format!("expected a non-negative int, found {}", describe(v)),
                );
                None
            }
        }
    }
    /// R: a required int ≥ `min`.
    fn req_int(&mut self, key: &str, min: u64) -> Option<usize> {
        match self.get(key) {
            Some(v) => self.int_value(key, v, min),
            None => {
                self.bad(key, "required key is missing");
                None
            }
        }
    }
    /// O: an optional int ≥ `min`.
    fn opt_int(&mut self, key: &str, min: u64) -> Option<Option<usize>> {
        match self.get(key) {
            Some(v) => self.int_value(key, v, min).map(Some),
            None => Some(None),
        }
    }
    fn float_value(&mut self, key: &str, v: &Value) -> Option<f64> {
        match v.as_number() {
            Some(n) if n.as_f64().is_finite() => Some(n.as_f64()),
            _ => {
                self.bad(
                    key,
                    format!("expected a finite number, found {}", describe(v)),
                );
                None
            }
        }
    }
    fn req_float(&mut self, key: &str) -> Option<f64> {
        match self.get(key) {
            Some(v) => self.float_value(key, v),
            None => {
                self.bad(key, "required key is missing");
                None
            }
        }
    }
    /// O: an optional bool with its default.
    fn opt_bool(&mut self, key: &str, default: bool) -> Option<bool> {
        match self.get(key) {
            None => Some(default),
            Some(v) => match v.as_bool() {
                Some(b) => Some(b),
                None => {
                    self.bad(
                        key,
                        format!("expected true or false, found {}", describe(v)),
                    );
                    None
                }
            },
        }
    }
    fn opt_str(&mut self, key: &str) -> Option<Option<&'v str>> {
        match self.get(key) {
            None => Some(None),
            Some(v) => match v.as_str() {
                Some(s) => Some(Some(s)),
                None => {
                    self.bad(key, format!("expected a string, found {}", describe(v)));
                    None
                }
            },
        }
    }
}

impl DraftConfig {
    /// Reads and validates a draft's `config.json` at `path` (DRAFT.md §1). Errors (exit 2)
    /// start with the path and name every bad key at once.
    pub fn from_file(path: &Path) -> Result<DraftConfig> {
        let bytes = std::fs::read(path).map_err(|e| {
            Error::invalid(format!("{}: cannot read draft config: {e}", path.display()))
        })?;
        Self::from_json(&bytes, &path.display().to_string())
    }

    /// Parses and validates JSON text; `origin` prefixes every message.
    pub fn from_json(bytes: &[u8], origin: &str) -> Result<DraftConfig> {
        let root = json::parse(bytes).map_err(|e| e.into_error(origin, 0))?;
        let obj = root.as_object().ok_or_else(|| {
            Error::invalid(format!(
                "{origin}: the draft config must be a JSON object, found {}",
                root.type_name()
            ))
        })?;
        Self::from_object(obj).map_err(|problems| {
            Error::invalid(format!(
                "{origin}: {}",
                problems.join(&format!("\n{origin}: "))
            ))
        })
    }

    fn from_object(obj: &Object) -> std::result::Result<DraftConfig, Vec<String>> {
        let mut k = Keys {
            obj,
            problems: Vec::new(),
        };
        // The GQA drafts (RadixArk, LithosAI) are a second format: refuse them by name first,
        // since every MLA key would otherwise be reported missing.
        if let Some(p) = gqa_problem(&k) {
            return Err(vec![p]);
        }
        let hidden_size = k.req_int("hidden_size", 1);
        let intermediate_size = k.req_int("intermediate_size", 1);
        let num_hidden_layers = k.req_int("num_hidden_layers", 1);
        let heads = k.req_int("num_attention_heads", 1);
        let kv_heads = k.req_int("num_key_value_heads", 1);
        let q_lora_rank = k.req_int("q_lora_rank", 1);
        let kv_lora_rank = k.req_int("kv_lora_rank", 1);
        let dn = k.req_int("qk_nope_head_dim", 1);
        let dr = k.req_int("qk_rope_head_dim", 2);
        let dv = k.req_int("v_head_dim", 1);
        if let Some(d) = dr {
            if d % 2 != 0 {
                k.bad(
                    "qk_rope_head_dim",
                    format!("must be even (rotated in pairs), found {d}"),
                );
            }
        }
        if let (Some(h), Some(kv)) = (heads, kv_heads) {
            if h != kv {
                k.bad(
                    "num_key_value_heads",
                    format!("must equal num_attention_heads ({h}) for an MLA draft, found {kv}"),
                );
            }
        }
        let rms_norm_eps = k.req_float("rms_norm_eps");
        if let Some(e) = rms_norm_eps {
            if e <= 0.0 {
                k.bad("rms_norm_eps", format!("must be > 0, found {e}"));
            }
        }
        for key in ["mla_use_nope", "mla_use_output_gate"] {
            if k.opt_bool(key, false) == Some(true) {
                k.bad(
                    key,
                    "must be false: a DSpark draft's MLA rotates its rope dims and has no output gate",
                );
            }
        }
        let vocab_size = k.req_int("vocab_size", 1);
        if let (Some(Some(dvs)), Some(v)) = (k.opt_int("draft_vocab_size", 1), vocab_size) {
            if dvs != v {
                k.bad(
                    "draft_vocab_size",
                    format!("must equal vocab_size ({v}): a reduced draft vocabulary is another format, found {dvs}"),
                );
            }
        }
        let target_hidden_size = k.req_int("target_hidden_size", 1);
        let target_num_hidden_layers = k.req_int("target_num_hidden_layers", 1);
        let target_layer_ids = read_layer_ids(&mut k);
        if let (Some(Some(n)), Some(ids)) = (k.opt_int("num_target_layers", 1), &target_layer_ids) {
            if n != ids.len() {
                k.bad(
                    "num_target_layers",
                    format!(
                        "must equal the length of target_layer_ids ({}), found {n}",
                        ids.len()
                    ),
                );
            }
        }
        let mask_token_id = k.req_int("mask_token_id", 0);
        if let (Some(m), Some(v)) = (mask_token_id, vocab_size) {
            if m >= v {
                k.bad(
                    "mask_token_id",
                    format!("must be < vocab_size ({v}), found {m}"),
                );
            }
        }
        let markov_rank = read_markov(&mut k);
        let enable_confidence_head = k.opt_bool("enable_confidence_head", false);
        let confidence_head_with_markov = k.opt_bool("confidence_head_with_markov", true);
        let fc_norm = k.opt_bool("fc_norm", false);
        let aux_hidden_stream = match k.opt_str("aux_hidden_stream") {
            Some(None) | Some(Some("prefix")) => Some(AuxStream::Prefix),
            Some(Some("attn_res")) => Some(AuxStream::AttnRes),
            Some(Some(other)) => {
                k.bad(
                    "aux_hidden_stream",
                    format!("unknown stream \"{other}\" (expected \"prefix\" or \"attn_res\")"),
                );
                None
            }
            None => None,
        };
        let (rope_theta, yarn) = read_rope(&mut k);
        let block_size = k.opt_int("block_size", 1).map(|b| b.unwrap_or(7));
        let causal = k.opt_bool("causal_block_attention", false);
        // vLLM's K3 draft scales the base logits and the Markov bias each by `logit_scale`
        // (LogitsProcessor(scale=...), default 1.0); the published drafts have none.
        if let Some(v) = k.get("logit_scale") {
            if let Some(s) = k.float_value("logit_scale", v) {
                if s != 1.0 {
                    k.bad("logit_scale", format!("only 1.0 is supported, found {s}"));
                }
            }
        }
        // The Block5 draft was trained causal (3 layers, 3 taps) and says nothing in its config:
        // refuse that shape unless the config states the attention mode.
        if k.get("causal_block_attention").is_none() {
            if let (Some(3), Some(ids)) = (num_hidden_layers, &target_layer_ids) {
                if ids.len() == 3 {
                    k.bad(
                        "causal_block_attention",
                        "a 3-layer, 3-tap DSpark draft (Kimi-K3-DSpark-Block5's shape) was trained with causal block attention; set causal_block_attention true or false to say which",
                    );
                }
            }
        }
        // Every other key (the I rule: architectures, model_type, torch_dtype,
        // tie_word_embeddings, max_position_embeddings, token ids other than mask_token_id, a
        // trainer's bookkeeping) carries nothing the forward needs and is ignored.
        if !k.problems.is_empty() {
            return Err(k.problems);
        }
        Ok(DraftConfig {
            hidden_size: hidden_size.unwrap(),
            intermediate_size: intermediate_size.unwrap(),
            num_hidden_layers: num_hidden_layers.unwrap(),
            num_attention_heads: heads.unwrap(),
            q_lora_rank: q_lora_rank.unwrap(),
            kv_lora_rank: kv_lora_rank.unwrap(),
            qk_nope_head_dim: dn.unwrap(),
            qk_rope_head_dim: dr.unwrap(),
            v_head_dim: dv.unwrap(),
            rms_norm_eps: rms_norm_eps.unwrap(),
            vocab_size: vocab_size.unwrap(),
            target_hidden_size: target_hidden_size.unwrap(),
            target_num_hidden_layers: target_num_hidden_layers.unwrap(),
            target_layer_ids: target_layer_ids.unwrap(),
            mask_token_id: mask_token_id.unwrap() as u32,
            markov_rank: markov_rank.unwrap(),
            enable_confidence_head: enable_confidence_head.unwrap(),
            confidence_head_with_markov: confidence_head_with_markov.unwrap(),
            fc_norm: fc_norm.unwrap(),
            aux_hidden_stream: aux_hidden_stream.unwrap(),
            rope_theta: rope_theta.unwrap(),
            yarn: yarn.unwrap(),
            block_size: block_size.unwrap(),
            causal_block_attention: causal.unwrap(),
        })
    }

    /// Checks the draft against the target's config (DRAFT.md §1): `target_hidden_size`,
    /// `hidden_size` (the draft reads the target's embedding rows and lm_head) and
    /// `vocab_size` equal the target's, `target_num_hidden_layers` equals its layer count, and
    /// every tap lies in 0 … NL−1. `origin` (the draft's config path) prefixes the message;
    /// every mismatch is named at once (exit 2).
    pub fn check_target(&self, target: &Config, origin: &str) -> Result<()> {
        let mut p = Vec::new();
        let mut eq = |key: &str, draft: usize, tkey: &str, t: usize| {
            if draft != t {
                p.push(format!(
                    "{key}: {draft} does not match the target's {tkey} ({t}): this draft is for another model"
                ));
            }
        };
        eq(
            "target_hidden_size",
            self.target_hidden_size,
            "hidden_size",
            target.hidden_size,
        );
        eq(
            "hidden_size",
            self.hidden_size,
            "hidden_size",
            target.hidden_size,
        );
        eq(
            "vocab_size",
            self.vocab_size,
            "vocab_size",
            target.vocab_size,
        );
        eq(
            "target_num_hidden_layers",
            self.target_num_hidden_layers,
            "num_hidden_layers",
            target.num_hidden_layers,
        );
        if let Some(&l) = self
            .target_layer_ids
            .iter()
            .find(|&&l| l >= target.num_hidden_layers)
        {
            p.push(format!(
                "target_layer_ids: layer {l} is outside the target's layers 0 … {}",
                target.num_hidden_layers - 1
            ));
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{origin}: {}",
                p.join(&format!("\n{origin}: "))
            )))
        }
    }

    /// Width of one context-cache row: Rkv + Dr floats (DRAFT.md §3).
    pub fn cache_row(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// Bytes of the context cache per target position: nL · (Rkv + Dr) · 4 (DRAFT.md §3;
    /// 11,520 for the Inferact draft).
    pub fn cache_bytes_per_position(&self) -> u64 {
        (self.num_hidden_layers * self.cache_row() * 4) as u64
    }
}

/// The refusal of a GQA-attention draft (RadixArk's and LithosAI's format), if this is one.
fn gqa_problem(k: &Keys<'_>) -> Option<String> {
    let int = |key: &str| {
        k.get(key)
            .and_then(|v| v.as_number())
            .and_then(|n| n.as_u64())
    };
    let heads = int("num_attention_heads");
    let kv = int("num_key_value_heads");
    let fewer_kv = matches!((heads, kv), (Some(h), Some(kv)) if kv < h);
    let head_dim = k.get("head_dim").is_some();
    let mla = k.get("kv_lora_rank").is_some();
    if fewer_kv || (head_dim && !mla) {
        let why = if fewer_kv {
            format!(
                "num_key_value_heads {} < num_attention_heads {}",
                kv.unwrap_or(0),
                heads.unwrap_or(0)
            )
        } else {
            "a head_dim key and no kv_lora_rank".to_string()
        };
        return Some(format!(
            "num_key_value_heads: this is a GQA-attention DSpark draft ({why}), a second format k3 does not run; use an MLA DSpark draft (kv_lora_rank, qk_rope_head_dim, …)"
        ));
    }
    None
}

fn read_layer_ids(k: &mut Keys<'_>) -> Option<Vec<usize>> {
    let key = "target_layer_ids";
    let v = match k.get(key) {
        Some(v) => v,
        None => {
            k.bad(key, "required key is missing");
            return None;
        }
    };
    let Some(arr) = v.as_array() else {
        k.bad(
            key,
            format!("expected an array of ints, found {}", describe(v)),
        );
        return None;
    };
    if arr.is_empty() {
        k.bad(key, "must list at least one target layer");
        return None;
    }
    let mut ids = Vec::with_capacity(arr.len());
    for (i, e) in arr.iter().enumerate() {
        ids.push(k.int_value(&format!("{key}[{i}]"), e, 0)?);
    }
    if let Some(w) = ids.windows(2).position(|w| w[1] <= w[0]) {
        k.bad(
            key,
            format!(
                "must be strictly ascending, found {} after {}",
                ids[w + 1],
                ids[w]
            ),
        );
        return None;
    }
    Some(ids)
}

/// `markov_rank` / `markov_head_type`: both absent = no Markov head; present = `vanilla` with
/// rank r ≥ 1. Returns Some(rank option) or None after recording a problem.
fn read_markov(k: &mut Keys<'_>) -> Option<Option<usize>> {
    let rank = k.opt_int("markov_rank", 0)?;
    let kind = k.opt_str("markov_head_type")?;
    match (rank, kind) {
        (None | Some(0), None) => Some(None),
        (None | Some(0), Some(_)) => {
            k.bad(
                "markov_rank",
                "markov_head_type is given but markov_rank is missing or 0",
            );
            None
        }
        (Some(r), None | Some("vanilla")) => Some(Some(r)),
        (Some(_), Some(other)) => {
            k.bad(
                "markov_head_type",
                format!("unknown Markov head \"{other}\" (k3 runs \"vanilla\")"),
            );
            None
        }
    }
}

/// `rope_theta` (top level, or inside the scaling object) and `rope_parameters` /
/// `rope_scaling`: type `yarn` (DeepSeek-V3's) or `default`/absent; any other is refused.
#[allow(clippy::type_complexity)]
fn read_rope(k: &mut Keys<'_>) -> (Option<f64>, Option<Option<Yarn>>) {
    let (scope_key, scope) = match (k.get("rope_parameters"), k.get("rope_scaling")) {
        (Some(v), _) => ("rope_parameters", Some(v)),
        (None, Some(v)) => ("rope_scaling", Some(v)),
        (None, None) => ("rope_parameters", None),
    };
    let obj = match scope {
        None => None,
        Some(v) => match v.as_object() {
            Some(o) => Some(o),
            None => {
                k.bad(
                    scope_key,
                    format!("expected an object, found {}", describe(v)),
                );
                return (None, None);
            }
        },
    };
    let theta = match (k.get("rope_theta"), obj.and_then(|o| o.get("rope_theta"))) {
        (Some(v), _) => k.float_value("rope_theta", v),
        (None, Some(v)) => k.float_value(&format!("{scope_key}.rope_theta"), v),
        (None, None) => {
            k.bad("rope_theta", "required key is missing");
            None
        }
    };
    if let Some(t) = theta {
        if t <= 1.0 {
            k.bad("rope_theta", format!("must be > 1, found {t}"));
        }
    }
    let Some(o) = obj else {
        return (theta, Some(None));
    };
    let ty = o.get("rope_type").or_else(|| o.get("type"));
    let ty = match ty.map(|v| v.as_str()) {
        None => "default",
        Some(Some(s)) => s,
        Some(None) => {
            k.bad(&format!("{scope_key}.rope_type"), "expected a string");
            return (theta, None);
        }
    };
    match ty {
        "default" | "none" => (theta, Some(None)),
        "yarn" => {
            let mut num = |name: &str, default: Option<f64>| -> Option<f64> {
                let key = format!("{scope_key}.{name}");
                match o.get(name).filter(|v| !v.is_null()) {
                    Some(v) => k.float_value(&key, v),
                    None => match default {
                        Some(d) => Some(d),
                        None => {
                            k.bad(&key, "required key is missing for rope_type yarn");
                            None
                        }
                    },
                }
            };
            let factor = num("factor", None);
            let orig = num("original_max_position_embeddings", None);
            let beta_fast = num("beta_fast", Some(32.0));
            let beta_slow = num("beta_slow", Some(1.0));
            let mscale = num("mscale", Some(1.0));
            let mscale_all_dim = num("mscale_all_dim", Some(0.0));
            if let Some(f) = factor {
                if f <= 0.0 {
                    k.bad(
                        &format!("{scope_key}.factor"),
                        format!("must be > 0, found {f}"),
                    );
                    return (theta, None);
                }
            }
            if let Some(l) = orig {
                if l < 1.0 {
                    k.bad(
                        &format!("{scope_key}.original_max_position_embeddings"),
                        format!("must be ≥ 1, found {l}"),
                    );
                    return (theta, None);
                }
            }
            match (factor, orig, beta_fast, beta_slow, mscale, mscale_all_dim) {
                (Some(factor), Some(l), Some(bf), Some(bs), Some(m), Some(ma)) => (
                    theta,
                    Some(Some(Yarn {
                        factor,
                        original_max_position_embeddings: l,
                        beta_fast: bf,
                        beta_slow: bs,
                        mscale: m,
                        mscale_all_dim: ma,
                    })),
                ),
                _ => (theta, None),
            }
        }
        other => {
            k.bad(
                &format!("{scope_key}.rope_type"),
                format!("unsupported rope type \"{other}\" (k3 runs \"yarn\" or none)"),
            );
            (theta, None)
        }
    }
}
