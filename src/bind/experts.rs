//! Routed experts: where each one's six tensors are ([`locate_experts`], checked against the
//! catalogue, nothing read) and [`PreadExperts`], the expert source of a resident binding,
//! which reads them on every request (FORMATS.md §4–§6).

use super::reader::Reader;
use crate::catalogue;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, Extent, IoFile};
use crate::model::experts::{ExpertShape, ExpertSource, ExpertStats, UseExperts};
pub use crate::stream::experts::ExpertLocation;
use std::time::Instant;

/// Locations of every routed expert of MoE layer `l`, checked for shape and dtype against the
/// catalogue (read later, on demand).
pub fn locate_experts(r: &mut Reader<'_>, cfg: &Config, l: usize) -> Result<Vec<ExpertLocation>> {
    (0..cfg.num_experts)
        .map(|e| {
            let specs = catalogue::expert_tensors(cfg, l, e);
            let mut parts = Vec::with_capacity(6);
            for s in &specs {
                let shape: Vec<usize> = s.shape.iter().map(|&x| x as usize).collect();
                parts.push(r.extent(&s.name, &shape, s.dtype)?);
            }
            let parts: [Extent<usize>; 6] = parts.try_into().map_err(|_| {
                Error::internal(format!("layer {l} expert {e}: not six expert tensors"))
            })?;
            Ok(ExpertLocation {
                parts,
                names: specs.map(|s| s.name),
            })
        })
        .collect()
}

/// Heap bytes of the expert location tables [`locate_experts`] builds for the MoE layers among
/// the first `layers` of `cfg`: per expert one [`ExpertLocation`] and its six names, each
/// counted as the glibc malloc chunk of the capacity the catalogue allocates it with (its
/// capacity + 8 rounded up to 16, at least 32 bytes). Names of experts with the same number of
/// decimal digits have the same capacities, so one expert per digit count is built. At the
/// released widths (82,432 experts) this is about 100 MB, which the memory plan counts with the
/// tensor index (ENGINE.md §4: every byte the run allocates).
pub fn location_table_bytes(cfg: &Config, layers: usize) -> u64 {
    let chunk = |cap: usize| ((cap + 8).div_ceil(16) * 16).max(32) as u64;
    let per = std::mem::size_of::<ExpertLocation>() as u64;
    let mut total = 0u64;
    for l in (0..layers.min(cfg.num_hidden_layers)).filter(|&l| cfg.is_moe(l)) {
        // Experts first..end have `first`'s digit count (0..10, 10..100, ...).
        let mut first = 0usize;
        while first < cfg.num_experts {
            let end = if first == 0 { 10 } else { first * 10 }.min(cfg.num_experts);
            let names: u64 = catalogue::expert_tensors(cfg, l, first)
                .iter()
                .map(|s| chunk(s.name.capacity()))
                .sum();
            total += (end - first) as u64 * (per + names);
            first = end;
        }
    }
    total
}

/// One expert buffer: a pre-faulted, 4096-aligned window; the expert's bytes are at
/// `pad .. pad + len` (FORMATS.md §6).
struct Slot {
    buf: AlignedBuf,
    pad: usize,
    len: usize,
}

/// Reads every requested expert from the shards on every request — one widened `O_DIRECT`
/// window per contiguous expert (buffered + `DONTNEED` where direct I/O is refused, six
/// pieces when the expert is not contiguous) — into `max_batch` pre-faulted buffers, and
/// checks every E8M0 scale byte before use (FORMATS.md §5, §6). No caching: the streaming
/// work puts an expert cache behind the same trait.
pub struct PreadExperts {
    /// The shard table; `None` for shards no bound expert lives in.
    shards: Vec<Option<IoFile>>,
    /// `[layer][expert]`; empty for dense or unbound layers.
    locations: Vec<Vec<ExpertLocation>>,
    shape: ExpertShape,
    slots: Vec<Slot>,
    stats: ExpertStats,
}

impl PreadExperts {
    /// `shards`: the shard table (open where an expert lives); `locations[layer][expert]`;
    /// `max_batch` buffers of one expert window each (allocated and faulted in now: exit 3 if
    /// refused).
    pub fn new(
        shards: Vec<Option<IoFile>>,
        locations: Vec<Vec<ExpertLocation>>,
        shape: ExpertShape,
        max_batch: usize,
    ) -> Result<PreadExperts> {
        let bytes = 3 * (shape.inter * shape.latent / 2 + shape.inter * shape.latent / 32);
        let cap = window_capacity(bytes).ok_or_else(|| {
            Error::resources(format!("expert of {bytes} bytes: window overflows"))
        })?;
        let slots = (0..max_batch.max(1))
            .map(|_| {
                Ok(Slot {
                    buf: AlignedBuf::new(cap)?,
                    pad: 0,
                    len: 0,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PreadExperts {
            shards,
            locations,
            shape,
            slots,
            stats: ExpertStats::default(),
        })
    }

    /// Bytes of buffer memory per slot (the plan's `expert_cache` item per buffer).
    pub fn slot_bytes(shape: ExpertShape) -> u64 {
        let bytes = 3 * (shape.inter * shape.latent / 2 + shape.inter * shape.latent / 32);
        window_capacity(bytes).unwrap_or(bytes) as u64
    }

    fn load(&mut self, slot: usize, layer: usize, e: u32) -> Result<()> {
        let loc = self
            .locations
            .get(layer)
            .and_then(|l| l.get(e as usize))
            .ok_or_else(|| Error::internal(format!("layer {layer}: no expert {e} bound")))?;
        let shards = &self.shards;
        let shard = |i: usize| {
            shards
                .get(i)
                .and_then(|f| f.as_ref())
                .ok_or_else(|| Error::internal(format!("expert shard {i} was not opened")))
        };
        let len = loc.bytes();
        let s = &mut self.slots[slot];
        s.len = 0; // not readable until the read landed
        s.pad = if loc.contiguous() {
            let p0 = loc.parts[0];
            shard(p0.file)?
                .read_window(p0.offset, len, s.buf.as_mut_slice())?
                .pad
        } else {
            let mut off = 0usize;
            for p in &loc.parts {
                let dst = &mut s.buf.as_mut_slice()[off..off + p.len];
                shard(p.file)?.read_uncached_at(dst, p.offset)?;
                off += p.len;
            }
            0
        };
        s.len = len;
        Ok(())
    }
}

impl ExpertSource for PreadExperts {
    fn max_batch(&self) -> usize {
        self.slots.len()
    }

    fn note_requests(&mut self, _layer: usize, requests: &[u32]) -> Result<()> {
        self.stats.requests += requests.len() as u64;
        Ok(())
    }

    fn with_experts(
        &mut self,
        layer: usize,
        experts: &[u32],
        f: &mut UseExperts<'_>,
    ) -> Result<()> {
        if experts.len() > self.slots.len() {
            return Err(Error::internal(format!(
                "expert batch of {} exceeds {} buffers",
                experts.len(),
                self.slots.len()
            )));
        }
        let start = Instant::now();
        for (slot, &e) in experts.iter().enumerate() {
            self.load(slot, layer, e)?;
            self.stats.reads += 1;
            self.stats.bytes_read += self.slots[slot].len as u64;
        }
        self.stats.read_seconds += start.elapsed().as_secs_f64();
        let mut views = Vec::with_capacity(experts.len());
        for (s, &e) in self.slots.iter().zip(experts) {
            let loc = &self.locations[layer][e as usize];
            let file = self.shards.get(loc.parts[0].file).and_then(|f| f.as_ref());
            views.push(loc.view(&s.buf.as_slice()[s.pad..s.pad + s.len], self.shape, file)?);
        }
        f(experts, &views)
    }

    fn stats(&self) -> ExpertStats {
        self.stats
    }
}
