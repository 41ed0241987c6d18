//! The vocabulary as the mask walk sees it: a trie of every rank's byte string, stored in
//! preorder with skip links, plus the named special ids (symbols of their own, never bytes).

use crate::tokenizer::Tokenizer;

/// No id ends at this trie node.
pub(crate) const NO_ID: u32 = u32::MAX;

/// One trie node in preorder: the byte that leads to it, its depth (bytes from the root,
/// ≥ 1), the id whose bytes end here (or [`NO_ID`]), and the preorder index just past its
/// subtree (where the walk continues when the byte is not admitted).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrieNode {
    pub byte: u8,
    pub depth: u16,
    pub id: u32,
    pub end: u32,
}

/// The vocabulary as the matcher walks it: a trie of every id's byte string; special ids are
/// single symbols of their own (never bytes). Built once per tokenizer and shared (`Arc`).
#[derive(Debug)]
pub struct Vocabulary {
    pub(crate) trie: Vec<TrieNode>,
    /// (id in the trie, another id with the same bytes).
    pub(crate) aliases: Vec<(u32, u32)>,
    /// Every rank's bytes in id order (for `accept`).
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    /// The named special ids, ascending.
    pub(crate) specials: Vec<u32>,
    /// The vocabulary size V (ranks + the 256 special ids).
    size: usize,
    /// The longest token in bytes (the walk's level count).
    pub(crate) max_len: usize,
}

impl Vocabulary {
    /// Builds the trie of `tok`'s ranks (TOKENIZER.md §3). Reserved special ids (named
    /// `<|reserved_token_…|>`) are never admitted by any grammar; named ones are recorded.
    pub fn new(tok: &Tokenizer) -> Vocabulary {
        let ranks = tok.vocab().len();
        let mut specials = Vec::new();
        for id in ranks as u32..tok.vocab_size() as u32 {
            if let Some(name) = tok.special().name(id) {
                if !name.starts_with("<|reserved_token_") {
                    specials.push(id);
                }
            }
        }
        let tokens: Vec<&[u8]> = (0..ranks as u32).map(|id| tok.vocab().token(id)).collect();
        Vocabulary::from_tokens(&tokens, specials, tok.vocab_size())
    }

    /// Builds from raw token byte strings (id = index) and special ids; `size` ≥ every id.
    pub fn from_tokens(tokens: &[&[u8]], specials: Vec<u32>, size: usize) -> Vocabulary {
        let mut bytes = Vec::new();
        let mut offsets = vec![0u32];
        for t in tokens {
            bytes.extend_from_slice(t);
            offsets.push(bytes.len() as u32);
        }
        let mut order: Vec<u32> = (0..tokens.len() as u32)
            .filter(|&i| !tokens[i as usize].is_empty())
            .collect();
        order.sort_by(|&a, &b| tokens[a as usize].cmp(tokens[b as usize]).then(a.cmp(&b)));
        // Preorder trie from the sorted strings: the path of open nodes is the previous
        // string's prefix; each new string closes the nodes past the common prefix.
        let mut trie: Vec<TrieNode> = Vec::new();
        let mut path: Vec<usize> = Vec::new(); // trie index per depth-1
        let mut prev: &[u8] = &[];
        let mut max_len = 0;
        let mut aliases = Vec::new();
        for &id in &order {
            let t = tokens[id as usize];
            max_len = max_len.max(t.len());
            let common = prev.iter().zip(t).take_while(|(a, b)| a == b).count();
            for &open in &path[common..] {
                trie[open].end = trie.len() as u32;
            }
            path.truncate(common);
            if common == t.len() {
                // A duplicate byte string: the lower id keeps the node, the other is its
                // alias (admitted with it).
                if let Some(&last) = path.last() {
                    aliases.push((trie[last].id, id));
                }
                continue;
            }
            for (d, &b) in t.iter().enumerate().skip(common) {
                path.push(trie.len());
                trie.push(TrieNode {
                    byte: b,
                    depth: d as u16 + 1,
                    id: NO_ID,
                    end: 0,
                });
            }
            let last = *path.last().unwrap_or(&0);
            trie[last].id = id;
            prev = t;
        }
        for &open in &path {
            trie[open].end = trie.len() as u32;
        }
        Vocabulary {
            trie,
            aliases,
            bytes,
            offsets,
            specials,
            size,
            max_len,
        }
    }

    /// The vocabulary size V.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The bytes of rank `id` (`None` for special or out-of-range ids).
    pub fn token(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if i + 1 < self.offsets.len() {
            Some(&self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize])
        } else {
            None
        }
    }

    /// Whether `id` is a named special id.
    pub fn is_special(&self, id: u32) -> bool {
        self.specials.binary_search(&id).is_ok()
    }

    /// Number of ranks (ids with byte strings).
    pub fn ranks(&self) -> usize {
        self.offsets.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_with_skip_links() {
        let toks: Vec<&[u8]> = vec![b"ab", b"a", b"b", b"abc", b"ac"];
        let v = Vocabulary::from_tokens(&toks, vec![9], 10);
        let s: Vec<(u8, u16, u32, u32)> = v
            .trie
            .iter()
            .map(|n| (n.byte, n.depth, n.id, n.end))
            .collect();
        assert_eq!(
            s,
            vec![
                (b'a', 1, 1, 4),
                (b'b', 2, 0, 3),
                (b'c', 3, 3, 3),
                (b'c', 2, 4, 4),
                (b'b', 1, 2, 5),
            ]
        );
        assert_eq!(v.token(3), Some(&b"abc"[..]));
        assert!(v.is_special(9) && !v.is_special(3));
        assert_eq!(v.max_len, 3);
    }
}
