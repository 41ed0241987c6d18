//! The expert cache (ENGINE.md §5, FORMATS.md §6): whole-expert slots keyed by (layer, expert),
//! one pre-faulted 4096-aligned arena, filled a layer's top-k set at a time.
//!
//! A batch (one MoE layer's requests: the top-k of each position of the chunk) is served in
//! three phases:
//! 1. **Reservation**: look-ups first (the resident experts are pinned), then a slot for each
//!    miss, evicting a victim chosen by the [`Policy`]; never a slot of the current batch.
//! 2. **Reads**: the misses are read in parallel on the I/O threads, queued in (file, offset)
//!    order, each with one widened `O_DIRECT` read straight into its slot.
//!    The caller computes meanwhile ([`ExpertCache::fetch_each`]): the resident experts first,
//!    then each miss as its read lands and passes `verify` (the caller's E8M0 scan).
//! 3. **Publication**: only when every read of the batch landed completely and passed `verify`
//!    are the new slots published. On any failure none is: their slots return to the free
//!    list, the error is returned (exit 4 for I/O), and no byte of a partial read is ever
//!    visible.
//!
//! The payloads handed to the caller borrow the cache for the call, so their slots can be
//! neither evicted nor refilled while the model multiplies from them.

use super::policy::Policy;
use super::{ExpertKey, KeyMap};
use crate::error::{Error, Result};
use crate::io::{window_capacity, AlignedBuf, Extent, IoFile, IoThreads, ReadRequest};
use std::sync::Arc;

/// The counters of the run report's `expert_cache` object (FORMATS.md §10, ENGINE.md §6).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheStats {
    /// Requests: one per (position, selected expert) the model asked for.
    pub requests: u64,
    /// Requests served without a read made for them: true resident hits plus repeats, within
    /// the same batch, of an expert read for that batch. `requests − hits` requests paid a read.
    pub hits: u64,
    /// Requests whose expert was resident before its layer asked (including one brought in
    /// earlier by a prefetch hint); never one read for this batch.
    pub true_resident_hits: u64,
    /// Expert reads made for requests (misses).
    pub reads: u64,
    /// Reads made for prefetch hints (none: hints are not issued yet).
    pub prefetch_reads: u64,
    /// Resident experts evicted to make room.
    pub evictions: u64,
    /// Bytes transferred from the device (widened windows for direct reads).
    pub bytes_read: u64,
    /// Wall-clock seconds expert reads were in flight: per batch, from queueing its reads to
    /// the last one finishing (the MoE block computes meanwhile).
    pub read_seconds: f64,
}

impl CacheStats {
    /// `true_resident_hits / requests` (0 without requests).
    pub fn true_resident_hit_rate(&self) -> f64 {
        ratio(self.true_resident_hits, self.requests)
    }
    /// `hits / requests` = 1 − reads/requests for demand reads (0 without requests).
    pub fn hit_rate(&self) -> f64 {
        ratio(self.hits, self.requests)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The bookkeeping of a cache of `slots` slots, without bytes: which key is published in which
/// slot, the policy, pins and counters. The expert cache and the simulator share it, so the
/// simulated hit rates are those of the engine.
pub(crate) struct CacheCore {
    policy: Box<dyn Policy>,
    slot_of: KeyMap<u32>,
    free: Vec<u32>,
    pub(crate) stats: CacheStats,
}

/// One batch's reservation.
pub(crate) struct Reservation {
    /// Slot of each request record, in request order.
    pub record_slots: Vec<u32>,
    /// The distinct misses, in request order: key and reserved slot.
    pub misses: Vec<(ExpertKey, u32)>,
    /// Requests and true resident hits of the batch.
    requests: u64,
    resident: u64,
}

impl CacheCore {
    pub(crate) fn new(slots: usize, policy: Box<dyn Policy>) -> Result<CacheCore> {
        if slots == 0 || slots > u32::MAX as usize {
            return Err(Error::invalid(format!(
                "expert cache: {slots} slots (at least one is needed)"
            )));
        }
        if policy.capacity() != slots {
            return Err(Error::internal(format!(
                "expert cache: policy {} built for {} slots, cache has {slots}",
                policy.name(),
                policy.capacity()
            )));
        }
        Ok(CacheCore {
            policy,
            slot_of: KeyMap::default(),
            free: (0..slots as u32).rev().collect(),
            stats: CacheStats::default(),
        })
    }

    pub(crate) fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    pub(crate) fn slot_of(&self, key: ExpertKey) -> Option<u32> {
        self.slot_of.get(&key).copied()
    }

    pub(crate) fn slots(&self) -> usize {
        self.policy.capacity()
    }

    /// Phase 1: pins the batch's resident keys and reserves a slot for each distinct miss.
    ///
    /// Errors: exit 1 if the batch has more distinct keys than the cache has slots (the
    /// caller sub-batches) or the policy breaks its contract.
    pub(crate) fn reserve(&mut self, keys: &[ExpertKey]) -> Result<Reservation> {
        // Distinct keys in request order, each with its slot (u32::MAX until reserved).
        let mut batch: KeyMap<u32> = KeyMap::default();
        let mut order = Vec::new();
        for &k in keys {
            batch.entry(k).or_insert_with(|| {
                order.push(k);
                u32::MAX
            });
        }
        if order.len() > self.slots() {
            return Err(Error::internal(format!(
                "expert cache: a batch of {} distinct experts does not fit in {} slots (the \
                 caller must sub-batch)",
                order.len(),
                self.slots()
            )));
        }
        let mut resident = 0u64;
        for &k in &order {
            if let Some(s) = self.slot_of(k) {
                self.policy.on_hit(k);
                batch.insert(k, s);
            }
        }
        for &k in keys {
            if batch[&k] != u32::MAX {
                resident += 1;
            }
        }
        let mut misses = Vec::new();
        for &k in &order {
            if batch[&k] != u32::MAX {
                continue;
            }
            let pinned = |x: ExpertKey| batch.contains_key(&x);
            let victim = self.policy.on_miss(k, &pinned)?;
            let slot = match victim {
                Some(v) => {
                    let s = self.slot_of.remove(&v).ok_or_else(|| {
                        Error::internal(format!(
                            "cache policy {}: evicted {v}, which is not published",
                            self.policy.name()
                        ))
                    })?;
                    self.stats.evictions += 1;
                    s
                }
                None => self.free.pop().ok_or_else(|| {
                    Error::internal(format!(
                        "cache policy {}: no victim although every slot is taken",
                        self.policy.name()
                    ))
                })?,
            };
            batch.insert(k, slot);
            misses.push((k, slot));
        }
        Ok(Reservation {
            record_slots: keys.iter().map(|k| batch[k]).collect(),
            misses,
            requests: keys.len() as u64,
            resident,
        })
    }

    /// Phase 3: publishes every reserved miss and counts the batch.
    pub(crate) fn publish(&mut self, r: &Reservation) {
        for &(k, s) in &r.misses {
            self.slot_of.insert(k, s);
        }
        self.stats.requests += r.requests;
        self.stats.true_resident_hits += r.resident;
        self.stats.hits += r.requests - r.misses.len() as u64;
    }

    /// Undoes the misses of a failed batch: their slots become free, nothing is published.
    pub(crate) fn abort(&mut self, r: &Reservation) {
        for &(k, s) in &r.misses {
            self.policy.remove(k);
            self.free.push(s);
        }
    }
}

/// What [`ExpertCache::fetch_each`] hands experts to: distinct expert ids and their payloads,
/// in the same order.
pub type OnReady<'f> = dyn FnMut(&[u32], &[&[u8]]) -> Result<()> + 'f;

/// The pieces one expert's bytes are read in, in open files: its six tensors as one run (the
/// released layout), or as several pieces (FORMATS.md §4: a non-contiguous expert is read
/// piece by piece). Where the six tensors lie in the shards is `stream::experts::ExpertLocation`.
#[derive(Debug, Clone)]
pub struct ExpertPieces<'f> {
    /// The pieces in payload order (`w1.weight_packed, w1.weight_scale, w2…, w3…`).
    pub pieces: Vec<Extent<&'f IoFile>>,
}

impl<'f> ExpertPieces<'f> {
    /// One contiguous run of `len` bytes at absolute `offset` of `file`.
    pub fn run(file: &'f IoFile, offset: u64, len: usize) -> ExpertPieces<'f> {
        ExpertPieces {
            pieces: vec![Extent { file, offset, len }],
        }
    }

    /// Payload bytes (sum of the pieces).
    pub fn len(&self) -> usize {
        self.pieces.iter().map(|p| p.len).sum()
    }

    /// True if there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The expert cache: `slots` slots of stride `window_capacity(slot_bytes)` in one pre-faulted
/// 4096-aligned arena (17,555,456 B per slot for K3).
pub struct ExpertCache {
    core: CacheCore,
    arena: AlignedBuf,
    stride: usize,
    slot_bytes: usize,
    /// Payload position of each published slot: (pad, len).
    payload: Vec<(u32, u32)>,
    io: Arc<IoThreads>,
}

impl ExpertCache {
    /// Slot stride for experts of `slot_bytes` bytes: `window_capacity(slot_bytes)`
    /// (FORMATS.md §6; 17,555,456 for K3). `None` on overflow.
    pub fn slot_stride(slot_bytes: usize) -> Option<usize> {
        window_capacity(slot_bytes)
    }

    /// A cache of `slots` slots for experts of at most `slot_bytes` bytes, evicting with
    /// `policy` (built for `slots`), reading on `io`. Allocates and faults in the whole arena
    /// (`slots × slot_stride(slot_bytes)` bytes) now.
    ///
    /// Errors: exit 2 for zero slots; exit 3 if the arena cannot be allocated; exit 1 if the
    /// policy was built for another capacity.
    pub fn new(
        slots: usize,
        slot_bytes: usize,
        policy: Box<dyn Policy>,
        io: Arc<IoThreads>,
    ) -> Result<ExpertCache> {
        let core = CacheCore::new(slots, policy)?;
        let too_big = || {
            Error::resources(format!(
                "expert cache of {slots} slots × {slot_bytes} bytes overflows the address space"
            ))
        };
        if slot_bytes > u32::MAX as usize {
            return Err(too_big());
        }
        let stride = Self::slot_stride(slot_bytes).ok_or_else(too_big)?;
        let arena = AlignedBuf::new(stride.checked_mul(slots).ok_or_else(too_big)?)?;
        Ok(ExpertCache {
            core,
            arena,
            stride,
            slot_bytes,
            payload: vec![(0, 0); slots],
            io,
        })
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.core.slots()
    }
    /// Largest expert a slot holds, bytes.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }
    /// Distance between slots in the arena, bytes.
    pub fn stride(&self) -> usize {
        self.stride
    }
    /// Name of the eviction policy.
    pub fn policy_name(&self) -> &'static str {
        self.core.policy_name()
    }
    /// Counters so far.
    pub fn stats(&self) -> CacheStats {
        self.core.stats
    }
    /// True if the expert is published (resident and complete).
    pub fn contains(&self, layer: u32, expert: u32) -> bool {
        self.core.slot_of(ExpertKey::new(layer, expert)).is_some()
    }

    /// Serves one MoE layer's requests: `experts` in request order (per position, its top-k in
    /// selection order; repeats allowed), at most `slots()` distinct. Misses are located with
    /// `locate(expert)`, read in parallel in (file, offset) order and checked with
    /// `verify(expert, payload)`. The batch's distinct experts go to `ready(ids, payloads)` as
    /// they become available: first those already resident, while the misses are read, then
    /// each group of misses that landed and passed `verify`, in landing order. Every distinct
    /// expert is passed exactly once over the calls, its payload exactly its bytes, its slot
    /// neither evicted nor refilled during the call. The new slots are published only once
    /// every read landed and passed and `ready` returned Ok; a failed batch publishes none,
    /// although `ready` may have seen some of its experts (the caller fails the token).
    ///
    /// Errors, in this order of precedence: the first failing read in file-offset order (exit
    /// 4, naming file and offset, with the layer and expert appended); an expert larger than a
    /// slot (exit 4: the checkpoint changed since it was indexed); errors from `locate` and
    /// `verify` as they are; exit 1 for a batch larger than the cache; `ready`'s error. After
    /// a failed read or check, `ready` is not called again.
    pub fn fetch_each<'f, L, V>(
        &mut self,
        layer: u32,
        experts: &[u32],
        mut locate: L,
        mut verify: V,
        ready: &mut OnReady<'_>,
    ) -> Result<()>
    where
        L: FnMut(u32) -> Result<ExpertPieces<'f>>,
        V: FnMut(u32, &[u8]) -> Result<()>,
    {
        let keys: Vec<ExpertKey> = experts.iter().map(|&e| ExpertKey::new(layer, e)).collect();
        let res = self.core.reserve(&keys)?;
        match self.fill(&keys, &res, &mut locate, &mut verify, ready) {
            Ok(()) => {
                self.core.publish(&res);
                Ok(())
            }
            Err(e) => {
                self.core.abort(&res);
                Err(e)
            }
        }
    }

    /// Phase 2: locate every reserved miss and read it into its slot, handing the resident
    /// experts to `ready` while the reads are in flight and each landed miss once it passed
    /// `verify`; records where each payload landed.
    fn fill<'f>(
        &mut self,
        keys: &[ExpertKey],
        res: &Reservation,
        locate: &mut dyn FnMut(u32) -> Result<ExpertPieces<'f>>,
        verify: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
        ready: &mut OnReady<'_>,
    ) -> Result<()> {
        // The distinct resident experts, in request order, with their slots.
        let mut hits: Vec<(u32, u32)> = Vec::new();
        for (k, &s) in keys.iter().zip(&res.record_slots) {
            let seen = hits.iter().any(|h| h.1 == s) || res.misses.iter().any(|m| m.1 == s);
            if !seen {
                hits.push((k.expert, s));
            }
        }
        let mut jobs = Vec::with_capacity(res.misses.len());
        for &(key, slot) in &res.misses {
            let loc = locate(key.expert)?;
            let len = loc.len();
            let first = loc
                .pieces
                .first()
                .ok_or_else(|| Error::internal(format!("{key}: located with no bytes")))?;
            if len > self.slot_bytes || loc.pieces.iter().any(|p| p.len == 0) {
                return Err(Error::io(format!(
                    "{}: routed expert ({key}) at offset {} is {len} bytes, but the cache slots \
                     were sized for {} bytes: the checkpoint changed since it was indexed",
                    first.file.path().display(),
                    first.offset,
                    self.slot_bytes
                )));
            }
            jobs.push((key, slot, loc));
        }
        // Queue the reads in file-offset order (sequential-friendly for the device).
        jobs.sort_unstable_by_key(|(_, slot, loc)| {
            (loc.pieces[0].file.id(), loc.pieces[0].offset, *slot)
        });

        // Every slot of the batch, carved apart: the misses' to be written by the reads, the
        // resident ones to be read by `ready` meanwhile.
        let mut slots_sorted: Vec<u32> = jobs.iter().map(|j| j.1).collect();
        slots_sorted.extend(hits.iter().map(|h| h.1));
        slots_sorted.sort_unstable();
        let mut carved: Vec<Option<&mut [u8]>> = carve(&mut self.arena, self.stride, &slots_sorted)
            .into_iter()
            .map(Some)
            .collect();
        let mut take = |slot: u32| {
            let idx = slots_sorted.binary_search(&slot).expect("slot was carved");
            carved[idx].take().expect("each slot is carved once")
        };
        let hit_ids: Vec<u32> = hits.iter().map(|h| h.0).collect();
        let hit_payloads: Vec<&[u8]> = hits
            .iter()
            .map(|&(_, s)| {
                let (pad, len) = self.payload[s as usize];
                let slot: &[u8] = take(s);
                &slot[pad as usize..(pad + len) as usize]
            })
            .collect();
        let mut reqs: Vec<ReadRequest<'_>> = jobs
            .iter()
            .map(|(_, slot, loc)| ReadRequest {
                pieces: loc.pieces.clone(),
                dest: take(*slot),
                outcome: None,
            })
            .collect();

        let stats = &mut self.core.stats;
        let mut landed: Vec<Option<(u32, u32)>> = vec![None; jobs.len()];
        // The first failed read and the first failed check, each by file-offset order.
        let mut read_error: Option<(usize, Error)> = None;
        let mut check_error: Option<(usize, Error)> = None;
        let mut work = |group: &[(usize, &ReadRequest<'_>)]| -> Result<()> {
            if group.is_empty() {
                return if hits.is_empty() {
                    Ok(())
                } else {
                    ready(&hit_ids, &hit_payloads)
                };
            }
            let mut ids = Vec::with_capacity(group.len());
            let mut payloads = Vec::with_capacity(group.len());
            for &(i, r) in group {
                let key = jobs[i].0;
                let failed = |first: &mut Option<(usize, Error)>, e: Error| {
                    if first.as_ref().is_none_or(|f| i < f.0) {
                        *first = Some((i, e));
                    }
                };
                match &r.outcome {
                    Some(Ok(d)) => {
                        stats.bytes_read += d.device_bytes;
                        let payload = &r.dest[d.pad..d.pad + jobs[i].2.len()];
                        match verify(key.expert, payload) {
                            Ok(()) => {
                                landed[i] = Some((d.pad as u32, payload.len() as u32));
                                ids.push(key.expert);
                                payloads.push(payload);
                            }
                            Err(e) => failed(&mut check_error, e),
                        }
                    }
                    Some(Err(e)) => failed(
                        &mut read_error,
                        Error::new(e.kind, format!("{} (routed expert: {key})", e.message)),
                    ),
                    None => failed(
                        &mut read_error,
                        Error::internal(format!("{key}: read finished without an outcome")),
                    ),
                }
            }
            if read_error.is_some() || check_error.is_some() || ids.is_empty() {
                return Ok(());
            }
            ready(&ids, &payloads)
        };
        let in_flight = self.io.read_batch_landing(&mut reqs, &mut work);
        self.core.stats.reads += reqs.len() as u64;
        drop(reqs);
        if let Some((_, e)) = read_error.or(check_error) {
            return Err(e);
        }
        self.core.stats.read_seconds += in_flight?;
        for ((_, slot, _), at) in jobs.iter().zip(landed) {
            self.payload[*slot as usize] =
                at.ok_or_else(|| Error::internal("a read of the batch never landed"))?;
        }
        Ok(())
    }
}

/// Disjoint mutable views of the given slots (ascending, distinct) of an arena.
fn carve<'a>(mut buf: &'a mut [u8], stride: usize, slots: &[u32]) -> Vec<&'a mut [u8]> {
    let mut out = Vec::with_capacity(slots.len());
    let mut base = 0usize;
    for &s in slots {
        let start = s as usize * stride;
        let rest = std::mem::take(&mut buf);
        let (_, rest) = rest.split_at_mut(start - base);
        let (slot, rest) = rest.split_at_mut(stride);
        out.push(slot);
        buf = rest;
        base = start + stride;
    }
    out
}

impl std::fmt::Debug for ExpertCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpertCache")
            .field("slots", &self.slots())
            .field("slot_bytes", &self.slot_bytes)
            .field("stride", &self.stride)
            .field("policy", &self.policy_name())
            .field("stats", &self.core.stats)
            .finish()
    }
}
