//! Character classes of the pre-tokeniser (TOKENIZER.md §6.2), looked up per code point.
//!
//! The data are the generated runs of [`unicode_tables`](super::unicode_tables) (UCD 16.0.0,
//! §7), 6.5 kB in the binary where a table of `(first, last, flags)` ranges took 28 kB. Lookups
//! go through a two-level table built once from them (256 code points per block, identical
//! blocks shared), which [`lookup_ranges`] (binary search over [`ranges`]) cross-checks.

use super::unicode_tables::RUNS;
use std::sync::OnceLock;

pub use super::unicode_tables::{SOURCE as UNICODE_SOURCE, UNICODE_VERSION};

/// `\p{L}`: General_Category Lu, Ll, Lt, Lm or Lo.
pub const LETTER: u8 = 1 << 0;
/// `\p{N}`: General_Category Nd, Nl or No.
pub const NUM: u8 = 1 << 1;
/// `\s`: the White_Space property.
pub const WS: u8 = 1 << 2;
/// UP: (Lu, Lt, Lm, Lo or a mark) and not Script=Han.
pub const UP: u8 = 1 << 3;
/// LOW: (Ll, Lm, Lo or a mark) and not Script=Han.
pub const LOW: u8 = 1 << 4;
/// HAN: Script = Han (not Script_Extensions).
pub const HAN: u8 = 1 << 5;
/// NL: U+000D or U+000A.
pub const NL: u8 = 1 << 6;
/// `\p{M}`: General_Category Mn, Mc or Me.
pub const MARK: u8 = 1 << 7;

/// PRE of §6.2: not NL, not LETTER, not NUM.
#[inline]
pub fn is_pre(flags: u8) -> bool {
    flags & (NL | LETTER | NUM) == 0
}

/// PUNCT of §6.2: not WS, not LETTER, not NUM (marks and unassigned code points included).
#[inline]
pub fn is_punct(flags: u8) -> bool {
    flags & (WS | LETTER | NUM) == 0
}

/// The code-point ranges with nonzero flags, decoded from the generated runs: `(first, last,
/// flags)`, inclusive, sorted, disjoint, adjacent ranges of equal flags merged (a code point in
/// no range has flags 0, e.g. unassigned: PUNCT).
pub fn ranges() -> impl Iterator<Item = (u32, u32, u8)> {
    let mut i = 0;
    let mut cp = 0u32;
    std::iter::from_fn(move || {
        while i < RUNS.len() {
            let flags = RUNS[i];
            i += 1;
            // The length: unsigned LEB128 (the generator's encoding, unicode_tables.rs).
            let (mut len, mut shift) = (0u32, 0);
            while i < RUNS.len() {
                let b = RUNS[i];
                i += 1;
                len |= ((b & 0x7F) as u32) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            let first = cp;
            cp += len;
            if flags != 0 && len != 0 {
                return Some((first, cp - 1, flags));
            }
        }
        None
    })
}

/// The class flags of code point `cp` by binary search over `ranges` (as [`ranges`] yields
/// them; 0 for code points in no range, e.g. unassigned ones, and for values above U+10FFFF):
/// the reference the two-level table is checked against.
pub fn lookup_ranges(ranges: &[(u32, u32, u8)], cp: u32) -> u8 {
    let i = ranges.partition_point(|&(_, last, _)| last < cp);
    match ranges.get(i) {
        Some(&(first, _, flags)) if first <= cp => flags,
        _ => 0,
    }
}

/// Two-level class table: `blocks[index[cp >> 8]][cp & 0xFF]`.
pub struct Classes {
    index: Vec<u16>,
    blocks: Vec<[u8; 256]>,
    /// Flags of U+0000–U+007F (the common case, one load).
    ascii: [u8; 128],
}

const NUM_BLOCKS: usize = 0x110000 >> 8;

impl Classes {
    fn build() -> Classes {
        let mut index = Vec::with_capacity(NUM_BLOCKS);
        let mut blocks: Vec<[u8; 256]> = Vec::new();
        let mut seen: std::collections::HashMap<[u8; 256], u16> = Default::default();
        let ranges: Vec<(u32, u32, u8)> = ranges().collect();
        let mut r = 0; // first range that may intersect the current block
        for block in 0..NUM_BLOCKS as u32 {
            let base = block << 8;
            let mut data = [0u8; 256];
            while r < ranges.len() && ranges[r].1 < base {
                r += 1;
            }
            let mut k = r;
            while k < ranges.len() && ranges[k].0 <= base + 255 {
                let (first, last, flags) = ranges[k];
                let lo = first.max(base) - base;
                let hi = last.min(base + 255) - base;
                for f in &mut data[lo as usize..=hi as usize] {
                    *f = flags;
                }
                k += 1;
            }
            let id = *seen.entry(data).or_insert_with(|| {
                blocks.push(data);
                (blocks.len() - 1) as u16
            });
            index.push(id);
        }
        let mut ascii = [0u8; 128];
        ascii.copy_from_slice(&blocks[index[0] as usize][..128]);
        Classes {
            index,
            blocks,
            ascii,
        }
    }

    /// The table, built on first use (about a millisecond) and shared.
    pub fn get() -> &'static Classes {
        static TABLE: OnceLock<Classes> = OnceLock::new();
        TABLE.get_or_init(Classes::build)
    }

    /// The class flags of code point `cp` (0 above U+10FFFF).
    #[inline]
    pub fn flags(&self, cp: u32) -> u8 {
        match self.index.get((cp >> 8) as usize) {
            Some(&b) => self.blocks[b as usize][(cp & 0xFF) as usize],
            None => 0,
        }
    }

    /// The class flags of an ASCII byte (`b < 0x80`).
    #[inline(always)]
    pub fn ascii(&self, b: u8) -> u8 {
        self.ascii[(b & 0x7F) as usize]
    }

    /// Heap bytes of the table.
    pub fn heap_bytes(&self) -> usize {
        self.index.capacity() * 2 + self.blocks.capacity() * 256
    }
}

/// Decodes the character starting at byte `i` of valid UTF-8 `b`: (code point, byte length).
///
/// `b` must be valid UTF-8 (it comes from a `&str`) and `i` a character boundary.
#[inline(always)]
pub fn decode_at(b: &[u8], i: usize) -> (u32, usize) {
    let b0 = b[i];
    if b0 < 0x80 {
        (b0 as u32, 1)
    } else if b0 < 0xE0 {
        (((b0 as u32 & 0x1F) << 6) | (b[i + 1] as u32 & 0x3F), 2)
    } else if b0 < 0xF0 {
        (
            ((b0 as u32 & 0x0F) << 12) | ((b[i + 1] as u32 & 0x3F) << 6) | (b[i + 2] as u32 & 0x3F),
            3,
        )
    } else {
        (
            ((b0 as u32 & 0x07) << 18)
                | ((b[i + 1] as u32 & 0x3F) << 12)
                | ((b[i + 2] as u32 & 0x3F) << 6)
                | (b[i + 3] as u32 & 0x3F),
            4,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_level_table_equals_ranges() {
        let c = Classes::get();
        let r: Vec<_> = ranges().collect();
        for cp in 0..0x110000u32 {
            assert_eq!(c.flags(cp), lookup_ranges(&r, cp), "U+{cp:04X}");
        }
        assert_eq!(c.flags(0x110000), 0);
    }

    #[test]
    fn ranges_sorted_and_disjoint() {
        let r: Vec<_> = ranges().collect();
        assert_eq!(r.len(), 2373);
        for w in r.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0);
            assert!(w[0].1 + 1 < w[1].0 || w[0].2 != w[1].2, "unmerged {:?}", w);
        }
        assert!(r.last().unwrap().1 <= 0x10FFFF);
    }

    /// The runs cover U+0000..U+10FFFF exactly (the lengths sum to 0x110000, the last length
    /// ends the data).
    #[test]
    fn runs_cover_every_code_point() {
        let (mut i, mut total) = (0, 0u32);
        while i < RUNS.len() {
            i += 1;
            let (mut len, mut shift) = (0u32, 0);
            loop {
                let b = RUNS[i];
                i += 1;
                len |= ((b & 0x7F) as u32) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            total += len;
        }
        assert_eq!(total, 0x110000);
    }

    #[test]
    fn spot_checks() {
        let c = Classes::get();
        assert_eq!(c.flags('a' as u32), LETTER | LOW);
        assert_eq!(c.flags('A' as u32), LETTER | UP);
        assert_eq!(c.flags('\n' as u32), WS | NL);
        assert_eq!(c.flags(' ' as u32), WS);
        assert_eq!(c.flags('5' as u32), NUM);
        assert_eq!(c.flags('中' as u32), LETTER | HAN);
        assert_eq!(c.flags('〇' as u32), NUM | HAN);
        assert_eq!(c.flags('あ' as u32), LETTER | UP | LOW);
        assert_eq!(c.flags(0x0301), MARK | UP | LOW);
        assert_eq!(c.flags('!' as u32), 0);
        assert!(is_punct(c.flags(0x0301)) && is_pre(c.flags(0x0301)));
        assert!(is_pre(c.flags('\t' as u32)) && !is_punct(c.flags('\t' as u32)));
    }
}
