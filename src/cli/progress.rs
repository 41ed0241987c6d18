//! Progress on a terminal (ENGINE.md §6), on standard error, rewriting one line: the pinned
//! trunk layers as they load, and the prompt's forward: positions done, positions/s and time
//! left in the server's format (`prefill DONE/TOTAL RATE/s ETA s`, ENGINE.md §11), then the
//! chunk and the layer being bound (at most five times a second).

use crate::generate::session::PrefillProgress;
use crate::run::Progress;
use std::time::Instant;

/// Prints [`Progress`] on standard error, rewriting one line.
#[derive(Debug, Default)]
pub struct TerminalProgress {
    /// When a layer line was last shown (None: none shown yet).
    shown: Option<Instant>,
    /// The prompt's forward: when it started, positions run before it, positions it runs.
    prompt: Option<(Instant, usize, usize)>,
    /// Positions run so far (in all, those before the forward included).
    positions: usize,
}

impl TerminalProgress {
    /// The prompt's progress now (zeros before a forward started).
    fn now(&self) -> PrefillProgress {
        match self.prompt {
            Some((t, base, total)) => PrefillProgress {
                done: self.positions.saturating_sub(base).min(total),
                total,
                seconds: t.elapsed().as_secs_f64(),
            },
            None => PrefillProgress {
                done: 0,
                total: 0,
                seconds: 0.0,
            },
        }
    }
}

impl Progress for TerminalProgress {
    fn started(&mut self, base: usize, total: usize) {
        self.prompt = Some((Instant::now(), base, total));
        self.positions = base;
    }

    fn layer(&mut self, chunk: usize, n_chunks: usize, layer: usize, layers: usize) {
        if self.shown.is_none_or(|t| t.elapsed().as_millis() >= 200) {
            crate::say!(
                "\r{} (chunk {}/{}, layer {}/{})\x1b[K",
                self.now(),
                chunk + 1,
                n_chunks,
                layer + 1,
                layers
            );
            self.shown = Some(Instant::now());
        }
    }

    fn chunk_done(&mut self, chunk: usize, n_chunks: usize, positions: usize) {
        self.positions = positions;
        if n_chunks > 1 {
            crate::say!("\r{} (chunk {}/{n_chunks})\x1b[K", self.now(), chunk + 1);
            if chunk + 1 == n_chunks {
                crate::say!("\r\x1b[K");
            }
        }
    }

    fn done(&mut self) {
        self.prompt = None;
        if self.shown.take().is_some() {
            crate::say!("\r\x1b[K");
        }
    }
}

/// One line per pinned trunk layer read while the model loads: `done` of `total`, `bytes` so
/// far; the line is cleared after the last.
pub fn pinned_layers(done: usize, total: usize, bytes: u64) {
    crate::say!(
        "\rloading pinned trunk layers: {done}/{total} ({})\x1b[K",
        crate::units::gb(bytes)
    );
    if done == total {
        crate::say!("\r\x1b[K");
    }
}
