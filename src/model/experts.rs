//! The expert-source interface: the MoE block asks for a layer's set of routed experts all at
//! once and gets views of each expert's six MXFP4 tensors, or an error that fails the token
//! (MODEL.md §6.7: a missing expert is never a zero contribution). [`PreadExperts`] reads them
//! with positioned reads on every request; the streaming work puts a bounded cache behind the
//! same trait.

use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, IoFile};
use std::time::Instant;

pub use k3_kernels::Mxfp4;

/// One routed expert: `w1` gate [I, L], `w2` down [L, I], `w3` up [I, L] (validated MXFP4:
/// shapes checked, no E8M0 255).
#[derive(Debug, Clone, Copy)]
pub struct ExpertView<'a> {
    pub w1: Mxfp4<'a>,
    pub w2: Mxfp4<'a>,
    pub w3: Mxfp4<'a>,
}

/// Counters an expert source keeps (ENGINE.md §6, FORMATS.md §10 `expert_cache`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExpertStats {
    /// Expert requests (T × Kt per MoE layer and chunk).
    pub requests: u64,
    /// Requests served by an expert already resident when its layer asked.
    pub resident_hits: u64,
    /// Experts read from the shards.
    pub reads: u64,
    /// Bytes read from the shards.
    pub bytes_read: u64,
    /// Seconds spent reading.
    pub read_seconds: f64,
}

/// Supplies routed experts to the MoE block.
pub trait ExpertSource {
    /// The largest number of distinct experts one [`ExpertSource::with_experts`] call may ask
    /// for (at least Kt). Larger sets are split by the caller.
    fn max_batch(&self) -> usize;

    /// Records the chunk's requests of one MoE layer (T × Kt ids, positions ascending, each in
    /// selection order — the request order of FORMATS.md §8). Counters and traces only; an
    /// error (a failed trace write) fails the forward.
    fn note_requests(&mut self, layer: usize, requests: &[u32]) -> Result<()>;

    /// Makes the experts `experts` (distinct ids) of zero-based `layer` available and calls
    /// `f` with one view per id, in the same order. The views are valid only during the call.
    /// A failed read (exit 4) or a corrupt expert (exit 2) is returned without calling `f`.
    fn with_experts(
        &mut self,
        layer: usize,
        experts: &[u32],
        f: &mut dyn FnMut(&[ExpertView<'_>]) -> Result<()>,
    ) -> Result<()>;

    /// Counters so far.
    fn stats(&self) -> ExpertStats;
}

/// Where one tensor's bytes are: shard (index into the shard table), absolute offset, length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub shard: usize,
    pub offset: u64,
    pub len: u64,
}

/// The six tensors of one expert in the fixed order of FORMATS.md §4:
/// w1 packed, w1 scale, w2 packed, w2 scale, w3 packed, w3 scale.
#[derive(Debug, Clone)]
pub struct ExpertLocation {
    pub parts: [Extent; 6],
    /// Full tensor names, same order (for error messages).
    pub names: [String; 6],
}

impl ExpertLocation {
    /// True if the six tensors form one gap-free run in one shard (then one read suffices).
    pub fn contiguous(&self) -> bool {
        self.parts
            .windows(2)
            .all(|w| w[0].shard == w[1].shard && w[0].offset + w[0].len == w[1].offset)
    }
    /// Total bytes of the six tensors.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.len).sum()
    }
}

/// Geometry of the three matrices: (I, L).
#[derive(Debug, Clone, Copy)]
pub struct ExpertShape {
    /// moe_intermediate_size I.
    pub inter: usize,
    /// routed_expert_hidden_size L.
    pub latent: usize,
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
        let len = loc.bytes() as usize;
        let s = &mut self.slots[slot];
        s.len = 0; // not readable until the read landed
        s.pad = if loc.contiguous() {
            let p0 = loc.parts[0];
            shard(p0.shard)?
                .read_window(p0.offset, len, s.buf.as_mut_slice())?
                .pad
        } else {
            let mut off = 0usize;
            for p in &loc.parts {
                let dst = &mut s.buf.as_mut_slice()[off..off + p.len as usize];
                shard(p.shard)?.read_uncached_at(dst, p.offset)?;
                off += p.len as usize;
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
        f: &mut dyn FnMut(&[ExpertView<'_>]) -> Result<()>,
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
        let (i, l) = (self.shape.inter, self.shape.latent);
        let mut views = Vec::with_capacity(experts.len());
        for (s, &e) in self.slots.iter().zip(experts) {
            let names = &self.locations[layer][e as usize].names;
            views.push(expert_view(
                &s.buf.as_slice()[s.pad..s.pad + s.len],
                i,
                l,
                names,
            )?);
        }
        f(&views)
    }

    fn stats(&self) -> ExpertStats {
        self.stats
    }
}

/// Validated views of the six tensors of an expert laid out in the fixed order in `b`
/// (FORMATS.md §4): every E8M0 scale byte is checked; a 255 is an error naming the tensor
/// (`names`, the six tensor names), the row and the group (exit 2, FORMATS.md §5).
pub fn expert_view<'a>(
    b: &'a [u8],
    inter: usize,
    latent: usize,
    names: &[String; 6],
) -> Result<ExpertView<'a>> {
    let p13 = inter * latent / 2;
    let s13 = inter * latent / 32;
    if b.len() != 3 * (p13 + s13) {
        return Err(Error::internal(format!(
            "{}: expert buffer of {} bytes, expected {}",
            names[0],
            b.len(),
            3 * (p13 + s13)
        )));
    }
    let (w1p, rest) = b.split_at(p13);
    let (w1s, rest) = rest.split_at(s13);
    let (w2p, rest) = rest.split_at(p13);
    let (w2s, rest) = rest.split_at(s13);
    let (w3p, w3s) = rest.split_at(p13);
    let m = |p, s, rows, cols, name: &String| {
        Mxfp4::new(p, s, rows, cols).map_err(|e| Error::invalid(format!("{name}: {}", e.message)))
    };
    Ok(ExpertView {
        w1: m(w1p, w1s, inter, latent, &names[1])?,
        w2: m(w2p, w2s, latent, inter, &names[3])?,
        w3: m(w3p, w3s, inter, latent, &names[5])?,
    })
}
