//! The chat's files: `--history` (JSON lines appended per message and per command that
//! changes the conversation), `/save FILE` (the state
//! file of FORMATS.md §9 at FILE and the transcript at FILE.json), `/load FILE`, `/result
//! FILE`, and the `/stats` text.

use crate::chat::conversation::transcript::{history_lines, read_transcript};
use crate::chat::conversation::{Conversation, ConversationOptions, Exchange};
use crate::cli::run::chat_open::ChatModel;
use crate::error::{Error, Result};
use crate::generate::session::{Sequence, SequenceOptions};
use crate::generate::state_file;
use crate::generate::stop::StopRules;
use crate::io::OutFile;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The files and directories a chat reads (the model, `--tok`, `--trunk`, `--config`,
/// `--system-file`, `--tools`, `--messages`) and its `--history` file: no file the chat writes
/// (`--history`, `/save`) may be one of them (`io::out::check_not_input`, by device and inode).
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
}

impl Inputs {
    /// The inputs named by the chat's arguments (`model_dir` is its one positional argument).
    pub fn from_args(a: &crate::cli::args::Args) -> Inputs {
        let mut x = Inputs::default();
        x.dirs.extend(a.positional.first().map(PathBuf::from));
        for d in ["tok", "trunk"] {
            x.dirs.extend(a.value_os(d).map(PathBuf::from));
        }
        for f in ["config", "system-file", "tools", "messages"] {
            x.files.extend(a.value_os(f).map(PathBuf::from));
        }
        x
    }

    /// Adds `path` (the `--history` file) to the files an output may not replace.
    pub fn add_file(&mut self, path: &Path) {
        self.files.push(path.to_path_buf());
    }

    /// Refuses `path` as an output named `flag` when it is one of the inputs.
    ///
    /// Errors (exit 2): naming the flag or command, the path and the input it would replace.
    pub fn check(&self, flag: &str, path: &Path) -> Result<()> {
        let dirs: Vec<&Path> = self.dirs.iter().map(PathBuf::as_path).collect();
        let files: Vec<&Path> = self.files.iter().map(PathBuf::as_path).collect();
        crate::io::out::check_not_input(flag, path, &dirs, &files)
    }
}

/// `--history FILE`, open for appending.
pub struct History {
    path: PathBuf,
    file: std::fs::File,
}

impl History {
    /// Opens (or creates) `path` for appending.
    ///
    /// Errors (exit 2): it is one of the chat's `inputs`, or it cannot be opened, naming the
    /// flag and the file.
    pub fn open(path: &Path, inputs: &Inputs) -> Result<History> {
        inputs.check("--history", path)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                Error::invalid(format!(
                    "flag `--history {}`: cannot open for appending: {e}",
                    path.display()
                ))
            })?;
        Ok(History {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The file appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the lines of exchange `turn` ([`history_lines`]).
    ///
    /// Errors (exit 4): a failed write, naming the file.
    pub fn append(&mut self, x: &Exchange, turn: usize) -> Result<()> {
        self.lines(&history_lines(x, turn))
    }

    /// Appends `lines` (JSON objects), one per line.
    ///
    /// Errors (exit 4): a failed write, naming the file.
    pub fn lines(&mut self, lines: &[String]) -> Result<()> {
        let mut text = lines.join("\n");
        text.push('\n');
        self.file
            .write_all(text.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|e| Error::io(format!("{} (--history): {e}", self.path.display())))
    }
}

/// The user messages of a `--history` file, oldest first, for the line editor's Up: the
/// `content` of every line whose `role` is `user`. A line that is not JSON (a file cut short)
/// or a content that is not text (an array of parts) is passed over; an unreadable file gives
/// none (it was checked when opened, and the chat appends to it all the same).
pub fn user_lines(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read(path) else {
        return Vec::new();
    };
    text.split(|&b| b == b'\n')
        .filter_map(|l| crate::json::parse(l).ok())
        .filter(|v| v.get("role").and_then(crate::json::Value::as_str) == Some("user"))
        .filter_map(|v| {
            v.get("content")
                .and_then(crate::json::Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// `/result FILE`: the file's text (UTF-8).
///
/// Errors (exit 2): unreadable or not UTF-8, naming the file.
pub fn read_result(path: &str) -> Result<String> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid(format!("/result {path}: cannot read: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        Error::invalid(format!(
            "/result {path}: not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn transcript_path(path: &str) -> PathBuf {
    PathBuf::from(format!("{path}.json"))
}

/// `/save FILE`: the sequence's state file at FILE (FORMATS.md §9) and the transcript at
/// FILE.json, each written to a temporary and renamed.
///
/// Errors: nothing to save yet, or the last answer was interrupted or the conversation is to
/// be run again (exit 2); either file one of the chat's `inputs` or its `--history` file
/// (exit 2); the files (exit 2 for a bad path, 3/4 when writing fails).
pub fn save(conv: &Conversation, model: &ChatModel, path: &str, inputs: &Inputs) -> Result<()> {
    let seq = conv
        .sequence()
        .ok_or_else(|| Error::invalid("/save: nothing to save yet (send a message first)"))?;
    if seq.ids().len() != seq.state().n_pos + 1 {
        return Err(Error::invalid(
            "/save: the state after an interrupted answer, /think or a deep /undo is saved after the next turn (send a message first)",
        ));
    }
    let before: usize = conv
        .exchanges
        .iter()
        .rev()
        .skip(1)
        .map(|x| x.reply_ids.len())
        .sum();
    let st = seq.to_state(before as u64)?;
    let tpath = transcript_path(path);
    for p in [Path::new(path), tpath.as_path()] {
        inputs.check("/save", p)?;
    }
    let mut t = OutFile::create("/save", &tpath, "the transcript")?;
    let state = OutFile::create("/save", Path::new(path), "the state file")?;
    state_file::save_to(state, &model.identity, &st)?;
    t.write_all(conv.transcript().to_json_pretty().as_bytes())?;
    t.write_all(b"\n")?;
    t.commit()
}

/// `/load FILE`: the conversation saved at FILE (state) and FILE.json (transcript), checked
/// against this model (FORMATS.md §9.3) and against each other, continuing with `opts` but
/// the saved sampler settings.
///
/// Errors (exit 2): either file refused (naming the field), the two disagree, the
/// conversation does not fit this context.
pub fn load(model: &ChatModel, opts: &ConversationOptions, path: &str) -> Result<Conversation> {
    let st = state_file::load("/load", Path::new(path), &model.identity)?;
    let tpath = transcript_path(path);
    let bytes = std::fs::read(&tpath)
        .map_err(|e| Error::invalid(format!("/load: {}: cannot read: {e}", tpath.display())))?;
    let origin = tpath.display().to_string();
    let v = crate::json::parse(&bytes).map_err(|e| e.into_error(&origin, 0))?;
    let tr = read_transcript(&v, &origin)?;
    let mut ids = st.ids.clone();
    ids.push(st.pending);
    if ids != tr.ids {
        return Err(Error::invalid(format!(
            "/load: {origin}: ids: the transcript's {} ids are not the state file's {}",
            tr.ids.len(),
            ids.len()
        )));
    }
    if ids.len() + tr.closing.len() >= opts.ctx {
        return Err(Error::invalid(format!(
            "/load {path}: the conversation holds {} ids, more than this context of {} allows",
            ids.len(),
            opts.ctx
        )));
    }
    let mut opts = opts.clone();
    opts.settings = tr.sampler;
    let rules = StopRules::new(
        opts.end_ids.clone(),
        Vec::new(),
        Vec::new(),
        u64::MAX,
        opts.ctx as u64,
        opts.vocab,
    )?;
    let so = SequenceOptions {
        settings: tr.sampler,
        rules,
        all_rows: false,
    };
    let seq = Sequence::from_state(&model.sess.model, &st, &[], opts.ctx, so)?;
    Ok(Conversation::resumed(
        tr.req,
        opts,
        seq,
        tr.closing,
        tr.base_messages,
    ))
}

/// `/stats`: the conversation's ids and context, the last turn's and all turns' figures.
pub fn stats(conv: &Conversation) -> String {
    let xs = &conv.exchanges;
    let mut s = format!(
        "conversation: {} ids of a context of {} positions, {} exchange{}\n",
        conv.len(),
        conv.opts.ctx,
        xs.len(),
        if xs.len() == 1 { "" } else { "s" }
    );
    if let Some(x) = xs.last() {
        let per = if x.reply_ids.is_empty() {
            0.0
        } else {
            x.decode_seconds / x.reply_ids.len() as f64
        };
        s.push_str(&format!(
            "last turn: prefilled {} ids in {:.2} s, {} reply ids at {:.3} s/token, stop: {}\n",
            x.prefilled,
            x.prefill_seconds,
            x.reply_ids.len(),
            per,
            x.end.name()
        ));
    }
    let prefilled: usize = xs.iter().map(|x| x.prefilled).sum();
    let generated: usize = xs.iter().map(|x| x.reply_ids.len()).sum();
    s.push_str(&format!(
        "all turns: prefilled {prefilled} ids, generated {generated} ids\n"
    ));
    s
}
