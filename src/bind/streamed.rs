//! Binding a model for a streamed run: the per-layer trunk layouts (what the planner sizes),
//! then the model's small vectors and matrix slots, the trunk source (pinned layers, ring,
//! model tables; from the shards or a packed trunk) and the cache-backed expert source, as the
//! plan decided.

use super::experts::locate_experts;
use super::layer::{bind_layer_weights, bind_output};
use super::layout::{layer_layout, table_layout, LayerLayout, TableLayout};
use super::reader::Reader;
use crate::catalogue::layer_suffixes;
use crate::checkpoint::TensorIndex;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::{Extent, IoFile, IoThreads};
use crate::model::experts::ExpertShape;
use crate::model::weights::LayerWeights;
use crate::model::{Dims, Model};
use crate::stream::coded::StagePool;
use crate::stream::expert_cache::ExpertCache;
use crate::stream::experts::CachedExperts;
use crate::stream::pack::PackedTrunk;
use crate::stream::pieces::{PieceMode, TrunkPiece};
use crate::stream::policy::new_policy;
use crate::stream::tables::{TableLoc, Tables, TablesConfig};
use crate::stream::trunk::{LayerBytes, LayerRead, RingConfig, StreamedTrunk};
use std::sync::Arc;

/// What the planner needs to know before anything large is allocated: every bound layer's
/// trunk layout and where the model tables are (shapes and dtypes checked, exit 2).
#[derive(Debug, Clone)]
pub struct Prepared {
    pub layouts: Vec<LayerLayout>,
    pub tables: TableLayout,
}

/// Lays out the first `layers` layers of the checkpoint behind `index` (no tensor is read).
pub fn prepare(index: &TensorIndex, cfg: &Config, layers: usize) -> Result<Prepared> {
    let r = Reader::new(index);
    let d = Dims::from_config(cfg);
    let layouts = (0..layers)
        .map(|l| layer_layout(&r, &layer_suffixes(cfg, l), l))
        .collect::<Result<Vec<_>>>()?;
    let tables = table_layout(&r, &d)?;
    Ok(Prepared { layouts, tables })
}

/// The streaming decisions of the plan.
#[derive(Debug)]
pub struct StreamConfig<'a> {
    /// Per bound layer: pinned.
    pub pinned: &'a [bool],
    /// Ring slots (0 if every layer is pinned).
    pub ring_slots: usize,
    /// The model tables: resident lm_head rows, embedding resident, chunk rows and slots.
    pub tables: TablesConfig,
    /// Expert-cache slots (0 without MoE layers) and eviction policy.
    pub cache_slots: usize,
    pub policy: &'a str,
    /// A validated packed trunk and its open `trunk.bin`, or None to read the shards.
    pub packed: Option<(&'a PackedTrunk, Arc<IoFile>)>,
    /// Expert-read threads.
    pub expert_io_threads: usize,
    /// How streamed layers are cut into ring pieces (`--trunk-pieces`).
    pub pieces: PieceMode,
    /// Concurrent preads per trunk piece and lm_head chunk read (`--io-depth`, at least 1).
    pub io_depth: usize,
    /// Decode threads per coded piece read (a packed trunk with a codec; at least 1).
    pub codec_threads: usize,
    /// Told after each pinned layer is read: (done, total pinned, bytes so far); for progress.
    pub loaded: Option<fn(usize, usize, u64)>,
}

/// Coded piece reads that may be in flight at once: the trunk's I/O thread reading ahead and
/// the forward's own thread reading a piece that was not (the memory plan counts a staging
/// buffer per decode thread of each: [`StagePool::bytes`]).
pub const CODED_READS: usize = 2;

/// A model bound for a streamed run.
pub struct Streamed {
    pub model: Model,
    pub trunk: StreamedTrunk,
    pub experts: CachedExperts,
}

/// Binds the model as `conf` says: small vectors and matrix slots of every layer (read now),
/// expert locations (checked now, read on demand), the trunk (pinned layers read now, the ring
/// allocated), the model tables (resident parts read now, chunk slots allocated) and the
/// expert cache (allocated now).
///
/// Errors: exit 2 for a tensor with the wrong shape or dtype or a read failure while loading;
/// exit 3 if memory is refused; exit 1 for an inconsistent configuration.
pub fn bind(
    index: &TensorIndex,
    cfg: &Config,
    prep: &Prepared,
    conf: &StreamConfig<'_>,
) -> Result<Streamed> {
    let dims = Dims::from_config(cfg);
    let layers = prep.layouts.len();
    if conf.pinned.len() != layers {
        return Err(Error::internal("pinned set and bound layers differ"));
    }
    let mut r = Reader::new(index);
    let mut lw = Vec::with_capacity(layers);
    let mut locs = Vec::with_capacity(layers);
    for (l, layout) in prep.layouts.iter().enumerate() {
        let specs = layer_suffixes(cfg, l);
        lw.push(bind_layer_weights(&mut r, &dims, &specs, layout)?);
        locs.push(if l >= dims.first_dense {
            locate_experts(&mut r, cfg, l)?
        } else {
            Vec::new()
        });
        if conf.packed.is_none() {
            for p in &layout.pieces {
                r.need_shard(p.file);
            }
        }
    }
    let (output, tl) = bind_output(&mut r, &dims)?;
    r.need_shard(tl.embed.shard);
    if let Some(h) = &tl.lm_head {
        r.need_shard(h.shard);
    }
    let pool = match &conf.packed {
        Some((pt, _)) if pt.codec.is_some() => {
            Some(Arc::new(StagePool::new(conf.codec_threads, CODED_READS)?))
        }
        _ => None,
    };
    let files: Vec<Option<Arc<IoFile>>> = r
        .into_files()?
        .into_iter()
        .map(|f| f.map(Arc::new))
        .collect();
    let file = |i: usize| -> Result<Arc<IoFile>> {
        files
            .get(i)
            .and_then(|f| f.clone())
            .ok_or_else(|| Error::internal(format!("shard {i} was not opened")))
    };
    // Trunk reads: the shards' runs (or tensors), or the packed runs (coded or not).
    let mut reads = Vec::with_capacity(layers);
    for (layout, w) in prep.layouts.iter().zip(&lw) {
        let pieces = layout.trunk_pieces(conf.pieces);
        check_pieces(w, &pieces)?;
        reads.push(LayerRead {
            layer: layout.layer,
            bytes: layout.bytes as usize,
            bytes_at: bytes_at(layout, conf, pool.as_ref(), &file)?,
            pieces,
        });
    }
    let tables_src = Tables::open(
        dims.h,
        dims.v,
        TableLoc {
            file: file(tl.embed.shard)?,
            offset: tl.embed.offset,
        },
        match &tl.lm_head {
            Some(m) => Some(TableLoc {
                file: file(m.shard)?,
                offset: m.offset,
            }),
            None => None,
        },
        &conf.tables,
    )?;
    let depth = conf.io_depth.max(1);
    let trunk_io = Arc::new(IoThreads::with_depth(1, depth)?);
    let table_io = Arc::new(IoThreads::with_depth(1, depth)?);
    let trunk = StreamedTrunk::new(
        reads,
        conf.pinned,
        RingConfig {
            slots: conf.ring_slots,
            io_depth: depth,
        },
        tables_src,
        trunk_io,
        table_io,
        conf.loaded,
    )?;
    let shape = ExpertShape {
        inter: dims.i,
        latent: dims.l,
    };
    let has_moe = locs.iter().any(|l| !l.is_empty());
    let cache = if has_moe {
        let io = Arc::new(IoThreads::new(conf.expert_io_threads.max(1))?);
        let policy = new_policy(conf.policy, conf.cache_slots)?;
        Some(ExpertCache::new(
            conf.cache_slots,
            crate::model::expert_bytes(&dims) as usize,
            policy,
            io,
        )?)
    } else {
        None
    };
    let experts = CachedExperts::new(cache, files, locs, shape);
    Ok(Streamed {
        model: Model {
            dims,
            layers: lw,
            output,
        },
        trunk,
        experts,
    })
}

/// Where layer `layout`'s trunk bytes are: its runs (or tensors) in the shards (`file` opens a
/// shard by index), or its packed run in `trunk.bin` — read as it is, or as coded blocks
/// decoded with `pool` when the packed trunk has a codec.
///
/// Errors (exit 2): a packed run whose length differs from the checkpoint's; exit 1 for a
/// packed trunk without the layer or a shard that was not opened.
fn bytes_at(
    layout: &crate::bind::layout::LayerLayout,
    conf: &StreamConfig<'_>,
    pool: Option<&Arc<StagePool>>,
    file: &dyn Fn(usize) -> Result<Arc<IoFile>>,
) -> Result<LayerBytes> {
    let Some((pt, bin)) = &conf.packed else {
        return Ok(LayerBytes::Raw(
            layout
                .pieces
                .iter()
                .map(|p| Ok(p.with_file(file(p.file)?)))
                .collect::<Result<Vec<_>>>()?,
        ));
    };
    let pl = pt
        .layers
        .get(layout.layer)
        .filter(|pl| pl.layer == layout.layer)
        .ok_or_else(|| Error::internal(format!("packed trunk lacks layer {}", layout.layer)))?;
    if pl.run_len() != layout.bytes || layout.run.is_none() {
        return Err(Error::invalid(format!(
            "{}: layer {}: packed run of {} bytes, but the checkpoint's trunk run is {} bytes",
            bin.path().display(),
            layout.layer,
            pl.run_len(),
            layout.bytes
        )));
    }
    Ok(match pool {
        Some(pool) => LayerBytes::Coded {
            file: Arc::clone(bin),
            blocks: Arc::from(pl.blocks.as_slice()),
            pool: Arc::clone(pool),
        },
        None => LayerBytes::Raw(vec![Extent {
            file: Arc::clone(bin),
            offset: pl.file_off,
            len: layout.bytes as usize,
        }]),
    })
}

/// Checks that every matrix of `w` lies inside the piece that holds its part: the forward
/// asks for a matrix by its part, and the ring hands over only that piece's bytes. Exit 1 (a
/// cut that disagrees with the binding is a bug, never the checkpoint's fault).
fn check_pieces(w: &LayerWeights, pieces: &[TrunkPiece]) -> Result<()> {
    for (part, slot) in w.part_slots() {
        let inside = pieces.iter().any(|p| {
            p.parts.contains(&part)
                && 2 * slot.off as u64 >= p.start
                && 2 * (slot.off + slot.rows * slot.cols) as u64 <= p.start + p.len
        });
        if !inside {
            return Err(Error::internal(format!(
                "layer {}: a {} matrix at element {} lies outside its trunk piece",
                w.index,
                part.name(),
                slot.off
            )));
        }
    }
    Ok(())
}
