"""The `k3 serve` harness every client test here uses (openai_client.py, anthropic_client.py,
responses_client.py, chat_page.py): one server started, made ready, logged and stopped the
same way for all.

Each script is run as `python3 tests/serve/SCRIPT.py K3 MODEL_DIR [...]`; `K3`, `MODEL_DIR`
and `MODEL` (the directory's name, the model id) come from those arguments. A server listens
on 127.0.0.1 only (k3 serve's default host), on a free port the kernel picks (`--port 0`,
read back from its `listening on` line); it is ready once `/health` answers 200. Every wait
is bounded (READY_SECONDS, STOP_SECONDS), and `watchdog` kills every server and ends the
script after its hard timeout. A failed check (`check`) or a server that never gets ready
prints the tail of each server's log before the script exits 1.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

K3, MODEL_DIR = sys.argv[1], sys.argv[2]
MODEL = os.path.basename(os.path.normpath(MODEL_DIR))
# The forced reply the tool tests share (K3_TEST_FORCE_IDS): reasoning "Let me check.",
# content "Checking.", one call get_weather(city="Paris"), [EOS].
TOOL_REPLY = (
    "9413,1019,2598,13,163588,39964,163589,163587,12092,163589,67772,13,163588,12092,163589,"
    "163587,25385,163589,163587,10257,4453,878,618,21055,2800,1,4002,878,16,1,163589,163587,"
    "47185,2355,878,37666,1,1798,878,2033,1,163589,113476,163588,47185,163589,163588,10257,"
    "163589,163588,25385,163589,163588,2778,163589,163585"
)
# Longest wait for a server's `listening on` line and then for its /health 200.
READY_SECONDS = 120
# Longest wait for a server to exit after a signal before it is killed.
STOP_SECONDS = 60
# Lines of each server's log printed when something fails.
LOG_TAIL = 40
SERVERS = []


def logs():
    """The tail of every server's log, for a failure message."""
    out = []
    for i, s in enumerate(SERVERS):
        out.append(f"--- k3 serve #{i} ({' '.join(s.args)}), last {LOG_TAIL} log lines:")
        out.extend(s.lines[-LOG_TAIL:])
    return "\n".join(out)


def fail(what):
    """Prints `FAILED: what` and the servers' logs, kills the servers, exits 1."""
    print(f"FAILED: {what}\n{logs()}", flush=True)
    for s in SERVERS:
        s.p.kill()
    sys.exit(1)


def check(cond, what):
    """`ok: what`, or fail with the servers' logs."""
    if not cond:
        fail(what)
    print(f"ok: {what}", flush=True)


def watchdog(seconds, also=()):
    """Kills every server (and the processes of the list `also`, such as a browser) and ends
    the script (exit 1) once `seconds` have passed."""
    def die():
        print(f"FAILED: the script ran past its hard timeout of {seconds} s\n{logs()}",
              flush=True)
        for p in [s.p for s in SERVERS] + list(also):
            p.kill()
        os._exit(1)
    t = threading.Timer(seconds, die)
    t.daemon = True
    t.start()


class Server:
    """`k3 serve MODEL_DIR --port 0 ARGS` with `env` added to (and `unset` taken from) this
    process's environment; ready when /health says 200. `url` is its root
    (`http://127.0.0.1:PORT`), `host` its `127.0.0.1:PORT`, `lines` its log so far."""

    def __init__(self, args, env=None, unset=()):
        e = dict(os.environ)
        for k in unset:
            e.pop(k, None)
        e.update(env or {})
        self.args = list(args)
        self.p = subprocess.Popen(
            [K3, "serve", MODEL_DIR, "--port", "0", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=e, text=True)
        SERVERS.append(self)
        self.lines = []
        self.url = None
        got = threading.Event()

        def read():
            for line in self.p.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on (http://\S+)", line)
                if m and self.url is None:
                    self.url = m.group(1).rstrip("/")
                    got.set()
        threading.Thread(target=read, daemon=True).start()
        end = time.time() + READY_SECONDS
        while not got.wait(0.1):
            self.alive("printed its `listening on` line", end)
        self.host = self.url.split("://", 1)[1]
        end = time.time() + READY_SECONDS
        while not self.healthy():
            self.alive("was healthy", end)
            time.sleep(0.1)

    def alive(self, what, end):
        """Fails when the server exited, or `end` passed, before it `what`."""
        if self.p.poll() is not None:
            time.sleep(0.2)  # the reader takes the last lines
            fail(f"k3 serve exited with {self.p.returncode} before it {what}")
        if time.time() > end:
            fail(f"k3 serve never {what} within {READY_SECONDS} s")

    def healthy(self):
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait(self, seconds=STOP_SECONDS):
        """The exit code, or None when the server still runs after `seconds`."""
        try:
            return self.p.wait(seconds)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` and returns the exit code; killed after STOP_SECONDS."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.wait()
        if rc is None:
            self.p.kill()
            rc = self.p.wait()
        return rc
