//! The state-file reader and its refusals (FORMATS.md §9.3), each naming the field and its
//! byte offset.

use super::{KdaLayerState, SequenceState, StateIdentity, FIXED_HEADER, MAGIC, VERSION};
use crate::error::{Error, Result};
use crate::fnv::{fnv1a64, Fnv1a64};
use crate::generate::sample::SamplerSettings;
use crate::units::hex;
use std::io::Read;
use std::path::Path;

/// Loads the state file at `path` (given with `flag`, e.g. `--load-state`) for the running
/// model `id`. Nothing is returned unless every check of FORMATS.md §9.3 passed.
///
/// Errors: exit 2 for every refusal (wrong magic, version, header_len, other config — the
/// first differing `key=value` —, other weights, header fields that differ from the running
/// model, n_ids ≠ n_pos + 1, `stats` (ids generated) above n_ids, a size other than the formula, a checksum mismatch, an id ≥ V,
/// sampler settings out of range) and for a file that cannot be opened or is a directory;
/// exit 4 for a read failure. Messages start with the path.
pub fn load(flag: &str, path: &Path, id: &StateIdentity) -> Result<SequenceState> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| {
        Error::invalid(format!(
            "flag `{flag} {name}`: cannot open the state file: {e}"
        ))
    })?;
    let meta = f
        .metadata()
        .map_err(|e| Error::io(format!("{name}: cannot read the file size: {e}")))?;
    // a directory opens on Linux and fails only at the first read (that was exit 4)
    if meta.is_dir() {
        return Err(Error::invalid(format!(
            "flag `{flag} {name}`: is a directory; give a state file (written by --save-state or /save)"
        )));
    }
    let len = meta.len();
    read_from(
        std::io::BufReader::with_capacity(1 << 16, f),
        len,
        &name,
        id,
    )
}

/// Parses a whole state file held in memory (tests, fuzzing); `name` starts every message.
/// Same checks and errors as [`load`].
pub fn parse(bytes: &[u8], name: &str, id: &StateIdentity) -> Result<SequenceState> {
    read_from(bytes, bytes.len() as u64, name, id)
}

/// A reader that hashes what it reads (the trailer covers every preceding byte).
struct Hashing<'a, R: Read> {
    r: R,
    h: Fnv1a64,
    at: u64,
    name: &'a str,
}

impl<R: Read> Hashing<'_, R> {
    fn bytes(&mut self, n: usize, what: &str) -> Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn fill(&mut self, b: &mut [u8], what: &str) -> Result<()> {
        self.r.read_exact(b).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::invalid(format!(
                    "{}: truncated: the file ends inside {what} (byte {})",
                    self.name, self.at
                ))
            } else {
                Error::io(format!(
                    "{}: read failed at byte {}: {e}",
                    self.name, self.at
                ))
            }
        })?;
        self.h.update(b);
        self.at += b.len() as u64;
        Ok(())
    }

    /// `n` little-endian f32 values.
    fn f32s(&mut self, n: u64, what: &str) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(n as usize);
        let mut buf = vec![0u8; 1 << 16];
        let mut left = n as usize;
        while left > 0 {
            let k = left.min(buf.len() / 4);
            self.fill(&mut buf[..4 * k], what)?;
            out.extend(
                buf[..4 * k]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
            left -= k;
        }
        Ok(out)
    }
}

fn u32_at(h: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([h[off], h[off + 1], h[off + 2], h[off + 3]])
}

fn u64_at(h: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[off..off + 8]);
    u64::from_le_bytes(b)
}

/// The first `key=value` item where two canonical strings differ, as a message part.
pub(crate) fn first_difference(file: &str, ours: &str) -> String {
    let mut a = file.split(';').filter(|s| !s.is_empty());
    let mut b = ours.split(';').filter(|s| !s.is_empty());
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (Some(x), Some(y)) => {
                return format!("the state has `{x}`, the running config has `{y}`")
            }
            (Some(x), None) => return format!("the state has `{x}`, the running config ends"),
            (None, Some(y)) => return format!("the state ends, the running config has `{y}`"),
            (None, None) => return "the canonical strings are equal".into(),
        }
    }
}

/// Header checks before any allocation sized by the header; returns (header, n_pos).
fn read_header<R: Read>(
    r: &mut Hashing<'_, R>,
    len: u64,
    id: &StateIdentity,
) -> Result<(Vec<u8>, u64)> {
    let name = r.name;
    let bad = |off: u64, field: &str, why: String| {
        Error::invalid(format!("{name}: byte {off}: {field}: {why}"))
    };
    let magic = r.bytes(8.min(len as usize), "the magic")?;
    if magic != MAGIC {
        return Err(bad(
            0,
            "magic",
            "not a k3 state file (expected `K3STATE\\0`)".into(),
        ));
    }
    if len < FIXED_HEADER {
        return Err(Error::invalid(format!(
            "{name}: truncated: {len} bytes, the fixed header alone is {FIXED_HEADER}"
        )));
    }
    let mut h = magic;
    h.extend(r.bytes(FIXED_HEADER as usize - 8, "the header")?);
    let version = u32_at(&h, 8);
    if version != VERSION {
        return Err(bad(
            8,
            "version",
            format!(
            "{version}, this engine reads version {VERSION}; save the state again with this engine"
        ),
        ));
    }
    let canon_len = u32_at(&h, 52) as u64;
    let want_hl = (FIXED_HEADER + canon_len).div_ceil(8) * 8;
    let header_len = u32_at(&h, 12) as u64;
    if header_len != want_hl {
        return Err(bad(
            12,
            "header_len",
            format!(
                "{header_len}, expected {want_hl} (136 + canon_len {canon_len}, rounded up to 8)"
            ),
        ));
    }
    if len < header_len {
        return Err(Error::invalid(format!(
            "{name}: truncated: {len} bytes, the header alone is {header_len}"
        )));
    }
    h.extend(r.bytes(
        (header_len - FIXED_HEADER) as usize,
        "the canonical config string",
    )?);
    let pad_end = 136 + canon_len as usize;
    if let Some(i) = h[pad_end..].iter().position(|&b| b != 0) {
        let at = (pad_end + i) as u64;
        return Err(bad(
            at,
            "header padding",
            "not zero (the canonical string is zero-padded)".into(),
        ));
    }
    let canon = String::from_utf8_lossy(&h[136..pad_end]).into_owned();
    let fp = u64_at(&h, 16);
    if fp != id.fingerprint() || canon != id.canonical {
        let why = if canon != id.canonical {
            first_difference(&canon, &id.canonical)
        } else {
            format!(
                "its canonical string hashes to {}",
                hex(fnv1a64(canon.as_bytes()))
            )
        };
        return Err(bad(
            16,
            "config fingerprint",
            format!(
            "{} differs from the running config's {}: the state belongs to another model ({why})",
            hex(fp),
            hex(id.fingerprint())
        ),
        ));
    }
    let tag = u64_at(&h, 72);
    if tag != id.weights_tag {
        return Err(bad(
            72,
            "weights tag",
            format!(
                "{} differs from this checkpoint's {}: the state was saved with other weights",
                hex(tag),
                hex(id.weights_tag)
            ),
        ));
    }
    let fields = [
        ("n_layers", id.n_layers),
        ("n_kda", id.n_kda),
        ("n_mla", id.n_mla),
        ("Hk", id.hk),
        ("Dk", id.dk),
        ("Kc", id.kc),
        ("mla_row", id.mla_row),
    ];
    for (k, (field, want)) in fields.into_iter().enumerate() {
        let off = 24 + 4 * k;
        let got = u32_at(&h, off);
        if got != want {
            return Err(bad(
                off as u64,
                field,
                format!("{got}, the running model has {want}"),
            ));
        }
    }
    let n_pos = u64_at(&h, 56);
    let n_ids = u64_at(&h, 64);
    if n_pos.checked_add(1) != Some(n_ids) {
        return Err(bad(
            64,
            "n_ids",
            format!(
                "{n_ids}, expected n_pos + 1 = {} (the last id is always pending)",
                n_pos as u128 + 1
            ),
        ));
    }
    // the ids generated so far are among the ids held: a larger count would overflow the
    // sum the next save writes (`generated_before + generated`)
    let generated = u64_at(&h, 128);
    if generated > n_ids {
        return Err(bad(
            128,
            "stats",
            format!(
                "{generated} ids generated, more than the {n_ids} ids the file holds (expected \
                 0 to {n_ids})"
            ),
        ));
    }
    match id.file_size(n_pos) {
        Some(want) if want == len => Ok((h, n_pos)),
        Some(want) => Err(Error::invalid(format!(
            "{name}: file size: {len} bytes, the header (n_pos = {n_pos}) needs {want}{}",
            if len < want { " (truncated)" } else { "" }
        ))),
        None => Err(bad(
            56,
            "n_pos",
            format!("{n_pos}: the file size overflows"),
        )),
    }
}

fn read_from<R: Read>(r: R, len: u64, name: &str, id: &StateIdentity) -> Result<SequenceState> {
    let mut r = Hashing {
        r,
        h: Fnv1a64::new(),
        at: 0,
        name,
    };
    let (h, n_pos) = read_header(&mut r, len, id)?;
    let n_ids = n_pos + 1;
    let ids_at = r.at;
    let raw = r.bytes(n_ids.div_ceil(2) as usize * 8, "the ids")?;
    if n_ids % 2 == 1 && raw[raw.len() - 4..] != [0; 4] {
        return Err(Error::invalid(format!(
            "{name}: byte {}: ids padding: not zero (n_ids = {n_ids} is odd; the ids are \
             zero-padded to 8 bytes)",
            ids_at + raw.len() as u64 - 4
        )));
    }
    let mut ids: Vec<u32> = raw
        .chunks_exact(4)
        .take(n_ids as usize)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut kda = Vec::with_capacity(id.n_kda as usize);
    for l in 0..id.n_kda {
        let s = r.f32s(id.kda_state_len(), &format!("KDA layer {l}'s state"))?;
        let conv = r.f32s(id.conv_len(), &format!("KDA layer {l}'s conv history"))?;
        kda.push(KdaLayerState { s, conv });
    }
    let mut mla = Vec::with_capacity(id.n_mla as usize);
    for l in 0..id.n_mla {
        mla.push(r.f32s(n_pos * id.mla_row as u64, &format!("MLA layer {l}'s cache"))?);
    }
    let sum = r.h.finish();
    let trailer_at = r.at;
    let mut t = [0u8; 8];
    r.fill(&mut t, "the trailer")?;
    let stored = u64::from_le_bytes(t);
    if stored != sum {
        return Err(Error::invalid(format!(
            "{name}: byte {trailer_at}: checksum: the trailer says {}, the file's bytes hash to {}: \
             the file is damaged",
            hex(stored),
            hex(sum)
        )));
    }
    if let Some(i) = ids.iter().position(|&x| x >= id.vocab_size) {
        return Err(Error::invalid(format!(
            "{name}: byte {}: ids[{i}]: {} is not below vocab_size {}",
            ids_at + 4 * i as u64,
            ids[i],
            id.vocab_size
        )));
    }
    let sampler = SamplerSettings {
        temperature: f64::from_bits(u64_at(&h, 88)),
        top_p: f64::from_bits(u64_at(&h, 96)),
        min_p: f64::from_bits(u64_at(&h, 104)),
        top_k: u64_at(&h, 112),
        seed: u64_at(&h, 120),
    };
    sampler.validate(&format!("{name}: byte 88: sampler"))?;
    let pending = ids.pop().unwrap_or(0);
    Ok(SequenceState {
        ids,
        pending,
        kda,
        mla,
        sampler,
        logits_hash: u64_at(&h, 80),
        generated: u64_at(&h, 128),
    })
}
