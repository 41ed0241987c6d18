//! The reference tokenizer's data, with no dependency on k3: the Kimi pattern and the real
//! vocabulary from `splintr-vocab-kimi`. Shared by `tests/engine/support/tokenizer.rs` and the chat
//! oracle (`chat-oracle/`, which includes this file by path). The pattern itself is in
//! `kimi_pattern.rs`, which the tokenizer bench includes too.

include!("kimi_pattern.rs");

/// Decodes splintr's packed vocabulary: "SPLNTRV1", u32 LE count, then per entry
/// LEB128 rank, LEB128 length, bytes.
pub fn splintr_ranks() -> Vec<(Vec<u8>, u32)> {
    let p = splintr_vocab_kimi::KIMI_VOCAB_PACKED;
    assert_eq!(&p[..8], b"SPLNTRV1");
    let count = u32::from_le_bytes(p[8..12].try_into().unwrap()) as usize;
    let mut i = 12;
    let varint = |i: &mut usize| {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = p[*i];
            *i += 1;
            v |= ((b & 0x7F) as u64) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let rank = varint(&mut i) as u32;
        let len = varint(&mut i) as usize;
        out.push((p[i..i + len].to_vec(), rank));
        i += len;
    }
    assert_eq!(i, p.len());
    out
}
