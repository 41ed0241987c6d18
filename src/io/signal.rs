//! Signals as flags; each handler only stores to a static atomic (async-signal-safe):
//! * Ctrl-C for `k3 chat` ([`catch_interrupt`], [`take_interrupt`]): SIGINT sets a flag
//!   instead of ending the process, so an answer can be stopped and closed (TOKENIZER.md §11)
//!   while the conversation stays usable.
//! * SIGINT and SIGTERM for `k3 serve`'s drain (ENGINE.md §11, [`install_terminate_handler`],
//!   [`terminate_requested`]): the server polls the flag.

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

static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    // Only an atomic store: nothing else is async-signal-safe here.
    TERMINATE.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT and SIGTERM handler that raises the flag (replacing the default, which
/// ends the process at once). A second signal still only raises the flag; the drain is bounded.
///
/// Errors: `sigaction` refused (the OS error), naming the signal.
pub fn install_terminate_handler() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sa` is a zeroed `sigaction` (a valid "no flags, empty mask" value) whose
        // handler is an `extern "C" fn(c_int)` that only performs an atomic store, which is
        // async-signal-safe; `sigemptyset` and `sigaction` get pointers to that live local and
        // a null old-action pointer, which both accept.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("sigaction(signal {sig}): {e}"),
            ));
        }
    }
    Ok(())
}

/// True once SIGINT or SIGTERM arrived after [`install_terminate_handler`].
pub fn terminate_requested() -> bool {
    TERMINATE.load(Ordering::SeqCst)
}
