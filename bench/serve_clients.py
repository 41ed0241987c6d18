#!/usr/bin/env python3
"""Clients of a running `k3 serve` at 1, 2, 4, 8 concurrent clients (issue 14, Bench).
Standard library only. Two modes:

* `throughput` (default): requests/s and aggregate tokens/s; greedy completions of fixed ids,
  so every client's work is the same and the figures compare across client counts.
* `ttft`: time to first token of a long conversation, with and without prefix reuse. Each
  client, at each client count, streams three chat requests one after the other:
    cold       turn 1 of a conversation of about --prompt-ids ids (repeated text), never seen;
    reuse      its turn 2 (turn 1, the assistant's reply, a new user message): the server
               continues from the snapshot of turn 1's prompt (cached_tokens);
    no_reuse   turn 2 of a conversation of the same shape whose turn 1 was never sent, so
               nothing can be reused: the baseline for `reuse`.
  TTFT is the time from sending the request to the first SSE chunk whose delta carries
  content or reasoning text (`reasoning_content`, or `reasoning`). Every conversation starts
  with a marker unique to the run, client count and client, so no snapshot of an earlier run
  is reused by a cold request.

    k3 serve /work/synth-k3 --tok tests/fixtures/tiny-k3-text --port 8000 --ctx 4096 --parallel 8
    python3 bench/serve_clients.py http://127.0.0.1:8000 synth-k3 --clients 1,2,4,8 --tokens 8
    k3 serve /work/synth-k3 --tok tests/fixtures/tiny-k3-text --port 8000 --ctx 4096 --parallel 8 \\
        --snapshots 24
    python3 bench/serve_clients.py http://127.0.0.1:8000 synth-k3 --mode ttft --clients 1,2,4,8 \\
        --tsv bench/results/serve-ttft-synth-k3-YYYYMMDD.tsv --server-cmd "k3 serve …"

In ttft mode each client holds up to three snapshots at once (its turn 1 and the two turn-2
prompts), so give the server `--snapshots` of at least 3 × the largest client count (and
`--ctx` above the conversation: about --prompt-ids + 100), or least-recently-used eviction
shows up as `reuse` rows with cached_tokens 0.

Prints one TSV line per client count (throughput) or per request and a median summary per
client count and phase (ttft). `--tsv FILE` writes the same rows to FILE after `#` lines with
the machine, the load average before and after, the time and the exact command.
"""

import argparse
import concurrent.futures
import json
import os
import platform
import shlex
import statistics
import sys
import time
import urllib.parse
import http.client
import urllib.request

# the text a long conversation repeats (about 60 ids of the Kimi tokenizer per repetition)
FILLER = ("The quick brown fox jumps over the lazy dog while the committee reviews the "
          "quarterly figures, and nobody in the building remembers who ordered the forty "
          "crates of oranges now stacked in the corridor. ")


def one(url, model, tokens, i):
    """One greedy completion (throughput mode); its completion tokens."""
    body = json.dumps({"model": model, "prompt": [1000 + i, 2000, 3000, 4000],
                       "max_tokens": tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.load(r)["usage"]["completion_tokens"]


def throughput(a, out):
    out.row("clients", "requests", "seconds", "requests_per_s", "tokens_per_s",
            "speedup_vs_1")
    base = None
    for n in a.client_counts:
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            toks = sum(ex.map(lambda i: one(a.url, a.model, a.tokens, i), range(n * a.rounds)))
        dt = time.time() - t0
        tps = toks / dt
        base = base or tps
        out.row(n, n * a.rounds, f"{dt:.1f}", f"{n * a.rounds / dt:.3f}", f"{tps:.3f}",
                f"{tps / base:.2f}")


def stream_chat(url, model, messages, max_tokens, timeout):
    """Streams one chat request. Returns (ttft seconds or None, total seconds, reasoning,
    content, usage): TTFT at the first delta with text."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    ttft, reasoning, content, usage = None, "", "", None
    for raw in r:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        v = json.loads(line[6:])
        if "error" in v:
            raise RuntimeError(f"stream error: {v['error']}")
        if v.get("usage"):
            usage = v["usage"]
        for c in v.get("choices", []):
            d = c.get("delta", {})
            text = (d.get("reasoning_content") or d.get("reasoning") or "", d.get("content") or "")
            if ttft is None and (text[0] or text[1]):
                ttft = time.perf_counter() - t0
            reasoning += text[0]
            content += text[1]
    total = time.perf_counter() - t0
    conn.close()
    return ttft, total, reasoning, content, usage


def conversation(marker, reps):
    """Turn 1 of a long conversation: a user message of `reps` repetitions of FILLER."""
    return [{"role": "user",
             "content": f"[{marker}] Read this and summarise it.\n\n" + FILLER * reps}]


def turn2(turn1, reasoning, content):
    """Turn 2 after `turn1`: the assistant's reply sent back, then a short user message."""
    return turn1 + [{"role": "assistant", "content": content, "reasoning_content": reasoning},
                    {"role": "user", "content": "And in one word?"}]


def ttft_client(a, reps, nonce, n, c):
    """One client's three requests (cold, reuse, no_reuse) at client count `n`: their rows."""
    rows = []
    first = conversation(f"{nonce} n{n} c{c} A", reps)
    ttft, total, reasoning, content, u = stream_chat(a.url, a.model, first, a.tokens, a.timeout)
    rows.append(("cold", ttft, total, u))
    ttft, total, _, _, u = stream_chat(a.url, a.model, turn2(first, reasoning, content),
                                       a.tokens, a.timeout)
    rows.append(("reuse", ttft, total, u))
    # same shape, never sent before: its turn 1 is not held, nothing to reuse
    other = conversation(f"{nonce} n{n} c{c} B", reps)
    ttft, total, _, _, u = stream_chat(a.url, a.model, turn2(other, reasoning, content),
                                       a.tokens, a.timeout)
    rows.append(("no_reuse", ttft, total, u))
    return [(c,) + r for r in rows]


def calibrate(a, nonce):
    """Repetitions of FILLER for about --prompt-ids prompt ids, from two short prompts'
    `usage.prompt_tokens` (their difference is the ids of the added repetitions)."""
    counts = []
    for reps in (1, 5):
        *_, u = stream_chat(a.url, a.model, conversation(f"{nonce} calibrate {reps}", reps),
                            1, a.timeout)
        counts.append(u["prompt_tokens"])
    per_rep = max((counts[1] - counts[0]) / 4, 1)
    base = counts[0] - per_rep
    return max(1, round((a.prompt_ids - base) / per_rep))


def ttft(a, out):
    nonce = f"run{int(time.time())}"
    reps = calibrate(a, nonce)
    out.comment(f"conversation: {reps} repetitions of the filler text "
                f"(aiming at {a.prompt_ids} prompt ids), {a.tokens} generated ids per request, "
                "greedy, streamed")
    out.row("clients", "client", "phase", "prompt_tokens", "cached_tokens", "ttft_s", "total_s",
            "completion_tokens")
    summary = []
    for n in a.client_counts:
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            per = list(ex.map(lambda c: ttft_client(a, reps, nonce, n, c), range(n)))
        for rows in per:
            for c, phase, t, total, u in rows:
                cached = u["prompt_tokens_details"]["cached_tokens"]
                out.row(n, c, phase, u["prompt_tokens"], cached,
                        "" if t is None else f"{t:.4f}", f"{total:.4f}",
                        u["completion_tokens"])
        for phase in ("cold", "no_reuse", "reuse"):
            got = [r for rows in per for r in rows if r[1] == phase]
            ts = [r[2] for r in got if r[2] is not None]
            cached = statistics.median(r[4]["prompt_tokens_details"]["cached_tokens"]
                                       for r in got)
            prompt = statistics.median(r[4]["prompt_tokens"] for r in got)
            med = f"{statistics.median(ts):.4f}" if ts else ""
            summary.append((n, phase, f"{prompt:g}", f"{cached:g}", med, len(ts), len(got)))
    out.row()
    out.comment("summary: median over the clients of each count")
    out.row("clients", "phase", "prompt_tokens", "cached_tokens", "ttft_s_median",
            "with_text", "requests")
    for s in summary:
        out.row(*s)


class Out:
    """Rows to standard output and, with --tsv, to a file with a `#` header."""

    def __init__(self, path):
        self.f = open(path, "w") if path else None

    def comment(self, text):
        self._write("# " + text)

    def row(self, *cells):
        self._write("\t".join(str(c) for c in cells))

    def _write(self, line):
        print(line, flush=True)
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()


def machine():
    """CPU model, cores, memory: what this machine is."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f
                        if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
            mem = f", {kb / 1e6:.1f} GB"
    except (OSError, StopIteration):
        pass
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores{mem}, {platform.platform()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--mode", choices=("throughput", "ttft"), default="throughput")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=8, help="ids generated per request")
    ap.add_argument("--rounds", type=int, default=1, help="requests per client (throughput)")
    ap.add_argument("--prompt-ids", type=int, default=2000,
                    help="about how many prompt ids the ttft conversation has")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per request")
    ap.add_argument("--tsv", help="also write the rows here, after a header")
    ap.add_argument("--server-cmd", help="the `k3 serve` command line, recorded in the header")
    a = ap.parse_args()
    a.url = a.url.rstrip("/")
    a.client_counts = [int(x) for x in a.clients.split(",")]
    out = Out(a.tsv)
    out.comment("command: " + " ".join(shlex.quote(x) for x in [sys.executable] + sys.argv))
    out.comment("machine: " + machine())
    out.comment("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    out.comment("started: " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    out.comment(f"server: {a.url}, model {a.model}, mode {a.mode}")
    if a.server_cmd:
        out.comment("server command: " + a.server_cmd)
    (ttft if a.mode == "ttft" else throughput)(a, out)
    out.comment("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
