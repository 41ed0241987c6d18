//! Tokenizer encode throughput against tiktoken-rs 0.12.1 in the same run (TOKENIZER.md;
//! issue 5): two 10 MB mixed-script documents (natural text from the tokenizer fixture, and a
//! synthetic one with random CJK/Hangul that stresses the BPE), both tokenizers with the real
//! Kimi vocabulary,
//! ids checked equal, best of several repetitions. Also the pathological pieces (tens of
//! thousands of repeats of one character), whose per-byte cost must not grow with the
//! piece length (the BPE is not quadratic).
//!
//! Run: `cargo run --release -p k3-bench --bin tokenizer [-- --out bench/results/tokenizer-NAME.tsv]`
//! (`-- --k3-only` times only the engine, for profiling).
//! Output: TSV on stdout (and in `--out`), one row per measurement; the figure that matters is
//! the ratio `k3 MB/s ÷ tiktoken-rs MB/s` on the same document in the same run.

use k3::tokenizer::{slices::WINDOW, Tokenizer};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;
use tiktoken_rs::CoreBPE;

// The pattern, shared with the tests (one copy).
include!("../../../tests/engine/support/tokenizer/kimi_pattern.rs");

/// xorshift64*: a fixed, dependency-free stream so the document is the same in every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Natural text: the 81 texts of the tokenizer fixture (real sentences in every script, code,
/// whitespace shapes, digit runs, the 20 KB mixed document) in random order, separated by
/// blank lines, up to `size` bytes.
fn natural_document(size: usize) -> String {
    let texts = fixture_texts(true);
    let mut r = Rng(0x2545_F491_4F6C_DD1D);
    let mut doc = String::with_capacity(size + 32_768);
    while doc.len() < size {
        doc.push_str(&texts[r.below(texts.len())]);
        doc.push_str("\n\n");
    }
    doc
}

/// Code and documents from the tokenizer fixture (fixed data, so the benchmark document is
/// the same at every commit): the code, path, URL, LaTeX and mixed-document cases.
fn fixture_texts(all: bool) -> Vec<String> {
    let path = repo().join("tests/fixtures/tokenizer/cases.json");
    let data = std::fs::read(&path).expect("read cases.json");
    let root = k3::json::parse(&data).expect("parse cases.json");
    let mut out = Vec::new();
    for case in root.get("cases").and_then(|c| c.as_array()).expect("cases") {
        let name = case.get("name").and_then(|n| n.as_str()).unwrap_or("");
        if !all
            && !["code_", "math_", "url", "path", "mixed_doc"]
                .iter()
                .any(|p| name.contains(p))
        {
            continue;
        }
        let b64 = case
            .get("text_b64")
            .and_then(|t| t.as_str())
            .expect("text_b64");
        out.push(String::from_utf8(base64_decode(b64)).expect("UTF-8"));
    }
    assert!(out.len() >= 5);
    out
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    } as u32;
    let b = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::new();
    for c in b.chunks(4) {
        let mut v = 0;
        for (k, &ch) in c.iter().enumerate() {
            v |= val(ch) << (18 - 6 * k);
        }
        out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8][..c.len() - 1]);
    }
    out
}

/// A deterministic mixed-script document of at least `size` bytes: English prose, source
/// code, Chinese, Japanese, Korean, Cyrillic, Greek, Arabic, Hebrew, Thai, Devanagari, emoji,
/// numbers, whitespace shapes.
fn document(size: usize) -> String {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let en = [
        "the",
        "model",
        "streams",
        "experts",
        "from",
        "disk",
        "and",
        "keeps",
        "a",
        "bounded",
        "cache",
        "of",
        "weights",
        "The",
        "Logits",
        "are",
        "bit-identical",
        "at",
        "every",
        "budget",
        "It's",
        "we'll",
        "don't",
        "memory",
        "throughput",
        "tokenizer",
        "France",
        "capital",
        "is",
    ];
    let cyr = [
        "привет",
        "мир",
        "модель",
        "Память",
        "кэш",
        "эксперты",
        "данные",
    ];
    let el = ["γειά", "σου", "κόσμε", "Μοντέλο", "μνήμη"];
    let ar = ["مرحبا", "بالعالم", "النموذج", "الذاكرة", "٣٤٥"];
    let he = ["שלום", "עולם", "מודל", "זיכרון"];
    let th = ["สวัสดี", "ชาวโลก", "แบบจำลอง", "หน่วยความจำ"];
    let hi = ["नमस्ते", "दुनिया", "मॉडल", "स्मृति", "क्षत्रिय"];
    let ja = [
        "こんにちは",
        "世界",
        "モデル",
        "メモリ",
        "です。",
        "キャッシュ",
        "ー",
    ];
    let emoji = [
        "😀",
        "👍🏽",
        "👨\u{200D}👩\u{200D}👧",
        "🇫🇷",
        "❤\u{FE0F}",
        "🎉",
    ];
    let punct = [
        ", ", ". ", "! ", "? ", "; ", ": ", " — ", " (", ") ", "\n", "\n\n", "\r\n", "  ", "\t",
    ];
    let code = fixture_texts(false);
    let mut doc = String::with_capacity(size + 4096);
    while doc.len() < size {
        let kind = r.below(100);
        let words = 5 + r.below(40);
        for _ in 0..words {
            match kind {
                0..=39 => doc.push_str(r.pick(&en)),
                40..=49 => {
                    // Chinese: common CJK ideographs
                    for _ in 0..1 + r.below(6) {
                        doc.push(char::from_u32(0x4E00 + r.below(0x5000) as u32).unwrap());
                    }
                }
                50..=54 => doc.push_str(r.pick(&ja)),
                55..=59 => {
                    for _ in 0..1 + r.below(4) {
                        doc.push(char::from_u32(0xAC00 + r.below(11172) as u32).unwrap());
                    }
                }
                60..=64 => doc.push_str(r.pick(&cyr)),
                65..=66 => doc.push_str(r.pick(&el)),
                67..=69 => doc.push_str(r.pick(&ar)),
                70..=71 => doc.push_str(r.pick(&he)),
                72..=73 => doc.push_str(r.pick(&th)),
                74..=76 => doc.push_str(r.pick(&hi)),
                77..=79 => doc.push_str(r.pick(&emoji)),
                80..=84 => {
                    let _ = write!(doc, "{}", r.next() % 10u64.pow(1 + r.below(9) as u32));
                }
                _ => {
                    // a slice of code or of the mixed-script fixture document
                    let t = &code[r.below(code.len())];
                    let mut a = r.below(t.len());
                    while !t.is_char_boundary(a) {
                        a -= 1;
                    }
                    let mut b = (a + 200 + r.below(800)).min(t.len());
                    while !t.is_char_boundary(b) {
                        b -= 1;
                    }
                    doc.push_str(&t[a..b]);
                    break;
                }
            }
            doc.push_str(if r.below(6) == 0 { r.pick(&punct) } else { " " });
        }
        doc.push_str(r.pick(&punct));
    }
    doc
}

fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..reps {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(v);
    }
    (best, out.unwrap())
}

/// The reference with the §5 windows (the documents here have no run over 25,000).
fn reference_encode(bpe: &CoreBPE, text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (i, _) in text.char_indices() {
        if count == WINDOW {
            out.extend(bpe.encode_ordinary(&text[start..i]));
            start = i;
            count = 0;
        }
        count += 1;
    }
    out.extend(bpe.encode_ordinary(&text[start..]));
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out_path = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let dir = repo().join("tests/fixtures/tiny-k3-text");
    let (load_s, tok) = best_of(3, || Tokenizer::load(&dir).expect("load tokenizer"));
    let reference = {
        let v = tok.vocab();
        let enc = (0..v.len() as u32)
            .map(|r| (v.token(r).to_vec(), r))
            .collect();
        CoreBPE::new(enc, Default::default(), KIMI_PATTERN).expect("reference")
    };

    let mut rows: Vec<String> = Vec::new();
    let mut row = |r: String| {
        println!("{r}");
        rows.push(r);
    };
    row(
        "case\tbytes\tk3_s\tk3_MBps\ttiktoken_rs_s\ttiktoken_rs_MBps\tk3_over_tiktoken_rs\tids"
            .into(),
    );

    let docs = [
        ("mixed_10MB_natural", natural_document(10_000_000)),
        ("mixed_10MB_synthetic", document(10_000_000)),
    ];
    if args.iter().any(|a| a == "--k3-only") {
        // For profiling: only the engine's encode.
        for (name, doc) in &docs {
            let (s, ids) = best_of(5, || tok.encode(doc, false));
            println!(
                "{name}: k3 only: {:.2} MB/s, {} ids",
                doc.len() as f64 / 1e6 / s,
                ids.len()
            );
        }
        return;
    }
    for (name, doc) in &docs {
        let mb = doc.len() as f64 / 1e6;
        // Alternate the two so that load changes on the shared machine hit both alike.
        let (mut ours_s, mut ref_s) = (f64::INFINITY, f64::INFINITY);
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..4 {
            let (s1, v1) = best_of(1, || tok.encode(doc, false));
            let (s2, v2) = best_of(1, || reference_encode(&reference, doc));
            (ours_s, ref_s, ours, theirs) = (ours_s.min(s1), ref_s.min(s2), v1, v2);
        }
        assert!(ours == theirs, "{name}: ids differ from tiktoken-rs");
        row(format!(
            "{name}\t{}\t{ours_s:.4}\t{:.2}\t{ref_s:.4}\t{:.2}\t{:.3}\t{}",
            doc.len(),
            mb / ours_s,
            mb / ref_s,
            ref_s / ours_s,
            ours.len()
        ));
    }

    // Pathological pieces: per-byte cost at piece length n (n repeats of one character,
    // 1 MB in total). Linear BPE ⇒ MB/s roughly flat in n.
    for unit in ["a", "!", "中", "😀"] {
        for n in [1_000usize, 5_000, 25_000] {
            let piece = unit.repeat(n);
            // Newlines end each run (sp class, §5), so no run reaches the 25,000 cut.
            let sep = "\n";
            let reps = 1_000_000 / piece.len() + 1;
            let text = vec![piece.as_str(); reps].join(sep);
            let mb = text.len() as f64 / 1e6;
            let (mut s, mut rs) = (f64::INFINITY, f64::INFINITY);
            let (mut ids, mut rids) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                let (s1, v1) = best_of(1, || tok.encode(&text, false));
                let (s2, v2) = best_of(1, || reference_encode(&reference, &text));
                (s, rs, ids, rids) = (s.min(s1), rs.min(s2), v1, v2);
            }
            assert!(ids == rids, "ids differ from tiktoken-rs: {unit:?} × {n}");
            row(format!(
                "repeat_{}x{n}\t{}\t{s:.4}\t{:.2}\t{rs:.4}\t{:.2}\t{:.3}\t{}",
                unit.escape_unicode(),
                text.len(),
                mb / s,
                mb / rs,
                rs / s,
                ids.len()
            ));
        }
    }
    row(format!(
        "load_tiktoken_model\t2795286\t{load_s:.4}\t\t\t\t\t{}",
        tok.vocab_size()
    ));

    if let Some(p) = out_path {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# command: cargo run --release -p k3-bench --bin tokenizer -- --out {}",
            p.display()
        );
        let _ = writeln!(
            s,
            "# machine: {cpu}, {} cores (shared); k3 {} ({})",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            k3::VERSION,
            k3::GIT_COMMIT
        );
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let _ = writeln!(s, "# load average at the end of the run: {}", load.trim());
        let _ = writeln!(s, "# single thread each; k3 and tiktoken-rs alternated, best of 4 (documents) or 3 (repeats) wall-clock runs each; ratio = tiktoken_rs_s / k3_s (> 1: k3 faster)");
        for r in &rows {
            let _ = writeln!(s, "{r}");
        }
        std::fs::write(&p, s).expect("write results");
    }
}
