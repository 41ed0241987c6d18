//! The terminal under `k3 chat`'s line editor: is a descriptor a terminal, how wide is it,
//! and raw mode (POSIX termios) while a line is read, with bracketed paste on.
//!
//! Raw mode lasts only as long as a [`RawMode`] value (one line read); the terminal's own
//! settings come back when it is dropped, and on every other way out: a panic (a hook), a
//! terminating signal (SIGTERM, SIGHUP, SIGQUIT: restored, then the signal's default action),
//! and a stop (SIGTSTP: restored before the process stops, raw again when it continues).
//! The handlers only call `tcsetattr`, `write`, `signal`, `sigaction`, `pthread_sigmask` and
//! `raise`, all async-signal-safe, and read the saved settings from a static set before raw
//! mode is first entered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The editor reads keys from standard input …
const IN: libc::c_int = 0;
/// … and draws on standard error (where the chat's prompts go).
const OUT: libc::c_int = 2;
/// Bracketed paste on: the terminal wraps pasted text in `ESC[200~` … `ESC[201~`.
const PASTE_ON: &[u8] = b"\x1b[?2004h";
/// Bracketed paste off.
const PASTE_OFF: &[u8] = b"\x1b[?2004l";

/// The terminal's settings before raw mode was first entered (what every exit restores).
static SAVED: OnceLock<libc::termios> = OnceLock::new();
/// Raw mode is on (a [`RawMode`] is alive).
static RAW: AtomicBool = AtomicBool::new(false);
/// The process was stopped and continued while reading: the line must be drawn again.
static CONTINUED: AtomicBool = AtomicBool::new(false);

/// True when `fd` is a terminal.
pub fn is_terminal(fd: libc::c_int) -> bool {
    // SAFETY: isatty takes any integer and only reports (EBADF/ENOTTY for others).
    unsafe { libc::isatty(fd) == 1 }
}

/// The width in columns of the terminal on `fd`, when it is one and says (a pseudo-terminal
/// nobody sized answers 0: `None`).
pub fn columns(fd: libc::c_int) -> Option<usize> {
    // SAFETY: `winsize` is plain old data; an all-zero value is valid and ioctl fills it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the live out-value `ws`; the kernel checks
    // `fd` (a non-terminal fails with ENOTTY).
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// The settings of the terminal on `fd`.
fn get(fd: libc::c_int) -> std::io::Result<libc::termios> {
    // SAFETY: `termios` is plain old data; an all-zero value is valid and tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a live out-value; tcgetattr only writes into it and checks `fd`.
    if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(t)
}

/// Applies `t` once the output written so far is sent (TCSADRAIN: input typed ahead is
/// kept, unlike TCSAFLUSH). Async-signal-safe.
fn set(fd: libc::c_int, t: &libc::termios) -> libc::c_int {
    loop {
        // SAFETY: `t` points to a live, initialised termios; tcsetattr only reads it.
        let rc = unsafe { libc::tcsetattr(fd, libc::TCSADRAIN, t) };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return rc;
        }
    }
}

/// `bytes` written to [`OUT`] as far as it takes them. Async-signal-safe.
fn put(bytes: &[u8]) {
    // SAFETY: the pointer and length describe the live slice `bytes`; write only reads it.
    let _ = unsafe { libc::write(OUT, bytes.as_ptr().cast(), bytes.len()) };
}

/// Raw settings from `t`: bytes as typed (no line editing, echo, signals from keys, flow
/// control or CR→NL), one byte at a time; output processing kept (a stray `\n` still
/// returns the carriage).
fn raw_of(t: &libc::termios) -> libc::termios {
    let mut r = *t;
    r.c_iflag &= !(libc::BRKINT | libc::ICRNL | libc::INPCK | libc::ISTRIP | libc::IXON);
    r.c_cflag |= libc::CS8;
    r.c_lflag &= !(libc::ECHO | libc::ICANON | libc::IEXTEN | libc::ISIG);
    r.c_cc[libc::VMIN] = 1;
    r.c_cc[libc::VTIME] = 0;
    r
}

/// Standard input in raw mode with bracketed paste on, until dropped.
#[derive(Debug)]
pub struct RawMode(());

impl RawMode {
    /// Puts the terminal on standard input in raw mode and turns bracketed paste on.
    ///
    /// Errors: the terminal's settings cannot be read or changed (the OS error).
    pub fn enter() -> std::io::Result<RawMode> {
        let now = get(IN)?;
        let saved = *SAVED.get_or_init(|| now);
        if set(IN, &raw_of(&saved)) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        RAW.store(true, Ordering::SeqCst);
        put(PASTE_ON);
        Ok(RawMode(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if RAW.swap(false, Ordering::SeqCst) {
            restore();
        }
    }
}

/// Bracketed paste off and the saved settings back. Async-signal-safe.
fn restore() {
    if let Some(t) = SAVED.get() {
        put(PASTE_OFF);
        set(IN, t);
    }
}

/// True once after the process was stopped and continued in raw mode (the line is to be
/// drawn again: the shell wrote over the screen).
pub fn take_continued() -> bool {
    CONTINUED.swap(false, Ordering::SeqCst)
}

/// Stops the process as Ctrl-Z would (the key reaches the editor as a byte in raw mode):
/// the terminal restored first, raw again once continued.
pub fn suspend() {
    // SAFETY: raise has no precondition; SIGTSTP runs `on_stop` (or the default: stop).
    unsafe {
        libc::raise(libc::SIGTSTP);
    }
}

extern "C" fn on_terminate(sig: libc::c_int) {
    if RAW.load(Ordering::SeqCst) {
        restore();
    }
    // SAFETY: signal and raise are async-signal-safe; with the default action back, the
    // raised signal (blocked while this handler runs) ends the process as it would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

extern "C" fn on_stop(sig: libc::c_int) {
    let raw = RAW.load(Ordering::SeqCst);
    if raw {
        restore();
    }
    // SAFETY: `set` is a zeroed sigset_t filled by sigemptyset/sigaddset before use; signal,
    // pthread_sigmask and raise are async-signal-safe. With the default action back and the
    // signal unblocked, raise stops the process here until SIGCONT.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    // continued
    handle(sig, on_stop);
    if raw && RAW.load(Ordering::SeqCst) {
        if let Some(t) = SAVED.get() {
            set(IN, &raw_of(t));
            put(PASTE_ON);
        }
        CONTINUED.store(true, Ordering::SeqCst);
    }
}

/// Installs `f` for `sig` (SA_RESTART: an interrupted read goes on). Async-signal-safe.
fn handle(sig: libc::c_int, f: extern "C" fn(libc::c_int)) {
    // SAFETY: `sa` is a zeroed sigaction (no flags, empty mask) whose handler is an
    // `extern "C" fn(c_int)` that only makes async-signal-safe calls; sigaction reads the
    // live local and accepts a null old-action pointer.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// True when `sig` is ignored (a `nohup`'s SIGHUP: it stays ignored).
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: `old` is a zeroed sigaction filled by sigaction; a null new action only asks.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Makes every way out of the process restore the terminal while raw mode is on: SIGTERM,
/// SIGHUP and SIGQUIT (restored, then the default action), SIGTSTP (restored, stopped, raw
/// again when continued) and a panic (restored before the panic is reported). SIGINT stays
/// the chat's ([`super::signal::catch_interrupt`]): it does not end the process, and in raw
/// mode Ctrl-C is a key. Once per process; a signal ignored at start stays ignored.
pub fn restore_on_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            if !ignored(sig) {
                handle(sig, on_terminate);
            }
        }
        if !ignored(libc::SIGTSTP) {
            handle(libc::SIGTSTP, on_stop);
        }
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if RAW.swap(false, Ordering::SeqCst) {
                restore();
            }
            report(info)
        }));
    });
}
