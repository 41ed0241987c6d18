//! Progress on a terminal (ENGINE.md §6), on standard error, rewriting one line: the pinned
//! trunk layers as they load, and the prompt's forward (the layer being bound, at most five
//! times a second, and each finished prefill chunk).

use crate::run::Progress;
use std::time::Instant;

/// Prints [`Progress`] on standard error, rewriting one line.
#[derive(Debug, Default)]
pub struct TerminalProgress {
    /// When a layer line was last shown (None: none shown yet).
    shown: Option<Instant>,
}

impl Progress for TerminalProgress {
    fn layer(&mut self, chunk: usize, n_chunks: usize, layer: usize, layers: usize) {
        if self.shown.is_none_or(|t| t.elapsed().as_millis() >= 200) {
            crate::say!(
                "\rprefill: chunk {}/{}, layer {}/{}\x1b[K",
                chunk + 1,
                n_chunks,
                layer + 1,
                layers
            );
            self.shown = Some(Instant::now());
        }
    }

    fn chunk_done(&mut self, chunk: usize, n_chunks: usize, positions: usize) {
        if n_chunks > 1 {
            crate::say!(
                "\rprefill: chunk {}/{n_chunks} ({} positions)",
                chunk + 1,
                positions
            );
            if chunk + 1 == n_chunks {
                crate::say!("\r\x1b[K");
            }
        }
    }

    fn done(&mut self) {
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
