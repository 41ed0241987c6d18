//! The 400,000-code-point windows and the 25,000-run cut (TOKENIZER.md §5), with the slices
//! worked out by hand from §5; each hand-made slice is then encoded by the reference
//! tokenizer (which applies neither rule itself), and the engine must produce the
//! concatenation. Also the linear-size pathological pieces.

use crate::support::tokenizer as tokenizer_common;
use k3::tokenizer::slices::{slices, MAX_RUN, WINDOW};
use tokenizer_common::*;

/// Reference ids of each hand-made slice, concatenated.
fn expect(parts: &[&str], allow_special: bool) -> Vec<u32> {
    let mut v = Vec::new();
    for p in parts {
        if allow_special {
            v.extend(reference().encode_with_special_tokens(p));
        } else {
            v.extend(reference().encode_ordinary(p));
        }
    }
    v
}

fn lens(text: &str) -> Vec<usize> {
    slices(text).iter().map(|s| s.chars().count()).collect()
}

#[test]
fn run_of_25000_is_not_cut_25001_is() {
    let a = "a".repeat(MAX_RUN);
    assert_eq!(lens(&a), [25_000]);
    assert_eq!(tok().encode(&a, false), expect(&[&a], false));
    let a1 = "a".repeat(MAX_RUN + 1);
    assert_eq!(lens(&a1), [25_000, 1]);
    assert_eq!(tok().encode(&a1, false), expect(&[&a, "a"], false));
    // Space runs are cut the same way: 50,001 spaces = 25,000 | 25,000 | 1.
    let s = " ".repeat(2 * MAX_RUN + 1);
    assert_eq!(lens(&s), [25_000, 25_000, 1]);
    let sp = " ".repeat(MAX_RUN);
    assert_eq!(tok().encode(&s, false), expect(&[&sp, &sp, " "], false));
}

#[test]
fn cut_falls_inside_a_word_after_a_prefix() {
    // "x" + 30,000 "a": one non-space run of 30,001, cut before its 25,001st code point.
    let text = format!("x{}", "a".repeat(30_000));
    assert_eq!(lens(&text), [25_000, 5_001]);
    let first = format!("x{}", "a".repeat(24_999));
    let second = "a".repeat(5_001);
    assert_eq!(
        tok().encode(&text, false),
        expect(&[&first, &second], false)
    );
    // The sp class is §5's 29 code points: U+001C is sp (not White_Space), U+200B neither.
    let t2 = format!("{}\u{1C}{}", "b".repeat(20_000), "b".repeat(20_000));
    assert_eq!(lens(&t2), [40_001]);
    let t3 = format!("{}\u{200B}{}", "b".repeat(20_000), "b".repeat(20_000));
    assert_eq!(lens(&t3), [25_000, 15_001]);
}

#[test]
fn mixed_text_is_never_cut() {
    let text = "ab ".repeat(40_000); // 120,000 code points, runs of 2 and 1
    assert_eq!(lens(&text), [120_000]);
    assert_eq!(tok().encode(&text, false), expect(&[&text], false));
}

#[test]
fn window_boundary_splits_text_and_resets_the_run() {
    // "x " × 200,000 is exactly one window; "yz" starts the next. Without the window the last
    // pieces would be " x" " yz"; with it window 1 ends in a lone trailing space.
    let w1 = "x ".repeat(WINDOW / 2);
    let text = format!("{w1}yz");
    assert_eq!(lens(&text), [400_000, 2]);
    assert_eq!(tok().encode(&text, false), expect(&[&w1, "yz"], false));
    assert_ne!(tok().encode(&text, false), expect(&[&text], false));

    // " " + 400,009 "a": window 1 = " " + 399,999 "a", cut every 25,000 a's; window 2 = 10 a's,
    // its run counted afresh (without the reset the tail would be 25,000 | 9).
    let text = format!(" {}", "a".repeat(WINDOW + 9));
    let mut want_lens = vec![25_001];
    want_lens.extend([25_000; 14]);
    want_lens.push(24_999);
    want_lens.push(10);
    assert_eq!(lens(&text), want_lens);
    let first = format!(" {}", "a".repeat(MAX_RUN));
    let mid = "a".repeat(MAX_RUN);
    let last = "a".repeat(24_999);
    let mut parts: Vec<&str> = vec![&first];
    parts.extend([mid.as_str(); 14]);
    parts.push(&last);
    parts.push("aaaaaaaaaa");
    assert_eq!(tok().encode(&text, false), expect(&parts, false));
}

#[test]
fn special_names_straddling_a_boundary_are_not_recognised() {
    // Window boundary: "<|open|>" starts at code point 399,997.
    let head = format!("{}b", "a ".repeat(199_998));
    let text = format!("{head}<|open|>c");
    assert_eq!(head.chars().count(), 399_997);
    let w1 = format!("{head}<|o");
    assert_eq!(tok().encode(&text, true), expect(&[&w1, "pen|>c"], true));
    assert!(!tok().encode(&text, true).contains(&163_587));
    // Slice boundary: "[EOS]" inside a non-space run cut at 25,000.
    let text = format!("{}[EOS]", "a".repeat(24_998));
    assert_eq!(lens(&text), [25_000, 3]);
    let s1 = format!("{}[E", "a".repeat(24_998));
    assert_eq!(tok().encode(&text, true), expect(&[&s1, "OS]"], true));
    // Inside one slice it is recognised.
    let text = format!("{} [EOS]", "a".repeat(24_998));
    assert_eq!(tok().encode(&text, true).last(), Some(&163_585));
}

#[test]
fn empty_and_tiny_texts() {
    assert!(slices("").is_empty());
    assert_eq!(lens("a"), [1]);
    assert!(tok().encode("", false).is_empty());
}

/// Tens of thousands of repeats of one character form one huge piece (or, past the cut, a
/// few): the heap BPE handles them (timing lives in bench/; here the ids must be right).
#[test]
fn pathological_repeats() {
    for unit in ["a", "!", "😀", "中", "\u{301}", " ", "\n"] {
        let text = unit.repeat(60_000);
        let mut parts: Vec<String> = Vec::new();
        let mut left = 60_000;
        while left > 0 {
            let n = left.min(MAX_RUN);
            parts.push(unit.repeat(n));
            left -= n;
        }
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        assert_eq!(tok().encode(&text, false), expect(&refs, false), "{unit:?}");
        assert_eq!(
            tok().decode(&tok().encode(&text, false)).unwrap(),
            text.as_bytes()
        );
    }
}
