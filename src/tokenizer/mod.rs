//! The Kimi tokenizer (TOKENIZER.md): byte-level BPE over `tiktoken.model`, the hand-written
//! Kimi pre-tokeniser, the 256 special tokens of `tokenizer_config.json`, and streaming decode.
//!
//! ```text
//! encode(text, allow_special)                                   §4
//!   windows of 400,000 code points → slices by the 25,000-run rule   §5 (slices.rs)
//!   [allow_special: cut at the leftmost special name]                §3 (special.rs)
//!   pre-tokenise into pieces                                         §6 (pretokenize.rs)
//!   BPE each piece's bytes into ranks                                §8 (bpe.rs)
//! decode(ids) → bytes; StreamDecoder → printable text               §9 (stream.rs)
//! ```

pub mod bpe;
pub mod pretokenize;
pub mod slices;
pub mod special;
pub mod stream;
pub mod tiktoken;
pub mod unicode;
#[rustfmt::skip]
pub mod unicode_tables;

pub use special::{SpecialTokens, NUM_SPECIAL};
pub use stream::StreamDecoder;
pub use tiktoken::Vocab;

use crate::error::{Error, Result};
use std::path::Path;

/// File names read from a tokenizer directory (TOKENIZER.md §1).
pub const TIKTOKEN_FILE: &str = "tiktoken.model";
/// See [`TIKTOKEN_FILE`].
pub const CONFIG_FILE: &str = "tokenizer_config.json";

/// Name of the end-of-sequence special token (§11).
pub const EOS: &str = "[EOS]";
/// Name of the end-of-message special token (§11).
pub const END_OF_MSG: &str = "<|end_of_msg|>";
/// XTML control tokens of the chat template (§10).
pub const OPEN: &str = "<|open|>";
/// See [`OPEN`].
pub const CLOSE: &str = "<|close|>";
/// See [`OPEN`].
pub const SEP: &str = "<|sep|>";

/// A loaded tokenizer: N BPE ranks (ids 0 … N−1) and 256 special ids (N … N+255).
pub struct Tokenizer {
    vocab: Vocab,
    special: SpecialTokens,
}

impl Tokenizer {
    /// Loads `DIR/tiktoken.model` and `DIR/tokenizer_config.json` (§1–§3).
    ///
    /// Errors (exit 2) name the file and, for the vocabulary, the line: a missing or unreadable
    /// file, any defect listed in [`Vocab::parse`] and [`SpecialTokens::new`], a config that is
    /// not JSON or lacks `added_tokens_decoder`.
    pub fn load(dir: &Path) -> Result<Tokenizer> {
        let tik = dir.join(TIKTOKEN_FILE);
        let cfg = dir.join(CONFIG_FILE);
        for p in [&tik, &cfg] {
            if !p.is_file() {
                return Err(Error::invalid(format!(
                    "{}: tokenizer file not found (a tokenizer directory holds {TIKTOKEN_FILE} and {CONFIG_FILE})",
                    p.display()
                )));
            }
        }
        let read = |p: &Path| {
            std::fs::read(p)
                .map_err(|e| Error::invalid(format!("{}: cannot read: {e}", p.display())))
        };
        let vocab = Vocab::parse(&read(&tik)?, &tik.display().to_string())?;
        let cfg_text = read(&cfg)?;
        let named = special::parse_added_tokens(&cfg_text, &cfg.display().to_string())?;
        let special = SpecialTokens::new(vocab.len() as u32, &named, &cfg.display().to_string())?;
        Ok(Tokenizer { vocab, special })
    }

    /// A tokenizer from an already parsed vocabulary and special block (`special.base()` must
    /// equal `vocab.len()`, else an invalid-input error).
    pub fn from_parts(vocab: Vocab, special: SpecialTokens) -> Result<Tokenizer> {
        if special.base() as usize != vocab.len() {
            return Err(Error::invalid(format!(
                "special tokens start at id {} but the vocabulary has {} ranks",
                special.base(),
                vocab.len()
            )));
        }
        Ok(Tokenizer { vocab, special })
    }

    /// Total number of ids V = N + 256.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len() + NUM_SPECIAL as usize
    }

    /// Number of BPE ranks N (the first special id).
    pub fn num_ranks(&self) -> usize {
        self.vocab.len()
    }

    /// Checks §2's "N + 256 must equal `vocab_size`" against the model config's value
    /// (error naming both numbers, exit 2).
    pub fn check_vocab_size(&self, config_vocab_size: usize) -> Result<()> {
        if self.vocab_size() != config_vocab_size {
            return Err(Error::invalid(format!(
                "tokenizer has {} ids ({} ranks + {NUM_SPECIAL} special) but config vocab_size is {config_vocab_size}",
                self.vocab_size(),
                self.vocab.len()
            )));
        }
        Ok(())
    }

    /// Memory the tokenizer holds, in bytes (vocabulary tables, special names, the shared
    /// Unicode class table): the "tokenizer" line of the memory plan (ENGINE.md §4). About
    /// 6.3 MB for the released files.
    pub fn memory_bytes(&self) -> usize {
        self.vocab.heap_bytes()
            + (0..NUM_SPECIAL)
                .filter_map(|i| self.special.name(self.special.base() + i))
                .map(|n| n.len() + 24)
                .sum::<usize>()
            + unicode::Classes::get().heap_bytes()
    }

    /// The BPE vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// The special-token block.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// The id of the special token named `name` (e.g. [`EOS`], [`END_OF_MSG`]).
    pub fn special_id(&self, name: &str) -> Option<u32> {
        self.special.id(name)
    }

    /// The ids that end a turn (§11): `[EOS]` and `<|end_of_msg|>`, those that exist.
    pub fn end_of_turn_ids(&self) -> Vec<u32> {
        [EOS, END_OF_MSG]
            .iter()
            .filter_map(|n| self.special_id(n))
            .collect()
    }

    /// Checks §3's chat-mode requirement: ids N+1 … N+5 are named `[EOS]`, `<|end_of_msg|>`,
    /// `<|open|>`, `<|close|>`, `<|sep|>` (163,585 … 163,589 in the release). Error (exit 2)
    /// naming the first id that differs and both names.
    pub fn check_chat_specials(&self) -> Result<()> {
        let base = self.special.base();
        for (k, want) in [EOS, END_OF_MSG, OPEN, CLOSE, SEP].iter().enumerate() {
            let id = base + 1 + k as u32;
            let got = self.special.name(id).unwrap_or("");
            if got != *want {
                return Err(Error::invalid(format!(
                    "{CONFIG_FILE}: chat mode needs special id {id} to be `{want}`, found `{got}`"
                )));
            }
        }
        Ok(())
    }

    /// Encodes `text` into ids (§4). With `allow_special`, special-token names in the text
    /// become their ids; otherwise they are plain text. Empty text gives no ids.
    pub fn encode(&self, text: &str, allow_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut scratch = bpe::Scratch::default();
        slices::for_each_slice(text, |slice| {
            if allow_special {
                let b = slice.as_bytes();
                let mut pos = 0;
                while let Some((at, len, id)) = self.special.find(b, pos) {
                    self.encode_plain(&slice[pos..at], &mut scratch, &mut out);
                    out.push(id);
                    pos = at + len;
                }
                self.encode_plain(&slice[pos..], &mut scratch, &mut out);
            } else {
                self.encode_plain(slice, &mut scratch, &mut out);
            }
        });
        out
    }

    /// Pre-tokenises and BPE-encodes one stretch of plain text (end of text at its end).
    fn encode_plain(&self, text: &str, scratch: &mut bpe::Scratch, out: &mut Vec<u32>) {
        for piece in pretokenize::Pieces::new(text) {
            bpe::encode_piece(&self.vocab, piece, scratch, out);
        }
    }

    /// Encodes raw bytes (a prompt file read verbatim): they must be valid UTF-8 (§4 step 1),
    /// else an invalid-input error naming the byte offset of the first bad sequence.
    pub fn encode_bytes(&self, bytes: &[u8], allow_special: bool) -> Result<Vec<u32>> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Error::invalid(format!(
                "text is not valid UTF-8: invalid byte sequence at byte offset {}",
                e.valid_up_to()
            ))
        })?;
        Ok(self.encode(text, allow_special))
    }

    /// The bytes of one id (§9): a rank's raw bytes, or a special token's name.
    /// Error (exit 2) for an id ≥ V.
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        if (id as usize) < self.vocab.len() {
            Ok(self.vocab.token(id))
        } else if let Some(name) = self.special.name(id) {
            Ok(name.as_bytes())
        } else {
            Err(Error::invalid(format!(
                "token id {id} is out of range (the vocabulary has {} ids)",
                self.vocab_size()
            )))
        }
    }

    /// The concatenated bytes of `ids` (§9). Error (exit 2) naming the first id ≥ V.
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id)?);
        }
        Ok(out)
    }

    /// `decode` converted to text with U+FFFD for maximal ill-formed subparts (§9; the
    /// `generated_text` of the run report).
    pub fn decode_lossy(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode(ids)?).into_owned())
    }
}

/// True when `dir` holds at least one of the two tokenizer files (then it is meant as a
/// tokenizer directory, and [`Tokenizer::load`] names whichever is missing).
pub fn looks_like_tokenizer_dir(dir: &Path) -> bool {
    dir.join(TIKTOKEN_FILE).is_file() || dir.join(CONFIG_FILE).is_file()
}
