//! Streaming decode (TOKENIZER.md §9): token bytes in, printable text out, never part of a
//! UTF-8 sequence. Ill-formed bytes print as one U+FFFD per maximal subpart as soon as they
//! can no longer become valid; a valid but incomplete tail (at most 3 bytes) waits for the next
//! token, and prints as one U+FFFD at [`StreamDecoder::finish`]. Everything streamed equals
//! `String::from_utf8_lossy` of all the bytes at once.

/// Incremental UTF-8 decoder for generated tokens.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    /// Bytes of an incomplete but so far valid sequence (0–3 bytes).
    held: Vec<u8>,
}

/// The allowed range of the second byte after lead byte `b0`, and the sequence length
/// (Unicode Table 3-7, well-formed UTF-8 byte sequences); None for a byte that cannot lead.
#[inline]
fn lead(b0: u8) -> Option<(u8, u8, usize)> {
    Some(match b0 {
        0xC2..=0xDF => (0x80, 0xBF, 2),
        0xE0 => (0xA0, 0xBF, 3),
        0xE1..=0xEC | 0xEE..=0xEF => (0x80, 0xBF, 3),
        0xED => (0x80, 0x9F, 3),
        0xF0 => (0x90, 0xBF, 4),
        0xF1..=0xF3 => (0x80, 0xBF, 4),
        0xF4 => (0x80, 0x8F, 4),
        _ => return None,
    })
}

impl StreamDecoder {
    /// A decoder with nothing held.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the bytes of one token; returns the text that can be printed now (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut i = 0;
        while i < buf.len() {
            // Fast path: a run of complete valid UTF-8.
            match std::str::from_utf8(&buf[i..]) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // `good` bytes from i are valid UTF-8 by from_utf8's contract.
                    out.push_str(std::str::from_utf8(&buf[i..i + good]).unwrap_or_default());
                    i += good;
                    match e.error_len() {
                        Some(bad) => {
                            // A maximal ill-formed subpart: one U+FFFD.
                            out.push('\u{FFFD}');
                            i += bad;
                        }
                        None => {
                            // Valid but incomplete tail: hold it.
                            self.held.extend_from_slice(&buf[i..]);
                            break;
                        }
                    }
                }
            }
        }
        debug_assert!(self.held.len() <= 3 && self.held.first().is_none_or(|&b| lead(b).is_some()));
        out
    }

    /// Ends the stream: a held incomplete tail prints as one U+FFFD (empty if nothing held).
    pub fn finish(&mut self) -> String {
        if self.held.is_empty() {
            String::new()
        } else {
            self.held.clear();
            "\u{FFFD}".to_string()
        }
    }

    /// Bytes currently held back (an incomplete character).
    pub fn held(&self) -> &[u8] {
        &self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(chunks: &[&[u8]]) -> String {
        let mut d = StreamDecoder::new();
        let mut s = String::new();
        for c in chunks {
            s.push_str(&d.push(c));
        }
        s + &d.finish()
    }

    #[test]
    fn split_characters_and_invalid_sequences() {
        let e = "é€😀".as_bytes();
        assert_eq!(stream(&[&e[..1], &e[1..3], &e[3..6], &e[6..]]), "é€😀");
        // Held tail printed at the end.
        assert_eq!(stream(&[b"a", &[0xF0, 0x9F]]), "a\u{FFFD}");
        // E0 80 can never become valid: two U+FFFD at once (E0, then 80).
        let mut d = StreamDecoder::new();
        assert_eq!(d.push(&[0xE0]), "");
        assert_eq!(d.push(&[0x80]), "\u{FFFD}\u{FFFD}");
        assert_eq!(d.push(&[0xED, 0xA0]), "\u{FFFD}\u{FFFD}");
        assert_eq!(d.push(&[0xF4, 0x8F]), "");
        assert_eq!(d.push(&[0xBF, 0x41]), "\u{FFFD}A");
        assert_eq!(d.finish(), "");
    }

    #[test]
    fn lead_table_matches_std() {
        for b0 in 0..=255u8 {
            for b1 in 0..=255u8 {
                let std_ok = match std::str::from_utf8(&[b0, b1]) {
                    Ok(_) => true,
                    Err(e) => e.error_len().is_none() && e.valid_up_to() == 0,
                };
                let ours = match lead(b0) {
                    Some((lo, hi, 2)) => (lo..=hi).contains(&b1),
                    Some((lo, hi, _)) => (lo..=hi).contains(&b1),
                    None => b0 < 0x80 && b1 < 0x80,
                };
                if b0 >= 0x80 {
                    assert_eq!(std_ok, ours, "{b0:02X} {b1:02X}");
                }
            }
        }
    }
}
