//! `--json-schema FILE` (issue 25 item 3): the JSON Schema a run's whole generated text (or,
//! in `k3 chat`, each reply's response channel) is constrained to. Read and compiled before
//! the model opens, so a schema the engine cannot enforce is exit 2 naming the file and the
//! keyword at once.

use crate::constrain::{self, JsonStyle, Schema, Vocabulary};
use crate::error::{Error, Result};
use crate::generate::guide::Constraints;
use crate::json::Value;
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A `--json-schema` file: its path, its JSON and the compiled schema.
#[derive(Debug, Clone)]
pub(crate) struct SchemaFile {
    /// The file as given.
    pub path: PathBuf,
    /// The schema's JSON (chat renders it into the template's response-format message).
    pub json: Value,
    /// Compiled without whitespace (ENGINE.md §8: none in structured output).
    pub schema: Arc<Schema>,
}

/// Reads and compiles `--json-schema FILE`.
///
/// Errors (exit 2): the file cannot be read, is not JSON, or holds a schema the engine
/// cannot enforce — each naming the file (and the keyword by its path in the schema).
pub(crate) fn read(path: &Path) -> Result<SchemaFile> {
    let p = path.display();
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid(format!("{p}: cannot read the --json-schema file: {e}")))?;
    let json = crate::json::parse(&bytes).map_err(|e| {
        Error::invalid(format!(
            "{p}: --json-schema: invalid JSON at byte {}: {}",
            e.offset, e.expected
        ))
    })?;
    let schema = Schema::compile(&json, JsonStyle::Compact).map_err(|e| {
        let kw = if e.keyword.is_empty() {
            String::new()
        } else {
            format!(" (keyword `{}`)", e.keyword)
        };
        Error::invalid(format!("{p}: --json-schema: {e}{kw}"))
    })?;
    Ok(SchemaFile {
        path: path.to_path_buf(),
        json,
        schema: Arc::new(schema),
    })
}

/// The constraint of a plain run (`k3 run --json-schema`): the whole generated text is one
/// JSON value of the schema, then an end id of the tokenizer.
///
/// Errors (exit 2): no tokenizer (the constraint walks the tokens' bytes).
pub(crate) fn plain(f: &SchemaFile, tok: Option<&Tokenizer>) -> Result<Constraints> {
    let tok = tok.ok_or_else(|| {
        Error::invalid(format!(
            "flag `--json-schema {}`: needs a tokenizer (give --tok DIR)",
            f.path.display()
        ))
    })?;
    let vocab = Arc::new(Vocabulary::new(tok));
    Ok(Constraints::one(constrain::plain(
        f.schema.clone(),
        vocab,
        &tok.end_of_turn_ids(),
    )))
}
