//! Loading and validation (TOKENIZER.md §1–§3), the special-token block of the release, the
//! byte/text boundary (§4 step 1, §9 decode and streaming) and the tokenize / detokenize
//! command line.

use base64::Engine as _;
use k3::tokenizer::{StreamDecoder, Tokenizer, Vocab};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-k3-text")
}

fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::load(&fixture_dir()).unwrap())
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A small valid vocabulary: the 256 bytes, then "ab", "abc", "cd", one line each.
fn small_lines() -> Vec<String> {
    let mut v: Vec<String> = (0..=255u8).map(|b| format!("{} {b}", b64(&[b]))).collect();
    v.push(format!("{} 256", b64(b"ab")));
    v.push(format!("{} 257", b64(b"abc")));
    v.push(format!("{} 258", b64(b"cd")));
    v
}

fn parse_lines(lines: &[String]) -> k3::Result<Vocab> {
    Vocab::parse(lines.join("\n").as_bytes(), "dir/tiktoken.model")
}

fn parse_err(lines: &[String]) -> String {
    let e = parse_lines(lines).err().expect("must be refused");
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.starts_with("dir/tiktoken.model: "), "{e}");
    e.message
}

#[test]
fn small_vocabulary_loads_in_any_line_order_with_crlf_and_blank_lines() {
    let mut lines = small_lines();
    lines.reverse();
    let mut text = lines.join("\r\n");
    text.push_str("\n\n\r\n");
    let v = Vocab::parse(format!("\n{text}").as_bytes(), "t").unwrap();
    assert_eq!(v.len(), 259);
    assert_eq!(v.rank(b"abc"), Some(257));
    assert_eq!(v.token(258), b"cd");
}

#[test]
fn loader_errors_name_the_line() {
    let base = small_lines();
    let with = |line: usize, s: &str| {
        let mut v = base.clone();
        v[line - 1] = s.to_string();
        v
    };
    // line 257 is "YWI= 256" (ab)
    let m = parse_err(&with(257, "YW!= 256"));
    assert!(m.contains("line 257") && m.contains("base64"), "{m}");
    let m = parse_err(&with(257, "YWI"));
    assert!(m.contains("line 257") && m.contains("no space"), "{m}");
    let m = parse_err(&with(257, "YWI= 25x"));
    assert!(m.contains("line 257") && m.contains("rank"), "{m}");
    let m = parse_err(&with(257, "YWI= 99999999999"));
    assert!(m.contains("line 257"), "{m}");
    let m = parse_err(&with(257, "YWI= 4294967296"));
    assert!(m.contains("line 257") && m.contains("2^32"), "{m}");
    let m = parse_err(&with(257, "YWI=  256"));
    assert!(m.contains("line 257"), "{m}");
    let m = parse_err(&with(257, " 256"));
    assert!(m.contains("line 257"), "{m}");
    let m = parse_err(&with(257, "YWI= 256 "));
    assert!(m.contains("line 257"), "{m}");
    let m = parse_err(&with(257, "YWI=\t256"));
    assert!(m.contains("line 257"), "{m}");
    // duplicate byte string: "ab" again with rank 259 (also keeps ranks contiguous)
    let mut v = base.clone();
    v.push(format!("{} 259", b64(b"ab")));
    let m = parse_err(&v);
    assert!(
        m.contains("duplicate token") && m.contains("line 257"),
        "{m}"
    );
    // duplicate rank
    let m = parse_err(&with(258, &format!("{} 256", b64(b"abc"))));
    assert!(
        m.contains("duplicate rank 256") && m.contains("line 257"),
        "{m}"
    );
    // gap: rank 259 with only 259 lines
    let m = parse_err(&with(259, &format!("{} 259", b64(b"cd"))));
    assert!(m.contains("line 259") && m.contains("0..258"), "{m}");
    // a missing single byte: replace byte 0x41 by another multi-byte token
    let m = parse_err(&with(0x42, &format!("{} 65", b64(b"zz"))));
    assert!(m.contains("0x41"), "{m}");
    // empty file
    let e = Vocab::parse(b"\n\n", "dir/tiktoken.model").err().unwrap();
    assert!(e.message.contains("empty"), "{e}");
}

fn write_dir(name: &str, tiktoken: Option<&[u8]>, config: Option<&str>) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tokenizer_load_{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(t) = tiktoken {
        std::fs::write(dir.join("tiktoken.model"), t).unwrap();
    }
    if let Some(c) = config {
        std::fs::write(dir.join("tokenizer_config.json"), c).unwrap();
    }
    dir
}

fn load_err(dir: &Path) -> String {
    let e = Tokenizer::load(dir).err().expect("must be refused");
    assert_eq!(e.exit_code(), 2);
    e.message
}

#[test]
fn directory_and_config_errors_name_the_file() {
    let vocab = small_lines().join("\n");
    let good_cfg = r#"{"added_tokens_decoder": {"259": {"content": "[BOS]", "special": true}}}"#;
    let d = write_dir("ok", Some(vocab.as_bytes()), Some(good_cfg));
    let t = Tokenizer::load(&d).unwrap();
    assert_eq!(t.vocab_size(), 259 + 256);
    assert_eq!(t.special_id("[BOS]"), Some(259));
    assert_eq!(t.special().name(260), Some("<|reserved_token_260|>"));

    // Chat mode needs [EOS] <|end_of_msg|> <|open|> <|close|> <|sep|> at N+1 … N+5.
    let e = t.check_chat_specials().unwrap_err();
    assert!(
        e.message.contains("260") && e.message.contains("[EOS]"),
        "{e}"
    );

    let d = write_dir("no_cfg", Some(vocab.as_bytes()), None);
    assert!(load_err(&d).contains("tokenizer_config.json: tokenizer file not found"));
    let d = write_dir("no_vocab", None, Some(good_cfg));
    assert!(load_err(&d).contains("tiktoken.model: tokenizer file not found"));

    let cases: &[(&str, &str, &str)] = &[
        (
            "bad_json",
            "{\"added_tokens_decoder\": {",
            "invalid JSON at byte",
        ),
        ("no_decoder", "{}", "added_tokens_decoder: missing"),
        (
            "not_object",
            r#"{"added_tokens_decoder": []}"#,
            "expected an object",
        ),
        (
            "bad_key",
            r#"{"added_tokens_decoder": {"x": {"content": "a"}}}"#,
            "added_tokens_decoder.x: key is not a decimal token id",
        ),
        (
            "outside",
            r#"{"added_tokens_decoder": {"258": {"content": "a"}}}"#,
            "id 258 is outside the special block 259..514",
        ),
        (
            "outside_hi",
            r#"{"added_tokens_decoder": {"515": {"content": "a"}}}"#,
            "id 515 is outside",
        ),
        (
            "no_content",
            r#"{"added_tokens_decoder": {"259": {"special": true}}}"#,
            "added_tokens_decoder.259.content: missing",
        ),
        (
            "content_type",
            r#"{"added_tokens_decoder": {"259": {"content": 5}}}"#,
            "added_tokens_decoder.259.content: expected string",
        ),
        (
            "special_type",
            r#"{"added_tokens_decoder": {"259": {"content": "a", "special": "yes"}}}"#,
            "added_tokens_decoder.259.special: expected bool",
        ),
        (
            "empty_name",
            r#"{"added_tokens_decoder": {"259": {"content": ""}}}"#,
            "empty token name",
        ),
        (
            "dup_name",
            r#"{"added_tokens_decoder": {"259": {"content": "[A]"}, "260": {"content": "[A]"}}}"#,
            "same name",
        ),
        (
            "prefix",
            r#"{"added_tokens_decoder": {"259": {"content": "[A"}, "260": {"content": "[A]"}}}"#,
            "prefix",
        ),
        (
            "dup_key",
            r#"{"added_tokens_decoder": {"259": {"content": "a"}, "259": {"content": "b"}}}"#,
            "tokenizer_config.json",
        ),
    ];
    for (name, cfg, want) in cases {
        let d = write_dir(name, Some(vocab.as_bytes()), Some(cfg));
        let m = load_err(&d);
        assert!(
            m.contains("tokenizer_config.json") && m.contains(want),
            "{name}: {m}"
        );
    }
    // A bad vocabulary names its file and line through load too.
    let d = write_dir("bad_vocab", Some(b"QQ== 0\nQQ== 1\n"), Some(good_cfg));
    let m = load_err(&d);
    assert!(m.contains("tiktoken.model: line 2"), "{m}");
}

#[test]
fn released_special_block() {
    let t = tok();
    assert_eq!(t.num_ranks(), 163_584);
    assert_eq!(t.vocab_size(), 163_840);
    let named: &[(u32, &str)] = &[
        (163584, "[BOS]"),
        (163585, "[EOS]"),
        (163586, "<|end_of_msg|>"),
        (163587, "<|open|>"),
        (163588, "<|close|>"),
        (163589, "<|sep|>"),
        (163590, "[start_header_id]"),
        (163591, "[end_header_id]"),
        (163593, "[EOT]"),
        (163602, "<|media_begin|>"),
        (163603, "<|media_content|>"),
        (163604, "<|media_end|>"),
        (163605, "<|media_pad|>"),
        (163649, "<osagent_mode>"),
        (163838, "[UNK]"),
        (163839, "[PAD]"),
    ];
    for id in 163_584..163_840u32 {
        let want = named
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| n.to_string())
            .unwrap_or_else(|| format!("<|reserved_token_{id}|>"));
        assert_eq!(t.special().name(id), Some(want.as_str()));
        assert_eq!(t.special_id(&want), Some(id));
        assert_eq!(t.decode(&[id]).unwrap(), want.as_bytes());
        // Allowed-special: the name alone is its id; ordinary: plain BPE text.
        assert_eq!(t.encode(&want, true), vec![id]);
        let plain = t.encode(&want, false);
        assert!(plain.iter().all(|&i| i < 163_584), "{want}");
        assert_eq!(t.decode(&plain).unwrap(), want.as_bytes());
    }
    assert_eq!(t.special_id("<|reserved_token_163592|>"), Some(163_592));
    assert_eq!(t.end_of_turn_ids(), vec![163_585, 163_586]);
    // <|open|> typed by a user is ordinary text: several BPE ids, none of them special.
    let open = t.encode("<|open|>", false);
    assert!(open.len() > 1 && !open.contains(&163_587), "{open:?}");
    assert!(t.check_vocab_size(163_840).is_ok());
    assert!(t.check_chat_specials().is_ok());
    let mem = t.memory_bytes();
    assert!((4_000_000..12_000_000).contains(&mem), "{mem}");
    let e = t.check_vocab_size(163_841).unwrap_err();
    assert!(
        e.message.contains("163840") && e.message.contains("163841"),
        "{e}"
    );
    let e = t.decode(&[1, 163_840]).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("163840"), "{e}");
}

#[test]
fn invalid_utf8_is_refused_naming_the_offset() {
    let e = tok().encode_bytes(b"abc\xE2\x82def", false).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("byte offset 3"), "{e}");
    assert_eq!(
        tok().encode_bytes("héllo".as_bytes(), false).unwrap(),
        tok().encode("héllo", false)
    );
}

/// Streams `ids` with the given chunking and returns the printed text.
fn stream(ids: &[u32]) -> String {
    let mut d = StreamDecoder::new();
    let mut s = String::new();
    for &id in ids {
        s.push_str(&d.push(tok().token_bytes(id).unwrap()));
    }
    s + &d.finish()
}

#[test]
fn streaming_equals_lossy_decode_for_split_characters() {
    let t = tok();
    // Single-byte tokens split every multi-byte character across tokens.
    let text = "é€😀中\u{301}ok";
    let byte_ids: Vec<u32> = text.bytes().map(|b| t.vocab().single(b)).collect();
    assert_eq!(stream(&byte_ids), text);
    // Invalid and truncated sequences across tokens.
    let raw: Vec<u8> = vec![
        0xE4, 0xB8, 0x41, 0xF0, 0x9F, 0x98, 0xC3, 0xFF, 0xED, 0xA0, 0x80, 0xE2, 0x82,
    ];
    for split in 0..raw.len() {
        let mut d = StreamDecoder::new();
        let s = d.push(&raw[..split]) + &d.push(&raw[split..]) + &d.finish();
        assert_eq!(s, String::from_utf8_lossy(&raw), "split at {split}");
    }
    let ids: Vec<u32> = raw.iter().map(|&b| t.vocab().single(b)).collect();
    assert_eq!(stream(&ids), String::from_utf8_lossy(&raw));
    // Real multi-token text: streaming equals the lossy decode of everything at once.
    let ids = t.encode("naïve café — 東京 🎉 done", false);
    let full = t.decode_lossy(&ids).unwrap();
    assert_eq!(stream(&ids), full);
    assert_eq!(
        t.decode_lossy(&ids).unwrap(),
        String::from_utf8_lossy(&t.decode(&ids).unwrap())
    );
}

fn k3(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_k3"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tokenize_and_detokenize_commands() {
    let dir = fixture_dir();
    let d = dir.to_str().unwrap();
    let (rc, out, _) = k3(&["tokenize", "--tok", d, "--text", "Hello, world!"]);
    assert_eq!((rc, out.as_str()), (0, "19180,11,2695,0\n"));
    let (rc, out, _) = k3(&["tokenize", "--tok", d, "--special", "--text", "[BOS]Hello"]);
    assert_eq!(rc, 0);
    assert!(out.starts_with("163584,"), "{out}");
    let (rc, out, _) = k3(&["tokenize", "--tok", d, "--text", "[BOS]Hello"]);
    assert_eq!(rc, 0);
    assert!(!out.contains("163584"), "{out}");
    // --file: bytes verbatim.
    let f = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tokenize_file.txt");
    std::fs::write(&f, "Hello world").unwrap();
    let (rc, out, _) = k3(&["tokenize", "--tok", d, "--file", f.to_str().unwrap()]);
    assert_eq!((rc, out.as_str()), (0, "19180,2695\n"));
    std::fs::write(&f, b"ok\xC0\x80").unwrap();
    let (rc, _, err) = k3(&["tokenize", "--tok", d, "--file", f.to_str().unwrap()]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("tokenize_file.txt") && err.contains("byte offset 2"),
        "{err}"
    );
    // detokenize
    let (rc, out, _) = k3(&["detokenize", "--tok", d, "--ids", "19180,11,2695,0"]);
    assert_eq!((rc, out.as_str()), (0, "Hello, world!"));
    let (rc, _, err) = k3(&["detokenize", "--tok", d, "--ids", "1,163840"]);
    assert_eq!(rc, 2);
    assert!(err.contains("163840"), "{err}");
    let (rc, _, err) = k3(&["detokenize", "--tok", d, "--ids", "1,x"]);
    assert_eq!(rc, 2);
    assert!(err.contains("--ids"), "{err}");
    // usage errors
    for args in [
        vec!["tokenize", "--tok", d],
        vec!["tokenize", "--tok", d, "--text", "a", "--file", "b"],
        vec!["tokenize", "--text", "a"],
        vec!["tokenize", "--tok", d, "--text", "a", "--bogus"],
        vec!["detokenize", "--tok", d],
    ] {
        let (rc, _, err) = k3(&args);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains("k3: error:"), "{err}");
    }
    // a directory missing a file
    let empty = write_dir("cli_empty", None, None);
    let (rc, _, err) = k3(&["tokenize", "--tok", empty.to_str().unwrap(), "--text", "a"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("tiktoken.model: tokenizer file not found"),
        "{err}"
    );
}

#[test]
fn round_trip_through_the_commands() {
    let d = fixture_dir();
    let d = d.to_str().unwrap();
    let text = "Mixed: 中文, ελληνικά, 😀 and   spaces\r\n\tdone.";
    let (rc, ids, _) = k3(&["tokenize", "--tok", d, "--text", text]);
    assert_eq!(rc, 0);
    let (rc, back, _) = k3(&["detokenize", "--tok", d, "--ids", ids.trim()]);
    assert_eq!((rc, back.as_str()), (0, text));
}

fn args(v: &[&str]) -> k3::cli::args::Args {
    let argv: Vec<std::ffi::OsString> = v.iter().map(Into::into).collect();
    k3::cli::args::Args::parse(&argv, &k3::cli::tokenize::PROMPT_SPECS).unwrap()
}

/// The run command's prompt helpers: exactly one prompt source, text needs a tokenizer, an
/// empty prompt and ids outside the vocabulary are exit 2, files are read verbatim.
#[test]
fn run_prompt_helpers() {
    use k3::cli::tokenize::{load_tokenizer, prompt_ids, tokenizer_dir};
    let t = tok();
    let d = fixture_dir();
    assert_eq!(
        prompt_ids(&args(&["--prompt", "The capital of France is"]), Some(t)).unwrap(),
        vec![1008, 10484, 318, 15383, 387]
    );
    // Special-token names in a prompt are plain text.
    assert!(!prompt_ids(&args(&["--prompt", "[EOS]"]), Some(t))
        .unwrap()
        .contains(&163_585));
    assert_eq!(
        prompt_ids(&args(&["--ids", "1,2"]), None).unwrap(),
        vec![1, 2]
    );
    let f = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prompt_file.txt");
    std::fs::write(&f, "Hello world").unwrap();
    let fs = f.to_str().unwrap();
    assert_eq!(
        prompt_ids(&args(&["--prompt-file", fs]), Some(t)).unwrap(),
        vec![19180, 2695]
    );
    let cases: &[(&[&str], bool, &str)] = &[
        (&["--prompt", ""], true, "empty"),
        (&[], true, "no prompt"),
        (&["--prompt", "a", "--ids", "1"], true, "only one"),
        (&["--prompt", "a"], false, "needs a tokenizer"),
        (&["--ids", "163840"], true, "out of range"),
        (&["--ids", ""], true, "no ids"),
    ];
    for (argv, with_tok, want) in cases {
        let e = prompt_ids(&args(argv), with_tok.then_some(t)).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains(want), "{argv:?}: {e}");
    }
    std::fs::write(&f, b"").unwrap();
    let e = prompt_ids(&args(&["--prompt-file", fs]), Some(t)).unwrap_err();
    assert!(
        e.message.contains("prompt_file.txt") && e.message.contains("empty"),
        "{e}"
    );
    std::fs::write(&f, b"a\xFFb").unwrap();
    let e = prompt_ids(&args(&["--prompt-file", fs]), Some(t)).unwrap_err();
    assert!(
        e.message.contains("prompt_file.txt") && e.message.contains("byte offset 1"),
        "{e}"
    );

    // --tok wins; else the model directory when it holds a tokenizer file; else none.
    let empty = write_dir("run_empty", None, None);
    assert_eq!(tokenizer_dir(None, &d), Some(d.clone()));
    assert_eq!(tokenizer_dir(None, &empty), None);
    assert_eq!(tokenizer_dir(Some(&d), &empty), Some(d.clone()));
    assert!(load_tokenizer(&args(&[]), &empty).unwrap().is_none());
    assert!(load_tokenizer(&args(&[]), &d).unwrap().is_some());
    let half = write_dir("run_half", Some(b"QQ== 0"), None);
    let e = load_tokenizer(&args(&[]), &half).err().unwrap();
    assert!(
        e.message
            .contains("tokenizer_config.json: tokenizer file not found"),
        "{e}"
    );
    let e = load_tokenizer(&args(&["--tok", empty.to_str().unwrap()]), &d)
        .err()
        .unwrap();
    assert!(
        e.message
            .contains("tiktoken.model: tokenizer file not found"),
        "{e}"
    );
}
