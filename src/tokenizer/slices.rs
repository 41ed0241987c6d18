//! Windows and run splitting (TOKENIZER.md §5): a text is cut into windows of 400,000 code
//! points, and each window into slices so that no slice holds more than 25,000 consecutive
//! code points of the same `sp` class. Slices are encoded independently.

/// Code points per window (§5).
pub const WINDOW: usize = 400_000;
/// Longest run of same-class code points inside one slice (§5).
pub const MAX_RUN: usize = 25_000;

/// `sp(c)` of §5: exactly 29 code points (Python's `str.isspace`), not White_Space.
#[inline]
pub fn sp(cp: u32) -> bool {
    matches!(
        cp,
        0x09..=0x0D
            | 0x1C..=0x20
            | 0x85
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
    )
}

/// Calls `f` with every slice of `text`, in order (§5). Empty text gives no slices.
pub fn for_each_slice<'a>(text: &'a str, mut f: impl FnMut(&'a str)) {
    let b = text.as_bytes();
    // No run or window can be cut: every code point is at least one byte.
    if b.len() <= MAX_RUN {
        if !b.is_empty() {
            f(text);
        }
        return;
    }
    let mut start = 0; // start of the current slice
    let mut in_window = 0usize; // code points of the current window seen so far
    let mut run_len = 0usize;
    let mut run_sp = false;
    let mut i = 0;
    while i < b.len() {
        let b0 = b[i];
        let (cp, len) = if b0 < 0x80 {
            (b0 as u32, 1)
        } else {
            super::unicode::decode_at(b, i)
        };
        if in_window == WINDOW {
            f(&text[start..i]);
            start = i;
            in_window = 0;
        }
        let s = sp(cp);
        if in_window == 0 {
            run_sp = s;
            run_len = 0;
        }
        if s != run_sp {
            run_len = 1;
            run_sp = s;
        } else {
            run_len += 1;
            if run_len > MAX_RUN {
                f(&text[start..i]);
                start = i;
                run_len = 1;
            }
        }
        in_window += 1;
        i += len;
    }
    if start < b.len() {
        f(&text[start..]);
    }
}

/// The slices of `text` as a vector (tests and tools).
pub fn slices(text: &str) -> Vec<&str> {
    let mut v = Vec::new();
    for_each_slice(text, |s| v.push(s));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sp_is_exactly_29_code_points() {
        assert_eq!((0..0x110000).filter(|&c| sp(c)).count(), 29);
        for c in (0..0x110000u32).filter_map(char::from_u32) {
            // Python's str.isspace: Rust's is_whitespace plus U+001C–U+001F, minus none.
            let py = c.is_whitespace() || ('\u{1C}'..='\u{1F}').contains(&c);
            assert_eq!(sp(c as u32), py, "U+{:04X}", c as u32);
        }
    }
}
