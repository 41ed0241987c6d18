//! The expert cache behind the model's [`ExpertSource`] interface (ENGINE.md §5): the MoE block
//! notes a layer's requests (T × Kt, positions ascending, selection order), then asks for the
//! distinct experts in sub-batches no larger than the cache; each sub-batch is one
//! [`ExpertCache::fetch_each`] over the requests of its experts, so requests, true resident
//! hits, reads and evictions are counted per request exactly as the simulator counts them.
//! Every freshly read expert passes the E8M0 scan before it is published (FORMATS.md §5).

use super::expert_cache::{self, CacheStats, ExpertCache};
use crate::error::{Error, Result};
use crate::io::{Extent, IoFile};
use crate::model::experts::{
    expert_view, ExpertShape, ExpertSource, ExpertStats, ExpertView, UseExperts,
};
use std::sync::Arc;

/// Where the six tensors of one routed expert are, in the fixed order of FORMATS.md §4
/// (w1 packed, w1 scale, w2 packed, w2 scale, w3 packed, w3 scale): each an extent in a shard
/// (the extent's file is the index into the shard table). Located by `crate::bind`, read by
/// the expert sources.
#[derive(Debug, Clone)]
pub struct ExpertLocation {
    pub parts: [Extent<usize>; 6],
    /// Full tensor names, same order (for error messages).
    pub names: [String; 6],
}

impl ExpertLocation {
    /// True if the six tensors form one gap-free run in one shard (then one read suffices).
    pub fn contiguous(&self) -> bool {
        self.parts
            .windows(2)
            .all(|w| w[0].file == w[1].file && w[0].end() == w[1].offset)
    }
    /// Total bytes of the six tensors.
    pub fn bytes(&self) -> usize {
        self.parts.iter().map(|p| p.len).sum()
    }

    /// Validated views of this expert's `payload` ([`expert_view`]), read from `shard` (the
    /// file of its first extent). Errors: an E8M0 scale of 255 (exit 2) naming the shard file
    /// as well as the tensor, row and group (ENGINE.md §3: the message names the file).
    pub fn view<'a>(
        &self,
        payload: &'a [u8],
        shape: ExpertShape,
        shard: Option<&IoFile>,
    ) -> Result<ExpertView<'a>> {
        expert_view(payload, shape.inter, shape.latent, &self.names).map_err(|e| match shard {
            Some(f) => Error::new(e.kind, format!("{}: {}", f.path().display(), e.message)),
            None => e,
        })
    }
}

/// Routed experts served from an [`ExpertCache`].
pub struct CachedExperts {
    /// None when no MoE layer is bound.
    cache: Option<ExpertCache>,
    /// The shard table (open where an expert lives).
    shards: Vec<Option<Arc<IoFile>>>,
    /// `[layer][expert]`; empty for dense or unbound layers.
    locations: Vec<Vec<ExpertLocation>>,
    shape: ExpertShape,
    /// The requests the MoE block noted for `pending_layer`.
    pending: Vec<u32>,
    pending_layer: usize,
}

impl CachedExperts {
    /// An expert source over `cache` (None: no MoE layer bound), reading from `shards` at
    /// `locations[layer][expert]`.
    pub fn new(
        cache: Option<ExpertCache>,
        shards: Vec<Option<Arc<IoFile>>>,
        locations: Vec<Vec<ExpertLocation>>,
        shape: ExpertShape,
    ) -> CachedExperts {
        CachedExperts {
            cache,
            shards,
            locations,
            shape,
            pending: Vec::new(),
            pending_layer: usize::MAX,
        }
    }

    /// The cache's counters (requests, hits, true resident hits, reads, evictions, bytes,
    /// seconds).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.as_ref().map(|c| c.stats()).unwrap_or_default()
    }

    /// Slots, bytes per slot (stride) and policy name (0, 0, "none" without MoE layers).
    pub fn geometry(&self) -> (usize, usize, &'static str) {
        match &self.cache {
            Some(c) => (c.slots(), c.stride(), c.policy_name()),
            None => (0, 0, "none"),
        }
    }
}

impl ExpertSource for CachedExperts {
    fn max_batch(&self) -> usize {
        self.cache.as_ref().map(|c| c.slots()).unwrap_or(1)
    }

    fn note_requests(&mut self, layer: usize, requests: &[u32]) -> Result<()> {
        self.pending.clear();
        self.pending.extend_from_slice(requests);
        self.pending_layer = layer;
        Ok(())
    }

    fn with_experts(
        &mut self,
        layer: usize,
        experts: &[u32],
        f: &mut UseExperts<'_>,
    ) -> Result<()> {
        let cache = self
            .cache
            .as_mut()
            .ok_or_else(|| Error::internal(format!("layer {layer}: no expert cache")))?;
        let locs = self
            .locations
            .get(layer)
            .filter(|l| !l.is_empty())
            .ok_or_else(|| Error::internal(format!("layer {layer}: no experts bound")))?;
        // This sub-batch's requests in request order (each request belongs to exactly one
        // sub-batch), so counters count every request once.
        let mut recs: Vec<u32> = if self.pending_layer == layer {
            self.pending
                .iter()
                .copied()
                .filter(|e| experts.contains(e))
                .collect()
        } else {
            Vec::new()
        };
        for &e in experts {
            if !recs.contains(&e) {
                recs.push(e);
            }
        }
        let shards = &self.shards;
        let (inter, latent) = (self.shape.inter, self.shape.latent);
        let locate = |e: u32| -> Result<expert_cache::ExpertPieces<'_>> {
            let loc = locs
                .get(e as usize)
                .ok_or_else(|| Error::internal(format!("layer {layer}: no expert {e}")))?;
            let mut pieces = Vec::with_capacity(6);
            if loc.contiguous() {
                let p = loc.parts[0];
                pieces.push(Extent {
                    file: shard(shards, p.file)?,
                    offset: p.offset,
                    len: loc.bytes(),
                });
            } else {
                for p in &loc.parts {
                    pieces.push(p.with_file(shard(shards, p.file)?));
                }
            }
            Ok(expert_cache::ExpertPieces { pieces })
        };
        let shape = self.shape;
        let verify = |e: u32, payload: &[u8]| -> Result<()> {
            let loc = &locs[e as usize];
            loc.view(payload, shape, shard(shards, loc.parts[0].file).ok())
                .map(|_| ())
        };
        let mut ready = |ids: &[u32], payloads: &[&[u8]]| -> Result<()> {
            let mut views = Vec::with_capacity(ids.len());
            for (&e, payload) in ids.iter().zip(payloads) {
                views.push(expert_view(
                    payload,
                    inter,
                    latent,
                    &locs[e as usize].names,
                )?);
            }
            f(ids, &views)
        };
        cache.fetch_each(layer as u32, &recs, locate, verify, &mut ready)
    }

    fn stats(&self) -> ExpertStats {
        let c = self.cache_stats();
        ExpertStats {
            requests: c.requests,
            resident_hits: c.true_resident_hits,
            reads: c.reads,
            bytes_read: c.bytes_read,
            read_seconds: c.read_seconds,
        }
    }
}

fn shard(shards: &[Option<Arc<IoFile>>], i: usize) -> Result<&IoFile> {
    shards
        .get(i)
        .and_then(|f| f.as_deref())
        .ok_or_else(|| Error::internal(format!("expert shard {i} was not opened")))
}

impl std::fmt::Debug for CachedExperts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedExperts")
            .field("cache", &self.cache)
            .finish()
    }
}
