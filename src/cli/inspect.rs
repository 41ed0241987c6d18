//! `k3 inspect <model_dir> [--json]` (ENGINE.md §3): the config line, the zero-based layer map,
//! the AttnRes boundaries, the tensor census and the byte ledger; with `--json` the same as one
//! JSON document on standard output.
//!
//! Exit 0 when the config, every shard header and the census are valid; exit 2 otherwise, with
//! a message naming the file and the key or tensor. When only the census finds problems, the
//! report is still printed (with the problems) before the error.

use crate::census::Census;
use crate::checkpoint::TensorIndex;
use crate::cli::args::{Args, Spec};
use crate::config::{Config, MlaForm, NUMERICS_VERSION};
use crate::error::{Error, Result};
use crate::json::{Object, Value};
use crate::units::hex;
use std::ffi::OsString;
use std::fmt::Write as _;

pub(crate) const SPECS: [Spec; 1] = [Spec::Switch("json")];

const USAGE: &str = "\
usage: k3 inspect <model_dir> [--json]
  Prints the config summary, the layer map, the AttnRes boundaries, the tensor census and the
  byte ledger of a model directory; exit 0 when the config, every shard header and the census
  are valid, exit 2 otherwise.
  --json   the same as one JSON document on standard output
";

/// Runs `k3 inspect` with the arguments after the subcommand name.
pub fn run(argv: &[OsString]) -> Result<()> {
    let Some(args) = Args::parse_or_help(argv, &SPECS, USAGE)? else {
        return Ok(());
    };
    let dir = args.model_dir("inspect", "usage: k3 inspect <model_dir> [--json]")?;
    if !dir.is_dir() {
        return Err(Error::invalid(format!(
            "{}: not a directory (usage: k3 inspect <model_dir> [--json])",
            dir.display()
        )));
    }
    let cfg = Config::from_file(&dir.join("config.json"))?;
    let index = TensorIndex::open(&dir)?;
    let census = Census::run(&cfg, &index);
    let bound = census.bound_shards();
    let weights_tag = index.weights_tag(&bound)?;
    let report = Report {
        dir: dir.display().to_string(),
        cfg: &cfg,
        index: &index,
        census: &census,
        weights_tag,
    };
    let text = if args.switch("json") {
        report.json().to_json_pretty() + "\n"
    } else {
        report.text()
    };
    crate::cli::write_stdout(text.as_bytes())?;
    census.check(&report.dir)
}

struct Report<'a> {
    dir: String,
    cfg: &'a Config,
    index: &'a TensorIndex,
    census: &'a Census,
    weights_tag: u64,
}

/// `0..2,5` style index runs (the inspect line's format).
fn ranges(v: &[usize]) -> String {
    crate::units::index_ranges(v, "..", ",")
}

fn join(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Report<'_> {
    fn config_line(&self) -> String {
        let c = self.cfg;
        let d = &c.derived;
        format!(
            "config: {}, hidden {}, layers {}, vocab {}, KDA {} ({} heads x {}), MLA {} ({} heads), experts {} top-{} shared {}, latent {}, moe_intermediate {}",
            c.shape.as_str(),
            c.hidden_size,
            c.num_hidden_layers,
            c.vocab_size,
            d.n_kda,
            c.kda_num_heads,
            c.kda_head_dim,
            d.n_mla,
            c.num_attention_heads,
            c.num_experts,
            c.num_experts_per_token,
            c.num_shared_experts,
            c.routed_expert_hidden_size,
            c.moe_intermediate_size
        )
    }

    fn text(&self) -> String {
        let c = self.cfg;
        let l = &self.census.ledger;
        let mut s = String::new();
        let _ = writeln!(s, "{}", self.config_line());
        let _ = writeln!(s, "layer map: {}", c.layer_map());
        let dense: Vec<usize> = (0..c.num_hidden_layers)
            .filter(|&x| c.is_dense(x))
            .collect();
        let moe: Vec<usize> = (0..c.num_hidden_layers).filter(|&x| c.is_moe(x)).collect();
        let _ = writeln!(
            s,
            "dense layers: {}; MoE layers: {}",
            ranges(&dense),
            ranges(&moe)
        );
        let _ = writeln!(
            s,
            "AttnRes boundaries: {} (block {}, {} snapshots)",
            join(&c.boundaries()),
            c.attn_res_block_size,
            c.derived.snapshots
        );
        let _ = writeln!(
            s,
            "config fingerprint: {} (numerics {NUMERICS_VERSION}, mla_form absorbed)",
            hex(c.fingerprint(MlaForm::Absorbed))
        );
        let n = &self.census.counts;
        let present = self.index.shards().iter().filter(|x| x.present).count();
        let absent = self.index.shards().len() - present;
        let _ = writeln!(
            s,
            "checkpoint: {} shard{}{}{}, {} tensors: {} model, {} trunk, {} expert, {} ignored, {} unknown",
            present,
            if present == 1 { "" } else { "s" },
            if absent > 0 { format!(" (+{absent} absent)") } else { String::new() },
            if self.index.has_index_file() { " (model.safetensors.index.json)" } else { "" },
            self.index.len(),
            n.model,
            n.trunk,
            n.expert,
            n.ignored,
            n.unknown
        );
        let _ = writeln!(s, "weights tag: {}", hex(self.weights_tag));
        let _ = writeln!(s, "byte ledger:");
        let _ = writeln!(
            s,
            "  {:>5}  {:<4} {:<5} {:>7} {:>15}  {:<36} {:>15}  contiguous",
            "layer", "attn", "ffn", "tensors", "trunk bytes", "shard", "run start"
        );
        for x in &l.layers {
            let shard = x
                .shard
                .map(|i| self.index.shards()[i].file_name.clone())
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "  {:>5}  {:<4} {:<5} {:>7} {:>15}  {:<36} {:>15}  {}",
                x.layer,
                if x.kind == crate::config::AttnKind::Kda {
                    "KDA"
                } else {
                    "MLA"
                },
                if x.dense { "dense" } else { "MoE" },
                format!("{}/{}", x.present, x.required),
                x.bytes,
                shard,
                x.run_start.map_or("-".into(), |r| r.to_string()),
                match &x.break_reason {
                    None => "yes".to_string(),
                    Some(r) => format!("NO: {r}"),
                }
            );
        }
        let contiguous_layers = l.layers.iter().filter(|x| x.contiguous).count();
        let _ = writeln!(
            s,
            "  {} = {} bytes; contiguous runs {}/{}",
            crate::units::trunk_size(l.trunk_bytes, l.layers.len()),
            l.trunk_bytes,
            contiguous_layers,
            l.layers.len()
        );
        if let Some((layer, bytes)) = l.largest_run {
            let _ = writeln!(s, "  largest layer run: layer {layer}, {bytes} bytes");
        }
        let _ = writeln!(s, "  model tables: {} bytes", l.model_table_bytes);
        let e = &l.experts;
        let _ = writeln!(
            s,
            "  experts: {}/{} present x {} bytes = {} bytes; contiguous {}/{}",
            e.present, e.required, e.bytes_per_expert, e.bytes, e.contiguous, e.required
        );
        if !e.non_contiguous_examples.is_empty() {
            let ex: Vec<String> = e
                .non_contiguous_examples
                .iter()
                .map(|(a, b)| format!("{a}.{b}"))
                .collect();
            let _ = writeln!(
                s,
                "  non-contiguous experts (layer.expert; read as six pieces): {}",
                ex.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "  ignored (vision/projector): {} tensors, {} bytes",
            n.ignored, l.ignored_bytes
        );
        let _ = writeln!(s, "  all tensors: {} bytes", l.total_bytes);
        if self.census.is_ok() {
            let _ = writeln!(s, "census: ok");
        } else {
            let _ = writeln!(
                s,
                "census: {}{} problems (listed on standard error)",
                if self.census.truncated {
                    "more than "
                } else {
                    ""
                },
                self.census.problems.len()
            );
        }
        s
    }

    fn json(&self) -> Value {
        let c = self.cfg;
        let l = &self.census.ledger;
        let n = &self.census.counts;
        let shards: Vec<Value> = self
            .index
            .shards()
            .iter()
            .map(|s| {
                Value::Object(
                    Object::new()
                        .with("file", s.file_name.as_str())
                        .with("present", s.present)
                        .with("file_size", s.file_size)
                        .with("header_len", s.header_len)
                        .with("header_fnv1a64", hex(s.header_fnv))
                        .with("tensors", s.n_tensors),
                )
            })
            .collect();
        let layers: Vec<Value> = l
            .layers
            .iter()
            .map(|x| {
                Value::Object(
                    Object::new()
                        .with("layer", x.layer)
                        .with("attn", x.kind.letter().to_string())
                        .with("ffn", if x.dense { "dense" } else { "moe" })
                        .with("boundary", c.is_boundary(x.layer))
                        .with("required", x.required)
                        .with("present", x.present)
                        .with("bytes", x.bytes)
                        .with(
                            "shard",
                            x.shard.map(|i| self.index.shards()[i].file_name.clone()),
                        )
                        .with("run_start", x.run_start)
                        .with("contiguous", x.contiguous)
                        .with("break", x.break_reason.clone()),
                )
            })
            .collect();
        let e = &l.experts;
        let ledger = Object::new()
            .with("layers", Value::Array(layers))
            .with("trunk_bytes", l.trunk_bytes)
            .with("trunk_contiguous", l.trunk_contiguous())
            .with(
                "largest_run",
                l.largest_run.map(|(layer, bytes)| {
                    Value::Object(Object::new().with("layer", layer).with("bytes", bytes))
                }),
            )
            .with("model_table_bytes", l.model_table_bytes)
            .with(
                "experts",
                Object::new()
                    .with("bytes_per_expert", e.bytes_per_expert)
                    .with("required", e.required)
                    .with("present", e.present)
                    .with("bytes", e.bytes)
                    .with("contiguous", e.contiguous)
                    .with("all_contiguous", l.experts_contiguous())
                    .with(
                        "non_contiguous_examples",
                        Value::Array(
                            e.non_contiguous_examples
                                .iter()
                                .map(|&(a, b)| Value::from(vec![a, b]))
                                .collect(),
                        ),
                    ),
            )
            .with("ignored_bytes", l.ignored_bytes)
            .with("total_bytes", l.total_bytes);
        let o = Object::new()
            .with("model_dir", self.dir.as_str())
            .with("config_line", self.config_line())
            .with("config", c.summary_json())
            .with("config_fingerprint", hex(c.fingerprint(MlaForm::Absorbed)))
            .with(
                "numerics",
                Object::new()
                    .with("version", u64::from(NUMERICS_VERSION))
                    .with("mla_form", MlaForm::Absorbed.as_str()),
            )
            .with(
                "checkpoint",
                Object::new()
                    .with("index_file", self.index.has_index_file())
                    .with("shards", Value::Array(shards))
                    .with("tensors", self.index.len())
                    .with(
                        "counts",
                        Object::new()
                            .with("model", n.model)
                            .with("trunk", n.trunk)
                            .with("expert", n.expert)
                            .with("ignored", n.ignored)
                            .with("unknown", n.unknown),
                    )
                    .with("weights_tag", hex(self.weights_tag)),
            )
            .with("ledger", ledger)
            .with(
                "census",
                Object::new()
                    .with("ok", self.census.is_ok())
                    .with("truncated", self.census.truncated)
                    .with("problems", self.census.problems.clone()),
            );
        Value::Object(o)
    }
}
