//! Property tests against the reference tokenizer: `tiktoken-rs` 0.12.1 (regex engine
//! fancy-regex over regex-syntax 0.8.12, Unicode 16.0.0) built with the real Kimi vocabulary
//! from the `splintr-vocab-kimi` crate and the Kimi pattern (TOKENIZER.md §6.1).
//!
//! tiktoken-rs applies neither the 400,000-code-point windows nor the 25,000-run cut (§5):
//! generated runs stay under 25,000, and long documents are compared window by window.

use k3::tokenizer::{self, bpe, pretokenize, unicode};
use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use sha2::Digest as _;
use std::path::{Path, PathBuf};

use crate::support::tokenizer as tokenizer_common;
use tokenizer_common::*;

// ------------------------------------------------------------------------------------------
// The reference setup itself.

#[test]
fn vocabulary_is_the_pinned_release_file() {
    let data = std::fs::read(root().join("tests/fixtures/tiny-k3-text/tiktoken.model")).unwrap();
    assert_eq!(data.len(), 2_795_286);
    assert_eq!(hex(&sha2::Sha256::digest(&data)), VOCAB_SHA256);
    // splintr's packed copy holds exactly the same ranks.
    let t = tok();
    let ranks = splintr_ranks();
    assert_eq!(ranks.len(), t.num_ranks());
    for (bytes, rank) in &ranks {
        assert_eq!(t.vocab().token(*rank), bytes.as_slice());
    }
    assert_eq!(t.vocab_size(), 163_840);
    assert_eq!(t.vocab().max_token_len(), 256);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The generated tables have the reference's Unicode version, and every class of the Kimi
/// pattern, as regex-syntax 0.8.12 (the reference's pattern parser) resolves it, equals ours.
#[test]
fn unicode_tables_match_the_reference_regex_classes() {
    assert_eq!(unicode::UNICODE_VERSION, "16.0.0");
    assert!(unicode::UNICODE_SOURCE.contains("16.0.0"));
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).unwrap();
    assert!(
        lock.contains("name = \"regex-syntax\"\nversion = \"0.8.12\""),
        "the reference's regex-syntax must be 0.8.12 (Unicode 16.0.0)"
    );
    type Pred = fn(u8) -> bool;
    let classes: &[(&str, Pred)] = &[
        (r"[\p{Han}]", |f| f & unicode::HAN != 0),
        (r"[^\r\n\p{L}\p{N}]", unicode::is_pre),
        (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]", |f| {
            f & unicode::UP != 0
        }),
        (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]", |f| {
            f & unicode::LOW != 0
        }),
        (r"\p{N}", |f| f & unicode::NUM != 0),
        (r"\p{L}", |f| f & unicode::LETTER != 0),
        (r"\p{M}", |f| f & unicode::MARK != 0),
        (r"[^\s\p{L}\p{N}]", unicode::is_punct),
        (r"\s", |f| f & unicode::WS != 0),
        (r"[\r\n]", |f| f & unicode::NL != 0),
    ];
    let table = unicode::Classes::get();
    for (pattern, pred) in classes {
        let hir = regex_syntax::Parser::new().parse(pattern).unwrap();
        let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(cls)) = hir.kind()
        else {
            panic!("{pattern}: not a Unicode class");
        };
        let mut inside = vec![false; 0x110000];
        for r in cls.ranges() {
            for c in r.start() as u32..=r.end() as u32 {
                inside[c as usize] = true;
            }
        }
        let mut diffs = Vec::new();
        for c in (0..0x110000u32).filter(|c| char::from_u32(*c).is_some()) {
            if inside[c as usize] != pred(table.flags(c)) {
                diffs.push(format!("U+{c:04X}"));
            }
        }
        assert!(
            diffs.is_empty(),
            "{pattern}: {} differences, e.g. {:?}",
            diffs.len(),
            &diffs[..diffs.len().min(10)]
        );
    }
}

/// The contraction case folding of §6.2 is the reference's: `(?i)` classes of regex-syntax.
#[test]
fn contraction_case_folding_matches_the_reference() {
    for c in "strevmld".chars() {
        let hir = regex_syntax::Parser::new()
            .parse(&format!("(?i){c}"))
            .unwrap();
        let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(cls)) = hir.kind()
        else {
            panic!("(?i){c}: not a class");
        };
        let got: Vec<char> = cls
            .ranges()
            .iter()
            .flat_map(|r| r.start()..=r.end())
            .collect();
        let mut want = vec![c.to_ascii_uppercase(), c];
        if c == 's' {
            want.push('ſ');
        }
        assert_eq!(got, want, "(?i){c}");
    }
}

// ------------------------------------------------------------------------------------------
// Property tests.

/// Pieces of text drawn from every script class, whitespace shapes, digit runs, punctuation.
fn atom() -> impl Strategy<Value = String> {
    let sets: Vec<&'static [&'static str]> = vec![
        // Han (incl. Ext. B, 〇 which is Nl, radicals which are So)
        &["中", "文", "你好", "世界", "𠀀", "〇", "⺀", "漢字", "々"],
        // kana, prolonged sound mark (Lm, Common), halfwidth
        &["あ", "カタカナ", "ー", "ｶﾞ", "ゝ", "ひらがな"],
        // Hangul
        &["한국어", "ᄀ", "ᅡ", "각"],
        // Latin: cases, titlecase, modifier letters, accents, combining marks
        &[
            "a", "B", "hello", "World", "HELLO", "ǅ", "ʰ", "é", "É", "ß", "ﬁ", "e\u{301}",
            "\u{301}", "A\u{308}", "\u{20DD}", "ſ", "K", "İ", "ı",
        ],
        // Cyrillic, Greek
        &["привет", "МИР", "ς", "Ωμέγα", "ΣΊΣΥΦΟΣ"],
        // Arabic (marks, digits), Hebrew (niqqud)
        &["مرحبا", "\u{64E}", "٣٤٥", "שָׁלוֹם", "א"],
        // Thai, Devanagari
        &["สวัสดี", "๑๒", "नमस्ते", "क्षत्रिय", "\u{94D}", "१२३"],
        // emoji, ZWJ, skin tones, VS16, flags, tags
        &[
            "😀",
            "👨\u{200D}👩\u{200D}👧",
            "👍🏽",
            "❤\u{FE0F}",
            "🇫🇷",
            "🏴\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}",
            "\u{200D}",
        ],
        // unassigned, private use, noncharacters
        &[
            "\u{378}",
            "\u{530}",
            "\u{E000}",
            "\u{10FFFF}",
            "\u{2FFFE}",
            "\u{E0080}",
            "\u{FFFF}",
        ],
        // apostrophes and contractions
        &[
            "'", "’", "'s", "'S", "'ſ", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M",
            "'ll", "'LL", "'lL", "'d", "'D", "'x", "''",
        ],
        // whitespace shapes (incl. sp-only U+001C–U+001F and White_Space-only U+0085 etc.)
        &[
            " ", "  ", "   ", "\t", "\n", "\r", "\r\n", "\n\n", " \n", "\t\n ", "\u{0B}", "\u{0C}",
            "\u{85}", "\u{A0}", "\u{3000}", "\u{2028}", "\u{1680}", "\u{200A}", "\u{1C}", "\u{1F}",
            "\u{200B}", "\u{180E}",
        ],
        // digits and other numbers
        &["0", "7", "12", "345", "6789", "１２", "²", "①", "Ⅻ", "½"],
        // punctuation, symbols, "!/" before newlines
        &[
            "!",
            "/",
            "!/\n",
            "/\n\n",
            " !",
            " /",
            "...",
            "—",
            "«",
            "»",
            "。",
            "、",
            "「",
            "」",
            "$",
            "%",
            "<|",
            "|>",
            "<|open|>",
            "[EOS]",
            "<|reserved_token_163700|>",
            "\\",
            "#",
            "@",
            "{",
            "}",
            "(",
            ")",
            "\u{7F}",
            "\u{0}",
        ],
    ];
    let sets: Vec<BoxedStrategy<String>> = sets
        .into_iter()
        .map(|s| prop::sample::select(s).prop_map(str::to_string).boxed())
        .collect();
    prop_oneof![
        8 => prop::strategy::Union::new(sets),
        // arbitrary code points, assigned or not
        2 => any::<char>().prop_map(|c| c.to_string()),
        // runs of one whitespace character or digit
        1 => (prop::sample::select(vec![" ", "\t", "\n", "\r\n", "7", "a", "!", "中", "\u{A0}"]), 1usize..60)
            .prop_map(|(s, n)| s.repeat(n)),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(atom(), 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn same_ids_as_reference_on_mixed_scripts(s in text()) {
        check(&s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    /// The flat-array merge, the heap merge and the literal §8 loop agree on every piece.
    #[test]
    fn bpe_paths_agree_with_the_literal_algorithm(s in text()) {
        let v = tok().vocab();
        for piece in pretokenize::split(&s) {
            let b = piece.as_bytes();
            let want = bpe::reference_merge(v, b);
            prop_assert_eq!(&bpe::merge_with(v, b, false), &want, "small {:?}", piece);
            prop_assert_eq!(&bpe::merge_with(v, b, true), &want, "large {:?}", piece);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn same_ids_as_reference_on_arbitrary_strings(s in any::<String>()) {
        check(&s);
    }
}

/// Long runs near the cut: one character repeated up to 25,000 times (tiktoken-rs applies no
/// cut, and the official cut only starts at the 25,001st).
#[test]
fn same_ids_on_long_runs_below_the_cut() {
    for unit in [
        " ", "a", "A", "7", "!", "中", "\n", "é", "ab", " a", "\u{301}", "😀", "\r\n",
    ] {
        for n in [
            1000,
            24_999 / unit.chars().count(),
            25_000 / unit.chars().count(),
        ] {
            check(&unit.repeat(n));
            // Framed by characters of the other sp class, so the run length stays n.
            let frame = if tokenizer::slices::sp(unit.chars().next().unwrap() as u32) {
                "x"
            } else {
                " "
            };
            check(&format!("{frame}{}{frame}", unit.repeat(n)));
        }
    }
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if !p.ends_with("fixtures") && !p.ends_with("target") {
                source_files(&p, out);
            }
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("rs" | "md" | "toml")
        ) {
            out.push(p);
        }
    }
}

/// The project's own source files: identical ids and byte-exact round trips.
#[test]
fn project_sources_round_trip_and_match() {
    let mut files = Vec::new();
    for d in ["src", "tests", "xtask", "bench", "kernels"] {
        if root().join(d).is_dir() {
            source_files(&root().join(d), &mut files);
        }
    }
    for f in ["Cargo.toml", "DEVELOPERS.md", "README.md"] {
        files.push(root().join(f));
    }
    assert!(files.len() > 10);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let ids = tok().encode(&text, false);
        assert_eq!(
            tok().decode(&ids).unwrap(),
            text.as_bytes(),
            "{}",
            f.display()
        );
        // The reference applies no run cut: compare only files without a run over 25,000.
        if longest_run(&text) <= 25_000 {
            assert_eq!(ids, reference_encode(&text, false), "{}", f.display());
        }
    }
}

/// A multi-megabyte mixed-script document (more than one 400,000-code-point window).
#[test]
fn multi_megabyte_mixed_document() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = text();
    let mut doc = String::new();
    while doc.len() < 3_000_000 {
        doc.push_str(&strat.new_tree(&mut runner).unwrap().current());
    }
    assert!(doc.chars().count() > 2 * tokenizer::slices::WINDOW);
    let ids = tok().encode(&doc, false);
    assert_eq!(tok().decode(&ids).unwrap(), doc.as_bytes());
    assert_eq!(ids, reference_encode(&doc, false));
    assert_eq!(tok().encode(&doc, true), reference_encode(&doc, true));
}
