//! The direction of dependency of DEVELOPERS.md's module table, checked on the source text:
//! the model imports nothing above it (no binding, streaming, plan, session, command or
//! server), and no two sibling files of src/ import each other (a shared item lives in the
//! lower file or a small one of its own). A cheap scan of `crate::…` and `super::…` paths in
//! code, comments left out.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The code of a Rust file without its `//` comments (doc comments name modules freely).
fn code(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let l = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ if line.trim_start().starts_with("//") => "",
            _ => line,
        };
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segments after each `prefix` (`crate::`, `super::`) in `code`, a
/// `{a, b::c}` group giving each of its members.
fn segments_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (0usize, 0usize);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(group[start..j].trim()).to_string());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(group[start..j].trim()).to_string());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest).to_string());
        }
    }
    out.remove("");
    out
}

/// The top-level modules of the engine a file of `src/model/` may name: itself, the config
/// it is built from, the errors, and the kernels' FNV-1a. Binding, streaming, the plan,
/// sessions and the commands sit above it.
const MODEL_MAY_USE: [&str; 4] = ["model", "config", "error", "fnv"];

#[test]
fn the_model_imports_nothing_above_it() {
    let mut bad = Vec::new();
    for p in rust_files(&src().join("model")) {
        for m in segments_after(&code(&p), "crate::") {
            if !MODEL_MAY_USE.contains(&m.as_str()) {
                bad.push(format!("{}: crate::{m}", p.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "src/model may use only crate::{{{}}}:\n{}",
        MODEL_MAY_USE.join(", "),
        bad.join("\n")
    );
}

/// The sibling files (same directory, `mod.rs` excluded: it declares them) a file names by
/// `super::NAME`, or by `crate::DIR::NAME` for its own directory.
fn sibling_imports(p: &Path) -> BTreeSet<String> {
    let dir = p.parent().unwrap();
    let stem = p.file_stem().unwrap().to_str().unwrap();
    let siblings: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let q = e.unwrap().path();
            let name = q.file_stem()?.to_str()?.to_string();
            (q.extension().is_some_and(|x| x == "rs") && name != "mod" && name != stem)
                .then_some(name)
        })
        .collect();
    let c = code(p);
    let mut named = segments_after(&c, "super::");
    if let Ok(rel) = dir.strip_prefix(src()) {
        let module = rel.to_str().unwrap().replace('/', "::");
        if !module.is_empty() {
            named.extend(segments_after(&c, &format!("crate::{module}::")));
        }
    }
    named.intersection(&siblings).cloned().collect()
}

#[test]
fn no_two_files_import_each_other() {
    // a file of src/x/ at the top of a directory (not `mod.rs`, not a nested `x/y.rs`'s parent)
    let files: Vec<PathBuf> = rust_files(&src())
        .into_iter()
        .filter(|p| p.file_stem().is_some_and(|s| s != "mod"))
        .collect();
    let mut circles = Vec::new();
    for a in &files {
        for b in sibling_imports(a) {
            let other = a.with_file_name(format!("{b}.rs"));
            let a_stem = a.file_stem().unwrap().to_str().unwrap();
            if other > *a && sibling_imports(&other).contains(a_stem) {
                circles.push(format!("{} ⇄ {}", a.display(), other.display()));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other (move the shared item to the lower file or a small new one):\n{}",
        circles.join("\n")
    );
}

/// The three circles issue 22 broke stay broken, and the scan sees an import where there is
/// one (so the test above cannot pass by finding nothing).
#[test]
fn the_scan_finds_the_imports_that_are_there() {
    let f = |p: &str| sibling_imports(&src().join(p));
    assert!(f("bind/layout.rs").contains("reader"));
    assert!(!f("bind/reader.rs").contains("layout"));
    assert!(f("chat/messages.rs").contains("message"));
    assert!(!f("chat/message.rs").contains("messages"));
    assert!(f("serve/handler.rs").contains("run"));
    assert!(!f("serve/run.rs").contains("handler"));
    let g = segments_after("use super::{a, b::{c, d}, e};", "super::");
    assert_eq!(g.into_iter().collect::<Vec<_>>(), ["a", "b", "e"]);
}
