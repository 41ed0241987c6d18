//! A pseudo-terminal pair for tests that drive `k3` as a user at a terminal would: the
//! child gets the terminal side (stdin, stdout, stderr), the test types on the other side
//! and collects everything shown, on a thread of its own (a full pty buffer would block
//! the child). Linux/glibc `posix_openpt`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long [`Pty::wait_for`] waits before it fails the test (a bound against hanging, not
/// a timed assertion: the tiny model answers in a fraction of it).
const PATIENCE: Duration = Duration::from_secs(120);

/// The test's side of a pseudo-terminal, and a descriptor of the terminal side kept to read
/// its settings.
pub struct Pty {
    master: File,
    /// The terminal side (its settings are the terminal's).
    pub slave: File,
    shown: Arc<(Mutex<Vec<u8>>, Condvar)>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// The terminal's settings (termios) of `f`.
pub fn termios(f: &File) -> libc::termios {
    // SAFETY: termios is plain old data; tcgetattr fills the live out-value and checks the fd.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(f.as_raw_fd(), &mut t), 0, "tcgetattr");
        t
    }
}

/// The fields of `t` a program changes for raw mode (flags and the VMIN/VTIME/VEOF cells).
pub fn modes(t: &libc::termios) -> (u32, u32, u32, u32, [u8; 3]) {
    (
        t.c_iflag,
        t.c_oflag,
        t.c_cflag,
        t.c_lflag,
        [t.c_cc[libc::VMIN], t.c_cc[libc::VTIME], t.c_cc[libc::VEOF]],
    )
}

impl Pty {
    /// A new pair, 80 columns by 24 rows.
    pub fn open() -> Pty {
        // SAFETY: plain libc calls on the descriptor they return; `name` is a live buffer of
        // the length given; the path is NUL-terminated by ptsname_r; `ws` a live winsize.
        let (m, s) = unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(m >= 0, "posix_openpt");
            assert_eq!(libc::grantpt(m), 0);
            assert_eq!(libc::unlockpt(m), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
            let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
            assert!(s >= 0, "open the terminal side");
            let ws = libc::winsize {
                ws_row: 24,
                ws_col: 80,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            libc::ioctl(m, libc::TIOCSWINSZ, &ws);
            (File::from_raw_fd(m), File::from_raw_fd(s))
        };
        let shown = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let mut r = m.try_clone().unwrap();
        let sink = shown.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once no process holds the terminal side any more
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.0.lock().unwrap().extend_from_slice(&buf[..n]);
                sink.1.notify_all();
            }
        });
        Pty {
            master: m,
            slave: s,
            shown,
            reader: Some(reader),
        }
    }

    /// Starts `cmd` with the terminal side as its standard streams, in a process group of
    /// its own (a job, as a shell starts it: it can be stopped and continued). `cmd` is
    /// dropped with its copies of the terminal side.
    pub fn spawn(&self, mut cmd: Command) -> Child {
        use std::os::unix::process::CommandExt;
        let io = || Stdio::from(self.slave.try_clone().unwrap());
        cmd.stdin(io())
            .stdout(io())
            .stderr(io())
            .process_group(0)
            .spawn()
            .expect("start the command on the pseudo-terminal")
    }

    /// Types `bytes`.
    pub fn type_in(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    /// Everything shown so far.
    pub fn shown(&self) -> Vec<u8> {
        self.shown.0.lock().unwrap().clone()
    }

    /// Waits until `what` has been shown `n` times in all; the text shown so far.
    pub fn wait_for(&self, what: &str, n: usize) -> String {
        let start = Instant::now();
        let mut shown = self.shown.0.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&shown).into_owned();
            if text.matches(what).count() >= n {
                return text;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{what:?} not shown {n} times: {text:?}"
            );
            shown = self
                .shown
                .1
                .wait_timeout(shown, Duration::from_millis(200))
                .unwrap()
                .0;
        }
    }

    /// Closes both sides and returns everything shown.
    pub fn close(mut self) -> String {
        // the reader meets EIO once the terminal side is closed everywhere
        self.slave = File::open("/dev/null").unwrap();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        String::from_utf8_lossy(&self.shown()).into_owned()
    }
}
