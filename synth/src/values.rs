//! The PRNG, FNV-1a and the block generator: the bytes of every tensor.

use crate::*;

/// FNV-1a-64 (FORMATS.md §1).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_update(0xcbf2_9ce4_8422_2325, bytes)
}

/// Continues an FNV-1a-64 hash `h` over `bytes`.
pub fn fnv1a64_update(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** (Blackman & Vigna), seeded through SplitMix64.
#[derive(Clone, Debug)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// A generator whose state is four successive SplitMix64 outputs from `seed`.
    pub fn new(seed: u64) -> Xoshiro256 {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Xoshiro256 { s }
    }

    /// The stream of block `block` of the tensor whose name hashes to `name_hash`.
    pub fn for_block(seed: u64, name_hash: u64, block: u64) -> Xoshiro256 {
        let mut sm = seed ^ 0x6b33_2d73_796e_7468; // "k3-synth"
        let a = splitmix64(&mut sm);
        let mut sm = a ^ name_hash;
        let b = splitmix64(&mut sm);
        let mut sm = b ^ block;
        Xoshiro256::new(splitmix64(&mut sm))
    }

    /// Next 64-bit draw.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}

/// f32 → BF16 bits, round to nearest even (finite inputs).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The 65,536-entry table of [`Init::Bf16Uniform`].
fn bf16_table(lo: f32, hi: f32) -> Vec<u16> {
    let (lo, hi) = (lo as f64, hi as f64);
    (0..65536u32)
        .map(|r| f32_to_bf16((lo + (hi - lo) * ((r as f64 + 0.5) / 65536.0)) as f32))
        .collect()
}

#[inline(always)]
fn f32_uniform(bits24: u32, lo: f64, span: f64) -> f32 {
    (lo + span * ((bits24 as f64 + 0.5) / 16_777_216.0)) as f32
}

/// Generation context: the plan's tensors with their name hashes and BF16 tables.
pub(crate) struct Generator<'a> {
    seed: u64,
    tensors: Vec<(&'a TensorDef, u64, Option<usize>)>,
    tables: Vec<Vec<u16>>,
}

impl<'a> Generator<'a> {
    pub(crate) fn new(seed: u64, defs: impl Iterator<Item = &'a TensorDef>) -> Generator<'a> {
        let mut keys: Vec<(u32, u32)> = Vec::new();
        let mut tables = Vec::new();
        let tensors = defs
            .map(|d| {
                let table = match d.init {
                    Init::Bf16Uniform { lo, hi } => {
                        let key = (lo.to_bits(), hi.to_bits());
                        Some(match keys.iter().position(|k| *k == key) {
                            Some(i) => i,
                            None => {
                                keys.push(key);
                                tables.push(bf16_table(lo, hi));
                                tables.len() - 1
                            }
                        })
                    }
                    _ => None,
                };
                (d, fnv1a64(d.name.as_bytes()), table)
            })
            .collect();
        Generator {
            seed,
            tensors,
            tables,
        }
    }

    /// Fills `out` with block `block` of tensor `t` (`out.len()` = that block's length).
    pub(crate) fn fill(&self, t: usize, block: u64, out: &mut [u8]) {
        let (def, hash, table) = self.tensors[t];
        let mut rng = Xoshiro256::for_block(self.seed, hash, block);
        match def.init {
            Init::Bf16Uniform { .. } => {
                let table = &self.tables[table.expect("BF16 tensors have a table")];
                let mut chunks = out.chunks_exact_mut(8);
                for c in &mut chunks {
                    let r = rng.next_u64();
                    let v = [
                        table[(r & 0xffff) as usize],
                        table[((r >> 16) & 0xffff) as usize],
                        table[((r >> 32) & 0xffff) as usize],
                        table[(r >> 48) as usize],
                    ];
                    let w = (v[0] as u64)
                        | ((v[1] as u64) << 16)
                        | ((v[2] as u64) << 32)
                        | ((v[3] as u64) << 48);
                    c.copy_from_slice(&w.to_le_bytes());
                }
                let rest = chunks.into_remainder();
                if !rest.is_empty() {
                    let r = rng.next_u64();
                    for (j, e) in rest.chunks_exact_mut(2).enumerate() {
                        let v = table[((r >> (16 * j)) & 0xffff) as usize];
                        e.copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            Init::F32Uniform { lo, hi } => {
                let first = block * BLOCK_BYTES / 4;
                fill_f32(&mut rng, out, first, usize::MAX, lo, hi);
            }
            Init::F32HeadPrefix { used, lo, hi } => {
                let first = block * BLOCK_BYTES / 4;
                fill_f32(&mut rng, out, first, used, lo, hi);
            }
            Init::Nibbles => {
                let mut chunks = out.chunks_exact_mut(8);
                for c in &mut chunks {
                    c.copy_from_slice(&rng.next_u64().to_le_bytes());
                }
                let rest = chunks.into_remainder();
                if !rest.is_empty() {
                    let r = rng.next_u64().to_le_bytes();
                    let n = rest.len();
                    rest.copy_from_slice(&r[..n]);
                }
            }
            Init::E8M0 { lo, hi } => {
                let n = (hi - lo) as u64 + 1;
                for c in out.chunks_mut(8) {
                    let r = rng.next_u64();
                    for (j, b) in c.iter_mut().enumerate() {
                        // Multiply-shift maps 8 random bits onto lo..=hi.
                        *b = lo + ((((r >> (8 * j)) & 0xff) * n) >> 8) as u8;
                    }
                }
            }
        }
    }
}

/// F32 uniform elements; element indices ≥ `used` (counted from the tensor start, `first` is
/// the index of out[0]) are +0.0 but still consume their draw bits.
fn fill_f32(rng: &mut Xoshiro256, out: &mut [u8], first: u64, used: usize, lo: f32, hi: f32) {
    let (lo, span) = (lo as f64, hi as f64 - lo as f64);
    let mut idx = first;
    for c in out.chunks_mut(8) {
        let r = rng.next_u64();
        for (j, e) in c.chunks_exact_mut(4).enumerate() {
            let bits = ((r >> (32 * j)) as u32) >> 8;
            let v = if idx < used as u64 {
                f32_uniform(bits, lo, span)
            } else {
                0.0
            };
            e.copy_from_slice(&v.to_le_bytes());
            idx += 1;
        }
    }
}

/// The full bytes of one tensor of `spec` (for tests: what the checkpoint holds for it).
pub fn tensor_data(seed: u64, def: &TensorDef) -> Vec<u8> {
    let g = Generator::new(seed, std::iter::once(def));
    let n = def.nbytes();
    let mut out = vec![0u8; n as usize];
    for (b, chunk) in out.chunks_mut(BLOCK_BYTES as usize).enumerate() {
        g.fill(0, b as u64, chunk);
    }
    out
}
