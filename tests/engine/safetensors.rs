//! safetensors header parser (FORMATS.md §2): every §2.4 rule, with precise messages.

use crate::support;

use k3::safetensors::{self, Dtype, MAX_HEADER_LEN};
use support::{fixture, raw_safetensors, safetensors_file, scratch_dir};

/// (name, dtype, shape, begin, end) of one parsed tensor.
type Parsed = (String, Dtype, Vec<u64>, u64, u64);

/// Parses a whole in-memory file the way the index does (prefix, then header).
fn parse_file(file: &[u8]) -> k3::Result<Vec<Parsed>> {
    let size = file.len() as u64;
    let n = safetensors::header_len("t.safetensors", file, size)?;
    let h = safetensors::parse_header("t.safetensors", &file[8..8 + n as usize], size)?;
    Ok(h.iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.dtype,
                t.shape.to_vec(),
                t.begin,
                t.end,
            )
        })
        .collect())
}

fn refused(file: &[u8], fragments: &[&str]) -> String {
    let e = parse_file(file).expect_err("should be refused");
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.starts_with("t.safetensors: "), "{}", e.message);
    for f in fragments {
        assert!(e.message.contains(f), "message lacks {f:?}: {}", e.message);
    }
    e.message
}

fn hdr(tensors: &str) -> String {
    format!("{{{tensors}}}")
}

fn t(name: &str, dtype: &str, shape: &str, b: u64, e: u64) -> String {
    format!("\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape},\"data_offsets\":[{b},{e}]}}")
}

#[test]
fn valid_file_sorted_by_offset_with_metadata() {
    let f = safetensors_file(&[
        ("b", "BF16", &[2, 3]),
        ("a", "F32", &[4]),
        ("z", "U8", &[]),
        ("empty", "F32", &[0, 5]),
    ]);
    let size = f.len() as u64;
    let n = safetensors::header_len("t", &f, size).unwrap();
    let h = safetensors::parse_header("t", &f[8..8 + n as usize], size).unwrap();
    assert_eq!(h.header_len, n);
    assert_eq!(h.data_len, 12 + 16 + 1);
    assert_eq!(h.metadata, vec![("format".to_string(), "pt".to_string())]);
    assert_eq!(h.fnv, k3::fnv::fnv1a64(&f[8..8 + n as usize]));
    let v: Vec<_> = h
        .iter()
        .map(|t| (t.name, t.begin, t.end, t.nbytes()))
        .collect();
    assert_eq!(
        v,
        [
            ("b", 0, 12, 12),
            ("a", 12, 28, 16),
            ("z", 28, 29, 1),
            ("empty", 29, 29, 0)
        ]
    );
    assert_eq!(h.tensor(2).shape, &[] as &[u64]);
    assert_eq!(h.absolute(12), 8 + n + 12);
}

#[test]
fn offsets_are_relative_to_the_data_section() {
    // Silent failure #26: offsets taken from the file start would read the header bytes.
    let dir = scratch_dir("st_offsets");
    let path = dir.join("x.safetensors");
    std::fs::write(
        &path,
        safetensors_file(&[("a", "U8", &[3]), ("b", "U8", &[5])]),
    )
    .unwrap();
    let raw = safetensors::read_header(&path).unwrap();
    let h = safetensors::parse_header("x", &raw.bytes, raw.file_size).unwrap();
    let file = std::fs::read(&path).unwrap();
    let b = h.tensor(1);
    let abs = h.absolute(b.begin) as usize;
    assert_eq!(&file[abs..abs + 5], &[2u8; 5], "tensor b holds bytes 2");
    assert_ne!(&file[b.begin as usize..b.end as usize], &[2u8; 5]);
}

#[test]
fn all_fixture_shards_parse() {
    for dir in ["tiny-k3", "tiny-k3-text"] {
        let mut n = 0;
        for ent in std::fs::read_dir(fixture(dir)).unwrap() {
            let p = ent.unwrap().path();
            if p.extension().is_some_and(|e| e == "safetensors") {
                let raw = safetensors::read_header(&p).unwrap();
                let h = safetensors::parse_header("f", &raw.bytes, raw.file_size).unwrap();
                assert!(!h.is_empty());
                n += 1;
            }
        }
        assert!(n >= 5);
    }
}

#[test]
fn every_dtype_of_the_table_parses_and_others_are_refused() {
    for d in Dtype::ALL {
        let f = safetensors_file(&[("x", d.name(), &[3])]);
        let v = parse_file(&f).unwrap();
        assert_eq!(v[0].1, d);
        assert_eq!(v[0].4, 3 * d.size());
        assert_eq!(Dtype::from_code(d.code()), Some(d));
    }
    for bad in ["F4", "bf16", "FP8", "I4", "U4", "", "F8_E4M3FN"] {
        let f = safetensors_file(&[("w.x", bad, &[3])]);
        refused(&f, &["tensor \"w.x\"", &format!("unknown dtype \"{bad}\"")]);
    }
}

#[test]
fn truncated_files() {
    // Shorter than the length prefix.
    let e = safetensors::header_len("t.safetensors", &[1, 2, 3], 3).unwrap_err();
    assert!(
        e.message.contains("file is 3 bytes, too short"),
        "{}",
        e.message
    );
    // N runs past the end of the file.
    let mut f = safetensors_file(&[("a", "U8", &[4])]);
    let n = u64::from_le_bytes(f[..8].try_into().unwrap());
    f.truncate(8 + n as usize - 3);
    refused(
        &f,
        &[
            "byte 0: header length N",
            "runs past the end of the file",
            "truncated",
        ],
    );
    // The data section is shorter than the tensors claim (the last shard bytes lost).
    let mut f = safetensors_file(&[("a", "U8", &[4]), ("b", "BF16", &[8])]);
    f.truncate(f.len() - 5);
    refused(
        &f,
        &[
            "tensor \"b\"",
            "data_offsets [4, 20] run past the end of the 15-byte data section",
            "truncated",
        ],
    );
}

#[test]
fn absurd_header_length() {
    for n in [u64::MAX, MAX_HEADER_LEN + 1, 1 << 40] {
        let mut f = n.to_le_bytes().to_vec();
        f.extend_from_slice(b"{}");
        let m = refused(
            &f,
            &["byte 0: header length N", "exceeds the limit of 100000000"],
        );
        assert!(m.contains(&n.to_string()));
    }
    // Exactly the limit is allowed by rule 1 (then checked against the file size).
    let mut f = MAX_HEADER_LEN.to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    refused(&f, &["runs past the end of the file"]);
}

#[test]
fn overlapping_tensors() {
    let h = hdr(&[t("a", "U8", "[8]", 0, 8), t("b", "U8", "[8]", 4, 12)].join(","));
    refused(
        &raw_safetensors(&h, &[0; 12]),
        &["tensor \"b\" (data_offsets [4, 12]) overlaps tensor \"a\" (data_offsets [0, 8])"],
    );
    // Identical ranges overlap as well.
    let h = hdr(&[t("a", "U8", "[8]", 0, 8), t("b", "U8", "[8]", 0, 8)].join(","));
    refused(&raw_safetensors(&h, &[0; 8]), &["overlaps"]);
    // A zero-length tensor inside another tensor is not at a boundary.
    let h = hdr(&[t("a", "U8", "[8]", 0, 8), t("z", "U8", "[0]", 3, 3)].join(","));
    refused(
        &raw_safetensors(&h, &[0; 8]),
        &["tensor \"z\"", "overlaps tensor \"a\""],
    );
}

#[test]
fn holes_and_trailing_bytes() {
    let h = hdr(&[t("a", "U8", "[4]", 0, 4), t("b", "U8", "[4]", 6, 10)].join(","));
    let f = raw_safetensors(&h, &[0; 10]);
    let hl = u64::from_le_bytes(f[..8].try_into().unwrap());
    let m = refused(
        &f,
        &["hole of 2 bytes in the data section between tensor \"a\" (ends at 4) and tensor \"b\" (begins at 6)"],
    );
    assert!(m.contains(&format!("file byte {}", 8 + hl + 4)), "{m}");
    let h = hdr(&t("a", "U8", "[4]", 3, 7));
    refused(
        &raw_safetensors(&h, &[0; 7]),
        &["starts with a hole of 3 bytes before tensor \"a\""],
    );
    let h = hdr(&t("a", "U8", "[4]", 0, 4));
    refused(
        &raw_safetensors(&h, &[0; 9]),
        &["5 trailing bytes after the last tensor \"a\" (ends at 4): the data section is 9 bytes"],
    );
    // No tensors but a data section.
    refused(
        &raw_safetensors("{}", &[0; 3]),
        &["3 trailing bytes after an empty header"],
    );
    parse_file(&raw_safetensors("{}", &[])).unwrap();
}

#[test]
fn out_of_range_and_bad_offsets() {
    let h = hdr(&t("a", "U8", "[4]", 100, 104));
    refused(
        &raw_safetensors(&h, &[0; 4]),
        &["data_offsets [100, 104] run past the end"],
    );
    // Regression: an out-of-range tensor is named even when, sorted by offset, the hole it
    // leaves comes first (the out-of-range offsets are the cause).
    let h = hdr(&[t("a", "U8", "[4]", 100, 104), t("b", "U8", "[4]", 4, 8)].join(","));
    refused(
        &raw_safetensors(&h, &[0; 8]),
        &["tensor \"a\"", "data_offsets [100, 104] run past the end"],
    );
    let h = hdr(&t("a", "U8", "[4]", 8, 4));
    refused(
        &raw_safetensors(&h, &[0; 8]),
        &["data_offsets [8, 4]: begin > end"],
    );
    for (offs, frag) in [
        ("[0]", "exactly two integers [begin, end], found 1"),
        ("[0, 4, 8]", "exactly two integers [begin, end], found 3"),
        ("[0, -4]", "-4 is not an integer without sign"),
        ("[0, 4.0]", "4.0 is not an integer"),
        ("[0, 4e0]", "4e0 is not an integer"),
        ("[0, 18446744073709551616]", "does not fit"),
        ("[0, \"4\"]", "expected a non-negative integer"),
        ("4", "expected an array of non-negative integers"),
    ] {
        let h = format!("{{\"a\":{{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":{offs}}}}}");
        let frag = if frag == "does not fit" {
            "fits in u64"
        } else {
            frag
        };
        refused(&raw_safetensors(&h, &[0; 4]), &["tensor \"a\"", frag]);
    }
}

#[test]
fn size_must_equal_shape_times_dtype() {
    let h = hdr(&t("w", "BF16", "[2, 3]", 0, 10));
    refused(
        &raw_safetensors(&h, &[0; 10]),
        &["tensor \"w\": data_offsets [0, 10] hold 10 bytes but shape [2, 3] × BF16 (2 bytes/element) needs 12"],
    );
    // Overflowing shape products are refused, not wrapped.
    let h = hdr(&t("w", "F64", "[4294967296, 4294967296]", 0, 0));
    refused(
        &raw_safetensors(&h, &[]),
        &["shape [4294967296, 4294967296] × F64 overflows 64 bits"],
    );
    let h = hdr(&t("w", "U8", "[2305843009213693952, 8]", 0, 0));
    refused(&raw_safetensors(&h, &[]), &["overflows 64 bits"]);
    // Bad shape entries.
    let h = hdr(&t("w", "U8", "[-1]", 0, 0));
    refused(
        &raw_safetensors(&h, &[]),
        &["shape: -1 is not an integer without sign"],
    );
    let h = hdr(&t("w", "U8", "[1.5]", 0, 0));
    refused(&raw_safetensors(&h, &[]), &["shape: 1.5 is not an integer"]);
}

#[test]
fn names_lone_surrogates_duplicates_and_empty() {
    let h = hdr(&t("bad\\ud800name", "U8", "[1]", 0, 1));
    let f = raw_safetensors(&h, &[0]);
    let m = refused(&f, &["invalid JSON at byte 13", "low surrogate"]);
    assert!(
        m.contains("byte 13"),
        "offset counts the 8-byte prefix: {m}"
    );
    // Escaped names are decoded; a valid surrogate pair is fine.
    let h = hdr(&t("emoji\\ud83d\\ude00", "U8", "[1]", 0, 1));
    assert_eq!(
        parse_file(&raw_safetensors(&h, &[0])).unwrap()[0].0,
        "emoji\u{1f600}"
    );
    // Duplicates, also when spelled differently.
    let h = hdr(&[
        t("a", "U8", "[1]", 0, 1),
        t("b", "U8", "[1]", 1, 2),
        t("a", "U8", "[0]", 2, 2),
    ]
    .join(","));
    let f = raw_safetensors(&h, &[0; 2]);
    let second = 1 + h.rfind("\"a\"").unwrap();
    let m = refused(&f, &["duplicate tensor name \"a\""]);
    assert!(m.contains(&format!("byte {}", 8 + second - 1)), "{m}");
    let h = hdr(&[t("ab", "U8", "[1]", 0, 1), t("\\u0061b", "U8", "[1]", 1, 2)].join(","));
    refused(
        &raw_safetensors(&h, &[0; 2]),
        &["duplicate tensor name \"ab\""],
    );
    let h = hdr(&t("", "U8", "[1]", 0, 1));
    refused(&raw_safetensors(&h, &[0]), &["empty tensor name"]);
}

#[test]
fn malformed_json_and_structure() {
    for (h, frag) in [
        (" {}", "must start with '{'"),
        ("[]", "must start with '{'"),
        ("", "must start with '{'"),
        (
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}",
            "invalid JSON",
        ),
        ("{} x", "end of input after the top-level value"),
        (
            "{\"a\":1}",
            "tensor \"a\": expected an object {dtype, shape, data_offsets}, found number",
        ),
        (
            "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}",
            "tensor \"a\": missing dtype",
        ),
        ("{\"a\":{\"dtype\":\"U8\"}}", "missing shape, data_offsets"),
        (
            "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
            "duplicate member \"dtype\"",
        ),
        (
            "{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}",
            "dtype must be a string",
        ),
        (
            "{\"__metadata__\":{\"format\":1}}",
            "__metadata__.format: expected a string value",
        ),
        (
            "{\"__metadata__\":[]}",
            "__metadata__ must be an object of strings",
        ),
        (
            "{\"__metadata__\":{},\"__metadata__\":{}}",
            "duplicate member \"__metadata__\"",
        ),
        (
            "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}",
            "duplicate member \"a\" in __metadata__",
        ),
    ] {
        let data: &[u8] = if h.contains("data_offsets\":[0,1]") {
            &[0]
        } else {
            &[]
        };
        refused(&raw_safetensors(h, data), &[frag]);
    }
    // Invalid UTF-8 in the header.
    let mut f = raw_safetensors("{\"aX\":{}}", &[]);
    f[8 + 3] = 0xff;
    refused(
        &f,
        &["invalid JSON at byte 11: expected UTF-8 text, found byte 0xff"],
    );
    // A header length N that is 8 too large reads tensor bytes as header: the message says
    // what was found and that N may be wrong (not just "valid UTF-8").
    for data in [[0xffu8; 8], *b"abcdefgh"] {
        let h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}";
        let mut f = raw_safetensors(h, &[data, data].concat());
        let n = u64::from_le_bytes(f[..8].try_into().unwrap()) + 8;
        f[..8].copy_from_slice(&n.to_le_bytes());
        let at = format!(
            "invalid JSON at byte {}: expected ",
            8 + h.len().div_ceil(8) * 8
        );
        refused(
            &f,
            &[
                at.as_str(),
                ", found ",
                "header length N in bytes 0..8 may be wrong",
            ],
        );
    }
    // Other members of a tensor object are ignored; trailing spaces are fine.
    let h =
        "{\"a\":{\"dtype\":\"U8\",\"x\":{\"y\":[1,2]},\"shape\":[1],\"data_offsets\":[0,1]}}   ";
    parse_file(&raw_safetensors(h, &[7])).unwrap();
}

#[test]
fn read_header_names_the_file() {
    let dir = scratch_dir("st_read");
    let p = dir.join("short.safetensors");
    std::fs::write(&p, b"\x01\x02").unwrap();
    let e = safetensors::read_header(&p).unwrap_err();
    assert!(
        e.message.starts_with(&p.display().to_string()),
        "{}",
        e.message
    );
    assert!(e.message.contains("too short"));
    let e = safetensors::read_header(&dir.join("nope.safetensors")).unwrap_err();
    assert!(e.message.contains("cannot open shard"));
}
