//! The 256 special tokens (TOKENIZER.md §3): ids N … N+255, named by `tokenizer_config.json`
//! `added_tokens_decoder` or `<|reserved_token_{id}|>`, and the leftmost-occurrence search
//! used by allowed-special encoding (§4 step 4).

use crate::error::{Error, Result};

/// Number of special ids above the BPE ranks.
pub const NUM_SPECIAL: u32 = 256;

/// The special-token block: names by id and a name → id search.
#[derive(Debug, Clone)]
pub struct SpecialTokens {
    base: u32,
    /// `names[id - base]`.
    names: Vec<String>,
    /// Indices into `names`, sorted by name bytes.
    sorted: Vec<u8>,
    /// Bytes that start some name.
    first: [bool; 256],
    /// The distinct first bytes, when there are at most three (memchr fast path).
    firsts: Vec<u8>,
}

impl SpecialTokens {
    /// Builds the block for ids `base … base+255` from the named entries `(id, content)`;
    /// every other id gets `<|reserved_token_{id}|>`.
    ///
    /// `source` (the config path) starts every error. Errors (exit 2): an id outside the block,
    /// an id named twice, an empty name, two ids with the same name, a name that is a prefix
    /// of another (reserved names included).
    pub fn new(base: u32, named: &[(u32, String)], source: &str) -> Result<SpecialTokens> {
        let mut names: Vec<Option<String>> = vec![None; NUM_SPECIAL as usize];
        for (id, content) in named {
            if *id < base || *id - base >= NUM_SPECIAL {
                return Err(Error::invalid(format!(
                    "{source}: added_tokens_decoder: id {id} is outside the special block {base}..{}",
                    base as u64 + NUM_SPECIAL as u64 - 1
                )));
            }
            if content.is_empty() {
                return Err(Error::invalid(format!(
                    "{source}: added_tokens_decoder.{id}.content: empty token name"
                )));
            }
            let slot = &mut names[(*id - base) as usize];
            if slot.is_some() {
                return Err(Error::invalid(format!(
                    "{source}: added_tokens_decoder: id {id} given twice"
                )));
            }
            *slot = Some(content.clone());
        }
        let names: Vec<String> = names
            .into_iter()
            .enumerate()
            .map(|(i, n)| n.unwrap_or_else(|| format!("<|reserved_token_{}|>", base + i as u32)))
            .collect();
        let mut sorted: Vec<u8> = (0..=255u8).collect();
        crate::sort::sort_by(&mut sorted, |&a, &b| {
            names[a as usize]
                .as_bytes()
                .cmp(names[b as usize].as_bytes())
                .then(a.cmp(&b))
        });
        // In sorted order, a name that is a prefix of another is a prefix of its successor.
        for w in sorted.windows(2) {
            let (a, b) = (&names[w[0] as usize], &names[w[1] as usize]);
            if b.as_bytes().starts_with(a.as_bytes()) {
                let (ia, ib) = (base + w[0] as u32, base + w[1] as u32);
                let what = if a == b {
                    "the same name as"
                } else {
                    "a name that is a prefix of the name of"
                };
                return Err(Error::invalid(format!(
                    "{source}: added_tokens_decoder: id {ia} ({a:?}) has {what} id {ib} ({b:?})"
                )));
            }
        }
        let mut first = [false; 256];
        for n in &names {
            first[n.as_bytes()[0] as usize] = true;
        }
        let firsts: Vec<u8> = (0..=255u8).filter(|&b| first[b as usize]).collect();
        Ok(SpecialTokens {
            base,
            names,
            sorted,
            first,
            firsts,
        })
    }

    /// The first special id (N, the number of BPE ranks).
    pub fn base(&self) -> u32 {
        self.base
    }

    /// The name of special id `id`, or None outside the block.
    pub fn name(&self, id: u32) -> Option<&str> {
        let i = id.checked_sub(self.base)?;
        self.names.get(i as usize).map(String::as_str)
    }

    /// The id of the special token named exactly `name`.
    pub fn id(&self, name: &str) -> Option<u32> {
        self.match_at(name.as_bytes())
            .and_then(|(len, id)| (len == name.len()).then_some(id))
    }

    /// The name matching at the start of `text`, as (byte length, id). Names are prefix-free,
    /// so only the greatest name ≤ `text` can match.
    #[inline]
    fn match_at(&self, text: &[u8]) -> Option<(usize, u32)> {
        let k = self
            .sorted
            .partition_point(|&i| self.names[i as usize].as_bytes() <= text);
        let i = *self.sorted.get(k.checked_sub(1)?)? as usize;
        let name = self.names[i].as_bytes();
        text.starts_with(name)
            .then_some((name.len(), self.base + i as u32))
    }

    /// The leftmost occurrence of any special name in `text[from..]`: (byte offset, byte
    /// length, id).
    pub fn find(&self, text: &[u8], from: usize) -> Option<(usize, usize, u32)> {
        let mut i = from;
        while i < text.len() {
            let next = match self.firsts.as_slice() {
                [a] => memchr::memchr(*a, &text[i..]),
                [a, b] => memchr::memchr2(*a, *b, &text[i..]),
                [a, b, c] => memchr::memchr3(*a, *b, *c, &text[i..]),
                _ => text[i..].iter().position(|&b| self.first[b as usize]),
            };
            let at = i + next?;
            if let Some((len, id)) = self.match_at(&text[at..]) {
                return Some((at, len, id));
            }
            i = at + 1;
        }
        None
    }
}

/// Reads `added_tokens_decoder` of a `tokenizer_config.json` (§3): `(id, content)` for every
/// member, keyed by the id as a decimal string; `special` must be a bool when present and does
/// not affect encoding; other members are ignored.
///
/// `source` (the path) starts every error (exit 2): invalid JSON (with the byte offset), no
/// `added_tokens_decoder` object, a key that is not a decimal id, an entry that is not an
/// object or lacks a string `content`.
pub fn parse_added_tokens(text: &[u8], source: &str) -> Result<Vec<(u32, String)>> {
    let root = crate::json::parse(text).map_err(|e| e.into_error(source, 0))?;
    let decoder = root
        .get("added_tokens_decoder")
        .ok_or_else(|| Error::invalid(format!("{source}: added_tokens_decoder: missing")))?
        .as_object()
        .ok_or_else(|| {
            Error::invalid(format!(
                "{source}: added_tokens_decoder: expected an object"
            ))
        })?;
    let mut out = Vec::with_capacity(decoder.len());
    for (key, entry) in decoder.iter() {
        let at = |what: &str| format!("{source}: added_tokens_decoder.{key}{what}");
        let id: u32 =
            if !key.is_empty() && key.len() <= 10 && key.bytes().all(|b| b.is_ascii_digit()) {
                key.parse()
                    .map_err(|_| Error::invalid(at(": id is not below 2^32")))?
            } else {
                return Err(Error::invalid(at(": key is not a decimal token id")));
            };
        let entry = entry.as_object().ok_or_else(|| {
            Error::invalid(at(&format!(
                ": expected an object, found {}",
                entry.type_name()
            )))
        })?;
        let content = match entry.get("content") {
            None => return Err(Error::invalid(at(".content: missing"))),
            Some(v) => v.as_str().ok_or_else(|| {
                Error::invalid(at(&format!(
                    ".content: expected string, found {}",
                    v.type_name()
                )))
            })?,
        };
        if let Some(v) = entry.get("special") {
            if v.as_bool().is_none() {
                return Err(Error::invalid(at(&format!(
                    ".special: expected bool, found {}",
                    v.type_name()
                ))));
            }
        }
        out.push((id, content.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_and_search() {
        let s = SpecialTokens::new(
            1000,
            &[(1000, "[BOS]".into()), (1002, "<|open|>".into())],
            "cfg",
        )
        .unwrap();
        assert_eq!(s.name(1001), Some("<|reserved_token_1001|>"));
        assert_eq!(s.name(1002), Some("<|open|>"));
        assert_eq!(s.name(1256), None);
        assert_eq!(s.name(999), None);
        assert_eq!(s.id("<|open|>"), Some(1002));
        assert_eq!(s.id("<|open|"), None);
        let t = b"a<|ope<|open|>[BOS]x<|reserved_token_1255|>";
        assert_eq!(s.find(t, 0), Some((6, 8, 1002)));
        assert_eq!(s.find(t, 7), Some((14, 5, 1000)));
        assert_eq!(s.find(t, 19), Some((20, 23, 1255)));
        assert_eq!(s.find(t, 21), None);
    }

    #[test]
    fn refuses_bad_tables() {
        let e = SpecialTokens::new(10, &[(9, "x".into())], "cfg").unwrap_err();
        assert!(e.message.contains("id 9"), "{e}");
        let e = SpecialTokens::new(10, &[(10, "".into())], "cfg").unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
        let e = SpecialTokens::new(10, &[(10, "ab".into()), (11, "ab".into())], "cfg").unwrap_err();
        assert!(e.message.contains("same name"), "{e}");
        let e =
            SpecialTokens::new(10, &[(10, "ab".into()), (11, "abc".into())], "cfg").unwrap_err();
        assert!(e.message.contains("prefix"), "{e}");
        let e = SpecialTokens::new(10, &[(10, "<|reserved_token_1".into())], "cfg").unwrap_err();
        assert!(e.message.contains("prefix"), "{e}");
    }
}
