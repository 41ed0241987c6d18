//! Every relative link in README.md and docs/*.md resolves inside the repository (file, and
//! heading anchor where one is given), and every `docs/….md` the `--help` texts and messages
//! of src/cli name exists: the documentation never points outside the repository.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown documents checked: README.md and docs/*.md.
fn documents() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            v.push(p);
        }
    }
    v.sort();
    v
}

/// The `](target)` link targets of a markdown text, outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: a link inside backticks is not a link.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(md: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(md).unwrap();
    let mut fenced = false;
    let mut v = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            v.push(slug(line.trim_start_matches('#')));
        }
    }
    v
}

#[test]
fn every_relative_link_in_readme_and_docs_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for target in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            if !path.exists() {
                bad.push(format!(
                    "{}: link `{target}`: {} does not exist",
                    doc.display(),
                    path.display()
                ));
                continue;
            }
            if let Some(a) = anchor {
                if !anchors(&path).iter().any(|h| h == a) {
                    bad.push(format!(
                        "{}: link `{target}`: no heading #{a} in {}",
                        doc.display(),
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    assert!(
        checked >= 20,
        "only {checked} relative links found: is the scanner broken?"
    );
}

#[test]
fn docs_named_by_the_command_line_exist() {
    let mut named = 0;
    for p in rust_files(root().join("src/cli")) {
        let text = std::fs::read_to_string(&p).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("docs/") {
            rest = &rest[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
                .unwrap_or(rest.len());
            let name = rest[..end].trim_end_matches('.');
            if name.ends_with(".md") {
                named += 1;
                assert!(
                    root().join(name).exists(),
                    "{}: names {name}, which does not exist",
                    p.display()
                );
            }
            rest = &rest[end..];
        }
    }
    assert!(named >= 3, "{named}");
}

#[test]
fn readme_and_help_cite_no_spec_outside_the_repository() {
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for spec in ["ENGINE.md", "FORMATS.md", "MODEL.md", "TOKENIZER.md"] {
            assert!(
                !text.contains(spec),
                "{} cites {spec}, which is not in the repository",
                doc.display()
            );
        }
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: PathBuf) -> Vec<PathBuf> {
    let mut dirs = vec![dir];
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Text a user sees (string literals, outside `//` comment lines) never cites a spec file that
/// is not in the repository, and every `docs/….md#anchor` it cites names a real heading.
#[test]
fn messages_cite_no_spec_outside_the_repository() {
    let mut bad = Vec::new();
    let mut cited = 0;
    for p in rust_files(root().join("src")) {
        let text = std::fs::read_to_string(&p).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for spec in ["ENGINE.md", "FORMATS.md", "MODEL.md", "TOKENIZER.md"] {
                if line.contains(spec) {
                    bad.push(format!("{}:{}: cites {spec}", p.display(), n + 1));
                }
            }
            let mut rest = line;
            while let Some(i) = rest.find("docs/") {
                rest = &rest[i..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-#".contains(c)))
                    .unwrap_or(rest.len());
                let target = rest[..end].trim_end_matches('.');
                if let Some((file, a)) = target.split_once('#') {
                    cited += 1;
                    let path = root().join(file);
                    if !path.exists() || !anchors(&path).iter().any(|h| h == a) {
                        bad.push(format!(
                            "{}:{}: {target} does not resolve",
                            p.display(),
                            n + 1
                        ));
                    }
                }
                rest = &rest[end..];
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        cited >= 20,
        "only {cited} docs citations with an anchor found"
    );
}

#[test]
fn the_link_scanner_sees_links_and_skips_code() {
    let t = "a [x](docs/a.md) `[y](no.md)` [z](b.md#h)\n```\n[w](c.md)\n```\n";
    assert_eq!(links(t), vec!["docs/a.md", "b.md#h"]);
    assert_eq!(slug(" Exit codes"), "exit-codes");
    assert_eq!(slug("Session state file (v1)"), "session-state-file-v1");
}

use crate::support;

/// The README's "Set up" shows the tiny model's text and logits hash as every build prints
/// them; a stale copy would tell a user their good build is broken.
#[test]
fn readme_shows_what_the_tiny_model_prints() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let out = support::run_k3([
        support::fixture("tiny-k3-text").to_str().unwrap(),
        "--prompt",
        "The capital of France is",
        "--gen",
        "16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        readme.contains(&format!("```\n{text}```\n")),
        "README lacks the text {text:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let hash = err
        .lines()
        .find(|l| l.starts_with("logits hash: "))
        .expect("no logits hash line");
    let hex = hash["logits hash: ".len()..]
        .get(..16)
        .expect("a 16-digit hash");
    assert!(
        readme.contains(&format!("logits hash: {hex}")),
        "README lacks {hash:?}"
    );
}
