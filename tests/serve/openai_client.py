#!/usr/bin/env python3
"""`k3 serve` against the official `openai` Python client and curl (issue 14, ENGINE.md §11).

Run by .ci/run in a virtual environment with `openai` installed:
    python3 tests/serve/openai_client.py target/debug/k3 tests/fixtures/tiny-k3-text

Starts servers on 127.0.0.1 with --port 0 (loopback only), checks, and stops them; every wait
is bounded. Checks: chat non-streaming and streaming (the deltas concatenate to the whole
reply), the same seed twice gives the same reply, completions text equals `k3 run` on the same
ids, models, curl, tool calls through the forced-reply hook (K3_TEST_FORCE_IDS) with the tool
result sent back reusing the prefix (cached_tokens), and a bounded load run (100 requests
from 8 clients: every one answered 200 or 503, none lost or corrupted, peak RSS within the
plan).
"""

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
import time

import openai

K3, MODEL_DIR = sys.argv[1], sys.argv[2]
MODEL = os.path.basename(os.path.normpath(MODEL_DIR))
# reasoning "Let me check.", content "Checking.", one call get_weather(city="Paris"), [EOS]
TOOL_REPLY = (
    "9413,1019,2598,13,163588,39964,163589,163587,12092,163589,67772,13,163588,12092,163589,"
    "163587,25385,163589,163587,10257,4453,878,618,21055,2800,1,4002,878,16,1,163589,163587,"
    "47185,2355,878,37666,1,1798,878,2033,1,163589,113476,163588,47185,163589,163588,10257,"
    "163589,163588,25385,163589,163588,2778,163589,163585"
)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


class Server:
    """`k3 serve MODEL_DIR --port 0 ARGS`, ready when /health says 200."""

    def __init__(self, args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen(
            [K3, "serve", MODEL_DIR, "--port", "0", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=e, text=True)
        self.lines = []
        self.url = None
        got = threading.Event()

        def read():
            for line in self.p.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    got.set()
        threading.Thread(target=read, daemon=True).start()
        if not got.wait(120):
            self.stop()
            sys.exit("k3 serve did not start:\n" + "\n".join(self.lines))
        for _ in range(1200):
            r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                self.url + "/health"], capture_output=True, text=True)
            if r.stdout == "200":
                break
            time.sleep(0.1)
        else:
            self.stop()
            sys.exit("k3 serve never became healthy")
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                                    timeout=120)

    def plan_bytes(self):
        for line in self.lines:
            m = re.search(r"memory plan: total ([\d.]+) (kB|MB|GB)", line)
            if m:
                return float(m.group(1)) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)]
        return None

    def peak_rss(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return None

    def stop(self):
        self.p.terminate()
        try:
            rc = self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        return rc


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


def chat_text(c):
    m = c.choices[0].message
    return (getattr(m, "reasoning_content", None) or "", m.content or "")


def main():
    s = Server(["--ctx", "1024", "--parallel", "4", "--queue", "8", "--threads", "1"])
    c = s.client
    check([m.id for m in c.models.list().data] == [MODEL], "models lists the one model")
    msgs = [{"role": "user", "content": "Write a haiku about the sea."}]
    a = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, seed=7)
    b = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, seed=7)
    check(chat_text(a) == chat_text(b) and a.usage.completion_tokens == 12,
          "the same seed twice gives the same reply")
    reasoning, content = "", ""
    usage = None
    for ch in c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, seed=7,
                                         stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        if ch.choices:
            d = ch.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    check((reasoning, content) == chat_text(a), "streamed deltas concatenate to the reply")
    check(usage is not None and usage.completion_tokens == 12, "include_usage chunk")

    ids = [19180, 2695, 11, 1008, 10484]
    comp = c.completions.create(model=MODEL, prompt=ids, max_tokens=9, temperature=0)
    run = subprocess.run([K3, MODEL_DIR, "--ids", ",".join(map(str, ids)), "--gen", "9",
                          "--quiet"], capture_output=True, text=True, check=True)
    check(comp.choices[0].text == run.stdout.rstrip("\n"),
          "completion text equals `k3 run` on the same ids")

    body = json.dumps({"model": MODEL, "messages": msgs, "max_tokens": 12, "seed": 7})
    r = subprocess.run(["curl", "-sS", "--fail-with-body", s.url + "/v1/chat/completions",
                        "-H", "Content-Type: application/json", "-d", body],
                       capture_output=True, text=True, timeout=120)
    v = json.loads(r.stdout)
    m = v["choices"][0]["message"]
    check((m.get("reasoning_content") or "", m["content"] or "") == chat_text(a),
          "curl gets the same reply")
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                        s.url + "/v1/chat/completions", "-d", "{bad"],
                       capture_output=True, text=True, timeout=60)
    check(r.stdout == "400", "curl: malformed JSON is 400")
    try:
        c.chat.completions.create(model="nope", messages=msgs)
        check(False, "unknown model refused")
    except openai.NotFoundError:
        check(True, "unknown model is 404 (openai.NotFoundError)")
    load(s)
    check(s.stop() == 0, "SIGTERM drains and exits 0")

    t = Server(["--ctx", "1024", "--threads", "1"], {"K3_TEST_FORCE_IDS": TOOL_REPLY})
    user = {"role": "user", "content": "Weather in Paris?"}
    r = t.client.chat.completions.create(model=MODEL, messages=[user], tools=TOOLS, seed=1)
    m = r.choices[0].message
    check(r.choices[0].finish_reason == "tool_calls", "finish_reason tool_calls")
    call = m.tool_calls[0]
    check(call.function.name == "get_weather"
          and json.loads(call.function.arguments) == {"city": "Paris"},
          "tool call parsed (name, arguments as a JSON string)")
    check(getattr(m, "reasoning_content", None) == "Let me check." and m.content == "Checking.",
          "reasoning_content and content beside the call")
    follow = [user,
              {"role": "assistant", "content": m.content, "reasoning_content": "Let me check.",
               "tool_calls": [{"id": call.id, "type": "function",
                               "function": {"name": "get_weather",
                                            "arguments": call.function.arguments}}]},
              {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
    f = t.client.chat.completions.create(model=MODEL, messages=follow, tools=TOOLS, seed=1,
                                         max_tokens=4)
    cached = f.usage.prompt_tokens_details.cached_tokens
    # the whole first prompt: its prompt_tokens and the stub <|open|>think<|sep|> (3 ids)
    check(cached == r.usage.prompt_tokens + 3,
          f"the tool result reuses the first prompt: cached_tokens {cached}")
    check(t.stop() == 0, "second server drains and exits 0")


def load(s):
    """100 requests from 8 clients, bounded: each answered 200 (and well-formed) or 503."""
    def one(i):
        msgs = [{"role": "user", "content": f"Request {i}: " + "more " * (i % 7)}]
        try:
            r = s.client.chat.completions.create(model=MODEL, messages=msgs,
                                                 max_tokens=2 + i % 5, seed=i)
            return 200 if r.usage.completion_tokens >= 1 else -1
        except openai.APIStatusError as e:
            return e.status_code
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        codes = list(ex.map(one, range(100)))
    took = time.time() - t0
    bad = [c for c in codes if c not in (200, 503)]
    check(len(codes) == 100 and not bad,
          f"load: 100 requests in {took:.1f} s from 8 clients: "
          f"{codes.count(200)} answered, {codes.count(503)} refused 503, others {bad}")
    plan, rss = s.plan_bytes(), s.peak_rss()
    print(f"load: peak RSS {rss / 1e6:.1f} MB, plan {plan / 1e6:.1f} MB")
    check(rss is not None and plan is not None and rss <= plan + 16 * 2**20,
          "peak RSS within the plan (+16 MiB)")


if __name__ == "__main__":
    main()
