#!/usr/bin/env python3
"""Requests/s and aggregate tokens/s of a running `k3 serve` with 1, 2, 4, 8 concurrent
clients (issue 14, Bench). Standard library only; greedy completions of fixed ids, so every
client's work is the same and the figures compare across client counts.

    k3 serve /work/synth-k3 --tok tests/fixtures/tiny-k3-text --port 8000 --ctx 512 --parallel 8
    python3 bench/serve_clients.py http://127.0.0.1:8000 synth-k3 --clients 1,2,4,8 --tokens 8

Prints one TSV line per client count: clients, requests, seconds, requests/s, tokens/s,
speed-up of tokens/s against 1 client.
"""

import argparse
import concurrent.futures
import json
import time
import urllib.request


def one(url, model, tokens, i):
    body = json.dumps({"model": model, "prompt": [1000 + i, 2000, 3000, 4000],
                       "max_tokens": tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.load(r)["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1, help="requests per client")
    a = ap.parse_args()
    print("clients\trequests\tseconds\trequests_per_s\ttokens_per_s\tspeedup_vs_1")
    base = None
    for n in [int(x) for x in a.clients.split(",")]:
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            toks = sum(ex.map(lambda i: one(a.url, a.model, a.tokens, i), range(n * a.rounds)))
        dt = time.time() - t0
        tps = toks / dt
        base = base or tps
        print(f"{n}\t{n * a.rounds}\t{dt:.1f}\t{n * a.rounds / dt:.3f}\t{tps:.3f}\t{tps / base:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
