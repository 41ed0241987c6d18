//! Binding census: every tensor classified, every required tensor checked, and the byte ledger
//! (MODEL.md §4, §9; FORMATS.md §4).
//!
//! [`Census::run`] never fails; it collects every problem (missing tensors, wrong shapes or
//! dtypes, unknown names under `language_model.`, a tied head that is also stored, experts in
//! another encoding, layers or experts the config does not have) and computes the ledger over
//! what is present: trunk bytes per layer and whether each layer's trunk tensors form one
//! gap-free run in one shard, the largest run, the model-table bytes, bytes per expert and in
//! all, and whether each expert's six tensors form one gap-free run in the fixed order.
//! [`Census::check`] turns the problems into one error (exit 2).

use crate::catalogue::{
    self, classify, expert_tensor_name, layer_tensor_name, ModelTensor, SuffixSpec, TensorClass,
    EXPERT_ORDER, LANGUAGE_MODEL_PREFIX,
};
use crate::checkpoint::{TensorIndex, TensorInfo};
use crate::config::{AttnKind, Config};
use crate::error::{Error, Result};
use crate::safetensors::shape_str;
use std::fmt::Write as _;

/// At most this many problems are listed; the census stops looking after that many, which
/// also bounds its work when a config and a checkpoint have nothing in common.
pub const MAX_PROBLEMS: usize = 200;

/// How many non-contiguous experts are remembered by (layer, expert).
const MAX_LISTED_EXPERTS: usize = 16;

/// Trunk ledger of one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerLedger {
    /// Zero-based layer.
    pub layer: usize,
    /// Attention kind.
    pub kind: AttnKind,
    /// Dense FFN (else MoE).
    pub dense: bool,
    /// Trunk tensors the catalogue requires for this layer.
    pub required: usize,
    /// Of those, present in the checkpoint.
    pub present: usize,
    /// Sum of their byte lengths.
    pub bytes: u64,
    /// The shard holding them, when they are all in one shard.
    pub shard: Option<usize>,
    /// Absolute offset of the first byte of the run (lowest offset), when in one shard.
    pub run_start: Option<u64>,
    /// True when all required tensors are present, in one shard, and form one gap-free run
    /// (sorted by offset, each starting where the previous ends; FORMATS.md §4).
    pub contiguous: bool,
    /// Why not contiguous (the first break), if not.
    pub break_reason: Option<String>,
}

/// Routed-expert ledger.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExpertLedger {
    /// Bytes per expert from the config: 3 × (packed + scale) (K3: 17,547,264).
    pub bytes_per_expert: u64,
    /// Experts the config requires (MoE layers × num_experts).
    pub required: u64,
    /// Experts whose six tensors are all present.
    pub present: u64,
    /// Sum of the present experts' bytes.
    pub bytes: u64,
    /// Present experts whose six tensors form one gap-free run in the fixed order.
    pub contiguous: u64,
    /// Some present experts that are not contiguous (layer, expert); read as six pieces.
    pub non_contiguous_examples: Vec<(usize, usize)>,
}

/// Tensor counts by class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassCounts {
    /// Model-level tensors.
    pub model: usize,
    /// Layer tensors that are not routed experts (whether or not the catalogue lists them).
    pub trunk: usize,
    /// Routed-expert tensors.
    pub expert: usize,
    /// `vision_tower.` / `mm_projector.` tensors.
    pub ignored: usize,
    /// Names the classifier does not recognise.
    pub unknown: usize,
}

/// The byte ledger (MODEL.md §9 quantities).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// One entry per layer, zero-based.
    pub layers: Vec<LayerLedger>,
    /// Sum of all layers' trunk bytes.
    pub trunk_bytes: u64,
    /// The layer with the largest trunk run and its bytes.
    pub largest_run: Option<(usize, u64)>,
    /// Bytes of the model tables (`embed_tokens`, `lm_head`, three vectors) present.
    pub model_table_bytes: u64,
    /// The routed-expert ledger.
    pub experts: ExpertLedger,
    /// Bytes of ignored vision/projector tensors.
    pub ignored_bytes: u64,
    /// Bytes of every present tensor.
    pub total_bytes: u64,
}

impl Ledger {
    /// True when every layer's trunk is one contiguous run.
    pub fn trunk_contiguous(&self) -> bool {
        self.layers.iter().all(|l| l.contiguous)
    }

    /// True when every required expert is present and contiguous.
    pub fn experts_contiguous(&self) -> bool {
        self.experts.contiguous == self.experts.required
    }
}

/// The result of a census: problems, counts and the ledger.
#[derive(Debug, Clone)]
pub struct Census {
    /// Problems found (at most [`MAX_PROBLEMS`] listed).
    pub problems: Vec<String>,
    /// True when the census stopped at [`MAX_PROBLEMS`].
    pub truncated: bool,
    /// Present tensors by class.
    pub counts: ClassCounts,
    /// The byte ledger.
    pub ledger: Ledger,
    bound_shards: Vec<bool>,
}

struct Collector {
    problems: Vec<String>,
    truncated: bool,
    /// Per absent shard holding required tensors: (shard file name, its problem's index when
    /// listed, required tensors in it, the first one). One problem per shard, not per tensor.
    absent: Vec<(String, Option<usize>, usize, String)>,
}

impl Collector {
    fn push(&mut self, p: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        } else {
            self.truncated = true;
        }
    }
    fn full(&self) -> bool {
        self.truncated
    }
    /// Counts `name` against the absent shard `shard`; the first one gets a problem line.
    fn absent(&mut self, shard: &str, name: &str) {
        if let Some(a) = self.absent.iter_mut().find(|a| a.0 == shard) {
            a.2 += 1;
            return;
        }
        let at = (self.problems.len() < MAX_PROBLEMS).then_some(self.problems.len());
        self.push(String::new());
        self.absent
            .push((shard.to_string(), at, 1, name.to_string()));
    }
    /// The problems, with each absent shard's line naming its count.
    fn finish(mut self) -> (Vec<String>, bool) {
        for (shard, at, n, first) in &self.absent {
            if let Some(i) = at {
                self.problems[*i] = format!(
                    "shard {shard} is not present (the index file maps {n} required tensor{} to it, \
                     first {first}); download it",
                    if *n == 1 { "" } else { "s" }
                );
            }
        }
        (self.problems, self.truncated)
    }
}

fn missing_msg(index: &TensorIndex, name: &str) -> String {
    match index.absent_shard_of(name) {
        Some(s) => format!(
            "{name}: missing (the index file maps it to shard {}, which is not present)",
            s.file_name
        ),
        None => format!("{name}: missing"),
    }
}

/// Checks one required tensor; returns its info when present with the right shape and dtype.
fn check_required<'i>(
    index: &'i TensorIndex,
    c: &mut Collector,
    name: &str,
    shape: &[u64],
    dtype: crate::safetensors::Dtype,
    what: &str,
) -> Option<TensorInfo<'i>> {
    let info = match index.get(name) {
        Some(i) => i,
        None => {
            match index.absent_shard_of(name) {
                Some(s) => c.absent(&s.file_name, name),
                None => c.push(missing_msg(index, name)),
            }
            return None;
        }
    };
    let mut ok = true;
    if info.dtype != dtype {
        c.push(format!(
            "{name}: dtype {} but docs/formats.md#tensor-names requires {dtype}{what}",
            info.dtype
        ));
        ok = false;
    }
    if info.shape != shape {
        c.push(format!(
            "{name}: shape {} but docs/formats.md#tensor-names requires {}",
            shape_str(info.shape),
            shape_str(shape)
        ));
        ok = false;
    }
    ok.then_some(info)
}

/// Step 1 of the census: classifies every present tensor, pushing the misplaced ones (a head
/// stored although tied, a layer or expert that does not exist, a name outside the MODEL.md §4
/// catalogue). Returns the class counts, the ignored bytes and the total bytes.
fn classify_present(
    cfg: &Config,
    index: &TensorIndex,
    suffixes: &[Vec<SuffixSpec>],
    c: &mut Collector,
) -> (ClassCounts, u64, u64) {
    let nl = cfg.num_hidden_layers;
    let mut counts = ClassCounts::default();
    let mut ignored_bytes = 0u64;
    let mut total_bytes = 0u64;
    index.for_each(|_, name, info| {
        total_bytes += info.nbytes;
        let shard = &index.shards()[info.shard].file_name;
        match classify(name) {
            TensorClass::Ignored => {
                counts.ignored += 1;
                ignored_bytes += info.nbytes;
            }
            TensorClass::Model(m) => {
                counts.model += 1;
                if m == ModelTensor::LmHead && cfg.tie_word_embeddings {
                    c.push(format!(
                        "{name} (in {shard}): stored although tie_word_embeddings is true (the head is embed_tokens; docs/formats.md#tensor-names)"
                    ));
                }
            }
            TensorClass::Layer { layer, suffix } => {
                counts.trunk += 1;
                if layer >= nl {
                    c.push(format!(
                        "{name} (in {shard}): layer {layer} does not exist (num_hidden_layers = {nl})"
                    ));
                } else if !suffixes[layer].iter().any(|s| s.suffix == suffix) {
                    c.push(format!(
                        "{name} (in {shard}): not in the tensor catalogue (docs/formats.md#tensor-names) for layer {layer} ({}, {})",
                        kind_name(cfg.attn_kind(layer)),
                        if cfg.is_dense(layer) { "dense FFN" } else { "MoE" }
                    ));
                }
            }
            TensorClass::Expert { layer, expert, .. } => {
                counts.expert += 1;
                if layer >= nl {
                    c.push(format!(
                        "{name} (in {shard}): layer {layer} does not exist (num_hidden_layers = {nl})"
                    ));
                } else if cfg.is_dense(layer) {
                    c.push(format!(
                        "{name} (in {shard}): layer {layer} has a dense FFN (first_k_dense_replace = {}) and no routed experts",
                        cfg.first_k_dense_replace
                    ));
                } else if expert >= cfg.num_experts {
                    c.push(format!(
                        "{name} (in {shard}): expert {expert} does not exist (num_experts = {})",
                        cfg.num_experts
                    ));
                }
            }
            TensorClass::Unknown => {
                counts.unknown += 1;
                let hint = if name.contains(".block_sparse_moe.experts.") {
                    " (routed experts must be MXFP4: w1/w2/w3 .weight_packed + .weight_scale; docs/formats.md#mxfp4-experts)"
                } else {
                    ""
                };
                if name.starts_with(LANGUAGE_MODEL_PREFIX) {
                    c.push(format!(
                        "{name} (in {shard}): not in the tensor catalogue (docs/formats.md#tensor-names){hint}"
                    ));
                } else {
                    c.push(format!(
                        "{name} (in {shard}): outside language_model., vision_tower. and mm_projector. (docs/formats.md#tensor-names)"
                    ));
                }
            }
        }
    });
    (counts, ignored_bytes, total_bytes)
}

/// Step 3 of the census for layer `l`: checks its required trunk tensors (`specs`), marks
/// their shards bound and says whether they form one gap-free run in one shard (FORMATS.md §4).
fn layer_ledger(
    cfg: &Config,
    index: &TensorIndex,
    c: &mut Collector,
    bound: &mut [bool],
    l: usize,
    specs: &[SuffixSpec],
) -> LayerLedger {
    // (shard, offset, bytes, name, position in `specs`)
    let mut run: Vec<(usize, u64, u64, String, usize)> = Vec::new();
    let mut present = 0usize;
    let mut bytes = 0u64;
    for (k, s) in specs.iter().enumerate() {
        let name = layer_tensor_name(l, s.suffix);
        if let Some(info) = check_required(index, c, &name, &s.shape, s.dtype, "") {
            present += 1;
            bytes += info.nbytes;
            bound[info.shard] = true;
            run.push((info.shard, info.offset, info.nbytes, name, k));
        }
    }
    // The position as the last key: a total order (the engine's one sort, `crate::sort`).
    crate::sort::sort_by_key(&mut run, |r| (r.0, r.1, r.4));
    let one_shard = run
        .first()
        .map(|f| f.0)
        .filter(|&s| run.iter().all(|r| r.0 == s));
    let mut break_reason = None;
    if present < specs.len() {
        break_reason = Some(format!(
            "{} of {} trunk tensors present",
            present,
            specs.len()
        ));
    } else if one_shard.is_none() {
        let mut shards: Vec<&str> = run
            .iter()
            .map(|r| index.shards()[r.0].file_name.as_str())
            .collect();
        shards.dedup();
        break_reason = Some(format!("trunk split across shards {}", shards.join(", ")));
    } else {
        for w in run.windows(2) {
            let end = w[0].1 + w[0].2;
            if w[1].1 != end {
                break_reason = Some(format!(
                    "gap of {} bytes between {} (ends at byte {end}) and {} (begins at byte {})",
                    w[1].1 as i128 - end as i128,
                    w[0].3,
                    w[1].3,
                    w[1].1
                ));
                break;
            }
        }
    }
    let contiguous = break_reason.is_none();
    LayerLedger {
        layer: l,
        kind: cfg.attn_kind(l),
        dense: cfg.is_dense(l),
        required: specs.len(),
        present,
        bytes,
        shard: one_shard,
        run_start: one_shard.and(run.first().map(|r| r.1)),
        contiguous,
        break_reason,
    }
}

/// Step 4 of the census: checks the six MXFP4 tensors of every routed expert (FORMATS.md §5),
/// marks their shards bound and counts the present and contiguous experts.
fn expert_ledger(
    cfg: &Config,
    index: &TensorIndex,
    c: &mut Collector,
    bound: &mut [bool],
) -> ExpertLedger {
    let nl = cfg.num_hidden_layers;
    let mut ex = ExpertLedger {
        bytes_per_expert: catalogue::expert_bytes(cfg),
        required: cfg.derived.n_moe as u64 * cfg.num_experts as u64,
        ..ExpertLedger::default()
    };
    let shapes = EXPERT_ORDER.map(|(m, p)| catalogue::expert_shape(cfg, m, p));
    'layers: for l in (0..nl).filter(|&l| cfg.is_moe(l)) {
        for e in 0..cfg.num_experts {
            if c.full() {
                break 'layers;
            }
            let mut infos: [Option<TensorInfo<'_>>; 6] = [None; 6];
            for (k, &(m, p)) in EXPERT_ORDER.iter().enumerate() {
                let name = expert_tensor_name(l, e, m, p);
                infos[k] = check_required(
                    index,
                    c,
                    &name,
                    &shapes[k],
                    crate::safetensors::Dtype::U8,
                    " (a routed expert in another encoding is refused; experts are MXFP4, docs/formats.md#mxfp4-experts)",
                );
            }
            if infos.iter().all(Option::is_some) {
                let infos = infos.map(|i| i.expect("checked above"));
                ex.present += 1;
                ex.bytes += infos.iter().map(|i| i.nbytes).sum::<u64>();
                for i in &infos {
                    bound[i.shard] = true;
                }
                let contiguous = infos
                    .windows(2)
                    .all(|w| w[1].shard == w[0].shard && w[1].offset == w[0].end());
                if contiguous {
                    ex.contiguous += 1;
                } else if ex.non_contiguous_examples.len() < MAX_LISTED_EXPERTS {
                    ex.non_contiguous_examples.push((l, e));
                }
            }
        }
    }
    ex
}

impl Census {
    /// Runs the census of `index` against `cfg`. Never fails; see [`Census::check`].
    pub fn run(cfg: &Config, index: &TensorIndex) -> Census {
        let nl = cfg.num_hidden_layers;
        let mut c = Collector {
            problems: Vec::new(),
            truncated: false,
            absent: Vec::new(),
        };
        let mut bound = vec![false; index.shards().len()];
        let suffixes: Vec<Vec<SuffixSpec>> =
            (0..nl).map(|l| catalogue::layer_suffixes(cfg, l)).collect();

        // 1. Classify every present tensor.
        let (counts, ignored_bytes, total_bytes) = classify_present(cfg, index, &suffixes, &mut c);

        // 2. Model level.
        let mut model_table_bytes = 0u64;
        for spec in catalogue::model_tensors(cfg) {
            if let Some(info) =
                check_required(index, &mut c, &spec.name, &spec.shape, spec.dtype, "")
            {
                model_table_bytes += info.nbytes;
                bound[info.shard] = true;
            }
        }

        // 3. Layer trunks and the per-layer ledger.
        let mut layers = Vec::with_capacity(nl);
        let mut trunk_bytes = 0u64;
        let mut largest_run: Option<(usize, u64)> = None;
        for (l, specs) in suffixes.iter().enumerate() {
            if c.full() {
                break;
            }
            let ledger = layer_ledger(cfg, index, &mut c, &mut bound, l, specs);
            trunk_bytes += ledger.bytes;
            if largest_run.is_none_or(|(_, b)| ledger.bytes > b) {
                largest_run = Some((l, ledger.bytes));
            }
            layers.push(ledger);
        }

        // 4. Routed experts.
        let experts = expert_ledger(cfg, index, &mut c, &mut bound);

        let (problems, truncated) = c.finish();
        Census {
            truncated,
            problems,
            counts,
            ledger: Ledger {
                layers,
                trunk_bytes,
                largest_run,
                model_table_bytes,
                experts,
                ignored_bytes,
                total_bytes,
            },
            bound_shards: bound,
        }
    }

    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Ok, or one error (exit 2) listing every problem, prefixed with `origin` (the model
    /// directory).
    pub fn check(&self, origin: &str) -> Result<()> {
        if self.problems.is_empty() {
            return Ok(());
        }
        let mut msg = if self.problems.len() == 1 && !self.truncated {
            format!("{origin}: tensor census: {}", self.problems[0])
        } else {
            let mut m = format!(
                "{origin}: tensor census found {}{} problems:",
                if self.truncated { "more than " } else { "" },
                self.problems.len()
            );
            for p in &self.problems {
                let _ = write!(m, "\n  - {p}");
            }
            m
        };
        if self.truncated {
            let _ = write!(
                msg,
                "\n  (stopped after {MAX_PROBLEMS} problems; does the config belong to this checkpoint?)"
            );
        }
        Err(Error::invalid(msg))
    }

    /// Indices of the shards holding at least one bound (required and present) tensor, in
    /// shard-table order: the input of the weights tag (FORMATS.md §9.1).
    pub fn bound_shards(&self) -> Vec<usize> {
        (0..self.bound_shards.len())
            .filter(|&s| self.bound_shards[s])
            .collect()
    }
}

fn kind_name(k: AttnKind) -> &'static str {
    match k {
        AttnKind::Kda => "KDA",
        AttnKind::Mla => "MLA",
    }
}
