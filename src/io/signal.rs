//! Ctrl-C for `k3 chat`: SIGINT sets a flag instead of ending the process, so an answer can
//! be stopped and closed (TOKENIZER.md §11) while the conversation stays usable.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_sig: libc::c_int) {
    // An atomic store is async-signal-safe: nothing else happens in the handler.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT set the flag [`take_interrupt`] reads, instead of ending the process.
/// Returns false when the handler could not be installed (Ctrl-C then ends the process).
pub fn catch_interrupt() -> bool {
    // SAFETY: `on_sigint` is an `extern "C" fn(c_int)` that only stores to an atomic, which
    // is async-signal-safe; `signal` has no other precondition. The handler stays valid for
    // the process's life (a static function).
    let prev = unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    prev != libc::SIG_ERR
}

/// True once after each SIGINT since the last call (the flag is cleared).
pub fn take_interrupt() -> bool {
    INTERRUPTED.swap(false, Ordering::SeqCst)
}
