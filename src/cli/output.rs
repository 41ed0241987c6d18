//! What a run shows and writes as it goes (ENGINE.md §3, §6): the generated ids (or text) on
//! standard output, the prefill and step lines on standard error, and the `--dump-logits` rows.

use super::tokenize::TextPrinter;
use crate::error::Result;
use crate::io::OutFile;
use crate::report::RunReport;
use crate::run::RunOutput;
use crate::tokenizer::Tokenizer;

/// The run's output to the terminal and files ([`RunOutput`] of the main job).
pub struct CliOutput<'a> {
    tok: Option<&'a Tokenizer>,
    printer: Option<TextPrinter<'a, std::io::Stdout>>,
    /// `--dump-logits`: little-endian f32 rows under a temporary name until the run completes.
    dump: Option<OutFile>,
    quiet: bool,
    /// Step lines held back until the text is out (text and step lines on one terminal).
    defer_steps: bool,
    /// The held-back step lines.
    pub deferred: Vec<String>,
    printed: bool,
    /// `--stop` is given: the session releases the text (held back while it may begin a stop
    /// string), and that is what is printed.
    pub stop_text: bool,
}

impl<'a> CliOutput<'a> {
    /// Output for a run: text through `tok` when given (else ids), logits rows to `dump`,
    /// no lines on standard error when `quiet`.
    pub fn new(tok: Option<&'a Tokenizer>, dump: Option<OutFile>, quiet: bool) -> CliOutput<'a> {
        let printer = tok.map(|t| TextPrinter::new(t, std::io::stdout()));
        // Text and step lines on the same terminal would interleave mid-line: then the step
        // lines follow the generated text (ENGINE.md §6 content, cleanly separated).
        let defer_steps = printer.is_some()
            && crate::io::sys::stdout_is_terminal()
            && crate::io::sys::stderr_is_terminal();
        CliOutput {
            tok,
            printer,
            dump,
            quiet,
            defer_steps,
            deferred: Vec::new(),
            printed: false,
            stop_text: false,
        }
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
        if !self.quiet {
            crate::sayln!(
                "prefill: {} positions in {} chunks of up to {}, {:.3} s",
                positions,
                positions.div_ceil(chunk),
                chunk,
                seconds
            );
        }
    }

    fn token(&mut self, rep: &RunReport, step: usize, id: u32, text: &str) -> Result<()> {
        match &mut self.printer {
            Some(_) if self.stop_text => crate::cli::write_stdout(text.as_bytes())?,
            Some(p) => p.push(id)?,
            None => {
                // The generated ids are the run's output: a failed write (a full disk, a
                // closed pipe) fails the run (exit 4) as it does for text.
                let sep = if self.printed { "," } else { "" };
                crate::cli::write_stdout(format!("{sep}{id}").as_bytes())?;
            }
        }
        self.printed = true;
        if !self.quiet {
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
        if self.printed || self.printer.is_some() {
            crate::cli::write_stdout(b"\n")?;
        }
        if let Some(t) = self.tok {
            rep.generated_text = Some(t.decode_lossy(&rep.generated_ids)?);
        }
        match self.dump.take() {
            Some(w) => w.commit(),
            None => Ok(()),
        }
    }
}
