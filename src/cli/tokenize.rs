//! `k3 tokenize` and `k3 detokenize` (ENGINE.md §3), and the prompt helpers the run command
//! uses: tokenizer directory resolution (`--tok`, default the model directory), `--prompt`,
//! `--prompt-file` (bytes verbatim), `--ids`, and the streaming text printer.

use super::args::{Args, Spec};
use crate::error::{Error, Result};
use crate::tokenizer::{self, StreamDecoder, Tokenizer};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) const TOKENIZE_SPECS: &[Spec] = &[
    Spec::Value("tok"),
    Spec::Switch("special"),
    Spec::Value("text"),
    Spec::Value("file"),
];

pub(crate) const DETOKENIZE_SPECS: &[Spec] = &[Spec::Value("tok"), Spec::Value("ids")];

const TOKENIZE_USAGE: &str = "\
usage: k3 tokenize --tok DIR [--special] (--text TEXT | --file PATH)
  Prints the token ids of the text, comma-separated on one line.
  --tok DIR      tokenizer directory (tiktoken.model, tokenizer_config.json)
  --text TEXT    the text to encode
  --file PATH    a UTF-8 file to encode, read verbatim
  --special      turn special-token names (e.g. [EOS]) into their ids
";

const DETOKENIZE_USAGE: &str = "\
usage: k3 detokenize --tok DIR --ids 1,2,3
  Prints the text of the ids on standard output (no newline added; U+FFFD for ill-formed bytes).
  --tok DIR      tokenizer directory (tiktoken.model, tokenizer_config.json)
  --ids 1,2,3    comma-separated token ids
";

/// The prompt and tokenizer flags of the run command, for its flag table:
/// `--prompt TEXT`, `--prompt-file PATH`, `--ids 1,2,3`, `--tok DIR`.
pub const PROMPT_SPECS: [Spec; 4] = [
    Spec::Value("prompt"),
    Spec::Value("prompt-file"),
    Spec::Value("ids"),
    Spec::Value("tok"),
];

fn no_positional(a: &Args, cmd: &str) -> Result<()> {
    match a.positional.first() {
        Some(p) => Err(Error::invalid(format!(
            "{cmd}: unexpected argument `{}` (see k3 {cmd} --help)",
            p.to_string_lossy()
        ))),
        None => Ok(()),
    }
}

fn required_tok(a: &Args, cmd: &str) -> Result<Tokenizer> {
    let dir = a
        .value_os("tok")
        .ok_or_else(|| Error::invalid(format!("{cmd}: flag `--tok DIR` is required")))?;
    Tokenizer::load(Path::new(&dir))
}

/// `k3 tokenize --tok DIR [--special] (--text TEXT | --file PATH)`: prints the ids,
/// comma-separated, on one line. `--file` is read verbatim and must be UTF-8 (error naming the
/// byte offset). `--special` turns special-token names into their ids (TOKENIZER.md §3).
pub fn run_tokenize(argv: &[OsString]) -> Result<()> {
    let Some(a) = Args::parse_or_help(argv, TOKENIZE_SPECS, TOKENIZE_USAGE)? else {
        return Ok(());
    };
    no_positional(&a, "tokenize")?;
    let tok = required_tok(&a, "tokenize")?;
    let special = a.switch("special");
    let ids = match a.present(&["text", "file"]).as_slice() {
        ["text"] => {
            let text = a.value("text")?.unwrap_or_default();
            tok.encode(&text, special)
        }
        ["file"] => {
            let path = PathBuf::from(a.value_os("file").unwrap_or_default());
            let bytes = read_file(&path)?;
            tok.encode_bytes(&bytes, special)
                .map_err(|e| e.context(path.display()))?
        }
        _ => {
            return Err(Error::invalid(
                "tokenize: give exactly one of `--text TEXT` and `--file PATH`",
            ))
        }
    };
    let line = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    crate::cli::write_stdout(format!("{line}\n").as_bytes())
}

/// `k3 detokenize --tok DIR --ids 1,2,3`: prints the decoded text (TOKENIZER.md §9 display:
/// U+FFFD for ill-formed bytes), without adding a newline.
pub fn run_detokenize(argv: &[OsString]) -> Result<()> {
    let Some(a) = Args::parse_or_help(argv, DETOKENIZE_SPECS, DETOKENIZE_USAGE)? else {
        return Ok(());
    };
    no_positional(&a, "detokenize")?;
    let tok = required_tok(&a, "detokenize")?;
    let ids = match a.value("ids")? {
        Some(s) => parse_ids("ids", &s)?,
        None => return Err(Error::invalid("detokenize: flag `--ids 1,2,3` is required")),
    };
    let text = tok.decode_lossy(&ids).map_err(|e| e.context("--ids"))?;
    crate::cli::write_stdout(text.as_bytes())
}

/// The bytes of `path`; `-` is standard input (`--prompt-file -`, docs/cli.md).
///
/// Errors (exit 2): the file (or standard input) cannot be read.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    if path == Path::new("-") {
        use std::io::Read as _;
        let mut v = Vec::new();
        return std::io::stdin()
            .lock()
            .read_to_end(&mut v)
            .map(|_| v)
            .map_err(|e| Error::invalid(format!("standard input (`-`): cannot read: {e}")));
    }
    std::fs::read(path).map_err(|e| Error::invalid(format!("{}: cannot read: {e}", path.display())))
}

/// Parses `--{flag} 1,2,3`: comma-separated decimal ids (spaces around each allowed).
/// Errors (exit 2) name the flag and the bad item; an empty list is an error.
pub fn parse_ids(flag: &str, s: &str) -> Result<Vec<u32>> {
    if s.trim().is_empty() {
        return Err(Error::invalid(format!("flag `--{flag}`: no ids given")));
    }
    s.split(',')
        .enumerate()
        .map(|(i, item)| {
            let t = item.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::invalid(format!(
                    "flag `--{flag}`: item {} `{item}` is not a token id (expected comma-separated decimal ids)",
                    i + 1
                )));
            }
            t.parse::<u32>().map_err(|_| {
                Error::invalid(format!(
                    "flag `--{flag}`: item {} `{t}` is too large for a token id",
                    i + 1
                ))
            })
        })
        .collect()
}

/// The tokenizer directory of a run (ENGINE.md §3): `--tok DIR` when given (it must hold both
/// files), else `model_dir` when it holds either tokenizer file, else none.
pub fn tokenizer_dir(tok_flag: Option<&Path>, model_dir: &Path) -> Option<PathBuf> {
    match tok_flag {
        Some(d) => Some(d.to_path_buf()),
        None if tokenizer::looks_like_tokenizer_dir(model_dir) => Some(model_dir.to_path_buf()),
        None => None,
    }
}

/// Loads the run's tokenizer, if any (see [`tokenizer_dir`]); a directory missing a file or
/// holding a bad one is exit 2 naming the file.
pub fn load_tokenizer(args: &Args, model_dir: &Path) -> Result<Option<Tokenizer>> {
    let flag = args.value_os("tok").map(PathBuf::from);
    match tokenizer_dir(flag.as_deref(), model_dir) {
        Some(dir) => Tokenizer::load(&dir).map(Some),
        None => Ok(None),
    }
}

/// The prompt ids of a run: exactly one of `--prompt TEXT`, `--prompt-file PATH` (bytes
/// verbatim, UTF-8 required) and `--ids 1,2,3`. Text is encoded with special-token names as
/// plain text (TOKENIZER.md §3). Errors (exit 2): none or several given, text without a
/// tokenizer, invalid UTF-8 (naming the file and byte offset), a prompt that tokenizes to no
/// ids, an id outside the tokenizer's vocabulary.
pub fn prompt_ids(args: &Args, tok: Option<&Tokenizer>) -> Result<Vec<u32>> {
    let given = args.present(&["prompt", "prompt-file", "ids"]);
    let need_tok = |flag: &str| {
        tok.ok_or_else(|| {
            Error::invalid(format!(
                "flag `--{flag}` needs a tokenizer: the model directory holds no {} / {}; \
                 pass `--tok DIR` or give `--ids`",
                tokenizer::TIKTOKEN_FILE,
                tokenizer::CONFIG_FILE
            ))
        })
    };
    let ids = match given.as_slice() {
        ["prompt"] => {
            let t = need_tok("prompt")?;
            let text = args.value("prompt")?.unwrap_or_default();
            let ids = t.encode(&text, false);
            if ids.is_empty() {
                return Err(Error::invalid(
                    "flag `--prompt`: the prompt is empty (it tokenizes to no ids)",
                ));
            }
            ids
        }
        ["prompt-file"] => {
            let t = need_tok("prompt-file")?;
            let path = PathBuf::from(args.value_os("prompt-file").unwrap_or_default());
            let bytes = read_file(&path)?;
            let ids = t
                .encode_bytes(&bytes, false)
                .map_err(|e| e.context(path.display()))?;
            if ids.is_empty() {
                return Err(Error::invalid(format!(
                    "{}: the prompt file is empty (it tokenizes to no ids)",
                    path.display()
                )));
            }
            ids
        }
        ["ids"] => {
            let ids = parse_ids("ids", &args.value("ids")?.unwrap_or_default())?;
            if let Some(t) = tok {
                if let Some(&bad) = ids.iter().find(|&&id| id as usize >= t.vocab_size()) {
                    return Err(Error::invalid(format!(
                        "flag `--ids`: token id {bad} is out of range (the vocabulary has {} ids)",
                        t.vocab_size()
                    )));
                }
            }
            ids
        }
        [] => {
            return Err(Error::invalid(
                "no prompt: give one of `--prompt TEXT`, `--prompt-file PATH`, `--ids 1,2,3`",
            ))
        }
        several => {
            return Err(Error::invalid(format!(
                "give only one of `--prompt`, `--prompt-file`, `--ids` (got {})",
                several
                    .iter()
                    .map(|f| format!("`--{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    Ok(ids)
}

/// Prints generated tokens as text while they are generated (TOKENIZER.md §9): never a
/// partial UTF-8 sequence; a held incomplete tail prints as U+FFFD at [`TextPrinter::finish`].
pub struct TextPrinter<'a, W: std::io::Write> {
    tok: &'a Tokenizer,
    dec: StreamDecoder,
    out: W,
}

impl<'a, W: std::io::Write> TextPrinter<'a, W> {
    /// A printer writing to `out` (standard output in a run).
    pub fn new(tok: &'a Tokenizer, out: W) -> Self {
        TextPrinter {
            tok,
            dec: StreamDecoder::new(),
            out,
        }
    }

    /// Prints what token `id` completes and flushes. Errors: an id ≥ V (exit 2), a write
    /// failure (exit 4).
    pub fn push(&mut self, id: u32) -> Result<()> {
        let text = self.dec.push(self.tok.token_bytes(id)?);
        self.write(&text)
    }

    /// Prints the held tail (one U+FFFD if a character was left incomplete) and flushes.
    pub fn finish(&mut self) -> Result<()> {
        let text = self.dec.finish();
        self.write(&text)
    }

    fn write(&mut self, text: &str) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.flush())
            .map_err(crate::cli::stdout_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_errors_name_the_flag() {
        assert_eq!(parse_ids("ids", "1,2, 3").unwrap(), vec![1, 2, 3]);
        for bad in ["", "1,,2", "1,x", "-1", "4294967296", "1;2"] {
            let e = parse_ids("ids", bad).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.message.contains("--ids"), "{e}");
        }
    }
}
