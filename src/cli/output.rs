//! What a run shows and writes as it goes (ENGINE.md §3, §6): the generated ids (or text) on
//! standard output; on standard error the one-line live status on a terminal, or with
//! `--verbose` the prefill and step lines; and the `--dump-logits` rows. When standard output
//! and standard error are the same file (one terminal, `> log 2>&1`) nothing on standard error
//! breaks into the generated text: step lines wait until it is out, and the report starts on
//! its own line.

use super::tokenize::TextPrinter;
use crate::error::Result;
use crate::io::OutFile;
use crate::report::RunReport;
use crate::run::RunOutput;
use crate::tokenizer::Tokenizer;
use crate::units;

/// The run's output to the terminal and files ([`RunOutput`] of the main job).
pub struct CliOutput<'a> {
    tok: Option<&'a Tokenizer>,
    printer: Option<TextPrinter<'a, std::io::Stdout>>,
    /// `--dump-logits`: little-endian f32 rows under a temporary name until the run completes.
    dump: Option<OutFile>,
    quiet: bool,
    /// `--verbose`: the prefill line and one line per step.
    verbose: bool,
    /// The live decode status (`\r`-rewritten), with the tokens to generate: only on a
    /// terminal that is not also standard output.
    live: Option<usize>,
    /// Standard output and standard error are the same file.
    same_file: bool,
    /// Step lines held back until the generated output is out (both on one file).
    defer_steps: bool,
    /// The held-back step lines.
    pub deferred: Vec<String>,
    printed: bool,
    /// `--stop` is given: the session releases the text (held back while it may begin a stop
    /// string), and that is what is printed.
    pub stop_text: bool,
    /// Ids whose text is not printed: the end id that closes `--json-schema` output, so
    /// standard output is exactly the JSON (piped to `jq`, say).
    pub hide_ids: Vec<u32>,
    /// The generated output's line is ended (by [`RunOutput::finish`] or [`CliOutput::end_line`]).
    ended: bool,
}

impl<'a> CliOutput<'a> {
    /// Output for a run: text through `tok` when given (else ids), logits rows to `dump`,
    /// no lines on standard error when `quiet`.
    pub fn new(tok: Option<&'a Tokenizer>, dump: Option<OutFile>, quiet: bool) -> CliOutput<'a> {
        let printer = tok.map(|t| TextPrinter::new(t, std::io::stdout()));
        // The generated output and step lines in one file would interleave mid-line: then the
        // step lines follow the generated output (ENGINE.md §6 content, cleanly separated).
        let same_file = crate::io::sys::stdout_is_stderr();
        CliOutput {
            tok,
            printer,
            dump,
            quiet,
            verbose: false,
            live: None,
            same_file,
            defer_steps: same_file,
            deferred: Vec::new(),
            printed: false,
            stop_text: false,
            hide_ids: Vec::new(),
            ended: false,
        }
    }

    /// What standard error shows as the run goes: `verbose` (the prefill and step lines), and
    /// when `progress` (a terminal, no `--no-progress`) and not verbose a live status line of
    /// the `gen` tokens, unless standard output is the same terminal (the text shows progress).
    pub fn show(&mut self, verbose: bool, progress: bool, gen: usize) {
        self.verbose = verbose && !self.quiet;
        let live = progress && !self.quiet && !verbose && !self.same_file;
        self.live = live.then_some(gen);
    }

    /// Ends the generated output's line when the run stopped before [`RunOutput::finish`] (an
    /// error) and standard error is the same file, so the error starts on its own line; clears
    /// the live status.
    pub fn end_line(&mut self) {
        if self.live.is_some() {
            crate::say!("\r\x1b[K");
        }
        if !self.ended && self.printed && self.same_file {
            let _ = crate::cli::write_stdout(b"\n");
        }
        self.ended = true;
    }
}

impl RunOutput for CliOutput<'_> {
    fn logits(&mut self, rows: &[f32]) -> Result<()> {
        if let Some(w) = &mut self.dump {
            let mut b = Vec::with_capacity(rows.len() * 4);
            for v in rows {
                b.extend_from_slice(&v.to_le_bytes());
            }
            w.write_all(&b)?;
        }
        Ok(())
    }

    fn prefilled(&mut self, positions: usize, chunk: usize, seconds: f64) {
        if self.verbose {
            crate::sayln!(
                "prefill: {} in {} of up to {chunk}, {seconds:.3} s",
                units::count(positions as u64, "position", "positions"),
                units::count(positions.div_ceil(chunk) as u64, "chunk", "chunks"),
            );
        }
    }

    fn token(&mut self, rep: &RunReport, step: usize, id: u32, text: &str) -> Result<()> {
        match &mut self.printer {
            Some(_) if self.stop_text => crate::cli::write_stdout(text.as_bytes())?,
            Some(_) if self.hide_ids.contains(&id) => {}
            Some(p) => p.push(id)?,
            None => {
                // The generated ids are the run's output: a failed write (a full disk, a
                // closed pipe) fails the run (exit 4) as it does for text.
                let sep = if self.printed { "," } else { "" };
                crate::cli::write_stdout(format!("{sep}{id}").as_bytes())?;
            }
        }
        self.printed = true;
        if let Some(gen) = self.live {
            crate::say!("\r{}\x1b[K", rep.status_line(step, gen));
        }
        if self.verbose {
            if self.defer_steps {
                self.deferred.push(rep.step_line(step));
            } else {
                crate::sayln!("{}", rep.step_line(step));
            }
        }
        Ok(())
    }

    fn text(&mut self, text: &str) -> Result<()> {
        if self.stop_text && !text.is_empty() {
            crate::cli::write_stdout(text.as_bytes())?;
        }
        Ok(())
    }

    fn finish(&mut self, rep: &mut RunReport) -> Result<()> {
        if let Some(p) = &mut self.printer {
            p.finish()?;
        }
        if self.live.take().is_some() {
            crate::say!("\r\x1b[K");
        }
        if self.printed || self.printer.is_some() {
            crate::cli::write_stdout(b"\n")?;
        }
        self.ended = true;
        if let Some(t) = self.tok {
            rep.generated_text = Some(t.decode_lossy(&rep.generated_ids)?);
        }
        match self.dump.take() {
            Some(w) => w.commit(),
            None => Ok(()),
        }
    }
}
