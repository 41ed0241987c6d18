//! The session state file of FORMATS.md §9: [`SequenceState`] (everything incremental decode
//! needs to continue a sequence, MODEL.md §7), its identity against the running model
//! ([`StateIdentity`]), the writer (through [`crate::io::out::OutFile`]: `<path>.tmp`, sync,
//! rename) and the reader with every refusal of §9.3, each naming the field.
//!
//! The reader checks the header against the running model and the file size against the
//! §9.2 formula before it allocates anything, so a hostile header cannot ask for more memory
//! than the file holds; the trailer checksum is verified before a state is returned, so
//! nothing is ever partially loaded.

use crate::config::{Config, MlaForm};
use crate::error::{Error, Result};
use crate::fnv::{fnv1a64, Fnv1a64, FNV_OFFSET};
use crate::generate::sample::SamplerSettings;
use crate::io::out::OutFile;
use std::path::Path;

/// The magic at offset 0: ASCII `K3STATE` and one zero byte.
pub const MAGIC: [u8; 8] = *b"K3STATE\0";
/// The only version this engine writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the fixed header before the canonical config string.
pub const FIXED_HEADER: u64 = 136;

/// What a state must match in the running model (FORMATS.md §9.1, §9.2 header fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateIdentity {
    /// The canonical config string (§9.1); its FNV-1a-64 is the config fingerprint.
    pub canonical: String,
    /// FNV-1a-64 over the bound shards' header bytes (§9.1).
    pub weights_tag: u64,
    /// Layers (KDA + MLA).
    pub n_layers: u32,
    /// KDA layers.
    pub n_kda: u32,
    /// MLA layers.
    pub n_mla: u32,
    /// KDA heads Hk.
    pub hk: u32,
    /// KDA head dim Dk.
    pub dk: u32,
    /// Short-conv kernel size Kc (≥ 1; Kc − 1 history slots).
    pub kc: u32,
    /// One MLA cache row: kv_lora_rank + qk_rope_head_dim (Rkv + Dr) f32.
    pub mla_row: u32,
    /// Vocabulary size V: every stored id must be below it (not a header field).
    pub vocab_size: u32,
}

impl StateIdentity {
    /// The identity of `cfg` in MLA form `mla_form` with `weights_tag`.
    ///
    /// Errors (exit 2): a dimension beyond u32 (never for a validated config), naming it.
    pub fn from_config(cfg: &Config, mla_form: MlaForm, weights_tag: u64) -> Result<Self> {
        let u = |v: usize, name: &str| {
            u32::try_from(v).map_err(|_| {
                Error::invalid(format!("config: {name} = {v} exceeds the state file's u32"))
            })
        };
        Ok(StateIdentity {
            canonical: cfg.canonical_string(mla_form),
            weights_tag,
            n_layers: u(cfg.num_hidden_layers, "num_hidden_layers")?,
            n_kda: u(cfg.kda_layers_zero_based().len(), "kda_layers")?,
            n_mla: u(cfg.mla_layers().len(), "full_attn_layers")?,
            hk: u(cfg.kda_num_heads, "kda_num_heads")?,
            dk: u(cfg.kda_head_dim, "kda_head_dim")?,
            kc: u(cfg.short_conv_kernel_size, "short_conv_kernel_size")?,
            mla_row: u(
                cfg.kv_lora_rank + cfg.qk_rope_head_dim,
                "kv_lora_rank + qk_rope_head_dim",
            )?,
            vocab_size: u(cfg.vocab_size, "vocab_size")?,
        })
    }

    /// The config fingerprint: FNV-1a-64 of the canonical string.
    pub fn fingerprint(&self) -> u64 {
        fnv1a64(self.canonical.as_bytes())
    }

    /// f32 values of one KDA layer's Sᵀ: Hk × Dk × Dk.
    pub fn kda_state_len(&self) -> u64 {
        self.hk as u64 * self.dk as u64 * self.dk as u64
    }

    /// f32 values of one KDA layer's conv history: 3 × (Kc − 1) × Pk, Pk = Hk·Dk.
    pub fn conv_len(&self) -> u64 {
        3 * (self.kc as u64).saturating_sub(1) * self.hk as u64 * self.dk as u64
    }

    /// The eight u32 dimensions of the header in file order, from offset 24 (FORMATS.md §9.2):
    /// layers, KDA layers, MLA layers, hk, dk, kc, the MLA row, canon_len.
    pub fn dims(&self) -> [u32; 8] {
        [
            self.n_layers,
            self.n_kda,
            self.n_mla,
            self.hk,
            self.dk,
            self.kc,
            self.mla_row,
            self.canonical.len() as u32,
        ]
    }

    /// header_len: 136 + canon_len rounded up to a multiple of 8.
    pub fn header_len(&self) -> u64 {
        (FIXED_HEADER + self.canonical.len() as u64).div_ceil(8) * 8
    }

    /// The file size for `n_pos` positions (§9.2 formula), `None` on overflow.
    pub fn file_size(&self, n_pos: u64) -> Option<u64> {
        let n_ids = n_pos.checked_add(1)?;
        let ids = n_ids.div_ceil(2).checked_mul(8)?;
        let kda = (self.kda_state_len() + self.conv_len())
            .checked_mul(4)?
            .checked_mul(self.n_kda as u64)?;
        let mla = n_pos
            .checked_mul(self.mla_row as u64)?
            .checked_mul(4)?
            .checked_mul(self.n_mla as u64)?;
        self.header_len()
            .checked_add(ids)?
            .checked_add(kda)?
            .checked_add(mla)?
            .checked_add(8)
    }
}

/// One KDA layer's decode state (MODEL.md §7).
#[derive(Debug, Clone, PartialEq)]
pub struct KdaLayerState {
    /// Sᵀ, Hk × Dk × Dk f32 in [head][value j][key i] order.
    pub s: Vec<f32>,
    /// Conv history, 3 × (Kc − 1) × Pk f32 in [stream q, k, v][slot, oldest first][channel].
    pub conv: Vec<f32>,
}

/// A sequence's saved state (FORMATS.md §9.2) as plain data; the model fills and reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceState {
    /// The n_pos ids whose effect is in the state, in order.
    pub ids: Vec<u32>,
    /// The pending id: chosen but not yet run (the last generated id, or after `--gen 0` the
    /// last prompt id). Stored as the last of the file's n_pos + 1 ids.
    pub pending: u32,
    /// One entry per KDA layer, ascending.
    pub kda: Vec<KdaLayerState>,
    /// One entry per MLA layer, ascending: n_pos rows of (Rkv + Dr) f32, position-major, each
    /// row [normalised latent | k_pe].
    pub mla: Vec<Vec<f32>>,
    /// The sampler settings of the run (temperature 0 = greedy).
    pub sampler: SamplerSettings,
    /// The FNV-1a-64 state of the run's `logits_hash` so far (FNV offset basis after `--gen 0`).
    pub logits_hash: u64,
    /// Ids generated so far (the header's stats, for the report's `generated_before`).
    pub generated: u64,
}

impl SequenceState {
    /// Positions whose effect is in the state (n_pos = number of ids run).
    pub fn n_pos(&self) -> u64 {
        self.ids.len() as u64
    }

    /// An empty state of `id`'s shape (no positions, pending `pending`, zero KDA state),
    /// greedy sampler, the logits hash at its offset basis.
    pub fn empty(id: &StateIdentity, pending: u32) -> SequenceState {
        SequenceState {
            ids: Vec::new(),
            pending,
            kda: (0..id.n_kda)
                .map(|_| KdaLayerState {
                    s: vec![0.0; id.kda_state_len() as usize],
                    conv: vec![0.0; id.conv_len() as usize],
                })
                .collect(),
            mla: vec![Vec::new(); id.n_mla as usize],
            sampler: SamplerSettings::greedy(),
            logits_hash: FNV_OFFSET,
            generated: 0,
        }
    }

    /// Checks that the state has `id`'s shape (a bug otherwise: the model fills it).
    fn check_shape(&self, id: &StateIdentity) -> Result<()> {
        let bad = |what: String| Err(Error::internal(format!("state to save: {what}")));
        if self.kda.len() != id.n_kda as usize || self.mla.len() != id.n_mla as usize {
            return bad(format!(
                "{} KDA and {} MLA layers, the model has {} and {}",
                self.kda.len(),
                self.mla.len(),
                id.n_kda,
                id.n_mla
            ));
        }
        for (l, k) in self.kda.iter().enumerate() {
            if k.s.len() as u64 != id.kda_state_len() || k.conv.len() as u64 != id.conv_len() {
                return bad(format!(
                    "KDA layer {l}: state or conv history of the wrong size"
                ));
            }
        }
        let rows = self.n_pos() * id.mla_row as u64;
        if let Some(l) = self.mla.iter().position(|m| m.len() as u64 != rows) {
            return bad(format!(
                "MLA layer {l}: expected {rows} values (n_pos × row)"
            ));
        }
        Ok(())
    }
}

/// The fixed header fields in file order (offsets in FORMATS.md §9.2).
fn header_bytes(id: &StateIdentity, st: &SequenceState) -> Vec<u8> {
    let mut h = Vec::with_capacity(id.header_len() as usize);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&(id.header_len() as u32).to_le_bytes());
    h.extend_from_slice(&id.fingerprint().to_le_bytes());
    for v in id.dims() {
        h.extend_from_slice(&v.to_le_bytes());
    }
    let s = &st.sampler;
    for v in [
        st.n_pos(),
        st.n_pos() + 1,
        id.weights_tag,
        st.logits_hash,
        s.temperature.to_bits(),
        s.top_p.to_bits(),
        s.min_p.to_bits(),
        s.top_k,
        s.seed,
        st.generated,
    ] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(id.canonical.as_bytes());
    h.resize(id.header_len() as usize, 0);
    h
}

/// Streams the whole file (header, body, trailer) to `sink` in pieces of at most 64 KiB.
fn emit(
    id: &StateIdentity,
    st: &SequenceState,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    st.check_shape(id)?;
    let mut h = Fnv1a64::new();
    let mut put = |b: &[u8], sink: &mut dyn FnMut(&[u8]) -> Result<()>| {
        h.update(b);
        sink(b)
    };
    put(&header_bytes(id, st), sink)?;
    let mut ids: Vec<u8> = st
        .ids
        .iter()
        .chain(std::iter::once(&st.pending))
        .flat_map(|i| i.to_le_bytes())
        .collect();
    ids.resize(ids.len().div_ceil(8) * 8, 0);
    put(&ids, sink)?;
    let slices = st
        .kda
        .iter()
        .flat_map(|k| [&k.s[..], &k.conv[..]])
        .chain(st.mla.iter().map(|m| &m[..]));
    let mut buf = Vec::with_capacity(1 << 16);
    for v in slices {
        for c in v.chunks(1 << 14) {
            buf.clear();
            buf.extend(c.iter().flat_map(|x| x.to_le_bytes()));
            put(&buf, sink)?;
        }
    }
    let trailer = h.finish().to_le_bytes();
    sink(&trailer)
}

/// The state file's bytes (for tests and the fuzz target; [`save`] streams instead).
///
/// Errors (exit 1): the state does not have `id`'s shape.
pub fn to_bytes(id: &StateIdentity, st: &SequenceState) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    emit(id, st, &mut |b| {
        out.extend_from_slice(b);
        Ok(())
    })?;
    Ok(out)
}

/// Writes `st` into `out` (opened before the run for `--save-state`) and commits it: the
/// temporary is synced and renamed over the final path, so a failed save leaves any earlier
/// file intact (FORMATS.md §9.3).
///
/// Errors: exit 3 on a full disk, exit 4 on another write failure (naming the path and
/// offset); exit 1 if the state does not have `id`'s shape.
pub fn save_to(mut out: OutFile, id: &StateIdentity, st: &SequenceState) -> Result<()> {
    emit(id, st, &mut |b| out.write_all(b))?;
    out.commit()
}

/// Opens `path` for `flag` (`--save-state`) and saves `st` ([`save_to`]).
pub fn save(flag: &str, path: &Path, id: &StateIdentity, st: &SequenceState) -> Result<()> {
    save_to(OutFile::create(flag, path, "the session state")?, id, st)
}

mod read;
pub use read::{load, parse};

#[cfg(test)]
mod tests;
