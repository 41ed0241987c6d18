//! The engine's I/O layer (FORMATS.md §2.5 and §6, ENGINE.md §4–§5): positioned reads with
//! `O_DIRECT` into 4096-aligned, pre-faulted buffers, the I/O threads that execute them, and
//! what the system says about memory (peak RSS, `MemAvailable`, cgroup limits), and the
//! terminal under the chat's line editor (`tty`: raw mode, restored on every way out).
//!
//! With `kernels/`, the only place where `unsafe` is allowed; every block says why it is sound.
//! Errors during reads are exit 4 and name the file and byte offset.

pub mod buf;
pub mod extent;
pub mod file;
pub mod out;
pub mod probe;
pub mod signal;
pub mod sys;
pub mod threads;
pub mod tty;

pub use buf::{AlignedBuf, ALIGN};
pub use extent::Extent;
pub use file::{window, window_capacity, IoFile, ReadDone, Window};
pub use out::OutFile;
pub use threads::{IoThreads, OnLanded, ReadRequest, ReadTicket};
