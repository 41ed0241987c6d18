#!/usr/bin/env python3
"""An agent loop shaped like Claude Code's against `k3 serve --prefix-cache` (issue 24 item 3).

Run by .ci/run in the virtual environment with `anthropic` and `openai` installed:
    python3 tests/serve/agent_loop.py target/debug/k3 tests/fixtures/tiny-k3-text

The loop, as Claude Code drives the Messages API: the official `anthropic` client, always
streaming, temperature 0 (`extra_body`: the client of 2.x has no such argument), a long system prompt and tool list, `count_tokens` before each
request, several tool rounds (each reply's tool_use blocks answered with tool_result blocks).
The forced-reply hook (K3_TEST_FORCE_IDS) makes each reply open with a tool call; the model
writes the rest. The loop runs against a server with a fresh --prefix-cache DIR, the server
is stopped (SIGTERM) and started again on the same DIR, and the loop runs again: the second
run's requests report the preamble as cached (`cache_read_input_tokens`) and every reply is
the first run's, bit for bit. Then a Responses `previous_response_id` continuation through
the official `openai` client continues and repeats exactly.

Servers listen on 127.0.0.1 with --port 0; every wait is bounded and the whole script is
killed after HARD_TIMEOUT.
"""

import os
import shutil
import tempfile

import anthropic
import openai

import k3server
from k3server import MODEL, check

HARD_TIMEOUT = 300
# reasoning "Let me check.", content "Checking.", one call get_weather(city="Paris"); no end
# id: the model goes on after the call, up to max_tokens
TOOL_OPENING = (
    "9413,1019,2598,13,163588,39964,163589,163587,12092,163589,67772,13,163588,12092,163589,"
    "163587,25385,163589,163587,10257,4453,878,618,21055,2800,1,4002,878,16,1,163589,163587,"
    "47185,2355,878,37666,1,1798,878,2033,1,163589,113476,163588,47185,163589,163588,10257,"
    "163589,163588,25385,163589,163588,2778,163589"
)
ROUNDS = 4

SYSTEM = (
    "You are an interactive command line tool that helps users with software engineering "
    "tasks. Use the instructions below and the tools available to you to assist the user. "
    + " ".join(
        f"Rule {i}: read a file before you change it, keep each change small, run the tests "
        f"after every change, explain what you did in one short paragraph, and never guess "
        f"the contents of a file you have not read."
        for i in range(1, 25))
)


def tool(name, what, props):
    return {"name": name, "description": what,
            "input_schema": {"type": "object", "properties": {
                p: {"type": "string", "description": f"The {p}."} for p in props},
                "required": props[:1]}}


TOOLS = [
    tool("get_weather", "Weather of a city", ["city"]),
    tool("Bash", "Runs a shell command and returns its output", ["command", "description"]),
    tool("Read", "Reads a file from the local filesystem", ["file_path", "offset", "limit"]),
    tool("Edit", "Replaces a string in a file", ["file_path", "old_string", "new_string"]),
    tool("Write", "Writes a file to the local filesystem", ["file_path", "content"]),
    tool("Glob", "Finds files by a glob pattern", ["pattern", "path"]),
    tool("Grep", "Searches file contents with a regular expression", ["pattern", "path", "glob"]),
    tool("TodoWrite", "Updates the task list of the session", ["todos"]),
]


class Server(k3server.Server):
    """A k3server.Server (no API key) with an `anthropic` client at its root and an `openai`
    one at its /v1."""

    def __init__(self, args, env=None):
        super().__init__(args, env, unset=("K3_API_KEY",))
        self.client = anthropic.Anthropic(base_url=self.url, api_key="none", max_retries=0,
                                          timeout=120)
        self.openai = openai.OpenAI(base_url=self.url + "/v1", api_key="none",
                                    max_retries=0, timeout=120)


def loop(client):
    """One agent session: ROUNDS streamed requests; returns [(reply dump, usage)]."""
    messages = [{"role": "user", "content": "What is the weather in Paris? Then list the files."}]
    out = []
    for _ in range(ROUNDS):
        kw = dict(model=MODEL, system=SYSTEM, tools=TOOLS, messages=messages)
        n = client.messages.count_tokens(**kw).input_tokens
        with client.messages.stream(max_tokens=80, extra_body={"temperature": 0}, **kw) as s:
            for _ in s:
                pass
            m = s.get_final_message()
        u = m.usage
        check(u.input_tokens + (u.cache_read_input_tokens or 0) == n,
              f"count_tokens ({n}) = input_tokens + cache_read_input_tokens")
        d = m.model_dump()
        d.pop("id")
        d.pop("usage")
        out.append((d, u))
        calls = [b for b in m.content if b.type == "tool_use"]
        messages = messages + [{"role": "assistant", "content": m.content}]
        if calls:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "content": f"result of {c.name}"}
                for c in calls] + [{"type": "text", "text": "Go on."}]})
        else:
            messages.append({"role": "user", "content": "Go on."})
    return out


def responses_continuation(srv):
    """`previous_response_id` through the `openai` client: from the stored prompt, exactly."""
    c = srv.openai
    first = c.responses.create(model=MODEL, instructions=SYSTEM, input="Hello there.",
                               max_output_tokens=8, temperature=0)
    check(first.status in ("completed", "incomplete"), f"responses: first ({first.status})")
    nxt = dict(model=MODEL, previous_response_id=first.id, input="And then?",
               max_output_tokens=8, temperature=0)
    a = c.responses.create(**nxt)
    # not asserted: a stored response whose reply was cut (max_output_tokens) is rendered
    # back closed, so its prompt snapshot is not a prefix of the continuation (the store
    # keeps items, not the sequence; see the report of issue 24 item 3)
    print(f"note: previous_response_id: {a.usage.input_tokens_details.cached_tokens} of "
          f"{a.usage.input_tokens} input tokens cached")
    check(a.status in ("completed", "incomplete"), "previous_response_id continues")
    b = c.responses.create(**nxt)
    check([o.model_dump() for o in a.output] == [o.model_dump() for o in b.output],
          "the same continuation twice: the same output")


def main():
    k3server.watchdog(HARD_TIMEOUT)
    cache = tempfile.mkdtemp(prefix="k3-agent-loop-")
    try:
        args = ["--ctx", "4096", "--threads", "1", "--prefix-cache", cache]
        env = {"K3_TEST_FORCE_IDS": TOOL_OPENING}
        s = Server(args, env)
        pre = s.client.messages.count_tokens(
            model=MODEL, system=SYSTEM, tools=TOOLS,
            messages=[{"role": "user", "content": "."}]).input_tokens
        check(pre > 1000, f"a long preamble ({pre} tokens)")
        first = loop(s.client)
        check(any(b["type"] == "tool_use" for b in first[0][0]["content"]),
              "the replies call tools")
        check(first[0][1].cache_read_input_tokens == 0, "the first request runs cold")
        check(s.stop() == 0, "SIGTERM drains and exits 0 (the cache's writer finishes)")
        files = [f for f in os.listdir(cache) if f.endswith(".k3state")]
        check(len(files) >= 1 and not [f for f in os.listdir(cache) if f.endswith(".tmp")],
              f"state files written, no temporaries ({len(files)} files)")

        s = Server(args, env)
        second = loop(s.client)
        for i, ((a, _), (b, u)) in enumerate(zip(first, second)):
            check(a == b, f"round {i}: the reply after a restart is the first run's, bit for bit")
            check((u.cache_read_input_tokens or 0) >= pre - 8,
                  f"round {i}: the preamble is read from the cache "
                  f"({u.cache_read_input_tokens} of {pre} cached)")
        check(s.stop() == 0, "SIGTERM drains and exits 0")

        s = Server(["--ctx", "4096", "--threads", "1"])
        responses_continuation(s)
        check(s.stop() == 0, "SIGTERM drains and exits 0")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("agent loop: all checks passed")


if __name__ == "__main__":
    main()
