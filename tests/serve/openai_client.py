#!/usr/bin/env python3
"""`k3 serve` against the official `openai` Python client and curl (issue 14, ENGINE.md §11).

Run by .ci/run in a virtual environment with `openai` installed:
    python3 tests/serve/openai_client.py target/debug/k3 tests/fixtures/tiny-k3-text

Starts servers on 127.0.0.1 with --port 0 (loopback only), checks, and stops them; every wait
is bounded and the whole script is killed after HARD_TIMEOUT. Checks: chat non-streaming and
streaming (the deltas concatenate to the whole reply), the same seed twice gives the same
reply, completions text equals `k3 run` on the same ids, models, curl, a bounded load run
(16 clients, LOAD_REQUESTS requests within LOAD_SECONDS against --parallel 2 --queue 2: every
request answered 200 or 503, some 503, every 200 the bits of the same request served alone,
peak RSS within the plan of the startup line), SIGINT with a stream running past the drain
bound (the client raises APIError on the error chunk; exit 0), and tool calls through the
forced-reply hook (K3_TEST_FORCE_IDS) with the tool result sent back reusing the prefix
(cached_tokens).
"""

import concurrent.futures
import json
import re
import signal
import subprocess
import threading
import time

import openai

import k3server
from k3server import K3, MODEL, MODEL_DIR, TOOL_REPLY, check

# The whole script ends by then, whatever hangs (servers killed, exit 1).
HARD_TIMEOUT = 240
# The load run: clients, requests in all, and the time after which no client starts another.
LOAD_CLIENTS = 16
LOAD_REQUESTS = 192
LOAD_SECONDS = 60
# Distinct request bodies of the load run (each also served alone first, to compare).
LOAD_VARIANTS = 24
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


class Server(k3server.Server):
    """A k3server.Server with an `openai` client at its /v1."""

    def __init__(self, args, env=None):
        super().__init__(args, env)
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                                    timeout=120)

    def plan_bytes(self):
        """The plan of the startup line (`k3 serve: ready on …, 54.9 MB planned`), in bytes,
        rounded up by the printed figure's last digit (three significant digits)."""
        for line in self.lines:
            m = re.search(r"k3 serve: ready on .* ([\d.]+) (kB|MB|GB) planned", line)
            if m:
                unit = {"kB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)]
                digits = m.group(1).split(".")[1] if "." in m.group(1) else ""
                return (float(m.group(1)) + 0.5 * 10 ** -len(digits)) * unit
        return None

    def peak_rss(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return None


def chat_text(c):
    m = c.choices[0].message
    return (getattr(m, "reasoning_content", None) or "", m.content or "")


def main():
    k3server.watchdog(HARD_TIMEOUT)
    t0 = time.time()
    # small slot and queue counts, so that the load run gets 503s; a short drain bound, so
    # that SIGINT cancels a long stream in a second (K3_TEST_DRAIN_MS, DEVELOPERS.md)
    s = Server(["--ctx", "1024", "--parallel", "2", "--queue", "2", "--threads", "1"],
               {"K3_TEST_DRAIN_MS": "1000"})
    basics(s)
    speculation(s)
    load(s)
    sigint_cancels_a_stream(s)
    tools()
    print(f"all checks passed in {time.time() - t0:.0f} s")


def speculation(s):
    """`k3 serve --spec 4`: the same replies (chat, streamed, completions with logprobs) as
    the server without it, through the client and curl."""
    sp = Server(["--ctx", "1024", "--spec", "4", "--threads", "1"])
    msgs = [{"role": "user", "content": "the cat sat on the mat. the cat sat on the mat."}]
    ask = dict(model=MODEL, messages=msgs, max_tokens=16, seed=3)
    want = chat_text(s.client.chat.completions.create(**ask))
    check(chat_text(sp.client.chat.completions.create(**ask)) == want,
          "--spec 4: the same chat reply")
    streamed = ["", ""]
    for ch in sp.client.chat.completions.create(stream=True, **ask):
        if ch.choices:
            d = ch.choices[0].delta
            streamed[0] += getattr(d, "reasoning_content", None) or ""
            streamed[1] += d.content or ""
    check(tuple(streamed) == want, "--spec 4: the same streamed reply")
    comp = dict(model=MODEL, prompt=[2108, 10975, 6200, 418, 276, 3271, 13] * 2, max_tokens=12,
                temperature=0, logprobs=2)
    a = s.client.completions.create(**comp).choices[0]
    b = sp.client.completions.create(**comp).choices[0]
    check((a.text, a.logprobs.token_logprobs, a.logprobs.top_logprobs)
          == (b.text, b.logprobs.token_logprobs, b.logprobs.top_logprobs),
          "--spec 4: the same completion and logprobs")
    r = subprocess.run(["curl", "-sS", "--fail-with-body", sp.url + "/v1/chat/completions",
                        "-H", "Content-Type: application/json", "-d", json.dumps(ask)],
                       capture_output=True, text=True, timeout=120)
    m = json.loads(r.stdout)["choices"][0]["message"]
    check((m.get("reasoning_content") or "", m["content"] or "") == want,
          "--spec 4: curl gets the same reply")
    check(sp.stop() == 0, "--spec 4: the server stops cleanly")


def basics(s):
    c = s.client
    check([m.id for m in c.models.list().data] == [MODEL], "models lists the one model")
    check(c.models.retrieve(MODEL).id == MODEL, "models.retrieve finds the model")
    try:
        c.models.retrieve("no-such-model")
        check(False, "models.retrieve of another id is refused")
    except openai.NotFoundError:
        check(True, "models.retrieve of another id is 404 (NotFoundError)")
    msgs = [{"role": "user", "content": "Write a haiku about the sea."}]
    a = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, seed=7)
    b = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, seed=7)
    check(chat_text(a) == chat_text(b) and a.usage.completion_tokens == 12,
          "the same seed twice gives the same reply")
    check(getattr(a.choices[0].message, "reasoning", None) is None,
          "the reasoning comes once, as reasoning_content (no `reasoning` copy)")
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
                          "--quiet"], capture_output=True, text=True, check=True, timeout=120)
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


def variant(k):
    """Load request `k` of LOAD_VARIANTS: chat (some streamed, some greedy) or completion."""
    if k % 4 == 3:
        return {"kind": "completion", "prompt": [300 + 7 * k + j for j in range(2 + k % 5)],
                "max_tokens": 1 + k % 3, "seed": k}
    return {"kind": "chat", "stream": k % 4 == 1, "max_tokens": 1 + k % 3, "seed": k,
            "temperature": 0 if k % 4 == 2 else None,
            "messages": [{"role": "user", "content": f"Load {k}: " + "more " * (k % 5)}]}


def ask(client, v):
    """Sends variant `v`; (200, what must equal the solo reply) or (status, error text)."""
    try:
        if v["kind"] == "completion":
            r = client.completions.create(model=MODEL, prompt=v["prompt"], seed=v["seed"],
                                          max_tokens=v["max_tokens"])
            return 200, (r.choices[0].text, r.choices[0].finish_reason,
                         r.usage.prompt_tokens, r.usage.completion_tokens)
        extra = {} if v["temperature"] is None else {"temperature": v["temperature"]}
        args = dict(model=MODEL, messages=v["messages"], max_tokens=v["max_tokens"],
                    seed=v["seed"], **extra)
        if not v["stream"]:
            r = client.chat.completions.create(**args)
            m = r.choices[0].message
            return 200, (getattr(m, "reasoning_content", None) or "", m.content or "",
                         r.choices[0].finish_reason, r.usage.prompt_tokens,
                         r.usage.completion_tokens)
        reasoning, content, finish, usage = "", "", None, None
        for ch in client.chat.completions.create(stream=True,
                                                 stream_options={"include_usage": True},
                                                 **args):
            if ch.usage:
                usage = ch.usage
            if ch.choices:
                d = ch.choices[0].delta
                reasoning += getattr(d, "reasoning_content", None) or ""
                content += d.content or ""
                finish = ch.choices[0].finish_reason or finish
        return 200, (reasoning, content, finish, usage.prompt_tokens, usage.completion_tokens)
    except openai.APIStatusError as e:
        return e.status_code, str(e)
    except openai.APIError as e:
        return -1, repr(e)


def load(s):
    """LOAD_CLIENTS clients send LOAD_REQUESTS requests in all (each client its share, one
    after the other, waiting Retry-After's second after a 503), starting none after
    LOAD_SECONDS. Every request is answered 200 or 503 (none lost), some are refused (the
    slots and queue are small), every 200 is the solo reply of the same request, and the
    server's peak RSS stays within the plan of its startup line."""
    solo, failed = {}, []
    for k in range(LOAD_VARIANTS):
        code, got = ask(s.client, variant(k))
        solo[k] = got
        if code != 200:
            failed.append((k, code, got))
    check(not failed, f"load: the {LOAD_VARIANTS} requests served alone first ({failed[:3]})")
    results = []
    lock = threading.Lock()
    t0 = time.time()

    def client(n):
        for i in range(n, LOAD_REQUESTS, LOAD_CLIENTS):
            if time.time() - t0 > LOAD_SECONDS:
                return
            k = i % LOAD_VARIANTS
            code, got = ask(s.client, variant(k))
            with lock:
                results.append((i, k, code, got))
            if code == 503:
                time.sleep(1)
    with concurrent.futures.ThreadPoolExecutor(LOAD_CLIENTS) as ex:
        list(ex.map(client, range(LOAD_CLIENTS)))
    took = time.time() - t0
    codes = [c for _, _, c, _ in results]
    bad = [(i, c, g) for i, _, c, g in results if c not in (200, 503)]
    check(not bad, f"load: every request answered 200 or 503 (others: {bad[:3]})")
    check(len(results) >= LOAD_REQUESTS * 3 // 4 and took <= LOAD_SECONDS + 30,
          f"load: {len(results)} of {LOAD_REQUESTS} requests sent in {took:.1f} s from "
          f"{LOAD_CLIENTS} clients: {codes.count(200)} answered 200, "
          f"{codes.count(503)} refused 503")
    check(codes.count(503) > 0 and codes.count(200) > 0,
          "load: --parallel 2 --queue 2 both serves and refuses (503)")
    differ = [(i, k) for i, k, c, g in results if c == 200 and g != solo[k]]
    check(not differ, f"load: every 200 reply equals its solo reply (differing: {differ[:5]})")
    plan, rss = s.plan_bytes(), s.peak_rss()
    check(rss is not None and plan is not None and rss <= plan,
          f"load: peak RSS {rss / 1e6:.1f} MB within the plan of {plan / 1e6:.1f} MB")


def sigint_cancels_a_stream(s):
    """SIGINT while a stream runs past the drain bound (K3_TEST_DRAIN_MS 1000): the stream's
    error chunk makes the client raise APIError, and the server exits 0."""
    stream = s.client.chat.completions.create(
        model=MODEL, stream=True, max_tokens=900, seed=3,
        messages=[{"role": "user", "content": "Keep going until stopped."}])
    it = iter(stream)
    next(it)
    s.p.send_signal(signal.SIGINT)
    try:
        for _ in it:
            pass
        check(False, "SIGINT: the stream past the drain bound is cancelled")
    except openai.APIError as e:
        check("shutting down" in str(e),
              f"SIGINT: the cancelled stream raises openai.APIError ({e})")
    rc = s.wait()
    check(rc == 0, "SIGINT: the server drains and exits 0")


def tools():
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
    check(t.stop() == 0, "SIGTERM drains and exits 0")


if __name__ == "__main__":
    main()
