#!/usr/bin/env python3
"""Joining prompts beside decoding requests (issue 23 item 5, Bench). Standard library only.

For each k3 binary given (e.g. main's and this branch's), starts `k3 serve MODEL --port 0
--parallel 4` on 127.0.0.1 and measures, `--rounds` times (medians reported):

* ttft_alone: one streamed completion of `--prompt` distinct ids (max_tokens 1): the seconds
  from sending it to its first SSE data event;
* ttft_4_together: four such requests (different ids) sent at once: each one's time to first
  token, median and largest, and their mean as a ratio to ttft_alone;
* decode while a prompt prefills: a streamed completion of 8 ids decodes (up to 1500 ids);
  after its 20th token another request of `--prompt` ids arrives. Its s/token before that
  (decode_s_per_token_alone) and between the second request's arrival and first token
  (decode_s_per_token_during_prefill), the longest gap between two of its tokens in that
  window (max_gap_s_during_prefill: the whole prompt's prefill when a joiner runs alone).

Every request is bounded by --timeout; the server is stopped with SIGTERM (killed if it
outlives 30 s). Writes TSV rows `binary metric value` after `#` lines with the command, the
machine, the load average and the server command.

    python3 bench/serve_prefill.py --k3 main=/tmp/main/k3 --k3 branch=target/debug/k3 \\
        --model tests/fixtures/tiny-k3-text --tsv bench/results/serve-prefill-YYYYMMDD.tsv
"""

import argparse
import http.client
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_clients import Out, machine  # noqa: E402


def start(k3, model, extra):
    cmd = [k3, "serve", model, "--port", "0", "--ctx", "2048", "--parallel", "4"] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.match(r"k3 serve: ready on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1)), cmd
    raise RuntimeError("the server did not start: " + " ".join(cmd))


def stop(p):
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def stream(port, ids, max_tokens, timeout, times, started=None, stop_at=None):
    """Streams one greedy completion of `ids`; appends the time of each data event to
    `times`; returns (send time, first-token time). Stops reading when `stop_at` is set."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps({"model": MODEL_ID[0], "prompt": ids, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first = None
    for raw in r:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        now = time.perf_counter()
        first = first or now
        times.append(now)
        if started is not None and len(times) == 20:
            started.set()
        if stop_at is not None and stop_at.is_set():
            break
    conn.close()
    return t0, first


MODEL_ID = ["k3"]


def prompt(n, salt):
    return [1000 + (salt * 7919 + i * 31) % 9000 for i in range(n)]


def ttft(port, n, salts, timeout):
    res = [None] * len(salts)

    def one(k):
        t0, t1 = stream(port, prompt(n, salts[k]), 1, timeout, [])
        res[k] = t1 - t0
    th = [threading.Thread(target=one, args=(k,)) for k in range(len(salts))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return res


def decode_during(port, n, salt, timeout):
    a_times, started, done = [], threading.Event(), threading.Event()
    a = threading.Thread(target=stream, args=(port, prompt(8, salt), 1500, timeout, a_times,
                                              started, done))
    a.start()
    if not started.wait(timeout):
        raise RuntimeError("the decoding request never reached 20 tokens")
    t0, t1 = stream(port, prompt(n, salt + 1), 1, timeout, [])
    done.set()
    a.join(timeout)
    before = [t for t in a_times if t < t0]
    during = [t for t in a_times if t0 <= t <= t1]
    alone = (before[-1] - before[0]) / max(1, len(before) - 1)
    # the window's s/token: its length over the tokens that came in it (a window with none
    # counts its whole length for one token)
    win = [t0] + during + [t1]
    gaps = [b - a for a, b in zip(win, win[1:])]
    return alone, (t1 - t0) / max(1, len(during)), max(gaps), t1 - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k3", action="append", required=True, help="NAME=PATH of a k3 binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--tsv")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    MODEL_ID[0] = os.path.basename(os.path.normpath(a.model))
    out = Out(a.tsv)
    out.comment("command: " + " ".join(shlex.quote(x) for x in [sys.executable] + sys.argv))
    out.comment("machine: " + machine())
    out.comment("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    out.comment("started: " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    if a.note:
        out.comment(a.note)
    out.row("binary", "metric", "value")
    salt = 1
    for spec in a.k3:
        name, path = spec.split("=", 1)
        p, port, cmd = start(path, a.model, a.serve_arg)
        out.comment(f"{name}: server command: " + " ".join(cmd))
        try:
            stream(port, prompt(4, 0), 2, a.timeout, [])  # warm up
            alone, together, dec = [], [], []
            for _ in range(a.rounds):
                alone += ttft(port, a.prompt, [salt], a.timeout)
                together.append(ttft(port, a.prompt, [salt + 1, salt + 2, salt + 3, salt + 4],
                                     a.timeout))
                dec.append(decode_during(port, a.prompt, salt + 5, a.timeout))
                salt += 7
            med = statistics.median
            t_alone = med(alone)
            out.row(name, "ttft_alone_s", f"{t_alone:.4f}")
            out.row(name, "ttft_4_together_median_s", f"{med([med(t) for t in together]):.4f}")
            out.row(name, "ttft_4_together_first_s", f"{med([min(t) for t in together]):.4f}")
            out.row(name, "ttft_4_together_last_s", f"{med([max(t) for t in together]):.4f}")
            out.row(name, "ttft_4_together_mean_vs_alone",
                    f"{med([statistics.mean(t) for t in together]) / t_alone:.3f}")
            out.row(name, "decode_s_per_token_alone", f"{med([d[0] for d in dec]):.5f}")
            out.row(name, "decode_s_per_token_during_prefill", f"{med([d[1] for d in dec]):.5f}")
            out.row(name, "max_gap_s_during_prefill", f"{med([d[2] for d in dec]):.4f}")
            out.row(name, "joiner_ttft_beside_decoder_s", f"{med([d[3] for d in dec]):.4f}")
        finally:
            stop(p)
    out.comment("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
