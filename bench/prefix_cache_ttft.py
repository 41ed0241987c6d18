#!/usr/bin/env python3
"""Time to first token after a restart, with and without `--prefix-cache` (issue 24 item 3).

    python3 bench/prefix_cache_ttft.py <k3> <model_dir> <out.tsv> [--preamble 2048]
        [--repeats 3] [--budget NAME=FLAGS]...

For each budget (default: `resident` = no flags, and `floor` = `--trunk-gb 0 --cache-gb 0`,
the trunk streamed and the smallest expert cache) and each mode:
  * `cold`: a server without the cache is started, one streamed chat completion whose
    system prompt is a preamble of about --preamble tokens is sent, the server is stopped;
  * `disk`: a server with `--prefix-cache DIR` serves the same request once (writing the
    file), is stopped (SIGTERM: the writer finishes), started again on DIR, and the same
    request is timed: the preamble comes from the file.
The time to first token is from sending the request to the first SSE chunk that carries
generated text (reasoning or content). Loopback only; every wait bounded. Writes a TSV
headed by the command, the machine and the load.
"""

import http.client
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

K3, MODEL_DIR, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
ARGS = sys.argv[4:]


def opt(name, default):
    if name in ARGS:
        return ARGS[ARGS.index(name) + 1]
    return default


PREAMBLE = int(opt("--preamble", "2048"))
REPEATS = int(opt("--repeats", "3"))
BUDGETS = [a.split("=", 1) for i, a in enumerate(ARGS) if i > 0 and ARGS[i - 1] == "--budget"]
if not BUDGETS:
    BUDGETS = [["resident", ""], ["floor", "--trunk-gb 0 --cache-gb 0"]]
MODEL = "bench"
TIMEOUT = 3600


class Server:
    def __init__(self, extra):
        self.cmd = [K3, "serve", MODEL_DIR, "--port", "0", "--model-id", MODEL, "--ctx",
                    str(PREAMBLE + 512), "--parallel", "1", *extra]
        self.p = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.p.stderr:
                m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(TIMEOUT):
            self.p.kill()
            sys.exit(f"not ready: {self.cmd}")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()

    def ttft(self, body):
        """Seconds to the first generated text chunk, and the usage's cached ids."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        t0 = time.monotonic()
        c.request("POST", "/v1/chat/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        first, cached, prompt = None, None, None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                d = ch.get("delta", {})
                if first is None and (d.get("content") or d.get("reasoning_content")):
                    first = time.monotonic() - t0
            if ev.get("usage"):
                cached = ev["usage"]["prompt_tokens_details"]["cached_tokens"]
                prompt = ev["usage"]["prompt_tokens"]
        c.close()
        return first, cached, prompt


def body(words):
    system = " ".join(f"rule{i % 97} says keep change {i} small and tested." for i in range(words))
    return {"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": "Begin."}]}


def sized_body():
    """A request whose prompt is about PREAMBLE tokens (measured on a server)."""
    s = Server([])
    try:
        words = PREAMBLE // 4
        for _ in range(6):
            b = body(words)
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
            c.request("POST", "/v1/messages/count_tokens",
                      json.dumps({"model": MODEL, "system": b["messages"][0]["content"],
                                  "messages": [{"role": "user", "content": "Begin."}]}),
                      {"Content-Type": "application/json"})
            n = json.loads(c.getresponse().read())["input_tokens"]
            if abs(n - PREAMBLE) <= PREAMBLE // 50:
                return b, n
            words = max(1, int(words * PREAMBLE / n))
        return b, n
    finally:
        s.stop()


def main():
    load_before = os.getloadavg()
    started = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())
    b, n = sized_body()
    rows = []
    for name, flags in BUDGETS:
        extra = flags.split()
        for mode in ("cold", "disk"):
            times = []
            for _ in range(REPEATS):
                d = tempfile.mkdtemp(prefix="k3-ttft-")
                try:
                    cache = ["--prefix-cache", d] if mode == "disk" else []
                    if mode == "disk":
                        s = Server(extra + cache)
                        s.ttft(b)
                        s.stop()
                    s = Server(extra + cache)
                    t, cached, prompt = s.ttft(b)
                    s.stop()
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                times.append(t)
            rows.append((name, mode, prompt, cached, statistics.median(times), times))
            print(rows[-1], flush=True)
    with open(OUT, "w") as f:
        f.write(f"# command: python3 bench/prefix_cache_ttft.py {shlex.join(sys.argv[1:])}\n")
        f.write(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                f"{platform.platform()}\n")
        f.write(f"# load average before: {' '.join(f'{x:.2f}' for x in load_before)}\n")
        f.write(f"# started: {started}\n")
        f.write(f"# preamble: {n} tokens (count_tokens of the system prompt and one user turn); "
                f"median of {REPEATS} restarts each; ttft = request sent to the first text chunk\n")
        f.write("budget\tmode\tprompt_tokens\tcached_tokens\tttft_s\tspeedup_vs_cold\truns_s\n")
        cold = {r[0]: r[4] for r in rows if r[1] == "cold"}
        for name, mode, prompt, cached, t, times in rows:
            f.write(f"{name}\t{mode}\t{prompt}\t{cached}\t{t:.3f}\t{cold[name] / t:.2f}\t"
                    f"{','.join(f'{x:.3f}' for x in times)}\n")
        f.write(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")


if __name__ == "__main__":
    main()
